//! Page-locked staging between host codecs and a device: reusable buffers, the split of
//! a read or write into C-contiguous pieces, and the double-buffered pipeline that
//! overlaps decoding (or encoding) on the host with the DMA copy of the other buffer.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::cuda::{Context, HostBuffer};
use crate::error::{Error, Result};

/// Smallest staging buffer allocated (small reads share one of this size).
const MIN_STAGING: usize = 64 << 10;

/// How many staging buffers a pipeline uses (one fills while the other is copied).
const LANES: usize = 2;

/// A box of an array: `start` and `shape` per axis, and where its C-order bytes go in a
/// flat destination (`offset`, `len` bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    pub start: Vec<u64>,
    pub shape: Vec<u64>,
    pub offset: usize,
    pub len: usize,
}

/// Splits the box `start`/`shape` (elements of `elem` bytes, C order) into boxes whose
/// bytes are consecutive ranges of the box's C-order bytes, each at most `cap` bytes.
///
/// Pieces run along the first axis whose trailing block fits in `cap`; along that axis
/// they follow the chunk grid (`chunk`) where they can: whole multiples of the chunk
/// extent aligned to chunk boundaries, or parts of one chunk, so that a chunk is decoded
/// (or rewritten) as few times as possible. An empty box has no pieces.
pub(crate) fn slabs(
    start: &[u64],
    shape: &[u64],
    chunk: &[u64],
    elem: usize,
    cap: usize,
) -> Vec<Piece> {
    let total = byte_len(shape, elem);
    if total == 0 {
        return Vec::new();
    }
    let cap = cap.max(elem);
    if total <= cap || shape.is_empty() {
        return vec![Piece {
            start: start.to_vec(),
            shape: shape.to_vec(),
            offset: 0,
            len: total,
        }];
    }
    let nd = shape.len();
    // inner[j]: bytes of one index step along axis j (the trailing block).
    let mut inner = vec![elem; nd];
    for j in (0..nd - 1).rev() {
        inner[j] = inner[j + 1].saturating_mul(shape[j + 1] as usize);
    }
    let j = (0..nd).find(|&j| inner[j] <= cap).unwrap_or(nd - 1);
    let rows = ((cap / inner[j]) as u64).max(1);
    let c = chunk.get(j).copied().unwrap_or(0);
    let (lo, hi) = (start[j], start[j] + shape[j]);

    let mut pieces = Vec::new();
    let mut offset = 0usize;
    let outer_shape = &shape[..j];
    let outer_count: u64 = outer_shape.iter().product();
    let mut outer = vec![0u64; j];
    for _ in 0..outer_count {
        let mut a = lo;
        while a < hi {
            // Saturating: a box may end near u64::MAX (array shapes come from metadata).
            let end = if c == 0 {
                a.saturating_add(rows).min(hi)
            } else if rows >= c {
                // Whole chunks: runs end on chunk boundaries.
                ((a / c) * c).saturating_add((rows / c) * c).min(hi)
            } else {
                // Within one chunk.
                a.saturating_add(rows)
                    .min((a / c + 1).saturating_mul(c))
                    .min(hi)
            };
            let mut p_start = Vec::with_capacity(nd);
            let mut p_shape = Vec::with_capacity(nd);
            for (i, &o) in outer.iter().enumerate() {
                p_start.push(start[i] + o);
                p_shape.push(1);
            }
            p_start.push(a);
            p_shape.push(end - a);
            p_start.extend_from_slice(&start[j + 1..]);
            p_shape.extend_from_slice(&shape[j + 1..]);
            let len = (end - a) as usize * inner[j];
            pieces.push(Piece {
                start: p_start,
                shape: p_shape,
                offset,
                len,
            });
            offset += len;
            a = end;
        }
        // Next outer index, C order.
        for i in (0..j).rev() {
            outer[i] += 1;
            if outer[i] < outer_shape[i] {
                break;
            }
            outer[i] = 0;
        }
    }
    pieces
}

