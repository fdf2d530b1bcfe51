//! Validation and normalisation of n-d strided copies, shared by the host and device
//! implementations of `strided_copy`.
//!
//! A copy is `shape` elements of `elem_size` bytes; element `i` (a multi-index) is read
//! at `src_offset + Σ i_k * src_strides[k]` and written at `dst_offset + Σ i_k *
//! dst_strides[k]` (bytes). Normalisation keeps that set of (source, destination) pairs
//! and makes it cheaper to walk:
//!
//! 1. axes of length 1 are dropped (they do not move the address);
//! 2. axes with a negative destination stride are flipped (both strides negated, both
//!    bases moved to the other end), so destinations ascend;
//! 3. axes are ordered by destination stride, largest first, so the innermost axis
//!    writes the densest;
//! 4. an element that is not 1, 2, 4, 8 or 16 bytes becomes an inner axis of smaller
//!    units (the largest power of two that divides it);
//! 5. neighbouring axes that are contiguous on both sides are merged.

use crate::error::{Error, Result};

/// Most axes a copy may have (the device kernels take shapes by value up to this).
pub const MAX_DIMS: usize = 32;

/// One axis of a normalised copy: its length and its byte strides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Axis {
    /// Length (elements of the plan's unit).
    pub n: u64,
    /// Source stride in bytes.
    pub s: i64,
    /// Destination stride in bytes.
    pub d: i64,
}

/// A validated, normalised copy.
#[derive(Debug, Clone)]
pub struct StridedCopyPlan {
    /// Byte offset in the source of element (0, ..., 0) of `axes`.
    pub src_base: u64,
    /// Byte offset in the destination of element (0, ..., 0) of `axes`.
    pub dst_base: u64,
    /// Bytes per element of `axes` (1, 2, 4, 8 or 16).
    pub unit: usize,
    /// Axes, outermost first; `ndim` of them are used. Room for the caller's
    /// [`MAX_DIMS`] axes, the axis of units within an element that is not a power of two
    /// up to 16 bytes, and the one more axis [`split_unit`](Self::split_unit) appends
    /// before merging it.
    pub axes: [Axis; MAX_DIMS + 2],
    /// How many of `axes` are used.
    pub ndim: usize,
    /// Source bytes touched: `src_lo..src_hi`.
    pub src_lo: u64,
    /// End of the source bytes touched.
    pub src_hi: u64,
    /// Destination bytes touched: `dst_lo..dst_hi`.
    pub dst_lo: u64,
    /// End of the destination bytes touched.
    pub dst_hi: u64,
}

impl StridedCopyPlan {
    /// The used axes.
    pub fn axes(&self) -> &[Axis] {
        &self.axes[..self.ndim]
    }

    /// Number of unit elements.
    pub fn count(&self) -> u64 {
        self.axes().iter().map(|a| a.n).product()
    }

    /// Whether the whole copy is one contiguous block on both sides.
    pub fn is_contiguous(&self) -> bool {
        match self.axes() {
            [] => true,
            [a] => a.s == self.unit as i64 && a.d == self.unit as i64,
            _ => false,
        }
    }

    /// Moves the source to another buffer in which byte `src_lo` now lies at `new_lo`.
    pub fn rebase_src(&mut self, new_lo: u64) {
        self.src_base = self.src_base - self.src_lo + new_lo;
        self.src_hi = self.src_hi - self.src_lo + new_lo;
        self.src_lo = new_lo;
    }

    /// Splits the unit into units of `unit` bytes (a smaller power of two), adding an
    /// innermost axis, and merges again.
    pub fn split_unit(&mut self, unit: usize) {
        if unit >= self.unit {
            return;
        }
        let k = (self.unit / unit) as u64;
        self.axes[self.ndim] = Axis {
            n: k,
            s: unit as i64,
            d: unit as i64,
        };
        self.ndim += 1;
        self.unit = unit;
        self.merge();
    }

    /// Merges neighbouring axes that are contiguous on both sides.
    fn merge(&mut self) {
        let mut out = 0usize;
        for i in 0..self.ndim {
            let a = self.axes[i];
            if out > 0 {
                let o = self.axes[out - 1];
                if o.s == a.s.wrapping_mul(a.n as i64) && o.d == a.d.wrapping_mul(a.n as i64) {
                    self.axes[out - 1] = Axis {
                        n: o.n * a.n,
                        s: a.s,
                        d: a.d,
                    };
                    continue;
                }
            }
            self.axes[out] = a;
            out += 1;
        }
        self.ndim = out;
    }
}

