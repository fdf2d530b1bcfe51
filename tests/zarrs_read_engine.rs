//! The read engine on the host: chunk files that are not regular files are errors that
//! name the path (a FIFO never blocks the read), wrong-size and bomb chunks are refused
//! on every read path with the chunk's key, a chain the engine does not decode itself
//! goes through zarrs (and says so), and reports count what ran.
#![cfg(feature = "zarr")]

use std::sync::Arc;

use devbuf::zarr::{ArraySpec, Compressor, GpuTuning, ReadOptions, ZarrArray};
use devbuf::zarr::{AxisSel, BufferPrototype, Dtype, MemoryStore, NDBuffer};

#[path = "common/zarrs.rs"]
mod zarrs_common;
use zarrs_common::TempDir;

const HOST: BufferPrototype = BufferPrototype::Host;

fn values(n: usize) -> Vec<i32> {
    let mut s = 0x1234_5678u32;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s as i32
        })
        .collect()
}

fn make(dir: &TempDir, name: &str, comp: Compressor) -> ZarrArray {
    let a = ZarrArray::create(
        dir.join(name),
        &ArraySpec::new(&[64, 48], &[16, 16], Dtype::INT32).with_compressor(comp),
    )
    .unwrap();
    let v = ndarray::Array2::from_shape_vec((64, 48), values(64 * 48)).unwrap();
    a.write_subset(&[0, 0], &NDBuffer::from_ndarray(v)).unwrap();
    a
}

/// A named read of the array.
type Read<'a> = (&'static str, Box<dyn Fn() -> devbuf::Result<()> + 'a>);

/// Every read path, each expected to fail naming `key`.
fn all_reads_fail(a: &ZarrArray, key: &str, want: &str) {
    let reads: Vec<Read<'_>> = vec![
        ("read_all", Box::new(|| a.read(..).to(&HOST).map(drop))),
        (
            "read_subset",
            Box::new(|| a.read(&[10..40, 5..40]).to(&HOST).map(drop)),
        ),
        (
            "read_chunk",
            Box::new(|| {
                a.read_chunks(&[&[2, 1]])
                    .to(&HOST)
                    .map(|mut v| v.remove(0))
                    .map(drop)
            }),
        ),
        (
            "read_chunks",
            Box::new(|| a.read_chunks(&[[0u64, 0], [2, 1]]).to(&HOST).map(drop)),
        ),
        (
            "read",
            Box::new(|| a.read([AxisSel::Index(35)]).to(&HOST).map(drop)),
        ),
        (
            "read_subset_into",
            Box::new(|| {
                let mut out = vec![0u8; 30 * 35 * 4];
                a.read(&[10..40, 5..40]).into(&mut out).map(drop)
            }),
        ),
    ];
    for (name, r) in reads {
        let e = r().expect_err(name).to_string();
        assert!(e.contains(key), "{name}: {e}");
        assert!(e.contains(want), "{name}: {e}");
    }
}

#[test]
fn odd_chunk_files_are_errors_not_hangs() {
    let dir = TempDir::new("odd-files");
    let a = make(&dir, "a", Compressor::Zstd { level: 1 });
    let chunk = dir.join("a").join("c").join("2").join("1");
    std::fs::remove_file(&chunk).unwrap();
    // A FIFO: opening it without a writer would block a plain open forever.
    let c = std::ffi::CString::new(chunk.to_str().unwrap()).unwrap();
    // Safety: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    all_reads_fail(&a, "c/2/1", "not a regular file");
    std::fs::remove_file(&chunk).unwrap();
    // A directory, and a symbolic link to /dev/zero.
    std::fs::create_dir(&chunk).unwrap();
    all_reads_fail(&a, "c/2/1", "not a regular file");
    std::fs::remove_dir(&chunk).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &chunk).unwrap();
    all_reads_fail(&a, "c/2/1", "not a regular file");
}

