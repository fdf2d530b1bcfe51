//! Writing zarr arrays through `devbuf::zarr` and reading them back: every
//! element type in both byte orders and with every compressor, sharded and not, zarr
//! v2 arrays (F order, big-endian) written in place, devbuf stores through the store
//! adapter, zarr-python reading what devbuf wrote (when python3 and zarr are
//! installed), and clear errors for bad input.
//!
//! Run with `cargo test --features zarr`.
#![cfg(feature = "zarr")]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use devbuf::ElementType;
use devbuf::Error;
use devbuf::zarr::{ArraySpec, Compressor, ZarrArray};
use devbuf::zarr::{
    AxisSel, BufferPrototype, Dtype, Endianness, MemoryStore, NDBuffer, Order, Scalar, Store,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[path = "common/arrays.rs"]
mod arrays;
#[path = "common/random.rs"]
mod random;
#[path = "common/zarrs.rs"]
mod zarrs_common;
use arrays::random_values;
use zarrs_common::{TempDir, files_under, grid_indices, put_box, sub_box};

const HOST: BufferPrototype = BufferPrototype::Host;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/zarr")
        .join(name)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

fn nd(bytes: Vec<u8>, shape: &[u64], element: ElementType) -> NDBuffer {
    let shape: Vec<usize> = shape.iter().map(|&s| s as usize).collect();
    NDBuffer::from_memory(bytes, &shape, Dtype::from(element), Order::C).unwrap()
}

fn bytes_of(nd: &NDBuffer) -> Vec<u8> {
    nd.to_buffer().unwrap().to_host().unwrap().to_vec()
}

/// Writes the whole array, then chunk by chunk (values in other byte orders and
/// layouts), then random boxes, checking the whole array against a model each time.
fn round_trip(a: &ZarrArray, rng: &mut SmallRng, what: &str) -> Vec<u8> {
    let m = a.metadata().clone();
    let element = m.stored_dtype.element();
    let elem = element.size();
    let n: u64 = m.shape.iter().product();

    // 1. Whole array.
    let mut model = random_values(rng, n as usize, Dtype::from(element));
    a.write_subset(
        &vec![0; m.shape.len()],
        &nd(model.clone(), &m.shape, element),
    )
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        bytes_of(&a.read(..).to(&HOST).unwrap()) == model,
        "{what}: whole"
    );

    // 2. Every chunk, as big-endian or F-order values (converted on write).
    let indices = grid_indices(&m.grid_shape);
    let mut values = Vec::new();
    for (k, idx) in indices.iter().enumerate() {
        let r = a.chunk_ranges(idx).unwrap();
        let start: Vec<u64> = r.iter().map(|r| r.start).collect();
        let shape: Vec<u64> = r.iter().map(|r| r.end - r.start).collect();
        let count: u64 = shape.iter().product();
        let bytes = random_values(rng, count as usize, Dtype::from(element));
        put_box(&mut model, &m.shape, elem, &start, &shape, &bytes);
        let v = nd(bytes, &shape, element);
        let v = match k % 3 {
            0 => v.astype(Dtype::new(element, Endianness::Big)).unwrap(),
            1 => v.copy_order(Order::F).unwrap(),
            _ => v,
        };
        values.push(v);
    }
    a.write_chunks(&indices, &values)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        bytes_of(&a.read(..).to(&HOST).unwrap()) == model,
        "{what}: chunks"
    );

    // 3. Random boxes (partial chunks: read, modify, write).
    for _ in 0..6 {
        let mut start = Vec::new();
        let mut shape = Vec::new();
        for &s in &m.shape {
            let b = rng.random_range(0..s);
            let e = rng.random_range(b..=s);
            start.push(b);
            shape.push(e - b);
        }
        let count: u64 = shape.iter().product();
        let bytes = random_values(rng, count as usize, Dtype::from(element));
        put_box(&mut model, &m.shape, elem, &start, &shape, &bytes);
        a.write_subset(&start, &nd(bytes, &shape, element))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let ranges: Vec<_> = start.iter().zip(&shape).map(|(&s, &n)| s..s + n).collect();
        assert!(
            bytes_of(&a.read(&ranges).to(&HOST).unwrap())
                == sub_box(&model, &m.shape, elem, &start, &shape),
            "{what}: box {ranges:?}"
        );
    }
    assert!(
        bytes_of(&a.read(..).to(&HOST).unwrap()) == model,
        "{what}: boxes"
    );
    model
}

