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
//! * [`cast`] is numpy's `astype(casting="unsafe")`, as numpy computes it on x86-64:
//!   integers wrap; int → float and float → float round to nearest-even once; float →
//!   int truncates toward zero, and out-of-range values and NaN give what numpy gives
//!   on x86-64 (e.g. 300.0 → uint8 is 44, NaN → int32 is `i32::MIN`); complex → real
//!   keeps the real part; anything → bool is `!= 0` (NaN is true; complex: either
//!   part); bool reads any non-zero byte as true. The exact rules are those of
//!   [`cuda::kernels::ops::cast`](crate::cuda::kernels::ops::cast).
//!
//! fill, byteswap, strided copy, cast and all-equal are thin adapters over
//! [`cuda::kernels::ops::host`](crate::cuda::kernels::ops::host), the host twins of the
//! device kernels: host and device share one definition of every primitive.
//! * [`all_equal`] `Numeric { equal_nan }` is numpy's `array_equal` against one value:
//!   `-0.0 == 0.0`; NaN equals NaN only with `equal_nan`; for complex numbers an
//!   element "is NaN" when either part is, and with `equal_nan` two NaN elements are
//!   equal whatever their other parts (numpy's `isnan` masks); bool compares
//!   truthiness; integers compare exactly. `Bitwise` compares the stored bytes.

use half::f16;
use num_complex::{Complex32, Complex64};

use super::dtype::{Element, ElementType, Scalar};
use crate::cuda::kernels::ops;
use crate::error::Result;

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
    ops::host::fill(dst, pattern)
}

/// Reverses the bytes of every `width`-byte unit of `buf` (width 1, 2, 4 or 8).
pub(crate) fn byteswap(buf: &mut [u8], width: usize) -> Result<()> {
    ops::host::byteswap(buf, width)
}

/// [`byteswap`] without the checks (`buf.len()` must be a multiple of `width`).
pub(crate) fn swap_in_place(buf: &mut [u8], width: usize) {
    if width > 1 {
        for unit in buf.chunks_exact_mut(width) {
            unit.reverse();
        }
    }
}

/// Copies an n-d view of `src` into an n-d view of `dst` (same shape; byte offsets and
/// byte strides, which may be zero or negative on the source). Extents are checked.
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
    ops::host::strided_copy(
        src,
        src_offset,
        src_strides,
        dst,
        dst_offset,
        dst_strides,
        shape,
        elem,
    )
}

/// Casts every element of `src` (type `src_kind`) into `dst` (type `dst_kind`), both
/// little-endian and holding the same number of elements (see the module docs).
pub(crate) fn cast(
    src: &[u8],
    src_kind: ElementType,
    dst: &mut [u8],
    dst_kind: ElementType,
) -> Result<()> {
    ops::host::cast(src, kind(src_kind), dst, kind(dst_kind))
}

/// Whether every element of `buf` (type `kind`, little-endian) equals `value` (one
/// element of the same type, little-endian), compared as `mode` says.
pub(crate) fn all_equal(
    buf: &[u8],
    kind_: ElementType,
    value: &[u8],
    mode: EqualMode,
) -> Result<bool> {
    ops::host::all_equal(buf, kind(kind_), value, mode.into())
}

impl From<EqualMode> for ops::EqualMode {
    fn from(m: EqualMode) -> Self {
        match m {
            EqualMode::Bitwise => ops::EqualMode::Bitwise,
            EqualMode::Numeric { equal_nan } => ops::EqualMode::Numeric { equal_nan },
        }
    }
}

/// The kernels' name for an element type.
pub(crate) fn kind(t: ElementType) -> ops::ScalarKind {
    use ElementType as E;
    use ops::ScalarKind as K;
    match t {
        E::Bool => K::Bool,
        E::Int8 => K::I8,
        E::Int16 => K::I16,
        E::Int32 => K::I32,
        E::Int64 => K::I64,
        E::UInt8 => K::U8,
        E::UInt16 => K::U16,
        E::UInt32 => K::U32,
        E::UInt64 => K::U64,
        E::Float16 => K::F16,
        E::Float32 => K::F32,
        E::Float64 => K::F64,
        E::Complex64 => K::C64,
        E::Complex128 => K::C128,
    }
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

#[cfg(test)]
mod tests {
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
}