/// Bytes of a C-order box (saturating; callers checked sizes beforehand).
pub(crate) fn byte_len(shape: &[u64], elem: usize) -> usize {
    shape
        .iter()
        .fold(elem, |acc, &s| acc.saturating_mul(s as usize))
}

/// Groups consecutive pieces into batches of at most `cap` bytes (a piece larger than
/// `cap` is a batch of its own). Returns index ranges into `pieces`.
pub(crate) fn batches(pieces: &[Piece], cap: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut first = 0;
    let mut bytes = 0usize;
    for (i, p) in pieces.iter().enumerate() {
        if i > first && bytes + p.len > cap {
            out.push(first..i);
            first = i;
            bytes = 0;
        }
        bytes += p.len;
    }
    if first < pieces.len() {
        out.push(first..pieces.len());
    }
    out
}

/// Page-locked buffers kept between calls (per array), so that a read or write to a
/// device does not allocate page-locked memory each time.
#[derive(Default)]
pub(crate) struct Staging {
    bufs: Mutex<Vec<HostBuffer>>,
    allocations: AtomicUsize,
}

impl Staging {
    /// `n` buffers of at least `len` bytes for `ctx`'s device, reused when the pool has
    /// them, else allocated (zeroed once).
    fn take(&self, ctx: &Context, len: usize, n: usize) -> Result<Vec<HostBuffer>> {
        let mut out = Vec::with_capacity(n);
        {
            let mut pool = self.bufs.lock().unwrap_or_else(|p| p.into_inner());
            while out.len() < n {
                let Some(i) = pool
                    .iter()
                    .position(|b| b.len() >= len && b.context().ordinal() == ctx.ordinal())
                else {
                    break;
                };
                out.push(pool.swap_remove(i));
            }
        }
        let size = len.max(MIN_STAGING).next_power_of_two();
        while out.len() < n {
            out.push(ctx.allocate_host(size)?);
            self.allocations.fetch_add(1, Ordering::Relaxed);
        }
        Ok(out)
    }

    /// Returns buffers to the pool, keeping the largest [`LANES`] of them.
    fn give(&self, bufs: Vec<HostBuffer>) {
        let mut pool = self.bufs.lock().unwrap_or_else(|p| p.into_inner());
        pool.extend(bufs);
        pool.sort_by_key(|b| std::cmp::Reverse(b.len()));
        pool.truncate(LANES);
    }

    /// Bytes of page-locked memory held for reuse.
    pub(crate) fn held_bytes(&self) -> usize {
        let pool = self.bufs.lock().unwrap_or_else(|p| p.into_inner());
        pool.iter().map(|b| b.len()).sum()
    }

    /// How many page-locked buffers were allocated so far.
    pub(crate) fn allocations(&self) -> usize {
        self.allocations.load(Ordering::Relaxed)
    }

    /// Frees the pooled buffers.
    pub(crate) fn release(&self) {
        self.bufs.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// This pool's buffers, for `ctx`'s device, as [`Lanes`].
    pub(crate) fn lanes<'a>(&'a self, ctx: &'a Context) -> PinnedLanes<'a> {
        PinnedLanes { staging: self, ctx }
    }
}

/// Where batches are staged: two buffers that alternate (see [`Lanes::pipeline`]).
pub(crate) trait Lanes: Sync {
    /// Runs `lens.len()` batches: `produce(k, buf)` fills batch `k` (exactly `lens[k]`
    /// bytes) and `consume(k, buf)` takes it away. With two or more batches, two buffers
    /// alternate and `consume(k)` runs at the same time as `produce(k + 1)` (rayon
    /// `join`), so a blocking DMA copy overlaps host decoding or encoding. The first
    /// error stops the pipeline and is returned.
    fn pipeline<P, C>(&self, lens: &[usize], produce: P, consume: C) -> Result<()>
    where
        P: Fn(usize, &mut [u8]) -> Result<()> + Sync,
        C: Fn(usize, &[u8]) -> Result<()> + Sync;
}

/// The page-locked buffers of a [`Staging`] pool for one device.
pub(crate) struct PinnedLanes<'a> {
    staging: &'a Staging,
    ctx: &'a Context,
}

