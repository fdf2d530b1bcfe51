//! The waiter behind `impl Future for Pending`: one thread per process, started by the
//! first poll that finds its copy still running. A poll registers the copy's event and
//! the task's waker; the thread queries every registered event (`cuEventQuery`, never
//! a blocking wait, so a long copy on one stream does not hold up the wake-up of a
//! short one on another) and wakes the waker of each that completed (or failed: the
//! next poll reports the error), every 100 us while any is registered, and sleeps
//! otherwise.

use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::task::Waker;
use std::time::Duration;

use crate::cuda::stream::Event;

/// How often registered events are queried.
const ROUND: Duration = Duration::from_micros(100);

#[derive(Default)]
struct Waiter {
    waiting: Mutex<Vec<(Arc<Event>, Waker)>>,
    added: Condvar,
}

/// The process's waiter (`None`: its thread could not start).
fn waiter() -> Option<&'static Waiter> {
    static WAITER: OnceLock<Option<&'static Waiter>> = OnceLock::new();
    *WAITER.get_or_init(|| {
        let w: &'static Waiter = Box::leak(Box::default());
        std::thread::Builder::new()
            .name("devbuf-pending".into())
            .spawn(move || run(w))
            .ok()
            .map(|_| w)
    })
}

/// Wakes `waker` once `event` completed (or its query failed). Without a waiter thread
/// the waker is woken at once: the executor polls again (a busy wait, not a hang).
pub(super) fn wake_when_done(event: Arc<Event>, waker: Waker) {
    match waiter() {
        Some(w) => {
            w.waiting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((event, waker));
            w.added.notify_one();
        }
        None => waker.wake(),
    }
}

fn run(w: &Waiter) {
    let mut mine: Vec<(Arc<Event>, Waker)> = Vec::new();
    loop {
        {
            let mut g = w.waiting.lock().unwrap_or_else(|p| p.into_inner());
            if mine.is_empty() {
                while g.is_empty() {
                    g = w.added.wait(g).unwrap_or_else(|p| p.into_inner());
                }
            } else if g.is_empty() {
                g = w
                    .added
                    .wait_timeout(g, ROUND)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            // One entry per event: a future polled again (in a `select!` loop, say)
            // registers again, with the waker that counts now.
            for (e, waker) in g.drain(..) {
                match mine.iter_mut().find(|(m, _)| Arc::ptr_eq(m, &e)) {
                    Some(slot) => slot.1 = waker,
                    None => mine.push((e, waker)),
                }
            }
        }
        // Wakers run executor code (scheduling a task): called outside the lock, so a
        // poll that registers again cannot deadlock.
        let (still, finished): (Vec<_>, Vec<_>) = mine
            .into_iter()
            .partition(|(e, _)| matches!(e.is_complete(), Ok(false)));
        for (_, waker) in finished {
            // A waker that panics must not end the only waiter thread (every later
            // await of a Pending in the process would hang).
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| waker.wake()));
        }
        mine = still;
    }
}
