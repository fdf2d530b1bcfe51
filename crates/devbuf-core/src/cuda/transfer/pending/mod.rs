//! Stream-ordered asynchronous copies, and why they are safe.
//!
//! An asynchronous copy returns before the DMA has run, so the host memory it reads or
//! writes must stay valid — and, device->host, untouched — until the copy completes.
//! devbuf offers two designs, both safe from safe code even when a handle is leaked
//! with [`std::mem::forget`]:
//!
//! * **Ownership** ([`DeviceBuffer::copy_from_host_async`],
//!   [`DeviceBuffer::copy_to_host_async`]): the host memory is *moved into* the
//!   [`Pending`] and handed back by [`Pending::wait`]. Nothing else can reach it
//!   meanwhile. Dropping the `Pending` waits for the copy first. Forgetting it leaks the
//!   memory (never freed, so never reused while the DMA runs): a leak, not a
//!   use-after-free. The memory types are those of [`HostSource`] / [`HostSink`],
//!   whose bytes stay at the same address when the value moves (a `Vec`'s heap
//!   buffer, not an array on the stack).
//! * **Borrowing, scoped** ([`scope`]): like [`std::thread::scope`]. Copies issued
//!   through a [`TransferScope`] may borrow host memory for the scope's lifetime
//!   `'scope`, which outlives the closure; `scope` synchronises every stream the scope
//!   used before it returns — also when the closure returns early or panics. The
//!   borrow is tied to the scope, not to the [`ScopedPending`], so forgetting a
//!   `ScopedPending` changes nothing: the memory stays borrowed until `scope` has
//!   waited. [`ScopedPending::wait`] hands the borrow back early.
//!
//! Both keep every [`DeviceBuffer`] a copy uses alive until it completes.
//!
//! A failed synchronisation (a driver error) means the context is broken; the owned
//! design then leaks the memory rather than free it; the scoped design returns the
//! error after trying to synchronise the whole context (a broken context runs no
//! further DMA).
//!
//! This file: the host memory traits, [`Pending`] and the owning copies.
//! `scope.rs`: [`scope`] and the borrowing copies.

mod scope;
mod waiter;

pub use scope::{ScopedPending, TransferScope, scope};

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};

use arrow_buffer::ArrowNativeType;

use super::engine::TransferGrant;
use super::plan::Dir;
use crate::cuda::buffer::DeviceBuffer;
use crate::cuda::driver::{self, transfer as dt};
use crate::cuda::host::HostBuffer;
use crate::cuda::stream::{Event, EventFlags, Stream};
use crate::error::{Error, Result, check_range};

/// Host memory an asynchronous host->device copy can own while it runs.
///
/// # Safety
///
/// devbuf calls [`host_bytes`](Self::host_bytes) once, keeps the pointer, moves the
/// value into a [`Pending`] and lets the DMA (or the staging threads) read the range
/// until the copy has completed — or forever, if the `Pending` is forgotten. So from the
/// moment `host_bytes` returns, for as long as the value lives (moved or not, on any
/// thread), implementors guarantee that the returned range
///
/// * stays allocated and at the same address: moving the value does not move the
///   bytes, and no *other* handle (a clone, a parent, a shared owner) can free or
///   reallocate them — only dropping this value may end the allocation's life;
/// * is written by nobody: not through the value, not through any other handle or
///   alias (the bytes are immutable, or this value owns them exclusively).
///
/// Heap-backed owners qualify (`Vec`, `Box<[T]>`, reference-counted immutable buffers);
/// inline arrays do not (they move with the value), nor does a handle whose bytes
/// another handle may still mutate.
///
/// ```
/// use devbuf_core::cuda::HostSource;
/// fn bytes_of<T: HostSource>(t: &T) -> usize { t.host_bytes().len() }
/// assert_eq!(bytes_of(&vec![1u32, 2, 3]), 12);
/// assert_eq!(bytes_of(&bytes::Bytes::from_static(b"abc")), 3);
/// ```
pub unsafe trait HostSource: Send + 'static {
    /// The bytes to copy.
    fn host_bytes(&self) -> &[u8];
}

