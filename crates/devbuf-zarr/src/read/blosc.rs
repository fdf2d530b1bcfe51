//! blosc containers taken apart on the host for the GPU: the header and the table of
//! block starts are read, every block's streams (one per byte of the element when
//! blosc split the block, else one) are listed with where their decoded bytes go, and
//! streams blosc stored verbatim (incompressible bytes) are listed as copies. nvCOMP
//! then decodes all LZ4 (or zstd) streams of a claim in one call, the copies run with
//! it, and a vector kernel (`shuffle.cu`; a strided copy for odd type sizes) undoes
//! blosc's byte shuffle on the device.
//!
//! Format (c-blosc 1.x, format version 2): a 16-byte header (version, the
//! compressor's format version, flags, type size, decoded bytes, block size, stored
//! bytes, all little-endian), then one `i32` start per block (absent when the whole
//! buffer is stored verbatim), then per block per stream an `i32` length and that many
//! bytes; a length equal to the stream's decoded size means "stored verbatim". Flags:
//! `0x01` byte shuffle, `0x02` stored verbatim, `0x04` bit shuffle, `0x08` reserved,
//! `0x10` blocks not split, bits 5-7 the compressor (1 = LZ4, 4 = zstd).
//!
//! Anything this parser does not take on (another version, bit shuffle, another
//! compressor, a zstd stream without its declared size, inconsistent offsets) gives
//! `None`, and the chunk is decoded on the host by c-blosc itself, whose checks then
//! decide between the bytes and an error: the GPU path never accepts a chunk that
//! c-blosc would refuse for its structure.

use super::codec::BloscInner;
use devbuf_core::error::{Error, Result};

/// blosc's header length.
const HEADER: usize = 16;
/// c-blosc's `MAX_SPLITS`: blocks of elements up to this size may be split.
const MAX_SPLITS: usize = 16;
/// c-blosc's `MIN_BUFFERSIZE`: a block is split only into streams of this many bytes
/// or more.
const MIN_SPLIT: usize = 128;
/// c-blosc's `BLOSC_MAX_BUFFERSIZE`: the most decoded bytes of a buffer.
const MAX_BUFFER: usize = i32::MAX as usize - HEADER;
/// c-blosc's `BLOSC_MAX_BLOCKSIZE`.
const MAX_BLOCK: usize = (i32::MAX as usize - 255 * 4) / 3;
/// Bytes of a chunk per stream that the GPU takes on at least (16 streams more in any
/// chunk): each stream is an nVCOMP chunk with a scratch slot of at least 8 KiB beyond
/// its size, so chunks of many tiny streams (legal, and cheap to forge) would cost far
/// more device memory than a claim is sized for. blosc's own blocks give streams of 4
/// KiB and more (32 KiB blocks of 8-byte elements) for chunks of 64 KiB and more.
const BYTES_PER_STREAM: usize = 4096;

/// One stream of a blosc chunk: `len` stored bytes at `src` (from the start of the
/// blosc buffer) that decode to `out` bytes at `dst` (from the start of the chunk's
/// shuffled bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    pub src: usize,
    pub len: usize,
    pub dst: usize,
    pub out: usize,
}

/// A blosc chunk ready for the GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BloscUnit {
    /// Decoded bytes of a block (the last block holds the rest).
    pub blocksize: usize,
    /// Bytes per element of the shuffle; 1 when the chunk is not shuffled.
    pub typesize: usize,
    /// Streams nvCOMP decodes.
    pub streams: Vec<Piece>,
    /// Streams stored verbatim: copied (`len == out`).
    pub copies: Vec<Piece>,
}

fn le32(b: &[u8], at: usize) -> Option<usize> {
    let w = b.get(at..at.checked_add(4)?)?;
    usize::try_from(u32::from_le_bytes([w[0], w[1], w[2], w[3]])).ok()
}

