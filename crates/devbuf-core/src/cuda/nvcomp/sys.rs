//! The declared subset of nvCOMP's C API and its run-time loader.
//!
//! Declarations follow the headers of nvCOMP 6.0 (`nvcomp.h`, `nvcomp/shared_types.h`,
//! `nvcomp/zstd.h`, `nvcomp/lz4.h`, `nvcomp/deflate.h`, `nvcomp/gdeflate.h` of the
//! `nvidia-libnvcomp-cu13` 6.0.0.12 wheel): only the calls devbuf makes, with the
//! options structs laid out field by field as the headers declare them (sizes and
//! alignments asserted below). Every codec family has the same seven batched calls with
//! its own options types, so one generic table ([`CodecFns`]) holds each family.
//!
//! The library is opened with `libloading` (`dlopen`), never linked: building devbuf
//! needs neither nvCOMP nor a CUDA toolkit. [`open`] loads one file, checks its version
//! with `nvcompGetProperties` *before* resolving anything else (the signatures below
//! are those of the 6.x API; 5.x differs, e.g. its `...DecompressAsync` takes no options
//! struct), then resolves every symbol; any failure is an `Err` naming the file and the
//! missing piece.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::Path;

/// `nvcompStatus_t` (a C enum: `int`). Kept as a plain integer so that an unknown
/// value written by a newer library is not undefined behaviour.
pub(crate) type Status = c_int;

/// `nvcompSuccess`.
pub(crate) const SUCCESS: Status = 0;

/// The name of an `nvcompStatus_t` value as the header spells it.
pub(crate) fn status_name(s: Status) -> &'static str {
    match s {
        0 => "nvcompSuccess",
        10 => "nvcompErrorInvalidValue",
        11 => "nvcompErrorNotSupported",
        12 => "nvcompErrorCannotDecompress",
        13 => "nvcompErrorBadChecksum",
        14 => "nvcompErrorCannotVerifyChecksums",
        15 => "nvcompErrorOutputBufferTooSmall",
        16 => "nvcompErrorWrongHeaderLength",
        17 => "nvcompErrorAlignment",
        18 => "nvcompErrorChunkSizeTooLarge",
        19 => "nvcompErrorCannotCompress",
        20 => "nvcompErrorWrongInputLength",
        21 => "nvcompErrorBatchSizeTooLarge",
        22 => "nvcompErrorSubChunkCountTooLarge",
        23 => "nvcompErrorSubChunkCountTooSmall",
        24 => "nvcompErrorOutputBufferAlignmentTooSmall",
        1000 => "nvcompErrorCudaError",
        10000 => "nvcompErrorInternal",
        _ => "unknown nvcompStatus_t",
    }
}

/// `NVCOMP_DECOMPRESS_BACKEND_CUDA` (`nvcompDecompressBackend_t`): the CUDA
/// implementation, which reports corrupt input through the statuses (the hardware
/// engine's behaviour on corrupt input is undefined, per the headers).
pub(crate) const BACKEND_CUDA: c_int = 2;
/// `NVCOMP_TYPE_CHAR` (`nvcompType_t`): LZ4 on plain bytes.
pub(crate) const TYPE_CHAR: c_int = 0;
/// `NVCOMP_BITSHUFFLE_NONE` (`nvcompBitshuffleMode_t`).
pub(crate) const BITSHUFFLE_NONE: c_int = 0;

/// `nvcompProperties_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Properties {
    /// nvCOMP version, `major * 1000 + minor * 100 + patch` (`MAKE_SEMANTIC_VERSION`).
    pub version: u32,
    /// Version of the CUDA runtime nvCOMP was built with (`CUDART_VERSION`).
    pub cudart_version: u32,
}

/// `nvcompAlignmentRequirements_t`: minimum alignments of each input, output and the
/// temporary buffer.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Alignments {
    pub input: usize,
    pub output: usize,
    pub temp: usize,
}

/// `nvcompBatchedZstdCompressOpts_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ZstdCompressOpts {
    pub reserved: [c_char; 64],
}