/// Host memory an asynchronous device->host copy can own and fill while it runs.
///
/// # Safety
///
/// As [`HostSource`] for the range [`host_bytes_mut`](Self::host_bytes_mut) returns
/// (devbuf calls it once, then the DMA writes the range until the copy completes),
/// and, more strictly: nothing but that DMA reads or writes the range meanwhile — no
/// other handle or alias of the bytes exists that could reach them (this value owns
/// them exclusively).
///
/// ```
/// use devbuf_core::cuda::HostSink;
/// let mut v = vec![0u16; 4];
/// v.host_bytes_mut()[0] = 1;
/// assert_eq!(v[0], 1);
/// ```
pub unsafe trait HostSink: HostSource {
    /// The bytes to fill.
    fn host_bytes_mut(&mut self) -> &mut [u8];
}

fn pod_bytes<T: ArrowNativeType>(v: &[T]) -> &[u8] {
    crate::cuda::buffer::as_bytes(v)
}

fn pod_bytes_mut<T: ArrowNativeType>(v: &mut [T]) -> &mut [u8] {
    // Safety: Arrow native types are plain-old-data without padding, and every bit
    // pattern is a valid value; the byte view covers exactly the slice and borrows it
    // mutably for the same lifetime.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

// Safety: a Vec's elements live in a heap buffer that does not move with the Vec and is
// not reallocated through a shared or a slice borrow.
unsafe impl<T: ArrowNativeType> HostSource for Vec<T> {
    fn host_bytes(&self) -> &[u8] {
        pod_bytes(self)
    }
}
// Safety: as above; `as_mut_slice` never reallocates.
unsafe impl<T: ArrowNativeType> HostSink for Vec<T> {
    fn host_bytes_mut(&mut self) -> &mut [u8] {
        pod_bytes_mut(self)
    }
}
// Safety: a boxed slice's heap memory does not move with the box.
unsafe impl<T: ArrowNativeType> HostSource for Box<[T]> {
    fn host_bytes(&self) -> &[u8] {
        pod_bytes(self)
    }
}
// Safety: as above.
unsafe impl<T: ArrowNativeType> HostSink for Box<[T]> {
    fn host_bytes_mut(&mut self) -> &mut [u8] {
        pod_bytes_mut(self)
    }
}
// Safety: page-locked memory owned by the buffer, freed only on drop.
unsafe impl HostSource for HostBuffer {
    fn host_bytes(&self) -> &[u8] {
        self
    }
}
// Safety: as above.
unsafe impl HostSink for HostBuffer {
    fn host_bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}
// Safety: `Bytes` points at shared, immutable heap (or static) memory kept alive by the
// handle; moving the handle does not move the bytes.
unsafe impl HostSource for bytes::Bytes {
    fn host_bytes(&self) -> &[u8] {
        self
    }
}
// Safety: `BytesMut` owns a heap buffer that does not move with the handle and is not
// reallocated through a slice borrow.
unsafe impl HostSource for bytes::BytesMut {
    fn host_bytes(&self) -> &[u8] {
        self
    }
}
// Safety: as above.
unsafe impl HostSink for bytes::BytesMut {
    fn host_bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}
// Safety: an Arrow buffer points at immutable, reference-counted memory.
unsafe impl HostSource for arrow_buffer::Buffer {
    fn host_bytes(&self) -> &[u8] {
        self.as_slice()
    }
}
// Safety: a mutable Arrow buffer owns its allocation, which moves only when it grows.
unsafe impl HostSource for arrow_buffer::MutableBuffer {
    fn host_bytes(&self) -> &[u8] {
        self.as_slice()
    }
}
// Safety: as above; `as_slice_mut` does not grow the buffer.
unsafe impl HostSink for arrow_buffer::MutableBuffer {
    fn host_bytes_mut(&mut self) -> &mut [u8] {
        self.as_slice_mut()
    }
}
// Safety: static memory never moves or goes away.
unsafe impl HostSource for &'static [u8] {
    fn host_bytes(&self) -> &[u8] {
        self
    }
}

