//! [`Stream`] and [`Event`]: ordering of device work.

use std::fmt;
use std::sync::Arc;

use super::context::Context;
use super::driver::{self, CUevent, CUstream};
use crate::error::{Error, Result};

struct StreamInner {
    ctx: Context,
    raw: CUstream,
}

// Safety: a CUstream handle may be used from any thread; the driver API is thread-safe.
unsafe impl Send for StreamInner {}
// Safety: see `Send`.
unsafe impl Sync for StreamInner {}

impl Drop for StreamInner {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // Safety: the stream was created by `Stream::new` and this is its last owner.
            // Work already queued on it still completes (cuStreamDestroy semantics).
            let _ = unsafe { driver::stream_destroy(self.raw) };
        }
    }
}

/// A CUDA stream: a queue of device work that runs in order.
///
/// Streams made by [`Stream::new`] are *non-blocking*: they do not synchronise with the
/// legacy default stream, so work on several streams (and devbuf's synchronous copies,
/// which use the legacy stream) can overlap. Cloning is cheap and shares the stream; it
/// is destroyed when the last clone drops (queued work still completes).
///
/// ```no_run
/// use devbuf_core::cuda::{Context, Event, EventFlags, Stream};
/// let ctx = Context::new(0)?;
/// let a = Stream::new(&ctx)?;
/// let b = Stream::new(&ctx)?;
/// let done_on_a = Event::new(&ctx, EventFlags::default())?;
/// done_on_a.record(&a)?; // after the work queued on `a` so far
/// b.wait_event(&done_on_a)?; // b's later work waits for a's earlier work, on the device
/// b.synchronize()?;
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Stream {
    inner: Arc<StreamInner>,
}

impl Stream {
    /// Creates a non-blocking stream in `ctx`.
    pub fn new(ctx: &Context) -> Result<Stream> {
        ctx.bind()?;
        let raw = driver::stream_create(true)?;
        Ok(Stream {
            inner: Arc::new(StreamInner {
                ctx: ctx.clone(),
                raw,
            }),
        })
    }

    /// The context the stream belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The raw `CUstream`, for interop (devbuf keeps ownership).
    pub fn as_raw(&self) -> *mut std::ffi::c_void {
        self.inner.raw.cast()
    }

    pub(crate) fn raw(&self) -> CUstream {
        self.inner.raw
    }

    /// Blocks the calling thread until all work queued so far has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.ctx.bind()?;
        driver::stream_synchronize(self.inner.raw)
    }

    /// Whether all work queued so far has finished (does not block).
    pub fn is_complete(&self) -> Result<bool> {
        self.inner.ctx.bind()?;
        driver::stream_query(self.inner.raw)
    }

    /// Records a new event after the work queued so far (`Event::new` +
    /// [`Event::record`]).
    pub(crate) fn record_event(&self) -> Result<Event> {
        let e = Event::new(&self.inner.ctx, EventFlags::default())?;
        e.record(self)?;
        Ok(e)
    }

    /// Makes work queued on this stream from now on wait until `event` completes. The
    /// wait happens on the device; the host does not block. The event may belong to
    /// another stream, context or device (or another process, for IPC events).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.inner.ctx.bind()?;
        driver::stream_wait_event(self.inner.raw, event.raw)
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("device", &self.inner.ctx.ordinal())
            .field("raw", &self.inner.raw)
            .finish()
    }
}

/// How an [`Event`] is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventFlags {
    /// Record timestamps, for [`Event::elapsed_ms`]. Off by default (cheaper).
    pub timing: bool,
    /// `synchronize` sleeps instead of spinning.
    pub blocking_sync: bool,
    /// The event can be shared with another process (see the IPC module). Requires
    /// `timing == false`.
    pub interprocess: bool,
}

impl EventFlags {
    fn bits(self) -> Result<u32> {
        if self.interprocess && self.timing {
            return Err(Error::invalid(
                "an interprocess event cannot record timing (CUDA requires timing disabled)",
            ));
        }
        let mut f = 0;
        if !self.timing {
            f |= driver::EVENT_DISABLE_TIMING;
        }
        if self.blocking_sync {
            f |= driver::EVENT_BLOCKING_SYNC;
        }
        if self.interprocess {
            f |= driver::EVENT_INTERPROCESS;
        }
        Ok(f)
    }
}

