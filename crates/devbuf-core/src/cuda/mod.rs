//! Everything that talks to the CUDA driver.
//!
//! * [`Context`]: one shared, cached context per device; device queries; allocation.
//! * [`DeviceBuffer`]: device memory with zero-copy slices and checked copies.
//! * [`IpcMemHandle`](crate::ipc::IpcMemHandle) / [`IpcEventHandle`](crate::ipc::IpcEventHandle):
//!   device memory and events shared with other processes without copies ([`crate::ipc`]).
//! * [`DeviceBufferReader`] / [`DeviceBufferWriter`]: device memory as a file
//!   (`std::io::Read`/`Write` + `Seek`).
//! * [`HostBuffer`]: page-locked host memory that converts to Arrow and `Bytes` without
//!   copying.
//! * The transfer engine ([`TransferConfig`], [`copy_many_from_host`], [`Pending`],
//!   [`scope`]): ordinary host memory at page-locked speed, many small pieces in few
//!   DMA transfers, stream-ordered asynchronous copies; and a stream-ordered device
//!   memory pool ([`Context::allocate_pooled`]).
//!
//! The driver (`libcuda`) is loaded at run time. On a machine without it, or without a
//! GPU, [`is_available`] is `false`, [`device_count`] is 0 and every other entry point
//! returns [`Error::CudaUnavailable`](crate::Error::CudaUnavailable) saying why; nothing
//! panics.
//!
//! This module knows nothing of Arrow or zarr; those layers build on it.

mod buffer;
mod context;
pub(crate) mod driver;
mod host;
mod io;
pub(crate) mod ipc;
// Shared with devbuf-zarr and devbuf-flight through `crate::__private`; not API.
pub(crate) mod kernels;
mod mempool;
pub mod nvcomp;
mod stream;
#[cfg(feature = "test-support")]
pub(crate) mod testing;
pub(crate) mod transfer;

pub use buffer::DeviceBuffer;
pub use context::{
    Context, DeviceProperties, device_count, driver_version, is_available, unavailable_reason,
};
pub use host::HostBuffer;
pub use io::{DeviceBufferReader, DeviceBufferWriter};
pub use mempool::DevicePoolStats;
pub use stream::{Event, EventFlags, Stream};
pub use transfer::{
    DirectMode, HostSink, HostSource, PageableMode, Pending, ScatterMode, ScopedPending,
    TransferConfig, TransferScope, TransferStats, copy_many_from_host, copy_many_to_host, scope,
};
