//! [`ServerConfig`] and [`Server`]: a Flight server on a tokio runtime of its own,
//! listening on a TCP port (TLS through rustls when a certificate is given), and what
//! it reports ([`ServerStats`], [`Event`]s).

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arrow_flight::flight_service_server::FlightServiceServer;
use tokio::sync::oneshot;
use tonic::transport::{Identity, ServerTlsConfig};

use super::encode::Batch;
use super::registry::{Entry, Refused};
use super::service::Service;
use super::ticket::{MAX_ENDPOINTS, batch_name};
use devbuf_core::error::{Error, Result};

/// A callback that sees what the server does ([`ServerConfig::observer`]).
pub type Observer = Arc<dyn Fn(&Event) + Send + Sync>;

/// Something the server did, for logs and metrics ([`ServerConfig::observer`]). The
/// observer runs on the thread that did it (a stream's producer thread for
/// [`MessageQueued`](Event::MessageQueued)): keep it short.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Event {
    /// A DoGet stream started (`id` counts streams from 0).
    StreamStarted {
        /// The stream.
        id: u64,
        /// What it sends.
        what: String,
    },
    /// A stream queued its `index`-th message (0 is the schema) of `bytes` bytes.
    MessageQueued {
        /// The stream.
        id: u64,
        /// The message's position in the stream.
        index: u64,
        /// Header and body bytes.
        bytes: u64,
    },
    /// A stream ended, and its memory was released.
    StreamEnded {
        /// The stream.
        id: u64,
        /// How.
        end: StreamEnd,
    },
    /// A call was refused.
    Refused {
        /// The Flight method.
        call: &'static str,
        /// The gRPC status code's name.
        code: &'static str,
        /// The status message.
        message: String,
    },
    /// A client uploaded batches (DoPut).
    Uploaded {
        /// The name they are stored under.
        name: String,
        /// Rows stored.
        rows: u64,
        /// Bytes held.
        bytes: u64,
    },
}

/// How a stream ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamEnd {
    /// Every message was handed to the connection.
    Completed {
        /// Messages sent (schema included).
        messages: u64,
    },
    /// The client went away (or the server shut down) before the end.
    ClientGone,
    /// The stream ended with an error status (its message).
    Failed(String),
}

/// What a server holds now ([`Server::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerStats {
    /// DoGet streams whose producer or response is still alive.
    pub active_streams: usize,
    /// Bytes of messages made but not yet handed to the connection.
    pub queued_bytes: u64,
    /// DoGet streams started since the server started.
    pub streams_started: u64,
    /// Bytes of messages handed to connections since the server started.
    pub bytes_sent: u64,
    /// Bytes held by registered and uploaded batches.
    pub registered_bytes: u64,
}

/// How a [`Server`] runs: what it serves, who may call it, how it cuts and streams data.
///
/// ```
/// use devbuf_flight::ServerConfig;
/// let cfg = ServerConfig::new()
///     .root("../../tests/fixtures/zarr")
///     .token("s3cret")
///     .endpoints(8)
///     .batch_bytes(4 << 20);
/// # let _ = cfg;
/// ```
#[derive(Clone)]
pub struct ServerConfig {
    pub(crate) root: Option<PathBuf>,
    pub(crate) tokens: Vec<String>,
    pub(crate) token_files: Vec<PathBuf>,
    pub(crate) basic: Option<(String, String)>,
    pub(crate) tls: Option<(Vec<u8>, Vec<u8>)>,
    pub(crate) endpoints: usize,
    pub(crate) locations: Vec<String>,
    pub(crate) batch_bytes: usize,
    pub(crate) queue_depth: usize,
    pub(crate) max_streams: usize,
    pub(crate) max_upload_bytes: u64,
    pub(crate) max_message_bytes: usize,
    pub(crate) read_threads: Option<usize>,
    pub(crate) runtime_threads: usize,
    pub(crate) observer: Option<Observer>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig::new()
    }
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("root", &self.root)
            .field("tokens", &format_args!("{} configured", self.tokens.len()))
            .field("token_files", &self.token_files)
            .field("basic", &self.basic.as_ref().map(|(u, _)| u))
            .field("tls", &self.tls.is_some())
            .field("endpoints", &self.endpoints)
            .field("locations", &self.locations)
            .field("batch_bytes", &self.batch_bytes)
            .field("queue_depth", &self.queue_depth)
            .field("max_streams", &self.max_streams)
            .field("max_upload_bytes", &self.max_upload_bytes)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("read_threads", &self.read_threads)
            .finish()
    }
}

