//! [`Location`]: where a zarr array lives, for [`ZarrArray::open`](crate::ZarrArray::open)
//! and [`ZarrArray::create`](crate::ZarrArray::create).

use std::path::{Path, PathBuf};
use std::sync::Arc;

#[cfg(feature = "object_store")]
use crate::object_store::{ObjectStoreOptions, UrlStore};
use devbuf_core::zarr::Store;

/// Where a zarr array lives: the one argument of [`ZarrArray::open`](crate::ZarrArray::open),
/// [`open_async`](crate::ZarrArray::open_async) and [`create`](crate::ZarrArray::create).
///
/// Converts from what a user usually has:
/// * `&str` / `String`: a URL when it starts with a scheme (`s3://`, `gs://`, `az://`,
///   `http(s)://`, `file://`; options from the environment, see
///   [`ObjectStoreOptions`](crate::object_store::ObjectStoreOptions)), else a directory.
///   Use [`Location::Path`] for a directory whose name contains `://`.
/// * `&Path` / `PathBuf`: a directory.
/// * `Arc<UrlStore>`: the root of an object store made by hand.
/// * `(Arc<dyn Store>, &str)`: an array at a path (`""` for the root, else
///   `"group/array"`) of a devbuf [`Store`] ([`MemoryStore`](devbuf_core::zarr::MemoryStore),
///   [`DeviceMemoryStore`](devbuf_core::zarr::DeviceMemoryStore) or your own).
/// * [`Location::Zarrs`]: storage of the [`zarrs`] crate you already have (any
///   `zarrs` store that reads and writes, e.g. `zarrs::filesystem::FilesystemStore`
///   or `zarrs::storage::store::MemoryStore`); [`Location::ZarrsReadOnly`] for one that
///   only reads.
///
/// ```
/// use std::sync::Arc;
/// use devbuf_zarr::{ArraySpec, Location, ZarrArray};
/// use devbuf_core::zarr::{BufferPrototype, Dtype, MemoryStore, Store};
/// // A directory.
/// let a = ZarrArray::open("../../tests/fixtures/zarr/v3_float32.zarr")?;
/// assert_eq!(a.shape(), &[10, 7]);
/// // A devbuf store.
/// let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
/// ZarrArray::create((store.clone(), "g/a"), &ArraySpec::new(&[4], &[2], Dtype::INT32))?;
/// let b = ZarrArray::open((store, "g/a"))?;
/// assert_eq!(b.shape(), &[4]);
/// // zarrs storage.
/// let zs = Arc::new(devbuf_zarr::zarrs::storage::store::MemoryStore::new());
/// ZarrArray::create(Location::Zarrs(zs.clone(), "/x".into()), &ArraySpec::new(&[3], &[3], Dtype::UINT8))?;
/// assert_eq!(ZarrArray::open(Location::Zarrs(zs.clone(), "/x".into()))?.shape(), &[3]);
/// // zarrs storage that only reads: reads work, writes are refused.
/// let ro = ZarrArray::open(Location::ZarrsReadOnly(zs, "/x".into()))?;
/// assert_eq!(ro.read(..).to(&BufferPrototype::Host)?.shape(), &[3]);
/// assert!(ro.write_subset(&[0], &devbuf_core::zarr::NDBuffer::from_ndarray(ndarray::arr1(&[1u8]))).is_err());
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub enum Location {
    /// A directory on the local file system. The read engine reads its chunk files
    /// itself, many at a time.
    Path(PathBuf),
    /// An object store URL and its options (feature `object_store`). The read engine
    /// fetches chunks with many requests in flight.
    #[cfg(feature = "object_store")]
    #[cfg_attr(docsrs, doc(cfg(feature = "object_store")))]
    Url(String, ObjectStoreOptions),
    /// The root of an object store opened by hand (e.g. with
    /// [`UrlStore::from_object_store`]; feature `object_store`).
    #[cfg(feature = "object_store")]
    #[cfg_attr(docsrs, doc(cfg(feature = "object_store")))]
    UrlStore(Arc<UrlStore>),
    /// An array at a path (`""` for the root, else `"group/array"`) of a devbuf [`Store`].
    Store(Arc<dyn Store>, String),
    /// An array at a node path (`"/"` for the root, else `"/group/array"`) of `zarrs`
    /// storage that reads and writes.
    Zarrs(
        Arc<dyn ::zarrs::storage::ReadableWritableStorageTraits>,
        String,
    ),
    /// An array at a node path of `zarrs` storage that only reads (e.g. an HTTP store):
    /// reads as [`Location::Zarrs`]; writes are [`Error::ReadOnly`](devbuf_core::Error::ReadOnly)
    /// naming the array.
    ZarrsReadOnly(Arc<dyn ::zarrs::storage::ReadableStorageTraits>, String),
}

/// `zarrs` storage that only reads, as the storage an array holds: writes are zarrs'
/// `ReadOnly` error (devbuf's [`Error::ReadOnly`](devbuf_core::Error::ReadOnly)).
pub(crate) struct ReadOnlyStorage(pub(crate) Arc<dyn ::zarrs::storage::ReadableStorageTraits>);

