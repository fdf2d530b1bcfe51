//! The placement of decoded units on the device: the units of a staging slot or a GPU
//! claim lie chunk-contiguous in device memory, and each of their placements is a
//! strided copy into the output. Copies that repeat with a constant step on both
//! sides (the units of one row of a chunk grid, then the rows of a block of it: the
//! inner chunks of a shard, the chunks of a claim) are merged into one copy with one
//! more axis, twice over, so a claim of 256 inner chunks of a shard takes one launch
//! instead of 256 (each launch costs the queueing thread some microseconds, which
//! bounded GPU reads of sharded arrays).

use super::plan::{Placement, Unit};
use super::source::ZarrSource;
use devbuf_core::__private::ops::layout::{self, MAX_DIMS};
use devbuf_core::__private::ops::strided_copy;
use devbuf_core::cuda::{DeviceBuffer, Stream};
use devbuf_core::error::Result;

/// One strided copy from decoded units into the output (byte offsets and strides).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Copy {
    pub src_offset: usize,
    pub src_strides: Vec<isize>,
    pub dst_offset: usize,
    pub dst_strides: Vec<isize>,
    pub shape: Vec<usize>,
}

impl Copy {
    /// Whether `next` is this copy moved by `(ds, dd)` bytes (same box, same strides).
    fn same_box(&self, next: &Copy) -> bool {
        self.shape == next.shape
            && self.src_strides == next.src_strides
            && self.dst_strides == next.dst_strides
    }
}

/// Byte offset of element `start` in a decoded unit.
pub(crate) fn src_offset(src: &ZarrSource<'_>, start: &[u64]) -> usize {
    start
        .iter()
        .zip(&src.cell_strides)
        .map(|(&i, &s)| i as isize * s)
        .sum::<isize>() as usize
}

/// The copy of placement `p` from a decoded unit (`src.cell_bytes`, laid out as `src`
/// says) into an output of `out_len` bytes, checked (`None`: nothing to copy).
pub(crate) fn unit_plan(
    src: &ZarrSource<'_>,
    p: &Placement,
    out_len: usize,
) -> Result<Option<layout::StridedCopyPlan>> {
    let shape: Vec<usize> = p.shape.iter().map(|&n| n as usize).collect();
    layout::plan(
        src.cell_bytes,
        src_offset(src, &p.start),
        &src.cell_strides,
        out_len,
        p.dst_offset,
        &p.dst_strides,
        &shape,
        src.elem,
    )
}

/// The copies that place `units`, decoded at multiples of `stride` bytes, into the
/// output: one per placement, then merged (see the module's doc).
pub(crate) fn unit_copies(src: &ZarrSource<'_>, units: &[Unit], stride: usize) -> Vec<Copy> {
    let mut copies = Vec::new();
    for (j, u) in units.iter().enumerate() {
        for p in &u.placements {
            copies.push(Copy {
                src_offset: j * stride + src_offset(src, &p.start),
                src_strides: src.cell_strides.clone(),
                dst_offset: p.dst_offset,
                dst_strides: p.dst_strides.clone(),
                shape: p.shape.iter().map(|&n| n as usize).collect(),
            });
        }
    }
    merge(merge(copies))
}

/// Merges runs of consecutive copies of the same box at a constant step on both sides
/// into one copy with a new outermost axis. Copies with more than `MAX_DIMS - 1` axes,
/// or a step of zero or one that does not fit an `isize`, are left alone.
pub(crate) fn merge(copies: Vec<Copy>) -> Vec<Copy> {
    let mut out: Vec<Copy> = Vec::with_capacity(copies.len());
    // The run being built: its first copy, the step, how many copies, the last copy.
    let mut run: Option<(Copy, (isize, isize), usize, Copy)> = None;
    let close = |run: Option<(Copy, (isize, isize), usize, Copy)>, out: &mut Vec<Copy>| {
        if let Some((first, (ds, dd), n, _)) = run {
            if n == 1 {
                out.push(first);
            } else {
                let mut c = first;
                c.shape.insert(0, n);
                c.src_strides.insert(0, ds);
                c.dst_strides.insert(0, dd);
                out.push(c);
            }
        }
    };
    let step = |a: &Copy, b: &Copy| -> Option<(isize, isize)> {
        let ds = isize::try_from(b.src_offset as i128 - a.src_offset as i128).ok()?;
        let dd = isize::try_from(b.dst_offset as i128 - a.dst_offset as i128).ok()?;
        (dd != 0).then_some((ds, dd))
    };
    for c in copies {
        run = match run {
            Some((first, st, n, last))
                if first.shape.len() < MAX_DIMS
                    && first.same_box(&c)
                    && step(&last, &c).is_some_and(|s| n == 1 || s == st) =>
            {
                let st = step(&last, &c).unwrap_or(st);
                Some((first, st, n + 1, c))
            }
            other => {
                close(other, &mut out);
                Some((c.clone(), (0, 0), 1, c))
            }
        };
    }
    close(run, &mut out);
    out
}

