//! Arrow Flight (feature `flight`): a gRPC server that serves zarr arrays as chunk record
//! batches and registered record batches, and a client that reads them into host or
//! device memory — on the `arrow-flight` crate and its tonic/tokio stack, with no
//! transport of devbuf's own.
//!
//! * **Server** ([`Server`], configured by [`ServerConfig`]): the zarr arrays under a
//!   root directory, read by the read engine, and record batches that clients uploaded
//!   (DoPut) or that the program registered ([`Server::register`], host or device
//!   memory). `ListFlights` lists them; `GetFlightInfo` gives the schema (chunk
//!   coordinates and an `arrow.fixed_shape_tensor` column, as
//!   [`ChunkBatch`](devbuf_core::arrow::ChunkBatch) makes them), the totals and several
//!   endpoints, each a range of chunks, possibly on other servers
//!   ([`ServerConfig::locations`]); `DoGet` streams a ticket's chunks with bounded memory
//!   (a producer thread that blocks when the stream's queue is full, and HTTP/2 flow
//!   control behind it); every call needs a bearer token ([`generate_token`], [`read_token_file`]); TLS through rustls
//!   when a certificate is given. [`Service`] is the `FlightService` itself, for a tonic
//!   server of your own.
//! * **Client** ([`Client`]): [`Client::read`] fetches every endpoint of a selection
//!   concurrently and assembles the selection into an [`NDBuffer`](devbuf_core::zarr::NDBuffer)
//!   in host or device memory; [`Client::read_chunks`] returns the received
//!   [`ChunkBatch`](devbuf_core::arrow::ChunkBatch)es (zero-copy on the host; on a device the
//!   bodies go through the transfer engine's page-locked staging, one copy per batch);
//!   [`Client::put`] uploads host or device record batches. A stream that breaks gives an
//!   error, never a partial result: the client checks that every chunk of the selection
//!   arrived exactly once.
//! * **Names** ([`Target`]): a zarr array is the descriptor path `["zarr", <components of
//!   its path under the root>...]`, a registered batch `["batch", <name>]`. Tickets are
//!   small JSON documents, opaque to clients, parsed strictly: no absolute paths, no `.` or `..`,
//!   no symbolic link out of the root, bounded sizes; anything else is
//!   `InvalidArgument`, `NotFound` or `PermissionDenied` with a message saying what was
//!   wrong.
//!
//! Both sides have an async API on the caller's tokio runtime (current-thread or
//! multi-thread; nothing starts a runtime of its own): [`Client::connect_async`],
//! [`Client::read_async`] and the other `*_async` calls, [`Client::batch_stream`] (host
//! record batches as a `futures::Stream`), [`Server::start_async`] and
//! [`Service::into_server`] (to mount the service in a tonic server of your own).
//! Dropping an async read's future cancels it. The blocking API wraps the async one,
//! on a runtime of its own outside any runtime; on a current-thread runtime a blocking
//! call is an error naming its async form. `docs/flight.md` describes deployments (one
//! or several servers, tokens, TLS), the async API and the commands.
//!
//! ```no_run
//! use devbuf_flight::{Client, ClientOptions, Server, ServerConfig};
//! use devbuf_core::zarr::{AxisSel, BufferPrototype};
//! let mut cfg = ServerConfig::default();
//! cfg.root = Some("../../tests/fixtures/zarr".into());
//! cfg.tokens.push("s3cret".into());
//! let server = Server::start(cfg, "127.0.0.1:0")?;
//! let mut options = ClientOptions::default();
//! options.token = Some("s3cret".into());
//! let client = Client::connect(&server.uri(), &options)?;
//! let all = client.read("v3_float32.zarr", .., &BufferPrototype::Host)?;
//! let part = client.read("v3_float32.zarr", &[AxisSel::from(2..7)], &BufferPrototype::Host)?;
//! assert_eq!(part.shape()[0], 5);
//! # let _ = all;
//! # Ok::<(), devbuf_core::Error>(())
//! ```

// docs.rs (`--cfg docsrs`, nightly): badges naming the feature each item needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

/// The arrow-flight crate devbuf-flight is built on (the same version), for programs and
/// tests that run arrow-rs's own Flight clients or services beside devbuf's.
pub use arrow_flight;
/// The tonic crate devbuf-flight is built on (the same version), for programs that serve
/// [`Service`] from a tonic server of their own.
pub use tonic;

mod auth;
mod client;
mod config;
mod decode;
mod encode;
mod events;
mod info;
mod produce;
mod protocol;
mod registry;
mod root;
mod server;
mod service;
mod status;
mod stream;
mod ticket;

pub use auth::{generate_token, read_token_file};
pub use client::{Client, ClientOptions, Endpoint, Flight, HostBatchStream, ReceivedStream};
pub use config::{ServerConfig, Tls};
pub use encode::Batch;
pub use events::{Observer, ServerEvent, ServerStats, StreamEnd};
pub use server::{Listen, Server};
pub use service::Service;
pub use stream::DoGetStream;
pub use ticket::{Query, Target};

/// What the workspace's tests need from inside this crate (feature `test-support`; the
/// facade re-exports it as `devbuf::__test::flight`). Not API: no semver promise.
#[cfg(feature = "test-support")]
#[doc(hidden)]
pub mod __private {
    /// The tickets' wire format: what a ticket names (`Part`: chunks of an array or
    /// batches of a name, a range of them), the chunk regions, the path and name rules
    /// and the size limits.
    pub mod ticket {
        pub use crate::ticket::{
            ARRAY_KIND, BATCH_KIND, ChunkRegion, MAX_COMPONENT_BYTES, MAX_ENDPOINTS,
            MAX_NAME_BYTES, MAX_PATH_COMPONENTS, MAX_TICKET_BYTES, MAX_TICKET_RANK, Part,
            array_path, batch_name,
        };
    }
}
