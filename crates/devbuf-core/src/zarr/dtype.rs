//! Element types, data types (an element type plus a byte order) and typed scalars.
//!
//! These are the numpy dtypes that zarr's buffers hold: `bool`, `int8..int64`,
//! `uint8..uint64`, `float16`, `float32`, `float64`, `complex64`, `complex128`, each
//! little- or big-endian.

use std::fmt;
use std::str::FromStr;

use half::f16;
use num_complex::{Complex32, Complex64};

use crate::element::ElementType;
use crate::error::{Error, Result};
use crate::memory::host_ops;

/// numpy's type promotion (`np.promote_types`) for these element types: the type in
/// which two values of types `a` and `b` are compared.
///
/// ```
/// use devbuf_core::zarr::promote_types;
/// use devbuf_core::ElementType as E;
/// assert_eq!(promote_types(E::UInt8, E::Int8), E::Int16);
/// assert_eq!(promote_types(E::UInt64, E::Int64), E::Float64);
/// assert_eq!(promote_types(E::Int16, E::Float16), E::Float32);
/// assert_eq!(promote_types(E::Float64, E::Complex64), E::Complex128);
/// ```
pub fn promote_types(a: ElementType, b: ElementType) -> ElementType {
    use ElementType::*;
    if a == b {
        return a;
    }
    if a == Bool {
        return b;
    }
    if b == Bool {
        return a;
    }
    // Order so that the "lesser kind" comes first: i/u < f < c.
    let rank = |t: ElementType| match t.kind() {
        'i' | 'u' => 0,
        'f' => 1,
        _ => 2,
    };
    let (a, b) = if rank(a) <= rank(b) { (a, b) } else { (b, a) };
    let float_of = |bytes: usize| match bytes {
        2 => Float16,
        4 => Float32,
        _ => Float64,
    };
    let complex_of = |bytes: usize| if bytes <= 4 { Complex64 } else { Complex128 };
    match (a.kind(), b.kind()) {
        ('i', 'i') | ('u', 'u') => {
            if a.size() >= b.size() {
                a
            } else {
                b
            }
        }
        ('i', 'u') | ('u', 'i') => {
            let (s, u) = if a.kind() == 'i' { (a, b) } else { (b, a) };
            if s.size() > u.size() {
                s
            } else {
                match u.size() * 2 {
                    2 => Int16,
                    4 => Int32,
                    8 => Int64,
                    _ => Float64,
                }
            }
        }
        (_, 'f') if a.is_integer() => {
            // The smallest float that holds every value of the integer type.
            let need = match a.int_bits() {
                8 => 2,
                16 => 4,
                _ => 8,
            };
            float_of(need.max(b.size()))
        }
        (_, 'c') if a.is_integer() => {
            let need = match a.int_bits() {
                8 | 16 => 4,
                _ => 8,
            };
            complex_of(need.max(b.size() / 2))
        }
        ('f', 'f') => float_of(a.size().max(b.size())),
        ('f', 'c') => complex_of(a.size().max(b.size() / 2)),
        _ => complex_of(a.size().max(b.size()) / 2),
    }
}

/// Byte order of stored elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endianness {
    /// Least significant byte first (x86-64, ARM, CUDA devices).
    Little,
    /// Most significant byte first.
    Big,
}

impl Endianness {
    /// The byte order of this machine.
    pub const NATIVE: Endianness = if cfg!(target_endian = "big") {
        Endianness::Big
    } else {
        Endianness::Little
    };
}

impl fmt::Display for Endianness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Endianness::Little => "little",
            Endianness::Big => "big",
        })
    }
}

/// A numpy dtype: an element type and the byte order its elements are stored in.
///
/// Single-byte types have no byte order; they always report [`Endianness::NATIVE`]
/// (numpy's `|`), so `Dtype::new(ElementType::Int8, Endianness::Big) == Dtype::from(ElementType::Int8)`.
///
/// ```
/// use devbuf_core::zarr::{Dtype, Endianness};
/// use devbuf_core::ElementType;
/// let t: Dtype = ">f4".parse()?;
/// assert_eq!(t.element(), ElementType::Float32);
/// assert_eq!(t.byteorder(), Endianness::Big);
/// assert_eq!(t.to_string(), ">f4");
/// assert_eq!(Dtype::FLOAT64.to_string(), "float64");
/// assert_eq!("int16".parse::<Dtype>()?, Dtype::INT16);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dtype {
    element: ElementType,
    endianness: Endianness,
}

