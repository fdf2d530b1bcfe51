//! zarr stores in object storage, by URL (feature `object_store`): S3 and
//! S3-compatible servers, Google Cloud Storage, Azure Blob Storage, plain HTTP(S)
//! servers (read-only) and local files, on the Apache Arrow project's
//! [`object_store`](https://docs.rs/object_store) crate.
//!
//! * [`UrlStore`]: a store by URL as a devbuf [`Store`](devbuf_core::zarr::Store);
//! * [`ObjectStoreOptions`]: credentials and endpoints beside the environment's,
//!   request concurrency, read-ahead bound, timeouts and retries;
//! * [`ZarrArray::open`](crate::ZarrArray::open) and
//!   [`ZarrArray::create`](crate::ZarrArray::create) of a URL
//!   ([`Location::Url`](crate::Location::Url)): arrays in such stores. Their reads go through the read engine, whose fetch stage (`fetch`)
//!   keeps many requests in flight ahead of the decoders (shards: whole in one GET
//!   when the read needs all of them, else the index once,
//!   then byte ranges of the inner chunks a selection needs, neighbours coalesced);
//!   their writes PUT chunks (or shards) from the encoding workers concurrently.
//!
//! The blocking calls run their requests on a tokio runtime of devbuf's own (a few I/O
//! threads, started on first use); their async forms
//! ([`ZarrArray::open_async`](crate::ZarrArray::open_async),
//! [`Read::to_async`](crate::Read::to_async), ...; a store's objects: the `object_store`
//! client, [`UrlStore::object_store`]) run them on the caller's runtime and start none.
//! See `docs/object-store.md`.

mod fetch;
mod options;
mod runtime;
mod store;
mod store_async;

pub(crate) use fetch::{FetchRequest, Prefetch};
#[doc(hidden)]
pub use fetch::{held_fetch_bytes, live_fetch_stages};
pub use options::ObjectStoreOptions;
pub(crate) use store::Span;
pub use store::UrlStore;
