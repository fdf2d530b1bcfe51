//! Async device reads (feature `object_store`): dropping a device read's future gives
//! back its device memory and page-locked staging before the drop returns.

use std::sync::atomic::Ordering;

use devbuf::cuda::Context;
use devbuf::zarr::object_store::{held_fetch_bytes, live_fetch_stages};
use devbuf::zarr::{BufferPrototype, Scalar, ZarrArray};

#[path = "../common/held_store.rs"]
mod held_store;
use held_store::{held_array, wait_started};

gpu_test_exclusive! {
    /// A device read held at its fetches, dropped on a current-thread runtime: device
    /// memory in use (devbuf's accounting and the driver's) and the staging pool are
    /// back at their baseline when the drop returns, and no more GETs start.
    fn zarr_async_device_read_cancelled_frees_device_memory() {
        let ctx = Context::new(0).unwrap();
        let (held, store) = held_array();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let a = ZarrArray::open_async(store).await.unwrap();
            // A first read warms the staging pool; the baseline is taken after it.
            held.gate.add_permits(1 << 20);
            let warm = a.read(..).to_async(&BufferPrototype::Device(0)).await.unwrap();
            assert!(warm.all_equal(Some(Scalar::from(1u32)), true).unwrap());
            drop(warm);
            let mut report = devbuf::zarr::ReadReport::default();
            let _ = a.read(..).report(&mut report).to_async(&BufferPrototype::Host).await.unwrap();
            assert!(report.cpu_chunks > 0);
            // Close the gate again (take back the permits left).
            let left = held.gate.available_permits();
            held.gate.acquire_many(left as u32).await.unwrap().forget();
            ctx.synchronize().unwrap();
            let before = ctx.bytes_allocated();
            let pinned = ctx.transfer_stats().pinned_in_use_bytes;
            let free = ctx.free_memory().unwrap();
            let base = held.started.load(Ordering::SeqCst);
            held.gate.add_permits(2);
            let mut read = Box::pin(a.read(..).to_async(&BufferPrototype::Device(0)));
            wait_started(&held, base + 6, &mut read).await;
            assert!(ctx.bytes_allocated() > before, "the result is allocated while the read runs");
            drop(read);
            ctx.synchronize().unwrap();
            assert_eq!(ctx.bytes_allocated(), before, "device memory back to baseline");
            assert_eq!(ctx.transfer_stats().pinned_in_use_bytes, pinned, "staging back");
            // The driver agrees (other processes aside: within a MiB).
            let now = ctx.free_memory().unwrap();
            assert!(now + (1 << 20) >= free, "free {free} before, {now} after");
            assert_eq!((live_fetch_stages(), held_fetch_bytes()), (0, 0));
            let started = held.started.load(Ordering::SeqCst);
            held.gate.add_permits(1 << 20);
            for _ in 0..100 {
                tokio::task::yield_now().await;
            }
            assert_eq!(held.started.load(Ordering::SeqCst), started);
        });
    }
}

gpu_test! {
    /// Async reads into a device buffer and page-locked memory the read owns: the
    /// values equal the host read's, the device buffer's address is unchanged.
    fn zarr_async_reads_into_owned_device_and_pinned_memory() {
        let ctx = Context::new(0).unwrap();
        let (held, store) = held_array();
        held.gate.add_permits(1 << 20);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let a = ZarrArray::open_async(store).await.unwrap();
            let host = a.read(..).to_async(&BufferPrototype::Host).await.unwrap();
            let want = host.to_buffer().unwrap().into_memory().to_host().unwrap();
            let dev = ctx.allocate(want.len()).unwrap();
            let address = dev.address();
            let dev = a.read(..).into_async(dev).await.unwrap();
            assert_eq!(dev.address(), address);
            assert!(dev.to_vec::<u8>().unwrap() == want[..], "device bytes");
            let pinned = a.read(..).into_async(ctx.allocate_host(want.len()).unwrap()).await.unwrap();
            assert!(pinned[..] == want[..], "page-locked bytes");
        });
    }
}
