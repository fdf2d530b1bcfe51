//! [`ServerConfig`]: how a [`Server`](crate::Server) runs, and its validation.

use std::path::PathBuf;

use super::events::Observer;
use super::protocol::endpoint_uri;
use super::ticket::MAX_ENDPOINTS;
use devbuf_core::error::{Error, Result};
use devbuf_zarr::ReadOptions;

/// How a [`Server`](crate::Server) (or a [`Service`](crate::Service)) runs: what it
/// serves, who may call it, how it cuts and streams data. A struct of public fields
/// with documented defaults: set the ones you need on [`ServerConfig::default()`] (the
/// struct is `#[non_exhaustive]`, so fields may be added without a breaking release).
/// [`Server::start`](crate::Server::start) and [`Service::new`](crate::Service::new)
/// check it; their error names the field and its valid range.
///
/// ```
/// use devbuf_flight::ServerConfig;
/// let mut cfg = ServerConfig::default();
/// cfg.root = Some("../../tests/fixtures/zarr".into());
/// cfg.tokens.push("s3cret".into()); // from a file: read_token_file(path)?
/// cfg.endpoints = 8;
/// cfg.batch_bytes = 4 << 20;
/// # let _ = cfg;
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Serve the zarr arrays under this directory, with their paths relative to it
    /// (default: none, batches only).
    pub root: Option<PathBuf>,
    /// Accept `authorization: Bearer <token>` with any of these (1 to 1024 visible
    /// ASCII characters each; [`read_token_file`](crate::read_token_file) reads one from
    /// a file, [`generate_token`](crate::generate_token) makes one). A server needs a
    /// token or [`basic_auth`](Self::basic_auth) to start.
    pub tokens: Vec<String>,
    /// `(user, password)`: lets the Flight handshake issue tokens to clients that
    /// present these HTTP Basic credentials (`pyarrow.flight`'s
    /// `authenticate_basic_token(user, password)`; default: none).
    pub basic_auth: Option<(String, String)>,
    /// Serve TLS (rustls) with this certificate and key (default: none, plain gRPC).
    pub tls: Option<Tls>,
    /// How many endpoints a flight is cut into (1 to 1024; default 4; fewer when there
    /// are fewer chunks or batches). A query may ask for another number.
    pub endpoints: usize,
    /// The servers the endpoints of a flight name, as `grpc://host:port` (or
    /// `grpc+tls://`) URIs: endpoint `i` of `n` goes to location `i * L / n` of these
    /// `L`, so each location serves a contiguous range of chunks. Empty (the default):
    /// every endpoint is on this server. Servers that share the work are given the same
    /// list, and every server must be able to serve every chunk asked of it.
    pub locations: Vec<String>,
    /// Target size of one record batch of a stream (at least one chunk per batch; 1 to
    /// 1 GiB; default 8 MiB).
    pub batch_bytes: usize,
    /// Record batches a stream may have made ahead of the connection (1 to 64; default
    /// 2): with [`batch_bytes`](Self::batch_bytes), the memory bound of one stream.
    pub queue_depth: usize,
    /// Most DoGet streams at once (1 to 65536; default 256): each holds a producer thread
    /// and up to [`queue_depth`](Self::queue_depth) batches; past it DoGet is refused with
    /// `ResourceExhausted`.
    pub max_streams: usize,
    /// Most bytes uploaded and registered batches may hold together (default 1 GiB).
    pub max_upload_bytes: u64,
    /// Largest single incoming message (DoPut batches), 1 KiB to 2 GiB (default 256 MiB).
    pub max_message_bytes: usize,
    /// How the read engine reads the batches of every stream: its worker threads
    /// (`threads`; default one per core), staging and every tuning knob of the engine
    /// ([`ReadOptions`], checked when the server starts).
    ///
    /// ```
    /// use devbuf_flight::ServerConfig;
    /// use devbuf_zarr::{GpuTuning, ReadOptions};
    /// let mut c = ServerConfig::default();
    /// c.tokens.push("s3cret".into());
    /// c.read_options = ReadOptions {
    ///     threads: Some(4),
    ///     gpu: GpuTuning { claims_per_worker: Some(2), ..GpuTuning::default() },
    ///     ..ReadOptions::default()
    /// };
    /// assert!(devbuf_flight::Service::new(&c).is_ok());
    /// ```
    pub read_options: ReadOptions,
    /// Threads of the server's tokio runtime (1 to 256; default 4; not used by
    /// [`Server::start_async`](crate::Server::start_async), which serves on the caller's).
    pub runtime_threads: usize,
    /// Called with every [`ServerEvent`](crate::ServerEvent) (default: none).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use devbuf_flight::{ServerConfig, ServerEvent};
    /// let mut c = ServerConfig::default();
    /// c.observer = Some(Arc::new(|e: &ServerEvent| eprintln!("{e:?}")));
    /// # let _ = c;
    /// ```
    pub observer: Option<Observer>,
}

