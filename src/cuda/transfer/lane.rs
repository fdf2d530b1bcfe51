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

use std::sync::Arc;

use super::engine::{Kit, Shared};
use crate::cuda::buffer::DeviceBuffer;
use crate::cuda::context::Context;
use crate::cuda::driver;
use crate::cuda::stream::Stream;
use crate::error::{Error, Result};

/// A producer's double-buffered path to the device through the page-locked pool.
pub(crate) struct UploadLane {
    shared: Arc<Shared>,
    kit: Option<Kit>,
    stream: Stream,
    scratch: [DeviceBuffer; 2],
    slot: usize,
    /// Whether slot `i` has work queued that its event covers.
    queued: [bool; 2],
    bytes: usize,
}

impl UploadLane {
    /// A lane with two slots of `slot_bytes` each (and two device scratch buffers of
    /// that size, from the context's stream-ordered pool). The kit comes from the
    /// context's page-locked pool: when the pool is at its bound this waits for a
    /// release if `wait`, else returns `Ok(None)`.
    pub(crate) fn new(ctx: &Context, slot_bytes: usize, wait: bool) -> Result<Option<UploadLane>> {
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
            let stream = Stream::new(ctx)?;
            let a = ctx.allocate_pooled(slot_bytes, Some(&stream))?;
            let b = ctx.allocate_pooled(slot_bytes, Some(&stream))?;
            Ok::<_, Error>((stream, [a, b]))
        })();
        match made {
            Ok((stream, scratch)) => Ok(Some(UploadLane {
                shared,
                kit: Some(kit),
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

    /// The lane's stream (placement work for a slot is queued on it).
    pub(crate) fn stream(&self) -> &Stream {
        &self.stream
    }

    fn kit(&self) -> Result<&Kit> {
        self.kit
            .as_ref()
            .ok_or_else(|| Error::invalid("upload lane used after its kit was returned"))
    }

    /// The current slot, for the CPU to fill, once the work that last read it finished.
    pub(crate) fn slot(&mut self) -> Result<&mut [u8]> {
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
    pub(crate) fn submit(
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
        let scratch = &self.scratch[self.slot];
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

    /// The other direction: lets `gather(stream, scratch)` queue device work that fills
    /// the current slot's scratch buffer, then one DMA of its first `used` bytes into
    /// the slot, records the slot's event and moves to the other slot. Returns the slot
    /// to read with [`downloaded`](Self::downloaded) once the CPU needs it.
    pub(crate) fn download(
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
        let gathered = gather(&self.stream, &self.scratch[slot]);
        if gathered.is_ok() {
            // Safety: `ptr` is the kit's page-locked slot, valid for `bytes >= used`
            // bytes; the CPU does not touch it until `downloaded(slot)` has waited for
            // the event recorded below; the scratch buffer is `bytes` long and lives
            // with the lane.
            unsafe {
                driver::transfer::memcpy_dtoh_async(
                    ptr,
                    self.scratch[slot].address(),
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
    pub(crate) fn downloaded(&mut self, slot: usize) -> Result<&mut [u8]> {
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
    pub(crate) fn finish(&mut self) -> Result<()> {
        self.stream.synchronize()
    }
}

impl Drop for UploadLane {
    fn drop(&mut self) {
        if let Some(kit) = self.kit.take() {
            // The kit is reused only when no DMA of it can still be pending.
            let idle =
                driver::ctx_set_current(kit.context()).is_ok() && self.stream.synchronize().is_ok();
            self.shared.return_kit(kit, idle);
        }
    }
}
