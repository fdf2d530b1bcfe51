//! Jobs: one transfer as the lanes see it (pieces, plan, claim counter, first error),
//! and the guards that close a job and wait for its lanes, also while unwinding.

use super::*;

// ---------------------------------------------------------------------------
// Jobs
// ---------------------------------------------------------------------------

#[derive(Default)]
pub(super) struct LaneState {
    pub(super) closed: bool,
    pub(super) active: usize,
}

/// One staged transfer, shared by the lanes that work on it.
pub(crate) struct Job {
    pub(super) dir: Dir,
    /// Host address of each piece (valid for its `PieceSpec::len` bytes).
    pub(super) host: Vec<Raw<*mut u8>>,
    pub(super) pieces: Vec<PieceSpec>,
    pub(super) plan: TransferPlan,
    pub(super) params: PackParams,
    pub(super) scatter: ScatterMode,
    pub(super) kernel: Option<Raw<CUfunction>>,
    pub(super) blocks: u32,
    /// Device ordinal (location hints of batch copies).
    pub(super) ordinal: usize,
    /// Staging buffer size of the kits this job uses.
    pub(super) kit_chunk: usize,
    pub(super) next: AtomicUsize,
    pub(super) failed: AtomicBool,
    pub(super) error: Mutex<Option<Error>>,
    pub(super) lanes: Mutex<LaneState>,
    pub(super) lanes_cv: Condvar,
}

impl Job {
    pub(super) fn claim(&self) -> Option<usize> {
        if self.failed.load(Ordering::SeqCst) {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::SeqCst);
        (i < self.plan.chunks.len()).then_some(i)
    }

    pub(super) fn exhausted(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
            || self.next.load(Ordering::SeqCst) >= self.plan.chunks.len()
    }

    pub(super) fn fail(&self, e: Error) {
        self.failed.store(true, Ordering::SeqCst);
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
        }
    }

    /// Joins as a lane unless the job is closed.
    pub(super) fn enter(&self) -> bool {
        let mut s = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        if s.closed {
            return false;
        }
        s.active += 1;
        true
    }

    pub(super) fn leave(&self) {
        let mut s = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        s.active -= 1;
        if s.active == 0 {
            self.lanes_cv.notify_all();
        }
    }

    /// Closes the job to new lanes and waits until every lane that joined has left.
    pub(super) fn close_and_wait(&self) {
        let mut s = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        s.closed = true;
        while s.active > 0 {
            s = self.lanes_cv.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Host pointer of `piece` plus `off`.
    ///
    /// # Safety
    /// `off` must be within the piece (the plan guarantees it for its ranges).
    pub(super) unsafe fn host_at(&self, piece: usize, off: usize) -> *mut u8 {
        // Safety: guaranteed by the caller; the piece's range is valid (job invariant).
        unsafe { self.host[piece].0.add(off) }
    }

    /// The CPU's part of chunk `ci`: host->device it gathers the chunk's host bytes
    /// into the staging buffer `stage` (a direct chunk at offset 0, packed segments at
    /// their offsets in the data region); device->host it scatters them from `stage`
    /// back to the host pieces.
    ///
    /// # Safety
    /// `stage` must be a staging buffer of `self.kit_chunk` bytes that no DMA uses now
    /// (device->host: whose DMA for this chunk has completed), and chunk `ci` must be
    /// claimed by the calling lane (each host byte belongs to one chunk, so no other
    /// lane touches the same host bytes).
    pub(super) unsafe fn stage_copy(&self, ci: usize, stage: *mut u8, dir: Dir) {
        let one = |piece: usize, piece_off: usize, stage_off: usize, len: usize| {
            // Safety: the plan keeps `piece_off + len` within the piece, whose host range
            // is valid for the job's life (readable host->device; writable and touched by
            // no one else device->host), and `stage_off + len` within the staging buffer
            // (planned for `chunk_bytes == kit_chunk`); host and staging memory are
            // distinct allocations.
            unsafe {
                let host = self.host_at(piece, piece_off);
                let staged = stage.add(stage_off);
                match dir {
                    Dir::HtoD => std::ptr::copy_nonoverlapping(host, staged, len),
                    Dir::DtoH => std::ptr::copy_nonoverlapping(staged, host, len),
                }
            }
        };
        match &self.plan.chunks[ci] {
            Chunk::Direct {
                piece,
                piece_off,
                len,
            } => one(*piece, *piece_off, 0, *len),
            Chunk::Packed { segs, .. } => {
                for s in &self.plan.segs[segs.clone()] {
                    one(
                        s.piece,
                        s.piece_off,
                        self.params.data_offset + s.stage_off,
                        s.len,
                    );
                }
            }
        }
    }
}

/// Leaves the job when dropped (also while unwinding).
pub(super) struct ActiveGuard<'a>(pub(super) &'a Job);
impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// Closes the job and waits for its lanes when dropped (also while unwinding), so the
/// caller's memory outlives every access to it.
pub(super) struct JobGuard<'a>(pub(super) &'a Job);
impl Drop for JobGuard<'_> {
    fn drop(&mut self) {
        self.0.close_and_wait();
    }
}

/// Holds a kit while a lane runs; on drop the kit's stream is synchronised and the kit
/// goes back to the pool, or is abandoned (leaked) when the stream cannot be confirmed
/// idle.
pub(super) struct LaneResourcesGuard<'a> {
    pub(super) pool: &'a StagingPool<LaneResources>,
    pub(super) kit: Option<LaneResources>,
}
impl Drop for LaneResourcesGuard<'_> {
    fn drop(&mut self) {
        if let Some(k) = self.kit.take() {
            if driver::ctx_set_current(k.ctx).is_ok()
                && driver::stream_synchronize(k.stream).is_ok()
            {
                self.pool.release(k);
            } else {
                self.pool.abandon(k);
            }
        }
    }
}
