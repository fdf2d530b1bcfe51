//! Selections: per-axis integers, ranges with positive steps, full axes.

use std::ops::{Range, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive};

use crate::error::{Error, Result};

/// A Python/numpy slice `start:stop:step`: `None` means the default, negative `start`
/// and `stop` count from the end, and out-of-range bounds are clipped to the axis as
/// numpy does. The step must be positive.
///
/// ```
/// use devbuf_core::zarr::Slice;
/// let every_other = Slice::new(None, None, 2);      // ::2
/// let inner = Slice::new(Some(1), Some(-1), 1);      // 1:-1
/// assert_eq!(inner.indices(5)?, (1, 3, 1));          // start, count, step
/// assert_eq!(every_other.indices(5)?, (0, 3, 2));
/// assert_eq!(Slice::new(Some(3), Some(100), 1).indices(5)?, (3, 2, 1));
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Slice {
    /// First index (default 0).
    pub start: Option<isize>,
    /// One past the last index (default: the axis length).
    pub stop: Option<isize>,
    /// Distance between selected indices (positive; default 1).
    pub step: isize,
}

impl Slice {
    /// `start:stop:step`: `Slice::new(Some(1), Some(-1), 1)` is `1:-1`,
    /// `Slice::new(None, None, 2)` is `::2`.
    pub fn new(start: Option<isize>, stop: Option<isize>, step: isize) -> Slice {
        Slice { start, stop, step }
    }

    /// `(start, count, step)` of this slice on an axis of `len`, as numpy computes it.
    /// Errors for a step that is not positive.
    pub fn indices(&self, len: usize) -> Result<(usize, usize, usize)> {
        if self.step <= 0 {
            return Err(Error::invalid(format!(
                "slice step must be positive, got {} (negative and zero steps are not supported)",
                self.step
            )));
        }
        let n = len as i128;
        let clip = |v: Option<isize>, default: i128| -> i128 {
            match v {
                None => default,
                Some(v) => {
                    let v = v as i128;
                    let v = if v < 0 { v + n } else { v };
                    v.clamp(0, n)
                }
            }
        };
        let start = clip(self.start, 0);
        let stop = clip(self.stop, n);
        let step = self.step as i128;
        let count = if stop > start {
            (stop - start + step - 1) / step
        } else {
            0
        };
        Ok((start as usize, count as usize, self.step as usize))
    }
}

/// The selection on one axis.
///
/// Rust ranges convert into it and are strict (like Rust slicing, a range past the end
/// is an error); [`Slice`] has numpy's clipping semantics. Integers select one index
/// and drop the axis; negative integers count from the end; out of range is an error.
///
/// ```
/// use devbuf_core::zarr::{AxisSel, Slice};
/// let sel: [AxisSel; 4] = [2.into(), (1..4).into(), (..).into(), Slice::new(None, None, 2).into()];
/// assert_eq!(sel[0], AxisSel::Index(2));
/// assert_eq!(sel[1], AxisSel::Range { start: 1, end: 4, step: 1 });
/// let every_third = AxisSel::Range { start: 0, end: 10, step: 3 }; // 0..10, step 3
/// # let _ = every_third;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AxisSel {
    /// One index (negative counts from the end); the axis is dropped.
    Index(isize),
    /// `start..end` every `step` (positive); `end` may not exceed the axis length, and
    /// `end == usize::MAX` means the axis length (`start..`).
    Range {
        /// First index.
        start: usize,
        /// One past the last index.
        end: usize,
        /// Distance between selected indices.
        step: usize,
    },
    /// A numpy slice (clipping, negative bounds from the end).
    Slice(Slice),
    /// The whole axis (`:`).
    Full,
}

impl AxisSel {
    /// `range` every `step`.
    pub(crate) fn range_step(range: Range<usize>, step: usize) -> AxisSel {
        AxisSel::Range {
            start: range.start,
            end: range.end,
            step,
        }
    }

    /// Resolves on an axis of length `len` (axis number `axis` for messages).
    pub(crate) fn resolve(&self, axis: usize, len: usize) -> Result<Resolved> {
        match *self {
            AxisSel::Index(i) => {
                let j = if i < 0 {
                    i as i128 + len as i128
                } else {
                    i as i128
                };
                if j < 0 || j >= len as i128 {
                    return Err(Error::invalid(format!(
                        "index {i} is out of bounds for axis {axis} with size {len} (valid: {} to {})",
                        -(len as i128),
                        len as i128 - 1
                    )));
                }
                Ok(Resolved::Index(j as usize))
            }
            AxisSel::Range { start, end, step } => {
                let end = if end == usize::MAX { len } else { end };
                if step == 0 {
                    return Err(Error::invalid(format!(
                        "range step on axis {axis} must be positive, got 0"
                    )));
                }
                if start > end || end > len {
                    return Err(Error::invalid(format!(
                        "range {start}..{end} is out of bounds for axis {axis} with size {len} \
                         (valid: start <= end <= {len})"
                    )));
                }
                Ok(Resolved::Range {
                    start,
                    count: (end - start).div_ceil(step),
                    step,
                })
            }
            AxisSel::Slice(s) => {
                let (start, count, step) = s
                    .indices(len)
                    .map_err(|e| e.context(format_args!("axis {axis}")))?;
                Ok(Resolved::Range { start, count, step })
            }
            AxisSel::Full => Ok(Resolved::Range {
                start: 0,
                count: len,
                step: 1,
            }),
        }
    }
}

