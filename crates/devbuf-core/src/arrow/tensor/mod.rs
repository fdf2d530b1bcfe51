//! [`NDBuffer`] ⇄ Arrow: flat arrays and the canonical `arrow.fixed_shape_tensor`
//! extension type, on the host (arrow-rs arrays) and on the device ([`DeviceArray`]).
//! Where the memory lives is a value, as in the NDBuffer: the conversions run the same
//! code on both sides and give the result where the data is.
//!
//! # Element types
//!
//! | NDBuffer | Arrow |
//! |---|---|
//! | `bool` | `Boolean` (bit-packed: one conversion pass each way) |
//! | `int8` … `uint64` | `Int8` … `UInt64` |
//! | `float16`, `float32`, `float64` | `Float16`, `Float32`, `Float64` |
//! | `complex64`, `complex128` | `FixedSizeList<Float32 / Float64, 2>` (real, imaginary) |
//!
//! # Forms
//!
//! * **Flat** ([`NDBuffer::into_arrow`]: an [`AnyArray`](super::AnyArray), an arrow-rs
//!   array on the host or a [`DeviceArray`] on the device, which own their memory
//!   differently and are built by the same code): the elements in C order (numpy's
//!   `ravel()`), as one array of the element's Arrow type (`DataType::from(element)`).
//! * **Tensor** ([`NDBuffer::into_tensor`]): the whole NDBuffer as one element
//!   (length 1) of an `arrow.fixed_shape_tensor` array, a [`TensorArray`] whose
//!   storage ([`AnyArray`](super::AnyArray)) is host or device memory, where the NDBuffer lives.
//! * **Rows** ([`NDBuffer::into_tensor_rows`]): axis 0 becomes the array's length
//!   and every row a tensor of the remaining axes (pyarrow's
//!   `FixedShapeTensorArray.from_numpy_ndarray`), likewise on either side.
//!
//! The tensor storage is a `FixedSizeList<value, prod(shape)>` whose child field is
//! `item`, not nullable (what arrow-rs's `FixedShapeTensor` requires; pyarrow and Arrow
//! C++ accept it too). A complex tensor's value type is the complex element's
//! `FixedSizeList<Float, 2>`, so the storage is a list of lists.
//!
//! # What copies and what does not
//!
//! Zero-copy — the Arrow values buffer *is* the NDBuffer's memory (same address, the
//! memory kept alive by the array) — when the data is in native byte order, not `bool`,
//! aligned for its element type, and:
//! * flat: C-contiguous;
//! * tensor: dense in *any* axis order (C, F or a transposition): the physical shape is
//!   the shape in memory order and the permutation says how to get back the logical
//!   order (an F-order `[a, b, c]` array is shape `[c, b, a]` with permutation
//!   `[2, 1, 0]`);
//! * rows: dense with axis 0 outermost in memory.
//!
//! Otherwise exactly one copy is made, on the side where the data lives: a strided
//! view is gathered into C order, big-endian data is byte-swapped (keeping its axis
//! order), misaligned data is copied into aligned memory, and booleans are bit-packed.
//!
//! The way back ([`NDBuffer::from_arrow`], [`TensorArray::tensor`], ...) is zero-copy
//! for everything but `Boolean` (unpacked into bytes): the NDBuffer views the Arrow
//! buffer at the array's offset. Arrays with nulls and types outside the table are
//! errors that name the type.
//!
//! # Permutation
//!
//! Per the [canonical extension's definition](https://arrow.apache.org/docs/format/CanonicalExtensions.html#fixed-shape-tensor),
//! `shape` is the physical (row-major) shape and logical dimension `i` is physical
//! dimension `permutation[i]`: `logical_shape[i] == shape[permutation[i]]`. The metadata
//! is written with the spec's keys (`"shape"`, `"permutation"`, `"dim_names"`; absent
//! keys are left out). arrow-rs 60's own `FixedShapeTensor` writes `"permutations"` and
//! `null`s, which Arrow C++ ignores or rejects; [`TensorType::from_field`] reads both
//! spellings.
//!
//! # Files
//!
//! This file: the element-type mapping. `extension.rs`: [`TensorType`] and its metadata.
//! `layout.rs`: dense axis orders and the one copy. `parts.rs`: Arrow layouts over host
//! or device buffers. `array.rs`: [`TensorArray`].
//! `ndbuffer.rs`: the NDBuffer methods.

mod array;
mod extension;
mod layout;
mod ndbuffer;
mod parts;
#[cfg(test)]
mod tests;

pub use array::TensorArray;
pub use extension::TensorType;
pub(crate) use layout::{Form, Prepared, prepare};
pub(crate) use parts::{element_parts, flat_ndbuffer, locate_tensor, storage_parts, tensor_rows};
// The files share their crate-private helpers through this module (each does
// `use super::*`).
#[allow(unused_imports)]
use {array::*, extension::*, layout::*, parts::*};

use std::sync::Arc;

