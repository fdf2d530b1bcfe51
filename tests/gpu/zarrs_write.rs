//! Writes from device memory encoded by nvCOMP (`Encoder::Gpu` / `Auto`): what they
//! store reads back exactly, through zarrs' own decoders (an independent reader) and
//! through devbuf's host and device reads, for plain and sharded zstd chains with
//! crc32c checksums, F order, a shard index at either end, several element types and
//! partly covered chunks (encoded on the CPU in the same write); arrays nvCOMP cannot
//! encode are reported and refused with the reason; device and staging memory return
//! to where they were.

use std::path::Path;
use std::sync::Arc;

use devbuf::ElementType;
use devbuf::zarr::BufferPrototype;
use devbuf::zarr::{Encoder, ReadOptions, WriteOptions, ZarrArray};
use rand::Rng;
use serde_json::{Value, json};

use super::zarrs::zarrs_common::TempDir;
use super::zarrs::{bytes_of, check_reads, host_nd, nvcomp_missing, random_elements};
use crate::common::*;

const HOST: BufferPrototype = BufferPrototype::Host;
const DEV: BufferPrototype = BufferPrototype::Device(0);

fn bytes_codec() -> Value {
    json!({"name": "bytes", "configuration": {"endian": "little"}})
}

fn zstd(checksum: bool) -> Value {
    json!({"name": "zstd", "configuration": {"level": 1, "checksum": checksum}})
}

fn transpose_f(ndim: usize) -> Value {
    let order: Vec<usize> = (0..ndim).rev().collect();
    json!({"name": "transpose", "configuration": {"order": order}})
}

/// The codecs `[transpose?] bytes zstd [crc32c?]`.
fn chain(ndim: usize, f_order: bool, crc: bool) -> Vec<Value> {
    let mut c = Vec::new();
    if f_order {
        c.push(transpose_f(ndim));
    }
    c.push(bytes_codec());
    c.push(zstd(false));
    if crc {
        c.push(json!({"name": "crc32c"}));
    }
    c
}

fn sharded(inner: &[u64], codecs: Vec<Value>, index_crc: bool, at_end: bool) -> Vec<Value> {
    let mut index = vec![bytes_codec()];
    if index_crc {
        index.push(json!({"name": "crc32c"}));
    }
    vec![json!({"name": "sharding_indexed", "configuration": {
        "chunk_shape": inner,
        "codecs": codecs,
        "index_codecs": index,
        "index_location": if at_end { "end" } else { "start" },
    }})]
}

/// Writes a zarr v3 array's metadata by hand (codec chains `ArraySpec` does not make).
fn create(
    path: &Path,
    shape: &[u64],
    chunks: &[u64],
    dtype: &str,
    fill: Value,
    codecs: Vec<Value>,
) -> ZarrArray {
    std::fs::create_dir_all(path).unwrap();
    let meta = json!({
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill,
        "codecs": codecs,
        "attributes": {},
    });
    std::fs::write(
        path.join("zarr.json"),
        serde_json::to_vec_pretty(&meta).unwrap(),
    )
    .unwrap();
    ZarrArray::open(path).unwrap()
}

/// The whole array decoded by zarrs' own codecs (native bytes, C order).
fn zarrs_oracle(path: &Path) -> Vec<u8> {
    let store = Arc::new(zarrs::filesystem::FilesystemStore::new(path).unwrap());
    let a = zarrs::array::Array::open(store, "/").unwrap();
    let bytes: zarrs::array::ArrayBytes<'static> =
        a.retrieve_array_subset(&a.subset_all()).unwrap();
    bytes.into_fixed().unwrap().into_owned()
}

/// `dst[box] = src` for C-order arrays of `elem`-byte elements.
fn paste(dst: &mut [u8], shape: &[u64], start: &[u64], bshape: &[u64], src: &[u8], elem: usize) {
    let n: u64 = bshape.iter().product();
    for i in 0..n {
        let (mut rem, mut at) = (i, 0u64);
        let mut idx = vec![0u64; bshape.len()];
        for k in (0..bshape.len()).rev() {
            idx[k] = rem % bshape[k];
            rem /= bshape[k];
        }
        for k in 0..shape.len() {
            at = at * shape[k] + start[k] + idx[k];
        }
        let (a, b) = (at as usize * elem, i as usize * elem);
        dst[a..a + elem].copy_from_slice(&src[b..b + elem]);
    }
}

struct Case {
    name: &'static str,
    shape: Vec<u64>,
    chunks: Vec<u64>,
    element: ElementType,
    dtype: &'static str,
    fill: Value,
    codecs: Vec<Value>,
}