#[test]
fn every_dtype_byte_order_and_compressor_round_trips() {
    let dir = TempDir::new("dtypes");
    let mut rng = SmallRng::seed_from_u64(0xd7e5);
    let compressors = [
        Compressor::None,
        Compressor::Zstd { level: 3 },
        Compressor::Gzip { level: 5 },
        Compressor::Blosc { level: 5 },
    ];
    let mut k = 0;
    for element in ElementType::ALL {
        let orders: &[Endianness] = if element.size() > 1 {
            &[Endianness::Little, Endianness::Big]
        } else {
            &[Endianness::Little]
        };
        for &bo in orders {
            for sharded in [false, true] {
                let compressor = compressors[k % compressors.len()];
                k += 1;
                let dtype = Dtype::new(element, bo);
                let name = format!("{element}_{bo}_{sharded}_{compressor:?}");
                let spec = if sharded {
                    ArraySpec::new(&[13, 10], &[8, 6], dtype).with_subchunks(&[4, 3])
                } else {
                    ArraySpec::new(&[13, 10], &[4, 3], dtype)
                }
                .with_compressor(compressor);
                let path = dir.join(&name);
                let a = ZarrArray::create(&path, &spec).unwrap_or_else(|e| panic!("{name}: {e}"));
                // Reopened, the metadata says what was asked for.
                let m = ZarrArray::open(&path).unwrap().metadata().clone();
                assert_eq!(m.zarr_format, 3);
                assert_eq!(m.stored_dtype, dtype, "{name}");
                assert_eq!(m.subchunk_shape.is_some(), sharded, "{name}");
                round_trip(&a, &mut rng, &name);
                // A fresh handle reads what the first wrote.
                let again = ZarrArray::open(&path).unwrap();
                assert!(
                    bytes_of(&again.read(..).to(&HOST).unwrap())
                        == bytes_of(&a.read(..).to(&HOST).unwrap()),
                    "{name}"
                );
            }
        }
    }
}

#[test]
fn zarr_v2_arrays_are_written_in_place() {
    // F order, big-endian and blosc v2 fixtures copied and overwritten.
    let dir = TempDir::new("v2");
    let mut rng = SmallRng::seed_from_u64(0x2222);
    for name in [
        "v2_float32_F.zarr",
        "v2_complex64_F.zarr",
        "v2_bool_F.zarr",
        "v2_uint16_bigendian.zarr",
        "v2_complex64_bigendian.zarr",
        "v2_int16_gzip.zarr",
    ] {
        let path = dir.join(name);
        copy_dir(&fixture(name), &path);
        let a = ZarrArray::open(&path).unwrap();
        assert_eq!(a.metadata().zarr_format, 2);
        let model = round_trip(&a, &mut rng, name);
        assert!(
            bytes_of(&ZarrArray::open(&path).unwrap().read(..).to(&HOST).unwrap()) == model,
            "{name}"
        );
    }
}

#[test]
fn chunks_equal_to_the_fill_value_are_not_stored() {
    let dir = TempDir::new("fill");
    let spec = ArraySpec::new(&[4, 4], &[2, 2], Dtype::FLOAT64)
        .with_fill_value(Scalar::from(2.5f64))
        .with_compressor(Compressor::Zstd { level: 1 });
    let a = ZarrArray::create(dir.join("a"), &spec).unwrap();
    let mut ones = NDBuffer::create(&HOST, &[2, 2], Dtype::FLOAT64, Order::C, None).unwrap();
    ones.set_scalar(&[], Scalar::from(1.0f64)).unwrap();
    a.write_chunks(&[&[0, 1]], std::slice::from_ref(&ones))
        .unwrap();
    assert!(a.chunk_is_stored(&[0, 1]).unwrap());
    let fill = NDBuffer::create(
        &HOST,
        &[2, 2],
        Dtype::FLOAT64,
        Order::C,
        Some(Scalar::from(2.5f64)),
    )
    .unwrap();
    a.write_chunks(&[&[0, 1]], std::slice::from_ref(&fill))
        .unwrap();
    assert!(
        !a.chunk_is_stored(&[0, 1]).unwrap(),
        "a fill-valued chunk is erased"
    );
    assert!(
        a.read(..)
            .to(&HOST)
            .unwrap()
            .all_equal(Some(Scalar::from(2.5f64)), true)
            .unwrap()
    );
}

