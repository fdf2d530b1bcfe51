//! Scoped asynchronous copies ([`scope`], [`TransferScope`], [`ScopedPending`]): the
//! host memory is *borrowed* for the scope, and the scope waits for every copy before it
//! returns.

use super::*;

/// Runs `f` with a [`TransferScope`] through which asynchronous copies may *borrow*
/// host memory; returns after every stream the scope used has been synchronised (also
/// when `f` fails or panics), so every borrow is free again.
///
/// The result is `f`'s, or the first synchronisation error.
///
/// The borrow checker enforces the waiting: memory lent to a scoped copy cannot be
/// touched before `wait` hands it back or the scope ends, even if the
/// [`ScopedPending`] is forgotten:
///
/// ```compile_fail,E0499
/// # use devbuf_core::cuda::{self, Context, Stream};
/// # let ctx = Context::new(0)?;
/// # let st = Stream::new(&ctx)?;
/// # let dev = ctx.allocate(4)?;
/// let mut out = vec![0u8; 4];
/// cuda::scope(|s| {
///     std::mem::forget(s.copy_to_host(&dev, 0, &mut out, &st)?);
///     out[0] = 1; // error: `out` is lent to the copy until the scope ends
///     Ok(())
/// })?;
/// # Ok::<(), devbuf_core::Error>(())
/// ```
///
/// memory lent to a host->device copy cannot be written meanwhile:
///
/// ```compile_fail,E0502
/// # use devbuf_core::cuda::{self, Context, Stream};
/// # let ctx = Context::new(0)?;
/// # let st = Stream::new(&ctx)?;
/// # let dev = ctx.allocate(4)?;
/// let mut src = vec![1u8; 4];
/// cuda::scope(|s| {
///     s.copy_from_host(&dev, 0, &src, &st)?;
///     src[0] = 2; // error: `src` is lent (read-only) to the copy until the scope ends
///     Ok(())
/// })?;
/// # Ok::<(), devbuf_core::Error>(())
/// ```
///
/// a pending copy cannot leave the scope (it would outlive the waiting):
///
/// ```compile_fail
/// # use devbuf_core::cuda::{self, Context, Stream};
/// # let ctx = Context::new(0)?;
/// # let st = Stream::new(&ctx)?;
/// # let dev = ctx.allocate(4)?;
/// let mut out = vec![0u8; 4];
/// let escaped = cuda::scope(|s| s.copy_to_host(&dev, 0, &mut out, &st))?; // error
/// # Ok::<(), devbuf_core::Error>(())
/// ```
///
/// and memory that does not outlive the scope cannot be lent at all:
///
/// ```compile_fail,E0597
/// # use devbuf_core::cuda::{self, Context, Stream};
/// # let ctx = Context::new(0)?;
/// # let st = Stream::new(&ctx)?;
/// # let dev = ctx.allocate(4)?;
/// cuda::scope(|s| {
///     let mut local = vec![0u8; 4];
///     let _p = s.copy_to_host(&dev, 0, &mut local, &st)?; // error: `local` dies first
///     Ok(())
/// })?;
/// # Ok::<(), devbuf_core::Error>(())
/// ```
///
/// ```no_run
/// use devbuf_core::cuda::{self, Context, Stream};
/// let ctx = Context::new(0)?;
/// let (a, b) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
/// let dev = ctx.allocate(1 << 20)?;
/// let src = vec![9u8; 1 << 20];
/// let mut back = vec![0u8; 1 << 20];
/// cuda::scope(|s| {
///     let up = s.copy_from_host(&dev, 0, &src, &a)?;
///     up.chain(&b)?; // b waits for the upload on the device
///     let down = s.copy_to_host(&dev, 0, &mut back, &b)?;
///     let back = down.wait()?; // the borrow comes back early
///     assert_eq!(back[0], 9);
///     Ok(())
/// })?;
/// assert!(back.iter().all(|&x| x == 9));
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub fn scope<'env, F, R>(f: F) -> Result<R>
where
    F: for<'scope> FnOnce(&'scope TransferScope<'scope, 'env>) -> Result<R>,
{
    let s = TransferScope {
        state: Mutex::new(ScopeState::default()),
        _scope: PhantomData,
        _env: PhantomData,
    };
    let mut guard = ScopeGuard {
        scope: &s,
        armed: true,
    };
    let r = f(&s);
    guard.armed = false;
    let synced = s.wait_all();
    drop(guard);
    match (r, synced) {
        (Ok(v), Ok(())) => Ok(v),
        (Err(e), _) | (Ok(_), Err(e)) => Err(e),
    }
}

#[derive(Default)]
pub(super) struct ScopeState {
    pub(super) streams: Vec<Stream>,
    pub(super) keep: Vec<DeviceBuffer>,
}

/// Synchronises the scope's streams if `f` unwinds.
pub(super) struct ScopeGuard<'a, 'scope, 'env> {
    pub(super) scope: &'a TransferScope<'scope, 'env>,
    pub(super) armed: bool,
}
impl Drop for ScopeGuard<'_, '_, '_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.scope.wait_all();
        }
    }
}

/// Issues asynchronous copies that borrow host memory for `'scope`; made by [`scope`],
/// whose example shows it in use.
pub struct TransferScope<'scope, 'env: 'scope> {
    pub(super) state: Mutex<ScopeState>,
    pub(super) _scope: PhantomData<&'scope mut &'scope ()>,
    pub(super) _env: PhantomData<&'env mut &'env ()>,
}

