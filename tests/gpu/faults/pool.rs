//! The page-locked staging pool at its bound (issue 11, item 6): a transfer far larger
//! than the bound completes through one kit; concurrent transfers wait for it and
//! complete; a thread that holds the only kit (as a zarr worker holds its upload lane)
//! and copies does not wait for itself; zarr writes whose lanes fill the pool do not
//! hang (nor do nvCOMP-encoded ones, whose stores run on rayon's threads); a zarr read
//! whose chunks cannot fit the bound is a clear error. Counters go
//! back to where they were.

use std::sync::{Arc, mpsc};
use std::time::Duration;

use devbuf::__test::StagingHold;
use devbuf::cuda::{self, Context, DeviceBuffer, PageableMode, TransferConfig};

use super::{NOTHING, held};
use crate::common::*;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
/// How long one transfer may take before the test calls it a hang.
const LIMIT: Duration = Duration::from_secs(120);

/// A configuration whose pool holds exactly one kit of two `chunk`-byte buffers, with
/// every copy of ordinary memory staged.
fn one_kit(chunk: usize, lanes: usize) -> TransferConfig {
    TransferConfig {
        lanes,
        chunk_bytes: chunk,
        min_chunk_bytes: chunk,
        staging_min_bytes: chunk,
        max_pinned_bytes: 2 * chunk,
        pageable: PageableMode::Staged,
        ..TransferConfig::default()
    }
}

/// Runs `f` on a thread of its own and waits at most [`LIMIT`] for it: a hang fails
/// the test instead of stopping the suite.
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(LIMIT)
        .unwrap_or_else(|_| panic!("{what}: no result within {LIMIT:?} (a hang)"))
}