/// An asynchronous copy queued on a stream, owning the host memory it uses.
///
/// Only owners whose bytes stay put when moved can be handed over; a borrowed slice or
/// an array on the stack is refused at compile time:
///
/// ```compile_fail,E0277
/// # use devbuf_core::cuda::{Context, Stream};
/// # let ctx = Context::new(0)?;
/// # let st = Stream::new(&ctx)?;
/// # let dev = ctx.allocate(4)?;
/// let p = dev.copy_to_host_async(0, [0u8; 4], &st)?; // error: [u8; 4] is not a HostSink
/// # Ok::<(), devbuf_core::Error>(())
/// ```
///
/// ```compile_fail,E0277
/// # use devbuf_core::cuda::{Context, Stream};
/// # let ctx = Context::new(0)?;
/// # let st = Stream::new(&ctx)?;
/// # let dev = ctx.allocate(4)?;
/// let mut out = vec![0u8; 4];
/// let p = dev.copy_to_host_async(0, &mut out[..], &st)?; // error: a borrow is not owned
/// # Ok::<(), devbuf_core::Error>(())
/// ```
///
/// [`wait`](Self::wait) blocks until the copy has completed and returns the host
/// memory; awaiting the `Pending` (it is a [`Future`] of `Result<T>`, on any executor)
/// does the same without blocking the thread; [`chain`](Self::chain) makes other
/// streams wait for the copy on the device.
/// Dropping a `Pending` waits too. See the module docs of `devbuf_core::cuda::transfer` for
/// why this is safe even when it is forgotten.
///
/// The event that marks the copy's completion stays private: an [`Event`] can be
/// recorded again ([`Event::record`]), after which waiting for it would no longer wait
/// for the copy and `wait` would hand back memory the DMA still uses. So there is no
/// `event()` accessor:
///
/// ```compile_fail,E0599
/// # use devbuf_core::cuda::{Context, Stream};
/// # let ctx = Context::new(0)?;
/// # let (st, idle) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
/// # let dev = ctx.allocate(4)?;
/// let p = dev.copy_to_host_async(0, ctx.allocate_host(4)?, &st)?;
/// p.event().record(&idle)?; // error: no `event` method; `p.wait()` must wait for the copy
/// # Ok::<(), devbuf_core::Error>(())
/// ```
///
/// Borrowed memory that is not `'static` cannot be handed over either (use [`scope`]
/// to lend it):
///
/// ```compile_fail,E0597
/// # use devbuf_core::cuda::{Context, Stream};
/// # let ctx = Context::new(0)?;
/// # let st = Stream::new(&ctx)?;
/// # let dev = ctx.allocate(4)?;
/// let src = vec![1u8; 4];
/// let p = dev.copy_from_host_async(0, &src[..], &st)?; // error: `src` is not 'static
/// drop(src);
/// # p.wait()?;
/// # Ok::<(), devbuf_core::Error>(())
/// ```
///
/// ```no_run
/// use devbuf_core::cuda::{Context, Stream};
/// let ctx = Context::new(0)?;
/// let stream = Stream::new(&ctx)?;
/// let dev = ctx.allocate(1 << 20)?;
/// let mut src = ctx.allocate_host(1 << 20)?; // page-locked: a true asynchronous DMA
/// src.fill(3);
/// let up = dev.copy_from_host_async(0, src, &stream)?;
/// // ... other work; the copy runs meanwhile ...
/// let src = up.wait()?; // the memory comes back
/// let down = dev.copy_to_host_async(0, vec![0u8; 1 << 20], &stream)?;
/// assert!(down.wait()?.iter().all(|&b| b == 3));
/// # drop(src);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[must_use = "dropping a Pending waits for the copy; call wait() to get the memory back"]
pub struct Pending<T> {
    /// Shared with the waiter thread while a poll waits (`waiter.rs`).
    event: Arc<Event>,
    value: Option<T>,
    keep: Vec<DeviceBuffer>,
}

