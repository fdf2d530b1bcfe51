//! [`Client`]: an Arrow Flight client — connect (plain or TLS) with a bearer token,
//! list, describe, read arrays and batches into host or device memory, upload batches —
//! as `async fn`s on the caller's tokio runtime, and as blocking calls that wrap them.
//!
//! This file: connecting, and the description of a flight ([`Flight`], [`Endpoint`]).
//! `run.rs`: how a blocking call runs its async form. `calls.rs`: calls that move no
//! bulk data, and uploads. `fetch.rs`: fetching endpoints concurrently and checking
//! completeness. `read.rs`: [`Client::read`] (the assembly of a selection); `chunks.rs`:
//! its host fast path. `collect.rs`: [`Client::read_chunks`], [`Client::read_batches`],
//! [`Client::fetch`]. `batch_stream.rs`: host record batches as a `futures::Stream`.
//! `receive.rs`: messages into host or device batches.

mod batch_stream;
mod calls;
mod chunks;
mod collect;
mod fetch;
mod read;
mod receive;
mod run;
mod trace;
mod transport;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{FlightDescriptor, FlightInfo};
use arrow_schema::SchemaRef;
use bytes::Bytes;
use tonic::Request;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint as TonicEndpoint};

pub use batch_stream::HostBatchStream;
pub use fetch::ReceivedStream;
use transport::Transport;

use super::auth::check_token;
use super::protocol::endpoint_uri;
use super::ticket::{Part, Query, Target};
use devbuf_core::error::{Error, Result};

/// How a [`Client`] connects and reads: a struct of public fields with documented
/// defaults; set the ones you need on [`ClientOptions::default()`] (the struct is
/// `#[non_exhaustive]`, so fields may be added without a breaking release). Checked
/// by [`Client::connect`], whose error names the field and its valid range.
///
/// ```
/// use devbuf_flight::ClientOptions;
/// let mut o = ClientOptions::default();
/// o.token = Some("s3cret".into());
/// o.concurrency = 16;
/// o.max_frame_bytes = 16 << 10; // HTTP/2's default frame size
/// # let _ = o;
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct ClientOptions {
    /// Sent as `authorization: Bearer <token>` with every call (default: none;
    /// [`Client::handshake`] gets one for HTTP Basic credentials and sends it from then
    /// on). [`read_token_file`](crate::read_token_file) reads one from a file.
    pub token: Option<String>,
    /// A PEM certificate (a private CA, or the server's self-signed certificate) to trust
    /// for `grpc+tls://` servers instead of the web PKI roots (default: none, the web
    /// PKI roots).
    pub tls_ca: Option<Vec<u8>>,
    /// The name the server's certificate must carry (default: none, the URI's host).
    pub tls_domain: Option<String>,
    /// How many endpoints are fetched at once (1 to 1024; default 8).
    pub concurrency: usize,
    /// Largest message accepted from a server (1 KiB to 2 GiB; default 1 GiB).
    pub max_message_bytes: usize,
    /// How long a connection may take to open (default 10 s).
    pub connect_timeout: Duration,
    /// How long a stream may send nothing before the fetch fails (default 300 s;
    /// `None`: wait as long as the connection lives; HTTP/2 keep-alive pings still
    /// detect a vanished server).
    pub idle_timeout: Option<Duration>,
    /// Threads of the client's own tokio runtime (1 to 64; default one per core, 2 to
    /// 8), which only blocking calls made outside any tokio runtime start: each
    /// connection's HTTP/2 task and each received message's copy out of the connection
    /// run on them. The async calls run on the caller's runtime.
    pub runtime_threads: usize,
    /// The largest HTTP/2 frame the client accepts on plain (`grpc://`) connections
    /// (16384 to 16777215; default 1 MiB). A server sends a DoGet body in frames of at
    /// most this size, one write each: 16 KiB (HTTP/2's default) means 65536 frames per
    /// GiB. `grpc+tls://` connections go through tonic's channel, which keeps 16 KiB.
    pub max_frame_bytes: u32,
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("tls_ca", &self.tls_ca.is_some())
            .field("tls_domain", &self.tls_domain)
            .field("concurrency", &self.concurrency)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("runtime_threads", &self.runtime_threads)
            .field("max_frame_bytes", &self.max_frame_bytes)
            .finish()
    }
}

