//! Transfer benchmark: devbuf against the raw CUDA driver, in the same run, plus the
//! sweeps that tune the transfer engine.
//!
//! ```text
//! cargo run --release --features zarr,object_store,flight --example bench_transfer -- [--quick] [--csv out.csv] [--only a,b]
//! ```
//!
//! Sections (all by default; `--only` picks some):
//!
//! * `table`: sizes 4 KiB .. 1 GiB; host->device and device->host from page-locked and
//!   ordinary memory, synchronous and asynchronous (on a stream, then wait), devbuf and
//!   the plain driver call (`cuMemcpyHtoD_v2` ...) and the driver's async call + stream
//!   synchronisation; device->device. Ratios devbuf / driver. These rows are the curves
//!   of `scripts/plot_transfer.py`.
//! * `small`: `DirectMode::Sync` against `DirectMode::Stream` for small copies.
//! * `sweep`: staging lanes x chunk size at 1 GiB of ordinary memory, and the smallest
//!   chunk for mid-sized copies.
//! * `crossover`: ordinary memory by size through the driver, the staging lanes and
//!   `cuMemHostRegister`; prints the suggested `staging_min_bytes` / `register_min_bytes`.
//! * `batch`: 10,000 x 64 KiB (and other piece sizes) with `copy_many_*` (kernel and
//!   `cuMemcpyBatchAsync` scatter), one devbuf call per piece, one driver call per piece.
//! * `async`: both directions at once on two streams (duplex).
//! * `alloc`: `allocate` (cuMemAlloc) vs `allocate_pooled` vs raw cuMemAlloc/cuMemFree.
//! * `peer`: device 0 <-> device 1 (1 MiB, 64 MiB, 1 GiB), both directions, with peer
//!   access on and off (`Context::set_peer_access(peer, true / false)`; the driver
//!   rows run under the same state): devbuf's `copy_from_device` and `copy_from_device_on`
//!   against `cuMemcpyPeer` and `cuMemcpyPeerAsync`. Skipped, saying why, with one GPU.
//!
//! `--csv PATH` also writes every measurement as `section,series,size_bytes,gbps,note`
//! (`scripts/plot_transfer.py` draws `docs/img/transfer.png` from it).
//! `scripts/bench_peers.py transfer --csv PATH` writes cupy and torch rows in the same
//! format. Without a GPU it says so and exits successfully.

#[path = "common/mod.rs"]
mod common;
#[path = "common/stats.rs"]
mod stats;

use std::fmt::Write as _;
use std::time::Instant;

use stats::median;

use clap::Parser;
use cudarc::driver::sys;
use devbuf::cuda::{
    self, Context, DeviceBuffer, DirectMode, HostBuffer, PageableMode, ScatterMode, Stream,
    TransferConfig,
};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
const GIB: usize = 1024 * MIB;

/// PCIe 5.0 x16, one direction: 32 GT/s x 16 lanes x 128/130 / 8 bits.
const PCIE5_X16_GBPS: f64 = 63.0;

fn label(n: usize) -> String {
    match n {
        n if n >= GIB && n % GIB == 0 => format!("{} GiB", n / GIB),
        n if n >= MIB && n % MIB == 0 => format!("{} MiB", n / MIB),
        n if n >= KIB && n % KIB == 0 => format!("{} KiB", n / KIB),
        n => format!("{n} B"),
    }
}

struct Row {
    section: &'static str,
    series: String,
    size: usize,
    gbps: f64,
    note: String,
}

struct Bench {
    quick: bool,
    rows: Vec<Row>,
}

impl Bench {
    fn reps_for(&self, n: usize) -> usize {
        let r = match n {
            n if n <= 64 * KIB => 1000,
            n if n <= 4 * MIB => 100,
            n if n <= 64 * MIB => 20,
            n if n <= 256 * MIB => 8,
            _ => 5,
        };
        if self.quick { (r / 5).max(3) } else { r }
    }

    fn row(&mut self, section: &'static str, series: &str, size: usize, gbps: f64, note: &str) {
        self.rows.push(Row {
            section,
            series: series.to_string(),
            size,
            gbps,
            note: note.to_string(),
        });
    }

    fn csv(&self) -> String {
        let mut s = String::from("section,series,size_bytes,gbps,note\n");
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{},{},{},{:.4},{}",
                r.section,
                r.series,
                r.size,
                r.gbps,
                r.note.replace(',', ";")
            );
        }
        s
    }
}

/// Median seconds of `f` over `reps` runs (after one warm-up), in batches for small `n`.
fn time_it(reps: usize, mut f: impl FnMut() -> devbuf::Result<()>) -> f64 {
    f().expect("warm-up");
    let batch = (reps / 10).max(1);
    let mut t = Vec::new();
    for _ in 0..(reps / batch).max(3) {
        let s = Instant::now();
        for _ in 0..batch {
            f().expect("measured run");
        }
        t.push(s.elapsed().as_secs_f64() / batch as f64);
    }
    median(t)
}

/// Times several methods alternately (so drift affects all alike); returns GB/s each.
fn compare(n: usize, reps: usize, fs: &mut [&mut dyn FnMut() -> devbuf::Result<()>]) -> Vec<f64> {
    for f in fs.iter_mut() {
        f().expect("warm-up");
    }
    let batch = (reps / 10).max(1);
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); fs.len()];
    for _ in 0..(reps / batch).max(3) {
        for (i, f) in fs.iter_mut().enumerate() {
            let s = Instant::now();
            for _ in 0..batch {
                f().expect("measured run");
            }
            times[i].push(s.elapsed().as_secs_f64() / batch as f64);
        }
    }
    times
        .into_iter()
        .map(|t| n as f64 / median(t) / 1e9)
        .collect()
}

fn drv(r: sys::CUresult, what: &str) -> devbuf::Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(devbuf::Error::InvalidArgument(format!(
            "{what} failed: {r:?}"
        )))
    }
}

