//! The read engine: a zarr selection -> the decode units it touches -> fetch and decode
//! each unit once on worker threads (bounded by the chunk's size) -> place into host
//! memory, or through page-locked staging slots of the context's one pool onto the
//! device, where the placement runs as device copies.
//!
//! * `plan`: requests (boxes of the array, each at an output offset) -> units with
//!   their placements;
//! * `codec`: the chains the engine decodes itself, bounded;
//! * `source`: an opened array as the engine sees it (decode grid, fetch, decode);
//! * `pipeline`: the worker threads, host and device;
//! * `place`: the placement of decoded units on the device (merged strided copies);
//! * `gpu`: the GPU decode workers (stored bytes -> one DMA -> one nvCOMP call, several
//!   claims in flight per worker while the next one is read);
//! * `stored`: a GPU claim's host side (parallel reads into a page-locked slot, checks);
//! * `sched`: when a GPU worker takes another claim (the CPU / GPU split);
//! * `stream`: streamed decoding of large units straight into a host output;
//! * `pieces`: the CPU workers of a device read of large uncompressed units, a piece
//!   at a time.
//!
//! The device write engine (`../write.rs`) reuses `plan`, `codec` and the staging lanes.

mod blosc;
pub(crate) mod codec;
mod gpu;
mod pieces;
pub(crate) mod pipeline;
mod place;
pub(crate) mod plan;
mod sched;
mod source;
mod stored;
mod stream;

use std::sync::atomic::Ordering;

pub(crate) use plan::Request;
pub(crate) use source::{Direct, Source};

use devbuf_core::cuda::{Context, DeviceBuffer};
use devbuf_core::error::{Error, Result};
use devbuf_core::zarr::Memory;

/// Default bytes of one staging slot of a device read (each worker has two; the
/// context's page-locked pool bounds the total, see
/// [`TransferConfig::max_pinned_bytes`](devbuf_core::cuda::TransferConfig::max_pinned_bytes)).
pub const DEFAULT_SLOT_BYTES: usize = 4 << 20;

/// Which decoder runs a read's chunks.
///
/// nvCOMP parallelises across chunks, the CPU workers across cores: measured on an H100
/// (16 cores, 512 MiB of float32, zstd-1), nvCOMP decodes 64 KiB chunks at about 41
/// GB/s, 4 MiB chunks at 34 and 16 MiB chunks at 15 (each chunk taking 15 ms or more on
/// the GPU at 4 MiB), while one core decodes about 0.75 GB/s. Both kinds of worker claim
/// chunks from one counter, so on a read with both the split follows their speed; near
/// the end of a read a GPU worker takes no more chunks once the CPU workers would
/// finish the rest before the GPU's measured latency is over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Decoder {
    /// The CPU workers, plus GPU workers (as [`Both`](Self::Both), except that a GPU
    /// worker takes no chunk the cost model gives to the CPU) on device reads of zstd,
    /// gzip or blosc (LZ4 or zstd inside) chunks that carry a crc32c checksum (verified on the host before nvCOMP sees
    /// them), when nvCOMP is available. Unprotected chunks go to the GPU only when asked
    /// for: nvCOMP checks less than the CPU decoders. The cost model weighs the GPU's
    /// measured latency per call against the CPU workers' measured rate, so reads of
    /// large chunks (16 MiB) mostly stay on the CPU. Host reads use the CPU workers. The
    /// report says which ran and why.
    #[default]
    Auto,
    /// CPU worker threads only.
    Cpu,
    /// nvCOMP only (device reads of zstd or gzip chunks, and of blosc chunks whose
    /// metadata names lz4, lz4hc or zstd; otherwise an error that says why). blosc
    /// containers are taken apart on the host, their streams decoded by nvCOMP and the
    /// byte shuffle undone on the device; a blosc chunk the host parser does not take on
    /// (bit shuffle, another compressor than the metadata names) is decoded on the CPU
    /// inside the GPU claim. zstd frames are checked on the host first (declared size, complete frame
    /// with intact block headers; frames with a content checksum are decoded on the CPU,
    /// which verifies it); gzip members have their header and size checked, not their
    /// CRC-32. Damage inside compressed data that these checks cannot see may decode to
    /// wrong values unnoticed (nvCOMP reports success for some damaged input; so may the
    /// CPU's zstd decoder for a frame without a checksum), and nvCOMP may even fault the
    /// device on it (its deflate decoder was seen writing past its scratch area on a
    /// truncated stream), which ends every CUDA context of the process: use it for
    /// trusted stores, or stores whose chunks carry crc32c.
    Gpu,
    /// CPU workers and GPU workers on the same read
    /// ([`ReadOptions::gpu_workers`] of the threads feed nvCOMP, each with its own
    /// reader threads); every GPU worker takes at least one claim (the CPU workers
    /// start once each has, so a small read cannot be finished by the CPU workers while
    /// the GPU workers set up). Where the cost model would leave the read to the CPU
    /// (large chunks), that first claim is one batch (one 16 MiB chunk, say), or none
    /// when even that batch is expected to take longer than both the CPU workers' whole
    /// read and 0.1 s (4 MiB gzip chunks: nvCOMP takes most of a second for one; the
    /// report then says that the cost model left every chunk to the CPU). A GPU worker
    /// done with claims decodes on the CPU with the page-locked staging it already
    /// holds.
    Both,
}

