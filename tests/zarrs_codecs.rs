//! numcodecs' other codecs and numpy's time types (issue 28, part 4), on real stores
//! written by zarr-python and numcodecs (tests/fixtures/zarr_codecs, made by
//! `scripts/make_zarr_fixtures.py --codecs`):
//!
//! - bz2, bitround, pcodec, zfpy (with the `zfp` feature), fletcher32, adler32 and
//!   shuffle arrays read exactly the values zarr-python reads (whole, chunk by chunk,
//!   missing chunks as the fill value), on both zarr formats;
//! - datetime64 / timedelta64 arrays read as int64 with the unit in the metadata;
//! - lzma, delta, quantize, variable-length strings and structured types are refused
//!   at open as unsupported (`InvalidArgument`, not `Malformed`), naming the codec or
//!   type;
//! - a bz2 bomb (a few hundred bytes that decode to 256 MiB) in a small chunk is an
//!   error naming the chunk, not a 256 MiB allocation.
//!
//! Run with `cargo test --features zarr --test zarrs_codecs`.
#![cfg(feature = "zarr")]

use std::io::Read;
use std::path::{Path, PathBuf};

use devbuf::Error;
use devbuf::zarr::{BufferPrototype, Dtype, TimeKind, ZarrArray};
use serde_json::Value;

#[path = "common/zarrs.rs"]
mod zarrs_common;
use zarrs_common::{TempDir, grid_indices, sub_box};

// The expected files hold little-endian values: compare on little-endian hosts only.
const _: () = assert!(cfg!(target_endian = "little"));

const HOST: BufferPrototype = BufferPrototype::Host;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/zarr_codecs")
}

fn manifest() -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join("manifest.json")).unwrap()).unwrap()
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

fn bytes_of(nd: &devbuf::zarr::NDBuffer) -> Vec<u8> {
    nd.to_buffer().unwrap().to_host().unwrap().to_vec()
}

/// Whether this build reads zfp (the facade's `zfp` feature).
const ZFP: bool = cfg!(feature = "zfp");

fn is_zfp(f: &Value) -> bool {
    f["compressor"].as_str().unwrap().contains("zfp")
}

