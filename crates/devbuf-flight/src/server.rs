//! [`Server`]: a Flight server listening on a TCP port (TLS through rustls when a
//! certificate is given), on a tokio runtime of its own ([`Server::start`]) or on the
//! caller's ([`Server::start_async`]). How it runs is a
//! [`ServerConfig`] (`config.rs`); what it reports, [`ServerStats`] and
//! [`ServerEvent`](crate::ServerEvent)s, is in `events.rs`.

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use tokio::sync::oneshot;
use tonic::transport::{Identity, ServerTlsConfig};

use super::config::ServerConfig;
use super::encode::Batch;
use super::events::ServerStats;
use super::registry::{Entry, Refused};
use super::service::Service;
use super::ticket::batch_name;
use devbuf_core::error::{Error, Result};

/// Where a [`Server`] listens: an address to bind (`"0.0.0.0:8815"`, `"localhost:0"`
/// as `&str` or `String`; `"127.0.0.1:0"` picks a free port; or a `SocketAddr`), or a
/// listener bound beforehand (std's or tokio's `TcpListener`: servers can then learn
/// each other's ports before they start, for [`ServerConfig::locations`]).
///
/// ```
/// use devbuf_flight::Listen;
/// let by_name = Listen::from("127.0.0.1:0");
/// let bound = Listen::from(std::net::TcpListener::bind("127.0.0.1:0")?);
/// # let _ = (by_name, bound);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Listen(On);

#[derive(Debug)]
enum On {
    Addr(String),
    Socket(SocketAddr),
    Std(TcpListener),
    Tokio(tokio::net::TcpListener),
}

impl From<&str> for Listen {
    fn from(addr: &str) -> Listen {
        Listen(On::Addr(addr.to_string()))
    }
}

impl From<String> for Listen {
    fn from(addr: String) -> Listen {
        Listen(On::Addr(addr))
    }
}

impl From<&String> for Listen {
    fn from(addr: &String) -> Listen {
        Listen(On::Addr(addr.clone()))
    }
}

impl From<SocketAddr> for Listen {
    fn from(addr: SocketAddr) -> Listen {
        Listen(On::Socket(addr))
    }
}

impl From<TcpListener> for Listen {
    fn from(listener: TcpListener) -> Listen {
        Listen(On::Std(listener))
    }
}

impl From<tokio::net::TcpListener> for Listen {
    fn from(listener: tokio::net::TcpListener) -> Listen {
        Listen(On::Tokio(listener))
    }
}

fn bind_error(e: std::io::Error) -> Error {
    Error::from_io("binding the Flight server's address", e.to_string(), e)
}

impl Listen {
    /// A std listener (bound now if an address), in non-blocking mode.
    fn into_std(self) -> Result<TcpListener> {
        let l = match self.0 {
            On::Addr(a) => TcpListener::bind(a.as_str()).map_err(bind_error)?,
            On::Socket(a) => TcpListener::bind(a).map_err(bind_error)?,
            On::Std(l) => l,
            On::Tokio(l) => l.into_std().map_err(|e| {
                Error::from_io("taking over the Flight server's socket", e.to_string(), e)
            })?,
        };
        l.set_nonblocking(true).map_err(|e| {
            Error::from_io("configuring the Flight server's socket", e.to_string(), e)
        })?;
        Ok(l)
    }

    /// A tokio listener on the current runtime (bound now, without blocking, if an
    /// address).
    async fn into_tokio(self) -> Result<tokio::net::TcpListener> {
        match self.0 {
            On::Addr(a) => tokio::net::TcpListener::bind(a.as_str())
                .await
                .map_err(bind_error),
            On::Socket(a) => tokio::net::TcpListener::bind(a).await.map_err(bind_error),
            On::Tokio(l) => Ok(l),
            std @ On::Std(_) => {
                let l = Listen(std).into_std()?;
                tokio::net::TcpListener::from_std(l).map_err(|e| {
                    Error::from_io("registering the Flight server's socket", e.to_string(), e)
                })
            }
        }
    }
}