#[test]
fn devbuf_stores_hold_zarr_arrays() {
    let store = Arc::new(MemoryStore::new());
    let mut rng = SmallRng::seed_from_u64(7);
    for (path, sharded) in [("", false), ("group/inner/arr", true)] {
        let spec = ArraySpec::new(&[9, 7], &[4, 4], Dtype::INT32)
            .with_compressor(Compressor::Blosc { level: 3 });
        let spec = if sharded {
            ArraySpec::new(&[9, 7], &[4, 4], Dtype::INT32).with_subchunks(&[2, 2])
        } else {
            spec
        };
        let a = ZarrArray::create((store.clone(), path), &spec).unwrap();
        assert!(a.location().starts_with("store:/"));
        let model = round_trip(&a, &mut rng, path);
        let b = ZarrArray::open((store.clone(), path)).unwrap();
        assert!(bytes_of(&b.read(..).to(&HOST).unwrap()) == model);
        assert!(ZarrArray::create((store.clone(), path), &spec).is_err());
    }
    let keys = store.list().unwrap();
    assert!(keys.contains(&"zarr.json".to_string()), "{keys:?}");
    assert!(
        keys.contains(&"group/inner/arr/zarr.json".to_string()),
        "{keys:?}"
    );
    assert!(
        keys.contains(&"group/inner/arr/c/0/0".to_string()),
        "{keys:?}"
    );

    // Read-only: reads work, writes are refused with an error.
    let ro: Arc<dyn Store> = Arc::new(store.with_read_only(true));
    let a = ZarrArray::open((ro, "group/inner/arr")).unwrap();
    a.read(..).to(&HOST).unwrap();
    let v = nd(vec![0u8; 4], &[1, 1], ElementType::Int32);
    let e = a.write_subset(&[0, 0], &v).unwrap_err();
    assert!(e.to_string().contains("read only"), "{e}");
}

#[test]
fn fixtures_in_a_memory_store_read_like_on_disk() {
    // Copy a sharded fixture's files into a MemoryStore: partial reads of shard
    // indexes go through the adapter's byte ranges.
    for name in [
        "v3_float64_sharded.zarr",
        "v2_complex64_F.zarr",
        "v3_int32_0d.zarr",
    ] {
        let store = Arc::new(MemoryStore::new());
        let root = fixture(name);
        for (key, p) in files_under(&root) {
            store
                .set(
                    &format!("x/{key}"),
                    &devbuf::zarr::ByteBuffer::from(std::fs::read(&p).unwrap()),
                )
                .unwrap();
        }
        let disk = ZarrArray::open(&root).unwrap();
        let mem = ZarrArray::open((store, "/x/")).unwrap();
        assert_eq!(disk.metadata(), mem.metadata(), "{name}");
        assert!(
            bytes_of(&disk.read(..).to(&HOST).unwrap())
                == bytes_of(&mem.read(..).to(&HOST).unwrap()),
            "{name}"
        );
    }
}

#[test]
fn reads_from_many_threads_agree() {
    let a = ZarrArray::open(fixture("v3_float32_sharded.zarr")).unwrap();
    let whole = bytes_of(&a.read(..).to(&HOST).unwrap());
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..10 {
                    assert!(bytes_of(&a.read(..).to(&HOST).unwrap()) == whole);
                }
            });
        }
    });
}

// ---------------------------------------------------------------------------- errors

fn err_text(r: Result<impl std::fmt::Debug, Error>) -> String {
    r.expect_err("expected an error").to_string()
}