/// One axis of a resolved selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// One index: the axis is dropped from the result (numpy's integer indexing).
    Index(usize),
    /// `count` indices `start, start + step, ...` (a slice with a positive step).
    Range {
        /// The first index.
        start: usize,
        /// How many indices.
        count: usize,
        /// The distance between neighbouring indices (at least 1).
        step: usize,
    },
}

/// Resolves a selection on `shape`: fewer selectors than axes select the remaining
/// axes whole (numpy); more is an error.
pub fn resolve(sel: &[AxisSel], shape: &[usize]) -> Result<Vec<Resolved>> {
    if sel.len() > shape.len() {
        return Err(Error::invalid(format!(
            "too many indices: {} given for an array of {} dimension(s) with shape {shape:?}",
            sel.len(),
            shape.len()
        )));
    }
    shape
        .iter()
        .enumerate()
        .map(|(axis, &len)| sel.get(axis).unwrap_or(&AxisSel::Full).resolve(axis, len))
        .collect()
}

/// The bounding box of a selection: the box to read, and the selection relative to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundingBox {
    /// Per axis, the indices the box spans: `i..i + 1` for an integer, from the first
    /// to the last selected index of a range (empty for an empty range).
    pub ranges: Vec<Range<u64>>,
    /// The selection as a view of the box ([`NDBuffer::get`](super::NDBuffer::get) on
    /// the box gives the selection's result): `None` when the box is the result itself
    /// (no integer axis and every step 1).
    pub view: Option<Vec<AxisSel>>,
}

/// Resolves a selection on `shape` (as [`resolve`] does, with its errors) to its
/// bounding box: what a reader fetches, then views as the selection (integer axes
/// dropped, steps as a strided view). The zarr engine's `ZarrArray::read` and the
/// Flight client's `Client::read` both read selections this way.
///
/// ```
/// use devbuf_core::__private::index::{BoundingBox, bounding_box};
/// use devbuf_core::zarr::{AxisSel, Slice};
/// // Rows 0, 3, 6, 9 of the last column of a 10 x 7 array.
/// let b = bounding_box(&[Slice::new(None, None, 3).into(), AxisSel::Index(-1)], &[10, 7])?;
/// assert_eq!(b.ranges, vec![0..10, 6..7]);
/// assert_eq!(
///     b.view,
///     Some(vec![AxisSel::Range { start: 0, end: 10, step: 3 }, AxisSel::Index(0)])
/// );
/// // A box selection is its own bounding box; the axes not given are whole.
/// let b = bounding_box(&[(2..7).into()], &[10, 7])?;
/// assert_eq!(b, BoundingBox { ranges: vec![2..7, 0..7], view: None });
/// assert!(bounding_box(&[AxisSel::Index(10)], &[10, 7]).is_err());
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub fn bounding_box(sel: &[AxisSel], shape: &[usize]) -> Result<BoundingBox> {
    let resolved = resolve(sel, shape)?;
    let mut ranges = Vec::with_capacity(resolved.len());
    let mut rel = Vec::with_capacity(resolved.len());
    let mut view = false;
    for r in resolved {
        match r {
            Resolved::Index(i) => {
                ranges.push(i as u64..i as u64 + 1);
                rel.push(AxisSel::Index(0));
                view = true;
            }
            Resolved::Range { start, count, step } => {
                let span = if count == 0 {
                    0
                } else {
                    (count - 1) * step + 1
                };
                ranges.push(start as u64..(start + span) as u64);
                rel.push(AxisSel::Range {
                    start: 0,
                    end: span,
                    step,
                });
                view |= step != 1;
            }
        }
    }
    Ok(BoundingBox {
        ranges,
        view: view.then_some(rel),
    })
}

macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for AxisSel {
            fn from(i: $t) -> AxisSel {
                AxisSel::Index(i as isize)
            }
        }
    )*};
}
from_int!(i32, i64, isize);

impl From<usize> for AxisSel {
    fn from(i: usize) -> AxisSel {
        AxisSel::Index(isize::try_from(i).unwrap_or(isize::MAX))
    }
}

impl From<u32> for AxisSel {
    fn from(i: u32) -> AxisSel {
        AxisSel::Index(i as isize)
    }
}

impl From<Range<usize>> for AxisSel {
    fn from(r: Range<usize>) -> AxisSel {
        AxisSel::range_step(r, 1)
    }
}

