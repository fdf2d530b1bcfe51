//! DoGet streams with bounded memory: a producer thread makes the stream's messages
//! (reading and encoding chunks, or encoding stored batches) and hands them to the
//! response through a queue of a few messages; when the queue is full the producer
//! blocks, and tonic only takes the next message when HTTP/2 flow control lets it send,
//! so a slow client slows the producer instead of growing a buffer. A client that goes
//! away drops the response, which closes the queue: the producer's next hand-over fails
//! and it stops, freeing what it held. [`Stats`] counts streams and queued bytes, and
//! lets tests and operators wait until the server is idle.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use arrow_flight::FlightData;
use futures::Stream;
use tokio::sync::mpsc;
use tonic::Status;

use super::encode::wire_bytes;
use super::events::{Observer, ServerEvent, ServerStats, StreamEnd};

/// Counters of a server's streams.
#[derive(Default)]
pub(crate) struct Stats {
    active: AtomicUsize,
    queued: AtomicU64,
    started: AtomicU64,
    sent_bytes: AtomicU64,
    lock: Mutex<()>,
    idle: Condvar,
}

impl Stats {
    pub(crate) fn snapshot(&self, registered_bytes: u64) -> ServerStats {
        ServerStats {
            active_streams: self.active.load(Ordering::SeqCst),
            queued_bytes: self.queued.load(Ordering::SeqCst),
            streams_started: self.started.load(Ordering::SeqCst),
            bytes_sent: self.sent_bytes.load(Ordering::SeqCst),
            registered_bytes,
        }
    }

    fn changed(&self) {
        // Taking the lock orders this notification after a waiter's check.
        drop(self.lock.lock().unwrap_or_else(|p| p.into_inner()));
        self.idle.notify_all();
    }

