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

use std::ops::Range;
use std::sync::Arc;

use super::ZarrArray;
use crate::aio::spawn;
#[cfg(feature = "object_store")]
use crate::read;
use crate::read::ReadReport;
use devbuf_core::error::Result;
use devbuf_core::zarr::{AxisSel, BufferPrototype, NDBuffer, Store};

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
                Arc::new(crate::StoreAdapter::new(scoped));
            return ZarrArray {
                array: self.array.with_storage(storage),
                ..self
            };
        }
        self
    }

    /// [`open`](Self::open) without blocking the caller's executor.
    ///
    /// ```
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::BufferPrototype;
    /// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// rt.block_on(async {
    ///     let a = ZarrArray::open_async("../../tests/fixtures/zarr/v3_float32.zarr").await?;
    ///     let whole = a.read_all_async(BufferPrototype::Host).await?;
    ///     assert_eq!(whole.shape(), &[10, 7]);
    ///     Ok::<(), devbuf_core::Error>(())
    /// })?;
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub async fn open_async(path: impl AsRef<std::path::Path>) -> Result<ZarrArray> {
        let path = path.as_ref().to_path_buf();
        spawn("opening a zarr array", move || ZarrArray::open(path)).await
    }

    /// [`open_store`](Self::open_store) without blocking the caller's executor: the
    /// store's reads of the metadata run on this call's thread (an object store's
    /// requests on the caller's runtime).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::{MemoryStore, Store};
    /// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    /// // Nothing there yet: an error, not a hang.
    /// assert!(rt.block_on(ZarrArray::open_store_async(store, "/")).is_err());
    /// ```
    pub async fn open_store_async(store: Arc<dyn Store>, path: &str) -> Result<ZarrArray> {
        let path = path.to_string();
        spawn("opening a zarr array", move || {
            ZarrArray::open_store(store, &path)
        })
        .await
    }

    /// [`read_chunk`](Self::read_chunk) without blocking the caller's executor;
    /// dropping the future cancels the read (see the module docs).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::BufferPrototype;
    /// let a = ZarrArray::open_async("../../tests/fixtures/zarr/v3_float32.zarr").await?;
    /// let c = a.read_chunk_async(&[2, 2], BufferPrototype::Host).await?;
    /// assert_eq!(c.shape(), &[2, 1]); // clipped at the edge
    /// # Ok::<(), devbuf_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn read_chunk_async(
        &self,
        indices: &[u64],
        prototype: BufferPrototype,
    ) -> Result<NDBuffer> {
        let (a, indices) = (self.duplicate(), indices.to_vec());
        spawn("a zarr read", move || {
            a.in_scope().read_chunk(&indices, &prototype)
        })
        .await
    }

    /// [`read_chunks_with_report`](Self::read_chunks_with_report) without blocking the
    /// caller's executor; dropping the future cancels the read.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::BufferPrototype;
    /// let a = ZarrArray::open_async("../../tests/fixtures/zarr/v3_int16.zarr").await?;
    /// let (chunks, report) = a
    ///     .read_chunks_with_report_async(&[[0u64, 0], [1, 1]], BufferPrototype::Host)
    ///     .await?;
    /// assert_eq!((chunks.len(), report.missing_chunks), (2, 1));
    /// # Ok::<(), devbuf_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn read_chunks_with_report_async<I: AsRef<[u64]>>(
        &self,
        chunks: &[I],
        prototype: BufferPrototype,
    ) -> Result<(Vec<NDBuffer>, ReadReport)> {
        let a = self.duplicate();
        let chunks: Vec<Vec<u64>> = chunks.iter().map(|c| c.as_ref().to_vec()).collect();
        spawn("a zarr read", move || {
            a.in_scope().read_chunks_with_report(&chunks, &prototype)
        })
        .await
    }

    /// [`read_chunks`](Self::read_chunks) without blocking the caller's executor;
    /// dropping the future cancels the read.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::BufferPrototype;
    /// let a = ZarrArray::open_async("../../tests/fixtures/zarr/v3_int16.zarr").await?;
    /// let chunks = a.read_chunks_async(&[[0u64, 0]], BufferPrototype::Host).await?;
    /// assert_eq!(chunks[0].shape(), &[4, 3]);
    /// # Ok::<(), devbuf_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn read_chunks_async<I: AsRef<[u64]>>(
        &self,
        chunks: &[I],
        prototype: BufferPrototype,
    ) -> Result<Vec<NDBuffer>> {
        Ok(self
            .read_chunks_with_report_async(chunks, prototype)
            .await?
            .0)
    }

    /// [`read_subset_with_report`](Self::read_subset_with_report) without blocking the
    /// caller's executor; dropping the future cancels the read.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_multi_thread().build().unwrap().block_on(async {
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::BufferPrototype;
    /// let a = ZarrArray::open_async("../../tests/fixtures/zarr/v2_int16_zstd.zarr").await?;
    /// let (s, report) = a
    ///     .read_subset_with_report_async(&[1..5, 0..5, 2..3], BufferPrototype::Host)
    ///     .await?;
    /// assert_eq!((s.shape(), report.decoder), (&[4, 5, 1][..], "cpu"));
    /// # Ok::<(), devbuf_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn read_subset_with_report_async(
        &self,
        ranges: &[Range<u64>],
        prototype: BufferPrototype,
    ) -> Result<(NDBuffer, ReadReport)> {
        let (a, ranges) = (self.duplicate(), ranges.to_vec());
        spawn("a zarr read", move || {
            a.in_scope().read_subset_with_report(&ranges, &prototype)
        })
        .await
    }

    /// [`read_subset`](Self::read_subset) without blocking the caller's executor;
    /// dropping the future cancels the read.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::BufferPrototype;
    /// let a = ZarrArray::open_async("../../tests/fixtures/zarr/v2_int16_zstd.zarr").await?;
    /// let s = a.read_subset_async(&[1..5, 0..5, 2..3], BufferPrototype::Host).await?;
    /// assert_eq!(s.shape(), &[4, 5, 1]);
    /// assert!(a.read_subset_async(&[0..7, 0..5, 0..4], BufferPrototype::Host).await.is_err());
    /// # Ok::<(), devbuf_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn read_subset_async(
        &self,
        ranges: &[Range<u64>],
        prototype: BufferPrototype,
    ) -> Result<NDBuffer> {
        Ok(self
            .read_subset_with_report_async(ranges, prototype)
            .await?
            .0)
    }

    /// [`read_all_with_report`](Self::read_all_with_report) without blocking the
    /// caller's executor; dropping the future cancels the read.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::BufferPrototype;
    /// let a = ZarrArray::open_async("../../tests/fixtures/zarr/v3_float32.zarr").await?;
    /// let (_, report) = a.read_all_with_report_async(BufferPrototype::Host).await?;
    /// assert_eq!(report.target, "host");
    /// # Ok::<(), devbuf_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn read_all_with_report_async(
        &self,
        prototype: BufferPrototype,
    ) -> Result<(NDBuffer, ReadReport)> {
        let a = self.duplicate();
        spawn("a zarr read", move || {
            a.in_scope().read_all_with_report(&prototype)
        })
        .await
    }

    /// [`read_all`](Self::read_all) without blocking the caller's executor; dropping the
    /// future cancels the read.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::BufferPrototype;
    /// let a = ZarrArray::open_async("../../tests/fixtures/zarr/v3_float64.zarr").await?;
    /// assert_eq!(a.read_all_async(BufferPrototype::Host).await?.shape(), &[10, 7]);
    /// # Ok::<(), devbuf_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn read_all_async(&self, prototype: BufferPrototype) -> Result<NDBuffer> {
        Ok(self.read_all_with_report_async(prototype).await?.0)
    }

    /// [`read`](Self::read) (a numpy-style selection) without blocking the caller's
    /// executor; dropping the future cancels the read.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::{AxisSel, BufferPrototype, Slice};
    /// let a = ZarrArray::open_async("../../tests/fixtures/zarr/v3_float64.zarr").await?;
    /// let v = a
    ///     .read_async(&[Slice::every(3).into(), AxisSel::Index(-1)], BufferPrototype::Host)
    ///     .await?;
    /// assert_eq!(v.shape(), &[4]);
    /// # Ok::<(), devbuf_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn read_async(
        &self,
        selection: &[AxisSel],
        prototype: BufferPrototype,
    ) -> Result<NDBuffer> {
        let (a, selection) = (self.duplicate(), selection.to_vec());
        spawn("a zarr read", move || {
            a.in_scope().read(&selection, &prototype)
        })
        .await
    }

    /// [`write_chunk`](Self::write_chunk) without blocking the caller's executor.
    /// Dropping the future stops the write (some of it may have been written).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use devbuf_zarr::{ArraySpec, ZarrArray};
    /// use devbuf_core::zarr::{BufferPrototype, Dtype, MemoryStore, NDBuffer, Order, Scalar};
    /// let a = ZarrArray::create_in_store(std::sync::Arc::new(MemoryStore::new()), "",
    ///     &ArraySpec::new(&[4, 4], &[2, 2], Dtype::UINT8))?;
    /// let v = NDBuffer::create(&BufferPrototype::Host, &[2, 2], Dtype::UINT8, Order::C, Some(Scalar::from(7u8)))?;
    /// a.write_chunk_async(&[1, 1], v).await?;
    /// let c = a.read_chunk_async(&[1, 1], BufferPrototype::Host).await?;
    /// assert_eq!(c.to_buffer()?.to_host()?, vec![7u8; 4]);
    /// # Ok::<(), devbuf_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn write_chunk_async(&self, indices: &[u64], value: NDBuffer) -> Result<()> {
        let (a, indices) = (self.duplicate(), indices.to_vec());
        spawn("a zarr write", move || {
            a.in_scope().write_chunk(&indices, &value)
        })
        .await
    }

    /// [`write_chunks`](Self::write_chunks) without blocking the caller's executor.
    /// Dropping the future stops the write (some chunks may have been written).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use devbuf_zarr::{ArraySpec, ZarrArray};
    /// use devbuf_core::zarr::{BufferPrototype, Dtype, MemoryStore, NDBuffer, Order, Scalar};
    /// let a = ZarrArray::create_in_store(std::sync::Arc::new(MemoryStore::new()), "",
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
    /// let a = ZarrArray::create_in_store(std::sync::Arc::new(MemoryStore::new()), "",
    ///     &ArraySpec::new(&[4, 4], &[2, 2], Dtype::UINT8))?;
    /// let v = NDBuffer::create(&BufferPrototype::Host, &[2, 3], Dtype::UINT8, Order::C, Some(Scalar::from(3u8)))?;
    /// a.write_subset_async(&[1, 1], v).await?;
    /// let s = a.read_subset_async(&[1..3, 1..4], BufferPrototype::Host).await?;
    /// assert_eq!(s.to_buffer()?.to_host()?, vec![3u8; 6]);
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
