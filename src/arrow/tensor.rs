//! [`NDBuffer`] ⇄ Arrow: flat arrays and the canonical `arrow.fixed_shape_tensor`
//! extension type, on the host (arrow-rs arrays) and on the device ([`DeviceArray`]).
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
//! * **Flat** ([`NDBuffer::to_arrow`], [`NDBuffer::to_device_array`]): the elements in C
//!   order (numpy's `ravel()`), as one array of [`arrow_data_type`].
//! * **Tensor** ([`NDBuffer::to_arrow_tensor`], [`NDBuffer::to_device_tensor`]): the
//!   whole NDBuffer as one element (length 1) of an `arrow.fixed_shape_tensor` array
//!   ([`TensorArray`] / [`DeviceTensorArray`](super::DeviceTensorArray)).
//! * **Rows** ([`NDBuffer::to_arrow_tensor_rows`], ...): axis 0 becomes the array's
//!   length and every row a tensor of the remaining axes (pyarrow's
//!   `FixedShapeTensorArray.from_numpy_ndarray`).
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

use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, ArrowPrimitiveType, FixedSizeListArray, PrimitiveArray, make_array,
};
use arrow_buffer::{BooleanBuffer, Buffer, MutableBuffer};
use arrow_data::ArrayData;
use arrow_schema::extension::{EXTENSION_TYPE_METADATA_KEY, EXTENSION_TYPE_NAME_KEY};
use arrow_schema::{DataType as ArrowType, Field};

use super::device::{DeviceArray, Parts};
use crate::cuda::DeviceBuffer;
use crate::cuda::kernels::bits;
use crate::element::ElementType;
use crate::error::{Error, Result};
use crate::memory::Memory;
use crate::zarr::{DataType, NDBuffer, Order};

/// The canonical extension name of fixed-shape tensors.
pub const FIXED_SHAPE_TENSOR: &str = "arrow.fixed_shape_tensor";

/// The name of the child field of the `FixedSizeList`s this module builds.
const ITEM: &str = "item";

// ---------------------------------------------------------------------------------------
// Element types
// ---------------------------------------------------------------------------------------

