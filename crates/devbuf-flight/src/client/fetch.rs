//! Fetching endpoints: every endpoint of a flight concurrently (at most
//! [`ClientOptions::concurrency`](super::ClientOptions::concurrency) at once), each
//! message handed to a [`Handler`] on a blocking thread of the caller's runtime; the
//! first failure ends the whole fetch (the other streams are cancelled), and so does
//! dropping it. [`Claims`] checks that a stream
//! delivered exactly the chunks its ticket names. [`ReceivedStream`] is one endpoint as
//! an iterator, for callers that consume batches one by one.

use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex};

use arrow_array::RecordBatch;
use arrow_flight::{FlightData, Ticket};
use futures::TryStreamExt;
use tonic::Streaming;

use super::super::decode::{Decoded, IpcStreamDecoder};
use super::super::status::from_status;
use super::super::ticket::ChunkRegion;
use super::{Client, Endpoint};
use devbuf_core::error::{Error, Result};

/// What happens to the messages of each endpoint (on tokio's blocking threads).
pub(crate) trait Handler: Send + Sync + 'static {
    /// Per-endpoint state.
    type State: Send + 'static;
    /// Before the first message of endpoint `i`.
    fn begin(&self, i: usize) -> Result<Self::State>;
    /// One message.
    fn message(&self, state: &mut Self::State, fd: FlightData) -> Result<()>;
    /// After the last message (the stream ended cleanly).
    fn end(&self, i: usize, state: Self::State) -> Result<()>;
}

/// The blocking work (handler calls) of one fetch, counted, so that a fetch dropped
/// before it finished can wait for the work in progress: when the drop returns, no
/// handler call runs and nothing of the fetch's state is left (its memory is freed).
#[derive(Default)]
struct Inflight {
    running: Mutex<usize>,
    idle: Condvar,
}

/// Counts one piece of blocking work until dropped (after the work and everything it
/// captured were dropped).
struct Running(Arc<Inflight>);

impl Drop for Running {
    fn drop(&mut self) {
        let mut n = self.0.running.lock().unwrap_or_else(|p| p.into_inner());
        *n = n.saturating_sub(1);
        self.0.idle.notify_all();
    }
}

impl Inflight {
    /// Runs `f` on tokio's blocking threads.
    async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T> {
        *self.running.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        let running = Running(self.clone());
        tokio::task::spawn_blocking(move || {
            // Declared first, dropped last: after `f` and its captures (dropped when
            // the call returns).
            let _running = running;
            f()
        })
        .await
        .map_err(|e| {
            Error::io(
                "receiving an Arrow Flight stream",
                format!("a receiving task ended: {e}"),
            )
            .with_source(e)
        })
    }

    /// Waits until no work runs. Nothing it waits for needs an executor (the work runs
    /// on blocking threads), so this returns on a current-thread runtime too.
    fn wait(&self) {
        let mut n = self.running.lock().unwrap_or_else(|p| p.into_inner());
        while *n > 0 {
            n = self.idle.wait(n).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Waits for a fetch's blocking work when the fetch ends (finished, failed or dropped).
struct Drain(Arc<Inflight>);

impl Drop for Drain {
    fn drop(&mut self) {
        self.0.wait();
    }
}

/// One endpoint's handler state, shared with the blocking work (which only borrows
/// it, so that it is freed by whoever drops the last handle, never left in a finished
/// task's output).
type Slot<S> = Arc<Mutex<Option<S>>>;

const DOGET: &str = "Arrow Flight DoGet";

impl Client {
    /// Fetches every endpoint into `handler` on the caller's runtime. Dropped before it
    /// finished, the streams are cancelled and the drop waits for the handler call in
    /// progress, if any.
    pub(crate) async fn fetch_all<H: Handler>(
        &self,
        endpoints: &[Endpoint],
        handler: Arc<H>,
    ) -> Result<()> {
        let n = self.options().concurrency;
        let work = Arc::new(Inflight::default());
        let _drain = Drain(work.clone());
        futures::stream::iter(endpoints.iter().enumerate().map(Ok))
            .try_for_each_concurrent(n, |(i, ep)| self.fetch_one(i, ep, handler.clone(), &work))
            .await
    }

    pub(super) async fn open(&self, ep: &Endpoint, slot: usize) -> Result<Streaming<FlightData>> {
        let mut conn = self.conn_for(&ep.locations, slot).await?;
        let req = self.request(Ticket::new(ep.ticket.clone()))?;
        Ok(conn
            .do_get(req)
            .await
            .map_err(|s| from_status(DOGET, s))?
            .into_inner())
    }

    async fn fetch_one<H: Handler>(
        &self,
        i: usize,
        ep: &Endpoint,
        handler: Arc<H>,
        work: &Arc<Inflight>,
    ) -> Result<()> {
        let timed = tracing::enabled!(tracing::Level::DEBUG).then(std::time::Instant::now);
        let (mut messages, mut bytes) = (0u64, 0usize);
        let mut stream = self.open(ep, i % self.options().concurrency).await?;
        let slot: Slot<H::State> = Arc::new(Mutex::new(None));
        let (h, st) = (handler.clone(), slot.clone());
        work.run(move || -> Result<()> {
            let s = h.begin(i)?;
            *st.lock().unwrap_or_else(|p| p.into_inner()) = Some(s);
            Ok(())
        })
        .await??;
        let idle = self.options().idle_timeout;
        loop {
            let next = stream.message();
            let m = match idle {
                None => next.await,
                Some(t) => tokio::time::timeout(t, next).await.map_err(|e| {
                    Error::timeout(format!(
                        "receiving an Arrow Flight stream: endpoint {i}: the server sent nothing \
                         for {} s (ClientOptions::idle_timeout)",
                        t.as_secs_f64()
                    ))
                    .with_source(e)
                })?,
            }
            .map_err(|s| {
                from_status(DOGET, s).context(format_args!("endpoint {i}: the stream broke off"))
            })?;
            let Some(m) = m else { break };
            messages += 1;
            bytes += m.data_header.len() + m.data_body.len();
            let (h, st) = (handler.clone(), slot.clone());
            work.run(move || {
                let mut g = st.lock().unwrap_or_else(|p| p.into_inner());
                let s = g
                    .as_mut()
                    .ok_or_else(|| Error::invalid("internal: an endpoint's state is missing"))?;
                h.message(s, m)
            })
            .await?
            .map_err(|e| e.context(format_args!("endpoint {i}")))?;
        }
        let r = work
            .run(move || {
                let s = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
                match s {
                    Some(s) => handler.end(i, s),
                    None => Err(Error::invalid("internal: an endpoint's state is missing")),
                }
            })
            .await?;
        if let Some(t) = timed {
            tracing::debug!(
                endpoint = i,
                ticket_bytes = ep.ticket.len(),
                messages,
                bytes,
                us = t.elapsed().as_micros() as u64,
                ok = r.is_ok(),
                "endpoint received"
            );
        }
        r
    }

    /// One endpoint's record batches (host memory) as an iterator: each `next` waits
    /// for the next batch. Dropping the iterator cancels the stream.
    ///
    /// Blocking; in async code use [`batch_stream`](Self::batch_stream), a
    /// `futures::Stream` of a flight's batches.
    pub fn stream(&self, endpoint: &Endpoint) -> Result<ReceivedStream<'_>> {
        let stream = self.block_on("Client::batch_stream", self.open(endpoint, 0))?;
        Ok(ReceivedStream {
            client: self,
            stream: Some(stream),
            decoder: IpcStreamDecoder::default(),
        })
    }
}

/// One endpoint's record batches, received one by one ([`Client::stream`]).
pub struct ReceivedStream<'a> {
    client: &'a Client,
    stream: Option<Streaming<FlightData>>,
    decoder: IpcStreamDecoder,
}

impl std::fmt::Debug for ReceivedStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceivedStream")
            .field("open", &self.stream.is_some())
            .finish()
    }
}

