//! A held object store for cancellation tests: an in-memory store whose chunk GETs
//! wait at a gate the test opens (one GET per permit), counting the GETs started and
//! those still in flight.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use devbuf::zarr::object_store::{ObjectStoreOptions, UrlStore};
use devbuf::zarr::{
    ArraySpec, BufferPrototype, Compressor, Dtype, NDBuffer, Order, Scalar, Store, ZarrArray,
};
use object_store::path::Path;

/// An in-memory object store whose chunk GETs wait at a gate the test opens.
#[derive(Debug)]
pub struct Held {
    pub inner: Arc<dyn object_store::ObjectStore>,
    /// Chunk GETs started, and not yet finished or dropped.
    pub started: AtomicUsize,
    pub in_flight: Arc<AtomicUsize>,
    pub gate: tokio::sync::Semaphore,
    pub arrived: tokio::sync::Notify,
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Held({})", self.inner)
    }
}

/// Counts a GET in flight until dropped (finished or cancelled).
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl object_store::ObjectStore for Held {
    async fn put_opts(
        &self,
        location: &Path,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        if location.as_ref().contains("/c/") || location.as_ref().starts_with("c/") {
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            let _counted = InFlight(self.in_flight.clone());
            self.started.fetch_add(1, Ordering::SeqCst);
            self.arrived.notify_waiters();
            // Each permit lets one GET through, once.
            if let Ok(p) = self.gate.acquire().await {
                p.forget();
            }
            return self.inner.get_opts(location, options).await;
        }
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<'static, object_store::Result<Path>>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// A 256-chunk array in an in-memory object store, behind a held gate.
pub fn held_array() -> (Arc<Held>, Arc<UrlStore>) {
    let mut opts = ObjectStoreOptions::default();
    opts.concurrency = 4;
    let mem: Arc<dyn object_store::ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let plain = UrlStore::from_object_store(mem.clone(), "", "memory:///", &opts).unwrap();
    let plain: Arc<dyn Store> = Arc::new(plain);
    let spec = ArraySpec::new(&[256, 64], &[16, 4], Dtype::UINT32)
        .with_compressor(Compressor::Zstd { level: 1 });
    let a = ZarrArray::create((plain, ""), &spec).unwrap();
    let ones = NDBuffer::create(
        &BufferPrototype::Host,
        &[256, 64],
        Dtype::UINT32,
        Order::C,
        Some(Scalar::from(1u32)),
    )
    .unwrap();
    a.write_subset(&[0, 0], &ones).unwrap();
    let held = Arc::new(Held {
        inner: mem,
        started: AtomicUsize::new(0),
        in_flight: Arc::new(AtomicUsize::new(0)),
        gate: tokio::sync::Semaphore::new(0),
        arrived: tokio::sync::Notify::new(),
    });
    let store = UrlStore::from_object_store(held.clone(), "", "memory:///", &opts).unwrap();
    (held, Arc::new(store))
}

/// Waits (polling `read` meanwhile, which must not finish) until `n` chunk GETs started.
pub async fn wait_started<F: std::future::Future + Unpin>(held: &Held, n: usize, read: &mut F) {
    loop {
        let arrived = held.arrived.notified();
        tokio::pin!(arrived);
        arrived.as_mut().enable();
        if held.started.load(Ordering::SeqCst) >= n {
            return;
        }
        tokio::select! {
            _ = &mut *read => panic!("the read finished behind a closed gate"),
            _ = arrived => {}
        }
    }
}