/// `nvcompBatchedZstdDecompressOpts_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ZstdDecompressOpts {
    pub backend: c_int,
    pub reserved: [c_char; 60],
}

/// `nvcompBatchedLZ4CompressOpts_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Lz4CompressOpts {
    pub data_type: c_int,
    pub bitshuffle_mode: c_int,
    pub reserved: [c_char; 56],
}

/// `nvcompBatchedLZ4DecompressOpts_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Lz4DecompressOpts {
    pub backend: c_int,
    pub sort_before_hw_decompress: c_int,
    pub data_type: c_int,
    pub bitshuffle_mode: c_int,
    pub reserved: [c_char; 48],
}

/// `nvcompBatchedDeflateCompressOpts_t` (also the layout of
/// `nvcompBatchedGdeflateCompressOpts_t`, declared separately below).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct DeflateCompressOpts {
    /// 0 entropy-only .. 5 highest ratio; 1 is the header's default.
    pub algorithm: c_int,
    pub reserved: [c_char; 60],
}

/// `nvcompBatchedDeflateDecompressOpts_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct DeflateDecompressOpts {
    pub backend: c_int,
    pub sort_before_hw_decompress: c_int,
    pub reserved: [c_char; 56],
}

/// `nvcompBatchedGdeflateCompressOpts_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct GdeflateCompressOpts {
    pub algorithm: c_int,
    pub reserved: [c_char; 60],
}

/// `nvcompBatchedGdeflateDecompressOpts_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct GdeflateDecompressOpts {
    pub backend: c_int,
    pub reserved: [c_char; 60],
}

// Every options struct of the 6.x headers is 64 bytes of 4-byte-aligned fields.
const _: () = {
    use std::mem::{align_of, size_of};
    assert!(size_of::<Properties>() == 8);
    assert!(size_of::<Alignments>() == 24);
    assert!(size_of::<ZstdCompressOpts>() == 64 && align_of::<ZstdCompressOpts>() == 1);
    assert!(size_of::<ZstdDecompressOpts>() == 64 && align_of::<ZstdDecompressOpts>() == 4);
    assert!(size_of::<Lz4CompressOpts>() == 64 && align_of::<Lz4CompressOpts>() == 4);
    assert!(size_of::<Lz4DecompressOpts>() == 64 && align_of::<Lz4DecompressOpts>() == 4);
    assert!(size_of::<DeflateCompressOpts>() == 64 && align_of::<DeflateCompressOpts>() == 4);
    assert!(size_of::<DeflateDecompressOpts>() == 64);
    assert!(size_of::<GdeflateCompressOpts>() == 64 && align_of::<GdeflateCompressOpts>() == 4);
    assert!(size_of::<GdeflateDecompressOpts>() == 64);
};

/// The options devbuf passes: the headers' defaults, except that decompression asks
/// for the CUDA backend explicitly.
pub(crate) const ZSTD_COMPRESS: ZstdCompressOpts = ZstdCompressOpts { reserved: [0; 64] };
pub(crate) const ZSTD_DECOMPRESS: ZstdDecompressOpts = ZstdDecompressOpts {
    backend: BACKEND_CUDA,
    reserved: [0; 60],
};
pub(crate) const LZ4_COMPRESS: Lz4CompressOpts = Lz4CompressOpts {
    data_type: TYPE_CHAR,
    bitshuffle_mode: BITSHUFFLE_NONE,
    reserved: [0; 56],
};
pub(crate) const LZ4_DECOMPRESS: Lz4DecompressOpts = Lz4DecompressOpts {
    backend: BACKEND_CUDA,
    sort_before_hw_decompress: 0,
    data_type: TYPE_CHAR,
    bitshuffle_mode: BITSHUFFLE_NONE,
    reserved: [0; 48],
};
pub(crate) const DEFLATE_COMPRESS: DeflateCompressOpts = DeflateCompressOpts {
    algorithm: 1,
    reserved: [0; 60],
};
pub(crate) const DEFLATE_DECOMPRESS: DeflateDecompressOpts = DeflateDecompressOpts {
    backend: BACKEND_CUDA,
    sort_before_hw_decompress: 0,
    reserved: [0; 56],
};
pub(crate) const GDEFLATE_COMPRESS: GdeflateCompressOpts = GdeflateCompressOpts {
    algorithm: 1,
    reserved: [0; 60],
};
pub(crate) const GDEFLATE_DECOMPRESS: GdeflateDecompressOpts = GdeflateDecompressOpts {
    backend: BACKEND_CUDA,
    reserved: [0; 60],
};