#[test]
fn wrong_size_and_bomb_chunks_are_refused_on_every_path() {
    let dir = TempDir::new("bombs");
    // Zeros written `mib` MiB at a time into `enc`.
    fn zeros<W: std::io::Write>(mut enc: W, mib: usize) -> W {
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..mib {
            enc.write_all(&zeros).unwrap();
        }
        enc
    }
    let mut zstd_enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    zstd_enc.set_pledged_src_size(Some(1 << 30)).unwrap();
    let level = flate2::Compression::new(9);
    let bombs = [
        zeros(zstd_enc, 1024).finish().unwrap(),
        zeros(flate2::write::GzEncoder::new(Vec::new(), level), 256)
            .finish()
            .unwrap(),
        zeros(flate2::write::ZlibEncoder::new(Vec::new(), level), 256)
            .finish()
            .unwrap(),
    ];
    for (name, comp) in [
        ("none", Compressor::None),
        ("zstd", Compressor::Zstd { level: 1 }),
        ("gzip", Compressor::Gzip { level: 1 }),
        ("zlib", Compressor::Zlib { level: 1 }),
        ("blosc", Compressor::Blosc { level: 5 }),
    ] {
        let a = make(&dir, name, comp);
        let chunk = dir.join(name).join("c").join("2").join("1");
        let original = std::fs::read(&chunk).unwrap();
        // Truncated.
        std::fs::write(&chunk, &original[..original.len() / 2]).unwrap();
        all_reads_fail(&a, "c/2/1", "");
        // A zstd frame of 1 GiB of zeros in a 1 KiB chunk: refused before decoding
        // (the process would otherwise allocate and fill 1 GiB); gzip and zlib bombs.
        for bomb in &bombs {
            std::fs::write(&chunk, bomb).unwrap();
            all_reads_fail(&a, "c/2/1", "");
        }
        std::fs::write(&chunk, &original).unwrap();
        assert!(a.read(..).to(&HOST).is_ok(), "{name}: restored");
    }
}

#[test]
fn reports_say_what_ran_and_stores_without_a_directory_work() {
    let dir = TempDir::new("report");
    let a = make(&dir, "a", Compressor::Zstd { level: 1 });
    std::fs::remove_file(dir.join("a").join("c").join("0").join("0")).unwrap();
    let mut r = devbuf::zarr::ReadReport::default();
    let v = a.read(..).report(&mut r).to(&HOST).unwrap();
    assert_eq!(v.shape(), &[64, 48]);
    assert_eq!((r.decoder, r.codecs.as_str()), ("cpu", "zstd"));
    assert_eq!((r.cpu_chunks, r.missing_chunks), (12, 1));
    assert_eq!(r.decoded_bytes, 12 * 16 * 16 * 4);
    let mut r = devbuf::zarr::ReadReport::default();
    let _ = a.read(&[0..16, 0..16]).report(&mut r).to(&HOST).unwrap();
    assert_eq!(r.cpu_chunks, 1);
    assert!(r.to_string().contains("decoder cpu"));

    // The same array in a memory store (no files: the store's get).
    let store = Arc::new(MemoryStore::new());
    let m = ZarrArray::create(
        (store, "x"),
        &ArraySpec::new(&[64, 48], &[16, 16], Dtype::INT32)
            .with_compressor(Compressor::Zstd { level: 1 }),
    )
    .unwrap();
    m.write_subset(&[0, 0], &a.read(..).to(&HOST).unwrap())
        .unwrap();
    let want = a.read(..).to(&HOST).unwrap().to_ndarray::<i32>().unwrap();
    assert_eq!(
        m.read(..).to(&HOST).unwrap().to_ndarray::<i32>().unwrap(),
        want
    );
    let mut f = ZarrArray::open(dir.join("a")).unwrap();
    for threads in [1, 2, 7] {
        f.set_read_options(ReadOptions {
            threads: Some(threads),
            ..ReadOptions::default()
        })
        .unwrap();
        let mut r = devbuf::zarr::ReadReport::default();
        let v = f.read(..).report(&mut r).to(&HOST).unwrap();
        assert_eq!(v.to_ndarray::<i32>().unwrap(), want);
        assert!(r.workers >= 1 && r.workers <= threads, "{r}");
    }
    assert!(
        f.set_read_options(ReadOptions {
            threads: Some(0),
            ..ReadOptions::default()
        })
        .is_err()
    );
}

