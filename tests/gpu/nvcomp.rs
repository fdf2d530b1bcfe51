//! nvCOMP batched (de)compression against host codecs: zstd (the `zstd` crate), LZ4
//! raw blocks (`lz4_flex`), raw deflate (`flate2`); GDeflate through a device round trip.
//!
//! Data is a compressible mix (random bytes, runs, a small alphabet, repeats), never
//! only zeros. Chunks lie at odd offsets (so nvCOMP's alignment staging runs), outputs
//! are separated by guard bytes that must survive every call. Without nvCOMP each test
//! prints `SKIPPED <test>: <reason>` and returns. The throughput figures run only with
//! `DEVBUF_NVCOMP_BENCH=1`.

// One-chunk batches are written as `&[a..b]`: a slice of one range, as meant.
#![allow(clippy::single_range_in_vec_init)]

use std::io::{Read, Write};
use std::ops::Range;
use std::time::{Duration, Instant};

use devbuf::cuda::nvcomp::{self, CompressBatch, DecompressBatch, GpuCodec, Nvcomp};
use devbuf::cuda::{Context, DeviceBuffer, Stream};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

use crate::common::*;
use crate::peer::{CHILD_LIMIT, Peer, say};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
/// The value of every byte of a destination buffer outside the output ranges.
const GUARD: u8 = 0xA5;
/// Codecs with a host compressor here.
const HOST_CODECS: [GpuCodec; 3] = [GpuCodec::Zstd, GpuCodec::Lz4, GpuCodec::Deflate];

/// The library, or `None` after printing why the test is skipped.
fn lib_or_skip(test: &str) -> Option<&'static Nvcomp> {
    match nvcomp::library() {
        Ok(lib) => Some(lib),
        Err(e) => {
            println!("SKIPPED {test}: {e}");
            eprintln!("SKIPPED {test}: {e}");
            None
        }
    }
}

/// `n` compressible bytes: random stretches, runs, a small alphabet and repeats of
/// earlier bytes, in random segments (never all zero for `n >= 16`).
fn mixed(rng: &mut SmallRng, n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n);
    while v.len() < n {
        let len = rng.random_range(16..2048).min(n - v.len());
        let start = v.len();
        match rng.random_range(0..4) {
            0 => {
                v.resize(start + len, 0);
                rng.fill_bytes(&mut v[start..]);
            }
            1 => v.resize(start + len, rng.random_range(1..=255u8)),
            2 => {
                const A: &[u8] = b"abcdefgh 0123.,";
                v.extend((0..len).map(|_| A[rng.random_range(0..A.len())]));
            }
            _ if start > 64 => {
                let from = rng.random_range(0..start - 1);
                for k in 0..len {
                    let b = v[from + k % (start - from)];
                    v.push(b);
                }
            }
            _ => v.extend((0..len).map(|_| rng.random_range(1..=255u8))),
        }
    }
    v
}

fn host_compress(codec: GpuCodec, data: &[u8]) -> Vec<u8> {
    match codec {
        GpuCodec::Zstd => zstd::bulk::compress(data, 3).unwrap(),
        GpuCodec::Lz4 => lz4_flex::block::compress(data),
        GpuCodec::Deflate => {
            let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(6));
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        GpuCodec::GDeflate => panic!("no host GDeflate compressor"),
    }
}

fn host_decompress(codec: GpuCodec, data: &[u8], n: usize) -> Vec<u8> {
    match codec {
        GpuCodec::Zstd => zstd::bulk::decompress(data, n).unwrap(),
        GpuCodec::Lz4 => lz4_flex::block::decompress(data, n).unwrap(),
        GpuCodec::Deflate => {
            let mut out = Vec::new();
            flate2::read::DeflateDecoder::new(data)
                .read_to_end(&mut out)
                .unwrap();
            out
        }
        GpuCodec::GDeflate => panic!("no host GDeflate decompressor"),
    }
}

/// A batch laid out on the host: compressed chunks back to back at odd offsets in
/// `src`, output ranges with 1..8 guard bytes before each and after the last.
struct Case {
    src: Vec<u8>,
    inputs: Vec<Range<usize>>,
    outputs: Vec<Range<usize>>,
    dst_len: usize,
    want: Vec<Vec<u8>>,
}

impl Case {
    fn new(rng: &mut SmallRng, codec: GpuCodec, sizes: &[usize]) -> Case {
        let (mut src, mut inputs, mut outputs, mut want) = (Vec::new(), vec![], vec![], vec![]);
        let mut cur = 0;
        for (i, &n) in sizes.iter().enumerate() {
            let data = mixed(rng, n);
            let c = host_compress(codec, &data);
            src.resize(src.len() + i % 8, 0xEE); // offsets of every residue mod 8
            inputs.push(src.len()..src.len() + c.len());
            src.extend_from_slice(&c);
            cur += 1 + i % 7;
            outputs.push(cur..cur + n);
            cur += n;
            want.push(data);
        }
        Case {
            src,
            inputs,
            outputs,
            dst_len: cur + 3,
            want,
        }
    }

