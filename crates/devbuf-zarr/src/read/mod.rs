//! The read engine: a zarr selection -> the decode units it touches -> fetch and decode
//! each unit once on worker threads (bounded by the chunk's size) -> place into host
//! memory, or through page-locked staging slots of the context's one pool onto the
//! device, where the placement runs as device copies.
//!
//! * `options`: how a read runs ([`ReadOptions`], [`GpuTuning`]); `report`: what it did;
//!   `progress`: how far it got ([`Progress`], [`ProgressSink`]) and [`Cancel`];
//! * `plan`: requests (boxes of the array, each at an output offset) -> units with
//!   their placements;
//! * `codec`: the chains the engine decodes itself, bounded;
//! * `source`: an opened array as the engine sees it (decode grid, fetch, decode);
//! * `pipeline`: the worker threads, host and device;
//! * `place`: the placement of decoded units on the device (merged strided copies);
//! * `gpu`: the GPU decode workers (stored bytes -> copies queued by the readers as they
//!   read -> one nvCOMP call, several claims in flight per worker while the next one
//!   is read);
//! * `tuning`: how the GPU workers are sized (claims in flight, claim sizes, ramp);
//! * `stored`: a GPU claim's host side (parallel reads into a page-locked slot, checks);
//! * `sched`: when a GPU worker takes another claim (the CPU / GPU split);
//! * `calibrate`: which decoder `Auto` runs, from rates measured in this process;
//! * `cut`: where a read spread over several devices is cut;
//! * `incremental`: streamed decoding of large units straight into a host output;
//! * `work`: the shared state of one read (work queue, counters, threads), a leaf
//!   every worker uses;
//! * `pieces`: the CPU workers of a device read of large uncompressed units, a piece
//!   at a time.
//!
//! The device write engine (`../write.rs`) reuses `plan`, `codec` and the staging lanes.

mod blosc;
mod calibrate;
mod chunk_file;
pub(crate) mod codec;
pub(crate) mod cut;
mod gpu;
mod incremental;
mod mapped;
mod options;
mod pieces;
pub(crate) mod pipeline;
mod place;
pub(crate) mod plan;
pub(crate) mod progress;
mod report;
mod sched;
mod source;
mod stored;
mod tuning;
pub(crate) mod work;

use std::sync::atomic::Ordering;

pub use options::{
    DEFAULT_LANE_STREAMS, DEFAULT_SLOT_BYTES, DEFAULT_STREAM_MIN_BYTES, DEFAULT_STREAM_PIECE_BYTES,
    Decoder, GpuTuning, ReadOptions,
};
pub(crate) use plan::ReadBox;
pub use progress::{Cancel, DEFAULT_PROGRESS_INTERVAL, Progress, ProgressSink};
pub use report::ReadReport;
pub(crate) use source::{Direct, ZarrSource};

use devbuf_core::cuda::{Context, DeviceBuffer};
use devbuf_core::error::{Error, Result};
use devbuf_core::memory::Memory;