/// A CUDA event: a marker in a stream that other streams or the host can wait for.
///
/// Not `Clone` (an event is re-recordable state); share it behind an `Arc`.
pub struct Event {
    ctx: Context,
    raw: CUevent,
    flags: EventFlags,
}

// Safety: a CUevent handle may be used from any thread; the driver API is thread-safe.
unsafe impl Send for Event {}
// Safety: see `Send`; all methods take `&self` and only call the driver.
unsafe impl Sync for Event {}

impl Event {
    /// Creates an event in `ctx`.
    pub fn new(ctx: &Context, flags: EventFlags) -> Result<Event> {
        let bits = flags.bits()?;
        ctx.bind()?;
        let raw = driver::event_create_flags(bits)?;
        Ok(Event {
            ctx: ctx.clone(),
            raw,
            flags,
        })
    }

    /// Wraps an event handle devbuf now owns (e.g. opened from an IPC handle).
    ///
    /// # Safety
    /// `raw` must be a live event of `ctx` that nothing else destroys.
    pub(crate) unsafe fn from_raw(ctx: &Context, raw: CUevent, flags: EventFlags) -> Event {
        Event {
            ctx: ctx.clone(),
            raw,
            flags,
        }
    }

    /// The context the event belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The flags it was created with.
    pub fn flags(&self) -> EventFlags {
        self.flags
    }

    /// The raw `CUevent` (devbuf keeps ownership).
    pub(crate) fn raw(&self) -> CUevent {
        self.raw
    }

    /// Records the event after the work queued on `stream` so far; `None`: on the legacy
    /// default stream (after devbuf's synchronous copies and kernels issued so far in
    /// this context). `e.record(&stream)` and `e.record(None)` both work.
    ///
    /// ```no_run
    /// use devbuf_core::cuda::{Context, Event, EventFlags, Stream};
    /// let ctx = Context::new(0)?;
    /// let (s, e) = (Stream::new(&ctx)?, Event::new(&ctx, EventFlags::default())?);
    /// e.record(&s)?; // after the work queued on `s`
    /// e.record(None)?; // after devbuf's synchronous work so far
    /// e.synchronize()?;
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn record<'s>(&self, stream: impl Into<Option<&'s Stream>>) -> Result<()> {
        self.ctx.bind()?;
        let raw = stream.into().map_or(std::ptr::null_mut(), |s| s.raw());
        driver::event_record(self.raw, raw)
    }

    /// Blocks the calling thread until the recorded work has completed.
    pub fn synchronize(&self) -> Result<()> {
        self.ctx.bind()?;
        driver::event_synchronize(self.raw)
    }

    /// Whether the recorded work has completed (does not block).
    pub fn is_complete(&self) -> Result<bool> {
        self.ctx.bind()?;
        driver::event_query(self.raw)
    }

    /// Milliseconds from this event to `later` (both recorded, both with timing).
    pub fn elapsed_ms(&self, later: &Event) -> Result<f32> {
        if !self.flags.timing || !later.flags.timing {
            return Err(Error::invalid(
                "elapsed_ms needs two events created with EventFlags { timing: true, .. }",
            ));
        }
        self.ctx.bind()?;
        driver::event_elapsed_ms(self.raw, later.raw)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // Safety: the event is owned by this value and not used afterwards.
            let _ = unsafe { driver::event_destroy(self.raw) };
        }
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("device", &self.ctx.ordinal())
            .field("flags", &self.flags)
            .finish()
    }
}

// ---------------------------------------------------------------------------
// Events that devbuf does not own (the Arrow C Device Data Interface hands them over
// as `CUevent*`), and the legacy default stream.
// ---------------------------------------------------------------------------

impl Event {
    /// The raw `CUevent`, for interop (devbuf keeps ownership; do not destroy it).
    ///
    /// ```no_run
    /// use devbuf_core::cuda::{Context, Event, EventFlags};
    /// let ctx = Context::new(0)?;
    /// let e = Event::new(&ctx, EventFlags::default())?;
    /// assert!(!e.as_raw().is_null());
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn as_raw(&self) -> *mut std::ffi::c_void {
        self.raw.cast()
    }
}