    /// Waits until no stream is active and nothing is queued; false after `timeout`.
    pub(crate) fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if self.active.load(Ordering::SeqCst) == 0 && self.queued.load(Ordering::SeqCst) == 0 {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            g = self
                .idle
                .wait_timeout(g, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// One active stream: counted while the producer or the response still holds it.
pub(crate) struct StreamGuard {
    stats: Arc<Stats>,
    pub(crate) id: u64,
    observer: Option<Observer>,
    end: Mutex<StreamEnd>,
}

impl StreamGuard {
    /// A guard for a stream already counted in `stats.active`.
    fn counted(stats: Arc<Stats>, observer: Option<Observer>) -> Arc<StreamGuard> {
        let id = stats.started.fetch_add(1, Ordering::SeqCst);
        Arc::new(StreamGuard {
            stats,
            id,
            observer,
            end: Mutex::new(StreamEnd::ClientGone),
        })
    }

    fn set_end(&self, end: StreamEnd) {
        *self.end.lock().unwrap_or_else(|p| p.into_inner()) = end;
    }

    pub(crate) fn event(&self, e: ServerEvent) {
        if let Some(o) = &self.observer {
            o(&e);
        }
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let end = std::mem::replace(
            &mut *self.end.lock().unwrap_or_else(|p| p.into_inner()),
            StreamEnd::ClientGone,
        );
        self.event(ServerEvent::StreamEnded { id: self.id, end });
        self.stats.active.fetch_sub(1, Ordering::SeqCst);
        self.stats.changed();
    }
}

/// A message and the bytes it counts for while queued.
struct Item {
    data: FlightData,
    bytes: u64,
}

/// The producer's end of a stream.
pub(crate) struct StreamProducer {
    tx: mpsc::Sender<Result<Item, Status>>,
    guard: Arc<StreamGuard>,
    sent: u64,
    /// Wire bytes queued (for the stream's closing event).
    bytes: u64,
}

impl StreamProducer {
    /// Hands a message to the response, waiting while the queue is full. `false` when
    /// the client went away (the producer should stop).
    pub(crate) fn send(&mut self, data: FlightData) -> bool {
        let bytes = wire_bytes(&data);
        let stats = &self.guard.stats;
        stats.queued.fetch_add(bytes, Ordering::SeqCst);
        if self.tx.blocking_send(Ok(Item { data, bytes })).is_err() {
            stats.queued.fetch_sub(bytes, Ordering::SeqCst);
            stats.changed();
            return false;
        }
        self.guard.event(ServerEvent::MessageQueued {
            id: self.guard.id,
            index: self.sent,
            bytes,
        });
        self.sent += 1;
        self.bytes += bytes;
        true
    }
}

/// Starts a producer thread running `produce` and returns the response stream. What
/// `produce` returns ends the stream: `Ok` completes it, `Err` sends the status.
pub(crate) fn spawn(
    stats: Arc<Stats>,
    observer: Option<Observer>,
    depth: usize,
    max_streams: usize,
    describe: String,
    produce: impl FnOnce(&mut StreamProducer) -> Result<(), Status> + Send + 'static,
) -> Result<DoGetStream, Status> {
    // Counted before the check, so that concurrent calls cannot pass the limit together.
    if stats.active.fetch_add(1, Ordering::SeqCst) >= max_streams {
        stats.active.fetch_sub(1, Ordering::SeqCst);
        stats.changed();
        return Err(Status::resource_exhausted(format!(
            "the server streams to {max_streams} clients at once (its limit): try again later"
        )));
    }
    let (tx, rx) = mpsc::channel(depth.max(1));
    let guard = StreamGuard::counted(stats, observer);
    let span = tracing::info_span!("devbuf.flight.do_get", stream = guard.id, ticket = %describe);
    guard.event(ServerEvent::StreamStarted {
        id: guard.id,
        what: describe,
    });
    let mut sink = StreamProducer {
        tx,
        guard: guard.clone(),
        sent: 0,
        bytes: 0,
    };
    let stream = DoGetStream {
        rx,
        guard: Some(guard),
    };
    std::thread::Builder::new()
        .name("devbuf-flight-doget".into())
        .spawn(move || {
            let _in = span.enter();
            let started = std::time::Instant::now();
            // A panic in the producer (or in an observer it calls) ends the stream with
            // an error status, never with a clean end that looks complete.
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| produce(&mut sink)))
                    .unwrap_or_else(|p| {
                        let msg = devbuf_core::__private::panic_message(p.as_ref());
                        Err(Status::internal(format!(
                            "the stream's producer failed: {msg}"
                        )))
                    });
            let end = match outcome {
                Ok(()) if sink.tx.is_closed() => StreamEnd::ClientGone,
                Ok(()) => StreamEnd::Completed {
                    messages: sink.sent,
                },
                Err(status) => {
                    let msg = status.message().to_string();
                    let _ = sink.tx.blocking_send(Err(status));
                    StreamEnd::Failed(msg)
                }
            };
            tracing::info!(
                messages = sink.sent,
                bytes = sink.bytes,
                elapsed_us = started.elapsed().as_micros() as u64,
                end = ?end,
                "stream ended"
            );
            sink.guard.set_end(end);
        })
        .map_err(|e| Status::resource_exhausted(format!("cannot start a stream thread: {e}")))?;
    Ok(stream)
}

/// The response of a DoGet: the messages of the producer's queue.
pub struct DoGetStream {
    rx: mpsc::Receiver<Result<Item, Status>>,
    guard: Option<Arc<StreamGuard>>,
}

impl Stream for DoGetStream {
    type Item = Result<FlightData, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(Ok(item))) => {
                if let Some(g) = &self.guard {
                    g.stats.queued.fetch_sub(item.bytes, Ordering::SeqCst);
                    g.stats.sent_bytes.fetch_add(item.bytes, Ordering::SeqCst);
                    g.stats.changed();
                }
                Poll::Ready(Some(Ok(item.data)))
            }
            Poll::Ready(Some(Err(status))) => Poll::Ready(Some(Err(status))),
            Poll::Ready(None) => {
                self.guard = None;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for DoGetStream {
    fn drop(&mut self) {
        // Close first so a producer blocked on a full queue wakes up and stops, then
        // give back the bytes of what is still queued.
        self.rx.close();
        while let Ok(item) = self.rx.try_recv() {
            if let (Ok(item), Some(g)) = (item, &self.guard) {
                g.stats.queued.fetch_sub(item.bytes, Ordering::SeqCst);
            }
        }
        if let Some(g) = &self.guard {
            g.stats.changed();
        }
    }
}
