//! zarr's buffer layer — `ByteBuffer` (zarr-python's `Buffer`), `NDBuffer`, `BufferPrototype` and memory stores —
//! over host memory or a CUDA device, with zarr-python's behaviour.
//!
//! | zarr-python | devbuf |
//! |---|---|
//! | `zarr.core.buffer.Buffer` (cpu / gpu) | [`ByteBuffer`] over a [`Memory`](crate::memory::Memory) (host `Bytes` or a [`DeviceBuffer`](crate::cuda::DeviceBuffer)) |
//! | `zarr.core.buffer.NDBuffer` (cpu / gpu) | [`NDBuffer`]: memory + [`Dtype`] + shape + byte strides + offset |
//! | `BufferPrototype`, `default_buffer_prototype()` | [`BufferPrototype`], [`default_buffer_prototype`] |
//! | `zarr.config.enable_gpu()` | [`set_default_buffer_prototype`]`(BufferPrototype::Device(0))` |
//! | `zarr.abc.store.Store`, `ByteRequest` | [`Store`], [`ByteRequest`] |
//! | `MemoryStore`, `GpuMemoryStore` | [`MemoryStore`], [`DeviceMemoryStore`] |
//!
//! One type serves both memories: there is no `cpu::NDBuffer` / `gpu::NDBuffer` pair.
//! Each operation runs where the data is — on the device through the kernels of
//! `cuda::kernels::ops`, on the host through the same primitives computed on the CPU —
//! and the GPU tests check that both give identical results. `docs/zarr.md` has the
//! method-by-method correspondence and the design notes.
//!
//! The crate `devbuf-zarr` (`devbuf::zarr` with the facade's feature `zarr`) opens real
//! zarr v2/v3 arrays (on disk, in a [`Store`] or in object storage) and reads and writes
//! them as `NDBuffer`s on the host or a GPU (`docs/zarr.md`, "Real zarr stores").
//!
//! ```
//! use devbuf_core::zarr::{BufferPrototype, Dtype, NDBuffer, Order, Scalar};
//! let proto = BufferPrototype::Host; // BufferPrototype::Device(0) on a GPU
//! let mut chunk = NDBuffer::create(&proto, &[4, 4], Dtype::UINT16, Order::F, Some(Scalar::from(0u16)))?;
//! assert!(chunk.all_equal(Some(Scalar::from(0u16)), true)?); // an empty chunk: skip writing it
//! chunk.set_scalar(&[(1..3).into(), 2.into()], Scalar::from(7u16))?;
//! assert!(!chunk.all_equal(Some(Scalar::from(0u16)), true)?);
//! let bytes = chunk.to_buffer()?; // C-order bytes, as the bytes codec writes them
//! assert_eq!(bytes.len(), 32);
//! # Ok::<(), devbuf_core::Error>(())
//! ```

mod buffer;
mod dtype;
pub(crate) mod index;
mod layout;
mod ndbuffer;
mod prototype;
mod store;
mod store_async;
pub use buffer::ByteBuffer;
pub use dtype::{Dtype, Element, Endianness, Scalar, promote_types};
pub use index::{AxisSel, Slice};
pub use layout::Order;
pub use ndbuffer::{NDBuffer, NdArrayLike};
pub use prototype::{BufferPrototype, default_buffer_prototype, set_default_buffer_prototype};
pub use store::{ByteRequest, DeviceMemoryStore, MemoryStore, Store};
pub use store_async::AsyncStore;
