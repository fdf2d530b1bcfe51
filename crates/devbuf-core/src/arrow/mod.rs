//! Arrow interop.
//!
//! * Host, zero-copy: a page-locked [`HostBuffer`](crate::cuda::HostBuffer) *is* an
//!   [`arrow_buffer::Buffer`] (`Buffer::from(h)`, `PrimitiveArray::<T>::try_from(h)`),
//!   and a device buffer reaches Arrow with exactly one copy over PCIe and none on the
//!   host (`Buffer::from(d.to_host()?)`, see
//!   [`DeviceBuffer::to_host`](crate::cuda::DeviceBuffer::to_host)).
//! * Device-resident arrays: [`DeviceArray`] (data type, length, nulls, offset, device
//!   buffers, children, dictionary).
//! * The Arrow C Device Data Interface ([`c_device`]): export and import
//!   `ArrowDeviceArray` / `ArrowDeviceArrayStream` on CUDA, CUDA_HOST and CPU, zero-copy.
//! * Arrow IPC record batches in device or host memory ([`serialize_record_batch`] →
//!   [`Memory`](crate::memory::Memory), [`read_record_batch`] → [`Batch`], a
//!   [`DeviceRecordBatch`] on a device) and, as the host fallback for sharing, in shared
//!   host memory ([`serialize_record_batch_shared`]).
//! * zarr chunks ⇄ Arrow (`docs/arrow.md`): an
//!   [`NDBuffer`](crate::zarr::NDBuffer) becomes a flat array or an
//!   `arrow.fixed_shape_tensor` column ([`TensorArray`], host or device storage)
//!   without copying where the layout allows, on the host and on the device, and back.
//! * [`ChunkBatch`]: many chunks of an array (coordinates + one tensor column) as one
//!   record batch, in one host or device allocation.
//!
//! Device memory is never wrapped in an `arrow_buffer::Buffer` (which derefs to `&[u8]`).

mod any;
mod batch;
pub mod c_device;
pub(crate) mod chunk_batch;
mod device;
mod host;
pub(crate) mod ipc_format;
pub(crate) mod ipc_format_encode;
mod tensor;

pub use any::AnyArray;
pub use batch::Batch;
pub use chunk_batch::{CHUNK_COLUMN, CHUNK_GRID_METADATA_KEY, ChunkBatch, ChunkGrid};
pub use device::DeviceArray;
pub use ipc_format::{
    DeviceRecordBatch, read_record_batch, serialize_record_batch, serialize_record_batch_on,
    serialize_record_batch_shared,
};
pub use tensor::{FIXED_SHAPE_TENSOR, TensorArray, TensorType};