/// The bytes an operand of a strided copy touches, as `(lo, hi)` relative to the start
/// of its buffer, checked against `len`.
fn extent(
    what: &'static str,
    offset: usize,
    strides: &[isize],
    shape: &[usize],
    elem_size: usize,
    len: usize,
) -> Result<(u64, u64)> {
    let mut lo = offset as i128;
    let mut hi = offset as i128 + elem_size as i128;
    for (&s, &n) in strides.iter().zip(shape) {
        let span = s as i128 * (n as i128 - 1);
        if span < 0 {
            lo += span;
        } else {
            hi += span;
        }
    }
    if lo < 0 {
        return Err(Error::invalid(format!(
            "{what} reaches byte offset {lo}, before the start of its buffer (offset {offset}, strides {strides:?}, shape {shape:?}, element size {elem_size})"
        )));
    }
    if hi > len as i128 {
        return Err(Error::out_of_bounds(
            what,
            lo as usize,
            (hi - lo).min(usize::MAX as i128) as usize,
            len,
        ));
    }
    Ok((lo as u64, hi as u64))
}

/// Validates a strided copy and normalises it. `Ok(None)`: nothing to copy (an axis of
/// length 0).
#[allow(clippy::too_many_arguments)]
pub fn plan(
    src_len: usize,
    src_offset: usize,
    src_strides: &[isize],
    dst_len: usize,
    dst_offset: usize,
    dst_strides: &[isize],
    shape: &[usize],
    elem_size: usize,
) -> Result<Option<StridedCopyPlan>> {
    let ndim = shape.len();
    if src_strides.len() != ndim || dst_strides.len() != ndim {
        return Err(Error::invalid(format!(
            "strided_copy: shape has {ndim} axes but the source has {} strides and the destination {}",
            src_strides.len(),
            dst_strides.len()
        )));
    }
    if ndim > MAX_DIMS {
        return Err(Error::invalid(format!(
            "strided_copy: {ndim} axes; at most {MAX_DIMS} are supported"
        )));
    }
    if elem_size == 0 {
        return Err(Error::invalid("strided_copy: element size 0"));
    }
    let mut count: u64 = 1;
    for &n in shape {
        count = count.checked_mul(n as u64).ok_or_else(|| {
            Error::invalid(format!(
                "strided_copy: the shape {shape:?} has more than 2^64 elements"
            ))
        })?;
    }
    if count == 0 {
        return Ok(None);
    }
    if count.checked_mul(elem_size as u64).is_none() {
        return Err(Error::invalid(format!(
            "strided_copy: {count} elements of {elem_size} bytes overflow"
        )));
    }
    let (src_lo, src_hi) = extent(
        "strided_copy source",
        src_offset,
        src_strides,
        shape,
        elem_size,
        src_len,
    )?;
    let (dst_lo, dst_hi) = extent(
        "strided_copy destination",
        dst_offset,
        dst_strides,
        shape,
        elem_size,
        dst_len,
    )?;

    // Every address below lies within one buffer (checked above), so the i64
    // arithmetic on strides and bases cannot overflow.
    let mut src_base = src_offset as i64;
    let mut dst_base = dst_offset as i64;
    let mut axes = [Axis::default(); MAX_DIMS + 2];
    let mut n_axes = 0usize;
    for k in 0..ndim {
        let n = shape[k] as u64;
        if n == 1 {
            continue;
        }
        let (mut s, mut d) = (src_strides[k] as i64, dst_strides[k] as i64);
        if d < 0 {
            src_base += s * (n as i64 - 1);
            dst_base += d * (n as i64 - 1);
            s = -s;
            d = -d;
        }
        if d == 0 {
            return Err(Error::invalid(format!(
                "strided_copy: destination stride 0 on axis {k} of length {n} would write the same bytes {n} times"
            )));
        }
        axes[n_axes] = Axis { n, s, d };
        n_axes += 1;
    }
    // Largest destination stride first (stable: equal strides keep their order).
    axes[..n_axes].sort_by_key(|a| std::cmp::Reverse(a.d));

    let unit = if elem_size <= 16 && elem_size.is_power_of_two() {
        elem_size
    } else {
        1usize << elem_size.trailing_zeros().min(4)
    };
    if unit != elem_size {
        axes[n_axes] = Axis {
            n: (elem_size / unit) as u64,
            s: unit as i64,
            d: unit as i64,
        };
        n_axes += 1;
    }
    let mut plan = StridedCopyPlan {
        src_base: src_base as u64,
        dst_base: dst_base as u64,
        unit,
        axes,
        ndim: n_axes,
        src_lo,
        src_hi,
        dst_lo,
        dst_hi,
    };
    plan.merge();
    Ok(Some(plan))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(
        shape: &[usize],
        s: &[isize],
        d: &[isize],
        elem: usize,
        src_len: usize,
        dst_len: usize,
    ) -> Result<Option<StridedCopyPlan>> {
        plan(src_len, 0, s, dst_len, 0, d, shape, elem)
    }

    #[test]
    fn contiguous_merges_to_one_axis() {
        let pl = p(&[4, 5, 6], &[120, 24, 4], &[120, 24, 4], 4, 480, 480)
            .unwrap()
            .unwrap();
        assert_eq!(pl.axes(), &[Axis { n: 120, s: 4, d: 4 }]);
        assert!(pl.is_contiguous());
        assert_eq!((pl.src_lo, pl.src_hi), (0, 480));
    }

    #[test]
    fn zero_d_is_one_element() {
        let pl = p(&[], &[], &[], 8, 8, 8).unwrap().unwrap();
        assert_eq!(pl.ndim, 0);
        assert_eq!(pl.count(), 1);
        assert!(pl.is_contiguous());
    }

    #[test]
    fn zero_length_axis_is_nothing() {
        assert!(p(&[3, 0], &[1000, 4], &[0, 4], 4, 0, 0).unwrap().is_none());
    }

    #[test]
    fn transpose_orders_by_destination() {
        // dst[j, i] = src[i, j] for a 3x5 f32 matrix, written C-order 5x3.
        let pl = p(&[3, 5], &[20, 4], &[4, 12], 4, 60, 60).unwrap().unwrap();
        assert_eq!(
            pl.axes(),
            &[Axis { n: 5, s: 4, d: 12 }, Axis { n: 3, s: 20, d: 4 }]
        );
    }

    #[test]
    fn negative_destination_strides_flip() {
        let pl = plan(40, 0, &[4], 40, 36, &[-4], &[10], 4).unwrap().unwrap();
        assert_eq!(pl.src_base, 36);
        assert_eq!(pl.dst_base, 0);
        assert_eq!(pl.axes(), &[Axis { n: 10, s: -4, d: 4 }]);
        assert_eq!((pl.dst_lo, pl.dst_hi), (0, 40));
    }

    #[test]
    fn odd_element_sizes_become_bytes() {
        // 3-byte elements, every other one.
        let pl = p(&[4], &[6], &[3], 3, 24, 12).unwrap().unwrap();
        assert_eq!(pl.unit, 1);
        assert_eq!(
            pl.axes(),
            &[Axis { n: 4, s: 6, d: 3 }, Axis { n: 3, s: 1, d: 1 }]
        );
        // 12-byte elements are 4-byte units.
        let pl = p(&[2], &[12], &[12], 12, 24, 24).unwrap().unwrap();
        assert_eq!(pl.unit, 4);
        assert!(pl.is_contiguous());
    }

    #[test]
    fn bounds_are_checked() {
        let e = p(&[2, 3], &[12, 4], &[12, 4], 4, 23, 24).unwrap_err();
        assert!(matches!(e, Error::OutOfBounds { size: 23, .. }), "{e}");
        let e = plan(24, 0, &[-4], 24, 0, &[4], &[2], 4).unwrap_err();
        assert!(e.to_string().contains("before the start"), "{e}");
        let e = p(&[2], &[4], &[0], 4, 8, 8).unwrap_err();
        assert!(e.to_string().contains("stride 0"), "{e}");
        assert!(p(&[2], &[4, 4], &[4], 4, 8, 8).is_err());
        assert!(p(&[1; 33], &[0; 33], &[0; 33], 4, 8, 8).is_err());
        assert!(p(&[usize::MAX, 3], &[0, 0], &[1, 1], 1, 8, 8).is_err());
    }

    #[test]
    fn split_unit_merges_back() {
        let mut pl = p(&[4], &[8], &[8], 8, 32, 32).unwrap().unwrap();
        pl.split_unit(2);
        assert_eq!(pl.unit, 2);
        assert_eq!(pl.axes(), &[Axis { n: 16, s: 2, d: 2 }]);
    }

    #[test]
    fn split_unit_with_every_axis_in_use() {
        // 32 axes that do not merge, 12-byte elements (an axis of 3 four-byte units):
        // 33 axes. Splitting into bytes appends a 34th before merging it back (this
        // indexed past the axis array and panicked).
        let mut pl = plan(400, 0, &[0; 32], 400, 1, &[12; 32], &[2; 32], 12)
            .unwrap()
            .unwrap();
        assert_eq!((pl.ndim, pl.unit), (33, 4));
        pl.split_unit(1);
        assert_eq!((pl.ndim, pl.unit), (33, 1));
        assert_eq!(pl.axes()[32], Axis { n: 12, s: 1, d: 1 });
    }
}