/// Where a read's result goes.
pub(crate) enum Dest<'a> {
    /// New memory: host memory (`None`) or an allocation of the context.
    New(Option<&'a Context>),
    /// The caller's host memory, exactly the result's bytes.
    Host(&'a mut [u8]),
    /// The caller's device memory: a writable buffer (or view) of exactly the result's
    /// bytes.
    Device(&'a DeviceBuffer),
}

/// Reads `requests` (boxes at output offsets, `total` output bytes) from `src` into
/// `dest`: the new memory (`None` when `dest` was the caller's) and what ran. `stop`,
/// set from outside, ends the read early with an error.
pub(crate) fn read(
    src: &ZarrSource<'_>,
    requests: &[ReadBox],
    total: usize,
    dest: Dest<'_>,
    options: &ReadOptions,
    stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
) -> Result<(Option<Memory>, ReadReport)> {
    let threads = options
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get()))
        .clamp(1, 1024);
    options.validate()?;
    let started = std::time::Instant::now();
    // Fields are only computed when a subscriber takes the span.
    let span = tracing::info_span!(
        "devbuf.read",
        location = src.location,
        shape = ?src.array.shape(),
        dtype = ?src.array.data_type(),
        codecs = %src.codecs.describe(),
        selection_bytes = total,
        decoder = ?options.decoder,
        threads,
        chunks = tracing::field::Empty,
        ran = tracing::field::Empty,
        target = tracing::field::Empty,
    );
    let _in = span.enter();
    let mut counts = work::ReadCounters {
        stop,
        cancel: options.cancel.clone(),
        ..work::ReadCounters::default()
    };
    if counts.cancelled() {
        return Err(Error::cancelled(format!(
            "the read of {} was cancelled before it started",
            src.location
        )));
    }
    let device = matches!(dest, Dest::New(Some(_)) | Dest::Device(_));
    // A large device read nvCOMP could decode: `Auto` runs the fastest decoder measured
    // in this process on reads like it, and every such read (whichever decoder it ran)
    // adds its rate to the measurements.
    let ctx_of_dest = match &dest {
        Dest::New(Some(ctx)) => Some((*ctx).clone()),
        Dest::Device(d) => Some(d.context().clone()),
        _ => None,
    };
    // A part of a spread read is measured with the whole (`SpreadAuto`), not alone.
    let calibrated = match &ctx_of_dest {
        Some(ctx)
            if !in_spread_part()
                && total >= calibrate::MIN_CALIBRATED_BYTES
                && gpu_ready(src, true, false).is_ok() =>
        {
            let kind = calibrate::Kind::new(
                ctx.ordinal(),
                src.codecs.describe(),
                src.cell_bytes,
                total,
                threads,
            );
            let (d, why) = match options.decoder {
                Decoder::Auto => calibrate::choose(&kind),
                d => (d, String::new()),
            };
            let allocations = ctx.transfer_stats().staging_allocations;
            Some((kind, d, why, allocations))
        }
        _ => None,
    };
    // A read that fails counts against its decoder (below a rate it never had), so
    // `Auto` does not pick a decoder that fails on this kind of read (out of device
    // memory, say) read after read; it tries it again only as a far runner-up. A
    // cancelled or stopped read says nothing of its decoder.
    let mut failed = calibrated.as_ref().map(|(kind, d, _, _)| FailedRead {
        kind: kind.clone(),
        decoder: *d,
        cancel: options.cancel.clone(),
        stop: counts.stop.clone(),
    });
    let chosen;
    let options = match &calibrated {
        Some((_, d, _, _)) if options.decoder == Decoder::Auto => {
            chosen = ReadOptions {
                decoder: *d,
                ..options.clone()
            };
            &chosen
        }
        _ => options,
    };
    let (gpu, gpu_note) = choose_gpu(src, device, threads, options)?;
    // The result first: a selection too large for memory fails here, before planning.
    enum Out<'b> {
        New(devbuf_core::__private::HostOutput),
        Host(&'b mut [u8]),
        Device(DeviceBuffer, bool),
    }
    let out = match dest {
        Dest::New(None) => Out::New(devbuf_core::__private::HostOutput::recycled(total)?),
        Dest::New(Some(ctx)) => Out::Device(ctx.allocate(total)?, true),
        Dest::Host(h) => {
            check_len(h.len(), total, "host")?;
            Out::Host(h)
        }
        Dest::Device(d) => {
            check_len(d.len(), total, "device")?;
            if !d.is_mutable() {
                return Err(Error::ReadOnly(format!(
                    "a zarr read on a read-only device buffer of {} bytes",
                    d.len()
                )));
            }
            Out::Device(d.clone(), false)
        }
    };
    // Every unit places at least one element: more units than output elements means
    // the plan is wrong (and bounds the plan's memory by the output's).
    let max_units = (total / src.elem.max(1)).max(1);
    let mut units = plan::plan(
        requests,
        src.array.shape(),
        &src.cell_shape,
        src.elem,
        max_units,
    )?;
    src.order_units(&mut units);
    span.record("chunks", units.len());
    if let Some(sink) = &options.progress {
        let t = progress::Tracker::new(
            sink.clone(),
            started,
            units.len() as u64,
            src.cell_bytes as u64,
        );
        t.start();
        counts.progress = Some(t);
    }
    // An object store starts fetching every unit's bytes now, ahead of the workers.
    src.prefetch(&units)?;

    let (mem, target) = match out {
        Out::New(mut out) => {
            if options.prefault {
                out.prefault(threads);
            }
            pipeline::read_host(src, &units, out.as_mut_slice(), threads, options, &counts)?;
            (Some(Memory::Host(out.into_bytes())), "host".to_string())
        }
        Out::Host(out) => {
            pipeline::read_host(src, &units, out, threads, options, &counts)?;
            (None, "host (the caller's memory)".to_string())
        }
        Out::Device(out, new) => {
            let ctx = out.context().clone();
            let out =
                pipeline::read_device(src, &units, out, threads, options, gpu.as_ref(), &counts)?;
            if new {
                (
                    Some(Memory::Device(out)),
                    format!("device {}", ctx.ordinal()),
                )
            } else {
                (
                    None,
                    format!("device {} (the caller's memory)", ctx.ordinal()),
                )
            }
        }
    };
    let (cpu_chunks, gpu_chunks) = (
        counts.cpu_units.load(Ordering::Relaxed),
        counts.gpu_units.load(Ordering::Relaxed),
    );
    let gpu_note = match (&gpu, gpu_chunks) {
        (Some(_), 0) if gpu_note.is_empty() && cpu_chunks > 0 => {
            "the cost model left every chunk to the CPU workers (one GPU call of these chunks \
             was estimated to take longer than the CPU workers needed for the rest)"
                .to_string()
        }
        _ => gpu_note,
    };
    let elapsed_us = started.elapsed().as_micros().min(u64::MAX as u128) as u64;
    if let (Some((kind, d, _, allocations)), Some(ctx)) = (&calibrated, &ctx_of_dest) {
        // A read that had to allocate page-locked staging (the first of its kind in this
        // process, or after reads that cut the pool for other slot sizes) paid a cost
        // the next one will not: its rate is kept only until a warm read replaces it.
        let cold = ctx.transfer_stats().staging_allocations != *allocations;
        calibrate::record(kind, *d, total as u64, elapsed_us as f64 * 1e-6, cold);
    }
    if let Some(f) = failed.as_mut() {
        f.succeeded();
    }
    let report = ReadReport {
        auto: calibrated.map(|c| c.2).unwrap_or_default(),
        decoder: match (cpu_chunks > 0, gpu_chunks > 0) {
            (true, true) => "cpu+gpu",
            (false, true) => "gpu",
            _ => "cpu",
        },
        gpu_note,
        gpu_chunks,
        gpu_workers: counts.gpu_workers.load(Ordering::Relaxed),
        gpu_read_us: counts.gpu_read_us.load(Ordering::Relaxed),
        gpu_decode_us: counts.gpu_decode_us.load(Ordering::Relaxed),
        gpu_wait_us: counts.gpu_wait_us.load(Ordering::Relaxed),
        gpu_queue_us: counts.gpu_queue_us.load(Ordering::Relaxed),
        gpu_first_us: counts.gpu_first_us.load(Ordering::Relaxed),
        gpu_read_end_us: counts.gpu_read_end_us.load(Ordering::Relaxed),
        gpu_end_us: counts.gpu_end_us.load(Ordering::Relaxed),
        elapsed_us,
        codecs: src.codecs.describe(),
        cpu_chunks,
        missing_chunks: counts.missing_units.load(Ordering::Relaxed),
        decoded_bytes: counts.decoded_bytes.load(Ordering::Relaxed),
        workers: counts.workers.load(Ordering::Relaxed),
        target,
    };
    if let Some(p) = &counts.progress {
        p.finish();
    }
    report::trace_done(&span, &report, total);
    Ok((mem, report))
}

