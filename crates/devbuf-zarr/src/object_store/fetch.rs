//! [`Prefetch`]: the read engine's fetch stage for object stores. A read hands over
//! every request it will make, in the order its workers will want them; up to
//! [`concurrency`](super::ObjectStoreOptions::concurrency) requests run at once on the
//! store's runtime, and the fetched bytes wait, bounded by
//! [`read_ahead_bytes`](super::ObjectStoreOptions::read_ahead_bytes), until a worker
//! takes them. A read of many chunks then costs about its bytes over the bandwidth, not
//! its chunks times the round trip.
//!
//! Requests are issued in order and the byte budget is granted in order (tokio's
//! semaphore is fair), so the request a waiting worker needs is never held back by
//! requests behind it; the budget only fills with bytes whose workers will take them.
//! Dropping the `Prefetch` (the read finished or failed) cancels what is in flight and
//! frees what was not taken.
//!
//! A read started by an async call fetches on the caller's runtime (its
//! [`Scope`](crate::aio::scope::Scope)); other reads on devbuf's own. When the call's
//! future is dropped, its stop wakes every worker waiting here (they get an error and
//! the read ends) without waiting for the fetch task, which needs the caller's
//! executor to run.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::runtime::runtime;
use super::store::{Span, UrlStore};
use crate::aio::scope::{self, Stop};
use devbuf_core::error::{Error, Result};

/// Fetched bytes held by fetch stages, not yet taken by every user (process-wide).
static HELD_BYTES: AtomicU64 = AtomicU64::new(0);
/// Fetch stages alive (process-wide).
static LIVE_STAGES: AtomicUsize = AtomicUsize::new(0);

/// Bytes fetched by the read engine's fetch stages and not yet decoded or freed, in
/// this process. Zero when no object-store read runs (a read that ended, failed or was
/// cancelled frees what it fetched).
#[doc(hidden)]
pub fn held_fetch_bytes() -> u64 {
    HELD_BYTES.load(Ordering::SeqCst)
}

/// Fetch stages (object-store reads) alive in this process.
#[doc(hidden)]
pub fn live_fetch_stages() -> usize {
    LIVE_STAGES.load(Ordering::SeqCst)
}

/// One request of a read: a key, whole or a byte range, and how many units will take
/// its bytes (coalesced inner chunks of a shard share one request).
#[derive(Clone, Debug)]
pub(crate) struct FetchRequest {
    /// The store key.
    pub key: String,
    /// Which bytes of the object.
    pub span: Span,
    /// Bytes it is expected to bring (for the read-ahead budget).
    pub expect: u64,
    /// Units that will take its bytes.
    pub users: usize,
}

