//! Device reads of large chunks. Uncompressed ones larger than a slot go to the device
//! a piece at a time (`crates/devbuf-zarr/src/read/pieces.rs`): bit-exact against the host read
//! (plain, sharded, big-endian swapped per piece, transposed), with edge and missing
//! chunks, with slots of 1 MiB (three pieces a 2.5 MiB chunk) and of a few KiB
//! (hundreds of pieces a chunk). Compressed large chunks (decoded whole) go through the
//! same arrays and reads. Damaged large chunks are errors naming the chunk, with device
//! memory and the page-locked pool back where they were.

use devbuf::cuda::Context;
use devbuf::zarr::{ArraySpec, Compressor, Decoder, ReadOptions, ZarrArray};
use devbuf::zarr::{BufferPrototype, Dtype, NDBuffer, Order};
use rand::Rng;
use rand::rngs::SmallRng;

use crate::common::*;
use crate::zarrs::check_reads;
use crate::zarrs::zarrs_common::{TempDir, v3_metadata};

const HOST: BufferPrototype = BufferPrototype::Host;
const DEV: BufferPrototype = BufferPrototype::Device(0);

/// Values that compress a little (a slope plus noise).
fn f32_nd(rows: usize, cols: usize, rng: &mut SmallRng) -> NDBuffer {
    let v: Vec<f32> = (0..rows * cols)
        .map(|i| (i % 977) as f32 * 0.25 + (rng.random::<u8>() as f32) / 64.0)
        .collect();
    NDBuffer::from_ndarray(ndarray::Array2::from_shape_vec((rows, cols), v).unwrap())
}

/// `check_reads` with the CPU decoders and slots of 1 MiB, then with slots of `small`
/// bytes on three workers (many pieces a chunk, many rounds a worker).
fn check_in_pieces(a: &mut ZarrArray, small: usize, rng: &mut SmallRng, what: &str) {
    for (threads, slot_bytes) in [(None, 1 << 20), (Some(3), small)] {
        a.set_read_options(ReadOptions {
            decoder: Decoder::Cpu,
            threads,
            slot_bytes,
            ..ReadOptions::default()
        })
        .unwrap();
        let mut report = devbuf::zarr::ReadReport::default();
        let _ = a.read(..).report(&mut report).to(&DEV).unwrap();
        assert_eq!(report.gpu_chunks, 0, "{what}: {report}");
        check_reads(a, rng, &format!("{what}, slots of {slot_bytes}"));
    }
}