/// The exclusive end of `..=b`. `usize::MAX` means "the axis length" in
/// [`AxisSel::Range`], so an end that would be `usize::MAX` (or overflow) becomes
/// `usize::MAX - 1`: still past the end of every axis, and an error as it should be.
fn inclusive_end(b: usize) -> usize {
    b.saturating_add(1).min(usize::MAX - 1)
}

impl From<RangeInclusive<usize>> for AxisSel {
    fn from(r: RangeInclusive<usize>) -> AxisSel {
        let (a, b) = r.into_inner();
        AxisSel::range_step(a..inclusive_end(b), 1)
    }
}

impl From<RangeFrom<usize>> for AxisSel {
    fn from(r: RangeFrom<usize>) -> AxisSel {
        AxisSel::range_step(r.start..usize::MAX, 1)
    }
}

impl From<RangeTo<usize>> for AxisSel {
    fn from(r: RangeTo<usize>) -> AxisSel {
        AxisSel::range_step(0..r.end, 1)
    }
}

impl From<RangeToInclusive<usize>> for AxisSel {
    fn from(r: RangeToInclusive<usize>) -> AxisSel {
        AxisSel::range_step(0..inclusive_end(r.end), 1)
    }
}

impl From<RangeFull> for AxisSel {
    fn from(_: RangeFull) -> AxisSel {
        AxisSel::Full
    }
}

impl From<Slice> for AxisSel {
    fn from(s: Slice) -> AxisSel {
        AxisSel::Slice(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numpy_slice_semantics() {
        let idx = |s: Slice, n| s.indices(n).unwrap();
        assert_eq!(idx(Slice::new(None, None, 1), 0), (0, 0, 1));
        assert_eq!(idx(Slice::new(Some(-2), None, 1), 5), (3, 2, 1));
        assert_eq!(idx(Slice::new(Some(-100), Some(2), 1), 5), (0, 2, 1));
        assert_eq!(idx(Slice::new(Some(4), Some(2), 1), 5), (4, 0, 1));
        assert_eq!(idx(Slice::new(Some(1), None, 3), 8), (1, 3, 3));
        assert!(Slice::new(None, None, 0).indices(3).is_err());
        assert!(Slice::new(None, None, -1).indices(3).is_err());
    }

    #[test]
    fn strict_ranges_and_indices() {
        assert_eq!(
            AxisSel::Index(-1).resolve(0, 4).unwrap(),
            Resolved::Index(3)
        );
        let e = AxisSel::Index(4).resolve(1, 4).unwrap_err().to_string();
        assert!(
            e.contains("index 4 is out of bounds for axis 1 with size 4"),
            "{e}"
        );
        assert!(AxisSel::Index(-5).resolve(0, 4).is_err());
        assert!(AxisSel::from(2..5).resolve(0, 4).is_err());
        assert!(
            AxisSel::Range {
                start: 3,
                end: 2,
                step: 1
            }
            .resolve(0, 4)
            .is_err()
        );
        assert_eq!(
            AxisSel::from(4..4).resolve(0, 4).unwrap(),
            Resolved::Range {
                start: 4,
                count: 0,
                step: 1
            }
        );
        assert_eq!(
            AxisSel::range_step(1..6, 2).resolve(0, 6).unwrap(),
            Resolved::Range {
                start: 1,
                count: 3,
                step: 2
            }
        );
        assert!(resolve(&[AxisSel::Full; 3], &[1, 2]).is_err());
        assert!(AxisSel::from(5..).resolve(0, 4).is_err());
        assert_eq!(
            AxisSel::from(1..).resolve(0, 4).unwrap(),
            Resolved::Range {
                start: 1,
                count: 3,
                step: 1
            }
        );
        assert_eq!(resolve(&[], &[2]).unwrap().len(), 1);
    }

    #[test]
    fn bounding_boxes() {
        // A stepped range ends at its last selected index, not at the range's end.
        let b = bounding_box(&[AxisSel::range_step(1..8, 3)], &[10]).unwrap();
        assert_eq!(b.ranges, vec![1..8]);
        assert_eq!(
            b.view,
            Some(vec![AxisSel::Range {
                start: 0,
                end: 7,
                step: 3
            }])
        );
        // An empty range is an empty box at its start, and no view.
        let b = bounding_box(&[(4..4).into(), AxisSel::Full], &[4, 3]).unwrap();
        assert_eq!(b.ranges, vec![4..4, 0..3]);
        assert_eq!(b.view, None);
        // An empty stepped slice: an empty box, a view with step 2.
        let b = bounding_box(&[Slice::new(Some(5), Some(1), 2).into()], &[6]).unwrap();
        assert_eq!(b.ranges, vec![5..5]);
        assert!(b.view.is_some());
        // resolve's errors, unchanged.
        let e = bounding_box(&[AxisSel::Full; 3], &[1, 2])
            .unwrap_err()
            .to_string();
        assert!(e.contains("too many indices"), "{e}");
        let e = bounding_box(&[AxisSel::Index(2)], &[2])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("index 2 is out of bounds for axis 0 with size 2"),
            "{e}"
        );
    }
}
