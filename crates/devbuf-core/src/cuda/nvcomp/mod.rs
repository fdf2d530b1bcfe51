//! GPU (de)compression with nvCOMP, loaded at run time.
//!
//! nvCOMP decodes many chunks per call, in parallel across chunks: the read engine
//! hands it a whole batch (compressed chunks already on the device, one output range
//! each) and gets decoded bytes in device memory without a trip through the host.
//!
//! * [`library`] loads `libnvcomp.so.6` once and caches the outcome: `library().is_ok()`
//!   says whether it worked, `library().err()` why not.
//! * [`DecompressBatch`]: reusable per-thread state (device tables, temporary space,
//!   statuses) for batched decompression of [`GpuCodec::Zstd`], [`GpuCodec::Lz4`] (raw
//!   LZ4 blocks), [`GpuCodec::Deflate`] (raw deflate, RFC 1951) and
//!   [`GpuCodec::GDeflate`].
//! * [`CompressBatch`]: the same for compression (the device write path).
//!
//! # Finding the library
//!
//! Nothing is linked at build time (no CUDA toolkit, no nvCOMP needed to build). At the
//! first call of [`library`], in this order:
//!
//! 1. `DEVBUF_NVCOMP_LIB`: the full path of `libnvcomp.so.6`, or a directory holding it
//!    (directly, or in `lib64/`, `lib/` or the wheel's `nvidia/libnvcomp/lib64/`). When
//!    it is set, nothing else is tried: a wrong setting is reported, not papered over
//!    by another copy of the library.
//! 2. `libnvcomp.so.6` through the dynamic linker (`LD_LIBRARY_PATH`, `ld.so.cache`).
//! 3. The pip wheel `nvidia-libnvcomp-cu13`: `nvidia/libnvcomp/lib64/`
//!    under `$VIRTUAL_ENV` and `$CONDA_PREFIX` site-packages, every `$PYTHONPATH`
//!    entry, `~/.local/lib/python3*/site-packages` and the system's
//!    `/usr/{local/,}lib/python3*/{dist,site}-packages`; then `$CONDA_PREFIX/lib`.
//!
//! The first file that opens, reports a supported version (`nvcompGetProperties`:
//! nvCOMP 6.x, whose C API is declared here) and exports every call devbuf uses wins.
//! Otherwise the error lists every path tried and why it failed. Nothing panics.
//!
//! # Limits and alignment
//!
//! Chunk sizes are checked against the limits of nvCOMP's headers before any call
//! ([`GpuCodec::max_decompress_chunk_bytes`], [`GpuCodec::max_compress_chunk_bytes`]).
//! nvCOMP requires some buffers to be aligned (queried at load time, see
//! [`Nvcomp::decompress_alignment`]; e.g. 4 bytes for deflate inputs). Ranges at any
//! byte offset are accepted: a chunk whose address does not meet the requirement is
//! copied (device to device) through an aligned staging area of the batch's
//! workspace. Aligned chunks cost nothing extra, so a layout that places chunks at
//! multiples of 8 bytes avoids those copies.
//!
//! # Corrupt input
//!
//! devbuf asks for nvCOMP's CUDA backend, which reports bad data through per-chunk
//! statuses (the hardware decompression engine of newer GPUs, per the headers, has
//! undefined behaviour on corrupt input). Every status and every decoded size is
//! checked; an error names the chunk. But nvCOMP does not keep to the output sizes it
//! is given: on an H100 (nvCOMP 6.0.0) its zstd decoder wrote past an output range
//! 100 bytes too small for the chunk, its LZ4 and deflate decoders wrote outside the
//! output ranges on input with random bit flips, and its zstd decoder did not finish
//! at all on such input. Hence, by default:
//!
//! * [`DecompressBatch`] decodes into slots of its own scratch area, telling nvCOMP it
//!   may write `len + slack` bytes (slack: 1/16 of the chunk, at least 4 KiB) and
//!   keeping as much again free after it, then copies each output range out with one
//!   kernel launch. The destination only ever receives writes inside the output
//!   ranges; writes past a slot's guard band, which nvCOMP does not rule out, could
//!   still reach other device memory. [`DecompressBatch::set_in_place`] decodes
//!   straight into the destination, for data known to be intact.
//! * A call waits at most 60 s ([`DecompressBatch::set_timeout`]) and then returns an
//!   error; memory the still-running decoder may touch is kept allocated for good.
//!
//! Data from untrusted sources should still carry a checksum verified before decoding.
//!
//! ```no_run
//! use devbuf_core::cuda::nvcomp::{self, DecompressBatch, GpuCodec};
//! use devbuf_core::cuda::{Context, DeviceBuffer, Stream};
//!
//! /// Decodes zstd frames (concatenated in `frames`, frame `i` at `bounds[i]..bounds[i + 1]`)
//! /// of `chunk` decoded bytes each into one device buffer.
//! fn decode(frames: &[u8], bounds: &[usize], chunk: usize) -> devbuf_core::Result<DeviceBuffer> {
//!     let lib = nvcomp::library()?; // Err (with every path tried) without nvCOMP
//!     println!("nvCOMP {:?} from {}", lib.version(), lib.path().display());
//!     let ctx = Context::new(0)?;
//!     let stream = Stream::new(&ctx)?;
//!     let src = DeviceBuffer::from_slice(&ctx, frames)?;
//!     let n = bounds.len() - 1;
//!     let dst = ctx.allocate(n * chunk)?;
//!     let inputs: Vec<_> = bounds.windows(2).map(|w| w[0]..w[1]).collect();
//!     let outputs: Vec<_> = (0..n).map(|i| i * chunk..(i + 1) * chunk).collect();
//!     let mut batch = DecompressBatch::new(&ctx, None)?; // keep one per thread and reuse it
//!     batch.decompress(&stream, GpuCodec::Zstd, &src, &inputs, &dst, &outputs)?;
//!     Ok(dst)
//! }
//! ```