/// How a read runs ([`ZarrArray::set_read_options`](super::ZarrArray::set_read_options)).
///
/// ```
/// use devbuf_zarr::{Decoder, ReadOptions};
/// let o = ReadOptions { threads: Some(4), ..ReadOptions::default() };
/// assert_eq!(o.decoder, Decoder::Auto);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    /// Which decoder runs the chunks.
    pub decoder: Decoder,
    /// CPU worker threads (`None`: one per core).
    pub threads: Option<usize>,
    /// Of the threads, how many feed nvCOMP in a read with both decoders (`None`: an
    /// eighth, at least one). A GPU worker reads stored bytes with its own six reader
    /// threads and queues them for the GPU; the CPU workers decode. With
    /// [`Decoder::Gpu`] the threads are split between two GPU workers (one below four
    /// threads), each with the rest of its half as readers (16 threads: 2 workers of
    /// 7 readers).
    pub gpu_workers: Option<usize>,
    /// Bytes of one staging slot of a device read (`DEFAULT_SLOT_BYTES`). Each worker
    /// holds two slots, and the context's page-locked pool bounds what all workers hold
    /// together: workers that find the pool full do not join the read.
    ///
    /// Uncompressed chunks (inner chunks) larger than a slot in a filesystem store go to
    /// the device in pieces of a slot (at most 2 MiB, rounded up to 256 bytes) while
    /// they are read. Other chunks are decoded whole into a slot, which then holds at
    /// least one chunk, and as many as fit.
    pub slot_bytes: usize,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            decoder: Decoder::Auto,
            threads: None,
            gpu_workers: None,
            slot_bytes: DEFAULT_SLOT_BYTES,
        }
    }
}