#[test]
fn every_codec_fixture_reads_exactly_what_zarr_python_reads() {
    let m = manifest();
    let list = m["fixtures"].as_array().unwrap();
    assert_eq!(list.len(), 20, "fixture count changed: update this test");
    let mut seen = std::collections::BTreeSet::new();
    for f in list {
        let name = f["name"].as_str().unwrap();
        let comp = f["compressor"].as_str().unwrap();
        if is_zfp(f) && !ZFP {
            let e = ZarrArray::open(dir().join(f["path"].as_str().unwrap())).unwrap_err();
            assert!(matches!(e, Error::Unsupported { .. }), "{name}: {e}");
            assert!(e.to_string().contains("zfpy"), "{name}: {e}");
            assert!(e.to_string().contains("`zfp` feature"), "{name}: {e}");
            continue;
        }
        let a = ZarrArray::open(dir().join(f["path"].as_str().unwrap()))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let meta = a.metadata();
        let shape = u64s(&f["shape"]);
        assert_eq!(meta.shape, shape, "{name}");
        assert_eq!(meta.chunk_shape, u64s(&f["chunks"]), "{name}");
        assert_eq!(
            meta.zarr_format as u64,
            f["zarr_format"].as_u64().unwrap(),
            "{name}"
        );
        let dtype: Dtype = f["dtype"].as_str().unwrap().parse().unwrap();
        assert_eq!(a.dtype(), dtype, "{name}");
        // The codec is named in the metadata (zarr v3 names; zarr v2's are converted).
        let bare = comp.trim_start_matches("numcodecs.");
        assert!(
            meta.codecs.iter().any(|c| c.ends_with(bare)),
            "{name}: {:?} lacks {comp}",
            meta.codecs
        );
        seen.insert(bare.to_string());
        // Time types: int64 plus the unit.
        match f.get("time_unit").and_then(Value::as_str) {
            Some(numpy) => {
                let t = meta.time_unit.clone().expect(name);
                let kind = if numpy.starts_with("M8") {
                    TimeKind::Datetime64
                } else {
                    TimeKind::Timedelta64
                };
                assert_eq!(t.kind, kind, "{name}");
                assert_eq!(
                    t.to_string().split_once('[').unwrap().1,
                    &numpy[3..],
                    "{name}"
                );
                assert_eq!(a.dtype(), Dtype::INT64, "{name}");
                // The fill value is NaT: i64::MIN.
                assert_eq!(
                    meta.fill_value.to_le_bytes(),
                    i64::MIN.to_le_bytes(),
                    "{name}"
                );
            }
            None => assert_eq!(meta.time_unit, None, "{name}"),
        }
        let expected = std::fs::read(dir().join("expected").join(format!("{name}.bin"))).unwrap();
        let mut report = devbuf::zarr::ReadReport::default();
        let all = a.read(..).report(&mut report).to(&HOST).unwrap();
        assert!(bytes_of(&all) == expected, "{name}: values differ");
        if let Some(fill) = f["fill_value"].as_i64() {
            assert_eq!(
                meta.fill_value.to_le_bytes()[..],
                fill.to_le_bytes()[..a.dtype().element().size()],
                "{name}"
            );
        }
        // Every chunk alone, and all of them in one batch.
        let elem = dtype.element().size();
        let indices = grid_indices(&meta.grid_shape);
        let batch = a.read_chunks(&indices).to(&HOST).unwrap();
        for (idx, b) in indices.iter().zip(&batch) {
            let ranges = a.chunk_ranges(idx).unwrap();
            let start: Vec<u64> = ranges.iter().map(|r| r.start).collect();
            let extent: Vec<u64> = ranges.iter().map(|r| r.end - r.start).collect();
            let want = sub_box(&expected, &shape, elem, &start, &extent);
            assert!(
                bytes_of(
                    &a.read_chunks(&[idx])
                        .to(&HOST)
                        .map(|mut v| v.remove(0))
                        .unwrap()
                ) == want,
                "{name} {idx:?}"
            );
            assert!(bytes_of(b) == want, "{name} {idx:?} (batch)");
        }
        for idx in f["missing_chunks"].as_array().unwrap().iter().map(u64s) {
            assert!(!a.chunk_is_stored(&idx).unwrap(), "{name} {idx:?}");
            let c = a
                .read_chunks(&[&idx])
                .to(&HOST)
                .map(|mut v| v.remove(0))
                .unwrap();
            assert!(
                c.all_equal(Some(meta.fill_value), true).unwrap(),
                "{name} {idx:?}"
            );
        }
        // The report says who decoded (chains the engine has no decoder for: zarrs).
        let engine = ["zstd", "zlib"];
        if !engine
            .iter()
            .any(|e| meta.codecs.last().is_some_and(|c| c.ends_with(e)))
            || meta.codecs.len() > 2
        {
            assert!(report.codecs.starts_with("zarrs ("), "{name}: {report}");
        }
    }
    let want = [
        "adler32",
        "bitround",
        "bz2",
        "fletcher32",
        "pcodec",
        "shuffle",
        "zfpy",
        "zstd",
    ];
    let want: Vec<&str> = want.into_iter().filter(|c| ZFP || *c != "zfpy").collect();
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), want);
}

#[test]
fn refused_codecs_and_types_are_unsupported_and_named() {
    let m = manifest();
    let list = m["refused"].as_array().unwrap();
    assert_eq!(list.len(), 10, "refused count changed: update this test");
    for f in list {
        let name = f["name"].as_str().unwrap();
        let e = ZarrArray::open(dir().join(f["path"].as_str().unwrap()))
            .map(|_| ())
            .unwrap_err();
        // A codec devbuf does not read is unsupported: never "malformed" (the file is
        // not damaged).
        assert!(matches!(e, Error::Unsupported { .. }), "{name}: {e}");
        let msg = e.to_string();
        assert!(msg.contains("unsupported"), "{name}: {msg}");
        assert!(!msg.contains("malformed"), "{name}: {msg}");
        for want in f["error_names"].as_array().unwrap() {
            assert!(msg.contains(want.as_str().unwrap()), "{name}: {msg}");
        }
    }
}

