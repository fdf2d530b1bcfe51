//! Multi-device read benchmark: one store read onto 1, 2, 4, ... GPUs with
//! `ZarrArray::read(..).spread(..)`, partitioned along axis 0 and replicated, against the
//! limits measured in the same run.
//!
//! ```text
//! cargo run --release --features zarr --example bench_spread -- [--mib 2048] [--chunk-kib 1024]
//!     [--repeat 5] [--decoders gpu,auto] [--store PATH] [--keep DIR] [--reports]
//! ```
//!
//! Without `--store` it writes its own store first: float32 (a smooth field plus noise,
//! quantised, as `bench_zarrs`), zstd-1 with a crc32c checksum (so `Decoder::Auto` may
//! send chunks to nvCOMP), `--chunk-kib` KiB chunks of 256 rows. Figures are GB/s of
//! the selection's decoded bytes (a replicated read delivers `devices` times that;
//! its own column), median of `--repeat` runs after a warm-up, page cache warm.
//!
//! Limits in the same run (after the reads), per device alone and on every device at once: page-locked
//! host -> device copies (PCIe), nvCOMP's zstd decode of 1 MiB chunks already on the
//! device; the host's memory bandwidth (every core copying), every core decoding
//! zstd-1 frames in memory, and peer copies between devices 0 and 1.

#[cfg(not(feature = "zarr"))]
fn main() {
    println!("bench_spread: built without the `zarr` feature; run it with --features zarr");
}

