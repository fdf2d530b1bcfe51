//! Host-side checks and layout of a batched call: ranges, limits, overlaps, which chunks
//! must be staged for alignment, and where the tables, the temporary space and the
//! staging area lie in one device workspace. No device work here.

use std::ops::Range;

use super::GpuCodec;
use crate::error::{Error, Result};

/// Which direction a batch goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    Compress,
    Decompress,
}

impl Direction {
    fn verb(self) -> &'static str {
        match self {
            Direction::Compress => "compression",
            Direction::Decompress => "decompression",
        }
    }
}

/// Checks one batch's ranges against the buffers' lengths and nvCOMP's limits: as many
/// outputs as inputs, every range ordered, non-empty and inside its buffer, chunk sizes
/// within the codec's documented maximum, and no two output ranges overlapping.
pub(crate) fn check_ranges(
    dir: Direction,
    codec: GpuCodec,
    src_len: usize,
    inputs: &[Range<usize>],
    dst_len: usize,
    outputs: &[Range<usize>],
) -> Result<()> {
    if inputs.len() != outputs.len() {
        return Err(Error::invalid(format!(
            "nvCOMP {codec} {}: {} input ranges but {} output ranges (one each per chunk)",
            dir.verb(),
            inputs.len(),
            outputs.len()
        )));
    }
    let (in_limit, in_what, out_limit, out_what) = match dir {
        Direction::Decompress => (
            codec.max_decompress_chunk_bytes(),
            "compressed",
            codec.max_decompress_chunk_bytes(),
            "decompressed",
        ),
        Direction::Compress => (
            codec.max_compress_chunk_bytes(),
            "uncompressed",
            usize::MAX,
            "compressed",
        ),
    };
    for (i, (r, o)) in inputs.iter().zip(outputs).enumerate() {
        check_one(dir, codec, i, "input", r, src_len, "source")?;
        check_one(dir, codec, i, "output", o, dst_len, "destination")?;
        if r.len() > in_limit {
            return Err(limit_error(dir, codec, i, in_what, r.len(), in_limit));
        }
        if o.len() > out_limit {
            return Err(limit_error(dir, codec, i, out_what, o.len(), out_limit));
        }
    }
    let outs: Vec<(u64, usize)> = outputs.iter().map(|o| (o.start as u64, o.len())).collect();
    check_overlaps(&[], &outs)
}

fn check_one(
    dir: Direction,
    codec: GpuCodec,
    i: usize,
    what: &str,
    r: &Range<usize>,
    buf_len: usize,
    buf: &str,
) -> Result<()> {
    if r.start > r.end {
        return Err(Error::invalid(format!(
            "nvCOMP {codec} {}: chunk {i}: {what} range {}..{} is reversed",
            dir.verb(),
            r.start,
            r.end
        )));
    }
    if r.end > buf_len {
        return Err(Error::invalid(format!(
            "nvCOMP {codec} {}: chunk {i}: {what} range {}..{} exceeds the {buf} buffer of {buf_len} bytes",
            dir.verb(),
            r.start,
            r.end
        )));
    }
    if r.is_empty() {
        return Err(Error::invalid(format!(
            "nvCOMP {codec} {}: chunk {i}: empty {what} range at {} (every chunk needs at least one byte in and out; leave empty chunks out of the batch)",
            dir.verb(),
            r.start
        )));
    }
    Ok(())
}

fn limit_error(
    dir: Direction,
    codec: GpuCodec,
    i: usize,
    what: &str,
    len: usize,
    limit: usize,
) -> Error {
    Error::invalid(format!(
        "nvCOMP {codec} {}: chunk {i}: {len} {what} bytes exceed nvCOMP's limit of {limit} bytes per chunk for {codec} {}",
        dir.verb(),
        dir.verb()
    ))
}

