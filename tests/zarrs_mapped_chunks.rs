//! Chunk files of 2 MiB stored bytes and more, which host reads decode straight from a
//! mapping of the file (`crates/devbuf-zarr/src/read/mapped.rs`) instead of a copy:
//! bit-exact against the values written for every codec the engine decodes itself
//! (zstd streamed in pieces and decoded whole, gzip, zlib, crc32c, a shard's inner
//! chunks at offsets that are not page-aligned), with a missing chunk and boxes; each
//! such file leaves a `map chunk file` debug event (so the test fails if the engine
//! silently went back to reading them), smaller ones and uncompressed ones (read
//! straight into their places) a `read chunk file` event; and a damaged mapped chunk is
//! an error naming it.
#![cfg(feature = "zarr")]

use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use devbuf::zarr::ZarrArray;
use devbuf::zarr::{ArraySpec, BufferPrototype, Compressor, Dtype, NDBuffer, ReadOptions};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

#[path = "common/zarrs.rs"]
mod zarrs_common;
use zarrs_common::{TempDir, sub_box};

const HOST: BufferPrototype = BufferPrototype::Host;

/// Chunk file events seen by this test binary: (message, path).
#[derive(Clone, Default)]
struct Files(Arc<Mutex<Vec<(String, String)>>>);

struct Fields<'a>(&'a mut Vec<(String, String)>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .push((field.name().to_string(), format!("{value:?}")));
    }
}

impl<S: Subscriber> Layer<S> for Files {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut f = Vec::new();
        event.record(&mut Fields(&mut f));
        let get = |k: &str| {
            f.iter()
                .find(|(n, _)| n == k)
                .map_or(String::new(), |(_, v)| v.clone())
        };
        let message = get("message");
        if message.contains("chunk file") {
            self.0.lock().unwrap().push((message, get("path")));
        }
    }
}

/// The process's capture (a global subscriber, so the engine's worker threads report
/// to it): events of files whose path contains `tag`, as (mapped, read) counts.
fn files_seen(tag: &str) -> (usize, usize) {
    let all = capture().0.lock().unwrap();
    let of = |m: &str| {
        all.iter()
            .filter(|(msg, p)| msg == m && p.contains(tag))
            .count()
    };
    (of("map chunk file"), of("read chunk file"))
}

fn capture() -> &'static Files {
    static CAPTURE: OnceLock<Files> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let c = Files::default();
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(c.clone()))
            .expect("no other subscriber in this test binary");
        c
    })
}

fn bytes_of(nd: &NDBuffer) -> Vec<u8> {
    nd.to_buffer().unwrap().to_host().unwrap().to_vec()
}

/// Random float32 bit patterns (finite: exponent below all ones): they do not
/// compress, so a chunk's stored bytes are about its decoded size.
fn noise(n: usize, rng: &mut SmallRng) -> Vec<f32> {
    (0..n)
        .map(|_| f32::from_bits(rng.random::<u32>() & 0xBFFF_FFFF))
        .collect()
}

/// The whole array, boxes of it (into new results and into the caller's noise) and the
/// chunks one by one, against `all`.
fn check_reads(a: &ZarrArray, all: &[u8], rng: &mut SmallRng, what: &str) {
    let shape = a.shape().to_vec();
    assert!(
        bytes_of(&a.read(..).to(&HOST).unwrap()) == all,
        "{what}: read all"
    );
    for round in 0..4 {
        let ranges: Vec<Range<u64>> = shape
            .iter()
            .map(|&n| {
                let s = if round == 0 {
                    1
                } else {
                    rng.random_range(0..n)
                };
                s..rng.random_range(s..=n)
            })
            .collect();
        let start: Vec<u64> = ranges.iter().map(|r| r.start).collect();
        let sub: Vec<u64> = ranges.iter().map(|r| r.end - r.start).collect();
        let want = sub_box(all, &shape, 4, &start, &sub);
        assert!(
            bytes_of(&a.read(&ranges).to(&HOST).unwrap()) == want,
            "{what}: box {ranges:?}"
        );
        let mut into: Vec<u8> = (0..want.len()).map(|_| rng.random()).collect();
        a.read(&ranges).into(&mut into).unwrap();
        assert!(into == want, "{what}: box {ranges:?} into noise");
    }
}

