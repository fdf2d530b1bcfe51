//! [`AnyArray`]: an Arrow array in host memory (an arrow-rs array) or in device memory
//! (a [`DeviceArray`]), one value for "an array, wherever it lives".

use arrow_array::{Array, ArrayRef, make_array};
use arrow_schema::DataType;

use super::DeviceArray;
use crate::error::{Error, Result};
use crate::zarr::BufferPrototype;

/// An Arrow array on the host or on a device: what
/// [`NDBuffer::into_arrow`](crate::zarr::NDBuffer::into_arrow) makes,
/// [`NDBuffer::from_arrow`](crate::zarr::NDBuffer::from_arrow) and
/// [`TensorArray::try_from`](super::TensorArray) take, and the C Device Data Interface
/// exports and imports ([`c_device::export_array`](super::c_device::export_array),
/// [`c_device::import_array`](super::c_device::import_array)).
///
/// The two stay distinct types because their memory is owned differently (device
/// memory is never an `arrow_buffer::Buffer`, which derefs to `&[u8]`).
///
/// ```
/// use std::sync::Arc;
/// use arrow_array::{Array, ArrayRef, Int32Array, cast::AsArray, types::Int32Type};
/// use devbuf_core::arrow::AnyArray;
/// use devbuf_core::zarr::BufferPrototype;
/// let a = AnyArray::from(Arc::new(Int32Array::from(vec![1, 2, 3])) as ArrayRef);
/// assert_eq!((a.len(), a.prototype()), (3, BufferPrototype::Host));
/// assert!(a.as_device().is_none());
/// let host = a.into_host()?;
/// assert_eq!(host.as_primitive::<Int32Type>().values(), &[1, 2, 3]);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub enum AnyArray {
    /// Host memory (CPU or page-locked): an arrow-rs array.
    Host(ArrayRef),
    /// Device memory.
    Device(DeviceArray),
}

impl AnyArray {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            AnyArray::Host(a) => a.len(),
            AnyArray::Device(a) => a.len(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The Arrow data type.
    pub fn data_type(&self) -> &DataType {
        match self {
            AnyArray::Host(a) => a.data_type(),
            AnyArray::Device(a) => a.data_type(),
        }
    }

    /// Where the array lives: [`BufferPrototype::Host`], or the device of its buffers
    /// (an array without any buffer, of the `Null` type, answers device 0).
    pub fn prototype(&self) -> BufferPrototype {
        match self {
            AnyArray::Host(_) => BufferPrototype::Host,
            AnyArray::Device(a) => BufferPrototype::Device(a.device_ordinal().unwrap_or(0)),
        }
    }

    /// The host array (`None` for a device array).
    pub fn as_host(&self) -> Option<&ArrayRef> {
        match self {
            AnyArray::Host(a) => Some(a),
            AnyArray::Device(_) => None,
        }
    }

    /// The device array (`None` for a host array).
    pub fn as_device(&self) -> Option<&DeviceArray> {
        match self {
            AnyArray::Host(_) => None,
            AnyArray::Device(a) => Some(a),
        }
    }

    /// The host array, by value; an error for a device array (use
    /// [`to_host`](Self::to_host) to copy it).
    pub fn into_host(self) -> Result<ArrayRef> {
        match self {
            AnyArray::Host(a) => Ok(a),
            AnyArray::Device(a) => Err(Error::invalid(format!(
                "the {} array of {} elements is in device memory, not on the host (to_host() \
                 copies it)",
                a.data_type(),
                a.len()
            ))),
        }
    }

    /// The device array, by value; an error for a host array (use
    /// [`DeviceArray::from_host`] to copy it).
    pub fn into_device(self) -> Result<DeviceArray> {
        match self {
            AnyArray::Device(a) => Ok(a),
            AnyArray::Host(a) => Err(Error::invalid(format!(
                "the {} array of {} elements is in host memory, not on a device \
                 (DeviceArray::from_host copies it)",
                a.data_type(),
                a.len()
            ))),
        }
    }

    /// The array on the host: a clone of a host array (zero-copy), a device array copied
    /// and checked ([`DeviceArray::to_host`]).
    pub fn to_host(&self) -> Result<ArrayRef> {
        match self {
            AnyArray::Host(a) => Ok(a.clone()),
            AnyArray::Device(a) => a.to_host(),
        }
    }
}

impl From<ArrayRef> for AnyArray {
    /// Zero-copy.
    fn from(a: ArrayRef) -> AnyArray {
        AnyArray::Host(a)
    }
}

impl<T: Array> From<&T> for AnyArray {
    /// Zero-copy (the new array shares the buffers): `NDBuffer::from_arrow(&int32_array)`.
    fn from(a: &T) -> AnyArray {
        AnyArray::Host(make_array(a.to_data()))
    }
}

impl From<&dyn Array> for AnyArray {
    /// Zero-copy (the new array shares the buffers).
    fn from(a: &dyn Array) -> AnyArray {
        AnyArray::Host(make_array(a.to_data()))
    }
}

impl From<DeviceArray> for AnyArray {
    /// Zero-copy.
    fn from(a: DeviceArray) -> AnyArray {
        AnyArray::Device(a)
    }
}

impl From<&DeviceArray> for AnyArray {
    /// Zero-copy (a clone shares the device buffers).
    fn from(a: &DeviceArray) -> AnyArray {
        AnyArray::Device(a.clone())
    }
}
