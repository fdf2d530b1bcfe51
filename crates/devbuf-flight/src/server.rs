//! [`Server`]: a Flight server on a tokio runtime of its own, listening on a TCP port
//! (TLS through rustls when a certificate is given). How it runs is a
//! [`ServerConfig`] (`config.rs`); what it reports, [`ServerStats`] and
//! [`ServerEvent`](crate::ServerEvent)s, is in `events.rs`.

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::time::Duration;

use arrow_flight::flight_service_server::FlightServiceServer;
use tokio::sync::oneshot;
use tonic::transport::{Identity, ServerTlsConfig};

use super::config::ServerConfig;
use super::encode::Batch;
use super::events::ServerStats;
use super::registry::{Entry, Refused};
use super::service::Service;
use super::ticket::batch_name;
use devbuf_core::error::{Error, Result};

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
        let listener = TcpListener::bind(addr)
            .map_err(|e| Error::from_io("binding the Flight server's address", e.to_string(), e))?;
        Server::serve(config, listener)
    }

    /// Starts serving on a listener bound beforehand (so that servers can learn each
    /// other's ports before they start, for [`ServerConfig::locations`]).
    pub fn serve(config: ServerConfig, listener: TcpListener) -> Result<Server> {
        config.validate()?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::from_io("reading the Flight server's address", e.to_string(), e))?;
        listener.set_nonblocking(true).map_err(|e| {
            Error::from_io("configuring the Flight server's socket", e.to_string(), e)
        })?;
        let service = Service::new(&config)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.runtime_threads)
            .thread_name("devbuf-flight-server")
            .enable_all()
            .build()
            .map_err(|e| {
                Error::from_io("starting the Flight server's runtime", e.to_string(), e)
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
            let l = tokio::net::TcpListener::from_std(listener).map_err(|e| {
                Error::from_io("registering the Flight server's socket", e.to_string(), e)
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
            Ok(Err(e)) => Err(Error::io("serving Arrow Flight", e.to_string()).with_source(e)),
            Err(e) => Err(Error::io(
                "serving Arrow Flight",
                format!("the server task ended: {e}"),
            )
            .with_source(e)),
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
