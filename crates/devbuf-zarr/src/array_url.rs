//! Arrays in object storage (feature `object_store`): what [`ZarrArray::open`] and
//! [`ZarrArray::create`] do for a [`Location::Url`](crate::Location::Url) or
//! [`Location::UrlStore`](crate::Location::UrlStore).

use std::sync::Arc;

use super::array::ZarrArray;
use super::read::Direct;
use super::spec::ArraySpec;
use super::storage::StoreAdapter;
use crate::object_store::UrlStore;
use devbuf_core::error::{Error, Result};
use devbuf_core::zarr::Store;

impl ZarrArray {
    /// Opens the array at the root of `store`, with the read engine's concurrent
    /// fetches.
    pub(crate) fn open_url_store(store: Arc<UrlStore>) -> Result<ZarrArray> {
        let location = store.url().to_string();
        let dynstore: Arc<dyn Store> = store.clone();
        let mut a = Self::open_storage(Arc::new(StoreAdapter::new(dynstore)), "/", location)?;
        a.direct = Direct::Url(store);
        Ok(a)
    }

    /// Creates an array described by `spec` at the root of `store` and writes its
    /// metadata. Errors when an array already exists there, or the store is read-only.
    /// Writes PUT each chunk (or shard) once, from the encoding workers, many at a time.
    pub(crate) fn create_url_store(store: Arc<UrlStore>, spec: &ArraySpec) -> Result<ZarrArray> {
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
