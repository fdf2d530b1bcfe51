//! What a [`Server`](crate::Server) reports: the [`ServerEvent`]s its observer sees and its
//! [`ServerStats`]. A leaf module: the server, the service and the streams all use it.

use std::sync::Arc;

/// A callback that sees what the server does
/// ([`ServerConfig::observer`](crate::ServerConfig::observer)).
pub type Observer = Arc<dyn Fn(&ServerEvent) + Send + Sync>;

/// Something the server did, for logs and metrics
/// ([`ServerConfig::observer`](crate::ServerConfig::observer)). The observer runs on the
/// thread that did it (a stream's producer thread for
/// [`MessageQueued`](ServerEvent::MessageQueued)): keep it short.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum ServerEvent {
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

/// What a server holds now ([`Server::stats`](crate::Server::stats)).
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