/// The Arrow type of one element of `element` (see the module's table).
///
/// ```
/// use arrow_schema::DataType;
/// use devbuf::arrow::arrow_data_type;
/// use devbuf::zarr::ElementType;
/// assert_eq!(arrow_data_type(ElementType::Float16), DataType::Float16);
/// assert_eq!(arrow_data_type(ElementType::Bool), DataType::Boolean);
/// let DataType::FixedSizeList(item, 2) = arrow_data_type(ElementType::Complex128) else { panic!() };
/// assert_eq!(item.data_type(), &DataType::Float64);
/// ```
pub fn arrow_data_type(element: ElementType) -> ArrowType {
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

/// The NDBuffer element type of Arrow values of type `data_type` (the inverse of
/// [`arrow_data_type`]); an error naming the type for anything else.
///
/// ```
/// use arrow_schema::DataType;
/// use devbuf::arrow::element_type_of;
/// use devbuf::zarr::ElementType;
/// assert_eq!(element_type_of(&DataType::UInt16)?, ElementType::UInt16);
/// assert!(element_type_of(&DataType::Utf8).unwrap_err().to_string().contains("Utf8"));
/// # Ok::<(), devbuf::Error>(())
/// ```
pub fn element_type_of(data_type: &ArrowType) -> Result<ElementType> {
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
            return Err(Error::invalid(format!(
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

// ---------------------------------------------------------------------------------------
// The extension type
// ---------------------------------------------------------------------------------------

/// The canonical `arrow.fixed_shape_tensor` extension type: an element type, the
/// physical (row-major) shape of every tensor, an optional permutation and optional
/// dimension names.
///
/// ```
/// use devbuf::arrow::TensorType;
/// use devbuf::zarr::ElementType;
/// // An F-order [2, 3, 4] array: row-major [4, 3, 2] in memory.
/// let t = TensorType::new(ElementType::Float32, &[4, 3, 2]).with_permutation(vec![2, 1, 0])?;
/// assert_eq!(t.logical_shape(), vec![2, 3, 4]);
/// assert_eq!(t.metadata(), r#"{"shape":[4,3,2],"permutation":[2,1,0]}"#);
/// let field = t.field("chunk", false)?;
/// assert_eq!(TensorType::from_field(&field)?, t);
/// # Ok::<(), devbuf::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorType {
    element: ElementType,
    shape: Vec<usize>,
    permutation: Option<Vec<usize>>,
    dim_names: Option<Vec<String>>,
}

impl TensorType {
    /// Tensors of `element` with row-major `shape`, no permutation, no names.
    pub fn new(element: ElementType, shape: &[usize]) -> TensorType {
        TensorType {
            element,
            shape: shape.to_vec(),
            permutation: None,
            dim_names: None,
        }
    }

    /// Sets the permutation (`logical_shape[i] == shape[permutation[i]]`); it must be a
    /// permutation of `0..ndim`. The identity is stored as no permutation.
    pub fn with_permutation(mut self, permutation: Vec<usize>) -> Result<TensorType> {
        check_permutation(&permutation, self.shape.len())?;
        let identity = permutation.iter().enumerate().all(|(i, &p)| i == p);
        self.permutation = (!identity).then_some(permutation);
        Ok(self)
    }

    /// Sets the dimension names (one per physical dimension, as the spec says).
    pub fn with_dim_names(mut self, names: Vec<String>) -> Result<TensorType> {
        if names.len() != self.shape.len() {
            return Err(Error::invalid(format!(
                "{} dimension names given for a {}-dimensional tensor",
                names.len(),
                self.shape.len()
            )));
        }
        self.dim_names = Some(names);
        Ok(self)
    }

    /// The element type.
    pub fn element(&self) -> ElementType {
        self.element
    }

    /// The physical shape (row-major, as stored).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The permutation, when it is not the identity.
    pub fn permutation(&self) -> Option<&[usize]> {
        self.permutation.as_deref()
    }

    /// The dimension names, when given.
    pub fn dim_names(&self) -> Option<&[String]> {
        self.dim_names.as_deref()
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// The logical shape: `shape[permutation[i]]` for each `i`.
    pub fn logical_shape(&self) -> Vec<usize> {
        match &self.permutation {
            Some(p) => p.iter().map(|&j| self.shape[j]).collect(),
            None => self.shape.clone(),
        }
    }

    /// Elements per tensor (the `FixedSizeList` size); an error when it overflows.
    pub fn list_size(&self) -> Result<usize> {
        self.shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| Error::invalid(format!("tensor shape {:?} overflows", self.shape)))
    }

    /// The storage type: `FixedSizeList<item: value (not nullable), list_size>`; an
    /// error when the list size does not fit Arrow's `i32`.
    pub fn storage_type(&self) -> Result<ArrowType> {
        let n = self.list_size()?;
        let size = i32::try_from(n).map_err(|_| {
            Error::invalid(format!(
                "a tensor of shape {:?} has {n} elements, more than an Arrow FixedSizeList \
                 holds (2^31 - 1)",
                self.shape
            ))
        })?;
        Ok(fixed_list(arrow_data_type(self.element), size))
    }

    /// The extension metadata, JSON with the spec's keys: `{"shape":[..]}`, plus
    /// `"permutation"` and `"dim_names"` when set.
    pub fn metadata(&self) -> String {
        let mut s = format!("{{\"shape\":{}", json_list(&self.shape));
        if let Some(p) = &self.permutation {
            s.push_str(&format!(",\"permutation\":{}", json_list(p)));
        }
        if let Some(names) = &self.dim_names {
            let names = serde_json::Value::from(names.clone());
            s.push_str(&format!(",\"dim_names\":{names}"));
        }
        s.push('}');
        s
    }

    /// A field of the storage type tagged with this extension type
    /// (`ARROW:extension:name` and `ARROW:extension:metadata`).
    pub fn field(&self, name: &str, nullable: bool) -> Result<Field> {
        let mut md = std::collections::HashMap::new();
        md.insert(
            EXTENSION_TYPE_NAME_KEY.to_string(),
            FIXED_SHAPE_TENSOR.to_string(),
        );
        md.insert(EXTENSION_TYPE_METADATA_KEY.to_string(), self.metadata());
        Ok(Field::new(name, self.storage_type()?, nullable).with_metadata(md))
    }

    /// Reads the extension type from a field: the extension name must be
    /// `arrow.fixed_shape_tensor`, the storage a `FixedSizeList` of a supported element
    /// type (child nullability is not checked), and the metadata valid JSON whose shape
    /// has `list_size` elements. Reads `"permutation"` (the spec) and `"permutations"`
    /// (arrow-rs ≤ 60); `null` values count as absent; unknown keys are ignored.
    pub fn from_field(field: &Field) -> Result<TensorType> {
        let md = field.metadata();
        match md.get(EXTENSION_TYPE_NAME_KEY) {
            Some(n) if n == FIXED_SHAPE_TENSOR => {}
            Some(n) => {
                return Err(Error::invalid(format!(
                    "field {:?} has extension type {n:?}, not {FIXED_SHAPE_TENSOR}",
                    field.name()
                )));
            }
            None => {
                return Err(Error::invalid(format!(
                    "field {:?} ({}) is not tagged as {FIXED_SHAPE_TENSOR}",
                    field.name(),
                    field.data_type()
                )));
            }
        }
        let ArrowType::FixedSizeList(item, size) = field.data_type() else {
            return Err(Error::invalid(format!(
                "{FIXED_SHAPE_TENSOR} field {:?} has storage {}, not a FixedSizeList",
                field.name(),
                field.data_type()
            )));
        };
        let element = element_type_of(item.data_type())?;
        let json = md.get(EXTENSION_TYPE_METADATA_KEY).ok_or_else(|| {
            Error::invalid(format!(
                "{FIXED_SHAPE_TENSOR} field {:?} has no extension metadata",
                field.name()
            ))
        })?;
        let t = TensorType::parse_metadata(element, json)?;
        let n = t.list_size()?;
        if usize::try_from(*size).ok() != Some(n) {
            return Err(Error::invalid(format!(
                "{FIXED_SHAPE_TENSOR} field {:?}: shape {:?} has {n} elements, the storage \
                 FixedSizeList has {size}",
                field.name(),
                t.shape
            )));
        }
        Ok(t)
    }

    /// Parses extension metadata (see [`from_field`](Self::from_field)) for tensors of
    /// `element`.
    pub fn parse_metadata(element: ElementType, json: &str) -> Result<TensorType> {
        let bad =
            |m: String| Error::invalid(format!("{FIXED_SHAPE_TENSOR} metadata {json:?}: {m}"));
        let v: serde_json::Value =
            serde_json::from_str(json).map_err(|e| bad(format!("not JSON: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| bad("not a JSON object".into()))?;
        let ints = |key: &str| -> Result<Option<Vec<usize>>> {
            match obj.get(key) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::Array(a)) => a
                    .iter()
                    .map(|x| {
                        x.as_u64()
                            .and_then(|u| usize::try_from(u).ok())
                            .ok_or_else(|| {
                                bad(format!("{key} holds {x}, not a non-negative integer"))
                            })
                    })
                    .collect::<Result<Vec<_>>>()
                    .map(Some),
                Some(x) => Err(bad(format!("{key} is {x}, not an array"))),
            }
        };
        let shape = ints("shape")?.ok_or_else(|| bad("no \"shape\"".into()))?;
        let perm = match (ints("permutation")?, ints("permutations")?) {
            (Some(a), Some(b)) if a != b => {
                return Err(bad("\"permutation\" and \"permutations\" differ".into()));
            }
            (a, b) => a.or(b),
        };
        let names = match obj.get("dim_names") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::Array(a)) => Some(
                a.iter()
                    .map(|x| {
                        x.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| bad(format!("dim_names holds {x}, not a string")))
                    })
                    .collect::<Result<Vec<_>>>()?,
            ),
            Some(x) => return Err(bad(format!("dim_names is {x}, not an array"))),
        };
        let mut t = TensorType::new(element, &shape);
        if let Some(p) = perm {
            t = t.with_permutation(p).map_err(|e| bad(e.to_string()))?;
        }
        if let Some(n) = names {
            t = t.with_dim_names(n).map_err(|e| bad(e.to_string()))?;
        }
        t.list_size()?;
        Ok(t)
    }

    /// Strides (bytes) of the logical axes of one tensor stored row-major in its
    /// physical shape.
    pub(crate) fn logical_strides(&self) -> Vec<usize> {
        let es = self.element.size();
        let nd = self.shape.len();
        let mut phys = vec![0usize; nd];
        let mut s = es;
        for j in (0..nd).rev() {
            phys[j] = s;
            s = s.saturating_mul(self.shape[j]);
        }
        match &self.permutation {
            Some(p) => p.iter().map(|&j| phys[j]).collect(),
            None => phys,
        }
    }

    /// `nrows` consecutive tensors in `mem` (exactly their bytes) as one NDBuffer of
    /// shape `[nrows, *logical_shape]` (a view; nothing is copied).
    pub(crate) fn rows_view(&self, mem: Memory, nrows: usize) -> Result<NDBuffer> {
        let list = self.list_size()?;
        let es = self.element.size();
        let mut shape = vec![nrows];
        shape.extend(self.logical_shape());
        let mut strides = vec![list.saturating_mul(es)];
        strides.extend(self.logical_strides());
        NDBuffer::from_parts(mem, DataType::native(self.element), &shape, &strides, 0)
    }
}

fn json_list(v: &[usize]) -> String {
    let items: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("[{}]", items.join(","))
}

fn check_permutation(p: &[usize], ndim: usize) -> Result<()> {
    let mut seen = vec![false; ndim];
    if p.len() != ndim
        || p.iter()
            .any(|&a| a >= ndim || std::mem::replace(&mut seen[a], true))
    {
        return Err(Error::invalid(format!(
            "{p:?} is not a permutation of the {ndim} dimensions 0..{ndim}"
        )));
    }
    Ok(())
}

fn inverse(order: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; order.len()];
    for (j, &a) in order.iter().enumerate() {
        inv[a] = j;
    }
    inv
}

// ---------------------------------------------------------------------------------------
// Layouts: which axis order, if any, makes a view dense
// ---------------------------------------------------------------------------------------

fn contiguous_along(
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
fn dense_order(shape: &[usize], strides: &[usize], es: usize) -> Option<Vec<usize>> {
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
    let mut nd = if nd.dtype().is_native() {
        nd.clone()
    } else {
        nd.astype(DataType::native(element))?
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
            Form::Flat => nd.is_c_contiguous().then(|| (0..ndim).collect::<Vec<_>>()),
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

/// Booleans (bytes, non-zero is true) bit-packed, where they live.
fn pack_bits(bytes: &Memory) -> Result<Memory> {
    match bytes {
        Memory::Host(b) => {
            let bits = BooleanBuffer::collect_bool(b.len(), |i| b[i] != 0);
            Ok(Memory::from(bits.into_inner()))
        }
        Memory::Device(d) => {
            let n = d.len();
            let packed = d.context().allocate(bits::packed_words_bytes(n))?;
            bits::pack_bits(d, &packed)?;
            Ok(Memory::Device(packed.slice(0, n.div_ceil(8))?))
        }
    }
}

/// Booleans `start .. start + count` of the bitmap `bits` as bytes (0 or 1), where
/// they live.
fn unpack_bits(bits: &Memory, start: usize, count: usize) -> Result<Memory> {
    let end = start
        .checked_add(count)
        .ok_or_else(|| Error::invalid("boolean range overflows"))?;
    if bits.len() < end.div_ceil(8) {
        return Err(Error::invalid(format!(
            "booleans {start}..{end} lie past the bitmap of {} bytes",
            bits.len()
        )));
    }
    match bits {
        Memory::Host(b) => {
            let bb = BooleanBuffer::new(Buffer::from(b.clone()), start, count);
            let v: Vec<u8> = bb.iter().map(u8::from).collect();
            Ok(Memory::from(v))
        }
        Memory::Device(d) => {
            let out = d.context().allocate(count)?;
            bits::unpack_bits(d, start, &out)?;
            Ok(Memory::Device(out))
        }
    }
}

/// A copy of `m` in new, 64-byte aligned memory on the same side.
fn aligned_copy(m: &Memory) -> Result<Memory> {
    match m {
        Memory::Host(b) => Ok(Memory::from(Buffer::from_slice_ref(&b[..]))),
        Memory::Device(d) => {
            let out = d.context().allocate(d.len())?;
            out.copy_from_device(0, d)?;
            Ok(Memory::Device(out))
        }
    }
}

// ---------------------------------------------------------------------------------------
// Arrow layouts, generic over where the buffers live
// ---------------------------------------------------------------------------------------

fn leaf<B>(data_type: ArrowType, len: usize, values: B) -> Parts<B> {
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

fn fixed_list_parts<B>(data_type: ArrowType, len: usize, child: Parts<B>) -> Parts<B> {
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

/// `count` elements of `element` in `values`, as an array of [`arrow_data_type`].
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

fn no_nulls<A: ArrayView>(a: &A) -> Result<()> {
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
    NDBuffer::from_memory(
        loc.into_memory()?,
        &[count],
        DataType::native(element),
        Order::C,
    )
}

// ---------------------------------------------------------------------------------------
// Host arrays
// ---------------------------------------------------------------------------------------

fn host_buffer(m: &Memory) -> Result<Buffer> {
    match m {
        Memory::Host(b) if b.is_empty() => Ok(MutableBuffer::new(0).into()),
        Memory::Host(b) => Ok(Buffer::from(b.clone())),
        Memory::Device(_) => Err(Error::invalid("internal: device memory for a host array")),
    }
}

fn host_only(nd: &NDBuffer, what: &str, device_way: &str) -> Result<()> {
    if nd.is_device() {
        return Err(Error::invalid(format!(
            "{what} makes host Arrow arrays; this NDBuffer is on device {} (use {device_way}, \
             or to_prototype(&BufferPrototype::Host) first)",
            nd.as_ndarray_like().memory.device_ordinal().unwrap_or(0)
        )));
    }
    Ok(())
}

fn host_array(p: &Prepared) -> Result<ArrayData> {
    storage_parts(p, host_buffer(&p.values)?)?.into_array_data()
}

/// A host tensor array: an `arrow.fixed_shape_tensor` type and its `FixedSizeList`
/// storage. arrow-rs keeps extension types on fields, so the pair travels together;
/// [`field`](Self::field) makes the tagged field for a schema.
///
/// ```
/// use devbuf::arrow::TensorArray;
/// use devbuf::zarr::NDBuffer;
/// let nd = NDBuffer::from_ndarray(ndarray::Array3::<f32>::zeros((2, 3, 4)).reversed_axes()); // F order
/// let t = nd.to_arrow_tensor()?;                        // zero-copy
/// assert_eq!(t.tensor_type().shape(), &[2, 3, 4]);     // physical: memory order
/// assert_eq!(t.tensor_type().logical_shape(), vec![4, 3, 2]);
/// let field = t.field("x")?;
/// let back = TensorArray::from_arrow(&field, &t.storage().clone())?;
/// assert_eq!(back.tensor(0)?.shape(), &[4, 3, 2]);
/// assert_eq!(back.tensor(0)?.strides(), nd.strides()); // the same F-order view
/// # Ok::<(), devbuf::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct TensorArray {
    tensor_type: TensorType,
    storage: FixedSizeListArray,
}

impl TensorArray {
    /// Pairs a tensor type with its storage, checking that the storage is a
    /// `FixedSizeList` of the type's element and list size.
    pub fn try_new(tensor_type: TensorType, storage: FixedSizeListArray) -> Result<TensorArray> {
        let list = tensor_type.list_size()?;
        let element = element_type_of(&storage.value_type())?;
        if usize::try_from(storage.value_length()).ok() != Some(list)
            || element != tensor_type.element()
        {
            return Err(Error::invalid(format!(
                "storage {} does not hold tensors of {} with shape {:?}",
                storage.data_type(),
                tensor_type.element(),
                tensor_type.shape()
            )));
        }
        Ok(TensorArray {
            tensor_type,
            storage,
        })
    }

    /// Reads a column: the tensor type from `field` ([`TensorType::from_field`]) and the
    /// storage from `array` (a `FixedSizeListArray` of the field's type).
    pub fn from_arrow(field: &Field, array: &dyn Array) -> Result<TensorArray> {
        let t = TensorType::from_field(field)?;
        let storage = array
            .as_any()
            .downcast_ref::<FixedSizeListArray>()
            .ok_or_else(|| {
                Error::invalid(format!(
                    "a {FIXED_SHAPE_TENSOR} column must be a FixedSizeListArray, got {}",
                    array.data_type()
                ))
            })?
            .clone();
        TensorArray::try_new(t, storage)
    }

    /// The extension type.
    pub fn tensor_type(&self) -> &TensorType {
        &self.tensor_type
    }

    /// The storage array.
    pub fn storage(&self) -> &FixedSizeListArray {
        &self.storage
    }

    /// The storage array, by value.
    pub fn into_storage(self) -> FixedSizeListArray {
        self.storage
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.storage.len()
    }

    /// True when there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.storage.is_empty()
    }

    /// A field named `name` of this type (not nullable), for a schema.
    pub fn field(&self, name: &str) -> Result<Field> {
        self.tensor_type.field(name, false)
    }

    /// Tensor `i` as an NDBuffer of the logical shape: a zero-copy view of the Arrow
    /// buffer whose strides follow the permutation (booleans are unpacked: a copy).
    /// Errors for nulls and `i` out of range.
    pub fn tensor(&self, i: usize) -> Result<NDBuffer> {
        self.rows(i, 1)?.get(&[0.into()])
    }

    /// Tensors `first .. first + n` as one NDBuffer of shape `[n, *logical_shape]`
    /// (zero-copy but for booleans).
    pub fn rows(&self, first: usize, n: usize) -> Result<NDBuffer> {
        tensor_rows(&self.tensor_type, &self.storage.to_data(), first, n)
    }

    /// All tensors as one NDBuffer of shape `[len, *logical_shape]` (zero-copy but for
    /// booleans).
    pub fn to_ndbuffer(&self) -> Result<NDBuffer> {
        self.rows(0, self.len())
    }
}

impl NDBuffer {
    /// The elements in C order as a flat host Arrow array of
    /// [`arrow_data_type`]`(element)`: **zero-copy** when the NDBuffer is C-contiguous,
    /// native-endian, aligned and not `bool` (the Arrow buffer points at this memory);
    /// otherwise one copy (see the [module docs](crate::arrow::tensor)). Device memory is
    /// an error (use [`to_device_array`](Self::to_device_array)).
    ///
    /// ```
    /// use arrow_array::{Array, Float64Array};
    /// use devbuf::zarr::NDBuffer;
    /// let nd = NDBuffer::from_ndarray(ndarray::arr2(&[[1.0f64, 2.0], [3.0, 4.0]]));
    /// let a = nd.to_arrow()?;
    /// let a = a.as_any().downcast_ref::<Float64Array>().unwrap();
    /// assert_eq!(a.values(), &[1.0, 2.0, 3.0, 4.0]);
    /// assert_eq!(a.values().as_ptr() as u64, nd.as_ndarray_like().memory.address()); // zero-copy
    /// let back = NDBuffer::from_arrow(a)?;
    /// assert_eq!(back.shape(), &[4]);
    /// assert_eq!(back.as_ndarray_like().memory.address(), nd.as_ndarray_like().memory.address());
    /// # Ok::<(), devbuf::Error>(())
    /// ```
    pub fn to_arrow(&self) -> Result<ArrayRef> {
        host_only(self, "to_arrow", "to_device_array")?;
        Ok(make_array(host_array(&prepare(self, Form::Flat)?)?))
    }

    /// [`to_arrow`](Self::to_arrow) as a typed `PrimitiveArray<T>`; `T` must be the
    /// Arrow type of the element (not for `bool` and complex, which are not primitive).
    ///
    /// ```
    /// use arrow_array::types::Int16Type;
    /// use devbuf::zarr::NDBuffer;
    /// let nd = NDBuffer::from_ndarray(ndarray::arr1(&[1i16, -2, 3]));
    /// assert_eq!(nd.to_primitive_array::<Int16Type>()?.values(), &[1, -2, 3]);
    /// # Ok::<(), devbuf::Error>(())
    /// ```
    pub fn to_primitive_array<T: ArrowPrimitiveType>(&self) -> Result<PrimitiveArray<T>> {
        let want = arrow_data_type(self.dtype().element());
        if T::DATA_TYPE != want {
            return Err(Error::invalid(format!(
                "the NDBuffer holds {} (Arrow {want}), not Arrow {}",
                self.dtype(),
                T::DATA_TYPE
            )));
        }
        let a = self.to_arrow()?;
        let data = a.to_data();
        Ok(PrimitiveArray::<T>::from(data))
    }

    /// The whole NDBuffer as one tensor (an `arrow.fixed_shape_tensor` array of
    /// length 1) on the host: **zero-copy** when it is dense in any axis order (C, F, a
    /// transposition), native-endian, aligned and not `bool` — the physical shape is
    /// then the memory order and the permutation restores the logical order; otherwise
    /// one copy into C order. Device memory is an error (use
    /// [`to_device_tensor`](Self::to_device_tensor)).
    ///
    /// ```
    /// use devbuf::zarr::{BufferPrototype, DataType, NDBuffer, Order};
    /// let nd = NDBuffer::create(&BufferPrototype::Host, &[2, 3], DataType::INT32, Order::F, None)?;
    /// let t = nd.to_arrow_tensor()?;
    /// assert_eq!(t.len(), 1);
    /// assert_eq!(t.tensor_type().shape(), &[3, 2]);
    /// assert_eq!(t.tensor_type().permutation(), Some(&[1, 0][..]));
    /// assert_eq!(t.tensor_type().logical_shape(), vec![2, 3]);
    /// # Ok::<(), devbuf::Error>(())
    /// ```
    pub fn to_arrow_tensor(&self) -> Result<TensorArray> {
        host_only(self, "to_arrow_tensor", "to_device_tensor")?;
        self.host_tensor(Form::Tensor)
    }

    /// Axis 0 as rows: an `arrow.fixed_shape_tensor` array of `shape[0]` tensors of
    /// shape `shape[1..]` on the host. **Zero-copy** when the NDBuffer is dense with
    /// axis 0 outermost (C order, or rows that are each F order, ...), native-endian,
    /// aligned and not `bool`; otherwise one copy into C order. 0-d NDBuffers are an
    /// error.
    ///
    /// ```
    /// use devbuf::zarr::NDBuffer;
    /// let nd = NDBuffer::from_ndarray(ndarray::Array3::<u8>::zeros((5, 2, 3)));
    /// let t = nd.to_arrow_tensor_rows()?;
    /// assert_eq!((t.len(), t.tensor_type().shape()), (5, &[2, 3][..]));
    /// # Ok::<(), devbuf::Error>(())
    /// ```
    pub fn to_arrow_tensor_rows(&self) -> Result<TensorArray> {
        host_only(self, "to_arrow_tensor_rows", "to_device_tensor_rows")?;
        self.host_tensor(Form::Rows)
    }

    fn host_tensor(&self, form: Form) -> Result<TensorArray> {
        let p = prepare(self, form)?;
        let data = host_array(&p)?;
        let t = p
            .tensor
            .ok_or_else(|| Error::invalid("internal: tensor form without a tensor type"))?;
        TensorArray::try_new(t, FixedSizeListArray::from(data))
    }

    /// A flat host Arrow array (any offset, no nulls) as a 1-d NDBuffer: **zero-copy**
    /// (a view of the Arrow buffer, kept alive by the NDBuffer) except for `Boolean`,
    /// which is unpacked into one byte per value. Complex numbers are
    /// `FixedSizeList<Float32 | Float64, 2>`. Nulls and other types are errors naming
    /// the type.
    ///
    /// ```
    /// use arrow_array::{Int32Array, StringArray};
    /// use devbuf::zarr::NDBuffer;
    /// let a = Int32Array::from(vec![1, 2, 3, 4]).slice(1, 2);
    /// let nd = NDBuffer::from_arrow(&a)?;
    /// assert_eq!(nd.to_ndarray::<i32>()?.into_raw_vec_and_offset().0, vec![2, 3]);
    /// assert!(NDBuffer::from_arrow(&Int32Array::from(vec![Some(1), None])).is_err());
    /// assert!(NDBuffer::from_arrow(&StringArray::from(vec!["a"])).is_err());
    /// # Ok::<(), devbuf::Error>(())
    /// ```
    pub fn from_arrow(array: &dyn Array) -> Result<NDBuffer> {
        flat_ndbuffer(&array.to_data())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_orders() {
        // C, F, a transposition, a strided view.
        assert_eq!(
            dense_order(&[2, 3, 4], &[48, 16, 4], 4),
            Some(vec![0, 1, 2])
        );
        assert_eq!(dense_order(&[2, 3, 4], &[4, 8, 24], 4), Some(vec![2, 1, 0]));
        assert_eq!(
            dense_order(&[2, 3, 4], &[12, 4, 24], 4),
            Some(vec![2, 0, 1])
        );
        assert_eq!(dense_order(&[2, 3, 4], &[96, 32, 8], 4), None);
        // Unit axes do not count; empty arrays are C.
        assert_eq!(dense_order(&[1, 3, 1], &[0, 4, 99], 4), Some(vec![0, 1, 2]));
        assert_eq!(dense_order(&[0, 3], &[4, 8], 4), Some(vec![0, 1]));
        assert_eq!(dense_order(&[], &[], 4), Some(vec![]));
    }

    #[test]
    fn permutation_is_the_inverse_of_the_memory_order() {
        // Logical [2, 3, 4] stored with axis 2 outermost, then 0, then 1.
        let order = vec![2, 0, 1];
        let phys: Vec<usize> = order.iter().map(|&a| [2, 3, 4][a]).collect();
        let t = TensorType::new(ElementType::Int8, &phys)
            .with_permutation(inverse(&order))
            .unwrap();
        assert_eq!(t.shape(), &[4, 2, 3]);
        assert_eq!(t.permutation(), Some(&[1, 2, 0][..]));
        assert_eq!(t.logical_shape(), vec![2, 3, 4]);
        // Logical strides: axis 0 -> 3, axis 1 -> 1, axis 2 -> 6 elements.
        assert_eq!(t.logical_strides(), vec![3, 1, 6]);
    }
}