/// The certificate and key a [`Server`](crate::Server) serves TLS with
/// ([`ServerConfig::tls`]); clients then connect to `grpc+tls://` (trusting a private
/// certificate with [`ClientOptions::tls_ca`](crate::ClientOptions::tls_ca)).
///
/// ```no_run
/// use devbuf_flight::{ServerConfig, Tls};
/// let mut cfg = ServerConfig::default();
/// cfg.tls = Some(Tls {
///     cert_pem: std::fs::read("/etc/devbuf/cert.pem")?,
///     key_pem: std::fs::read("/etc/devbuf/key.pem")?,
/// });
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct Tls {
    /// The PEM certificate chain.
    pub cert_pem: Vec<u8>,
    /// The PEM private key.
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("cert_pem", &format_args!("{} bytes", self.cert_pem.len()))
            .field("key_pem", &format_args!("<{} bytes>", self.key_pem.len()))
            .finish()
    }
}

impl Default for ServerConfig {
    /// No root (batches only), no token (a server needs one to start), 4 endpoints per
    /// flight on this server, 8 MiB record batches, 2 batches queued per stream, 256
    /// streams at once, 1 GiB of uploads, 256 MiB per incoming message, the read
    /// engine's default options, 4 runtime threads, no observer.
    fn default() -> Self {
        ServerConfig {
            root: None,
            tokens: Vec::new(),
            basic_auth: None,
            tls: None,
            endpoints: 4,
            locations: Vec::new(),
            batch_bytes: 8 << 20,
            queue_depth: 2,
            max_streams: 256,
            max_upload_bytes: 1 << 30,
            max_message_bytes: 256 << 20,
            read_options: ReadOptions::default(),
            runtime_threads: 4,
            observer: None,
        }
    }
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("root", &self.root)
            .field("tokens", &format_args!("{} configured", self.tokens.len()))
            .field("basic_auth", &self.basic_auth.as_ref().map(|(u, _)| u))
            .field("tls", &self.tls.is_some())
            .field("endpoints", &self.endpoints)
            .field("locations", &self.locations)
            .field("batch_bytes", &self.batch_bytes)
            .field("queue_depth", &self.queue_depth)
            .field("max_streams", &self.max_streams)
            .field("max_upload_bytes", &self.max_upload_bytes)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("read_options", &self.read_options)
            .field("runtime_threads", &self.runtime_threads)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl ServerConfig {
    /// Checks the settings (what [`Server::start`](crate::Server::start) and
    /// [`Service::new`](crate::Service::new) do first): each error names the field and
    /// its valid range.
    pub(crate) fn validate(&self) -> Result<()> {
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
        self.read_options
            .validate()
            .map_err(|e| e.context("ServerConfig::read_options"))?;
        for l in &self.locations {
            endpoint_uri(l).map_err(|e| e.context(format_args!("ServerConfig::locations")))?;
        }
        Ok(())
    }
}