/// What one read did: which decoder ran, on how many chunks, with how many workers.
///
/// ```
/// use devbuf_zarr::ZarrArray;
/// use devbuf_core::zarr::BufferPrototype;
/// let a = ZarrArray::open("tests/fixtures/zarr/v2_int16_zstd.zarr")?;
/// let (_, report) = a.read_all_with_report(&BufferPrototype::Host)?;
/// assert_eq!(report.decoder, "cpu");
/// assert!(report.cpu_chunks > 0);
/// println!("{report}");
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadReport {
    /// `"cpu"`, `"gpu"` (nvCOMP decoded every chunk) or `"cpu+gpu"`.
    pub decoder: &'static str,
    /// Why the GPU did not decode (for a read that could have used it), else empty.
    pub gpu_note: String,
    /// The codecs as the engine saw them (`"zstd"`, `"sharded zstd"`, or
    /// `"zarrs (<why>)"` when zarrs' codecs decoded the chunks).
    pub codecs: String,
    /// Chunks (inner chunks of shards) decoded by the CPU workers.
    pub cpu_chunks: u64,
    /// Chunks decoded by nvCOMP.
    pub gpu_chunks: u64,
    /// Workers that fed nvCOMP.
    pub gpu_workers: usize,
    /// Microseconds the GPU workers spent reading stored bytes (summed over workers).
    pub gpu_read_us: u64,
    /// Microseconds of device time of the GPU workers' claims: upload, nvCOMP call,
    /// placement (summed over claims, which overlap each other and the reading).
    pub gpu_decode_us: u64,
    /// Microseconds the GPU workers waited for the device (a claim in flight to finish
    /// before its device buffers are reused, and at the end; summed over workers).
    pub gpu_wait_us: u64,
    /// Microseconds the GPU workers spent queueing claims on the device (the host side
    /// of the nvCOMP calls and launches, a flight's first allocations; summed).
    pub gpu_queue_us: u64,
    /// When the first GPU claim was queued, microseconds from the start of decoding
    /// (0: none was).
    pub gpu_first_us: u64,
    /// When the GPU workers' last read of stored bytes ended (microseconds from the
    /// start of decoding).
    pub gpu_read_end_us: u64,
    /// When the GPU workers' last claim finished on the device (microseconds from the
    /// start of decoding).
    pub gpu_end_us: u64,
    /// Microseconds the whole read took (planning, allocation and decoding).
    pub elapsed_us: u64,
    /// Of those, chunks not stored (read as the fill value).
    pub missing_chunks: u64,
    /// Decoded bytes (whole chunks, before selection).
    pub decoded_bytes: u64,
    /// Worker threads that took part.
    pub workers: usize,
    /// Where the result went: `"host"` or `"device N"`.
    pub target: String,
}

