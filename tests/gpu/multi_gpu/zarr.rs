//! zarr reads into device 1 while device 0 reads.

use super::*;

// ---------------------------------------------------------------------------------------
// zarr reads into device 1.

#[cfg(feature = "zarr")]
mod zarr_on_device_1 {
    use std::sync::Barrier;
    use std::sync::atomic::{AtomicBool, Ordering};

    use devbuf::ElementType;
    use devbuf::cuda::DeviceBuffer;
    use devbuf::zarr::{
        ArraySpec, BufferPrototype, Compressor, Decoder, Dtype, ReadOptions, ZarrArray,
    };
    use rand::Rng;

    use super::{assert_bytes, device_of_pointer};
    use crate::common::*;
    use crate::zarrs::zarrs_common::{TempDir, grid_indices};
    use crate::zarrs::{bytes_of, host_nd, nvcomp_missing, random_elements};

    const HOST: BufferPrototype = BufferPrototype::Host;
    const DEV0: BufferPrototype = BufferPrototype::Device(0);
    const DEV1: BufferPrototype = BufferPrototype::Device(1);

    gpu_test! {
        /// While a second thread keeps device 0 busy reading the same array (both start
        /// at a barrier; device 0 reads on until device 1 is done), reads into device 1
        /// (all, a box, chunks, into the caller's device-1 memory, and with nvCOMP where
        /// available) give exactly the host read's bytes, in device-1 memory, and report
        /// "device 1"; every device-0 read is right too.
        fn zarr_reads_into_device_1_while_device_0_reads() {
            let test = "zarr_reads_into_device_1_while_device_0_reads";
            let Some(d1) = second_ctx(test) else { return };
            let mut r = rng(test);
            let dir = TempDir::new("multi-gpu");
            let shape = [512u64, 384];
            let path = dir.0.join("a");
            let spec = ArraySpec::new(&shape, &[64, 48], Dtype::FLOAT32).with_compressor(Compressor::Zstd { level: 1 });
            let a = ZarrArray::create(&path, &spec).unwrap();
            let n = 512 * 384;
            a.write_subset(&[0, 0], &host_nd(random_elements(&mut r, ElementType::Float32, n), &shape, ElementType::Float32)).unwrap();
            let mut a = ZarrArray::open(&path).unwrap();
            a.set_read_options(ReadOptions { threads: Some(3), slot_bytes: 64 << 10, ..ReadOptions::default() }).unwrap();
            let want = bytes_of(&a.read(..).to(&HOST).unwrap());
            let boxed = [100..420u64, 7..300];
            let want_box = bytes_of(&a.read(&boxed).to(&HOST).unwrap());
            let indices = grid_indices(&a.metadata().grid_shape);
            let want_chunks: Vec<Vec<u8>> = a.read_chunks(&indices).to(&HOST).unwrap().iter().map(bytes_of).collect();
            let gpu = !nvcomp_missing(&format!("{test} (nvCOMP part)"));
            let start = Barrier::new(2);
            let done = AtomicBool::new(false);
            let a = &a;
            // Ends the device-0 reads also when this thread fails half-way.
            struct Done<'a>(&'a AtomicBool);
            impl Drop for Done<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::SeqCst);
                }
            }
            std::thread::scope(|s| {
                let busy = s.spawn(|| {
                    start.wait();
                    let mut reads = 0;
                    loop {
                        let mut report = devbuf::zarr::ReadReport::default();
                        let nd = a.read(..).report(&mut report).to(&DEV0).unwrap();
                        assert_eq!(report.target, "device 0", "{report}");
                        assert_eq!(nd.as_ndarray_like().memory.prototype(), BufferPrototype::Device(0));
                        assert!(bytes_of(&nd) == want, "device 0 read {reads}");
                        reads += 1;
                        if done.load(Ordering::SeqCst) {
                            return reads;
                        }
                    }
                });
                start.wait();
                let done_guard = Done(&done);
                let mut report = devbuf::zarr::ReadReport::default();
                let nd = a.read(..).report(&mut report).to(&DEV1).unwrap();
                assert_eq!(report.target, "device 1", "{report}");
                let mem = nd.as_ndarray_like().memory;
                assert_eq!(mem.prototype(), BufferPrototype::Device(1));
                assert_eq!(mem.as_device().unwrap().context().ordinal(), 1);
                assert_eq!(device_of_pointer(mem.address()), 1);
                assert_bytes(&bytes_of(&nd), &want, "read_all into device 1");
                let mut report = devbuf::zarr::ReadReport::default();
                let nd = a.read(&boxed).report(&mut report).to(&DEV1).unwrap();
                assert_eq!(report.target, "device 1", "{report}");
                assert_eq!(nd.as_ndarray_like().memory.prototype(), BufferPrototype::Device(1));
                assert_bytes(&bytes_of(&nd), &want_box, "read_subset into device 1");
                let chunks = a.read_chunks(&indices).to(&DEV1).unwrap();
                for ((c, w), idx) in chunks.iter().zip(&want_chunks).zip(&indices) {
                    assert_eq!(c.as_ndarray_like().memory.prototype(), BufferPrototype::Device(1), "chunk {idx:?}");
                    assert_bytes(&bytes_of(c), w, &format!("chunk {idx:?} into device 1"));
                }
                // Into the caller's device-1 memory: a view in the middle of noise.
                let noise: Vec<u8> = (0..want_box.len() + 512).map(|_| r.random()).collect();
                let whole = DeviceBuffer::from_slice(&d1, &noise).unwrap();
                let view = whole.slice(256, want_box.len()).unwrap();
                let mut report = devbuf::zarr::ReadReport::default();
                a.read(&boxed).report(&mut report).into(&view).unwrap();
                assert!(report.target.starts_with("device 1 (the caller's memory)"), "{report}");
                let got = whole.to_vec::<u8>().unwrap();
                assert_bytes(&got[256..256 + want_box.len()], &want_box, "read_subset_into device-1 memory");
                assert!(got[..256] == noise[..256] && got[256 + want_box.len()..] == noise[256 + want_box.len()..], "bytes around the view changed");
                if gpu {
                    let mut g = ZarrArray::open(&path).unwrap();
                    g.set_read_options(ReadOptions { decoder: Decoder::Gpu, ..ReadOptions::default() }).unwrap();
                    let mut report = devbuf::zarr::ReadReport::default();
                    let nd = g.read(..).report(&mut report).to(&DEV1).unwrap();
                    println!("nvCOMP into device 1: {report}");
                    assert_eq!(report.target, "device 1", "{report}");
                    assert_eq!(nd.as_ndarray_like().memory.prototype(), BufferPrototype::Device(1));
                    assert_bytes(&bytes_of(&nd), &want, "nvCOMP read into device 1");
                }
                drop(done_guard);
                let reads = busy.join().unwrap();
                println!("device 0 read the array {reads} times meanwhile");
                assert!(reads >= 1);
            });
        }
    }
}
