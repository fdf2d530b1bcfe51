//! [`AsyncStore`]: the async twin of [`Store`](super::Store), for stores whose calls
//! wait on the network.

use std::future::Future;

use bytes::Bytes;

use super::ByteRequest;
use crate::error::Result;

/// The calls of a [`Store`](super::Store) as futures that run on the caller's tokio
/// runtime (current-thread or multi-thread, a tonic handler's included) and start no
/// runtime of their own: devbuf-zarr's `UrlStore` (object storage) implements it, with
/// the same key checks, errors (credentials scrubbed, `NotFound` for missing keys where
/// the blocking call has one) and read-only guard as its blocking `Store` calls, which
/// are these futures run to completion.
///
/// The names end in `_async` so that a type with both traits in scope keeps `get`,
/// `set`, ... for the blocking ones. Missing keys are `Ok(None)` / `Ok(false)`.
///
/// ```
/// use devbuf_core::zarr::AsyncStore;
/// // Code generic over async stores: the sizes of some keys.
/// async fn sizes<S: AsyncStore>(store: &S, keys: &[&str]) -> devbuf_core::Result<Vec<Option<usize>>> {
///     let mut out = Vec::new();
///     for k in keys {
///         out.push(store.getsize_async(k).await?);
///     }
///     Ok(out)
/// }
/// ```
pub trait AsyncStore: Send + Sync {
    /// The bytes of `key` (all, or `byte_range`) in host memory; `None` when the key
    /// does not exist.
    fn get_async(
        &self,
        key: &str,
        byte_range: Option<ByteRequest>,
    ) -> impl Future<Output = Result<Option<Bytes>>> + Send;

    /// Stores `bytes` under `key` (replacing any value).
    fn set_async(&self, key: &str, bytes: Bytes) -> impl Future<Output = Result<()>> + Send;

    /// Deletes `key` (a missing key is not an error).
    fn delete_async(&self, key: &str) -> impl Future<Output = Result<()>> + Send;

    /// Whether `key` exists.
    fn exists_async(&self, key: &str) -> impl Future<Output = Result<bool>> + Send;

    /// The size of `key` in bytes, `None` when it does not exist.
    fn getsize_async(&self, key: &str) -> impl Future<Output = Result<Option<usize>>> + Send;

    /// Every key, sorted.
    fn list_async(&self) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// The keys under `prefix` (full keys), sorted.
    fn list_prefix_async(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// The names directly under the directory `prefix` (keys and sub-directories, no
    /// `/`), sorted.
    fn list_dir_async(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>>> + Send;
}
