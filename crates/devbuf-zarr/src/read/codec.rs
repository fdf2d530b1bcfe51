//! The read engine's own view of an array's codecs: the common chains (`transpose`?,
//! `bytes`, one of `zstd` / `gzip` / `blosc` or none, `crc32c`?; and `sharding_indexed`
//! over such a chain) decoded here, bounded by the chunk's expected size, straight into
//! the caller's memory. Any other chain is decoded by `zarrs` (see `pipeline`).
//!
//! Bounded means: no decode ever writes or allocates more than the chunk's decoded
//! size. A zstd frame that declares a larger content size is refused before decoding;
//! a gzip stream or blosc buffer that would produce more is cut off and refused; an
//! uncompressed chunk of the wrong length is refused.

use std::cell::RefCell;

use zarrs::array::{Array, ArrayMetadata};
use zarrs::metadata::v3::MetadataV3;

use devbuf_core::error::{Error, Result};
use devbuf_core::zarr::Order;

/// The bytes-to-bytes compressor of a chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Compression {
    None,
    Zstd,
    Gzip,
    /// `numcodecs.zlib` (zarr v2's `zlib`): a zlib stream (RFC 1950), deflate inside.
    Zlib,
    /// `numcodecs.lz4` (zarr v2's `lz4`): the decoded size (4 bytes, little-endian),
    /// then one LZ4 block (`super::super::lz4`).
    Lz4,
    /// blosc's container, with the compressor its metadata names.
    Blosc(BloscInner),
}

/// The compressor inside a blosc container, as the array's metadata names it (each
/// chunk's header says again which one compressed it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BloscInner {
    /// `lz4` or `lz4hc` (both write LZ4 blocks).
    Lz4,
    /// `zstd`.
    Zstd,
    /// `blosclz`, `zlib`, `snappy`, or no name.
    Other,
}

impl Compression {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Zstd => "zstd",
            Compression::Gzip => "gzip",
            Compression::Zlib => "zlib",
            Compression::Lz4 => "lz4",
            Compression::Blosc(_) => "blosc",
        }
    }
}

/// A chain the engine decodes itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chain {
    /// Element order of the decoded bytes (F: a `transpose` reversing the axes).
    pub order: Order,
    /// The stored byte order differs from the host's: swap elements of this width.
    pub swap: Option<usize>,
    pub compression: Compression,
    /// A `crc32c` checksum follows the compressed bytes.
    pub crc32c: bool,
}

/// Where a shard keeps its index and how it is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShardIndex {
    /// The index is at the end of the shard (else at the start).
    pub at_end: bool,
    /// The index is followed by its crc32c.
    pub crc32c: bool,
}

impl ShardIndex {
    /// Bytes of the index of a shard of `n` inner chunks.
    pub(crate) fn len(&self, n: u64) -> Option<u64> {
        n.checked_mul(16)?
            .checked_add(if self.crc32c { 4 } else { 0 })
    }
}

/// How the engine decodes an array's chunks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Codecs {
    /// Every chunk with this chain.
    Plain(Chain),
    /// Every chunk is a shard of inner chunks of `inner_shape`, each with `chain`.
    Sharded {
        inner_shape: Vec<u64>,
        chain: Chain,
        index: ShardIndex,
    },
    /// Decoded by `zarrs` (the reason is reported).
    Zarrs(String),
}

impl Codecs {
    /// The codecs of `array`, as the engine will decode them.
    pub(crate) fn of<T: ?Sized>(array: &Array<T>, elem_swap_width: usize) -> Codecs {
        let codecs = match codec_list(array) {
            Ok(c) => c,
            Err(why) => return Codecs::Zarrs(why),
        };
        if !array.storage_transformers().create_metadatas().is_empty() {
            return Codecs::Zarrs("storage transformers".into());
        }
        let ndim = array.dimensionality();
        if let [only] = codecs.as_slice()
            && only.name() == "sharding_indexed"
        {
            return sharded(only, ndim, elem_swap_width)
                .unwrap_or_else(|why| Codecs::Zarrs(format!("sharding_indexed: {why}")));
        }
        match chain(&codecs, ndim, elem_swap_width) {
            Ok(c) => Codecs::Plain(c),
            Err(why) => Codecs::Zarrs(why),
        }
    }

