//! Real zarr stores on the GPU (feature `zarr`): reading into a device prototype gives
//! exactly the bytes of a host read (arrays made here for every element type, byte
//! order, compressor and sharding, with batches small enough to force many staging
//! rounds; plus the zarr-python fixtures when tests/fixtures/zarr is reachable);
//! device chunks are consecutive slices of one allocation; staging buffers are reused;
//! writing from device memory round-trips; a device memory store holds zarr arrays.

use std::path::PathBuf;
use std::sync::Arc;

use devbuf::ElementType;
use devbuf::cuda::Context;
use devbuf::zarr::{ArraySpec, Compressor, Decoder, GpuTuning, ReadOptions, ZarrArray};
use devbuf::zarr::{
    AxisSel, BufferPrototype, DeviceMemoryStore, Dtype, Endianness, NDBuffer, Order, Scalar, Slice,
};
use rand::Rng;
use rand::rngs::SmallRng;

use crate::common::*;

#[path = "../common/zarrs.rs"]
pub(crate) mod zarrs_common;
use zarrs_common::{TempDir, grid_indices};

const HOST: BufferPrototype = BufferPrototype::Host;
const DEV: BufferPrototype = BufferPrototype::Device(0);

/// The zarr-python fixtures: next to the sources, or under the working directory (the
/// bundle runs from a checkout), or where DEVBUF_ZARR_FIXTURES points.
pub(crate) fn fixtures_dir() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("DEVBUF_ZARR_FIXTURES").map(PathBuf::from),
        Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/zarr")),
        Some(PathBuf::from("tests/fixtures/zarr")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|p| p.join("manifest.json").is_file())
}

pub(crate) fn bytes_of(nd: &NDBuffer) -> Vec<u8> {
    nd.to_buffer().unwrap().to_host().unwrap().to_vec()
}

/// Device and host reads agree exactly (shape, dtype, layout, bytes).
fn assert_same(dev: &NDBuffer, host: &NDBuffer, what: &str) {
    assert!(
        dev.prototype().is_device(),
        "{what}: expected device memory"
    );
    assert!(host.prototype().is_host(), "{what}: expected host memory");
    assert_eq!(dev.shape(), host.shape(), "{what}: shape");
    assert_eq!(dev.dtype(), host.dtype(), "{what}: dtype");
    assert!(
        dev.is_contiguous(Order::C) && dev.dtype().byteorder() == Endianness::NATIVE,
        "{what}"
    );
    assert!(
        bytes_of(dev) == bytes_of(host),
        "{what}: device bytes differ from host"
    );
}

/// Random native element bytes (bools 0/1), never all zero.
pub(crate) fn random_elements(rng: &mut SmallRng, element: ElementType, n: usize) -> Vec<u8> {
    let mut v = random_bytes(rng, n * element.size());
    if element == ElementType::Bool {
        v.iter_mut().for_each(|b| *b &= 1);
    }
    v
}

pub(crate) fn host_nd(bytes: Vec<u8>, shape: &[u64], element: ElementType) -> NDBuffer {
    let shape: Vec<usize> = shape.iter().map(|&s| s as usize).collect();
    NDBuffer::from_memory(bytes, &shape, Dtype::from(element), Order::C).unwrap()
}

/// Checks every read path of `a` on the device against the host.
pub(crate) fn check_reads(a: &ZarrArray, rng: &mut SmallRng, what: &str) {
    let m = a.metadata().clone();
    assert_same(
        &a.read(..).to(&DEV).unwrap(),
        &a.read(..).to(&HOST).unwrap(),
        what,
    );

    let indices = grid_indices(&m.grid_shape);
    let dev = a.read_chunks(&indices).to(&DEV).unwrap();
    let host = a.read_chunks(&indices).to(&HOST).unwrap();
    // One allocation, consecutive slices (zero-copy views of it), in order.
    let base = dev.first().map(|d| d.as_ndarray_like().memory.address());
    let mut expect = base.unwrap_or(0);
    for ((d, h), idx) in dev.iter().zip(&host).zip(&indices) {
        assert_same(d, h, &format!("{what} chunk {idx:?}"));
        let mem = d.as_ndarray_like().memory;
        assert_eq!(
            mem.address(),
            expect,
            "{what} chunk {idx:?}: not consecutive"
        );
        assert_eq!(
            mem.as_device().unwrap().parent().address(),
            dev[0]
                .as_ndarray_like()
                .memory
                .as_device()
                .unwrap()
                .parent()
                .address(),
            "{what}: chunks in one allocation"
        );
        expect += d.nbytes() as u64;
    }
    if let Some(idx) = indices.last() {
        assert_same(
            &a.read_chunks(&[idx])
                .to(&DEV)
                .map(|mut v| v.remove(0))
                .unwrap(),
            &a.read_chunks(&[idx])
                .to(&HOST)
                .map(|mut v| v.remove(0))
                .unwrap(),
            what,
        );
    }

    for _ in 0..8 {
        let ranges: Vec<_> = m
            .shape
            .iter()
            .map(|&n| {
                let s = rng.random_range(0..=n);
                s..rng.random_range(s..=n)
            })
            .collect();
        let host = a.read(&ranges).to(&HOST).unwrap();
        assert_same(
            &a.read(&ranges).to(&DEV).unwrap(),
            &host,
            &format!("{what} box {ranges:?}"),
        );
        check_read_into(
            a,
            &ranges,
            &bytes_of(&host),
            rng,
            &format!("{what} box {ranges:?}"),
        );
    }
    if m.shape.len() >= 2 && m.shape[0] > 1 {
        let sel = [Slice::new(Some(1), None, 2).into(), AxisSel::Index(-1)];
        let d = a.read(sel).to(&DEV).unwrap();
        let h = a.read(sel).to(&HOST).unwrap();
        assert_same(
            &d.copy_order(Order::C).unwrap(),
            &h.copy_order(Order::C).unwrap(),
            &format!("{what} stepped"),
        );
    }
}

