//! Choosing the encoder of a device write ([`Encoder`]): nvCOMP compresses zstd chunks
//! (or the zstd inner chunks of shards) on the GPU, the CPU workers everything else.
//! This file decides which arrays the GPU can encode, lays the cells out for nvCOMP,
//! and does the host half of a GPU-encoded chunk: crc32c checksums, the shard index,
//! storing the bytes. The device half runs in `write.rs`.

use crate::storage::DynStorage;
use std::fmt;

use bytes::Bytes;
use zarrs::array::Array;
use zarrs::metadata::v3::MetadataV3;

use super::read::codec::{Codecs, Compression, ShardIndex, codec_list};
use super::read::plan::{c_strides, f_strides};
use devbuf_core::__private::ops::MAX_DIMS;
use devbuf_core::cuda::nvcomp::{self, GpuCodec};
use devbuf_core::error::{Error, Result};
use devbuf_core::zarr::Order;

/// Which encoder compresses the chunks of a write from device memory
/// ([`WriteOptions::encoder`]). Writes of host values are always encoded by the CPU.
///
/// nvCOMP compresses many chunks per call, in parallel across chunks; the CPU workers
/// one chunk per core, and nvCOMP's rate grows with the number of chunks per call, not
/// with their size. Measured on an H100 with 16 cores (512 MiB of float32, zstd-1;
/// docs/performance.md): 16 MiB shards of 64 KiB inner chunks 4.0-5.0 GB/s with nvCOMP
/// against 3.5-4.9 on the CPU (on a par to 1.22x); plain chunks of 256 KiB to 16 MiB
/// 1.5-3.1 GB/s with nvCOMP against 3.6-6.1 on the CPU. So [`Encoder::Auto`] gives nvCOMP chunks (or inner
/// chunks) of up to [`AUTO_GPU_MAX_CHUNK_BYTES`].
///
/// The GPU writes standard zstd frames (one per chunk) that every zarr reader decodes;
/// they are not byte-for-byte the CPU's frames, nvCOMP has no compression levels (the
/// codec's `level` is not applied, the ratio is about that of level 1), and it writes
/// every chunk, also those that hold only the fill value (the CPU path leaves those out
/// of the store; both read back the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Encoder {
    /// nvCOMP for chunks it can encode (see [`Gpu`](Self::Gpu)) of at most
    /// [`AUTO_GPU_MAX_CHUNK_BYTES`] with a zstd level of at most
    /// [`AUTO_MAX_ZSTD_LEVEL`], when nvCOMP is available; otherwise the CPU.
    /// [`ZarrArray::write_encoding`](super::ZarrArray::write_encoding) says which and why.
    #[default]
    Auto,
    /// The CPU workers (zarrs' codecs) only.
    Cpu,
    /// nvCOMP, for arrays whose chunks (or inner chunks of shards) are `bytes` (little
    /// endian), optionally `transpose` to F order, `zstd` without content checksum and
    /// optionally `crc32c` (computed on the host), of at most 16 MiB each. A write to
    /// any other array is an error that says why. Chunks a write covers only in part
    /// are read, updated and encoded on the CPU.
    Gpu,
}

/// Highest zstd `level` that [`Encoder::Auto`] gives to nvCOMP, which has no levels (its
/// frames compress about as level 1): arrays asking for more stay on the CPU.
pub const AUTO_MAX_ZSTD_LEVEL: i64 = 3;

/// Largest chunk (or inner chunk of a shard) that [`Encoder::Auto`] gives to nvCOMP:
/// 64 KiB (see [`Encoder`] for the measurements).
pub const AUTO_GPU_MAX_CHUNK_BYTES: usize = 64 << 10;