impl Iterator for ReceivedStream<'_> {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            let s = self.stream.as_mut()?;
            let m = match self.client.block_on("Client::batch_stream", async {
                s.message().await.map_err(|s| from_status(DOGET, s))
            }) {
                Ok(Some(m)) => m,
                Ok(None) => {
                    self.stream = None;
                    return None;
                }
                Err(e) => {
                    self.stream = None;
                    return Some(Err(e));
                }
            };
            match self.decoder.decode(&m) {
                Ok(Decoded::Batch(b)) => return Some(Ok(b)),
                Ok(_) => continue,
                Err(e) => {
                    self.stream = None;
                    return Some(Err(e));
                }
            }
        }
    }
}

/// The chunks one endpoint must deliver (`range` of `region`), and those it did.
pub(crate) struct Claims {
    region: ChunkRegion,
    range: Range<u64>,
    bits: Vec<u64>,
    got: u64,
}

impl Claims {
    /// The claims of `range` of `region` (the bitmap is allocated fallibly: its size
    /// comes from the server's ticket).
    pub(crate) fn new(region: ChunkRegion, range: Range<u64>) -> Result<Claims> {
        let n = usize::try_from((range.end - range.start).div_ceil(64)).map_err(|_| {
            Error::invalid(format!("a ticket of {} chunks", range.end - range.start))
        })?;
        let mut bits = Vec::new();
        bits.try_reserve_exact(n).map_err(|_| {
            Error::invalid(format!(
                "a ticket of {} chunks cannot be tracked in memory",
                range.end - range.start
            ))
        })?;
        bits.resize(n, 0);
        Ok(Claims {
            region,
            range,
            bits,
            got: 0,
        })
    }

    /// Claims chunk `coords`: an error when it is not one of the endpoint's chunks or
    /// came before.
    pub(crate) fn claim(&mut self, coords: &[u64]) -> Result<()> {
        let lin = self
            .region
            .linear(coords)
            .filter(|l| self.range.contains(l))
            .ok_or_else(|| {
                Error::Malformed(format!(
                    "the server sent chunk {coords:?}, which is not among the ticket's chunks \
                     {}..{} of the region {:?}..{:?}",
                    self.range.start,
                    self.range.end,
                    self.region.start(),
                    self.region.end()
                ))
            })?;
        let k = (lin - self.range.start) as usize;
        let (w, b) = (k / 64, 1u64 << (k % 64));
        if self.bits[w] & b != 0 {
            return Err(Error::Malformed(format!(
                "the server sent chunk {coords:?} twice"
            )));
        }
        self.bits[w] |= b;
        self.got += 1;
        Ok(())
    }

    /// Checks that every chunk arrived.
    pub(crate) fn finish(&self, i: usize) -> Result<()> {
        let want = self.range.end - self.range.start;
        if self.got != want {
            return Err(Error::io(
                "receiving an Arrow Flight stream",
                format!(
                    "endpoint {i} ended after {} of its {want} chunks: the result would be \
                     incomplete",
                    self.got
                ),
            ));
        }
        Ok(())
    }
}