struct Ready {
    got: std::result::Result<Option<Bytes>, Error>,
    users: usize,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Ready {
    fn new(
        got: std::result::Result<Option<Bytes>, Error>,
        users: usize,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Ready {
        HELD_BYTES.fetch_add(Self::bytes(&got), Ordering::SeqCst);
        Ready {
            got,
            users,
            _permit: permit,
        }
    }

    fn bytes(got: &std::result::Result<Option<Bytes>, Error>) -> u64 {
        match got {
            Ok(Some(b)) => b.len() as u64,
            _ => 0,
        }
    }
}

impl Drop for Ready {
    fn drop(&mut self) {
        HELD_BYTES.fetch_sub(Self::bytes(&self.got), Ordering::SeqCst);
    }
}

#[derive(Default)]
struct State {
    ready: HashMap<usize, Ready>,
    /// The stage stopped (finished, or could not start): nothing more will arrive.
    stopped: bool,
}

struct Shared {
    state: Mutex<State>,
    arrived: Condvar,
}

/// A running fetch stage.
pub(crate) struct Prefetch {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
    requests: usize,
    /// The async call's stop and the hook that wakes waiting workers.
    stop: Option<(Arc<Stop>, u64)>,
}

/// Budget units of 4 KiB (the semaphore counts in `u32`).
const UNIT: u64 = 4096;

impl Prefetch {
    /// Starts fetching `requests` from `store`.
    pub(crate) fn start(store: Arc<UrlStore>, requests: Vec<FetchRequest>) -> Result<Prefetch> {
        let scope = scope::current();
        let handle = match scope.as_ref().and_then(|s| s.handle.clone()) {
            Some(h) => h,
            None => runtime()?.handle().clone(),
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            arrived: Condvar::new(),
        });
        let n = requests.len();
        let budget_units =
            (store.options().read_ahead_bytes as u64 / UNIT).clamp(1, u32::MAX as u64 >> 4) as u32;
        let sem = Arc::new(Semaphore::new(budget_units as usize));
        let concurrency = store.options().concurrency;
        let sh = shared.clone();
        // Counted before the task can run (nothing below fails).
        LIVE_STAGES.fetch_add(1, Ordering::SeqCst);
        let task = handle.spawn(async move {
            // Marks the stage stopped however the task ends (done, aborted, panicked),
            // so that no worker waits for bytes that will not come.
            let _stop = StopOnDrop(sh.clone());
            let fetches = futures::stream::iter(requests.into_iter().enumerate()).map(|(i, r)| {
                let sem = sem.clone();
                let store = store.clone();
                async move {
                    let want = (r.expect.div_ceil(UNIT)).clamp(1, budget_units as u64) as u32;
                    // The semaphore is never closed, so acquiring only waits.
                    let permit = sem.acquire_many_owned(want).await.ok();
                    let got = store.fetch(&r.key, r.span.clone()).await;
                    (i, r.users, got, permit)
                }
            });
            let mut fetches = fetches.buffer_unordered(concurrency);
            while let Some((i, users, got, permit)) = fetches.next().await {
                let mut st = sh.state.lock().unwrap_or_else(|p| p.into_inner());
                if st.stopped {
                    break; // the `Prefetch` was dropped: nobody takes these bytes
                }
                st.ready.insert(i, Ready::new(got, users, permit));
                drop(st);
                sh.arrived.notify_all();
            }
        });
        // A dropped async call wakes the workers waiting below (under the lock, so
        // that none misses it between its check and its wait).
        let stop = scope.map(|s| {
            let sh = shared.clone();
            let id = s.stop.on_stop(move || {
                let _st = sh.state.lock().unwrap_or_else(|p| p.into_inner());
                sh.arrived.notify_all();
            });
            (s.stop, id)
        });
        Ok(Prefetch {
            shared,
            task,
            requests: n,
            stop,
        })
    }

    /// The bytes of request `i` (`None`: the key does not exist), waiting until they
    /// arrive. Each of the request's users takes it once; the last frees its budget.
    pub(crate) fn take(&self, i: usize) -> Result<Option<Bytes>> {
        if i >= self.requests {
            return Err(Error::invalid(format!(
                "fetch request {i} of a read with {} requests",
                self.requests
            )));
        }
        let mut st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = st.ready.get_mut(&i) {
                r.users = r.users.saturating_sub(1);
                let got = match &r.got {
                    Ok(b) => Ok(b.clone()),
                    Err(e) => Err(e.clone()),
                };
                if r.users == 0 {
                    st.ready.remove(&i);
                }
                return got;
            }
            if let Some((stop, _)) = &self.stop
                && stop.is_set()
            {
                return Err(scope::cancelled("fetching a chunk"));
            }
            if st.stopped {
                return Err(Error::invalid(format!(
                    "fetch request {i}: the fetch stage stopped without it (taken twice?)"
                )));
            }
            st = self
                .shared
                .arrived
                .wait(st)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}

struct StopOnDrop(Arc<Shared>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let mut st = self.0.state.lock().unwrap_or_else(|p| p.into_inner());
        st.stopped = true;
        drop(st);
        self.0.arrived.notify_all();
    }
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        self.task.abort();
        if let Some((stop, id)) = &self.stop {
            stop.remove(*id);
        }
        // Frees what was fetched and not taken now, not when the runtime gets round
        // to dropping the aborted task (the caller's executor may be busy).
        let ready = {
            let mut st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            st.stopped = true;
            std::mem::take(&mut st.ready)
        };
        drop(ready);
        LIVE_STAGES.fetch_sub(1, Ordering::SeqCst);
    }
}