/// How writes run ([`ZarrArray::set_write_options`](super::ZarrArray::set_write_options)).
/// Threads and staging size come from the array's
/// [`ReadOptions`](super::ReadOptions).
///
/// ```
/// use devbuf_zarr::{Encoder, WriteOptions};
/// let o = WriteOptions { encoder: Encoder::Cpu, ..WriteOptions::default() };
/// assert_eq!(WriteOptions::default().encoder, Encoder::Auto);
/// # let _ = o;
/// ```
///
/// With a progress bar and a way to stop:
///
/// ```
/// use std::sync::Arc;
/// use devbuf_zarr::{ArraySpec, Cancel, ProgressSink, WriteOptions, ZarrArray};
/// use devbuf_core::zarr::{Dtype, MemoryStore, NDBuffer};
/// let mut a = ZarrArray::create((Arc::new(MemoryStore::new()), ""), &ArraySpec::new(&[8], &[2], Dtype::INT32))?;
/// let (tx, rx) = tokio::sync::watch::channel(Default::default());
/// a.set_write_options(WriteOptions {
///     progress: Some(ProgressSink::watch(tx)),
///     cancel: Some(Cancel::new()),
///     ..WriteOptions::default()
/// });
/// a.write_subset(&[0], &NDBuffer::from_ndarray(ndarray::arr1(&[1i32; 8])))?;
/// assert_eq!(rx.borrow().chunks_done, 4); // four chunks stored
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Which encoder compresses chunks written from device memory.
    pub encoder: Encoder,
    /// Where the write reports how far it got: chunks (shards) stored of those the
    /// write touches, and their decoded bytes; the last report has every chunk done.
    /// Chunks equal to the fill value count when they are erased (not stored).
    pub progress: Option<crate::ProgressSink>,
    /// Stops the write: chunks not yet stored are not stored, and the write ends with
    /// [`Error::Cancelled`](devbuf_core::Error::Cancelled). Chunks stored before stay
    /// (a cancelled write may have written some of its chunks).
    pub cancel: Option<crate::Cancel>,
}

/// Which encoder a write from device memory uses on an array, and why
/// ([`ZarrArray::write_encoding`](super::ZarrArray::write_encoding)).
///
/// ```
/// use devbuf_zarr::ZarrArray;
/// let a = ZarrArray::open("../../tests/fixtures/zarr/v2_int16_zstd.zarr")?;
/// let e = a.write_encoding();
/// assert!(e.encoder == "cpu" || e.encoder == "gpu");
/// println!("{e}");
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriteEncoding {
    /// `"gpu"` (nvCOMP compresses the chunks a write covers whole) or `"cpu"`.
    pub encoder: &'static str,
    /// Why the GPU does not encode (empty when it does, or when the CPU was asked for).
    pub note: String,
}

impl fmt::Display for WriteEncoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "encoder {}", self.encoder)?;
        if !self.note.is_empty() {
            write!(f, " (GPU not used: {})", self.note)?;
        }
        Ok(())
    }
}

/// A device copy from the gathered chunk (C order, the chunk's shape) to its cells in
/// storage order: cell after cell (C order of the cell grid), each in the chain's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Relayout {
    pub shape: Vec<usize>,
    pub src: Vec<isize>,
    pub dst: Vec<isize>,
}

/// How nvCOMP encodes an array's chunks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GpuEncode {
    /// Bytes of one cell (a chunk, or an inner chunk of a shard).
    pub cell_bytes: usize,
    /// Cells per chunk (1 unless sharded).
    pub cells: usize,
    /// Output bytes reserved per cell (nvCOMP's bound, rounded up to 8).
    pub cap: usize,
    /// Each cell's compressed bytes are followed by their crc32c.
    pub crc32c: bool,
    /// The shard index, for sharded arrays.
    pub index: Option<ShardIndex>,
    /// The device copy into cells, unless the gathered chunk already is the one cell.
    pub relayout: Option<Relayout>,
}

/// The encoder for device writes of `array` (chunks of `chunk_shape`, elements of
/// `elem` bytes swapped in `swap_width` units) under `encoder`: the GPU plan, or `None`
/// and why not (empty when the CPU was asked for).
pub(crate) fn choose(
    array: &Array<DynStorage>,
    chunk_shape: &[u64],
    elem: usize,
    swap_width: usize,
    encoder: Encoder,
) -> (Option<GpuEncode>, String) {
    if encoder == Encoder::Cpu {
        return (None, String::new());
    }
    let level = zstd_config(array).1;
    match gpu_plan(array, chunk_shape, elem, swap_width) {
        Ok(_) if encoder == Encoder::Auto && level > AUTO_MAX_ZSTD_LEVEL => (
            None,
            format!(
                "zstd level {level}: nvCOMP compresses about as level 1 (Encoder::Gpu forces it)"
            ),
        ),
        Ok(p) if encoder == Encoder::Auto && p.cell_bytes > AUTO_GPU_MAX_CHUNK_BYTES => (
            None,
            format!(
                "chunks of {} bytes: above {AUTO_GPU_MAX_CHUNK_BYTES} bytes the CPU encoders \
                 are faster (Encoder::Gpu forces nvCOMP)",
                p.cell_bytes
            ),
        ),
        Ok(p) => (Some(p), String::new()),
        Err(why) => (None, why),
    }
}

