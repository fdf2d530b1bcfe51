//! # devbuf-core: devbuf's buffer layer
//!
//! One buffer layer for Arrow pipelines and zarr chunk I/O, over host memory and CUDA
//! devices.
//!
//! | module | what it is for |
//! |---|---|
//! | [`cuda`] | contexts, [`DeviceBuffer`](cuda::DeviceBuffer) (device memory with zero-copy slices and checked copies host↔device↔device), [`HostBuffer`](cuda::HostBuffer) (page-locked host memory), the transfer engine (ordinary memory at page-locked speed, batched and async copies), IPC handles, streams, device kernels |
//! | [`arrow`] | conversions into arrow-rs types without host copies, device-resident arrays and record batches, Arrow IPC in device memory, the Arrow C Device Data Interface, NDBuffer tensors, `ChunkBatch` |
//! | [`ipc`] | sharing buffers between processes: device memory handles, and shared host memory where there is no GPU |
//! | [`memory`] | host-or-device memory as one value ([`Memory`](memory::Memory)) and the host twins of the device kernels ([`host_ops`](memory::host_ops)) |
//! | [`element`] | the element types ([`ElementType`]) and comparison modes ([`EqualMode`]) that every layer shares |
//! | [`zarr`] | zarr-python's buffer layer (`ByteBuffer`, `NDBuffer`, `BufferPrototype`, memory stores) on host or device; real zarr v2/v3 arrays are the crate `devbuf-zarr` (the facade's feature `zarr`) |
//! | [`error`] | the one [`Error`] type |
//!
//! The CUDA driver is loaded at run time: the crate builds without CUDA installed, and on
//! a machine without a GPU [`cuda::is_available`] is `false` and CUDA entry points return
//! [`Error::CudaUnavailable`] rather than panicking.
//!
//! ## Quick start
//!
//! ```no_run
//! use arrow_array::types::Int32Type;
//! use devbuf_core::cuda::{self, Context, DeviceBuffer};
//!
//! if !cuda::is_available() {
//!     println!("no GPU: {}", cuda::unavailable_reason().unwrap_or_default());
//!     return Ok(());
//! }
//! let ctx = Context::new(0)?;
//! let values: Vec<i32> = (0..1000).collect();
//! let d = DeviceBuffer::from_slice(&ctx, &values)?;     // host -> device
//! let tail = d.slice(4 * 900, 4 * 100)?;                 // zero-copy slice
//! let array = tail.to_arrow::<Int32Type>()?;             // device -> page-locked -> Arrow
//! assert_eq!(array.value(0), 900);
//! # Ok::<(), devbuf_core::Error>(())
//! ```

// docs.rs (`--cfg docsrs`, nightly): badges naming the feature each item needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod arrow;
pub mod cuda;
pub mod element;
pub mod error;
mod handle_layout;
pub mod ipc;
pub mod memory;
pub mod zarr;

pub use element::{ElementType, EqualMode};
pub use error::{Error, ErrorKind, ErrorSource, Result};
