//! The element-wise primitives on the host: fill, cast, n-d strided copy, byte swap
//! and all-equal over byte slices, with exactly the semantics of the device kernels
//! (`cuda::kernels::ops`; the GPU tests compare the two on random data).
//!
//! [`NDBuffer`](crate::zarr::NDBuffer) is written against these five primitives;
//! [`Memory`](super::Memory)'s `prim` dispatch sends them here for host memory and to
//! the device kernels for device memory. They work on any machine. Values are native
//! little-endian (as on every platform devbuf supports); slices need no alignment.
//!
//! Contract (shared with the device kernels):
//!
//! * A big-endian array is byte-swapped before any arithmetic ([`byteswap`]; complex
//!   numbers swap each part).
//! * [`cast`] is numpy's `astype(casting="unsafe")`, as numpy computes it on x86-64:
//!   integers wrap; int → float and float → float round to nearest-even once; float →
//!   int truncates toward zero, and out-of-range values and NaN give what numpy gives
//!   on x86-64 (e.g. 300.0 → uint8 is 44, NaN → int32 is `i32::MIN`); complex → real
//!   keeps the real part; anything → bool is `!= 0` (NaN is true; complex: either
//!   part); bool reads any non-zero byte as true. The exact rules are those of
//!   [`cuda::kernels::ops::cast`](crate::cuda::kernels::ops::cast).
//! * [`all_equal`] `Numeric { equal_nan }` is numpy's `array_equal` against one value:
//!   `-0.0 == 0.0`; NaN equals NaN only with `equal_nan`; for complex numbers an
//!   element "is NaN" when either part is, and with `equal_nan` two NaN elements are
//!   equal whatever their other parts (numpy's `isnan` masks); bool compares
//!   truthiness; integers compare exactly. `Bitwise` compares the stored bytes.
//!
//! ```
//! use devbuf_core::__private::host_ops;
//! use devbuf_core::{ElementType, EqualMode};
//!
//! let mut v = vec![0u8; 12];
//! host_ops::fill(&mut v, &1.5f32.to_le_bytes())?;
//! assert!(host_ops::all_equal(&v, ElementType::Float32, &1.5f32.to_le_bytes(), EqualMode::Bitwise)?);
//!
//! let mut wide = vec![0u8; 24];
//! host_ops::cast(&v, ElementType::Float32, &mut wide, ElementType::Float64)?;
//! assert_eq!(f64::from_le_bytes(wide[8..16].try_into().unwrap()), 1.5);
//! # Ok::<(), devbuf_core::Error>(())
//! ```

use crate::cuda::kernels::ops::layout::{self, Axis};
use crate::cuda::kernels::ops::{check_byteswap, check_cast, check_equal, check_pattern};
use crate::element::{ElementType, EqualMode, Val, decode};
use crate::error::Result;

/// Repeats the element `pattern` (1 to 16 bytes) over `dst`, whose length must be a
/// multiple of the pattern's.
///
/// ```
/// let mut v = [0u8; 6];
/// devbuf_core::__private::host_ops::fill(&mut v, &[1, 2, 3])?;
/// assert_eq!(v, [1, 2, 3, 1, 2, 3]);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub fn fill(dst: &mut [u8], pattern: &[u8]) -> Result<()> {
    check_pattern("fill", dst.len(), pattern)?;
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
/// numpy's `astype` semantics (see [`cuda::kernels::ops::cast`](crate::cuda::kernels::ops::cast) for the exact rules). Both slices
/// must hold the same number of elements.
///
/// ```
/// use devbuf_core::__private::host_ops;
/// use devbuf_core::ElementType;
/// let src: Vec<u8> = [-1.7f64, 300.0, f64::NAN].iter().flat_map(|x| x.to_le_bytes()).collect();
/// let mut dst = [0u8; 3];
/// host_ops::cast(&src, ElementType::Float64, &mut dst, ElementType::UInt8)?;
/// assert_eq!(dst, [255, 44, 0]); // truncation, then wrap (as numpy on x86-64)
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub fn cast(
    src: &[u8],
    src_kind: ElementType,
    dst: &mut [u8],
    dst_kind: ElementType,
) -> Result<()> {
    check_cast(src.len(), src_kind, dst.len(), dst_kind)?;
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
/// by a byte offset and byte strides (negative allowed). See [`cuda::kernels::ops::strided_copy`](crate::cuda::kernels::ops::strided_copy).
///
/// ```
/// use devbuf_core::__private::host_ops;
/// // Transpose a 2x3 matrix of bytes.
/// let src = [1u8, 2, 3, 4, 5, 6];
/// let mut dst = [0u8; 6];
/// host_ops::strided_copy(&src, 0, &[3, 1], &mut dst, 0, &[1, 2], &[2, 3], 1)?;
/// assert_eq!(dst, [1, 4, 2, 5, 3, 6]);
/// # Ok::<(), devbuf_core::Error>(())
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
    for_each_run(&plan, |s, d, run| {
        dst[d..d + run].copy_from_slice(&src[s..s + run]);
    });
    Ok(())
}