mod batch;
mod find;
pub(crate) mod plan;
mod sys;
mod workspace;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub use batch::{CompressBatch, DecompressBatch};

use crate::error::{Error, Result};
use sys::{CodecApi, Status};

/// A compression format nvCOMP decodes on the GPU.
///
/// ```
/// use devbuf_core::cuda::nvcomp::GpuCodec;
/// assert_eq!(GpuCodec::Zstd.to_string(), "zstd");
/// assert_eq!(GpuCodec::Lz4.max_compress_chunk_bytes(), 16 << 20);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuCodec {
    /// Zstandard frames (one frame per chunk, as zarr's `zstd` codec writes them).
    Zstd,
    /// LZ4 raw block format (no frame header; zarr's `lz4` via numcodecs adds a 4-byte
    /// size prefix that the caller strips).
    Lz4,
    /// Raw deflate (RFC 1951), without zlib or gzip headers (the caller strips those).
    Deflate,
    /// NVIDIA's GDeflate (deflate streams laid out for parallel decoding).
    GDeflate,
}

const fn sat(x: u64) -> usize {
    if x > usize::MAX as u64 {
        usize::MAX
    } else {
        x as usize
    }
}

impl GpuCodec {
    /// Every codec, in declaration order.
    pub const ALL: [GpuCodec; 4] = [
        GpuCodec::Zstd,
        GpuCodec::Lz4,
        GpuCodec::Deflate,
        GpuCodec::GDeflate,
    ];

    /// The short name [`Display`](fmt::Display) writes.
    const fn name(self) -> &'static str {
        match self {
            GpuCodec::Zstd => "zstd",
            GpuCodec::Lz4 => "lz4",
            GpuCodec::Deflate => "deflate",
            GpuCodec::GDeflate => "gdeflate",
        }
    }

    /// The largest compressed *and* decompressed chunk nvCOMP decodes, in bytes
    /// (`nvcomp<Codec>DecompressionMaxAllowedChunkSize` of the 6.0 headers): zstd
    /// 2 GiB - 1, LZ4 and deflate 4 GiB - 1, GDeflate 4 GiB + 288.
    ///
    /// ```
    /// use devbuf_core::cuda::nvcomp::GpuCodec;
    /// assert_eq!(GpuCodec::Zstd.max_decompress_chunk_bytes(), (1 << 31) - 1);
    /// ```
    pub const fn max_decompress_chunk_bytes(self) -> usize {
        match self {
            GpuCodec::Zstd => sat((1 << 31) - 1),
            GpuCodec::Lz4 | GpuCodec::Deflate => sat((1 << 32) - 1),
            GpuCodec::GDeflate => sat((1 << 32) + 288),
        }
    }

    /// The largest uncompressed chunk nvCOMP compresses, in bytes: zstd and LZ4 16 MiB,
    /// deflate and GDeflate 64 KiB. Where the 6.0 headers disagree with themselves
    /// (zstd's constant says 2 GiB - 1, its call 16 MB; deflate's and GDeflate's
    /// constants say 2 GiB, their calls 64 KiB) the stricter statement is taken: the
    /// headers call a violation undefined behaviour.
    ///
    /// ```
    /// use devbuf_core::cuda::nvcomp::GpuCodec;
    /// assert_eq!(GpuCodec::Deflate.max_compress_chunk_bytes(), 65536);
    /// ```
    pub const fn max_compress_chunk_bytes(self) -> usize {
        match self {
            GpuCodec::Zstd | GpuCodec::Lz4 => 1 << 24,
            GpuCodec::Deflate | GpuCodec::GDeflate => 1 << 16,
        }
    }
}