    /// A short description for reports (`"zstd"`, `"sharded zstd"`, `"zarrs: ..."`).
    pub(crate) fn describe(&self) -> String {
        match self {
            Codecs::Plain(c) => c.compression.name().to_string(),
            Codecs::Sharded { chain, .. } => format!("sharded {}", chain.compression.name()),
            Codecs::Zarrs(why) => format!("zarrs ({why})"),
        }
    }
}

/// The array's codecs as zarr v3 metadata (a v2 array's compressor, filters and order
/// converted).
pub(crate) fn codec_list<T: ?Sized>(
    array: &Array<T>,
) -> std::result::Result<Vec<MetadataV3>, String> {
    match array.metadata() {
        ArrayMetadata::V3(m) => Ok(m.codecs.clone()),
        ArrayMetadata::V2(m) => zarrs::convert::array_metadata_v2_to_v3(m)
            .map(|v3| v3.codecs)
            .map_err(|e| format!("zarr v2 metadata: {e}")),
    }
}

fn config_str<'a>(c: &'a MetadataV3, key: &str) -> Option<&'a str> {
    c.configuration()
        .and_then(|m| m.get(key))
        .and_then(|v| v.as_str())
}

/// Parses `[transpose?] bytes [zstd|gzip|blosc]? [crc32c]?`.
fn chain(
    codecs: &[MetadataV3],
    ndim: usize,
    swap_width: usize,
) -> std::result::Result<Chain, String> {
    let mut it = codecs.iter().peekable();
    let mut order = Order::C;
    if let Some(t) = it.peek()
        && t.name() == "transpose"
    {
        let perm: Option<Vec<u64>> = t
            .configuration()
            .and_then(|c| c.get("order"))
            .and_then(|o| o.as_array())
            .map(|o| o.iter().filter_map(|v| v.as_u64()).collect());
        let identity: Vec<u64> = (0..ndim as u64).collect();
        let reversed: Vec<u64> = identity.iter().rev().copied().collect();
        match perm {
            Some(p) if p == identity => {}
            Some(p) if p == reversed => order = Order::F,
            _ => return Err("a transpose that is neither C nor F order".into()),
        }
        it.next();
    }
    let Some(bytes) = it.next() else {
        return Err("no codecs".into());
    };
    if bytes.name() != "bytes" {
        return Err(format!("array-to-bytes codec {:?}", bytes.name()));
    }
    let big = config_str(bytes, "endian") == Some("big");
    let swap = (swap_width > 1 && big != cfg!(target_endian = "big")).then_some(swap_width);
    let mut compression = Compression::None;
    let mut crc32c = false;
    for c in it {
        if crc32c {
            return Err(format!("codec {:?} after crc32c", c.name()));
        }
        let this = match c.name() {
            "zstd" => Compression::Zstd,
            "gzip" => Compression::Gzip,
            "numcodecs.zlib" | "zlib" => Compression::Zlib,
            "numcodecs.lz4" | "lz4" => Compression::Lz4,
            "blosc" => Compression::Blosc(match config_str(c, "cname") {
                Some("lz4" | "lz4hc") => BloscInner::Lz4,
                Some("zstd") => BloscInner::Zstd,
                _ => BloscInner::Other,
            }),
            "crc32c" => {
                crc32c = true;
                continue;
            }
            other => return Err(format!("codec {other:?}")),
        };
        if compression != Compression::None {
            return Err("two compressors".into());
        }
        compression = this;
    }
    Ok(Chain {
        order,
        swap,
        compression,
        crc32c,
    })
}

fn sharded(c: &MetadataV3, ndim: usize, swap_width: usize) -> std::result::Result<Codecs, String> {
    let cfg = c.configuration().ok_or("no configuration")?;
    let inner_shape: Vec<u64> = cfg
        .get("chunk_shape")
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|v| v.as_u64()).collect())
        .ok_or("no chunk_shape")?;
    if inner_shape.len() != ndim || inner_shape.contains(&0) {
        return Err(format!("inner chunk shape {inner_shape:?}"));
    }
    let parse = |key: &str| -> std::result::Result<Vec<MetadataV3>, String> {
        let v = cfg.get(key).ok_or(format!("no {key}"))?;
        serde_json::from_value(v.clone()).map_err(|e| format!("{key}: {e}"))
    };
    let chain = chain(&parse("codecs")?, ndim, swap_width)?;
    let index_codecs = parse("index_codecs")?;
    let crc = match index_codecs.as_slice() {
        [b] if b.name() == "bytes" => false,
        [b, c] if b.name() == "bytes" && c.name() == "crc32c" => true,
        _ => return Err("index codecs other than bytes + crc32c".into()),
    };
    if index_codecs
        .first()
        .is_some_and(|b| config_str(b, "endian") == Some("big"))
    {
        return Err("a big-endian shard index".into());
    }
    let at_end = match cfg.get("index_location").and_then(|v| v.as_str()) {
        None | Some("end") => true,
        Some("start") => false,
        Some(o) => return Err(format!("index_location {o:?}")),
    };
    Ok(Codecs::Sharded {
        inner_shape,
        chain,
        index: ShardIndex {
            at_end,
            crc32c: crc,
        },
    })
}

