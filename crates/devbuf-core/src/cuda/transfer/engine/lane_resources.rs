//! Kits: one lane's resources (a stream, two events, two page-locked staging buffers,
//! lazily two device scratch buffers), pooled by the staging pool.

use super::*;

// ---------------------------------------------------------------------------
// Kits
// ---------------------------------------------------------------------------

/// One lane's resources: a stream, two events, two page-locked staging buffers and
/// (lazily) two device scratch buffers, all of `chunk` bytes.
pub(crate) struct LaneResources {
    pub(super) ctx: CUcontext,
    pub(super) stream: CUstream,
    pub(super) events: [CUevent; 2],
    pub(super) host: [*mut u8; 2],
    pub(super) scratch: [CUdeviceptr; 2],
    pub(super) chunk: usize,
    pub(super) scratch_bytes: Arc<AtomicUsize>,
}

// Safety: the kit exclusively owns its driver objects and memory; they may be used and
// freed from any thread.
unsafe impl Send for LaneResources {}

impl PoolItem for LaneResources {
    fn bytes(&self) -> usize {
        2 * self.chunk
    }
    fn chunk_bytes(&self) -> usize {
        self.chunk
    }
}

impl LaneResources {
    pub(super) fn new(
        ctx: CUcontext,
        chunk: usize,
        scratch_bytes: Arc<AtomicUsize>,
    ) -> Result<LaneResources> {
        driver::ctx_set_current(ctx)?;
        let mut k = LaneResources {
            ctx,
            stream: std::ptr::null_mut(),
            events: [std::ptr::null_mut(); 2],
            host: [std::ptr::null_mut(); 2],
            scratch: [0; 2],
            chunk,
            scratch_bytes,
        };
        // On any error `k` drops and frees what was made so far.
        // A blocking stream: ordered after earlier work on the legacy default stream
        // (kernels devbuf launched there), like the synchronous copies it replaces.
        k.stream = driver::stream_create(false)?;
        for i in 0..2 {
            k.events[i] = driver::event_create(false)?;
            k.host[i] = driver::mem_host_alloc(chunk).map_err(|e| {
                if driver::is_oom(&e) {
                    Error::invalid(format!(
                        "could not allocate a {chunk}-byte page-locked staging buffer ({e}); \
                         lower TransferConfig::chunk_bytes or max_pinned_bytes"
                    ))
                } else {
                    e.explain_driver(format_args!(
                        "allocating {chunk} bytes of page-locked staging buffer"
                    ))
                }
            })?;
            // Safety: `host[i]` was just allocated with `chunk` bytes and nothing else
            // refers to it. Zeroed once so that lent buffers are always initialised
            // (see `transfer::lane`, which hands them out as `&mut [u8]`).
            unsafe { std::ptr::write_bytes(k.host[i], 0, chunk) };
        }
        Ok(k)
    }

    /// Page-locked buffer `slot` (0 or 1): its address; `chunk_bytes()` long, initialised.
    pub(in crate::cuda::transfer) fn host_ptr(&self, slot: usize) -> *mut u8 {
        self.host[slot & 1]
    }

    /// Completion event `slot` (0 or 1).
    pub(in crate::cuda::transfer) fn event(&self, slot: usize) -> CUevent {
        self.events[slot & 1]
    }

    /// The context the kit belongs to.
    pub(in crate::cuda::transfer) fn context(&self) -> CUcontext {
        self.ctx
    }

    /// Device scratch buffer `slot`, allocated on first use (packed chunks only).
    pub(super) fn scratch(&mut self, slot: usize) -> Result<CUdeviceptr> {
        if self.scratch[slot] == 0 {
            self.scratch[slot] = driver::mem_alloc(self.chunk)?;
            self.scratch_bytes.fetch_add(self.chunk, Ordering::SeqCst);
        }
        Ok(self.scratch[slot])
    }
}

impl Drop for LaneResources {
    fn drop(&mut self) {
        if driver::ctx_set_current(self.ctx).is_err() {
            return; // cannot free without the context; leak rather than misuse
        }
        if !self.stream.is_null() {
            let _ = driver::stream_synchronize(self.stream);
            // Safety: the stream belongs to this kit and is not used after this.
            let _ = unsafe { driver::stream_destroy(self.stream) };
        }
        for e in self.events {
            if !e.is_null() {
                // Safety: the event belongs to this kit and is not used after this.
                let _ = unsafe { driver::event_destroy(e) };
            }
        }
        for h in self.host {
            if !h.is_null() {
                // Safety: from cuMemHostAlloc; the stream was synchronised above, so no
                // DMA uses it, and the kit is its only owner.
                let _ = unsafe { driver::mem_free_host(h) };
            }
        }
        for s in self.scratch {
            if s != 0 {
                // Safety: from cuMemAlloc; no work uses it any more (stream synchronised).
                let _ = unsafe { driver::mem_free(s) };
                self.scratch_bytes.fetch_sub(self.chunk, Ordering::SeqCst);
            }
        }
    }
}