gpu_test! {
    fn zarrs_device_reads_equal_host_for_every_dtype_and_codec() {
        let mut rng = rng("zarrs_device_reads_equal_host_for_every_dtype_and_codec");
        let dir = TempDir::new("dtypes");
        let compressors = [
            Compressor::None,
            Compressor::Zstd { level: 3 },
            Compressor::Gzip { level: 5 },
            Compressor::Blosc { level: 5 },
            Compressor::Zlib { level: 3 },
            Compressor::Lz4,
        ];
        for (k, element) in ElementType::ALL.into_iter().enumerate() {
            for (j, bo) in [Endianness::Little, Endianness::Big].into_iter().enumerate() {
                let sharded = (k + j) % 3 == 0;
                let dtype = Dtype::new(element, bo);
                let shape = [67u64, 45, 3];
                let spec = if sharded {
                    ArraySpec::new(&shape, &[32, 16, 3], dtype).with_subchunks(&[8, 8, 3])
                } else {
                    ArraySpec::new(&shape, &[16, 10, 2], dtype)
                }
                .with_compressor(compressors[(k + j) % compressors.len()]);
                let what = format!("{dtype} sharded={sharded}");
                let path = dir.0.join(format!("{element}-{bo}"));
                let a = ZarrArray::create(&path, &spec).unwrap();
                let n: u64 = shape.iter().product();
                a.write_subset(&[0, 0, 0], &host_nd(random_elements(&mut rng, element, n as usize), &shape, element))
                    .unwrap();
                // Leave a chunk missing: the fill value on both sides.
                let fill = NDBuffer::create(
                    &HOST,
                    &a.chunk_ranges(&[1, 1, 0]).unwrap().iter().map(|r| (r.end - r.start) as usize).collect::<Vec<_>>(),
                    Dtype::from(element),
                    Order::C,
                    None,
                )
                .unwrap();
                a.write_chunks(&[&[1, 1, 0]], std::slice::from_ref(&fill)).unwrap();
                // Small staging slots (one chunk each, many rounds per worker), larger
                // ones (many chunks per slot) and tiny ones, on several workers.
                let mut a = ZarrArray::open(&path).unwrap();
                a.set_read_options(ReadOptions { threads: Some(3), slot_bytes: 4096, ..ReadOptions::default() }).unwrap();
                check_reads(&a, &mut rng, &what);
                a.set_read_options(ReadOptions { threads: Some(5), slot_bytes: 64 << 10, ..ReadOptions::default() }).unwrap();
                check_reads(&a, &mut rng, &what);
                // Slots smaller than a chunk: chunks of the codecs that stream go to the
                // device in pieces (`read/pieces.rs`).
                a.set_read_options(ReadOptions { threads: Some(2), slot_bytes: 256, ..ReadOptions::default() }).unwrap();
                check_reads(&a, &mut rng, &what);
            }
        }
    }

    fn zarrs_device_reads_of_zarr_python_fixtures_equal_host() {
        let Some(dir) = fixtures_dir() else {
            println!("SKIPPED zarrs_device_reads_of_zarr_python_fixtures_equal_host: tests/fixtures/zarr not found (run from the repository root or set DEVBUF_ZARR_FIXTURES)");
            eprintln!("SKIPPED zarrs_device_reads_of_zarr_python_fixtures_equal_host: tests/fixtures/zarr not found");
            return;
        };
        let mut rng = rng("zarrs_device_reads_of_zarr_python_fixtures_equal_host");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "zarr"))
            .collect();
        names.sort();
        assert_eq!(names.len(), 71);
        for path in names {
            let what = path.file_name().unwrap().to_string_lossy().to_string();
            let a = ZarrArray::open(&path).unwrap();
            check_reads(&a, &mut rng, &what);
            // The expected bytes, from the device.
            let expected = std::fs::read(dir.join("expected").join(what.replace(".zarr", ".bin"))).unwrap();
            assert!(bytes_of(&a.read(..).to(&DEV).unwrap()) == expected, "{what}");
        }
    }

    fn zarrs_reads_stage_through_the_transfer_pool_within_its_bound() {
        let dir = TempDir::new("reuse");
        let mut rng = rng("zarrs_reads_stage_through_the_transfer_pool_within_its_bound");
        let shape = [256u64, 256];
        let a = ZarrArray::create(
            dir.0.join("a"),
            &ArraySpec::new(&shape, &[64, 64], Dtype::FLOAT32).with_compressor(Compressor::Zstd { level: 1 }),
        )
        .unwrap();
        a.write_subset(&[0, 0], &host_nd(random_elements(&mut rng, ElementType::Float32, 65536), &shape, ElementType::Float32))
            .unwrap();
        let ctx = Context::new(0).unwrap();
        let first = a.read(..).to(&DEV).unwrap();
        for _ in 0..5 {
            let again = a.read(..).to(&DEV).unwrap();
            assert!(bytes_of(&again) == bytes_of(&first));
            let chunks = a.read_chunks(&grid_indices(&[4, 4])).to(&DEV).unwrap();
            assert_eq!(chunks.len(), 16);
        }
        // Reads keep no staging of their own: the context's pool holds it.
        let s = ctx.transfer_stats();
        assert!(s.pinned_high_water_bytes <= s.pinned_limit_bytes, "{s:?}");
        assert!(s.staging_reuses > 0, "kits are reused across reads: {s:?}");
    }

    fn zarrs_writes_from_device_round_trip() {
        let dir = TempDir::new("write");
        let mut rng = rng("zarrs_writes_from_device_round_trip");
        for (k, element) in ElementType::ALL.into_iter().enumerate() {
            let bo = if k % 2 == 0 { Endianness::Little } else { Endianness::Big };
            let shape = [37u64, 29];
            let mut spec = ArraySpec::new(&shape, &[8, 8], Dtype::new(element, bo))
                .with_compressor(match k % 3 {
                    0 => Compressor::Blosc { level: 5 },
                    1 if k % 2 == 1 => Compressor::Zlib { level: 1 },
                    _ => Compressor::Zstd { level: 3 },
                });
            if k % 4 == 1 {
                spec = spec.with_subchunks(&[4, 4]);
            }
            // Small slots (one chunk each) on several workers: many staging rounds.
            let mut a = ZarrArray::create(dir.0.join(format!("{element}")), &spec).unwrap();
            a.set_read_options(ReadOptions { threads: Some(3), slot_bytes: 4096, ..ReadOptions::default() }).unwrap();
            let n: u64 = shape.iter().product();
            let mut model = random_elements(&mut rng, element, n as usize);
            // Whole array from the device (slabs smaller than a chunk row).
            let v = host_nd(model.clone(), &shape, element).to_prototype(&DEV).unwrap();
            a.write_subset(&[0, 0], &v).unwrap();
            assert!(bytes_of(&a.read(..).to(&HOST).unwrap()) == model, "{element}: whole");

            // Chunks from another array's device read (consecutive slices of one
            // allocation: copied back in few copies) into this one.
            let b = ZarrArray::create(dir.0.join(format!("{element}-src")), &spec).unwrap();
            model = random_elements(&mut rng, element, n as usize);
            b.write_subset(&[0, 0], &host_nd(model.clone(), &shape, element)).unwrap();
            let indices = grid_indices(&a.metadata().grid_shape);
            let chunks = b.read_chunks(&indices).to(&DEV).unwrap();
            a.write_chunks(&indices, &chunks).unwrap();
            assert!(bytes_of(&a.read(..).to(&HOST).unwrap()) == model, "{element}: chunks");

            // A device box in F order and big-endian (converted on the device).
            let boxed = a.read(&[3..20, 5..29]).to(&DEV).unwrap();
            let flipped = boxed
                .copy_order(Order::F)
                .unwrap()
                .astype(Dtype::new(element, if element.size() > 1 { Endianness::Big } else { Endianness::Little }))
                .unwrap();
            assert!(flipped.prototype().is_device());
            a.write_subset(&[0, 0], &flipped).unwrap();
            let back = a.read(&[0..17, 0..24]).to(&HOST).unwrap();
            assert!(bytes_of(&back) == bytes_of(&boxed.to_prototype(&HOST).unwrap()), "{element}: box");
        }
    }

    fn zarrs_arrays_in_a_device_memory_store() {
        let mut rng = rng("zarrs_arrays_in_a_device_memory_store");
        let store = Arc::new(DeviceMemoryStore::new(&Context::new(0).unwrap()));
        let shape = [40u64, 33];
        let spec = ArraySpec::new(&shape, &[16, 16], Dtype::INT64)
            .with_subchunks(&[8, 8])
            .with_compressor(Compressor::Gzip { level: 3 });
        let a = ZarrArray::create((store.clone(), "grp/a"), &spec).unwrap();
        let data = random_elements(&mut rng, ElementType::Int64, 40 * 33);
        a.write_subset(&[0, 0], &host_nd(data.clone(), &shape, ElementType::Int64)).unwrap();
        let b = ZarrArray::open((store, "grp/a")).unwrap();
        assert!(bytes_of(&b.read(..).to(&HOST).unwrap()) == data);
        assert_same(&b.read(..).to(&DEV).unwrap(), &b.read(..).to(&HOST).unwrap(), "device store");
    }

    fn zarrs_device_read_throughput_report() {
        // 64 MiB of float32 in 1 MiB zstd chunks: host read vs device read.
        let dir = TempDir::new("bench");
        let mut rng = rng("zarrs_device_read_throughput_report");
        let shape = [4096u64, 4096];
        let a = ZarrArray::create(
            dir.0.join("a"),
            &ArraySpec::new(&shape, &[512, 512], Dtype::FLOAT32).with_compressor(Compressor::Zstd { level: 1 }),
        )
        .unwrap();
        // Compressible but not constant data.
        let mut v = vec![0u8; 4096 * 4096 * 4];
        for (i, c) in v.chunks_mut(4).enumerate() {
            c.copy_from_slice(&((i % 1000) as f32 + rng.random_range(0..4) as f32).to_le_bytes());
        }
        a.write_subset(&[0, 0], &host_nd(v, &shape, ElementType::Float32)).unwrap();
        let mb = 64.0 * 1.048576;
        let _ = a.read(..).to(&DEV).unwrap(); // warm up (staging, context)
        for proto in [HOST, DEV] {
            let t = std::time::Instant::now();
            let r = a.read(..).to(&proto).unwrap();
            if proto.is_device() {
                ctx().synchronize().unwrap();
            }
            let s = t.elapsed().as_secs_f64();
            println!("zarrs read_all 64 MiB zstd to {proto}: {:.1} ms, {:.0} MB/s", s * 1e3, mb / s);
            let t = std::time::Instant::now();
            let chunks = a.read_chunks(&grid_indices(&[8, 8])).to(&proto).unwrap();
            let s = t.elapsed().as_secs_f64();
            println!("zarrs read_chunks 64 x 1 MiB zstd to {proto}: {:.1} ms, {:.0} MB/s", s * 1e3, mb / s);
            drop((r, chunks));
        }
    }
}

