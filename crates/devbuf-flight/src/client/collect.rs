//! Fetches that keep what arrives: [`Client::read_chunks`] (the chunk batches of a
//! selection, checked chunk by chunk), [`Client::read_batches`] (a registered name's
//! batches, checked by count) and [`Client::fetch`] (one endpoint of any flight).

use std::ops::Range;
use std::sync::{Arc, Mutex};

use arrow_flight::FlightData;

use super::super::encode::Batch;
use super::super::ticket::{ChunkRegion, Part, Query, Target};
use super::fetch::{Claims, Handler};
use super::read::{Grid, ranges_of};
use super::receive::Receiver;
use super::{Client, Flight};
use devbuf_core::arrow::ChunkBatch;
use devbuf_core::cuda::Context;
use devbuf_core::error::{Error, Result};
use devbuf_core::zarr::BufferPrototype;

/// The handler of [`Client::read_chunks`], [`Client::read_batches`] and
/// [`Client::fetch`]: keeps every endpoint's batches, in order.
struct Collect {
    schema: arrow_schema::SchemaRef,
    ctx: Option<Context>,
    /// The chunk grid (chunk flights read by `read_chunks`): device batches' chunk
    /// coordinates are then read from the received host message.
    grid: Option<Grid>,
    /// Per endpoint: the chunks it must deliver (chunk flights).
    claims: Option<(ChunkRegion, Vec<Range<u64>>)>,
    /// Per endpoint: how many batches it must deliver (batch flights).
    counts: Option<Vec<u64>>,
    got: Mutex<Vec<Option<Vec<Kept>>>>,
}

/// A received batch, with its chunk coordinates when they were read on the host.
type Kept = (Batch, Option<Vec<u64>>);

struct CollectState {
    receiver: Receiver,
    claims: Option<Claims>,
    batches: Vec<Kept>,
}

impl Handler for Collect {
    type State = CollectState;

    fn begin(&self, i: usize) -> Result<CollectState> {
        Ok(CollectState {
            receiver: Receiver::new(self.schema.clone(), self.ctx.clone()),
            claims: match &self.claims {
                Some((region, ranges)) => Some(Claims::new(region.clone(), ranges[i].clone())?),
                None => None,
            },
            batches: Vec::new(),
        })
    }

    fn message(&self, st: &mut CollectState, fd: FlightData) -> Result<()> {
        if let Some(b) = st.receiver.message(&fd)? {
            let mut known = None;
            if let Some(c) = &mut st.claims {
                // A device batch's coordinates from the host message (Grid::host_coords).
                let coords = match (&b, &self.grid) {
                    (Batch::Device(_), Some(g)) => g.host_coords(&fd)?,
                    _ => None,
                };
                match (&coords, &self.grid) {
                    (Some(v), Some(g)) => {
                        for chunk in v.chunks(g.chunk_shape.len()) {
                            c.claim(chunk)?;
                        }
                    }
                    _ => {
                        let cb = ChunkBatch::try_from(b.clone())?;
                        for k in 0..cb.len() {
                            c.claim(cb.coords(k).unwrap_or_default())?;
                        }
                    }
                }
                known = coords;
            }
            st.batches.push((b, known));
        }
        Ok(())
    }

    fn end(&self, i: usize, st: CollectState) -> Result<()> {
        if let Some(c) = &st.claims {
            c.finish(i)?;
        }
        if let Some(want) = self.counts.as_ref().and_then(|c| c.get(i))
            && st.batches.len() as u64 != *want
        {
            return Err(Error::io(
                "receiving an Arrow Flight stream",
                format!(
                    "endpoint {i} ended after {} of its {want} batches: the result would be \
                     incomplete",
                    st.batches.len()
                ),
            ));
        }
        let mut g = self.got.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = g.get_mut(i) {
            *slot = Some(st.batches);
        }
        Ok(())
    }
}

impl Collect {
    fn into_kept(self) -> Vec<Kept> {
        self.got
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .into_iter()
            .flatten()
            .flatten()
            .collect()
    }
}