impl Dtype {
    /// `bool`.
    pub const BOOL: Dtype = Dtype::new(ElementType::Bool, Endianness::NATIVE);
    /// native `int8`.
    pub const INT8: Dtype = Dtype::new(ElementType::Int8, Endianness::NATIVE);
    /// native `int16`.
    pub const INT16: Dtype = Dtype::new(ElementType::Int16, Endianness::NATIVE);
    /// native `int32`.
    pub const INT32: Dtype = Dtype::new(ElementType::Int32, Endianness::NATIVE);
    /// native `int64`.
    pub const INT64: Dtype = Dtype::new(ElementType::Int64, Endianness::NATIVE);
    /// native `uint8`.
    pub const UINT8: Dtype = Dtype::new(ElementType::UInt8, Endianness::NATIVE);
    /// native `uint16`.
    pub const UINT16: Dtype = Dtype::new(ElementType::UInt16, Endianness::NATIVE);
    /// native `uint32`.
    pub const UINT32: Dtype = Dtype::new(ElementType::UInt32, Endianness::NATIVE);
    /// native `uint64`.
    pub const UINT64: Dtype = Dtype::new(ElementType::UInt64, Endianness::NATIVE);
    /// native `float16`.
    pub const FLOAT16: Dtype = Dtype::new(ElementType::Float16, Endianness::NATIVE);
    /// native `float32`.
    pub const FLOAT32: Dtype = Dtype::new(ElementType::Float32, Endianness::NATIVE);
    /// native `float64`.
    pub const FLOAT64: Dtype = Dtype::new(ElementType::Float64, Endianness::NATIVE);
    /// native `complex64`.
    pub const COMPLEX64: Dtype = Dtype::new(ElementType::Complex64, Endianness::NATIVE);
    /// native `complex128`.
    pub const COMPLEX128: Dtype = Dtype::new(ElementType::Complex128, Endianness::NATIVE);

    /// `element` stored in byte order `endianness` (ignored for single-byte types).
    /// `Dtype::from(element)` is the same in this machine's byte order
    /// ([`Endianness::NATIVE`]).
    ///
    /// ```
    /// use devbuf_core::zarr::{Dtype, Endianness};
    /// use devbuf_core::ElementType;
    /// let be = Dtype::new(ElementType::Float64, Endianness::Big);
    /// assert_eq!(be.to_string(), ">f8");
    /// assert_eq!(be.byteorder(), Endianness::Big);
    /// let native = be.byteorder() == Endianness::NATIVE; // false on x86-64 and ARM
    /// # let _ = native;
    /// assert_eq!(be.element().size(), 8); // numpy's itemsize
    /// assert_eq!(Dtype::from(ElementType::Float64), Dtype::FLOAT64);
    /// ```
    pub const fn new(element: ElementType, endianness: Endianness) -> Dtype {
        let endianness = if element.size() == 1 {
            Endianness::NATIVE
        } else {
            endianness
        };
        Dtype {
            element,
            endianness,
        }
    }

    /// The element type.
    pub const fn element(&self) -> ElementType {
        self.element
    }

    /// The byte order (zarr's `NDBuffer.byteorder`).
    pub const fn byteorder(&self) -> Endianness {
        self.endianness
    }

    /// True when elements must be byte-swapped to become little-endian values (the
    /// form the kernels compute on).
    pub(crate) fn needs_swap(&self) -> bool {
        self.element.size() > 1 && self.endianness == Endianness::Big
    }
}

impl From<ElementType> for Dtype {
    /// `element` in this machine's byte order ([`Endianness::NATIVE`]).
    fn from(element: ElementType) -> Dtype {
        Dtype::new(element, Endianness::NATIVE)
    }
}

