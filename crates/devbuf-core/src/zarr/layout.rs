//! Shapes, byte strides and offsets: how an n-d view sits in its memory.

use crate::error::{Error, Result};

/// Memory order of a new array: row-major (`C`) or column-major (`F`).
///
/// ```
/// use devbuf_core::zarr::Order;
/// assert_eq!("F".parse::<Order>()?, Order::F);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Order {
    /// Row-major: the last axis varies fastest.
    #[default]
    C,
    /// Column-major: the first axis varies fastest.
    F,
}

impl std::str::FromStr for Order {
    type Err = Error;
    fn from_str(s: &str) -> Result<Order> {
        match s {
            "C" | "c" => Ok(Order::C),
            "F" | "f" => Ok(Order::F),
            _ => Err(Error::invalid(format!(
                "unknown order {s:?}: expected \"C\" or \"F\""
            ))),
        }
    }
}

impl std::fmt::Display for Order {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Order::C => "C",
            Order::F => "F",
        })
    }
}

/// An n-d view: shape, non-negative byte strides, byte offset of element `[0, .., 0]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StridedLayout {
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
    pub offset: usize,
}

/// Number of elements of `shape` and their size in bytes, or an error when the bytes
/// exceed `isize::MAX` (the most any allocation, slice or `ndarray` view can hold).
pub(crate) fn checked_size(shape: &[usize], elem: usize) -> Result<(usize, usize)> {
    let mut n: usize = 1;
    for &d in shape {
        n = n.checked_mul(d).ok_or_else(|| {
            Error::invalid(format!(
                "shape {shape:?} has more elements than fit in memory"
            ))
        })?;
    }
    let bytes = n
        .checked_mul(elem)
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| {
            Error::invalid(format!(
                "shape {shape:?} of {elem}-byte elements needs more bytes than fit in memory \
                 (at most {} bytes)",
                isize::MAX
            ))
        })?;
    Ok((n, bytes))
}

impl StridedLayout {
    /// A contiguous layout of `shape` in `order`, starting at byte 0.
    pub fn contiguous(shape: &[usize], elem: usize, order: Order) -> StridedLayout {
        let axes: Vec<usize> = match order {
            Order::C => (0..shape.len()).collect(),
            Order::F => (0..shape.len()).rev().collect(),
        };
        StridedLayout::compact(shape, elem, &axes)
    }

    /// A contiguous layout whose axes, from outermost to innermost, are `perm`.
    pub fn compact(shape: &[usize], elem: usize, perm: &[usize]) -> StridedLayout {
        let mut strides = vec![0usize; shape.len()];
        let mut s = elem;
        for &ax in perm.iter().rev() {
            strides[ax] = s;
            s = s.saturating_mul(shape[ax]);
        }
        StridedLayout {
            shape: shape.to_vec(),
            strides,
            offset: 0,
        }
    }

    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    pub fn size(&self) -> usize {
        self.shape.iter().product()
    }

    /// numpy's `C_CONTIGUOUS` (axes of length 1 do not count; empty arrays are).
    pub fn is_c_contiguous(&self, elem: usize) -> bool {
        self.is_contiguous_along((0..self.ndim()).rev(), elem)
    }

    /// numpy's `F_CONTIGUOUS`.
    pub fn is_f_contiguous(&self, elem: usize) -> bool {
        self.is_contiguous_along(0..self.ndim(), elem)
    }

    fn is_contiguous_along(&self, inner_first: impl Iterator<Item = usize>, elem: usize) -> bool {
        if self.size() == 0 {
            return true;
        }
        let mut expect = elem;
        for ax in inner_first {
            let n = self.shape[ax];
            if n != 1 {
                if self.strides[ax] != expect {
                    return false;
                }
                expect *= n;
            }
        }
        true
    }

    /// Axes from outermost to innermost by decreasing stride (numpy's order `K`); ties
    /// keep the axis order.
    pub fn k_perm(&self) -> Vec<usize> {
        let mut perm: Vec<usize> = (0..self.ndim()).collect();
        perm.sort_by(|&a, &b| self.strides[b].cmp(&self.strides[a]));
        perm
    }

