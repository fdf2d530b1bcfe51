//! Layouts: which axis order, if any, makes a view dense, and the one copy (gather,
//! byte swap, alignment, bit packing) when none does.

use super::*;
use crate::memory::pack_bits;

pub(super) fn contiguous_along(
    shape: &[usize],
    strides: &[usize],
    es: usize,
    inner_first: impl Iterator<Item = usize>,
) -> bool {
    let mut expect = es;
    for a in inner_first {
        if shape[a] != 1 {
            if strides[a] != expect {
                return false;
            }
            expect = expect.saturating_mul(shape[a]);
        }
    }
    true
}

/// The axis order (outermost first) in which the view's elements are exactly C-ordered
/// contiguous memory, if there is one: the identity for C-contiguous views, the reverse
/// for F-contiguous ones, else the axes by decreasing stride (axes of length 1 first).
pub(super) fn dense_order(shape: &[usize], strides: &[usize], es: usize) -> Option<Vec<usize>> {
    let nd = shape.len();
    let identity: Vec<usize> = (0..nd).collect();
    if shape.contains(&0) || contiguous_along(shape, strides, es, (0..nd).rev()) {
        return Some(identity);
    }
    if contiguous_along(shape, strides, es, 0..nd) {
        return Some((0..nd).rev().collect());
    }
    let mut order: Vec<usize> = (0..nd).filter(|&a| shape[a] == 1).collect();
    let mut rest: Vec<usize> = (0..nd).filter(|&a| shape[a] != 1).collect();
    rest.sort_by_key(|&a| std::cmp::Reverse(strides[a]));
    order.extend(rest);
    contiguous_along(shape, strides, es, order.iter().rev().copied()).then_some(order)
}

/// How an NDBuffer becomes Arrow storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Form {
    /// All elements, C order.
    Flat,
    /// The whole array as one tensor.
    Tensor,
    /// Axis 0 as rows, the other axes as tensors.
    Rows,
}

/// An NDBuffer made ready for Arrow: its values, dense, native, aligned, in the memory
/// where it lives (bit-packed for booleans).
pub(crate) struct Prepared {
    pub element: ElementType,
    /// Exactly the values' bytes (for booleans: the bitmap, `count` bits).
    pub values: Memory,
    /// Number of elements.
    pub count: usize,
    /// Rows (tensor forms).
    pub rows: usize,
    /// The tensor type (tensor forms).
    pub tensor: Option<TensorType>,
}

/// Prepares `nd` for `form`, copying at most once (see the module docs).
pub(crate) fn prepare(nd: &NDBuffer, form: Form) -> Result<Prepared> {
    let element = nd.dtype().element();
    let es = element.size();
    let mut nd = if nd.dtype().byteorder() == crate::zarr::Endianness::NATIVE {
        nd.clone()
    } else {
        nd.astype(Dtype::from(element))?
    };
    let ndim = nd.ndim();
    if form == Form::Rows && ndim == 0 {
        return Err(Error::invalid(
            "a 0-dimensional NDBuffer has no axis 0 to make rows of (use the tensor form)",
        ));
    }
    let cell_from = usize::from(form == Form::Rows);
    let order = {
        let shape = nd.shape();
        let strides = nd.strides();
        match form {
            Form::Flat => nd
                .is_contiguous(Order::C)
                .then(|| (0..ndim).collect::<Vec<_>>()),
            Form::Tensor => dense_order(shape, strides, es),
            Form::Rows => {
                // Checked: with no rows the other axes may multiply past usize (the
                // storage type then reports the overflow).
                let cell = shape[1..].iter().try_fold(1usize, |a, &d| a.checked_mul(d));
                let row_bytes = cell.and_then(|c| c.checked_mul(es));
                dense_order(&shape[1..], &strides[1..], es)
                    .filter(|_| shape[0] <= 1 || cell == Some(0) || row_bytes == Some(strides[0]))
            }
        }
    };
    let order = match order {
        Some(o) => o,
        None => {
            nd = nd.copy_order(Order::C)?;
            (0..ndim - cell_from).collect()
        }
    };
    let count = nd.size();
    let nbytes = nd.nbytes();
    let like = nd.as_ndarray_like();
    let start = if count == 0 { 0 } else { like.offset };
    let mut values = like.memory.slice(start, nbytes)?;
    if element == ElementType::Bool {
        values = pack_bits(&values)?;
    } else if nbytes > 0 && values.address() % element_align(element) as u64 != 0 {
        values = aligned_copy(&values)?;
    }
    let tensor = match form {
        Form::Flat => None,
        Form::Tensor | Form::Rows => {
            let cell_shape = &nd.shape()[cell_from..];
            let phys: Vec<usize> = order.iter().map(|&a| cell_shape[a]).collect();
            let t = TensorType::new(element, &phys).with_permutation(inverse(&order))?;
            t.storage_type()?;
            Some(t)
        }
    };
    let rows = match form {
        Form::Rows => nd.shape()[0],
        _ => 1,
    };
    Ok(Prepared {
        element,
        values,
        count,
        rows,
        tensor,
    })
}

/// A copy of `m` in new, 64-byte aligned memory on the same side.
pub(super) fn aligned_copy(m: &Memory) -> Result<Memory> {
    match m {
        Memory::Host(b) => Ok(Memory::from(Buffer::from_slice_ref(&b[..]))),
        Memory::Device(d) => {
            let out = d.context().allocate(d.len())?;
            out.copy_from_device(0, d)?;
            Ok(Memory::Device(out))
        }
    }
}
