//! [`ChunkStream`]: a zarr array's chunks, decoded, as a `futures::Stream`.

use std::pin::Pin;
use std::task::{Context, Poll};

use super::ZarrArray;
use crate::aio::Worker;
use devbuf_core::error::{Error, Result};
use devbuf_core::zarr::{BufferPrototype, NDBuffer};

/// The chunks a [`ReadChunks::stream`](crate::ReadChunks::stream) call asked for, each `(indices, values)`
/// in the order given, as they are decoded.
///
/// The chunks are read a batch at a time by the read engine on a thread of its own (a
/// batch of `in_flight` chunks decoded in parallel), ahead of the consumer by at most
/// two batches. Dropping the stream cancels it: the read in progress stops (see
/// [`Read::to_async`](crate::Read::to_async)) and the drop returns once its thread has ended.
/// After an error the stream ends.
pub struct ChunkStream {
    rx: tokio::sync::mpsc::Receiver<Result<(Vec<u64>, NDBuffer)>>,
    worker: Option<Worker>,
    /// The thread could not start, and the stream said so.
    told: bool,
}

impl std::fmt::Debug for ChunkStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkStream").finish_non_exhaustive()
    }
}

impl ZarrArray {
    /// The chunks decoded as a stream ([`ReadChunks::stream`](crate::ReadChunks::stream)).
    pub(crate) fn chunk_stream(
        &self,
        chunks: Vec<Vec<u64>>,
        prototype: BufferPrototype,
        in_flight: usize,
    ) -> ChunkStream {
        let per = in_flight.max(1);
        let (tx, rx) = tokio::sync::mpsc::channel(per);
        let a = self.duplicate();
        let worker = Worker::start("devbuf-chunks", move || {
            let a = a.in_scope();
            for batch in chunks.chunks(per) {
                let read = crate::guard("a zarr read", || {
                    a.read_chunk_list(batch, &prototype).map(|r| r.0)
                });
                let items: Vec<Result<(Vec<u64>, NDBuffer)>> = match read {
                    Ok(v) => batch.iter().cloned().zip(v).map(Ok).collect(),
                    Err(e) => vec![Err(e)],
                };
                let failed = items.iter().any(|r| r.is_err());
                for item in items {
                    // The stream was dropped: stop.
                    if tx.blocking_send(item).is_err() {
                        return;
                    }
                }
                if failed {
                    return;
                }
            }
        });
        ChunkStream {
            rx,
            worker,
            told: false,
        }
    }
}

impl futures::Stream for ChunkStream {
    type Item = Result<(Vec<u64>, NDBuffer)>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let Some(worker) = this.worker.as_mut() else {
            if std::mem::replace(&mut this.told, true) {
                return Poll::Ready(None);
            }
            return Poll::Ready(Some(Err(Error::invalid(
                "a chunk stream could not start its thread",
            ))));
        };
        match this.rx.poll_recv(cx) {
            Poll::Ready(None) => {
                worker.detach();
                Poll::Ready(None)
            }
            other => other,
        }
    }
}

impl Drop for ChunkStream {
    fn drop(&mut self) {
        // Closed first, so that a thread waiting to send gives up; then the worker's
        // drop stops and joins it.
        self.rx.close();
        while self.rx.try_recv().is_ok() {}
        self.worker.take();
    }
}