/// The report of [`choose`].
pub(crate) fn describe(plan: &Option<GpuEncode>, note: String) -> WriteEncoding {
    WriteEncoding {
        encoder: if plan.is_some() { "gpu" } else { "cpu" },
        note,
    }
}

fn gpu_plan(
    array: &Array<DynStorage>,
    chunk_shape: &[u64],
    elem: usize,
    swap_width: usize,
) -> std::result::Result<GpuEncode, String> {
    let (cell_shape, chain, index) = match Codecs::of(array, swap_width) {
        Codecs::Plain(c) => (chunk_shape.to_vec(), c, None),
        Codecs::Sharded {
            inner_shape,
            chain,
            index,
        } => (inner_shape, chain, Some(index)),
        Codecs::Zarrs(why) => return Err(format!("codecs that zarrs encodes ({why})")),
    };
    match chain.compression {
        Compression::Zstd => {}
        Compression::None => return Err("the chunks are not compressed".into()),
        Compression::Lz4 => {
            return Err("lz4: the GPU encoder writes zstd chunks only".into());
        }
        Compression::Zlib => {
            return Err(
                "zlib: its trailer holds an Adler-32 of the uncompressed bytes, which are not \
                 on the host"
                    .into(),
            );
        }
        Compression::Gzip => {
            return Err(
                "gzip: its trailer holds a CRC-32 of the uncompressed bytes, which are not on \
                 the host"
                    .into(),
            );
        }
        Compression::Blosc(_) => {
            return Err("blosc: nvCOMP writes no blosc containers".into());
        }
    }
    if chain.swap.is_some() {
        return Err("the chunks are stored big-endian".into());
    }
    if zstd_config(array).0 {
        return Err(
            "the zstd codec asks for content checksums, which nvCOMP does not write".into(),
        );
    }
    let ndim = chunk_shape.len();
    if cell_shape.len() != ndim
        || cell_shape
            .iter()
            .zip(chunk_shape)
            .any(|(&i, &c)| i == 0 || c % i != 0)
    {
        return Err(format!(
            "inner chunk shape {cell_shape:?} does not divide the shard shape {chunk_shape:?}"
        ));
    }
    let product = |s: &[u64], start: usize| {
        s.iter().try_fold(start, |acc, &n| {
            usize::try_from(n).ok().and_then(|n| acc.checked_mul(n))
        })
    };
    let limit = GpuCodec::Zstd.max_compress_chunk_bytes();
    let cell_bytes = product(&cell_shape, elem)
        .filter(|&n| n <= limit)
        .ok_or_else(|| {
            format!("chunks of shape {cell_shape:?}: nvCOMP compresses at most {limit} bytes each")
        })?;
    let grid: Vec<u64> = chunk_shape
        .iter()
        .zip(&cell_shape)
        .map(|(&c, &i)| c / i)
        .collect();
    let cells = product(&grid, 1).ok_or("too many inner chunks per shard")?;
    let relayout = if cells > 1 || (chain.order == Order::F && ndim > 1) {
        if 2 * ndim > MAX_DIMS {
            return Err(format!(
                "{ndim} axes: the device relayout into inner chunks takes at most {} axes",
                MAX_DIMS / 2
            ));
        }
        Some(relayout(
            chunk_shape,
            &cell_shape,
            &grid,
            elem,
            cell_bytes,
            chain.order,
        ))
    } else {
        None
    };
    let lib = nvcomp::library().map_err(|e| format!("nvCOMP: {e}"))?;
    let bound = lib
        .max_compressed_chunk_size(GpuCodec::Zstd, cell_bytes)
        .map_err(|e| format!("nvCOMP: {e}"))?;
    // Outputs at multiples of 8 bytes (nvCOMP's output alignment is at most that).
    let cap = bound.div_ceil(8) * 8;
    let chunk_bytes = cell_bytes.saturating_mul(cells);
    match cells.checked_mul(cap) {
        Some(staged) if staged <= chunk_bytes.saturating_mul(2) => {}
        _ => {
            return Err(format!(
                "nvCOMP reserves {cap} bytes for each compressed chunk of {cell_bytes} bytes: \
                 staging its output would take more than twice the chunk"
            ));
        }
    }
    Ok(GpuEncode {
        cell_bytes,
        cells,
        cap,
        crc32c: chain.crc32c,
        index,
        relayout,
    })
}

