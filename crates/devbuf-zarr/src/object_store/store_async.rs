//! [`UrlStore`]'s [`AsyncStore`] calls, the async forms of its store calls: they run on
//! the caller's tokio runtime (any flavour, a tonic handler's included) and start no
//! runtime of their own.
//! The blocking [`Store`](devbuf_core::zarr::Store) methods are these run to completion
//! on devbuf's own runtime.

use bytes::Bytes;
use object_store::{GetRange, ObjectStoreExt};

use super::store::UrlStore;
use devbuf_core::error::{Error, Result};
use devbuf_core::zarr::{AsyncStore, ByteRequest};

impl AsyncStore for UrlStore {
    /// The bytes of `key` (all, or `byte_range`), in host memory; `None` when the key
    /// does not exist. The async form of [`Store::get`](devbuf_core::zarr::Store::get).
    ///
    /// ```
    /// use devbuf_zarr::object_store::{ObjectStoreOptions, UrlStore};
    /// use devbuf_core::zarr::{AsyncStore, ByteRequest};
    /// let dir = std::env::temp_dir().join(format!("devbuf-doc-async-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let store = UrlStore::open(&format!("file://{}", dir.display()), &ObjectStoreOptions::default())?;
    /// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// rt.block_on(async {
    ///     store.set_async("a/b", bytes::Bytes::from_static(b"hello")).await?;
    ///     let r = Some(ByteRequest::Range { start: 1, end: 3 });
    ///     assert_eq!(store.get_async("a/b", r).await?.as_deref(), Some(&b"el"[..]));
    ///     assert_eq!(store.list_async().await?, vec!["a/b".to_string()]);
    ///     assert_eq!(store.list_dir_async("a").await?, vec!["b".to_string()]);
    ///     assert_eq!(store.getsize_async("a/b").await?, Some(5));
    ///     store.delete_async("a/b").await?;
    ///     assert!(!store.exists_async("a/b").await?);
    ///     Ok::<(), devbuf_core::Error>(())
    /// })?;
    /// std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    async fn get_async(&self, key: &str, byte_range: Option<ByteRequest>) -> Result<Option<Bytes>> {
        let range = match byte_range {
            None => None,
            Some(ByteRequest::Range { start, end }) => {
                if start > end {
                    return Err(Error::invalid(format!(
                        "byte range {start}..{end} is reversed (start must not exceed end)"
                    )));
                }
                if start == end {
                    // An empty range of an existing key: no request for bytes.
                    return Ok(self.getsize_async(key).await?.map(|_| Bytes::new()));
                }
                Some(GetRange::Bounded(start..end))
            }
            Some(ByteRequest::Offset(o)) => Some(GetRange::Offset(o)),
            Some(ByteRequest::Suffix(n)) => Some(GetRange::Suffix(n)),
        };
        self.fetch_range(key, range).await
    }

    /// Stores `bytes` under `key` (one PUT). The async form of
    /// [`Store::set`](devbuf_core::zarr::Store::set); see [`get_async`](Self::get_async)
    /// for an example.
    async fn set_async(&self, key: &str, bytes: Bytes) -> Result<()> {
        self.put(key, bytes).await
    }

    /// Deletes `key` (a missing key is not an error). The async form of
    /// [`Store::delete`](devbuf_core::zarr::Store::delete); see
    /// [`get_async`](Self::get_async) for an example.
    async fn delete_async(&self, key: &str) -> Result<()> {
        self.writable("DELETE", key)?;
        let path = self.path(key)?;
        match self.inner.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.client_error("DELETE", key, e)),
        }
    }

    /// Whether `key` exists (one HEAD). See [`get_async`](Self::get_async) for an
    /// example.
    async fn exists_async(&self, key: &str) -> Result<bool> {
        Ok(self.getsize_async(key).await?.is_some())
    }

    /// The size of `key` in bytes, `None` when it does not exist (one HEAD). See
    /// [`get_async`](Self::get_async) for an example.
    async fn getsize_async(&self, key: &str) -> Result<Option<usize>> {
        let path = self.path(key)?;
        match self.inner.head(&path).await {
            Ok(m) => Ok(Some(usize::try_from(m.size).unwrap_or(usize::MAX))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.client_error("HEAD", key, e)),
        }
    }

    /// Every key of the store, sorted. See [`get_async`](Self::get_async) for an
    /// example.
    async fn list_async(&self) -> Result<Vec<String>> {
        self.keys_under("").await
    }

    /// The keys that start with `prefix`, sorted.
    ///
    /// ```
    /// use devbuf_zarr::object_store::{ObjectStoreOptions, UrlStore};
    /// use devbuf_core::zarr::AsyncStore;
    /// let dir = std::env::temp_dir().join(format!("devbuf-doc-lpa-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let store = UrlStore::open(&format!("file://{}", dir.display()), &ObjectStoreOptions::default())?;
    /// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// rt.block_on(async {
    ///     for k in ["c/0", "c/1", "d/0"] {
    ///         store.set_async(k, bytes::Bytes::from_static(b"x")).await?;
    ///     }
    ///     assert_eq!(store.list_prefix_async("c/").await?, vec!["c/0", "c/1"]);
    ///     Ok::<(), devbuf_core::Error>(())
    /// })?;
    /// std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    async fn list_prefix_async(&self, prefix: &str) -> Result<Vec<String>> {
        // Object stores list whole path segments: list the prefix's directory, then
        // keep the keys that start with it.
        let dir = prefix.rsplit_once('/').map_or("", |(d, _)| d);
        Ok(self
            .keys_under(dir)
            .await?
            .into_iter()
            .filter(|k| k.starts_with(prefix))
            .collect())
    }

    /// The names (keys and "directories") directly under `prefix`, sorted. See
    /// [`get_async`](Self::get_async) for an example.
    async fn list_dir_async(&self, prefix: &str) -> Result<Vec<String>> {
        let dir = prefix.trim_end_matches('/');
        let at = if dir.is_empty() {
            self.prefix.clone()
        } else {
            self.path(dir)?
        };
        let listed = self
            .inner
            .list_with_delimiter(Some(&at))
            .await
            .map_err(|e| self.client_error("LIST", dir, e))?;
        let mut names: Vec<String> = listed
            .common_prefixes
            .iter()
            .chain(listed.objects.iter().map(|m| &m.location))
            .filter_map(|p| p.filename().map(str::to_string))
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }
}