gpu_test! {
    /// 64 MiB up and down through a pool that holds one 64 KiB kit (1024 rounds through
    /// it), batched copies of 300 pieces, and 8 threads at once against that one kit:
    /// every byte right, the bound never exceeded, nothing left in use.
    fn faults_transfers_far_larger_than_the_pool_bound_complete() {
        let c = Context::new_dedicated(0).unwrap();
        let chunk = 64 * KIB;
        c.set_transfer_config(one_kit(chunk, 16)).unwrap();
        let n = 64 * MIB + 5;
        let data = fast_random(n, 41);
        let dev = c.allocate(n).unwrap();
        dev.copy_from_host(0, &data).unwrap();
        let mut back = vec![0u8; n];
        dev.copy_to_host(0, &mut back).unwrap();
        assert!(back == data, "64 MiB through one kit");
        // Batched: 300 pieces of up to 100 KiB at odd offsets.
        let mut r = rng("faults_pool_batched");
        let mut at = 0;
        let mut pieces = Vec::new();
        for _ in 0..300 {
            let len = 1 + below(&mut r, 100 * KIB);
            at += below(&mut r, 64);
            pieces.push((at, random_bytes(&mut r, len)));
            at += len;
        }
        let many = c.allocate(at).unwrap();
        many.fill(0).unwrap();
        let list: Vec<(&[u8], &DeviceBuffer, usize)> =
            pieces.iter().map(|(o, p)| (&p[..], &many, *o)).collect();
        cuda::copy_many_from_host(&list).unwrap();
        let mut outs: Vec<Vec<u8>> = pieces.iter().map(|(_, p)| vec![0u8; p.len()]).collect();
        let mut list: Vec<(&mut [u8], &DeviceBuffer, usize)> =
            outs.iter_mut().zip(&pieces).map(|(o, (at, _))| (&mut o[..], &many, *at)).collect();
        cuda::copy_many_to_host(&mut list).unwrap();
        for (o, (at, p)) in outs.iter().zip(&pieces) {
            assert!(o == p, "batched piece at {at}");
        }
        // Eight callers against one kit: they wait for it in turn.
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let c = c.clone();
                let (tx, rx) = mpsc::channel();
                std::thread::spawn(move || {
                    let data = fast_random(8 * MIB + t as usize, 50 + t);
                    let d = c.allocate(data.len()).unwrap();
                    let r = d.copy_from_host(0, &data).and_then(|_| d.to_vec::<u8>());
                    let _ = tx.send(r.map(|b| b == data));
                });
                rx
            })
            .collect();
        for (t, rx) in threads.into_iter().enumerate() {
            let r = rx.recv_timeout(LIMIT).unwrap_or_else(|_| panic!("thread {t} hung at the pool's bound"));
            assert!(r.unwrap(), "thread {t}: wrong bytes");
        }
        let s = c.transfer_stats();
        println!("one-kit pool: {s:?}");
        assert!(s.pinned_high_water_bytes <= 2 * chunk, "{s:?}");
        assert!(s.staged_copies >= 10, "{s:?}");
        drop((dev, many));
        assert_eq!(held(&c), NOTHING);
        assert_eq!(c.trim_transfer_pool(), 2 * chunk, "the one kit, idle");
        assert_eq!(c.transfer_stats().pinned_bytes, 0);
    }

    /// A thread that holds the pool's only kit (as a zarr read or write worker holds
    /// its upload lane) and copies ordinary memory: the copy does not wait for a kit
    /// (only the waiting thread could release one: it waited forever) but goes through
    /// the driver, single and batched, both directions. Without the held kit the same
    /// copies are staged again.
    fn faults_a_thread_holding_the_only_kit_copies_without_waiting() {
        let c = Context::new_dedicated(0).unwrap();
        let chunk = 64 * KIB;
        c.set_transfer_config(one_kit(chunk, 4)).unwrap();
        let n = 8 * MIB + 3;
        let data = Arc::new(fast_random(n, 31));
        let dev = c.allocate(n).unwrap();
        let (c2, dev2, data2) = (c.clone(), dev.clone(), data.clone());
        let (before, after, single, batched) = within("copies on a thread holding the only kit", move || {
            let hold = StagingHold::take(&c2, chunk).unwrap().expect("the pool is empty");
            assert_eq!(c2.transfer_stats().pinned_in_use_bytes, 2 * chunk, "the pool is full");
            let before = c2.transfer_stats();
            let single = dev2.copy_from_host(0, &data2).and_then(|_| dev2.to_vec::<u8>());
            let mut outs = vec![vec![0u8; 100_000]; 3];
            let batched = cuda::copy_many_from_host(&[(&data2[..100_000], &dev2, 7), (&data2[1..100_001], &dev2, 200_000)])
                .and_then(|_| {
                    let mut list: Vec<(&mut [u8], &DeviceBuffer, usize)> =
                        outs.iter_mut().zip([7usize, 200_000, 0]).map(|(o, at)| (&mut o[..], &dev2, at)).collect();
                    cuda::copy_many_to_host(&mut list)
                })
                .map(|_| outs);
            let after = c2.transfer_stats();
            drop(hold);
            (before, after, single, batched)
        });
        let mut want = data.to_vec();
        assert!(single.unwrap() == want, "single copies through the driver");
        want[7..100_007].copy_from_slice(&data[..100_000]);
        want[200_000..300_000].copy_from_slice(&data[1..100_001]);
        let outs = batched.unwrap();
        assert!(outs[0] == want[7..100_007] && outs[1] == want[200_000..300_000] && outs[2] == want[..100_000]);
        println!("holding the only kit: before {before:?}\nafter {after:?}");
        assert_eq!(after.staged_copies, before.staged_copies, "nothing staged");
        assert_eq!(after.batched_copies, before.batched_copies, "nothing batched");
        assert_eq!(after.staging_waits, before.staging_waits, "nobody waited");
        assert!(after.direct_copies >= before.direct_copies + 6, "driver copies: {after:?}");
        // The kit is back: the same copies stage again.
        dev.copy_from_host(0, &data).unwrap();
        assert!(dev.to_vec::<u8>().unwrap() == *data);
        assert!(c.transfer_stats().staged_copies >= after.staged_copies + 2);
        drop(dev);
        assert_eq!(held(&c), NOTHING);
    }
}

#[cfg(feature = "zarr")]
mod zarr_at_the_bound {
    use devbuf::zarr::{ArraySpec, ReadOptions, ZarrArray};
    use devbuf::zarr::{BufferPrototype, DeviceMemoryStore, Dtype, MemoryStore, NDBuffer, Order};

    use super::*;
    use crate::faults::RestoreConfig;

    const DEV: BufferPrototype = BufferPrototype::Device(0);