fn cases() -> Vec<Case> {
    let s2 = vec![150u64, 130];
    vec![
        Case {
            name: "plain",
            shape: s2.clone(),
            chunks: vec![40, 24],
            element: ElementType::Float32,
            dtype: "float32",
            fill: json!(0.0),
            codecs: chain(2, false, false),
        },
        Case {
            name: "plain crc32c",
            shape: s2.clone(),
            chunks: vec![40, 24],
            element: ElementType::Int16,
            dtype: "int16",
            fill: json!(-7),
            codecs: chain(2, false, true),
        },
        Case {
            name: "plain F order",
            shape: s2.clone(),
            chunks: vec![33, 50],
            element: ElementType::Float64,
            dtype: "float64",
            fill: json!(1.5),
            codecs: chain(2, true, false),
        },
        Case {
            name: "sharded",
            shape: s2.clone(),
            chunks: vec![64, 64],
            element: ElementType::Float32,
            dtype: "float32",
            fill: json!(0.0),
            codecs: sharded(&[16, 32], chain(2, false, false), true, true),
        },
        Case {
            name: "sharded index at start, crc32c, F",
            shape: s2.clone(),
            chunks: vec![64, 64],
            element: ElementType::UInt8,
            dtype: "uint8",
            fill: json!(3),
            codecs: sharded(&[32, 16], chain(2, true, true), false, false),
        },
        Case {
            name: "sharded 3-d",
            shape: vec![20, 30, 41],
            chunks: vec![8, 16, 16],
            element: ElementType::Int32,
            dtype: "int32",
            fill: json!(42),
            codecs: sharded(&[4, 8, 8], chain(3, false, true), true, true),
        },
    ]
}

