//! [`HostBatchStream`]: a flight's host record batches as a `futures::Stream`, one
//! endpoint after another, in the `RecordBatchStream` convention (a stream of
//! `Result<RecordBatch, ArrowError>` that knows its schema before the first batch).

use std::pin::Pin;
use std::task::{Context, Poll};

use arrow_array::RecordBatch;
use arrow_flight::FlightData;
use arrow_schema::{ArrowError, SchemaRef};
use futures::Stream;
use futures::stream::BoxStream;
use tonic::Streaming;

use super::super::decode::{Decoded, IpcStreamDecoder};
use super::super::status::from_status;
use super::super::ticket::Part;
use super::{Client, Endpoint, Flight, run};
use devbuf_core::error::{Error, Result};

/// A flight's record batches in host memory, received one at a time
/// ([`Client::batch_stream`]): a `futures::Stream` of
/// `Result<RecordBatch, ArrowError>` with the flight's [`schema`](Self::schema) — the
/// `RecordBatchStream` convention of DataFusion and others.
///
/// The endpoints are fetched in order, one at a time; the next message is only asked
/// for when the consumer polls (HTTP/2 flow control holds the server back meanwhile).
/// Every batch must have the flight's schema; a devbuf batch endpoint that ends before
/// all its batches is an error, never a shorter stream. After an error the stream
/// ends. Dropping the stream cancels the endpoint's gRPC stream (the server sees it
/// cancelled). It must be polled on a tokio runtime.
pub struct HostBatchStream<'a> {
    schema: SchemaRef,
    inner: BoxStream<'a, std::result::Result<RecordBatch, ArrowError>>,
}

impl std::fmt::Debug for HostBatchStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBatchStream")
            .field("schema", &self.schema)
            .finish()
    }
}

impl HostBatchStream<'_> {
    /// The schema of every batch (the flight's).
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

impl Stream for HostBatchStream<'_> {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// Where the stream is.
struct State<'a> {
    client: &'a Client,
    schema: SchemaRef,
    endpoints: Vec<Endpoint>,
    /// The next endpoint to open.
    next: usize,
    /// The open endpoint: its index, stream, decoder, batches received and expected.
    open: Option<Open>,
}

struct Open {
    i: usize,
    stream: Streaming<FlightData>,
    decoder: IpcStreamDecoder,
    got: u64,
    want: Option<u64>,
}

impl State<'_> {
    /// The next batch; `None` after the last endpoint ended.
    async fn next(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            let Some(open) = self.open.as_mut() else {
                let Some(ep) = self.endpoints.get(self.next) else {
                    return Ok(None);
                };
                run::need_tokio("HostBatchStream")?;
                let stream = self.client.open(ep, 0).await?;
                let want = match &ep.part() {
                    Some(Part::Batches { range, .. }) => Some(range.end - range.start),
                    _ => None,
                };
                self.open = Some(Open {
                    i: self.next,
                    stream,
                    decoder: IpcStreamDecoder::default(),
                    got: 0,
                    want,
                });
                self.next += 1;
                continue;
            };
            let i = open.i;
            let m = open.stream.message().await.map_err(|s| {
                from_status("Arrow Flight DoGet", s)
                    .context(format_args!("endpoint {i}: the stream broke off"))
            })?;
            let Some(m) = m else {
                if let Some(want) = open.want
                    && open.got != want
                {
                    return Err(Error::io(
                        "receiving an Arrow Flight stream",
                        format!(
                            "endpoint {i} ended after {} of its {want} batches: the stream \
                             would be incomplete",
                            open.got
                        ),
                    ));
                }
                self.open = None;
                continue;
            };
            match open
                .decoder
                .decode(&m)
                .map_err(|e| e.context(format_args!("endpoint {i}")))?
            {
                Decoded::Batch(b) => {
                    if b.schema().fields() != self.schema.fields() {
                        return Err(Error::Malformed(format!(
                            "endpoint {i} sent a batch of another schema than the flight's"
                        )));
                    }
                    open.got += 1;
                    return Ok(Some(b));
                }
                Decoded::Schema(_) | Decoded::Dictionary => continue,
            }
        }
    }
}

impl Client {
    /// The host record batches of every endpoint of `flight` (any Flight server), in
    /// order, as a stream on the caller's tokio runtime (see [`HostBatchStream`]).
    /// Nothing is sent before the stream is first polled. The batches a devbuf server
    /// serves under a name: the flight of `Query::whole(Target::batch(name)?)`.
    ///
    /// ```no_run
    /// use futures::TryStreamExt;
    /// use devbuf_flight::{Query, Target};
    /// # async fn f(client: &devbuf_flight::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let flight = client.info_async(&Query::whole(Target::batch("numbers")?)).await?;
    /// let mut s = client.batch_stream(&flight);
    /// println!("{}", s.schema());
    /// while let Some(batch) = s.try_next().await? {
    ///     println!("{} rows", batch.num_rows());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn batch_stream(&self, flight: &Flight) -> HostBatchStream<'_> {
        let state = State {
            client: self,
            schema: flight.schema.clone(),
            endpoints: flight.endpoints.clone(),
            next: 0,
            open: None,
        };
        let inner = futures::stream::unfold(Some(state), |state| async move {
            let mut state = state?;
            match state.next().await {
                Ok(Some(b)) => Some((Ok(b), Some(state))),
                Ok(None) => None,
                // Ends the stream (and drops the open gRPC stream).
                Err(e) => Some((Err(ArrowError::from(e)), None)),
            }
        });
        HostBatchStream {
            schema: flight.schema.clone(),
            inner: Box::pin(inner),
        }
    }
}
