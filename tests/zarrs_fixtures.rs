//! Real zarr stores written by zarr-python (tests/fixtures/zarr, made by
//! scripts/make_zarr_fixtures.py) read bit-exactly through `devbuf::zarr`:
//! metadata against the manifest, the whole array, every chunk, every inner chunk of a
//! shard, random boxes and stepped selections against `expected/<name>.bin`.
//!
//! Run with `cargo test --features zarr`.
#![cfg(feature = "zarr")]

use std::path::{Path, PathBuf};

use devbuf::ElementType;
use devbuf::zarr::{AxisSel, BufferPrototype, Dtype, Endianness, Order, Scalar, Slice};
use devbuf::zarr::{ZarrArray, ZarrMetadata};
use num_complex::{Complex32, Complex64};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

#[path = "common/zarrs.rs"]
mod zarrs_common;
use zarrs_common::{grid_indices, sub_box};

// The expected files hold little-endian values: compare on little-endian hosts only.
const _: () = assert!(cfg!(target_endian = "little"));

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/zarr")
}

/// One fixture of the manifest, with its expected bytes.
struct Fixture {
    name: String,
    json: Value,
    shape: Vec<u64>,
    element: ElementType,
    expected: Vec<u8>,
}

impl Fixture {
    fn path(&self) -> PathBuf {
        fixtures_dir().join(self.json["path"].as_str().unwrap())
    }

    fn elem(&self) -> usize {
        self.element.size()
    }

    /// The expected C-order bytes of the box `start`/`shape`.
    fn expected_box(&self, start: &[u64], shape: &[u64]) -> Vec<u8> {
        sub_box(&self.expected, &self.shape, self.elem(), start, shape)
    }
}

