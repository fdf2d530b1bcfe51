//! [`UploadLane`]: a staging kit of the context's page-locked pool lent to a producer
//! outside the transfer engine (the zarr read engine's decoders), so the crate keeps
//! one page-locked pool with one bound.
//!
//! A lane has two page-locked slots, two device scratch buffers of the same size, its
//! own stream and the kit's two events. The producer fills a slot on the CPU (decoding
//! into it), [`submit`](UploadLane::submit)s it: one DMA into the slot's scratch buffer,
//! then whatever device work the producer queues on the stream to read the scratch
//! (placement kernels), then the slot's event. While that runs the producer fills the
//! other slot; a slot is handed out again only after its event completed, so the CPU
//! never writes memory a DMA still reads.
//!
//! A [`bare`](UploadLane::bare) lane has no scratch buffers: its producer copies the
//! slot's ranges into device memory of its own, on a stream of its own, from any of its
//! threads while the slot is being filled ([`slot_uploads`](UploadLane::slot_uploads)),
//! and the slot's event is recorded right after those copies
//! ([`uploaded`](UploadLane::uploaded)), so the slot is free again as soon as its bytes
//! are on the device, whatever the producer queues after it (the GPU decode workers
//! keep several decodes in flight on their own streams this way).
//!
//! A thread that holds a lane's kit must never wait for another kit: the zarr write
//! engine's workers store encoded chunks (a host-to-device copy into a
//! `DeviceMemoryStore`) while they hold their lanes, and when the lanes of all workers
//! filled the pool, each worker's copy waited for a kit that only the waiting workers
//! could release (a hang). The lane counts its lease in a thread-local
//! ([`lease_held_here`]); the transfer engine does not wait for staging on a thread
//! that holds one, and copies through the driver instead when the pool is full.

use std::cell::Cell;
use std::sync::Arc;
use std::thread::ThreadId;

use super::engine::{LaneResources, Shared};
use crate::cuda::buffer::DeviceBuffer;
use crate::cuda::context::Context;
use crate::cuda::driver;
use crate::cuda::stream::Stream;
use crate::error::{Error, Result};

thread_local! {
    /// Staging kits leased to upload lanes by this thread and not yet given back.
    static LEASED_HERE: Cell<usize> = const { Cell::new(0) };
}

/// Whether the calling thread holds the staging kit of an [`UploadLane`] (then it must
/// not wait for another kit: the kits it would wait for may all be held by threads
/// waiting the same way).
pub(crate) fn lease_held_here() -> bool {
    LEASED_HERE.with(|n| n.get() > 0)
}

/// Runs `f` on this thread as on a thread that holds a lane's kit: copies in it do not
/// wait for the page-locked pool (they go through the driver when it is full). For work
/// a lane holder hands to other threads and waits for (the write engine's parallel
/// stores on rayon's pool): those threads would otherwise wait for kits that only the
/// waiting holder could release.
pub fn as_lease_holder<T>(f: impl FnOnce() -> T) -> T {
    struct Held;
    impl Drop for Held {
        fn drop(&mut self) {
            LEASED_HERE.with(|n| n.set(n.get().saturating_sub(1)));
        }
    }
    LEASED_HERE.with(|n| n.set(n.get() + 1));
    let _held = Held;
    f()
}

/// A producer's double-buffered path to the device through the page-locked pool.
pub struct UploadLane {
    shared: Arc<Shared>,
    kit: Option<LaneResources>,
    /// The thread whose [`LEASED_HERE`] counts this lane's kit. A lane dropped on
    /// another thread leaves that count raised: the creating thread's staged copies then
    /// go through the driver when the pool is full instead of waiting (slower, never
    /// wrong).
    leased_on: ThreadId,
    stream: Stream,
    /// The slots' device scratch buffers (`None` for a bare lane).
    scratch: Option<[DeviceBuffer; 2]>,
    slot: usize,
    /// Whether slot `i` has work queued that its event covers.
    queued: [bool; 2],
    bytes: usize,
}

/// Copies of byte ranges of an [`UploadLane`]'s current slot into the same offsets of
/// a device buffer, queued on one stream by whichever thread filled them
/// ([`UploadLane::slot_uploads`]).
pub struct SlotUploads<'a> {
    /// The slot's first byte (page-locked, `bytes` long).
    ptr: *const u8,
    bytes: usize,
    ctx: driver::CUcontext,
    dst: &'a DeviceBuffer,
    stream: &'a Stream,
}