/// A short name: `zstd`, `lz4`, `deflate`, `gdeflate`.
///
/// ```
/// use devbuf_core::cuda::nvcomp::GpuCodec;
/// assert_eq!(GpuCodec::GDeflate.to_string(), "gdeflate");
/// ```
impl fmt::Display for GpuCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Minimum alignments (in bytes) nvCOMP requires of each chunk's input and output
/// address and of its temporary space (`nvcompAlignmentRequirements_t`).
///
/// ```no_run
/// use devbuf_core::cuda::nvcomp::{self, GpuCodec};
/// let a = nvcomp::library()?.decompress_alignment(GpuCodec::Deflate);
/// println!("deflate inputs at multiples of {} avoid staging copies", a.input);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alignment {
    /// Alignment of each input chunk.
    pub input: usize,
    /// Alignment of each output chunk.
    pub output: usize,
    /// Alignment of the temporary space.
    pub temp: usize,
}

/// The loaded nvCOMP library.
///
/// ```no_run
/// let lib = devbuf_core::cuda::nvcomp::library()?;
/// let (major, minor, patch) = lib.version();
/// println!("nvCOMP {major}.{minor}.{patch} at {}", lib.path().display());
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub struct Nvcomp {
    api: sys::Api,
    path: PathBuf,
    /// (compression, decompression) alignments, indexed like [`GpuCodec::ALL`].
    alignments: [(Alignment, Alignment); 4],
}

impl Nvcomp {
    /// Opens the library at `path` without the search or the cache of [`library`]
    /// (for probing a particular file). Batches always use [`library`]'s.
    ///
    /// ```
    /// let e = devbuf_core::cuda::nvcomp::Nvcomp::open("/nonexistent/libnvcomp.so.6").unwrap_err();
    /// assert!(e.to_string().contains("/nonexistent/libnvcomp.so.6"));
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<Nvcomp> {
        let path = path.as_ref();
        Nvcomp::from_path(path).map_err(|why| {
            Error::unavailable(format!("nvCOMP at {} is unusable: {why}", path.display()))
        })
    }

    fn from_path(path: &Path) -> std::result::Result<Nvcomp, String> {
        if path.components().count() > 1 && !path.exists() {
            return Err("no such file".to_string());
        }
        let api = sys::open(path)?;
        let path = api.loaded_from().unwrap_or_else(|| path.to_path_buf());
        let mut alignments = [(
            Alignment {
                input: 1,
                output: 1,
                temp: 1,
            },
            Alignment {
                input: 1,
                output: 1,
                temp: 1,
            },
        ); 4];
        for (slot, codec) in alignments.iter_mut().zip(GpuCodec::ALL) {
            let c = codec_api(&api, codec);
            let conv = |r: std::result::Result<sys::Alignments, Status>, what: &str| {
                r.map(|a| Alignment {
                    input: a.input.max(1),
                    output: a.output.max(1),
                    temp: a.temp.max(1),
                })
                .map_err(|s| {
                    format!(
                        "{codec} {what} alignment query failed: {} ({s})",
                        sys::status_name(s)
                    )
                })
            };
            *slot = (
                conv(c.compress_alignments(), "compression")?,
                conv(c.decompress_alignments(), "decompression")?,
            );
        }
        Ok(Nvcomp {
            api,
            path,
            alignments,
        })
    }

    /// The library's version `(major, minor, patch)`, e.g. `(6, 0, 0)`.
    pub fn version(&self) -> (u32, u32, u32) {
        sys::split_version(self.api.properties.version)
    }

    /// The CUDA runtime version nvCOMP was built with, `(major, minor)`.
    pub fn cuda_runtime_version(&self) -> (u32, u32) {
        let v = self.api.properties.cudart_version;
        (v / 1000, (v % 1000) / 10)
    }

    /// The file the library was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// nvCOMP's alignment requirements for decompressing `codec`.
    pub fn decompress_alignment(&self, codec: GpuCodec) -> Alignment {
        self.alignments[codec as usize].1
    }

    /// nvCOMP's alignment requirements for compressing `codec`.
    pub fn compress_alignment(&self, codec: GpuCodec) -> Alignment {
        self.alignments[codec as usize].0
    }