impl Default for ClientOptions {
    /// No token, the web PKI roots for TLS, 8 endpoints fetched at once, 1 GiB per
    /// message, 10 s to connect, 300 s of silence before a stream counts as dead, a
    /// runtime thread per core (2 to 8), HTTP/2 frames of up to 1 MiB.
    fn default() -> Self {
        ClientOptions {
            token: None,
            tls_ca: None,
            tls_domain: None,
            concurrency: 8,
            max_message_bytes: 1 << 30,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Some(Duration::from_secs(300)),
            runtime_threads: std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .clamp(2, 8),
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
        }
    }
}

impl ClientOptions {
    fn validate(&self) -> Result<()> {
        if !(1..=1024).contains(&self.concurrency) {
            return Err(Error::invalid(format!(
                "ClientOptions::concurrency is {}, valid: 1 to 1024",
                self.concurrency
            )));
        }
        if !(1 << 10..=2 << 30).contains(&self.max_message_bytes) {
            return Err(Error::invalid(format!(
                "ClientOptions::max_message_bytes is {}, valid: 1024 to {}",
                self.max_message_bytes,
                2u64 << 30
            )));
        }
        if !(MIN_FRAME_BYTES..=MAX_FRAME_BYTES).contains(&self.max_frame_bytes) {
            return Err(Error::invalid(format!(
                "ClientOptions::max_frame_bytes is {}, valid: {MIN_FRAME_BYTES} to \
                 {MAX_FRAME_BYTES} (HTTP/2's bounds)",
                self.max_frame_bytes
            )));
        }
        if !(1..=64).contains(&self.runtime_threads) {
            return Err(Error::invalid(format!(
                "ClientOptions::runtime_threads is {}, valid: 1 to 64",
                self.runtime_threads
            )));
        }
        if let Some(t) = &self.token {
            check_token(t).map_err(|e| e.context("ClientOptions::token"))?;
        }
        Ok(())
    }
}

/// Default of [`ClientOptions::max_frame_bytes`]: 1 MiB.
const DEFAULT_MAX_FRAME_BYTES: u32 = 1 << 20;
const MIN_FRAME_BYTES: u32 = 1 << 14;
const MAX_FRAME_BYTES: u32 = (1 << 24) - 1;

/// One endpoint of a flight: its ticket and where to fetch it (empty: the server that
/// described the flight).
#[derive(Clone, Debug, PartialEq)]
pub struct Endpoint {
    /// The ticket, as the server gave it.
    pub ticket: Bytes,
    /// Servers that can serve the ticket (any one of them).
    pub locations: Vec<String>,
}

impl Endpoint {
    /// The ticket read as a devbuf ticket (`None` for another server's tickets). Tickets
    /// are opaque to callers; the client reads devbuf's to check what arrived.
    pub(crate) fn part(&self) -> Option<Part> {
        Part::decode(&self.ticket).ok()
    }
}

/// A flight as `GetFlightInfo` or `ListFlights` describes it.
#[derive(Clone, Debug)]
pub struct Flight {
    /// What it is (`None` when the descriptor is not one of devbuf's).
    pub target: Option<Target>,
    /// The schema of its record batches.
    pub schema: SchemaRef,
    /// Its endpoints, in order.
    pub endpoints: Vec<Endpoint>,
    /// Records (chunks, or rows of batches) in all; -1 when unknown.
    pub total_records: i64,
    /// Bytes in all (as the server holds them); -1 when unknown.
    pub total_bytes: i64,
    /// The descriptor.
    pub descriptor: Option<FlightDescriptor>,
}

