//! Fuzzing (time-bounded, `DEVBUF_FUZZ_SECS`; see tests/common/fuzz.rs) of stored chunk
//! bytes for every codec devbuf reads: blosc, gzip, zstd, none, sharding (with crc32c
//! index) and transpose (zarr v2 order F), big- and little-endian, from the zarr-python
//! fixtures and from arrays devbuf writes with each `Compressor`, sharded or not.
//!
//! Each input damages one stored chunk (bit flips, bytes, extreme words, truncation,
//! extension, splices; or replaces it with another chunk's bytes) and reads it with
//! `read_chunks` and the whole array with `read(..)` on the host. Outcome: an error, or
//! arrays of exactly the expected shape and data type (the values of an undamaged
//! chunk). A panic, a hang or a read of the wrong size fails; a panic inside `zarrs`
//! that devbuf caught is reported as a finding (a failure with `DEVBUF_FUZZ_STRICT=1`).

#![cfg(feature = "zarr")]

#[path = "common/fuzz.rs"]
mod fuzz;
#[path = "common/zarr_fuzz.rs"]
mod zarr_fuzz;

use std::sync::Arc;

use devbuf::ElementType;
use devbuf::zarr::{ArraySpec, Compressor, ZarrArray};
use devbuf::zarr::{BufferPrototype, Dtype, Endianness, MemoryStore, NDBuffer, Order, Store};
use fuzz::{Damage, apply, fuzz};
use proptest::prelude::*;
use zarr_fuzz::{Findings, Fixture, fixtures, read_chunk_checked};

/// Arrays devbuf writes: each compressor, sharded or not, several data types.
fn written() -> Vec<Fixture> {
    let compressors = [
        Compressor::None,
        Compressor::Zstd { level: 3 },
        Compressor::Gzip { level: 5 },
        Compressor::Blosc { level: 5 },
    ];
    let types = [
        Dtype::UINT8,
        Dtype::new(ElementType::Int16, Endianness::Big),
        Dtype::FLOAT32,
        Dtype::COMPLEX128,
    ];
    let mut out = Vec::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for (k, comp) in compressors.into_iter().enumerate() {
        for sharded in [false, true] {
            let dtype = types[(k + sharded as usize) % types.len()];
            let mut spec = ArraySpec::new(&[13, 9], &[6, 4], dtype).with_compressor(comp);
            if sharded {
                spec = spec.with_subchunks(&[3, 2]);
            }
            let store = Arc::new(MemoryStore::new());
            let a = ZarrArray::create((store.clone(), ""), &spec).unwrap();
            // Compressible but not constant data.
            let bytes: Vec<u8> = (0..13 * 9 * dtype.element().size())
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if i % 5 == 0 { x as u8 } else { (i / 7) as u8 }
                })
                .collect();
            let value = NDBuffer::from_memory(bytes, &[13, 9], dtype, Order::C).unwrap();
            a.write_subset(&[0, 0], &value).unwrap();
            let files = store
                .list()
                .unwrap()
                .into_iter()
                .map(|k| {
                    let v = store
                        .get(&k, &BufferPrototype::Host, None)
                        .unwrap()
                        .unwrap();
                    (k, v.to_host().unwrap().to_vec())
                })
                .collect();
            out.push(Fixture {
                name: format!("devbuf {comp:?} sharded={sharded} {dtype}"),
                files,
            });
        }
    }
    out
}

/// The chunk index of a store key (`c/1/2`, `1.2`, `c`, `0`), if it is one.
fn chunk_index(key: &str, ndim: usize) -> Option<Vec<u64>> {
    let rest = key
        .strip_prefix("c/")
        .or(key.strip_prefix('c'))
        .unwrap_or(key);
    if ndim == 0 {
        return Some(vec![]);
    }
    let idx: Option<Vec<u64>> = rest.split(['/', '.']).map(|p| p.parse().ok()).collect();
    idx.filter(|v| v.len() == ndim)
}

#[derive(Clone, Debug)]
enum Change {
    Damage(Vec<Damage>),
    /// Replace with the bytes of another chunk (modulo the chunk count).
    Other(usize),
    /// An empty file.
    Empty,
}

#[test]
fn fuzz_zarr_chunk_bytes_every_codec() {
    let mut sources = fixtures();
    sources.extend(written());
    // What each undamaged array reads (C-order bytes), for inputs that change nothing.
    let baseline: Vec<Vec<u8>> = sources
        .iter()
        .map(|f| {
            let a = ZarrArray::open((f.store(&[]), "")).unwrap();
            let nd = a.read(..).to(&BufferPrototype::Host).unwrap();
            nd.to_buffer().unwrap().to_host().unwrap().to_vec()
        })
        .collect();
    let findings = Findings::default();
    let change = prop_oneof![
        8 => fuzz::damages(4).prop_map(Change::Damage),
        1 => any::<usize>().prop_map(Change::Other),
        1 => Just(Change::Empty),
    ];
    let r = fuzz(
        "zarr chunk bytes (every codec)",
        (0..sources.len(), any::<usize>(), change),
        |(s, c, change)| {
            let src = &sources[s];
            let keys = src.chunk_keys();
            if keys.is_empty() {
                return Ok("no chunks");
            }
            let key = keys[c % keys.len()];
            let original = &src.files.iter().find(|(k, _)| k == key).unwrap().1;
            let mut bytes = original.clone();
            match &change {
                Change::Damage(ds) => ds.iter().for_each(|d| apply(&mut bytes, d)),
                Change::Other(o) => {
                    let other = keys[o % keys.len()];
                    bytes = src
                        .files
                        .iter()
                        .find(|(k, _)| k == other)
                        .unwrap()
                        .1
                        .clone();
                }
                Change::Empty => bytes.clear(),
            }
            let unchanged = &bytes == original;
            let describe = || format!("{}: {key} {change:?}", src.name);
            let a = ZarrArray::open((src.store(&[(key, bytes.clone())]), ""))
                .map_err(|e| format!("the metadata no longer opens: {e}"))?;
            let ndim = a.metadata().shape.len();
            let index = chunk_index(key, ndim).unwrap_or_else(|| vec![0; ndim]);
            let what = read_chunk_checked(&a, &index, &findings, &describe)?;
            if unchanged {
                let all = a
                    .read(..)
                    .to(&BufferPrototype::Host)
                    .map_err(|e| format!("an undamaged array failed to read: {e}"))?;
                if all.to_buffer().unwrap().to_host().unwrap() != baseline[s] {
                    return Err("an undamaged array read other values".into());
                }
                return Ok("unchanged");
            }
            Ok(what)
        },
    );
    findings.print("zarr chunk bytes");
    assert!(r.tally.get("error") + r.tally.get("chunk read") + r.tally.get("read") > 0);
    if fuzz::strict() {
        assert!(findings.is_empty(), "findings (DEVBUF_FUZZ_STRICT)");
    }
}
