//! blosc chunks decoded by nvCOMP (`Decoder::Gpu`): the container taken apart on the
//! host, LZ4 or zstd streams decoded in one call per claim, streams blosc stored
//! verbatim copied, the byte shuffle undone on the device. Every read equals the host
//! read (c-blosc), for data that compresses well, partly and not at all, element sizes
//! 1 to 16, blocks with a shorter last block, sharded arrays, big-endian storage, and
//! every blosc array of the zarr-python fixtures; chunks the GPU does not take
//! (another compressor than the metadata names, blosclz) are decoded on the host or
//! refused with the reason.

use std::path::Path;

use devbuf::ElementType;
use devbuf::zarr::{ArraySpec, Compressor, Decoder, ReadOptions, ZarrArray};
use devbuf::zarr::{BufferPrototype, Dtype, Endianness};
use rand::Rng;
use rand::rngs::SmallRng;

use super::zarrs::zarrs_common::{TempDir, files_under};
use super::zarrs::{bytes_of, check_reads, fixtures_dir, host_nd, nvcomp_missing};
use crate::common::*;

const HOST: BufferPrototype = BufferPrototype::Host;
const DEV: BufferPrototype = BufferPrototype::Device(0);

/// Elements whose bytes compress unevenly: slowly varying values (high bytes compress,
/// low bytes partly), stretches of pure noise (stored verbatim by blosc) and runs.
fn mixed_elements(rng: &mut SmallRng, element: ElementType, n: usize) -> Vec<u8> {
    let size = element.size();
    let mut v = Vec::with_capacity(n * size);
    let mut i = 0;
    while i < n {
        let run = rng.random_range(1..4096).min(n - i);
        match rng.random_range(0..3) {
            0 => v.extend(random_bytes(rng, run * size)),
            1 => {
                let e = random_bytes(rng, size);
                (0..run).for_each(|_| v.extend_from_slice(&e));
            }
            _ => {
                let start: u64 = rng.random();
                for k in 0..run as u64 {
                    let x = (start >> 40)
                        .wrapping_add(k / 3)
                        .wrapping_mul(0x0101_0101_0101_0101)
                        ^ u64::from(rng.random::<u8>() & 3);
                    v.extend_from_slice(&x.to_le_bytes().repeat(size.div_ceil(8))[..size]);
                }
            }
        }
        i += run;
    }
    if element == ElementType::Bool {
        v.iter_mut().for_each(|b| *b &= 1);
    }
    v
}

/// Rewrites `cname` in a v3 array's metadata; with `recompress`, every chunk file is
/// re-encoded with that compressor (c-blosc, same shuffle and type size).
fn set_cname(path: &Path, cname: &str, recompress: bool) {
    let meta = path.join("zarr.json");
    let mut j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&meta).unwrap()).unwrap();
    let mut found = false;
    let mut visit = |codecs: &mut serde_json::Value| {
        for c in codecs.as_array_mut().unwrap() {
            if c["name"] == "blosc" {
                c["configuration"]["cname"] = cname.into();
                found = true;
            }
        }
    };
    let codecs = &mut j["codecs"];
    if codecs[0]["name"] == "sharding_indexed" {
        visit(&mut codecs[0]["configuration"]["codecs"]);
    } else {
        visit(codecs);
    }
    assert!(found, "no blosc codec in {}", meta.display());
    std::fs::write(&meta, serde_json::to_string_pretty(&j).unwrap()).unwrap();
    if !recompress {
        return;
    }
    let name = std::ffi::CString::new(cname).unwrap();
    // Not sharded: every file is one chunk.
    for (_, f) in files_under(&path.join("c")) {
        let stored = std::fs::read(&f).unwrap();
        let (mut nbytes, mut cbytes, mut block) = (0usize, 0usize, 0usize);
        // Safety: `stored` holds at least the 16 bytes of a blosc header.
        unsafe {
            blosc_src::blosc_cbuffer_sizes(
                stored.as_ptr().cast(),
                &mut nbytes,
                &mut cbytes,
                &mut block,
            )
        };
        let mut plain = vec![0u8; nbytes];
        // Safety: `plain` holds the `nbytes` the header declares.
        let got = unsafe {
            blosc_src::blosc_decompress_ctx(
                stored.as_ptr().cast(),
                plain.as_mut_ptr().cast(),
                nbytes,
                1,
            )
        };
        assert_eq!(got as usize, nbytes, "{}", f.display());
        let shuffle = i32::from(stored[2] & 1);
        let typesize = usize::from(stored[3]);
        let mut out = vec![0u8; nbytes + 64];
        // Safety: source and destination valid for the lengths given; `name` is a C string.
        let n = unsafe {
            blosc_src::blosc_compress_ctx(
                5,
                shuffle,
                typesize,
                nbytes,
                plain.as_ptr().cast(),
                out.as_mut_ptr().cast(),
                out.len(),
                name.as_ptr(),
                0,
                1,
            )
        };
        assert!(n > 0, "{}: blosc {cname} compression failed", f.display());
        out.truncate(n as usize);
        std::fs::write(&f, out).unwrap();
    }
}