/// Takes apart the blosc buffer `buf` of a chunk of `nbytes` decoded bytes whose
/// metadata names `inner`: `Ok(None)` when the host should decode it (see the module
/// docs); an error only when the pieces cannot be listed (memory).
pub(crate) fn parse(buf: &[u8], nbytes: usize, inner: BloscInner) -> Result<Option<BloscUnit>> {
    let Some(head) = buf.get(..HEADER) else {
        return Ok(None);
    };
    let (version, compversion, flags) = (head[0], head[1], head[2]);
    let typesize = usize::from(head[3]);
    let (Some(declared), Some(blocksize), Some(stored)) =
        (le32(head, 4), le32(head, 8), le32(head, 12))
    else {
        return Ok(None);
    };
    if version != 2
        || flags & 0x08 != 0
        || declared != nbytes
        || nbytes == 0
        || stored != buf.len()
        || typesize == 0
        || blocksize == 0
        || blocksize > nbytes
        || blocksize > MAX_BLOCK
        || nbytes > MAX_BUFFER
        || i32::try_from(stored).is_err()
    {
        return Ok(None);
    }
    if flags & 0x02 != 0 {
        // Stored verbatim after the header, never shuffled.
        if stored != nbytes.checked_add(HEADER).unwrap_or(0) {
            return Ok(None);
        }
        let whole = Piece {
            src: HEADER,
            len: nbytes,
            dst: 0,
            out: nbytes,
        };
        return Ok(Some(BloscUnit {
            blocksize: nbytes,
            typesize: 1,
            streams: Vec::new(),
            copies: vec![whole],
        }));
    }
    let format_ok = match (inner, flags >> 5) {
        (BloscInner::Lz4, 1) | (BloscInner::Zstd, 4) => compversion == 1,
        _ => false,
    };
    if !format_ok || (flags & 0x04 != 0 && blocksize >= typesize) {
        // Another compressor than the read's, or bit shuffle: the host.
        return Ok(None);
    }
    let shuffled = flags & 0x01 != 0 && typesize > 1;
    let dont_split = flags & 0x10 != 0;
    let nblocks = nbytes.div_ceil(blocksize);
    let leftover = nbytes % blocksize;
    match nblocks.checked_mul(4).and_then(|t| t.checked_add(HEADER)) {
        Some(end) if end <= stored => {}
        _ => return Ok(None),
    }
    let splits = if !dont_split && typesize <= MAX_SPLITS && blocksize / typesize >= MIN_SPLIT {
        typesize
    } else {
        1
    };
    let mut streams = Vec::new();
    let mut copies = Vec::new();
    let pieces = nblocks.saturating_mul(splits);
    if pieces > nbytes / BYTES_PER_STREAM + 16 {
        return Ok(None);
    }
    streams.try_reserve(pieces).map_err(|_| {
        Error::invalid(format!(
            "a blosc chunk of {pieces} streams: no memory to list them"
        ))
    })?;
    for b in 0..nblocks {
        let last = b + 1 == nblocks && leftover > 0;
        let bsize = if last { leftover } else { blocksize };
        let nsplits = if last { 1 } else { splits };
        if bsize % nsplits != 0 {
            return Ok(None);
        }
        let neblock = bsize / nsplits;
        let Some(mut at) = le32(buf, HEADER + 4 * b) else {
            return Ok(None);
        };
        for s in 0..nsplits {
            let Some(cbytes) = le32(buf, at) else {
                return Ok(None);
            };
            at += 4;
            if i32::try_from(cbytes).is_err() || cbytes > stored - at.min(stored) || cbytes == 0 {
                return Ok(None);
            }
            let p = Piece {
                src: at,
                len: cbytes,
                dst: b * blocksize + s * neblock,
                out: neblock,
            };
            if cbytes == neblock {
                copies.push(p);
            } else {
                if inner == BloscInner::Zstd && !zstd_stream_ok(&buf[at..at + cbytes], neblock) {
                    return Ok(None);
                }
                streams.push(p);
            }
            at += cbytes;
        }
    }
    Ok(Some(BloscUnit {
        blocksize,
        typesize: if shuffled { typesize } else { 1 },
        streams,
        copies,
    }))
}

