//! Helpers for tests of the transfer engine: states of the page-locked pool that only
//! the crate's own workers reach otherwise. Not part of the stable API.
//!
//! Only with the `test-support` feature (the crate's own tests turn it on). The IPC
//! helpers are in [`crate::cuda::ipc::testing`].

use super::context::Context;
use super::transfer::UploadLane;
use crate::error::Result;

/// One staging kit of a context's page-locked pool, held by the calling thread the way a
/// zarr read or write worker holds its upload lane (two page-locked buffers of
/// `slot_bytes` each, so `2 * slot_bytes` of the pool), until dropped.
///
/// While a thread holds one, the transfer engine does not wait for the pool on that
/// thread: a staged copy that finds the pool full goes through the driver instead.
pub struct StagingHold {
    _lane: UploadLane,
}

impl StagingHold {
    /// Takes a kit of two `slot_bytes` buffers out of `ctx`'s pool without waiting:
    /// `Ok(None)` when the pool is at its bound
    /// ([`TransferConfig::max_pinned_bytes`](crate::cuda::TransferConfig::max_pinned_bytes)).
    pub fn take(ctx: &Context, slot_bytes: usize) -> Result<Option<StagingHold>> {
        Ok(UploadLane::bare(ctx, slot_bytes, false)?.map(|lane| StagingHold { _lane: lane }))
    }
}