gpu_test! {
    fn zarrs_device_reads_of_large_chunks_in_pieces_equal_host() {
        let mut rng = rng("zarrs_device_reads_of_large_chunks_in_pieces_equal_host");
        let dir = TempDir::new("pieces");
        // 1100 x 700 float32 in 1024 x 640 chunks (2.5 MiB):
        // three of four chunks clipped at the edges, the last one missing; one sharded
        // case with 2 MiB inner chunks.
        for (k, (comp, sharded)) in [
            (Compressor::None, false),
            (Compressor::None, true),
            (Compressor::Zstd { level: 1 }, false),
            (Compressor::Gzip { level: 1 }, false),
            (Compressor::Zlib { level: 1 }, false),
        ]
        .into_iter()
        .enumerate()
        {
            let spec = if sharded {
                ArraySpec::new(&[1100, 700], &[1024, 1024], Dtype::FLOAT32).with_subchunks(&[1024, 512])
            } else {
                ArraySpec::new(&[1100, 700], &[1024, 640], Dtype::FLOAT32)
            }
            .with_compressor(comp);
            let path = dir.0.join(format!("a{k}"));
            let a = ZarrArray::create(&path, &spec).unwrap();
            a.write_subset(&[0, 0], &f32_nd(1100, 700, &mut rng)).unwrap();
            let grid = a.metadata().grid_shape.clone();
            let last: Vec<u64> = grid.iter().map(|&g| g - 1).collect();
            let r = a.chunk_ranges(&last).unwrap();
            let zero = NDBuffer::create(&HOST, &r.iter().map(|r| (r.end - r.start) as usize).collect::<Vec<_>>(), Dtype::FLOAT32, devbuf::zarr::Order::C, None).unwrap();
            a.write_chunks(&[&last], std::slice::from_ref(&zero)).unwrap();
            let mut a = ZarrArray::open(&path).unwrap();
            check_in_pieces(&mut a, 4096, &mut rng, &format!("{comp:?} sharded={sharded}"));
        }

        // int16 by hand, 1500 x 1100 in 1024 x 1024 chunks, fill 7, chunk [1, 1] missing:
        // big-endian (swapped per piece), big-endian and transposed (placed by the device
        // from the unit's buffer), and zstd with crc32c (decoded whole).
        let big = r#"{"name": "bytes", "configuration": {"endian": "big"}}"#;
        let zstd = r#"{"name": "zstd", "configuration": {"level": 1, "checksum": false}}"#;
        let transpose = r#"{"name": "transpose", "configuration": {"order": [1, 0]}}"#;
        for (name, codecs) in [
            ("be_none", format!("[{big}]")),
            ("be_f_none", format!("[{transpose}, {big}]")),
            ("be_zstd_crc", format!(r#"[{big}, {zstd}, {{"name": "crc32c"}}]"#)),
        ] {
            let path = dir.0.join(name);
            std::fs::create_dir_all(&path).unwrap();
            std::fs::write(path.join("zarr.json"), v3_metadata(&[1500, 1100], "int16", &[1024, 1024], "7", &codecs)).unwrap();
            let a = ZarrArray::open(&path).unwrap();
            let v: Vec<i16> = (0..1500 * 1100).map(|i| (i % 3001) as i16 - 1500 + (rng.random::<u8>() as i16 & 7)).collect();
            let nd = NDBuffer::from_ndarray(ndarray::Array2::from_shape_vec((1500, 1100), v).unwrap());
            a.write_subset(&[0, 0], &nd.get(&[(0..1024).into(), (0..1100).into()]).unwrap().copy_order(Order::C).unwrap()).unwrap();
            a.write_subset(&[1024, 0], &nd.get(&[(1024..1500).into(), (0..1024).into()]).unwrap().copy_order(Order::C).unwrap()).unwrap();
            assert!(!a.chunk_is_stored(&[1, 1]).unwrap());
            let mut a = ZarrArray::open(&path).unwrap();
            // Slots of 1000 bytes: pieces of 1024 (the slot rounded up to 256), so
            // elements never straddle two pieces.
            check_in_pieces(&mut a, 1000, &mut rng, name);
        }
    }
}

gpu_test_exclusive! {
    /// Truncated, too long and wrongly sized large chunks (uncompressed ones sent in
    /// pieces, compressed ones decoded whole): every device read path reports the
    /// chunk's key and returns nothing, and device memory and the page-locked pool are
    /// back where they were.
    fn zarrs_damaged_large_chunks_fail_device_reads() {
        let mut rng = rng("zarrs_damaged_large_chunks_fail_device_reads");
        let dir = TempDir::new("pieces-bad");
        let ctx = Context::new(0).unwrap();
        for (name, comp) in [("none", Compressor::None), ("zstd", Compressor::Zstd { level: 1 }), ("gzip", Compressor::Gzip { level: 1 }), ("zlib", Compressor::Zlib { level: 1 })] {
            let path = dir.0.join(name);
            let a = ZarrArray::create(&path, &ArraySpec::new(&[1024, 1024], &[1024, 512], Dtype::FLOAT32).with_compressor(comp)).unwrap();
            a.write_subset(&[0, 0], &f32_nd(1024, 1024, &mut rng)).unwrap();
            let chunk = path.join("c").join("0").join("1");
            let original = std::fs::read(&chunk).unwrap();
            let mut cases = vec![
                ("truncated", original[..original.len() / 2].to_vec()),
                ("one byte short", original[..original.len() - 1].to_vec()),
            ];
            if name != "gzip" && name != "zlib" {
                cases.push(("one byte more", [original.as_slice(), &[0]].concat()));
            }
            if name == "zstd" {
                let extra = zstd::bulk::compress(&[1u8; 4096], 1).unwrap();
                cases.push(("a second frame", [original.as_slice(), &extra].concat()));
                cases.push(("declares half", zstd::bulk::compress(&vec![3u8; 1 << 20], 1).unwrap()));
            }
            let mut a = ZarrArray::open(&path).unwrap();
            for slot_bytes in [1 << 20, 4096] {
                a.set_read_options(ReadOptions { decoder: Decoder::Cpu, slot_bytes, ..ReadOptions::default() }).unwrap();
                std::fs::write(&chunk, &original).unwrap();
                drop(a.read(..).to(&DEV).unwrap());
                ctx.synchronize().unwrap();
                let before = ctx.bytes_allocated();
                let pinned = ctx.transfer_stats().pinned_in_use_bytes;
                for (case, bytes) in &cases {
                    std::fs::write(&chunk, bytes).unwrap();
                    let reads: [(&str, devbuf::Result<()>); 3] = [
                        ("read_all", a.read(..).to(&DEV).map(drop)),
                        ("read_subset", a.read(&[100..900, 400..700]).to(&DEV).map(drop)),
                        ("read_chunk", a.read_chunks(&[&[0, 1]]).to(&DEV).map(|mut v| v.remove(0)).map(drop)),
                    ];
                    for (read, r) in reads {
                        let what = format!("{name} {case} {read}, slots of {slot_bytes}");
                        let e = r.expect_err(&what);
                        assert!(e.to_string().contains("c/0/1"), "{what}: {e}");
                        ctx.synchronize().unwrap();
                        assert_eq!(ctx.bytes_allocated(), before, "{what}: device memory back to baseline");
                        assert_eq!(ctx.transfer_stats().pinned_in_use_bytes, pinned, "{what}: staging back");
                    }
                }
            }
            std::fs::write(&chunk, &original).unwrap();
        }
    }
}