gpu_test_exclusive! {
    /// A corrupt chunk, a chunk of the wrong size and a zstd bomb: every device read
    /// path reports the chunk's key, returns nothing, and device memory and the
    /// page-locked pool are back where they were.
    fn zarrs_bad_chunks_fail_device_reads_and_free_everything() {
        let dir = TempDir::new("bad");
        let mut rng = rng("zarrs_bad_chunks_fail_device_reads_and_free_everything");
        let shape = [128u64, 96];
        let ctx = Context::new(0).unwrap();
        for comp in [Compressor::None, Compressor::Zstd { level: 1 }, Compressor::Gzip { level: 1 }, Compressor::Zlib { level: 1 }, Compressor::Lz4, Compressor::Blosc { level: 5 }] {
            let path = dir.0.join(format!("{comp:?}").replace([' ', '{', '}', ':'], ""));
            let a = ZarrArray::create(&path, &ArraySpec::new(&shape, &[32, 32], Dtype::INT32).with_compressor(comp)).unwrap();
            a.write_subset(&[0, 0], &host_nd(random_elements(&mut rng, ElementType::Int32, 128 * 96), &shape, ElementType::Int32)).unwrap();
            let good = a.read(..).to(&DEV).unwrap();
            drop(good);
            ctx.synchronize().unwrap();
            let before = ctx.bytes_allocated();
            let pinned = ctx.transfer_stats().pinned_in_use_bytes;
            let chunk = path.join("c").join("2").join("1");
            let original = std::fs::read(&chunk).unwrap();
            let mut bad_inputs = vec![original[..original.len() / 2].to_vec()];
            let mut flipped = original.clone();
            let mid = flipped.len() / 2;
            flipped[mid] ^= 0x5a;
            flipped[4] ^= 0x11;
            bad_inputs.push(flipped);
            bad_inputs.push(zstd::bulk::compress(&vec![0u8; 64 << 20], 3).unwrap());
            for bad in bad_inputs {
                std::fs::write(&chunk, &bad).unwrap();
                let reads: Vec<Box<dyn Fn() -> devbuf::Result<()>>> = vec![
                    Box::new(|| a.read(..).to(&DEV).map(drop)),
                    Box::new(|| a.read(&[40..100, 10..90]).to(&DEV).map(drop)),
                    Box::new(|| a.read_chunks(&[&[2, 1]]).to(&DEV).map(|mut v| v.remove(0)).map(drop)),
                    Box::new(|| a.read_chunks(&[[0u64, 0], [2, 1]]).to(&DEV).map(drop)),
                    Box::new(|| a.read([AxisSel::Index(70)]).to(&DEV).map(drop)),
                ];
                for (k, read) in reads.iter().enumerate() {
                    match read() {
                        // Some corruptions of uncompressed, blosc or LZ4 chunks (no
                        // checksums) still decode to the right size: then the values
                        // differ, but never the size.
                        Ok(()) => assert!(matches!(comp, Compressor::None | Compressor::Blosc { .. } | Compressor::Lz4) && bad.len() == original.len(), "{comp:?} read {k} accepted a bad chunk of {} bytes", bad.len()),
                        Err(e) => assert!(e.to_string().contains("c/2/1"), "{comp:?} read {k}: {e}"),
                    }
                    ctx.synchronize().unwrap();
                    assert_eq!(ctx.bytes_allocated(), before, "{comp:?} read {k}: device memory back to baseline");
                    assert_eq!(ctx.transfer_stats().pinned_in_use_bytes, pinned, "{comp:?} read {k}: staging back");
                }
            }
            std::fs::write(&chunk, &original).unwrap();
        }
    }
}

