//! The async forms of [`ZarrArray`]'s opening, reading and writing calls.
//!
//! Each runs the blocking call's work on a thread of its own (decoding is CPU work and
//! must not run on the executor), starting it without blocking the executor and
//! awaiting its result; the object-store requests it makes run on the caller's tokio
//! runtime (devbuf's own runtime is not started). No call starts a runtime, so they
//! work on a current-thread runtime, a multi-thread one, inside a tonic handler, or
//! under any executor (outside tokio, object-store requests fall back to devbuf's
//! runtime).
//!
//! **Cancellation.** Dropping a call's future before it completes stops the work: the
//! read engine's workers take no more chunks, object-store fetches are aborted, and
//! the drop returns once the work's thread has ended and released what it held
//! (fetched bytes, page-locked staging, device memory of the result). A write stopped
//! this way may have written some of its chunks.

#[cfg(feature = "object_store")]
use std::sync::Arc;

use super::ZarrArray;
use crate::aio::spawn;
use crate::location::Location;
#[cfg(feature = "object_store")]
use crate::read;
use devbuf_core::error::Result;
use devbuf_core::zarr::NDBuffer;
#[cfg(feature = "object_store")]
use devbuf_core::zarr::Store;

impl ZarrArray {
    /// A second handle on the same array (shared storage; metadata and options
    /// copied), for work on another thread.
    pub(crate) fn duplicate(&self) -> ZarrArray {
        ZarrArray {
            array: self.array.with_storage(self.array.storage()),
            meta: self.meta.clone(),
            location: self.location.clone(),
            read_options: self.read_options.clone(),
            write_options: self.write_options.clone(),
            direct: self.direct.clone(),
        }
    }

    /// This array with its object store's calls made in this thread's async scope
    /// (zarrs' rayon workers reach the store without the engine; see
    /// `aio::scoped_store`). Other stores are left as they are.
    pub(crate) fn in_scope(self) -> ZarrArray {
        #[cfg(feature = "object_store")]
        if let (read::Direct::Url(store), Some(scope)) =
            (&self.direct, crate::aio::scope::current())
        {
            let scoped: Arc<dyn Store> = Arc::new(crate::aio::scoped_store::Scoped {
                inner: store.clone(),
                scope,
            });
            let storage: Arc<crate::storage::DynStorage> =
                Arc::new(crate::storage::StoreAdapter::new(scoped));
            return ZarrArray {
                array: self.array.with_storage(storage),
                ..self
            };
        }
        self
    }

    /// [`open`](Self::open) without blocking the caller's executor: the store's reads
    /// of the metadata run on a thread of this call (an object store's requests on the
    /// caller's tokio runtime; devbuf's own runtime is not started), so it works on a
    /// current-thread runtime too. The array's async calls ([`Read::to_async`](crate::Read::to_async),
    /// ...) fetch on the caller's runtime in the same way.
    ///
    /// ```
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::BufferPrototype;
    /// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// rt.block_on(async {
    ///     let a = ZarrArray::open_async("../../tests/fixtures/zarr/v3_float32.zarr").await?;
    ///     let whole = a.read(..).to_async(&BufferPrototype::Host).await?;
    ///     assert_eq!(whole.shape(), &[10, 7]);
    ///     Ok::<(), devbuf_core::Error>(())
    /// })?;
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub async fn open_async(location: impl Into<Location>) -> Result<ZarrArray> {
        let location = location.into();
        spawn("opening a zarr array", move || ZarrArray::open(location)).await
    }

    /// [`write_chunks`](Self::write_chunks) without blocking the caller's executor.
    /// Dropping the future stops the write (some chunks may have been written).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use devbuf_zarr::{ArraySpec, ZarrArray};
    /// use devbuf_core::zarr::{BufferPrototype, Dtype, MemoryStore, NDBuffer, Order, Scalar};
    /// let a = ZarrArray::create((std::sync::Arc::new(MemoryStore::new()), ""),
    ///     &ArraySpec::new(&[4], &[2], Dtype::UINT8))?;
    /// let v = |x: u8| NDBuffer::create(&BufferPrototype::Host, &[2], Dtype::UINT8, Order::C, Some(Scalar::from(x)));
    /// a.write_chunks_async(&[[0u64], [1]], vec![v(1)?, v(2)?]).await?;
    /// assert!(a.chunk_is_stored(&[1])?);
    /// # Ok::<(), devbuf_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn write_chunks_async<I: AsRef<[u64]>>(
        &self,
        chunks: &[I],
        values: Vec<NDBuffer>,
    ) -> Result<()> {
        let a = self.duplicate();
        let chunks: Vec<Vec<u64>> = chunks.iter().map(|c| c.as_ref().to_vec()).collect();
        spawn("a zarr write", move || {
            a.in_scope().write_chunks(&chunks, &values)
        })
        .await
    }

    /// [`write_subset`](Self::write_subset) without blocking the caller's executor.
    /// Dropping the future stops the write (some chunks may have been written).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use devbuf_zarr::{ArraySpec, ZarrArray};
    /// use devbuf_core::zarr::{BufferPrototype, Dtype, MemoryStore, NDBuffer, Order, Scalar};
    /// let a = ZarrArray::create((std::sync::Arc::new(MemoryStore::new()), ""),
    ///     &ArraySpec::new(&[4, 4], &[2, 2], Dtype::UINT8))?;
    /// let v = NDBuffer::create(&BufferPrototype::Host, &[2, 3], Dtype::UINT8, Order::C, Some(Scalar::from(3u8)))?;
    /// a.write_subset_async(&[1, 1], v).await?;
    /// let s = a.read([1..3, 1..4]).to_async(&BufferPrototype::Host).await?;
    /// assert_eq!(s.to_buffer()?.to_host()?.to_vec(), vec![3u8; 6]);
    /// # Ok::<(), devbuf_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn write_subset_async(&self, start: &[u64], value: NDBuffer) -> Result<()> {
        let (a, start) = (self.duplicate(), start.to_vec());
        spawn("a zarr write", move || {
            a.in_scope().write_subset(&start, &value)
        })
        .await
    }
}