fn relayout(
    chunk: &[u64],
    cell: &[u64],
    grid: &[u64],
    elem: usize,
    cell_bytes: usize,
    order: Order,
) -> Relayout {
    let cs = c_strides(chunk, elem);
    let within = match order {
        Order::C => c_strides(cell, elem),
        Order::F => f_strides(cell, elem),
    };
    let between = c_strides(grid, cell_bytes);
    let mut shape: Vec<usize> = grid.iter().map(|&g| g as usize).collect();
    shape.extend(cell.iter().map(|&c| c as usize));
    let mut src: Vec<isize> = cs.iter().zip(cell).map(|(&s, &c)| s * c as isize).collect();
    src.extend(&cs);
    let mut dst = between;
    dst.extend(within);
    Relayout { shape, src, dst }
}

/// Of the `zstd` codecs of the array (and of its shards' inner chunks): whether one has
/// `checksum: true`, and the highest `level` (unreadable metadata: a checksum).
fn zstd_config(array: &Array<DynStorage>) -> (bool, i64) {
    let Ok(codecs) = codec_list(array) else {
        return (true, 0);
    };
    fn walk(codecs: &[MetadataV3], out: &mut (bool, i64)) {
        for c in codecs {
            let cfg = c.configuration();
            match c.name() {
                "zstd" => {
                    let get = |k: &str| cfg.and_then(|m| m.get(k));
                    out.0 |= get("checksum").and_then(|v| v.as_bool()).unwrap_or(false);
                    out.1 = out
                        .1
                        .max(get("level").and_then(|v| v.as_i64()).unwrap_or(0));
                }
                "sharding_indexed" => {
                    if let Some(inner) = cfg
                        .and_then(|m| m.get("codecs"))
                        .and_then(|v| serde_json::from_value::<Vec<MetadataV3>>(v.clone()).ok())
                    {
                        walk(&inner, out);
                    }
                }
                _ => {}
            }
        }
    }
    let mut out = (false, i64::MIN);
    walk(&codecs, &mut out);
    out
}

/// Stores one GPU-encoded chunk: cell `k`'s compressed bytes are the first `sizes[k]`
/// of `compressed[k * cap..]`. Adds the crc32c checksums and, for a shard, the index.
pub(crate) fn store(
    array: &Array<DynStorage>,
    cell: &[u64],
    plan: &GpuEncode,
    compressed: &[u8],
    sizes: &[usize],
    what: &dyn Fn() -> String,
) -> Result<()> {
    let encoded = assemble(plan, compressed, sizes, what)?;
    // Safety: `assemble` built the bytes the array's codecs define for this chunk: zstd
    // frames (from nvCOMP, checked for size) in the chain's order and byte order, their
    // crc32c when the chain has one, and the shard index as its index codecs define it.
    unsafe { array.store_encoded_chunk(cell, Bytes::from(encoded)) }
        .map_err(|e| crate::storage::write_error(what(), e))
}