impl Flight {
    fn from_info(info: FlightInfo) -> Result<Flight> {
        let descriptor = info.flight_descriptor.clone();
        let target = descriptor
            .as_ref()
            .and_then(|d| Query::from_descriptor(d).ok())
            .map(|q| q.target);
        let endpoints = info
            .endpoint
            .iter()
            .map(|e| {
                let ticket = e
                    .ticket
                    .as_ref()
                    .map(|t| t.ticket.clone())
                    .unwrap_or_default();
                Endpoint {
                    ticket,
                    locations: e.location.iter().map(|l| l.uri.clone()).collect(),
                }
            })
            .collect();
        let (total_records, total_bytes) = (info.total_records, info.total_bytes);
        let schema = crate::decode::guarded("reading a flight's schema", || {
            info.try_decode_schema()
                .map_err(|e| Error::Malformed(format!("the flight's schema: {e}")))
        })?;
        Ok(Flight {
            target,
            schema: Arc::new(schema),
            endpoints,
            total_records,
            total_bytes,
            descriptor,
        })
    }
}

type Conn = FlightServiceClient<Transport>;

/// An Arrow Flight client (any Flight server for the generic calls; devbuf's for
/// [`read`](Self::read) and [`read_chunks`](Self::read_chunks), which need its
/// tickets).
///
/// **Async and blocking.** Every call that waits on the network has an `async fn` form
/// (`connect_async`, `read_async`, `read_chunks_async`, `read_batches_async`,
/// `put_async`, `list_async`, `info_async`, ...) that runs on the caller's tokio
/// runtime (current-thread or multi-thread) and starts no runtime of its own; the
/// received messages are copied out of the connection on that runtime's blocking
/// threads (`spawn_blocking`). The blocking forms wrap them: outside any runtime they
/// run on a runtime of the client's own ([`ClientOptions::runtime_threads`], started by
/// [`connect`](Self::connect), or by the first blocking call of a client that
/// [`connect_async`](Self::connect_async) made); on a multi-thread runtime they hand
/// the thread over (`block_in_place`) and run on that runtime; on a current-thread
/// runtime they are an error naming the async form (blocking would stall the runtime,
/// and with it the connections).
///
/// Connections live on the runtime that opened them: those of a client made by
/// `connect_async` need the caller's runtime to keep running (they end with it).
///
/// **Cancellation.** Dropping an async call's future cancels it: its gRPC streams are
/// dropped (the server sees each stream cancelled), and the drop returns once no
/// received message is being copied any more, with the memory being assembled (host or
/// device) freed.
///
/// The client is `Send + Sync`: share it between threads and tasks (the async calls'
/// futures are `Send`).
///
/// **Failures.** A refused call is an error of the gRPC status's
/// [`kind`](Error::kind) (`NotFound`, `PermissionDenied` for `PERMISSION_DENIED` and
/// `UNAUTHENTICATED`, `Timeout`, `Unsupported`, `Cancelled`, else `Io`) with the
/// `tonic::Status` as its source, whose message names the status (`"Unauthenticated:
/// ..."`, `"NotFound: ..."`); a stream that breaks off is an error, never a shorter
/// result. Nothing is retried: to retry, fetch the failed endpoint again with
/// [`fetch`](Self::fetch) (tickets are stateless, so any endpoint can be fetched again,
/// from any of its locations).
///
/// ```no_run
/// use devbuf_flight::{Client, ClientOptions};
/// use devbuf_core::zarr::BufferPrototype;
/// # async fn f() -> devbuf_core::Result<()> {
/// let mut options = ClientOptions::default();
/// options.token = Some("s3cret".into());
/// let client = Client::connect_async("grpc://127.0.0.1:8815", &options).await?;
/// let all = client.read_async("v3_float32.zarr", .., &BufferPrototype::Host).await?;
/// # let _ = all; Ok(()) }
/// ```
pub struct Client {
    /// The client's own runtime, for blocking calls outside any runtime (`run.rs`).
    runtime: OnceLock<tokio::runtime::Runtime>,
    uri: String,
    options: ClientOptions,
    token: Mutex<Option<String>>,
    home: Conn,
    /// Connections by (location, fetch slot); the empty location is this client's server.
    peers: Mutex<HashMap<(String, usize), Conn>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("uri", &self.uri)
            .field("options", &self.options)
            .finish()
    }
}