fn load() -> Vec<Fixture> {
    let text = std::fs::read_to_string(fixtures_dir().join("manifest.json")).unwrap();
    let manifest: Value = serde_json::from_str(&text).unwrap();
    let list = manifest["fixtures"].as_array().unwrap();
    assert_eq!(list.len(), 71, "fixture count changed: update this test");
    list.iter()
        .map(|f| {
            let name = f["name"].as_str().unwrap().to_string();
            let dtype: Dtype = f["dtype"].as_str().unwrap().parse().unwrap();
            let expected =
                std::fs::read(fixtures_dir().join("expected").join(format!("{name}.bin"))).unwrap();
            Fixture {
                shape: u64s(&f["shape"]),
                element: dtype.element(),
                json: f.clone(),
                name,
                expected,
            }
        })
        .collect()
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

/// The manifest's fill value as a scalar of `element`.
fn fill_scalar(v: &Value, element: ElementType) -> Scalar {
    let f = |x: &Value| -> f64 {
        match x {
            Value::String(s) if s == "NaN" => f64::NAN,
            x => x.as_f64().unwrap(),
        }
    };
    match (element, v) {
        (ElementType::Bool, Value::Bool(b)) => Scalar::Bool(*b),
        (ElementType::Complex64, Value::Array(a)) => {
            Scalar::Complex64(Complex32::new(f(&a[0]) as f32, f(&a[1]) as f32))
        }
        (ElementType::Complex128, Value::Array(a)) => {
            Scalar::Complex128(Complex64::new(f(&a[0]), f(&a[1])))
        }
        (e, Value::Number(n)) if n.is_i64() => Scalar::Int64(n.as_i64().unwrap()).cast(e),
        (e, x) => Scalar::Float64(f(x)).cast(e),
    }
}

fn scalar_bits_eq(a: Scalar, b: Scalar) -> bool {
    a.element_type() == b.element_type() && a.to_le_bytes() == b.to_le_bytes()
}

fn host() -> BufferPrototype {
    BufferPrototype::Host
}

fn bytes_of(nd: &devbuf::zarr::NDBuffer) -> Vec<u8> {
    assert!(nd.is_contiguous(Order::C), "reads are C-contiguous");
    assert_eq!(
        nd.dtype().byteorder(),
        Endianness::NATIVE,
        "reads are native-endian"
    );
    nd.to_buffer().unwrap().to_host().unwrap().to_vec()
}

fn check_metadata(f: &Fixture, m: &ZarrMetadata) {
    let j = &f.json;
    let name = &f.name;
    assert_eq!(
        m.zarr_format as u64,
        j["zarr_format"].as_u64().unwrap(),
        "{name}"
    );
    assert_eq!(m.shape, f.shape, "{name}");
    let sharded = j["sharded"].as_bool().unwrap();
    if sharded {
        assert_eq!(m.chunk_shape, u64s(&j["shards"]), "{name}: shard shape");
        assert_eq!(
            m.subchunk_shape.as_ref(),
            Some(&u64s(&j["chunks"])),
            "{name}"
        );
        assert!(
            m.codecs.iter().any(|c| c == "sharding_indexed"),
            "{name}: {:?}",
            m.codecs
        );
    } else {
        assert_eq!(m.chunk_shape, u64s(&j["chunks"]), "{name}");
        assert_eq!(m.subchunk_shape, None, "{name}");
        let comp = j["compressor"].as_str().unwrap();
        if comp != "none" {
            assert!(
                m.codecs.iter().any(|c| c == comp),
                "{name}: {:?} lacks {comp}",
                m.codecs
            );
        } else {
            assert!(
                !m.codecs
                    .iter()
                    .any(|c| ["zstd", "gzip", "blosc"].contains(&c.as_str())),
                "{name}: {:?}",
                m.codecs
            );
        }
    }
    let grid: Vec<u64> = m
        .shape
        .iter()
        .zip(&m.chunk_shape)
        .map(|(&s, &c)| s.div_ceil(c))
        .collect();
    assert_eq!(m.grid_shape, grid, "{name}");
    assert_eq!(m.stored_dtype.element(), f.element, "{name}");
    let bo = match j["stored_byteorder"].as_str().unwrap() {
        "big" => Endianness::Big,
        _ => Endianness::Little,
    };
    assert_eq!(m.stored_dtype, Dtype::new(f.element, bo), "{name}");
    let order: Order = j["order"].as_str().unwrap().parse().unwrap();
    assert_eq!(m.order, order, "{name}");
    let fill = fill_scalar(&j["fill_value"], f.element);
    assert!(
        scalar_bits_eq(m.fill_value, fill),
        "{name}: fill {:?} != manifest {:?}",
        m.fill_value,
        fill
    );
}

#[test]
fn metadata_matches_the_manifest() {
    for f in load() {
        let a = ZarrArray::open(f.path()).unwrap_or_else(|e| panic!("{}: {e}", f.name));
        check_metadata(&f, a.metadata());
        assert_eq!(a.dtype(), Dtype::from(f.element), "{}", f.name);
        assert_eq!(a.shape(), &f.shape[..]);
    }
}

#[test]
fn whole_arrays_read_bit_exactly() {
    for f in load() {
        let a = ZarrArray::open(f.path()).unwrap();
        let nd = a.read(..).to(&host()).unwrap();
        let shape: Vec<u64> = nd.shape().iter().map(|&s| s as u64).collect();
        assert_eq!(shape, f.shape, "{}", f.name);
        assert_eq!(nd.dtype(), Dtype::from(f.element), "{}", f.name);
        assert!(bytes_of(&nd) == f.expected, "{}: bytes differ", f.name);
    }
}

#[test]
fn every_chunk_reads_bit_exactly_alone_and_in_batches() {
    for f in load() {
        let a = ZarrArray::open(f.path()).unwrap();
        let indices = grid_indices(&a.metadata().grid_shape);
        let batch = a.read_chunks(&indices).to(&host()).unwrap();
        assert_eq!(batch.len(), indices.len());
        for (idx, from_batch) in indices.iter().zip(&batch) {
            let ranges = a.chunk_ranges(idx).unwrap();
            let start: Vec<u64> = ranges.iter().map(|r| r.start).collect();
            let shape: Vec<u64> = ranges.iter().map(|r| r.end - r.start).collect();
            let want = f.expected_box(&start, &shape);
            let alone = a
                .read_chunks(&[idx])
                .to(&host())
                .map(|mut v| v.remove(0))
                .unwrap();
            let got_shape: Vec<u64> = alone.shape().iter().map(|&s| s as u64).collect();
            assert_eq!(got_shape, shape, "{} chunk {idx:?}", f.name);
            assert!(bytes_of(&alone) == want, "{} chunk {idx:?}", f.name);
            assert!(
                bytes_of(from_batch) == want,
                "{} chunk {idx:?} (batch)",
                f.name
            );
        }
    }
}

#[test]
fn missing_chunks_are_absent_and_read_as_the_fill_value() {
    for f in load() {
        let a = ZarrArray::open(f.path()).unwrap();
        let missing: Vec<Vec<u64>> = f.json["missing_chunks"]
            .as_array()
            .unwrap()
            .iter()
            .map(u64s)
            .collect();
        let fill = a.metadata().fill_value;
        let sharded = f.json["sharded"].as_bool().unwrap();
        // Box of a missing (inner) chunk.
        let inner = if sharded {
            u64s(&f.json["chunks"])
        } else {
            a.metadata().chunk_shape.clone()
        };
        for idx in &missing {
            if !sharded {
                assert!(!a.chunk_is_stored(idx).unwrap(), "{} {idx:?}", f.name);
            }
            let ranges: Vec<std::ops::Range<u64>> = idx
                .iter()
                .zip(&inner)
                .zip(&f.shape)
                .map(|((&i, &c), &s)| i * c..((i + 1) * c).min(s))
                .collect();
            let nd = a.read(&ranges).to(&host()).unwrap();
            assert!(
                nd.all_equal(Some(fill), true).unwrap(),
                "{} {idx:?}",
                f.name
            );
            let start: Vec<u64> = ranges.iter().map(|r| r.start).collect();
            let shape: Vec<u64> = ranges.iter().map(|r| r.end - r.start).collect();
            assert!(
                bytes_of(&nd) == f.expected_box(&start, &shape),
                "{}",
                f.name
            );
        }
        if !sharded {
            for idx in grid_indices(&a.metadata().grid_shape) {
                if !missing.contains(&idx) {
                    assert!(a.chunk_is_stored(&idx).unwrap(), "{} {idx:?}", f.name);
                }
            }
        }
    }
}

#[test]
fn inner_chunks_of_shards_read_bit_exactly() {
    let mut seen = 0;
    for f in load()
        .into_iter()
        .filter(|f| f.json["sharded"].as_bool().unwrap())
    {
        let a = ZarrArray::open(f.path()).unwrap();
        let inner = a.metadata().subchunk_shape.clone().unwrap();
        let grid: Vec<u64> = f
            .shape
            .iter()
            .zip(&inner)
            .map(|(&s, &c)| s.div_ceil(c))
            .collect();
        for idx in grid_indices(&grid) {
            let start: Vec<u64> = idx.iter().zip(&inner).map(|(&i, &c)| i * c).collect();
            let ranges: Vec<_> = start.iter().zip(&inner).map(|(&s, &c)| s..s + c).collect();
            let nd = a.read(&ranges).to(&host()).unwrap();
            assert!(
                bytes_of(&nd) == f.expected_box(&start, &inner),
                "{} {idx:?}",
                f.name
            );
        }
        seen += 1;
    }
    assert_eq!(seen, 3);
}

#[test]
fn random_boxes_and_stepped_selections_read_bit_exactly() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_2a44);
    for f in load() {
        let a = ZarrArray::open(f.path()).unwrap();
        for round in 0..24 {
            // Random box; every fourth one touches the upper edge on every axis.
            let mut start = Vec::new();
            let mut shape = Vec::new();
            for &n in &f.shape {
                let s = rng.random_range(0..n);
                let e = if round % 4 == 0 {
                    n
                } else {
                    rng.random_range(s..=n)
                };
                start.push(s);
                shape.push(e - s);
            }
            let ranges: Vec<_> = start.iter().zip(&shape).map(|(&s, &n)| s..s + n).collect();
            let nd = a.read(&ranges).to(&host()).unwrap();
            let got_shape: Vec<u64> = nd.shape().iter().map(|&s| s as u64).collect();
            assert_eq!(got_shape, shape);
            let want = f.expected_box(&start, &shape);
            assert!(bytes_of(&nd) == want, "{} box {ranges:?}", f.name);
            // The same box into memory the caller holds, filled with noise first:
            // every byte is written (missing chunks as the fill value included).
            let mut into: Vec<u8> = (0..want.len()).map(|_| rng.random()).collect();
            let mut report = devbuf::zarr::ReadReport::default();
            a.read(&ranges).report(&mut report).into(&mut into).unwrap();
            assert_eq!(report.target, "host (the caller's memory)");
            assert!(into == want, "{} box {ranges:?} read into noise", f.name);
        }
        // Stepped selection with a negative index: compared element by element.
        if f.shape.len() == 2 {
            let step = rng.random_range(1..4) as isize;
            let sel = [
                AxisSel::Slice(Slice::new(Some(1), None, step)),
                AxisSel::Index(-1),
            ];
            let nd = a.read(sel).to(&host()).unwrap();
            let rows: Vec<u64> = (1..f.shape[0]).step_by(step as usize).collect();
            assert_eq!(nd.shape(), &[rows.len()]);
            let mut want = Vec::new();
            for &r in &rows {
                want.extend(f.expected_box(&[r, f.shape[1] - 1], &[1, 1]));
            }
            let dense = nd.copy_order(Order::C).unwrap();
            assert!(bytes_of(&dense) == want, "{} stepped", f.name);
        }
    }
}