#[test]
fn large_chunk_files_are_mapped_and_read_bit_exactly() {
    capture();
    let mut rng = SmallRng::seed_from_u64(0x3a9_9ed);
    let dir = TempDir::new("mapped");
    // 1600 x 900 float32 in 1024 x 768 chunks (3 MiB, about as much stored): four
    // chunks, three clipped at the edges, one not stored. The sharded case, 1600 x 1300:
    // shards of two 1024 x 640 inner chunks (2.5 MiB each), the second at whatever
    // offset the first one's stored bytes end (not page-aligned).
    let shape = [1600u64, 900];
    let whole = |s: &[u64]| (s[0] * s[1]) as usize;
    let cases: Vec<(&str, ArraySpec, Option<usize>)> = vec![
        (
            "zstd",
            ArraySpec::new(&shape, &[1024, 768], Dtype::FLOAT32)
                .with_compressor(Compressor::Zstd { level: 1 }),
            None,
        ),
        // Decoded whole (streaming only from 64 MiB on): the other zstd path.
        (
            "zstd-whole",
            ArraySpec::new(&shape, &[1024, 768], Dtype::FLOAT32)
                .with_compressor(Compressor::Zstd { level: 1 }),
            Some(64 << 20),
        ),
        (
            "gzip",
            ArraySpec::new(&shape, &[1024, 768], Dtype::FLOAT32)
                .with_compressor(Compressor::Gzip { level: 1 }),
            None,
        ),
        (
            "zlib",
            ArraySpec::new(&shape, &[1024, 768], Dtype::FLOAT32)
                .with_compressor(Compressor::Zlib { level: 1 }),
            None,
        ),
        (
            "none",
            ArraySpec::new(&shape, &[1024, 768], Dtype::FLOAT32),
            None,
        ),
        (
            "zstd-crc32c",
            ArraySpec::new(&shape, &[1024, 768], Dtype::FLOAT32)
                .with_compressor(Compressor::Zstd { level: 1 })
                .with_crc32c(),
            None,
        ),
        (
            "sharded",
            ArraySpec::new(&[1600, 1300], &[1024, 1280], Dtype::FLOAT32)
                .with_subchunks(&[1024, 640])
                .with_compressor(Compressor::Zstd { level: 1 }),
            None,
        ),
    ];
    for (name, spec, stream_min) in cases {
        let tag = format!("mapped-{name}.zarr");
        let mut a = ZarrArray::create(dir.join(&tag), &spec).unwrap();
        let shape = a.shape().to_vec();
        if let Some(m) = stream_min {
            a.set_read_options(ReadOptions {
                stream_min_bytes: m,
                ..ReadOptions::default()
            })
            .unwrap();
        }
        let v = noise(whole(&shape), &mut rng);
        let nd = NDBuffer::from_ndarray(
            ndarray::Array2::from_shape_vec((shape[0] as usize, shape[1] as usize), v).unwrap(),
        );
        a.write_subset(&[0, 0], &nd).unwrap();
        let mut all = bytes_of(&nd);
        if name != "sharded" {
            // Chunk [0, 1] not stored: the fill value (0) in its place.
            zarrs_common::unstore_chunk(&a, &[0, 1], &mut all);
        }
        check_reads(&a, &all, &mut rng, name);
        // Chunk [0, 0] is all noise, 3 MiB stored: mapped in every read, never read
        // into a buffer. (The clipped edge chunks hold the fill value past the edge and
        // compress below 2 MiB: read.)
        let (mapped, read) = files_seen(&format!("{tag}/c/0/0"));
        if name == "sharded" {
            // Both inner chunks of the first shard, every read.
            assert!(
                mapped >= 2 && read == 0,
                "{name}: {mapped} mapped, {read} read"
            );
        } else if name == "none" {
            // Uncompressed chunks are read straight into their places: nothing to save.
            assert!(
                mapped == 0 && read > 0,
                "{name}: {mapped} mapped, {read} read"
            );
        } else {
            assert!(
                mapped > 0 && read == 0,
                "{name}: {mapped} mapped, {read} read"
            );
        }
    }
}

#[test]
fn a_damaged_mapped_chunk_is_an_error_naming_it() {
    capture();
    let mut rng = SmallRng::seed_from_u64(11);
    let dir = TempDir::new("mapped-bad");
    for (name, comp) in [
        ("zstd", Compressor::Zstd { level: 1 }),
        ("gzip", Compressor::Gzip { level: 1 }),
    ] {
        let tag = format!("mapped-bad-{name}.zarr");
        let a = ZarrArray::create(
            dir.join(&tag),
            &ArraySpec::new(&[1024, 1024], &[1024, 1024], Dtype::FLOAT32).with_compressor(comp),
        )
        .unwrap();
        let v = noise(1 << 20, &mut rng);
        a.write_subset(
            &[0, 0],
            &NDBuffer::from_ndarray(ndarray::Array2::from_shape_vec((1024, 1024), v).unwrap()),
        )
        .unwrap();
        let chunk = dir.join(&tag).join("c").join("0").join("0");
        let mut bytes = std::fs::read(&chunk).unwrap();
        assert!(
            bytes.len() >= 2 << 20,
            "{name}: {} bytes stored",
            bytes.len()
        );
        // Cut a tail off: still mapped (2 MiB or more), but the frame ends early.
        bytes.truncate(bytes.len() - 4096);
        std::fs::write(&chunk, &bytes).unwrap();
        let e = a.read(..).to(&HOST).unwrap_err().to_string();
        assert!(e.contains("[0, 0]") || e.contains("c/0/0"), "{name}: {e}");
        let (mapped, _) = files_seen(&tag);
        assert!(mapped > 0, "{name}: the damaged chunk was not mapped");
    }
}