// Safety: the handle holds the address of a page-locked slot that the lane keeps
// allocated (and does not hand out again) until the slot's event, recorded after the
// copies by `UploadLane::uploaded`, has completed; the copies only read it. Queueing
// copies on one stream from several threads is safe in the driver.
unsafe impl Send for SlotUploads<'_> {}
// Safety: as for `Send`; `copy` takes `&self` and only queues driver work.
unsafe impl Sync for SlotUploads<'_> {}

impl SlotUploads<'_> {
    /// Queues one DMA of the slot's bytes `r` into the same offsets of the destination,
    /// on the stream, and returns without waiting. The caller has finished writing
    /// those bytes and does not write them again while the slot is out: the copy reads
    /// them later.
    pub fn copy(&self, r: std::ops::Range<usize>) -> Result<()> {
        if r.start > r.end || r.end > self.bytes || r.end > self.dst.len() {
            return Err(Error::invalid(format!(
                "upload lane: bytes {}..{} of a slot of {} bytes into a buffer of {} bytes",
                r.start,
                r.end,
                self.bytes,
                self.dst.len()
            )));
        }
        if r.is_empty() {
            return Ok(());
        }
        driver::ctx_set_current(self.ctx)?;
        // Safety: `ptr` is the lane's page-locked slot, valid for `bytes >= r.end` bytes
        // (checked above) until the slot's event, recorded after this copy on the same
        // stream (`UploadLane::uploaded`), has completed; the caller writes these bytes
        // no more. `dst` is a writable device buffer of the lane's context (checked by
        // `slot_uploads`) of at least `r.end` bytes, kept alive by the caller until the
        // stream's work is done.
        unsafe {
            driver::transfer::memcpy_htod_async(
                self.dst.address() + r.start as u64,
                self.ptr.add(r.start),
                r.len(),
                self.stream.raw(),
            )
        }
    }
}

impl UploadLane {
    /// A lane with two slots of `slot_bytes` each (and two device scratch buffers of
    /// that size, from the context's stream-ordered pool). The kit comes from the
    /// context's page-locked pool: when the pool is at its bound this waits for a
    /// release if `wait`, else returns `Ok(None)`.
    pub fn new(ctx: &Context, slot_bytes: usize, wait: bool) -> Result<Option<UploadLane>> {
        Self::make(ctx, slot_bytes, wait, true, None)
    }

    /// [`new`](Self::new), with its work queued on `stream` (shared with other lanes)
    /// instead of a stream of its own. A device has few hardware queues (8 unless
    /// `CUDA_DEVICE_MAX_CONNECTIONS` says otherwise) and streams beyond them share one:
    /// a lane's copy then waits behind whatever long kernel another stream queued there
    /// (a GPU decode). Lanes that share a few streams keep their short copies and
    /// placements off the queues the decoders use.
    pub fn new_on(
        ctx: &Context,
        slot_bytes: usize,
        wait: bool,
        stream: &Stream,
    ) -> Result<Option<UploadLane>> {
        Self::make(ctx, slot_bytes, wait, true, Some(stream))
    }

    /// A lane with two page-locked slots of `slot_bytes` each and no device scratch
    /// buffers: for [`slot_uploads`](Self::slot_uploads) only. Waits for the pool as
    /// [`new`](Self::new).
    pub fn bare(ctx: &Context, slot_bytes: usize, wait: bool) -> Result<Option<UploadLane>> {
        Self::make(ctx, slot_bytes, wait, false, None)
    }

    /// [`bare`](Self::bare) without a stream of its own (`stream`: one the caller
    /// already has; a bare lane queues nothing on it, its drop waits for it).
    pub fn bare_on(
        ctx: &Context,
        slot_bytes: usize,
        wait: bool,
        stream: &Stream,
    ) -> Result<Option<UploadLane>> {
        Self::make(ctx, slot_bytes, wait, false, Some(stream))
    }