    /// Uploads the sources and a guarded destination.
    fn upload(&self, ctx: &Context) -> (DeviceBuffer, DeviceBuffer) {
        let src = DeviceBuffer::from_slice(ctx, &self.src).unwrap();
        let dst = ctx.allocate(self.dst_len).unwrap();
        dst.fill(GUARD).unwrap();
        (src, dst)
    }

    /// Checks every decoded chunk and every guard byte.
    #[track_caller]
    fn check(&self, got: &[u8], what: &str) {
        for (i, (o, w)) in self.outputs.iter().zip(&self.want).enumerate() {
            if let Some(k) = got[o.clone()].iter().zip(w).position(|(a, b)| a != b) {
                panic!("{what}: chunk {i} ({} bytes) differs at byte {k}", w.len());
            }
        }
        check_guards(got, &self.outputs, what);
    }
}

#[track_caller]
fn check_guards(got: &[u8], outputs: &[Range<usize>], what: &str) {
    let mut inside = vec![false; got.len()];
    for o in outputs {
        inside[o.clone()].iter_mut().for_each(|b| *b = true);
    }
    if let Some(k) = (0..got.len()).find(|&k| !inside[k] && got[k] != GUARD) {
        panic!(
            "{what}: byte {k} outside every output range was written ({:#x})",
            got[k]
        );
    }
}

/// Chunk sizes around `base` (down to 3/4 of it, odd sizes included).
fn sizes_near(rng: &mut SmallRng, base: usize, count: usize) -> Vec<usize> {
    (0..count)
        .map(|_| base - below(rng, base / 4 + 1))
        .collect()
}

fn decodes_bit_exact(test: &str, codec: GpuCodec) {
    let Some(_) = lib_or_skip(test) else { return };
    let c = ctx();
    let mut r = rng(test);
    let stream = Stream::new(&c).unwrap();
    let mut batch = DecompressBatch::new(&c, None).unwrap();
    let mut plans: Vec<Vec<usize>> = vec![
        vec![KIB],
        sizes_near(&mut r, KIB, 1000),
        sizes_near(&mut r, 64 * KIB, 100),
        sizes_near(&mut r, MIB, 12),
        sizes_near(&mut r, 4 * MIB, 3),
        vec![4 * MIB],
    ];
    // One batch of every size at once, shuffled.
    let mut all: Vec<usize> =
        [KIB, 3 * KIB + 1, 64 * KIB, 300 * KIB + 7, MIB, 4 * MIB - 5].to_vec();
    all.extend(sizes_near(&mut r, 16 * KIB, 20));
    for i in (1..all.len()).rev() {
        let j = below(&mut r, i + 1);
        all.swap(i, j);
    }
    plans.push(all);
    for sizes in plans {
        let case = Case::new(&mut r, codec, &sizes);
        let (src, dst) = case.upload(&c);
        for in_place in [false, true] {
            batch.set_in_place(in_place);
            dst.fill(GUARD).unwrap();
            let t = Instant::now();
            batch
                .decompress(&stream, codec, &src, &case.inputs, &dst, &case.outputs)
                .unwrap_or_else(|e| panic!("{codec}, {} chunks: {e}", sizes.len()));
            let ms = t.elapsed().as_secs_f64() * 1e3;
            let what = format!(
                "{codec}{}, {} chunks of {}..{} bytes",
                if in_place { " in place" } else { "" },
                sizes.len(),
                sizes.iter().min().unwrap(),
                sizes.iter().max().unwrap()
            );
            case.check(&dst.to_vec::<u8>().unwrap(), &what);
            println!(
                "{what}: ok in {ms:.2} ms (workspace {} bytes)",
                batch.device_bytes()
            );
        }
    }
}