type GetPropertiesFn = unsafe extern "C" fn(*mut Properties) -> Status;
type StatusStringFn = unsafe extern "C" fn(Status) -> *const c_char;
/// `...GetRequiredAlignments(opts, nvcompAlignmentRequirements_t*)`.
type AlignmentsFn<O> = unsafe extern "C" fn(O, *mut Alignments) -> Status;
/// `...GetTempSize(num_chunks, max_uncompressed_chunk_bytes, opts, size_t* temp_bytes,
/// max_total_uncompressed_bytes, cudaStream_t)`.
type TempSizeFn<O> =
    unsafe extern "C" fn(usize, usize, O, *mut usize, usize, *mut c_void) -> Status;
/// `...CompressGetMaxOutputChunkSize(max_uncompressed_chunk_bytes, opts, size_t*)`.
type MaxOutputFn<O> = unsafe extern "C" fn(usize, O, *mut usize) -> Status;
/// `...CompressAsync(uncompressed_ptrs, uncompressed_bytes, max_uncompressed_chunk_bytes,
/// num_chunks, temp_ptr, temp_bytes, compressed_ptrs, compressed_bytes, opts, statuses,
/// stream)`.
type CompressFn<O> = unsafe extern "C" fn(
    *const *const c_void,
    *const usize,
    usize,
    usize,
    *mut c_void,
    usize,
    *const *mut c_void,
    *mut usize,
    O,
    *mut Status,
    *mut c_void,
) -> Status;
/// `...DecompressAsync(compressed_ptrs, compressed_bytes, uncompressed_buffer_bytes,
/// uncompressed_chunk_bytes, num_chunks, temp_ptr, temp_bytes, uncompressed_ptrs, opts,
/// statuses, stream)`.
type DecompressFn<O> = unsafe extern "C" fn(
    *const *const c_void,
    *const usize,
    *const usize,
    *mut usize,
    usize,
    *mut c_void,
    usize,
    *const *mut c_void,
    O,
    *mut Status,
    *mut c_void,
) -> Status;

/// The calls of a codec family, to name them in messages ([`CodecApi::call_name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    CompressGetTempSize = 0,
    CompressGetMaxOutputChunkSize = 1,
    CompressAsync = 2,
    DecompressGetTempSize = 3,
    DecompressAsync = 4,
}

/// The batched calls of one codec family, with the options devbuf passes.
pub(crate) struct CodecFns<C, D> {
    /// Full names of the calls, indexed by [`Call`].
    names: [&'static str; 5],
    copts: C,
    dopts: D,
    compress_alignments: AlignmentsFn<C>,
    compress_temp_size: TempSizeFn<C>,
    compress_max_output: MaxOutputFn<C>,
    compress_async: CompressFn<C>,
    decompress_alignments: AlignmentsFn<D>,
    decompress_temp_size: TempSizeFn<D>,
    decompress_async: DecompressFn<D>,
}

/// Device addresses of the tables of one batched call (each `num_chunks` entries of
/// device memory), and its scratch space.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchArgs {
    pub num_chunks: usize,
    /// `const void* const*`: where each input chunk starts.
    pub in_ptrs: u64,
    /// `const size_t*`: each input chunk's size.
    pub in_bytes: u64,
    /// Decompression: `const size_t*` capacity of each output. Unused by compression.
    pub out_capacity: u64,
    /// `size_t*`: actual decompressed / compressed size of each chunk (written).
    pub out_bytes: u64,
    /// `void* const*`: where each output chunk goes.
    pub out_ptrs: u64,
    /// `nvcompStatus_t*`: one status per chunk (written).
    pub statuses: u64,
    pub temp: u64,
    pub temp_bytes: usize,
    /// Compression: the largest uncompressed chunk. Unused by decompression.
    pub max_in_bytes: usize,
    pub stream: *mut c_void,
}