/// Why nvCOMP tests cannot run here, printed as SKIPPED.
pub(crate) fn nvcomp_missing(test: &str) -> bool {
    match devbuf::cuda::nvcomp::library().err().map(|e| e.to_string()) {
        Some(why) => {
            println!("SKIPPED {test}: nvCOMP not available: {why}");
            eprintln!("SKIPPED {test}: nvCOMP not available");
            true
        }
        None => false,
    }
}

/// `ranges` read into the caller's memory gives `want`: a view in the middle of a
/// device allocation filled with noise (the bytes around it untouched), and host memory
/// filled with noise.
fn check_read_into(
    a: &ZarrArray,
    ranges: &[std::ops::Range<u64>],
    want: &[u8],
    rng: &mut SmallRng,
    what: &str,
) {
    let ctx = Context::new(0).unwrap();
    let n = want.len();
    let noise: Vec<u8> = (0..n + 512).map(|_| rng.random()).collect();
    let whole = devbuf::cuda::DeviceBuffer::from_slice(&ctx, &noise).unwrap();
    let view = whole.slice(256, n).unwrap();
    let mut r = devbuf::zarr::ReadReport::default();
    a.read(ranges).report(&mut r).into(&view).unwrap();
    assert!(
        r.target.starts_with("device 0 (the caller's memory)"),
        "{what}: {r}"
    );
    let got = whole.to_vec::<u8>().unwrap();
    assert!(
        got[256..256 + n] == *want,
        "{what}: device bytes read into a view differ from host"
    );
    assert!(
        got[..256] == noise[..256] && got[256 + n..] == noise[256 + n..],
        "{what}: bytes around the view changed"
    );
    let mut host: Vec<u8> = noise[..n].to_vec();
    a.read(ranges).into(&mut host).unwrap();
    assert!(host == want, "{what}: host bytes read into noise differ");
}

