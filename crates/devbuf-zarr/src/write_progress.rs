//! Progress and cancellation of writes ([`WriteOptions::progress`](crate::WriteOptions::progress),
//! [`WriteOptions::cancel`](crate::WriteOptions::cancel)): the array's storage seen
//! through [`Tracked`], which counts every chunk (shard) the write stores or erases and
//! refuses further stores once the write is cancelled. Host writes (zarrs' own encoders)
//! and device writes (devbuf's write engine) both store through it, so both report.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use zarrs::storage::byte_range::ByteRangeIterator;
use zarrs::storage::{
    MaybeBytes, MaybeBytesIterator, OffsetBytesIterator, ReadableStorageTraits, StorageError,
    StoreKey, StorePrefix, WritableStorageTraits,
};

use crate::read::progress::Tracker;
use crate::read::{Cancel, ProgressSink};
use crate::storage::DynStorage;
use devbuf_core::error::Error;

/// Storage that counts the chunks a write stores (or erases: chunks equal to the fill
/// value) for the write's progress, and stops storing once the write is cancelled.
pub(crate) struct Tracked {
    inner: Arc<DynStorage>,
    tracker: Option<Tracker>,
    cancel: Option<Cancel>,
    /// Decoded bytes of one chunk (the progress's unit of bytes).
    chunk_bytes: u64,
    /// Keys already counted (a chunk stored in pieces counts once).
    counted: Mutex<HashSet<String>>,
}

impl Tracked {
    /// A view of `inner` for a write of `chunks` chunks of `chunk_bytes` decoded bytes,
    /// reporting to `sink` and stopped by `cancel`. The first report (nothing done) is
    /// made now.
    pub(crate) fn new(
        inner: Arc<DynStorage>,
        sink: Option<&ProgressSink>,
        cancel: Option<&Cancel>,
        chunks: u64,
        chunk_bytes: u64,
    ) -> Tracked {
        let tracker = sink.map(|s| {
            let t = Tracker::new(s.clone(), Instant::now(), chunks, chunk_bytes);
            t.start();
            t
        });
        Tracked {
            inner,
            tracker,
            cancel: cancel.cloned(),
            chunk_bytes,
            counted: Mutex::new(HashSet::new()),
        }
    }

    /// The last report of a write that succeeded.
    pub(crate) fn finish(&self) {
        if let Some(t) = &self.tracker {
            t.finish();
        }
    }

    fn check_cancel(&self) -> Result<(), StorageError> {
        if self.cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
            let e = Error::cancelled("the write was cancelled (WriteOptions::cancel)");
            return Err(StorageError::IOError(Arc::new(std::io::Error::other(e))));
        }
        Ok(())
    }

    /// Counts `key` once, unless it is a metadata document.
    fn count(&self, key: &StoreKey) {
        let Some(t) = &self.tracker else { return };
        let name = key.as_str();
        let leaf = name.rsplit('/').next().unwrap_or(name);
        if matches!(leaf, "zarr.json" | ".zarray" | ".zattrs" | ".zgroup") {
            return;
        }
        let first = self
            .counted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string());
        if first {
            t.add(1, self.chunk_bytes);
        }
    }
}

impl ReadableStorageTraits for Tracked {
    fn get(&self, key: &StoreKey) -> Result<MaybeBytes, StorageError> {
        self.inner.get(key)
    }

    fn get_partial_many<'a>(
        &'a self,
        key: &StoreKey,
        byte_ranges: ByteRangeIterator<'a>,
    ) -> Result<MaybeBytesIterator<'a>, StorageError> {
        self.inner.get_partial_many(key, byte_ranges)
    }

    fn size_key(&self, key: &StoreKey) -> Result<Option<u64>, StorageError> {
        self.inner.size_key(key)
    }

    fn supports_get_partial(&self) -> bool {
        self.inner.supports_get_partial()
    }
}

impl WritableStorageTraits for Tracked {
    fn set(&self, key: &StoreKey, value: Bytes) -> Result<(), StorageError> {
        self.check_cancel()?;
        self.inner.set(key, value)?;
        self.count(key);
        Ok(())
    }

    fn set_partial_many(
        &self,
        key: &StoreKey,
        offset_values: OffsetBytesIterator,
    ) -> Result<(), StorageError> {
        self.check_cancel()?;
        self.inner.set_partial_many(key, offset_values)?;
        self.count(key);
        Ok(())
    }

    fn erase(&self, key: &StoreKey) -> Result<(), StorageError> {
        self.check_cancel()?;
        self.inner.erase(key)?;
        self.count(key);
        Ok(())
    }

    fn erase_prefix(&self, prefix: &StorePrefix) -> Result<(), StorageError> {
        self.check_cancel()?;
        self.inner.erase_prefix(prefix)
    }

    fn supports_set_partial(&self) -> bool {
        self.inner.supports_set_partial()
    }
}