impl ServerConfig {
    /// Defaults: no root (batches only), no token (a server needs one to start), 4
    /// endpoints per flight on this server, 8 MiB record batches, 2 batches queued per
    /// stream, 256 streams at once, 1 GiB of uploads, 256 MiB per incoming message.
    pub fn new() -> ServerConfig {
        ServerConfig {
            root: None,
            tokens: Vec::new(),
            token_files: Vec::new(),
            basic: None,
            tls: None,
            endpoints: 4,
            locations: Vec::new(),
            batch_bytes: 8 << 20,
            queue_depth: 2,
            max_streams: 256,
            max_upload_bytes: 1 << 30,
            max_message_bytes: 256 << 20,
            read_threads: None,
            runtime_threads: 4,
            observer: None,
        }
    }

    /// Serves the zarr arrays under this directory (with their paths relative to it).
    pub fn root(mut self, dir: impl Into<PathBuf>) -> ServerConfig {
        self.root = Some(dir.into());
        self
    }

    /// Accepts `authorization: Bearer <token>` (may be given several times).
    pub fn token(mut self, token: impl Into<String>) -> ServerConfig {
        self.tokens.push(token.into());
        self
    }

    /// Accepts the token in this file ([`read_token_file`](super::read_token_file); read
    /// when the server starts).
    pub fn token_file(mut self, path: impl Into<PathBuf>) -> ServerConfig {
        self.token_files.push(path.into());
        self
    }

    /// Lets the Flight handshake issue tokens to clients that present these HTTP Basic
    /// credentials (`pyarrow.flight`'s `authenticate_basic_token(user, password)`).
    pub fn basic_auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.basic = Some((user.into(), password.into()));
        self
    }

    /// Serves TLS (rustls) with this PEM certificate chain and PEM private key.
    pub fn tls(mut self, cert_pem: impl Into<Vec<u8>>, key_pem: impl Into<Vec<u8>>) -> Self {
        self.tls = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// How many endpoints a flight is cut into (1 to 1024; fewer when there are fewer
    /// chunks or batches). A query may ask for another number.
    pub fn endpoints(mut self, n: usize) -> ServerConfig {
        self.endpoints = n;
        self
    }

    /// The servers the endpoints of a flight name, as `grpc://host:port` (or
    /// `grpc+tls://`) URIs: endpoint `i` of `n` goes to location `i * L / n` of these
    /// `L`, so each location serves a contiguous range of chunks. Empty (the default):
    /// every endpoint is on this server. Servers that share the work are given the same
    /// list, and every server must be able to serve every chunk asked of it.
    pub fn locations(mut self, uris: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.locations = uris.into_iter().map(Into::into).collect();
        self
    }

    /// Target size of one record batch of a stream (at least one chunk per batch; 1 to
    /// 1 GiB).
    pub fn batch_bytes(mut self, n: usize) -> ServerConfig {
        self.batch_bytes = n;
        self
    }

    /// Record batches a stream may have made ahead of the connection (1 to 64): with
    /// [`batch_bytes`](Self::batch_bytes), the memory bound of one stream.
    pub fn queue_depth(mut self, n: usize) -> ServerConfig {
        self.queue_depth = n;
        self
    }

    /// Most DoGet streams at once (1 to 65536; default 256): each holds a producer thread
    /// and up to [`queue_depth`](Self::queue_depth) batches; past it DoGet is refused with
    /// `ResourceExhausted`.
    pub fn max_streams(mut self, n: usize) -> ServerConfig {
        self.max_streams = n;
        self
    }

    /// Most bytes uploaded and registered batches may hold together.
    pub fn max_upload_bytes(mut self, n: u64) -> ServerConfig {
        self.max_upload_bytes = n;
        self
    }

    /// Largest single incoming message (DoPut batches), 1 KiB to 2 GiB.
    pub fn max_message_bytes(mut self, n: usize) -> ServerConfig {
        self.max_message_bytes = n;
        self
    }

    /// Worker threads of the read engine for each batch a stream reads (default: one
    /// per core).
    pub fn read_threads(mut self, n: usize) -> ServerConfig {
        self.read_threads = Some(n);
        self
    }

    /// Threads of the server's tokio runtime (1 to 256; default 4).
    pub fn runtime_threads(mut self, n: usize) -> ServerConfig {
        self.runtime_threads = n;
        self
    }

    /// Calls `f` with every [`Event`].
    pub fn observer(mut self, f: impl Fn(&Event) + Send + Sync + 'static) -> ServerConfig {
        self.observer = Some(Arc::new(f));
        self
    }

    /// Checks the settings (what [`Server::start`] does first).
    pub fn validate(&self) -> Result<()> {
        let range = |what: &str, v: usize, lo: usize, hi: usize| {
            if v < lo || v > hi {
                Err(Error::invalid(format!(
                    "ServerConfig::{what} is {v}, valid: {lo} to {hi}"
                )))
            } else {
                Ok(())
            }
        };
        range("endpoints", self.endpoints, 1, MAX_ENDPOINTS)?;
        range("batch_bytes", self.batch_bytes, 1, 1 << 30)?;
        range("queue_depth", self.queue_depth, 1, 64)?;
        range("max_streams", self.max_streams, 1, 65536)?;
        range(
            "max_message_bytes",
            self.max_message_bytes,
            1 << 10,
            2 << 30,
        )?;
        range("runtime_threads", self.runtime_threads, 1, 256)?;
        if let Some(t) = self.read_threads {
            range("read_threads", t, 1, 1024)?;
        }
        for l in &self.locations {
            super::client::endpoint_uri(l)
                .map_err(|e| e.context(format_args!("ServerConfig::locations")))?;
        }
        Ok(())
    }
}