/// `Decoder::Gpu` reads of `path` equal the host's on every read path; every stored
/// chunk went to the GPU when `all_gpu`.
fn gpu_reads_equal_host(path: &Path, rng: &mut SmallRng, what: &str, all_gpu: bool) {
    let mut a = ZarrArray::open(path).unwrap();
    for (threads, slot) in [(2, 16 << 10), (6, 1 << 20)] {
        a.set_read_options(ReadOptions {
            decoder: Decoder::Gpu,
            threads: Some(threads),
            slot_bytes: slot,
            ..ReadOptions::default()
        })
        .unwrap();
        check_reads(&a, rng, what);
        let mut r = devbuf::zarr::ReadReport::default();
        let dev = a.read(..).report(&mut r).to(&DEV).unwrap();
        assert!(
            bytes_of(&dev) == bytes_of(&a.read(..).to(&HOST).unwrap()),
            "{what}"
        );
        assert!(r.gpu_chunks > 0, "{what}: {r}");
        if all_gpu {
            assert_eq!(r.cpu_chunks, 0, "{what}: every chunk on the GPU: {r}");
        }
    }
}

gpu_test! {
    /// blosc arrays made here (LZ4 and zstd inside, shuffled and not, 1- to 8-byte
    /// elements, partial last blocks, sharded, big-endian) and the zarr-python fixtures'
    /// blosc arrays: `Decoder::Gpu` reads equal host reads, chunk by chunk and on every
    /// read path, with every chunk decoded on the GPU where the GPU takes it.
    fn zarrs_gpu_blosc_reads_equal_host() {
        if nvcomp_missing("zarrs_gpu_blosc_reads_equal_host") {
            return;
        }
        let mut rng = rng("zarrs_gpu_blosc_reads_equal_host");
        let dir = TempDir::new("gpu-blosc");
        // (element, byte order, shape, chunk shape, inner chunk shape of a sharded array)
        type Case = (ElementType, Endianness, [u64; 2], [u64; 2], Option<[u64; 2]>);
        let cases: [Case; 6] = [
            (ElementType::Float32, Endianness::Little, [300, 260], [128, 100], None),
            (ElementType::Int16, Endianness::Big, [150, 130], [40, 24], None),
            (ElementType::Float64, Endianness::Little, [200, 333], [100, 333], None),
            (ElementType::UInt8, Endianness::Little, [256, 256], [200, 200], None),
            (ElementType::Complex64, Endianness::Little, [90, 70], [64, 64], None),
            (ElementType::Float32, Endianness::Little, [256, 256], [128, 128], Some([32, 64])),
        ];
        let mut k = 0;
        for (element, bo, shape, chunks, inner) in cases {
            for cname in ["lz4", "zstd"] {
                k += 1;
                let dtype = Dtype::new(element, bo);
                let mut spec = ArraySpec::new(&shape, &chunks, dtype).with_compressor(Compressor::Blosc { level: 5 });
                if let Some(i) = inner {
                    spec = spec.with_subchunks(&i);
                }
                let path = dir.0.join(format!("a{k}"));
                let a = ZarrArray::create(&path, &spec).unwrap();
                let n = (shape[0] * shape[1]) as usize;
                a.write_subset(&[0, 0], &host_nd(mixed_elements(&mut rng, element, n), &shape, element)).unwrap();
                if cname == "zstd" {
                    if inner.is_some() {
                        continue; // The shard files hold many chunks: not re-encoded here.
                    }
                    set_cname(&path, "zstd", true);
                }
                let what = format!("blosc-{cname} {dtype} {shape:?} chunks {chunks:?} inner {inner:?}");
                gpu_reads_equal_host(&path, &mut rng, &what, true);
            }
        }
        // The metadata names zstd, the chunks hold LZ4: decoded on the host, same bytes.
        // (Values that compress, so that no chunk is stored verbatim: a verbatim chunk
        // needs no decompressor and goes to the GPU whatever the metadata says.)
        let path = dir.0.join("mismatch");
        let a = ZarrArray::create(&path, &ArraySpec::new(&[100, 100], &[50, 50], Dtype::FLOAT32).with_compressor(Compressor::Blosc { level: 5 })).unwrap();
        let offset: f32 = rng.random_range(0.0..1000.0);
        let smooth: Vec<u8> = (0..10_000).flat_map(|i| (offset + (i % 97) as f32).to_le_bytes()).collect();
        a.write_subset(&[0, 0], &host_nd(smooth, &[100, 100], ElementType::Float32)).unwrap();
        let want = bytes_of(&a.read(..).to(&HOST).unwrap());
        set_cname(&path, "zstd", false);
        let mut a = ZarrArray::open(&path).unwrap();
        a.set_read_options(ReadOptions { decoder: Decoder::Gpu, ..ReadOptions::default() }).unwrap();
        let mut r = devbuf::zarr::ReadReport::default();
        let dev = a.read(..).report(&mut r).to(&DEV).unwrap();
        assert!(bytes_of(&dev) == want, "mismatched compressor: {r}");
        assert_eq!((r.gpu_chunks, r.cpu_chunks), (0, 4), "decoded on the host inside GPU claims: {r}");
        // A compressor nvCOMP lacks: Gpu is an error naming it, Auto decodes on the CPU.
        set_cname(&path, "blosclz", false);
        let mut a = ZarrArray::open(&path).unwrap();
        let mut r = devbuf::zarr::ReadReport::default();
        let dev = a.read(..).report(&mut r).to(&DEV).unwrap();
        assert!(bytes_of(&dev) == want && r.gpu_chunks == 0, "{r}");
        a.set_read_options(ReadOptions { decoder: Decoder::Gpu, ..ReadOptions::default() }).unwrap();
        let e = a.read(..).to(&DEV).unwrap_err().to_string();
        assert!(e.contains("blosclz"), "{e}");

        // zarr-python's blosc arrays (v2 and v3, every dtype, C and F order).
        let Some(fixtures) = fixtures_dir() else {
            println!("SKIPPED part of zarrs_gpu_blosc_reads_equal_host: tests/fixtures/zarr not found (run from the repository root or set DEVBUF_ZARR_FIXTURES)");
            return;
        };
        let mut seen = 0;
        let mut names: Vec<_> = std::fs::read_dir(&fixtures).unwrap().map(|e| e.unwrap().path()).collect();
        names.sort();
        for path in names.into_iter().filter(|p| p.extension().is_some_and(|e| e == "zarr")) {
            let meta = ["zarr.json", ".zarray"].iter().map(|m| path.join(m)).find(|m| m.is_file()).unwrap();
            if !std::fs::read_to_string(&meta).unwrap().contains("blosc") {
                continue;
            }
            let what = path.file_name().unwrap().to_string_lossy().to_string();
            let expected = std::fs::read(fixtures.join("expected").join(what.replace(".zarr", ".bin"))).unwrap();
            let mut a = ZarrArray::open(&path).unwrap();
            a.set_read_options(ReadOptions { decoder: Decoder::Gpu, ..ReadOptions::default() }).unwrap();
            match a.read(..).to(&DEV) {
                Ok(d) => assert!(bytes_of(&d) == expected, "{what}"),
                // A chain the read engine leaves to zarrs (e.g. v2 filters): not nvCOMP's.
                Err(e) if e.to_string().contains("decoded by zarrs") => {
                    println!("{what}: {e}");
                    continue;
                }
                Err(e) => panic!("{what}: {e}"),
            }
            gpu_reads_equal_host(&path, &mut rng, &what, false);
            seen += 1;
        }
        println!("{seen} zarr-python blosc fixtures read through nvCOMP");
        assert!(seen >= 20, "only {seen} blosc fixtures");
    }
}