/// A transpose that is neither C nor F order: zarrs decodes, the report says so, and
/// the values are right.
#[test]
fn chains_the_engine_does_not_decode_go_through_zarrs() {
    let dir = TempDir::new("zarrs-chain");
    let path = dir.join("t");
    std::fs::create_dir_all(&path).unwrap();
    std::fs::write(
        path.join("zarr.json"),
        r#"{"zarr_format":3,"node_type":"array","shape":[4,3,2],"data_type":"int16",
        "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[4,3,2]}},
        "chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
        "fill_value":0,"codecs":[{"name":"transpose","configuration":{"order":[1,0,2]}},
        {"name":"bytes","configuration":{"endian":"little"}}]}"#,
    )
    .unwrap();
    let a = ZarrArray::open(&path).unwrap();
    let v: Vec<i16> = (0..24).collect();
    a.write_subset(
        &[0, 0, 0],
        &NDBuffer::from_ndarray(ndarray::Array3::from_shape_vec((4, 3, 2), v.clone()).unwrap()),
    )
    .unwrap();
    let mut r = devbuf::zarr::ReadReport::default();
    let got = a.read(..).report(&mut r).to(&HOST).unwrap();
    assert!(r.codecs.starts_with("zarrs"), "{r}");
    assert_eq!(
        got.to_ndarray::<i16>()
            .unwrap()
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        v
    );
    let s = a.read(&[1..3, 0..3, 1..2]).to(&HOST).unwrap();
    assert_eq!(
        s.to_ndarray::<i16>()
            .unwrap()
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        vec![7, 9, 11, 13, 15, 17]
    );
}

/// A read whose result cannot be held is an error naming the size, before any chunk is
/// planned or read (it used to abort the process).
#[test]
fn reads_too_large_for_memory_are_errors() {
    let dir = TempDir::new("huge");
    let path = dir.join("h");
    std::fs::create_dir_all(&path).unwrap();
    std::fs::write(
        path.join("zarr.json"),
        r#"{"zarr_format":3,"node_type":"array","shape":[576460752303423488],"data_type":"int64",
        "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[1048576]}},
        "chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
        "fill_value":0,"codecs":[{"name":"bytes","configuration":{"endian":"little"}}]}"#,
    )
    .unwrap();
    let a = ZarrArray::open(&path).unwrap();
    let e = a.read(..).to(&HOST).unwrap_err().to_string();
    assert!(e.contains("4611686018427387904"), "{e}");
    // A small part of it reads fine (as the fill value).
    let five = std::slice::from_ref(&(5..10));
    let v = a.read(five).to(&HOST).unwrap();
    assert_eq!(
        v.to_ndarray::<i64>()
            .unwrap()
            .iter()
            .copied()
            .collect::<Vec<i64>>(),
        vec![0; 5]
    );
}