/// A running Flight server: serves until [`shutdown`](Self::shutdown) or drop.
///
/// ```no_run
/// use devbuf_flight::{Server, ServerConfig};
/// let server = Server::start(ServerConfig::new().root("/data/zarr").token("s3cret"), "0.0.0.0:8815")?;
/// println!("serving at {}", server.uri());
/// server.wait()?; // until the process is stopped
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub struct Server {
    addr: SocketAddr,
    tls: bool,
    service: Service,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::result::Result<(), tonic::transport::Error>>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.addr)
            .field("tls", &self.tls)
            .finish()
    }
}

impl Server {
    /// Binds `addr` (`"127.0.0.1:0"` picks a free port) and starts serving.
    pub fn start(config: ServerConfig, addr: impl ToSocketAddrs) -> Result<Server> {
        let listener = TcpListener::bind(addr).map_err(|e| Error::Io {
            op: "binding the Flight server's address",
            message: e.to_string(),
        })?;
        Server::serve(config, listener)
    }

    /// Starts serving on a listener bound beforehand (so that servers can learn each
    /// other's ports before they start, for [`ServerConfig::locations`]).
    pub fn serve(config: ServerConfig, listener: TcpListener) -> Result<Server> {
        config.validate()?;
        let addr = listener.local_addr().map_err(|e| Error::Io {
            op: "reading the Flight server's address",
            message: e.to_string(),
        })?;
        listener.set_nonblocking(true).map_err(|e| Error::Io {
            op: "configuring the Flight server's socket",
            message: e.to_string(),
        })?;
        let service = Service::new(&config)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.runtime_threads)
            .thread_name("devbuf-flight-server")
            .enable_all()
            .build()
            .map_err(|e| Error::Io {
                op: "starting the Flight server's runtime",
                message: e.to_string(),
            })?;
        let mut builder = tonic::transport::Server::builder()
            .initial_stream_window_size(Some(16 << 20))
            .initial_connection_window_size(Some(64 << 20))
            .tcp_nodelay(true);
        if let Some((cert, key)) = &config.tls {
            devbuf_zarr::tls::ensure_crypto_provider();
            builder = builder
                .tls_config(ServerTlsConfig::new().identity(Identity::from_pem(cert, key)))
                .map_err(|e| Error::invalid(format!("the TLS certificate or key: {e}")))?;
        }
        let svc = FlightServiceServer::new(service.clone())
            .max_decoding_message_size(config.max_message_bytes)
            .max_encoding_message_size(usize::MAX);
        let (tx, rx) = oneshot::channel::<()>();
        let incoming = {
            let _guard = runtime.enter();
            let l = tokio::net::TcpListener::from_std(listener).map_err(|e| Error::Io {
                op: "registering the Flight server's socket",
                message: e.to_string(),
            })?;
            tonic::transport::server::TcpIncoming::from(l).with_nodelay(Some(true))
        };
        let router = builder.add_service(svc);
        let task = runtime.spawn(async move {
            router
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = rx.await;
                })
                .await
        });
        Ok(Server {
            addr,
            tls: config.tls.is_some(),
            service,
            shutdown: Some(tx),
            task: Some(task),
            runtime: Some(runtime),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `grpc://ip:port` (or `grpc+tls://`), what clients connect to (with TLS, connect
    /// by the host name the certificate names instead, or set
    /// [`ClientOptions::tls_domain`](super::ClientOptions::tls_domain)).
    pub fn uri(&self) -> String {
        format!(
            "{}://{}",
            if self.tls { "grpc+tls" } else { "grpc" },
            self.addr
        )
    }

    /// The `FlightService` this server runs.
    pub fn service(&self) -> &Service {
        &self.service
    }

    /// Serves `batches` (host or device, all of one schema, at least one) under `name`;
    /// an error when the name is taken (see [`unregister`](Self::unregister)) or the
    /// batches would pass [`ServerConfig::max_upload_bytes`].
    pub fn register<B: Into<Batch>>(
        &self,
        name: &str,
        batches: impl IntoIterator<Item = B>,
    ) -> Result<()> {
        let name = batch_name(name)?;
        let batches: Vec<Batch> = batches.into_iter().map(Into::into).collect();
        let schema = batches
            .first()
            .map(Batch::schema)
            .ok_or_else(|| Error::invalid("register needs at least one batch"))?;
        let entry = Entry::new(schema, batches)?;
        self.service
            .registry()
            .insert(&name, entry, false)
            .map_err(|r| match r {
                Refused::Exists => Error::invalid(format!(
                    "a batch named {name:?} is already served (unregister it first)"
                )),
                Refused::Full(held, asked, limit) => Error::invalid(format!(
                    "registering {asked} bytes under {name:?}: {held} of {limit} bytes are \
                     held (ServerConfig::max_upload_bytes)"
                )),
            })
    }

    /// Stops serving the batches registered or uploaded under `name`; whether there
    /// were any.
    pub fn unregister(&self, name: &str) -> bool {
        self.service.registry().remove(name)
    }

    /// The names of the batches served.
    pub fn registered(&self) -> Vec<String> {
        self.service.registry().names()
    }

    /// What the server holds now.
    pub fn stats(&self) -> ServerStats {
        self.service.stats()
    }

    /// Waits until no stream is active and nothing is queued (e.g. after clients went
    /// away); false when `timeout` passed first.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        self.service.wait_idle(timeout)
    }

    /// Blocks until the server stops (an error from the transport ends it).
    pub fn wait(mut self) -> Result<()> {
        let (Some(rt), Some(task)) = (self.runtime.as_ref(), self.task.take()) else {
            return Ok(());
        };
        match rt.block_on(task) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Error::Io {
                op: "serving Arrow Flight",
                message: e.to_string(),
            }),
            Err(e) => Err(Error::Io {
                op: "serving Arrow Flight",
                message: format!("the server task ended: {e}"),
            }),
        }
    }

    /// Stops accepting connections and ends every call in progress (their clients get
    /// an error), then releases the runtime.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(rt) = self.runtime.take() {
            // Streams may be stalled by clients that stopped reading: do not wait for
            // them. Dropping their tasks closes their queues, which stops their
            // producer threads.
            if tokio::runtime::Handle::try_current().is_ok() {
                // Blocking inside an async context is not allowed.
                rt.shutdown_background();
            } else {
                rt.shutdown_timeout(Duration::from_millis(200));
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}
