//! Host arrays: [`TensorArray`] and the NDBuffer methods that convert to and from
//! arrow-rs arrays.

use super::*;

pub(super) fn host_buffer(m: &Memory) -> Result<Buffer> {
    match m {
        Memory::Host(b) if b.is_empty() => Ok(MutableBuffer::new(0).into()),
        Memory::Host(b) => Ok(Buffer::from(b.clone())),
        Memory::Device(_) => Err(Error::invalid("internal: device memory for a host array")),
    }
}

pub(super) fn host_only(nd: &NDBuffer, what: &str, device_way: &str) -> Result<()> {
    if nd.is_device() {
        return Err(Error::invalid(format!(
            "{what} makes host Arrow arrays; this NDBuffer is on device {} (use {device_way}, \
             or to_prototype(&BufferPrototype::Host) first)",
            nd.as_ndarray_like().memory.device_ordinal().unwrap_or(0)
        )));
    }
    Ok(())
}

pub(super) fn host_array(p: &Prepared) -> Result<ArrayData> {
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
    pub(super) tensor_type: TensorType,
    pub(super) storage: FixedSizeListArray,
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

    pub(super) fn host_tensor(&self, form: Form) -> Result<TensorArray> {
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
