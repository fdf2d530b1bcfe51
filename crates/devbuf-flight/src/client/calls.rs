//! The calls that move no bulk data (handshake, list, describe, remove) and uploads
//! (DoPut): each an `async fn` on the caller's runtime, and its blocking wrapper.

use std::sync::Arc;

use arrow_flight::{Action, Criteria, FlightData, HandshakeRequest};
use bytes::Bytes;
use futures::StreamExt;
use tonic::Request;
use tonic::metadata::MetadataValue;

use super::super::auth::{check_token, encode_base64};
use super::super::encode::{Batch, IpcStreamEncoder};
use super::super::protocol::REMOVE_ACTION;
use super::super::status::from_status;
use super::super::ticket::{Query, Target};
use super::{Client, Flight, run, trace};
use devbuf_core::error::{Error, Result};

impl Client {
    /// The Flight handshake with HTTP Basic credentials: the server issues a token,
    /// which this client then sends with every call (and returns). Blocking: see
    /// [`handshake_async`](Self::handshake_async).
    pub fn handshake(&self, user: &str, password: &str) -> Result<String> {
        self.block_on(
            "Client::handshake_async",
            self.handshake_async(user, password),
        )
    }

    /// [`handshake`](Self::handshake) on the caller's tokio runtime.
    ///
    /// ```no_run
    /// # async fn f(client: &devbuf_flight::Client) -> devbuf_core::Result<()> {
    /// let token = client.handshake_async("reader", "pa55word").await?;
    /// # let _ = token; Ok(()) }
    /// ```
    pub async fn handshake_async(&self, user: &str, password: &str) -> Result<String> {
        run::need_tokio("Client::handshake_async")?;
        let basic = format!(
            "Basic {}",
            encode_base64(format!("{user}:{password}").as_bytes())
        );
        let value: MetadataValue<_> = basic
            .parse()
            .map_err(|_| Error::invalid("the user name or password cannot travel in a header"))?;
        let mut conn = self.home.clone();
        let mut req = Request::new(futures::stream::once(async { HandshakeRequest::default() }));
        req.metadata_mut().insert("authorization", value);
        let resp = conn
            .handshake(req)
            .await
            .map_err(|s| from_status("the Arrow Flight handshake", s))?;
        let header = resp
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' ').map(|(_, t)| t.trim().to_string()));
        let mut stream = resp.into_inner();
        let payload = match stream.next().await {
            Some(Ok(r)) => String::from_utf8(r.payload.to_vec()).ok(),
            Some(Err(s)) => return Err(from_status("the Arrow Flight handshake", s)),
            None => None,
        };
        let token = header.or(payload).ok_or_else(|| {
            Error::io(
                "the Arrow Flight handshake",
                "the server answered without a token",
            )
        })?;
        let token = check_token(&token).map_err(|e| e.context("the issued token"))?;
        *self.token.lock().unwrap_or_else(|p| p.into_inner()) = Some(token.clone());
        Ok(token)
    }

    /// The flights the server lists whose name starts with `prefix` (`""`: all of them;
    /// sent as the `ListFlights` criteria). devbuf's servers list their arrays, whose
    /// name is the path under the root (`"group/"`: the arrays in `group`), and their
    /// batches. Blocking: see [`list_async`](Self::list_async).
    pub fn list(&self, prefix: &str) -> Result<Vec<Flight>> {
        self.block_on("Client::list_async", self.list_async(prefix))
    }

    /// [`list`](Self::list) on the caller's tokio runtime.
    ///
    /// ```no_run
    /// # async fn f(client: &devbuf_flight::Client) -> devbuf_core::Result<()> {
    /// for f in client.list_async("").await? {
    ///     println!("{:?}: {} records", f.target, f.total_records);
    /// }
    /// let in_group = client.list_async("group/").await?;
    /// # let _ = in_group; Ok(()) }
    /// ```
    pub async fn list_async(&self, prefix: &str) -> Result<Vec<Flight>> {
        run::need_tokio("Client::list_async")?;
        let req = self.request(Criteria {
            expression: Bytes::copy_from_slice(prefix.as_bytes()),
        })?;
        let mut conn = self.home.clone();
        let mut s = conn
            .list_flights(req)
            .await
            .map_err(|s| from_status("Arrow Flight ListFlights", s))?
            .into_inner();
        let mut out = Vec::new();
        while let Some(i) = s.next().await {
            out.push(Flight::from_info(
                i.map_err(|s| from_status("Arrow Flight ListFlights", s))?,
            )?);
        }
        Ok(out)
    }

    /// The description of what `query` asks for. Blocking: see
    /// [`info_async`](Self::info_async).
    pub fn info(&self, query: &Query) -> Result<Flight> {
        self.block_on("Client::info_async", self.info_async(query))
    }

    /// [`info`](Self::info) on the caller's tokio runtime.
    ///
    /// ```no_run
    /// use devbuf_flight::{Query, Target};
    /// # async fn f(client: &devbuf_flight::Client) -> devbuf_core::Result<()> {
    /// let flight = client.info_async(&Query::whole(Target::array("v3_float32.zarr")?)).await?;
    /// println!("{} endpoints", flight.endpoints.len());
    /// # Ok(()) }
    /// ```
    pub async fn info_async(&self, query: &Query) -> Result<Flight> {
        run::need_tokio("Client::info_async")?;
        let req = self.request(query.descriptor())?;
        let mut conn = self.home.clone();
        let info = conn
            .get_flight_info(req)
            .await
            .map(|r| r.into_inner())
            .map_err(|s| from_status("Arrow Flight GetFlightInfo", s))?;
        Flight::from_info(info)
    }

    /// Uploads `batches` (host or device memory, all of one schema, at least one: a
    /// `RecordBatch`, a [`Batch`], an array or `Vec` of them, any iterator of them)
    /// under `name` (DoPut); the server refuses a name it already serves. A device batch
    /// is encoded on the device and crosses PCIe once; the server keeps uploads in host
    /// memory. Blocking: see [`put_async`](Self::put_async).
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use arrow_array::{Int64Array, RecordBatch};
    /// # fn f(client: &devbuf_flight::Client) -> devbuf_core::Result<()> {
    /// let rb = RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from(vec![1, 2])) as _)])
    ///     .map_err(devbuf_core::Error::from)?;
    /// client.put("numbers", [rb.clone()])?;
    /// client.put("more", vec![rb.clone(), rb])?;
    /// # Ok(()) }
    /// ```
    pub fn put(
        &self,
        name: &str,
        batches: impl IntoIterator<Item = impl Into<Batch>>,
    ) -> Result<()> {
        let batches: Vec<Batch> = batches.into_iter().map(Into::into).collect();
        self.block_on("Client::put_async", self.put_batches(name, batches))
    }

    /// [`put`](Self::put) on the caller's tokio runtime (the batches are encoded on its
    /// blocking threads, never on the executor). Dropping the future cancels the call.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use arrow_array::{Int64Array, RecordBatch};
    /// use devbuf_flight::Batch;
    /// # async fn f(client: &devbuf_flight::Client) -> devbuf_core::Result<()> {
    /// let rb = RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from(vec![1, 2])) as _)])
    ///     .map_err(devbuf_core::Error::from)?;
    /// client.put_async("numbers", [Batch::from(rb)]).await?;
    /// # Ok(()) }
    /// ```
    pub async fn put_async(
        &self,
        name: &str,
        batches: impl IntoIterator<Item = impl Into<Batch>>,
    ) -> Result<()> {
        let batches: Vec<Batch> = batches.into_iter().map(Into::into).collect();
        self.put_batches(name, batches).await
    }

    async fn put_batches(&self, name: &str, batches: Vec<Batch>) -> Result<()> {
        let span = tracing::info_span!(
            "devbuf.flight.client",
            uri = %self.uri(),
            call = "put",
            name,
            batches = batches.len(),
        );
        // Shared with the encoding task; counted for the closing event only when a
        // subscriber takes it.
        let batches = Arc::new(batches);
        trace::call(span, self.put_untraced(name, batches.clone()), |_| {
            trace::of_batches(&batches)
        })
        .await
    }

    async fn put_untraced(&self, name: &str, batches: Arc<Vec<Batch>>) -> Result<()> {
        run::need_tokio("Client::put_async")?;
        let target = Target::batch(name)?;
        let messages = tokio::task::spawn_blocking(move || encode(target, &batches))
            .await
            .map_err(|e| {
                Error::io(
                    "encoding batches for Arrow Flight DoPut",
                    format!("the encoding task ended: {e}"),
                )
                .with_source(e)
            })??;
        let req = self.request(futures::stream::iter(messages))?;
        let mut conn = self.home.clone();
        let mut s = conn
            .do_put(req)
            .await
            .map_err(|s| from_status("Arrow Flight DoPut", s))?
            .into_inner();
        while let Some(r) = s.next().await {
            r.map_err(|s| from_status("Arrow Flight DoPut", s))?;
        }
        Ok(())
    }

    /// Removes the batches the server serves under `name` (its `remove` action).
    /// Blocking: see [`remove_async`](Self::remove_async).
    pub fn remove(&self, name: &str) -> Result<()> {
        self.block_on("Client::remove_async", self.remove_async(name))
    }

    /// [`remove`](Self::remove) on the caller's tokio runtime.
    ///
    /// ```no_run
    /// # async fn f(client: &devbuf_flight::Client) -> devbuf_core::Result<()> {
    /// client.remove_async("numbers").await?;
    /// # Ok(()) }
    /// ```
    pub async fn remove_async(&self, name: &str) -> Result<()> {
        run::need_tokio("Client::remove_async")?;
        let req = self.request(Action::new(REMOVE_ACTION, name.to_string()))?;
        let mut conn = self.home.clone();
        let mut s = conn
            .do_action(req)
            .await
            .map_err(|s| from_status("Arrow Flight DoAction", s))?
            .into_inner();
        while let Some(r) = s.next().await {
            r.map_err(|s| from_status("Arrow Flight DoAction", s))?;
        }
        Ok(())
    }
}

/// The DoPut messages of `batches` under `target`: the schema, then each batch.
fn encode(target: Target, batches: &[Batch]) -> Result<Vec<FlightData>> {
    let first = batches
        .first()
        .ok_or_else(|| Error::invalid("put needs at least one batch"))?;
    let schema = first.schema();
    let mut enc = IpcStreamEncoder::new()?;
    let mut messages: Vec<FlightData> =
        vec![enc.schema(&schema).with_descriptor(target.descriptor())];
    for (i, b) in batches.iter().enumerate() {
        if b.schema().fields() != schema.fields() {
            return Err(Error::invalid(format!(
                "batch {i} has another schema than batch 0"
            )));
        }
        messages.extend(enc.batch(b)?);
    }
    Ok(messages)
}