#[cfg(feature = "zarr")]
fn main() {
    if let Err(e) = bench::main() {
        eprintln!("bench_spread: error: {e}");
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
mod bench {
    use std::ops::Range;
    use std::path::PathBuf;

    use clap::Parser;
    use devbuf::cuda::{self, Context, DeviceBuffer, Stream};
    use devbuf::zarr::{ArraySpec, Compressor, Decoder, Dtype, ReadOptions, Spread, ZarrArray};

    use crate::field::field;
    use crate::stats::{gbs, time_median};

    /// One store read onto several GPUs (see the file's documentation).
    #[derive(Parser)]
    struct Args {
        /// MiB of float32 in the own store.
        #[arg(long, default_value_t = 2048)]
        mib: u64,
        /// KiB of one chunk of the own store (256 rows of `KiB` float32 columns).
        #[arg(long, default_value_t = 1024)]
        chunk_kib: u64,
        /// Timed runs per figure (after one warm-up).
        #[arg(long, default_value_t = 5)]
        repeat: usize,
        /// Device counts read onto (default 1, 2, 4, ... up to the machine's).
        #[arg(long, value_delimiter = ',')]
        devices: Vec<usize>,
        /// Decoders timed: gpu, auto, cpu, both (comma-separated).
        #[arg(long, default_value = "gpu,auto", value_delimiter = ',')]
        decoders: Vec<String>,
        /// Read this store instead of writing one.
        #[arg(long)]
        store: Option<PathBuf>,
        /// Write the own store into this directory and keep it.
        #[arg(long)]
        keep: Option<PathBuf>,
        /// Print each read's report.
        #[arg(long)]
        reports: bool,
        /// Read threads of the whole read (`ReadOptions::threads`; each device gets an
        /// equal share). Default: one per core.
        #[arg(long)]
        threads: Option<usize>,
        /// Skip the limits (measured after the reads otherwise).
        #[arg(long)]
        no_limits: bool,
    }

    fn decoder(name: &str) -> devbuf::Result<Decoder> {
        Ok(match name {
            "gpu" => Decoder::Gpu,
            "auto" => Decoder::Auto,
            "cpu" => Decoder::Cpu,
            "both" => Decoder::Both,
            other => {
                return Err(devbuf::Error::InvalidArgument(format!(
                    "--decoders: unknown decoder {other:?} (valid: gpu, auto, cpu, both)"
                )));
            }
        })
    }

    pub(crate) fn main() -> devbuf::Result<()> {
        let args = Args::parse();
        let count = cuda::device_count();
        if count == 0 {
            println!("bench_spread: SKIPPED: no CUDA device on this machine");
            return Ok(());
        }
        let all: Vec<Context> = (0..count)
            .map(Context::new)
            .collect::<devbuf::Result<_>>()?;
        let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
        println!(
            "bench_spread: {count} x {} ({} cores), {}",
            all[0].properties().name,
            cores,
            chrono_free_date()
        );
        let dir;
        let path = match (&args.store, &args.keep) {
            (Some(p), _) => p.clone(),
            (None, keep) => {
                dir = keep.clone().unwrap_or_else(|| {
                    std::env::temp_dir().join(format!("devbuf-bench-spread-{}", std::process::id()))
                });
                let p = dir.join("store.zarr");
                write_store(&p, args.mib, args.chunk_kib)?;
                p
            }
        };
        let mut a = ZarrArray::open(&path)?;
        let whole: Vec<Range<u64>> = a.shape().iter().map(|&n| 0..n).collect();
        let bytes = a.shape().iter().product::<u64>() as f64 * a.dtype().element().size() as f64;
        println!(
            "\nstore {} ({:.0} MiB, shape {:?}, chunks {:?}, {:?})",
            path.display(),
            bytes / (1u64 << 20) as f64,
            a.shape(),
            a.metadata().chunk_shape,
            a.dtype()
        );
        println!(
            "\n| layout | devices | decoder | GB/s | x one device | delivered GB/s | per device GB/s (own part) |"
        );
        println!("|---|---|---|---|---|---|---|");
        let mut counts = vec![1usize];
        while counts.last().is_some_and(|&n| n * 2 <= count) {
            counts.push(counts.last().copied().unwrap_or(1) * 2);
        }
        if !counts.contains(&count) {
            counts.push(count);
        }
        if !args.devices.is_empty() {
            counts = args
                .devices
                .iter()
                .copied()
                .filter(|&n| n >= 1 && n <= count)
                .collect();
        }
        for name in &args.decoders {
            let d = decoder(name)?;
            a.set_read_options(ReadOptions {
                decoder: d,
                threads: args.threads,
                ..ReadOptions::default()
            })?;
            for (label, spread) in [
                ("partitioned", Spread::Partition { axis: 0 }),
                ("replicated", Spread::Replicate),
            ] {
                let mut one = None;
                for &n in &counts {
                    let devs = &all[..n];
                    let mut last = None;
                    let secs = time_median(args.repeat, || {
                        last = Some(a.read(&whole).spread(devs, spread)?);
                        Ok::<(), devbuf::Error>(())
                    })?;
                    let rate = gbs(bytes, secs);
                    let base = *one.get_or_insert(rate);
                    let per: Vec<String> = last
                        .as_ref()
                        .map(|r| {
                            r.parts
                                .iter()
                                .map(|p| {
                                    let own = p.report.decoded_bytes as f64;
                                    format!(
                                        "{}: {:.1}",
                                        p.device,
                                        gbs(own, p.report.elapsed_us.max(1) as f64 / 1e6)
                                    )
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    let delivered = if matches!(spread, Spread::Replicate) {
                        rate * n as f64
                    } else {
                        rate
                    };
                    println!(
                        "| {label} | {n} | {name} | {rate:.2} | {:.2} | {delivered:.2} | {} |",
                        rate / base,
                        per.join(", ")
                    );
                    if args.reports
                        && let Some(r) = &last
                    {
                        println!("{r}");
                        for p in &r.parts {
                            println!("  device {}: {}", p.device, p.report);
                        }
                    }
                }
            }
        }
        if !args.no_limits {
            println!();
            store_files_limit(&path, bytes, cores, &all)?;
        }
        if args.store.is_none() && args.keep.is_none() {
            let _ = std::fs::remove_dir_all(path.parent().unwrap_or(&path));
        }
        if !args.no_limits {
            println!();
            limits(&all, cores)?;
        }
        Ok(())
    }

    /// Today's date from the system clock (UTC), without a date crate.
    fn chrono_free_date() -> String {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let days = secs / 86_400;
        // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
        let z = days as i64 + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = doy - (153 * mp + 2) / 5 + 1;
        let m = if mp < 10 { mp + 3 } else { mp - 9 };
        let y = yoe + era * 400 + i64::from(m <= 2);
        format!("{y:04}-{m:02}-{d:02}")
    }

    /// The own store: float32 field, zstd-1 + crc32c, `chunk_kib` KiB chunks of 256 rows.
    fn write_store(path: &std::path::Path, mib: u64, chunk_kib: u64) -> devbuf::Result<()> {
        let cols = (chunk_kib * 1024 / 4 / 256).max(1);
        let rows = (mib << 20) / 4 / cols;
        let rows = rows.next_multiple_of(256);
        let spec = ArraySpec::new(&[rows, cols], &[256, cols], Dtype::FLOAT32)
            .with_compressor(Compressor::Zstd { level: 1 })
            .with_crc32c();
        if path.exists() {
            std::fs::remove_dir_all(path)
                .map_err(|e| devbuf::Error::InvalidArgument(e.to_string()))?;
        }
        let a = ZarrArray::create(path, &spec)?;
        let band = 8192u64.min(rows);
        let mut at = 0;
        while at < rows {
            let n = band.min(rows - at);
            a.write_subset(&[at, 0], &field(n as usize, cols as usize))?;
            at += n;
        }
        Ok(())
    }

    /// Runs `f` once per device on its own thread, at the same time; the slowest's
    /// seconds over `repeat` runs (median).
    fn all_at_once(
        devs: &[Context],
        repeat: usize,
        f: &(dyn Fn(&Context) -> devbuf::Result<()> + Sync),
    ) -> devbuf::Result<f64> {
        time_median(repeat, || {
            std::thread::scope(|s| {
                let hs: Vec<_> = devs.iter().map(|c| s.spawn(move || f(c))).collect();
                hs.into_iter().try_for_each(|h| {
                    h.join().map_err(|_| {
                        devbuf::Error::InvalidArgument("a device thread panicked".into())
                    })?
                })
            })
        })
    }

    fn limits(all: &[Context], cores: usize) -> devbuf::Result<()> {
        use devbuf::cuda::nvcomp::{self, CompressBatch, DecompressBatch, GpuCodec};
        let n = 512usize << 20;
        // PCIe: page-locked host -> device, per device alone and all at once.
        let bufs = all
            .iter()
            .map(|c| Ok((c.allocate_host(n)?, c.allocate(n)?)))
            .collect::<devbuf::Result<Vec<_>>>()?;
        let mut alone = Vec::new();
        for (h, d) in &bufs {
            alone.push(gbs(n as f64, time_median(5, || d.copy_from_host(0, h))?));
        }
        let together = all_at_once(all, 5, &|c| {
            let (h, d) = &bufs[c.ordinal()];
            d.copy_from_host(0, h)
        })?;
        println!(
            "limits in this run: page-locked host -> device GB/s, each device alone: {}; all {} at once: {:.1} in total",
            fmt_list(&alone),
            all.len(),
            gbs((n * all.len()) as f64, together)
        );
        drop(bufs);
        // nvCOMP zstd decode of 1 MiB chunks already on the device.
        if nvcomp::library().is_ok() {
            let raw = field(8192, 16384).to_buffer()?.to_host()?;
            let total = raw.len();
            let chunk = 1usize << 20;
            let k = total / chunk;
            let lib = nvcomp::library()?;
            let cap = lib
                .max_compressed_chunk_size(GpuCodec::Zstd, chunk)?
                .next_multiple_of(256);
            let plain: Vec<_> = (0..k).map(|i| i * chunk..(i + 1) * chunk).collect();
            let slots: Vec<_> = (0..k).map(|i| i * cap..(i + 1) * cap).collect();
            let states = all
                .iter()
                .map(|c| {
                    let src = DeviceBuffer::from_slice(c, &raw)?;
                    let packed = c.allocate(k * cap)?;
                    let stream = Stream::new(c)?;
                    let sizes = CompressBatch::new(c, None)?.compress(
                        &stream,
                        GpuCodec::Zstd,
                        &src,
                        &plain,
                        &packed,
                        &slots,
                    )?;
                    let stored: Vec<_> = (0..k).map(|i| i * cap..i * cap + sizes[i]).collect();
                    let dst = c.allocate(total)?;
                    Ok((
                        stream,
                        std::sync::Mutex::new(DecompressBatch::new(c, None)?),
                        packed,
                        stored,
                        dst,
                    ))
                })
                .collect::<devbuf::Result<Vec<_>>>()?;
            let decode = |c: &Context| -> devbuf::Result<()> {
                let (st, b, packed, stored, dst) = &states[c.ordinal()];
                let mut b = b.lock().unwrap_or_else(|p| p.into_inner());
                b.decompress(st, GpuCodec::Zstd, packed, stored, dst, &plain)
            };
            let mut alone = Vec::new();
            for c in all {
                alone.push(gbs(total as f64, time_median(3, || decode(c))?));
            }
            let together = all_at_once(all, 3, &decode)?;
            println!(
                "limits in this run: nvCOMP zstd-1 decode of 1 MiB chunks on the device GB/s, each alone: {}; all at once: {:.1} in total",
                fmt_list(&alone),
                gbs((total * all.len()) as f64, together)
            );
        } else {
            println!("limits in this run: nvCOMP not available, no nvCOMP row");
        }
        // Host memory: every core copying 1 GiB; every core decoding zstd-1 frames.
        let src = vec![1u8; 1 << 30];
        let mut dst = vec![0u8; 1 << 30];
        let per = (1usize << 30).div_ceil(cores);
        let copy = time_median(5, || {
            std::thread::scope(|s| {
                for (d, sr) in dst.chunks_mut(per).zip(src.chunks(per)) {
                    s.spawn(move || d.copy_from_slice(sr));
                }
            });
            Ok::<(), devbuf::Error>(())
        })?;
        let raw = field(1024, 1024).to_buffer()?.to_host()?;
        let z = zstd::bulk::compress(&raw, 1)
            .map_err(|e| devbuf::Error::InvalidArgument(e.to_string()))?;
        let frame = raw.len();
        let frames = (1usize << 30) / frame;
        let per_thread = frames.div_ceil(cores);
        let decode = time_median(3, || {
            std::thread::scope(|s| {
                let hs: Vec<_> = dst
                    .chunks_mut(per_thread * frame)
                    .map(|part| {
                        let z = &z;
                        s.spawn(move || -> std::io::Result<()> {
                            let mut d = zstd::bulk::Decompressor::new()?;
                            for out in part.chunks_mut(frame) {
                                d.decompress_to_buffer(&z[..], out)?;
                            }
                            Ok(())
                        })
                    })
                    .collect();
                join_io(hs)
            })
        })?;
        println!(
            "limits in this run: host memory copy with {cores} cores {:.1} GB/s (read + write {:.1}); {cores} cores decoding zstd-1 frames in memory {:.1} GB/s",
            gbs((1u64 << 30) as f64, copy),
            gbs((2u64 << 30) as f64, copy),
            gbs((frames * frame) as f64, decode)
        );
        // Peer copies between devices 0 and 1.
        if all.len() >= 2 {
            let a = all[0].allocate(n)?;
            let b = all[1].allocate(n)?;
            let direct = all[0].set_peer_access(&all[1], true)?;
            let there = gbs(n as f64, time_median(5, || b.copy_from_device(0, &a))?);
            let back = gbs(n as f64, time_median(5, || a.copy_from_device(0, &b))?);
            println!(
                "limits in this run: device 0 -> 1 copies {there:.1} GB/s, 1 -> 0 {back:.1} (direct peer access: {direct})"
            );
        }
        Ok(())
    }

    /// Every core reading the store's files (page cache warm) into reused buffers, as
    /// the GPU workers' readers do before nvCOMP: GB/s of stored bytes, and of the
    /// decoded bytes they hold (`decoded` bytes in all).
    fn store_files_limit(
        path: &std::path::Path,
        decoded: f64,
        cores: usize,
        devs: &[Context],
    ) -> devbuf::Result<()> {
        use std::io::Read;
        let files = crate::staging::store_files(path);
        let stored: usize = files.iter().map(|f| f.1).sum();
        let largest = files.iter().map(|f| f.1).max().unwrap_or(0);
        let next = std::sync::atomic::AtomicUsize::new(0);
        let secs = time_median(3, || {
            next.store(0, std::sync::atomic::Ordering::Relaxed);
            std::thread::scope(|s| {
                let hs: Vec<_> = (0..cores)
                    .map(|_| {
                        let (files, next) = (&files, &next);
                        s.spawn(move || -> std::io::Result<()> {
                            let mut buf = vec![0u8; largest];
                            while let Some((p, n)) =
                                files.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                            {
                                std::fs::File::open(p)?.read_exact(&mut buf[..*n])?;
                            }
                            Ok(())
                        })
                    })
                    .collect();
                join_io(hs)
            })
        })?;
        println!(
            "limits in this run: {cores} threads reading the store's {} files ({:.0} MiB stored) from the page cache into one reused buffer each: {:.1} GB/s of stored bytes = {:.1} GB/s of the decoded bytes they hold",
            files.len(),
            stored as f64 / (1u64 << 20) as f64,
            gbs(stored as f64, secs),
            gbs(decoded, secs)
        );
        // As the GPU workers' readers stage them: every file at its own place in
        // page-locked memory (memory traffic, not cache), then (second figure) with
        // every device uploading its share of the staged bytes at the same time.
        let (offsets, at) = crate::staging::offsets(&files);
        let mut staging = devs[0].allocate_host(at.max(1))?;
        let mut read_all = || {
            crate::staging::read_into(&mut staging, &files, &offsets, cores)
                .map_err(|e| devbuf::Error::InvalidArgument(e.to_string()))
        };
        let staged = time_median(3, &mut read_all)?;
        let share = at.div_ceil(devs.len()).next_multiple_of(256);
        let targets = devs
            .iter()
            .map(|c| c.allocate(share))
            .collect::<devbuf::Result<Vec<_>>>()?;
        // The uploads read a second page-locked buffer of the same size (the bytes a
        // reader staged earlier), while the readers fill the first.
        let staged_earlier = devs[0].allocate_host(at.max(1))?;
        let staging = &staged_earlier;
        let both = time_median(3, || {
            std::thread::scope(|s| {
                let up = s.spawn(|| {
                    targets.iter().enumerate().try_for_each(|(i, d)| {
                        let from = (i * share).min(at);
                        let to = ((i + 1) * share).min(at);
                        d.slice(0, to - from)?.copy_from_host(0, &staging[from..to])
                    })
                });
                let r = read_all();
                up.join().map_err(|_| {
                    devbuf::Error::InvalidArgument("the upload thread panicked".into())
                })??;
                r
            })
        })?;
        println!(
            "limits in this run: {cores} threads reading the store's files into page-locked memory, each at its own place: {:.1} GB/s stored = {:.1} GB/s decoded; while the {} devices upload the staged bytes: {:.1} GB/s decoded",
            gbs(stored as f64, staged),
            gbs(decoded, staged),
            devs.len(),
            gbs(decoded, both)
        );
        Ok(())
    }

    /// Joins threads that do file or decoder I/O: the first failure as a devbuf error.
    fn join_io(
        hs: Vec<std::thread::ScopedJoinHandle<'_, std::io::Result<()>>>,
    ) -> devbuf::Result<()> {
        hs.into_iter().try_for_each(|h| {
            h.join()
                .map_err(|_| devbuf::Error::InvalidArgument("a benchmark thread panicked".into()))?
                .map_err(|e| devbuf::Error::InvalidArgument(e.to_string()))
        })
    }

    fn fmt_list(v: &[f64]) -> String {
        v.iter()
            .enumerate()
            .map(|(i, r)| format!("{i}: {r:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}