/// The stored bytes of one chunk from its cells' compressed bytes.
pub(crate) fn assemble(
    plan: &GpuEncode,
    compressed: &[u8],
    sizes: &[usize],
    what: &dyn Fn() -> String,
) -> Result<Vec<u8>> {
    if sizes.len() != plan.cells || compressed.len() < plan.cells * plan.cap {
        return Err(Error::invalid(format!(
            "{}: {} compressed cells in {} bytes, expected {} cells of up to {} bytes",
            what(),
            sizes.len(),
            compressed.len(),
            plan.cells,
            plan.cap
        )));
    }
    if let Some((k, &n)) = sizes.iter().enumerate().find(|(_, n)| **n > plan.cap) {
        return Err(Error::invalid(format!(
            "{}: cell {k} compressed to {n} bytes, more than the {} reserved",
            what(),
            plan.cap
        )));
    }
    let crc = if plan.crc32c { 4 } else { 0 };
    let body: usize = sizes.iter().map(|n| n + crc).sum();
    let index_len = match &plan.index {
        Some(ix) => usize::try_from(ix.len(plan.cells as u64).unwrap_or(u64::MAX))
            .map_err(|_| Error::invalid(format!("{}: shard index too large", what())))?,
        None => 0,
    };
    let total = body
        .checked_add(index_len)
        .ok_or_else(|| Error::invalid(format!("{}: encoded chunk too large", what())))?;
    let mut out: Vec<u8> = Vec::new();
    out.try_reserve_exact(total).map_err(|_| {
        Error::invalid(format!(
            "{}: cannot allocate {total} bytes for the encoded chunk",
            what()
        ))
    })?;
    let at_start = plan.index.as_ref().is_some_and(|ix| !ix.at_end);
    if at_start {
        out.resize(index_len, 0);
    }
    let mut entries = Vec::with_capacity(if plan.index.is_some() { plan.cells } else { 0 });
    for (k, &n) in sizes.iter().enumerate() {
        let bytes = &compressed[k * plan.cap..k * plan.cap + n];
        let at = out.len();
        out.extend_from_slice(bytes);
        if plan.crc32c {
            out.extend_from_slice(&crc32c::crc32c(bytes).to_le_bytes());
        }
        entries.push((at as u64, (n + crc) as u64));
    }
    if let Some(ix) = &plan.index {
        let mut index = Vec::with_capacity(index_len);
        for (offset, nbytes) in entries {
            index.extend_from_slice(&offset.to_le_bytes());
            index.extend_from_slice(&nbytes.to_le_bytes());
        }
        if ix.crc32c {
            let c = crc32c::crc32c(&index);
            index.extend_from_slice(&c.to_le_bytes());
        }
        if at_start {
            out[..index_len].copy_from_slice(&index);
        } else {
            out.extend_from_slice(&index);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(cells: usize, cap: usize, crc32c: bool, index: Option<ShardIndex>) -> GpuEncode {
        GpuEncode {
            cell_bytes: 16,
            cells,
            cap,
            crc32c,
            index,
            relayout: None,
        }
    }

    #[test]
    fn a_plain_chunk_is_its_frame_and_checksum() {
        let p = plan(1, 8, true, None);
        let out = assemble(&p, b"abcXXXXX", &[3], &|| "c".into()).unwrap();
        let mut want = b"abc".to_vec();
        want.extend_from_slice(&crc32c::crc32c(b"abc").to_le_bytes());
        assert_eq!(out, want);
    }

    #[test]
    fn shard_index_at_either_end() {
        let data = b"aaXXbbbX";
        for at_end in [true, false] {
            let ix = ShardIndex {
                at_end,
                crc32c: true,
            };
            let p = plan(2, 4, false, Some(ix));
            let out = assemble(&p, data, &[2, 3], &|| "s".into()).unwrap();
            assert_eq!(out.len(), 5 + 32 + 4);
            let (index, body) = if at_end {
                (&out[5..], &out[..5])
            } else {
                (&out[..36], &out[36..])
            };
            assert_eq!(body, b"aabbb");
            let base = if at_end { 0u64 } else { 36 };
            let word = |i: usize| u64::from_le_bytes(index[i * 8..i * 8 + 8].try_into().unwrap());
            assert_eq!([word(0), word(1), word(2), word(3)], [base, 2, base + 2, 3]);
            let crc = u32::from_le_bytes(index[32..36].try_into().unwrap());
            assert_eq!(crc, crc32c::crc32c(&index[..32]));
        }
    }

    #[test]
    fn sizes_past_the_reservation_are_refused() {
        let p = plan(1, 4, false, None);
        let e = assemble(&p, b"abcd", &[5], &|| "chunk [0]".into()).unwrap_err();
        assert!(
            e.to_string()
                .contains("chunk [0]: cell 0 compressed to 5 bytes"),
            "{e}"
        );
        let e = assemble(&p, b"abcd", &[1, 1], &|| "chunk [0]".into()).unwrap_err();
        assert!(e.to_string().contains("expected 1 cells"), "{e}");
    }

    #[test]
    fn relayout_puts_cells_one_after_another() {
        // A 4 x 4 chunk of 1-byte elements in 2 x 2 cells; on the host, apply the copy.
        let r = relayout(&[4, 4], &[2, 2], &[2, 2], 1, 4, Order::C);
        assert_eq!(r.shape, vec![2, 2, 2, 2]);
        let src: Vec<u8> = (0..16).collect();
        let mut dst = vec![0u8; 16];
        devbuf_core::__private::host_ops::strided_copy(
            &src, 0, &r.src, &mut dst, 0, &r.dst, &r.shape, 1,
        )
        .unwrap();
        assert_eq!(
            dst,
            vec![0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15]
        );
        let f = relayout(&[2, 3], &[2, 3], &[1, 1], 1, 6, Order::F);
        let src: Vec<u8> = (0..6).collect();
        let mut dst = vec![0u8; 6];
        devbuf_core::__private::host_ops::strided_copy(
            &src, 0, &f.src, &mut dst, 0, &f.dst, &f.shape, 1,
        )
        .unwrap();
        assert_eq!(dst, vec![0, 3, 1, 4, 2, 5]);
    }
}