mod read_only {
    use bytes::Bytes;
    use zarrs::storage::byte_range::ByteRangeIterator;
    use zarrs::storage::{
        MaybeBytes, MaybeBytesIterator, OffsetBytesIterator, ReadableStorageTraits, StorageError,
        StoreKey, StorePrefix, WritableStorageTraits,
    };

    use super::ReadOnlyStorage;

    impl ReadableStorageTraits for ReadOnlyStorage {
        fn get(&self, key: &StoreKey) -> Result<MaybeBytes, StorageError> {
            self.0.get(key)
        }

        fn get_partial_many<'a>(
            &'a self,
            key: &StoreKey,
            byte_ranges: ByteRangeIterator<'a>,
        ) -> Result<MaybeBytesIterator<'a>, StorageError> {
            self.0.get_partial_many(key, byte_ranges)
        }

        fn size_key(&self, key: &StoreKey) -> Result<Option<u64>, StorageError> {
            self.0.size_key(key)
        }

        fn supports_get_partial(&self) -> bool {
            self.0.supports_get_partial()
        }
    }

    impl WritableStorageTraits for ReadOnlyStorage {
        fn set(&self, _key: &StoreKey, _value: Bytes) -> Result<(), StorageError> {
            Err(StorageError::ReadOnly)
        }

        fn set_partial_many(
            &self,
            _key: &StoreKey,
            _offset_values: OffsetBytesIterator,
        ) -> Result<(), StorageError> {
            Err(StorageError::ReadOnly)
        }

        fn erase(&self, _key: &StoreKey) -> Result<(), StorageError> {
            Err(StorageError::ReadOnly)
        }

        fn erase_prefix(&self, _prefix: &StorePrefix) -> Result<(), StorageError> {
            Err(StorageError::ReadOnly)
        }

        fn supports_set_partial(&self) -> bool {
            false
        }
    }
}

impl std::fmt::Debug for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Path(p) => f.debug_tuple("Path").field(p).finish(),
            #[cfg(feature = "object_store")]
            Location::Url(u, o) => f.debug_tuple("Url").field(u).field(o).finish(),
            #[cfg(feature = "object_store")]
            Location::UrlStore(s) => f.debug_tuple("UrlStore").field(&s.url()).finish(),
            Location::Store(_, p) => f.debug_tuple("Store").field(p).finish(),
            Location::ZarrsReadOnly(_, p) => f.debug_tuple("ZarrsReadOnly").field(p).finish(),
            Location::Zarrs(_, p) => f.debug_tuple("Zarrs").field(p).finish(),
        }
    }
}

/// Whether `s` starts with a URL scheme (`letters://`).
pub(crate) fn has_scheme(s: &str) -> bool {
    match s.split_once("://") {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        None => false,
    }
}

impl From<&str> for Location {
    fn from(s: &str) -> Self {
        #[cfg(feature = "object_store")]
        if has_scheme(s) {
            return Location::Url(s.to_string(), ObjectStoreOptions::default());
        }
        Location::Path(PathBuf::from(s))
    }
}

impl From<String> for Location {
    fn from(s: String) -> Self {
        Location::from(s.as_str())
    }
}

impl From<&String> for Location {
    fn from(s: &String) -> Self {
        Location::from(s.as_str())
    }
}

impl From<&Path> for Location {
    fn from(p: &Path) -> Self {
        Location::Path(p.to_path_buf())
    }
}

impl From<PathBuf> for Location {
    fn from(p: PathBuf) -> Self {
        Location::Path(p)
    }
}

impl From<&PathBuf> for Location {
    fn from(p: &PathBuf) -> Self {
        Location::Path(p.clone())
    }
}

#[cfg(feature = "object_store")]
impl From<Arc<UrlStore>> for Location {
    fn from(s: Arc<UrlStore>) -> Self {
        Location::UrlStore(s)
    }
}

impl<S: Store + 'static> From<(Arc<S>, &str)> for Location {
    fn from((store, path): (Arc<S>, &str)) -> Self {
        Location::Store(store, path.to_string())
    }
}

impl From<(Arc<dyn Store>, &str)> for Location {
    fn from((store, path): (Arc<dyn Store>, &str)) -> Self {
        Location::Store(store, path.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_with_a_scheme_are_urls_others_paths() {
        assert!(has_scheme("s3://b/a.zarr"));
        assert!(has_scheme("file:///tmp/a"));
        assert!(has_scheme("s3+http://x"));
        assert!(!has_scheme("data/a.zarr"));
        assert!(!has_scheme("://x"));
        assert!(!has_scheme("dir/with://odd"));
        assert!(matches!(Location::from("data/a.zarr"), Location::Path(_)));
        #[cfg(feature = "object_store")]
        assert!(matches!(Location::from("s3://b/a"), Location::Url(..)));
        #[cfg(not(feature = "object_store"))]
        assert!(matches!(Location::from("s3://b/a"), Location::Path(_)));
    }
}