impl<T> Pending<T> {
    /// Blocks until the copy has completed and returns the host memory it owned.
    ///
    /// If the driver reports an error instead, the memory is leaked (never freed: the
    /// DMA could not be confirmed finished) and the error returned.
    ///
    /// ```no_run
    /// # use devbuf_core::cuda::{Context, Stream};
    /// # let ctx = Context::new(0)?;
    /// # let s = Stream::new(&ctx)?;
    /// let dev = ctx.allocate(8)?;
    /// dev.fill(0)?;
    /// let v: Vec<u8> = dev.copy_to_host_async(0, vec![1u8; 8], &s)?.wait()?;
    /// assert_eq!(v, [0u8; 8]);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn wait(mut self) -> Result<T> {
        let value = self.value.take();
        match self.event.synchronize() {
            Ok(()) => value.ok_or_else(|| Error::invalid("Pending already waited for")),
            Err(e) => {
                std::mem::forget(value);
                std::mem::forget(std::mem::take(&mut self.keep));
                Err(e)
            }
        }
    }

    /// Whether the copy has completed (does not block).
    ///
    /// ```no_run
    /// # use devbuf_core::cuda::{Context, Stream};
    /// # let ctx = Context::new(0)?;
    /// # let s = Stream::new(&ctx)?;
    /// # let dev = ctx.allocate(1 << 20)?;
    /// let p = dev.copy_from_host_async(0, ctx.allocate_host(1 << 20)?, &s)?;
    /// while !p.is_complete()? { /* do other work */ }
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn is_complete(&self) -> Result<bool> {
        self.event.is_complete()
    }

    /// Makes work queued on `stream` from now on wait for this copy (on the device; the
    /// host does not block). For an [`Event`] of your own that completes after the copy,
    /// chain a stream and record one there (`p.chain(&b)?; e.record(&b)?;`).
    ///
    /// ```no_run
    /// # use devbuf_core::cuda::{Context, Stream};
    /// # let ctx = Context::new(0)?;
    /// # let (a, b) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// # let (x, y) = (ctx.allocate(4)?, ctx.allocate(4)?);
    /// let up = x.copy_from_host_async(0, vec![1u8, 2, 3, 4], &a)?;
    /// up.chain(&b)?;
    /// y.copy_from_device_async(0, &x, &b)?.wait()?; // ordered after the upload
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn chain(&self, stream: &Stream) -> Result<()> {
        stream.wait_event(&self.event)
    }
}

/// Awaiting a `Pending` gives what [`wait`](Pending::wait) returns, without blocking
/// the thread: a poll queries the copy's event; while it runs, a waiter thread (one per
/// process, started by the first such poll) queries the events of every waiting poll
/// every 100 us and wakes each task whose copy completed. Works on any executor (a
/// tokio current-thread runtime included). Dropping the future before it completed
/// waits for the copy, as dropping a `Pending` does. Polling it again after it
/// returned the memory is an error.
///
/// ```no_run
/// use devbuf_core::cuda::{Context, Stream};
/// # async fn f() -> devbuf_core::Result<()> {
/// let ctx = Context::new(0)?;
/// let s = Stream::new(&ctx)?;
/// let dev = ctx.allocate(8)?;
/// dev.fill(0)?;
/// let v: Vec<u8> = dev.copy_to_host_async(0, vec![1u8; 8], &s)?.await?;
/// assert_eq!(v, [0u8; 8]);
/// # Ok(()) }
/// ```
impl<T> Future for Pending<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<T>> {
        let this = self.get_mut();
        if this.value.is_none() {
            return Poll::Ready(Err(Error::invalid(
                "a Pending was polled after it returned its memory",
            )));
        }
        match this.event.is_complete() {
            Ok(true) => Poll::Ready(
                this.value
                    .take()
                    .ok_or_else(|| Error::invalid("Pending already waited for")),
            ),
            Ok(false) => {
                waiter::wake_when_done(this.event.clone(), cx.waker().clone());
                Poll::Pending
            }
            Err(e) => {
                // As `wait`: the DMA could not be confirmed finished, so the memory
                // leaks rather than being freed under it.
                std::mem::forget(this.value.take());
                std::mem::forget(std::mem::take(&mut this.keep));
                Poll::Ready(Err(e))
            }
        }
    }
}

// `Pending` never pins its contents: the host memory is moved out by `wait` and `poll`
// alike (its bytes stay put because `HostSource` owners keep them on the heap).
impl<T> Unpin for Pending<T> {}

impl<T> Drop for Pending<T> {
    fn drop(&mut self) {
        if let Some(v) = self.value.take()
            && self.event.synchronize().is_err()
        {
            std::mem::forget(v);
            std::mem::forget(std::mem::take(&mut self.keep));
        }
    }
}

impl<T> std::fmt::Debug for Pending<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("event", &self.event)
            .field("waited", &self.value.is_none())
            .finish()
    }
}

fn check_stream(buf: &DeviceBuffer, stream: &Stream, what: &str) -> Result<()> {
    if buf.context().same_as(stream.context()) {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{what}: the stream belongs to another context (device {}) than the buffer (device {})",
            stream.context().ordinal(),
            buf.context().ordinal()
        )))
    }
}

