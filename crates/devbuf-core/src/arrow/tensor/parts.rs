//! Arrow layouts generic over where the buffers live: building the parts of flat and
//! tensor arrays, and locating an NDBuffer in an Arrow array (host or device).

use super::*;
use crate::memory::unpack_bits;

pub(super) fn leaf<B>(data_type: ArrowType, len: usize, values: B) -> Parts<B> {
    Parts {
        data_type,
        len,
        null_count: 0,
        offset: 0,
        validity: None,
        buffers: vec![values],
        children: vec![],
        dictionary: None,
    }
}

pub(super) fn fixed_list_parts<B>(data_type: ArrowType, len: usize, child: Parts<B>) -> Parts<B> {
    Parts {
        data_type,
        len,
        null_count: 0,
        offset: 0,
        validity: None,
        buffers: vec![],
        children: vec![child],
        dictionary: None,
    }
}

/// `count` elements of `element` in `values`, as an array of `DataType::from(element)`.
pub(crate) fn element_parts<B>(element: ElementType, count: usize, values: B) -> Parts<B> {
    let dt = arrow_data_type(element);
    match element {
        ElementType::Complex64 => {
            fixed_list_parts(dt, count, leaf(ArrowType::Float32, 2 * count, values))
        }
        ElementType::Complex128 => {
            fixed_list_parts(dt, count, leaf(ArrowType::Float64, 2 * count, values))
        }
        _ => leaf(dt, count, values),
    }
}

/// The Arrow layout of prepared values (with `values` converted to the buffer type).
pub(crate) fn storage_parts<B>(p: &Prepared, values: B) -> Result<Parts<B>> {
    let inner = element_parts(p.element, p.count, values);
    match &p.tensor {
        None => Ok(inner),
        Some(t) => Ok(fixed_list_parts(t.storage_type()?, p.rows, inner)),
    }
}

/// An Arrow array description on either side (host `ArrayData`, [`DeviceArray`]).
pub(crate) trait ArrayView {
    type Buf: Clone;
    fn view_type(&self) -> &ArrowType;
    fn view_len(&self) -> usize;
    fn view_nulls(&self) -> usize;
    fn view_offset(&self) -> usize;
    fn view_buffer(&self, i: usize) -> Option<&Self::Buf>;
    fn view_child(&self, i: usize) -> Option<&Self>;
    fn to_memory(b: &Self::Buf) -> Memory;
}

/// [`ArrayView`] for an array type whose methods `data_type`, `len`, `null_count`,
/// `offset` and `buffers` mean what they mean in arrow-rs, and whose child arrays are
/// listed by the method `$children`.
macro_rules! array_view {
    ($array:ty, $buf:ty, $children:ident) => {
        impl ArrayView for $array {
            type Buf = $buf;
            fn view_type(&self) -> &ArrowType {
                self.data_type()
            }
            fn view_len(&self) -> usize {
                self.len()
            }
            fn view_nulls(&self) -> usize {
                self.null_count()
            }
            fn view_offset(&self) -> usize {
                self.offset()
            }
            fn view_buffer(&self, i: usize) -> Option<&$buf> {
                self.buffers().get(i)
            }
            fn view_child(&self, i: usize) -> Option<&$array> {
                self.$children().get(i)
            }
            fn to_memory(b: &$buf) -> Memory {
                Memory::from(b.clone())
            }
        }
    };
}

array_view!(ArrayData, Buffer, child_data);
array_view!(DeviceArray, DeviceBuffer, children);

/// Where an array's values are: `count` elements from element (bit, for booleans)
/// `start` of `buf`.
pub(crate) struct Located {
    pub element: ElementType,
    pub buf: Memory,
    pub start: usize,
    pub count: usize,
}

impl Located {
    /// The values as NDBuffer memory: a zero-copy slice, or unpacked booleans.
    pub(crate) fn into_memory(self) -> Result<Memory> {
        if self.element == ElementType::Bool {
            return unpack_bits(&self.buf, self.start, self.count);
        }
        let es = self.element.size();
        self.buf.slice(self.start * es, self.count * es)
    }

    /// The same values from element `first`, `n` of them.
    pub(crate) fn sub(&self, first: usize, n: usize) -> Result<Located> {
        crate::error::check_range("tensor rows", first, n, self.count)?;
        Ok(Located {
            element: self.element,
            buf: self.buf.clone(),
            start: self.start + first,
            count: n,
        })
    }
}

pub(super) fn no_nulls<A: ArrayView>(a: &A) -> Result<()> {
    if a.view_nulls() > 0 {
        return Err(Error::invalid(format!(
            "the {} array holds {} null(s); an NDBuffer has no nulls",
            a.view_type(),
            a.view_nulls()
        )));
    }
    Ok(())
}