impl Lanes for PinnedLanes<'_> {
    fn pipeline<P, C>(&self, lens: &[usize], produce: P, consume: C) -> Result<()>
    where
        P: Fn(usize, &mut [u8]) -> Result<()> + Sync,
        C: Fn(usize, &[u8]) -> Result<()> + Sync,
    {
        let n = lens.len();
        if n == 0 {
            return Ok(());
        }
        let cap = lens.iter().copied().max().unwrap_or(0);
        let mut bufs = self.staging.take(self.ctx, cap, LANES.min(n))?;
        let result = run(&mut bufs, lens, &produce, &consume);
        self.staging.give(bufs);
        result
    }
}

/// Ordinary host vectors as lanes: the same pipeline without a device, so the batch
/// logic of device reads and writes is tested on every machine.
#[cfg(test)]
pub(crate) struct VecLanes;

#[cfg(test)]
impl Lanes for VecLanes {
    fn pipeline<P, C>(&self, lens: &[usize], produce: P, consume: C) -> Result<()>
    where
        P: Fn(usize, &mut [u8]) -> Result<()> + Sync,
        C: Fn(usize, &[u8]) -> Result<()> + Sync,
    {
        let cap = lens.iter().copied().max().unwrap_or(0);
        let mut bufs = vec![vec![0xEEu8; cap]; LANES.min(lens.len())];
        if lens.is_empty() {
            return Ok(());
        }
        run(&mut bufs, lens, &produce, &consume)
    }
}