impl Client {
    /// Connects to `uri` (`grpc://host:port`, or `grpc+tls://`) with `options` (the
    /// bearer token, TLS, concurrency, ...; [`ClientOptions::default()`] for none).
    /// Blocking: outside any tokio runtime the connection opens on a runtime of the
    /// client's own; on a multi-thread runtime, on that runtime; on a current-thread
    /// runtime it is an error naming [`connect_async`](Self::connect_async).
    ///
    /// ```no_run
    /// use devbuf_flight::{Client, ClientOptions};
    /// let mut options = ClientOptions::default();
    /// options.token = Some("s3cret".into());
    /// let client = Client::connect("grpc://127.0.0.1:8815", &options)?;
    /// # let _ = client;
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn connect(uri: &str, options: &ClientOptions) -> Result<Client> {
        options.validate()?;
        match run::context() {
            run::Context::Outside => {
                let runtime = run::build(options)?;
                let home = runtime.block_on(channel(uri, options))?;
                let client = Client::new(uri, options.clone(), home);
                let _ = client.runtime.set(runtime);
                Ok(client)
            }
            run::Context::MultiThread(h) => {
                tokio::task::block_in_place(|| h.block_on(Client::connect_async(uri, options)))
            }
            run::Context::CurrentThread => Err(run::would_block("Client::connect_async")),
        }
    }

    /// Connects to `uri` with `options` on the caller's tokio runtime, which the
    /// connections then live on; no runtime is started (an error when polled outside
    /// one). As [`connect`](Self::connect) otherwise.
    ///
    /// ```no_run
    /// use devbuf_flight::{Client, ClientOptions};
    /// # async fn f() -> devbuf_core::Result<()> {
    /// let mut options = ClientOptions::default();
    /// options.token = Some("s3cret".into());
    /// let client = Client::connect_async("grpc://127.0.0.1:8815", &options).await?;
    /// println!("{:?}", client.list_async("").await?.len());
    /// # Ok(()) }
    /// ```
    pub async fn connect_async(uri: &str, options: &ClientOptions) -> Result<Client> {
        options.validate()?;
        run::need_tokio("Client::connect_async")?;
        let home = channel(uri, options).await?;
        Ok(Client::new(uri, options.clone(), home))
    }

    fn new(
        uri: &str,
        options: ClientOptions,
        home: (Transport, tonic::codegen::http::Uri),
    ) -> Client {
        Client {
            home: conn(home, &options),
            runtime: OnceLock::new(),
            uri: uri.to_string(),
            token: Mutex::new(options.token.clone()),
            options,
            peers: Mutex::new(HashMap::new()),
        }
    }

    /// The URI this client connected to.
    pub(crate) fn uri(&self) -> &str {
        &self.uri
    }