impl<'scope> TransferScope<'scope, '_> {
    /// Remembers `stream` (to synchronise at the end) and `buf` (to keep alive) before
    /// anything is queued.
    pub(super) fn register(&self, stream: &Stream, buf: &DeviceBuffer) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if !s.streams.iter().any(|x| x.raw() == stream.raw()) {
            s.streams.push(stream.clone());
        }
        s.keep.push(buf.clone());
    }

    pub(super) fn wait_all(&self) -> Result<()> {
        let streams: Vec<Stream> = {
            let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            s.streams.clone()
        };
        let mut first = None;
        for st in &streams {
            if let Err(e) = st.synchronize() {
                // The context is broken; make sure nothing of it still runs.
                let _ = st.context().synchronize();
                first.get_or_insert(e);
            }
        }
        match first {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    pub(super) fn issue(
        &'scope self,
        dir: Dir,
        buf: &DeviceBuffer,
        position: usize,
        host: (*mut u8, usize),
        stream: &Stream,
        what: &'static str,
    ) -> Result<Event> {
        let (event, request) = prepare(buf, dir, position, host, stream, what)?;
        self.register(stream, buf);
        let ctx = buf.context();
        // Safety: the host range is borrowed for 'scope, and `scope` synchronises
        // `stream` (registered above) before 'scope ends; the device range was checked
        // by `prepare`.
        unsafe { super::super::engine(ctx).copy(ctx, request)? };
        event.record(stream)?;
        Ok(event)
    }

    /// Queues a copy of `src` into `dst` at `position` on `stream`; `src` stays
    /// borrowed until [`ScopedPending::wait`] or the end of the scope.
    ///
    /// ```no_run
    /// # use devbuf_core::cuda::{self, Context, Stream};
    /// # let ctx = Context::new(0)?;
    /// # let st = Stream::new(&ctx)?;
    /// let dev = ctx.allocate(3)?;
    /// let src = [1u8, 2, 3];
    /// cuda::scope(|s| {
    ///     s.copy_from_host(&dev, 0, &src, &st)?; // waited for when the scope ends
    ///     Ok(())
    /// })?;
    /// assert_eq!(dev.to_vec::<u8>()?, [1, 2, 3]);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn copy_from_host(
        &'scope self,
        dst: &DeviceBuffer,
        position: usize,
        src: &'scope [u8],
        stream: &Stream,
    ) -> Result<ScopedPending<'scope, &'scope [u8]>> {
        let event = self.issue(
            Dir::HtoD,
            dst,
            position,
            (src.as_ptr() as *mut u8, src.len()),
            stream,
            "copy_from_host (scoped)",
        )?;
        Ok(ScopedPending {
            event,
            value: src,
            _scope: PhantomData,
        })
    }

    /// Queues a copy of `dst.len()` bytes of `src` from `position` into `dst` on
    /// `stream`; [`ScopedPending::wait`] hands `dst` back, filled.
    ///
    /// ```no_run
    /// # use devbuf_core::cuda::{self, Context, Stream};
    /// # let ctx = Context::new(0)?;
    /// # let st = Stream::new(&ctx)?;
    /// let dev = ctx.allocate(3)?;
    /// dev.fill(0)?;
    /// let mut out = [9u8; 3];
    /// cuda::scope(|s| {
    ///     let filled = s.copy_to_host(&dev, 0, &mut out, &st)?.wait()?;
    ///     assert_eq!(filled, &[0, 0, 0]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn copy_to_host(
        &'scope self,
        src: &DeviceBuffer,
        position: usize,
        dst: &'scope mut [u8],
        stream: &Stream,
    ) -> Result<ScopedPending<'scope, &'scope mut [u8]>> {
        let event = self.issue(
            Dir::DtoH,
            src,
            position,
            (dst.as_mut_ptr(), dst.len()),
            stream,
            "copy_to_host (scoped)",
        )?;
        Ok(ScopedPending {
            event,
            value: dst,
            _scope: PhantomData,
        })
    }
}

/// A copy queued through a [`TransferScope`]. [`wait`](Self::wait) returns the borrowed
/// host memory once the copy has completed; dropping or forgetting it leaves the wait to
/// the end of the scope. See [`TransferScope::copy_to_host`] for an example.
pub struct ScopedPending<'scope, T> {
    pub(super) event: Event,
    pub(super) value: T,
    pub(super) _scope: PhantomData<&'scope ()>,
}

impl<T> ScopedPending<'_, T> {
    /// Blocks until the copy has completed and hands back the borrowed host memory.
    pub fn wait(self) -> Result<T> {
        self.event.synchronize()?;
        Ok(self.value)
    }

    /// Whether the copy has completed (does not block).
    pub fn is_complete(&self) -> Result<bool> {
        self.event.is_complete()
    }

    /// Makes work queued on `stream` from now on wait for this copy (on the device).
    /// As with [`Pending`], the completion event itself stays private (re-recording it
    /// would let [`wait`](Self::wait) hand the borrow back while the DMA still runs).
    pub fn chain(&self, stream: &Stream) -> Result<()> {
        stream.wait_event(&self.event)
    }
}

impl<T> std::fmt::Debug for ScopedPending<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopedPending")
            .field("event", &self.event)
            .finish()
    }
}
