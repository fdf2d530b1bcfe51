//! How a read runs: [`ReadOptions`] (the decoder, threads, staging and every tuning
//! knob of the read engine, each with its documented default) and [`GpuTuning`].

use devbuf_core::error::{Error, Result};

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
    /// The fastest decoder measured on this machine, for device reads of at least 64
    /// MiB that nvCOMP can decode (zstd and gzip chunks, and zlib, LZ4 or blosc chunks
    /// that carry a crc32c checksum; see below): the first such reads of a kind
    /// (device, codecs, chunk size, read size within a factor 4, threads) each run one
    /// of [`Gpu`](Self::Gpu) and [`Cpu`](Self::Cpu) not measured yet, then
    /// [`Both`](Self::Both) where the slower of the two reached 0.35 of the faster's rate
    /// (a rate measured only on a read that set up its staging counting up to 4 times
    /// higher; an explicit `Both` read counts too), later
    /// ones the fastest measured (its rate refined by each read's own timing), and
    /// every eighth one the runner-up again (every 64th if it is far behind). A read
    /// spread over devices is measured as a whole, one decoder for every part. Reads with an explicit
    /// decoder on the same device add their rates too, so a program that tried them
    /// has `Auto` settled at once. A read that had to allocate page-locked staging (the
    /// first of a decoder, whose slots differ in size) is measured again before its
    /// rate counts. The report's `auto` field says which ran and the rates behind the
    /// choice.
    ///
    /// zstd frames go to nvCOMP only after the host checked them (declared size,
    /// complete frame, intact block headers; frames with a content checksum are
    /// decoded on the CPU, which verifies it): as with [`Gpu`](Self::Gpu), damage
    /// inside a compressed block that these checks cannot see may decode to wrong
    /// values unnoticed where the CPU decoder might have caught it. Use
    /// [`Cpu`](Self::Cpu), or chunks with crc32c, for stores you do not trust. gzip
    /// members have their header and size checked on the host and their CRC-32 on the
    /// device after nvCOMP's decode, so a member that decodes to other bytes than its
    /// writer's is an error, as on the CPU. Chunks of
    /// other compressors go to the GPU under `Auto` only with crc32c (nvCOMP's deflate
    /// decoder has faulted the device on truncated input).
    ///
    /// Smaller device reads, and reads nvCOMP cannot take: the CPU workers, plus GPU
    /// workers (as [`Both`](Self::Both), except that a GPU
    /// worker takes no chunk the cost model gives to the CPU) on device reads of zstd
    /// or gzip chunks, or of zlib or blosc (LZ4 or zstd inside) chunks that carry a crc32c
    /// checksum (verified on the host before nvCOMP sees them), when nvCOMP is
    /// available. Other unprotected chunks go to the GPU only when asked
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
    /// CPU workers and GPU workers on the same read, the device fed first
    /// ([`ReadOptions::gpu_workers`] of the threads feed nvCOMP, every other thread
    /// reads stored bytes for them). nvCOMP reaches its rate only with hundreds of
    /// chunks in flight, and each of its calls takes milliseconds, so every core first
    /// reads for the device; each GPU worker takes at least one claim, then claims
    /// while the cost model expects a claim's latency to be shorter than the CPU
    /// workers' time for everything not yet claimed (see [`Auto`](Self::Auto)). Once
    /// every GPU worker stopped claiming, all threads decode the rest on
    /// the CPU while the device finishes its claims: the tail that the device's latency
    /// would otherwise leave to idle cores. Where the cost model would leave the read
    /// to the CPU (large chunks), that first claim is one batch (one 16 MiB chunk,
    /// say), or none when even that batch is expected to take longer than both the CPU
    /// workers' whole read and 0.1 s (4 MiB gzip chunks: nvCOMP takes most of a second
    /// for one; the report then says that the cost model left every chunk to the CPU).
    /// A GPU worker done with claims decodes on the CPU with the page-locked staging it
    /// already holds.
    Both,
}

/// Streams the CPU workers' staging lanes share by default ([`ReadOptions::lane_streams`]).
pub const DEFAULT_LANE_STREAMS: usize = 4;