/// A zarr v2 array of `values(64 * 48)` (int32, 16 x 16 chunks) with `compressor`,
/// its chunk files written here by `encode` the way numcodecs writes them.
fn v2_array(dir: &TempDir, name: &str, compressor: &str, encode: &dyn Fn(&[u8]) -> Vec<u8>) {
    let path = dir.join(name);
    std::fs::create_dir_all(&path).unwrap();
    std::fs::write(
        path.join(".zarray"),
        format!(
            r#"{{"zarr_format": 2, "shape": [64, 48], "chunks": [16, 16], "dtype": "<i4",
                "compressor": {compressor}, "fill_value": 0, "order": "C", "filters": null}}"#
        ),
    )
    .unwrap();
    let all = values(64 * 48);
    for ci in 0..4usize {
        for cj in 0..3usize {
            let chunk: Vec<u8> = (0..16)
                .flat_map(|r| {
                    let at = (ci * 16 + r) * 48 + cj * 16;
                    all[at..at + 16].to_vec()
                })
                .flat_map(|v| v.to_le_bytes())
                .collect();
            std::fs::write(path.join(format!("{ci}.{cj}")), encode(&chunk)).unwrap();
        }
    }
}

/// The array of [`v2_array`] read by the engine (the report names `codec`, not zarrs)
/// on every read path, bit-exactly.
fn check_v2_reads(a: &ZarrArray, codec: &str) {
    let mut r = devbuf::zarr::ReadReport::default();
    let v = a.read(..).report(&mut r).to(&HOST).unwrap();
    assert_eq!(r.codecs, codec, "{r}");
    let want = ndarray::Array2::from_shape_vec((64, 48), values(64 * 48)).unwrap();
    assert_eq!(v.to_ndarray::<i32>().unwrap(), want.clone().into_dyn());
    let sub = a.read(&[10..40, 5..40]).to(&HOST).unwrap();
    assert_eq!(
        sub.to_ndarray::<i32>().unwrap(),
        want.slice(ndarray::s![10..40, 5..40]).to_owned().into_dyn()
    );
    let mut into = vec![0u8; 30 * 35 * 4];
    a.read(&[10..40, 5..40]).into(&mut into).unwrap();
    assert_eq!(into, sub.to_buffer().unwrap().to_host().unwrap());
}

/// zarr v2's `zlib` compressor (numcodecs' `Zlib`: one zlib stream per chunk): the
/// engine decodes it itself, on every read path; a damaged Adler-32, a truncated stream
/// and one that decodes to the wrong size are errors naming the chunk.
#[test]
fn zarr_v2_zlib_chunks_are_decoded_by_the_engine() {
    let dir = TempDir::new("v2-zlib");
    let zlib = |bytes: &[u8]| {
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(1));
        std::io::Write::write_all(&mut enc, bytes).unwrap();
        enc.finish().unwrap()
    };
    v2_array(&dir, "z", r#"{"id": "zlib", "level": 1}"#, &zlib);
    let path = dir.join("z");
    let a = ZarrArray::open(&path).unwrap();
    check_v2_reads(&a, "zlib");
    let chunk = path.join("2.1");
    let original = std::fs::read(&chunk).unwrap();
    let mut adler = original.clone();
    let last = adler.len() - 1;
    adler[last] ^= 1;
    std::fs::write(&chunk, &adler).unwrap();
    all_reads_fail(&a, "2.1", "zlib");
    std::fs::write(&chunk, &original[..original.len() / 2]).unwrap();
    all_reads_fail(&a, "2.1", "zlib");
    std::fs::write(&chunk, zlib(&vec![7u8; 16 * 16 * 4 + 4])).unwrap();
    all_reads_fail(&a, "2.1", "more than 1024 bytes");
    std::fs::write(&chunk, &original).unwrap();
    check_v2_reads(&a, "zlib");
}

