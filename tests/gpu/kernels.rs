//! Device kernels (`cuda::kernels::ops`) against the host implementation (`memory::host_ops`),
//! which `tests/kernels_host.rs` checks against simple reference code on every machine.
//!
//! Every op runs on random data at odd offsets and lengths inside a larger allocation
//! filled with random guard bytes: the bytes outside the operand must come back
//! unchanged.

use devbuf::__test::host_ops as host;
use devbuf::__test::ops;
use devbuf::Error;
use devbuf::cuda::{Context, DeviceBuffer, Stream};
use devbuf::{ElementType, EqualMode};
use rand::Rng;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;

use crate::common::*;

#[path = "../common/strides.rs"]
mod strides;
use strides::contiguous_strides;

/// A device copy of `bytes`.
fn upload(c: &Context, bytes: &[u8]) -> DeviceBuffer {
    DeviceBuffer::from_slice(c, bytes).unwrap()
}

/// `len` bytes at `offset` of a fresh allocation of `offset + len + tail` random bytes;
/// returns (parent, slice, parent's initial contents).
fn guarded(
    c: &Context,
    r: &mut SmallRng,
    offset: usize,
    len: usize,
    tail: usize,
) -> (DeviceBuffer, DeviceBuffer, Vec<u8>) {
    let init = random_bytes(r, offset + len + tail);
    let parent = upload(c, &init);
    let slice = parent.slice(offset, len).unwrap();
    (parent, slice, init)
}

// ---------------------------------------------------------------------------------------
// Interesting values per kind

fn push_f64s(out: &mut Vec<u8>, kind: ElementType, xs: &[f64]) {
    for &x in xs {
        match kind {
            ElementType::Float16 => out.extend_from_slice(&f64_to_f16_bits(x).to_le_bytes()),
            ElementType::Float32 => out.extend_from_slice(&(x as f32).to_le_bytes()),
            ElementType::Float64 => out.extend_from_slice(&x.to_le_bytes()),
            ElementType::Complex64 => {
                out.extend_from_slice(&(x as f32).to_le_bytes());
                out.extend_from_slice(&(-x as f32).to_le_bytes());
            }
            ElementType::Complex128 => {
                out.extend_from_slice(&x.to_le_bytes());
                out.extend_from_slice(&(x * 0.5).to_le_bytes());
            }
            _ => unreachable!(),
        }
    }
}

/// f64 -> binary16 bits through the host cast (the oracle's own conversion).
fn f64_to_f16_bits(x: f64) -> u16 {
    let mut out = [0u8; 2];
    host::cast(
        &x.to_le_bytes(),
        ElementType::Float64,
        &mut out,
        ElementType::Float16,
    )
    .unwrap();
    u16::from_le_bytes(out)
}

/// `n` elements of `kind`: special values first, then random ones of several flavours.
fn values(r: &mut SmallRng, kind: ElementType, n: usize) -> Vec<u8> {
    let size = kind.size();
    let mut out = Vec::with_capacity(n * size);
    if matches!(kind.kind(), 'f' | 'c') {
        let specials = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            -0.5,
            1.5,
            -2.5,
            f64::NAN,
            -f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            127.0,
            128.0,
            255.0,
            256.0,
            300.7,
            -129.0,
            32767.5,
            65504.0,
            65519.0,
            65520.0,
            -65536.0,
            2147483647.0,
            2147483648.0,
            -2147483648.0,
            -2147483649.0,
            4294967295.0,
            4294967296.0,
            9.2e18,
            9.223_372_036_854_776e18, // 2^63
            1.5e19,
            1.8446744073709552e19,
            2e19,
            -9.3e18,
            1e300,
            -1e300,
            1e-300,
            5.960464477539063e-8, // 2^-24
            2.9802322387695312e-8,
            3.4028234663852886e38,
            1.0 + 2f64.powi(-11),
            1.0 + 2f64.powi(-11) + 2f64.powi(-40),
            1.0 + 2f64.powi(-24),
            f64::MIN_POSITIVE,
        ];
        push_f64s(&mut out, kind, &specials);
    } else {
        let specials: [u64; 10] = [
            0,
            1,
            2,
            u64::MAX,
            0x7f,
            0x80,
            0xff,
            0x7fff_ffff,
            0x8000_0000_0000_0000,
            0xffff_8000,
        ];
        for s in specials {
            out.extend_from_slice(&s.to_le_bytes()[..size]);
        }
        if kind == ElementType::Bool {
            // Canonical bools mostly; a few non-canonical bytes stay from above (0xff..).
            out.extend_from_slice(&[0, 1, 1, 0]);
        }
    }
    while out.len() < n * size {
        let flavour = r.random_range(0..4);
        let start = out.len();
        if matches!(kind.kind(), 'f' | 'c') {
            let x = match flavour {
                0 => r.random_range(-300.0..300.0),
                1 => (r.random_range(-70000i64..70000)) as f64,
                2 => r.random::<f64>() * 10f64.powi(r.random_range(-40..40)),
                _ => f64::from_bits(r.random::<u64>()),
            };
            push_f64s(&mut out, kind, &[x]);
            if flavour == 3 {
                // Random bit patterns of the kind itself (NaN payloads, subnormals).
                let b = random_bytes(r, size);
                out[start..].copy_from_slice(&b);
            }
        } else if kind == ElementType::Bool {
            out.push(r.random_range(0..2));
        } else {
            let b = random_bytes(r, size);
            out.extend_from_slice(&b);
        }
    }
    out.truncate(n * size);
    out
}

/// Whether two outputs of kind `kind` agree: bit-equal, or both NaN in every component
/// that is NaN (the device does not preserve NaN payloads).
fn same_values(kind: ElementType, got: &[u8], want: &[u8]) -> Result<(), String> {
    assert_eq!(got.len(), want.len());
    let c = devbuf::__test::swap_width(kind);
    let is_nan = |b: &[u8]| match c {
        2 if kind == ElementType::Float16 => {
            let h = u16::from_le_bytes([b[0], b[1]]);
            (h & 0x7fff) > 0x7c00
        }
        4 if matches!(kind.kind(), 'f' | 'c') => f32::from_le_bytes(b.try_into().unwrap()).is_nan(),
        8 if matches!(kind.kind(), 'f' | 'c') => f64::from_le_bytes(b.try_into().unwrap()).is_nan(),
        _ => false,
    };
    for (i, (g, w)) in got.chunks(c).zip(want.chunks(c)).enumerate() {
        if g != w && !(is_nan(g) && is_nan(w)) {
            return Err(format!(
                "component {i} (element {}): device {g:02x?}, host {w:02x?}",
                i * c / kind.size()
            ));
        }
    }
    Ok(())
}