/// Locates the values of a flat array of a supported element type.
pub(crate) fn locate<A: ArrayView>(a: &A) -> Result<Located> {
    let element = element_type_of(a.view_type())?;
    no_nulls(a)?;
    let count = a.view_len();
    let overflow = || {
        Error::invalid(format!(
            "{} array: offset and length overflow",
            a.view_type()
        ))
    };
    // The buffer holding the values, the first and the number of its units (floats for
    // complex numbers, bits for booleans, else elements), and the unit size in bytes.
    let (buf, first, units, unit) = if element.is_complex() {
        let child = a
            .view_child(0)
            .ok_or_else(|| Error::invalid(format!("{} array without values", a.view_type())))?;
        no_nulls(child)?;
        let first = a
            .view_offset()
            .checked_mul(2)
            .and_then(|s| s.checked_add(child.view_offset()))
            .ok_or_else(overflow)?;
        if first % 2 != 0 {
            return Err(Error::invalid(format!(
                "{} array: its values start at float {first}, inside a complex number",
                a.view_type()
            )));
        }
        (
            child.view_buffer(0),
            first,
            count.checked_mul(2).ok_or_else(overflow)?,
            element.size() / 2,
        )
    } else {
        (a.view_buffer(0), a.view_offset(), count, element.size())
    };
    let buf = A::to_memory(buf.ok_or_else(|| {
        Error::invalid(format!("{} array without a values buffer", a.view_type()))
    })?);
    let end = first.checked_add(units).ok_or_else(overflow)?;
    let need = if element == ElementType::Bool {
        end.div_ceil(8)
    } else {
        end.checked_mul(unit).ok_or_else(overflow)?
    };
    if buf.len() < need {
        return Err(Error::invalid(format!(
            "the {} array of length {count} at offset {} needs {need} bytes of values, its \
             buffer holds {}",
            a.view_type(),
            a.view_offset(),
            buf.len()
        )));
    }
    let start = if element.is_complex() {
        first / 2
    } else {
        first
    };
    Ok(Located {
        element,
        buf,
        start,
        count,
    })
}

/// Locates the values of a fixed-shape tensor storage array (`FixedSizeList` of
/// `list_size` elements).
pub(crate) fn locate_tensor<A: ArrayView>(a: &A, t: &TensorType) -> Result<Located> {
    let list = t.list_size()?;
    match a.view_type() {
        ArrowType::FixedSizeList(item, size) if usize::try_from(*size).ok() == Some(list) => {
            if element_type_of(item.data_type())? != t.element() {
                return Err(Error::invalid(format!(
                    "tensor storage holds {}, the tensor type says {}",
                    item.data_type(),
                    t.element()
                )));
            }
        }
        other => {
            return Err(Error::invalid(format!(
                "tensor storage is {other}, expected a FixedSizeList of {list} {} values",
                t.element()
            )));
        }
    }
    no_nulls(a)?;
    let child = a
        .view_child(0)
        .ok_or_else(|| Error::invalid("FixedSizeList array without values"))?;
    let inner = locate(child)?;
    let first = a
        .view_offset()
        .checked_mul(list)
        .ok_or_else(|| Error::invalid("tensor offset overflows"))?;
    let n = a
        .view_len()
        .checked_mul(list)
        .ok_or_else(|| Error::invalid("tensor length overflows"))?;
    inner.sub(first, n)
}

/// Tensors `first .. first + n` of tensor storage `storage` as one NDBuffer of shape
/// `[n, *logical_shape]` (zero-copy but for booleans), host or device.
pub(crate) fn tensor_rows<A: ArrayView>(
    t: &TensorType,
    storage: &A,
    first: usize,
    n: usize,
) -> Result<NDBuffer> {
    crate::error::check_range("tensor rows", first, n, storage.view_len())?;
    let list = t.list_size()?;
    let loc = locate_tensor(storage, t)?;
    let span = |x: usize| {
        x.checked_mul(list)
            .ok_or_else(|| Error::invalid("tensor rows overflow"))
    };
    let mem = loc.sub(span(first)?, span(n)?)?.into_memory()?;
    t.rows_view(mem, n)
}

/// A flat array (any offset, no nulls) as a 1-d NDBuffer (zero-copy but for booleans),
/// host or device.
pub(crate) fn flat_ndbuffer<A: ArrayView>(array: &A) -> Result<NDBuffer> {
    let loc = locate(array)?;
    let (element, count) = (loc.element, loc.count);
    NDBuffer::from_memory(loc.into_memory()?, &[count], Dtype::from(element), Order::C)
}