gpu_test! {
    fn nvcomp_library_loads() {
        let Some(lib) = lib_or_skip("nvcomp_library_loads") else { return };
        println!("{lib:?}");
        assert_eq!(lib.version().0, 6);
        for codec in GpuCodec::ALL {
            println!("{codec}: decompress {:?}, compress {:?}", lib.decompress_alignment(codec), lib.compress_alignment(codec));
        }
        assert!(nvcomp::library().is_ok());
        assert_eq!(nvcomp::library().err().map(|e| e.to_string()), None);
    }

    fn nvcomp_zstd_decodes_bit_exact() {
        decodes_bit_exact("nvcomp_zstd_decodes_bit_exact", GpuCodec::Zstd);
    }

    fn nvcomp_lz4_decodes_bit_exact() {
        decodes_bit_exact("nvcomp_lz4_decodes_bit_exact", GpuCodec::Lz4);
    }

    fn nvcomp_deflate_decodes_bit_exact() {
        decodes_bit_exact("nvcomp_deflate_decodes_bit_exact", GpuCodec::Deflate);
    }

    /// `expect_crc32`: the device's CRC-32 of what nvCOMP decoded matches the host's on
    /// random data of every length around a slice (64 bytes) and a block (16 KiB) of
    /// the kernel, at odd output offsets, in place and through the scratch area; a CRC-32
    /// off by one bit is an error naming the chunk (the others still decoded exactly); a
    /// count that does not match the call's chunks is refused before any device work;
    /// the expectation holds for one call only.
    fn nvcomp_deflate_crc32_is_checked_on_the_device() {
        let test = "nvcomp_deflate_crc32_is_checked_on_the_device";
        let Some(_) = lib_or_skip(test) else { return };
        // A context of its own: the allocation count checked below is the context's,
        // and tests running beside this one allocate on the shared one.
        let c = Context::new_dedicated(0).unwrap();
        let mut r = rng(test);
        let stream = Stream::new(&c).unwrap();
        let mut batch = DecompressBatch::new(&c, None).unwrap();
        let crc = |d: &[u8]| {
            let mut h = flate2::Crc::new();
            h.update(d);
            h.sum()
        };
        let mut sizes = vec![1, 3, 63, 64, 65, 1000, 16_383, 16_384, 16_385, 100_000, MIB + 3, 4 * MIB];
        sizes.extend(sizes_near(&mut r, 4 * KIB, 300));
        let case = Case::new(&mut r, GpuCodec::Deflate, &sizes);
        let (src, dst) = case.upload(&c);
        let want: Vec<u32> = case.want.iter().map(|d| crc(d)).collect();
        let d = GpuCodec::Deflate;
        for in_place in [false, true] {
            batch.set_in_place(in_place);
            let what = format!("in place {in_place}");
            dst.fill(GUARD).unwrap();
            batch.expect_crc32(&want);
            batch.decompress(&stream, d, &src, &case.inputs, &dst, &case.outputs).unwrap_or_else(|e| panic!("{what}: {e}"));
            case.check(&dst.to_vec::<u8>().unwrap(), &what);
            // One bit off in one chunk's CRC-32, then in two.
            for bad in [vec![7usize], vec![0, sizes.len() - 1]] {
                let mut off = want.clone();
                bad.iter().for_each(|&i| off[i] ^= 1 << (i % 32));
                dst.fill(GUARD).unwrap();
                batch.expect_crc32(&off);
                let e = batch.decompress(&stream, d, &src, &case.inputs, &dst, &case.outputs).unwrap_err();
                let m = e.to_string();
                assert!(matches!(e, devbuf::Error::Malformed(_)), "{what}: {m}");
                assert!(m.contains(&format!("{} of {} chunks", bad.len(), sizes.len())), "{what}: {m}");
                assert!(m.contains(&format!("chunk {}: CRC-32 {:#010x}, expected {:#010x}", bad[0], want[bad[0]], off[bad[0]])), "{what}: {m}");
                if bad.len() > 1 {
                    assert!(m.contains(&format!("also chunks {}", bad[1])), "{what}: {m}");
                }
                // The bytes themselves decoded as nvCOMP decodes them.
                case.check(&dst.to_vec::<u8>().unwrap(), &what);
            }
            // The expectation was for that call only.
            batch.decompress(&stream, d, &src, &case.inputs, &dst, &case.outputs).unwrap();
        }
        // Queued: checked by finish.
        batch.set_in_place(false);
        batch.expect_crc32(&want);
        batch.queue_decompress(&stream, d, &src, &case.inputs, &dst, &case.outputs, &[], &[]).unwrap();
        batch.finish().unwrap();
        // A count that is not the call's: refused, nothing queued, not carried over.
        let before = c.bytes_allocated();
        batch.expect_crc32(&want[..3]);
        let e = batch.decompress(&stream, d, &src, &case.inputs, &dst, &case.outputs).unwrap_err();
        assert!(e.to_string().contains(&format!("expect_crc32 gave 3 CRC-32s for a call of {} chunks", sizes.len())), "{e}");
        assert_eq!(c.bytes_allocated(), before);
        batch.decompress(&stream, d, &src, &case.inputs, &dst, &case.outputs).unwrap();
    }

    fn nvcomp_bad_calls_are_refused_before_any_device_work() {
        let Some(_) = lib_or_skip("nvcomp_bad_calls_are_refused_before_any_device_work") else { return };
        let c = Context::new_dedicated(0).unwrap();
        let stream = Stream::new(&c).unwrap();
        let mut batch = DecompressBatch::new(&c, None).unwrap();
        let mut r = rng("nvcomp_bad_calls_are_refused_before_any_device_work");
        let case = Case::new(&mut r, GpuCodec::Zstd, &[4 * KIB, 4 * KIB]);
        let (src, dst) = case.upload(&c);
        let z = GpuCodec::Zstd;
        // A stream of another context.
        let other = Stream::new(&ctx()).unwrap();
        let e = batch.decompress(&other, z, &src, &case.inputs, &dst, &case.outputs).unwrap_err();
        assert!(e.to_string().contains("stream belongs to another context"), "{e}");
        // A read-only destination.
        let e = batch.decompress(&stream, z, &src, &case.inputs, &dst.read_only(), &case.outputs).unwrap_err();
        assert!(matches!(e, devbuf::Error::ReadOnly(_)), "{e}");
        // An output over an input of the same allocation.
        let both = c.allocate(case.src.len() + 16 * KIB).unwrap();
        both.copy_from_host(0, &case.src).unwrap();
        let far = case.src.len() + 8 * KIB;
        let outs = [case.inputs[1].start..case.inputs[1].start + 4 * KIB, far..far + 4 * KIB];
        let e = batch.decompress(&stream, z, &both, &case.inputs, &both, &outs).unwrap_err();
        assert!(e.to_string().contains("overlaps the input of chunk 1"), "{e}");
        // Out of range, empty.
        let e = batch.decompress(&stream, z, &src, &[0..src.len() + 1], &dst, &[0..10]).unwrap_err();
        assert!(e.to_string().contains("chunk 0"), "{e}");
        assert_eq!(batch.device_bytes(), 0, "nothing was allocated for refused calls");
        batch.decompress(&stream, z, &src, &[], &dst, &[]).unwrap();
        // Compression: an output below the bound nvCOMP needs.
        let mut cb = CompressBatch::new(&c, None).unwrap();
        let e = cb.compress(&stream, z, &dst, &[0..4 * KIB], &src, &[0..64]).unwrap_err();
        assert!(e.to_string().contains("chunk 0: output range of 64 bytes is smaller"), "{e}");
        assert_eq!(cb.device_bytes(), 0);
    }

    /// Corrupt chunks (a damaged block header, zstd's magic number, input truncated to
    /// half, a chunk that decodes past its output) are errors naming the chunk where
    /// nvCOMP reports them, nothing outside the outputs is written, the other chunks are
    /// intact, and an intact batch decodes correctly afterwards; memory is back to its
    /// baseline. Each codec runs in a child process: nvCOMP 6.0 can fault the device on
    /// corrupt input (raw deflate truncated to half wrote past the batch's whole scratch
    /// area for 1 seed in 15 to 40: `CUDA_ERROR_ILLEGAL_ADDRESS`), which would end every
    /// context of the process, and so every other test running in it. A child that
    /// faulted reports on which damaged variant; that is printed, not failed (it is
    /// nvCOMP's documented behaviour, docs/nvcomp.md); a fault on intact input fails. So
    /// does a call on damaged input that nvCOMP never finished (deflate truncated to half,
    /// once on an H200): the call returns an error after its timeout, as documented, and
    /// the child stops there; a hang on intact input fails.
    fn nvcomp_corrupt_input_is_an_error_naming_the_chunk() {
        let test = "nvcomp_corrupt_input_is_an_error_naming_the_chunk";
        let Some(_) = lib_or_skip(test) else { return };
        let seed = rng(test).next_u64();
        for codec in HOST_CODECS {
            let env = [("DEVBUF_TEST_SEED", seed.to_string())];
            let p = Peer::spawn(CHILD, ROLE, &codec.to_string(), &env);
            let (status, lines) = p.wait_exit(CHILD_LIMIT);
            let mut failures = Vec::new();
            let mut ended = false;
            for line in &lines {
                if let Some(l) = line.strip_prefix("CHILD line ") {
                    println!("{l}");
                } else if let Some(f) = line.strip_prefix("CHILD failure ") {
                    failures.push(f.to_string());
                } else if let Some(f) = line.strip_prefix("CHILD fault ") {
                    println!("{codec}: nvCOMP faulted the device (child process; known nvCOMP 6.0 behaviour on corrupt input): {f}");
                    assert!(!f.contains("intact"), "{codec}: a fault on intact input: {f}");
                } else if let Some(f) = line.strip_prefix("CHILD hang ") {
                    println!("{codec}: nvCOMP looped on damaged input (child process; the call returned after its timeout, as documented): {f}");
                } else if line == "CHILD end ok" {
                    ended = true;
                }
            }
            assert!(status.success() && ended, "{codec} child (seed {seed}) failed: {status}; output: {lines:#?}");
            assert!(failures.is_empty(), "{codec} (seed {seed}): {failures:#?}");
        }
    }

    fn nvcomp_compress_round_trips() {
        let test = "nvcomp_compress_round_trips";
        let Some(lib) = lib_or_skip(test) else { return };
        let c = Context::new_dedicated(0).unwrap();
        let base = c.bytes_allocated();
        let mut r = rng(test);
        {
            let stream = Stream::new(&c).unwrap();
            let mut cb = CompressBatch::new(&c, None).unwrap();
            let mut db = DecompressBatch::new(&c, None).unwrap();
            for codec in GpuCodec::ALL {
                let max = codec.max_compress_chunk_bytes().min(4 * MIB);
                for sizes in [vec![KIB], sizes_near(&mut r, max.min(64 * KIB), 200), sizes_near(&mut r, max, 5)] {
                    // Inputs at odd offsets of one buffer; outputs of the bound nvCOMP
                    // needs, at odd offsets too.
                    let mut host = Vec::new();
                    let mut inputs = Vec::new();
                    let mut want = Vec::new();
                    for (i, &n) in sizes.iter().enumerate() {
                        host.resize(host.len() + i % 8, 0xEE);
                        let d = mixed(&mut r, n);
                        inputs.push(host.len()..host.len() + n);
                        host.extend_from_slice(&d);
                        want.push(d);
                    }
                    let max_in = *sizes.iter().max().unwrap();
                    let cap = lib.max_compressed_chunk_size(codec, max_in).unwrap();
                    let outputs: Vec<Range<usize>> = (0..sizes.len()).map(|i| i * (cap + 3) + 1..i * (cap + 3) + 1 + cap).collect();
                    let src = DeviceBuffer::from_slice(&c, &host).unwrap();
                    let dst = c.allocate(sizes.len() * (cap + 3) + 1).unwrap();
                    let t = Instant::now();
                    let got = cb.compress(&stream, codec, &src, &inputs, &dst, &outputs).unwrap_or_else(|e| panic!("{codec}: {e}"));
                    let ms = t.elapsed().as_secs_f64() * 1e3;
                    let back = dst.to_vec::<u8>().unwrap();
                    let total: usize = got.iter().sum();
                    // Host oracle (GDeflate: none; the device round trip below checks it).
                    if codec != GpuCodec::GDeflate {
                        for (i, o) in outputs.iter().enumerate() {
                            let frame = &back[o.start..o.start + got[i]];
                            assert!(host_decompress(codec, frame, sizes[i]) == want[i], "{codec}: chunk {i} of {} does not round-trip through the host", sizes.len());
                        }
                    }
                    // Device round trip: decode the compressed chunks where they lie.
                    let ins: Vec<Range<usize>> = outputs.iter().zip(&got).map(|(o, &n)| o.start..o.start + n).collect();
                    let plain = c.allocate(host.len()).unwrap();
                    db.decompress(&stream, codec, &dst, &ins, &plain, &inputs).unwrap_or_else(|e| panic!("{codec} device round trip: {e}"));
                    let plain = plain.to_vec::<u8>().unwrap();
                    for (i, rg) in inputs.iter().enumerate() {
                        assert!(plain[rg.clone()] == want[i][..], "{codec}: chunk {i} differs after the device round trip");
                    }
                    println!("{codec}: {} chunks up to {max_in} bytes -> {:.3} of the size, compressed in {ms:.2} ms", sizes.len(), total as f64 / host.len() as f64);
                }
            }
        }
        assert_eq!(c.bytes_allocated(), base, "device memory back to its baseline");
    }

    /// Random damage anywhere in the compressed bytes: nvCOMP's headers call corrupt
    /// input undefined behaviour, so this reports what happens (error, wrong bytes, luck,
    /// or a decoder that does not finish) and asserts only that nothing outside the
    /// outputs is written. Runs with `DEVBUF_NVCOMP_DAMAGE=all` (or a codec name), in a
    /// dedicated context, with a 2 s limit per batch; after a call that does not finish
    /// it stops (the device work may still use the buffers: nothing is freed).
    fn nvcomp_random_damage_stays_inside_the_outputs() {
        let test = "nvcomp_random_damage_stays_inside_the_outputs";
        let Ok(which) = std::env::var("DEVBUF_NVCOMP_DAMAGE") else {
            println!("SKIPPED {test}: set DEVBUF_NVCOMP_DAMAGE=all (or zstd, lz4, deflate)");
            return;
        };
        let Some(_) = lib_or_skip(test) else { return };
        let c = Context::new_dedicated(0).unwrap();
        let mut r = rng(test);
        let stream = Stream::new(&c).unwrap();
        let mut batch = DecompressBatch::new(&c, None).unwrap();
        batch.set_timeout(Some(Duration::from_secs(2)));
        for codec in HOST_CODECS.into_iter().filter(|k| which == "all" || which == k.to_string()) {
            let (mut errs, mut wrong, mut fine) = (0, 0, 0);
            for b in 0..12 {
                let sizes = sizes_near(&mut r, 32 * KIB, 16);
                let case = Case::new(&mut r, codec, &sizes);
                let mut bad = case.src.clone();
                let mut flips = Vec::new();
                for (i, rg) in case.inputs.iter().enumerate() {
                    for _ in 0..1 + below(&mut r, 4) {
                        let k = below(&mut r, rg.len());
                        bad[rg.start + k] ^= 1 << below(&mut r, 8);
                        flips.push((i, k, rg.len()));
                    }
                }
                let src = DeviceBuffer::from_slice(&c, &bad).unwrap();
                let dst = c.allocate(case.dst_len).unwrap();
                dst.fill(GUARD).unwrap();
                let t = Instant::now();
                let res = batch.decompress(&stream, codec, &src, &case.inputs, &dst, &case.outputs);
                if let Err(e) = &res
                    && e.to_string().contains("did not finish") {
                        println!("{codec} random damage: batch {b} HUNG after {:?} ({errs} errors, {wrong} wrong, {fine} intact before); flips (chunk, byte, of bytes): {flips:?}; {e}", t.elapsed());
                        std::mem::forget((src, dst, batch, stream, c));
                        return;
                    }
                let got = dst.to_vec::<u8>().unwrap();
                check_guards(&got, &case.outputs, &format!("{codec} random damage"));
                match res {
                    Err(_) => errs += 1,
                    Ok(()) if case.outputs.iter().zip(&case.want).all(|(o, w)| got[o.clone()] == w[..]) => fine += 1,
                    Ok(()) => wrong += 1,
                }
            }
            println!("{codec} random damage, 12 batches of 16 chunks: {errs} errors, {wrong} decoded wrong bytes without an error, {fine} intact");
        }
    }

    fn nvcomp_decode_throughput() {
        if std::env::var_os("DEVBUF_NVCOMP_BENCH").is_none() {
            println!("SKIPPED nvcomp_decode_throughput: set DEVBUF_NVCOMP_BENCH=1");
            return;
        }
        let Some(lib) = lib_or_skip("nvcomp_decode_throughput") else { return };
        bench(lib);
    }
}

