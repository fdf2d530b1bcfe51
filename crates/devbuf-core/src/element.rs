//! Element types and how elements compare: the value types that every layer shares.
//!
//! [`ElementType`] names the numpy scalar types (`bool`, `int8..int64`,
//! `uint8..uint64`, `float16..float64`, `complex64`, `complex128`) that zarr arrays,
//! Arrow tensors, the host primitives (`memory::host_ops`) and the device kernels
//! (`cuda::kernels::ops`) all work on; [`EqualMode`] is how an all-equal test compares.
//! This module sits below `cuda`: it imports nothing of the crate but `error`.
//!
//! Crate-private: the exact decoding of one little-endian element into a value
//! (`Val`, `decode`), shared by the host all-equal and the device kernels' plans.

use std::fmt;

/// The element type of an array, without byte order (numpy's `dtype.type`).
///
/// ```
/// use devbuf_core::ElementType;
/// assert_eq!(ElementType::Complex64.size(), 8);
/// assert_eq!(ElementType::Float16.name(), "float16");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ElementType {
    /// `bool` (one byte, 0 or 1).
    Bool,
    /// `int8`.
    Int8,
    /// `int16`.
    Int16,
    /// `int32`.
    Int32,
    /// `int64`.
    Int64,
    /// `uint8`.
    UInt8,
    /// `uint16`.
    UInt16,
    /// `uint32`.
    UInt32,
    /// `uint64`.
    UInt64,
    /// `float16` (IEEE 754 half precision, the `half` crate's [`f16`](half::f16)).
    Float16,
    /// `float32`.
    Float32,
    /// `float64`.
    Float64,
    /// `complex64`: two `float32` (real, imaginary).
    Complex64,
    /// `complex128`: two `float64` (real, imaginary).
    Complex128,
}

impl ElementType {
    /// Every element type, in numpy's order.
    pub const ALL: [ElementType; 14] = [
        ElementType::Bool,
        ElementType::Int8,
        ElementType::Int16,
        ElementType::Int32,
        ElementType::Int64,
        ElementType::UInt8,
        ElementType::UInt16,
        ElementType::UInt32,
        ElementType::UInt64,
        ElementType::Float16,
        ElementType::Float32,
        ElementType::Float64,
        ElementType::Complex64,
        ElementType::Complex128,
    ];

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        use ElementType::*;
        match self {
            Bool | Int8 | UInt8 => 1,
            Int16 | UInt16 | Float16 => 2,
            Int32 | UInt32 | Float32 => 4,
            Int64 | UInt64 | Float64 | Complex64 => 8,
            Complex128 => 16,
        }
    }

    /// numpy's name, e.g. `"uint16"`.
    pub const fn name(self) -> &'static str {
        use ElementType::*;
        match self {
            Bool => "bool",
            Int8 => "int8",
            Int16 => "int16",
            Int32 => "int32",
            Int64 => "int64",
            UInt8 => "uint8",
            UInt16 => "uint16",
            UInt32 => "uint32",
            UInt64 => "uint64",
            Float16 => "float16",
            Float32 => "float32",
            Float64 => "float64",
            Complex64 => "complex64",
            Complex128 => "complex128",
        }
    }

    /// numpy's kind character: `b` (bool), `i` (signed), `u` (unsigned), `f` (float),
    /// `c` (complex).
    pub const fn kind(self) -> char {
        use ElementType::*;
        match self {
            Bool => 'b',
            Int8 | Int16 | Int32 | Int64 => 'i',
            UInt8 | UInt16 | UInt32 | UInt64 => 'u',
            Float16 | Float32 | Float64 => 'f',
            Complex64 | Complex128 => 'c',
        }
    }

    /// True for `float16`, `float32`, `float64` (`kind()` is `'f'`).
    pub(crate) const fn is_float(self) -> bool {
        self.kind() == 'f'
    }

    /// True for `complex64`, `complex128` (`kind()` is `'c'`).
    pub(crate) const fn is_complex(self) -> bool {
        self.kind() == 'c'
    }

    /// True for the signed and unsigned integers (`kind()` is `'i'` or `'u'`).
    pub(crate) const fn is_integer(self) -> bool {
        matches!(self.kind(), 'i' | 'u')
    }

    /// The width in bytes of the units that a byte-order change reverses: the element
    /// size, except for complex numbers, whose two parts are swapped separately. This
    /// is the width to pass to a byte swap, and the natural alignment (the kernels
    /// called it `ScalarKind::component_size`). devbuf-zarr reaches it through
    /// `__private::swap_width`.
    pub(crate) const fn swap_width(self) -> usize {
        match self {
            ElementType::Complex64 => 4,
            ElementType::Complex128 => 8,
            _ => self.size(),
        }
    }

    pub(crate) fn code(self) -> &'static str {
        use ElementType::*;
        match self {
            Bool => "b1",
            Int8 => "i1",
            Int16 => "i2",
            Int32 => "i4",
            Int64 => "i8",
            UInt8 => "u1",
            UInt16 => "u2",
            UInt32 => "u4",
            UInt64 => "u8",
            Float16 => "f2",
            Float32 => "f4",
            Float64 => "f8",
            Complex64 => "c8",
            Complex128 => "c16",
        }
    }

    pub(crate) fn from_code(kind: char, size: usize) -> Option<ElementType> {
        use ElementType::*;
        Some(match (kind, size) {
            ('b', 1) | ('?', 1) => Bool,
            ('i', 1) => Int8,
            ('i', 2) => Int16,
            ('i', 4) => Int32,
            ('i', 8) => Int64,
            ('u', 1) => UInt8,
            ('u', 2) => UInt16,
            ('u', 4) => UInt32,
            ('u', 8) => UInt64,
            ('f', 2) => Float16,
            ('f', 4) => Float32,
            ('f', 8) => Float64,
            ('c', 8) => Complex64,
            ('c', 16) => Complex128,
            _ => return None,
        })
    }

    pub(crate) fn int_bits(self) -> u32 {
        (self.size() * 8) as u32
    }

    /// The short name used in kernel names (`"f32"`, `"c128"`, ...).
    #[cfg(test)]
    pub(crate) const fn short(self) -> &'static str {
        use ElementType::*;
        match self {
            Bool => "bool",
            Int8 => "i8",
            Int16 => "i16",
            Int32 => "i32",
            Int64 => "i64",
            UInt8 => "u8",
            UInt16 => "u16",
            UInt32 => "u32",
            UInt64 => "u64",
            Float16 => "f16",
            Float32 => "f32",
            Float64 => "f64",
            Complex64 => "c64",
            Complex128 => "c128",
        }
    }
}

