//! [`ServerConfig`]: how a [`Server`](crate::Server) runs, and its validation.

use std::path::PathBuf;
use std::sync::Arc;

use super::events::{Observer, ServerEvent};
use super::protocol::endpoint_uri;
use super::ticket::MAX_ENDPOINTS;
use devbuf_core::error::{Error, Result};
use devbuf_zarr::ReadOptions;

/// How a [`Server`](crate::Server) runs: what it serves, who may call it, how it cuts and streams data.
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
    pub(crate) read_options: ReadOptions,
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
            .field("read_options", &self.read_options)
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
            read_options: ReadOptions::default(),
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
    /// per core): a shorthand for the `threads` field of [`read_options`](Self::read_options).
    pub fn read_threads(mut self, n: usize) -> ServerConfig {
        self.read_options.threads = Some(n);
        self
    }

    /// How the read engine reads the batches of every stream: threads, staging and every
    /// tuning knob of the engine ([`ReadOptions`], checked by [`validate`](Self::validate)).
    ///
    /// ```
    /// use devbuf_flight::ServerConfig;
    /// use devbuf_zarr::{GpuTuning, ReadOptions};
    /// let c = ServerConfig::new().read_options(ReadOptions {
    ///     gpu: GpuTuning { claims_per_worker: Some(2), ..GpuTuning::default() },
    ///     ..ReadOptions::default()
    /// });
    /// assert!(c.validate().is_ok());
    /// ```
    pub fn read_options(mut self, options: ReadOptions) -> ServerConfig {
        self.read_options = options;
        self
    }

    /// Threads of the server's tokio runtime (1 to 256; default 4).
    pub fn runtime_threads(mut self, n: usize) -> ServerConfig {
        self.runtime_threads = n;
        self
    }

    /// Calls `f` with every [`ServerEvent`].
    pub fn observer(mut self, f: impl Fn(&ServerEvent) + Send + Sync + 'static) -> ServerConfig {
        self.observer = Some(Arc::new(f));
        self
    }

    /// Checks the settings (what [`Server::start`](crate::Server::start) does first).
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
        if let Some(t) = self.read_options.threads {
            range("read_threads", t, 1, 1024)?;
        }
        self.read_options
            .validate()
            .map_err(|e| e.context("ServerConfig::read_options"))?;
        for l in &self.locations {
            endpoint_uri(l).map_err(|e| e.context(format_args!("ServerConfig::locations")))?;
        }
        Ok(())
    }
}
