//! Arrow interop.
//!
//! * Host, zero-copy: a page-locked [`HostBuffer`](crate::cuda::HostBuffer) *is* an
//!   [`arrow_buffer::Buffer`] ([`HostBuffer::into_arrow_buffer`](crate::cuda::HostBuffer::into_arrow_buffer)),
//!   and a device buffer reaches Arrow with exactly one copy over PCIe and none on the
//!   host ([`DeviceBuffer::to_arrow_buffer`](crate::cuda::DeviceBuffer::to_arrow_buffer),
//!   [`DeviceBuffer::to_arrow`](crate::cuda::DeviceBuffer::to_arrow)).
//!
//! Device memory is never wrapped in an `arrow_buffer::Buffer` (which derefs to `&[u8]`).

mod host;
