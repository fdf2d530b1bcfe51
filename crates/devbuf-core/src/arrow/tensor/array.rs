//! [`TensorArray`]: an `arrow.fixed_shape_tensor` column whose storage lives on the host
//! or on a device (an [`AnyArray`], one value), with one set of methods for both.

use super::*;

/// A tensor array: an `arrow.fixed_shape_tensor` type and its `FixedSizeList` storage,
/// on the host or on a device (an [`AnyArray`]). arrow-rs keeps extension types on
/// fields, so the pair travels together; `tensor_type().field(name, nullable)` makes the
/// tagged field for a schema.
///
/// ```
/// use devbuf_core::arrow::{TensorArray, TensorType};
/// use devbuf_core::zarr::NDBuffer;
/// let nd = NDBuffer::from_ndarray(ndarray::Array3::<f32>::zeros((2, 3, 4)).reversed_axes()); // F order
/// let t = nd.clone().into_tensor()?;                   // zero-copy
/// assert_eq!(t.tensor_type().shape(), &[2, 3, 4]);     // physical: memory order
/// assert_eq!(t.tensor_type().logical_shape(), vec![4, 3, 2]);
/// // A column read back: the tensor type from the field, the storage from the array.
/// let field = t.tensor_type().field("x", false)?;
/// let back = TensorArray::try_new(TensorType::from_field(&field)?, t.into_storage())?;
/// assert_eq!(back.tensor(0)?.shape(), &[4, 3, 2]);
/// assert_eq!(back.tensor(0)?.strides(), nd.strides()); // the same F-order view
/// # Ok::<(), devbuf_core::Error>(())
/// ```
///
/// The same on a device (the storage is a [`DeviceArray`] over the GPU's memory):
///
/// ```no_run
/// use devbuf_core::zarr::{BufferPrototype, Dtype, NDBuffer, Order};
/// let nd = NDBuffer::create(&BufferPrototype::Device(0), &[4, 8, 8], Dtype::FLOAT32, Order::C, None)?;
/// let t = nd.clone().into_tensor_rows()?; // 4 tensors of [8, 8], zero-copy
/// let storage = t.storage().as_device().unwrap();
/// assert_eq!(storage.children()[0].buffers()[0].address(), nd.as_ndarray_like().memory.address());
/// assert_eq!(t.tensor(3)?.shape(), &[8, 8]); // a device view, no copy
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct TensorArray {
    tensor_type: TensorType,
    storage: AnyArray,
}

impl TensorArray {
    /// Pairs a tensor type with its storage (host or device), checking that the storage
    /// is a `FixedSizeList` of the type's element and list size (on the device also
    /// that it has no nulls and its buffers are large enough).
    ///
    /// A column of a record batch: `TensorArray::try_new(TensorType::from_field(field)?,
    /// column)` (arrow-rs keeps the extension type on the field, not on the array).
    pub fn try_new(tensor_type: TensorType, storage: impl Into<AnyArray>) -> Result<TensorArray> {
        let storage = storage.into();
        match &storage {
            AnyArray::Host(s) => {
                let s = host_list(s.as_ref())?;
                let list = tensor_type.list_size()?;
                let element = element_type_of(&s.value_type())?;
                if usize::try_from(s.value_length()).ok() != Some(list)
                    || element != tensor_type.element()
                {
                    return Err(Error::invalid(format!(
                        "storage {} does not hold tensors of {} with shape {:?}",
                        s.data_type(),
                        tensor_type.element(),
                        tensor_type.shape()
                    )));
                }
            }
            AnyArray::Device(s) => {
                locate_tensor(s, &tensor_type)?;
            }
        }
        Ok(TensorArray {
            tensor_type,
            storage,
        })
    }

    /// A tensor array built by this crate, whose storage matches its type by
    /// construction (no check).
    pub(super) fn new_unchecked(tensor_type: TensorType, storage: AnyArray) -> TensorArray {
        TensorArray {
            tensor_type,
            storage,
        }
    }

    /// The extension type.
    pub fn tensor_type(&self) -> &TensorType {
        &self.tensor_type
    }

    /// The storage array (a `FixedSizeList`), on the host or on a device.
    pub fn storage(&self) -> &AnyArray {
        &self.storage
    }

    /// The storage array, by value.
    pub fn into_storage(self) -> AnyArray {
        self.storage
    }

    /// Where the storage lives: [`BufferPrototype::Host`] or the device of its buffers.
    pub fn prototype(&self) -> BufferPrototype {
        self.storage.prototype()
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.storage.len()
    }

    /// True when there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.storage.is_empty()
    }

    /// Tensor `i` as an NDBuffer of the logical shape, in the storage's memory: a
    /// zero-copy view of the Arrow buffer whose strides follow the permutation
    /// (booleans are unpacked where they live: a copy). Errors for nulls and `i` out of
    /// range.
    pub fn tensor(&self, i: usize) -> Result<NDBuffer> {
        self.rows(i, 1)?.get(&[0.into()])
    }

    /// Tensors `first .. first + n` as one NDBuffer of shape `[n, *logical_shape]`
    /// (zero-copy but for booleans), in the storage's memory; all of them:
    /// `rows(0, t.len())`.
    pub fn rows(&self, first: usize, n: usize) -> Result<NDBuffer> {
        match &self.storage {
            AnyArray::Host(s) => tensor_rows(&self.tensor_type, &s.to_data(), first, n),
            AnyArray::Device(s) => tensor_rows(&self.tensor_type, s, first, n),
        }
    }

    /// The same tensors with host storage: a clone of a host array; a device array's
    /// storage copied to the host (one transfer per buffer).
    pub fn to_host(&self) -> Result<TensorArray> {
        let d = match &self.storage {
            AnyArray::Host(_) => return Ok(self.clone()),
            AnyArray::Device(d) => d,
        };
        TensorArray::try_new(self.tensor_type.clone(), d.to_host()?)
    }
}

/// A host tensor storage as the `FixedSizeListArray` it must be.
fn host_list(array: &dyn Array) -> Result<&FixedSizeListArray> {
    array
        .as_any()
        .downcast_ref::<FixedSizeListArray>()
        .ok_or_else(|| {
            Error::invalid(format!(
                "a {FIXED_SHAPE_TENSOR} column must be a FixedSizeListArray, got {}",
                array.data_type()
            ))
        })
}
