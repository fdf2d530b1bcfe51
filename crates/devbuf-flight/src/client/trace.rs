//! `tracing` of the client's calls: each public call that moves data runs in a
//! `devbuf.flight.client` span (the server, the call, its path or name) that ends with
//! an `info` event of what came back and the time, or a `warn` event with the error.
//! The endpoints' streams add a `debug` event each (messages, wire bytes, time). None
//! of it costs more than a check when no subscriber is installed.

use std::future::Future;
use std::time::Instant;

use tracing::Instrument;

use devbuf_core::error::Result;

/// What a call brought back, for its closing event: batches (or arrays), rows (0 where
/// none), bytes of the result.
pub(crate) type Size = (usize, usize, usize);

/// Runs `fut` in `span` (the future is instrumented: the span is entered whenever it is
/// polled), then closes the span with an event (`size` says what came back; only
/// computed when a subscriber takes the event). A future dropped before it finished
/// closes its span without an event.
pub(crate) async fn call<T>(
    span: tracing::Span,
    fut: impl Future<Output = Result<T>>,
    size: impl FnOnce(&T) -> Size,
) -> Result<T> {
    let started = Instant::now();
    let r = fut.instrument(span.clone()).await;
    close(&span, started, &r, size);
    r
}

fn close<T>(span: &tracing::Span, started: Instant, r: &Result<T>, size: impl FnOnce(&T) -> Size) {
    let _in = span.enter();
    let elapsed_us = started.elapsed().as_micros() as u64;
    match r {
        Ok(v) if tracing::enabled!(tracing::Level::INFO) => {
            let (batches, rows, bytes) = size(v);
            tracing::info!(batches, rows, bytes, elapsed_us, "call done");
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(elapsed_us, error = %e, "call failed"),
    }
}

/// Batches, rows and (host) bytes of received batches.
pub(crate) fn of_batches(b: &[super::super::encode::Batch]) -> Size {
    let rows = b.iter().map(|b| b.num_rows()).sum();
    let bytes = b
        .iter()
        .filter_map(|b| b.as_host())
        .map(|rb| rb.get_array_memory_size())
        .sum();
    (b.len(), rows, bytes)
}