/// A running Flight server: serves until [`shutdown`](Self::shutdown) or drop.
///
/// [`start`](Self::start) runs it on a runtime of its own
/// ([`ServerConfig::runtime_threads`]); [`start_async`](Self::start_async) on the
/// caller's tokio runtime, starting none (or mount [`Service::into_server`] in a tonic
/// server of your own).
///
/// ```no_run
/// use devbuf_flight::{Server, ServerConfig};
/// let mut cfg = ServerConfig::default();
/// cfg.root = Some("/data/zarr".into());
/// cfg.tokens.push("s3cret".into());
/// let server = Server::start(cfg, "0.0.0.0:8815")?;
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
    /// Checks `config` (an error names the field and its valid range), binds `listen`
    /// (an address, or a listener bound beforehand: see [`Listen`]) and starts serving
    /// on a tokio runtime of its own ([`ServerConfig::runtime_threads`]).
    ///
    /// ```no_run
    /// use devbuf_flight::{Server, ServerConfig};
    /// let mut cfg = ServerConfig::default();
    /// cfg.tokens.push("s3cret".into());
    /// let a = Server::start(cfg.clone(), "127.0.0.1:0")?;
    /// // A listener bound first, so that its port is known before the server starts:
    /// let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(devbuf_core::Error::from)?;
    /// let b = Server::start(cfg, listener)?;
    /// # let _ = (a, b);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn start(config: ServerConfig, listen: impl Into<Listen>) -> Result<Server> {
        config.validate()?;
        let listener = listen.into().into_std()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.runtime_threads)
            .thread_name("devbuf-flight-server")
            .enable_all()
            .build()
            .map_err(|e| {
                Error::from_io("starting the Flight server's runtime", e.to_string(), e)
            })?;
        let listener = {
            let _guard = runtime.enter();
            tokio::net::TcpListener::from_std(listener).map_err(|e| {
                Error::from_io("registering the Flight server's socket", e.to_string(), e)
            })?
        };
        let handle = runtime.handle().clone();
        Server::launch(config, listener, &handle, Some(runtime))
    }

    /// Checks `config`, binds `listen` (see [`Listen`]) and starts serving on the
    /// caller's tokio runtime (current-thread or multi-thread; an error when polled
    /// outside one): the server's connections and calls are tasks of that runtime,
    /// which must keep running; no runtime is started
    /// ([`ServerConfig::runtime_threads`] is not used). Stop it with
    /// [`shutdown_async`](Self::shutdown_async) (or [`shutdown`](Self::shutdown), or
    /// drop), or wait for it with [`wait_async`](Self::wait_async).
    ///
    /// ```no_run
    /// use devbuf_flight::{Client, ClientOptions, Server, ServerConfig};
    /// use devbuf_core::zarr::BufferPrototype;
    /// # async fn f() -> devbuf_core::Result<()> {
    /// let mut cfg = ServerConfig::default();
    /// cfg.root = Some("/data/zarr".into());
    /// cfg.tokens.push("s3cret".into());
    /// let server = Server::start_async(cfg, "127.0.0.1:0").await?;
    /// let mut options = ClientOptions::default();
    /// options.token = Some("s3cret".into());
    /// let client = Client::connect_async(&server.uri(), &options).await?;
    /// let a = client.read_async("temperature.zarr", .., &BufferPrototype::Host).await?;
    /// server.shutdown_async().await?;
    /// # let _ = a; Ok(()) }
    /// ```
    pub async fn start_async(config: ServerConfig, listen: impl Into<Listen>) -> Result<Server> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::invalid(
                "Server::start_async was polled outside a tokio runtime: it serves on the \
                 caller's runtime (Server::start starts one of its own)",
            )
        })?;
        config.validate()?;
        let listener = listen.into().into_tokio().await?;
        Server::launch(config, listener, &handle, None)
    }

    /// Serves on `handle`'s runtime (`runtime`: the server's own, if it has one).
    fn launch(
        config: ServerConfig,
        listener: tokio::net::TcpListener,
        handle: &tokio::runtime::Handle,
        runtime: Option<tokio::runtime::Runtime>,
    ) -> Result<Server> {
        config.validate()?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::from_io("reading the Flight server's address", e.to_string(), e))?;
        let service = Service::new(&config)?;
        let mut builder = tonic::transport::Server::builder()
            .initial_stream_window_size(Some(16 << 20))
            .initial_connection_window_size(Some(64 << 20))
            .tcp_nodelay(true);
        if let Some(tls) = &config.tls {
            devbuf_zarr::tls::ensure_crypto_provider();
            let identity = Identity::from_pem(&tls.cert_pem, &tls.key_pem);
            builder = builder
                .tls_config(ServerTlsConfig::new().identity(identity))
                .map_err(|e| Error::invalid(format!("the TLS certificate or key: {e}")))?;
        }
        let (tx, rx) = oneshot::channel::<()>();
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let router = builder.add_service(service.clone().into_server());
        let task = handle.spawn(async move {
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
            runtime,
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

    /// Blocks until the server stops (an error from the transport ends it). For a
    /// server on the caller's runtime ([`start_async`](Self::start_async)) this is an
    /// error: await [`wait_async`](Self::wait_async).
    pub fn wait(mut self) -> Result<()> {
        let Some(rt) = self.runtime.as_ref() else {
            return Err(Error::invalid(
                "Server::wait on a server that runs on the caller's tokio runtime: await \
                 Server::wait_async",
            ));
        };
        // Blocking inside a runtime: a multi-threaded one hands this thread over first;
        // a current-thread one would be blocked whole (and tokio panics on it).
        let inside = tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor());
        if let Ok(flavor) = &inside
            && *flavor != tokio::runtime::RuntimeFlavor::MultiThread
        {
            return Err(Error::invalid(
                "Server::wait called on a current-thread tokio runtime, which it would \
                 block: await Server::wait_async instead",
            ));
        }
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        match inside {
            Ok(_) => served(tokio::task::block_in_place(|| rt.block_on(task))),
            Err(_) => served(rt.block_on(task)),
        }
    }

    /// Waits until the server stops (an error from the transport ends it), on any
    /// runtime; for a server on the caller's runtime, that runtime must keep running.
    ///
    /// ```no_run
    /// use devbuf_flight::{Server, ServerConfig};
    /// # async fn f() -> devbuf_core::Result<()> {
    /// let mut cfg = ServerConfig::default();
    /// cfg.root = Some("/data/zarr".into());
    /// cfg.tokens.push("s3cret".into());
    /// let server = Server::start_async(cfg, "0.0.0.0:8815").await?;
    /// server.wait_async().await // until the process is stopped
    /// # }
    /// ```
    pub async fn wait_async(mut self) -> Result<()> {
        match self.task.take() {
            Some(task) => served(task.await),
            None => Ok(()),
        }
    }

    /// Stops accepting connections and ends every call in progress (their clients get
    /// an error), then releases the runtime. On the caller's runtime
    /// ([`start_async`](Self::start_async)) it stops accepting connections and closes
    /// each connection once its calls in progress finished (HTTP/2 `GOAWAY`), without
    /// waiting: see [`shutdown_async`](Self::shutdown_async).
    pub fn shutdown(mut self) {
        self.stop();
    }

    /// Stops accepting connections and waits until the calls in progress finished and
    /// their connections closed (a client that stopped reading holds this up: bound it
    /// with `tokio::time::timeout`, then drop). A server with a runtime of its own stops
    /// as [`shutdown`](Self::shutdown) does.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use devbuf_flight::{Server, ServerConfig};
    /// # async fn f() -> devbuf_core::Result<()> {
    /// let mut cfg = ServerConfig::default();
    /// cfg.root = Some("/data/zarr".into());
    /// cfg.tokens.push("s3cret".into());
    /// let server = Server::start_async(cfg, "127.0.0.1:0").await?;
    /// let _ = tokio::time::timeout(Duration::from_secs(5), server.shutdown_async()).await;
    /// # Ok(()) }
    /// ```
    pub async fn shutdown_async(mut self) -> Result<()> {
        if self.runtime.is_some() {
            self.stop();
            return Ok(());
        }
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match self.task.take() {
            Some(task) => served(task.await),
            None => Ok(()),
        }
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

/// The result of the serving task.
fn served(
    r: std::result::Result<
        std::result::Result<(), tonic::transport::Error>,
        tokio::task::JoinError,
    >,
) -> Result<()> {
    match r {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Error::io("serving Arrow Flight", e.to_string()).with_source(e)),
        Err(e) => Err(Error::io(
            "serving Arrow Flight",
            format!("the server task ended: {e}"),
        )
        .with_source(e)),
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}