gpu_test! {
    /// nvCOMP-encoded writes read back exactly through zarrs and devbuf, whole chunks
    /// encoded on the GPU and partly covered ones on the CPU in one write.
    fn zarrs_gpu_encoded_writes_read_back_exactly() {
        if nvcomp_missing("zarrs_gpu_encoded_writes_read_back_exactly") {
            return;
        }
        let mut rng = rng("zarrs_gpu_encoded_writes_read_back_exactly");
        let dir = TempDir::new("gpu-encode");
        for (k, c) in cases().into_iter().enumerate() {
            let path = dir.0.join(format!("a{k}"));
            let mut a = create(&path, &c.shape, &c.chunks, c.dtype, c.fill.clone(), c.codecs.clone());
            for encoder in [Encoder::Gpu, Encoder::Auto] {
                a.set_write_options(WriteOptions { encoder, ..WriteOptions::default() });
                let e = a.write_encoding();
                assert_eq!(e.encoder, "gpu", "{}: {e}", c.name);
            }
            // Small staging slots (a chunk each; nvCOMP calls of 16 slots: 16 KiB) and
            // three workers: several calls per write, many slots per call.
            a.set_read_options(ReadOptions { threads: Some(3), slot_bytes: 1 << 10, ..ReadOptions::default() }).unwrap();
            let elem = c.element.size();
            let n: u64 = c.shape.iter().product();
            let mut model = random_elements(&mut rng, c.element, n as usize);
            let start = vec![0u64; c.shape.len()];
            a.write_subset(&start, &host_nd(model.clone(), &c.shape, c.element).to_prototype(&DEV).unwrap()).unwrap();
            assert!(zarrs_oracle(&path) == model, "{}: whole array, read by zarrs", c.name);

            // A box that cuts chunks: its inner chunks go to nvCOMP, its edges to the CPU.
            let bstart: Vec<u64> = c.shape.iter().map(|&s| rng.random_range(1..s / 4)).collect();
            let bshape: Vec<u64> = c.shape.iter().zip(&bstart).map(|(&s, &b)| rng.random_range((s - b) / 2..s - b)).collect();
            let bn: u64 = bshape.iter().product();
            let part = random_elements(&mut rng, c.element, bn as usize);
            a.write_subset(&bstart, &host_nd(part.clone(), &bshape, c.element).to_prototype(&DEV).unwrap()).unwrap();
            paste(&mut model, &c.shape, &bstart, &bshape, &part, elem);
            assert!(zarrs_oracle(&path) == model, "{}: box {bstart:?} {bshape:?}, read by zarrs", c.name);
            assert!(bytes_of(&a.read(..).to(&HOST).unwrap()) == model, "{}: devbuf host read", c.name);
            check_reads(&a, &mut rng, c.name);
        }
    }

    /// Arrays nvCOMP does not encode: `Auto` writes them on the CPU and says why,
    /// `Gpu` refuses with that reason (and writes nothing).
    fn zarrs_gpu_encoder_refuses_what_it_cannot_write() {
        if nvcomp_missing("zarrs_gpu_encoder_refuses_what_it_cannot_write") {
            return;
        }
        let mut rng = rng("zarrs_gpu_encoder_refuses_what_it_cannot_write");
        let dir = TempDir::new("gpu-encode-no");
        let gzip = json!({"name": "gzip", "configuration": {"level": 1}});
        let big = json!({"name": "bytes", "configuration": {"endian": "big"}});
        let cases: Vec<(&str, Vec<u64>, Vec<Value>, &str)> = vec![
            ("gzip", vec![16, 16], vec![bytes_codec(), gzip], "gzip"),
            ("big-endian", vec![16, 16], vec![big, zstd(false)], "big-endian"),
            ("zstd checksum", vec![16, 16], vec![bytes_codec(), zstd(true)], "checksum"),
            ("uncompressed", vec![16, 16], vec![bytes_codec()], "not compressed"),
            ("4 MiB chunks", vec![1024, 1024], vec![bytes_codec(), zstd(false)], "above"),
            ("zstd level 9", vec![16, 16], vec![bytes_codec(), json!({"name": "zstd", "configuration": {"level": 9, "checksum": false}})], "level 9"),
        ];
        for (name, chunks, codecs, why) in cases {
            let path = dir.0.join(name.replace(' ', "-"));
            let mut a = create(&path, &[64, 64], &chunks, "int32", json!(0), codecs);
            let e = a.write_encoding();
            assert_eq!(e.encoder, "cpu", "{name}: {e}");
            assert!(e.note.contains(why), "{name}: {e}");
            let model = random_elements(&mut rng, ElementType::Int32, 64 * 64);
            let v = host_nd(model.clone(), &[64, 64], ElementType::Int32).to_prototype(&DEV).unwrap();
            a.write_subset(&[0, 0], &v).unwrap();
            assert!(bytes_of(&a.read(..).to(&HOST).unwrap()) == model, "{name}: written on the CPU");
            a.set_write_options(WriteOptions { encoder: Encoder::Gpu, ..WriteOptions::default() });
            if name == "4 MiB chunks" || name == "zstd level 9" {
                // Only Auto leaves these to the CPU; Gpu encodes them.
                assert_eq!(a.write_encoding().encoder, "gpu");
                continue;
            }
            let err = a.write_subset(&[0, 0], &v).unwrap_err().to_string();
            assert!(err.contains("Encoder::Gpu") && err.contains(why), "{name}: {err}");
        }
    }
}

gpu_test_exclusive! {
    /// After a GPU-encoded write, device memory and page-locked staging are back where
    /// they were (every worker's nvCOMP state, gather, cell and output buffers freed).
    fn zarrs_gpu_encoded_writes_free_everything() {
        if nvcomp_missing("zarrs_gpu_encoded_writes_free_everything") {
            return;
        }
        let mut rng = rng("zarrs_gpu_encoded_writes_free_everything");
        let dir = TempDir::new("gpu-encode-mem");
        let ctx = ctx();
        let path = dir.0.join("a");
        let mut a = create(&path, &[96, 96], &[32, 32], "float32", json!(0.0), sharded(&[8, 16], chain(2, false, true), true, true));
        a.set_write_options(WriteOptions { encoder: Encoder::Gpu, ..WriteOptions::default() });
        a.set_read_options(ReadOptions { threads: Some(4), slot_bytes: 2 << 10, ..ReadOptions::default() }).unwrap();
        let model = random_elements(&mut rng, ElementType::Float32, 96 * 96);
        let v = host_nd(model.clone(), &[96, 96], ElementType::Float32).to_prototype(&DEV).unwrap();
        a.write_subset(&[0, 0], &v).unwrap();
        ctx.synchronize().unwrap();
        let before = ctx.bytes_allocated();
        let pinned = ctx.transfer_stats().pinned_in_use_bytes;
        for _ in 0..3 {
            a.write_subset(&[0, 0], &v).unwrap();
            ctx.synchronize().unwrap();
            assert_eq!(ctx.bytes_allocated(), before, "device memory back");
            assert_eq!(ctx.transfer_stats().pinned_in_use_bytes, pinned, "staging back");
        }
        assert!(zarrs_oracle(&path) == model);
    }
}
