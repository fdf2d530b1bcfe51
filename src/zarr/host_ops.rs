//! The element-wise primitives of the buffer layer, computed on the host.
//!
//! [`NDBuffer`](super::NDBuffer) is written against five primitives — fill, cast,
//! n-d strided copy, byte swap and all-equal — that run on the device through
//! `cuda::kernels::ops` and on the host through this module. Both sides take the
//! same arguments and must give the same results; the GPU tests compare them.
//!
//! Contract (shared with the device kernels):
//!
//! * Values are little-endian; a big-endian array is byte-swapped before any
//!   arithmetic ([`byteswap`]; complex numbers swap each part).
//! * [`cast`] is numpy's `astype(casting="unsafe")`: integers wrap (two's
//!   complement truncation); int → float rounds to nearest-even; float → float rounds
//!   to nearest-even (float16 correctly rounded from float64, not through float32);
//!   float → int truncates toward zero, **saturating** out of range and NaN → 0 (the
//!   CUDA and Rust rule; numpy's result there is platform-defined C behaviour);
//!   complex → real keeps the real part; anything → bool is `!= 0` (NaN is true);
//!   bool reads any non-zero byte as true.
//! * [`all_equal`] `Numeric { equal_nan }` is numpy's `array_equal` against one value:
//!   `-0.0 == 0.0`; NaN equals NaN only with `equal_nan`; for complex numbers an
//!   element "is NaN" when either part is, and with `equal_nan` two NaN elements are
//!   equal whatever their other parts (numpy's `isnan` masks); bool compares
//!   truthiness; integers compare exactly. `Bitwise` compares the stored bytes.

use half::f16;
use num_complex::{Complex32, Complex64};

use super::dtype::{Element, ElementType, Scalar};
use crate::error::{Error, Result};

/// How [`all_equal`] compares (mirrors `cuda::kernels::ops::EqualMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EqualMode {
    /// Byte-for-byte.
    Bitwise,
    /// By value, numpy's rules (see the module docs).
    Numeric {
        /// NaN equals NaN.
        equal_nan: bool,
    },
}

/// Fills `dst` with repetitions of `pattern` (1 to 16 bytes, dividing `dst.len()`).
pub(crate) fn fill(dst: &mut [u8], pattern: &[u8]) -> Result<()> {
    if pattern.is_empty() || pattern.len() > 16 {
        return Err(Error::invalid(format!(
            "fill pattern must be 1 to 16 bytes long, got {}",
            pattern.len()
        )));
    }
    if dst.len() % pattern.len() != 0 {
        return Err(Error::invalid(format!(
            "fill: destination of {} bytes is not a whole number of {}-byte elements",
            dst.len(),
            pattern.len()
        )));
    }
    if pattern.iter().all(|&b| b == pattern[0]) {
        dst.fill(pattern[0]);
    } else {
        for chunk in dst.chunks_exact_mut(pattern.len()) {
            chunk.copy_from_slice(pattern);
        }
    }
    Ok(())
}

/// Reverses the bytes of every `width`-byte unit of `buf` (width 1, 2, 4 or 8).
pub(crate) fn byteswap(buf: &mut [u8], width: usize) -> Result<()> {
    if !matches!(width, 1 | 2 | 4 | 8) {
        return Err(Error::invalid(format!(
            "byteswap width must be 1, 2, 4 or 8, got {width}"
        )));
    }
    if buf.len() % width != 0 {
        return Err(Error::invalid(format!(
            "byteswap: {} bytes is not a whole number of {width}-byte units",
            buf.len()
        )));
    }
    swap_in_place(buf, width);
    Ok(())
}

/// [`byteswap`] without the checks (`buf.len()` must be a multiple of `width`).
pub(crate) fn swap_in_place(buf: &mut [u8], width: usize) {
    if width > 1 {
        for unit in buf.chunks_exact_mut(width) {
            unit.reverse();
        }
    }
}

/// Checks that an n-d view (`offset`, byte `strides`, `shape`, `elem` bytes per
/// element) lies inside a buffer of `len` bytes. Empty views always fit.
pub(crate) fn check_extent(
    what: &str,
    len: usize,
    offset: usize,
    strides: &[isize],
    shape: &[usize],
    elem: usize,
) -> Result<()> {
    if strides.len() != shape.len() {
        return Err(Error::invalid(format!(
            "{what}: {} strides for {} dimensions",
            strides.len(),
            shape.len()
        )));
    }
    if shape.contains(&0) {
        return Ok(());
    }
    let mut lo = offset as i128;
    let mut hi = offset as i128 + elem as i128;
    for (&n, &s) in shape.iter().zip(strides) {
        let reach = (n as i128 - 1) * s as i128;
        if reach < 0 {
            lo += reach;
        } else {
            hi += reach;
        }
    }
    if lo < 0 || hi > len as i128 {
        return Err(Error::invalid(format!(
            "{what}: a view with offset {offset}, strides {strides:?}, shape {shape:?} and \
             {elem}-byte elements spans bytes {lo}..{hi}, outside the buffer of {len} bytes"
        )));
    }
    Ok(())
}

