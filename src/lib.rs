//! # devbuf
//!
//! One buffer layer for Arrow pipelines and zarr chunk I/O, over host memory and CUDA
//! devices.
//!
//! This crate is the facade of a workspace whose crates are devbuf's layers; it
//! re-exports them behind features, as the `arrow` crate does for arrow-rs:
//!
//! | module | crate | feature | what it is for |
//! |---|---|---|---|
//! | [`cuda`] | `devbuf-core` | — | contexts, [`DeviceBuffer`](cuda::DeviceBuffer) (device memory with zero-copy slices and checked copies host↔device↔device), [`HostBuffer`](cuda::HostBuffer) (page-locked host memory), the transfer engine, IPC handles, streams, device kernels, nvCOMP |
//! | [`arrow`] | `devbuf-core` | — | conversions into arrow-rs types without host copies, device-resident arrays and record batches, Arrow IPC in device memory, the Arrow C Device Data Interface, NDBuffer tensors, `ChunkBatch` |
//! | [`ipc`] | `devbuf-core` | — | sharing buffers between processes: device memory handles, and shared host memory where there is no GPU |
//! | [`memory`] | `devbuf-core` | — | host-or-device memory as one value and the host twins of the device kernels |
//! | [`element`] | `devbuf-core` | — | the element types ([`ElementType`]) and comparison modes ([`EqualMode`]) that every layer shares |
//! | [`zarr`] | `devbuf-core`, `devbuf-zarr` | `zarr` for the arrays | zarr's buffer layer (`NDBuffer`, `BufferPrototype`, memory stores) on host or device; with `zarr`, real zarr v2/v3 arrays read onto the host or a GPU and written back (`zarr::ZarrArray`), with `object_store` also from object storage |
//! | `flight` | `devbuf-flight` | `flight` | an Arrow Flight server of zarr arrays and record batches, and a client that reads them into host or device memory |
//! | [`error`] | `devbuf-core` | — | the one [`Error`] type |
//!
//! The CUDA driver is loaded at run time: the crate builds without CUDA installed, and on
//! a machine without a GPU [`cuda::is_available`] is `false` and CUDA entry points return
//! [`Error::CudaUnavailable`] rather than panicking.
//!
//! ## Quick start
//!
//! ```no_run
//! use arrow_array::Int32Array;
//! use devbuf::cuda::{self, Context, DeviceBuffer};
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
//! # Ok::<(), devbuf::Error>(())
//! ```

// docs.rs (`--cfg docsrs`, nightly): badges naming the feature each item needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub use devbuf_core::{ElementType, EqualMode, Error, ErrorKind, ErrorSource, Result};
pub use devbuf_core::{arrow, cuda, element, error, ipc, memory};

/// zarr: the buffer layer of zarr-python (`NDBuffer`, `BufferPrototype`, memory stores;
/// from `devbuf-core`) and, with the feature `zarr`, real zarr v2/v3 arrays
/// (`ZarrArray`, from `devbuf-zarr`).
pub mod zarr {
    pub use devbuf_core::zarr::*;
    #[cfg(feature = "zarr")]
    #[cfg_attr(docsrs, doc(cfg(feature = "zarr")))]
    pub use devbuf_zarr::*;
}

/// Arrow Flight (feature `flight`, crate `devbuf-flight`): a server of zarr arrays and
/// record batches, and a client that reads them into host or device memory.
#[cfg(feature = "flight")]
#[cfg_attr(docsrs, doc(cfg(feature = "flight")))]
pub mod flight {
    pub use devbuf_flight::*;
}

/// Helpers the tests, examples and benchmarks need from inside the layers (feature
/// `test-support`, which devbuf's own dev-dependency turns on): the device kernels and
/// their host twins (`ops`, `host_ops`), `HostOutput`, nvCOMP's range checks, stream
/// gates and mapping counts, the Flight tickets' wire format (`flight::ticket`). Not part
/// of the API; no semver promise.
#[cfg(feature = "test-support")]
#[doc(hidden)]
pub mod __test {
    pub use devbuf_core::__private::nvcomp::{check_compress_ranges, check_decompress_ranges};
    pub use devbuf_core::__private::testing::*;
    pub use devbuf_core::__private::{HostOutput, host_ops, ops, swap_width};

    /// devbuf-flight's internals the Flight tests need (feature `flight`).
    #[cfg(feature = "flight")]
    pub mod flight {
        pub use devbuf_flight::__private::ticket;
    }
}

/// The README's examples are compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// docs/api.md (what you want, and the one call that does it): every example is compiled
/// as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../docs/api.md")]
struct ApiDoctests;