/// zarr v2's `lz4` compressor (numcodecs' `LZ4`: the size, then an LZ4 block), which
/// zarrs has no codec for: devbuf's codec opens it and the engine decodes it; a size
/// prefix that lies (a bomb's among them), a truncated block and one that decodes to
/// more than its prefix says are errors naming the chunk, before any large allocation. A v3 array made with
/// `Compressor::Lz4` round-trips, a partial chunk write too (zarrs decodes it through
/// devbuf's codec).
#[test]
fn lz4_chunks_open_and_are_decoded_by_the_engine() {
    let dir = TempDir::new("v2-lz4");
    v2_array(&dir, "l", r#"{"id": "lz4", "acceleration": 1}"#, &|b| {
        lz4_flex::block::compress_prepend_size(b)
    });
    let path = dir.join("l");
    let a = ZarrArray::open(&path).unwrap();
    check_v2_reads(&a, "lz4");
    let chunk = path.join("2.1");
    let original = std::fs::read(&chunk).unwrap();
    let mut bomb = original.clone();
    bomb[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(&chunk, &bomb).unwrap();
    all_reads_fail(&a, "2.1", "declares 4294967295 bytes");
    std::fs::write(&chunk, &original[..original.len() / 2]).unwrap();
    all_reads_fail(&a, "2.1", "lz4");
    std::fs::write(&chunk, &original[..3]).unwrap();
    all_reads_fail(&a, "2.1", "prefix");
    // A block of the right size behind a prefix one byte short.
    let mut short = original.clone();
    short[..4].copy_from_slice(&1023u32.to_le_bytes());
    std::fs::write(&chunk, &short).unwrap();
    all_reads_fail(&a, "2.1", "declares 1023 bytes");
    // A block that decodes to more than its prefix says.
    let mut long = lz4_flex::block::compress_prepend_size(&[5u8; 1030]);
    long[..4].copy_from_slice(&1024u32.to_le_bytes());
    std::fs::write(&chunk, &long).unwrap();
    all_reads_fail(&a, "2.1", "lz4");
    std::fs::write(&chunk, &original).unwrap();
    check_v2_reads(&a, "lz4");

    let v3 = make(&dir, "v3", Compressor::Lz4);
    let meta = std::fs::read_to_string(dir.join("v3").join("zarr.json")).unwrap();
    assert!(meta.contains("numcodecs.lz4"), "{meta}");
    let want = ndarray::Array2::from_shape_vec((64, 48), values(64 * 48)).unwrap();
    assert_eq!(
        v3.read(..).to(&HOST).unwrap().to_ndarray::<i32>().unwrap(),
        want.clone().into_dyn()
    );
    // A partial chunk: zarrs reads the chunk back through devbuf's codec.
    let patch = ndarray::Array2::from_shape_vec((3, 5), vec![-7i32; 15]).unwrap();
    v3.write_subset(&[17, 18], &NDBuffer::from_ndarray(patch))
        .unwrap();
    let mut want = want;
    want.slice_mut(ndarray::s![17..20, 18..23]).fill(-7);
    let mut r = devbuf::zarr::ReadReport::default();
    let v = ZarrArray::open(dir.join("v3"))
        .unwrap()
        .read(..)
        .report(&mut r)
        .to(&HOST)
        .unwrap();
    assert_eq!(r.codecs, "lz4", "{r}");
    assert_eq!(v.to_ndarray::<i32>().unwrap(), want.into_dyn());
}

/// `ArraySpec::with_crc32c`: each chunk carries a crc32c after its compressor, in the
/// metadata too; the engine verifies it (a flipped byte is an error naming the chunk).
#[test]
fn crc32c_chunks_are_written_and_verified() {
    let dir = TempDir::new("crc");
    for (name, comp) in [
        ("zlib", Compressor::Zlib { level: 1 }),
        ("none", Compressor::None),
    ] {
        let a = ZarrArray::create(
            dir.join(name),
            &ArraySpec::new(&[64, 48], &[16, 16], Dtype::INT32)
                .with_compressor(comp)
                .with_crc32c(),
        )
        .unwrap();
        let v = ndarray::Array2::from_shape_vec((64, 48), values(64 * 48)).unwrap();
        a.write_subset(&[0, 0], &NDBuffer::from_ndarray(v.clone()))
            .unwrap();
        let meta = std::fs::read_to_string(dir.join(name).join("zarr.json")).unwrap();
        assert!(meta.contains("crc32c"), "{meta}");
        let mut r = devbuf::zarr::ReadReport::default();
        let got = a.read(..).report(&mut r).to(&HOST).unwrap();
        assert_eq!(got.to_ndarray::<i32>().unwrap(), v.into_dyn());
        assert!(!r.codecs.starts_with("zarrs"), "{r}");
        let chunk = dir.join(name).join("c").join("2").join("1");
        let original = std::fs::read(&chunk).unwrap();
        let mut flipped = original.clone();
        flipped[original.len() / 2] ^= 0x10;
        std::fs::write(&chunk, &flipped).unwrap();
        all_reads_fail(&a, "c/2/1", "crc32c");
        std::fs::write(&chunk, &original).unwrap();
    }
}