/// Raw driver handles for the comparison rows.
struct Raw {
    ctx: sys::CUcontext,
    stream: sys::CUstream,
}

impl Raw {
    fn new(ctx: &Context) -> devbuf::Result<Raw> {
        let raw = ctx.as_raw() as sys::CUcontext;
        // Safety: the primary context is live for the whole program.
        drv(unsafe { sys::cuCtxSetCurrent(raw) }, "cuCtxSetCurrent")?;
        let mut s: sys::CUstream = std::ptr::null_mut();
        // Safety: valid out pointer.
        drv(unsafe { sys::cuStreamCreate(&mut s, 1) }, "cuStreamCreate")?;
        Ok(Raw {
            ctx: raw,
            stream: s,
        })
    }
    fn bind(&self) -> devbuf::Result<()> {
        // Safety: live context.
        drv(unsafe { sys::cuCtxSetCurrent(self.ctx) }, "cuCtxSetCurrent")
    }
    /// # Safety
    /// `src` readable for `n` bytes; `dst` an `n`-byte device range.
    unsafe fn htod(&self, dst: u64, src: *const u8, n: usize) -> devbuf::Result<()> {
        self.bind()?;
        // Safety: guaranteed by the caller.
        drv(
            unsafe { sys::cuMemcpyHtoD_v2(dst, src.cast(), n) },
            "cuMemcpyHtoD",
        )
    }
    /// # Safety
    /// `dst` writable for `n` bytes; `src` an `n`-byte device range.
    unsafe fn dtoh(&self, dst: *mut u8, src: u64, n: usize) -> devbuf::Result<()> {
        self.bind()?;
        // Safety: guaranteed by the caller.
        drv(
            unsafe { sys::cuMemcpyDtoH_v2(dst.cast(), src, n) },
            "cuMemcpyDtoH",
        )
    }
    /// # Safety
    /// As `htod`; completes before returning (stream synchronised).
    unsafe fn htod_async(&self, dst: u64, src: *const u8, n: usize) -> devbuf::Result<()> {
        self.bind()?;
        // Safety: guaranteed by the caller.
        drv(
            unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), n, self.stream) },
            "cuMemcpyHtoDAsync",
        )?;
        // Safety: live stream.
        drv(
            unsafe { sys::cuStreamSynchronize(self.stream) },
            "cuStreamSynchronize",
        )
    }
    /// # Safety
    /// As `dtoh`; completes before returning.
    unsafe fn dtoh_async(&self, dst: *mut u8, src: u64, n: usize) -> devbuf::Result<()> {
        self.bind()?;
        // Safety: guaranteed by the caller.
        drv(
            unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, n, self.stream) },
            "cuMemcpyDtoHAsync",
        )?;
        // Safety: live stream.
        drv(
            unsafe { sys::cuStreamSynchronize(self.stream) },
            "cuStreamSynchronize",
        )
    }
}

/// Host buffers of the largest size, reused as prefixes.
struct Mem {
    pinned: HostBuffer,
    ordinary: Vec<u8>,
    dev: DeviceBuffer,
    dev2: DeviceBuffer,
}

fn fill_pattern(v: &mut [u8], seed: u8) {
    for (i, b) in v.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
    }
}

