//! [`StoreAdapter`]: any devbuf [`Store`] as `zarrs` storage.

use std::collections::BTreeSet;
use std::sync::Arc;

use zarrs::storage::byte_range::{ByteRange, ByteRangeIterator, InvalidByteRangeError};
use zarrs::storage::{
    Bytes, ListableStorageTraits, MaybeBytes, MaybeBytesIterator, OffsetBytesIterator,
    ReadableStorageTraits, StorageError, StoreKey, StoreKeys, StoreKeysPrefixes, StorePrefix,
    WritableStorageTraits,
};

use devbuf_core::error::Error;
use devbuf_core::zarr::{BufferPrototype, ByteBuffer, ByteRequest, Store};

/// zarrs storage of any kind, as the engine holds it (`Arc<DynStorage>`).
pub(crate) type DynStorage = dyn zarrs::storage::ReadableWritableStorageTraits;

/// A devbuf [`Store`] ([`MemoryStore`](devbuf_core::zarr::MemoryStore),
/// [`DeviceMemoryStore`](devbuf_core::zarr::DeviceMemoryStore) or your own) seen through
/// `zarrs`' storage traits (readable, writable, listable), so that
/// [`ZarrArray::open`](super::ZarrArray::open) of a
/// [`Location::Store`](crate::Location::Store) can read and write zarr arrays kept in it,
/// and so that `zarrs`' own APIs (groups, hierarchies, `zarrs::array::Array`) can use a
/// devbuf store.
///
/// Values travel as host `Bytes`: a host store hands its values over without a copy;
/// a device store copies each value (or the requested byte range) to the host, since
/// `zarrs`' codecs run on the host. Errors of the store become `zarrs` storage errors
/// carrying devbuf's message.
///
/// ```
/// use std::sync::Arc;
/// use devbuf_zarr::StoreAdapter;
/// use devbuf_core::zarr::{ByteBuffer, MemoryStore, Store};
/// use devbuf_zarr::zarrs::storage::{ReadableStorageTraits, StoreKey};
/// let store = Arc::new(MemoryStore::new());
/// store.set("a/zarr.json", &ByteBuffer::from(&b"{}"[..]))?;
/// let adapter = StoreAdapter::new(store);
/// let key = StoreKey::new("a/zarr.json").unwrap();
/// assert_eq!(adapter.get(&key).unwrap().unwrap().as_ref(), b"{}");
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone)]
pub struct StoreAdapter {
    store: Arc<dyn Store>,
}

impl StoreAdapter {
    /// Wraps `store`.
    pub fn new(store: Arc<dyn Store>) -> StoreAdapter {
        StoreAdapter { store }
    }
}

impl std::fmt::Debug for StoreAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreAdapter")
            .field("read_only", &self.store.read_only())
            .finish()
    }
}

/// A devbuf error as a `zarrs` storage error: read-only as zarrs' own, any other
/// wrapped whole (in an `io::Error` of the same kind, which zarrs keeps), so that
/// [`storage_error`] gives it back with its kind and source.
fn storage_err(e: devbuf_core::Error) -> StorageError {
    use devbuf_core::ErrorKind as K;
    use std::io::ErrorKind as Io;
    let kind = match e.kind() {
        K::ReadOnly => return StorageError::ReadOnly,
        K::NotFound => Io::NotFound,
        K::PermissionDenied => Io::PermissionDenied,
        K::Timeout => Io::TimedOut,
        K::Unsupported => Io::Unsupported,
        _ => Io::Other,
    };
    StorageError::IOError(Arc::new(std::io::Error::new(kind, e)))
}

/// A `zarrs` storage error during `op`, about `what` (the array's location, a key), as a
/// devbuf error that keeps its kind and cause: an I/O error by its `io::ErrorKind`
/// (not found, permission denied, timed out, else [`Error::Io`]) with the `io::Error`
/// as source; a devbuf error that a [`StoreAdapter`] passed through, as it was, with
/// `what` in front; zarrs' read-only and unsupported-method errors as
/// [`Error::ReadOnly`] and [`Error::Unsupported`]; any other as [`Error::Io`] with the
/// storage error as source. The message is `"{what}: {e}"`, as before.
/// A `zarrs` array error of writing `what` (a chunk): its storage error as
/// [`storage_error`] maps it, any other as [`Error::Io`] with the error as source.
pub(crate) fn write_error(what: impl std::fmt::Display, e: zarrs::array::ArrayError) -> Error {
    const OP: &str = "writing a zarr chunk";
    match e {
        zarrs::array::ArrayError::StorageError(s) => storage_error(OP, what, s),
        e => Error::io(OP, format!("{what}: {e}")).with_source(e),
    }
}

