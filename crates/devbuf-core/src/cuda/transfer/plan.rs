//! Planning of staged transfers (pure logic, tested on the host).
//!
//! A transfer is a list of *pieces*: host range `i` of `len` bytes to or from device
//! address `dev`. The plan cuts them into *chunks*, each the content of one page-locked
//! staging buffer, which one lane moves with one DMA:
//!
//! * [`Chunk::Direct`]: one contiguous range of one piece, staged at offset 0 and
//!   DMA'd straight to (or from) its device address. Large pieces become direct chunks.
//! * [`Chunk::Packed`]: many small ranges ([`Seg`]ments) side by side in the buffer's
//!   data region, which starts at [`PackParams::data_offset`]; the bytes before it hold
//!   the kernel's segment table. One DMA moves table and data to a device scratch buffer
//!   and a kernel scatters the segments to their destinations (device->host: a kernel
//!   gathers them into scratch, one DMA brings them to the staging buffer).
//!
//! Each segment is placed so that its offset in the data region is congruent to its
//! device address modulo [`SEG_ALIGN`]: the scatter kernel then always copies with
//! 16-byte accesses. Kernel work is split into *tiles* of at most
//! [`PackParams::tile_bytes`] so that one large segment spreads over many blocks.

use std::mem::MaybeUninit;
use std::ops::Range;

use crate::cuda::kernels::Segment as TableEntry;

/// Alignment (bytes) shared by a packed segment's staging offset and its device address.
pub(crate) const SEG_ALIGN: usize = 16;

/// Size of one entry of the kernel's segment table.
pub(crate) const TABLE_ENTRY_BYTES: usize = std::mem::size_of::<TableEntry>();

/// One piece of a transfer, as the planner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PieceSpec {
    /// Bytes to move.
    pub len: usize,
    /// Device address of the piece's first byte.
    pub dev: u64,
}

/// A range of one piece inside a packed chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seg {
    /// Index of the piece.
    pub piece: usize,
    /// Offset of the range within the piece.
    pub piece_off: usize,
    /// Length of the range.
    pub len: usize,
    /// Offset of the range within the chunk's data region.
    pub stage_off: usize,
}

/// The content of one staging buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Chunk {
    /// `len` bytes of piece `piece` from `piece_off`, at staging offset 0.
    Direct {
        /// Index of the piece.
        piece: usize,
        /// Offset within the piece.
        piece_off: usize,
        /// Bytes.
        len: usize,
    },
    /// Segments `segs` of [`TransferPlan::segs`], `tiles` table entries, data region bytes
    /// `0..data_len` in use.
    Packed {
        /// Range of [`TransferPlan::segs`].
        segs: Range<usize>,
        /// Number of kernel table entries the segments need.
        tiles: usize,
        /// End of the last segment within the data region.
        data_len: usize,
    },
}

/// A whole transfer cut into chunks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TransferPlan {
    /// Chunks, in the order lanes claim them.
    pub chunks: Vec<Chunk>,
    /// Segments of the packed chunks.
    pub segs: Vec<Seg>,
    /// Total payload bytes (sum of the pieces).
    pub total_bytes: usize,
}

/// How pieces are packed into staging buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PackParams {
    /// Size of one staging buffer.
    pub chunk_bytes: usize,
    /// Start of a packed chunk's data region (the segment table sits right before it).
    /// A multiple of [`SEG_ALIGN`], at least `max_tiles * TABLE_ENTRY_BYTES`.
    pub data_offset: usize,
    /// Most table entries one packed chunk may need.
    pub max_tiles: usize,
    /// Most bytes of one table entry (kernel work item).
    pub tile_bytes: usize,
    /// Pieces at least this long become direct chunks.
    pub direct_min: usize,
}

impl PackParams {
    /// Parameters for staging buffers of `chunk_bytes` with the kernel scatter: up to
    /// 2048 table entries (48 KiB) and 64 KiB tiles; pieces of half a buffer or more go
    /// direct. For `chunk_bytes` too small to hold a table, packing degenerates to
    /// smaller tables (always at least one entry).
    pub fn for_kernel(chunk_bytes: usize) -> PackParams {
        let max_tiles = (chunk_bytes / 4 / TABLE_ENTRY_BYTES).clamp(1, 2048);
        PackParams {
            chunk_bytes,
            data_offset: round_up(max_tiles * TABLE_ENTRY_BYTES, 256),
            max_tiles,
            tile_bytes: 64 * 1024,
            direct_min: (chunk_bytes / 2).max(1),
        }
    }