gpu_test_exclusive! {
    /// Reads into the caller's device memory: no allocation for the result (device
    /// memory stays at the baseline), the values at the buffer's own address, errors
    /// for a read-only buffer or a wrong size (naming both sizes), and a damaged chunk
    /// is an error naming its key.
    fn zarrs_reads_into_device_memory() {
        let ctx = ctx();
        let mut rng = rng("zarrs_reads_into_device_memory");
        let dir = TempDir::new("read-into");
        let shape = [300u64, 260];
        let a = ZarrArray::create(dir.0.join("a"), &ArraySpec::new(&shape, &[64, 48], Dtype::FLOAT32).with_compressor(Compressor::Zstd { level: 1 })).unwrap();
        let n = 300 * 260;
        a.write_subset(&[0, 0], &host_nd(random_elements(&mut rng, ElementType::Float32, n), &shape, ElementType::Float32)).unwrap();
        let want = bytes_of(&a.read(..).to(&HOST).unwrap());
        let out = ctx.allocate(n * 4).unwrap();
        let address = out.address();
        // A first read sets up what every read keeps (staging scratch).
        a.read(..).into(&out).unwrap();
        ctx.synchronize().unwrap();
        let before = ctx.bytes_allocated();
        for k in 0..3 {
            out.fill(0xA5 ^ k).unwrap();
            let mut r = devbuf::zarr::ReadReport::default();
            a.read(..).report(&mut r).into(&out).unwrap();
            assert_eq!(r.target, "device 0 (the caller's memory)");
            assert_eq!(out.address(), address);
            assert!(out.to_vec::<u8>().unwrap() == want, "read {k}");
            ctx.synchronize().unwrap();
            assert_eq!(ctx.bytes_allocated(), before, "read {k}: no device memory kept for the result");
        }
        let e = a.read(..).into(&out.read_only()).unwrap_err();
        assert!(matches!(e, devbuf::Error::ReadOnly(_)), "{e}");
        let short = out.slice(0, n * 4 - 4).unwrap();
        let e = a.read(..).into(&short).unwrap_err().to_string();
        assert!(e.contains(&format!("holds {} bytes", n * 4 - 4)) && e.contains(&format!("exactly {} bytes", n * 4)), "{e}");
        // A damaged chunk: an error naming it, on the CPU decoder and on nvCOMP.
        let chunk = dir.0.join("a").join("c").join("2").join("3");
        let original = std::fs::read(&chunk).unwrap();
        std::fs::write(&chunk, &original[..original.len() / 2]).unwrap();
        let mut decoders = vec![Decoder::Cpu];
        if !nvcomp_missing("zarrs_reads_into_device_memory (nvCOMP part)") {
            decoders.push(Decoder::Gpu);
        }
        for decoder in decoders {
            let mut b = ZarrArray::open(dir.0.join("a")).unwrap();
            b.set_read_options(ReadOptions { decoder, ..ReadOptions::default() }).unwrap();
            std::fs::write(&chunk, &original).unwrap();
            b.read(..).into(&out).unwrap();
            ctx.synchronize().unwrap();
            let before = ctx.bytes_allocated();
            std::fs::write(&chunk, &original[..original.len() / 2]).unwrap();
            let e = b.read(..).into(&out).unwrap_err().to_string();
            assert!(e.contains("c/2/3"), "{decoder:?}: {e}");
            ctx.synchronize().unwrap();
            assert_eq!(ctx.bytes_allocated(), before, "{decoder:?}: device memory back after the error");
        }
        std::fs::write(&chunk, &original).unwrap();
        assert!(a.read(..).into(&out).is_ok() && out.to_vec::<u8>().unwrap() == want);
    }
}