gpu_test! {
    // -----------------------------------------------------------------------------------
    // CRC-32 (gzip's; the batch decoder checks nvCOMP's deflate output with it)

    /// The device's CRC-32 of ranges of random bytes equals the host's (flate2), for
    /// every length around the kernel's slice (64 bytes) and block (16 KiB), at every
    /// start alignment, empty ranges included, and over more ranges than one launch
    /// covers (65,535).
    fn crc32_of_device_ranges_equals_the_host() {
        let c = ctx();
        let mut r = rng("crc32_of_device_ranges_equals_the_host");
        let host = |d: &[u8]| {
            let mut h = flate2::Crc::new();
            h.update(d);
            h.sum()
        };
        let data = random_bytes(&mut r, 5 << 20);
        let buf = upload(&c, &data);
        let mut ranges = Vec::new();
        for len in [0usize, 1, 2, 3, 4, 5, 63, 64, 65, 127, 128, 1000, 16_383, 16_384, 16_385, 32_769, 100_000, (1 << 20) + 5, 4 << 20] {
            for start in [0usize, 1, 2, 3, 4, 7, 64, 4093] {
                ranges.push(start..start + len);
            }
        }
        let got = devbuf::__test::device_crc32(&buf, &ranges).unwrap();
        for (rg, g) in ranges.iter().zip(&got) {
            assert_eq!(*g, host(&data[rg.clone()]), "range {rg:?}");
        }
        // Many small ranges: two launches.
        let many: Vec<_> = (0..66_000usize).map(|i| (i * 37) % 4096..(i * 37) % 4096 + i % 41).collect();
        let got = devbuf::__test::device_crc32(&buf, &many).unwrap();
        for (rg, g) in many.iter().zip(&got) {
            assert_eq!(*g, host(&data[rg.clone()]), "range {rg:?}");
        }
        let past_the_end = std::iter::once(0..data.len() + 1).collect::<Vec<_>>();
        let e = devbuf::__test::device_crc32(&buf, &past_the_end).unwrap_err();
        assert!(e.to_string().contains("not inside the buffer"), "{e}");
    }

    // -----------------------------------------------------------------------------------
    // fill

    fn fill_every_width_at_odd_offsets_and_lengths() {
        let c = ctx();
        let mut r = rng("fill_every_width_at_odd_offsets_and_lengths");
        for w in 1..=16usize {
            for offset in [0usize, 1, 3, 8, 13, 16] {
                for count in [0usize, 1, 2, 3, 5, 16, 17, 100, 1031, 4096 + r.random_range(0..100)] {
                    let pattern = random_bytes(&mut r, w);
                    let len = w * count;
                    let (parent, slice, mut want) = guarded(&c, &mut r, offset, len, 21);
                    ops::fill(&slice, &pattern, None).unwrap();
                    host::fill(&mut want[offset..offset + len], &pattern).unwrap();
                    assert!(
                        parent.to_vec::<u8>().unwrap() == want,
                        "fill width {w} offset {offset} count {count}"
                    );
                }
            }
        }
    }

    fn fill_large_buffers() {
        let c = ctx();
        let mut r = rng("fill_large_buffers");
        for w in [1usize, 3, 4, 8, 12, 16] {
            let pattern = random_bytes(&mut r, w);
            let count = test_size(24 << 20, 1 << 16) / w + r.random_range(0..1000);
            let buf = c.allocate(w * count + 5).unwrap();
            let slice = buf.slice(5, w * count).unwrap();
            ops::fill(&slice, &pattern, None).unwrap();
            let got = slice.to_vec::<u8>().unwrap();
            assert!(got.chunks(w).all(|e| e == pattern), "width {w}");
        }
    }

    fn fill_rejects_bad_arguments() {
        let c = ctx();
        let b = c.allocate(12).unwrap();
        for bad in [&[][..], &[0u8; 17][..], &[0u8; 5][..]] {
            let e = ops::fill(&b, bad, None).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        }
        let e = ops::fill(&b.read_only(), &[1], None).unwrap_err();
        assert!(matches!(e, Error::ReadOnly(_)), "{e}");
        ops::fill(&c.allocate(0).unwrap(), &[1, 2, 3], None).unwrap();
    }

    // -----------------------------------------------------------------------------------
    // cast

    fn cast_every_pair_of_kinds() {
        let c = ctx();
        let mut r = rng("cast_every_pair_of_kinds");
        for s in ElementType::ALL {
            for d in ElementType::ALL {
                // Aligned (vector path + remainder), element-aligned but not 16-byte
                // aligned (element path), and misaligned (staged through temporaries).
                for (so, doff, n) in [
                    (0usize, 0usize, 1000 + r.random_range(0..40)),
                    (devbuf::__test::swap_width(s), 2 * devbuf::__test::swap_width(d), 77),
                    (1, 3, 50),
                    (0, 0, 1),
                ] {
                    let src_bytes = values(&mut r, s, n);
                    let src_parent = upload(&c, &[random_bytes(&mut r, so), src_bytes.clone()].concat());
                    let src = src_parent.slice(so, src_bytes.len()).unwrap();
                    let (parent, dst, mut want) = guarded(&c, &mut r, doff, n * d.size(), 7);
                    ops::cast(&src, s, &dst, d, None).unwrap();
                    host::cast(&src_bytes, s, &mut want[doff..doff + n * d.size()], d).unwrap();
                    let got = parent.to_vec::<u8>().unwrap();
                    assert_eq!(&got[..doff], &want[..doff], "{s}->{d}: bytes before");
                    assert_eq!(&got[doff + n * d.size()..], &want[doff + n * d.size()..], "{s}->{d}: bytes after");
                    if let Err(msg) = same_values(d, &got[doff..doff + n * d.size()], &want[doff..doff + n * d.size()]) {
                        panic!("{s} -> {d} (src offset {so}, dst offset {doff}, n {n}): {msg}");
                    }
                }
            }
        }
    }

    fn cast_large_arrays_use_every_path() {
        let c = ctx();
        let mut r = rng("cast_large_arrays_use_every_path");
        let pairs = [
            (ElementType::Float32, ElementType::Float64),
            (ElementType::Float64, ElementType::Float32),
            (ElementType::Float64, ElementType::Float16),
            (ElementType::Int8, ElementType::Float64),
            (ElementType::Complex128, ElementType::UInt8),
            (ElementType::UInt8, ElementType::Complex128),
            (ElementType::Int64, ElementType::Float32),
            (ElementType::Float32, ElementType::Int16),
            (ElementType::Bool, ElementType::Complex64),
        ];
        for (s, d) in pairs {
            let n = (1 << 20) + r.random_range(0..17);
            let src_bytes = values(&mut r, s, n);
            let src = upload(&c, &src_bytes);
            let dst = c.allocate(n * d.size()).unwrap();
            ops::cast(&src, s, &dst, d, None).unwrap();
            let mut want = vec![0u8; n * d.size()];
            host::cast(&src_bytes, s, &mut want, d).unwrap();
            same_values(d, &dst.to_vec::<u8>().unwrap(), &want).unwrap_or_else(|m| panic!("{s} -> {d}: {m}"));
        }
    }

    fn cast_same_kind_copies_and_overlap_is_safe() {
        let c = ctx();
        let mut r = rng("cast_same_kind_copies_and_overlap_is_safe");
        let bytes = values(&mut r, ElementType::Int32, 1000);
        let b = upload(&c, &bytes);
        let out = c.allocate(4000).unwrap();
        ops::cast(&b, ElementType::Int32, &out, ElementType::Int32, None).unwrap();
        assert_eq!(out.to_vec::<u8>().unwrap(), bytes);
        // In place, same size: i32 -> f32 over the same memory.
        ops::cast(&b, ElementType::Int32, &b, ElementType::Float32, None).unwrap();
        let mut want = vec![0u8; 4000];
        host::cast(&bytes, ElementType::Int32, &mut want, ElementType::Float32).unwrap();
        assert_eq!(b.to_vec::<u8>().unwrap(), want);
        // Overlapping, different sizes: u8 [0..1000) -> u16 [500..2500) of one buffer.
        let big_init = random_bytes(&mut r, 3000);
        let big = upload(&c, &big_init);
        ops::cast(&big.slice(0, 1000).unwrap(), ElementType::UInt8, &big.slice(500, 2000).unwrap(), ElementType::UInt16, None).unwrap();
        let mut want = big_init.clone();
        host::cast(&big_init[..1000], ElementType::UInt8, &mut want[500..2500], ElementType::UInt16).unwrap();
        assert_eq!(big.to_vec::<u8>().unwrap(), want);
    }

    fn cast_rejects_bad_arguments() {
        let c = ctx();
        let a = c.allocate(12).unwrap();
        let b = c.allocate(16).unwrap();
        for (s, d) in [(ElementType::Float32, ElementType::Float64), (ElementType::Float64, ElementType::Float64), (ElementType::Complex64, ElementType::UInt8)] {
            let e = ops::cast(&a, s, &b, d, None).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        }
        let e = ops::cast(&a, ElementType::Float32, &c.allocate(24).unwrap().read_only(), ElementType::Float64, None).unwrap_err();
        assert!(matches!(e, Error::ReadOnly(_)), "{e}");
        ops::cast(&c.allocate(0).unwrap(), ElementType::Float32, &c.allocate(0).unwrap(), ElementType::Complex128, None).unwrap();
    }

    // -----------------------------------------------------------------------------------
    // strided_copy

    fn strided_random_layouts() {
        let c = ctx();
        let mut r = rng("strided_random_layouts");
        for trial in 0..400 {
            let case = random_case(&mut r);
            run_case(&c, &mut r, &case, trial);
        }
    }

    fn transposes_of_odd_sizes() {
        let c = ctx();
        let mut r = rng("transposes_of_odd_sizes");
        for (rows, cols) in [(1, 1000), (1000, 1), (1025, 333), (33, 31), (64, 64), (4097, 17), (16, 16), (17, 4099), (300, 500)] {
            for elem in [1usize, 2, 4, 8, 16, 12] {
                // dst (cols x rows, C order) = src (rows x cols, C order) transposed.
                let case = Case {
                    shape: vec![rows, cols],
                    elem,
                    src: View { offset: 0, strides: vec![(cols * elem) as isize, elem as isize], len: rows * cols * elem },
                    dst: View { offset: 0, strides: vec![elem as isize, (rows * elem) as isize], len: rows * cols * elem },
                };
                run_case(&c, &mut r, &case, rows * 100000 + cols);
                // And from a view with a negative stride and an offset.
                let case = Case {
                    shape: vec![rows, cols],
                    elem,
                    src: View { offset: (rows - 1) * cols * elem + elem, strides: vec![-((cols * elem) as isize), elem as isize], len: rows * cols * elem + 2 * elem },
                    dst: View { offset: 3 * elem, strides: vec![elem as isize, (rows * elem) as isize], len: rows * cols * elem + 4 * elem },
                };
                run_case(&c, &mut r, &case, rows * 100000 + cols + 1);
            }
        }
    }

    fn permutations_and_c_f_reorder() {
        let c = ctx();
        let mut r = rng("permutations_and_c_f_reorder");
        let shape = [5usize, 6, 7, 3];
        let elem = 4usize;
        let c_strides = contiguous_strides(&shape, elem, false);
        let f_strides = contiguous_strides(&shape, elem, true);
        let n: usize = shape.iter().product::<usize>() * elem;
        // C -> F and F -> C.
        for (s, d) in [(&c_strides, &f_strides), (&f_strides, &c_strides)] {
            let case = Case {
                shape: shape.to_vec(),
                elem,
                src: View { offset: 0, strides: s.clone(), len: n },
                dst: View { offset: 0, strides: d.clone(), len: n },
            };
            run_case(&c, &mut r, &case, 0);
        }
        // Every permutation of 4 axes: dst = src.transpose(perm), C order.
        let mut perm = [0usize, 1, 2, 3];
        for i in 0..24 {
            perm.shuffle(&mut r);
            let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
            let src_strides: Vec<isize> = perm.iter().map(|&p| c_strides[p]).collect();
            let case = Case {
                shape: out_shape.clone(),
                elem,
                src: View { offset: 0, strides: src_strides, len: n },
                dst: View { offset: 0, strides: contiguous_strides(&out_shape, elem, false), len: n },
            };
            run_case(&c, &mut r, &case, i);
        }
    }

    fn strided_get_with_steps_uses_runs_at_every_alignment() {
        let c = ctx();
        let mut r = rng("strided_get_with_steps_uses_runs_at_every_alignment");
        // a[::2, k:-1] of a rows x cols array for every byte misalignment between the
        // two sides (elem 1 and 2), and the benchmark's float32 case.
        for (elem, rows, cols) in [(1usize, 37usize, 1500usize), (2, 20, 700), (4, 300, 1000), (8, 9, 333), (16, 5, 100)] {
            for k in 0..17usize {
                let n = cols - k - 1;
                let case = Case {
                    shape: vec![rows.div_ceil(2), n],
                    elem,
                    src: View { offset: k * elem, strides: vec![(2 * cols * elem) as isize, elem as isize], len: rows * cols * elem },
                    dst: View { offset: k, strides: vec![(n * elem) as isize, elem as isize], len: rows.div_ceil(2) * n * elem + k },
                };
                run_case(&c, &mut r, &case, elem * 1000 + k);
            }
        }
    }

    fn strided_zero_d_empty_and_broadcast() {
        let c = ctx();
        let mut r = rng("strided_zero_d_empty_and_broadcast");
        // 0-d: one element.
        for elem in [1usize, 3, 8, 16, 24] {
            let case = Case {
                shape: vec![],
                elem,
                src: View { offset: 5, strides: vec![], len: elem + 9 },
                dst: View { offset: 1, strides: vec![], len: elem + 2 },
            };
            run_case(&c, &mut r, &case, elem);
        }
        // Zero-length axes: nothing is touched, whatever the strides and offsets.
        let a = upload(&c, &random_bytes(&mut r, 64));
        let before = a.to_vec::<u8>().unwrap();
        ops::strided_copy(&a, 0, &[4, 1 << 40], &a, 0, &[0, 4], &[0, 9], 4, None).unwrap();
        assert_eq!(a.to_vec::<u8>().unwrap(), before);
        // Broadcasting reads (source stride 0).
        let case = Case {
            shape: vec![50, 40],
            elem: 8,
            src: View { offset: 8, strides: vec![0, 8], len: 41 * 8 },
            dst: View { offset: 0, strides: vec![320, 8], len: 50 * 320 },
        };
        run_case(&c, &mut r, &case, 0);
    }

    fn strided_large_contiguous_and_runs() {
        let c = ctx();
        let mut r = rng("strided_large_contiguous_and_runs");
        // Contiguous (one memcpy), then a region of a big array (runs), then a reversal.
        let n = test_size(1 << 20, 1 << 14);
        let m = test_size(1 << 18, 1 << 12);
        let cases = [
            Case {
                shape: vec![n],
                elem: 4,
                src: View { offset: 4, strides: vec![4], len: 4 * n + 8 },
                dst: View { offset: 0, strides: vec![4], len: 4 * n },
            },
            Case {
                shape: vec![512, 3000],
                elem: 4,
                src: View { offset: 0, strides: vec![12000, 4], len: 512 * 12000 },
                dst: View { offset: 4 * 7 * 4000 + 4 * 5, strides: vec![16000, 4], len: 600 * 16000 },
            },
            Case {
                shape: vec![3 * m],
                elem: 2,
                src: View { offset: 2 * (3 * m - 1), strides: vec![-2], len: 2 * 3 * m },
                dst: View { offset: 0, strides: vec![2], len: 2 * 3 * m },
            },
        ];
        for (i, case) in cases.iter().enumerate() {
            run_case(&c, &mut r, case, i);
        }
    }

    fn strided_general_with_64_bit_indices() {
        let c = ctx();
        // 2^31 + 3 one-byte elements read with stride 2 (the general kernel with 64-bit
        // indices): 4 GiB + 2 GiB of device memory.
        if small_sizes() {
            println!("SKIPPED strided_general_with_64_bit_indices: DEVBUF_TEST_SMALL is set (it needs 2^31 elements)");
            return;
        }
        let n = (1usize << 31) + 3;
        let need = 3 * n + (1 << 30);
        let free = c.free_memory().unwrap();
        if free < need {
            println!("SKIPPED strided_general_with_64_bit_indices: needs {need} bytes free, the device has {free}");
            return;
        }
        let pattern = [11u8, 22, 33];
        let src = c.allocate((2 * n).div_ceil(3) * 3).unwrap();
        ops::fill(&src, &pattern, None).unwrap();
        let dst = c.allocate(n).unwrap();
        ops::strided_copy(&src, 0, &[2], &dst, 0, &[1], &[n], 1, None).unwrap();
        for start in [0usize, (1 << 31) - (1 << 19), n - (1 << 20)] {
            // Windows that cross the 2^31 boundary; the middle one may end at `n`.
            let mut got = vec![0u8; (1usize << 20).min(n - start)];
            dst.copy_to_host(start, &mut got).unwrap();
            for (k, &b) in got.iter().enumerate() {
                let i = start + k;
                assert_eq!(b, pattern[(2 * i) % 3], "element {i}");
            }
        }
    }

    fn strided_overlapping_source_and_destination() {
        let c = ctx();
        let mut r = rng("strided_overlapping_source_and_destination");
        let init = random_bytes(&mut r, 4000);
        let buf = upload(&c, &init);
        // Shift 900 u32 right by one element within one buffer (memmove semantics).
        ops::strided_copy(&buf, 0, &[4], &buf, 4, &[4], &[900], 4, None).unwrap();
        let mut want = init.clone();
        host::strided_copy(&init, 0, &[4], &mut want, 4, &[4], &[900], 4).unwrap();
        assert_eq!(buf.to_vec::<u8>().unwrap(), want);
        // Transpose a 30 x 30 u16 matrix in place.
        let init = random_bytes(&mut r, 1800);
        let buf = upload(&c, &init);
        ops::strided_copy(&buf, 0, &[60, 2], &buf, 0, &[2, 60], &[30, 30], 2, None).unwrap();
        let mut want = init.clone();
        host::strided_copy(&init, 0, &[60, 2], &mut want, 0, &[2, 60], &[30, 30], 2).unwrap();
        assert_eq!(buf.to_vec::<u8>().unwrap(), want);
    }

    fn strided_rejects_out_of_range_and_bad_arguments() {
        let c = ctx();
        let mut r = rng("strided_rejects_out_of_range_and_bad_arguments");
        // Initialised: one copy below succeeds, and initcheck reports a copy of
        // never-written memory.
        let a = upload(&c, &random_bytes(&mut r, 100));
        let b = c.allocate(100).unwrap();
        // One past the end on either side.
        let e = ops::strided_copy(&a, 8, &[24, 4], &b, 0, &[24, 4], &[4, 6], 4, None).unwrap_err();
        assert!(matches!(e, Error::OutOfBounds { size: 100, .. }), "{e}");
        let e = ops::strided_copy(&a, 0, &[24, 4], &b, 8, &[24, 4], &[4, 6], 4, None).unwrap_err();
        assert!(matches!(e, Error::OutOfBounds { size: 100, .. }), "{e}");
        // Reaching before the start through a negative stride.
        let e = ops::strided_copy(&a, 4, &[-4], &b, 0, &[4], &[3], 4, None).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        // Mismatched lengths, too many axes, element size 0, zero destination stride.
        for e in [
            ops::strided_copy(&a, 0, &[4], &b, 0, &[4, 4], &[2], 4, None).unwrap_err(),
            ops::strided_copy(&a, 0, &[0; 33], &b, 0, &[0; 33], &[1; 33], 4, None).unwrap_err(),
            ops::strided_copy(&a, 0, &[4], &b, 0, &[4], &[2], 0, None).unwrap_err(),
            ops::strided_copy(&a, 0, &[4], &b, 0, &[0], &[2], 4, None).unwrap_err(),
        ] {
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        }
        let e = ops::strided_copy(&a, 0, &[4], &b.read_only(), 0, &[4], &[2], 4, None).unwrap_err();
        assert!(matches!(e, Error::ReadOnly(_)), "{e}");
        // 32 axes of length 1 are fine.
        ops::strided_copy(&a, 0, &[4; 32], &b, 0, &[4; 32], &[1; 32], 4, None).unwrap();
        // 32 axes that do not merge with 12-byte elements need a 33rd axis for the
        // element's units: an error on the device, aligned or not (a misaligned
        // destination used to panic while splitting the units into bytes).
        let d = c.allocate(400).unwrap();
        for offset in [0usize, 1, 2] {
            let e = ops::strided_copy(&a, 0, &[0; 32], &d, offset, &[12; 32], &[2; 32], 12, None)
                .unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "offset {offset}: {e}");
            assert!(e.to_string().contains("33 axes"), "{e}");
        }
    }

    // -----------------------------------------------------------------------------------
    // byteswap

    fn byteswap_every_width_and_alignment() {
        let c = ctx();
        let mut r = rng("byteswap_every_width_and_alignment");
        for width in [1usize, 2, 4, 8] {
            for offset in 0..17usize {
                for count in [0usize, 1, 3, 7, 64, 1000 + r.random_range(0..50)] {
                    let (parent, slice, mut want) = guarded(&c, &mut r, offset, width * count, 9);
                    ops::byteswap(&slice, width, None).unwrap();
                    host::byteswap(&mut want[offset..offset + width * count], width).unwrap();
                    assert!(parent.to_vec::<u8>().unwrap() == want, "width {width} offset {offset} count {count}");
                }
            }
        }
        // Large, and twice is the identity.
        let init = random_bytes(&mut r, test_size(16 << 20, 1 << 20));
        let b = upload(&c, &init);
        ops::byteswap(&b, 8, None).unwrap();
        let mut want = init.clone();
        host::byteswap(&mut want, 8).unwrap();
        assert!(b.to_vec::<u8>().unwrap() == want);
        ops::byteswap(&b, 8, None).unwrap();
        assert!(b.to_vec::<u8>().unwrap() == init);
        for (w, len) in [(3usize, 9usize), (16, 16), (4, 6)] {
            let e = ops::byteswap(&c.allocate(len).unwrap(), w, None).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        }
        let e = ops::byteswap(&c.allocate(8).unwrap().read_only(), 2, None).unwrap_err();
        assert!(matches!(e, Error::ReadOnly(_)), "{e}");
    }

    // -----------------------------------------------------------------------------------
    // all_equal

    fn all_equal_every_kind_and_mode() {
        let c = ctx();
        let mut r = rng("all_equal_every_kind_and_mode");
        let modes = [
            EqualMode::Bitwise,
            EqualMode::Numeric { equal_nan: false },
            EqualMode::Numeric { equal_nan: true },
        ];
        for kind in ElementType::ALL {
            let size = kind.size();
            let pool = values(&mut r, kind, 60);
            let mut candidates: Vec<&[u8]> = pool.chunks(size).collect();
            // Under a sanitizer (small sizes) the first 12 values only (for floats:
            // the signed zeros, NaNs and infinities among them): each value is 15
            // launches, and racecheck makes a launch slow.
            candidates.truncate(test_size(candidates.len(), 12));
            for (vi, value) in candidates.iter().enumerate() {
                for count in [1usize, 2, 5, 33, 1000 + r.random_range(0..100)] {
                    let offset = [0usize, size, 1, 3, 16][vi % 5];
                    // Every element equal to `value`, in its own bits or another
                    // encoding of the same number (-0.0 for 0.0, another NaN).
                    let alt = candidates[r.random_range(0..candidates.len())];
                    let mut data = value.repeat(count);
                    let pos = match vi % 3 {
                        0 => 0,
                        1 => count - 1,
                        _ => r.random_range(0..count),
                    };
                    // Half the time one element (first, last or random) is replaced.
                    if r.random_bool(0.5) {
                        data[pos * size..(pos + 1) * size].copy_from_slice(alt);
                    }
                    let (_parent, slice, _) = guarded(&c, &mut r, offset, data.len(), 5);
                    slice.copy_from_host(0, &data).unwrap();
                    for mode in modes {
                        let got = ops::all_equal(&slice, kind, value, mode, None).unwrap();
                        let want = host::all_equal(&data, kind, value, mode).unwrap();
                        assert_eq!(
                            got, want,
                            "{kind} value {value:02x?} count {count} offset {offset} alt {alt:02x?} at {pos}, {mode:?}"
                        );
                    }
                }
            }
        }
    }

    fn all_equal_signed_zero_nan_and_bool_rules() {
        let c = ctx();
        let bitwise = EqualMode::Bitwise;
        let strict = EqualMode::Numeric { equal_nan: false };
        let nan_ok = EqualMode::Numeric { equal_nan: true };
        let neg_zeros = upload(&c, &(-0.0f32).to_le_bytes().repeat(1000));
        let zero = 0.0f32.to_le_bytes();
        assert!(!ops::all_equal(&neg_zeros, ElementType::Float32, &zero, bitwise, None).unwrap());
        assert!(ops::all_equal(&neg_zeros, ElementType::Float32, &zero, strict, None).unwrap());
        let nans = upload(&c, &f64::NAN.to_le_bytes().repeat(999));
        let other_nan = f64::from_bits(0x7ff0_0000_0000_0001).to_le_bytes();
        assert!(ops::all_equal(&nans, ElementType::Float64, &other_nan, nan_ok, None).unwrap());
        assert!(!ops::all_equal(&nans, ElementType::Float64, &other_nan, strict, None).unwrap());
        assert!(!ops::all_equal(&nans, ElementType::Float64, &other_nan, bitwise, None).unwrap());
        assert!(ops::all_equal(&nans, ElementType::Float64, &f64::NAN.to_le_bytes(), bitwise, None).unwrap());
        // Complex: NaN in either part is a NaN.
        let c64 = |re: f32, im: f32| [re.to_le_bytes(), im.to_le_bytes()].concat();
        let mixed = upload(&c, &[c64(f32::NAN, 1.0), c64(2.0, f32::NAN)].concat().repeat(100));
        assert!(ops::all_equal(&mixed, ElementType::Complex64, &c64(0.0, f32::NAN), nan_ok, None).unwrap());
        assert!(!ops::all_equal(&mixed, ElementType::Complex64, &c64(0.0, f32::NAN), strict, None).unwrap());
        let zeros = upload(&c, &c64(-0.0, 0.0).repeat(100));
        assert!(ops::all_equal(&zeros, ElementType::Complex64, &c64(0.0, -0.0), strict, None).unwrap());
        assert!(!ops::all_equal(&zeros, ElementType::Complex64, &c64(0.0, -0.0), bitwise, None).unwrap());
        // Bools: any non-zero byte is true numerically.
        let bools = upload(&c, &[1u8, 2, 255, 1].repeat(100));
        assert!(ops::all_equal(&bools, ElementType::Bool, &[1], strict, None).unwrap());
        assert!(!ops::all_equal(&bools, ElementType::Bool, &[1], bitwise, None).unwrap());
        // Empty: true, as numpy.array_equal of empty arrays.
        let empty = c.allocate(0).unwrap();
        assert!(ops::all_equal(&empty, ElementType::Float64, &f64::NAN.to_le_bytes(), strict, None).unwrap());
    }

    fn all_equal_large_buffers_and_early_exit() {
        let c = ctx();
        let mut r = rng("all_equal_large_buffers_and_early_exit");
        let n = test_size(64 << 20, 64 << 10) / 4 + 3;
        let value = 3.25f32.to_le_bytes();
        let buf = c.allocate(4 * n).unwrap();
        ops::fill(&buf, &value, None).unwrap();
        for _ in 0..3 {
            assert!(ops::all_equal(&buf, ElementType::Float32, &value, EqualMode::Bitwise, None).unwrap());
        }
        // No allocation per call (a context of its own: other tests allocate in the
        // primary one concurrently).
        eprintln!("all_equal_large_buffers_and_early_exit: large buffer checked; a dedicated context");
        let own = Context::new_dedicated(0).unwrap();
        let small = own.allocate(4 * 1000).unwrap();
        ops::fill(&small, &value, None).unwrap();
        let before = own.bytes_allocated();
        for _ in 0..3 {
            assert!(ops::all_equal(&small, ElementType::Float32, &value, EqualMode::Bitwise, None).unwrap());
        }
        assert_eq!(own.bytes_allocated(), before, "all_equal allocates nothing per call");
        eprintln!("all_equal_large_buffers_and_early_exit: no allocation per call; differences");
        for pos in [0usize, n - 1, r.random_range(0..n)] {
            buf.copy_from_host(4 * pos, &4.0f32.to_le_bytes()).unwrap();
            assert!(!ops::all_equal(&buf, ElementType::Float32, &value, EqualMode::Bitwise, None).unwrap(), "differs at {pos}");
            buf.copy_from_host(4 * pos, &value).unwrap();
            assert!(ops::all_equal(&buf, ElementType::Float32, &value, EqualMode::Bitwise, None).unwrap());
        }
        // NaN predicate on a large buffer, one non-NaN at the end.
        eprintln!("all_equal_large_buffers_and_early_exit: the NaN predicate");
        let nans = c.allocate(8 * n).unwrap();
        ops::fill(&nans, &f64::NAN.to_le_bytes(), None).unwrap();
        let nan_ok = EqualMode::Numeric { equal_nan: true };
        assert!(ops::all_equal(&nans, ElementType::Float64, &f64::NAN.to_le_bytes(), nan_ok, None).unwrap());
        nans.copy_from_host(8 * (n - 1), &1.0f64.to_le_bytes()).unwrap();
        assert!(!ops::all_equal(&nans, ElementType::Float64, &f64::NAN.to_le_bytes(), nan_ok, None).unwrap());
        // Many calls from several threads at once (the scratch pool). Under small sizes
        // (the sanitizers) from one thread: racecheck never returned from four host
        // threads launching at once (420 s on the H100 for 12 launches of 64 KiB,
        // 2026-11-24, where each launch above takes milliseconds under it); it checks
        // hazards inside a kernel, which one thread's launches exercise the same.
        eprintln!("all_equal_large_buffers_and_early_exit: several threads at once");
        let buf2 = buf.clone();
        let handles: Vec<_> = (0..test_size(4, 1))
            .map(|_| {
                let b = buf2.clone();
                std::thread::spawn(move || {
                    (0..test_size(20, 3)).all(|_| ops::all_equal(&b, ElementType::Float32, &3.25f32.to_le_bytes(), EqualMode::Bitwise, None).unwrap())
                })
            })
            .collect();
        for h in handles {
            assert!(h.join().unwrap());
        }
    }

    /// Operands that end exactly where their allocation ends, at every start alignment
    /// (the other tests keep guard bytes after the operand). Under compute-sanitizer, or
    /// the CPU emulator with exact-size allocations, any access past the end (a whole
    /// 16-byte vector read for a partial one) is reported; here the values are checked.
    fn ops_on_operands_that_end_their_allocation() {
        let c = ctx();
        let mut r = rng("ops_on_operands_that_end_their_allocation");
        // A fresh allocation of `offset + len` bytes and its last `len` bytes.
        let tail_of = |r: &mut SmallRng, offset: usize, init: &[u8]| {
            let parent = upload(&c, &[random_bytes(r, offset), init.to_vec()].concat());
            let slice = parent.slice(offset, init.len()).unwrap();
            (parent, slice)
        };
        for offset in 0..17usize {
            for len in [1usize, 2, 7, 8, 15, 16, 17, 24, 31, 32, 33, 48, 100, 1000, 4096 + 40] {
                let init = random_bytes(&mut r, len);
                for w in [1usize, 2, 3, 4, 8, 12, 16].into_iter().filter(|w| len % w == 0) {
                    let pattern = random_bytes(&mut r, w);
                    let (_p, s) = tail_of(&mut r, offset, &init);
                    ops::fill(&s, &pattern, None).unwrap();
                    assert!(s.to_vec::<u8>().unwrap().chunks(w).all(|e| e == pattern), "fill {w} at {offset}+{len}");
                }
                for w in [2usize, 4, 8].into_iter().filter(|w| len % w == 0) {
                    let (_p, s) = tail_of(&mut r, offset, &init);
                    ops::byteswap(&s, w, None).unwrap();
                    let mut want = init.clone();
                    host::byteswap(&mut want, w).unwrap();
                    assert!(s.to_vec::<u8>().unwrap() == want, "byteswap {w} at {offset}+{len}");
                }
                for kind in ElementType::ALL.into_iter().filter(|k| len % k.size() == 0) {
                    let n = len / kind.size();
                    let data = values(&mut r, kind, n);
                    let (_p, s) = tail_of(&mut r, offset, &data);
                    // The pattern kernel (the first element) and the predicate kernel (NaN
                    // with equal_nan, true for bools), on the data and on a buffer that
                    // holds the value everywhere (so that every element is read).
                    let first = data[..kind.size()].to_vec();
                    let mut pred = vec![1u8; kind.size()];
                    if matches!(kind.kind(), 'f' | 'c') {
                        host::cast(&f64::NAN.to_le_bytes(), ElementType::Float64, &mut pred, kind).unwrap();
                    }
                    let nan_ok = EqualMode::Numeric { equal_nan: true };
                    for (value, mode) in [(&first, EqualMode::Bitwise), (&first, nan_ok), (&pred, nan_ok)] {
                        let got = ops::all_equal(&s, kind, value, mode, None).unwrap();
                        assert_eq!(got, host::all_equal(&data, kind, value, mode).unwrap(), "all_equal {kind} at {offset}+{len}");
                        let (_q, u) = tail_of(&mut r, offset, &value.repeat(n));
                        assert!(ops::all_equal(&u, kind, value, mode, None).unwrap(), "uniform {kind} {mode:?} at {offset}+{len}");
                    }
                    // Casts from and to this kind, both operands ending their allocations.
                    for other in [ElementType::UInt8, ElementType::Float64, ElementType::Complex128] {
                        let dst_init = random_bytes(&mut r, n * other.size());
                        let (_d, dst) = tail_of(&mut r, offset / 2, &dst_init);
                        ops::cast(&s, kind, &dst, other, None).unwrap();
                        let mut want = vec![0u8; n * other.size()];
                        host::cast(&data, kind, &mut want, other).unwrap();
                        same_values(other, &dst.to_vec::<u8>().unwrap(), &want).unwrap_or_else(|m| panic!("cast {kind} -> {other} at {offset}+{len}: {m}"));
                        let src_bytes = values(&mut r, other, n);
                        let (_e, src) = tail_of(&mut r, offset / 3, &src_bytes);
                        let (_f, back) = tail_of(&mut r, offset, &data);
                        ops::cast(&src, other, &back, kind, None).unwrap();
                        let mut want = vec![0u8; len];
                        host::cast(&src_bytes, other, &mut want, kind).unwrap();
                        same_values(kind, &back.to_vec::<u8>().unwrap(), &want).unwrap_or_else(|m| panic!("cast {other} -> {kind} at {offset}+{len}: {m}"));
                    }
                }
                // Byte comparison (DeviceBuffer::equals) of two allocation tails.
                let (_a, a) = tail_of(&mut r, offset, &init);
                let (_b, b) = tail_of(&mut r, (offset * 7) % 17, &init);
                assert!(a.equals(&b).unwrap(), "equals at {offset}+{len}");
            }
        }
        // Strided runs (rows of >= 512 bytes) whose last row ends both allocations, at
        // every relative misalignment and tail length.
        for k in 0..17usize {
            for (elem, rows, cols) in [(1usize, 5usize, 600usize), (2, 3, 333), (4, 3, 150)] {
                let n = cols - k.min(cols - 1);
                let case = Case {
                    shape: vec![rows, n],
                    elem,
                    src: View { offset: k * elem, strides: vec![(cols * elem) as isize, elem as isize], len: (rows - 1) * cols * elem + k * elem + n * elem },
                    dst: View { offset: k, strides: vec![(n * elem) as isize, elem as isize], len: k + rows * n * elem },
                };
                run_case(&c, &mut r, &case, elem * 100 + k);
            }
        }
    }

    fn all_equal_rejects_bad_arguments() {
        let c = ctx();
        let b = c.allocate(12).unwrap();
        for (kind, value) in [(ElementType::Float64, &[0u8; 8][..]), (ElementType::Float32, &[0u8; 8][..]), (ElementType::Int16, &[0u8; 3][..])] {
            let e = ops::all_equal(&b, kind, value, EqualMode::Bitwise, None).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{kind}: {e}");
        }
    }

    // -----------------------------------------------------------------------------------
    // Streams and contexts

    fn ops_on_a_stream() {
        let c = ctx();
        let mut r = rng("ops_on_a_stream");
        let s = Stream::new(&c).unwrap();
        let n = 100_000usize;
        let a = c.allocate(4 * n).unwrap();
        ops::fill(&a, &7i32.to_le_bytes(), Some(&s)).unwrap();
        let b = c.allocate(8 * n).unwrap();
        ops::cast(&a, ElementType::Int32, &b, ElementType::Float64, Some(&s)).unwrap();
        ops::byteswap(&b, 8, Some(&s)).unwrap();
        ops::byteswap(&b, 8, Some(&s)).unwrap();
        let t = c.allocate(8 * n).unwrap();
        ops::strided_copy(&b, 0, &[8 * 250, 8], &t, 0, &[8, 8 * 400], &[400, 250], 8, Some(&s)).unwrap();
        assert!(ops::all_equal(&t, ElementType::Float64, &7.0f64.to_le_bytes(), EqualMode::Bitwise, Some(&s)).unwrap());
        s.synchronize().unwrap();
        assert!(t.to_vec::<f64>().unwrap().iter().all(|&x| x == 7.0));
        // A stream of another context is refused.
        let other = Context::new_dedicated(0).unwrap();
        let so = Stream::new(&other).unwrap();
        let e = ops::fill(&a, &[1], Some(&so)).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        // A source in another context is copied over first.
        let init = values(&mut r, ElementType::Float32, 5000);
        let foreign = DeviceBuffer::from_slice(&other, &init).unwrap();
        let out = c.allocate(8 * 5000).unwrap();
        ops::cast(&foreign, ElementType::Float32, &out, ElementType::Float64, None).unwrap();
        let mut want = vec![0u8; 8 * 5000];
        host::cast(&init, ElementType::Float32, &mut want, ElementType::Float64).unwrap();
        same_values(ElementType::Float64, &out.to_vec::<u8>().unwrap(), &want).unwrap();
        let t2 = c.allocate(4 * 5000).unwrap();
        ops::strided_copy(&foreign, 0, &[4 * 100, 4], &t2, 0, &[4, 4 * 50], &[50, 100], 4, None).unwrap();
        let mut want = vec![0u8; 4 * 5000];
        host::strided_copy(&init, 0, &[4 * 100, 4], &mut want, 0, &[4, 4 * 50], &[50, 100], 4).unwrap();
        assert_eq!(t2.to_vec::<u8>().unwrap(), want);
    }
}