use arrow_array::{Array, FixedSizeListArray, make_array};
use arrow_buffer::{Buffer, MutableBuffer};
use arrow_data::ArrayData;
use arrow_schema::extension::{EXTENSION_TYPE_METADATA_KEY, EXTENSION_TYPE_NAME_KEY};
use arrow_schema::{DataType as ArrowType, Field};

use super::AnyArray;
use super::device::{DeviceArray, Parts};
use crate::cuda::DeviceBuffer;
use crate::element::ElementType;
use crate::error::{Error, Result};
use crate::memory::Memory;
use crate::zarr::{BufferPrototype, Dtype, NDBuffer, Order};

/// The canonical extension name of fixed-shape tensors.
pub const FIXED_SHAPE_TENSOR: &str = "arrow.fixed_shape_tensor";

/// The name of the child field of the `FixedSizeList`s this module builds.
const ITEM: &str = "item";

// ---------------------------------------------------------------------------------------
// Element types
// ---------------------------------------------------------------------------------------

/// The Arrow type of one element of an [`ElementType`] (see the module's table):
/// complex numbers are `FixedSizeList<Float32 or Float64, 2>`.
///
/// ```
/// use arrow_schema::DataType;
/// use devbuf_core::ElementType;
/// assert_eq!(DataType::from(ElementType::Float16), DataType::Float16);
/// assert_eq!(DataType::from(ElementType::Bool), DataType::Boolean);
/// let DataType::FixedSizeList(item, 2) = DataType::from(ElementType::Complex128) else { panic!() };
/// assert_eq!(item.data_type(), &DataType::Float64);
/// ```
impl From<ElementType> for ArrowType {
    fn from(element: ElementType) -> Self {
        arrow_data_type(element)
    }
}

/// The element type of Arrow values of a [`DataType`](ArrowType) (the inverse of
/// `DataType::from(ElementType)`); an error naming the type for anything else.
///
/// ```
/// use arrow_schema::DataType;
/// use devbuf_core::ElementType;
/// assert_eq!(ElementType::try_from(&DataType::UInt16)?, ElementType::UInt16);
/// assert!(ElementType::try_from(&DataType::Utf8).unwrap_err().to_string().contains("Utf8"));
/// # Ok::<(), devbuf_core::Error>(())
/// ```
impl TryFrom<&ArrowType> for ElementType {
    type Error = Error;
    fn try_from(data_type: &ArrowType) -> Result<Self> {
        element_type_of(data_type)
    }
}

pub(crate) fn arrow_data_type(element: ElementType) -> ArrowType {
    use ElementType as E;
    match element {
        E::Bool => ArrowType::Boolean,
        E::Int8 => ArrowType::Int8,
        E::Int16 => ArrowType::Int16,
        E::Int32 => ArrowType::Int32,
        E::Int64 => ArrowType::Int64,
        E::UInt8 => ArrowType::UInt8,
        E::UInt16 => ArrowType::UInt16,
        E::UInt32 => ArrowType::UInt32,
        E::UInt64 => ArrowType::UInt64,
        E::Float16 => ArrowType::Float16,
        E::Float32 => ArrowType::Float32,
        E::Float64 => ArrowType::Float64,
        E::Complex64 => fixed_list(ArrowType::Float32, 2),
        E::Complex128 => fixed_list(ArrowType::Float64, 2),
    }
}

pub(crate) fn element_type_of(data_type: &ArrowType) -> Result<ElementType> {
    use ElementType as E;
    Ok(match data_type {
        ArrowType::Boolean => E::Bool,
        ArrowType::Int8 => E::Int8,
        ArrowType::Int16 => E::Int16,
        ArrowType::Int32 => E::Int32,
        ArrowType::Int64 => E::Int64,
        ArrowType::UInt8 => E::UInt8,
        ArrowType::UInt16 => E::UInt16,
        ArrowType::UInt32 => E::UInt32,
        ArrowType::UInt64 => E::UInt64,
        ArrowType::Float16 => E::Float16,
        ArrowType::Float32 => E::Float32,
        ArrowType::Float64 => E::Float64,
        ArrowType::FixedSizeList(f, 2) if f.data_type() == &ArrowType::Float32 => E::Complex64,
        ArrowType::FixedSizeList(f, 2) if f.data_type() == &ArrowType::Float64 => E::Complex128,
        other => {
            return Err(Error::unsupported(format!(
                "Arrow type {other} has no NDBuffer element type: supported are Boolean, \
                 Int8..Int64, UInt8..UInt64, Float16, Float32, Float64 and complex numbers \
                 as FixedSizeList<Float32 or Float64, 2>"
            )));
        }
    })
}

fn fixed_list(item: ArrowType, size: i32) -> ArrowType {
    ArrowType::FixedSizeList(Arc::new(Field::new(ITEM, item, false)), size)
}

/// Alignment Arrow's typed buffers need for `element` (that of its primitive values).
pub(crate) fn element_align(element: ElementType) -> usize {
    match element {
        ElementType::Complex64 => 4,
        ElementType::Complex128 => 8,
        e => e.size(),
    }
}