impl Stream {
    /// Makes work queued on this stream from now on wait until the work captured by a
    /// `CUevent` that devbuf does not own has completed (device side; the host does not
    /// block). This is how a consumer honours another library's event.
    ///
    /// ```no_run
    /// use devbuf_core::cuda::{Context, Event, EventFlags, Stream};
    /// let ctx = Context::new(0)?;
    /// let (producer, consumer) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// let done = Event::new(&ctx, EventFlags::default())?; // imagine this handle came from C
    /// done.record(&producer)?;
    /// // Safety: `done` is a live event for the duration of the call.
    /// unsafe { consumer.wait_raw_event(done.as_raw())? };
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    ///
    /// # Safety
    /// `event` must be a live `CUevent` handle (of any context or device) that is not
    /// destroyed during the call.
    pub unsafe fn wait_raw_event(&self, event: *mut std::ffi::c_void) -> Result<()> {
        if event.is_null() {
            return Err(Error::invalid("cannot wait on a null CUevent"));
        }
        self.inner.ctx.bind()?;
        driver::stream_wait_event(self.inner.raw, event.cast())
    }
}

impl Context {
    /// Makes work queued from now on on this context's legacy default stream (devbuf's
    /// synchronous copies and kernels) wait until `event` completes, on the device.
    ///
    /// ```no_run
    /// use devbuf_core::cuda::{Context, Event, EventFlags, Stream};
    /// let ctx = Context::new(0)?;
    /// let s = Stream::new(&ctx)?;
    /// let done = Event::new(&ctx, EventFlags::default())?;
    /// done.record(&s)?;
    /// ctx.default_stream_wait_event(&done)?; // later synchronous copies see s's work
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn default_stream_wait_event(&self, event: &Event) -> Result<()> {
        self.bind()?;
        driver::stream_wait_event(std::ptr::null_mut(), event.raw)
    }

    /// Like [`default_stream_wait_event`](Self::default_stream_wait_event) for a raw
    /// `CUevent` that devbuf does not own.
    ///
    /// # Safety
    /// `event` must be a live `CUevent` handle that is not destroyed during the call.
    pub(crate) unsafe fn default_stream_wait_raw_event(
        &self,
        event: *mut std::ffi::c_void,
    ) -> Result<()> {
        if event.is_null() {
            return Err(Error::invalid("cannot wait on a null CUevent"));
        }
        self.bind()?;
        driver::stream_wait_event(std::ptr::null_mut(), event.cast())
    }

    /// Blocks the calling thread until the work captured by a raw `CUevent` that
    /// devbuf does not own has completed.
    ///
    /// # Safety
    /// `event` must be a live `CUevent` handle that is not destroyed during the call.
    pub(crate) unsafe fn synchronize_raw_event(&self, event: *mut std::ffi::c_void) -> Result<()> {
        if event.is_null() {
            return Err(Error::invalid("cannot synchronize on a null CUevent"));
        }
        self.bind()?;
        driver::event_synchronize(event.cast())
    }

    /// Whether `len` bytes at `ptr` are page-locked host memory known to the CUDA
    /// driver (`cuMemHostAlloc`, `cuMemAllocHost`, `cuMemHostRegister`): the first and
    /// the last byte are checked. `len == 0` is `true` (nothing to access).
    ///
    /// ```no_run
    /// use devbuf_core::cuda::Context;
    /// let ctx = Context::new(0)?;
    /// let pinned = ctx.allocate_host(4096)?;
    /// assert!(ctx.is_page_locked(pinned.as_ptr(), pinned.len())?);
    /// let ordinary = vec![0u8; 4096];
    /// assert!(!ctx.is_page_locked(ordinary.as_ptr(), ordinary.len())?);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn is_page_locked(&self, ptr: *const u8, len: usize) -> Result<bool> {
        if len == 0 {
            return Ok(true);
        }
        self.bind()?;
        let last = (ptr as usize)
            .checked_add(len - 1)
            .ok_or_else(|| Error::invalid("host range overflows the address space"))?;
        Ok(driver::pointer_is_page_locked_host(ptr)?
            && driver::pointer_is_page_locked_host(last as *const u8)?)
    }
}