/// Whether a zstd stream of a blosc block is one complete frame that declares
/// `expect` decoded bytes and carries no checksum (nvCOMP would not verify it) and no
/// dictionary ID (c-blosc, which has no dictionary, refuses such frames).
fn zstd_stream_ok(frame: &[u8], expect: usize) -> bool {
    matches!(zstd::zstd_safe::get_frame_content_size(frame), Ok(Some(d)) if d == expect as u64)
        && frame.len() > 4
        && frame[4] & 0x07 == 0
        && matches!(zstd::zstd_safe::find_frame_compressed_size(frame), Ok(n) if n == frame.len())
}

/// One strided copy: `(offset, shape, src strides, dst strides)`, in bytes, the same
/// offset on both sides.
pub(crate) type StridedCopy = (usize, Vec<usize>, Vec<isize>, Vec<isize>);

/// One step of undoing a chunk's byte shuffle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// `count` whole blocks from byte 0, `stride` bytes apart, of `n` elements of
    /// `typesize` bytes each (byte `t` of element `i` at `t * n + i`): the vector
    /// kernel's case.
    Blocks {
        count: usize,
        stride: usize,
        n: usize,
        typesize: usize,
    },
    /// Anything else: a strided copy.
    Copy(StridedCopy),
}

#[cfg(test)]
impl Step {
    /// The step as a strided copy.
    pub(crate) fn as_strided(&self) -> StridedCopy {
        match self {
            Step::Blocks {
                count,
                stride,
                n,
                typesize,
            } => {
                let (b, ni, ti) = (*stride as isize, *n as isize, *typesize as isize);
                (
                    0,
                    vec![*count, *n, *typesize],
                    vec![b, 1, ni],
                    vec![b, ti, 1],
                )
            }
            Step::Copy(c) => c.clone(),
        }
    }
}

