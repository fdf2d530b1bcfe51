//! The NDBuffer methods that convert to and from Arrow: flat arrays (arrow-rs arrays on
//! the host, [`DeviceArray`]s on a device: two owners, one body) and tensor arrays
//! ([`TensorArray`], wherever the NDBuffer lives).

use super::*;

fn host_buffer(m: &Memory) -> Result<Buffer> {
    match m {
        Memory::Host(b) if b.is_empty() => Ok(MutableBuffer::new(0).into()),
        Memory::Host(b) => Ok(Buffer::from(b.clone())),
        Memory::Device(_) => Err(Error::invalid("internal: device memory for a host array")),
    }
}

fn host_only(nd: &NDBuffer, what: &str, device_way: &str) -> Result<()> {
    if nd.prototype().is_device() {
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

fn device_only(nd: &NDBuffer, what: &str, host_way: &str) -> Result<()> {
    if nd.prototype().is_host() {
        return Err(Error::invalid(format!(
            "{what} makes device arrays; this NDBuffer is in host memory (use {host_way}, or \
             to_prototype(&BufferPrototype::Device(n)) first)"
        )));
    }
    Ok(())
}

fn device_array(p: &Prepared) -> Result<DeviceArray> {
    let values = match &p.values {
        Memory::Device(d) => d.clone(),
        Memory::Host(_) => return Err(Error::invalid("internal: host memory for a device array")),
    };
    let parts = storage_parts(p, values)?;
    parts.validate()?;
    Ok(DeviceArray::from_parts(parts))
}

impl NDBuffer {
    /// The elements in C order as a flat host Arrow array of
    /// [`arrow_data_type`]`(element)`: **zero-copy** when the NDBuffer is C-contiguous,
    /// native-endian, aligned and not `bool` (the Arrow buffer points at this memory);
    /// otherwise one copy (when: `docs/arrow.md`). Device memory is
    /// an error (use [`to_device_array`](Self::to_device_array)).
    ///
    /// ```
    /// use arrow_array::{Array, Float64Array};
    /// use devbuf_core::zarr::NDBuffer;
    /// let nd = NDBuffer::from_ndarray(ndarray::arr2(&[[1.0f64, 2.0], [3.0, 4.0]]));
    /// let a = nd.to_arrow()?;
    /// let a = a.as_any().downcast_ref::<Float64Array>().unwrap();
    /// assert_eq!(a.values(), &[1.0, 2.0, 3.0, 4.0]);
    /// assert_eq!(a.values().as_ptr() as u64, nd.as_ndarray_like().memory.address()); // zero-copy
    /// let back = NDBuffer::from_arrow(a)?;
    /// assert_eq!(back.shape(), &[4]);
    /// assert_eq!(back.as_ndarray_like().memory.address(), nd.as_ndarray_like().memory.address());
    /// # Ok::<(), devbuf_core::Error>(())
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
    /// use devbuf_core::zarr::NDBuffer;
    /// let nd = NDBuffer::from_ndarray(ndarray::arr1(&[1i16, -2, 3]));
    /// assert_eq!(nd.to_primitive_array::<Int16Type>()?.values(), &[1, -2, 3]);
    /// # Ok::<(), devbuf_core::Error>(())
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
    /// length 1) in the memory where it lives (host: an arrow-rs array; device: a
    /// [`DeviceArray`] whose buffers stay on the GPU): **zero-copy** when it is dense in
    /// any axis order (C, F, a transposition), native-endian, aligned and not `bool` —
    /// the physical shape is then the memory order and the permutation restores the
    /// logical order; otherwise one copy into C order, on the side where the data lives.
    ///
    /// ```
    /// use devbuf_core::zarr::{BufferPrototype, Dtype, NDBuffer, Order};
    /// let nd = NDBuffer::create(&BufferPrototype::Host, &[2, 3], Dtype::INT32, Order::F, None)?;
    /// let t = nd.to_arrow_tensor()?;
    /// assert_eq!(t.len(), 1);
    /// assert_eq!(t.tensor_type().shape(), &[3, 2]);
    /// assert_eq!(t.tensor_type().permutation(), Some(&[1, 0][..]));
    /// assert_eq!(t.tensor_type().logical_shape(), vec![2, 3]);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn to_arrow_tensor(&self) -> Result<TensorArray> {
        self.tensor_array(Form::Tensor)
    }

    /// Axis 0 as rows: an `arrow.fixed_shape_tensor` array of `shape[0]` tensors of
    /// shape `shape[1..]`, in the memory where the NDBuffer lives. **Zero-copy** when
    /// the NDBuffer is dense with axis 0 outermost (C order, or rows that are each F
    /// order, ...), native-endian, aligned and not `bool`; otherwise one copy into C
    /// order. 0-d NDBuffers are an error.
    ///
    /// ```
    /// use devbuf_core::zarr::NDBuffer;
    /// let nd = NDBuffer::from_ndarray(ndarray::Array3::<u8>::zeros((5, 2, 3)));
    /// let t = nd.to_arrow_tensor_rows()?;
    /// assert_eq!((t.len(), t.tensor_type().shape()), (5, &[2, 3][..]));
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn to_arrow_tensor_rows(&self) -> Result<TensorArray> {
        self.tensor_array(Form::Rows)
    }

    /// The tensor forms, host or device: one preparation, then the storage over the
    /// prepared values where they live.
    fn tensor_array(&self, form: Form) -> Result<TensorArray> {
        let p = prepare(self, form)?;
        let storage = match &p.values {
            Memory::Host(_) => TensorStorage::Host(FixedSizeListArray::from(host_array(&p)?)),
            Memory::Device(_) => TensorStorage::Device(device_array(&p)?),
        };
        let t = p
            .tensor
            .ok_or_else(|| Error::invalid("internal: tensor form without a tensor type"))?;
        match storage {
            TensorStorage::Host(_) => TensorArray::try_new(t, storage),
            TensorStorage::Device(_) => Ok(TensorArray::new_unchecked(t, storage)),
        }
    }

    /// A flat host Arrow array (any offset, no nulls) as a 1-d NDBuffer: **zero-copy**
    /// (a view of the Arrow buffer, kept alive by the NDBuffer) except for `Boolean`,
    /// which is unpacked into one byte per value. Complex numbers are
    /// `FixedSizeList<Float32 | Float64, 2>`. Nulls and other types are errors naming
    /// the type.
    ///
    /// ```
    /// use arrow_array::{Int32Array, StringArray};
    /// use devbuf_core::zarr::NDBuffer;
    /// let a = Int32Array::from(vec![1, 2, 3, 4]).slice(1, 2);
    /// let nd = NDBuffer::from_arrow(&a)?;
    /// assert_eq!(nd.to_ndarray::<i32>()?.into_raw_vec_and_offset().0, vec![2, 3]);
    /// assert!(NDBuffer::from_arrow(&Int32Array::from(vec![Some(1), None])).is_err());
    /// assert!(NDBuffer::from_arrow(&StringArray::from(vec!["a"])).is_err());
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn from_arrow(array: &dyn Array) -> Result<NDBuffer> {
        flat_ndbuffer(&array.to_data())
    }

    /// The elements in C order as a flat [`DeviceArray`] whose buffers stay on the GPU
    /// (the device twin of [`to_arrow`](Self::to_arrow): the same preparation, a
    /// different owner): **zero-copy** (a slice of this NDBuffer's `DeviceBuffer`) when
    /// it is C-contiguous, native-endian, aligned and not `bool`; otherwise one
    /// device-side copy (strided gather, byte swap, realignment, or bit-packing for
    /// `bool`). Host memory is an error (use [`to_arrow`](Self::to_arrow)).
    ///
    /// ```no_run
    /// use devbuf_core::zarr::{BufferPrototype, Dtype, NDBuffer, Order};
    /// let nd = NDBuffer::create(&BufferPrototype::Device(0), &[1000], Dtype::INT64, Order::C, None)?;
    /// let a = nd.to_device_array()?;
    /// assert_eq!(a.buffers()[0].address(), nd.as_ndarray_like().memory.address()); // zero-copy
    /// let back = NDBuffer::from_device_array(&a)?;
    /// assert_eq!(back.as_ndarray_like().memory.address(), nd.as_ndarray_like().memory.address());
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn to_device_array(&self) -> Result<DeviceArray> {
        device_only(self, "to_device_array", "to_arrow")?;
        device_array(&prepare(self, Form::Flat)?)
    }

    /// A flat device array (any offset, no nulls) as a 1-d device NDBuffer: zero-copy (a
    /// slice of the array's buffer) except for `Boolean`, which is unpacked on the
    /// device. Nulls and unsupported types are errors naming the type.
    pub fn from_device_array(array: &DeviceArray) -> Result<NDBuffer> {
        flat_ndbuffer(array)
    }
}
