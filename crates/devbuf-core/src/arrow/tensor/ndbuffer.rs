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

fn host_array(p: &Prepared) -> Result<ArrayData> {
    storage_parts(p, host_buffer(&p.values)?)?.into_array_data()
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
    /// The elements in C order as one flat Arrow array of
    /// `DataType::from(element)`, where the NDBuffer lives: an arrow-rs array on the
    /// host ([`AnyArray::Host`]), a [`DeviceArray`] whose buffers stay on the GPU on a
    /// device ([`AnyArray::Device`]). **Zero-copy** (the Arrow values buffer is this
    /// NDBuffer's memory) when it is C-contiguous, native-endian, aligned and not
    /// `bool`; otherwise one copy on the side where the data lives (a strided gather, a
    /// byte swap, a realignment or bit-packing: `docs/arrow.md`).
    ///
    /// A typed host array: `nd.into_arrow()?.into_host()?.as_primitive::<T>()`
    /// (arrow-rs's `AsArray`).
    ///
    /// ```
    /// use arrow_array::{cast::AsArray, types::Float64Type};
    /// use devbuf_core::zarr::NDBuffer;
    /// let nd = NDBuffer::from_ndarray(ndarray::arr2(&[[1.0f64, 2.0], [3.0, 4.0]]));
    /// let a = nd.clone().into_arrow()?.into_host()?;
    /// let a = a.as_primitive::<Float64Type>();
    /// assert_eq!(a.values(), &[1.0, 2.0, 3.0, 4.0]);
    /// assert_eq!(a.values().as_ptr() as u64, nd.as_ndarray_like().memory.address()); // zero-copy
    /// let back = NDBuffer::from_arrow(a)?;
    /// assert_eq!(back.shape(), &[4]);
    /// assert_eq!(back.as_ndarray_like().memory.address(), nd.as_ndarray_like().memory.address());
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    ///
    /// On a device:
    ///
    /// ```no_run
    /// use devbuf_core::zarr::{BufferPrototype, Dtype, NDBuffer, Order};
    /// let nd = NDBuffer::create(&BufferPrototype::Device(0), &[1000], Dtype::INT64, Order::C, None)?;
    /// let a = nd.clone().into_arrow()?.into_device()?;
    /// assert_eq!(a.buffers()[0].address(), nd.as_ndarray_like().memory.address()); // zero-copy
    /// let back = NDBuffer::from_arrow(a)?;
    /// assert_eq!(back.as_ndarray_like().memory.address(), nd.as_ndarray_like().memory.address());
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn into_arrow(self) -> Result<AnyArray> {
        let p = prepare(&self, Form::Flat)?;
        Ok(match &p.values {
            Memory::Host(_) => AnyArray::Host(make_array(host_array(&p)?)),
            Memory::Device(_) => AnyArray::Device(device_array(&p)?),
        })
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
    /// let t = nd.into_tensor()?;
    /// assert_eq!(t.len(), 1);
    /// assert_eq!(t.tensor_type().shape(), &[3, 2]);
    /// assert_eq!(t.tensor_type().permutation(), Some(&[1, 0][..]));
    /// assert_eq!(t.tensor_type().logical_shape(), vec![2, 3]);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn into_tensor(self) -> Result<TensorArray> {
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
    /// let t = nd.into_tensor_rows()?;
    /// assert_eq!((t.len(), t.tensor_type().shape()), (5, &[2, 3][..]));
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn into_tensor_rows(self) -> Result<TensorArray> {
        self.tensor_array(Form::Rows)
    }

    /// The tensor forms, host or device: one preparation, then the storage over the
    /// prepared values where they live.
    fn tensor_array(&self, form: Form) -> Result<TensorArray> {
        let p = prepare(self, form)?;
        let storage = match &p.values {
            Memory::Host(_) => AnyArray::Host(make_array(host_array(&p)?)),
            Memory::Device(_) => AnyArray::Device(device_array(&p)?),
        };
        let t = p
            .tensor
            .ok_or_else(|| Error::invalid("internal: tensor form without a tensor type"))?;
        match storage {
            AnyArray::Host(_) => TensorArray::try_new(t, storage),
            AnyArray::Device(_) => Ok(TensorArray::new_unchecked(t, storage)),
        }
    }

    /// A flat Arrow array (any offset, no nulls), host or device, as a 1-d NDBuffer in
    /// the same memory: **zero-copy** (a view of the Arrow buffer, kept alive by the
    /// NDBuffer) except for `Boolean`, which is unpacked into one byte per value (on
    /// the device for a device array). Complex numbers are
    /// `FixedSizeList<Float32 | Float64, 2>`. Nulls and other types are errors naming
    /// the type. Takes anything that is an [`AnyArray`]: `&PrimitiveArray<T>` (any
    /// arrow-rs array by reference), `&dyn Array`, `ArrayRef`, `DeviceArray`.
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
    pub fn from_arrow(array: impl Into<AnyArray>) -> Result<NDBuffer> {
        match array.into() {
            AnyArray::Host(a) => flat_ndbuffer(&a.to_data()),
            AnyArray::Device(a) => flat_ndbuffer(&a),
        }
    }
}