/// One codec family's calls with its option types erased.
pub(crate) trait CodecApi: Send + Sync {
    /// The full C name of one of the family's calls.
    fn call_name(&self, c: Call) -> &'static str;
    fn compress_alignments(&self) -> std::result::Result<Alignments, Status>;
    fn decompress_alignments(&self) -> std::result::Result<Alignments, Status>;
    fn compress_temp_size(&self, n: usize, max_chunk: usize, total: usize)
    -> Result<usize, Status>;
    fn decompress_temp_size(
        &self,
        n: usize,
        max_chunk: usize,
        total: usize,
    ) -> Result<usize, Status>;
    fn max_compressed_chunk_size(&self, max_uncompressed: usize) -> Result<usize, Status>;
    /// # Safety
    /// Every address in `a` must be device memory of the current context laid out as
    /// the headers require (tables of `num_chunks` entries, chunks inside live
    /// buffers, outputs of at least the max-output-chunk size, alignments honoured),
    /// valid until the call's work on `a.stream` has completed.
    unsafe fn compress_async(&self, a: &BatchArgs) -> Status;
    /// # Safety
    /// As for [`compress_async`](Self::compress_async); each output chunk must hold
    /// the capacity given for it.
    unsafe fn decompress_async(&self, a: &BatchArgs) -> Status;
}

impl<C: Copy + Send + Sync, D: Copy + Send + Sync> CodecApi for CodecFns<C, D> {
    fn call_name(&self, c: Call) -> &'static str {
        self.names[c as usize]
    }

    fn compress_alignments(&self) -> Result<Alignments, Status> {
        let mut a = Alignments {
            input: 0,
            output: 0,
            temp: 0,
        };
        // Safety: the options are a value of the declared struct; `a` is a valid out
        // pointer. A host-only query.
        let s = unsafe { (self.compress_alignments)(self.copts, &mut a) };
        if s == SUCCESS { Ok(a) } else { Err(s) }
    }

    fn decompress_alignments(&self) -> Result<Alignments, Status> {
        let mut a = Alignments {
            input: 0,
            output: 0,
            temp: 0,
        };
        // Safety: as in `compress_alignments`.
        let s = unsafe { (self.decompress_alignments)(self.dopts, &mut a) };
        if s == SUCCESS { Ok(a) } else { Err(s) }
    }

    fn compress_temp_size(
        &self,
        n: usize,
        max_chunk: usize,
        total: usize,
    ) -> Result<usize, Status> {
        let mut t = 0usize;
        // Safety: valid out pointer; the headers say the call enqueues nothing on the
        // stream (null: the legacy default stream, never touched).
        let s = unsafe {
            (self.compress_temp_size)(
                n,
                max_chunk,
                self.copts,
                &mut t,
                total,
                std::ptr::null_mut(),
            )
        };
        if s == SUCCESS { Ok(t) } else { Err(s) }
    }

    fn decompress_temp_size(
        &self,
        n: usize,
        max_chunk: usize,
        total: usize,
    ) -> Result<usize, Status> {
        let mut t = 0usize;
        // Safety: as in `compress_temp_size`.
        let s = unsafe {
            (self.decompress_temp_size)(
                n,
                max_chunk,
                self.dopts,
                &mut t,
                total,
                std::ptr::null_mut(),
            )
        };
        if s == SUCCESS { Ok(t) } else { Err(s) }
    }

    fn max_compressed_chunk_size(&self, max_uncompressed: usize) -> Result<usize, Status> {
        let mut m = 0usize;
        // Safety: valid out pointer; a host-only query.
        let s = unsafe { (self.compress_max_output)(max_uncompressed, self.copts, &mut m) };
        if s == SUCCESS { Ok(m) } else { Err(s) }
    }

    unsafe fn compress_async(&self, a: &BatchArgs) -> Status {
        // Safety: guaranteed by the caller (see the trait).
        unsafe {
            (self.compress_async)(
                a.in_ptrs as *const *const c_void,
                a.in_bytes as *const usize,
                a.max_in_bytes,
                a.num_chunks,
                a.temp as *mut c_void,
                a.temp_bytes,
                a.out_ptrs as *const *mut c_void,
                a.out_bytes as *mut usize,
                self.copts,
                a.statuses as *mut Status,
                a.stream,
            )
        }
    }

    unsafe fn decompress_async(&self, a: &BatchArgs) -> Status {
        // Safety: guaranteed by the caller (see the trait).
        unsafe {
            (self.decompress_async)(
                a.in_ptrs as *const *const c_void,
                a.in_bytes as *const usize,
                a.out_capacity as *const usize,
                a.out_bytes as *mut usize,
                a.num_chunks,
                a.temp as *mut c_void,
                a.temp_bytes,
                a.out_ptrs as *const *mut c_void,
                self.dopts,
                a.statuses as *mut Status,
                a.stream,
            )
        }
    }
}