thread_local! {
    static ZSTD: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// Runs `f` on the calling thread's zstd decoder kept in `key` (made by `make` on the
/// thread's first use, reused for every later chunk).
pub(crate) fn with_zstd<T: 'static, R>(
    key: &'static std::thread::LocalKey<RefCell<Option<T>>>,
    make: fn() -> std::io::Result<T>,
    f: impl FnOnce(&mut T) -> Result<R>,
) -> Result<R> {
    key.with(|cell| {
        let mut slot = cell.borrow_mut();
        let d = match &mut *slot {
            Some(d) => d,
            empty => empty.insert(
                make().map_err(|e| Error::from_io("creating a zstd decoder", e.to_string(), e))?,
            ),
        };
        f(d)
    })
}

/// A zstd decoder's error on a chunk that holds exactly `n` bytes.
pub(crate) fn zstd_error(what: &dyn Fn() -> String, n: usize, e: std::io::Error) -> Error {
    Error::Malformed(format!(
        "{}: zstd: {e} (the chunk holds exactly {n} bytes)",
        what()
    ))
}

/// Checks and strips a trailing crc32c.
pub(crate) fn strip_crc32c<'a>(src: &'a [u8], what: &dyn Fn() -> String) -> Result<&'a [u8]> {
    let Some(body_len) = src.len().checked_sub(4) else {
        return Err(Error::Malformed(format!(
            "{}: {} bytes cannot hold a crc32c checksum (4 bytes)",
            what(),
            src.len()
        )));
    };
    let (body, tail) = src.split_at(body_len);
    let want = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    let got = crc32c::crc32c(body);
    if got != want {
        return Err(Error::Malformed(format!(
            "{}: crc32c checksum mismatch (stored {want:#010x}, computed {got:#010x})",
            what()
        )));
    }
    Ok(body)
}

/// The raw deflate stream inside one gzip member (RFC 1952) that decodes to
/// `expect` bytes: its byte range in `src`. Checks the header's magic, method and
/// flags and the trailer's size field (the CRC-32 of the decoded data is checked on the
/// device after nvCOMP's decode: `stored::gzip_crc32s`).
pub(crate) fn gzip_deflate_range(
    src: &[u8],
    expect: usize,
    what: &dyn Fn() -> String,
) -> Result<std::ops::Range<usize>> {
    let bad = |m: &str| Error::Malformed(format!("{}: gzip: {m}", what()));
    if src.len() < 18 || src[0] != 0x1f || src[1] != 0x8b || src[2] != 8 {
        return Err(bad("not a gzip member (bad magic, method or length)"));
    }
    let flags = src[3];
    if flags & 0xe0 != 0 {
        return Err(bad("reserved header flags set"));
    }
    let mut at = 10usize;
    if flags & 0x04 != 0 {
        let xlen = u16::from_le_bytes([src[at], src[at + 1]]) as usize;
        at = at.saturating_add(2 + xlen);
    }
    for flag in [0x08u8, 0x10] {
        if flags & flag != 0 {
            let end = src
                .get(at..)
                .and_then(|r| r.iter().position(|&b| b == 0))
                .ok_or_else(|| bad("unterminated header field"))?;
            at += end + 1;
        }
    }
    if flags & 0x02 != 0 {
        at += 2;
    }
    let end = src.len() - 8;
    if at > end {
        return Err(bad("header runs past the trailer"));
    }
    let isize = u32::from_le_bytes([src[end + 4], src[end + 5], src[end + 6], src[end + 7]]);
    if isize as u64 != (expect as u64 & 0xffff_ffff) {
        return Err(Error::Malformed(format!(
            "{}: gzip chunk decodes to {isize} bytes (its trailer), the chunk holds exactly \
             {expect} bytes",
            what()
        )));
    }
    Ok(at..end)
}