/// Parses numpy's spellings: names (`"float32"`, `"bool"`, `"uint8"`) and type
/// strings with an optional byte order (`"<f4"`, `">i8"`, `"=u2"`, `"|b1"`, `"c16"`,
/// `"?"`).
///
/// ```
/// use devbuf_core::zarr::Dtype;
/// assert_eq!("float32".parse::<Dtype>()?, Dtype::FLOAT32);
/// assert_eq!(">i8".parse::<Dtype>()?.to_string(), ">i8");
/// assert!("f3".parse::<Dtype>().is_err());
/// # Ok::<(), devbuf_core::Error>(())
/// ```
impl FromStr for Dtype {
    type Err = Error;

    fn from_str(s: &str) -> Result<Dtype> {
        let bad = || {
            Error::invalid(format!(
                "unknown dtype {s:?}: expected a numpy name (bool, int8..int64, uint8..uint64, \
                     float16, float32, float64, complex64, complex128) or a type string such as \
                     \"<f4\", \">i8\", \"|b1\", \"c16\""
            ))
        };
        if let Some(t) = ElementType::ALL.iter().find(|t| t.name() == s) {
            return Ok(Dtype::from(*t));
        }
        let mut chars = s.chars();
        let first = chars.next().ok_or_else(bad)?;
        let (endianness, rest) = match first {
            '<' => (Endianness::Little, &s[1..]),
            '>' => (Endianness::Big, &s[1..]),
            '=' | '|' => (Endianness::NATIVE, &s[1..]),
            _ => (Endianness::NATIVE, s),
        };
        if rest == "?" {
            return Ok(Dtype::BOOL);
        }
        let mut rc = rest.chars();
        let kind = rc.next().ok_or_else(bad)?;
        let digits = rc.as_str();
        // Digits only: `usize`'s parser would also take a sign ("f+4").
        if !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let size: usize = digits.parse().map_err(|_| bad())?;
        let element = ElementType::from_code(kind, size).ok_or_else(bad)?;
        Ok(Dtype::new(element, endianness))
    }
}

impl fmt::Display for Dtype {
    /// numpy's `str(dtype)`: the name for native byte order, else the type string.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.endianness == Endianness::NATIVE {
            f.write_str(self.element.name())
        } else {
            let c = match self.endianness {
                Endianness::Little => '<',
                Endianness::Big => '>',
            };
            write!(f, "{c}{}", self.element.code())
        }
    }
}

/// A typed scalar: the value of one element (numpy's `np.generic` scalars).
///
/// Rust values convert into it: `Scalar::from(1.5f32)` is a `float32` scalar, and
/// comparisons follow numpy's rules for numpy scalars of that type (see
/// [`NDBuffer::all_equal`](super::NDBuffer::all_equal)).
///
/// ```
/// use devbuf_core::zarr::Scalar;
/// use devbuf_core::ElementType;
/// let s = Scalar::from(300i64);
/// assert_eq!(s.element_type(), ElementType::Int64);
/// assert_eq!(s.cast(ElementType::UInt8), Scalar::UInt8(44)); // numpy's unsafe cast wraps
/// assert_eq!(Scalar::from(2.75f64).cast(ElementType::Int32), Scalar::Int32(2));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// `bool`.
    Bool(bool),
    /// `int8`.
    Int8(i8),
    /// `int16`.
    Int16(i16),
    /// `int32`.
    Int32(i32),
    /// `int64`.
    Int64(i64),
    /// `uint8`.
    UInt8(u8),
    /// `uint16`.
    UInt16(u16),
    /// `uint32`.
    UInt32(u32),
    /// `uint64`.
    UInt64(u64),
    /// `float16`.
    Float16(f16),
    /// `float32`.
    Float32(f32),
    /// `float64`.
    Float64(f64),
    /// `complex64`.
    Complex64(Complex32),
    /// `complex128`.
    Complex128(Complex64),
}

impl Scalar {
    /// The element type of this value.
    pub fn element_type(&self) -> ElementType {
        use ElementType as E;
        match self {
            Scalar::Bool(_) => E::Bool,
            Scalar::Int8(_) => E::Int8,
            Scalar::Int16(_) => E::Int16,
            Scalar::Int32(_) => E::Int32,
            Scalar::Int64(_) => E::Int64,
            Scalar::UInt8(_) => E::UInt8,
            Scalar::UInt16(_) => E::UInt16,
            Scalar::UInt32(_) => E::UInt32,
            Scalar::UInt64(_) => E::UInt64,
            Scalar::Float16(_) => E::Float16,
            Scalar::Float32(_) => E::Float32,
            Scalar::Float64(_) => E::Float64,
            Scalar::Complex64(_) => E::Complex64,
            Scalar::Complex128(_) => E::Complex128,
        }
    }