/// The steps that turn a chunk's shuffled bytes into its elements: blocks of
/// `blocksize` bytes hold `blocksize / typesize` elements each, byte `t` of element `i`
/// at `t * n + i`; the last `blocksize % typesize` bytes of a block (and of the
/// shorter last block) are not shuffled. `typesize` 1: one plain copy.
pub(crate) fn unshuffle_steps(nbytes: usize, blocksize: usize, typesize: usize) -> Vec<Step> {
    let mut out = Vec::new();
    let contiguous =
        |at: usize, len: usize| Step::Copy((at, vec![len], vec![1isize], vec![1isize]));
    if typesize <= 1 || blocksize == 0 {
        out.push(contiguous(0, nbytes));
        return out;
    }
    let (t, bs) = (typesize, blocksize);
    let full = nbytes / bs;
    let n = bs / t;
    let (bsi, ti) = (bs as isize, t as isize);
    if full > 0 && n > 0 {
        out.push(Step::Blocks {
            count: full,
            stride: bs,
            n,
            typesize: t,
        });
    }
    if full > 0 && bs % t != 0 {
        out.push(Step::Copy((
            n * t,
            vec![full, bs % t],
            vec![bsi, 1],
            vec![bsi, 1],
        )));
    }
    let rest = nbytes % bs;
    if rest > 0 {
        let at = full * bs;
        let n = rest / t;
        if n > 0 {
            let ni = n as isize;
            out.push(Step::Copy((at, vec![n, t], vec![1, ni], vec![ti, 1])));
        }
        if !rest.is_multiple_of(t) {
            out.push(contiguous(at + n * t, rest % t));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// blosc-compresses `data` with c-blosc (`cname`, `shuffle`, `typesize`, `blocksize`
    /// 0: automatic).
    fn compress(
        data: &[u8],
        cname: &str,
        shuffle: bool,
        typesize: usize,
        blocksize: usize,
    ) -> Vec<u8> {
        let mut out = vec![0u8; data.len() + 64];
        let name = std::ffi::CString::new(cname).unwrap();
        // Safety: source and destination are valid for the lengths passed; the
        // compressor name is a NUL-terminated string.
        let n = unsafe {
            blosc_src::blosc_compress_ctx(
                5,
                i32::from(shuffle),
                typesize,
                data.len(),
                data.as_ptr().cast(),
                out.as_mut_ptr().cast(),
                out.len(),
                name.as_ptr(),
                blocksize,
                1,
            )
        };
        assert!(n > 0, "blosc compression failed: {n}");
        out.truncate(n as usize);
        out
    }

    /// Data whose byte planes compress differently: small integers as float32
    /// (compressible high bytes) with noise in the low bytes (incompressible).
    fn floats(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut v = Vec::with_capacity(n * 4);
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let f = (i % 100) as f32 + (x % 1000) as f32 / 1000.0;
            v.extend_from_slice(&f.to_le_bytes());
        }
        v
    }

    /// Decodes a parsed unit on the host the way the GPU does (streams with lz4_flex or
    /// zstd, copies, then the unshuffle copies), for comparison with c-blosc.
    fn decode_like_the_gpu(buf: &[u8], u: &BloscUnit, nbytes: usize, inner: BloscInner) -> Vec<u8> {
        let mut shuffled = vec![0u8; nbytes];
        for p in &u.streams {
            let d = match inner {
                BloscInner::Lz4 => {
                    lz4_flex::block::decompress(&buf[p.src..p.src + p.len], p.out).unwrap()
                }
                _ => zstd::decode_all(&buf[p.src..p.src + p.len]).unwrap(),
            };
            assert_eq!(d.len(), p.out);
            shuffled[p.dst..p.dst + p.out].copy_from_slice(&d);
        }
        for p in &u.copies {
            shuffled[p.dst..p.dst + p.out].copy_from_slice(&buf[p.src..p.src + p.len]);
        }
        let mut out = vec![0u8; nbytes];
        for step in unshuffle_steps(nbytes, u.blocksize, u.typesize) {
            for (from, to) in byte_moves(&step) {
                out[to] = shuffled[from];
            }
        }
        out
    }

    /// Every (source, destination) byte offset a step moves, in index order.
    fn byte_moves(step: &Step) -> Vec<(usize, usize)> {
        let (at, shape, ss, ds) = step.as_strided();
        let mut moves = Vec::new();
        let mut idx = vec![0usize; shape.len()];
        'all: loop {
            let off = |st: &[isize]| {
                idx.iter()
                    .zip(st)
                    .map(|(&i, &s)| i as isize * s)
                    .sum::<isize>()
            };
            moves.push((at + off(&ss) as usize, at + off(&ds) as usize));
            for k in (0..shape.len()).rev() {
                idx[k] += 1;
                if idx[k] < shape[k] {
                    continue 'all;
                }
                idx[k] = 0;
            }
            return moves;
        }
    }

    #[test]
    fn parsed_chunks_decode_like_c_blosc() {
        let mut tried = 0;
        for (cname, inner) in [
            ("lz4", BloscInner::Lz4),
            ("lz4hc", BloscInner::Lz4),
            ("zstd", BloscInner::Zstd),
        ] {
            for (elems, typesize, blocksize) in [
                (262_144usize, 4usize, 0usize),
                (100_003, 4, 0),
                (50_000, 4, 4096),
                (50_001, 4, 8000),
                (33_333, 8, 0),
                (9_999, 2, 512),
                (77_777, 1, 0),
            ] {
                for shuffle in [true, false] {
                    let data = floats(elems, elems as u64)[..elems * typesize.min(4)].to_vec();
                    let data: Vec<u8> = data
                        .iter()
                        .cycle()
                        .take(elems * typesize)
                        .copied()
                        .collect();
                    let c = compress(&data, cname, shuffle, typesize, blocksize);
                    let what =
                        format!("{cname} {elems}x{typesize} block {blocksize} shuffle {shuffle}");
                    let u = parse(&c, data.len(), inner)
                        .unwrap()
                        .unwrap_or_else(|| panic!("{what}: not parsed"));
                    assert_eq!(
                        decode_like_the_gpu(&c, &u, data.len(), inner),
                        data,
                        "{what}"
                    );
                    tried += 1;
                }
            }
        }
        assert_eq!(tried, 42);
    }

    #[test]
    fn incompressible_chunks_are_copies() {
        // Random bytes: blosc stores the whole buffer verbatim.
        let mut x = 7u64;
        let data: Vec<u8> = (0..10_000)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 33) as u8
            })
            .collect();
        let c = compress(&data, "lz4", true, 4, 0);
        let u = parse(&c, data.len(), BloscInner::Lz4).unwrap().unwrap();
        assert!(u.streams.is_empty(), "{u:?}");
        assert_eq!(
            decode_like_the_gpu(&c, &u, data.len(), BloscInner::Lz4),
            data
        );
    }

    #[test]
    fn what_the_gpu_does_not_take_goes_to_the_host() {
        let data = floats(20_000, 3);
        let n = data.len();
        let lz4 = compress(&data, "lz4", true, 4, 0);
        assert!(parse(&lz4, n, BloscInner::Lz4).unwrap().is_some());
        // Another compressor than the metadata says, or one nvCOMP lacks.
        assert_eq!(parse(&lz4, n, BloscInner::Zstd).unwrap(), None);
        let blosclz = compress(&data, "blosclz", true, 4, 0);
        assert_eq!(parse(&blosclz, n, BloscInner::Lz4).unwrap(), None);
        // Another decoded size, a short buffer, a bad version, reserved flags.
        assert_eq!(parse(&lz4, n + 4, BloscInner::Lz4).unwrap(), None);
        assert_eq!(
            parse(&lz4[..lz4.len() - 1], n, BloscInner::Lz4).unwrap(),
            None
        );
        assert_eq!(parse(&lz4[..10], n, BloscInner::Lz4).unwrap(), None);
        for (at, v) in [
            (0usize, 1u8),
            (0, 3),
            (2, lz4[2] | 0x08),
            (2, lz4[2] | 0x04),
        ] {
            let mut bad = lz4.clone();
            bad[at] = v;
            assert_eq!(
                parse(&bad, n, BloscInner::Lz4).unwrap(),
                None,
                "byte {at} = {v:#x}"
            );
        }
        // Block starts and stream lengths past the end.
        let mut bad = lz4.clone();
        bad[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(parse(&bad, n, BloscInner::Lz4).unwrap(), None);
        let first = u32::from_le_bytes(lz4[16..20].try_into().unwrap()) as usize;
        let mut bad = lz4.clone();
        bad[first..first + 4].copy_from_slice(&(lz4.len() as u32).to_le_bytes());
        assert_eq!(parse(&bad, n, BloscInner::Lz4).unwrap(), None);
        // Every truncation and every single damaged header byte: parsed pieces stay
        // inside the buffer and the output.
        for cut in 0..lz4.len().min(400) {
            let mut bad = lz4.clone();
            bad[cut] ^= 0xff;
            if let Some(u) = parse(&bad, n, BloscInner::Lz4).unwrap() {
                for p in u.streams.iter().chain(&u.copies) {
                    assert!(
                        p.src + p.len <= bad.len() && p.dst + p.out <= n,
                        "byte {cut}: {p:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn chunks_of_many_tiny_streams_go_to_the_host() {
        // 64 KiB of float32 in 256-byte zstd blocks (zstd blocks are not split, nor
        // enlarged): 256 streams, more than 64 KiB / 4 KiB + 16 = 32.
        let data = floats(16_384, 9);
        let tiny = compress(&data, "zstd", true, 4, 256);
        assert_eq!(
            u32::from_le_bytes(tiny[8..12].try_into().unwrap()),
            256,
            "block size"
        );
        assert_eq!(parse(&tiny, data.len(), BloscInner::Zstd).unwrap(), None);
        // blosc's own block size for the same chunk: a few streams, taken.
        let own = compress(&data, "zstd", true, 4, 0);
        let u = parse(&own, data.len(), BloscInner::Zstd).unwrap().unwrap();
        assert!(
            u.streams.len() + u.copies.len() <= 32,
            "{}",
            u.streams.len()
        );
    }

    #[test]
    fn unshuffle_steps_cover_every_byte_once() {
        for (nbytes, bs, t) in [
            (4096usize, 1024usize, 4usize),
            (4100, 1024, 4),
            (1030, 1022, 4),
            (7, 8, 4),
            (100, 100, 1),
            (999, 500, 3),
        ] {
            let mut hit = vec![0u8; nbytes];
            for step in unshuffle_steps(nbytes, bs, t) {
                for (_, to) in byte_moves(&step) {
                    hit[to] += 1;
                }
            }
            assert!(hit.iter().all(|&h| h == 1), "{nbytes} {bs} {t}");
        }
    }
}