/// Checks that no output overlaps another output or an input (absolute device
/// addresses of one context; inputs may overlap each other). Sweeps the ranges in
/// address order: O(n log n).
pub(crate) fn check_overlaps(inputs: &[(u64, usize)], outputs: &[(u64, usize)]) -> Result<()> {
    // (start, end, is_output, chunk index)
    let mut all: Vec<(u64, u64, bool, usize)> = inputs
        .iter()
        .enumerate()
        .map(|(i, &(a, n))| (a, a + n as u64, false, i))
        .chain(
            outputs
                .iter()
                .enumerate()
                .map(|(i, &(a, n))| (a, a + n as u64, true, i)),
        )
        .filter(|r| r.1 > r.0)
        .collect();
    all.sort_unstable();
    // The furthest-reaching output and input seen so far: (end, chunk).
    let mut out_reach: Option<(u64, usize)> = None;
    let mut in_reach: Option<(u64, usize)> = None;
    for &(start, end, is_out, i) in &all {
        if let Some((_, j)) = out_reach.filter(|&(e, _)| start < e) {
            return Err(Error::invalid(if is_out {
                format!("nvCOMP batch: the output ranges of chunks {j} and {i} overlap")
            } else {
                format!(
                    "nvCOMP batch: the output range of chunk {j} overlaps the input of chunk {i}"
                )
            }));
        }
        if is_out && let Some((_, j)) = in_reach.filter(|&(e, _)| start < e) {
            return Err(Error::invalid(format!(
                "nvCOMP batch: the output range of chunk {i} overlaps the input of chunk {j}"
            )));
        }
        let reach = if is_out {
            &mut out_reach
        } else {
            &mut in_reach
        };
        if reach.is_none_or(|(e, _)| end > e) {
            *reach = Some((end, i));
        }
    }
    Ok(())
}

/// Rounds `n` up to a multiple of `a` (a power of two or any positive number).
pub(crate) fn round_up(n: usize, a: usize) -> usize {
    n.div_ceil(a.max(1)) * a.max(1)
}

/// Chunks whose address does not meet nvCOMP's alignment and so go through the
/// workspace's staging area: for each chunk its offset there (`None`: used in place),
/// and the bytes the area needs. Each staged chunk takes `size(i)` bytes at an offset
/// aligned to 256 bytes (more than any alignment nvCOMP asks for).
pub(crate) fn staging(
    addrs: &[u64],
    align: usize,
    size: impl Fn(usize) -> usize,
) -> (Vec<Option<usize>>, usize) {
    let mut total = 0usize;
    let offsets = addrs
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            if align <= 1 || a % align as u64 == 0 {
                None
            } else {
                let off = total;
                total = round_up(total + size(i), STAGE_ALIGN);
                Some(off)
            }
        })
        .collect();
    (offsets, total)
}

/// Every output in a slot of the scratch area: `size(i)` bytes at a 256-byte-aligned
/// offset. Returns the offsets and the bytes the slots need.
pub(crate) fn slots(n: usize, size: impl Fn(usize) -> usize) -> (Vec<Option<usize>>, usize) {
    let mut total = 0usize;
    let offsets = (0..n)
        .map(|i| {
            let off = total;
            total = round_up(total + size(i), STAGE_ALIGN);
            Some(off)
        })
        .collect();
    (offsets, total)
}

/// The room around a chunk of `len` decoded bytes in the scratch area: nvCOMP is told
/// it may write `len + slack` bytes (so a chunk that decodes to a little more than
/// expected is reported, not written past its end), and `slack` more bytes follow
/// before the next slot (a guard band for writes past the capacity nvCOMP was given).
pub(crate) fn slack(len: usize) -> usize {
    (len / 16).max(4096)
}

/// Alignment of everything placed in the workspace.
pub(crate) const STAGE_ALIGN: usize = 256;

/// Bytes of one entry of the segment-copy kernel's table (`dst`, `src`, `len`: u64).
pub(crate) const SEGMENT_BYTES: usize = 24;