    /// The value's little-endian bytes (`element_type().size()` of them).
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match *self {
            Scalar::Bool(v) => vec![v as u8],
            Scalar::Int8(v) => v.to_le_bytes().to_vec(),
            Scalar::Int16(v) => v.to_le_bytes().to_vec(),
            Scalar::Int32(v) => v.to_le_bytes().to_vec(),
            Scalar::Int64(v) => v.to_le_bytes().to_vec(),
            Scalar::UInt8(v) => v.to_le_bytes().to_vec(),
            Scalar::UInt16(v) => v.to_le_bytes().to_vec(),
            Scalar::UInt32(v) => v.to_le_bytes().to_vec(),
            Scalar::UInt64(v) => v.to_le_bytes().to_vec(),
            Scalar::Float16(v) => v.to_le_bytes().to_vec(),
            Scalar::Float32(v) => v.to_le_bytes().to_vec(),
            Scalar::Float64(v) => v.to_le_bytes().to_vec(),
            Scalar::Complex64(v) => [v.re.to_le_bytes(), v.im.to_le_bytes()].concat(),
            Scalar::Complex128(v) => [v.re.to_le_bytes(), v.im.to_le_bytes()].concat(),
        }
    }

    /// Reads a value of type `element` from its little-endian bytes.
    ///
    /// Errors when `bytes` is not exactly `element.size()` long.
    pub fn from_le_bytes(element: ElementType, bytes: &[u8]) -> Result<Scalar> {
        if bytes.len() != element.size() {
            return Err(Error::invalid(format!(
                "a {element} scalar needs exactly {} bytes, got {}",
                element.size(),
                bytes.len()
            )));
        }
        Ok(read_scalar(element, bytes))
    }

    /// The value stored as `dtype` (converted with [`cast`](Self::cast), then in
    /// `dtype`'s byte order).
    pub fn to_bytes_as(&self, dtype: Dtype) -> Vec<u8> {
        let mut b = self.cast(dtype.element()).to_le_bytes();
        if dtype.needs_swap() {
            host_ops::swap_in_place(&mut b, dtype.element().swap_width());
        }
        b
    }

    /// numpy's `astype(..., casting="unsafe")` of this one value, as numpy computes it on
    /// x86-64: integers wrap, floats truncate toward zero into integers (out of range and
    /// NaN as numpy on x86-64), complex to real keeps the real part, anything to bool is
    /// `!= 0`.
    pub fn cast(&self, to: ElementType) -> Scalar {
        let src = self.to_le_bytes();
        let mut dst = vec![0u8; to.size()];
        // Both sides hold exactly one element of their type, so the cast cannot fail.
        let _ = host_ops::cast(&src, self.element_type(), &mut dst, to);
        read_scalar(to, &dst)
    }

    /// True for a float (`float16/32/64`) equal to zero, either sign.
    pub(crate) fn is_float_zero(&self) -> bool {
        match *self {
            Scalar::Float16(v) => v.to_f32() == 0.0,
            Scalar::Float32(v) => v == 0.0,
            Scalar::Float64(v) => v == 0.0,
            _ => false,
        }
    }

    /// True when a part of the value is NaN (numpy's `isnan`; complex: either part).
    pub(crate) fn is_nan(&self) -> bool {
        match *self {
            Scalar::Float16(v) => v.is_nan(),
            Scalar::Float32(v) => v.is_nan(),
            Scalar::Float64(v) => v.is_nan(),
            Scalar::Complex64(v) => v.re.is_nan() || v.im.is_nan(),
            Scalar::Complex128(v) => v.re.is_nan() || v.im.is_nan(),
            _ => false,
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Bool(v) => write!(f, "{}", if *v { "True" } else { "False" }),
            Scalar::Int8(v) => write!(f, "{v}"),
            Scalar::Int16(v) => write!(f, "{v}"),
            Scalar::Int32(v) => write!(f, "{v}"),
            Scalar::Int64(v) => write!(f, "{v}"),
            Scalar::UInt8(v) => write!(f, "{v}"),
            Scalar::UInt16(v) => write!(f, "{v}"),
            Scalar::UInt32(v) => write!(f, "{v}"),
            Scalar::UInt64(v) => write!(f, "{v}"),
            Scalar::Float16(v) => write!(f, "{v}"),
            Scalar::Float32(v) => write!(f, "{v}"),
            Scalar::Float64(v) => write!(f, "{v}"),
            Scalar::Complex64(v) => write!(f, "({}{:+}j)", v.re, v.im),
            Scalar::Complex128(v) => write!(f, "({}{:+}j)", v.re, v.im),
        }
    }
}