fn run<B, P, C>(bufs: &mut [B], lens: &[usize], produce: &P, consume: &C) -> Result<()>
where
    B: std::ops::DerefMut<Target = [u8]> + Send,
    P: Fn(usize, &mut [u8]) -> Result<()> + Sync,
    C: Fn(usize, &[u8]) -> Result<()> + Sync,
{
    let n = lens.len();
    if n == 0 {
        return Ok(());
    }
    if bufs.is_empty() {
        return Err(Error::invalid("staging pipeline without a buffer"));
    }
    if bufs.len() == 1 || n == 1 {
        let buf = bufs
            .first_mut()
            .ok_or_else(|| Error::invalid("staging pipeline without a buffer"))?;
        for (k, &len) in lens.iter().enumerate() {
            produce(k, &mut buf[..len])?;
            consume(k, &buf[..len])?;
        }
        return Ok(());
    }
    let (a, b) = bufs.split_at_mut(1);
    let (mut cur, mut next) = (&mut a[0], &mut b[0]);
    produce(0, &mut cur[..lens[0]])?;
    for k in 0..n {
        let cur_bytes: &[u8] = &cur[..lens[k]];
        let (done, filled) = rayon::join(
            || consume(k, cur_bytes),
            || match lens.get(k + 1) {
                Some(&len) => produce(k + 1, &mut next[..len]),
                None => Ok(()),
            },
        );
        done?;
        filled?;
        std::mem::swap(&mut cur, &mut next);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_cover(start: &[u64], shape: &[u64], pieces: &[Piece], elem: usize) {
        // Pieces are consecutive ranges, in C order, covering every element once.
        let mut offset = 0;
        let mut seen = Vec::new();
        for p in pieces {
            assert_eq!(p.offset, offset);
            assert_eq!(p.len, byte_len(&p.shape, elem));
            offset += p.len;
            let n: u64 = p.shape.iter().product();
            for lin in 0..n {
                let mut rem = lin;
                let mut idx = vec![0u64; p.shape.len()];
                for a in (0..p.shape.len()).rev() {
                    idx[a] = p.start[a] + rem % p.shape[a];
                    rem /= p.shape[a];
                }
                seen.push(idx);
            }
        }
        assert_eq!(offset, byte_len(shape, elem));
        let mut expected = Vec::new();
        let n: u64 = shape.iter().product();
        for lin in 0..n {
            let mut rem = lin;
            let mut idx = vec![0u64; shape.len()];
            for a in (0..shape.len()).rev() {
                idx[a] = start[a] + rem % shape[a];
                rem /= shape[a];
            }
            expected.push(idx);
        }
        assert_eq!(seen, expected);
    }

    #[test]
    fn slabs_cover_in_c_order() {
        for cap in [4, 8, 12, 20, 48, 100, 1000] {
            for (start, shape, chunk) in [
                (vec![0u64, 0, 0], vec![6u64, 5, 4], vec![3u64, 2, 4]),
                (vec![1, 2, 0], vec![5, 3, 4], vec![3, 2, 4]),
                (vec![3], vec![11], vec![4]),
                (vec![2, 1], vec![7, 6], vec![4, 3]),
            ] {
                let pieces = slabs(&start, &shape, &chunk, 4, cap);
                check_cover(&start, &shape, &pieces, 4);
                for p in &pieces {
                    assert!(p.len <= cap.max(4), "cap {cap}: {p:?}");
                }
            }
        }
    }

    #[test]
    fn slabs_follow_chunks() {
        // 8 rows of 16 bytes, chunks of 2 rows, cap 40 bytes: runs of 2 rows aligned.
        let p = slabs(&[1, 0], &[8, 4], &[2, 4], 4, 40);
        let rows: Vec<(u64, u64)> = p.iter().map(|p| (p.start[0], p.shape[0])).collect();
        assert_eq!(rows, vec![(1, 1), (2, 2), (4, 2), (6, 2), (8, 1)]);
        // cap below a chunk row: parts of one chunk, never across a boundary.
        let p = slabs(&[0, 0], &[6, 4], &[3, 4], 4, 32);
        let rows: Vec<(u64, u64)> = p.iter().map(|p| (p.start[0], p.shape[0])).collect();
        assert_eq!(rows, vec![(0, 2), (2, 1), (3, 2), (5, 1)]);
    }

    #[test]
    fn slabs_edge_cases() {
        assert!(slabs(&[0, 0], &[0, 5], &[1, 1], 4, 8).is_empty());
        assert_eq!(slabs(&[], &[], &[], 8, 4).len(), 1); // 0-d: one element
        let p = slabs(&[0], &[3], &[1], 16, 1); // cap below one element
        assert_eq!(p.len(), 3);
        // Boxes that end at u64::MAX (shapes from a store's metadata): no overflow
        // past the last chunk boundary or the end of a run (this panicked).
        let max = u64::MAX;
        for (chunk, cap) in [(1000u64, 4usize), (3, 4), (0, 4), (max, 8)] {
            let start = [max - 10];
            let p = slabs(&start, &[10], &[chunk], 1, cap);
            check_cover(&start, &[10], &p, 1);
            assert!(p.iter().all(|p| p.len <= cap), "chunk {chunk}: {p:?}");
        }
    }

    #[test]
    fn batches_group_up_to_cap() {
        let pieces: Vec<Piece> = [4usize, 4, 4, 10, 2, 2]
            .iter()
            .scan(0, |off, &len| {
                let p = Piece {
                    start: vec![],
                    shape: vec![],
                    offset: *off,
                    len,
                };
                *off += len;
                Some(p)
            })
            .collect();
        assert_eq!(batches(&pieces, 8), vec![0..2, 2..3, 3..4, 4..6]);
        assert_eq!(batches(&pieces, 100), vec![0..6]);
        assert!(batches(&[], 8).is_empty());
    }
}
