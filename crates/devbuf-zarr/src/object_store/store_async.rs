//! The async bodies of [`UrlStore`]'s store calls: the blocking
//! [`Store`](devbuf_core::zarr::Store) methods are these run to completion on devbuf's
//! own runtime. Async code uses the `object_store` client itself
//! ([`UrlStore::object_store`], under [`UrlStore::prefix`]; see [`UrlStore`]).

use bytes::Bytes;
use object_store::{GetRange, ObjectStoreExt};

use super::store::UrlStore;
use devbuf_core::error::{Error, Result};
use devbuf_core::zarr::ByteRequest;

impl UrlStore {
    /// The bytes of `key` (all, or `byte_range`), in host memory; `None` when the key
    /// does not exist. [`Store::get`](devbuf_core::zarr::Store::get)'s body.
    pub(crate) async fn get_async(
        &self,
        key: &str,
        byte_range: Option<ByteRequest>,
    ) -> Result<Option<Bytes>> {
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

    /// Deletes `key` (a missing key is not an error).
    pub(crate) async fn delete_async(&self, key: &str) -> Result<()> {
        self.writable("DELETE", key)?;
        let path = self.path(key)?;
        match self.inner.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.client_error("DELETE", key, e)),
        }
    }

    /// The size of `key` in bytes, `None` when it does not exist (one HEAD).
    pub(crate) async fn getsize_async(&self, key: &str) -> Result<Option<usize>> {
        let path = self.path(key)?;
        match self.inner.head(&path).await {
            Ok(m) => Ok(Some(usize::try_from(m.size).unwrap_or(usize::MAX))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.client_error("HEAD", key, e)),
        }
    }

    /// The keys that start with `prefix`, sorted.
    pub(crate) async fn list_prefix_async(&self, prefix: &str) -> Result<Vec<String>> {
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

    /// The names (keys and "directories") directly under `prefix`, sorted.
    pub(crate) async fn list_dir_async(&self, prefix: &str) -> Result<Vec<String>> {
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
