//! The Arrow C Device Data Interface: hand Arrow arrays to other libraries in the same
//! process — and take theirs — without copying, on CUDA devices, in page-locked host
//! memory or in ordinary host memory.
//!
//! The interface (Arrow's `format/CDeviceDataInterface.rst`) is the C Data Interface's
//! `ArrowArray` plus a device type, a device id and a synchronisation event; arrow-rs
//! has no implementation of it yet. The schema side is the C Data Interface's
//! `ArrowSchema`, for which devbuf uses arrow-rs's [`FFI_ArrowSchema`].
//!
//! | direction | CUDA (2) | CUDA_HOST (3) | CPU (1) |
//! |---|---|---|---|
//! | export | [`export_array`] of a [`DeviceArray`](crate::arrow::DeviceArray) with a [`SyncEvent`] ([`ExportDevice::Cuda`]) | [`export_array`] of an arrow-rs array in page-locked memory with [`ExportDevice::CudaHost`] | [`export_array`] of an arrow-rs array with [`ExportDevice::Cpu`] |
//! | import | [`import_array`] → [`AnyArray::Device`](crate::arrow::AnyArray) | [`import_array`] → `AnyArray::Host` | [`import_array`] → `AnyArray::Host` |
//! | streams | [`export_stream`], [`import_stream`] → [`StreamReader`] of `Batch::Device` | the same, `Batch::Host` | the same, `Batch::Host` ([`StreamReader::into_host_reader`] for an arrow-rs `RecordBatchReader`) |
//!
//! [`import_array`] takes any of the three and says which it was
//! ([`AnyArray::into_device`](crate::arrow::AnyArray::into_device) /
//! [`into_host`](crate::arrow::AnyArray::into_host) take the side you expect); a
//! consumer that takes one side only reads [`ArrowDeviceArray::device_type`] first and
//! leaves anything else untouched.

//! # Ownership
//!
//! * Everything is zero-copy: exported buffers are the arrays' own memory, imported
//!   buffers are the producer's memory (tests compare addresses).
//! * An exported structure owns what its buffers point at (clones of the device
//!   buffers or arrow-rs buffers) until the consumer calls its release callback. The
//!   callback releases the children and the dictionary that were not moved out; a child
//!   moved out is released on its own. Each runs exactly once and marks its structure
//!   released. No callback lets a panic unwind into its C caller (a panicking
//!   destructor is caught, a panicking stream source becomes an `EIO` error).
//! * An import moves the structure out of the caller's (which is left released, so a
//!   second import is an error, as the specification's "moving an array" says) and
//!   calls the producer's release callback exactly once, when the last imported buffer
//!   drops.
//! * Rust values of [`ArrowArray`], [`ArrowDeviceArray`] and [`ArrowDeviceArrayStream`]
//!   that are not released call their release callback when dropped.
//!
//! # The `sync_event` contract (CUDA)
//!
//! * Export: `sync_event` points at a `CUevent` recorded after the work that produced
//!   the data — by default on the **legacy default stream**, where devbuf's
//!   synchronous copies and kernels run ([`SyncEvent::DefaultStream`]); on a stream of
//!   your own with [`SyncEvent::Stream`]; or none ([`SyncEvent::None`]) when the data
//!   is known complete. The event lives until the base structure is released.
//! * Import: a consumer stream waits on the event on the device before any use of the
//!   data: the legacy default stream, or the stream passed as `on: Some(stream)` to
//!   [`import_array`] and [`import_stream`]. The host does not block, except where devbuf itself
//!   must read a value (the last offset of string/binary arrays, validity bits when
//!   `null_count` is -1): that small copy is ordered after the event. A CUDA_HOST
//!   import waits on the host (the CPU reads the data).
//!
//! # Types
//!
//! Every type arrow-rs has: null, boolean, all integer and float widths (incl.
//! `Float16`), decimals (32/64/128/256), dates, times, timestamps, durations,
//! intervals, (large) utf8/binary, fixed-size binary, (large) list, (large) list view,
//! fixed-size list, struct, map, sparse and dense union, run-end encoded, dictionary;
//! with offsets (slices) and nulls. View types (`Utf8View`, `BinaryView`) are
//! supported on the host but refused for CUDA with an error that says why (where their
//! variadic buffer sizes live is not settled for device arrays).
//!
//! # Errors, never undefined behaviour on checkable input
//!
//! Imports check what a foreign producer can get wrong before reading through it:
//! released structures, device types, negative lengths/offsets/null counts, buffer and
//! child counts that contradict the type, null buffers that must hold data, null
//! children, a missing or unexpected dictionary, schemas arrow-rs cannot parse. Device
//! pointers are checked with the driver (device memory of `device_id`, large enough).
//! What cannot be checked — that a host pointer really addresses as many bytes as the
//! type requires — is the producer's promise, as in every C Data Interface consumer;
//! the structures can only enter Rust through the `unsafe` `from_raw` functions.
//!
//! ```
//! use arrow_array::{Array, Int32Array};
//! use devbuf_core::arrow::c_device::{export_array, ExportDevice, import_array};
//! let a = Int32Array::from(vec![Some(1), None, Some(3)]).slice(1, 2);
//! let (mut c_array, c_schema) = export_array(&a, ExportDevice::Cpu)?;
//! let b = import_array(&mut c_array, &c_schema, None)?.into_host()?;
//! assert_eq!(b.as_ref(), &a as &dyn Array);
//! # Ok::<(), devbuf_core::Error>(())
//! ```

mod abi;
mod export;
mod import;
mod stream;
mod types;

pub use arrow_schema::ffi::FFI_ArrowSchema;

pub use abi::{
    ARROW_DEVICE_CPU, ARROW_DEVICE_CUDA, ARROW_DEVICE_CUDA_HOST, ARROW_DEVICE_CUDA_MANAGED,
    ARROW_DEVICE_EXT_DEV, ARROW_DEVICE_HEXAGON, ARROW_DEVICE_METAL, ARROW_DEVICE_ONEAPI,
    ARROW_DEVICE_OPENCL, ARROW_DEVICE_ROCM, ARROW_DEVICE_ROCM_HOST, ARROW_DEVICE_VPI,
    ARROW_DEVICE_VULKAN, ARROW_DEVICE_WEBGPU, ArrowArray, ArrowArrayRelease, ArrowDeviceArray,
    ArrowDeviceArrayStream, ArrowDeviceType,
};
#[doc(hidden)]
pub use abi::{StructLayout, layout_table};
pub use export::{ExportDevice, SyncEvent, export_array};
#[doc(hidden)]
pub use export::{live_exports, release_count};
pub use import::import_array;
pub use stream::{StreamReader, export_stream, import_stream};