gpu_test! {
    /// nvCOMP alone and nvCOMP with CPU workers give exactly the host's bytes, for zstd,
    /// gzip, zlib (with crc32c) and numcodecs' LZ4, plain and sharded, either byte
    /// order, with missing chunks, for every kind of selection; the report counts the
    /// GPU's chunks.
    fn zarrs_gpu_decoded_reads_equal_host() {
        if nvcomp_missing("zarrs_gpu_decoded_reads_equal_host") {
            return;
        }
        let mut rng = rng("zarrs_gpu_decoded_reads_equal_host");
        let dir = TempDir::new("gpu-decode");
        let mut k = 0;
        for comp in [Compressor::Zstd { level: 1 }, Compressor::Gzip { level: 1 }, Compressor::Zlib { level: 1 }, Compressor::Lz4] {
            for (element, bo) in [(ElementType::Float32, Endianness::Little), (ElementType::Int16, Endianness::Big), (ElementType::Float64, Endianness::Little)] {
                for sharded in [false, true] {
                    k += 1;
                    let dtype = Dtype::new(element, bo);
                    let shape = [150u64, 130];
                    // A fill value whose bytes differ when swapped: a big-endian array's
                    // missing chunks must come out in native order on the device.
                    let fill = Scalar::Int64(0x1234).cast(element);
                    let spec = if sharded {
                        ArraySpec::new(&shape, &[64, 64], dtype).with_subchunks(&[16, 32])
                    } else {
                        ArraySpec::new(&shape, &[40, 24], dtype)
                    }
                    .with_compressor(comp)
                    .with_fill_value(fill);
                    // zlib goes to nvCOMP only with crc32c (its size is unknown on the host).
                    let crc = matches!(comp, Compressor::Zlib { .. });
                    let spec = if crc { spec.with_crc32c() } else { spec };
                    let path = dir.0.join(format!("a{k}"));
                    let a = ZarrArray::create(&path, &spec).unwrap();
                    let n: u64 = shape.iter().product();
                    a.write_subset(&[0, 0], &host_nd(random_elements(&mut rng, element, n as usize), &shape, element)).unwrap();
                    // One chunk (shard) missing: fill value on the device.
                    let missing = a.chunk_ranges(&[1, 1]).unwrap();
                    let filled = NDBuffer::create(&HOST, &missing.iter().map(|r| (r.end - r.start) as usize).collect::<Vec<_>>(), Dtype::from(element), Order::C, Some(fill)).unwrap();
                    a.write_chunks(&[&[1, 1]], std::slice::from_ref(&filled)).unwrap();
                    assert!(!a.chunk_is_stored(&[1, 1]).unwrap(), "chunk [1, 1] equals the fill value: not stored");
                    let what = format!("{comp:?} {dtype} sharded={sharded}");
                    for (decoder, threads, gpu_workers) in [(Decoder::Gpu, 2, None), (Decoder::Both, 6, Some(2)), (Decoder::Auto, 4, None)] {
                        let mut a = ZarrArray::open(&path).unwrap();
                        a.set_read_options(ReadOptions { decoder, threads: Some(threads), gpu_workers, slot_bytes: 16 << 10, ..ReadOptions::default() }).unwrap();
                        check_reads(&a, &mut rng, &format!("{what} {decoder:?}"));
                        let mut r = devbuf::zarr::ReadReport::default();
                        let _ = a.read(..).report(&mut r).to(&DEV).unwrap();
                        if decoder == Decoder::Auto {
                            // zstd frames and gzip members go to the GPU with or without
                            // crc32c (checked as the CPU decoders check them: zstd on the
                            // host first, gzip's CRC-32 on the device after; the cost
                            // model decides how many); other chunks without crc32c only
                            // when asked for.
                            let checked = matches!(comp, Compressor::Zstd { .. } | Compressor::Gzip { .. });
                            assert!(crc || checked || (r.gpu_chunks == 0 && r.gpu_note.contains("crc32c")), "{what}: {r}");
                            assert!(!checked || !r.gpu_note.contains("crc32c"), "{what}: {r}");
                            continue;
                        }
                        assert!(r.gpu_chunks > 0, "{what} {decoder:?}: {r}");
                        if decoder == Decoder::Gpu {
                            assert_eq!(r.cpu_chunks, 0, "{what}: {r}");
                        }
                    }
                }
            }
        }
        // zlib without crc32c: never on the GPU (a truncated stream could fault the
        // device); an explicit Gpu is an error saying why, Auto says so too.
        let path = dir.0.join("zlib-no-crc");
        let a = ZarrArray::create(&path, &ArraySpec::new(&[64, 64], &[16, 16], Dtype::FLOAT32).with_compressor(Compressor::Zlib { level: 1 })).unwrap();
        a.write_subset(&[0, 0], &host_nd(random_elements(&mut rng, ElementType::Float32, 4096), &[64, 64], ElementType::Float32)).unwrap();
        let mut r = devbuf::zarr::ReadReport::default();
        let _ = a.read(..).report(&mut r).to(&DEV).unwrap();
        assert!(r.gpu_chunks == 0 && r.gpu_note.contains("zlib chunks without crc32c"), "{r}");
        let mut a = ZarrArray::open(&path).unwrap();
        a.set_read_options(ReadOptions { decoder: Decoder::Gpu, ..ReadOptions::default() }).unwrap();
        let e = a.read(..).to(&DEV).unwrap_err().to_string();
        assert!(e.contains("zlib chunks without crc32c"), "{e}");
        // blosc (LZ4 inside) without crc32c: Auto leaves it to the CPU and says why, Gpu
        // decodes it (zarrs_blosc.rs tests it in depth).
        let path = dir.0.join("blosc");
        let a = ZarrArray::create(&path, &ArraySpec::new(&[64, 64], &[16, 16], Dtype::FLOAT32).with_compressor(Compressor::Blosc { level: 5 })).unwrap();
        a.write_subset(&[0, 0], &host_nd(random_elements(&mut rng, ElementType::Float32, 4096), &[64, 64], ElementType::Float32)).unwrap();
        let mut r = devbuf::zarr::ReadReport::default();
        let _ = a.read(..).report(&mut r).to(&DEV).unwrap();
        assert!(r.gpu_chunks == 0 && r.gpu_note.contains("crc32c"), "{r}");
        let mut a = ZarrArray::open(&path).unwrap();
        a.set_read_options(ReadOptions { decoder: Decoder::Gpu, ..ReadOptions::default() }).unwrap();
        let mut r = devbuf::zarr::ReadReport::default();
        let d = a.read(..).report(&mut r).to(&DEV).unwrap();
        assert!(bytes_of(&d) == bytes_of(&a.read(..).to(&HOST).unwrap()) && r.gpu_chunks == 16, "{r}");
    }
}