impl Client {
    /// The chunk batches of a selection (element ranges per axis; the whole array when
    /// `None`) as received, in endpoint order: on the host zero-copy views of the
    /// received bodies, on a device one allocation per batch from the context's
    /// stream-ordered pool ([`Context::allocate_pooled`](devbuf_core::cuda::Context::allocate_pooled):
    /// legacy CUDA IPC cannot export it; copy a batch into
    /// [`Context::allocate`](devbuf_core::cuda::Context::allocate) memory to share it). Every chunk the
    /// selection touches arrives once, whole (edge chunks padded with the fill value,
    /// as [`ChunkBatch`] stores them).
    ///
    /// Blocking: see [`read_chunks_async`](Self::read_chunks_async).
    pub fn read_chunks(
        &self,
        path: &str,
        selection: Option<&[Range<u64>]>,
        prototype: &BufferPrototype,
    ) -> Result<Vec<ChunkBatch>> {
        self.block_on(
            "Client::read_chunks_async",
            self.read_chunks_async(path, selection, prototype),
        )
    }

    /// [`read_chunks`](Self::read_chunks) on the caller's tokio runtime; dropping the
    /// future cancels it (as [`read_async`](Self::read_async)).
    ///
    /// ```no_run
    /// use devbuf_core::zarr::BufferPrototype;
    /// # async fn f(client: &devbuf_flight::Client) -> devbuf_core::Result<()> {
    /// let batches = client
    ///     .read_chunks_async("v3_float32.zarr", Some(&[0..10]), &BufferPrototype::Host)
    ///     .await?;
    /// println!("{} chunk batches", batches.len());
    /// # Ok(()) }
    /// ```
    pub async fn read_chunks_async(
        &self,
        path: &str,
        selection: Option<&[Range<u64>]>,
        prototype: &BufferPrototype,
    ) -> Result<Vec<ChunkBatch>> {
        let span = tracing::info_span!(
            "devbuf.flight.client",
            uri = %self.uri(),
            call = "read_chunks",
            path,
            selection = ?selection,
            device = prototype.is_device(),
        );
        super::trace::call(
            span,
            self.read_chunks_untraced(path, selection, prototype),
            |b| (b.len(), 0, 0),
        )
        .await
    }

    async fn read_chunks_untraced(
        &self,
        path: &str,
        selection: Option<&[Range<u64>]>,
        prototype: &BufferPrototype,
    ) -> Result<Vec<ChunkBatch>> {
        super::run::need_tokio("Client::read_chunks_async")?;
        let target = Target::array(path)?;
        let whole = self.info_async(&Query::whole(target.clone())).await?;
        let grid = Grid::of(&whole, path)?;
        let sel: Vec<Range<u64>> = match selection {
            Some(s) => s.to_vec(),
            None => grid.array_shape.iter().map(|&n| 0..n).collect(),
        };
        let region = grid.region(&sel)?;
        let flight = if selection.is_some() {
            self.info_async(&Query {
                target,
                selection: Some(sel),
                endpoints: None,
            })
            .await?
        } else {
            whole
        };
        if Grid::of(&flight, path)? != grid {
            return Err(Error::Malformed(format!(
                "the flight of the selection of {path:?} describes another array"
            )));
        }
        let ranges = ranges_of(&flight, path, &region)?;
        let kept = self
            .collect(&flight, Some(grid), Some((region, ranges)), None, prototype)
            .await?;
        kept.into_iter()
            .map(|b| match b {
                (Batch::Device(d), Some(coords)) => {
                    devbuf_core::__private::arrow::chunk_batch_with_coords(d, coords)
                }
                (b, _) => ChunkBatch::try_from(b),
            })
            .collect()
    }

    /// The batches served under `name`, in order, in `prototype`'s memory. Blocking:
    /// see [`read_batches_async`](Self::read_batches_async).
    pub fn read_batches(&self, name: &str, prototype: &BufferPrototype) -> Result<Vec<Batch>> {
        self.block_on(
            "Client::read_batches_async",
            self.read_batches_async(name, prototype),
        )
    }