const ROLE: &str = "DEVBUF_NVCOMP_CORRUPT_CHILD";
const CHILD: &str = "nvcomp::child_entry";

/// The child side of `nvcomp_corrupt_input_is_an_error_naming_the_chunk`: the codec
/// named by its role.
#[test]
#[ignore = "child role of the corrupt-input test (it runs it)"]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let codec = HOST_CODECS
        .into_iter()
        .find(|k| k.to_string() == role)
        .unwrap_or_else(|| panic!("unknown child role {role}"));
    corrupt_variants(codec);
    say("end", "ok");
}

/// A driver error that ends the context: the device faulted.
fn faulted(e: &devbuf::Error) -> bool {
    matches!(
        e,
        devbuf::Error::Driver {
            code: 700 | 719,
            ..
        }
    )
}

/// Decodes each damaged variant of one batch of `codec` and says what happened (lines
/// `line`, `failure`, and `fault` when the device faulted: the child then stops).
fn corrupt_variants(codec: GpuCodec) {
    let c = Context::new_dedicated(0).unwrap();
    let base = c.bytes_allocated();
    let mut r = rng(&format!("nvcomp corrupt input, {codec}"));
    let stream = Stream::new(&c).unwrap();
    let mut batch = DecompressBatch::new(&c, None).unwrap();
    batch.set_timeout(Some(Duration::from_secs(10)));
    let sizes = sizes_near(&mut r, 64 * KIB, 8);
    let case = Case::new(&mut r, codec, &sizes);
    let dst = c.allocate(case.dst_len).unwrap();
    // (name, damaged chunk, source bytes, inputs, outputs, must be an error)
    let mut variants = Vec::new();
    let mut bad = case.src.clone();
    corrupt(codec, &mut bad[case.inputs[3].clone()]);
    // Measured on an H100 with nvCOMP 6.0: LZ4 with a damaged block header and zstd
    // truncated to half can decode "successfully" (docs/nvcomp.md). What devbuf
    // guarantees then: no write outside the outputs, other chunks intact.
    variants.push((
        "damaged block header",
        3,
        bad,
        case.inputs.clone(),
        case.outputs.clone(),
        codec != GpuCodec::Lz4,
    ));
    if codec == GpuCodec::Zstd {
        let mut bad = case.src.clone();
        bad[case.inputs[4].start..case.inputs[4].start + 4]
            .copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        variants.push((
            "damaged magic number",
            4,
            bad,
            case.inputs.clone(),
            case.outputs.clone(),
            false,
        ));
    }
    let mut ins = case.inputs.clone();
    ins[5].end = ins[5].start + ins[5].len() / 2;
    variants.push((
        "truncated to half",
        5,
        case.src.clone(),
        ins,
        case.outputs.clone(),
        codec != GpuCodec::Zstd,
    ));
    let mut outs = case.outputs.clone();
    outs[2].end -= 100;
    variants.push((
        "decodes past its output",
        2,
        case.src.clone(),
        case.inputs.clone(),
        outs,
        true,
    ));
    variants.push((
        "intact (after the errors)",
        usize::MAX,
        case.src.clone(),
        case.inputs.clone(),
        case.outputs.clone(),
        false,
    ));
    for (name, k, bytes, ins, outs, must_fail) in variants {
        let src = DeviceBuffer::from_slice(&c, &bytes).unwrap();
        dst.fill(GUARD).unwrap();
        let res = batch.decompress(&stream, codec, &src, &ins, &dst, &outs);
        let back = dst.to_vec::<u8>();
        let fault = [res.as_ref().err(), back.as_ref().err()]
            .into_iter()
            .flatten()
            .find(|e| faulted(e));
        if let Some(e) = fault {
            say("fault", format!("{codec} {name}: {e}"));
            // The context is gone: nothing more can run or be freed in it.
            std::mem::forget((src, dst, batch, stream, c));
            return;
        }
        if let Err(e) = &res
            && e.to_string().contains("did not finish")
        {
            // nvCOMP looping on damaged input is its behaviour (docs/nvcomp.md): the
            // call returned after its timeout, as documented. On intact input a failure.
            let what = if k == usize::MAX { "failure" } else { "hang" };
            say(what, format!("{codec} {name}: HUNG: {e}"));
            // The device work may still use them: never free.
            std::mem::forget((src, dst, batch, stream, c));
            return;
        }
        let got = back.unwrap();
        check_guards(&got, &outs, &format!("{codec} {name}"));
        let line = match &res {
            Err(e) if e.to_string().contains(&format!("chunk {k}")) => {
                format!("error naming chunk {k}: {e}")
            }
            Err(e) => {
                say(
                    "failure",
                    format!("{codec} {name}: error does not name chunk {k}: {e}"),
                );
                format!("error: {e}")
            }
            Ok(()) if k == usize::MAX => {
                case.check(&got, &format!("{codec} {name}"));
                "decoded correctly".to_string()
            }
            Ok(()) => {
                if must_fail {
                    say(
                        "failure",
                        format!("{codec} {name}: chunk {k} decoded without an error"),
                    );
                }
                format!(
                    "no error (chunk {k} decoded {})",
                    if got[outs[k].clone()] == case.want[k][..] {
                        "correctly"
                    } else {
                        "to wrong bytes"
                    }
                )
            }
        };
        let others = (0..ins.len())
            .filter(|&i| i != k)
            .all(|i| got[outs[i].clone()] == case.want[i][..]);
        say(
            "line",
            format!("{codec} {name}: {line}; other chunks intact: {others}"),
        );
    }
    drop((batch, stream, dst));
    assert_eq!(
        c.bytes_allocated(),
        base,
        "device memory back to its baseline"
    );
}