    /// When the elements exactly fill `size * elem` contiguous bytes in some axis order
    /// (C, F, or a transposition of either), their first byte; element-wise operations
    /// may then run over those bytes as one flat range, producing a result laid out as
    /// [`StridedLayout::compact`] of [`k_perm`](Self::k_perm).
    pub fn dense_start(&self, elem: usize) -> Option<usize> {
        if self.size() == 0 {
            return Some(self.offset);
        }
        let mut axes: Vec<usize> = (0..self.ndim()).filter(|&a| self.shape[a] != 1).collect();
        axes.sort_by_key(|&a| self.strides[a]);
        let mut expect = elem;
        for a in axes {
            if self.strides[a] != expect {
                return None;
            }
            expect *= self.shape[a];
        }
        Some(self.offset)
    }

    /// The compact layout with this layout's axis order (numpy's `K`), for elements of
    /// `elem` bytes, at offset 0.
    pub fn k_compact(&self, elem: usize) -> StridedLayout {
        StridedLayout::compact(&self.shape, elem, &self.k_perm())
    }

    /// Byte strides as `isize` (what the copy kernels take). The stride of an axis of
    /// length 1, and every stride of an empty view, is never stepped along and may be
    /// anything (even beyond `isize`, as [`NDBuffer::from_parts`](super::NDBuffer::from_parts)
    /// accepts): those are given as 0.
    pub fn istrides(&self) -> Vec<isize> {
        let empty = self.size() == 0;
        self.shape
            .iter()
            .zip(&self.strides)
            .map(|(&n, &s)| if empty || n <= 1 { 0 } else { s as isize })
            .collect()
    }

    /// Checks that the view fits in `len` bytes of memory.
    pub fn check_fits(&self, len: usize, elem: usize) -> Result<()> {
        if self.shape.len() != self.strides.len() {
            return Err(Error::invalid(format!(
                "{} strides given for {} dimensions",
                self.strides.len(),
                self.shape.len()
            )));
        }
        if self.size() == 0 {
            return Ok(());
        }
        let mut end = self.offset as u128 + elem as u128;
        for (&n, &s) in self.shape.iter().zip(&self.strides) {
            end += (n as u128 - 1) * s as u128;
        }
        if end > len as u128 {
            return Err(Error::invalid(format!(
                "a view with offset {}, byte strides {:?} and shape {:?} of {elem}-byte \
                 elements ends at byte {end}, past the memory of {len} bytes",
                self.offset, self.strides, self.shape
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguity_flags_follow_numpy() {
        let c = StridedLayout::contiguous(&[2, 3, 4], 4, Order::C);
        assert_eq!(c.strides, vec![48, 16, 4]);
        assert!(c.is_c_contiguous(4) && !c.is_f_contiguous(4));
        let f = StridedLayout::contiguous(&[2, 3, 4], 4, Order::F);
        assert_eq!(f.strides, vec![4, 8, 24]);
        assert!(f.is_f_contiguous(4) && !f.is_c_contiguous(4));
        let one = StridedLayout::contiguous(&[1, 2], 8, Order::F);
        assert!(one.is_c_contiguous(8) && one.is_f_contiguous(8));
        let empty = StridedLayout::contiguous(&[0, 3], 8, Order::C);
        assert!(empty.is_c_contiguous(8) && empty.is_f_contiguous(8));
        assert_eq!(f.k_perm(), vec![2, 1, 0]);
        assert_eq!(f.k_compact(8).strides, vec![8, 16, 48]);
        assert_eq!(f.dense_start(4), Some(0));
        let sliced = StridedLayout {
            shape: vec![2, 2],
            strides: vec![16, 4],
            offset: 4,
        };
        assert_eq!(sliced.dense_start(4), None);
        assert!(sliced.check_fits(28, 4).is_ok());
        assert!(sliced.check_fits(27, 4).is_err());
    }
}
