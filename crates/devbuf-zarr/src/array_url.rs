//! [`ZarrArray::open_url`] and [`ZarrArray::create_url`]: arrays in object storage
//! (feature `object_store`).

use std::sync::Arc;

use super::array::ZarrArray;
use super::read::Direct;
use super::spec::ArraySpec;
use super::storage::StoreAdapter;
use crate::object_store::{ObjectStoreOptions, UrlStore};
use devbuf_core::error::{Error, Result};
use devbuf_core::zarr::Store;

#[cfg_attr(docsrs, doc(cfg(feature = "object_store")))]
impl ZarrArray {
    /// Opens the zarr array (v3 `zarr.json` or v2 `.zarray`) at `url`: `s3://bucket/path`,
    /// `gs://bucket/path`, `az://container/path`, `http(s)://host/path` (read-only) or
    /// `file:///path`. Credentials and endpoints come from the environment
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`,
    /// ...) and from `options`, which also set the request concurrency, the read-ahead
    /// bound, timeouts and retries ([`ObjectStoreOptions`]).
    ///
    /// Reads fetch every chunk they need with many requests in flight, ahead of the
    /// decoders; a shard the read needs all of is fetched whole (one GET), otherwise its
    /// index is read once and only the inner chunks the selection needs are fetched, with
    /// byte ranges (neighbours coalesced). A
    /// missing chunk reads as the fill value; any failed request is an error naming the
    /// key and the URL (after the retries the options allow), and no partial result is
    /// returned. Errors never show credentials.
    ///
    /// ```
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_zarr::object_store::ObjectStoreOptions;
    /// use devbuf_core::zarr::BufferPrototype;
    /// let fixtures = std::fs::canonicalize("../../tests/fixtures/zarr").unwrap();
    /// let url = format!("file://{}/v3_float32_sharded.zarr", fixtures.display());
    /// let a = ZarrArray::open_url(&url, &ObjectStoreOptions::default())?;
    /// let local = ZarrArray::open("../../tests/fixtures/zarr/v3_float32_sharded.zarr")?;
    /// let (x, y) = (a.read_all(&BufferPrototype::Host)?, local.read_all(&BufferPrototype::Host)?);
    /// assert_eq!(x.to_buffer()?.to_host()?, y.to_buffer()?.to_host()?); // NaNs too
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn open_url(url: &str, options: &ObjectStoreOptions) -> Result<ZarrArray> {
        let store = Arc::new(UrlStore::open(url, options)?);
        Self::open_url_store(store)
    }

    /// [`open_url`](Self::open_url) without blocking the caller's executor: the metadata
    /// requests run on the caller's tokio runtime (devbuf's own runtime is not
    /// started), so it works on a current-thread runtime too. The array's async calls
    /// ([`read_subset_async`](Self::read_subset_async), ...) fetch on the caller's
    /// runtime in the same way.
    ///
    /// ```
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_zarr::object_store::ObjectStoreOptions;
    /// use devbuf_core::zarr::BufferPrototype;
    /// let fixtures = std::fs::canonicalize("../../tests/fixtures/zarr").unwrap();
    /// let url = format!("file://{}/v3_float32_sharded.zarr", fixtures.display());
    /// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// rt.block_on(async {
    ///     let a = ZarrArray::open_url_async(&url, &ObjectStoreOptions::default()).await?;
    ///     let all = a.read_all_async(BufferPrototype::Host).await?;
    ///     assert_eq!(all.shape(), a.shape().iter().map(|&n| n as usize).collect::<Vec<_>>());
    ///     Ok::<(), devbuf_core::Error>(())
    /// })?;
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub async fn open_url_async(url: &str, options: &ObjectStoreOptions) -> Result<ZarrArray> {
        let store = Arc::new(UrlStore::open(url, options)?);
        Self::open_url_store_async(store).await
    }

    /// [`open_url_store`](Self::open_url_store) without blocking the caller's executor
    /// (see [`open_url_async`](Self::open_url_async)).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_zarr::object_store::{ObjectStoreOptions, UrlStore};
    /// let fixtures = std::fs::canonicalize("../../tests/fixtures/zarr").unwrap();
    /// let url = format!("file://{}/v3_float32.zarr", fixtures.display());
    /// let store = Arc::new(UrlStore::open(&url, &ObjectStoreOptions::default())?);
    /// let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    /// let a = rt.block_on(ZarrArray::open_url_store_async(store))?;
    /// assert_eq!(a.shape(), &[10, 7]);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub async fn open_url_store_async(store: Arc<UrlStore>) -> Result<ZarrArray> {
        crate::aio::spawn("opening a zarr array", move || Self::open_url_store(store)).await
    }

    /// Opens the array at the root of `store` (a [`UrlStore`] made by hand, e.g. from
    /// [`UrlStore::from_object_store`]), with the read engine's concurrent fetches.
    pub fn open_url_store(store: Arc<UrlStore>) -> Result<ZarrArray> {
        let location = store.url().to_string();
        let dynstore: Arc<dyn Store> = store.clone();
        let mut a = Self::open_storage(Arc::new(StoreAdapter::new(dynstore)), "/", location)?;
        a.direct = Direct::Url(store);
        Ok(a)
    }

    /// Creates a zarr v3 array described by `spec` at `url` (see
    /// [`open_url`](Self::open_url)) and writes its metadata. Errors when an array
    /// already exists there, or the store is read-only (`http(s)://`).
    ///
    /// Writes PUT each chunk (or shard) once, from the encoding workers, many at a time.
    pub fn create_url(
        url: &str,
        spec: &ArraySpec,
        options: &ObjectStoreOptions,
    ) -> Result<ZarrArray> {
        let store = Arc::new(UrlStore::open(url, options)?);
        let location = store.url().to_string();
        if store.read_only() {
            return Err(Error::ReadOnly(format!(
                "cannot create a zarr array at {location}: the store is read-only"
            )));
        }
        for meta in ["zarr.json", ".zarray"] {
            if store.exists(meta)? {
                return Err(Error::invalid(format!(
                    "a zarr array already exists at {location}"
                )));
            }
        }
        let dynstore: Arc<dyn Store> = store.clone();
        let mut a =
            Self::create_storage(Arc::new(StoreAdapter::new(dynstore)), "/", location, spec)?;
        a.direct = Direct::Url(store);
        Ok(a)
    }
}