    /// [`read_batches`](Self::read_batches) on the caller's tokio runtime; dropping the
    /// future cancels it. For host batches one at a time, see
    /// [`batch_stream`](Self::batch_stream) of the flight of
    /// `Query::whole(Target::batch(name)?)`.
    ///
    /// ```no_run
    /// use devbuf_core::zarr::BufferPrototype;
    /// # async fn f(client: &devbuf_flight::Client) -> devbuf_core::Result<()> {
    /// let batches = client.read_batches_async("numbers", &BufferPrototype::Host).await?;
    /// # let _ = batches; Ok(()) }
    /// ```
    pub async fn read_batches_async(
        &self,
        name: &str,
        prototype: &BufferPrototype,
    ) -> Result<Vec<Batch>> {
        let span = tracing::info_span!(
            "devbuf.flight.client",
            uri = %self.uri(),
            call = "read_batches",
            name,
            device = prototype.is_device(),
        );
        super::trace::call(span, self.read_batches_untraced(name, prototype), |b| {
            super::trace::of_batches(b)
        })
        .await
    }

    async fn read_batches_untraced(
        &self,
        name: &str,
        prototype: &BufferPrototype,
    ) -> Result<Vec<Batch>> {
        super::run::need_tokio("Client::read_batches_async")?;
        let flight = self.info_async(&Query::whole(Target::batch(name)?)).await?;
        let mut counts = Vec::with_capacity(flight.endpoints.len());
        for (i, ep) in flight.endpoints.iter().enumerate() {
            match &ep.part() {
                Some(Part::Batches { name: n, range }) if n == name => {
                    counts.push(range.end - range.start)
                }
                _ => {
                    return Err(Error::Malformed(format!(
                        "endpoint {i} of the flight of batch {name:?} is not a devbuf batch ticket"
                    )));
                }
            }
        }
        self.batches(&flight, Some(counts), prototype).await
    }

    /// Fetches endpoint `i` of `flight` alone (any Flight server), into `prototype`'s
    /// memory: what a caller retries after an endpoint failed. Blocking: see
    /// [`fetch_async`](Self::fetch_async).
    pub fn fetch(
        &self,
        flight: &Flight,
        i: usize,
        prototype: &BufferPrototype,
    ) -> Result<Vec<Batch>> {
        self.block_on(
            "Client::fetch_async",
            self.fetch_async(flight, i, prototype),
        )
    }

    /// [`fetch`](Self::fetch) on the caller's tokio runtime; dropping the future cancels
    /// it.
    ///
    /// ```no_run
    /// use devbuf_core::zarr::BufferPrototype;
    /// # async fn f(client: &devbuf_flight::Client, flight: &devbuf_flight::Flight) -> devbuf_core::Result<()> {
    /// let again = client.fetch_async(flight, 0, &BufferPrototype::Host).await?;
    /// # let _ = again; Ok(()) }
    /// ```
    pub async fn fetch_async(
        &self,
        flight: &Flight,
        i: usize,
        prototype: &BufferPrototype,
    ) -> Result<Vec<Batch>> {
        super::run::need_tokio("Client::fetch_async")?;
        let ep = flight.endpoints.get(i).cloned().ok_or_else(|| {
            Error::invalid(format!(
                "endpoint {i} of a flight of {} endpoints",
                flight.endpoints.len()
            ))
        })?;
        let one = Flight {
            endpoints: vec![ep],
            ..flight.clone()
        };
        self.batches(&one, None, prototype).await
    }

    /// The batches of a batch flight (`counts`: per endpoint, how many it must send).
    async fn batches(
        &self,
        flight: &Flight,
        counts: Option<Vec<u64>>,
        prototype: &BufferPrototype,
    ) -> Result<Vec<Batch>> {
        let kept = self.collect(flight, None, None, counts, prototype).await?;
        Ok(kept.into_iter().map(|(b, _)| b).collect())
    }

    async fn collect(
        &self,
        flight: &Flight,
        grid: Option<Grid>,
        claims: Option<(ChunkRegion, Vec<Range<u64>>)>,
        counts: Option<Vec<u64>>,
        prototype: &BufferPrototype,
    ) -> Result<Vec<Kept>> {
        let handler = Arc::new(Collect {
            schema: flight.schema.clone(),
            ctx: prototype.context()?,
            grid,
            claims,
            counts,
            got: Mutex::new(vec![None; flight.endpoints.len()]),
        });
        self.fetch_all(&flight.endpoints, handler.clone()).await?;
        let handler = Arc::try_unwrap(handler)
            .map_err(|_| Error::invalid("internal: a receiving task outlived the fetch"))?;
        Ok(handler.into_kept())
    }
}