    /// Parameters for the `cuMemcpyBatchAsync` scatter: no table in the buffer, one
    /// batch entry per segment (tiles = segments, each as long as it needs to be),
    /// at most 1024 per chunk.
    pub fn for_batch_memcpy(chunk_bytes: usize) -> PackParams {
        PackParams {
            chunk_bytes,
            data_offset: 0,
            max_tiles: 1024,
            tile_bytes: usize::MAX,
            direct_min: (chunk_bytes / 2).max(1),
        }
    }

    /// Bytes of a packed chunk's data region.
    pub fn data_capacity(&self) -> usize {
        self.chunk_bytes.saturating_sub(self.data_offset)
    }
}

/// `x` rounded up to a multiple of `to` (`to > 0`), saturating.
pub(crate) fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to).saturating_mul(to)
}

/// The smallest `y >= x` with `y % SEG_ALIGN == residue`.
fn align_to_residue(x: usize, residue: usize) -> usize {
    let r = x % SEG_ALIGN;
    x + (residue + SEG_ALIGN - r) % SEG_ALIGN
}

/// Number of table entries a segment of `len` bytes needs.
pub(crate) fn tiles_of(len: usize, tile_bytes: usize) -> usize {
    len.div_ceil(tile_bytes.max(1))
}

/// Staging chunk size for one transfer of `n` bytes over `lanes` lanes: about two chunks
/// per lane (so that every lane double-buffers), within `min_chunk..=max_chunk`, a
/// multiple of 4 KiB where the bounds allow.
pub(crate) fn chunk_size_for(n: usize, lanes: usize, min_chunk: usize, max_chunk: usize) -> usize {
    let max_chunk = max_chunk.max(1);
    let min_chunk = min_chunk.clamp(1, max_chunk);
    let per = n.div_ceil(lanes.max(1) * 2);
    round_up(per, 4096).clamp(min_chunk, max_chunk)
}

/// Cuts `len` bytes of piece `piece` into direct chunks of at most `chunk_bytes`
/// (balanced sizes, 4 KiB multiples except the last).
fn push_direct(chunks: &mut Vec<Chunk>, piece: usize, len: usize, chunk_bytes: usize) {
    let chunk_bytes = chunk_bytes.max(1);
    let k = len.div_ceil(chunk_bytes).max(1);
    let part = round_up(len.div_ceil(k), 4096).min(chunk_bytes);
    let mut off = 0;
    while off < len {
        let n = part.min(len - off);
        chunks.push(Chunk::Direct {
            piece,
            piece_off: off,
            len: n,
        });
        off += n;
    }
}

/// Plans one contiguous transfer of `len` bytes in direct chunks of `chunk_bytes`.
pub(crate) fn plan_single(len: usize, chunk_bytes: usize) -> TransferPlan {
    let mut chunks = Vec::new();
    if len > 0 {
        push_direct(&mut chunks, 0, len, chunk_bytes);
    }
    TransferPlan {
        chunks,
        segs: Vec::new(),
        total_bytes: len,
    }
}

/// Plans a batched transfer. Zero-length pieces take no room.
pub(crate) fn plan_batch(pieces: &[PieceSpec], p: &PackParams) -> TransferPlan {
    let mut plan = TransferPlan::default();
    let cap = p.data_capacity();
    let max_tiles = p.max_tiles.max(1);
    // The open packed chunk: first segment, tiles used, data cursor.
    let mut open: Option<(usize, usize, usize)> = None;
    let close = |plan: &mut TransferPlan, open: &mut Option<(usize, usize, usize)>| {
        if let Some((first, tiles, cursor)) = open.take()
            && plan.segs.len() > first
        {
            plan.chunks.push(Chunk::Packed {
                segs: first..plan.segs.len(),
                tiles,
                data_len: cursor,
            });
        }
    };
    for (i, piece) in pieces.iter().enumerate() {
        plan.total_bytes = plan.total_bytes.saturating_add(piece.len);
        if piece.len == 0 {
            continue;
        }
        if piece.len >= p.direct_min || cap <= SEG_ALIGN {
            push_direct(&mut plan.chunks, i, piece.len, p.chunk_bytes);
            continue;
        }
        let mut off = 0;
        while off < piece.len {
            let (first, tiles, cursor) = *open.get_or_insert((plan.segs.len(), 0, 0));
            let residue = ((piece.dev + off as u64) % SEG_ALIGN as u64) as usize;
            let stage_off = align_to_residue(cursor, residue);
            let tiles_left = max_tiles.saturating_sub(tiles);
            if stage_off >= cap || tiles_left == 0 {
                close(&mut plan, &mut open);
                continue;
            }
            let mut take = (piece.len - off).min(cap - stage_off);
            if p.tile_bytes != usize::MAX {
                take = take.min(tiles_left.saturating_mul(p.tile_bytes));
            }
            plan.segs.push(Seg {
                piece: i,
                piece_off: off,
                len: take,
                stage_off,
            });
            open = Some((
                first,
                tiles + tiles_of(take, p.tile_bytes),
                stage_off + take,
            ));
            off += take;
        }
    }
    close(&mut plan, &mut open);
    plan
}