/// Where the parts of a batch lie in the device workspace (byte offsets from its
/// start) and in the page-locked mirror of its tables.
///
/// Tables: input pointers, input sizes, output capacities, output pointers (`n`
/// entries of 8 bytes each), the copy-in and copy-out segment tables (`segs_in` and
/// `segs_out` entries of [`SEGMENT_BYTES`]), then the actual sizes (`n` x 8), statuses
/// (`n` x 4) and CRC-32s of the decoded bytes (`n` x 4, computed only when asked for). The
/// host mirror holds the same bytes: all are uploaded in one copy (actual sizes and
/// statuses preset to sentinels, so a chunk nvCOMP did not report is visible, CRC-32s to
/// zero, which the kernel adds to), and everything from the actual sizes on is downloaded
/// in one copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TableLayout {
    pub n: usize,
    pub segs_in: usize,
    pub segs_out: usize,
    pub temp: usize,
    pub staging: usize,
    pub device_bytes: usize,
}

impl TableLayout {
    pub(crate) fn new(
        n: usize,
        segs_in: usize,
        segs_out: usize,
        temp_bytes: usize,
        staging_bytes: usize,
    ) -> TableLayout {
        let mut l = TableLayout {
            n,
            segs_in,
            segs_out,
            temp: 0,
            staging: 0,
            device_bytes: 0,
        };
        l.temp = round_up(l.table_bytes(), STAGE_ALIGN);
        l.staging = round_up(l.temp + temp_bytes, STAGE_ALIGN);
        l.device_bytes = l.staging + staging_bytes;
        l
    }

    /// Bytes of all tables (and of the host mirror).
    pub(crate) fn table_bytes(&self) -> usize {
        48 * self.n + SEGMENT_BYTES * (self.segs_in + self.segs_out)
    }

    pub(crate) fn in_ptrs(&self) -> usize {
        0
    }
    pub(crate) fn in_bytes(&self) -> usize {
        8 * self.n
    }
    pub(crate) fn out_capacity(&self) -> usize {
        16 * self.n
    }
    pub(crate) fn out_ptrs(&self) -> usize {
        24 * self.n
    }
    pub(crate) fn seg_in(&self) -> usize {
        32 * self.n
    }
    pub(crate) fn seg_out(&self) -> usize {
        self.seg_in() + SEGMENT_BYTES * self.segs_in
    }
    /// Start of the downloaded part: actual sizes, then statuses.
    pub(crate) fn out_bytes(&self) -> usize {
        self.seg_out() + SEGMENT_BYTES * self.segs_out
    }
    pub(crate) fn statuses(&self) -> usize {
        self.out_bytes() + 8 * self.n
    }
    pub(crate) fn crcs(&self) -> usize {
        self.statuses() + 4 * self.n
    }
}

/// Checks a decompression batch's ranges on the host, as [`DecompressBatch::decompress`](super::DecompressBatch::decompress)
/// does before any device work: one output per input, each range ordered, non-empty and
/// inside its buffer (`src_len` / `dst_len` bytes), chunk sizes within
/// [`GpuCodec::max_decompress_chunk_bytes`](super::GpuCodec::max_decompress_chunk_bytes), no two outputs overlapping.
///
/// ```
/// use devbuf_core::__private::nvcomp::check_decompress_ranges;
/// use devbuf_core::cuda::nvcomp::GpuCodec;
/// assert!(check_decompress_ranges(GpuCodec::Zstd, 100, &[0..40, 40..100], 64, &[0..32, 32..64]).is_ok());
/// let e = check_decompress_ranges(GpuCodec::Zstd, 100, &[0..40], 64, &[40..70]).unwrap_err();
/// assert!(e.to_string().contains("chunk 0"));
/// ```
pub fn check_decompress_ranges(
    codec: GpuCodec,
    src_len: usize,
    inputs: &[Range<usize>],
    dst_len: usize,
    outputs: &[Range<usize>],
) -> Result<()> {
    check_ranges(
        Direction::Decompress,
        codec,
        src_len,
        inputs,
        dst_len,
        outputs,
    )
}

