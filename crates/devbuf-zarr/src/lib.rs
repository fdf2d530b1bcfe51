//! devbuf's zarr engine (the facade's feature `zarr`): zarr v2 and v3 arrays on disk or in a devbuf
//! [`Store`](devbuf_core::zarr::Store), read with the [`zarrs`] crate into
//! [`NDBuffer`](devbuf_core::zarr::NDBuffer)s on the host or a GPU, and written back.
//!
//! * [`ZarrArray`]: [`open`](ZarrArray::open) or [`create`](ZarrArray::create) (from an
//!   [`ArraySpec`]) an array at a [`Location`] (a directory, an object-store URL, a
//!   devbuf [`Store`](devbuf_core::zarr::Store), `zarrs` storage); [`read`](ZarrArray::read)
//!   a selection or [`read_chunks`](ZarrArray::read_chunks) into any
//!   [`BufferPrototype`](devbuf_core::zarr::BufferPrototype), into memory you hold or
//!   over several devices, blocking or async; write chunks or a box from host or
//!   device arrays.
//! * [`ZarrMetadata`]: shape, chunk shape and grid, inner chunks of shards, stored data
//!   type (element type + byte order), fill value as a [`Scalar`](devbuf_core::zarr::Scalar),
//!   stored order, codecs.
//!
//! **What opens.** Metadata is input like any other, and is checked before anything
//! computes with it: every product of extents and element size fits 64 bits, chunk
//! extents are non-zero, a chunk (or shard) holds at most [`MAX_CHUNK_BYTES`], an
//! array has at most [`MAX_RANK`] axes, a shard's inner chunks divide it (at most
//! [`MAX_SHARDING_DEPTH`] levels, [`MAX_SHARD_PRODUCT`]), a codec list has at most
//! [`MAX_CODECS`] codecs. A document that breaks one of these is an error naming the
//! field, its value and the valid range: [`Error::Malformed`]
//! when no valid array could have it, [`Error::InvalidArgument`]
//! when it is beyond devbuf's bounds. In a directory store only regular files (or
//! symbolic links to them) are read and written: a FIFO, a device or a directory where a
//! chunk or a metadata document should be is an error naming its path, never a hang.
//!
//! **What reads return.** Always native-endian, C-contiguous arrays of the stored element
//! type: big-endian chunks are swapped and zarr v2 `order: "F"` chunks transposed while
//! decoding (by `zarrs`' `bytes` and `transpose` codecs), so the values are those numpy
//! and zarr-python return. Missing chunks read as the fill value.
//!
//! **Where the work happens.** Codecs (blosc, gzip, zstd, crc32c, sharding, transpose,
//! bytes) run on the host, in parallel over chunks. Host reads decode straight into the
//! result. Device reads decode into page-locked staging buffers owned by the array, a
//! batch at a time, and copy each batch to the device in one transfer while the next
//! batch is decoded; device writes run the same pipeline backwards. See `docs/zarr.md`,
//! "Real zarr stores".
//!
//! ```
//! use devbuf_zarr::ZarrArray;
//! use devbuf_core::zarr::{BufferPrototype, default_buffer_prototype};
//!
//! let a = ZarrArray::open("../../tests/fixtures/zarr/v3_float32_sharded.zarr")?;
//! let m = a.metadata();
//! println!("{:?} {} in chunks of {:?}", m.shape, a.dtype(), m.chunk_shape);
//! // a GPU after set_default_buffer_prototype(BufferPrototype::Device(0)); here the host.
//! let proto = default_buffer_prototype();
//! let grid = &m.grid_shape;
//! let indices: Vec<[u64; 2]> = (0..grid[0]).flat_map(|i| (0..grid[1]).map(move |j| [i, j])).collect();
//! let chunks = a.read_chunks(&indices).to(&proto)?;
//! let mut sum = 0.0f64;
//! for c in &chunks {
//!     sum += c.to_ndarray::<f32>()?.iter().map(|&v| v as f64).sum::<f64>();
//! }
//! assert_eq!(chunks.len(), 4);
//! # let _ = (sum, BufferPrototype::Host);
//! # Ok::<(), devbuf_core::Error>(())
//! ```

// docs.rs (`--cfg docsrs`, nightly): badges naming the feature each item needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

use std::panic::{AssertUnwindSafe, catch_unwind};

use devbuf_core::error::{Error, Result};

pub(crate) mod aio;
mod array;
mod array_async;
mod array_into;
mod array_spread;
mod array_stream;
#[cfg(feature = "object_store")]
mod array_url;
mod array_write;
mod bitround_v2;
pub(crate) mod bz2;
mod encode;
mod fs_store;
mod location;
pub(crate) mod lz4;
mod metadata;
#[cfg(feature = "object_store")]
#[cfg_attr(docsrs, doc(cfg(feature = "object_store")))]
pub mod object_store;
pub(crate) mod read;
mod request;
mod spec;
mod storage;
mod time_v2;
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
#[doc(hidden)]
pub mod tls;
mod validate;
mod write;
mod write_progress;

pub use array::ZarrArray;
pub use array_into::{ReadInto, ReadTarget};
pub use array_spread::{DevicePart, Spread, SpreadRead};
pub use array_stream::ChunkStream;
pub use encode::{
    AUTO_GPU_MAX_CHUNK_BYTES, AUTO_MAX_ZSTD_LEVEL, Encoder, WriteEncoding, WriteOptions,
};
pub use location::Location;
pub use metadata::{TimeKind, TimeUnit, ZarrMetadata};
pub use read::{
    Cancel, DEFAULT_LANE_STREAMS, DEFAULT_PROGRESS_INTERVAL, DEFAULT_SLOT_BYTES,
    DEFAULT_STREAM_MIN_BYTES, DEFAULT_STREAM_PIECE_BYTES, Decoder, GpuTuning, Progress,
    ProgressSink, ReadOptions, ReadReport,
};
pub use request::{Read, ReadChunks, Selection};
pub use spec::{ArraySpec, Compressor};
pub use storage::StoreAdapter;
pub use validate::{
    MAX_CHUNK_BYTES, MAX_CODECS, MAX_METADATA_BYTES, MAX_RANK, MAX_SHARD_PRODUCT,
    MAX_SHARDING_DEPTH,
};
/// The [`zarrs`] crate devbuf reads and writes with, for [`Location::Zarrs`]: storage
/// built with this version is the storage devbuf accepts.
pub use zarrs;

/// Runs a `zarrs` call, turning a panic inside it into an error (devbuf never panics
/// on bad input; `zarrs` may on malformed data it does not expect).
pub(crate) fn guard<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = devbuf_core::__private::panic_message(p.as_ref());
            Err(Error::Malformed(format!("{what}: zarrs panicked: {msg}")))
        }
    }
}

/// The zarr fixtures under `tests/fixtures/zarr` (zarr-python wrote them), for unit
/// tests of the engine's parts.
#[cfg(test)]
pub(crate) mod fixtures {
    use std::path::PathBuf;

    /// The path of fixture `name` (`""`: the fixtures' directory).
    pub(crate) fn path(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/zarr")
            .join(name)
    }

    /// Every fixture's name (`*.zarr`), sorted.
    pub(crate) fn names() -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(path(""))
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".zarr"))
            .collect();
        names.sort();
        names
    }
}