/// The raw deflate stream inside a zlib stream (RFC 1950) of one chunk, for nvCOMP:
/// the 2-byte header checked (deflate, a window of at most 32 KiB, the header's check
/// bits, no preset dictionary), the 4-byte Adler-32 trailer left off. zlib does not
/// record the decoded size: nvCOMP's actual size is checked against the chunk's after
/// the decode; the Adler-32 is not checked on the GPU (gzip's CRC-32 is).
pub(crate) fn zlib_deflate_range(
    src: &[u8],
    what: &dyn Fn() -> String,
) -> Result<std::ops::Range<usize>> {
    let bad = |m: &str| Error::Malformed(format!("{}: zlib: {m}", what()));
    if src.len() < 2 + 4 + 1 {
        return Err(bad(&format!(
            "{} bytes cannot hold a zlib stream (header, deflate, trailer: 7 bytes or more)",
            src.len()
        )));
    }
    let (cmf, flg) = (src[0], src[1]);
    if cmf & 0x0f != 8 || cmf >> 4 > 7 || (u16::from(cmf) << 8 | u16::from(flg)) % 31 != 0 {
        return Err(bad(
            "not a zlib stream (bad method, window size or header check)",
        ));
    }
    if flg & 0x20 != 0 {
        return Err(bad(
            "a preset dictionary, which zarr's zlib codec never uses",
        ));
    }
    Ok(2..src.len() - 4)
}

/// The decoded size a zstd frame declares in its header, checked: `Ok(Some(n))` when it
/// declares exactly `expect` bytes, `Ok(None)` when it declares none, an error naming
/// the chunk when it declares another size or is no zstd frame at all.
pub(crate) fn zstd_declared_size(
    frame: &[u8],
    expect: usize,
    what: &dyn Fn() -> String,
) -> Result<Option<usize>> {
    match zstd::zstd_safe::get_frame_content_size(frame) {
        Ok(Some(declared)) if declared == expect as u64 => Ok(Some(expect)),
        Ok(Some(declared)) => Err(Error::Malformed(format!(
            "{}: zstd chunk decodes to {declared} bytes (declared by its frame), the chunk \
             holds exactly {expect} bytes",
            what()
        ))),
        Ok(None) => Ok(None),
        Err(_) => Err(Error::Malformed(format!(
            "{}: not a zstd frame ({} bytes)",
            what(),
            frame.len()
        ))),
    }
}

/// Decodes the stored bytes `src` of one chunk into `dst`, which has exactly the
/// chunk's decoded size. `what` names the chunk for errors.
pub(crate) fn decode_into(
    chain: &Chain,
    src: &[u8],
    dst: &mut [u8],
    what: &dyn Fn() -> String,
) -> Result<()> {
    let body = if chain.crc32c {
        strip_crc32c(src, what)?
    } else {
        src
    };
    let n = dst.len();
    let wrong = |got: String| {
        Error::Malformed(format!(
            "{}: {} chunk decodes to {got}, the chunk holds exactly {n} bytes",
            what(),
            chain.compression.name()
        ))
    };
    match chain.compression {
        Compression::None => {
            if body.len() != n {
                return Err(wrong(format!("{} bytes", body.len())));
            }
            dst.copy_from_slice(body);
        }
        Compression::Zstd => {
            zstd_declared_size(body, n, what)?;
            let got = with_zstd(&ZSTD, zstd::bulk::Decompressor::new, |d| {
                d.decompress_to_buffer(body, dst)
                    .map_err(|e| zstd_error(what, n, e))
            })?;
            if got != n {
                return Err(wrong(format!("{got} bytes")));
            }
        }
        Compression::Gzip | Compression::Zlib => inflate_into(chain.compression, body, dst, what)?,
        Compression::Lz4 => super::super::lz4::decode_into(body, dst)
            .map_err(|e| Error::Malformed(format!("{}: {e}", what())))?,
        Compression::Blosc(_) => blosc_into(body, dst, what)?,
    }
    if let Some(w) = chain.swap {
        devbuf_core::__private::host_ops::swap_in_place(dst, w);
    }
    Ok(())
}