// ---------------------------------------------------------------------------------------
// Random strided cases

/// One side of a strided copy: offset and strides in bytes, buffer length.
#[derive(Debug, Clone)]
struct View {
    offset: usize,
    strides: Vec<isize>,
    len: usize,
}

#[derive(Debug, Clone)]
struct Case {
    shape: Vec<usize>,
    elem: usize,
    src: View,
    dst: View,
}

/// A view of `shape` (after permuting with `perm`) cut from a random parent array with
/// random starts and steps (negative too), the parent C- or F-ordered.
fn random_view(r: &mut SmallRng, shape: &[usize], elem: usize, allow_broadcast: bool) -> View {
    let nd = shape.len();
    let steps: Vec<isize> = (0..nd)
        .map(|_| {
            let s = [1isize, 1, 1, 2, 3, -1, -2][r.random_range(0..7)];
            if allow_broadcast && r.random_bool(0.1) {
                0
            } else {
                s
            }
        })
        .collect();
    // Parent axis lengths: room for the view plus some slack.
    let parent: Vec<usize> = (0..nd)
        .map(|k| {
            let need = if shape[k] == 0 {
                1
            } else {
                (shape[k] - 1) * steps[k].unsigned_abs() + 1
            };
            need + r.random_range(0..3)
        })
        .collect();
    let pstrides = contiguous_strides(&parent, elem, r.random_bool(0.3));
    let mut offset =
        r.random_range(0..3) * elem + r.random_range(0..2) * r.random_range(0..elem.max(1));
    let mut strides = vec![0isize; nd];
    for k in 0..nd {
        strides[k] = pstrides[k] * steps[k];
        let used = if shape[k] == 0 {
            0
        } else {
            (shape[k] - 1) * steps[k].unsigned_abs()
        };
        let slack = parent[k] - 1 - used;
        let start = r.random_range(0..=slack) + if steps[k] < 0 { used } else { 0 };
        offset += start * pstrides[k] as usize;
    }
    let len = offset + parent.iter().product::<usize>() * elem + r.random_range(0..8);
    View {
        offset,
        strides,
        len,
    }
}

