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

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::runtime::runtime;
use super::store::{Span, UrlStore};
use devbuf_core::error::{Error, Result};

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
}

/// Budget units of 4 KiB (the semaphore counts in `u32`).
const UNIT: u64 = 4096;

impl Prefetch {
    /// Starts fetching `requests` from `store`.
    pub(crate) fn start(store: Arc<UrlStore>, requests: Vec<FetchRequest>) -> Result<Prefetch> {
        let rt = runtime()?;
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
        let task = rt.spawn(async move {
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
                st.ready.insert(
                    i,
                    Ready {
                        got,
                        users,
                        _permit: permit,
                    },
                );
                drop(st);
                sh.arrived.notify_all();
            }
        });
        Ok(Prefetch {
            shared,
            task,
            requests: n,
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
    }
}