#[test]
fn reads_into_the_callers_memory_check_its_size() {
    let a = ZarrArray::open(fixtures_dir().join("v3_float32_zstd.zarr")).unwrap();
    let shape = a.shape().to_vec();
    let n: usize = shape.iter().product::<u64>() as usize * 4;
    let want = bytes_of(&a.read(..).to(&host()).unwrap());
    for wrong in [0, n - 1, n + 1] {
        let mut out = vec![0u8; wrong];
        let e = a.read(..).into(&mut out).unwrap_err().to_string();
        assert!(
            e.contains(&format!("holds {wrong} bytes"))
                && e.contains(&format!("exactly {n} bytes")),
            "{e}"
        );
    }
    let mut out = vec![0x5Au8; n];
    let mut r = devbuf::zarr::ReadReport::default();
    a.read(..).report(&mut r).into(out.as_mut_slice()).unwrap();
    assert!(out == want);
    assert_eq!(
        (r.decoder, r.target.as_str()),
        ("cpu", "host (the caller's memory)")
    );
    assert!(r.cpu_chunks > 0 && r.decoded_bytes as usize >= n);
    // An empty box reads into empty memory; a box past the array is refused as for
    // `read_subset`.
    let empty: Vec<_> = shape.iter().map(|_| 0..0).collect();
    a.read(&empty).into(&mut Vec::new()).unwrap();
    let past: Vec<_> = shape.iter().map(|&s| 0..s + 1).collect();
    assert!(a.read(&past).into(&mut out).is_err());
}