/// Queues the placements of `units`, decoded at multiples of `stride` in `scratch`,
/// into `out` on `stream` (merged copies, see the module's doc).
pub(crate) fn place_units(
    src: &ZarrSource<'_>,
    units: &[Unit],
    stride: usize,
    stream: &Stream,
    scratch: &DeviceBuffer,
    out: &DeviceBuffer,
) -> Result<()> {
    for c in unit_copies(src, units, stride) {
        strided_copy(
            scratch,
            c.src_offset,
            &c.src_strides,
            out,
            c.dst_offset,
            &c.dst_strides,
            &c.shape,
            src.elem,
            Some(stream),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(src_offset: usize, dst_offset: usize, shape: &[usize]) -> Copy {
        Copy {
            src_offset,
            src_strides: vec![16, 4],
            dst_offset,
            dst_strides: vec![64, 4],
            shape: shape.to_vec(),
        }
    }

    /// Every (source, destination) byte pair a list of copies moves (4-byte elements).
    fn pairs(copies: &[Copy]) -> Vec<(isize, isize)> {
        let mut v = Vec::new();
        for c in copies {
            let n: usize = c.shape.iter().product();
            for flat in 0..n {
                let (mut rest, mut s, mut d) = (flat, c.src_offset as isize, c.dst_offset as isize);
                for k in (0..c.shape.len()).rev() {
                    let i = (rest % c.shape[k]) as isize;
                    rest /= c.shape[k];
                    s += i * c.src_strides[k];
                    d += i * c.dst_strides[k];
                }
                v.push((s, d));
            }
        }
        v.sort_unstable();
        v
    }

    #[test]
    fn a_grid_of_units_becomes_one_copy_moving_the_same_bytes() {
        // 2 x 3 units of 4 x 4 elements, each 64 bytes apart in the slot, placed into a
        // 8 x 12 output (row pitch 48 bytes).
        let mut copies = Vec::new();
        for r in 0..2 {
            for c in 0..3 {
                copies.push(Copy {
                    src_offset: (r * 3 + c) * 64,
                    src_strides: vec![16, 4],
                    dst_offset: r * 4 * 48 + c * 16,
                    dst_strides: vec![48, 4],
                    shape: vec![4, 4],
                });
            }
        }
        let merged = merge(merge(copies.clone()));
        assert_eq!(merged.len(), 1, "{merged:?}");
        assert_eq!(merged[0].shape, vec![2, 3, 4, 4]);
        assert_eq!(pairs(&merged), pairs(&copies));
    }

    #[test]
    fn different_boxes_and_irregular_steps_stay_apart() {
        // An edge unit of another shape ends the run; an irregular step starts a new one.
        let copies = vec![
            copy(0, 0, &[4, 4]),
            copy(64, 16, &[4, 4]),
            copy(128, 32, &[4, 2]),
            copy(192, 48, &[4, 4]),
            copy(256, 100, &[4, 4]),
            copy(320, 104, &[4, 4]),
        ];
        let merged = merge(copies.clone());
        assert_eq!(
            merged.iter().map(|c| c.shape.clone()).collect::<Vec<_>>(),
            vec![vec![2, 4, 4], vec![4, 2], vec![2, 4, 4], vec![4, 4]]
        );
        assert_eq!(pairs(&merged), pairs(&copies));
        // One copy stays as it is; nothing in, nothing out.
        assert_eq!(merge(vec![copy(8, 8, &[1, 3])]), vec![copy(8, 8, &[1, 3])]);
        assert!(merge(Vec::new()).is_empty());
    }

    #[test]
    fn copies_at_the_axis_limit_or_a_zero_step_are_not_merged() {
        let deep = Copy {
            src_offset: 0,
            src_strides: vec![4; MAX_DIMS],
            dst_offset: 0,
            dst_strides: vec![4; MAX_DIMS],
            shape: vec![1; MAX_DIMS],
        };
        let mut next = deep.clone();
        next.src_offset = 4;
        next.dst_offset = 4;
        assert_eq!(merge(vec![deep.clone(), next.clone()]).len(), 2);
        // The same destination twice: never one copy (it would write those bytes twice).
        assert_eq!(
            merge(vec![copy(0, 0, &[4, 4]), copy(64, 0, &[4, 4])]).len(),
            2
        );
    }
}
