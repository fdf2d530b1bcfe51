//! Host implementations of the ops, over byte slices, with exactly the semantics of the
//! device kernels (the GPU tests compare the two on random data).
//!
//! These work on any machine; a host `NDBuffer` uses them directly. Values are native
//! little-endian (as on every platform devbuf supports); slices need no alignment.
//!
//! ```
//! use devbuf::cuda::kernels::ops::{host, EqualMode, ScalarKind};
//!
//! let mut v = vec![0u8; 12];
//! host::fill(&mut v, &1.5f32.to_le_bytes())?;
//! assert!(host::all_equal(&v, ScalarKind::F32, &1.5f32.to_le_bytes(), EqualMode::Bitwise)?);
//!
//! let mut wide = vec![0u8; 24];
//! host::cast(&v, ScalarKind::F32, &mut wide, ScalarKind::F64)?;
//! assert_eq!(f64::from_le_bytes(wide[8..16].try_into().unwrap()), 1.5);
//! # Ok::<(), devbuf::Error>(())
//! ```

use super::layout::{self, Axis};
use super::{EqualMode, ScalarKind};
use crate::error::Result;

/// Repeats the element `pattern` (1 to 16 bytes) over `dst`, whose length must be a
/// multiple of the pattern's.
///
/// ```
/// let mut v = [0u8; 6];
/// devbuf::cuda::kernels::ops::host::fill(&mut v, &[1, 2, 3])?;
/// assert_eq!(v, [1, 2, 3, 1, 2, 3]);
/// # Ok::<(), devbuf::Error>(())
/// ```
pub fn fill(dst: &mut [u8], pattern: &[u8]) -> Result<()> {
    super::check_pattern("fill", dst.len(), pattern)?;
    if pattern.len() == 1 {
        dst.fill(pattern[0]);
    } else {
        for chunk in dst.chunks_exact_mut(pattern.len()) {
            chunk.copy_from_slice(pattern);
        }
    }
    Ok(())
}

/// Converts every element of `src` (of kind `src_kind`) to `dst_kind` into `dst`, with
/// numpy's `astype` semantics (see [`super::cast`] for the exact rules). Both slices
/// must hold the same number of elements.
///
/// ```
/// use devbuf::cuda::kernels::ops::{host, ScalarKind};
/// let src: Vec<u8> = [-1.7f64, 300.0, f64::NAN].iter().flat_map(|x| x.to_le_bytes()).collect();
/// let mut dst = [0u8; 3];
/// host::cast(&src, ScalarKind::F64, &mut dst, ScalarKind::U8)?;
/// assert_eq!(dst, [255, 44, 0]); // truncation, then wrap (as numpy on x86-64)
/// # Ok::<(), devbuf::Error>(())
/// ```
pub fn cast(src: &[u8], src_kind: ScalarKind, dst: &mut [u8], dst_kind: ScalarKind) -> Result<()> {
    super::check_cast(src.len(), src_kind, dst.len(), dst_kind)?;
    if src_kind == dst_kind {
        dst.copy_from_slice(src);
        return Ok(());
    }
    let n = src.len() / src_kind.size();
    for i in 0..n {
        let s = &src[i * src_kind.size()..(i + 1) * src_kind.size()];
        let d = &mut dst[i * dst_kind.size()..(i + 1) * dst_kind.size()];
        encode(dst_kind, decode(src_kind, s), d);
    }
    Ok(())
}

