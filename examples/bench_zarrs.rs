//! Throughput of reading (and writing) zarr arrays through `devbuf::zarr`, in
//! GB/s of decoded bytes, page cache warm, median of `--repeat` runs after a warm-up.
//!
//! ```text
//! cargo run --release --features zarr,object_store,flight --example bench_zarrs -- [--mib N] [--only a,b] [--repeat N]
//!     [--decoders host,into,cpu,gpu,both,auto] [--gpu-workers N] [--slot-bytes N] [--no-writes] [--no-limits] [--reports] [--keep DIR]
//!     [--claim-mib N] [--claims-per-worker N] [--claims-in-flight N] [--gpu-readers N] [--spread N] [--ramp N] [--no-cost-model]
//!     [--lane-streams N] [--no-prefault] [--stream-min-bytes N] [--stream-piece-bytes N]   (the ReadOptions fields)
//! cargo run --release --features zarr,object_store,flight --example bench_zarrs -- --store PATH [--store PATH ...]
//! cargo run --release --features zarr,object_store,flight --example bench_zarrs -- --manifest DIR/manifest.json
//! ```
//!
//! Without `--store`/`--manifest` it writes its own sweep first (float32, `--mib` MiB
//! each, default 512 with a GPU and 32 without): chunk sizes 256 KiB, 1 MiB, 4 MiB and
//! 16 MiB x codecs none, zstd-1, zstd-3, gzip-1, zlib-1 with crc32c, numcodecs' LZ4, blosc-lz4 with
//! shuffle, plus a sharded
//! store (16 MiB shards of 64 KiB inner chunks, zstd-1). The data is a smooth field plus
//! noise, quantised (zstd-1 compresses it about 1.4x). `--manifest` reads the stores that
//! `scripts/peers/zarr.py write` made, so the peers (tensorstore, zarr-python, nvCOMP)
//! are timed on the same files.
//!
//! Per store: host read (`host`: new results, each dropped before the next read, as a
//! loop of reads does, so the result memory is recycled; `host new`: every result kept,
//! so each read faults fresh pages in; `host into`: into one reused buffer; `host/mem`:
//! `host` against the limit of every core decoding in-memory frames; `host/own`: the
//! host read against every core decoding the store's own chunk frames in memory, one of
//! each in turn so both see the machine alike, zstd stores of whole chunk files;
//! `--host-stages`: the host read's stages at 1, 2, 4, ... threads, after the table);
//! `Auto`'s lines after the table name the decoder each of its timed reads ran; device
//! reads with each decoder: `Auto` first (`dev auto (first reads)`: as a program that
//! names no decoder meets it, calibration included), then `Cpu`, `Gpu`, `Both` and
//! `Auto` again (`dev auto`: settled, with the others measured; `auto/best` against the
//! best of the three); device write (device -> a new store of the same
//! codecs, own sweep only) with the CPU encoders and, for zstd, with nvCOMP (and the
//! ratio of nvCOMP's store). `--decoders` times only the reads named, `--gpu-workers`
//! sets `ReadOptions::gpu_workers`, `--slot-bytes` `ReadOptions::slot_bytes`, `--no-writes` skips the writes, `--no-limits` the limits, `--reports` prints
//! every decoder's read report, `--keep DIR` writes the own sweep's stores into DIR and
//! keeps them (for later runs with `--store`). The limits printed first are measured in the same run:
//! page-locked host -> device copy (PCIe), one core's zstd-1 decode rate and every
//! core's at once (in-memory frames into one 512 MiB buffer), fresh host
//! memory and (unless `--no-writes`) the file system's rate for new and rewritten chunk
//! files and one core's zstd-1 encode rate. After the table, per zstd store of whole
//! chunk files (a device run with the limits): every core reading its files into
//! page-locked memory, nvCOMP decoding its frames on the device (all in one call, one
//! chunk alone, one chunk per multiprocessor), and the bound they set on a pipelined
//! device read: `decoded / (read time + one chunk's latency)`; then the copy of the
//! stored bytes to the device, and both stages overlapped in 1, 2, 4 and 8 pieces as a
//! pipeline could at best (every core but one reading piece after piece, one thread
//! copying each read piece and queueing its nvCOMP call on a stream of its own). Beside
//! them, the read stage by other means (`common/read_paths.rs`): `O_DIRECT` reads and
//! io_uring reads into page-locked memory, and cuFile (GPUDirect Storage, or its
//! compatibility mode) straight into device memory.

#[cfg(not(feature = "zarr"))]
fn main() {
    println!("bench_zarrs: built without the `zarrs` feature; run it with --features zarr");
}

#[cfg(feature = "zarr")]
fn main() {
    if let Err(e) = bench::main() {
        eprintln!("bench_zarrs: error: {e}");
        std::process::exit(1);
    }
}

#[cfg(feature = "zarr")]
#[path = "common/field.rs"]
mod field;

#[cfg(feature = "zarr")]
#[path = "common/stats.rs"]
mod stats;

#[cfg(feature = "zarr")]
#[path = "common/staging.rs"]
mod staging;

#[cfg(feature = "zarr")]
#[path = "common/host_stages.rs"]
mod host_stages;

#[cfg(feature = "zarr")]
#[path = "common/deflate_limits.rs"]
mod deflate_limits;

#[cfg(feature = "zarr")]
#[path = "common/nvcomp_calls.rs"]
mod nvcomp_calls;

#[cfg(feature = "zarr")]
#[path = "common/read_paths.rs"]
mod read_paths;

#[cfg(feature = "zarr")]
mod bench {
    use std::path::{Path, PathBuf};
    use std::time::Instant;

    use devbuf::cuda::{self, Context};
    use devbuf::zarr::{
        ArraySpec, Compressor, Decoder, Encoder, GpuTuning, ReadOptions, ReadReport, WriteOptions,
        ZarrArray,
    };
    use devbuf::zarr::{BufferPrototype, Dtype};

    use crate::stats::{gbs, median, time_median};
    use clap::{ArgAction, Parser};

    struct Args {
        mib: u64,
        only: Option<Vec<String>>,
        repeat: usize,
        stores: Vec<PathBuf>,
        manifest: Option<PathBuf>,
        decoders: Vec<String>,
        /// The read options of every read but for the decoder (the flags below).
        read: ReadOptions,
        writes: bool,
        reports: bool,
        keep: Option<PathBuf>,
        limits: bool,
        host_stages: bool,
    }

    impl Args {
        fn wants(&self, what: &str) -> bool {
            self.decoders.iter().any(|d| d == what)
        }
    }

