//! Host reads of large chunks (2 MiB and more), which the read engine decodes in pieces
//! straight into the output (`crates/devbuf-zarr/src/read/incremental.rs`), and of large gzip
//! and zlib chunks, which it decodes whole with libdeflate: bit-exact against the
//! values written for every codec (none, zstd, gzip, zlib), big-endian and F-order
//! chunks with crc32c, sharded inner chunks, edge chunks, missing chunks, every read
//! path; and damaged chunks (truncated, too long, a second frame, a frame without a
//! declared size) are errors naming the chunk, never data.
#![cfg(feature = "zarr")]

use std::ops::Range;

use devbuf::zarr::{ArraySpec, Compressor, ZarrArray};
use devbuf::zarr::{BufferPrototype, Dtype, NDBuffer, Order};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[path = "common/zarrs.rs"]
mod zarrs_common;
use zarrs_common::{TempDir, grid_indices, sub_box};

const HOST: BufferPrototype = BufferPrototype::Host;

fn bytes_of(nd: &NDBuffer) -> Vec<u8> {
    nd.to_buffer().unwrap().to_host().unwrap().to_vec()
}

/// Values that compress a little (a slope plus noise), as native-endian bytes.
fn f32_values(n: usize, rng: &mut SmallRng) -> Vec<f32> {
    (0..n)
        .map(|i| (i % 977) as f32 * 0.25 + (rng.random::<u8>() as f32) / 64.0)
        .collect()
}

/// Every read path of `a` against `all` (the whole array's C-order native bytes).
fn check_every_read(a: &ZarrArray, all: &[u8], elem: usize, rng: &mut SmallRng, what: &str) {
    let shape = a.shape().to_vec();
    assert!(
        bytes_of(&a.read(..).to(&HOST).unwrap()) == all,
        "{what}: read_all"
    );
    let mut into = vec![0x5Au8; all.len()];
    a.read(..).into(&mut into).unwrap();
    assert!(into == all, "{what}: read_all_into");
    for round in 0..6 {
        let (start, sub): (Vec<u64>, Vec<u64>) = shape
            .iter()
            .map(|&n| {
                let s = if round == 0 {
                    0
                } else {
                    rng.random_range(0..n)
                };
                let e = if round < 2 {
                    n
                } else {
                    rng.random_range(s..=n)
                };
                (s, e - s)
            })
            .unzip();
        let ranges: Vec<Range<u64>> = start.iter().zip(&sub).map(|(&s, &n)| s..s + n).collect();
        let want = sub_box(all, &shape, elem, &start, &sub);
        assert!(
            bytes_of(&a.read(&ranges).to(&HOST).unwrap()) == want,
            "{what}: box {ranges:?}"
        );
        let mut into: Vec<u8> = (0..want.len()).map(|_| rng.random()).collect();
        a.read(&ranges).into(&mut into).unwrap();
        assert!(into == want, "{what}: box {ranges:?} into noise");
    }
    // Chunks one by one and all at once (each placed once per request).
    let grid = a.metadata().grid_shape.clone();
    let chunks = a.read_chunks(&grid_indices(&grid)).to(&HOST).unwrap();
    for (idx, c) in grid_indices(&grid).iter().zip(&chunks) {
        let r = a.chunk_ranges(idx).unwrap();
        let start: Vec<u64> = r.iter().map(|r| r.start).collect();
        let sub: Vec<u64> = r.iter().map(|r| r.end - r.start).collect();
        assert!(
            bytes_of(c) == sub_box(all, &shape, elem, &start, &sub),
            "{what}: chunk {idx:?}"
        );
    }
}

#[test]
fn large_chunks_read_bit_exactly_for_every_streamed_codec() {
    let mut rng = SmallRng::seed_from_u64(0x57ea_4d01);
    let dir = TempDir::new("streamed");
    // 1100 x 700 float32 in 1024 x 640 chunks (2.5 MiB): four chunks, three of them
    // clipped at the edges; one sharded case with 2 MiB inner chunks.
    let shape = [1100u64, 700];
    let n = 1100 * 700;
    for (k, (comp, sharded)) in [
        (Compressor::None, false),
        (Compressor::Zstd { level: 1 }, false),
        (Compressor::Gzip { level: 1 }, false),
        (Compressor::Zlib { level: 1 }, false),
        (Compressor::Zstd { level: 3 }, true),
    ]
    .into_iter()
    .enumerate()
    {
        let spec = if sharded {
            ArraySpec::new(&shape, &[1024, 1024], Dtype::FLOAT32).with_subchunks(&[1024, 512])
        } else {
            ArraySpec::new(&shape, &[1024, 640], Dtype::FLOAT32)
        }
        .with_compressor(comp);
        let a = ZarrArray::create(dir.join(&format!("a{k}")), &spec).unwrap();
        let v = f32_values(n, &mut rng);
        let nd = NDBuffer::from_ndarray(ndarray::Array2::from_shape_vec((1100, 700), v).unwrap());
        a.write_subset(&[0, 0], &nd).unwrap();
        let mut all = bytes_of(&nd);
        // The last chunk missing: the fill value (0) in its place.
        let grid = a.metadata().grid_shape.clone();
        let last: Vec<u64> = grid.iter().map(|&g| g - 1).collect();
        zarrs_common::unstore_chunk(&a, &last, &mut all);
        check_every_read(
            &a,
            &all,
            4,
            &mut rng,
            &format!("{comp:?} sharded={sharded}"),
        );
    }
}