#[test]
fn opening_bad_paths_and_bad_metadata_is_an_error() {
    let t = err_text(ZarrArray::open(fixture("no_such_array.zarr")));
    // (`zarrs_bad_input::a_missing_path_says_so` asks for "does not exist".)
    assert!(
        t.contains("no zarr array")
            && (t.contains("not a directory") || t.contains("does not exist")),
        "{t}"
    );
    let t = err_text(ZarrArray::open(fixture("manifest.json")));
    assert!(t.contains("not a directory"), "{t}");

    let dir = TempDir::new("badmeta");
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let t = err_text(ZarrArray::open(&empty));
    assert!(t.contains("neither zarr.json"), "{t}");

    let garbage = dir.join("garbage");
    std::fs::create_dir_all(&garbage).unwrap();
    std::fs::write(garbage.join("zarr.json"), b"{ not json").unwrap();
    let t = err_text(ZarrArray::open(&garbage));
    assert!(t.contains("zarr.json"), "{t}");

    let strings = dir.join("strings");
    std::fs::create_dir_all(&strings).unwrap();
    std::fs::write(
        strings.join("zarr.json"),
        br#"{"zarr_format":3,"node_type":"array","shape":[4],"data_type":"string",
            "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[2]}},
            "chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
            "fill_value":"","codecs":[{"name":"vlen-utf8"}],"attributes":{}}"#,
    )
    .unwrap();
    let t = err_text(ZarrArray::open(&strings));
    assert!(t.contains("\"string\" is an unsupported data type"), "{t}");

    let unknown_codec = dir.join("codec");
    std::fs::create_dir_all(&unknown_codec).unwrap();
    std::fs::write(
        unknown_codec.join("zarr.json"),
        br#"{"zarr_format":3,"node_type":"array","shape":[4],"data_type":"int8",
            "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[2]}},
            "chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
            "fill_value":0,"codecs":[{"name":"bytes"},{"name":"no_such_codec"}],"attributes":{}}"#,
    )
    .unwrap();
    // A codec zarrs does not know: unsupported, naming it.
    let e = ZarrArray::open(&unknown_codec).map(drop).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    let t = e.to_string();
    assert!(t.contains("unsupported codec"), "{t}");
    assert!(t.contains("no_such_codec"), "{t}");

    let t = err_text(ZarrArray::open((Arc::new(MemoryStore::new()), "a/../b")));
    assert!(t.contains("invalid array path"), "{t}");
    let t = err_text(ZarrArray::open((Arc::new(MemoryStore::new()), "a")));
    assert!(t.contains("no zarr array at store:/a"), "{t}");
}

#[test]
fn bad_selections_are_errors_that_say_what_is_valid() {
    let a = ZarrArray::open(fixture("v3_float32.zarr")).unwrap(); // 10 x 7, chunks 4 x 3
    let t = err_text(a.read_chunks(&[&[3, 0]]).to(&HOST).map(|mut v| v.remove(0)));
    assert!(t.contains("[3, 0]") && t.contains("[3, 3]"), "{t}");
    let t = err_text(a.read_chunks(&[&[0]]).to(&HOST).map(|mut v| v.remove(0)));
    assert!(t.contains("2 indices"), "{t}");
    let t = err_text(a.read_chunks(&[[0u64, 0], [0, 9]]).to(&HOST));
    assert!(t.contains("[0, 9]"), "{t}");
    let t = err_text(a.read(&[0..11, 0..7]).to(&HOST));
    assert!(t.contains("axis 0") && t.contains("size 10"), "{t}");
    #[allow(clippy::reversed_empty_ranges)]
    let t = err_text(a.read(&[5..2, 0..7]).to(&HOST));
    assert!(t.contains("5..2"), "{t}");
    #[allow(clippy::single_range_in_vec_init)] // one range: one axis, deliberately
    let one_axis = [0..1u64];
    let t = err_text(a.read(&one_axis).to(&HOST));
    assert!(t.contains("2 dimension(s)"), "{t}");
    let t = err_text(
        a.read([AxisSel::from(0), AxisSel::from(0), AxisSel::from(0)])
            .to(&HOST),
    );
    assert!(t.contains("too many indices"), "{t}");
    let t = err_text(a.read([AxisSel::Index(-11)]).to(&HOST));
    assert!(t.contains("out of bounds"), "{t}");
    let t = err_text(a.chunk_is_stored(&[0, 3]));
    assert!(t.contains("out of range"), "{t}");
}