macro_rules! scalar_from {
    ($($t:ty => $v:ident),* $(,)?) => {
        $(impl From<$t> for Scalar {
            fn from(v: $t) -> Scalar {
                Scalar::$v(v)
            }
        })*
    };
}
scalar_from!(
    bool => Bool, i8 => Int8, i16 => Int16, i32 => Int32, i64 => Int64,
    u8 => UInt8, u16 => UInt16, u32 => UInt32, u64 => UInt64,
    f16 => Float16, f32 => Float32, f64 => Float64,
    Complex32 => Complex64, Complex64 => Complex128,
);

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that is the value of one element type: `bool`, `i8..i64`, `u8..u64`,
/// [`f16`](struct@f16), `f32`, `f64`, [`Complex32`], [`Complex64`]. Used to move data between
/// `ndarray` arrays and [`NDBuffer`](super::NDBuffer)s. Sealed.
pub trait Element: Copy + Send + Sync + fmt::Debug + 'static + sealed::Sealed {
    /// The element type this Rust type holds.
    const ELEMENT_TYPE: ElementType;
    /// Reads one value from `ELEMENT_TYPE.size()` little-endian bytes.
    fn read_le(bytes: &[u8]) -> Self;
    /// Writes the value as `ELEMENT_TYPE.size()` little-endian bytes.
    fn write_le(self, out: &mut [u8]);
    /// The value as a [`Scalar`].
    fn to_scalar(self) -> Scalar;
}

macro_rules! element_prim {
    ($($t:ty => $v:ident),* $(,)?) => {
        $(
            impl sealed::Sealed for $t {}
            impl Element for $t {
                const ELEMENT_TYPE: ElementType = ElementType::$v;
                fn read_le(bytes: &[u8]) -> Self {
                    let mut a = [0u8; std::mem::size_of::<$t>()];
                    a.copy_from_slice(&bytes[..std::mem::size_of::<$t>()]);
                    <$t>::from_le_bytes(a)
                }
                fn write_le(self, out: &mut [u8]) {
                    out[..std::mem::size_of::<$t>()].copy_from_slice(&self.to_le_bytes());
                }
                fn to_scalar(self) -> Scalar {
                    Scalar::$v(self)
                }
            }
        )*
    };
}
element_prim!(
    i8 => Int8, i16 => Int16, i32 => Int32, i64 => Int64,
    u8 => UInt8, u16 => UInt16, u32 => UInt32, u64 => UInt64,
    f16 => Float16, f32 => Float32, f64 => Float64,
);

