//! Device-side [`NDBuffer`] ⇄ Arrow: the conversions of [`tensor`](super::tensor) with
//! [`DeviceArray`]s whose buffers stay on the GPU.

use arrow_schema::Field;

use super::device::DeviceArray;
use super::tensor::{
    Form, Prepared, TensorArray, TensorType, flat_ndbuffer, locate_tensor, prepare, storage_parts,
    tensor_rows,
};
use crate::error::{Error, Result};
use crate::memory::Memory;
use crate::zarr::NDBuffer;

fn device_only(nd: &NDBuffer, what: &str, host_way: &str) -> Result<()> {
    if nd.is_host() {
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

/// A device tensor array: an `arrow.fixed_shape_tensor` type and its `FixedSizeList`
/// storage as a [`DeviceArray`] (the [`TensorArray`] of device memory).
///
/// ```no_run
/// use devbuf::zarr::{BufferPrototype, DataType, NDBuffer, Order};
/// let nd = NDBuffer::create(&BufferPrototype::Device(0), &[4, 8, 8], DataType::FLOAT32, Order::C, None)?;
/// let t = nd.to_device_tensor_rows()?; // 4 tensors of [8, 8], zero-copy
/// assert_eq!(t.storage().children()[0].buffers()[0].address(), nd.as_ndarray_like().memory.address());
/// assert_eq!(t.tensor(3)?.shape(), &[8, 8]); // a device view, no copy
/// # Ok::<(), devbuf::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct DeviceTensorArray {
    tensor_type: TensorType,
    storage: DeviceArray,
}

impl DeviceTensorArray {
    /// Pairs a tensor type with device storage, checking that the storage is a
    /// `FixedSizeList` of the type's element and list size without nulls.
    pub fn try_new(tensor_type: TensorType, storage: DeviceArray) -> Result<DeviceTensorArray> {
        locate_tensor(&storage, &tensor_type)?;
        Ok(DeviceTensorArray {
            tensor_type,
            storage,
        })
    }

    /// Reads a column: the tensor type from `field` and the device storage.
    pub fn from_device(field: &Field, storage: &DeviceArray) -> Result<DeviceTensorArray> {
        DeviceTensorArray::try_new(TensorType::from_field(field)?, storage.clone())
    }

    /// The extension type.
    pub fn tensor_type(&self) -> &TensorType {
        &self.tensor_type
    }

    /// The storage array.
    pub fn storage(&self) -> &DeviceArray {
        &self.storage
    }

    /// The storage array, by value.
    pub fn into_storage(self) -> DeviceArray {
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

    /// Tensor `i` as a device NDBuffer of the logical shape: a zero-copy view (booleans
    /// are unpacked on the device: a copy).
    pub fn tensor(&self, i: usize) -> Result<NDBuffer> {
        self.rows(i, 1)?.get(&[0.into()])
    }

    /// Tensors `first .. first + n` as one device NDBuffer of shape
    /// `[n, *logical_shape]` (zero-copy but for booleans).
    pub fn rows(&self, first: usize, n: usize) -> Result<NDBuffer> {
        tensor_rows(&self.tensor_type, &self.storage, first, n)
    }

    /// All tensors as one device NDBuffer of shape `[len, *logical_shape]`.
    pub fn to_ndbuffer(&self) -> Result<NDBuffer> {
        self.rows(0, self.len())
    }

    /// Copies the storage to the host (one transfer per buffer).
    pub fn to_host(&self) -> Result<TensorArray> {
        let a = self.storage.to_host()?;
        let storage = a
            .as_any()
            .downcast_ref::<arrow_array::FixedSizeListArray>()
            .ok_or_else(|| Error::invalid("internal: tensor storage is not a FixedSizeList"))?
            .clone();
        TensorArray::try_new(self.tensor_type.clone(), storage)
    }
}

impl NDBuffer {
    /// The elements in C order as a flat [`DeviceArray`] whose buffers stay on the GPU:
    /// **zero-copy** (a slice of this NDBuffer's `DeviceBuffer`) when it is
    /// C-contiguous, native-endian, aligned and not `bool`; otherwise one device-side
    /// copy (strided gather, byte swap, realignment, or bit-packing for `bool`). Host
    /// memory is an error (use [`to_arrow`](Self::to_arrow)).
    ///
    /// ```no_run
    /// use devbuf::zarr::{BufferPrototype, DataType, NDBuffer, Order};
    /// let nd = NDBuffer::create(&BufferPrototype::Device(0), &[1000], DataType::INT64, Order::C, None)?;
    /// let a = nd.to_device_array()?;
    /// assert_eq!(a.buffers()[0].address(), nd.as_ndarray_like().memory.address()); // zero-copy
    /// let back = NDBuffer::from_device_array(&a)?;
    /// assert_eq!(back.as_ndarray_like().memory.address(), nd.as_ndarray_like().memory.address());
    /// # Ok::<(), devbuf::Error>(())
    /// ```
    pub fn to_device_array(&self) -> Result<DeviceArray> {
        device_only(self, "to_device_array", "to_arrow")?;
        device_array(&prepare(self, Form::Flat)?)
    }

    /// The whole NDBuffer as one tensor (length 1) of an `arrow.fixed_shape_tensor`
    /// device array: zero-copy when dense in any axis order, native-endian, aligned and
    /// not `bool` (permutation as in [`to_arrow_tensor`](Self::to_arrow_tensor)),
    /// otherwise one device-side copy.
    pub fn to_device_tensor(&self) -> Result<DeviceTensorArray> {
        device_only(self, "to_device_tensor", "to_arrow_tensor")?;
        self.device_tensor(Form::Tensor)
    }

    /// Axis 0 as rows of an `arrow.fixed_shape_tensor` device array (see
    /// [`to_arrow_tensor_rows`](Self::to_arrow_tensor_rows)).
    pub fn to_device_tensor_rows(&self) -> Result<DeviceTensorArray> {
        device_only(self, "to_device_tensor_rows", "to_arrow_tensor_rows")?;
        self.device_tensor(Form::Rows)
    }

    fn device_tensor(&self, form: Form) -> Result<DeviceTensorArray> {
        let p = prepare(self, form)?;
        let storage = device_array(&p)?;
        let t = p
            .tensor
            .ok_or_else(|| Error::invalid("internal: tensor form without a tensor type"))?;
        Ok(DeviceTensorArray {
            tensor_type: t,
            storage,
        })
    }

    /// A flat device array (any offset, no nulls) as a 1-d device NDBuffer: zero-copy (a
    /// slice of the array's buffer) except for `Boolean`, which is unpacked on the
    /// device. Nulls and unsupported types are errors naming the type.
    pub fn from_device_array(array: &DeviceArray) -> Result<NDBuffer> {
        flat_ndbuffer(array)
    }
}
