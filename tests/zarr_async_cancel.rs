//! Dropping an async read's future cancels it: fetches stop, the fetch stage's memory
//! goes back to its baseline and the engine's threads have ended when the drop
//! returns; on a current-thread runtime (where the fetch tasks share the executor that
//! the drop blocks) and on a multi-thread one. One test binary of its own: the
//! fetch-stage counters it reads are process-wide.
#![cfg(feature = "object_store")]

use std::sync::Arc;
use std::sync::atomic::Ordering;

use devbuf::zarr::object_store::{UrlStore, held_fetch_bytes, live_fetch_stages};
use devbuf::zarr::{BufferPrototype, Scalar, ZarrArray};

#[path = "common/held_store.rs"]
mod held_store;
use held_store::{Held, held_array, wait_started};

/// Starts a whole read, lets `pass` chunk GETs through and waits until `want` more are
/// held at the gate, drops the read, then checks that it is gone.
async fn cancel_mid_read(held: Arc<Held>, store: Arc<UrlStore>) {
    let a = ZarrArray::open_async(store).await.unwrap();
    assert_eq!(live_fetch_stages(), 0);
    let baseline = held_fetch_bytes();
    held.gate.add_permits(2);
    // Boxed, so that `drop` below drops the future itself.
    let mut read = Box::pin(a.read(..).to_async(&BufferPrototype::Host));
    // Until 2 GETs passed and 4 more (the concurrency) wait at the gate.
    wait_started(&held, 6, &mut read).await;
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
    // (A multi-thread runtime drops the aborted task on another worker, when it gets
    // to it: wait for that, bounded.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while held.in_flight.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    assert_eq!(held.started.load(Ordering::SeqCst), started);
    assert_eq!(held.in_flight.load(Ordering::SeqCst), 0);
    // The array still reads, on the same runtime.
    let all = a.read(..).to_async(&BufferPrototype::Host).await.unwrap();
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
