//! The caller's async context, carried to the engine's threads: the tokio runtime the
//! caller's `*_async` call ran on (object-store requests of that call run there, never
//! on devbuf's own runtime) and the [`Stop`] its future sets when dropped.
//!
//! A thread running an async call's blocking work enters its [`Scope`]; the engine's
//! worker threads enter their parent's (see `read::work::on_threads`). Code that waits
//! on I/O (`object_store::runtime::block_on`, the fetch stage) looks the scope up and
//! wakes when its stop is set, so a dropped future never waits for a task that needs
//! the caller's (possibly current-thread, possibly blocked) executor.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use devbuf_core::error::{Error, Result};

type Hook = Box<dyn FnOnce() + Send>;

/// A one-way stop signal: a flag the engine's workers poll (`ReadCounters::stop`) and
/// hooks that wake whatever waits on I/O.
// The hooks wake object-store waits: without that feature only the flag is used.
#[cfg_attr(not(feature = "object_store"), allow(dead_code))]
#[derive(Default)]
pub(crate) struct Stop {
    flag: Arc<AtomicBool>,
    hooks: Mutex<HashMap<u64, Hook>>,
    next: AtomicU64,
}

#[cfg_attr(not(feature = "object_store"), allow(dead_code))]
impl Stop {
    pub(crate) fn new() -> Arc<Stop> {
        Arc::new(Stop::default())
    }

    /// The flag itself (the read engine's `stop`).
    pub(crate) fn flag(&self) -> Arc<AtomicBool> {
        self.flag.clone()
    }

    pub(crate) fn is_set(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// Sets the flag and runs every hook (once).
    pub(crate) fn set(&self) {
        if self.flag.swap(true, Ordering::SeqCst) {
            return;
        }
        let hooks: Vec<Hook> = {
            let mut h = self.hooks.lock().unwrap_or_else(|p| p.into_inner());
            h.drain().map(|(_, f)| f).collect()
        };
        for f in hooks {
            f();
        }
    }

    /// Runs `f` when the stop is set (now, if it already is). The id removes it.
    pub(crate) fn on_stop(&self, f: impl FnOnce() + Send + 'static) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut h = self.hooks.lock().unwrap_or_else(|p| p.into_inner());
        if self.is_set() {
            drop(h);
            f();
        } else {
            h.insert(id, Box::new(f));
        }
        id
    }

    /// Forgets hook `id` (its wait ended).
    pub(crate) fn remove(&self, id: u64) {
        self.hooks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }
}

/// The error of work stopped because its future (or stream) was dropped.
pub(crate) fn cancelled(what: &str) -> Error {
    Error::invalid(format!(
        "{what}: cancelled (the async call's future was dropped)"
    ))
}

/// An async call's context.
#[cfg_attr(not(feature = "object_store"), allow(dead_code))]
#[derive(Clone)]
pub(crate) struct Scope {
    /// The caller's runtime (`None`: the future was polled outside tokio, e.g. by
    /// `futures::executor::block_on`).
    pub handle: Option<tokio::runtime::Handle>,
    pub stop: Arc<Stop>,
}

thread_local! {
    static SCOPE: RefCell<Option<Scope>> = const { RefCell::new(None) };
}

/// The scope this thread runs in, if any.
pub(crate) fn current() -> Option<Scope> {
    SCOPE.with(|s| s.borrow().clone())
}

/// The stop flag of this thread's scope, for the read engine.
pub(crate) fn current_stop() -> Option<Arc<AtomicBool>> {
    SCOPE.with(|s| s.borrow().as_ref().map(|s| s.stop.flag()))
}

/// This thread runs in `scope` until the guard drops (the previous one is restored).
pub(crate) fn enter(scope: Option<Scope>) -> Entered {
    Entered(SCOPE.with(|s| s.replace(scope)))
}

/// See [`enter`].
pub(crate) struct Entered(Option<Scope>);

impl Drop for Entered {
    fn drop(&mut self) {
        let prev = self.0.take();
        SCOPE.with(|s| *s.borrow_mut() = prev);
    }
}

/// Runs `fut` to completion on `handle` from a thread of the engine (not a runtime
/// thread), returning early with an error when `stop` is set.
///
/// `Handle::block_on` polls `fut` on this thread; its I/O is driven by the caller's
/// runtime, whose executor is free while the caller awaits the call's future. When the
/// future is dropped instead, the stop aborts the wait here without the executor.
#[cfg_attr(not(feature = "object_store"), allow(dead_code))]
pub(crate) fn block_on_caller<F: Future>(
    handle: &tokio::runtime::Handle,
    stop: &Stop,
    fut: F,
) -> Result<F::Output> {
    let (abort, reg) = futures::future::AbortHandle::new_pair();
    let id = stop.on_stop(move || abort.abort());
    let out = handle.block_on(futures::future::Abortable::new(fut, reg));
    stop.remove(id);
    out.map_err(|_| cancelled("an object-store request"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_run_once_and_late_hooks_run_at_once() {
        let stop = Stop::new();
        let n = Arc::new(AtomicU64::new(0));
        let k = n.clone();
        stop.on_stop(move || {
            k.fetch_add(1, Ordering::SeqCst);
        });
        let k = n.clone();
        let id = stop.on_stop(move || {
            k.fetch_add(10, Ordering::SeqCst);
        });
        stop.remove(id);
        stop.set();
        stop.set();
        assert_eq!(n.load(Ordering::SeqCst), 1);
        let k = n.clone();
        stop.on_stop(move || {
            k.fetch_add(100, Ordering::SeqCst);
        });
        assert_eq!(n.load(Ordering::SeqCst), 101);
        assert!(stop.flag().load(Ordering::SeqCst));
    }

    #[test]
    fn scopes_nest_and_restore() {
        assert!(current().is_none());
        let stop = Stop::new();
        {
            let _g = enter(Some(Scope {
                handle: None,
                stop: stop.clone(),
            }));
            assert!(current_stop().is_some());
            {
                let _h = enter(None);
                assert!(current().is_none());
            }
            assert!(current().is_some());
        }
        assert!(current().is_none());
    }
}