    fn make(
        ctx: &Context,
        slot_bytes: usize,
        wait: bool,
        with_scratch: bool,
        stream: Option<&Stream>,
    ) -> Result<Option<UploadLane>> {
        if slot_bytes == 0 {
            return Err(Error::invalid(
                "an upload lane needs slots of at least one byte",
            ));
        }
        let shared = super::engine(ctx).shared.clone();
        let Some(kit) = shared.lease_kit(slot_bytes, wait)? else {
            return Ok(None);
        };
        // From here on a failure gives the kit back (nothing was queued with it).
        let made = (|| {
            let stream = match stream {
                Some(s) if s.context().same_as(ctx) => s.clone(),
                Some(_) => {
                    return Err(Error::invalid(
                        "upload lane: the stream belongs to another context",
                    ));
                }
                None => Stream::new(ctx)?,
            };
            if !with_scratch {
                return Ok::<_, Error>((stream, None));
            }
            let a = ctx.allocate_pooled(slot_bytes, Some(&stream))?;
            let b = ctx.allocate_pooled(slot_bytes, Some(&stream))?;
            Ok((stream, Some([a, b])))
        })();
        match made {
            Ok((stream, scratch)) => Ok(Some(UploadLane {
                shared,
                kit: Some(kit),
                leased_on: {
                    LEASED_HERE.with(|n| n.set(n.get() + 1));
                    std::thread::current().id()
                },
                stream,
                scratch,
                slot: 0,
                queued: [false; 2],
                bytes: slot_bytes,
            })),
            Err(e) => {
                shared.return_kit(kit, true);
                Err(e)
            }
        }
    }

    /// This lane with device scratch buffers (a [`bare`](Self::bare) lane gets two of
    /// its slot size from the context's stream-ordered pool; a lane that has them is
    /// returned as is), so that it can [`submit`](Self::submit): a producer that
    /// uploaded into its own memory goes on with the same page-locked kit. Copies still
    /// queued from its slots are waited for by [`slot`](Self::slot) as always.
    pub fn with_scratch(mut self) -> Result<UploadLane> {
        if self.scratch.is_none() {
            let ctx = self.stream.context().clone();
            let a = ctx.allocate_pooled(self.bytes, Some(&self.stream))?;
            let b = ctx.allocate_pooled(self.bytes, Some(&self.stream))?;
            self.scratch = Some([a, b]);
        }
        Ok(self)
    }

    /// Bytes of each slot.
    pub fn slot_bytes(&self) -> usize {
        self.bytes
    }

    fn kit(&self) -> Result<&LaneResources> {
        self.kit
            .as_ref()
            .ok_or_else(|| Error::invalid("upload lane used after its lane_resources was returned"))
    }

    fn scratch(&self, slot: usize) -> Result<&DeviceBuffer> {
        self.scratch
            .as_ref()
            .map(|s| &s[slot & 1])
            .ok_or_else(|| Error::invalid("a bare upload lane has no device scratch buffers"))
    }

    /// The current slot, for the CPU to fill, once the work that last read it finished.
    pub fn slot(&mut self) -> Result<&mut [u8]> {
        let (event, ptr, ctx) = {
            let kit = self.kit()?;
            (kit.event(self.slot), kit.host_ptr(self.slot), kit.context())
        };
        if self.queued[self.slot] {
            driver::ctx_set_current(ctx)?;
            driver::event_synchronize(event)?;
            self.queued[self.slot] = false;
        }
        // Safety: the kit's buffer `slot` holds `bytes` initialised bytes (zeroed when
        // the kit was made); the lane owns the kit exclusively, no DMA reads the slot any
        // more (its event completed above, or nothing was queued), and the returned
        // borrow of `self` keeps `submit` from queueing a DMA while it lives.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr, self.bytes) })
    }