impl std::fmt::Display for ReadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "decoder {} ({} codecs) -> {}: {} chunks on {} CPU workers, {} chunks on {} GPU \
             workers ({} missing), {} decoded bytes",
            self.decoder,
            self.codecs,
            self.target,
            self.cpu_chunks,
            self.workers,
            self.gpu_chunks,
            self.gpu_workers,
            self.missing_chunks,
            self.decoded_bytes
        )?;
        if self.gpu_workers > 0 {
            write!(
                f,
                "; GPU workers read for {:.1} ms, queued for {:.1} ms, their claims took {:.1} ms \
                 on the device, they waited {:.1} ms for it",
                self.gpu_read_us as f64 / 1e3,
                self.gpu_queue_us as f64 / 1e3,
                self.gpu_decode_us as f64 / 1e3,
                self.gpu_wait_us as f64 / 1e3
            )?;
            write!(
                f,
                "; first claim queued at {:.1} ms, last read at {:.1} ms, device done at {:.1} \
                 ms",
                self.gpu_first_us as f64 / 1e3,
                self.gpu_read_end_us as f64 / 1e3,
                self.gpu_end_us as f64 / 1e3
            )?;
        }
        if self.elapsed_us > 0 {
            write!(f, "; read in {:.1} ms", self.elapsed_us as f64 / 1e3)?;
        }
        if !self.gpu_note.is_empty() {
            write!(f, "; GPU not used: {}", self.gpu_note)?;
        }
        Ok(())
    }
}

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
/// `dest`: the new memory (`None` when `dest` was the caller's) and what ran.
pub(crate) fn read(
    src: &Source<'_>,
    requests: &[Request],
    total: usize,
    dest: Dest<'_>,
    options: &ReadOptions,
) -> Result<(Option<Memory>, ReadReport)> {
    let threads = options
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get()))
        .max(1);
    if threads > 1024 {
        return Err(Error::invalid(format!(
            "ReadOptions::threads is {threads}; at most 1024 worker threads are allowed"
        )));
    }
    let started = std::time::Instant::now();
    let counts = pipeline::Counts::default();
    let device = matches!(dest, Dest::New(Some(_)) | Dest::Device(_));
    let (gpu, gpu_note) = choose_gpu(src, device, threads, options)?;
    // The result first: a selection too large for memory fails here, before planning.
    enum Out<'b> {
        New(devbuf_core::memory::HostOutput),
        Host(&'b mut [u8]),
        Device(DeviceBuffer, bool),
    }
    let out = match dest {
        Dest::New(None) => Out::New(devbuf_core::memory::HostOutput::new(total)?),
        Dest::New(Some(ctx)) => Out::Device(ctx.allocate(total)?, true),
        Dest::Host(h) => {
            check_len(h.len(), total, "host")?;
            Out::Host(h)
        }
        Dest::Device(d) => {
            check_len(d.len(), total, "device")?;
            d.check_writable("a zarr read")?;
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
    // An object store starts fetching every unit's bytes now, ahead of the workers.
    src.prefetch(&units)?;

    let (mem, target) = match out {
        Out::New(mut out) => {
            out.prefault(threads);
            pipeline::read_host(src, &units, out.as_mut_slice(), threads, &counts)?;
            (Some(Memory::Host(out.into_bytes())), "host".to_string())
        }
        Out::Host(out) => {
            pipeline::read_host(src, &units, out, threads, &counts)?;
            (None, "host (the caller's memory)".to_string())
        }
        Out::Device(out, new) => {
            let ctx = out.context().clone();
            let out = pipeline::read_device(
                src,
                &units,
                out,
                &ctx,
                threads,
                options.slot_bytes,
                gpu.as_ref(),
                &counts,
            )?;
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
    let report = ReadReport {
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
        elapsed_us: started.elapsed().as_micros().min(u64::MAX as u128) as u64,
        codecs: src.codecs.describe(),
        cpu_chunks,
        missing_chunks: counts.missing_units.load(Ordering::Relaxed),
        decoded_bytes: counts.decoded_bytes.load(Ordering::Relaxed),
        workers: counts.workers.load(Ordering::Relaxed),
        target,
    };
    Ok((mem, report))
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

/// Whether (and how) nvCOMP decodes this read: the plan, or why not (empty when the
/// read could not have used it anyway). An explicit `Gpu` or `Both` that cannot be
/// honoured is an error saying why.
fn choose_gpu(
    src: &Source<'_>,
    device: bool,
    threads: usize,
    options: &ReadOptions,
) -> Result<(Option<pipeline::GpuPlan>, String)> {
    let explicit = matches!(options.decoder, Decoder::Gpu | Decoder::Both);
    if options.decoder == Decoder::Cpu {
        return Ok((None, String::new()));
    }
    let why_not = (|| {
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
        if !explicit && !chain.crc32c {
            return Err(
                "the chunks carry no crc32c checksum: nvCOMP checks less than the CPU decoders \
                 (damage inside compressed data can decode to wrong values unnoticed, and \
                 gzip's CRC-32 and zlib's Adler-32 are not checked), so the GPU decodes \
                 unprotected chunks only when asked for (Decoder::Gpu or Both)"
                    .to_string(),
            );
        }
        devbuf_core::cuda::nvcomp::library().map_err(|e| e.to_string())?;
        Ok((*chain, codec))
    })();
    match why_not {
        Ok((chain, codec)) => {
            let mut tuning = gpu::Tuning::from_env(options.decoder == Decoder::Gpu);
            let (workers, schedule) = match options.decoder {
                // Every thread feeds nvCOMP: two workers (one on fewer than 4 threads)
                // and their readers, unless the readers per worker are set.
                Decoder::Gpu => {
                    let workers = match tuning.readers {
                        Some(r) => threads.div_ceil(r + 1).max(1),
                        None => {
                            let w = if threads >= 4 { 2 } else { 1 };
                            tuning.readers = Some((threads / w).saturating_sub(1).max(1));
                            w
                        }
                    };
                    (workers, sched::Schedule::Always)
                }
                d => (
                    options
                        .gpu_workers
                        .unwrap_or(threads / 8)
                        .clamp(1, threads.max(1)),
                    if d == Decoder::Both {
                        sched::Schedule::AfterFirst
                    } else {
                        sched::Schedule::Model
                    },
                ),
            };
            let schedule = if tuning.model {
                schedule
            } else {
                sched::Schedule::Always
            };
            Ok((
                Some(pipeline::GpuPlan {
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