#[test]
fn a_bz2_bomb_in_a_small_chunk_is_an_error_not_an_allocation() {
    let tmp = TempDir::new("bz2-bomb");
    let src = dir().join("v2_int32_bz2.zarr");
    let dst = tmp.join("a.zarr");
    std::fs::create_dir_all(&dst).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, dst.join(p.file_name().unwrap())).unwrap();
    }
    let a = ZarrArray::open(&dst).unwrap();
    let first = bytes_of(
        &a.read_chunks(&[&[0, 0]])
            .to(&HOST)
            .map(|mut v| v.remove(0))
            .unwrap(),
    );
    // 256 MiB of zeros: a few hundred bytes of bzip2, in place of a 48-byte chunk.
    let mut bomb = Vec::new();
    bzip2_compress(&vec![0u8; 256 << 20], &mut bomb);
    assert!(bomb.len() < 4096, "{}", bomb.len());
    std::fs::write(dst.join("1.0"), &bomb).unwrap();
    for r in [
        a.read(..).to(&HOST).map(drop),
        a.read_chunks(&[&[1, 0]])
            .to(&HOST)
            .map(|mut v| v.remove(0))
            .map(drop),
        a.read(&[4..6, 0..2]).to(&HOST).map(drop),
    ] {
        let e = r.unwrap_err().to_string();
        assert!(e.contains("more than 48 bytes"), "{e}");
        assert!(e.contains("1.0") || e.contains("[1, 0]"), "{e}");
    }
    // The other chunks still read.
    assert_eq!(
        bytes_of(
            &a.read_chunks(&[&[0, 0]])
                .to(&HOST)
                .map(|mut v| v.remove(0))
                .unwrap()
        ),
        first
    );
}

/// bzip2 at level 9 (numcodecs' `BZ2`, as the fixtures' chunks are).
fn bzip2_compress(data: &[u8], out: &mut Vec<u8>) {
    // The command-line tool is not needed: the crate devbuf-zarr decodes with.
    let mut enc = bzip2::read::BzEncoder::new(data, bzip2::Compression::best());
    enc.read_to_end(out).unwrap();
}

/// A copy of fixture `name` in a temporary directory.
fn copy_fixture(tmp: &TempDir, name: &str) -> PathBuf {
    fn copy(src: &Path, dst: &Path) {
        std::fs::create_dir_all(dst).unwrap();
        for entry in std::fs::read_dir(src).unwrap() {
            let p = entry.unwrap().path();
            let to = dst.join(p.file_name().unwrap());
            if p.is_dir() {
                copy(&p, &to);
            } else {
                std::fs::copy(&p, &to).unwrap();
            }
        }
    }
    let dst = tmp.join(name);
    copy(&dir().join(name), &dst);
    dst
}

#[test]
fn writes_into_bz2_pcodec_and_time_arrays_read_back() {
    let tmp = TempDir::new("codec-writes");
    for name in [
        "v2_int32_bz2.zarr",
        "v3_float32_bz2.zarr",
        "v3_int64_pcodec.zarr",
        "v2_datetime64_ns.zarr",
        "v3_timedelta64_10s.zarr",
    ] {
        let a = ZarrArray::open(copy_fixture(&tmp, name)).unwrap();
        let before = a.read(..).to(&HOST).unwrap();
        // Rewrite a box across chunks (read-modify-write through zarrs' encoders) and
        // the missing chunk (1, 1) with values of the read's own type.
        let part = a.read(&[1..6, 2..5]).to(&HOST).unwrap();
        a.write_subset(&[4, 3], &part)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let back = a.read(&[4..9, 3..6]).to(&HOST).unwrap();
        assert_eq!(bytes_of(&back), bytes_of(&part), "{name}");
        assert!(a.chunk_is_stored(&[1, 1]).unwrap(), "{name}");
        // The rest is unchanged.
        let after = a.read(&[0..4, 0..7]).to(&HOST).unwrap();
        let want = before.to_buffer().unwrap().to_host().unwrap();
        let elem = a.dtype().element().size();
        assert_eq!(
            bytes_of(&after),
            sub_box(&want, &[10, 7], elem, &[0, 0], &[4, 7]),
            "{name}"
        );
        assert_eq!(
            ZarrArray::open(tmp.join(name))
                .unwrap()
                .metadata()
                .time_unit,
            a.metadata().time_unit,
            "{name}"
        );
    }
}