impl fmt::Display for ElementType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How an all-equal test compares elements with the value (the host and device
/// all-equal primitives behind [`NDBuffer::all_equal`](crate::zarr::NDBuffer::all_equal)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EqualMode {
    /// Raw bytes: `-0.0 != 0.0`, and a NaN equals only the same NaN bits. zarr compares a
    /// float fill value of 0.0 this way.
    Bitwise,
    /// Values, as numpy's `==`: `-0.0 == 0.0`; integers and bools by value (any non-zero
    /// bool byte is true). With `equal_nan`, a NaN equals any NaN (a complex value is NaN
    /// when either part is, as `numpy.isnan`); without it a NaN equals nothing.
    Numeric {
        /// NaN compares equal to NaN.
        equal_nan: bool,
    },
}

// ---------------------------------------------------------------------------------------
// Decoding one element (the same rules as the kernels)

/// An exact intermediate value: every source value is representable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Val {
    I(i64),
    U(u64),
    F(f64),
    C(f64, f64),
}

pub(crate) fn le<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[..N]);
    a
}

/// Decodes one little-endian element of `kind` from `b` (`kind.size()` bytes).
pub(crate) fn decode(kind: ElementType, b: &[u8]) -> Val {
    use ElementType::*;
    match kind {
        Bool => Val::I((b[0] != 0) as i64),
        Int8 => Val::I(b[0] as i8 as i64),
        Int16 => Val::I(i16::from_le_bytes(le(b)) as i64),
        Int32 => Val::I(i32::from_le_bytes(le(b)) as i64),
        Int64 => Val::I(i64::from_le_bytes(le(b))),
        UInt8 => Val::U(b[0] as u64),
        UInt16 => Val::U(u16::from_le_bytes(le(b)) as u64),
        UInt32 => Val::U(u32::from_le_bytes(le(b)) as u64),
        UInt64 => Val::U(u64::from_le_bytes(le(b))),
        Float16 => Val::F(f16_to_f64(u16::from_le_bytes(le(b)))),
        Float32 => Val::F(f32::from_le_bytes(le(b)) as f64),
        Float64 => Val::F(f64::from_le_bytes(le(b))),
        Complex64 => Val::C(
            f32::from_le_bytes(le(b)) as f64,
            f32::from_le_bytes(le(&b[4..])) as f64,
        ),
        Complex128 => Val::C(f64::from_le_bytes(le(b)), f64::from_le_bytes(le(&b[8..]))),
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