pub(crate) fn storage_error(
    op: &'static str,
    what: impl std::fmt::Display,
    e: StorageError,
) -> Error {
    match e {
        StorageError::IOError(io) => {
            if let Some(ours) = io.get_ref().and_then(|i| i.downcast_ref::<Error>()) {
                return ours.clone().context(what);
            }
            Error::from_io(op, format!("{what}: {io}"), io)
        }
        StorageError::ReadOnly => Error::ReadOnly(format!("{what}: {e}")),
        StorageError::Unsupported(_) => Error::unsupported(format!("{what}: {e}")).with_source(e),
        e => Error::io(op, format!("{what}: {e}")).with_source(e),
    }
}

fn host_get(
    store: &dyn Store,
    key: &str,
    range: Option<ByteRequest>,
) -> Result<Option<Bytes>, StorageError> {
    match store
        .get(key, &BufferPrototype::Host, range)
        .map_err(storage_err)?
    {
        Some(b) => Ok(Some(b.to_host().map_err(storage_err)?)),
        None => Ok(None),
    }
}

fn byte_request(r: ByteRange) -> ByteRequest {
    match r {
        ByteRange::FromStart(offset, None) => ByteRequest::Offset(offset),
        ByteRange::FromStart(offset, Some(len)) => ByteRequest::Range {
            start: offset,
            end: offset.saturating_add(len),
        },
        ByteRange::Suffix(n) => ByteRequest::Suffix(n),
    }
}

impl ReadableStorageTraits for StoreAdapter {
    fn get(&self, key: &StoreKey) -> Result<MaybeBytes, StorageError> {
        host_get(self.store.as_ref(), key.as_str(), None)
    }

    fn get_partial_many<'a>(
        &'a self,
        key: &StoreKey,
        byte_ranges: ByteRangeIterator<'a>,
    ) -> Result<MaybeBytesIterator<'a>, StorageError> {
        let Some(size) = self.store.getsize(key.as_str()).map_err(storage_err)? else {
            return Ok(None);
        };
        let size = size as u64;
        let mut out = Vec::new();
        for r in byte_ranges {
            let valid = match r {
                ByteRange::FromStart(o, None) => o <= size,
                ByteRange::FromStart(o, Some(n)) => o.checked_add(n).is_some_and(|e| e <= size),
                ByteRange::Suffix(n) => n <= size,
            };
            if !valid {
                out.push(Err(InvalidByteRangeError::new(r, size).into()));
                continue;
            }
            out.push(
                host_get(self.store.as_ref(), key.as_str(), Some(byte_request(r)))
                    .and_then(|b| b.ok_or_else(|| StorageError::Other(format!("{key} vanished")))),
            );
        }
        Ok(Some(Box::new(out.into_iter())))
    }

    fn size_key(&self, key: &StoreKey) -> Result<Option<u64>, StorageError> {
        Ok(self
            .store
            .getsize(key.as_str())
            .map_err(storage_err)?
            .map(|s| s as u64))
    }

    fn supports_get_partial(&self) -> bool {
        true
    }
}

impl WritableStorageTraits for StoreAdapter {
    fn set(&self, key: &StoreKey, value: Bytes) -> Result<(), StorageError> {
        self.store
            .set(key.as_str(), &ByteBuffer::from(value))
            .map_err(storage_err)
    }

    fn set_partial_many(
        &self,
        key: &StoreKey,
        offset_values: OffsetBytesIterator,
    ) -> Result<(), StorageError> {
        // Read, patch, write back (the devbuf stores keep whole values).
        let mut value = host_get(self.store.as_ref(), key.as_str(), None)?
            .map(|b| b.to_vec())
            .unwrap_or_default();
        for (offset, bytes) in offset_values {
            let start = usize::try_from(offset)
                .map_err(|_| StorageError::Other(format!("offset {offset} too large")))?;
            let end = start
                .checked_add(bytes.len())
                .ok_or_else(|| StorageError::Other(format!("offset {offset} too large")))?;
            if value.len() < end {
                value.resize(end, 0);
            }
            value[start..end].copy_from_slice(&bytes);
        }
        self.set(key, Bytes::from(value))
    }

    fn erase(&self, key: &StoreKey) -> Result<(), StorageError> {
        self.store.delete(key.as_str()).map_err(storage_err)
    }