#[test]
fn bad_writes_are_errors() {
    let dir = TempDir::new("badwrite");
    let a = ZarrArray::create(
        dir.join("a"),
        &ArraySpec::new(&[6, 5], &[4, 4], Dtype::INT16),
    )
    .unwrap();
    let v = nd(vec![0u8; 8], &[2, 2], ElementType::Int16);
    let wrong_type = nd(vec![0u8; 16], &[2, 2], ElementType::Int32);
    let t = err_text(a.write_subset(&[0, 0], &wrong_type));
    assert!(
        t.contains("data type mismatch") && t.contains("int16") && t.contains("int32"),
        "{t}"
    );
    let t = err_text(a.write_subset(&[5, 0], &v));
    assert!(t.contains("out of bounds for axis 0"), "{t}");
    let t = err_text(a.write_subset(&[0], &v));
    assert!(t.contains("2 dimension(s)"), "{t}");
    let t = err_text(a.write_chunks(&[&[0, 0]], std::slice::from_ref(&v)));
    assert!(t.contains("[2, 2]") && t.contains("[4, 4]"), "{t}");
    let edge = nd(vec![0u8; 2 * 4 * 2], &[2, 4], ElementType::Int16); // chunk (1, 0) is 2 x 4
    a.write_chunks(&[&[1, 0]], std::slice::from_ref(&edge))
        .unwrap();
    let t = err_text(a.write_chunks(&[&[2, 0]], std::slice::from_ref(&edge)));
    assert!(t.contains("out of range"), "{t}");
    let t = err_text(a.write_chunks(&[[1u64, 0], [1, 0]], &[edge.clone(), edge.clone()]));
    assert!(t.contains("more than once"), "{t}");
    let t = err_text(a.write_chunks(&[[1u64, 0]], &[]));
    assert!(t.contains("1 chunk indices but 0 values"), "{t}");
    // Nothing above wrote anything but the one valid chunk.
    assert!(a.chunk_is_stored(&[1, 0]).is_ok());
    assert!(!a.chunk_is_stored(&[0, 0]).unwrap());
}

#[test]
fn bad_specs_are_errors() {
    let dir = TempDir::new("badspec");
    let t = Dtype::FLOAT32;
    for (spec, want) in [
        (ArraySpec::new(&[4, 4], &[2], t), "dimension(s)"),
        (ArraySpec::new(&[4, 4], &[2, 0], t), "zero extent"),
        (
            ArraySpec::new(&[4, 4], &[4, 4], t).with_subchunks(&[3, 2]),
            "divide",
        ),
        (
            ArraySpec::new(&[4], &[2], t).with_compressor(Compressor::Gzip { level: 10 }),
            "gzip level 10",
        ),
        (
            ArraySpec::new(&[4], &[2], t).with_compressor(Compressor::Blosc { level: 12 }),
            "blosc level 12",
        ),
    ] {
        let msg = err_text(ZarrArray::create(dir.join("x"), &spec));
        assert!(msg.contains(want), "{msg}");
    }
    ZarrArray::create(dir.join("y"), &ArraySpec::new(&[4], &[2], t)).unwrap();
    let msg = err_text(ZarrArray::create(
        dir.join("y"),
        &ArraySpec::new(&[4], &[2], t),
    ));
    assert!(msg.contains("already exists"), "{msg}");
}

#[test]
fn corrupt_chunks_are_errors_not_panics() {
    let dir = TempDir::new("corrupt");
    for (name, chunk) in [
        ("v3_float32_zstd.zarr", "c/0/0/0"),
        ("v2_int16_blosc.zarr", "0.0.0"),
        ("v3_int16_gzip.zarr", "c/1/1/0"),
        ("v3_uint8_sharded.zarr", "c/0/0"),
        ("v3_float32_none.zarr", "c/0/0/0"),
    ] {
        let path = dir.join(name);
        copy_dir(&fixture(name), &path);
        let file = path.join(chunk);
        let len = std::fs::metadata(&file).unwrap().len() as usize;
        std::fs::write(&file, vec![0xA5u8; len / 2 + 1]).unwrap();
        let a = ZarrArray::open(&path).unwrap();
        let e = a.read(..).to(&HOST).unwrap_err();
        println!("{name}: {e}");
        assert!(
            matches!(
                e,
                Error::Malformed(_) | Error::InvalidArgument(_) | Error::Io { .. }
            ),
            "{name}: {e:?}"
        );
        assert!(
            e.to_string().contains(path.to_str().unwrap()),
            "{name}: {e}"
        );
        // Other chunks still read.
        let last: Vec<u64> = a.metadata().grid_shape.iter().map(|&g| g - 1).collect();
        a.read_chunks(&[&last])
            .to(&HOST)
            .map(|mut v| v.remove(0))
            .unwrap();
    }
}