fn section_table(b: &mut Bench, ctx: &Context, raw: &Raw, m: &mut Mem) -> devbuf::Result<()> {
    let sizes: Vec<usize> = if b.quick {
        vec![4 * KIB, 64 * KIB, MIB, 16 * MIB, 256 * MIB]
    } else {
        vec![
            4 * KIB,
            16 * KIB,
            64 * KIB,
            256 * KIB,
            MIB,
            4 * MIB,
            16 * MIB,
            64 * MIB,
            256 * MIB,
            GIB,
        ]
    };
    let max = m.ordinary.len();
    let stream = Stream::new(ctx)?;
    println!("\n## Single copies: devbuf vs the driver\n");
    println!(
        "`devbuf` = `copy_from_host` / `copy_to_host`; `devbuf async` = a scoped async copy on a stream + wait; \
         `driver` = `cuMemcpyHtoD_v2` / `cuMemcpyDtoH_v2`; `driver async` = `cuMemcpy*Async_v2` + `cuStreamSynchronize`. GB/s (median).\n"
    );
    println!(
        "| transfer | size | devbuf | devbuf async | driver | driver async | devbuf / best driver |"
    );
    println!("|---|---|---|---|---|---|---|");
    for &n in sizes.iter().filter(|&&n| n <= max) {
        let reps = b.reps_for(n);
        let d = m.dev.address();
        for (name, pinned, h2d) in [
            ("H->D page-locked", true, true),
            ("D->H page-locked", true, false),
            ("H->D ordinary", false, true),
            ("D->H ordinary", false, false),
        ] {
            let host: *mut u8 = if pinned {
                m.pinned.as_mut_ptr()
            } else {
                m.ordinary.as_mut_ptr()
            };
            let dev = &m.dev;
            // Safety (all closures): `host` points at a buffer of at least `max >= n`
            // bytes that outlives this loop and is not otherwise accessed meanwhile;
            // `d` is an allocation of `max` bytes.
            let slice = || unsafe { std::slice::from_raw_parts_mut(host, n) };
            let mut ours = || {
                if h2d {
                    dev.copy_from_host(0, slice())
                } else {
                    dev.copy_to_host(0, slice())
                }
            };
            let mut ours_async = || {
                cuda::scope(|s| {
                    if h2d {
                        s.copy_from_host(dev, 0, slice(), &stream)?.wait()?;
                    } else {
                        s.copy_to_host(dev, 0, slice(), &stream)?.wait()?;
                    }
                    Ok(())
                })
            };
            let mut driver = || unsafe {
                if h2d {
                    raw.htod(d, host, n)
                } else {
                    raw.dtoh(host, d, n)
                }
            };
            let mut driver_async = || unsafe {
                if h2d {
                    raw.htod_async(d, host, n)
                } else {
                    raw.dtoh_async(host, d, n)
                }
            };
            let r = compare(
                n,
                reps,
                &mut [&mut ours, &mut ours_async, &mut driver, &mut driver_async],
            );
            let best = r[2].max(r[3]);
            println!(
                "| {name} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
                label(n),
                r[0],
                r[1],
                r[2],
                r[3],
                r[0] / best
            );
            b.row("curve", &format!("devbuf {name}"), n, r[0], "");
            b.row("curve", &format!("devbuf async {name}"), n, r[1], "");
            b.row("curve", &format!("driver {name}"), n, r[2], "");
            b.row("curve", &format!("driver async {name}"), n, r[3], "");
        }
        // Device-to-device: bytes read + written, as cupy/torch tables count them.
        let (dev, dev2) = (&m.dev, &m.dev2);
        let d2 = dev2.address();
        let r = compare(
            n,
            reps,
            &mut [
                &mut || {
                    dev2.slice(0, n)?.copy_from_device(0, &dev.slice(0, n)?)?;
                    ctx.synchronize()
                },
                &mut || {
                    raw.bind()?;
                    // Safety: both are device allocations of at least n bytes.
                    drv(unsafe { sys::cuMemcpyDtoD_v2(d2, d, n) }, "cuMemcpyDtoD")?;
                    // Safety: no arguments.
                    drv(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize")
                },
            ],
        );
        println!(
            "| D->D (read+write) | {} | {:.1} | | {:.1} | | {:.2} |",
            label(n),
            2.0 * r[0],
            2.0 * r[1],
            r[0] / r[1]
        );
        b.row("curve", "devbuf D->D", n, 2.0 * r[0], "read+write");
        b.row("curve", "driver D->D", n, 2.0 * r[1], "read+write");
    }
    // The last transfer wrote the device data into the ordinary buffer: check it.
    let n = sizes
        .iter()
        .copied()
        .filter(|&n| n <= max)
        .max()
        .unwrap_or(0);
    let check = DeviceBuffer::from_slice(ctx, &m.ordinary[..n])?;
    assert!(check.equals(&m.dev.slice(0, n)?)?, "table: data check");
    Ok(())
}

fn section_small(b: &mut Bench, ctx: &Context, m: &mut Mem) -> devbuf::Result<()> {
    println!("\n## Small copies: DirectMode::Sync vs DirectMode::Stream\n");
    println!("Microseconds per copy (median); the faster mode should be the default.\n");
    println!("| transfer | size | Sync us | Stream us | Stream / Sync speed |");
    println!("|---|---|---|---|---|");
    let base = ctx.transfer_config();
    let sizes = [KIB, 4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB];
    for &n in &sizes {
        for (name, pinned, h2d) in [
            ("H->D page-locked", true, true),
            ("D->H page-locked", true, false),
            ("H->D ordinary", false, true),
            ("D->H ordinary", false, false),
        ] {
            let host: *mut u8 = if pinned {
                m.pinned.as_mut_ptr()
            } else {
                m.ordinary.as_mut_ptr()
            };
            let dev = &m.dev;
            let mut us = [0.0; 2];
            for (k, mode) in [DirectMode::Sync, DirectMode::Stream]
                .into_iter()
                .enumerate()
            {
                ctx.set_transfer_config(TransferConfig {
                    direct: mode,
                    staging_min_bytes: 2 * MIB, // keep these copies direct
                    ..base.clone()
                })?;
                // Safety: `host` points at a buffer of at least n bytes, not otherwise
                // accessed meanwhile.
                let slice = || unsafe { std::slice::from_raw_parts_mut(host, n) };
                us[k] = 1e6
                    * time_it(b.reps_for(n) * 2, || {
                        if h2d {
                            dev.copy_from_host(0, slice())
                        } else {
                            dev.copy_to_host(0, slice())
                        }
                    });
            }
            println!(
                "| {name} | {} | {:.2} | {:.2} | {:.2} |",
                label(n),
                us[0],
                us[1],
                us[0] / us[1]
            );
            b.row(
                "small",
                &format!("Sync {name}"),
                n,
                n as f64 / us[0] / 1e3,
                "",
            );
            b.row(
                "small",
                &format!("Stream {name}"),
                n,
                n as f64 / us[1] / 1e3,
                "",
            );
        }
    }
    ctx.set_transfer_config(base)?;
    Ok(())
}

fn section_sweep(b: &mut Bench, ctx: &Context, m: &mut Mem) -> devbuf::Result<()> {
    let base = ctx.transfer_config();
    let n = if b.quick { 256 * MIB } else { GIB }.min(m.ordinary.len());
    let lanes: Vec<usize> = if b.quick {
        vec![4, 8, 16]
    } else {
        vec![1, 2, 4, 8, 12, 16]
    };
    let chunks: Vec<usize> = if b.quick {
        vec![2 * MIB, 4 * MIB, 8 * MIB]
    } else {
        vec![MIB, 2 * MIB, 4 * MIB, 8 * MIB, 16 * MIB]
    };
    println!(
        "\n## Staging sweep: lanes x chunk size, {} of ordinary memory\n",
        label(n)
    );
    let mut best = [(0.0f64, 0usize, 0usize); 2];
    for (di, dir) in ["H->D", "D->H"].into_iter().enumerate() {
        println!("{dir} GB/s:\n");
        let mut head = String::from("| lanes |");
        let mut sep = String::from("|---|");
        for &c in &chunks {
            let _ = write!(head, " {} |", label(c));
            sep.push_str("---|");
        }
        println!("{head}\n{sep}");
        for &l in &lanes {
            let mut line = format!("| {l} |");
            for &c in &chunks {
                ctx.set_transfer_config(TransferConfig {
                    lanes: l,
                    chunk_bytes: c,
                    min_chunk_bytes: base.min_chunk_bytes.min(c),
                    max_pinned_bytes: (2 * c * (l + 2)).max(base.max_pinned_bytes),
                    pageable: PageableMode::Staged,
                    ..base.clone()
                })?;
                let dev = &m.dev;
                let ord = &mut m.ordinary;
                let reps = 3;
                let secs = time_it(reps, || {
                    if di == 0 {
                        dev.copy_from_host(0, &ord[..n])
                    } else {
                        dev.copy_to_host(0, &mut ord[..n])
                    }
                });
                let g = n as f64 / secs / 1e9;
                if g > best[di].0 {
                    best[di] = (g, l, c);
                }
                let _ = write!(line, " {g:.1} |");
                b.row(
                    "sweep",
                    &format!("{dir} lanes={l} chunk={}", label(c)),
                    n,
                    g,
                    &format!("lanes={l};chunk_bytes={c}"),
                );
            }
            println!("{line}");
        }
        ctx.trim_transfer_pool();
        println!();
    }
    for (di, dir) in ["H->D", "D->H"].into_iter().enumerate() {
        println!(
            "best {dir}: {:.1} GB/s with lanes = {}, chunk_bytes = {}",
            best[di].0,
            best[di].1,
            label(best[di].2)
        );
    }

    // Mid-sized copies: how small may a chunk get so that more lanes help?
    println!("\n### Mid-sized ordinary copies: min_chunk_bytes (default lanes and chunk)\n");
    let mins = [64 * KIB, 128 * KIB, 256 * KIB, 512 * KIB, MIB];
    let sizes = [2 * MIB, 8 * MIB, 32 * MIB];
    let mut head = String::from("| transfer | size |");
    let mut sep = String::from("|---|---|");
    for &mc in &mins {
        let _ = write!(head, " min {} |", label(mc));
        sep.push_str("---|");
    }
    println!("{head}\n{sep}");
    for (di, dir) in ["H->D", "D->H"].into_iter().enumerate() {
        for &s in &sizes {
            let mut line = format!("| {dir} | {} |", label(s));
            for &mc in &mins {
                ctx.set_transfer_config(TransferConfig {
                    min_chunk_bytes: mc,
                    pageable: PageableMode::Staged,
                    ..base.clone()
                })?;
                let dev = &m.dev;
                let ord = &mut m.ordinary;
                let secs = time_it(b.reps_for(s), || {
                    if di == 0 {
                        dev.copy_from_host(0, &ord[..s])
                    } else {
                        dev.copy_to_host(0, &mut ord[..s])
                    }
                });
                let g = s as f64 / secs / 1e9;
                let _ = write!(line, " {g:.1} |");
                b.row(
                    "sweep_min_chunk",
                    &format!("{dir} min_chunk={}", label(mc)),
                    s,
                    g,
                    &format!("min_chunk_bytes={mc}"),
                );
            }
            println!("{line}");
        }
    }
    ctx.set_transfer_config(base)?;
    Ok(())
}

fn section_crossover(b: &mut Bench, ctx: &Context, m: &mut Mem) -> devbuf::Result<()> {
    let base = ctx.transfer_config();
    let max = m.ordinary.len();
    let sizes: Vec<usize> = [
        64 * KIB,
        128 * KIB,
        256 * KIB,
        512 * KIB,
        MIB,
        2 * MIB,
        4 * MIB,
        8 * MIB,
        16 * MIB,
        64 * MIB,
        256 * MIB,
        GIB,
    ]
    .into_iter()
    .filter(|&n| n <= max && (!b.quick || n <= 256 * MIB))
    .collect();
    println!(
        "\n## Crossover: ordinary memory through the driver, the staging lanes, registration\n"
    );
    println!("| transfer | size | driver | staged | registered | best |");
    println!("|---|---|---|---|---|---|");
    let modes = [
        PageableMode::Driver,
        PageableMode::Staged,
        PageableMode::Registered,
    ];
    let mut suggestions = Vec::new();
    for (di, dir) in ["H->D", "D->H"].into_iter().enumerate() {
        let mut staged_from: Option<usize> = None;
        let mut register_from: Option<usize> = None;
        for &n in &sizes {
            let mut g = [0.0f64; 3];
            for (k, mode) in modes.into_iter().enumerate() {
                ctx.set_transfer_config(TransferConfig {
                    pageable: mode,
                    ..base.clone()
                })?;
                let dev = &m.dev;
                let ord = &mut m.ordinary;
                let reps = if mode == PageableMode::Registered {
                    b.reps_for(n).min(10)
                } else {
                    b.reps_for(n)
                };
                let secs = time_it(reps, || {
                    if di == 0 {
                        dev.copy_from_host(0, &ord[..n])
                    } else {
                        dev.copy_to_host(0, &mut ord[..n])
                    }
                });
                g[k] = n as f64 / secs / 1e9;
            }
            let best = ["driver", "staged", "registered"]
                [(0..3).max_by(|&a, &c| g[a].total_cmp(&g[c])).unwrap_or(0)];
            println!(
                "| {dir} | {} | {:.2} | {:.2} | {:.2} | {best} |",
                label(n),
                g[0],
                g[1],
                g[2]
            );
            b.row("crossover", &format!("driver {dir}"), n, g[0], "");
            b.row("crossover", &format!("staged {dir}"), n, g[1], "");
            b.row("crossover", &format!("registered {dir}"), n, g[2], "");
            // The first size from which staging wins at every larger size.
            if g[1] > g[0] {
                staged_from.get_or_insert(n);
            } else {
                staged_from = None;
            }
            if g[2] > g[1].max(g[0]) {
                register_from.get_or_insert(n);
            } else {
                register_from = None;
            }
        }
        suggestions.push(format!(
            "{dir}: staging wins from {} on; registration wins from {} on",
            staged_from.map_or("no size".to_string(), label),
            register_from.map_or(
                "no size (keep register_min_bytes = None)".to_string(),
                label
            )
        ));
    }
    println!();
    for s in suggestions {
        println!("suggested: {s}");
    }
    println!(
        "(current defaults: staging_min_bytes = {}, register_min_bytes = {:?})",
        label(base.staging_min_bytes),
        base.register_min_bytes
    );
    ctx.set_transfer_config(base)?;
    Ok(())
}

fn section_batch(b: &mut Bench, ctx: &Context, raw: &Raw) -> devbuf::Result<()> {
    let base = ctx.transfer_config();
    let shapes: Vec<(usize, usize)> = if b.quick {
        vec![(10_000, 64 * KIB)]
    } else {
        vec![
            (10_000, 64 * KIB),
            (100_000, 4 * KIB),
            (20_000, 16 * KIB),
            (1_000, MIB),
        ]
    };
    let mut scatters = vec![ScatterMode::Kernel];
    if ctx
        .set_transfer_config(TransferConfig {
            scatter: ScatterMode::MemcpyBatch,
            ..base.clone()
        })
        .is_ok()
    {
        scatters.push(ScatterMode::MemcpyBatch);
    } else {
        println!("\n(cuMemcpyBatchAsync unavailable on this driver: kernel scatter only)");
    }
    ctx.set_transfer_config(base.clone())?;
    println!("\n## Batched small copies (ordinary memory, one host allocation per piece)\n");
    println!(
        "`copy_many` = one `copy_many_from_host` / `copy_many_to_host` call; `per piece` = one devbuf \
         call per piece; `driver per piece` = one `cuMemcpyHtoD_v2` / `cuMemcpyDtoH_v2` per piece. \
         Destinations: slots of one allocation in reversed order. GB/s.\n"
    );
    println!(
        "| transfer | pieces | copy_many (kernel) | copy_many (batch memcpy) | devbuf per piece | driver per piece | copy_many / driver |"
    );
    println!("|---|---|---|---|---|---|---|");
    for &(count, piece) in &shapes {
        let total = count * piece;
        let mut chunks: Vec<Vec<u8>> = (0..count)
            .map(|i| {
                let mut v = vec![0u8; piece];
                fill_pattern(&mut v, i as u8);
                v
            })
            .collect();
        let dev = ctx.allocate(total)?;
        let slot = |i: usize| (count - 1 - i) * piece;
        for (di, dir) in ["H->D", "D->H"].into_iter().enumerate() {
            let reps = if b.quick { 3 } else { 5 };
            let mut g_many = [f64::NAN; 2];
            for (k, &sc) in scatters.iter().enumerate() {
                ctx.set_transfer_config(TransferConfig {
                    scatter: sc,
                    ..base.clone()
                })?;
                let secs = if di == 0 {
                    let list: Vec<(&[u8], &DeviceBuffer, usize)> = chunks
                        .iter()
                        .enumerate()
                        .map(|(i, c)| (&c[..], &dev, slot(i)))
                        .collect();
                    time_it(reps, || cuda::copy_many_from_host(&list))
                } else {
                    let mut list: Vec<(&mut [u8], &DeviceBuffer, usize)> = chunks
                        .iter_mut()
                        .enumerate()
                        .map(|(i, c)| (&mut c[..], &dev, slot(i)))
                        .collect();
                    time_it(reps, || cuda::copy_many_to_host(&mut list))
                };
                g_many[k] = total as f64 / secs / 1e9;
                b.row(
                    "batch",
                    &format!("copy_many {sc:?} {dir}"),
                    total,
                    g_many[k],
                    &format!("{count}x{piece}"),
                );
            }
            ctx.set_transfer_config(base.clone())?;
            let per_piece = time_it(reps.min(3), || {
                for (i, c) in chunks.iter_mut().enumerate() {
                    if di == 0 {
                        dev.copy_from_host(slot(i), c)?;
                    } else {
                        dev.copy_to_host(slot(i), c)?;
                    }
                }
                Ok(())
            });
            let g_per = total as f64 / per_piece / 1e9;
            let d = dev.address();
            let driver = time_it(reps.min(3), || {
                for (i, c) in chunks.iter_mut().enumerate() {
                    // Safety: `c` holds `piece` bytes; the slot lies within `dev`.
                    unsafe {
                        if di == 0 {
                            raw.htod(d + slot(i) as u64, c.as_ptr(), piece)?;
                        } else {
                            raw.dtoh(c.as_mut_ptr(), d + slot(i) as u64, piece)?;
                        }
                    }
                }
                Ok(())
            });
            let g_drv = total as f64 / driver / 1e9;
            b.row(
                "batch",
                &format!("devbuf per piece {dir}"),
                total,
                g_per,
                &format!("{count}x{piece}"),
            );
            b.row(
                "batch",
                &format!("driver per piece {dir}"),
                total,
                g_drv,
                &format!("{count}x{piece}"),
            );
            println!(
                "| {dir} | {count} x {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} |",
                label(piece),
                g_many[0],
                g_many[1],
                g_per,
                g_drv,
                g_many[0].max(if g_many[1].is_nan() { 0.0 } else { g_many[1] }) / g_drv
            );
        }
        // Check: the device holds piece i at slot(i).
        let all = dev.slice(0, total)?.to_host()?;
        for (i, c) in chunks.iter().enumerate() {
            assert!(
                all[slot(i)..slot(i) + piece] == c[..],
                "batch data check, piece {i}"
            );
        }
    }

    // Lanes x chunk for the 10,000 x 64 KiB batch.
    if !b.quick {
        println!("\n### 10,000 x 64 KiB: lanes x chunk size (kernel scatter), H->D / D->H GB/s\n");
        let (count, piece) = (10_000, 64 * KIB);
        let mut chunks: Vec<Vec<u8>> = (0..count).map(|_| vec![1u8; piece]).collect();
        let dev = ctx.allocate(count * piece)?;
        let chunk_sizes = [MIB, 2 * MIB, 4 * MIB, 8 * MIB];
        let mut head = String::from("| lanes |");
        let mut sep = String::from("|---|");
        for &c in &chunk_sizes {
            let _ = write!(head, " {} |", label(c));
            sep.push_str("---|");
        }
        println!("{head}\n{sep}");
        for l in [4, 8, 12, 16] {
            let mut line = format!("| {l} |");
            for &c in &chunk_sizes {
                ctx.set_transfer_config(TransferConfig {
                    lanes: l,
                    chunk_bytes: c,
                    min_chunk_bytes: base.min_chunk_bytes.min(c),
                    max_pinned_bytes: (2 * c * (l + 2)).max(base.max_pinned_bytes),
                    ..base.clone()
                })?;
                let list: Vec<(&[u8], &DeviceBuffer, usize)> = chunks
                    .iter()
                    .enumerate()
                    .map(|(i, ch)| (&ch[..], &dev, i * piece))
                    .collect();
                let up = time_it(3, || cuda::copy_many_from_host(&list));
                drop(list);
                let mut list: Vec<(&mut [u8], &DeviceBuffer, usize)> = chunks
                    .iter_mut()
                    .enumerate()
                    .map(|(i, ch)| (&mut ch[..], &dev, i * piece))
                    .collect();
                let down = time_it(3, || cuda::copy_many_to_host(&mut list));
                let (gu, gd) = (
                    (count * piece) as f64 / up / 1e9,
                    (count * piece) as f64 / down / 1e9,
                );
                let _ = write!(line, " {gu:.1} / {gd:.1} |");
                b.row(
                    "batch_sweep",
                    &format!("H->D lanes={l} chunk={}", label(c)),
                    count * piece,
                    gu,
                    "",
                );
                b.row(
                    "batch_sweep",
                    &format!("D->H lanes={l} chunk={}", label(c)),
                    count * piece,
                    gd,
                    "",
                );
            }
            println!("{line}");
        }
        ctx.trim_transfer_pool();
    }
    ctx.set_transfer_config(base)?;
    Ok(())
}

fn section_async(b: &mut Bench, ctx: &Context, m: &mut Mem) -> devbuf::Result<()> {
    println!("\n## Both directions at once (two streams, page-locked and ordinary)\n");
    println!("| memory | size | H->D alone | D->H alone | both at once (sum) |");
    println!("|---|---|---|---|---|");
    let n = (256 * MIB).min(m.ordinary.len() / 2);
    let (a, s2) = (Stream::new(ctx)?, Stream::new(ctx)?);
    for pinned in [true, false] {
        let name = if pinned { "page-locked" } else { "ordinary" };
        let host: *mut u8 = if pinned {
            m.pinned.as_mut_ptr()
        } else {
            m.ordinary.as_mut_ptr()
        };
        // Safety: two disjoint halves of a buffer of at least 2n bytes, not otherwise
        // accessed while the scopes below run.
        let (up_src, down_dst) = unsafe {
            (
                std::slice::from_raw_parts(host, n),
                std::slice::from_raw_parts_mut(host.add(n), n),
            )
        };
        let (dev, dev2) = (&m.dev, &m.dev2);
        let reps = if b.quick { 3 } else { 8 };
        let up = time_it(reps, || {
            cuda::scope(|s| s.copy_from_host(dev, 0, up_src, &a)?.wait().map(|_| ()))
        });
        let down = time_it(reps, || {
            cuda::scope(|s| {
                s.copy_to_host(dev2, 0, &mut down_dst[..], &s2)?
                    .wait()
                    .map(|_| ())
            })
        });
        let both = time_it(reps, || {
            if pinned {
                cuda::scope(|s| {
                    let x = s.copy_from_host(dev, 0, up_src, &a)?;
                    let y = s.copy_to_host(dev2, 0, &mut down_dst[..], &s2)?;
                    x.wait()?;
                    y.wait()?;
                    Ok(())
                })
            } else {
                // Ordinary memory is staged on the calling thread's lanes: run the two
                // directions from two threads.
                std::thread::scope(|t| {
                    let h = t.spawn(|| dev.copy_from_host(0, up_src));
                    let r = dev2.copy_to_host(0, &mut down_dst[..]);
                    h.join()
                        .map_err(|_| devbuf::Error::InvalidArgument("thread panicked".into()))??;
                    r
                })
            }
        });
        let (gu, gd, gb) = (
            n as f64 / up / 1e9,
            n as f64 / down / 1e9,
            2.0 * n as f64 / both / 1e9,
        );
        println!("| {name} | {} | {gu:.1} | {gd:.1} | {gb:.1} |", label(n));
        b.row("duplex", &format!("{name} H->D alone"), n, gu, "");
        b.row("duplex", &format!("{name} D->H alone"), n, gd, "");
        b.row(
            "duplex",
            &format!("{name} both"),
            n,
            gb,
            "sum of both directions",
        );
    }
    Ok(())
}

fn section_alloc(b: &mut Bench, ctx: &Context, raw: &Raw) -> devbuf::Result<()> {
    println!("\n## Allocation: allocate + drop, microseconds per pair\n");
    println!("| size | allocate (cuMemAlloc) | allocate_pooled | raw cuMemAlloc + cuMemFree |");
    println!("|---|---|---|---|");
    let pooled_ok = ctx.allocate_pooled(1, None).is_ok();
    for n in [4 * KIB, 64 * KIB, MIB, 16 * MIB] {
        let reps = if b.quick { 200 } else { 2000 };
        let plain = time_it(reps, || ctx.allocate(n).map(drop));
        let pooled = if pooled_ok {
            time_it(reps, || ctx.allocate_pooled(n, None).map(drop))
        } else {
            f64::NAN
        };
        let rawt = time_it(reps, || {
            raw.bind()?;
            let mut p = 0u64;
            // Safety: valid out pointer; freed right after.
            drv(unsafe { sys::cuMemAlloc_v2(&mut p, n) }, "cuMemAlloc")?;
            // Safety: `p` was just allocated and is not used afterwards.
            drv(unsafe { sys::cuMemFree_v2(p) }, "cuMemFree")
        });
        println!(
            "| {} | {:.2} | {:.2} | {:.2} |",
            label(n),
            plain * 1e6,
            pooled * 1e6,
            rawt * 1e6
        );
        // In the CSV, "gbps" holds microseconds per allocation for this section.
        b.row("alloc", "allocate", n, plain * 1e6, "microseconds");
        b.row("alloc", "allocate_pooled", n, pooled * 1e6, "microseconds");
        b.row(
            "alloc",
            "raw cuMemAlloc+cuMemFree",
            n,
            rawt * 1e6,
            "microseconds",
        );
    }
    if pooled_ok {
        println!("\npool: {:?}", ctx.device_pool_stats()?);
    }
    Ok(())
}

/// Turns peer access between two devices on again when dropped, also when a measurement
/// fails half-way (the rest of the program expects devbuf's default: on where possible).
struct PeerOnAgain<'a>(&'a Context, &'a Context);

impl Drop for PeerOnAgain<'_> {
    fn drop(&mut self) {
        let _ = self.0.set_peer_access(self.1, true);
    }
}