    /// Copies the first `used` bytes of the current slot to the start of the slot's
    /// device scratch buffer, lets `place(stream, scratch)` queue work on the lane's
    /// stream that reads the scratch, records the slot's event and moves to the other
    /// slot. Returns without waiting for the copy.
    pub fn submit(
        &mut self,
        used: usize,
        place: impl FnOnce(&Stream, &DeviceBuffer) -> Result<()>,
    ) -> Result<()> {
        if used > self.bytes {
            return Err(Error::invalid(format!(
                "upload lane: {used} bytes submitted from a slot of {} bytes",
                self.bytes
            )));
        }
        let (event, ptr, ctx) = {
            let kit = self.kit()?;
            (kit.event(self.slot), kit.host_ptr(self.slot), kit.context())
        };
        let scratch = self.scratch(self.slot)?;
        driver::ctx_set_current(ctx)?;
        // Safety: `ptr` is the kit's page-locked slot (valid for `bytes >= used` bytes),
        // not written by the CPU until the slot's event, recorded below after this copy,
        // has completed (`slot()` waits for it); `scratch` is a device buffer of
        // `bytes` bytes of this context, kept alive by the lane.
        unsafe {
            driver::transfer::memcpy_htod_async(scratch.address(), ptr, used, self.stream.raw())?
        };
        // Whatever `place` queued (or failed to), the event covers the copy above.
        let placed = place(&self.stream, scratch);
        driver::event_record(event, self.stream.raw())?;
        self.queued[self.slot] = true;
        self.slot ^= 1;
        placed
    }

    /// The stream the lane queues its work on (its own, or the one it was made on).
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Copies the first `used` bytes of the current slot to `dst` from byte `at` on the
    /// lane's stream, records the slot's event right after the copy and moves to the
    /// other slot (handed out again once the copy is done). What the caller queues on
    /// [`stream`](Self::stream) afterwards sees the bytes. Returns without waiting.
    pub fn upload_to(&mut self, used: usize, dst: &DeviceBuffer, at: usize) -> Result<()> {
        let end = at.checked_add(used);
        if used > self.bytes || end.is_none_or(|e| e > dst.len()) {
            return Err(Error::invalid(format!(
                "upload lane: {used} bytes from a slot of {} bytes to byte {at} of a buffer \
                 of {} bytes",
                self.bytes,
                dst.len()
            )));
        }
        let (event, ptr, ctx) = {
            let kit = self.kit()?;
            (kit.event(self.slot), kit.host_ptr(self.slot), kit.context())
        };
        if !dst.context().same_as(self.stream.context()) {
            return Err(Error::invalid(
                "upload lane: the buffer belongs to another context",
            ));
        }
        dst.check_writable("an upload lane's copy")?;
        driver::ctx_set_current(ctx)?;
        // Safety: `ptr` is the kit's page-locked slot, valid for `bytes >= used` bytes,
        // not written by the CPU until the slot's event, recorded below on the same
        // stream after this copy, has completed (`slot()` waits for it, and so does the
        // lane's drop); `dst` is a live device buffer of the lane's context with
        // `at + used <= len` (checked above), kept alive by the caller until the
        // lane's stream is done with it.
        unsafe {
            driver::transfer::memcpy_htod_async(
                dst.address() + at as u64,
                ptr,
                used,
                self.stream.raw(),
            )?
        };
        driver::event_record(event, self.stream.raw())?;
        self.queued[self.slot] = true;
        self.slot ^= 1;
        Ok(())
    }