/// Validates a copy of the `n` host bytes at `host` to (`HtoD`) or from (`DtoH`) `buf`
/// at `position`, queued on `stream`, and makes the event to record after it: the
/// request for the engine and that event. Nothing is queued yet.
fn prepare(
    buf: &DeviceBuffer,
    dir: Dir,
    position: usize,
    (host, n): (*mut u8, usize),
    stream: &Stream,
    what: &'static str,
) -> Result<(Event, TransferGrant)> {
    if dir == Dir::HtoD {
        buf.check_writable(what)?;
    }
    check_range(what, position, n, buf.len())?;
    check_stream(buf, stream, what)?;
    let event = Event::new(buf.context(), EventFlags::default())?;
    let request = TransferGrant {
        dir,
        host,
        len: n,
        dev: buf.address() + position as u64,
        on: Some(stream.raw()),
        known: None,
    };
    Ok((event, request))
}

/// Records `event` after a copy was (perhaps partly) queued with result `queued`; on
/// any failure waits for the stream before the memory may go, and leaks it when even
/// that fails.
fn finish<T>(
    event: Event,
    stream: &Stream,
    queued: Result<()>,
    value: T,
    keep: Vec<DeviceBuffer>,
) -> Result<Pending<T>> {
    match queued.and_then(|_| event.record(stream)) {
        Ok(()) => Ok(Pending {
            event: Arc::new(event),
            value: Some(value),
            keep,
        }),
        Err(e) => {
            if stream.synchronize().is_err() {
                std::mem::forget(value);
                std::mem::forget(keep);
            }
            Err(e)
        }
    }
}

impl Stream {
    /// [`synchronize`](Stream::synchronize) without blocking: a [`Pending`] that
    /// completes once the work queued on this stream so far has finished. Await it
    /// (it is a `Future`, woken by a waiter thread, on any executor) or
    /// [`wait`](Pending::wait) for it.
    ///
    /// ```no_run
    /// use devbuf_core::cuda::{Context, HostBuffer, Stream};
    /// async fn download(ctx: &Context, s: &Stream) -> devbuf_core::Result<HostBuffer> {
    ///     let dev = ctx.allocate(1 << 20)?;
    ///     let host = dev.copy_to_host_async(0, ctx.allocate_host(1 << 20)?, s)?; // queued
    ///     s.synchronize_async()?.await?; // everything queued on `s` has run
    ///     host.wait()
    /// }
    /// ```
    pub fn synchronize_async(&self) -> Result<Pending<()>> {
        let event = self.record_event()?;
        Ok(Pending {
            event: Arc::new(event),
            value: Some(()),
            keep: Vec::new(),
        })
    }
}