/// Host reads stream chunks from this size on by default
/// ([`ReadOptions::stream_min_bytes`]); smaller ones are decoded whole into the worker's
/// scratch, which stays in the cache.
pub const DEFAULT_STREAM_MIN_BYTES: usize = 2 << 20;

/// Bytes of one piece of a streamed chunk by default ([`ReadOptions::stream_piece_bytes`]):
/// a multiple of every element size that fits a core's L2 cache beside the zstd window.
/// Measured on the GPU machine, host reads into a reused buffer, two interleaved rounds:
/// 512 KiB pieces 8.6-9.1 GB/s (4 MiB zstd-1 chunks), 7.9-8.2 (16 MiB), 29.9-31.0 (4 MiB
/// uncompressed); 128 KiB pieces 8.2-8.9, 7.5-7.6, 30.0-30.6; without streaming 8.4-8.5,
/// 5.8-6.4, 23.4-23.6.
pub const DEFAULT_STREAM_PIECE_BYTES: usize = 512 << 10;

/// How a read runs ([`ZarrArray::set_read_options`](crate::ZarrArray::set_read_options)).
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
    /// How the GPU workers of a device read are sized ([`GpuTuning`]).
    pub gpu: GpuTuning,
    /// Streams the CPU workers' staging lanes of a device read share (default 4; 0: a
    /// stream per lane; at most 64). A few shared streams keep the device's hardware
    /// queues from being oversubscribed by many lanes.
    pub lane_streams: usize,
    /// Whether a host read into new memory first touches the result's pages from all its
    /// threads before decoding (default `true`). Fresh memory's first touch costs most
    /// of a host read on machines where page faults are slow; benchmarks turn this off
    /// to measure the decoders alone.
    pub prefault: bool,
    /// Host reads stream chunks (inner chunks) from this many decoded bytes on
    /// ([`DEFAULT_STREAM_MIN_BYTES`]): their pieces are decoded straight to their places
    /// in the output instead of whole into a scratch buffer.
    pub stream_min_bytes: usize,
    /// Bytes of one piece of a streamed chunk ([`DEFAULT_STREAM_PIECE_BYTES`]; 64 bytes
    /// to 64 MiB, rounded up to a multiple of 64).
    pub stream_piece_bytes: usize,
    /// Where the read reports its [`Progress`](crate::Progress) (default `None`: no
    /// reports, and no cost). A read spread over several devices reports the sum of
    /// its parts. See [`ProgressSink`](crate::ProgressSink).
    pub progress: Option<super::progress::ProgressSink>,
    /// A token that cancels the read (default `None`): the read then ends promptly
    /// with an error of kind [`ErrorKind::Cancelled`](devbuf_core::ErrorKind::Cancelled)
    /// and frees its memory. See [`Cancel`](crate::Cancel).
    pub cancel: Option<super::progress::Cancel>,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            decoder: Decoder::Auto,
            threads: None,
            gpu_workers: None,
            slot_bytes: DEFAULT_SLOT_BYTES,
            gpu: GpuTuning::default(),
            lane_streams: DEFAULT_LANE_STREAMS,
            prefault: true,
            stream_min_bytes: DEFAULT_STREAM_MIN_BYTES,
            stream_piece_bytes: DEFAULT_STREAM_PIECE_BYTES,
            progress: None,
            cancel: None,
        }
    }
}