impl sealed::Sealed for bool {}
impl Element for bool {
    const ELEMENT_TYPE: ElementType = ElementType::Bool;
    fn read_le(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
    fn write_le(self, out: &mut [u8]) {
        out[0] = self as u8;
    }
    fn to_scalar(self) -> Scalar {
        Scalar::Bool(self)
    }
}

impl sealed::Sealed for Complex32 {}
impl Element for Complex32 {
    const ELEMENT_TYPE: ElementType = ElementType::Complex64;
    fn read_le(bytes: &[u8]) -> Self {
        Complex32::new(f32::read_le(&bytes[..4]), f32::read_le(&bytes[4..8]))
    }
    fn write_le(self, out: &mut [u8]) {
        self.re.write_le(&mut out[..4]);
        self.im.write_le(&mut out[4..8]);
    }
    fn to_scalar(self) -> Scalar {
        Scalar::Complex64(self)
    }
}

impl sealed::Sealed for Complex64 {}
impl Element for Complex64 {
    const ELEMENT_TYPE: ElementType = ElementType::Complex128;
    fn read_le(bytes: &[u8]) -> Self {
        Complex64::new(f64::read_le(&bytes[..8]), f64::read_le(&bytes[8..16]))
    }
    fn write_le(self, out: &mut [u8]) {
        self.re.write_le(&mut out[..8]);
        self.im.write_le(&mut out[8..16]);
    }
    fn to_scalar(self) -> Scalar {
        Scalar::Complex128(self)
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
    use super::*;
    use ElementType as E;

    #[test]
    fn promotion_matches_numpy_table() {
        // A few rows of np.promote_types, checked by hand against numpy 2.
        let cases = [
            (E::Bool, E::Int8, E::Int8),
            (E::Int8, E::UInt8, E::Int16),
            (E::Int16, E::UInt16, E::Int32),
            (E::Int32, E::UInt32, E::Int64),
            (E::Int64, E::UInt64, E::Float64),
            (E::Int16, E::UInt8, E::Int16),
            (E::UInt16, E::Int8, E::Int32),
            (E::Int8, E::Float16, E::Float16),
            (E::UInt8, E::Float16, E::Float16),
            (E::Int16, E::Float16, E::Float32),
            (E::Int32, E::Float16, E::Float64),
            (E::Int32, E::Float32, E::Float64),
            (E::Int64, E::Float32, E::Float64),
            (E::Int8, E::Complex64, E::Complex64),
            (E::Int16, E::Complex64, E::Complex64),
            (E::Int32, E::Complex64, E::Complex128),
            (E::Float16, E::Float32, E::Float32),
            (E::Float32, E::Complex64, E::Complex64),
            (E::Float64, E::Complex64, E::Complex128),
            (E::Complex64, E::Complex128, E::Complex128),
            (E::Bool, E::Bool, E::Bool),
        ];
        for (a, b, want) in cases {
            assert_eq!(promote_types(a, b), want, "{a} + {b}");
            assert_eq!(promote_types(b, a), want, "{b} + {a}");
        }
    }

    #[test]
    fn parse_and_display() {
        for t in ElementType::ALL {
            let n = Dtype::from(t);
            assert_eq!(n.to_string().parse::<Dtype>().unwrap(), n);
            let b = Dtype::new(t, Endianness::Big);
            assert_eq!(b.to_string().parse::<Dtype>().unwrap(), b);
            let l = Dtype::new(t, Endianness::Little);
            assert_eq!(l.to_string().parse::<Dtype>().unwrap(), l);
        }
        assert_eq!("|b1".parse::<Dtype>().unwrap(), Dtype::BOOL);
        assert_eq!("?".parse::<Dtype>().unwrap(), Dtype::BOOL);
        assert_eq!(">i1".parse::<Dtype>().unwrap(), Dtype::INT8);
        assert_eq!(Dtype::new(E::UInt8, Endianness::Big).to_string(), "uint8");
        let e = "f3".parse::<Dtype>().unwrap_err().to_string();
        assert!(e.contains("unknown dtype \"f3\""), "{e}");
        assert!("".parse::<Dtype>().is_err());
        assert!(">".parse::<Dtype>().is_err());
        for bad in ["f+4", "<i-1", "u 2", "c+16", "f٤"] {
            assert!(bad.parse::<Dtype>().is_err(), "{bad}");
        }
    }

    #[test]
    fn scalar_bytes_and_casts() {
        assert_eq!(
            Scalar::from(1.0f32).to_bytes_as(Dtype::new(E::Float32, Endianness::Big)),
            vec![0x3f, 0x80, 0, 0]
        );
        assert_eq!(
            Scalar::from(-0.0f64).cast(E::Float16),
            Scalar::Float16(f16::NEG_ZERO)
        );
        // numpy on x86-64: NaN and out-of-range values become the "integer
        // indefinite" value; 300.0 -> uint8 truncates through a wider integer and wraps.
        assert_eq!(
            Scalar::from(f64::NAN).cast(E::Int32),
            Scalar::Int32(i32::MIN)
        );
        assert_eq!(
            Scalar::from(1e10f64).cast(E::Int32),
            Scalar::Int32(i32::MIN)
        );
        assert_eq!(Scalar::from(300.0f64).cast(E::UInt8), Scalar::UInt8(44));
        assert_eq!(Scalar::from(-1i8).cast(E::UInt64), Scalar::UInt64(u64::MAX));
        assert_eq!(
            Scalar::from(Complex32::new(0.0, 2.0)).cast(E::Bool),
            Scalar::Bool(true)
        );
        assert_eq!(
            Scalar::from(Complex32::new(3.5, 2.0)).cast(E::Float64),
            Scalar::Float64(3.5)
        );
        assert_eq!(
            Scalar::from(true).cast(E::Complex128),
            Scalar::Complex128(Complex64::new(1.0, 0.0))
        );
        let s = Scalar::from(Complex64::new(1.5, -2.0));
        assert_eq!(
            Scalar::from_le_bytes(E::Complex128, &s.to_le_bytes()).unwrap(),
            s
        );
        assert!(Scalar::from_le_bytes(E::Int32, &[1, 2]).is_err());
        assert!(Scalar::from(-0.0f32).is_float_zero());
        assert!(!Scalar::from(0i32).is_float_zero());
        assert_eq!(
            Scalar::from(Complex32::new(1.0, -2.0)).to_string(),
            "(1-2j)"
        );
    }

    #[test]
    fn casts_agree_with_numpy_in_range() {
        // Values numpy 2 gives for astype(casting="unsafe") on x86-64.
        let c = |s: Scalar, t| s.cast(t);
        assert_eq!(c(Scalar::from(1.7f64), E::Int8), Scalar::Int8(1));
        assert_eq!(c(Scalar::from(-1.7f64), E::Int8), Scalar::Int8(-1));
        assert_eq!(
            c(Scalar::from(16_777_217i64), E::Float32),
            Scalar::Float32(16_777_216.0)
        );
        assert_eq!(
            c(Scalar::from(i64::MAX), E::Float32),
            Scalar::Float32(9.223372e18)
        );
        assert_eq!(
            c(Scalar::from(u64::MAX), E::Float16),
            Scalar::Float16(f16::INFINITY)
        );
        assert_eq!(
            c(Scalar::from(65519.99f64), E::Float16),
            Scalar::Float16(f16::MAX)
        );
        assert_eq!(
            c(Scalar::from(2049i32), E::Float16),
            Scalar::Float16(f16::from_f32(2048.0))
        );
        assert_eq!(
            c(Scalar::from(2051i32), E::Float16),
            Scalar::Float16(f16::from_f32(2052.0))
        );
        assert_eq!(c(Scalar::from(-1i32), E::UInt16), Scalar::UInt16(65535));
        assert_eq!(c(Scalar::from(70000u32), E::Int16), Scalar::Int16(4464));
        assert_eq!(c(Scalar::from(f64::NAN), E::Bool), Scalar::Bool(true));
        assert_eq!(c(Scalar::from(-0.0f32), E::Bool), Scalar::Bool(false));
        assert_eq!(
            c(Scalar::from(Complex64::new(3.0, 4.0)), E::Bool),
            Scalar::Bool(true)
        );
        assert_eq!(
            c(Scalar::from(Complex64::new(-2.5, 4.0)), E::Int32),
            Scalar::Int32(-2)
        );
        assert_eq!(c(Scalar::from(1e20f64), E::Float32), Scalar::Float32(1e20));
        assert_eq!(
            c(Scalar::from(0.1f64), E::Float16),
            Scalar::Float16(f16::from_bits(0x2e66))
        );
        assert_eq!(
            c(Scalar::from(f16::from_bits(0x2e66)), E::Float64),
            Scalar::Float64(0.0999755859375)
        );
        assert_eq!(c(Scalar::from(255u8), E::Int8), Scalar::Int8(-1));
        assert_eq!(c(Scalar::from(true), E::Float16), Scalar::Float16(f16::ONE));
        assert_eq!(
            c(Scalar::from(1.5f32), E::Complex128),
            Scalar::Complex128(Complex64::new(1.5, 0.0))
        );
    }
}