/// Copies an n-d view of `src` into an n-d view of `dst` (same shape; byte offsets and
/// byte strides, which may be zero or negative). Extents are checked.
#[allow(clippy::too_many_arguments)]
pub(crate) fn strided_copy(
    src: &[u8],
    src_offset: usize,
    src_strides: &[isize],
    dst: &mut [u8],
    dst_offset: usize,
    dst_strides: &[isize],
    shape: &[usize],
    elem: usize,
) -> Result<()> {
    if elem == 0 {
        return Err(Error::invalid(
            "strided_copy: element size must be positive",
        ));
    }
    check_extent(
        "strided_copy source",
        src.len(),
        src_offset,
        src_strides,
        shape,
        elem,
    )?;
    check_extent(
        "strided_copy destination",
        dst.len(),
        dst_offset,
        dst_strides,
        shape,
        elem,
    )?;
    if shape.contains(&0) {
        return Ok(());
    }
    let nd = shape.len();
    if nd == 0 {
        dst[dst_offset..dst_offset + elem].copy_from_slice(&src[src_offset..src_offset + elem]);
        return Ok(());
    }
    let inner = shape[nd - 1];
    let (si, di) = (src_strides[nd - 1], dst_strides[nd - 1]);
    let run = si == elem as isize && di == elem as isize;
    let mut idx = vec![0usize; nd - 1];
    loop {
        let mut s = src_offset as isize;
        let mut d = dst_offset as isize;
        for k in 0..nd - 1 {
            s += idx[k] as isize * src_strides[k];
            d += idx[k] as isize * dst_strides[k];
        }
        if run {
            let (s, d) = (s as usize, d as usize);
            let n = inner * elem;
            dst[d..d + n].copy_from_slice(&src[s..s + n]);
        } else {
            for _ in 0..inner {
                let (su, du) = (s as usize, d as usize);
                dst[du..du + elem].copy_from_slice(&src[su..su + elem]);
                s += si;
                d += di;
            }
        }
        // Odometer over the outer axes.
        let mut k = nd - 1;
        loop {
            if k == 0 {
                return Ok(());
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < shape[k] {
                break;
            }
            idx[k] = 0;
        }
    }
}

/// An element's value on the way from one type to another.
#[derive(Clone, Copy)]
enum V {
    B(bool),
    I(i64),
    U(u64),
    F(f64),
    C(f64, f64),
}

fn decoder(t: ElementType) -> fn(&[u8]) -> V {
    use ElementType as E;
    match t {
        E::Bool => |b| V::B(b[0] != 0),
        E::Int8 => |b| V::I(i8::read_le(b) as i64),
        E::Int16 => |b| V::I(i16::read_le(b) as i64),
        E::Int32 => |b| V::I(i32::read_le(b) as i64),
        E::Int64 => |b| V::I(i64::read_le(b)),
        E::UInt8 => |b| V::U(b[0] as u64),
        E::UInt16 => |b| V::U(u16::read_le(b) as u64),
        E::UInt32 => |b| V::U(u32::read_le(b) as u64),
        E::UInt64 => |b| V::U(u64::read_le(b)),
        E::Float16 => |b| V::F(f16::read_le(b).to_f64()),
        E::Float32 => |b| V::F(f32::read_le(b) as f64),
        E::Float64 => |b| V::F(f64::read_le(b)),
        E::Complex64 => |b| {
            let c = Complex32::read_le(b);
            V::C(c.re as f64, c.im as f64)
        },
        E::Complex128 => |b| {
            let c = Complex64::read_le(b);
            V::C(c.re, c.im)
        },
    }
}

macro_rules! to_int {
    ($t:ty) => {
        |v: V, out: &mut [u8]| {
            let x: $t = match v {
                V::B(b) => b as $t,
                V::I(i) => i as $t,
                V::U(u) => u as $t,
                V::F(f) => f as $t,
                V::C(re, _) => re as $t,
            };
            x.write_le(out)
        }
    };
}

fn real_f64(v: V) -> f64 {
    match v {
        V::B(b) => b as u8 as f64,
        V::I(i) => i as f64,
        V::U(u) => u as f64,
        V::F(f) => f,
        V::C(re, _) => re,
    }
}

fn real_f32(v: V) -> f32 {
    // Integers round once, straight to float32 (no double rounding through f64).
    match v {
        V::B(b) => b as u8 as f32,
        V::I(i) => i as f32,
        V::U(u) => u as f32,
        V::F(f) => f as f32,
        V::C(re, _) => re as f32,
    }
}

fn imag_f64(v: V) -> f64 {
    match v {
        V::C(_, im) => im,
        _ => 0.0,
    }
}

fn encoder(t: ElementType) -> fn(V, &mut [u8]) {
    use ElementType as E;
    match t {
        E::Bool => |v, out| {
            out[0] = match v {
                V::B(b) => b,
                V::I(i) => i != 0,
                V::U(u) => u != 0,
                V::F(f) => f != 0.0,
                V::C(re, im) => re != 0.0 || im != 0.0,
            } as u8
        },
        E::Int8 => to_int!(i8),
        E::Int16 => to_int!(i16),
        E::Int32 => to_int!(i32),
        E::Int64 => to_int!(i64),
        E::UInt8 => to_int!(u8),
        E::UInt16 => to_int!(u16),
        E::UInt32 => to_int!(u32),
        E::UInt64 => to_int!(u64),
        E::Float16 => |v, out| f16::from_bits(f64_to_f16_bits(real_f64(v))).write_le(out),
        E::Float32 => |v, out| real_f32(v).write_le(out),
        E::Float64 => |v, out| real_f64(v).write_le(out),
        E::Complex64 => |v, out| {
            let im = match v {
                V::C(_, im) => im as f32,
                _ => 0.0,
            };
            Complex32::new(real_f32(v), im).write_le(out)
        },
        E::Complex128 => |v, out| Complex64::new(real_f64(v), imag_f64(v)).write_le(out),
    }
}

/// Casts every element of `src` (type `src_kind`) into `dst` (type `dst_kind`), both
/// little-endian and holding the same number of elements (see the module docs).
pub(crate) fn cast(
    src: &[u8],
    src_kind: ElementType,
    dst: &mut [u8],
    dst_kind: ElementType,
) -> Result<()> {
    let (ss, ds) = (src_kind.size(), dst_kind.size());
    if src.len() % ss != 0 || dst.len() % ds != 0 || src.len() / ss != dst.len() / ds {
        return Err(Error::invalid(format!(
            "cast: source of {} bytes ({src_kind}) and destination of {} bytes ({dst_kind}) \
             must hold the same whole number of elements",
            src.len(),
            dst.len()
        )));
    }
    cast_slice(src, src_kind, dst, dst_kind);
    Ok(())
}

/// [`cast`] without the checks.
pub(crate) fn cast_slice(src: &[u8], src_kind: ElementType, dst: &mut [u8], dst_kind: ElementType) {
    if src_kind == dst_kind {
        dst.copy_from_slice(src);
        return;
    }
    let dec = decoder(src_kind);
    let enc = encoder(dst_kind);
    for (s, d) in src
        .chunks_exact(src_kind.size())
        .zip(dst.chunks_exact_mut(dst_kind.size()))
    {
        enc(dec(s), d);
    }
}

/// Whether every element of `buf` (type `kind`, little-endian) equals `value` (one
/// element of the same type, little-endian), compared as `mode` says.
pub(crate) fn all_equal(
    buf: &[u8],
    kind: ElementType,
    value: &[u8],
    mode: EqualMode,
) -> Result<bool> {
    let size = kind.size();
    if value.len() != size {
        return Err(Error::invalid(format!(
            "all_equal: the value must be one {kind} ({size} bytes), got {} bytes",
            value.len()
        )));
    }
    if buf.len() % size != 0 {
        return Err(Error::invalid(format!(
            "all_equal: {} bytes is not a whole number of {size}-byte {kind} elements",
            buf.len()
        )));
    }
    let equal_nan = match mode {
        EqualMode::Bitwise => return Ok(buf.chunks_exact(size).all(|c| c == value)),
        EqualMode::Numeric { equal_nan } => equal_nan,
    };
    fn float_eq(x: f64, v: f64, equal_nan: bool) -> bool {
        x == v || (equal_nan && x.is_nan() && v.is_nan())
    }
    fn complex_eq(x: (f64, f64), v: (f64, f64), equal_nan: bool) -> bool {
        let xn = x.0.is_nan() || x.1.is_nan();
        let vn = v.0.is_nan() || v.1.is_nan();
        if equal_nan && (xn || vn) {
            xn && vn
        } else {
            x.0 == v.0 && x.1 == v.1
        }
    }
    use ElementType as E;
    let chunks = buf.chunks_exact(size);
    Ok(match kind {
        E::Bool => {
            let v = value[0] != 0;
            chunks.into_iter().all(|c| (c[0] != 0) == v)
        }
        E::Float16 | E::Float32 | E::Float64 => {
            let dec = decoder(kind);
            let v = real_f64(dec(value));
            chunks
                .into_iter()
                .all(|c| float_eq(real_f64(dec(c)), v, equal_nan))
        }
        E::Complex64 | E::Complex128 => {
            let dec = decoder(kind);
            let vv = dec(value);
            let v = (real_f64(vv), imag_f64(vv));
            chunks.into_iter().all(|c| {
                let x = dec(c);
                complex_eq((real_f64(x), imag_f64(x)), v, equal_nan)
            })
        }
        _ => chunks.into_iter().all(|c| c == value),
    })
}

/// Reads one little-endian element as a [`Scalar`] (`bytes` holds at least one).
pub(crate) fn read_scalar(t: ElementType, b: &[u8]) -> Scalar {
    use ElementType as E;
    match t {
        E::Bool => Scalar::Bool(bool::read_le(b)),
        E::Int8 => Scalar::Int8(i8::read_le(b)),
        E::Int16 => Scalar::Int16(i16::read_le(b)),
        E::Int32 => Scalar::Int32(i32::read_le(b)),
        E::Int64 => Scalar::Int64(i64::read_le(b)),
        E::UInt8 => Scalar::UInt8(u8::read_le(b)),
        E::UInt16 => Scalar::UInt16(u16::read_le(b)),
        E::UInt32 => Scalar::UInt32(u32::read_le(b)),
        E::UInt64 => Scalar::UInt64(u64::read_le(b)),
        E::Float16 => Scalar::Float16(f16::read_le(b)),
        E::Float32 => Scalar::Float32(f32::read_le(b)),
        E::Float64 => Scalar::Float64(f64::read_le(b)),
        E::Complex64 => Scalar::Complex64(Complex32::read_le(b)),
        E::Complex128 => Scalar::Complex128(Complex64::read_le(b)),
    }
}

/// float64 → float16 bits, rounded to nearest-even from the full float64 value (what
/// numpy's `npy_double_to_half` does; the `half` crate's `from_f64` rounds through
/// float32 on some CPUs, which can round twice). NaN keeps its sign and the top of its
/// payload, and stays NaN.
pub(crate) fn f64_to_f16_bits(x: f64) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 48) & 0x8000) as u16;
    let exp = ((b >> 52) & 0x7ff) as i32;
    let man = b & 0x000f_ffff_ffff_ffff;
    if exp == 0x7ff {
        if man == 0 {
            return sign | 0x7c00;
        }
        let top = (man >> 42) as u16;
        return sign | 0x7c00 | if top == 0 { 1 } else { top };
    }
    if exp == 0 {
        // float64 subnormals are far below float16's smallest subnormal.
        return sign;
    }
    let e = exp - 1023;
    if e > 15 {
        return sign | 0x7c00;
    }
    let sig = man | (1u64 << 52);
    // Round `sig >> shift` to nearest-even.
    let round = |shift: u32| -> u64 {
        if shift >= 64 {
            return 0;
        }
        let m = sig >> shift;
        let rem = sig & ((1u64 << shift) - 1);
        let half = 1u64 << (shift - 1);
        if rem > half || (rem == half && (m & 1) == 1) {
            m + 1
        } else {
            m
        }
    };
    if e >= -14 {
        // Normal: 10 fraction bits; a carry out of the fraction bumps the exponent
        // (and 0x7bff + 1 = 0x7c00 is infinity).
        let m = round(42) as u32; // 11 bits with the hidden one (or 2048 after a carry)
        let bits = (((e + 15) as u32) << 10) + m - 0x400;
        sign | bits.min(0x7c00) as u16
    } else {
        // Subnormal: units of 2^-24.
        let shift = (28 - e) as u32;
        if shift >= 54 {
            return sign;
        }
        sign | round(shift) as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let got: Vec<u16> = dst.chunks(2).map(u16::read_le).collect();
        assert_eq!(got, vec![0, 3, 1, 4, 2, 5]);
        // Broadcast (zero stride) and negative strides.
        let mut dst = vec![0u8; 6];
        strided_copy(&src, 10, &[-2], &mut dst, 0, &[2], &[3], 2).unwrap();
        let got: Vec<u16> = dst.chunks(2).map(u16::read_le).collect();
        assert_eq!(got, vec![5, 4, 3]);
        let e = strided_copy(&src, 2, &[2], &mut dst, 0, &[2], &[6], 2).unwrap_err();
        assert!(
            e.to_string().contains("outside the buffer of 12 bytes"),
            "{e}"
        );
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
}