/// Copies `shape` elements of `elem_size` bytes from `src` to `dst`, each side addressed
/// by a byte offset and byte strides (negative allowed). See [`super::strided_copy`].
///
/// ```
/// use devbuf::cuda::kernels::ops::host;
/// // Transpose a 2x3 matrix of bytes.
/// let src = [1u8, 2, 3, 4, 5, 6];
/// let mut dst = [0u8; 6];
/// host::strided_copy(&src, 0, &[3, 1], &mut dst, 0, &[1, 2], &[2, 3], 1)?;
/// assert_eq!(dst, [1, 4, 2, 5, 3, 6]);
/// # Ok::<(), devbuf::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn strided_copy(
    src: &[u8],
    src_offset: usize,
    src_strides_bytes: &[isize],
    dst: &mut [u8],
    dst_offset: usize,
    dst_strides_bytes: &[isize],
    shape: &[usize],
    elem_size: usize,
) -> Result<()> {
    let Some(plan) = layout::plan(
        src.len(),
        src_offset,
        src_strides_bytes,
        dst.len(),
        dst_offset,
        dst_strides_bytes,
        shape,
        elem_size,
    )?
    else {
        return Ok(());
    };
    let unit = plan.unit;
    let axes = plan.axes();
    // Innermost axis contiguous on both sides: copy runs; otherwise units.
    let (outer, run): (&[Axis], usize) = match axes.split_last() {
        Some((last, rest)) if last.s == unit as i64 && last.d == unit as i64 => {
            (rest, last.n as usize * unit)
        }
        _ => (axes, unit),
    };
    let mut index = [0u64; layout::MAX_DIMS + 1];
    let (mut so, mut dof) = (plan.src_base as i64, plan.dst_base as i64);
    loop {
        let (s, d) = (so as usize, dof as usize);
        dst[d..d + run].copy_from_slice(&src[s..s + run]);
        // Odometer over the outer axes, innermost first.
        let mut k = outer.len();
        loop {
            if k == 0 {
                return Ok(());
            }
            k -= 1;
            let a = outer[k];
            index[k] += 1;
            so += a.s;
            dof += a.d;
            if index[k] < a.n {
                break;
            }
            index[k] = 0;
            so -= a.s * a.n as i64;
            dof -= a.d * a.n as i64;
        }
    }
}

/// Reverses the bytes of every `width`-byte element in place (`width` 1, 2, 4 or 8; 1
/// does nothing). Complex values are swapped per component: pass the component width.
///
/// ```
/// let mut v = 0x0102_0304u32.to_le_bytes();
/// devbuf::cuda::kernels::ops::host::byteswap(&mut v, 4)?;
/// assert_eq!(u32::from_le_bytes(v), 0x0403_0201);
/// # Ok::<(), devbuf::Error>(())
/// ```
pub fn byteswap(buf: &mut [u8], width: usize) -> Result<()> {
    super::check_byteswap(buf.len(), width)?;
    if width > 1 {
        for e in buf.chunks_exact_mut(width) {
            e.reverse();
        }
    }
    Ok(())
}

/// Whether every element of `buf` (of kind `kind`) equals `value` (one native element)
/// under `mode`. An empty buffer is all-equal. See [`super::all_equal`].
///
/// ```
/// use devbuf::cuda::kernels::ops::{host, EqualMode, ScalarKind};
/// let zeros = (-0.0f32).to_le_bytes().repeat(4);
/// let zero = 0.0f32.to_le_bytes();
/// assert!(!host::all_equal(&zeros, ScalarKind::F32, &zero, EqualMode::Bitwise)?);
/// assert!(host::all_equal(&zeros, ScalarKind::F32, &zero, EqualMode::Numeric { equal_nan: false })?);
/// # Ok::<(), devbuf::Error>(())
/// ```
pub fn all_equal(buf: &[u8], kind: ScalarKind, value: &[u8], mode: EqualMode) -> Result<bool> {
    super::check_equal(buf.len(), kind, value)?;
    Ok(buf
        .chunks_exact(kind.size())
        .all(|e| element_equals(kind, e, value, mode)))
}