thread_local! {
    /// Each worker's deflate decoder (libdeflate's state, about 32 KiB), reused across
    /// chunks.
    static DEFLATE: RefCell<Option<libdeflater::Decompressor>> = const { RefCell::new(None) };
}

/// A gzip member or zlib stream (`codec`) -> `dst`: exactly `dst.len()` bytes, or an
/// error naming the size found. libdeflate decodes the whole stream at once into `dst`
/// (never past its end: a longer stream is an error) and checks the trailer: gzip's
/// CRC-32 and size, zlib's Adler-32. A gzip chunk is its first member, as zarrs and
/// earlier devbuf read it; bytes after the stream are not read.
fn inflate_into(
    codec: Compression,
    src: &[u8],
    dst: &mut [u8],
    what: &dyn Fn() -> String,
) -> Result<()> {
    let n = dst.len();
    let name = codec.name();
    let got = DEFLATE.with(|cell| {
        let mut slot = cell.borrow_mut();
        let d = slot.get_or_insert_with(libdeflater::Decompressor::new);
        match codec {
            Compression::Gzip => d.gzip_decompress(src, dst),
            _ => d.zlib_decompress(src, dst),
        }
    });
    match got {
        Ok(k) if k == n => Ok(()),
        Ok(k) => Err(Error::Malformed(format!(
            "{}: {name} chunk decodes to {k} bytes, the chunk holds exactly {n} bytes",
            what()
        ))),
        Err(libdeflater::DecompressionError::InsufficientSpace) => Err(Error::Malformed(format!(
            "{}: {name} chunk decodes to more than {n} bytes, the chunk holds exactly {n} bytes",
            what()
        ))),
        Err(libdeflater::DecompressionError::BadData) => Err(Error::Malformed(format!(
            "{}: {name}: not a valid {name} stream ({} stored bytes: a damaged header, deflate \
             data or {} trailer), the chunk holds {n} bytes",
            what(),
            src.len(),
            if codec == Compression::Gzip {
                "CRC-32 / size"
            } else {
                "Adler-32"
            }
        ))),
    }
}