gpu_test_exclusive! {
    /// Corrupt chunks decoded by nvCOMP: an error naming the chunk's key, nothing
    /// returned, device memory and staging back to where they were.
    fn zarrs_gpu_decode_errors_name_the_chunk_and_free_everything() {
        if nvcomp_missing("zarrs_gpu_decode_errors_name_the_chunk_and_free_everything") {
            return;
        }
        let dir = TempDir::new("gpu-bad");
        let mut rng = rng("zarrs_gpu_decode_errors_name_the_chunk_and_free_everything");
        let ctx = Context::new(0).unwrap();
        for comp in [Compressor::Zstd { level: 1 }, Compressor::Gzip { level: 1 }, Compressor::Zlib { level: 1 }, Compressor::Lz4] {
            let path = dir.0.join(format!("{comp:?}").replace([' ', '{', '}', ':'], ""));
            let zlib = matches!(comp, Compressor::Zlib { .. });
            let spec = ArraySpec::new(&[128, 96], &[32, 32], Dtype::INT32).with_compressor(comp);
            // zlib goes to nvCOMP only with crc32c.
            let spec = if zlib { spec.with_crc32c() } else { spec };
            let a = ZarrArray::create(&path, &spec).unwrap();
            a.write_subset(&[0, 0], &host_nd(random_elements(&mut rng, ElementType::Int32, 128 * 96), &[128, 96], ElementType::Int32)).unwrap();
            let mut a = ZarrArray::open(&path).unwrap();
            a.set_read_options(ReadOptions { decoder: Decoder::Gpu, threads: Some(2), ..ReadOptions::default() }).unwrap();
            drop(a.read(..).to(&DEV).unwrap());
            ctx.synchronize().unwrap();
            let before = ctx.bytes_allocated();
            let pinned = ctx.transfer_stats().pinned_in_use_bytes;
            let chunk = path.join("c").join("2").join("1");
            let original = std::fs::read(&chunk).unwrap();
            let mut garbage = original.clone();
            for b in garbage.iter_mut().skip(20).step_by(7) {
                *b ^= 0xa5;
            }
            // Damage inside compressed data may decode unnoticed on the GPU (documented;
            // the CPU decoders catch more), except in gzip members, whose CRC-32 the
            // device checks: truncation and damaged frame and block headers are caught
            // on the host before nvCOMP runs.
            let mut bad_inputs = vec![("truncated", original[..original.len() / 2].to_vec())];
            if matches!(comp, Compressor::Gzip { .. }) {
                // The trailer's CRC-32 off by one bit.
                let mut crc = original.clone();
                let at = crc.len() - 8;
                crc[at] ^= 0x01;
                bad_inputs.push(("trailer CRC-32", crc));
                // A member of stored (uncompressed) deflate blocks with one data byte
                // changed: valid deflate that decodes to the wrong bytes, which only the
                // CRC-32 tells.
                let bytes = bytes_of(&a.read_chunks(&[&[2, 1]]).to(&HOST).map(|mut v| v.remove(0)).unwrap());
                let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::none());
                std::io::Write::write_all(&mut enc, &bytes).unwrap();
                let mut stored = enc.finish().unwrap();
                stored[100] ^= 0x10; // past the 10-byte header and the block's 5
                bad_inputs.push(("stored block, one byte changed", stored));
            }
            if matches!(comp, Compressor::Zstd { .. }) {
                let mut header = original.clone();
                header[0] ^= 0xff; // the frame's magic
                bad_inputs.push(("magic", header));
                let mut sized = original.clone();
                sized.truncate(original.len() - 3); // the last block runs past the end
                bad_inputs.push(("short block", sized));
            }
            if zlib {
                // A stream of the chunk's bytes and 8 more, with a valid crc32c: zlib
                // records no size, so nvCOMP's output bound catches it.
                let mut long = bytes_of(&a.read_chunks(&[&[2, 1]]).to(&HOST).map(|mut v| v.remove(0)).unwrap());
                long.extend_from_slice(&[9u8; 8]);
                let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(1));
                std::io::Write::write_all(&mut enc, &long).unwrap();
                let z = enc.finish().unwrap();
                let crc = crc32c::crc32c(&z).to_le_bytes();
                bad_inputs.push(("8 bytes too long", [z.as_slice(), &crc].concat()));
                // A damaged header behind a valid crc32c: refused on the host.
                let mut header = original[..original.len() - 4].to_vec();
                header[1] ^= 0x01; // the header's check bits
                let crc = crc32c::crc32c(&header).to_le_bytes();
                bad_inputs.push(("header", [header.as_slice(), &crc].concat()));
            }
            if matches!(comp, Compressor::Lz4) {
                // The size prefix is checked on the host; a block that decodes to more
                // than the chunk by nvCOMP's output bound.
                let mut prefix = original.clone();
                prefix[..4].copy_from_slice(&4095u32.to_le_bytes());
                bad_inputs.push(("prefix", prefix));
                let mut long = lz4_flex::block::compress_prepend_size(&[5u8; 4096 + 64]);
                long[..4].copy_from_slice(&4096u32.to_le_bytes());
                bad_inputs.push(("decodes past the chunk", long));
            }
            let _ = garbage;
            for (how, bad) in bad_inputs {
                std::fs::write(&chunk, &bad).unwrap();
                let e = a.read(..).to(&DEV).expect_err(&format!("{comp:?} {how}")).to_string();
                assert!(e.contains("c/2/1"), "{comp:?} {how}: {e}");
                ctx.synchronize().unwrap();
                assert_eq!(ctx.bytes_allocated(), before, "{comp:?}: device memory back");
                assert_eq!(ctx.transfer_stats().pinned_in_use_bytes, pinned, "{comp:?}: staging back");
            }
            std::fs::write(&chunk, &original).unwrap();
        }
    }
}