/// Walks a validated copy as contiguous runs: calls `f(src_offset, dst_offset, len)`
/// once per run (the innermost axis when it is contiguous on both sides, else one unit
/// element), in order. Every byte named lies within what `layout::plan` checked.
pub fn for_each_run(plan: &layout::StridedCopyPlan, mut f: impl FnMut(usize, usize, usize)) {
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
        f(so as usize, dof as usize, run);
        // Odometer over the outer axes, innermost first.
        let mut k = outer.len();
        loop {
            if k == 0 {
                return;
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
/// devbuf_core::__private::host_ops::byteswap(&mut v, 4)?;
/// assert_eq!(u32::from_le_bytes(v), 0x0403_0201);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub fn byteswap(buf: &mut [u8], width: usize) -> Result<()> {
    check_byteswap(buf.len(), width)?;
    if width > 1 {
        for e in buf.chunks_exact_mut(width) {
            e.reverse();
        }
    }
    Ok(())
}

/// [`byteswap`] without the checks (`buf.len()` must be a multiple of `width`).
pub fn swap_in_place(buf: &mut [u8], width: usize) {
    if width > 1 {
        for unit in buf.chunks_exact_mut(width) {
            unit.reverse();
        }
    }
}

/// Packs the truthiness of every byte of `src` (non-zero is true) into the bitmap `dst`,
/// least significant bit first (Arrow's layout). `dst` holds at least
/// `src.len().div_ceil(8)` bytes; the bits past `src.len()` are zero.
pub(crate) fn pack_bits(src: &[u8], dst: &mut [u8]) {
    for (byte, chunk) in dst.iter_mut().zip(src.chunks(8)) {
        *byte = chunk
            .iter()
            .enumerate()
            .fold(0u8, |b, (j, &v)| b | (u8::from(v != 0) << j));
    }
}

/// Bits `start .. start + count` of the bitmap `bits` (least significant bit first) as
/// bytes 0 or 1. The caller checks that `bits` holds them.
pub(crate) fn unpack_bits(bits: &[u8], start: usize, count: usize) -> Vec<u8> {
    (start..start + count)
        .map(|i| (bits[i / 8] >> (i % 8)) & 1)
        .collect()
}

/// Whether every element of `buf` (of kind `kind`) equals `value` (one native element)
/// under `mode`. An empty buffer is all-equal. See [`cuda::kernels::ops::all_equal`](crate::cuda::kernels::ops::all_equal).
///
/// ```
/// use devbuf_core::__private::host_ops;
/// use devbuf_core::{ElementType, EqualMode};
/// let zeros = (-0.0f32).to_le_bytes().repeat(4);
/// let zero = 0.0f32.to_le_bytes();
/// assert!(!host_ops::all_equal(&zeros, ElementType::Float32, &zero, EqualMode::Bitwise)?);
/// assert!(host_ops::all_equal(&zeros, ElementType::Float32, &zero, EqualMode::Numeric { equal_nan: false })?);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub fn all_equal(buf: &[u8], kind: ElementType, value: &[u8], mode: EqualMode) -> Result<bool> {
    check_equal(buf.len(), kind, value)?;
    Ok(buf
        .chunks_exact(kind.size())
        .all(|e| element_equals(kind, e, value, mode)))
}

/// Whether one element equals `value` under `mode` (both `kind.size()` bytes).
pub(crate) fn element_equals(kind: ElementType, e: &[u8], value: &[u8], mode: EqualMode) -> bool {
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
fn float_to_int(kind: ElementType, x: f64) -> u64 {
    match kind {
        ElementType::Int64 | ElementType::UInt32 => x86_i64(x) as u64,
        ElementType::UInt64 => {
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
pub(crate) fn encode(kind: ElementType, v: Val, out: &mut [u8]) {
    use ElementType::*;
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
        Float16 => out.copy_from_slice(&re.to_f16().to_le_bytes()),
        Float32 => out.copy_from_slice(&re.to_f32().to_le_bytes()),
        Float64 => out.copy_from_slice(&re.to_f64().to_le_bytes()),
        Complex64 => {
            out[..4].copy_from_slice(&re.to_f32().to_le_bytes());
            out[4..].copy_from_slice(&(im as f32).to_le_bytes());
        }
        Complex128 => {
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
    use crate::element::f16_to_f64;

    fn enc(kind: ElementType, v: Val) -> Vec<u8> {
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
        use ElementType::*;
        let f = |k, x| enc(k, Val::F(x));
        assert_eq!(f(Int32, f64::NAN), i32::MIN.to_le_bytes());
        assert_eq!(f(Int8, f64::NAN), [0]);
        assert_eq!(f(UInt8, 300.0), [44]);
        assert_eq!(f(UInt8, -1.0), [255]);
        assert_eq!(f(Int16, -2.9), (-2i16).to_le_bytes());
        assert_eq!(f(Int64, f64::INFINITY), i64::MIN.to_le_bytes());
        assert_eq!(f(UInt32, -1.0), u32::MAX.to_le_bytes());
        assert_eq!(f(UInt32, 1e20), [0; 4]);
        assert_eq!(f(UInt64, -1.0), u64::MAX.to_le_bytes());
        assert_eq!(f(UInt64, f64::NAN), (1u64 << 63).to_le_bytes());
        assert_eq!(
            f(UInt64, 1.5e19),
            15_000_000_000_000_000_000u64.to_le_bytes()
        );
        assert_eq!(f(UInt64, 2e19), [0; 8]);
        assert_eq!(f(Bool, f64::NAN), [1]);
        assert_eq!(f(Bool, -0.0), [0]);
        assert_eq!(enc(Bool, Val::C(0.0, -2.0)), [1]);
        assert_eq!(enc(Int32, Val::C(-7.9, 3.0)), (-7i32).to_le_bytes());
    }

    #[test]
    fn int_to_float_rounds_once() {
        use ElementType::*;
        // 2^53 + 1 is not a double; to nearest even.
        let x = (1i64 << 53) + 1;
        assert_eq!(enc(Float64, Val::I(x)), ((1u64 << 53) as f64).to_le_bytes());
        // u64::MAX rounds to 2^64 in f32.
        assert_eq!(
            enc(Float32, Val::U(u64::MAX)),
            18446744073709551616f32.to_le_bytes()
        );
        assert_eq!(enc(Float16, Val::I(65504)), 0x7bffu16.to_le_bytes());
        assert_eq!(enc(Float16, Val::I(-70000)), 0xfc00u16.to_le_bytes());
        assert_eq!(enc(Float16, Val::I(2049)), 0x6800u16.to_le_bytes()); // tie to even: 2048
        assert_eq!(
            enc(Complex64, Val::I(-3)),
            [(-3f32).to_le_bytes(), 0f32.to_le_bytes()].concat()
        );
    }

    #[test]
    fn equality_rules() {
        use ElementType::*;
        let num = EqualMode::Numeric { equal_nan: true };
        let strict = EqualMode::Numeric { equal_nan: false };
        let nan = f64::NAN.to_le_bytes();
        assert!(element_equals(Float64, &nan, &nan, num));
        assert!(!element_equals(Float64, &nan, &nan, strict));
        assert!(element_equals(Float64, &nan, &nan, EqualMode::Bitwise));
        let c = |r: f32, i: f32| [r.to_le_bytes(), i.to_le_bytes()].concat();
        assert!(element_equals(
            Complex64,
            &c(1.0, f32::NAN),
            &c(f32::NAN, 0.0),
            num
        ));
        assert!(!element_equals(
            Complex64,
            &c(1.0, 2.0),
            &c(f32::NAN, 0.0),
            num
        ));
        assert!(element_equals(
            Complex64,
            &c(-0.0, 0.0),
            &c(0.0, -0.0),
            strict
        ));
        assert!(!element_equals(
            Complex64,
            &c(-0.0, 0.0),
            &c(0.0, -0.0),
            EqualMode::Bitwise
        ));
        assert!(element_equals(Bool, &[2], &[1], strict));
        assert!(!element_equals(Bool, &[2], &[1], EqualMode::Bitwise));
        assert!(!element_equals(Int16, &[1, 0], &[1, 1], strict));
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

#[cfg(test)]
mod primitive_tests {
    //! The primitives as the buffer layer calls them (moved from `zarr::host_ops`).
    /// float64 -> float16 bits through the shared host cast.
    fn f64_to_f16_bits(x: f64) -> u16 {
        let mut out = [0u8; 2];
        cast(
            &x.to_le_bytes(),
            ElementType::Float64,
            &mut out,
            ElementType::Float16,
        )
        .unwrap();
        u16::from_le_bytes(out)
    }

    use super::*;
    use half::f16;

    fn u16_le(b: &[u8]) -> u16 {
        u16::from_le_bytes([b[0], b[1]])
    }

    #[test]
    fn f16_rounding_is_correct() {
        // Exhaustive over float16: every value and every midpoint between neighbours.
        for bits in 0u16..0x7c00 {
            let v = f16::from_bits(bits).to_f64();
            assert_eq!(f64_to_f16_bits(v), bits, "{v}");
            assert_eq!(f64_to_f16_bits(-v), bits | 0x8000, "{v}");
            if bits == 0x7bff {
                continue;
            }
            let next = f16::from_bits(bits + 1).to_f64();
            let mid = (v + next) / 2.0;
            let even = if bits & 1 == 0 { bits } else { bits + 1 };
            assert_eq!(f64_to_f16_bits(mid), even, "midpoint {mid}");
            // Just above the midpoint rounds up, just below rounds down.
            assert_eq!(f64_to_f16_bits(mid + mid * 1e-12), bits + 1);
            assert_eq!(f64_to_f16_bits(mid - mid * 1e-12), bits);
        }
        assert_eq!(f64_to_f16_bits(65520.0), 0x7c00);
        assert_eq!(f64_to_f16_bits(65519.99), 0x7bff);
        assert_eq!(f64_to_f16_bits(f64::INFINITY), 0x7c00);
        assert!(f16::from_bits(f64_to_f16_bits(f64::NAN)).is_nan());
        assert_eq!(f64_to_f16_bits(1e-300), 0);
        // Double rounding through float32 would give 1 + 2^-10 here.
        let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(f64_to_f16_bits(x), 0x3c01);
    }

    #[test]
    fn strided_copy_checks_and_copies() {
        // Transpose a 2x3 u16 array.
        let src: Vec<u8> = (0u16..6).flat_map(|v| v.to_le_bytes()).collect();
        let mut dst = vec![0u8; 12];
        strided_copy(&src, 0, &[6, 2], &mut dst, 0, &[2, 4], &[2, 3], 2).unwrap();
        let got: Vec<u16> = dst.chunks(2).map(u16_le).collect();
        assert_eq!(got, vec![0, 3, 1, 4, 2, 5]);
        // Broadcast (zero stride) and negative strides.
        let mut dst = vec![0u8; 6];
        strided_copy(&src, 10, &[-2], &mut dst, 0, &[2], &[3], 2).unwrap();
        let got: Vec<u16> = dst.chunks(2).map(u16_le).collect();
        assert_eq!(got, vec![5, 4, 3]);
        let e = strided_copy(&src, 2, &[2], &mut dst, 0, &[2], &[6], 2).unwrap_err();
        assert!(e.to_string().contains("12"), "{e}");
        assert!(strided_copy(&src, 0, &[-2], &mut dst, 0, &[2], &[2], 2).is_err());
        // Empty shapes touch nothing, whatever the offsets.
        strided_copy(&src, 99, &[2], &mut dst, 99, &[2], &[0], 2).unwrap();
    }

    #[test]
    fn all_equal_rules() {
        use ElementType as E;
        let nz = (-0.0f32).to_le_bytes();
        let z = 0.0f32.to_le_bytes();
        let nan = f32::NAN.to_le_bytes();
        let numeric = EqualMode::Numeric { equal_nan: false };
        let nan_ok = EqualMode::Numeric { equal_nan: true };
        assert!(all_equal(&nz, E::Float32, &z, numeric).unwrap());
        assert!(!all_equal(&nz, E::Float32, &z, EqualMode::Bitwise).unwrap());
        assert!(!all_equal(&nan, E::Float32, &nan, numeric).unwrap());
        assert!(all_equal(&nan, E::Float32, &nan, nan_ok).unwrap());
        let c1 = [f32::NAN.to_le_bytes(), 1f32.to_le_bytes()].concat();
        let c2 = [2f32.to_le_bytes(), f32::NAN.to_le_bytes()].concat();
        assert!(all_equal(&c1, E::Complex64, &c2, nan_ok).unwrap());
        assert!(!all_equal(&c1, E::Complex64, &c2, numeric).unwrap());
        assert!(all_equal(&[2, 1], E::Bool, &[1], numeric).unwrap());
        assert!(!all_equal(&[2, 1], E::Bool, &[1], EqualMode::Bitwise).unwrap());
        assert!(all_equal(&[], E::Int64, &[0; 8], numeric).unwrap());
        assert!(all_equal(&[1, 2], E::Int32, &[0; 4], numeric).is_err());
        assert!(all_equal(&[1, 2, 3, 4], E::Int32, &[0; 2], numeric).is_err());
    }

    #[test]
    fn fill_and_swap() {
        let mut d = vec![0u8; 6];
        fill(&mut d, &[1, 2, 3]).unwrap();
        assert_eq!(d, [1, 2, 3, 1, 2, 3]);
        assert!(fill(&mut d, &[1, 2, 3, 4]).is_err());
        assert!(fill(&mut d, &[]).is_err());
        byteswap(&mut d, 2).unwrap();
        assert_eq!(d, [2, 1, 1, 3, 3, 2]);
        assert!(byteswap(&mut d, 3).is_err());
        assert!(byteswap(&mut d, 4).is_err());
    }

    #[test]
    fn bits_pack_and_unpack_lsb_first() {
        let bytes = [1u8, 0, 7, 0, 0, 0, 0, 1, 1, 0, 1];
        let mut packed = [0xffu8; 2];
        pack_bits(&bytes, &mut packed);
        assert_eq!(packed, [0b1000_0101, 0b0000_0101]);
        assert_eq!(
            unpack_bits(&packed, 0, 11),
            [1, 0, 1, 0, 0, 0, 0, 1, 1, 0, 1]
        );
        assert_eq!(unpack_bits(&packed, 7, 3), [1, 1, 0]);
        assert!(unpack_bits(&packed, 3, 0).is_empty());
    }
}