/// The loaded library: its handle (kept open for as long as this value lives) and the
/// resolved calls.
pub(crate) struct Api {
    pub properties: Properties,
    status_string: StatusStringFn,
    pub zstd: CodecFns<ZstdCompressOpts, ZstdDecompressOpts>,
    pub lz4: CodecFns<Lz4CompressOpts, Lz4DecompressOpts>,
    pub deflate: CodecFns<DeflateCompressOpts, DeflateDecompressOpts>,
    pub gdeflate: CodecFns<GdeflateCompressOpts, GdeflateDecompressOpts>,
    /// Declared last: dropped after the function pointers above are gone.
    _lib: libloading::Library,
}

impl Api {
    /// nvCOMP's description of a status (`nvcompGetStatusString`).
    pub(crate) fn status_string(&self, s: Status) -> String {
        // Safety: the call takes any int and returns a pointer to a static
        // NUL-terminated string (or null, handled).
        let p = unsafe { (self.status_string)(s) };
        if p.is_null() {
            return String::new();
        }
        // Safety: non-null, NUL-terminated, static (owned by the library, which this
        // value keeps loaded).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// The file the library was loaded from (`dladdr` of one of its functions), which
    /// names the real file also when the dynamic linker resolved a bare soname.
    pub(crate) fn loaded_from(&self) -> Option<std::path::PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        // Safety: `Dl_info` is plain data (pointers and integers); all-zero is valid.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // Safety: dladdr only looks the address up among the loaded objects; the
        // address is a function of the library this value keeps loaded.
        let r = unsafe { libc::dladdr(self.status_string as *const c_void, &mut info) };
        if r == 0 || info.dli_fname.is_null() {
            return None;
        }
        // Safety: on success `dli_fname` is the NUL-terminated path of the object,
        // owned by the dynamic linker while the object stays loaded.
        let name = unsafe { CStr::from_ptr(info.dli_fname) };
        Some(std::ffi::OsStr::from_bytes(name.to_bytes()).into())
    }
}

/// nvCOMP major versions whose C API is declared here.
pub(crate) const SUPPORTED_MAJOR: u32 = 6;

/// Splits `major * 1000 + minor * 100 + patch`.
pub(crate) fn split_version(v: u32) -> (u32, u32, u32) {
    (v / 1000, (v % 1000) / 100, v % 100)
}

/// Resolves `name` in `lib` as a value of function-pointer type `T`.
///
/// # Safety
/// `T` must be the function-pointer type that matches the symbol's C declaration.
unsafe fn symbol<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
    // Safety: guaranteed by the caller; the symbol is copied out as a plain function
    // pointer, valid while `lib` stays loaded (`Api` keeps it).
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| format!("lacks the symbol {name} ({})", chain(&e)))
}

/// A libloading error with its cause (the `dlerror` text sits in `source()`).
fn chain(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(cause) => cause.to_string(),
        None => e.to_string(),
    }
}