/// How the GPU workers of a device read are sized (a field of [`ReadOptions`]).
///
/// `None` fields take defaults that depend on the decoder: the first for
/// [`Decoder::Auto`]'s model schedule (CPU workers decode from the start), the second
/// for [`Decoder::Gpu`] and [`Decoder::Both`] (which feed the device first, so more and
/// smaller claims in flight start it sooner: measured on the H100, 1 MiB zstd chunks
/// read at 17.0-17.7 GB/s with these against 14.8-15.2 with the first). Values out of
/// range are an [`Error::InvalidArgument`](devbuf_core::Error::InvalidArgument) naming
/// the field and its range when the read starts.
///
/// ```
/// use devbuf_zarr::{Decoder, GpuTuning, ReadOptions};
/// let o = ReadOptions {
///     decoder: Decoder::Gpu,
///     gpu: GpuTuning { claim_bytes: 64 << 20, claims_per_worker: Some(6), ..GpuTuning::default() },
///     ..ReadOptions::default()
/// };
/// assert_eq!(o.gpu.readers, None);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuTuning {
    /// Decoded bytes per nvCOMP call at most (default 128 MiB; 1 MiB to 4 GiB).
    pub claim_bytes: usize,
    /// Claims in flight per GPU worker (3 / 4; 1 to 16). Fewer when a quarter of the
    /// device's free memory does not hold that many.
    pub claims_per_worker: Option<usize>,
    /// Claims in flight over all GPU workers of a read (6 / 8; 1 to 64), each on a
    /// stream of its own.
    pub claims_in_flight: Option<usize>,
    /// Reader threads per GPU worker, which read stored bytes into page-locked memory
    /// (6; with [`Decoder::Gpu`] and [`Decoder::Both`] the GPU workers share every
    /// thread; 1 to 64).
    pub readers: Option<usize>,
    /// Claims per flight over a read at least (2 / 1; 1 to 64): smaller claims start
    /// the device sooner.
    pub spread: Option<usize>,
    /// A worker's first claims are `2^-ramp`, `2^-(ramp-1)`, ... of the full size (0;
    /// at most 8), so the device starts sooner; full claims grow so that a worker's
    /// first round of claims still covers its share of the read.
    pub ramp: Option<u32>,
    /// Whether GPU workers consult the cost model before a claim (default `true`);
    /// `false`: they take claims while there are any.
    pub cost_model: bool,
}

impl Default for GpuTuning {
    fn default() -> Self {
        GpuTuning {
            claim_bytes: 128 << 20,
            claims_per_worker: None,
            claims_in_flight: None,
            readers: None,
            spread: None,
            ramp: None,
            cost_model: true,
        }
    }
}

/// `Ok` when `value` lies in `range`, else an error naming the option and the range.
fn check_range<T: PartialOrd + std::fmt::Display + Copy>(
    name: &str,
    value: T,
    lo: T,
    hi: T,
) -> Result<()> {
    if value < lo || value > hi {
        return Err(Error::invalid(format!(
            "ReadOptions::{name} is {value}; valid: {lo} to {hi}"
        )));
    }
    Ok(())
}

impl ReadOptions {
    /// `Ok` when every field is in its documented range; otherwise an
    /// [`Error::InvalidArgument`](devbuf_core::Error::InvalidArgument) naming the first
    /// field out of range and the valid range. Reads call this before they start;
    /// users get it from [`ZarrArray::set_read_options`](crate::ZarrArray::set_read_options)
    /// (hidden: devbuf-flight's `ServerConfig` check calls it too).
    #[doc(hidden)]
    pub fn validate(&self) -> Result<()> {
        if let Some(t) = self.threads {
            check_range("threads", t, 1, 1024)?;
        }
        check_range("slot_bytes", self.slot_bytes, 1, 1 << 30)?;
        let g = &self.gpu;
        check_range("gpu.claim_bytes", g.claim_bytes, 1 << 20, 4 << 30)?;
        if let Some(v) = g.claims_per_worker {
            check_range("gpu.claims_per_worker", v, 1, 16)?;
        }
        if let Some(v) = g.claims_in_flight {
            check_range("gpu.claims_in_flight", v, 1, 64)?;
        }
        if let Some(v) = g.readers {
            check_range("gpu.readers", v, 1, 64)?;
        }
        if let Some(v) = g.spread {
            check_range("gpu.spread", v, 1, 64)?;
        }
        if let Some(v) = g.ramp {
            check_range("gpu.ramp", v, 0, 8)?;
        }
        check_range("lane_streams", self.lane_streams, 0, 64)?;
        check_range("stream_piece_bytes", self.stream_piece_bytes, 64, 64 << 20)?;
        Ok(())
    }
}