/// Every tuning knob is a `ReadOptions` field: values out of range are refused naming the
/// field and its range, and reads at the edges of the ranges return the same values.
#[test]
fn read_options_are_checked_and_every_knob_keeps_reads_exact() {
    let dir = TempDir::new("options");
    let mut a = make(&dir, "a", Compressor::Zstd { level: 1 });
    let want = a.read(..).to(&HOST).unwrap().to_ndarray::<i32>().unwrap();
    let d = ReadOptions::default;
    let g = GpuTuning::default;
    let refused = [
        (
            ReadOptions {
                threads: Some(0),
                ..d()
            },
            "threads is 0; valid: 1 to 1024",
        ),
        (
            ReadOptions {
                threads: Some(1025),
                ..d()
            },
            "threads is 1025; valid: 1 to 1024",
        ),
        (
            ReadOptions {
                slot_bytes: 0,
                ..d()
            },
            "slot_bytes is 0; valid: 1 to 1073741824",
        ),
        (
            ReadOptions {
                lane_streams: 65,
                ..d()
            },
            "lane_streams is 65; valid: 0 to 64",
        ),
        (
            ReadOptions {
                stream_piece_bytes: 63,
                ..d()
            },
            "stream_piece_bytes is 63; valid: 64 to 67108864",
        ),
        (
            ReadOptions {
                gpu: GpuTuning {
                    claim_bytes: 1,
                    ..g()
                },
                ..d()
            },
            "gpu.claim_bytes is 1; valid: 1048576 to 4294967296",
        ),
        (
            ReadOptions {
                gpu: GpuTuning {
                    claims_per_worker: Some(17),
                    ..g()
                },
                ..d()
            },
            "gpu.claims_per_worker is 17; valid: 1 to 16",
        ),
        (
            ReadOptions {
                gpu: GpuTuning {
                    claims_in_flight: Some(0),
                    ..g()
                },
                ..d()
            },
            "gpu.claims_in_flight is 0; valid: 1 to 64",
        ),
        (
            ReadOptions {
                gpu: GpuTuning {
                    readers: Some(65),
                    ..g()
                },
                ..d()
            },
            "gpu.readers is 65; valid: 1 to 64",
        ),
        (
            ReadOptions {
                gpu: GpuTuning {
                    spread: Some(0),
                    ..g()
                },
                ..d()
            },
            "gpu.spread is 0; valid: 1 to 64",
        ),
        (
            ReadOptions {
                gpu: GpuTuning {
                    ramp: Some(9),
                    ..g()
                },
                ..d()
            },
            "gpu.ramp is 9; valid: 0 to 8",
        ),
    ];
    for (options, message) in refused {
        let e = a.set_read_options(options).unwrap_err();
        assert!(matches!(e, devbuf::Error::InvalidArgument(_)), "{e}");
        assert!(e.to_string().contains(message), "{e} (wanted: {message})");
    }
    let kept = [
        // Every chunk streamed, in the smallest pieces, without prefaulting.
        ReadOptions {
            stream_min_bytes: 0,
            stream_piece_bytes: 64,
            prefault: false,
            threads: Some(3),
            ..d()
        },
        // Pieces of 100 bytes (rounded up to 128); chunks of any size streamed.
        ReadOptions {
            stream_min_bytes: 0,
            stream_piece_bytes: 100,
            ..d()
        },
        ReadOptions {
            stream_min_bytes: usize::MAX,
            lane_streams: 0,
            ..d()
        },
        ReadOptions {
            gpu: GpuTuning {
                claims_per_worker: Some(16),
                readers: Some(1),
                ramp: Some(8),
                cost_model: false,
                ..g()
            },
            ..d()
        },
    ];
    for options in kept {
        let what = format!("{options:?}");
        a.set_read_options(options).unwrap();
        assert_eq!(
            a.read(..).to(&HOST).unwrap().to_ndarray::<i32>().unwrap(),
            want,
            "{what}"
        );
        let part = a
            .read(&[3..40, 5..47])
            .to(&HOST)
            .unwrap()
            .to_ndarray::<i32>()
            .unwrap();
        assert_eq!(
            part,
            want.slice(ndarray::s![3..40, 5..47]).into_dyn(),
            "{what}"
        );
    }
}