/// Metadata may describe arrays far larger than memory (up to 2^64 bytes: beyond, the
/// metadata is refused at open): what fits reads, what does not is an error.
#[test]
fn huge_shapes_in_metadata_are_errors_not_panics() {
    let dir = TempDir::new("huge");
    let write = |shape: [u64; 2]| {
        let meta = zarrs_common::v3_metadata(&shape, "int8", &[1, 1], "3", r#"[{"name":"bytes"}]"#);
        std::fs::write(dir.join("a/zarr.json"), meta).unwrap()
    };
    let path = dir.join("a");
    std::fs::create_dir_all(&path).unwrap();
    // 2^64 - 2^32 bytes: fits 64 bits, not memory.
    let (r, c) = (1u64 << 32, (1u64 << 32) - 1);
    write([r, c]);
    let a = ZarrArray::open(&path).unwrap();
    let m = a.metadata();
    assert_eq!(m.grid_shape, vec![r, c]);
    assert_eq!(m.grid_shape.iter().product::<u64>(), r * c);
    assert_eq!(
        m.shape.iter().product::<u64>() * m.stored_dtype.element().size() as u64,
        r * c
    );
    let last = a
        .read_chunks(&[&[r - 1, c - 1]])
        .to(&HOST)
        .map(|mut v| v.remove(0))
        .unwrap();
    assert!(last.all_equal(Some(Scalar::from(3i8)), true).unwrap());
    let end = a.read(&[r - 3..r, c - 2..c]).to(&HOST).unwrap();
    assert_eq!(end.shape(), &[3, 2]);
    let t = err_text(a.read(..).to(&HOST));
    assert!(t.contains("too large"), "{t}");
    // (2^64 - 1)^2 overflows: refused at open, naming the field.
    write([u64::MAX, u64::MAX]);
    let t = err_text(ZarrArray::open(&path));
    assert!(t.contains("field shape") && t.contains("2^64"), "{t}");
}

#[test]
fn device_prototypes_without_a_gpu_are_errors() {
    if devbuf::cuda::is_available() {
        println!("skipped: a GPU is present (tests/gpu/zarrs.rs covers device reads)");
        return;
    }
    let a = ZarrArray::open(fixture("v3_int8.zarr")).unwrap();
    let e = a.read(..).to(&BufferPrototype::Device(0)).unwrap_err();
    assert_eq!(e.kind(), devbuf::ErrorKind::CudaUnavailable, "{e}");
    let e = a
        .read_chunks(&[[0u64, 0]])
        .to(&BufferPrototype::Device(0))
        .unwrap_err();
    assert_eq!(e.kind(), devbuf::ErrorKind::CudaUnavailable, "{e}");
}

/// Which encoder device writes would use, and why not the GPU: codec reasons come
/// before nvCOMP is looked for; without nvCOMP the reason names it; `Cpu` gives no note.
#[test]
fn write_encoding_says_which_encoder_and_why() {
    use devbuf::zarr::{Encoder, WriteOptions};
    let dir = TempDir::new("encoding");
    let make = |name: &str, comp: Compressor| {
        let spec = ArraySpec::new(&[64, 64], &[16, 16], Dtype::FLOAT32).with_compressor(comp);
        ZarrArray::create(dir.0.join(name), &spec).unwrap()
    };
    let gzip = make("gzip", Compressor::Gzip { level: 1 }).write_encoding();
    assert_eq!(gzip.encoder, "cpu");
    assert!(
        gzip.note.contains("gzip") && gzip.note.contains("CRC-32"),
        "{gzip}"
    );
    let blosc = make("blosc", Compressor::Blosc { level: 5 }).write_encoding();
    assert!(blosc.note.contains("blosc"), "{blosc}");
    let none = make("none", Compressor::None).write_encoding();
    assert!(none.note.contains("not compressed"), "{none}");
    let mut zstd = make("zstd", Compressor::Zstd { level: 1 });
    let e = zstd.write_encoding();
    if devbuf::cuda::nvcomp::library().is_ok() {
        assert_eq!(e.encoder, "gpu", "{e}");
    } else {
        assert_eq!(e.encoder, "cpu");
        assert!(e.note.contains("nvCOMP"), "{e}");
        assert!(
            e.to_string()
                .starts_with("encoder cpu (GPU not used: nvCOMP"),
            "{e}"
        );
    }
    zstd.set_write_options(WriteOptions {
        encoder: Encoder::Cpu,
        ..WriteOptions::default()
    });
    assert_eq!(zstd.write_options().encoder, Encoder::Cpu);
    let e = zstd.write_encoding();
    assert_eq!((e.encoder, e.note.as_str()), ("cpu", ""));
    // Shards of zstd inner chunks of 4 MiB: above Auto's bound (when nvCOMP loads).
    let big = ArraySpec::new(&[2048, 1024], &[2048, 1024], Dtype::FLOAT32)
        .with_subchunks(&[1024, 1024])
        .with_compressor(Compressor::Zstd { level: 1 });
    let e = ZarrArray::create(dir.0.join("big"), &big)
        .unwrap()
        .write_encoding();
    assert_eq!(e.encoder, "cpu");
    assert!(
        e.note.contains("nvCOMP") || e.note.contains("4194304 bytes"),
        "{e}"
    );
}

// ------------------------------------------------------------ zarr-python reads devbuf

fn python_with_zarr() -> Result<(), String> {
    match std::process::Command::new("python3")
        .args([
            "-c",
            "import zarr, numpy; assert int(zarr.__version__.split('.')[0]) >= 3",
        ])
        .output()
    {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "python3 has no zarr>=3: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("no python3: {e}")),
    }
}

#[test]
fn zarr_python_reads_what_devbuf_writes() {
    if let Err(why) = python_with_zarr() {
        println!("skipped: {why}");
        return;
    }
    let dir = TempDir::new("python");
    let mut rng = SmallRng::seed_from_u64(0x9e7);
    let mut cases = Vec::new();
    let compressors = [
        Compressor::Zstd { level: 3 },
        Compressor::Gzip { level: 5 },
        Compressor::Blosc { level: 5 },
        Compressor::None,
    ];
    for (k, element) in ElementType::ALL.into_iter().enumerate() {
        let bo = if k % 2 == 0 {
            Endianness::Little
        } else {
            Endianness::Big
        };
        let dtype = Dtype::new(element, bo);
        let spec = if k % 3 == 0 {
            ArraySpec::new(&[9, 8], &[6, 4], dtype).with_subchunks(&[3, 2])
        } else {
            ArraySpec::new(&[9, 8], &[4, 3], dtype)
        }
        .with_compressor(compressors[k % compressors.len()])
        .with_fill_value(Scalar::from(1u8));
        let name = format!("{element}.zarr");
        let a = ZarrArray::create(dir.join(&name), &spec).unwrap();
        round_trip(&a, &mut rng, &name);
        // Chunk (0, 0) all fill value: erased, so Python must fill it in.
        let r = a.chunk_ranges(&[0, 0]).unwrap();
        let shape: Vec<usize> = r.iter().map(|r| (r.end - r.start) as usize).collect();
        let fill = NDBuffer::create(
            &HOST,
            &shape,
            Dtype::from(element),
            Order::C,
            Some(Scalar::from(1u8)),
        )
        .unwrap();
        a.write_chunks(&[&[0, 0]], std::slice::from_ref(&fill))
            .unwrap();
        assert!(!a.chunk_is_stored(&[0, 0]).unwrap(), "{name}");
        let whole = bytes_of(&a.read(..).to(&HOST).unwrap());
        std::fs::write(dir.join(&format!("{element}.bin")), &whole).unwrap();
        cases.push((name, element.name().to_string()));
    }
    // A zarr v2 array (F order, big-endian) rewritten by devbuf.
    for name in ["v2_float64_F.zarr", "v2_uint16_bigendian.zarr"] {
        copy_dir(&fixture(name), &dir.join(name));
        let a = ZarrArray::open(dir.join(name)).unwrap();
        round_trip(&a, &mut rng, name);
        let whole = bytes_of(&a.read(..).to(&HOST).unwrap());
        let stem = name.trim_end_matches(".zarr");
        std::fs::write(dir.join(&format!("{stem}.bin")), &whole).unwrap();
        cases.push((name.to_string(), a.dtype().element().name().to_string()));
    }
    let list: Vec<String> = cases
        .iter()
        .map(|(n, t)| format!("(\"{n}\", \"{t}\")"))
        .collect();
    let script = format!(
        r#"
import sys, numpy as np, zarr
root = sys.argv[1]
bad = []
for name, dt in [{cases}]:
    a = zarr.open_array(root + "/" + name, mode="r")
    got = np.ascontiguousarray(a[...]).astype(np.dtype(dt).newbyteorder("="))
    want = np.fromfile(root + "/" + name[:-5] + ".bin", dtype=np.dtype(dt))
    if got.tobytes() != want.tobytes():
        bad.append(name)
print("checked", len([{cases}]), "arrays; mismatched:", bad)
sys.exit(1 if bad else 0)
"#,
        cases = list.join(", ")
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &script, dir.0.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "zarr-python disagrees: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
