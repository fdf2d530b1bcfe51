// PLACEHOLDER for branch issue-kernels: replaced by the real device kernels at merge.
//
// Same signatures and semantics as the device kernels, computed by a host round trip
// (device -> host, `zarr::host_ops`, host -> device) so that the zarr layer and its
// GPU tests build and run before the kernels land. The contract the kernels must meet
// is documented in `src/zarr/host_ops.rs`.

//! Element-wise device operations used by the zarr buffer layer (see the contract in
//! the zarr layer's host implementation).

use crate::cuda::DeviceBuffer;
use crate::error::Result;
use crate::zarr::ElementType;
use crate::zarr::host_ops;

/// Element types of the device operations (little-endian values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum ScalarKind {
    Bool,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F16,
    F32,
    F64,
    C64,
    C128,
}

impl ScalarKind {
    /// Size of one element in bytes.
    pub fn size(&self) -> usize {
        element(*self).size()
    }
}

/// How [`all_equal`] compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EqualMode {
    /// Byte-for-byte.
    Bitwise,
    /// By value (numpy's `array_equal` rules).
    Numeric {
        /// NaN equals NaN.
        equal_nan: bool,
    },
}

fn element(k: ScalarKind) -> ElementType {
    use ElementType as E;
    match k {
        ScalarKind::Bool => E::Bool,
        ScalarKind::I8 => E::Int8,
        ScalarKind::I16 => E::Int16,
        ScalarKind::I32 => E::Int32,
        ScalarKind::I64 => E::Int64,
        ScalarKind::U8 => E::UInt8,
        ScalarKind::U16 => E::UInt16,
        ScalarKind::U32 => E::UInt32,
        ScalarKind::U64 => E::UInt64,
        ScalarKind::F16 => E::Float16,
        ScalarKind::F32 => E::Float32,
        ScalarKind::F64 => E::Float64,
        ScalarKind::C64 => E::Complex64,
        ScalarKind::C128 => E::Complex128,
    }
}

/// Fills `dst` with repetitions of a 1..=16-byte element `pattern`.
pub fn fill(dst: &DeviceBuffer, pattern: &[u8]) -> Result<()> {
    let mut h = vec![0u8; dst.len()];
    host_ops::fill(&mut h, pattern)?;
    dst.copy_from_host(0, &h)
}

/// Casts `src` (elements of `src_kind`) into `dst` (elements of `dst_kind`).
pub fn cast(
    src: &DeviceBuffer,
    src_kind: ScalarKind,
    dst: &DeviceBuffer,
    dst_kind: ScalarKind,
) -> Result<()> {
    let s = src.to_host_vec()?;
    let mut d = vec![0u8; dst.len()];
    host_ops::cast(&s, element(src_kind), &mut d, element(dst_kind))?;
    dst.copy_from_host(0, &d)
}

/// Copies an n-d view of `src` into an n-d view of `dst` (byte offsets and strides).
#[allow(clippy::too_many_arguments)]
pub fn strided_copy(
    src: &DeviceBuffer,
    src_offset_bytes: usize,
    src_strides_bytes: &[isize],
    dst: &DeviceBuffer,
    dst_offset_bytes: usize,
    dst_strides_bytes: &[isize],
    shape: &[usize],
    elem_size: usize,
) -> Result<()> {
    let s = src.to_host_vec()?;
    let mut d = dst.to_host_vec()?;
    host_ops::strided_copy(
        &s,
        src_offset_bytes,
        src_strides_bytes,
        &mut d,
        dst_offset_bytes,
        dst_strides_bytes,
        shape,
        elem_size,
    )?;
    dst.copy_from_host(0, &d)
}

/// Reverses the bytes of every `width`-byte unit of `buf`, in place.
pub fn byteswap(buf: &DeviceBuffer, width: usize) -> Result<()> {
    let mut h = buf.to_host_vec()?;
    host_ops::byteswap(&mut h, width)?;
    buf.copy_from_host(0, &h)
}

/// Whether every element of `buf` equals `value` (one element of `kind`).
pub fn all_equal(
    buf: &DeviceBuffer,
    kind: ScalarKind,
    value: &[u8],
    mode: EqualMode,
) -> Result<bool> {
    let h = buf.to_host_vec()?;
    let mode = match mode {
        EqualMode::Bitwise => host_ops::EqualMode::Bitwise,
        EqualMode::Numeric { equal_nan } => host_ops::EqualMode::Numeric { equal_nan },
    };
    host_ops::all_equal(&h, element(kind), value, mode)
}