/// Whether one element equals `value` under `mode` (both `kind.size()` bytes).
pub(crate) fn element_equals(kind: ScalarKind, e: &[u8], value: &[u8], mode: EqualMode) -> bool {
    let equal_nan = match mode {
        EqualMode::Bitwise => return e == value,
        EqualMode::Numeric { equal_nan } => equal_nan,
    };
    match (decode(kind, e), decode(kind, value)) {
        (Val::F(x), Val::F(v)) => {
            if v.is_nan() {
                equal_nan && x.is_nan()
            } else {
                x == v
            }
        }
        (Val::C(xr, xi), Val::C(vr, vi)) => {
            if vr.is_nan() || vi.is_nan() {
                equal_nan && (xr.is_nan() || xi.is_nan())
            } else {
                xr == vr && xi == vi
            }
        }
        (x, v) => x == v, // bool (decoded to 0/1) and integers
    }
}

// ---------------------------------------------------------------------------------------
// Scalar conversions (the same rules as cast.cu)

/// An exact intermediate value: every source value is representable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Val {
    I(i64),
    U(u64),
    F(f64),
    C(f64, f64),
}

fn le<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[..N]);
    a
}

/// Decodes one little-endian element of `kind` from `b` (`kind.size()` bytes).
pub(crate) fn decode(kind: ScalarKind, b: &[u8]) -> Val {
    use ScalarKind::*;
    match kind {
        Bool => Val::I((b[0] != 0) as i64),
        I8 => Val::I(b[0] as i8 as i64),
        I16 => Val::I(i16::from_le_bytes(le(b)) as i64),
        I32 => Val::I(i32::from_le_bytes(le(b)) as i64),
        I64 => Val::I(i64::from_le_bytes(le(b))),
        U8 => Val::U(b[0] as u64),
        U16 => Val::U(u16::from_le_bytes(le(b)) as u64),
        U32 => Val::U(u32::from_le_bytes(le(b)) as u64),
        U64 => Val::U(u64::from_le_bytes(le(b))),
        F16 => Val::F(f16_to_f64(u16::from_le_bytes(le(b)))),
        F32 => Val::F(f32::from_le_bytes(le(b)) as f64),
        F64 => Val::F(f64::from_le_bytes(le(b))),
        C64 => Val::C(
            f32::from_le_bytes(le(b)) as f64,
            f32::from_le_bytes(le(&b[4..])) as f64,
        ),
        C128 => Val::C(f64::from_le_bytes(le(b)), f64::from_le_bytes(le(&b[8..]))),
    }
}

/// 2^63 as a double.
const TWO63: f64 = (1u64 << 63) as f64;

/// x86-64 `cvttsd2si` (64-bit): NaN and out of range give `i64::MIN`.
fn x86_i64(x: f64) -> i64 {
    if (-TWO63..TWO63).contains(&x) {
        x as i64
    } else {
        i64::MIN
    }
}

/// x86-64 `cvttsd2si` (32-bit): NaN and out of range give `i32::MIN`.
fn x86_i32(x: f64) -> i32 {
    if x > -2_147_483_649.0 && x < 2_147_483_648.0 {
        x as i32
    } else {
        i32::MIN
    }
}

/// Float to an integer kind, as the low bits of a 64-bit word.
fn float_to_int(kind: ScalarKind, x: f64) -> u64 {
    match kind {
        ScalarKind::I64 | ScalarKind::U32 => x86_i64(x) as u64,
        ScalarKind::U64 => {
            if x >= TWO63 {
                (x86_i64(x - TWO63) as u64) ^ (1u64 << 63)
            } else {
                x86_i64(x) as u64
            }
        }
        _ => x86_i32(x) as i64 as u64,
    }
}