    fn erase_prefix(&self, prefix: &StorePrefix) -> Result<(), StorageError> {
        self.store.delete_dir(prefix.as_str()).map_err(storage_err)
    }

    fn supports_set_partial(&self) -> bool {
        false
    }
}

impl ListableStorageTraits for StoreAdapter {
    fn list(&self) -> Result<StoreKeys, StorageError> {
        to_keys(self.store.list().map_err(storage_err)?)
    }

    fn list_prefix(&self, prefix: &StorePrefix) -> Result<StoreKeys, StorageError> {
        to_keys(
            self.store
                .list_prefix(prefix.as_str())
                .map_err(storage_err)?,
        )
    }

    fn list_dir(&self, prefix: &StorePrefix) -> Result<StoreKeysPrefixes, StorageError> {
        let p = prefix.as_str();
        let mut keys = Vec::new();
        let mut dirs = BTreeSet::new();
        for k in self.store.list_prefix(p).map_err(storage_err)? {
            // A store of the caller's may answer loosely: keep the keys under `p` only
            // (slicing off `p` unchecked panicked on a shorter or other key).
            let Some(rest) = k.strip_prefix(p) else {
                continue;
            };
            match rest.split_once('/') {
                Some((dir, _)) => {
                    dirs.insert(format!("{p}{dir}/"));
                }
                None => keys.push(StoreKey::new(k.clone())?),
            }
        }
        let prefixes = dirs
            .into_iter()
            .map(StorePrefix::new)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(StoreKeysPrefixes::new(keys, prefixes))
    }

    fn size_prefix(&self, prefix: &StorePrefix) -> Result<u64, StorageError> {
        let mut total = 0u64;
        for k in self
            .store
            .list_prefix(prefix.as_str())
            .map_err(storage_err)?
        {
            total += self.store.getsize(&k).map_err(storage_err)?.unwrap_or(0) as u64;
        }
        Ok(total)
    }
}

fn to_keys(keys: Vec<String>) -> Result<StoreKeys, StorageError> {
    keys.into_iter()
        .map(|k| StoreKey::new(k).map_err(StorageError::from))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use devbuf_core::zarr::MemoryStore;
    use zarrs::storage::StorePrefix;

    /// A caller's store whose `list_prefix` ignores the prefix (answers every key).
    struct LooseStore(MemoryStore);

    impl Store for LooseStore {
        fn get(
            &self,
            key: &str,
            prototype: &BufferPrototype,
            byte_range: Option<devbuf_core::zarr::ByteRequest>,
        ) -> devbuf_core::error::Result<Option<devbuf_core::zarr::ByteBuffer>> {
            self.0.get(key, prototype, byte_range)
        }
        fn set(
            &self,
            key: &str,
            value: &devbuf_core::zarr::ByteBuffer,
        ) -> devbuf_core::error::Result<()> {
            self.0.set(key, value)
        }
        fn delete(&self, key: &str) -> devbuf_core::error::Result<()> {
            self.0.delete(key)
        }
        fn exists(&self, key: &str) -> devbuf_core::error::Result<bool> {
            self.0.exists(key)
        }
        fn list(&self) -> devbuf_core::error::Result<Vec<String>> {
            self.0.list()
        }
        fn list_prefix(&self, _prefix: &str) -> devbuf_core::error::Result<Vec<String>> {
            self.0.list()
        }
        fn list_dir(&self, prefix: &str) -> devbuf_core::error::Result<Vec<String>> {
            self.0.list_dir(prefix)
        }
        fn read_only(&self) -> bool {
            false
        }
        fn getsize(&self, key: &str) -> devbuf_core::error::Result<Option<usize>> {
            self.0.getsize(key)
        }
    }

    #[test]
    fn store_adapter_lists_only_keys_under_the_prefix() {
        let store = LooseStore(MemoryStore::new());
        for k in ["b", "abc/x", "abc/d/y", "zz/é"] {
            store
                .set(k, &devbuf_core::zarr::ByteBuffer::from(&b"1"[..]))
                .unwrap();
        }
        let adapter = StoreAdapter::new(Arc::new(store));
        // Keys outside the prefix (shorter ones included) are skipped, not sliced (a panic).
        let listed = adapter
            .list_dir(&StorePrefix::new("abc/").unwrap())
            .unwrap();
        let keys: Vec<&str> = listed.keys().iter().map(|k| k.as_str()).collect();
        let dirs: Vec<&str> = listed.prefixes().iter().map(|p| p.as_str()).collect();
        assert_eq!(keys, ["abc/x"]);
        assert_eq!(dirs, ["abc/d/"]);
    }
}
