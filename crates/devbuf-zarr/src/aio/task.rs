//! [`Blocking`]: an async call's blocking work on a thread of its own, as a future.
//!
//! The work (opening an array, a read, a write) runs on a dedicated thread, never on the
//! caller's executor: decoding is CPU work, and the engine's waits are blocking waits.
//! The thread enters the call's [`Scope`](super::scope::Scope), so the object-store
//! requests it makes run on the caller's runtime. Dropping the future before it
//! finished sets the scope's stop and joins the thread: when the drop returns, the
//! work has stopped and released its memory (staging slots, device buffers, fetched
//! bytes).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::scope::{self, Scope, Stop};
use devbuf_core::error::{Error, Result};

/// A thread running an async call's work in the call's scope; stopping it sets the
/// scope's stop and joins it.
pub(crate) struct Worker {
    thread: Option<std::thread::JoinHandle<()>>,
    stop: Arc<Stop>,
}

impl Worker {
    /// Starts `body` on a thread named `name`, in a new scope on the current tokio
    /// runtime (if the caller runs on one). `None`: the thread could not start.
    pub(crate) fn start(name: &str, body: impl FnOnce() + Send + 'static) -> Option<Worker> {
        let stop = Stop::new();
        let scope = Scope {
            handle: tokio::runtime::Handle::try_current().ok(),
            stop: stop.clone(),
        };
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let _in = scope::enter(Some(scope));
                body();
            })
            .ok()?;
        Some(Worker {
            thread: Some(thread),
            stop,
        })
    }

    /// The work finished by itself: the thread is left to return (not joined on the
    /// executor).
    pub(crate) fn detach(&mut self) {
        self.thread = None;
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.stop.set();
            // Nothing the thread waits on needs the caller's executor once the stop is
            // set (see `scope`), so this returns on a current-thread runtime too.
            let _ = t.join();
        }
    }
}

/// A future of blocking work run on its own thread (see the module docs).
pub(crate) struct Blocking<T> {
    rx: tokio::sync::oneshot::Receiver<Result<T>>,
    worker: Option<Worker>,
    what: &'static str,
}

/// Starts `work` on a thread of its own (see the module docs).
pub(crate) fn spawn<T: Send + 'static>(
    what: &'static str,
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Blocking<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let worker = Worker::start("devbuf-async", move || {
        let _ = tx.send(crate::guard(what, work));
    });
    Blocking { rx, worker, what }
}

impl<T> Future for Blocking<T> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let this = &mut *self;
        let Some(worker) = this.worker.as_mut() else {
            return Poll::Ready(Err(Error::invalid(format!(
                "{}: could not start its thread",
                this.what
            ))));
        };
        match Pin::new(&mut this.rx).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => {
                // The thread sent its result and only returns now.
                worker.detach();
                Poll::Ready(r.unwrap_or_else(|_| {
                    Err(Error::invalid(format!(
                        "{}: its thread ended without a result",
                        this.what
                    )))
                }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[tokio::test(flavor = "current_thread")]
    async fn results_arrive_and_drop_stops_and_joins() {
        assert_eq!(spawn("t", || Ok(7)).await.unwrap(), 7);
        assert!(spawn::<()>("t", || Err(Error::invalid("x"))).await.is_err());
        assert!(spawn::<()>("t", || panic!("boom")).await.is_err());
        // Work that only ends when stopped: dropping the future stops it, and the drop
        // returns after the thread did.
        let (tx, rx) = std::sync::mpsc::channel();
        let f = spawn("t", move || {
            let stop = scope::current_stop().expect("runs in a scope");
            tx.send(stop.clone()).unwrap();
            while !stop.load(Ordering::SeqCst) {
                std::thread::park_timeout(std::time::Duration::from_millis(1));
            }
            Ok(())
        });
        let mut f = Box::pin(f);
        let first = std::future::poll_fn(|cx| Poll::Ready(f.as_mut().poll(cx))).await;
        assert!(first.is_pending());
        let stop = rx.recv().unwrap();
        drop(f);
        assert!(stop.load(Ordering::SeqCst));
    }
}