/// Direction of a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    /// Host to device.
    HtoD,
    /// Device to host.
    DtoH,
}

/// Writes the kernel table of a packed chunk into `out` and returns the number of
/// entries. `scratch` is the device address of the device scratch buffer whose data
/// region (at `p.data_offset`) mirrors the staging buffer's. Host->device the entries
/// copy scratch -> destination; device->host source -> scratch.
///
/// `out` is `MaybeUninit` because it lies in page-locked staging memory that may never
/// have been written; entries `0..n` are initialised on return.
pub(crate) fn fill_table(
    segs: &[Seg],
    pieces: &[PieceSpec],
    p: &PackParams,
    scratch: u64,
    dir: Dir,
    out: &mut [MaybeUninit<TableEntry>],
) -> usize {
    let mut k = 0;
    let data = scratch + p.data_offset as u64;
    for s in segs {
        let dev = pieces[s.piece].dev + s.piece_off as u64;
        let stage = data + s.stage_off as u64;
        let mut t = 0;
        while t < s.len && k < out.len() {
            let len = p.tile_bytes.min(s.len - t);
            let (dst, src) = match dir {
                Dir::HtoD => (dev + t as u64, stage + t as u64),
                Dir::DtoH => (stage + t as u64, dev + t as u64),
            };
            out[k].write(TableEntry {
                dst,
                src,
                len: len as u64,
            });
            k += 1;
            t += len;
        }
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: usize = 1024;
    const MIB: usize = 1024 * KIB;

    /// Every byte of every piece is covered exactly once, segments fit their chunk and
    /// do not overlap, alignment residues match.
    fn check_plan(pieces: &[PieceSpec], p: &PackParams, plan: &TransferPlan) {
        let mut covered: Vec<Vec<(usize, usize)>> = vec![Vec::new(); pieces.len()];
        for c in &plan.chunks {
            match c {
                Chunk::Direct {
                    piece,
                    piece_off,
                    len,
                } => {
                    assert!(*len > 0 && *len <= p.chunk_bytes, "{c:?}");
                    covered[*piece].push((*piece_off, *len));
                }
                Chunk::Packed {
                    segs,
                    tiles,
                    data_len,
                } => {
                    assert!(!segs.is_empty());
                    let mut need = 0;
                    let mut end = 0;
                    let mut ranges: Vec<(usize, usize)> = Vec::new();
                    for s in &plan.segs[segs.clone()] {
                        assert!(s.len > 0);
                        let dev = pieces[s.piece].dev + s.piece_off as u64;
                        assert_eq!(
                            s.stage_off % SEG_ALIGN,
                            (dev % SEG_ALIGN as u64) as usize,
                            "alignment residue of {s:?}"
                        );
                        assert!(s.stage_off + s.len <= p.data_capacity(), "{s:?} fits");
                        ranges.push((s.stage_off, s.len));
                        need += tiles_of(s.len, p.tile_bytes);
                        end = end.max(s.stage_off + s.len);
                        covered[s.piece].push((s.piece_off, s.len));
                    }
                    ranges.sort();
                    for w in ranges.windows(2) {
                        assert!(w[0].0 + w[0].1 <= w[1].0, "segments overlap: {w:?}");
                    }
                    assert_eq!(*tiles, need);
                    assert!(*tiles <= p.max_tiles);
                    assert_eq!(*data_len, end);
                }
            }
        }
        for (i, mut ranges) in covered.into_iter().enumerate() {
            ranges.sort();
            let mut at = 0;
            for (off, len) in ranges {
                assert_eq!(off, at, "piece {i}: gap or overlap at {at}");
                at += len;
            }
            assert_eq!(at, pieces[i].len, "piece {i} fully covered");
        }
        assert_eq!(
            plan.total_bytes,
            pieces.iter().map(|p| p.len).sum::<usize>()
        );
    }

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    }

    #[test]
    fn single_plans_are_balanced_direct_chunks() {
        assert!(plan_single(0, 4 * MIB).chunks.is_empty());
        let p = plan_single(10 * MIB + 3, 4 * MIB);
        assert_eq!(p.chunks.len(), 3);
        let lens: Vec<usize> = p
            .chunks
            .iter()
            .map(|c| match c {
                Chunk::Direct { len, .. } => *len,
                _ => panic!("direct only"),
            })
            .collect();
        assert_eq!(lens.iter().sum::<usize>(), 10 * MIB + 3);
        assert!(lens.iter().all(|&l| l <= 4 * MIB));
        assert_eq!(lens[0] % 4096, 0);
        let p = plan_single(5, 4 * MIB);
        assert_eq!(
            p.chunks,
            vec![Chunk::Direct {
                piece: 0,
                piece_off: 0,
                len: 5
            }]
        );
        // A chunk size that is not a multiple of 4 KiB still bounds every chunk.
        let p = plan_single(100_000, 3000);
        check_plan(
            &[PieceSpec {
                len: 100_000,
                dev: 0,
            }],
            &PackParams::for_kernel(3000),
            &p,
        );
    }

    #[test]
    fn chunk_size_adapts_to_transfer_and_lanes() {
        assert_eq!(chunk_size_for(1 << 30, 16, 256 * KIB, 4 * MIB), 4 * MIB);
        assert_eq!(chunk_size_for(8 * MIB, 16, 256 * KIB, 4 * MIB), 256 * KIB);
        assert_eq!(chunk_size_for(64 * MIB, 8, 256 * KIB, 4 * MIB), 4 * MIB);
        assert_eq!(chunk_size_for(16 * MIB, 4, 256 * KIB, 4 * MIB), 2 * MIB);
        assert_eq!(chunk_size_for(1, 16, 256 * KIB, 4 * MIB), 256 * KIB);
        // Degenerate bounds do not panic.
        assert_eq!(chunk_size_for(100, 0, 0, 0), 1);
        assert_eq!(chunk_size_for(100, 1, 10 * MIB, MIB), MIB);
    }

    #[test]
    fn ten_thousand_64k_pieces_pack_into_full_chunks() {
        let n = 10_000;
        let pieces: Vec<PieceSpec> = (0..n)
            .map(|i| PieceSpec {
                len: 64 * KIB,
                dev: 0x7f00_0000_0000 + (i as u64 * 64 * KIB as u64),
            })
            .collect();
        let p = PackParams::for_kernel(4 * MIB);
        let plan = plan_batch(&pieces, &p);
        check_plan(&pieces, &p, &plan);
        // Aligned 64 KiB pieces: the data region holds 63 whole pieces (4 MiB - 48 KiB).
        let expect = (n * 64 * KIB).div_ceil(p.data_capacity());
        assert_eq!(plan.chunks.len(), expect);
        assert!(
            plan.chunks
                .iter()
                .all(|c| matches!(c, Chunk::Packed { tiles, .. } if *tiles <= 64))
        );
    }

    #[test]
    fn misaligned_and_odd_pieces_keep_residues() {
        let mut seed = 7;
        let pieces: Vec<PieceSpec> = (0..3000)
            .map(|_| PieceSpec {
                len: (lcg(&mut seed) % 70_000) as usize,
                dev: 0x1000_0000 + lcg(&mut seed) % 1_000_000,
            })
            .collect();
        for p in [
            PackParams::for_kernel(4 * MIB),
            PackParams::for_kernel(256 * KIB),
            PackParams::for_batch_memcpy(MIB),
        ] {
            let plan = plan_batch(&pieces, &p);
            check_plan(&pieces, &p, &plan);
        }
    }

    #[test]
    fn zero_length_pieces_take_no_room_and_large_pieces_go_direct() {
        let pieces = vec![
            PieceSpec { len: 0, dev: 3 },
            PieceSpec {
                len: 10 * MIB,
                dev: 5,
            },
            PieceSpec { len: 0, dev: 0 },
            PieceSpec { len: 1, dev: 7 },
            PieceSpec {
                len: 3 * MIB,
                dev: 1,
            },
            PieceSpec { len: 0, dev: 9 },
        ];
        let p = PackParams::for_kernel(4 * MIB);
        let plan = plan_batch(&pieces, &p);
        check_plan(&pieces, &p, &plan);
        let direct = plan
            .chunks
            .iter()
            .filter(|c| matches!(c, Chunk::Direct { .. }))
            .count();
        assert_eq!(direct, 3 + 1, "10 MiB in three chunks, 3 MiB in one");
        assert_eq!(plan.segs.len(), 1);
        assert!(
            plan_batch(&[PieceSpec { len: 0, dev: 0 }; 5], &p)
                .chunks
                .is_empty()
        );
        assert!(plan_batch(&[], &p).chunks.is_empty());
    }

    #[test]
    fn tiny_pieces_are_bounded_by_the_table() {
        let pieces: Vec<PieceSpec> = (0..10_000)
            .map(|i| PieceSpec {
                len: 1,
                dev: 1000 + i as u64 * 3,
            })
            .collect();
        let p = PackParams::for_kernel(4 * MIB);
        let plan = plan_batch(&pieces, &p);
        check_plan(&pieces, &p, &plan);
        assert_eq!(plan.chunks.len(), 10_000usize.div_ceil(p.max_tiles));
    }

    #[test]
    fn pieces_straddle_chunks_when_needed() {
        // 3 pieces of 100 KB in chunks with a 64 KiB data region.
        let p = PackParams {
            chunk_bytes: 64 * KIB + 4096,
            data_offset: 4096,
            max_tiles: 100,
            tile_bytes: 16 * KIB,
            direct_min: usize::MAX,
        };
        let pieces = vec![
            PieceSpec {
                len: 100_000,
                dev: 0,
            };
            3
        ];
        let plan = plan_batch(&pieces, &p);
        check_plan(&pieces, &p, &plan);
        assert_eq!(plan.chunks.len(), 300_000usize.div_ceil(64 * KIB));
    }

    #[test]
    fn tables_follow_direction_and_tiles() {
        let pieces = vec![
            PieceSpec {
                len: 100_000,
                dev: 0x10_0003,
            },
            PieceSpec {
                len: 10,
                dev: 0x20_0000,
            },
        ];
        let p = PackParams::for_kernel(4 * MIB);
        let plan = plan_batch(&pieces, &p);
        check_plan(&pieces, &p, &plan);
        let Chunk::Packed { segs, tiles, .. } = &plan.chunks[0] else {
            panic!("packed")
        };
        assert_eq!(*tiles, 2 + 1);
        let scratch = 0x9000_0000u64;
        let mut table = vec![MaybeUninit::<TableEntry>::uninit(); *tiles];
        let n = fill_table(
            &plan.segs[segs.clone()],
            &pieces,
            &p,
            scratch,
            Dir::HtoD,
            &mut table,
        );
        assert_eq!(n, 3);
        let entries = |t: &[MaybeUninit<TableEntry>], n: usize| -> Vec<TableEntry> {
            t[..n]
                .iter()
                // Safety: `fill_table` initialised entries `0..n` (its return value).
                .map(|e| unsafe { e.assume_init() })
                .collect()
        };
        let table = entries(&table, n);
        let data = scratch + p.data_offset as u64;
        assert_eq!(table[0].dst, 0x10_0003);
        assert_eq!(table[0].src, data + 3);
        assert_eq!(table[0].len, 64 * 1024);
        assert_eq!(table[1].dst, 0x10_0003 + 65_536);
        assert_eq!(table[1].len, 100_000 - 65_536);
        assert_eq!(table[2].dst, 0x20_0000);
        assert_eq!(table[2].src % 16, 0);
        assert!(table[2].src >= table[1].src + table[1].len);
        let mut raw = vec![MaybeUninit::<TableEntry>::uninit(); *tiles];
        let n = fill_table(
            &plan.segs[segs.clone()],
            &pieces,
            &p,
            scratch,
            Dir::DtoH,
            &mut raw,
        );
        assert_eq!(n, 3);
        let table = entries(&raw, n);
        assert_eq!(table[0].src, 0x10_0003);
        assert_eq!(table[0].dst, data + 3);
        assert!(p.data_offset >= p.max_tiles * TABLE_ENTRY_BYTES);
        assert_eq!(p.data_offset % 256, 0);
    }
}