    /// The bearer token sent with calls (set by the options or by
    /// [`handshake`](Self::handshake)).
    fn token(&self) -> Option<String> {
        self.token.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A request carrying the bearer token.
    pub(crate) fn request<T>(&self, msg: T) -> Result<Request<T>> {
        let mut req = Request::new(msg);
        if let Some(t) = self.token() {
            let v = format!("Bearer {t}")
                .parse()
                .map_err(|_| Error::invalid("the token cannot travel in a header"))?;
            req.metadata_mut().insert("authorization", v);
        }
        Ok(req)
    }

    /// The connection for the fetch in `slot` (0 to `concurrency - 1`) of an endpoint:
    /// to the first of its locations that connects, or to this client's server when it
    /// names none. Each slot has a connection of its own per server (kept for later
    /// reads): one HTTP/2 connection is served by one task on each side, so streams that
    /// share one share a core.
    pub(crate) async fn conn_for(&self, locations: &[String], slot: usize) -> Result<Conn> {
        let home = [String::new()];
        let keys = if locations.is_empty() {
            &home[..]
        } else {
            locations
        };
        let mut last = None;
        for key in keys {
            if key.is_empty() && slot == 0 {
                return Ok(self.home.clone());
            }
            if let Some(c) = self
                .peers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&(key.clone(), slot))
            {
                return Ok(c.clone());
            }
            let uri = if key.is_empty() { &self.uri } else { key };
            match channel(uri, &self.options).await {
                Ok(ch) => {
                    let c = conn(ch, &self.options);
                    self.peers
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert((key.clone(), slot), c.clone());
                    return Ok(c);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::invalid("an endpoint without locations")))
    }

    pub(crate) fn options(&self) -> &ClientOptions {
        &self.options
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // Without blocking: a client may be dropped inside an async context, where
        // waiting for the runtime's tasks is not allowed. Open streams are cancelled.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

fn conn((transport, origin): (Transport, tonic::codegen::http::Uri), o: &ClientOptions) -> Conn {
    FlightServiceClient::with_origin(transport, origin)
        .max_decoding_message_size(o.max_message_bytes)
        .max_encoding_message_size(usize::MAX)
}

/// A connection to `uri`: for `grpc://` a hyper HTTP/2 client of its own (large frames,
/// see [`ClientOptions::max_frame_bytes`]), reached once here so that an unreachable
/// server is an error now; for `grpc+tls://` tonic's channel with rustls.
async fn channel(uri: &str, o: &ClientOptions) -> Result<(Transport, tonic::codegen::http::Uri)> {
    let (http, tls) = endpoint_uri(uri)?;
    // Scheme and authority only: tonic puts an origin's path in front of every call's.
    let parsed: tonic::codegen::http::Uri = http
        .parse()
        .map_err(|e| Error::invalid(format!("Flight URI {uri:?}: {e}")))?;
    let origin = tonic::codegen::http::Uri::builder()
        .scheme(parsed.scheme_str().unwrap_or("http"))
        .authority(
            parsed
                .authority()
                .map(|a| a.as_str().to_string())
                .unwrap_or_default(),
        )
        .path_and_query("/")
        .build()
        .map_err(|e| Error::invalid(format!("Flight URI {uri:?}: {e}")))?;
    // Timed out when an `io::Error` of the chain says so (the connect timeout); the
    // error is kept as the source.
    let connect_err = |e: Box<dyn std::error::Error + Send + Sync>| {
        const OP: &str = "connecting to an Arrow Flight server";
        let message = format!("{uri}: {e}{}", source_chain(&*e));
        let mut timed_out = false;
        let mut c: Option<&(dyn std::error::Error + 'static)> = Some(&*e);
        while let Some(x) = c {
            timed_out |= x
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut);
            c = x.source();
        }
        let err = if timed_out {
            Error::timeout(format!("{OP}: {message}"))
        } else {
            Error::io(OP, message)
        };
        devbuf_core::__private::with_shared_source(err, Arc::from(e))
    };
    if !tls {
        let t = transport::plain(&origin, o.connect_timeout, o.max_frame_bytes)
            .await
            .map_err(connect_err)?;
        return Ok((t, origin));
    }
    let mut ep = TonicEndpoint::from_shared(http)
        .map_err(|e| Error::invalid(format!("Flight URI {uri:?}: {e}")))?
        .connect_timeout(o.connect_timeout)
        .tcp_nodelay(true)
        .initial_stream_window_size(Some(transport::STREAM_WINDOW))
        .initial_connection_window_size(Some(transport::CONNECTION_WINDOW))
        .http2_keep_alive_interval(transport::KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(transport::KEEP_ALIVE_TIMEOUT)
        .keep_alive_while_idle(false);
    devbuf_zarr::tls::ensure_crypto_provider();
    let mut cfg = ClientTlsConfig::new();
    cfg = match &o.tls_ca {
        Some(pem) => cfg.ca_certificate(Certificate::from_pem(pem)),
        None => cfg.with_webpki_roots(),
    };
    if let Some(d) = &o.tls_domain {
        cfg = cfg.domain_name(d.clone());
    }
    ep = ep
        .tls_config(cfg)
        .map_err(|e| Error::invalid(format!("TLS settings for {uri:?}: {e}")))?;
    let ch = ep.connect().await.map_err(|e| connect_err(Box::new(e)))?;
    Ok((Transport::Tonic(ch), origin))
}

/// The causes of an error, for messages (`": cause: cause"`).
pub(crate) fn source_chain(e: &dyn std::error::Error) -> String {
    let mut out = String::new();
    let mut s = e.source();
    while let Some(c) = s {
        out.push_str(": ");
        out.push_str(&c.to_string());
        s = c.source();
    }
    out
}
