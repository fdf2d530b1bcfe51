//! Dropping an async read's future cancels it: fetches stop, the fetch stage's memory
//! goes back to its baseline and the engine's threads have ended when the drop
//! returns; on a current-thread runtime (where the fetch tasks share the executor that
//! the drop blocks) and on a multi-thread one. One test binary of its own: the
//! fetch-stage counters it reads are process-wide.
#![cfg(feature = "object_store")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use devbuf::zarr::object_store::{
    ObjectStoreOptions, UrlStore, held_fetch_bytes, live_fetch_stages,
};
use devbuf::zarr::{
    ArraySpec, BufferPrototype, Compressor, Dtype, Order, Scalar, Store, ZarrArray,
};
use object_store::path::Path;

/// An in-memory object store whose chunk GETs wait at a gate the test opens.
#[derive(Debug)]
struct Held {
    inner: Arc<dyn object_store::ObjectStore>,
    /// Chunk GETs started, and not yet finished or dropped.
    started: AtomicUsize,
    in_flight: Arc<AtomicUsize>,
    gate: tokio::sync::Semaphore,
    arrived: tokio::sync::Notify,
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
fn held_array() -> (Arc<Held>, Arc<UrlStore>) {
    let opts = ObjectStoreOptions::default().with_concurrency(4);
    let mem: Arc<dyn object_store::ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let plain = UrlStore::from_object_store(mem.clone(), "", "memory:///", &opts).unwrap();
    let plain: Arc<dyn Store> = Arc::new(plain);
    let spec = ArraySpec::new(&[256, 64], &[16, 4], Dtype::UINT32)
        .with_compressor(Compressor::Zstd { level: 1 });
    let a = ZarrArray::create_in_store(plain, "", &spec).unwrap();
    let ones = BufferPrototype::Host
        .nd_create(
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

/// Starts a whole read, lets `pass` chunk GETs through and waits until `want` more are
/// held at the gate, drops the read, then checks that it is gone.
async fn cancel_mid_read(held: Arc<Held>, store: Arc<UrlStore>) {
    let a = ZarrArray::open_url_store_async(store).await.unwrap();
    assert_eq!(live_fetch_stages(), 0);
    let baseline = held_fetch_bytes();
    held.gate.add_permits(2);
    // Boxed, so that `drop` below drops the future itself.
    let mut read = Box::pin(a.read_all_async(BufferPrototype::Host));
    // Until 2 GETs passed and 4 more (the concurrency) wait at the gate.
    loop {
        let arrived = held.arrived.notified();
        tokio::pin!(arrived);
        arrived.as_mut().enable();
        if held.started.load(Ordering::SeqCst) >= 6 {
            break;
        }
        tokio::select! {
            r = &mut read => panic!("the read finished behind a closed gate: {:?}", r.map(|_| ())),
            _ = arrived => {}
        }
    }
    assert_eq!(live_fetch_stages(), 1);
    // The drop returns once the engine's threads ended; the fetch stage is gone and
    // its bytes freed.
    drop(read);
    assert_eq!(live_fetch_stages(), 0);
    assert_eq!(held_fetch_bytes(), baseline);
    let started = held.started.load(Ordering::SeqCst);
    assert!(started < 256, "{started}");
    // With the gate open, a fetch stage still running would start more GETs: none
    // starts, and the held ones are dropped once the runtime gets to them.
    held.gate.add_permits(1 << 20);
    for _ in 0..200 {
        tokio::task::yield_now().await;
        if held.in_flight.load(Ordering::SeqCst) == 0 {
            break;
        }
    }
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    assert_eq!(held.started.load(Ordering::SeqCst), started);
    assert_eq!(held.in_flight.load(Ordering::SeqCst), 0);
    // The array still reads, on the same runtime.
    let all = a.read_all_async(BufferPrototype::Host).await.unwrap();
    assert!(all.all_equal(Some(Scalar::from(1u32)), true).unwrap());
    assert_eq!((live_fetch_stages(), held_fetch_bytes()), (0, baseline));
}

#[test]
fn dropping_a_read_cancels_it_on_both_runtimes() {
    // One after the other (the counters are process-wide).
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (held, store) = held_array();
    current.block_on(cancel_mid_read(held, store));
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (held, store) = held_array();
    multi.block_on(cancel_mid_read(held, store));
}