    /// The current slot (once the work that last read it finished, as
    /// [`slot`](Self::slot)) and a handle through which any thread queues copies of its
    /// byte ranges into the same offsets of `dst` on `stream` while the slot is being
    /// filled: a reader copies what it read while the bytes are still in the caches
    /// (measured on an H200: reading a store's files and copying each 2 MiB of them
    /// right away took 11 ms, reading and then copying all 16). Then
    /// [`uploaded`](Self::uploaded) records the slot's event on `stream` and moves to
    /// the other slot; call it also when filling failed, so that the slot is not handed
    /// out again under a copy still queued.
    pub fn slot_uploads<'a>(
        &'a mut self,
        stream: &'a Stream,
        dst: &'a DeviceBuffer,
    ) -> Result<(&'a mut [u8], SlotUploads<'a>)> {
        let ctx = self.kit()?.context();
        if !stream.context().same_as(dst.context()) || stream.context().as_raw() != ctx.cast() {
            return Err(Error::invalid(
                "upload lane: the stream and the buffer must belong to the lane's context",
            ));
        }
        dst.check_writable("an upload lane's copy")?;
        let bytes = self.bytes;
        let slot = self.slot()?;
        let uploads = SlotUploads {
            ptr: slot.as_ptr(),
            bytes,
            ctx,
            dst,
            stream,
        };
        Ok((slot, uploads))
    }

    /// Records the current slot's event on `stream`, after the copies queued there
    /// through [`slot_uploads`](Self::slot_uploads), and moves to the other slot: the
    /// slot is handed out again once those copies are done.
    pub fn uploaded(&mut self, stream: &Stream) -> Result<()> {
        let (event, ctx) = {
            let kit = self.kit()?;
            (kit.event(self.slot), kit.context())
        };
        if stream.context().as_raw() != ctx.cast() {
            return Err(Error::invalid(
                "upload lane: the stream must belong to the lane's context",
            ));
        }
        driver::ctx_set_current(ctx)?;
        driver::event_record(event, stream.raw())?;
        self.queued[self.slot] = true;
        self.slot ^= 1;
        Ok(())
    }

    /// The other direction: lets `gather(stream, scratch)` queue device work that fills
    /// the current slot's scratch buffer, then one DMA of its first `used` bytes into
    /// the slot, records the slot's event and moves to the other slot. Returns the slot
    /// to read with [`downloaded`](Self::downloaded) once the CPU needs it.
    pub fn download(
        &mut self,
        used: usize,
        gather: impl FnOnce(&Stream, &DeviceBuffer) -> Result<()>,
    ) -> Result<usize> {
        if used > self.bytes {
            return Err(Error::invalid(format!(
                "upload lane: {used} bytes asked of a slot of {} bytes",
                self.bytes
            )));
        }
        let slot = self.slot;
        let (event, ptr, ctx) = {
            let kit = self.kit()?;
            (kit.event(slot), kit.host_ptr(slot), kit.context())
        };
        if self.queued[slot] {
            // The CPU is done with this slot's previous contents (it asked for them
            // with `downloaded`, or never will); the stream orders the rest.
            driver::ctx_set_current(ctx)?;
            driver::event_synchronize(event)?;
            self.queued[slot] = false;
        }
        driver::ctx_set_current(ctx)?;
        let scratch = self.scratch(slot)?.clone();
        let gathered = gather(&self.stream, &scratch);
        if gathered.is_ok() {
            // Safety: `ptr` is the kit's page-locked slot, valid for `bytes >= used`
            // bytes; the CPU does not touch it until `downloaded(slot)` has waited for
            // the event recorded below; the scratch buffer is `bytes` long and lives
            // with the lane.
            unsafe {
                driver::transfer::memcpy_dtoh_async(
                    ptr,
                    scratch.address(),
                    used,
                    self.stream.raw(),
                )?
            };
        }
        driver::event_record(event, self.stream.raw())?;
        self.queued[slot] = true;
        self.slot ^= 1;
        gathered.map(|_| slot)
    }

    /// Slot `slot` after the download queued into it finished, for the CPU to read (and
    /// to use as it likes until the lane queues into that slot again).
    pub fn downloaded(&mut self, slot: usize) -> Result<&mut [u8]> {
        let slot = slot & 1;
        let (event, ptr, ctx) = {
            let kit = self.kit()?;
            (kit.event(slot), kit.host_ptr(slot), kit.context())
        };
        if self.queued[slot] {
            driver::ctx_set_current(ctx)?;
            driver::event_synchronize(event)?;
            self.queued[slot] = false;
        }
        // Safety: as in `slot()`: the kit's initialised page-locked buffer, no DMA
        // pending on it (its event completed), exclusively borrowed through `self`.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr, self.bytes) })
    }

    /// Waits for everything queued on the lane.
    pub fn finish(&mut self) -> Result<()> {
        self.stream.synchronize()
    }
}

impl Drop for UploadLane {
    fn drop(&mut self) {
        if let Some(kit) = self.kit.take() {
            // The kit is reused only when no DMA of it can still be pending: its copies
            // ran on the lane's stream, or (`slot_uploads`) on the caller's stream with
            // the slot's event recorded right after them (`uploaded`).
            let idle = driver::ctx_set_current(kit.context()).is_ok()
                && self.stream.synchronize().is_ok()
                && (0..2)
                    .all(|i| !self.queued[i] || driver::event_synchronize(kit.event(i)).is_ok());
            self.shared.return_kit(kit, idle);
            if std::thread::current().id() == self.leased_on {
                LEASED_HERE.with(|n| n.set(n.get().saturating_sub(1)));
            }
        }
    }
}