/// A host read's result memory is recycled: once a large result is dropped, the next
/// read of about its size gets the same pages back, with the earlier array's bytes
/// still in them. Every byte of the new result must be the new array's: chunks that
/// are stored (small ones placed from scratch, 2 MiB ones streamed in pieces) and the
/// fill value of chunks that are not, zero or not.
#[test]
fn recycled_result_memory_holds_only_the_new_reads_bytes() {
    let dir = TempDir::new("recycled");
    let (rows, cols) = (1024usize, 2048usize); // 8 MiB of int32
    let old = values(rows * cols);
    let first = ZarrArray::create(
        dir.join("first"),
        &ArraySpec::new(&[rows as u64, cols as u64], &[256, 256], Dtype::INT32)
            .with_compressor(Compressor::Zstd { level: 1 }),
    )
    .unwrap();
    let v = ndarray::Array2::from_shape_vec((rows, cols), old.clone()).unwrap();
    first
        .write_subset(&[0, 0], &NDBuffer::from_ndarray(v))
        .unwrap();
    for (name, chunk, fill) in [
        ("zero-fill", [256u64, 256], 0i32),
        ("fill-7", [256, 256], 7),
        ("streamed", [512, 1024], 0),
    ] {
        let r = first.read(..).to(&HOST).unwrap();
        let bytes = r.to_buffer().unwrap().to_host().unwrap();
        let at = bytes.as_ptr() as usize;
        assert_eq!(bytes.len(), rows * cols * 4);
        drop((r, bytes));
        // Half the chunks written: the top rows, then one chunk further down.
        let a = ZarrArray::create(
            dir.join(name),
            &ArraySpec::new(&[rows as u64, cols as u64], &chunk, Dtype::INT32)
                .with_compressor(Compressor::Zstd { level: 1 })
                .with_fill_value(devbuf::zarr::Scalar::from(fill)),
        )
        .unwrap();
        let top = chunk[0] as usize;
        let new: Vec<i32> = (0..top * cols).map(|i| i as i32 * 3 + 1).collect();
        let v = ndarray::Array2::from_shape_vec((top, cols), new.clone()).unwrap();
        a.write_subset(&[0, 0], &NDBuffer::from_ndarray(v)).unwrap();
        let got = a.read(..).to(&HOST).unwrap();
        let got = got.to_buffer().unwrap().to_host().unwrap();
        assert_eq!(
            got.as_ptr() as usize,
            at,
            "{name}: the dropped result is reused"
        );
        let want: Vec<u8> = new
            .iter()
            .copied()
            .chain(std::iter::repeat_n(fill, (rows - top) * cols))
            .flat_map(i32::to_ne_bytes)
            .collect();
        assert!(got[..] == want[..], "{name}: only the new array's bytes");
    }
}