    /// The most bytes one chunk of up to `max_uncompressed` bytes can compress to: the
    /// output capacity [`CompressBatch::compress`] needs per chunk.
    ///
    /// ```no_run
    /// use devbuf_core::cuda::nvcomp::{self, GpuCodec};
    /// let cap = nvcomp::library()?.max_compressed_chunk_size(GpuCodec::Zstd, 1 << 16)?;
    /// assert!(cap >= 1 << 16);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn max_compressed_chunk_size(
        &self,
        codec: GpuCodec,
        max_uncompressed: usize,
    ) -> Result<usize> {
        if max_uncompressed > codec.max_compress_chunk_bytes() {
            return Err(Error::invalid(format!(
                "{max_uncompressed} bytes exceed nvCOMP's limit of {} bytes per chunk for {codec} compression",
                codec.max_compress_chunk_bytes()
            )));
        }
        let c = self.codec(codec);
        c.max_compressed_chunk_size(max_uncompressed)
            .map_err(|s| self.call_error(c.call_name(sys::Call::CompressGetMaxOutputChunkSize), s))
    }

    pub(crate) fn codec(&self, codec: GpuCodec) -> &dyn CodecApi {
        codec_api(&self.api, codec)
    }

    /// `name (code): nvCOMP's description`.
    pub(crate) fn describe(&self, s: Status) -> String {
        format!(
            "{} ({s}): {}",
            sys::status_name(s),
            self.api.status_string(s)
        )
    }

    /// A failed nvCOMP call, as a [`Error::Driver`] naming the call and the status.
    pub(crate) fn call_error(&self, call: &'static str, s: Status) -> Error {
        Error::Driver {
            call,
            code: s as u32,
            name: sys::status_name(s).to_string(),
            description: self.api.status_string(s),
        }
    }
}

fn codec_api(api: &sys::Api, codec: GpuCodec) -> &dyn CodecApi {
    match codec {
        GpuCodec::Zstd => &api.zstd,
        GpuCodec::Lz4 => &api.lz4,
        GpuCodec::Deflate => &api.deflate,
        GpuCodec::GDeflate => &api.gdeflate,
    }
}

impl fmt::Debug for Nvcomp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nvcomp")
            .field("version", &self.version())
            .field("cuda_runtime", &self.cuda_runtime_version())
            .field("path", &self.path)
            .finish()
    }
}

/// Searches for nvCOMP in the documented order (module docs) and returns the first
/// usable copy, or why there is none (every path tried, with its reason).
fn search() -> std::result::Result<Nvcomp, String> {
    let env = std::env::var(find::ENV_VAR).ok();
    let mut tried = Vec::new();
    for c in find::candidates(env.as_deref()) {
        match Nvcomp::from_path(&c.path) {
            Ok(lib) => return Ok(lib),
            Err(why) => tried.push(format!("{} [{}]: {why}", c.path.display(), c.source)),
        }
    }
    Err(format!(
        "nvCOMP ({}) could not be loaded; tried, in order: {}. Set {} to the library or its \
         directory (e.g. from the pip wheel nvidia-libnvcomp-cu13: .../nvidia/libnvcomp/lib64)",
        find::SONAME,
        tried.join("; "),
        find::ENV_VAR
    ))
}

static LIBRARY: OnceLock<std::result::Result<Nvcomp, String>> = OnceLock::new();

/// The nvCOMP library, loaded on first use and cached for the life of the process
/// (the outcome too: a failed search is not repeated).
///
/// Errors: [`Error::CudaUnavailable`] whose reason lists every path tried and why it
/// failed (missing file, missing symbol, unsupported version). Never panics.
///
/// Whether nvCOMP is usable is `library().is_ok()`; why not is `library().err()`
/// (its `reason`, without the kind's prefix: `Err(Error::CudaUnavailable { reason })`).
///
/// ```
/// use devbuf_core::Error;
/// use devbuf_core::cuda::nvcomp;
/// match nvcomp::library() {
///     Ok(lib) => println!("nvCOMP {:?}", lib.version()),
///     Err(e) => println!("CPU decoding only: {e}"),
/// }
/// let _gpu_decode = nvcomp::library().is_ok();
/// if let Err(Error::CudaUnavailable { reason }) = nvcomp::library() {
///     println!("decoding on the CPU: {reason}");
/// }
/// ```
pub fn library() -> Result<&'static Nvcomp> {
    LIBRARY
        .get_or_init(search)
        .as_ref()
        .map_err(Error::unavailable)
}