fn random_case(r: &mut SmallRng) -> Case {
    let nd = r.random_range(0..=6);
    let shape: Vec<usize> = (0..nd)
        .map(|_| match r.random_range(0..10) {
            0 => 0,
            1 => 1,
            2 => r.random_range(30..200),
            _ => r.random_range(2..8),
        })
        .collect();
    // Keep the element count moderate.
    let shape: Vec<usize> = if shape.iter().product::<usize>() > 200_000 {
        shape.iter().map(|&n| n.min(7)).collect()
    } else {
        shape
    };
    let elem = [1usize, 2, 3, 4, 4, 8, 12, 16][r.random_range(0..8)];
    let src = random_view(r, &shape, elem, true);
    // The destination: a random view, then permuted relative to the source.
    let mut dst = random_view(r, &shape, elem, false);
    if nd > 1 && r.random_bool(0.5) {
        // dst.strides[k] = C-contiguous strides of a permuted shape, read back.
        let mut perm: Vec<usize> = (0..nd).collect();
        perm.shuffle(r);
        let pshape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        let pstr = contiguous_strides(&pshape, elem, false);
        let mut strides = vec![0isize; nd];
        for (i, &p) in perm.iter().enumerate() {
            strides[p] = pstr[i];
        }
        dst = View {
            offset: r.random_range(0..3) * elem,
            strides,
            len: 0,
        };
        dst.len = dst.offset + shape.iter().product::<usize>().max(1) * elem + 3;
    }
    Case {
        shape,
        elem,
        src,
        dst,
    }
}

fn run_case(c: &Context, r: &mut SmallRng, case: &Case, id: usize) {
    let src_init = random_bytes(r, case.src.len);
    let dst_init = random_bytes(r, case.dst.len);
    let src = upload(c, &src_init);
    let dst = upload(c, &dst_init);
    let mut want = dst_init.clone();
    host::strided_copy(
        &src_init,
        case.src.offset,
        &case.src.strides,
        &mut want,
        case.dst.offset,
        &case.dst.strides,
        &case.shape,
        case.elem,
    )
    .unwrap_or_else(|e| panic!("host rejected case {id} {case:?}: {e}"));
    ops::strided_copy(
        &src,
        case.src.offset,
        &case.src.strides,
        &dst,
        case.dst.offset,
        &case.dst.strides,
        &case.shape,
        case.elem,
        None,
    )
    .unwrap_or_else(|e| panic!("device rejected case {id} {case:?}: {e}"));
    let got = dst.to_vec::<u8>().unwrap();
    if got != want {
        let first = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
        panic!("case {id} {case:?}: first difference at byte {first}");
    }
}
