//! Everything that lives on device 1 and across devices (issue 31): peer copies with
//! peer access on and off, both directions, blocking and on a stream of either device,
//! at odd offsets and sizes up to 1 GiB; IPC between processes that work on different
//! devices; a `ChunkBatch` and C Device Data Interface exports on device 1; a zarr read
//! into device 1 while device 0 reads; both devices used from many threads at once;
//! allocation counters, device memory pools and page-locked staging pools per device.
//!
//! Every test needs two GPUs and starts with `second_ctx`, which prints why it was
//! skipped on a machine with one. Tests that turn peer access off run alone
//! (`gpu_test_exclusive!`, so that no other test's peer copy races the change) and turn
//! it on again when they end, failed or not ([`PeerOnAgain`]). The cross-process tests
//! re-run this binary as the child (`multi_gpu::child_entry` with
//! `DEVBUF_MULTI_GPU_CHILD=<role>`; see tests/common/peer.rs).

use std::sync::Barrier;
use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::types::Float32Type;
use arrow_array::{Array, StructArray};
use cudarc::driver::sys;
use devbuf::ElementType;
use devbuf::Error;
use devbuf::arrow::c_device::{
    ARROW_DEVICE_CUDA, SyncEvent, export_array, export_stream, import_array, import_stream,
};
use devbuf::arrow::{ChunkBatch, ChunkGrid, DeviceArray};
use devbuf::cuda::{Context, DeviceBuffer, Stream};
use devbuf::ipc::IpcMemHandle;
use devbuf::zarr::{BufferPrototype, Dtype, NDBuffer};
use rand::Rng;

pub(crate) use crate::common::*;
use crate::corpus::{counts, serial};
use crate::peer::{Peer, env, fnv, say, wait_line};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
const GIB: usize = 1024 * MIB;

/// The first differing index, for readable failures of large comparisons.
#[track_caller]
fn assert_bytes(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    if got.len() != want.len() {
        panic!("{what}: {} bytes, expected {}", got.len(), want.len());
    }
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what}: bytes differ at {i} of {} (got {:#04x}, want {:#04x})",
            want.len(),
            got[i],
            want[i]
        );
    }
}

fn ok(r: sys::CUresult, what: &str) {
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "{what}");
}

/// Whether the driver has direct access from `from`'s context to `to`'s memory on,
/// found without changing it: enabling access that is on already is refused with
/// `PEER_ACCESS_ALREADY_ENABLED`; access that this probe did turn on is turned off again.
fn driver_peer_access(from: &Context, to: &Context) -> bool {
    // Safety: both are live contexts (their `Context`s are borrowed); flags must be 0.
    unsafe {
        ok(
            sys::cuCtxSetCurrent(from.as_raw() as sys::CUcontext),
            "cuCtxSetCurrent",
        );
        match sys::cuCtxEnablePeerAccess(to.as_raw() as sys::CUcontext, 0) {
            sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => true,
            sys::CUresult::CUDA_SUCCESS => {
                ok(
                    sys::cuCtxDisablePeerAccess(to.as_raw() as sys::CUcontext),
                    "cuCtxDisablePeerAccess (undoing the probe)",
                );
                false
            }
            sys::CUresult::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED => false,
            other => panic!("cuCtxEnablePeerAccess (probe): {other:?}"),
        }
    }
}

/// The device ordinal the driver says `addr` belongs to.
fn device_of_pointer(addr: u64) -> i32 {
    let mut ordinal: i32 = -1;
    // Safety: a valid out pointer for the attribute's `int`.
    let r = unsafe {
        sys::cuPointerGetAttribute(
            (&mut ordinal as *mut i32).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            addr,
        )
    };
    ok(
        r,
        &format!("cuPointerGetAttribute(DEVICE_ORDINAL, {addr:#x})"),
    );
    ordinal
}

/// Turns peer access between two contexts on again when dropped (also when the test
/// fails half-way), so that the tests after it find the pair as devbuf sets it up.
struct PeerOnAgain(Context, Context);

impl Drop for PeerOnAgain {
    fn drop(&mut self) {
        let _ = self.0.set_peer_access(&self.1, true);
    }
}

mod arrow;
mod copies;
mod ipc;
mod memory;
#[cfg(feature = "zarr")]
mod zarr;
