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
//! | [`memory`] | host-or-device memory as one value ([`Memory`](memory::Memory)) |
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
//! use arrow_array::Int32Array;
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
//! let array = Int32Array::try_from(tail.to_host()?)?;   // device -> page-locked -> Arrow
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

/// Internals that devbuf-zarr and devbuf-flight share with this crate (the crates are
/// separate, so these must be `pub`). Not API: no semver promise, not re-exported by
/// the facade `devbuf`. Users call the same operations on an
/// [`NDBuffer`](zarr::NDBuffer) (`set_scalar`, `astype`, `copy_order`, `all_equal`) or read
/// through `ZarrArray`.
#[doc(hidden)]
pub mod __private {
    pub use crate::cuda::transfer::{SlotUploads, UploadLane, as_lease_holder};
    pub use crate::error::helpers::{fmt_axes, panic_message, with_shared_source};
    pub use crate::memory::host_output::{HostOutput, prepare_output, zeroed_vec};
    pub use crate::memory::host_pool::release as release_host_pool;

    /// The width in bytes of the units a byte-order change of `t` reverses: its size,
    /// except for complex numbers (each part is swapped on its own).
    pub const fn swap_width(t: crate::ElementType) -> usize {
        t.swap_width()
    }

    /// The device kernels: fill, cast, strided copy (`layout`), unshuffle, byte swap,
    /// all-equal. Their host twins are [`host_ops`].
    pub mod ops {
        pub use crate::cuda::kernels::ops::*;
    }

    /// The host twins of [`ops`], with the same semantics.
    pub mod host_ops {
        pub use crate::memory::host_ops::*;
    }

    /// Copies into large results that bypass the caches.
    pub mod stream_copy {
        pub use crate::memory::stream_copy::*;
    }

    /// Arrow IPC on a context of the caller's and as the device batch (devbuf-flight).
    pub mod arrow {
        pub use crate::arrow::chunk_batch::chunk_batch_with_coords;
        pub use crate::arrow::ipc_format::read_device_record_batch;
    }

    /// Index resolution and bounding boxes of selections.
    pub mod index {
        pub use crate::zarr::index::{BoundingBox, Resolved, bounding_box, resolve};
    }

    /// nvCOMP's range checks, as `DecompressBatch`/`CompressBatch` run them first.
    pub mod nvcomp {
        pub use crate::cuda::nvcomp::plan::{check_compress_ranges, check_decompress_ranges};
    }

    /// Helpers the tests need from inside the layers (feature `test-support`; the facade
    /// re-exports this module as `devbuf::__test`).
    #[cfg(feature = "test-support")]
    pub mod testing {
        pub use crate::arrow::ipc_format_encode::serialize_like_device;
        pub use crate::cuda::ipc::testing::*;
        pub use crate::cuda::kernels::crc32::device_crc32;
        pub use crate::cuda::kernels::shipped_ptx;
        pub use crate::cuda::testing::*;
    }
}