/// A v3 int16 array written by hand, 1500 x 1100 in 1024 x 1024 chunks (2 MiB), fill
/// value 7, with `codecs` (a JSON list).
fn int16_array(dir: &TempDir, name: &str, codecs: &str) -> ZarrArray {
    let path = dir.join(name);
    std::fs::create_dir_all(&path).unwrap();
    let meta = zarrs_common::v3_metadata(&[1500, 1100], "int16", &[1024, 1024], "7", codecs);
    std::fs::write(path.join("zarr.json"), meta).unwrap();
    ZarrArray::open(&path).unwrap()
}

#[test]
fn big_endian_and_f_order_chunks_read_in_native_c_order() {
    let mut rng = SmallRng::seed_from_u64(0xbe_f0);
    let dir = TempDir::new("streamed-be");
    let big = r#"{"name": "bytes", "configuration": {"endian": "big"}}"#;
    let zstd = r#"{"name": "zstd", "configuration": {"level": 1, "checksum": false}}"#;
    let transpose = r#"{"name": "transpose", "configuration": {"order": [1, 0]}}"#;
    for (name, codecs) in [
        // Streamed, swapped per piece: zstd with crc32c, and uncompressed (pread pieces).
        (
            "be_zstd_crc",
            format!(r#"[{big}, {zstd}, {{"name": "crc32c"}}]"#),
        ),
        ("be_none", format!("[{big}]")),
        // Transposed: two-byte runs, decoded whole through the scratch.
        (
            "be_f_zstd_crc",
            format!(r#"[{transpose}, {big}, {zstd}, {{"name": "crc32c"}}]"#),
        ),
    ] {
        let a = int16_array(&dir, name, &codecs);
        let v: Vec<i16> = (0..1500 * 1100)
            .map(|i| (i % 3001) as i16 - 1500 + (rng.random::<u8>() as i16 & 7))
            .collect();
        let nd = NDBuffer::from_ndarray(ndarray::Array2::from_shape_vec((1500, 1100), v).unwrap());
        // Chunk [1, 1] stays missing: the fill value.
        let part = |r: Range<usize>, c: Range<usize>| {
            nd.get(&[r.into(), c.into()])
                .unwrap()
                .copy_order(Order::C)
                .unwrap()
        };
        a.write_subset(&[0, 0], &part(0..1024, 0..1100)).unwrap();
        a.write_subset(&[1024, 0], &part(1024..1500, 0..1024))
            .unwrap();
        assert!(!a.chunk_is_stored(&[1, 1]).unwrap());
        let mut all = bytes_of(&nd);
        let fill: Vec<u8> = std::iter::repeat_n(7i16.to_ne_bytes(), 476 * 76)
            .flatten()
            .collect();
        zarrs_common::put_box(&mut all, &[1500, 1100], 2, &[1024, 1024], &[476, 76], &fill);
        check_every_read(&a, &all, 2, &mut rng, name);
    }
}

#[test]
fn zstd_frames_the_whole_chunk_decoder_accepts_stream_too() {
    let dir = TempDir::new("streamed-frames");
    let mut rng = SmallRng::seed_from_u64(11);
    let a = ZarrArray::create(
        dir.join("a"),
        &ArraySpec::new(&[1024, 1024], &[1024, 512], Dtype::FLOAT32)
            .with_compressor(Compressor::Zstd { level: 1 }),
    )
    .unwrap();
    let v = f32_values(1 << 20, &mut rng);
    let nd = NDBuffer::from_ndarray(ndarray::Array2::from_shape_vec((1024, 1024), v).unwrap());
    a.write_subset(&[0, 0], &nd).unwrap();
    let all = bytes_of(&nd);
    let chunk = dir.join("a").join("c").join("0").join("1");
    let original = std::fs::read(&chunk).unwrap();
    let decoded = sub_box(&all, &[1024, 1024], 4, &[0, 512], &[1024, 512]);
    // An empty frame that asks for a 2 GiB window and declares no size.
    let empty_big_window = {
        let mut out = Vec::new();
        let mut enc = zstd::stream::Encoder::new(&mut out, 1).unwrap();
        enc.include_contentsize(false).unwrap();
        enc.set_parameter(zstd::stream::raw::CParameter::WindowLog(31))
            .unwrap();
        enc.finish().unwrap();
        out
    };
    let skippable = [0x50u8, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 1, 2, 3];
    let undeclared = {
        let mut out = Vec::new();
        let mut enc = zstd::stream::Encoder::new(&mut out, 1).unwrap();
        enc.include_contentsize(false).unwrap();
        std::io::Write::write_all(&mut enc, &decoded).unwrap();
        enc.finish().unwrap();
        out
    };
    for (case, bytes) in [
        (
            "a skippable frame after",
            [original.as_slice(), &skippable].concat(),
        ),
        (
            "an empty frame with a 2 GiB window after",
            [original.as_slice(), &empty_big_window].concat(),
        ),
        ("no declared size (decoded whole)", undeclared),
    ] {
        std::fs::write(&chunk, &bytes).unwrap();
        assert!(bytes_of(&a.read(..).to(&HOST).unwrap()) == all, "{case}");
        let mut into = vec![0u8; all.len()];
        a.read(..).into(&mut into).unwrap();
        assert!(into == all, "{case}: into");
    }
}

#[test]
fn damaged_large_chunks_are_errors_naming_them() {
    let dir = TempDir::new("streamed-bad");
    let mut rng = SmallRng::seed_from_u64(7);
    for (name, comp) in [
        ("none", Compressor::None),
        ("zstd", Compressor::Zstd { level: 1 }),
        ("gzip", Compressor::Gzip { level: 1 }),
        ("zlib", Compressor::Zlib { level: 1 }),
    ] {
        let a = ZarrArray::create(
            dir.join(name),
            &ArraySpec::new(&[1024, 1024], &[1024, 512], Dtype::FLOAT32).with_compressor(comp),
        )
        .unwrap();
        let v = f32_values(1 << 20, &mut rng);
        a.write_subset(
            &[0, 0],
            &NDBuffer::from_ndarray(ndarray::Array2::from_shape_vec((1024, 1024), v).unwrap()),
        )
        .unwrap();
        let chunk = dir.join(name).join("c").join("0").join("1");
        let original = std::fs::read(&chunk).unwrap();
        let decoded: Vec<u8> = f32_values(1 << 19, &mut rng)
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect();
        let mut cases: Vec<(&str, Vec<u8>)> = vec![
            ("truncated", original[..original.len() / 2].to_vec()),
            ("one byte short", original[..original.len() - 1].to_vec()),
        ];
        if name != "gzip" && name != "zlib" {
            // (A gzip member or zlib stream ends where its last block and trailer say;
            // bytes after it are not read, as by the whole-chunk decoder.)
            cases.push(("one byte more", [original.as_slice(), &[0]].concat()));
        }
        match name {
            "zstd" => {
                // A second frame after the first; a frame that does not declare its
                // size and decodes to more than the chunk; one declaring another size.
                let extra = zstd::bulk::compress(&decoded[..4096], 1).unwrap();
                cases.push(("a second frame", [original.as_slice(), &extra].concat()));
                let mut undeclared = Vec::new();
                {
                    let mut enc = zstd::stream::Encoder::new(&mut undeclared, 1).unwrap();
                    enc.include_contentsize(false).unwrap();
                    std::io::Write::write_all(
                        &mut enc,
                        &[decoded.as_slice(), &decoded[..8]].concat(),
                    )
                    .unwrap();
                    enc.finish().unwrap();
                }
                cases.push(("undeclared, 8 bytes too long", undeclared));
                cases.push((
                    "declares half",
                    zstd::bulk::compress(&decoded[..decoded.len() / 2], 1).unwrap(),
                ));
            }
            "gzip" => {
                let mut enc =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(1));
                std::io::Write::write_all(&mut enc, &[decoded.as_slice(), &decoded[..8]].concat())
                    .unwrap();
                cases.push(("8 bytes too long", enc.finish().unwrap()));
            }
            "zlib" => {
                let mut enc =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(1));
                std::io::Write::write_all(&mut enc, &[decoded.as_slice(), &decoded[..8]].concat())
                    .unwrap();
                cases.push(("8 bytes too long", enc.finish().unwrap()));
                let mut adler = original.clone();
                let last = adler.len() - 1;
                adler[last] ^= 1;
                cases.push(("a damaged Adler-32", adler));
            }
            _ => {}
        }
        for (case, bytes) in cases {
            std::fs::write(&chunk, &bytes).unwrap();
            let mut into = vec![0u8; 1 << 22];
            for (path, r) in [
                ("read_all", a.read(..).to(&HOST).map(drop)),
                (
                    "read_subset",
                    a.read(&[100..900, 400..700]).to(&HOST).map(drop),
                ),
                ("read_all_into", a.read(..).into(&mut into).map(drop)),
                (
                    "read_chunk",
                    a.read_chunks(&[&[0, 1]])
                        .to(&HOST)
                        .map(|mut v| v.remove(0))
                        .map(drop),
                ),
            ] {
                let e = r.expect_err(&format!("{name} {case} {path}")).to_string();
                assert!(e.contains("c/0/1"), "{name} {case} {path}: {e}");
            }
        }
        std::fs::write(&chunk, &original).unwrap();
        assert!(a.read(..).to(&HOST).is_ok());
    }
}
