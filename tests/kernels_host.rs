//! The host ops (`memory::host_ops`) against simple, independent reference code,
//! on every machine. The GPU tests then compare the device kernels with these host ops.

use devbuf::__test::host_ops as host;
use devbuf::Error;
use devbuf::{ElementType, EqualMode};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, RngCore};

#[path = "common/strides.rs"]
mod strides;
use strides::contiguous_strides;
#[path = "common/random.rs"]
mod random;
use random::rng;

fn bytes(r: &mut SmallRng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    r.fill_bytes(&mut v);
    v
}

// ---------------------------------------------------------------------------------------
// strided_copy: element by element over every multi-index

#[allow(clippy::too_many_arguments)]
fn reference_strided(
    src: &[u8],
    so: usize,
    ss: &[isize],
    dst: &mut [u8],
    dof: usize,
    ds: &[isize],
    shape: &[usize],
    elem: usize,
) {
    let count: usize = shape.iter().product();
    for flat in 0..count {
        let (mut s, mut d) = (so as isize, dof as isize);
        let mut rest = flat;
        for k in (0..shape.len()).rev() {
            let i = (rest % shape[k]) as isize;
            rest /= shape[k];
            s += i * ss[k];
            d += i * ds[k];
        }
        let (s, d) = (s as usize, d as usize);
        dst[d..d + elem].copy_from_slice(&src[s..s + elem]);
    }
}

/// (offset, strides, buffer length) of a random view of `shape` into a parent array.
fn view(
    r: &mut SmallRng,
    shape: &[usize],
    elem: usize,
    broadcast: bool,
) -> (usize, Vec<isize>, usize) {
    let nd = shape.len();
    let steps: Vec<isize> = (0..nd)
        .map(|_| {
            if broadcast && r.random_bool(0.1) {
                0
            } else {
                [1isize, 1, 2, 3, -1, -3][r.random_range(0..6)]
            }
        })
        .collect();
    let used: Vec<usize> = (0..nd)
        .map(|k| shape[k].saturating_sub(1) * steps[k].unsigned_abs())
        .collect();
    let parent: Vec<usize> = (0..nd)
        .map(|k| used[k] + 1 + r.random_range(0..3))
        .collect();
    let pst = contiguous_strides(&parent, elem, r.random_bool(0.3));
    let mut offset = r.random_range(0..5);
    let mut strides = vec![0isize; nd];
    for k in 0..nd {
        strides[k] = pst[k] * steps[k];
        let start =
            r.random_range(0..=parent[k] - 1 - used[k]) + if steps[k] < 0 { used[k] } else { 0 };
        offset += start * pst[k] as usize;
    }
    let len = offset + parent.iter().product::<usize>() * elem + r.random_range(0..4);
    (offset, strides, len)
}

#[test]
fn strided_copy_matches_reference_on_random_layouts() {
    let mut r = rng("strided_copy_matches_reference_on_random_layouts");
    for _ in 0..3000 {
        let nd = r.random_range(0..=5);
        let shape: Vec<usize> = (0..nd)
            .map(|_| [0usize, 1, 2, 3, 4, 5, 9, 17][r.random_range(0..8)])
            .collect();
        let elem = [1usize, 2, 3, 4, 6, 8, 12, 16, 20][r.random_range(0..9)];
        let (so, ss, slen) = view(&mut r, &shape, elem, true);
        let (dof, mut ds, mut dlen) = view(&mut r, &shape, elem, false);
        if nd > 1 && r.random_bool(0.5) {
            let mut perm: Vec<usize> = (0..nd).collect();
            perm.shuffle(&mut r);
            let pshape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
            let pst = contiguous_strides(&pshape, elem, false);
            for (i, &p) in perm.iter().enumerate() {
                ds[p] = pst[i];
            }
            dlen = dof + shape.iter().product::<usize>().max(1) * elem;
        }
        let src = bytes(&mut r, slen);
        let init = bytes(&mut r, dlen);
        let mut want = init.clone();
        reference_strided(&src, so, &ss, &mut want, dof, &ds, &shape, elem);
        let mut got = init.clone();
        host::strided_copy(&src, so, &ss, &mut got, dof, &ds, &shape, elem).unwrap();
        assert!(
            got == want,
            "shape {shape:?} elem {elem} src ({so}, {ss:?}) dst ({dof}, {ds:?})"
        );
    }
}

