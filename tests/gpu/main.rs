//! GPU tests: one test binary, compiled on every machine.
//!
//! The tests run only with `--features cuda-tests` (on a machine with an NVIDIA driver
//! and GPU); without the feature they are reported as *ignored*, never as passed.
//! `scripts/gpu-bundle.sh` builds this binary for the GPU machine.
//!
//! Conventions: random data (never only zeros), compare against the host path or a CPU
//! oracle, check zero-copy claims by address. Tests that need two GPUs print why they
//! were skipped on one.

#[path = "../common/arrays.rs"]
mod arrays;
#[path = "../common/batches.rs"]
mod batches;
#[path = "../common/c_device_corpus.rs"]
mod corpus;
#[macro_use]
mod common;
mod c_device;
mod core;
mod faults;
#[cfg(feature = "flight")]
mod flight;
mod ipc;
#[path = "../common/ipc_messages.rs"]
mod ipc_messages;
mod kernels;
mod multi_gpu;
mod nvcomp;
#[cfg(feature = "object_store")]
mod object_store;
#[path = "../common/peer.rs"]
mod peer;
mod pending_async;
#[cfg(feature = "zarr")]
mod progress;
#[path = "../common/random.rs"]
mod random;
mod shuffle;
#[cfg(feature = "zarr")]
mod spread;
mod tensor;
mod transfer;
mod zarr;
#[cfg(feature = "object_store")]
mod zarr_async;
#[cfg(feature = "zarr")]
mod zarrs;
#[cfg(feature = "zarr")]
mod zarrs_blosc;
#[cfg(feature = "zarr")]
mod zarrs_pieces;
#[cfg(feature = "zarr")]
mod zarrs_write;