gpu_test_exclusive! {
    /// GPU workers with several claims in flight (many claims per worker, both staging
    /// slots and every flight reused): a big-endian array with a non-zero fill value,
    /// missing chunks, and chunks nvCOMP is not given (zstd frames with a content
    /// checksum, decoded on the host inside a GPU claim) reads exactly as on the host,
    /// on every read path; staging and device memory are back where they were.
    fn zarrs_gpu_claims_in_flight_equal_host() {
        if nvcomp_missing("zarrs_gpu_claims_in_flight_equal_host") {
            return;
        }
        use std::io::Write;
        let mut rng = rng("zarrs_gpu_claims_in_flight_equal_host");
        let dir = TempDir::new("gpu-flights");
        let ctx = Context::new(0).unwrap();
        let shape = [200u64, 180];
        let spec = ArraySpec::new(&shape, &[16, 20], Dtype::new(ElementType::Int32, Endianness::Big))
            .with_compressor(Compressor::Zstd { level: 1 })
            .with_fill_value(Scalar::Int32(-123_456));
        let path = dir.0.join("a");
        let a = ZarrArray::create(&path, &spec).unwrap();
        a.write_subset(&[0, 0], &host_nd(random_elements(&mut rng, ElementType::Int32, 200 * 180), &shape, ElementType::Int32)).unwrap();
        // 13 x 9 chunks: two missing, two zstd frames with a content checksum.
        for (i, idx) in [[0u64, 0], [3, 4], [12, 8], [7, 1]].iter().enumerate() {
            let f = path.join("c").join(idx[0].to_string()).join(idx[1].to_string());
            if i % 2 == 0 {
                std::fs::remove_file(&f).unwrap();
                continue;
            }
            let raw = zstd::decode_all(&std::fs::read(&f).unwrap()[..]).unwrap();
            let mut enc = zstd::Encoder::new(Vec::new(), 1).unwrap();
            enc.include_checksum(true).unwrap();
            enc.set_pledged_src_size(Some(raw.len() as u64)).unwrap();
            enc.write_all(&raw).unwrap();
            std::fs::write(&f, enc.finish().unwrap()).unwrap();
        }
        let host = a.read(..).to(&HOST).unwrap();
        drop(a.read(..).to(&DEV).unwrap());
        ctx.synchronize().unwrap();
        let before = ctx.bytes_allocated();
        let pinned = ctx.transfer_stats().pinned_in_use_bytes;
        // The GPU tuning knobs (ReadOptions fields): one claim in flight, no ramp, the
        // cost model off, a stream per lane; then the most claims, ramp and spread.
        let narrow = GpuTuning { claim_bytes: 1 << 20, claims_per_worker: Some(1), claims_in_flight: Some(1), readers: Some(1), spread: Some(1), ramp: Some(0), cost_model: false };
        let wide = GpuTuning { claims_per_worker: Some(16), claims_in_flight: Some(64), readers: Some(3), spread: Some(64), ramp: Some(8), ..GpuTuning::default() };
        let cases = [
            (Decoder::Gpu, 2, None, GpuTuning::default(), 4),
            (Decoder::Gpu, 10, None, GpuTuning::default(), 4),
            (Decoder::Both, 4, Some(1), GpuTuning::default(), 4),
            (Decoder::Gpu, 4, None, narrow.clone(), 0),
            (Decoder::Both, 6, Some(2), narrow, 1),
            (Decoder::Gpu, 8, None, wide.clone(), 64),
            (Decoder::Both, 5, Some(1), wide, 2),
        ];
        for (decoder, threads, gpu_workers, gpu, lane_streams) in cases {
            let what = format!("{decoder:?} {threads} threads {gpu:?} lane_streams {lane_streams}");
            let mut a = ZarrArray::open(&path).unwrap();
            // Small staging slots: a GPU claim is two of them (24 chunks), five claims.
            a.set_read_options(ReadOptions { decoder, threads: Some(threads), gpu_workers, slot_bytes: 16 << 10, gpu, lane_streams, ..ReadOptions::default() }).unwrap();
            let mut r = devbuf::zarr::ReadReport::default();
            let dev = a.read(..).report(&mut r).to(&DEV).unwrap();
            assert_same(&dev, &host, &what);
            drop(dev);
            assert!(r.gpu_chunks > 0, "{what}: {r}");
            if decoder == Decoder::Gpu {
                assert_eq!((r.cpu_chunks, r.missing_chunks, r.gpu_chunks), (2, 2, 113), "{what}: {r}");
            }
            check_reads(&a, &mut rng, &what);
            ctx.synchronize().unwrap();
            assert_eq!(ctx.bytes_allocated(), before, "{what}: device memory back");
            assert_eq!(ctx.transfer_stats().pinned_in_use_bytes, pinned, "{what}: staging back");
        }
    }
}