#[test]
fn strided_copy_bounds() {
    let src = [0u8; 24];
    let mut dst = [0u8; 24];
    let e = host::strided_copy(&src, 4, &[8], &mut dst, 0, &[8], &[3], 8).unwrap_err();
    assert!(
        matches!(
            e,
            Error::OutOfBounds {
                size: 24,
                len: 24,
                offset: 4,
                ..
            }
        ),
        "{e}"
    );
    let e = host::strided_copy(&src, 8, &[-8], &mut dst, 0, &[8], &[3], 8).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    host::strided_copy(&src, 16, &[-8], &mut dst, 0, &[8], &[3], 8).unwrap();
}

// ---------------------------------------------------------------------------------------
// cast: Rust's own `as` where its semantics are numpy's

fn all_values(r: &mut SmallRng, kind: ElementType, n: usize) -> Vec<u8> {
    let mut v = bytes(r, n * kind.size());
    if kind == ElementType::Bool {
        for b in &mut v {
            *b &= 1;
        }
    }
    v
}

macro_rules! as_cast {
    ($src:ty, $dst:ty, $sk:expr, $dk:expr, $r:expr) => {{
        let n = 2000;
        let raw = all_values($r, $sk, n);
        let mut got = vec![0u8; n * $dk.size()];
        host::cast(&raw, $sk, &mut got, $dk).unwrap();
        for (i, chunk) in raw.chunks(std::mem::size_of::<$src>()).enumerate() {
            let x = <$src>::from_le_bytes(chunk.try_into().unwrap());
            let want = (x as $dst).to_le_bytes();
            let g = &got[i * $dk.size()..(i + 1) * $dk.size()];
            assert_eq!(g, &want[..], "{} {x:?} -> {}", $sk, $dk);
        }
    }};
}

#[test]
fn integer_and_float_casts_match_rust_as() {
    use ElementType::*;
    let mut r = rng("integer_and_float_casts_match_rust_as");
    // Integer -> integer wraps; integer -> float rounds to nearest even; f32 <-> f64.
    as_cast!(i8, u64, Int8, UInt64, &mut r);
    as_cast!(i64, i8, Int64, Int8, &mut r);
    as_cast!(u32, i16, UInt32, Int16, &mut r);
    as_cast!(u64, i32, UInt64, Int32, &mut r);
    as_cast!(i16, u16, Int16, UInt16, &mut r);
    as_cast!(i64, f32, Int64, Float32, &mut r);
    as_cast!(u64, f32, UInt64, Float32, &mut r);
    as_cast!(i64, f64, Int64, Float64, &mut r);
    as_cast!(u64, f64, UInt64, Float64, &mut r);
    as_cast!(i32, f32, Int32, Float32, &mut r);
    as_cast!(u8, f64, UInt8, Float64, &mut r);
    as_cast!(f32, f64, Float32, Float64, &mut r);
    // f64 -> f32 on random bits: compare NaN as NaN.
    let raw = all_values(&mut r, Float64, 5000);
    let mut got = vec![0u8; 4 * 5000];
    host::cast(&raw, Float64, &mut got, Float32).unwrap();
    for (i, c) in raw.chunks(8).enumerate() {
        let x = f64::from_le_bytes(c.try_into().unwrap());
        let g = f32::from_le_bytes(got[4 * i..4 * i + 4].try_into().unwrap());
        assert!(
            g.to_bits() == (x as f32).to_bits() || (g.is_nan() && x.is_nan()),
            "{x}"
        );
    }
}

#[test]
fn float_to_int_in_range_truncates_like_rust() {
    use ElementType::*;
    let mut r = rng("float_to_int_in_range_truncates_like_rust");
    for _ in 0..20000 {
        let x: f64 = r.random_range(-1e9..1e9) / [1.0, 7.0, 1e3][r.random_range(0..3)];
        let mut out = [0u8; 8];
        host::cast(&x.to_le_bytes(), Float64, &mut out[..4], Int32).unwrap();
        assert_eq!(i32::from_le_bytes(out[..4].try_into().unwrap()), x as i32);
        host::cast(&x.to_le_bytes(), Float64, &mut out, Int64).unwrap();
        assert_eq!(i64::from_le_bytes(out), x as i64);
        let y = x.abs();
        host::cast(&y.to_le_bytes(), Float64, &mut out, UInt64).unwrap();
        assert_eq!(u64::from_le_bytes(out), y as u64);
        host::cast(&(x as f32).to_le_bytes(), Float32, &mut out[..2], Int16).unwrap();
        assert_eq!(
            i16::from_le_bytes(out[..2].try_into().unwrap()),
            (x as f32) as i32 as i16
        );
    }
}