/// Blosc 1 buffer -> `dst`, after checking that its header agrees with its length and
/// with `dst`'s.
fn blosc_into(src: &[u8], dst: &mut [u8], what: &dyn Fn() -> String) -> Result<()> {
    const HEADER: usize = 16;
    if src.len() < HEADER {
        return Err(Error::Malformed(format!(
            "{}: {} bytes cannot hold a blosc header (16 bytes)",
            what(),
            src.len()
        )));
    }
    let mut nbytes = 0usize;
    // Safety: `src` is valid for `src.len()` bytes; blosc_cbuffer_validate reads at
    // most the 16-byte header (checked above) and compares its sizes with `src.len()`.
    let rc =
        unsafe { blosc_src::blosc_cbuffer_validate(src.as_ptr().cast(), src.len(), &mut nbytes) };
    if rc < 0 {
        return Err(Error::Malformed(format!(
            "{}: corrupt blosc header ({} stored bytes)",
            what(),
            src.len()
        )));
    }
    if nbytes != dst.len() {
        return Err(Error::Malformed(format!(
            "{}: blosc chunk decodes to {nbytes} bytes (declared by its header), the chunk \
             holds exactly {} bytes",
            what(),
            dst.len()
        )));
    }
    if nbytes == 0 {
        return Ok(());
    }
    // Safety: the header was validated against `src.len()` (its compressed size fits in
    // `src`) and declares exactly `dst.len()` decoded bytes; blosc writes at most
    // `dst.len()` bytes into `dst`, which is exclusively borrowed.
    let got = unsafe {
        blosc_src::blosc_decompress_ctx(src.as_ptr().cast(), dst.as_mut_ptr().cast(), dst.len(), 1)
    };
    if got < 0 || got as usize != dst.len() {
        return Err(Error::Malformed(format!(
            "{}: blosc decompression failed (code {got}; {} stored bytes, {} expected)",
            what(),
            src.len(),
            dst.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn plain(c: Compression) -> Chain {
        Chain {
            order: Order::C,
            swap: None,
            compression: c,
            crc32c: false,
        }
    }

    fn what() -> String {
        "chunk c/0".into()
    }

    #[test]
    fn zstd_bounded_by_the_chunk_size() {
        let data: Vec<u8> = (0..10_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let z = zstd::bulk::compress(&data, 1).unwrap();
        let mut out = vec![0u8; data.len()];
        decode_into(&plain(Compression::Zstd), &z, &mut out, &what).unwrap();
        assert_eq!(out, data);
        // One byte short: refused from the frame header, nothing decoded.
        let mut short = vec![0u8; data.len() - 1];
        let e = decode_into(&plain(Compression::Zstd), &z, &mut short, &what).unwrap_err();
        assert!(e.to_string().contains("declared by its frame"), "{e}");
        // A bomb: 1 GiB of zeros declared, a 4 KiB chunk: refused at once.
        let bomb = {
            let mut enc = zstd::stream::Encoder::new(Vec::new(), 19).unwrap();
            enc.set_pledged_src_size(Some(1 << 30)).unwrap();
            let zeros = vec![0u8; 1 << 20];
            for _ in 0..1024 {
                std::io::Write::write_all(&mut enc, &zeros).unwrap();
            }
            enc.finish().unwrap()
        };
        let mut small = vec![0u8; 4096];
        let e = decode_into(&plain(Compression::Zstd), &bomb, &mut small, &what).unwrap_err();
        assert!(e.to_string().contains("1073741824"), "{e}");
        // Garbage.
        let e = decode_into(&plain(Compression::Zstd), b"not zstd", &mut small, &what).unwrap_err();
        assert!(e.to_string().contains("chunk c/0"), "{e}");
    }

    /// `data` as one gzip member, level 1 (as zarr writers make them).
    fn gzip1(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(1));
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn gzip_bounded_by_the_chunk_size() {
        let data: Vec<u8> = (0..50_000u32).map(|i| (i * 7 % 13) as u8).collect();
        let gz = gzip1(&data);
        let mut out = vec![0u8; data.len()];
        decode_into(&plain(Compression::Gzip), &gz, &mut out, &what).unwrap();
        assert_eq!(out, data);
        let mut short = vec![0u8; 1000];
        let e = decode_into(&plain(Compression::Gzip), &gz, &mut short, &what).unwrap_err();
        assert!(e.to_string().contains("more than 1000"), "{e}");
        let mut long = vec![0u8; data.len() + 1];
        let e = decode_into(&plain(Compression::Gzip), &gz, &mut long, &what).unwrap_err();
        assert!(e.to_string().contains("50000 bytes"), "{e}");
    }

    #[test]
    fn gzip_trailer_and_damage_are_errors() {
        let data: Vec<u8> = (0..70_000u32).map(|i| (i * 31 % 251) as u8).collect();
        let gz = gzip1(&data);
        let chain = plain(Compression::Gzip);
        let mut out = vec![0u8; data.len()];
        // A damaged CRC-32, a damaged size field, a damaged deflate body, a cut stream,
        // and bytes that are no gzip member: each an error naming the chunk, and none
        // writes past the output.
        let n = gz.len();
        let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
        for (name, at) in [("crc", n - 8), ("size", n - 4), ("body", n / 2)] {
            let mut bad = gz.clone();
            bad[at] ^= 0x55;
            cases.push((name, bad));
        }
        cases.push(("cut", gz[..n - 3].to_vec()));
        cases.push(("not gzip", b"plain text, not a gzip member".to_vec()));
        for (name, bad) in cases {
            let mut guarded = vec![0xeeu8; data.len() + 64];
            let e = decode_into(&chain, &bad, &mut guarded[..data.len()], &what).expect_err(name);
            assert!(e.to_string().contains("chunk c/0"), "{name}: {e}");
            assert!(e.to_string().contains("gzip"), "{name}: {e}");
            assert!(guarded[data.len()..].iter().all(|&b| b == 0xee), "{name}");
        }
        // Bytes after the member are not read, as before.
        let mut trailing = gz.clone();
        trailing.extend_from_slice(b"trailing");
        decode_into(&chain, &trailing, &mut out, &what).unwrap();
        assert_eq!(out, data);
    }

    #[test]
    fn gzip_members_yield_their_deflate_stream() {
        use std::io::Write;
        let data: Vec<u8> = (0..30_000u32).map(|i| (i % 97) as u8).collect();
        let mut enc = flate2::GzBuilder::new()
            .filename("chunk")
            .comment("c")
            .extra(vec![1, 2, 3])
            .write(Vec::new(), flate2::Compression::new(1));
        enc.write_all(&data).unwrap();
        let gz = enc.finish().unwrap();
        let r = gzip_deflate_range(&gz, data.len(), &what).unwrap();
        let mut raw = Vec::new();
        flate2::read::DeflateDecoder::new(&gz[r])
            .read_to_end(&mut raw)
            .unwrap();
        assert_eq!(raw, data);
        let e = gzip_deflate_range(&gz, data.len() + 1, &what).unwrap_err();
        assert!(e.to_string().contains("30000"), "{e}");
        assert!(gzip_deflate_range(&gz[..12], 1, &what).is_err());
        let mut bad = gz.clone();
        bad[3] = 0xff;
        assert!(gzip_deflate_range(&bad, data.len(), &what).is_err());
        let mut unterminated = gz[..10].to_vec();
        unterminated[3] = 0x08;
        unterminated.extend_from_slice(&[b'x'; 20]);
        assert!(gzip_deflate_range(&unterminated, 1, &what).is_err());
    }

    #[test]
    fn zlib_streams_yield_their_deflate_stream_and_decode_bounded() {
        use std::io::Write;
        let data: Vec<u8> = (0..30_000u32).map(|i| (i % 97) as u8).collect();
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(1));
        enc.write_all(&data).unwrap();
        let z = enc.finish().unwrap();
        let r = zlib_deflate_range(&z, &what).unwrap();
        let mut raw = Vec::new();
        flate2::read::DeflateDecoder::new(&z[r])
            .read_to_end(&mut raw)
            .unwrap();
        assert_eq!(raw, data);
        assert!(zlib_deflate_range(&z[..6], &what).is_err());
        for (at, v) in [(0usize, 0x79u8), (0, 0x88), (1, z[1] ^ 1), (1, z[1] | 0x20)] {
            let mut bad = z.clone();
            bad[at] = v;
            let e = zlib_deflate_range(&bad, &what).unwrap_err();
            assert!(e.to_string().contains("zlib"), "{e}");
        }
        // The CPU decoder: exact size, or an error naming the sizes.
        let chain = plain(Compression::Zlib);
        let mut out = vec![0u8; data.len()];
        decode_into(&chain, &z, &mut out, &what).unwrap();
        assert_eq!(out, data);
        let e = decode_into(&chain, &z, &mut vec![0u8; data.len() - 1], &what).unwrap_err();
        assert!(e.to_string().contains("more than 29999 bytes"), "{e}");
        let e = decode_into(&chain, &z, &mut vec![0u8; data.len() + 1], &what).unwrap_err();
        assert!(e.to_string().contains("30000 bytes"), "{e}");
        // A damaged Adler-32 is an error on the CPU.
        let mut bad = z.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(decode_into(&chain, &bad, &mut out, &what).is_err());
        assert!(decode_into(&chain, &z[..z.len() / 2], &mut out, &what).is_err());
    }

    #[test]
    fn uncompressed_and_crc32c() {
        let data = b"0123456789abcdef".to_vec();
        let mut stored = data.clone();
        stored.extend_from_slice(&crc32c::crc32c(&data).to_le_bytes());
        let chain = Chain {
            crc32c: true,
            swap: Some(4),
            ..plain(Compression::None)
        };
        let mut out = vec![0u8; 16];
        decode_into(&chain, &stored, &mut out, &what).unwrap();
        assert_eq!(&out[..4], b"3210");
        stored[3] ^= 1;
        let e = decode_into(&chain, &stored, &mut out, &what).unwrap_err();
        assert!(e.to_string().contains("crc32c"), "{e}");
        let e = decode_into(&plain(Compression::None), &data, &mut [0u8; 15], &what).unwrap_err();
        assert!(e.to_string().contains("16 bytes"), "{e}");
        assert!(decode_into(&chain, b"abc", &mut out, &what).is_err());
    }

    #[test]
    fn blosc_header_checked() {
        let mut out = vec![0u8; 64];
        let e = decode_into(
            &plain(Compression::Blosc(BloscInner::Lz4)),
            &[2, 1, 0, 4],
            &mut out,
            &what,
        )
        .unwrap_err();
        assert!(e.to_string().contains("blosc header"), "{e}");
        let junk = [0xffu8; 64];
        assert!(
            decode_into(
                &plain(Compression::Blosc(BloscInner::Lz4)),
                &junk,
                &mut out,
                &what
            )
            .is_err()
        );
    }
}