/// Encodes `v` as one little-endian element of `kind` into `out` (`kind.size()` bytes).
pub(crate) fn encode(kind: ScalarKind, v: Val, out: &mut [u8]) {
    use ScalarKind::*;
    if kind == Bool {
        out[0] = match v {
            Val::I(x) => x != 0,
            Val::U(x) => x != 0,
            Val::F(x) => x != 0.0,
            Val::C(r, i) => r != 0.0 || i != 0.0,
        } as u8;
        return;
    }
    if kind.is_integer() {
        let bits = match v {
            Val::I(x) => x as u64,
            Val::U(x) => x,
            Val::F(x) => float_to_int(kind, x),
            Val::C(r, _) => float_to_int(kind, r),
        };
        out.copy_from_slice(&bits.to_le_bytes()[..kind.size()]);
        return;
    }
    // Floating and complex: the real value, rounded once into the component type.
    let (re, im) = match v {
        Val::I(x) => (Real::I(x), 0.0),
        Val::U(x) => (Real::U(x), 0.0),
        Val::F(x) => (Real::F(x), 0.0),
        Val::C(r, i) => (Real::F(r), i),
    };
    match kind {
        F16 => out.copy_from_slice(&re.to_f16().to_le_bytes()),
        F32 => out.copy_from_slice(&re.to_f32().to_le_bytes()),
        F64 => out.copy_from_slice(&re.to_f64().to_le_bytes()),
        C64 => {
            out[..4].copy_from_slice(&re.to_f32().to_le_bytes());
            out[4..].copy_from_slice(&(im as f32).to_le_bytes());
        }
        C128 => {
            out[..8].copy_from_slice(&re.to_f64().to_le_bytes());
            out[8..].copy_from_slice(&im.to_le_bytes());
        }
        _ => unreachable!("integer kinds are handled above"),
    }
}

/// A real value before its one rounding into a float type.
#[derive(Clone, Copy)]
enum Real {
    I(i64),
    U(u64),
    F(f64),
}

impl Real {
    fn to_f32(self) -> f32 {
        // `as` rounds to nearest, ties to even, directly from the integer or double.
        match self {
            Real::I(x) => x as f32,
            Real::U(x) => x as f32,
            Real::F(x) => x as f32,
        }
    }
    fn to_f64(self) -> f64 {
        match self {
            Real::I(x) => x as f64,
            Real::U(x) => x as f64,
            Real::F(x) => x,
        }
    }
    fn to_f16(self) -> u16 {
        // Integers of magnitude >= 2^53 round inexactly to f64 but are far beyond the
        // f16 range (65504) either way, so going through f64 rounds once in effect.
        f64_to_f16(self.to_f64())
    }
}

/// IEEE binary16 bits to f64 (exact).
pub(crate) fn f16_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let man = (h & 0x3ff) as f64;
    let mag = match exp {
        0 => man * f64::from_bits((1023u64 - 24) << 52), // man * 2^-24
        31 => {
            if man == 0.0 {
                f64::INFINITY
            } else {
                f64::NAN
            }
        }
        _ => (1024.0 + man) * f64::from_bits(((exp - 25 + 1023) as u64) << 52),
    };
    sign * mag
}