fn section_peer(b: &mut Bench, ctx: &Context) -> devbuf::Result<()> {
    println!("\n## Device to device across GPUs: devbuf vs the driver\n");
    let count = cuda::device_count();
    if count < 2 {
        println!("Skipped: needs 2 GPUs, this machine has {count}.");
        return Ok(());
    }
    let d1 = Context::new(1)?;
    let _again = PeerOnAgain(ctx, &d1);
    let direct = ctx.set_peer_access(&d1, true)?;
    let candidates: Vec<usize> = if b.quick {
        vec![MIB, 64 * MIB]
    } else {
        vec![MIB, 64 * MIB, GIB]
    };
    // One buffer of the largest size per device, with room to spare.
    let room = ctx.free_memory()?.min(d1.free_memory()?);
    let sizes: Vec<usize> = candidates
        .iter()
        .copied()
        .filter(|&n| n + 256 * MIB <= room)
        .collect();
    for &n in candidates.iter().filter(|n| !sizes.contains(n)) {
        println!(
            "({} skipped: {room} bytes free on the fuller device)",
            label(n)
        );
    }
    let Some(&max) = sizes.iter().max() else {
        println!("Skipped: too little free device memory ({room} bytes).");
        return Ok(());
    };
    println!(
        "Device 0: {}, device 1: {}; direct peer access possible: {direct}. `devbuf` = \
         `copy_from_device` + the destination context's synchronisation; `devbuf async` = \
         `copy_from_device_on` a stream of the source's device + its synchronisation; \
         `driver` = `cuMemcpyPeer` + `cuCtxSynchronize`; `driver async` = \
         `cuMemcpyPeerAsync` on a stream of the source's device + `cuStreamSynchronize`. \
         Peer access off (`Context::set_peer_access(peer, false)`): the driver stages the copy \
         through host memory; the driver rows run under the same state. GB/s (median), \
         bytes copied once.\n",
        ctx.properties().name,
        d1.properties().name
    );
    println!(
        "| direction | peer access | size | devbuf | devbuf async | driver | driver async | devbuf / best driver |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let (a0, a1) = (ctx.allocate(max)?, d1.allocate(max)?);
    let mut pattern = vec![0u8; max.min(64 * MIB)];
    fill_pattern(&mut pattern, 3);
    a0.copy_from_host(0, &pattern)?;
    // Streams of each device, one for devbuf's rows and one for the driver's.
    let ours = [Stream::new(ctx)?, Stream::new(&d1)?];
    let theirs = [Stream::new(ctx)?, Stream::new(&d1)?];
    for on in [true, false] {
        if on {
            ctx.set_peer_access(&d1, true)?;
        } else {
            ctx.set_peer_access(&d1, false)?;
        }
        let state = match (on, direct) {
            (true, true) => "on",
            (true, false) => "on (unavailable: staged)",
            (false, _) => "off",
        };
        for (src, dst) in [(&a0, &a1), (&a1, &a0)] {
            let (from, to) = (src.context().ordinal(), dst.context().ordinal());
            let name = format!("{from}->{to}");
            let (s_ours, s_theirs) = (&ours[from], &theirs[from]);
            let raw_dst_ctx = dst.context().as_raw() as sys::CUcontext;
            let raw_src_ctx = src.context().as_raw() as sys::CUcontext;
            let raw_stream = s_theirs.as_raw() as sys::CUstream;
            for &n in &sizes {
                let reps = b.reps_for(n);
                let (s, d) = (src.slice(0, n)?, dst.slice(0, n)?);
                let (sa, da) = (s.address(), d.address());
                let r = compare(
                    n,
                    reps,
                    &mut [
                        &mut || {
                            d.copy_from_device(0, &s)?;
                            d.context().synchronize()
                        },
                        &mut || {
                            d.copy_from_device_on(0, &s, s_ours)?;
                            s_ours.synchronize()
                        },
                        &mut || {
                            // Safety: live contexts; `da` and `sa` are n-byte device
                            // ranges of them.
                            unsafe {
                                drv(sys::cuCtxSetCurrent(raw_dst_ctx), "cuCtxSetCurrent")?;
                                drv(
                                    sys::cuMemcpyPeer(da, raw_dst_ctx, sa, raw_src_ctx, n),
                                    "cuMemcpyPeer",
                                )?;
                                drv(sys::cuCtxSynchronize(), "cuCtxSynchronize")
                            }
                        },
                        &mut || {
                            // Safety: as above; the stream belongs to the source's context.
                            unsafe {
                                drv(sys::cuCtxSetCurrent(raw_src_ctx), "cuCtxSetCurrent")?;
                                drv(
                                    sys::cuMemcpyPeerAsync(
                                        da,
                                        raw_dst_ctx,
                                        sa,
                                        raw_src_ctx,
                                        n,
                                        raw_stream,
                                    ),
                                    "cuMemcpyPeerAsync",
                                )?;
                                drv(sys::cuStreamSynchronize(raw_stream), "cuStreamSynchronize")
                            }
                        },
                    ],
                );
                let best = r[2].max(r[3]);
                println!(
                    "| {name} | {state} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
                    label(n),
                    r[0],
                    r[1],
                    r[2],
                    r[3],
                    r[0] / best
                );
                let note = format!("peer access {state}");
                b.row(
                    "peer",
                    &format!("devbuf {name} peer {state}"),
                    n,
                    r[0],
                    &note,
                );
                b.row(
                    "peer",
                    &format!("devbuf async {name} peer {state}"),
                    n,
                    r[1],
                    &note,
                );
                b.row(
                    "peer",
                    &format!("driver {name} peer {state}"),
                    n,
                    r[2],
                    &note,
                );
                b.row(
                    "peer",
                    &format!("driver async {name} peer {state}"),
                    n,
                    r[3],
                    &note,
                );
            }
        }
    }
    ctx.set_peer_access(&d1, true)?;
    // The copies moved the pattern 0 -> 1 -> 0 -> ...: device 1 holds it, device 0 too.
    let k = pattern.len();
    let check = DeviceBuffer::from_slice(&d1, &pattern)?;
    assert!(
        check.equals(&a1.slice(0, k)?)?,
        "peer: data check on device 1"
    );
    assert!(
        a0.slice(0, k)?.equals(&a1.slice(0, k)?)?,
        "peer: data check on device 0"
    );
    Ok(())
}

/// Transfer benchmark: devbuf against the raw CUDA driver, in the same run, plus the
/// sweeps that tune the transfer engine. Without a GPU it says so and exits.
#[derive(Parser)]
#[command(name = "bench_transfer")]
struct Cli {
    /// Fewer repetitions and sizes up to 256 MiB (a quick look, not a measurement).
    #[arg(long)]
    quick: bool,
    /// Also writes every measurement as `section,series,size_bytes,gbps,note`.
    #[arg(long, value_name = "PATH")]
    csv: Option<String>,
    /// Only these sections: table, small, sweep, crossover, batch, async, alloc, peer.
    #[arg(long, value_name = "A,B", value_delimiter = ',')]
    only: Option<Vec<String>>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() -> std::process::ExitCode {
    common::exit(run())
}

fn run() -> devbuf::Result<()> {
    let Cli {
        quick, csv, only, ..
    } = Cli::parse();
    let only: Option<Vec<String>> = only.map(|o| o.iter().map(|x| x.trim().to_string()).collect());
    let want = |s: &str| only.as_ref().is_none_or(|o| o.iter().any(|x| x == s));
    if !cuda::is_available() {
        println!(
            "bench_transfer: no GPU ({}); nothing to measure",
            cuda::unavailable_reason().unwrap_or_default()
        );
        return Ok(());
    }
    let ctx = Context::new(0)?;
    let cfg = ctx.transfer_config();
    println!(
        "# bench_transfer on {} (device 0), driver CUDA {:?}, {} CPUs{}",
        ctx.properties().name,
        cuda::driver_version()?,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if quick { ", --quick" } else { "" }
    );
    println!("default transfer config: {cfg:?}");
    println!("PCIe 5.0 x16 limit (one direction): {PCIE5_X16_GBPS} GB/s");
    let t0 = Instant::now();
    let max = if quick { 256 * MIB } else { GIB };
    ctx.warm_up_transfers()?;
    let mut pinned = ctx.allocate_host(max)?;
    fill_pattern(&mut pinned, 1);
    let mut ordinary = vec![0u8; max];
    fill_pattern(&mut ordinary, 2); // also faults every page in
    let mut m = Mem {
        pinned,
        ordinary,
        dev: ctx.allocate(max)?,
        dev2: ctx.allocate(max)?,
    };
    m.dev.fill(0x5A)?;
    let raw = Raw::new(&ctx)?;
    let mut b = Bench {
        quick,
        rows: Vec::new(),
    };
    if want("table") {
        section_table(&mut b, &ctx, &raw, &mut m)?;
    }
    if want("small") {
        section_small(&mut b, &ctx, &mut m)?;
    }
    if want("sweep") {
        section_sweep(&mut b, &ctx, &mut m)?;
    }
    if want("crossover") {
        section_crossover(&mut b, &ctx, &mut m)?;
    }
    if want("async") {
        section_async(&mut b, &ctx, &mut m)?;
    }
    drop(m);
    if want("batch") {
        section_batch(&mut b, &ctx, &raw)?;
    }
    if want("alloc") {
        section_alloc(&mut b, &ctx, &raw)?;
    }
    if want("peer") {
        section_peer(&mut b, &ctx)?;
    }
    println!("\nengine stats: {:?}", ctx.transfer_stats());
    println!("bench_transfer took {:.1} s", t0.elapsed().as_secs_f64());
    if let Some(path) = csv {
        std::fs::write(&path, b.csv())
            .map_err(|e| devbuf::Error::InvalidArgument(format!("writing {path}: {e}")))?;
        println!("wrote {} rows to {path}", b.rows.len());
    }
    Ok(())
}