/// All finite f16 values in increasing order, as (value, bits).
fn f16_table() -> Vec<(f64, u16)> {
    let mut t: Vec<(f64, u16)> = (0..=u16::MAX)
        .filter_map(|h| {
            let mut out = [0u8; 8];
            host::cast(
                &h.to_le_bytes(),
                ElementType::Float16,
                &mut out,
                ElementType::Float64,
            )
            .unwrap();
            let x = f64::from_le_bytes(out);
            // -0.0 sorts with +0.0; keep +0.0 only (the sign is checked separately).
            (x.is_finite() && !(x == 0.0 && h != 0)).then_some((x, h))
        })
        .collect();
    t.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    t
}

/// The nearest f16 to `x` by search, ties to the even bit pattern, overflow to inf at
/// 65520 (IEEE: beyond max + half an ulp).
fn nearest_f16(t: &[(f64, u16)], x: f64) -> u16 {
    if x.abs() >= 65520.0 {
        return if x > 0.0 { 0x7c00 } else { 0xfc00 };
    }
    let i = t.partition_point(|&(v, _)| v < x);
    let cands = [i.checked_sub(1), Some(i)];
    let mut best: Option<(f64, u16)> = None;
    for c in cands.into_iter().flatten() {
        if let Some(&(v, h)) = t.get(c) {
            let d = (v - x).abs();
            best = match best {
                None => Some((d, h)),
                Some((bd, bh)) if d < bd || (d == bd && h & 1 == 0 && bh & 1 == 1) => Some((d, h)),
                b => b,
            };
        }
    }
    let h = best.unwrap().1;
    if h == 0 && x.is_sign_negative() {
        0x8000
    } else {
        h
    }
}

#[test]
fn f16_conversions_round_to_nearest_even() {
    let t = f16_table();
    let mut r = rng("f16_conversions_round_to_nearest_even");
    let check = |x: f64| {
        let mut out = [0u8; 2];
        host::cast(
            &x.to_le_bytes(),
            ElementType::Float64,
            &mut out,
            ElementType::Float16,
        )
        .unwrap();
        assert_eq!(u16::from_le_bytes(out), nearest_f16(&t, x), "{x:e}");
        // f32 -> f16 rounds the (exact) f32 value once as well.
        let y = x as f32;
        host::cast(
            &y.to_le_bytes(),
            ElementType::Float32,
            &mut out,
            ElementType::Float16,
        )
        .unwrap();
        assert_eq!(u16::from_le_bytes(out), nearest_f16(&t, y as f64), "{y:e}");
    };
    for w in t.windows(2) {
        // Every midpoint and its neighbours.
        let mid = (w[0].0 + w[1].0) / 2.0;
        check(mid);
        check(f64::from_bits(mid.to_bits() + 1));
        check(f64::from_bits(mid.to_bits() - 1));
        check(w[0].0);
    }
    for _ in 0..100_000 {
        let x = r.random_range(-70000.0..70000.0) * 10f64.powi(r.random_range(-9..1));
        check(x);
    }
    // Integers round once (no i64 -> f32 -> f16 double rounding can differ here).
    for i in -70000i64..70000 {
        let mut out = [0u8; 2];
        host::cast(
            &i.to_le_bytes(),
            ElementType::Int64,
            &mut out,
            ElementType::Float16,
        )
        .unwrap();
        assert_eq!(u16::from_le_bytes(out), nearest_f16(&t, i as f64), "{i}");
    }
}

// ---------------------------------------------------------------------------------------
// fill, byteswap, all_equal

#[test]
fn fill_and_byteswap_match_reference() {
    let mut r = rng("fill_and_byteswap_match_reference");
    for w in 1..=16usize {
        let pattern = bytes(&mut r, w);
        let count = r.random_range(0..50);
        let mut v = bytes(&mut r, w * count);
        host::fill(&mut v, &pattern).unwrap();
        for (i, b) in v.iter().enumerate() {
            assert_eq!(*b, pattern[i % w]);
        }
    }
    for w in [1usize, 2, 4, 8] {
        let init = bytes(&mut r, w * 37);
        let mut v = init.clone();
        host::byteswap(&mut v, w).unwrap();
        for (i, b) in v.iter().enumerate() {
            let (e, k) = (i / w, i % w);
            assert_eq!(*b, init[e * w + (w - 1 - k)]);
        }
    }
    assert!(host::fill(&mut [0u8; 5], &[1, 2]).is_err());
    assert!(host::byteswap(&mut [0u8; 6], 4).is_err());
    assert!(host::byteswap(&mut [0u8; 6], 3).is_err());
}