/// f64 to IEEE binary16 bits, rounding to nearest, ties to even, in one step
/// (overflow to infinity, gradual underflow; NaN stays a quiet NaN).
pub(crate) fn f64_to_f16(x: f64) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 48) & 0x8000) as u16;
    let exp = ((b >> 52) & 0x7ff) as i32;
    let man = b & ((1u64 << 52) - 1);
    if exp == 0x7ff {
        return if man == 0 {
            sign | 0x7c00
        } else {
            sign | 0x7e00 | ((man >> 42) as u16 & 0x3ff)
        };
    }
    if exp == 0 {
        return sign; // f64 zero or subnormal: far below the smallest f16 subnormal
    }
    let e = exp - 1023;
    if e > 15 {
        return sign | 0x7c00;
    }
    let full = man | (1u64 << 52); // 53 significant bits
    // Shift so that one unit of the result is the f16 ulp: 2^(e-10) for normal
    // numbers, 2^-24 for subnormals.
    let (shift, biased) = if e >= -14 {
        (42u32, ((e + 15) as u64) << 10)
    } else {
        let shift = (28 - e) as u32; // 52 - (e + 24)
        if shift > 63 {
            return sign;
        }
        (shift, 0)
    };
    let q = full >> shift;
    let rem = full & ((1u64 << shift) - 1);
    let half = 1u64 << (shift - 1);
    // For normal numbers the implicit bit lands on bit 10 of q; drop it (the exponent
    // field carries it). Adding a carry out of the mantissa bumps the exponent, and
    // out of the largest exponent gives infinity, as IEEE rounding does.
    let mut r = if e >= -14 { biased + (q & 0x3ff) } else { q };
    if rem > half || (rem == half && (r & 1) == 1) {
        r += 1;
    }
    sign | r as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(kind: ScalarKind, v: Val) -> Vec<u8> {
        let mut out = vec![0u8; kind.size()];
        encode(kind, v, &mut out);
        out
    }

    #[test]
    fn f16_round_trip_of_every_value() {
        for h in 0..=u16::MAX {
            let x = f16_to_f64(h);
            let back = f64_to_f16(x);
            if x.is_nan() {
                assert_eq!(back & 0x7c00, 0x7c00);
                assert_ne!(back & 0x3ff, 0);
            } else {
                assert_eq!(back, h, "{h:#06x} -> {x} -> {back:#06x}");
            }
        }
    }

    #[test]
    fn f16_rounding_is_to_nearest_even_in_one_step() {
        // Halfway between 1.0 and the next f16 (1 + 2^-10): ties to even (1.0).
        assert_eq!(f64_to_f16(1.0 + 2f64.powi(-11)), 0x3c00);
        // Just above halfway rounds up. This value rounds to the halfway point in f32,
        // so a conversion through f32 would give 1.0 (double rounding).
        assert_eq!(f64_to_f16(1.0 + 2f64.powi(-11) + 2f64.powi(-40)), 0x3c01);
        // Halfway between 1 + 2^-10 and 1 + 2^-9: ties to even (up).
        assert_eq!(f64_to_f16(1.0 + 3.0 * 2f64.powi(-11)), 0x3c02);
        assert_eq!(f64_to_f16(65504.0), 0x7bff);
        assert_eq!(f64_to_f16(65519.99), 0x7bff);
        assert_eq!(f64_to_f16(65520.0), 0x7c00);
        assert_eq!(f64_to_f16(-1e300), 0xfc00);
        // Subnormals: 2^-24 is the smallest; half of it ties to zero, above rounds up.
        assert_eq!(f64_to_f16(2f64.powi(-24)), 0x0001);
        assert_eq!(f64_to_f16(2f64.powi(-25)), 0x0000);
        assert_eq!(f64_to_f16(2f64.powi(-25) * 1.000001), 0x0001);
        assert_eq!(f64_to_f16(3.0 * 2f64.powi(-25)), 0x0002);
        assert_eq!(f64_to_f16(-0.0), 0x8000);
        assert_eq!(f64_to_f16(f64::MIN_POSITIVE / 4.0), 0x0000);
        // The largest subnormal rounds up into the smallest normal.
        assert_eq!(f64_to_f16(2f64.powi(-14) - 2f64.powi(-26)), 0x0400);
    }

    #[test]
    fn float_to_int_follows_x86() {
        use ScalarKind::*;
        let f = |k, x| enc(k, Val::F(x));
        assert_eq!(f(I32, f64::NAN), i32::MIN.to_le_bytes());
        assert_eq!(f(I8, f64::NAN), [0]);
        assert_eq!(f(U8, 300.0), [44]);
        assert_eq!(f(U8, -1.0), [255]);
        assert_eq!(f(I16, -2.9), (-2i16).to_le_bytes());
        assert_eq!(f(I64, f64::INFINITY), i64::MIN.to_le_bytes());
        assert_eq!(f(U32, -1.0), u32::MAX.to_le_bytes());
        assert_eq!(f(U32, 1e20), [0; 4]);
        assert_eq!(f(U64, -1.0), u64::MAX.to_le_bytes());
        assert_eq!(f(U64, f64::NAN), (1u64 << 63).to_le_bytes());
        assert_eq!(f(U64, 1.5e19), 15_000_000_000_000_000_000u64.to_le_bytes());
        assert_eq!(f(U64, 2e19), [0; 8]);
        assert_eq!(f(Bool, f64::NAN), [1]);
        assert_eq!(f(Bool, -0.0), [0]);
        assert_eq!(enc(Bool, Val::C(0.0, -2.0)), [1]);
        assert_eq!(enc(I32, Val::C(-7.9, 3.0)), (-7i32).to_le_bytes());
    }

    #[test]
    fn int_to_float_rounds_once() {
        use ScalarKind::*;
        // 2^53 + 1 is not a double; to nearest even.
        let x = (1i64 << 53) + 1;
        assert_eq!(enc(F64, Val::I(x)), ((1u64 << 53) as f64).to_le_bytes());
        // u64::MAX rounds to 2^64 in f32.
        assert_eq!(
            enc(F32, Val::U(u64::MAX)),
            18446744073709551616f32.to_le_bytes()
        );
        assert_eq!(enc(F16, Val::I(65504)), 0x7bffu16.to_le_bytes());
        assert_eq!(enc(F16, Val::I(-70000)), 0xfc00u16.to_le_bytes());
        assert_eq!(enc(F16, Val::I(2049)), 0x6800u16.to_le_bytes()); // tie to even: 2048
        assert_eq!(
            enc(C64, Val::I(-3)),
            [(-3f32).to_le_bytes(), 0f32.to_le_bytes()].concat()
        );
    }

    #[test]
    fn equality_rules() {
        use ScalarKind::*;
        let num = EqualMode::Numeric { equal_nan: true };
        let strict = EqualMode::Numeric { equal_nan: false };
        let nan = f64::NAN.to_le_bytes();
        assert!(element_equals(F64, &nan, &nan, num));
        assert!(!element_equals(F64, &nan, &nan, strict));
        assert!(element_equals(F64, &nan, &nan, EqualMode::Bitwise));
        let c = |r: f32, i: f32| [r.to_le_bytes(), i.to_le_bytes()].concat();
        assert!(element_equals(
            C64,
            &c(1.0, f32::NAN),
            &c(f32::NAN, 0.0),
            num
        ));
        assert!(!element_equals(C64, &c(1.0, 2.0), &c(f32::NAN, 0.0), num));
        assert!(element_equals(C64, &c(-0.0, 0.0), &c(0.0, -0.0), strict));
        assert!(!element_equals(
            C64,
            &c(-0.0, 0.0),
            &c(0.0, -0.0),
            EqualMode::Bitwise
        ));
        assert!(element_equals(Bool, &[2], &[1], strict));
        assert!(!element_equals(Bool, &[2], &[1], EqualMode::Bitwise));
        assert!(!element_equals(I16, &[1, 0], &[1, 1], strict));
    }

    #[test]
    fn strided_reverses_and_transposes() {
        // Reverse 5 u16 values.
        let src: Vec<u8> = (0u16..5).flat_map(|x| x.to_le_bytes()).collect();
        let mut dst = vec![0u8; 10];
        strided_copy(&src, 8, &[-2], &mut dst, 0, &[2], &[5], 2).unwrap();
        let got: Vec<u16> = dst
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(got, [4, 3, 2, 1, 0]);
        // 0-d copies one element.
        let mut one = [0u8; 3];
        strided_copy(&[7, 8, 9, 10], 1, &[], &mut one, 0, &[], &[], 3).unwrap();
        assert_eq!(one, [8, 9, 10]);
        // Zero-size: nothing, whatever the strides.
        strided_copy(&[], 0, &[4, 4], &mut [], 0, &[4, 4], &[0, 7], 4).unwrap();
    }
}