#[test]
fn zero_d_and_one_d_fixtures() {
    let a = ZarrArray::open(fixtures_dir().join("v3_int32_0d.zarr")).unwrap();
    assert!(a.metadata().shape.is_empty());
    let nd = a.read(..).to(&host()).unwrap();
    assert_eq!(nd.shape(), &[] as &[usize]);
    let want = std::fs::read(fixtures_dir().join("expected/v3_int32_0d.bin")).unwrap();
    assert_eq!(nd.as_scalar().unwrap().to_le_bytes(), want);
    assert_eq!(
        a.read_chunks(&[&[]])
            .to(&host())
            .map(|mut v| v.remove(0))
            .unwrap()
            .as_scalar()
            .unwrap(),
        nd.as_scalar().unwrap()
    );
    assert_eq!(
        a.read(..).to(&host()).unwrap().as_scalar().unwrap(),
        nd.as_scalar().unwrap()
    );

    let a = ZarrArray::open(fixtures_dir().join("v3_float64_nanfill_1d.zarr")).unwrap();
    assert!(matches!(a.metadata().fill_value, Scalar::Float64(v) if v.is_nan()));
    let missing = a
        .read_chunks(&[&[1]])
        .to(&host())
        .map(|mut v| v.remove(0))
        .unwrap();
    assert!(
        missing
            .all_equal(Some(Scalar::from(f64::NAN)), true)
            .unwrap()
    );
    assert!(
        !missing
            .all_equal(Some(Scalar::from(f64::NAN)), false)
            .unwrap()
    );
    let edge = a
        .read_chunks(&[&[2]])
        .to(&host())
        .map(|mut v| v.remove(0))
        .unwrap();
    assert_eq!(edge.shape(), &[3]); // 11 = 4 + 4 + 3
}

#[test]
fn empty_selections_read_as_empty_arrays() {
    let a = ZarrArray::open(fixtures_dir().join("v3_float32_zstd.zarr")).unwrap();
    let nd = a.read(&[2..2, 0..5, 1..3]).to(&host()).unwrap();
    assert_eq!(nd.shape(), &[0, 5, 2]);
    assert_eq!(nd.nbytes(), 0);
    let nd = a
        .read([AxisSel::from(Slice::new(Some(5), Some(1), 1))])
        .to(&host())
        .unwrap();
    assert_eq!(nd.shape(), &[0, 5, 4]);
}

/// Host read throughput over every fixture (printed; the fixtures are tiny, so this
/// mostly measures per-chunk overhead).
#[test]
fn host_read_throughput_report() {
    let fixtures = load();
    let arrays: Vec<ZarrArray> = fixtures
        .iter()
        .map(|f| ZarrArray::open(f.path()).unwrap())
        .collect();
    let t = std::time::Instant::now();
    let mut bytes = 0usize;
    let mut chunks = 0usize;
    for _ in 0..5 {
        for a in &arrays {
            let idx = grid_indices(&a.metadata().grid_shape);
            chunks += idx.len();
            for c in a.read_chunks(&idx).to(&host()).unwrap() {
                bytes += c.nbytes();
            }
        }
    }
    let s = t.elapsed().as_secs_f64();
    println!(
        "host read: {chunks} chunks, {bytes} bytes in {:.1} ms: {:.1} MB/s, {:.1} us/chunk",
        s * 1e3,
        bytes as f64 / s / 1e6,
        s * 1e6 / chunks as f64
    );
}