    /// Throughput of reading (and writing) zarr arrays through devbuf, in GB/s of decoded
    /// bytes, page cache warm, median of `--repeat` runs after a warm-up. Without
    /// `--store`/`--manifest` it writes its own sweep of stores first.
    #[derive(Parser)]
    #[command(name = "bench_zarrs")]
    struct Cli {
        /// MiB of float32 per store of the own sweep [default: 512 with a GPU, 32 without].
        #[arg(long, value_name = "N")]
        mib: Option<u64>,
        /// Only these stores (e.g. none-4m,zstd1-4m,sharded-zstd1-64k).
        #[arg(long, value_name = "A,B", value_delimiter = ',')]
        only: Option<Vec<String>>,
        /// Timed runs after a warm-up (at least 1).
        #[arg(long, value_name = "N", default_value_t = 5)]
        repeat: usize,
        /// Reads this store instead of the own sweep (repeatable).
        #[arg(long = "store", value_name = "PATH")]
        stores: Vec<PathBuf>,
        /// Reads the stores `scripts/peers/zarr.py write` listed in this manifest.
        #[arg(long, value_name = "DIR/manifest.json")]
        manifest: Option<PathBuf>,
        /// The reads timed.
        #[arg(
            long,
            value_name = "LIST",
            value_delimiter = ',',
            default_value = "host,into,cpu,gpu,both,auto"
        )]
        decoders: Vec<String>,
        /// `ReadOptions::gpu_workers`.
        #[arg(long, value_name = "N")]
        gpu_workers: Option<usize>,
        /// `ReadOptions::slot_bytes`.
        #[arg(long, value_name = "N", default_value_t = devbuf::zarr::DEFAULT_SLOT_BYTES)]
        slot_bytes: usize,
        /// `ReadOptions::gpu.claim_bytes`, in MiB.
        #[arg(long, value_name = "MIB")]
        claim_mib: Option<usize>,
        /// `ReadOptions::gpu.claims_per_worker`.
        #[arg(long, value_name = "N")]
        claims_per_worker: Option<usize>,
        /// `ReadOptions::gpu.claims_in_flight`.
        #[arg(long, value_name = "N")]
        claims_in_flight: Option<usize>,
        /// `ReadOptions::gpu.readers`.
        #[arg(long, value_name = "N")]
        gpu_readers: Option<usize>,
        /// `ReadOptions::gpu.spread`.
        #[arg(long, value_name = "N")]
        spread: Option<usize>,
        /// `ReadOptions::gpu.ramp`.
        #[arg(long, value_name = "N")]
        ramp: Option<u32>,
        /// `ReadOptions::gpu.cost_model = false`.
        #[arg(long)]
        no_cost_model: bool,
        /// `ReadOptions::lane_streams`.
        #[arg(long, value_name = "N")]
        lane_streams: Option<usize>,
        /// `ReadOptions::prefault = false`.
        #[arg(long)]
        no_prefault: bool,
        /// `ReadOptions::stream_min_bytes`.
        #[arg(long, value_name = "BYTES")]
        stream_min_bytes: Option<usize>,
        /// `ReadOptions::stream_piece_bytes`.
        #[arg(long, value_name = "BYTES")]
        stream_piece_bytes: Option<usize>,
        /// Skips the writes.
        #[arg(long = "no-writes", action = ArgAction::SetFalse)]
        writes: bool,
        /// Skips the limits measured first.
        #[arg(long = "no-limits", action = ArgAction::SetFalse)]
        limits: bool,
        /// Prints every decoder's read report.
        #[arg(long)]
        reports: bool,
        /// Times the host read's stages (zstd stores of whole chunk files) at 1, 2, 4,
        /// ... threads up to every core, beside the engine's host read at each.
        #[arg(long)]
        host_stages: bool,
        /// Writes the own sweep's stores into DIR and keeps them.
        #[arg(long, value_name = "DIR")]
        keep: Option<PathBuf>,
    }

    fn args(gpu: bool) -> devbuf::Result<Args> {
        let c = Cli::parse();
        let d = ReadOptions::default();
        let read = ReadOptions {
            gpu_workers: c.gpu_workers,
            slot_bytes: c.slot_bytes,
            gpu: GpuTuning {
                claim_bytes: c
                    .claim_mib
                    .map_or(d.gpu.claim_bytes, |m| m.saturating_mul(1 << 20)),
                claims_per_worker: c.claims_per_worker,
                claims_in_flight: c.claims_in_flight,
                readers: c.gpu_readers,
                spread: c.spread,
                ramp: c.ramp,
                cost_model: !c.no_cost_model,
            },
            lane_streams: c.lane_streams.unwrap_or(d.lane_streams),
            prefault: !c.no_prefault,
            stream_min_bytes: c.stream_min_bytes.unwrap_or(d.stream_min_bytes),
            stream_piece_bytes: c.stream_piece_bytes.unwrap_or(d.stream_piece_bytes),
            ..d
        };
        Ok(Args {
            mib: c.mib.unwrap_or(if gpu { 512 } else { 32 }),
            only: c.only,
            repeat: c.repeat.max(1),
            stores: c.stores,
            manifest: c.manifest,
            decoders: c.decoders,
            read,
            writes: c.writes,
            reports: c.reports,
            keep: c.keep,
            limits: c.limits,
            host_stages: c.host_stages,
        })
    }

    /// Median seconds of `repeat` runs of `f` after one warm-up.
    fn time(repeat: usize, f: &mut dyn FnMut() -> devbuf::Result<()>) -> devbuf::Result<f64> {
        time_median(repeat, f)
    }

    pub(crate) use crate::field::field;

    /// Stores of the own sweep whose device writes are timed, with the CPU encoders and
    /// (zstd) with nvCOMP: every zstd-1 chunk size, to place `AUTO_GPU_MAX_CHUNK_BYTES`.
    const WRITES: [&str; 6] = [
        "none-4m",
        "zstd1-256k",
        "zstd1-1m",
        "zstd1-4m",
        "zstd1-16m",
        "sharded-zstd1-64k",
    ];

    /// Fresh host memory: allocating `n` bytes and touching every page from every
    /// core, GB/s (what a host read into new memory cannot beat).
    fn fresh_memory(n: usize, cores: usize) -> devbuf::Result<f64> {
        let s = time(3, &mut || {
            let mut v = vec![0u8; n];
            let per = n.div_ceil(cores);
            std::thread::scope(|sc| {
                for part in v.chunks_mut(per) {
                    sc.spawn(move || {
                        for p in part.iter_mut().step_by(4096) {
                            *p = 1;
                        }
                    });
                }
            });
            std::hint::black_box(&v);
            Ok(())
        })?;
        Ok(gbs(n as f64, s))
    }

    /// The same with a fresh mapping asked for huge pages (what host reads of 8 MiB or
    /// more allocate).
    fn fresh_huge_memory(n: usize, cores: usize) -> devbuf::Result<f64> {
        let s = time(3, &mut || {
            let mut out = devbuf::__test::HostOutput::new(n)?;
            out.prefault(cores);
            drop(out);
            Ok(())
        })?;
        Ok(gbs(n as f64, s))
    }

    /// A store of the own sweep: name, chunk shape, compressor, inner chunk shape.
    type Case = (String, [u64; 2], Compressor, Option<[u64; 2]>);

    fn sweep() -> Vec<Case> {
        let mut v = Vec::new();
        let sizes: [(&str, [u64; 2]); 4] = [
            ("256k", [256, 256]),
            ("1m", [512, 512]),
            ("4m", [1024, 1024]),
            ("16m", [2048, 2048]),
        ];
        let codecs = [
            ("none", Compressor::None),
            ("zstd1", Compressor::Zstd { level: 1 }),
            ("zstd3", Compressor::Zstd { level: 3 }),
            ("gzip1", Compressor::Gzip { level: 1 }),
            // zlib with crc32c: nvCOMP decodes zlib only when the host can verify it.
            ("zlib1c", Compressor::Zlib { level: 1 }),
            ("lz4", Compressor::Lz4),
            ("blosclz4", Compressor::Blosc { level: 5 }),
        ];
        for (c, comp) in codecs {
            for (s, shape) in sizes {
                v.push((format!("{c}-{s}"), shape, comp, None));
            }
        }
        v.push((
            "sharded-zstd1-64k".to_string(),
            [2048, 2048],
            Compressor::Zstd { level: 1 },
            Some([128, 128]),
        ));
        v
    }

    struct Row {
        name: String,
        ratio: f64,
        host: f64,
        /// Host reads into fresh memory (every earlier result kept alive).
        host_new: f64,
        /// Host reads into one buffer reused for every read (`read(..).into(..)`).
        into: f64,
        /// Every core decoding this store's own chunk frames, already in memory, each
        /// into its place in one reused buffer, and the host read timed in the same
        /// rounds (GB/s; NaN where not measured).
        own_mem: (f64, f64),
        /// Device reads: CPU decode, GPU decode, both, Auto (after the others ran).
        device: [f64; 4],
        /// Auto's first reads of this kind of read in the process, before any other
        /// decoder ran on it (its calibration included).
        auto_first: f64,
        /// Device writes with the CPU encoders, with nvCOMP, and the ratio of nvCOMP's store.
        write: [Option<f64>; 3],
        report: ReadReport,
    }

    fn stored_bytes(dir: &Path) -> u64 {
        let mut n = 0;
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    n += stored_bytes(&p);
                } else if let Ok(m) = e.metadata() {
                    n += m.len();
                }
            }
        }
        n
    }

    fn measure(
        name: &str,
        a: &mut ZarrArray,
        path: &Path,
        args: &Args,
        ctx: Option<&Context>,
        write_spec: Option<(&ArraySpec, &Path)>,
    ) -> devbuf::Result<Row> {
        let repeat = args.repeat;
        let bytes = (a.shape().iter().product::<u64>() * a.dtype().element().size() as u64) as f64;
        let host = BufferPrototype::Host;
        a.set_read_options(args.read.clone())?;
        let host_s = if args.wants("host") {
            time(repeat, &mut || a.read(..).to(&host).map(drop))?
        } else {
            f64::NAN
        };
        let new_s = if args.wants("host") {
            // No recycled memory: the pool emptied, every result kept until the end.
            devbuf_core::__private::release_host_pool();
            let mut kept = Vec::with_capacity(repeat + 1);
            let s = time(repeat, &mut || {
                kept.push(a.read(..).to(&host)?);
                Ok(())
            })?;
            drop(kept);
            s
        } else {
            f64::NAN
        };
        let into_s = if args.wants("into") {
            // One buffer for every read, touched once before the timing.
            let mut out = vec![0u8; bytes as usize];
            time(repeat, &mut || a.read(..).into(&mut out).map(drop))?
        } else {
            f64::NAN
        };
        let mut device = [f64::NAN; 4];
        let mut auto_first = f64::NAN;
        let mut write = [None; 3];
        let mut report = ReadReport::default();
        if let Some(ctx) = ctx {
            let dev = BufferPrototype::Device(ctx.ordinal());
            // Auto first, as a program that never names a decoder meets it: its
            // calibration reads are in this figure.
            if args.wants("auto") {
                a.set_read_options(args.read.clone())?;
                auto_first = device_rate(a, ctx, args, name, "auto (first reads)")?;
            }
            for (k, (decoder, label)) in [
                (Decoder::Cpu, "cpu"),
                (Decoder::Gpu, "gpu"),
                (Decoder::Both, "both"),
                (Decoder::Auto, "auto"),
            ]
            .into_iter()
            .enumerate()
            {
                if !args.wants(label) {
                    continue;
                }
                a.set_read_options(ReadOptions {
                    decoder,
                    ..args.read.clone()
                })?;
                if matches!(decoder, Decoder::Gpu | Decoder::Both)
                    && let Err(e) = a.read(..).to(&dev)
                {
                    // nvCOMP missing, the codec not for it, or the options refused.
                    eprintln!("bench_zarrs: {name}: no {label} read: {e}");
                    continue;
                }
                device[k] = device_rate(a, ctx, args, name, label)?;
            }
            a.set_read_options(ReadOptions {
                decoder: if device[2].is_nan() {
                    Decoder::Auto
                } else {
                    Decoder::Both
                },
                ..args.read.clone()
            })?;
            let mut r = devbuf::zarr::ReadReport::default();
            let on_dev = a.read(..).report(&mut r).to(&dev)?;
            report = r;
            if let Some((spec, dir)) = write_spec.filter(|_| args.writes && WRITES.contains(&name))
            {
                for (k, encoder) in [Encoder::Cpu, Encoder::Gpu].into_iter().enumerate() {
                    let _ = std::fs::remove_dir_all(dir);
                    let mut w = ZarrArray::create(dir, spec)?;
                    w.set_write_options(WriteOptions {
                        encoder,
                        ..WriteOptions::default()
                    });
                    if w.write_encoding().encoder != "gpu" && encoder == Encoder::Gpu {
                        continue; // not for nvCOMP (the codec), or no nvCOMP
                    }
                    let s = time(repeat.min(3), &mut || {
                        w.write_subset(&vec![0; w.shape().len()], &on_dev)?;
                        ctx.synchronize()
                    })?;
                    write[k] = Some(gbs(bytes, s));
                    if encoder == Encoder::Gpu {
                        write[2] = Some(bytes / stored_bytes(dir).max(1) as f64);
                    }
                }
                let _ = std::fs::remove_dir_all(dir);
            }
        } else {
            a.read(..).report(&mut report).to(&host)?;
        }
        let ratio = bytes / stored_bytes(path).max(1) as f64;
        let elem = a.dtype().element().size() as u64;
        let chunk = (a.metadata().chunk_shape.iter().product::<u64>() * elem) as usize;
        let own_mem = match (args.limits && args.wants("host"), report.codecs.as_str()) {
            (true, "zstd") => {
                a.set_read_options(args.read.clone())?;
                own_frames_rate(name, path, chunk, bytes as usize, repeat, &mut || {
                    a.read(..).to(&host).map(drop)
                })?
            }
            _ => (f64::NAN, f64::NAN),
        };
        if args.host_stages && report.codecs == "zstd" {
            host_stage_lines(name, a, path, chunk, args)?;
        }
        if let Some(ctx) = ctx.filter(|_| args.limits && report.codecs == "zstd") {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            store_limits(ctx, name, path, chunk, bytes as usize, cores)?;
        }
        if let Some(ctx) = ctx.filter(|_| args.limits && report.codecs == "gzip") {
            let files = crate::staging::store_files(path);
            if files.len() * chunk == bytes as usize
                && let Some(line) = crate::deflate_limits::describe(ctx, &files, chunk, device[0])?
            {
                store_limit(name, line);
            }
        }
        Ok(Row {
            name: name.to_string(),
            ratio,
            host: gbs(bytes, host_s),
            host_new: gbs(bytes, new_s),
            into: gbs(bytes, into_s),
            own_mem,
            device,
            auto_first,
            write,
            report,
        })
    }

    /// GB/s of whole-array reads onto `ctx`'s device with `a`'s read options (median of
    /// `--repeat` after a warm-up); with `--reports`, one more read's report.
    fn device_rate(
        a: &ZarrArray,
        ctx: &Context,
        args: &Args,
        name: &str,
        label: &str,
    ) -> devbuf::Result<f64> {
        let dev = BufferPrototype::Device(ctx.ordinal());
        let bytes = a.shape().iter().product::<u64>() * a.dtype().element().size() as u64;
        // Which decoder `Auto` ran in each timed read, and at what rate: its median
        // mixes them when it re-measures a runner-up.
        let mut runs = Vec::new();
        let secs = time(args.repeat, &mut || {
            let mut r = ReadReport::default();
            let t = Instant::now();
            a.read(..).report(&mut r).to(&dev)?;
            ctx.synchronize()?;
            let ran = r.auto.split_whitespace().nth(2).unwrap_or("-");
            runs.push(format!(
                "{} {:.2}",
                ran.trim_end_matches(','),
                gbs(bytes as f64, t.elapsed().as_secs_f64())
            ));
            Ok(())
        })?;
        if label.starts_with("auto") {
            store_line(format!(
                "{label} on {name}, each read (warm-up first; decoder GB/s): {}",
                runs.join(", ")
            ));
        }
        if args.reports {
            let mut report = ReadReport::default();
            a.read(..).report(&mut report).to(&dev)?;
            println!("  {name} {label}: {report}");
        }
        Ok(gbs(bytes as f64, secs))
    }

    /// Every core decoding zstd-1 frames in memory into one reused buffer, GB/s, once
    /// the limits measured it (`host/mem` divides by it).
    static MEM_DECODE: std::sync::OnceLock<f64> = std::sync::OnceLock::new();

    fn print_row(r: &Row) {
        let w = r
            .write
            .map(|w| w.map_or("-".to_string(), |w| format!("{w:.2}")));
        let best = r
            .device
            .iter()
            .copied()
            .filter(|x| !x.is_nan())
            .fold(f64::NAN, f64::max);
        // The best of the decoders a user could name (Auto's target).
        let named = r.device[..3]
            .iter()
            .copied()
            .filter(|x| !x.is_nan())
            .fold(f64::NAN, f64::max);
        println!(
            "| {:<20} | {:>5.2} | {:>6.2} | {:>6.2} | {:>6.2} | {:>5.2} | {:>5.2} | {:>7.2} | {:>7.2} | {:>7.2} | {:>7.2} | {:>7.2} | {:>5.2} | {:>6.2} | {:>6} | {:>6} | {:>5} | {} |",
            r.name,
            r.ratio,
            r.host,
            r.host_new,
            r.into,
            r.host / MEM_DECODE.get().copied().unwrap_or(f64::NAN),
            r.own_mem.1 / r.own_mem.0,
            r.device[0],
            r.device[1],
            r.device[2],
            r.auto_first,
            r.device[3],
            r.device[3] / named,
            best / r.host,
            w[0],
            w[1],
            w[2],
            r.report
        );
    }

    /// The page-locked host -> device rate (PCIe) in this run.
    fn pcie(ctx: &Context) -> devbuf::Result<f64> {
        let n = 256 << 20;
        let h = ctx.allocate_host(n)?;
        let d = ctx.allocate(n)?;
        let s = time(5, &mut || d.copy_from_host(0, &h))?;
        Ok(gbs(n as f64, s))
    }

    /// One 4 MiB piece of this data and its zstd-1 frame.
    fn zstd1_frame() -> devbuf::Result<(Vec<u8>, Vec<u8>)> {
        let raw = field(1024, 1024).to_buffer()?.to_host()?.to_vec();
        let z = zstd::bulk::compress(&raw, 1).map_err(io_err)?;
        Ok((raw, z))
    }

    fn io_err(e: std::io::Error) -> devbuf::Error {
        devbuf::Error::InvalidArgument(e.to_string())
    }

    /// One core's zstd-1 decode and encode rates of this data (GB/s of decoded bytes).
    fn zstd_core_rates() -> devbuf::Result<(f64, f64)> {
        let (raw, z) = zstd1_frame()?;
        let mut out = vec![0u8; raw.len().max(zstd::zstd_safe::compress_bound(raw.len()))];
        let mut d = zstd::bulk::Decompressor::new().map_err(io_err)?;
        let dec = time(5, &mut || {
            d.decompress_to_buffer(&z[..], &mut out[..])
                .map(drop)
                .map_err(io_err)
        })?;
        let mut c = zstd::bulk::Compressor::new(1).map_err(io_err)?;
        let enc = time(5, &mut || {
            c.compress_to_buffer(&raw[..], &mut out[..])
                .map(drop)
                .map_err(io_err)
        })?;
        let n = raw.len() as f64;
        Ok((gbs(n, dec), gbs(n, enc)))
    }

    /// Every core decoding the chunk files of the store at `path` (zstd frames of
    /// `chunk_bytes` decoded bytes each), already read into memory, each into its own
    /// place in one reused output buffer touched before the timing: the host read's work
    /// without reading the files and placing the chunks, on the store's own data (the
    /// limit line's frames are one synthetic frame decoded over and over, its input hot
    /// in the caches). Timed in rounds with `host` (a host read of the store), one of
    /// each per round, so that both see the machine in the same state (the same decode
    /// measured at different moments of one run on the H100 machine differed by up to
    /// 25%). GB/s of decoded bytes, each the median of `repeat` rounds after a warm-up:
    /// the decode and the host read; NaN, with a line saying why, for stores it does not
    /// fit (sharded, edge chunks). Printed with the per-store limits.
    fn own_frames_rate(
        name: &str,
        path: &Path,
        chunk_bytes: usize,
        decoded: usize,
        repeat: usize,
        host: &mut dyn FnMut() -> devbuf::Result<()>,
    ) -> devbuf::Result<(f64, f64)> {
        let files = crate::staging::store_files(path);
        let say = |line: String| store_limit(name, line);
        if files.is_empty() || files.len() * chunk_bytes != decoded {
            say(format!(
                "{} files of {chunk_bytes} decoded bytes each do not make the array's \
                 {decoded} bytes (sharded or edge chunks): host/own not measured",
                files.len()
            ));
            return Ok((f64::NAN, f64::NAN));
        }
        let frames = files
            .iter()
            .map(|(p, _)| std::fs::read(p))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(io_err)?;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut out = vec![1u8; decoded];
        let mut decode = || {
            let jobs = frames
                .iter()
                .map(|f| &f[..])
                .zip(out.chunks_mut(chunk_bytes));
            decode_frames(jobs, cores)
        };
        decode()?;
        host()?;
        let (mut own_s, mut host_s) = (Vec::new(), Vec::new());
        for _ in 0..repeat.max(1) {
            let t = Instant::now();
            decode()?;
            own_s.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            host()?;
            host_s.push(t.elapsed().as_secs_f64());
        }
        let (own, host) = (
            gbs(decoded as f64, median(own_s)),
            gbs(decoded as f64, median(host_s)),
        );
        say(format!(
            "{cores} threads decode its {} frames in memory (each into its place in one \
             reused buffer) at {own:.2} GB/s, the host read {host:.2} in the same rounds \
             (one of each a round, median of {repeat}); `host/own` divides the two",
            files.len()
        ));
        Ok((own, host))
    }

    /// Decodes every `(zstd frame, destination)` of `jobs` with `threads` threads, each
    /// taking the next job when done with one; a frame that does not decode to exactly
    /// its destination's length is an error.
    fn decode_frames<'a>(
        jobs: impl Iterator<Item = (&'a [u8], &'a mut [u8])> + Send,
        threads: usize,
    ) -> devbuf::Result<()> {
        let jobs = std::sync::Mutex::new(jobs);
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads.max(1))
                .map(|_| {
                    s.spawn(|| -> std::io::Result<()> {
                        let mut d = zstd::bulk::Decompressor::new()?;
                        loop {
                            let next = jobs.lock().unwrap_or_else(|p| p.into_inner()).next();
                            let Some((z, dst)) = next else {
                                return Ok(());
                            };
                            let n = d.decompress_to_buffer(z, dst)?;
                            if n != dst.len() {
                                return Err(std::io::Error::other(format!(
                                    "a frame decoded to {n} bytes, not {}",
                                    dst.len()
                                )));
                            }
                        }
                    })
                })
                .collect();
            hs.into_iter().try_for_each(|h| {
                h.join()
                    .map_err(|_| devbuf::Error::InvalidArgument("a decode thread panicked".into()))?
                    .map_err(io_err)
            })
        })
    }

    /// `threads` threads decoding zstd-1 frames of this data (4 MiB each, already in
    /// memory) into one reused `n`-byte buffer, each thread taking the next frame,
    /// GB/s of decoded bytes: what a host read into a reused buffer (and the CPU
    /// decoders of a device read) cannot beat, with every core's output going to memory
    /// at once.
    fn zstd_parallel_rate(n: usize, threads: usize) -> devbuf::Result<f64> {
        let (raw, z) = zstd1_frame()?;
        let frame = raw.len();
        let frames = (n / frame).max(1);
        let mut out = vec![1u8; frames * frame];
        let secs = time(5, &mut || {
            decode_frames(out.chunks_mut(frame).map(|dst| (&z[..], dst)), threads)
        })?;
        Ok(gbs((frames * frame) as f64, secs))
    }

    /// `threads` threads writing `count` new files of `size` bytes into a new directory
    /// under `base` (then rewriting them in place, truncated), GB/s: what a store write
    /// of that many chunk files cannot beat on this file system.
    fn file_writes(
        base: &Path,
        count: usize,
        size: usize,
        threads: usize,
    ) -> devbuf::Result<(f64, f64)> {
        let dir = base.join(format!("devbuf-bench-files-{}", std::process::id()));
        let data: Vec<u8> = (0..size).map(|i| (i * 7 + i / 4093) as u8).collect();
        let io = |e: std::io::Error| {
            devbuf::Error::from_io("the file-write limit", format!("{}: {e}", dir.display()), e)
        };
        let run = |fresh: bool| -> devbuf::Result<f64> {
            if fresh {
                let _ = std::fs::remove_dir_all(&dir);
            }
            std::fs::create_dir_all(&dir).map_err(io)?;
            let next = std::sync::atomic::AtomicUsize::new(0);
            let start = Instant::now();
            std::thread::scope(|sc| {
                let workers: Vec<_> = (0..threads)
                    .map(|_| {
                        sc.spawn(|| -> std::io::Result<()> {
                            loop {
                                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                if i >= count {
                                    return Ok(());
                                }
                                std::fs::write(dir.join(format!("c{i}")), &data)?;
                            }
                        })
                    })
                    .collect();
                workers
                    .into_iter()
                    .try_for_each(|w| w.join().unwrap_or(Ok(())))
            })
            .map_err(io)?;
            Ok(start.elapsed().as_secs_f64())
        };
        let mut new = Vec::new();
        let mut rewrite = Vec::new();
        for _ in 0..3 {
            new.push(run(true)?);
            rewrite.push(run(false)?);
        }
        let _ = std::fs::remove_dir_all(&dir);
        let bytes = (count * size) as f64;
        Ok((gbs(bytes, median(new)), gbs(bytes, median(rewrite))))
    }

    pub(crate) fn main() -> devbuf::Result<()> {
        let gpu = cuda::is_available();
        let a = args(gpu)?;
        let ctx = if gpu { Some(Context::new(0)?) } else { None };
        let ctx = ctx.as_ref();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        println!(
            "bench_zarrs: {cores} cores, {}",
            match ctx {
                Some(c) => format!("device 0: {}", c.properties().name),
                None => "no GPU: host reads only".to_string(),
            }
        );
        if !a.limits {
            return stores(&a, ctx);
        }
        let (core, enc) = zstd_core_rates()?;
        let mem_decode = zstd_parallel_rate(512 << 20, cores)?;
        let _ = MEM_DECODE.set(mem_decode);
        println!(
            "limits in this run: new host memory (allocate + first touch, {cores} threads) {:.2} GB/s, \
             with huge pages asked for {:.2} GB/s",
            fresh_memory(512 << 20, cores)?,
            fresh_huge_memory(512 << 20, cores)?
        );
        print!(
            "limits in this run: zstd-1 decode {core:.2} GB/s per core (x{cores} = {:.1}; \
             {cores} threads decoding in-memory frames into one reused 512 MiB buffer {:.1})",
            core * cores as f64,
            mem_decode
        );
        match ctx {
            Some(c) => println!(", page-locked host->device {:.1} GB/s", pcie(c)?),
            None => println!(),
        }
        if let Some(c) = ctx.filter(|_| devbuf::cuda::nvcomp::library().is_ok()) {
            nvcomp_decode_rates(c)?;
        }
        if a.writes {
            let (new, rewrite) = file_writes(&std::env::temp_dir(), 128, 4 << 20, cores)?;
            println!(
                "limits in this run: {cores} threads writing 128 files of 4 MiB under {}: new \
                 files {new:.2} GB/s, the same files rewritten in place (truncated) {rewrite:.2} \
                 GB/s; zstd-1 encode {enc:.2} GB/s per core (x{cores} = {:.1})",
                std::env::temp_dir().display(),
                enc * cores as f64
            );
            if let Some(c) = ctx.filter(|_| devbuf::cuda::nvcomp::library().is_ok()) {
                nvcomp_compress_rates(c)?;
            }
        }
        stores(&a, ctx)
    }

    /// Runs `call(state, from)` for every start in `calls`, one thread per state taking
    /// the next start until none is left (the nvCOMP limits: a state is a stream and
    /// its batch). The first error, if any.
    fn on_states<S: Send>(
        states: &mut [S],
        calls: &[usize],
        call: &(dyn Fn(&mut S, usize) -> devbuf::Result<()> + Sync),
    ) -> devbuf::Result<()> {
        use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
        let next = AtomicUsize::new(0);
        std::thread::scope(|sc| {
            let hs: Vec<_> = states
                .iter_mut()
                .map(|st| {
                    let next = &next;
                    sc.spawn(move || -> devbuf::Result<()> {
                        while let Some(&from) = calls.get(next.fetch_add(1, Relaxed)) {
                            call(st, from)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            hs.into_iter().try_for_each(|h| h.join().unwrap_or(Ok(())))
        })
    }

    /// nvCOMP's zstd compression of 256 MiB of this data already on the device, by chunk
    /// size: in one call, and in calls of 32 MiB from 4 threads at once (each with its own
    /// stream), as the write path makes them. GB/s of uncompressed bytes, best of 3.
    fn nvcomp_compress_rates(ctx: &Context) -> devbuf::Result<()> {
        use devbuf::cuda::nvcomp::{self, CompressBatch, GpuCodec};
        use devbuf::cuda::{DeviceBuffer, Stream};
        let total = 256usize << 20;
        let raw = field(4096, 16384).to_buffer()?.to_host()?;
        let src = DeviceBuffer::from_slice(ctx, &raw)?;
        let lib = nvcomp::library()?;
        print!(
            "limits in this run: nvCOMP zstd compression, GB/s (one call of 256 MiB / calls of 32 MiB from 4 threads):"
        );
        for chunk in [64usize << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20] {
            let cap = lib
                .max_compressed_chunk_size(GpuCodec::Zstd, chunk)?
                .next_multiple_of(256);
            let n = total / chunk;
            let dst = ctx.allocate(n * cap)?;
            let ranges = |from: usize, count: usize| {
                let inputs: Vec<_> = (from..from + count)
                    .map(|i| i * chunk..(i + 1) * chunk)
                    .collect();
                let outputs: Vec<_> = (from..from + count)
                    .map(|i| i * cap..(i + 1) * cap)
                    .collect();
                (inputs, outputs)
            };
            let stream = Stream::new(ctx)?;
            let mut batch = CompressBatch::new(ctx, None)?;
            let (inputs, outputs) = ranges(0, n);
            let one = time(3, &mut || {
                batch
                    .compress(&stream, GpuCodec::Zstd, &src, &inputs, &dst, &outputs)
                    .map(drop)
            })?;
            let per_call = ((32usize << 20) / chunk).max(1);
            let calls: Vec<usize> = (0..n).step_by(per_call).collect();
            let mut states: Vec<(Stream, CompressBatch)> = (0..4)
                .map(|_| Ok((Stream::new(ctx)?, CompressBatch::new(ctx, None)?)))
                .collect::<devbuf::Result<_>>()?;
            let split = time(3, &mut || {
                on_states(&mut states, &calls, &|(st, b), from| {
                    let (i, o) = ranges(from, per_call.min(n - from));
                    b.compress(st, GpuCodec::Zstd, &src, &i, &dst, &o).map(drop)
                })
            })?;
            print!(
                " {} KiB {:.2} / {:.2};",
                chunk >> 10,
                gbs(total as f64, one),
                gbs(total as f64, split)
            );
        }
        println!();
        Ok(())
    }

    /// nvCOMP's zstd decompression of 512 MiB of this data, compressed by nvCOMP and
    /// already on the device, by chunk size: in one call, and in calls of 128 MiB and of
    /// 32 MiB (decoded) from 4 threads at once, each with its own stream (the read
    /// engine's claims). GB/s of decoded bytes, median of 3.
    fn nvcomp_decode_rates(ctx: &Context) -> devbuf::Result<()> {
        use devbuf::cuda::nvcomp::{self, CompressBatch, DecompressBatch, GpuCodec};
        use devbuf::cuda::{DeviceBuffer, Stream};
        let total = 512usize << 20;
        let raw = field(8192, 16384).to_buffer()?.to_host()?;
        let src = DeviceBuffer::from_slice(ctx, &raw)?;
        let lib = nvcomp::library()?;
        print!(
            "limits in this run: nvCOMP zstd decode on the device, GB/s (one call of 512 MiB / \
             calls of 128 MiB from 4 threads / calls of 32 MiB from 4 threads):"
        );
        for chunk in [64usize << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20] {
            let cap = lib
                .max_compressed_chunk_size(GpuCodec::Zstd, chunk)?
                .next_multiple_of(256);
            let n = total / chunk;
            let packed = ctx.allocate(n * cap)?;
            let stream = Stream::new(ctx)?;
            let plain: Vec<_> = (0..n).map(|i| i * chunk..(i + 1) * chunk).collect();
            let slots: Vec<_> = (0..n).map(|i| i * cap..(i + 1) * cap).collect();
            let sizes = CompressBatch::new(ctx, None)?.compress(
                &stream,
                GpuCodec::Zstd,
                &src,
                &plain,
                &packed,
                &slots,
            )?;
            let stored: Vec<_> = (0..n).map(|i| i * cap..i * cap + sizes[i]).collect();
            let dst = ctx.allocate(total)?;
            let mut rates = Vec::new();
            for (call_bytes, threads) in [(total, 1usize), (128 << 20, 4), (32 << 20, 4)] {
                let per = (call_bytes / chunk).max(1);
                let calls: Vec<usize> = (0..n).step_by(per).collect();
                let mut states: Vec<(Stream, DecompressBatch)> = (0..threads)
                    .map(|_| Ok((Stream::new(ctx)?, DecompressBatch::new(ctx, None)?)))
                    .collect::<devbuf::Result<_>>()?;
                let secs = time(3, &mut || {
                    on_states(&mut states, &calls, &|(st, b), from| {
                        let to = (from + per).min(n);
                        let (i, o) = (&stored[from..to], &plain[from..to]);
                        b.decompress(st, GpuCodec::Zstd, &packed, i, &dst, o)
                    })
                })?;
                rates.push(format!("{:.1}", gbs(total as f64, secs)));
            }
            print!(" {} KiB {};", chunk >> 10, rates.join(" / "));
        }
        println!();
        Ok(())
    }

    /// Adds a line to the per-store limits printed after the table.
    fn store_limit(name: &str, line: String) {
        store_line(format!("limits for {name}: {line}"));
    }

    /// A line printed after the table (with the per-store limits, in order).
    fn store_line(line: String) {
        STORE_LIMITS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line);
    }

    /// The host read's stages on the store at `path` (whole zstd chunk files of
    /// `chunk_bytes`) at 1, 2, 4, ... threads up to every core, each beside the engine's
    /// host read of `a` with as many threads: where the read stops scaling with the
    /// cores, and which stage does (see `host_stages`).
    fn host_stage_lines(
        name: &str,
        a: &mut ZarrArray,
        path: &Path,
        chunk_bytes: usize,
        args: &Args,
    ) -> devbuf::Result<()> {
        use crate::host_stages::{Stage, Store};
        let files = crate::staging::store_files(path);
        let decoded = a.shape().iter().product::<u64>() as usize * a.dtype().element().size();
        if files.is_empty() || files.len() * chunk_bytes != decoded {
            store_line(format!(
                "host stages for {name}: not whole chunk files (sharded or edge chunks)"
            ));
            return Ok(());
        }
        let mut store = Store::new(files, chunk_bytes).map_err(io_err)?;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let counts: Vec<usize> =
            std::iter::successors(Some(1usize), |&t| (t < cores).then(|| (t * 2).min(cores)))
                .collect();
        let host = BufferPrototype::Host;
        for t in counts {
            let mut cells = Vec::new();
            let mut limit = f64::NAN;
            for stage in Stage::ALL {
                let s = time(args.repeat, &mut || store.run(stage, t).map_err(io_err))?;
                let r = gbs(store.decoded() as f64, s);
                if stage == Stage::Decode {
                    limit = r;
                }
                cells.push(format!("{} {r:.2}", stage.label()));
            }
            a.set_read_options(ReadOptions {
                threads: Some(t),
                ..args.read.clone()
            })?;
            let s = time(args.repeat, &mut || a.read(..).to(&host).map(drop))?;
            let engine = gbs(decoded as f64, s);
            cells.push(format!(
                "engine {engine:.2} ({:.2} of decode in memory)",
                engine / limit
            ));
            store_line(format!(
                "host stages for {name}, {t} threads (GB/s): {}",
                cells.join(", ")
            ));
        }
        a.set_read_options(args.read.clone())
    }

    /// Per-store limits of the device path, printed after the table: lines gathered by
    /// [`store_limits`].
    static STORE_LIMITS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

    /// The limits of a pipelined device read of the store at `path` (chunk files of
    /// `chunk_bytes` decoded bytes each, zstd), measured on its own files: every core
    /// reading them into page-locked memory (each file at its own place), and nvCOMP
    /// decoding its frames already on the device in one call of all of them, one chunk
    /// alone, and one chunk per multiprocessor. A read cannot end before its last chunk
    /// is read and then decoded: `decoded / (stored / read rate + one chunk's latency)`
    /// bounds it. `None` (and a line saying why) for stores this does not fit: sharded
    /// ones (inner chunks inside shard files), partial edge chunks, other codecs.
    fn store_limits(
        ctx: &Context,
        name: &str,
        path: &Path,
        chunk_bytes: usize,
        decoded: usize,
        cores: usize,
    ) -> devbuf::Result<()> {
        use devbuf::cuda::nvcomp::GpuCodec;
        let files = crate::staging::store_files(path);
        let say = |line: String| store_limit(name, line);
        if files.is_empty() || files.len() * chunk_bytes != decoded {
            say(format!(
                "{} files of {} decoded bytes each do not make the array's {decoded} bytes \
                 (sharded or edge chunks): not measured",
                files.len(),
                chunk_bytes
            ));
            return Ok(());
        }
        let (offsets, at) = crate::staging::offsets(&files);
        let stored: usize = files.iter().map(|f| f.1).sum();
        let mut staging = ctx.allocate_host(at.max(1))?;
        let read_s = time(5, &mut || {
            crate::staging::read_into(&mut staging, &files, &offsets, cores).map_err(io_err)
        })?;
        say(other_read_paths(
            ctx, &files, &staging, &offsets, cores, read_s,
        )?);
        let packed = ctx.allocate(at.max(1))?;
        let copy_s = time(5, &mut || packed.copy_from_host(0, &staging[..at]))?;
        // Each group of files (a file alone, or consecutive files of 2 or 8 MiB stored)
        // copied to the device by the thread that read it, right after the read, while
        // its bytes are still in the caches (one DMA of page-locked memory).
        let mut each = Vec::new();
        for group in [0usize, 2 << 20, 8 << 20] {
            let s = time(5, &mut || {
                let then = |first: usize, _: usize, bytes: &[u8]| {
                    packed
                        .copy_from_host(offsets[first], bytes)
                        .map_err(|e| std::io::Error::other(e.to_string()))
                };
                crate::staging::read_into_each(&mut staging, &files, &offsets, cores, group, &then)
                    .map_err(io_err)
            })?;
            each.push(format!(
                "{} {:.1} ms",
                match group {
                    0 => "each file".to_string(),
                    g => format!("groups of {} MiB", g >> 20),
                },
                s * 1e3
            ));
        }
        drop(staging);
        let n = files.len();
        let inputs: Vec<_> = (0..n)
            .map(|i| offsets[i]..offsets[i] + files[i].1)
            .collect();
        let calls =
            crate::nvcomp_calls::time_calls(ctx, GpuCodec::Zstd, &packed, &inputs, chunk_bytes, 5);
        let (all, one, per_sm, sms) = match calls {
            Ok(c) => (c.all, c.one, c.per_sm, c.sms),
            Err(e) => {
                say(format!(
                    "nvCOMP does not decode its chunk files as zstd frames ({e})"
                ));
                return Ok(());
            }
        };
        // The two stages overlapped as a pipeline of `k` pieces could at best: every
        // core but one reads piece after piece, one thread copies each piece to the
        // device once read and queues its nvCOMP call on a stream of its own.
        let mut overlapped = Vec::new();
        for k in [1usize, 2, 4, 8] {
            let (s, queued) = overlapped_read(ctx, &files, &offsets, at, chunk_bytes, k, cores)?;
            overlapped.push(format!(
                "{k} pieces {:.1} GB/s (last call queued at {:.1} ms)",
                gbs(decoded as f64, s),
                queued * 1e3
            ));
        }
        let read_ms = read_s * 1e3;
        let bound = gbs(decoded as f64, read_s + one);
        say(format!(
            "{n} files, {:.0} MiB stored; {cores} threads read them into page-locked memory at \
             {:.1} GB/s stored ({read_ms:.1} ms); nvCOMP on these frames on the device: all in \
             one call {:.1} GB/s ({:.1} ms), one chunk alone {:.2} ms, {sms} chunks (one per \
             multiprocessor) {:.2} ms; so no pipelined read of the whole array beats \
             {decoded} B / ({read_ms:.1} + {:.2} ms) = {bound:.1} GB/s; one copy of the \
             stored bytes from page-locked memory to the device {:.1} ms (read, then copy: \
             {:.1} ms; copied by their reader right after its read: {}); both \
             stages overlapped in pieces, each read by {} threads, copied \
             and queued on a stream of its own: {}",
            stored as f64 / (1u64 << 20) as f64,
            gbs(stored as f64, read_s),
            gbs(decoded as f64, all),
            all * 1e3,
            one * 1e3,
            per_sm * 1e3,
            one * 1e3,
            copy_s * 1e3,
            read_ms + copy_s * 1e3,
            each.join(", "),
            cores.saturating_sub(1).max(1),
            overlapped.join(", "),
        ));
        Ok(())
    }

    /// The read stage by other means than the readers' buffered `pread` (see
    /// `read_paths`): `O_DIRECT` and io_uring into page-locked memory, cuFile into device
    /// memory. `want` holds the files at `offsets` as the readers read them (in
    /// `read_s`); each path's bytes are checked against it before it is timed, and a path
    /// that fails says why in its place.
    fn other_read_paths(
        ctx: &Context,
        files: &[(PathBuf, usize)],
        want: &[u8],
        offsets: &[usize],
        cores: usize,
        read_s: f64,
    ) -> devbuf::Result<String> {
        use crate::read_paths::{self as rp, CuFile};
        let stored: usize = files.iter().map(|f| f.1).sum();
        let rate = |s: f64| {
            format!(
                "{:.1} ms ({:.1} GB/s stored)",
                s * 1e3,
                gbs(stored as f64, s)
            )
        };
        let (aligned, at) = crate::staging::offsets_aligned(files, rp::DIRECT_ALIGN);
        let mut host = ctx.allocate_host(at)?;
        // Checks one run's bytes, then times five.
        type HostRead<'a> = dyn FnMut(&mut [u8], &[usize]) -> std::io::Result<()> + 'a;
        let mut host_path = |f: &mut HostRead<'_>, places: &[usize]| -> String {
            host.fill(0);
            if let Err(e) = f(&mut host[..], places) {
                return format!("failed: {e}");
            }
            if let Err(e) = rp::same_files(files, want, offsets, &host[..], places) {
                return format!("wrong bytes: {e}");
            }
            match time(5, &mut || f(&mut host[..], places).map_err(io_err)) {
                Ok(s) => rate(s),
                Err(e) => format!("failed: {e}"),
            }
        };
        let direct = host_path(&mut |d, o| rp::direct(d, files, o, cores), &aligned);
        let uring_all = host_path(&mut |d, o| rp::uring(d, files, o, cores, 8), offsets);
        let uring_one = host_path(&mut |d, o| rp::uring(d, files, o, 1, 64), offsets);
        let cufile = match CuFile::open() {
            Err(e) => format!("not measured: {e}"),
            Ok(cf) => {
                let dev = ctx.allocate(at)?;
                let one = |direct: bool| -> String {
                    let run =
                        || cf.read(ctx.as_raw(), dev.address(), files, &aligned, cores, direct);
                    if let Err(e) = run() {
                        return format!("failed: {e}");
                    }
                    let back = match dev.to_host() {
                        Ok(b) => b,
                        Err(e) => return format!("failed: {e}"),
                    };
                    if let Err(e) = rp::same_files(files, want, offsets, &back[..], &aligned) {
                        return format!("wrong bytes: {e}");
                    }
                    match time(5, &mut || run().map_err(io_err)) {
                        Ok(s) => rate(s),
                        Err(e) => format!("failed: {e}"),
                    }
                };
                format!(
                    "buffered files {}, O_DIRECT files {}",
                    one(false),
                    one(true)
                )
            }
        };
        Ok(format!(
            "the read stage by other means ({cores} threads unless said): the readers' \
             buffered pread into page-locked memory {}; O_DIRECT pread into page-locked \
             memory {direct}; io_uring, 8 reads in flight per thread {uring_all}; \
             io_uring, one thread, 64 in flight {uring_one}; cuFile straight into device \
             memory ({}): {cufile}",
            rate(read_s),
            if rp::has_nvidia_fs() {
                "nvidia-fs loaded: GPUDirect Storage possible"
            } else {
                "no nvidia-fs driver: its compatibility mode"
            }
        ))
    }

    /// One timed pipelined read of `files` (staged at `offsets`, `at` bytes in all) onto
    /// the device in `k` pieces of about equal file counts, decoded by nvCOMP into
    /// chunks of `chunk_bytes`: `cores - 1` threads read the pieces in turn into
    /// page-locked memory while one thread copies each read piece to the device and
    /// queues its call on a stream of its own. Returns the median seconds of the whole
    /// and of the time the last call was queued at.
    fn overlapped_read(
        ctx: &Context,
        files: &[(PathBuf, usize)],
        offsets: &[usize],
        at: usize,
        chunk_bytes: usize,
        k: usize,
        cores: usize,
    ) -> devbuf::Result<(f64, f64)> {
        use devbuf::cuda::Stream;
        use devbuf::cuda::nvcomp::{DecompressBatch, GpuCodec};
        let n = files.len();
        let k = k.clamp(1, n);
        let bounds: Vec<usize> = (0..=k).map(|p| p * n / k).collect();
        let mut staging = ctx.allocate_host(at.max(1))?;
        let packed = ctx.allocate(at.max(1))?;
        let dst = ctx.allocate(n * chunk_bytes)?;
        let streams = (0..k)
            .map(|_| Stream::new(ctx))
            .collect::<devbuf::Result<Vec<_>>>()?;
        let mut batches = (0..k)
            .map(|p| DecompressBatch::new(ctx, Some(&streams[p])))
            .collect::<devbuf::Result<Vec<_>>>()?;
        let readers = cores.saturating_sub(1).max(1);
        let mut queued_at = Vec::new();
        let whole = time(5, &mut || {
            let t0 = Instant::now();
            // Piece p's bytes of the staging buffer, disjoint.
            let mut pieces: Vec<(usize, &mut [u8])> = Vec::with_capacity(k);
            let mut rest: &mut [u8] = &mut staging[..];
            let mut base = 0usize;
            for p in 0..k {
                let (a, b) = (bounds[p], bounds[p + 1]);
                let end = if b == n { at } else { offsets[b] };
                let (piece, tail) = std::mem::take(&mut rest).split_at_mut(end - base);
                pieces.push((offsets[a], piece));
                rest = tail;
                base = end;
            }
            let (tx, rx) = std::sync::mpsc::channel::<(usize, usize, &[u8])>();
            let bounds = &bounds;
            let last = std::thread::scope(|s| -> devbuf::Result<f64> {
                let reader = s.spawn(move || -> std::io::Result<()> {
                    for (p, (start, piece)) in pieces.into_iter().enumerate() {
                        let (a, b) = (bounds[p], bounds[p + 1]);
                        let rel: Vec<usize> = offsets[a..b].iter().map(|o| o - start).collect();
                        crate::staging::read_into(piece, &files[a..b], &rel, readers)?;
                        let piece: &[u8] = piece;
                        if tx.send((p, start, piece)).is_err() {
                            break;
                        }
                    }
                    Ok(())
                });
                let mut last = 0.0;
                for (p, start, piece) in rx {
                    packed.copy_from_host(start, piece)?;
                    let (a, b) = (bounds[p], bounds[p + 1]);
                    let inputs: Vec<_> = (a..b)
                        .map(|i| offsets[i]..offsets[i] + files[i].1)
                        .collect();
                    let outputs: Vec<_> = (a..b)
                        .map(|i| i * chunk_bytes..(i + 1) * chunk_bytes)
                        .collect();
                    batches[p].queue_decompress(
                        &streams[p],
                        GpuCodec::Zstd,
                        &packed,
                        &inputs,
                        &dst,
                        &outputs,
                        &[],
                        &[],
                    )?;
                    last = t0.elapsed().as_secs_f64();
                }
                reader
                    .join()
                    .map_err(|_| devbuf::Error::invalid("the reader thread panicked"))?
                    .map_err(io_err)?;
                Ok(last)
            })?;
            for b in batches.iter_mut() {
                b.finish()?;
            }
            queued_at.push(last);
            Ok(())
        })?;
        Ok((whole, median(queued_at)))
    }

    /// Times every store asked for, then prints the per-store limits measured.
    fn stores(a: &Args, ctx: Option<&Context>) -> devbuf::Result<()> {
        let r = table(a, ctx);
        let lines = std::mem::take(&mut *STORE_LIMITS.lock().unwrap_or_else(|p| p.into_inner()));
        if !lines.is_empty() {
            println!();
        }
        for l in lines {
            println!("{l}");
        }
        r
    }

    /// The table: a row per store asked for.
    fn table(a: &Args, ctx: Option<&Context>) -> devbuf::Result<()> {
        println!(
            "\n| store | ratio | host | host new | host into | host/mem | host/own | dev cpu | dev gpu | dev both | dev auto (first reads) | dev auto | auto/best | best/host | write cpu | write gpu | gpu ratio | read engine (both) |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        let wanted = |n: &str| a.only.as_ref().is_none_or(|o| o.iter().any(|x| x == n));
        if let Some(m) = &a.manifest {
            let text = std::fs::read_to_string(m).map_err(|e| {
                devbuf::Error::from_io("reading the manifest", format!("{}: {e}", m.display()), e)
            })?;
            let v: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| devbuf::Error::Malformed(format!("{}: {e}", m.display())))?;
            let base = m.parent().unwrap_or(Path::new("."));
            let stores = v
                .get("stores")
                .and_then(|s| s.as_array())
                .cloned()
                .unwrap_or_default();
            for s in stores {
                let name = s.get("name").and_then(|n| n.as_str()).unwrap_or("?");
                let rel = s.get("path").and_then(|n| n.as_str()).unwrap_or(name);
                if !wanted(name) {
                    continue;
                }
                let path = base.join(rel);
                match ZarrArray::open(&path)
                    .and_then(|mut arr| measure(name, &mut arr, &path, a, ctx, None))
                {
                    Ok(r) => print_row(&r),
                    Err(e) => println!("| {name} | error: {e} |"),
                }
            }
            return Ok(());
        }
        if !a.stores.is_empty() {
            for path in &a.stores {
                let mut arr = ZarrArray::open(path)?;
                print_row(&measure(
                    &path.display().to_string(),
                    &mut arr,
                    path,
                    a,
                    ctx,
                    None,
                )?);
            }
            return Ok(());
        }
        let cols = 4096u64;
        let rows = (a.mib * (1 << 20) / 4 / cols).max(2048);
        let value = field(rows as usize, cols as usize);
        let dir = a.keep.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!("devbuf-bench-zarrs-{}", std::process::id()))
        });
        if a.keep.is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        for (name, chunk, comp, inner) in sweep() {
            if !wanted(&name) {
                continue;
            }
            let mut spec =
                ArraySpec::new(&[rows, cols], &chunk, Dtype::FLOAT32).with_compressor(comp);
            if let Some(i) = inner {
                spec = spec.with_subchunks(&i);
            }
            if matches!(comp, Compressor::Zlib { .. }) {
                spec = spec.with_crc32c();
            }
            let path = dir.join(&name);
            let _ = std::fs::remove_dir_all(&path);
            let mut arr = ZarrArray::create(&path, &spec)?;
            arr.write_subset(&[0, 0], &value)?;
            let out = dir.join(format!("{name}-written"));
            print_row(&measure(
                &name,
                &mut arr,
                &path,
                a,
                ctx,
                Some((&spec, &out)),
            )?);
            if a.keep.is_none() {
                let _ = std::fs::remove_dir_all(&path);
            }
        }
        if a.keep.is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        Ok(())
    }
}