macro_rules! codec_fns {
    ($lib:expr, $family:literal, $copts:expr, $dopts:expr) => {{
        let lib = $lib;
        let p = concat!("nvcompBatched", $family);
        // Safety (every `symbol` call): each type alias matches the declaration of
        // that call in the family's 6.x header, with the family's options struct.
        unsafe {
            CodecFns {
                names: [
                    concat!("nvcompBatched", $family, "CompressGetTempSize"),
                    concat!("nvcompBatched", $family, "CompressGetMaxOutputChunkSize"),
                    concat!("nvcompBatched", $family, "CompressAsync"),
                    concat!("nvcompBatched", $family, "DecompressGetTempSize"),
                    concat!("nvcompBatched", $family, "DecompressAsync"),
                ],
                copts: $copts,
                dopts: $dopts,
                compress_alignments: symbol(lib, &format!("{p}CompressGetRequiredAlignments"))?,
                compress_temp_size: symbol(lib, &format!("{p}CompressGetTempSize"))?,
                compress_max_output: symbol(lib, &format!("{p}CompressGetMaxOutputChunkSize"))?,
                compress_async: symbol(lib, &format!("{p}CompressAsync"))?,
                decompress_alignments: symbol(lib, &format!("{p}DecompressGetRequiredAlignments"))?,
                decompress_temp_size: symbol(lib, &format!("{p}DecompressGetTempSize"))?,
                decompress_async: symbol(lib, &format!("{p}DecompressAsync"))?,
            }
        }
    }};
}

/// Opens `path` (a file path, or a bare soname that the dynamic linker resolves),
/// checks the version and resolves every call. The error says why, without the path
/// (the caller names it).
pub(crate) fn open(path: &Path) -> Result<Api, String> {
    // Safety: loading runs the library's initialisers; nvCOMP's only set up its own
    // state (its bundled CUDA runtime loads libcuda lazily, on first use). The handle
    // is kept in `Api` and never unloaded while its function pointers are reachable.
    let lib =
        unsafe { libloading::Library::new(path) }.map_err(|e| format!("dlopen failed: {e}"))?;
    // Safety: `nvcompGetProperties(nvcompProperties_t*)` as declared in nvcomp.h (its
    // signature has been the same in every version that exports it).
    let get_properties: GetPropertiesFn = unsafe { symbol(&lib, "nvcompGetProperties")? };
    let mut properties = Properties::default();
    // Safety: valid out pointer to a struct of the declared layout.
    let s = unsafe { get_properties(&mut properties) };
    if s != SUCCESS {
        return Err(format!(
            "nvcompGetProperties failed: {} ({s})",
            status_name(s)
        ));
    }
    let (major, minor, patch) = split_version(properties.version);
    if major != SUPPORTED_MAJOR {
        return Err(format!(
            "is nvCOMP {major}.{minor}.{patch}; devbuf declares the C API of nvCOMP {SUPPORTED_MAJOR}.x only"
        ));
    }
    Ok(Api {
        properties,
        // Safety: `const char* nvcompGetStatusString(nvcompStatus_t)` as in nvcomp.h.
        status_string: unsafe { symbol(&lib, "nvcompGetStatusString")? },
        zstd: codec_fns!(&lib, "Zstd", ZSTD_COMPRESS, ZSTD_DECOMPRESS),
        lz4: codec_fns!(&lib, "LZ4", LZ4_COMPRESS, LZ4_DECOMPRESS),
        deflate: codec_fns!(&lib, "Deflate", DEFLATE_COMPRESS, DEFLATE_DECOMPRESS),
        gdeflate: codec_fns!(&lib, "Gdeflate", GDEFLATE_COMPRESS, GDEFLATE_DECOMPRESS),
        _lib: lib,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_split_as_the_header_macros() {
        assert_eq!(split_version(6000), (6, 0, 0));
        assert_eq!(split_version(5123), (5, 1, 23));
    }

    #[test]
    fn status_names() {
        assert_eq!(status_name(12), "nvcompErrorCannotDecompress");
        assert_eq!(status_name(7), "unknown nvcompStatus_t");
    }

    #[test]
    fn a_missing_file_is_an_error() {
        let e = open(Path::new("/nonexistent/libnvcomp.so.6"))
            .err()
            .unwrap();
        assert!(e.contains("dlopen failed"), "{e}");
    }
}