/// Records a calibrated read's failure when dropped before [`succeeded`](Self::succeeded).
struct FailedRead {
    kind: calibrate::Kind,
    decoder: Decoder,
    cancel: Option<Cancel>,
    stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl FailedRead {
    fn succeeded(&mut self) {
        self.stop = None;
        self.cancel = None;
        self.decoder = Decoder::Auto;
    }
}

impl Drop for FailedRead {
    fn drop(&mut self) {
        let cancelled = self.cancel.as_ref().is_some_and(|c| c.is_cancelled())
            || self
                .stop
                .as_ref()
                .is_some_and(|s| s.load(Ordering::Acquire));
        if self.decoder != Decoder::Auto && !cancelled {
            calibrate::record_failure(&self.kind, self.decoder);
        }
    }
}

thread_local! {
    /// Set while this thread reads one device's part of a spread read.
    static SPREAD_PART: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` (one device's part of a spread read) with the per-read calibration off:
/// the spread read is measured as a whole.
pub(crate) fn as_spread_part<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            SPREAD_PART.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(SPREAD_PART.with(|c| c.replace(true)));
    f()
}

fn in_spread_part() -> bool {
    SPREAD_PART.with(|c| c.get())
}

/// What `Decoder::Auto` runs on a read spread over devices: one decoder for every
/// part, chosen and measured for the spread read as a whole (its parts share the
/// host's cores and page cache, so one part's rate depends on what the others run).
pub(crate) struct SpreadAuto {
    kind: calibrate::Kind,
    /// The decoder every part runs.
    pub decoder: Decoder,
    /// Why (for each part's report).
    pub why: String,
    allocations: u64,
}

impl SpreadAuto {
    /// For an `Auto` read of `total` decoded bytes of `src` spread over `devices`
    /// (`layout`: how; `threads`: each part's), the decoder to run; `None` where `Auto`
    /// does not calibrate (small reads, reads nvCOMP cannot take): each part then
    /// decides for itself.
    pub(crate) fn choose(
        src: &ZarrSource<'_>,
        total: usize,
        devices: &[devbuf_core::cuda::Context],
        layout: &'static str,
        threads: usize,
    ) -> Option<SpreadAuto> {
        if total < calibrate::MIN_CALIBRATED_BYTES || gpu_ready(src, true, false).is_err() {
            return None;
        }
        let kind = calibrate::Kind::spread(
            devices.iter().map(|c| c.ordinal()).collect(),
            layout,
            src.codecs.describe(),
            src.cell_bytes,
            total,
            threads,
        );
        let (decoder, why) = calibrate::choose(&kind);
        Some(SpreadAuto {
            kind,
            decoder,
            why: format!("{why} (for the spread read as a whole)"),
            allocations: staging_allocations(devices),
        })
    }

    /// Records the spread read's rate: `total` decoded bytes in `secs`.
    pub(crate) fn record(&self, devices: &[devbuf_core::cuda::Context], total: usize, secs: f64) {
        let cold = staging_allocations(devices) != self.allocations;
        calibrate::record(&self.kind, self.decoder, total as u64, secs, cold);
    }
}

/// Page-locked staging allocations so far, over `devices`.
fn staging_allocations(devices: &[devbuf_core::cuda::Context]) -> u64 {
    devices
        .iter()
        .map(|c| c.transfer_stats().staging_allocations)
        .sum()
}

/// The caller's memory must hold exactly the result.
fn check_len(given: usize, total: usize, what: &str) -> Result<()> {
    if given != total {
        return Err(Error::invalid(format!(
            "the {what} memory to read into holds {given} bytes; the selection needs exactly \
             {total} bytes (its element count times the element size, C order)"
        )));
    }
    Ok(())
}

/// Whether nvCOMP can decode this read (`device`: into device memory; `explicit`:
/// `Gpu` or `Both` was asked for, which also takes chunks without crc32c): the chain
/// and nvCOMP's codec, or why not.
fn gpu_ready(
    src: &ZarrSource<'_>,
    device: bool,
    explicit: bool,
) -> std::result::Result<(codec::Chain, devbuf_core::cuda::nvcomp::GpuCodec), String> {
    if !device {
        return Err("the result is in host memory".to_string());
    }
    let chain = src.chain().ok_or_else(|| {
        format!(
            "the codecs are decoded by zarrs ({})",
            src.codecs.describe()
        )
    })?;
    let codec = gpu::gpu_codec(chain)?;
    // zstd frames are checked on the host before nvCOMP sees them (declared size,
    // complete frame, intact block headers; frames with a content checksum go to the
    // CPU, which verifies it), and gzip members on both sides (header and size on the
    // host, the trailer's CRC-32 on the device after nvCOMP's decode), as the CPU
    // decoders would check them: `Auto` sends them to the GPU with or without crc32c.
    // Other compressors without crc32c only when asked.
    let checked = matches!(
        chain.compression,
        codec::Compression::Zstd | codec::Compression::Gzip
    );
    if !explicit && !chain.crc32c && !checked {
        return Err(
            "the chunks carry no crc32c checksum and are neither zstd frames nor gzip \
             members (which are checked as the CPU decoders check them): nvCOMP checks \
             less than the CPU decoders (zlib's Adler-32 and the bounds of LZ4 blocks are \
             not checked), so the GPU decodes them only when asked for (Decoder::Gpu or \
             Both)"
                .to_string(),
        );
    }
    devbuf_core::cuda::nvcomp::library().map_err(|e| e.to_string())?;
    Ok((*chain, codec))
}

/// Whether (and how) nvCOMP decodes this read: the plan, or why not (empty when the
/// read could not have used it anyway). An explicit `Gpu` or `Both` that cannot be
/// honoured is an error saying why.
fn choose_gpu(
    src: &ZarrSource<'_>,
    device: bool,
    threads: usize,
    options: &ReadOptions,
) -> Result<(Option<gpu::GpuDecode>, String)> {
    let explicit = matches!(options.decoder, Decoder::Gpu | Decoder::Both);
    if options.decoder == Decoder::Cpu {
        return Ok((None, String::new()));
    }
    let why_not = gpu_ready(src, device, explicit);
    match why_not {
        Ok((chain, codec)) => {
            // `Gpu` and `Both` feed the device first (with `Both` the CPU workers start
            // when the GPU workers stop claiming): the device's tuning and readers.
            let device_first = matches!(options.decoder, Decoder::Gpu | Decoder::Both);
            let mut tuning = gpu::Tuning::resolve(&options.gpu, device_first);
            let asked = options
                .gpu_workers
                .unwrap_or(threads / 8)
                .clamp(1, threads.max(1));
            // The readers of `w` workers that share every thread.
            let every_thread = |w: usize| (threads / w).saturating_sub(1).max(1);
            let (workers, schedule) = match options.decoder {
                // Every thread feeds nvCOMP: two workers (one on fewer than 4 threads)
                // and their readers, unless the readers per worker are set.
                Decoder::Gpu => {
                    let workers = match tuning.readers {
                        Some(r) => threads.div_ceil(r + 1).max(1),
                        None => {
                            let w = if threads >= 4 { 2 } else { 1 };
                            tuning.readers = Some(every_thread(w));
                            w
                        }
                    };
                    (workers, sched::Schedule::Always)
                }
                // Until the GPU workers stop claiming, every other thread reads for them
                // (the CPU workers wait).
                Decoder::Both => {
                    tuning.readers = tuning.readers.or(Some(every_thread(asked)));
                    (asked, sched::Schedule::AfterFirst)
                }
                _ => (asked, sched::Schedule::Model),
            };
            let schedule = if tuning.model {
                schedule
            } else {
                sched::Schedule::Always
            };
            Ok((
                Some(gpu::GpuDecode {
                    chain,
                    codec,
                    workers,
                    tuning,
                    schedule,
                    gpu_only: options.decoder == Decoder::Gpu,
                }),
                String::new(),
            ))
        }
        // Host reads decode on the CPU whatever the option (the note says why).
        Err(why) if !device => Ok((None, why)),
        Err(why) if explicit => Err(Error::invalid(format!(
            "ReadOptions::decoder {:?}: the GPU cannot decode this read: {why}",
            options.decoder
        ))),
        Err(why) => Ok((None, why)),
    }
}