/// Damages a compressed chunk so that every decoder must notice.
fn corrupt(codec: GpuCodec, c: &mut [u8]) {
    match codec {
        // Block_Type = 3 (reserved) in the first block header after the frame header.
        GpuCodec::Zstd => {
            let fhd = c[4];
            let single = fhd & 0x20 != 0;
            let fcs = match fhd >> 6 {
                0 => usize::from(single),
                1 => 2,
                2 => 4,
                _ => 8,
            };
            let did = [0, 1, 2, 4][usize::from(fhd & 3)];
            let block = 5 + usize::from(!single) + did + fcs;
            c[block] |= 0b110;
        }
        // BTYPE = 11 (reserved) in the first block header.
        GpuCodec::Deflate => c[0] |= 0b110,
        // The first match offset points far before the start of the output.
        GpuCodec::Lz4 => {
            let mut p = 1;
            let mut lit = (c[0] >> 4) as usize;
            if lit == 15 {
                while c[p] == 255 {
                    lit += 255;
                    p += 1;
                }
                lit += c[p] as usize;
                p += 1;
            }
            let off = p + lit;
            assert!(lit < 60000 && off + 2 <= c.len(), "no match to damage");
            c[off] = 0xff;
            c[off + 1] = 0xff;
        }
        GpuCodec::GDeflate => unreachable!(),
    }
}