/// Checks a compression batch's ranges on the host, as [`CompressBatch::compress`](super::CompressBatch::compress) does
/// first (the output capacities are checked there, against the library's
/// [`Nvcomp::max_compressed_chunk_size`](super::Nvcomp::max_compressed_chunk_size)): inputs within
/// [`GpuCodec::max_compress_chunk_bytes`](super::GpuCodec::max_compress_chunk_bytes), otherwise as [`check_decompress_ranges`].
///
/// ```
/// use devbuf_core::__private::nvcomp::check_compress_ranges;
/// use devbuf_core::cuda::nvcomp::GpuCodec;
/// let e = check_compress_ranges(GpuCodec::Deflate, 1 << 20, &[0..(1 << 17)], 1 << 20, &[0..(1 << 18)]).unwrap_err();
/// assert!(e.to_string().contains("65536"));
/// ```
pub fn check_compress_ranges(
    codec: GpuCodec,
    src_len: usize,
    inputs: &[Range<usize>],
    dst_len: usize,
    outputs: &[Range<usize>],
) -> Result<()> {
    check_ranges(
        Direction::Compress,
        codec,
        src_len,
        inputs,
        dst_len,
        outputs,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_picks_the_misaligned() {
        let (offs, total) = staging(&[0, 3, 8, 13], 4, |i| [10, 20, 30, 300][i]);
        assert_eq!(offs, vec![None, Some(0), None, Some(256)]);
        assert_eq!(total, 256 + 512);
        let (offs, total) = staging(&[1, 3], 1, |_| 5);
        assert_eq!(offs, vec![None, None]);
        assert_eq!(total, 0);
    }

    #[test]
    fn layout_is_aligned_and_disjoint() {
        let l = TableLayout::new(3, 0, 0, 1000, 512);
        assert_eq!(l.crcs() + 4 * 3, l.table_bytes());
        assert_eq!(l.temp, 256);
        assert_eq!(l.staging, 1280);
        assert_eq!(l.device_bytes, 1280 + 512);
        let l = TableLayout::new(10, 2, 10, 0, 0);
        let parts = [
            (l.in_ptrs(), 80),
            (l.in_bytes(), 80),
            (l.out_capacity(), 80),
            (l.out_ptrs(), 80),
            (l.seg_in(), 48),
            (l.seg_out(), 240),
            (l.out_bytes(), 80),
            (l.statuses(), 40),
            (l.crcs(), 40),
        ];
        let mut at = 0;
        for (off, len) in parts {
            assert_eq!(off, at, "{parts:?}");
            assert_eq!(off % 8, 0);
            at += len;
        }
        assert_eq!(at, l.table_bytes());
        assert!(l.temp >= at && l.temp.is_multiple_of(STAGE_ALIGN));
    }

    #[test]
    fn slots_hold_every_output_aligned() {
        let (offs, total) = slots(3, |i| [10, 300, 1][i]);
        assert_eq!(offs, vec![Some(0), Some(256), Some(768)]);
        assert_eq!(total, 1024);
        assert_eq!(slack(1000), 4096);
        assert_eq!(slack(1 << 20), 1 << 16);
    }

    #[test]
    fn overlaps() {
        assert!(check_overlaps(&[(0, 10), (5, 10)], &[(20, 5), (25, 5)]).is_ok());
        let e = check_overlaps(&[], &[(20, 5), (24, 5)]).unwrap_err();
        assert!(e.to_string().contains("chunks 0 and 1 overlap"), "{e}");
        let e = check_overlaps(&[(0, 10)], &[(9, 5)]).unwrap_err();
        assert!(
            e.to_string()
                .contains("chunk 0 overlaps the input of chunk 0"),
            "{e}"
        );
        let e = check_overlaps(&[(12, 1)], &[(9, 5)]).unwrap_err();
        assert!(e.to_string().contains("overlaps the input"), "{e}");
        // A long earlier output still reaches a later input.
        let e = check_overlaps(&[(50, 1)], &[(0, 100), (200, 1)]).unwrap_err();
        assert!(e.to_string().contains("overlaps"), "{e}");
    }
}