impl DeviceBuffer {
    /// Queues a copy of all of `src` into this buffer at `position` on `stream`, and
    /// returns at once with a [`Pending`] that owns `src` until the copy completes.
    ///
    /// From page-locked memory ([`HostBuffer`]) the DMA runs asynchronously. From
    /// ordinary memory the bytes must pass through the CPU: small copies return once the
    /// driver has staged them, large ones go through the staging lanes (ordered after the
    /// work queued on `stream`) and have completed when the call returns.
    ///
    /// ```no_run
    /// use devbuf_core::cuda::{Context, Stream};
    /// let ctx = Context::new(0)?;
    /// let s = Stream::new(&ctx)?;
    /// let dev = ctx.allocate(4)?;
    /// let p = dev.copy_from_host_async(0, vec![1u8, 2, 3, 4], &s)?;
    /// let v = p.wait()?; // the Vec comes back
    /// assert_eq!(v, [1, 2, 3, 4]);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn copy_from_host_async<T: HostSource>(
        &self,
        position: usize,
        src: T,
        stream: &Stream,
    ) -> Result<Pending<T>> {
        let b = src.host_bytes();
        let host = (b.as_ptr() as *mut u8, b.len());
        let (event, request) = prepare(
            self,
            Dir::HtoD,
            position,
            host,
            stream,
            "copy_from_host_async",
        )?;
        let ctx = self.context();
        // Safety: `src` moves into the Pending, which keeps it — its bytes at the same
        // address and unwritten (HostSource contract) — until the copy has completed on
        // `stream`, or forever; the device range was checked by `prepare`.
        let queued = unsafe { super::engine(ctx).copy(ctx, request) };
        finish(event, stream, queued, src, vec![self.clone()])
    }

    /// Queues a copy of `dst.len()` bytes starting at `position` into `dst` on
    /// `stream`, and returns at once with a [`Pending`] that owns `dst` and hands it
    /// back, filled, from [`Pending::wait`].
    ///
    /// Into page-locked memory the DMA runs asynchronously; into ordinary memory the
    /// bytes must pass through the CPU, so the copy (ordered after the work queued on
    /// `stream`) has completed when the call returns.
    ///
    /// ```no_run
    /// use devbuf_core::cuda::{Context, Stream};
    /// let ctx = Context::new(0)?;
    /// let s = Stream::new(&ctx)?;
    /// let dev = ctx.allocate(1 << 20)?;
    /// dev.fill(0)?;
    /// let host = ctx.allocate_host(1 << 20)?;
    /// let p = dev.copy_to_host_async(0, host, &s)?;
    /// let host = p.wait()?;
    /// assert!(host.iter().all(|&b| b == 0));
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn copy_to_host_async<T: HostSink>(
        &self,
        position: usize,
        mut dst: T,
        stream: &Stream,
    ) -> Result<Pending<T>> {
        let b = dst.host_bytes_mut();
        let host = (b.as_mut_ptr(), b.len());
        let (event, request) = prepare(
            self,
            Dir::DtoH,
            position,
            host,
            stream,
            "copy_to_host_async",
        )?;
        let ctx = self.context();
        // Safety: `dst` moves into the Pending, which owns it exclusively — its bytes
        // at the same address, reached by nothing else (HostSink contract) — until the
        // copy has completed, or forever; the device range was checked by `prepare`.
        let queued = unsafe { super::engine(ctx).copy(ctx, request) };
        finish(event, stream, queued, dst, vec![self.clone()])
    }

    /// Queues a copy of all of `src` into this buffer at `position` on `stream` (a
    /// stream of this buffer's context). `src` may be in another context or device (a
    /// peer copy). Overlapping ranges of the same memory are copied as `memmove` does,
    /// through a temporary buffer.
    ///
    /// ```no_run
    /// use devbuf_core::cuda::{Context, DeviceBuffer, Stream};
    /// let ctx = Context::new(0)?;
    /// let s = Stream::new(&ctx)?;
    /// let a = DeviceBuffer::from_slice(&ctx, &[1u8, 2, 3, 4])?;
    /// let b = ctx.allocate(4)?;
    /// b.copy_from_device_async(0, &a, &s)?.wait()?;
    /// assert_eq!(b.to_vec::<u8>()?, [1, 2, 3, 4]);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn copy_from_device_async(
        &self,
        position: usize,
        src: &DeviceBuffer,
        stream: &Stream,
    ) -> Result<Pending<()>> {
        self.check_writable("copy_from_device_async")?;
        check_range("copy_from_device_async", position, src.len(), self.len())?;
        check_stream(self, stream, "copy_from_device_async")?;
        let ctx = self.context();
        let event = Event::new(ctx, EventFlags::default())?;
        let n = src.len();
        let dst = self.address() + position as u64;
        let mut keep = vec![self.clone(), src.clone()];
        let queued = if n == 0 {
            Ok(())
        } else if ctx.same_as(src.context()) {
            let s0 = src.address();
            let overlap = dst < s0 + n as u64 && s0 < dst + n as u64;
            ctx.bind()?;
            if overlap && dst != s0 {
                let tmp = ctx.allocate(n)?;
                ctx.bind()?;
                let r = driver::memcpy_dtod_async(tmp.address(), s0, n, stream.raw())
                    .and_then(|_| driver::memcpy_dtod_async(dst, tmp.address(), n, stream.raw()));
                keep.push(tmp);
                r
            } else if overlap {
                Ok(())
            } else {
                driver::memcpy_dtod_async(dst, s0, n, stream.raw())
            }
        } else {
            if ctx.ordinal() != src.context().ordinal() {
                ctx.peer_access_for_copy(src.context())?;
            }
            ctx.bind()?;
            dt::memcpy_peer_async(
                dst,
                ctx.inner.raw,
                src.address(),
                src.context().inner.raw,
                n,
                stream.raw(),
            )
        };
        finish(event, stream, queued, (), keep)
    }
}