/// Decoded GB/s for 256 MiB of data per codec and chunk size (inputs packed at 8-byte
/// multiples: no staging), best of 5 after a warm-up; and compression at 64 KiB.
fn bench(lib: &Nvcomp) {
    let c = ctx();
    let stream = Stream::new(&c).unwrap();
    let total = 256 * MIB;
    let data: Vec<u8> = {
        let parts: Vec<Vec<u8>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..16u64)
                .map(|k| s.spawn(move || mixed(&mut SmallRng::seed_from_u64(k + 1), total / 16)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        parts.concat()
    };
    let mut db = DecompressBatch::new(&c, None).unwrap();
    let mut cb = CompressBatch::new(&c, None).unwrap();
    let plain = DeviceBuffer::from_slice(&c, &data).unwrap();
    let out = c.allocate(total).unwrap();
    println!("nvCOMP {:?} on {}", lib.version(), c.properties().name);
    for codec in GpuCodec::ALL {
        for chunk in [64 * KIB, MIB, 4 * MIB] {
            let n = total / chunk;
            let outputs: Vec<Range<usize>> = (0..n).map(|i| i * chunk..(i + 1) * chunk).collect();
            let (src, inputs) = if codec == GpuCodec::GDeflate {
                if chunk > codec.max_compress_chunk_bytes() {
                    continue; // no host GDeflate compressor; the GPU one takes 64 KiB chunks
                }
                let cap = lib.max_compressed_chunk_size(codec, chunk).unwrap();
                let cap8 = cap.next_multiple_of(8);
                let dst = c.allocate(n * cap8).unwrap();
                let slots: Vec<Range<usize>> = (0..n).map(|i| i * cap8..i * cap8 + cap).collect();
                let sizes = cb
                    .compress(&stream, codec, &plain, &outputs, &dst, &slots)
                    .unwrap();
                (
                    dst,
                    slots
                        .iter()
                        .zip(&sizes)
                        .map(|(s, &k)| s.start..s.start + k)
                        .collect::<Vec<_>>(),
                )
            } else {
                let frames: Vec<Vec<u8>> = std::thread::scope(|s| {
                    let per = n.div_ceil(16);
                    let hs: Vec<_> = outputs
                        .chunks(per)
                        .map(|rs| {
                            let data = &data;
                            s.spawn(move || {
                                rs.iter()
                                    .map(|r| host_compress(codec, &data[r.clone()]))
                                    .collect::<Vec<_>>()
                            })
                        })
                        .collect();
                    hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
                });
                let mut host = Vec::new();
                let mut inputs = Vec::new();
                for f in &frames {
                    inputs.push(host.len()..host.len() + f.len());
                    host.extend_from_slice(f);
                    host.resize(host.len().next_multiple_of(8), 0);
                }
                (DeviceBuffer::from_slice(&c, &host).unwrap(), inputs)
            };
            let compressed: usize = inputs.iter().map(|r| r.len()).sum();
            for in_place in [false, true] {
                db.set_in_place(in_place);
                out.fill(0).unwrap();
                db.decompress(&stream, codec, &src, &inputs, &out, &outputs)
                    .unwrap();
                let mut best = f64::MAX;
                for _ in 0..5 {
                    let t = Instant::now();
                    db.decompress(&stream, codec, &src, &inputs, &out, &outputs)
                        .unwrap();
                    best = best.min(t.elapsed().as_secs_f64());
                }
                assert!(
                    out.equals(&plain).unwrap(),
                    "{codec} {chunk}: decoded bytes differ"
                );
                println!(
                    "nvcomp bench decode {codec:>8} {:>5} KiB chunks x{n:>5} {}: ratio {:.3}, {:.2} ms, {:.1} GB/s decoded",
                    chunk / KIB,
                    if in_place { "in place" } else { "scratch " },
                    compressed as f64 / total as f64,
                    best * 1e3,
                    total as f64 / best / 1e9
                );
            }
        }
        let chunk = 64 * KIB;
        let n = total / chunk;
        let cap = lib
            .max_compressed_chunk_size(codec, chunk)
            .unwrap()
            .next_multiple_of(8);
        let dst = c.allocate(n * cap).unwrap();
        let inputs: Vec<Range<usize>> = (0..n).map(|i| i * chunk..(i + 1) * chunk).collect();
        let slots: Vec<Range<usize>> = (0..n).map(|i| i * cap..(i + 1) * cap).collect();
        cb.compress(&stream, codec, &plain, &inputs, &dst, &slots)
            .unwrap();
        let t = Instant::now();
        let sizes = cb
            .compress(&stream, codec, &plain, &inputs, &dst, &slots)
            .unwrap();
        let s = t.elapsed().as_secs_f64();
        println!(
            "nvcomp bench compress {codec:>8} 64 KiB chunks x{n}: ratio {:.3}, {:.2} ms, {:.1} GB/s uncompressed",
            sizes.iter().sum::<usize>() as f64 / total as f64,
            s * 1e3,
            total as f64 / s / 1e9
        );
    }
}