/// numpy-style element equality written out per kind.
fn reference_equal(kind: ElementType, e: &[u8], v: &[u8], mode: EqualMode) -> bool {
    let EqualMode::Numeric { equal_nan } = mode else {
        return e == v;
    };
    let f32s = |b: &[u8]| f32::from_le_bytes(b[..4].try_into().unwrap());
    let f64s = |b: &[u8]| f64::from_le_bytes(b[..8].try_into().unwrap());
    let eq = |x: f64, y: f64| x == y;
    match kind {
        ElementType::Bool => (e[0] != 0) == (v[0] != 0),
        ElementType::Float32 => {
            let (x, y) = (f32s(e), f32s(v));
            (equal_nan && x.is_nan() && y.is_nan()) || x == y
        }
        ElementType::Float64 => {
            let (x, y) = (f64s(e), f64s(v));
            (equal_nan && x.is_nan() && y.is_nan()) || x == y
        }
        ElementType::Complex64 => {
            let (xr, xi, yr, yi) = (f32s(e), f32s(&e[4..]), f32s(v), f32s(&v[4..]));
            let (xn, yn) = (xr.is_nan() || xi.is_nan(), yr.is_nan() || yi.is_nan());
            (equal_nan && xn && yn) || (xr == yr && xi == yi)
        }
        ElementType::Complex128 => {
            let (xr, xi, yr, yi) = (f64s(e), f64s(&e[8..]), f64s(v), f64s(&v[8..]));
            let (xn, yn) = (xr.is_nan() || xi.is_nan(), yr.is_nan() || yi.is_nan());
            (equal_nan && xn && yn) || (eq(xr, yr) && eq(xi, yi))
        }
        ElementType::Float16 => {
            let h = |b: &[u8]| u16::from_le_bytes([b[0], b[1]]);
            let (x, y) = (h(e), h(v));
            let nan = |h: u16| (h & 0x7fff) > 0x7c00;
            let zero = |h: u16| (h & 0x7fff) == 0;
            (equal_nan && nan(x) && nan(y))
                || (!nan(x) && !nan(y) && (x == y || (zero(x) && zero(y))))
        }
        _ => e == v,
    }
}

#[test]
fn all_equal_matches_reference() {
    let mut r = rng("all_equal_matches_reference");
    let specials: [f64; 6] = [0.0, -0.0, f64::NAN, 1.0, -f64::INFINITY, 1e-310];
    for kind in ElementType::ALL {
        let size = kind.size();
        for _ in 0..300 {
            // A value, the same value in another encoding, and something else.
            let mut pool = vec![bytes(&mut r, size)];
            let mut special = vec![0u8; size];
            let x = specials[r.random_range(0..specials.len())];
            host::cast(&x.to_le_bytes(), ElementType::Float64, &mut special, kind).unwrap();
            pool.push(special.clone());
            let y = specials[r.random_range(0..specials.len())];
            host::cast(&y.to_le_bytes(), ElementType::Float64, &mut special, kind).unwrap();
            pool.push(special);
            let value = pool[r.random_range(0..pool.len())].clone();
            let count = r.random_range(0..6);
            let data: Vec<u8> = (0..count)
                .flat_map(|_| pool[r.random_range(0..pool.len())].clone())
                .collect();
            for mode in [
                EqualMode::Bitwise,
                EqualMode::Numeric { equal_nan: false },
                EqualMode::Numeric { equal_nan: true },
            ] {
                let want = data
                    .chunks(size)
                    .all(|e| reference_equal(kind, e, &value, mode));
                assert_eq!(
                    host::all_equal(&data, kind, &value, mode).unwrap(),
                    want,
                    "{kind} {mode:?} value {value:02x?} data {data:02x?}"
                );
            }
        }
    }
    assert!(host::all_equal(&[], ElementType::Float64, &[0; 8], EqualMode::Bitwise).unwrap());
    assert!(host::all_equal(&[0; 8], ElementType::Float64, &[0; 4], EqualMode::Bitwise).is_err());
}