    /// A float32 array of `chunks` chunks of `chunk_elems` random elements in a host
    /// memory store, read with staging slots of one chunk each; and its bytes.
    fn one_chunk_slots(chunks: usize, chunk_elems: usize, seed: u64) -> (Arc<ZarrArray>, Vec<u8>) {
        let n = chunks * chunk_elems;
        let spec = ArraySpec::new(&[n as u64], &[chunk_elems as u64], Dtype::FLOAT32);
        let mut a = ZarrArray::create((Arc::new(MemoryStore::new()), "a"), &spec).unwrap();
        let bytes = fast_random(4 * n, seed);
        let nd = NDBuffer::from_memory(bytes.clone(), &[n], Dtype::FLOAT32, Order::C).unwrap();
        a.write_subset(&[0], &nd).unwrap();
        a.set_read_options(ReadOptions {
            slot_bytes: 1,
            ..ReadOptions::default()
        })
        .unwrap();
        (Arc::new(a), bytes)
    }

    fn bytes_of(nd: &NDBuffer) -> Vec<u8> {
        nd.to_buffer().unwrap().to_host().unwrap().to_vec()
    }

    gpu_test_exclusive! {
        /// Four zarr write workers whose upload lanes fill the pool, each storing its
        /// encoded 4 MiB chunk into a device memory store (a staged host-to-device copy)
        /// while it holds its lane: every copy waited for a kit only the waiting workers
        /// could release (a hang). Now the copies go through the driver; the array reads
        /// back exactly, on the host and into the device (with four read workers whose
        /// lanes fill the pool). Runs alone: the zarr engine and the device store use the
        /// primary context, whose configuration it changes (and restores).
        fn faults_zarr_writes_whose_lanes_fill_the_pool_do_not_hang() {
            let c = Context::new(0).unwrap();
            let _restore = RestoreConfig::of(&c);
            let chunk_elems = MIB; // 4 MiB of float32: one staging slot, kits of 8 MiB
            c.set_transfer_config(TransferConfig {
                max_pinned_bytes: 4 * 8 * MIB, // the four writers' lanes, nothing more
                ..TransferConfig::default()
            })
            .unwrap();
            c.trim_transfer_pool();
            let base = held(&c);
            // High-water marks are never reset: tests before this one on the primary
            // context may have left one above this test's bound.
            let high_before = c.transfer_stats().pinned_high_water_bytes;
            let store = Arc::new(DeviceMemoryStore::new(&devbuf::cuda::Context::new(0).unwrap()));
            let spec = ArraySpec::new(&[4 * chunk_elems as u64], &[chunk_elems as u64], Dtype::FLOAT32);
            let mut a = ZarrArray::create((store.clone(), "w"), &spec).unwrap();
            a.set_read_options(ReadOptions { threads: Some(4), ..ReadOptions::default() }).unwrap();
            let bytes = fast_random(16 * MIB, 77);
            let values = NDBuffer::from_memory(bytes.clone(), &[4 * chunk_elems], Dtype::FLOAT32, Order::C)
                .unwrap()
                .to_prototype(&DEV)
                .unwrap();
            let a = Arc::new(a);
            let a2 = a.clone();
            within("a zarr write whose lanes fill the pool", move || a2.write_subset(&[0], &values)).unwrap();
            let s = c.transfer_stats();
            println!("zarr write at the bound: {s:?}");
            assert!(s.pinned_bytes <= 32 * MIB, "the pool holds no more than its bound: {s:?}");
            if high_before <= 32 * MIB {
                assert!(s.pinned_high_water_bytes <= 32 * MIB, "{s:?}");
            } else {
                println!("pool high water {high_before} B from earlier tests: the peak of this test is not visible");
            }
            let back = ZarrArray::open((store.clone(), "w")).unwrap().read(..).to(&BufferPrototype::Host).unwrap();
            assert!(bytes_of(&back) == bytes, "the written array reads back");
            // Read back into the device: the four read workers' lanes fill the pool while
            // each fetches its chunk from the device store (a copy into new page-locked
            // memory, which needs no kit).
            c.trim_transfer_pool();
            let a3 = a.clone();
            let on_device = within("a zarr read whose lanes fill the pool", move || {
                a3.read(..).to(&DEV).map(|nd| (nd.prototype().is_device(), bytes_of(&nd)))
            })
            .unwrap();
            assert!(on_device.0 && on_device.1 == bytes, "the array read into the device");
            drop((a, back, store));
            let now = held(&c);
            assert_eq!(now, base, "counters of the primary context");
        }

        /// nvCOMP-encoded writes from four workers whose lanes fill the pool, into a
        /// device memory store whose copies are staged: each worker hands a slot's chunks
        /// to rayon's threads and waits for them, so their copies must not wait for the
        /// kits the workers hold (a hang). The array reads back exactly.
        fn faults_gpu_encoded_writes_whose_lanes_fill_the_pool_do_not_hang() {
            use devbuf::cuda::nvcomp::{self, GpuCodec};
            use devbuf::zarr::{Compressor, Encoder, WriteOptions};
            if crate::zarrs::nvcomp_missing("faults_gpu_encoded_writes_whose_lanes_fill_the_pool_do_not_hang") {
                return;
            }
            let c = Context::new(0).unwrap();
            let _restore = RestoreConfig::of(&c);
            let chunk_elems = 256 * KIB; // 1 MiB of float32
            let cap = nvcomp::library().unwrap().max_compressed_chunk_size(GpuCodec::Zstd, 4 * chunk_elems).unwrap().next_multiple_of(256);
            // Staging slots of 1 MiB: one compressed chunk (`cap` bytes) per slot, kits of
            // two; nvCOMP calls of 16 slots (15 chunks); 64 chunks: four workers.
            let kit = 2 * cap;
            c.set_transfer_config(TransferConfig {
                max_pinned_bytes: 4 * kit, // the four workers' lanes, nothing more
                staging_min_bytes: 64 * KIB, // the store's copies of compressed chunks are staged
                ..TransferConfig::default()
            })
            .unwrap();
            c.trim_transfer_pool();
            let store = Arc::new(DeviceMemoryStore::new(&devbuf::cuda::Context::new(0).unwrap()));
            let n = 64 * chunk_elems;
            let spec = ArraySpec::new(&[n as u64], &[chunk_elems as u64], Dtype::FLOAT32)
                .with_compressor(Compressor::Zstd { level: 1 });
            let mut a = ZarrArray::create((store.clone(), "g"), &spec).unwrap();
            a.set_read_options(ReadOptions { threads: Some(4), slot_bytes: MIB, ..ReadOptions::default() }).unwrap();
            a.set_write_options(WriteOptions { encoder: Encoder::Gpu, ..WriteOptions::default() });
            let bytes = fast_random(4 * n, 79);
            let values = NDBuffer::from_memory(bytes.clone(), &[n], Dtype::FLOAT32, Order::C)
                .unwrap()
                .to_prototype(&DEV)
                .unwrap();
            let a2 = Arc::new(a);
            within("a GPU-encoded zarr write whose lanes fill the pool", move || a2.write_subset(&[0], &values)).unwrap();
            let s = c.transfer_stats();
            assert!(s.pinned_bytes <= 4 * kit, "the pool holds no more than its bound: {s:?}");
            let back = ZarrArray::open((store.clone(), "g")).unwrap().read(..).to(&BufferPrototype::Host).unwrap();
            assert!(bytes_of(&back) == bytes, "the written array reads back");
        }

        /// A device read stages whole chunks, in two slots per worker: with 1 MiB chunks
        /// (one per slot) and a pool bound of 1 MiB no worker can ever get its kit. The read fails at once with
        /// an error naming both sizes and the bound to raise (it said the bound "was
        /// lowered while this transfer ran"), frees its output, and reads once the bound
        /// allows it.
        fn faults_a_zarr_read_of_chunks_larger_than_the_pool_bound_is_a_clear_error() {
            let c = Context::new(0).unwrap();
            let _restore = RestoreConfig::of(&c);
            let (a, bytes) = one_chunk_slots(6, 256 * KIB, 78);
            c.set_transfer_config(TransferConfig {
                chunk_bytes: 256 * KIB,
                min_chunk_bytes: 256 * KIB,
                max_pinned_bytes: MIB,
                ..TransferConfig::default()
            })
            .unwrap();
            c.trim_transfer_pool();
            let base = held(&c);
            let e = within("a read whose chunks do not fit the pool", {
                let a = a.clone();
                move || a.read(..).to(&DEV).map(|nd| nd.nbytes())
            })
            .unwrap_err()
            .to_string();
            println!("{e}");
            assert!(e.contains("max_pinned_bytes") && e.contains("1048576") && e.contains("2097152"), "{e}");
            assert!(!e.contains("lowered while this transfer ran"), "{e}");
            assert_eq!(held(&c), base, "the output and the staging are freed");
            c.set_transfer_config(TransferConfig { max_pinned_bytes: 4 * MIB, ..c.transfer_config() }).unwrap();
            let nd = a.read(..).to(&DEV).unwrap();
            assert!(bytes_of(&nd) == bytes);
            drop(nd);
            assert_eq!(held(&c), base);
        }
    }
}
