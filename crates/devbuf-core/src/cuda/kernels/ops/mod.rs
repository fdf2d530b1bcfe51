//! Elementwise and layout operations on device memory: fill, cast, strided copy
//! (transpose, C <-> F reorder, strided get/set), byte swap and all-equal, each as a
//! device kernel with no host round trip. Their host twins, with the same semantics,
//! are [`memory::host_ops`](crate::memory::host_ops).
//!
//! Every op validates its arguments first and answers [`Error::InvalidArgument`],
//! [`Error::OutOfBounds`] or [`Error::ReadOnly`] naming the sizes involved; zero-length
//! inputs are no-ops. Each op takes a last argument `on: Option<&Stream>` (the crate's
//! one convention for "on this stream"): with `None` it runs on the legacy default
//! stream and has finished when it returns; with `Some(stream)` it queues the work on
//! that [`Stream`] and returns without waiting (except where a temporary buffer is
//! needed, or the answer is read on the host: see each op).
//!
//! Values are native little-endian scalars of a [`ElementType`]. Buffers need no
//! particular alignment: misaligned data is handled (at some cost) by byte-wise code or
//! through an aligned temporary.
//!
//! ```no_run
//! use devbuf_core::cuda::Context;
//! use devbuf_core::__private::ops::{self, EqualMode, ElementType};
//!
//! let ctx = Context::new(0)?;
//! let a = ctx.allocate(4 * 1024)?;
//! ops::fill(&a, &2.5f32.to_le_bytes(), None)?;                    // 1024 x 2.5f32
//! let b = ctx.allocate(8 * 1024)?;
//! ops::cast(&a, ElementType::Float32, &b, ElementType::Float64, None)?;      // astype(float64)
//! assert!(ops::all_equal(&b, ElementType::Float64, &2.5f64.to_le_bytes(), EqualMode::Bitwise, None)?);
//! // Transpose a 32 x 32 float32 matrix: dst[j, i] = a[i, j].
//! let t = ctx.allocate(4 * 1024)?;
//! ops::strided_copy(&a, 0, &[128, 4], &t, 0, &[4, 128], &[32, 32], 4, None)?;
//! # Ok::<(), devbuf_core::Error>(())
//! ```

mod device;
pub mod layout;

use super::super::{DeviceBuffer, Stream};
pub use crate::element::{ElementType, EqualMode};
use crate::error::{Error, Result};

pub use layout::MAX_DIMS;

// ---------------------------------------------------------------------------------------
// Argument checks shared by the host and device paths

/// Errors unless `len` bytes are a whole number of `size`-byte elements, named as `kind`
/// elements when given; `whose` says whose bytes they are (`"the source's "` or `""`).
fn check_whole(
    op: &str,
    whose: &str,
    len: usize,
    size: usize,
    kind: Option<ElementType>,
) -> Result<()> {
    if len.is_multiple_of(size) {
        return Ok(());
    }
    let elements = match kind {
        Some(k) => format!("{k} elements ({size} bytes)"),
        None => format!("{size}-byte elements"),
    };
    Err(Error::invalid(format!(
        "{op}: {whose}{len} bytes are not a whole number of {elements}"
    )))
}

pub(crate) fn check_pattern(op: &str, len: usize, pattern: &[u8]) -> Result<()> {
    if pattern.is_empty() || pattern.len() > 16 {
        return Err(Error::invalid(format!(
            "{op}: the element pattern has {} bytes; it must have 1 to 16",
            pattern.len()
        )));
    }
    check_whole(op, "", len, pattern.len(), None)
}

pub(crate) fn check_cast(
    src_len: usize,
    src_kind: ElementType,
    dst_len: usize,
    dst_kind: ElementType,
) -> Result<()> {
    check_whole(
        "cast",
        "the source's ",
        src_len,
        src_kind.size(),
        Some(src_kind),
    )?;
    check_whole(
        "cast",
        "the destination's ",
        dst_len,
        dst_kind.size(),
        Some(dst_kind),
    )?;
    let (ns, nd) = (src_len / src_kind.size(), dst_len / dst_kind.size());
    if ns != nd {
        return Err(Error::invalid(format!(
            "cast: the source holds {ns} {src_kind} elements but the destination has room for {nd} {dst_kind} elements"
        )));
    }
    Ok(())
}

pub(crate) fn check_byteswap(len: usize, width: usize) -> Result<()> {
    if !matches!(width, 1 | 2 | 4 | 8) {
        return Err(Error::invalid(format!(
            "byteswap: width {width}; it must be 1, 2, 4 or 8 (swap complex values per component)"
        )));
    }
    check_whole("byteswap", "", len, width, None)
}

pub(crate) fn check_equal(len: usize, kind: ElementType, value: &[u8]) -> Result<()> {
    if value.len() != kind.size() {
        return Err(Error::invalid(format!(
            "all_equal: the value has {} bytes; one {kind} element has {}",
            value.len(),
            kind.size()
        )));
    }
    check_whole("all_equal", "", len, kind.size(), Some(kind))
}

// ---------------------------------------------------------------------------------------
// Device ops

/// Repeats the element `pattern` (1 to 16 bytes, any width) over `dst`, whose length
/// must be a multiple of the pattern's. Done on the device: 16-byte stores of a
/// precomputed vector (widths 1, 2, 4, 8, 16) or of a short cycle of vectors (other
/// widths).
///
/// `on`: `None` runs on the legacy default stream and returns when the fill has
/// finished; `Some(stream)` queues it on `stream` and returns without waiting.
///
/// Errors: [`Error::InvalidArgument`] for a pattern of 0 or more than 16 bytes or a
/// length that is not a multiple of it; [`Error::ReadOnly`] for a read-only buffer.
///
/// ```no_run
/// use devbuf_core::cuda::Context;
/// let ctx = Context::new(0)?;
/// let buf = ctx.allocate(3 * 1000)?;
/// devbuf_core::__private::ops::fill(&buf, &[1, 2, 3], None)?;
/// assert_eq!(&buf.to_vec::<u8>()?[..6], &[1, 2, 3, 1, 2, 3]);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub fn fill(dst: &DeviceBuffer, pattern: &[u8], on: Option<&Stream>) -> Result<()> {
    device::fill(on, dst, pattern)
}

/// Converts every element of `src` (kind `src_kind`) to `dst_kind` into `dst`, on the
/// device: numpy's `astype(dst_kind, casting="unsafe")`. Both buffers must hold the same
/// number of elements.
///
/// `on`: `None` runs on the legacy default stream and returns when the cast has
/// finished; `Some(stream)` queues it on `stream` and returns without waiting, unless a
/// temporary buffer was needed (overlapping or misaligned buffers, or a source in
/// another context), in which case it waits for the stream before freeing it.
///
/// Rules, identical on host ([`memory::host_ops::cast`](crate::memory::host_ops::cast)) and device:
///
/// * bool source: a non-zero byte is 1, zero is 0. bool destination: `x != 0` (NaN is
///   true; a complex value is true when either part is non-zero).
/// * integer -> integer: two's-complement wrap-around (C casts).
/// * integer -> float, float -> float: round to nearest, ties to even, in one step
///   (`f64 -> f16` does not go through `f32`; `i64 -> f32` does not go through `f64`);
///   overflow gives ±inf. f16 values use IEEE binary16 (CUDA's `__half` conversions).
///   NaN payloads are not preserved (the device makes canonical NaNs).
/// * float -> integer: truncation toward zero for values in range. numpy leaves NaN,
///   ±inf and out-of-range values implementation-defined; devbuf gives what numpy gives
///   on x86-64, whose C casts compile to `cvttsd2si`: to `i64`, `i64::MIN`; to `i8`,
///   `i16`, `i32`, `u8`, `u16`, the 32-bit conversion (`i32::MIN` when out of the i32
///   range) wrapped to the width (so `300.0 -> u8` is 44, `-1.0 -> u8` is 255, NaN ->
///   `i8` is 0); to `u32`, the 64-bit conversion wrapped (`-1.0` -> `u32::MAX`); to
///   `u64`, values `>= 2^63` as `x - 2^63` with the top bit set (so `>= 2^64` and +inf
///   give 0), all others through the signed 64-bit conversion (NaN and -inf give 2^63,
///   `-1.0` gives `u64::MAX`).
/// * complex -> real: the real part (numpy's `ComplexWarning` case), then as above.
///   real -> complex: imaginary part +0.
///
/// The same kind on both sides is a plain copy. `src` and `dst` may overlap (the source
/// is then copied first); a `src` in another context is first copied into `dst`'s.
///
/// Errors: [`Error::InvalidArgument`] when a length is not a whole number of elements or
/// the counts differ; [`Error::ReadOnly`] for a read-only `dst`.
///
/// ```no_run
/// use devbuf_core::cuda::{Context, DeviceBuffer};
/// use devbuf_core::__private::ops::{cast, ElementType};
/// let ctx = Context::new(0)?;
/// let src = DeviceBuffer::from_slice(&ctx, &[1.9f32, -1.9, 300.0])?;
/// let dst = ctx.allocate(3)?;
/// cast(&src, ElementType::Float32, &dst, ElementType::UInt8, None)?;
/// assert_eq!(dst.to_vec::<u8>()?, vec![1, 255, 44]);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub fn cast(
    src: &DeviceBuffer,
    src_kind: ElementType,
    dst: &DeviceBuffer,
    dst_kind: ElementType,
    on: Option<&Stream>,
) -> Result<()> {
    device::cast(on, src, src_kind, dst, dst_kind)
}

/// Copies `shape` elements of `elem_size` bytes between two strided layouts, on the
/// device: element `i` (a multi-index) goes from byte `src_offset_bytes + Σ i_k *
/// src_strides_bytes[k]` of `src` to byte `dst_offset_bytes + Σ i_k *
/// dst_strides_bytes[k]` of `dst`.
///
/// `on`: `None` runs on the legacy default stream and returns when the copy has
/// finished; `Some(stream)` queues it on `stream` and returns without waiting, unless a
/// temporary buffer was needed (overlapping source and destination, or a source in
/// another context), in which case it waits for the stream before freeing it.
///
/// This is numpy's `dst_view[...] = src_view` for views given as (offset, strides,
/// shape): strided get and set, transposes of any permutation (permute the source
/// strides), C <-> F reorder, reversal (negative strides) and broadcasting reads
/// (source stride 0). Up to [`MAX_DIMS`] (32) axes; a 0-d copy (empty shape) copies one
/// element; a shape with a zero-length axis copies nothing.
///
/// Every byte touched on either side must lie within its buffer: the extents
/// (`offset + Σ min(0, stride * (n - 1))` to `offset + Σ max(0, stride * (n - 1)) +
/// elem_size`) are checked first, giving [`Error::OutOfBounds`] past the end and
/// [`Error::InvalidArgument`] before the start. A destination stride of 0 on an axis
/// longer than 1 is an error; other self-overlapping destinations leave unspecified
/// results. Overlapping source and destination are fine (the source's extent is copied
/// first). A `src` in another context is first copied into `dst`'s.
///
/// The layout is normalised (unit axes dropped, destination strides made positive,
/// axes ordered by destination stride, contiguous axes merged) and then copied by:
/// one `cuMemcpyDtoD` when contiguous; a run kernel (16-byte accesses, any relative
/// alignment) when the innermost axis is contiguous on both sides; a tiled
/// shared-memory transpose when the destination's and the source's contiguous axes
/// differ; a general index-decoding kernel otherwise.
///
/// ```no_run
/// use devbuf_core::cuda::{Context, DeviceBuffer};
/// use devbuf_core::__private::ops::strided_copy;
/// let ctx = Context::new(0)?;
/// // a 4 x 6 int32 matrix; take a[::2, 1:-1] (2 x 4) into a contiguous buffer.
/// let a = DeviceBuffer::from_slice(&ctx, &(0..24).collect::<Vec<i32>>())?;
/// let out = ctx.allocate(2 * 4 * 4)?;
/// strided_copy(&a, 4, &[2 * 24, 4], &out, 0, &[16, 4], &[2, 4], 4, None)?;
/// assert_eq!(out.to_vec::<i32>()?, vec![1, 2, 3, 4, 13, 14, 15, 16]);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
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
    on: Option<&Stream>,
) -> Result<()> {
    device::strided_copy(
        on,
        src,
        src_offset_bytes,
        src_strides_bytes,
        dst,
        dst_offset_bytes,
        dst_strides_bytes,
        shape,
        elem_size,
    )
}

pub use device::ShuffledBlocks;

/// Undoes a byte shuffle (blosc's, HDF5's shuffle filter): in each block of
/// `blocks.n` elements of `blocks.typesize` bytes, byte `j` of element `i` moves from
/// `j * n + i` in `src` to `i * typesize + j` in `dst`, at the same offsets in both
/// buffers (see [`ShuffledBlocks`]). Type sizes 2, 4, 8 and 16 with `n` a multiple of
/// 16 and 16-byte-aligned blocks run a vector kernel (16 elements per thread, loads and
/// stores of 16 bytes); any other layout runs as a [`strided_copy`].
///
/// `on`: `None` runs on the legacy default stream and waits; `Some(stream)` queues on
/// `stream`.
///
/// Errors: [`Error::InvalidArgument`] when a block lies outside either buffer, blocks
/// overlap each other, the buffers overlap or belong to different contexts, or the
/// stream to another context;
/// [`Error::ReadOnly`] for a read-only destination.
///
/// ```no_run
/// use devbuf_core::cuda::{Context, DeviceBuffer};
/// use devbuf_core::__private::ops::{unshuffle, ShuffledBlocks};
/// let ctx = Context::new(0)?;
/// // Two float32 elements shuffled into 4 planes of 2 bytes.
/// let src = DeviceBuffer::from_slice(&ctx, &[1u8, 5, 2, 6, 3, 7, 4, 8])?;
/// let dst = ctx.allocate(8)?;
/// let b = ShuffledBlocks { offset: 0, groups: 1, ustride: 0, blocks: 1, bstride: 0, n: 2, typesize: 4 };
/// unshuffle(&src, &dst, &b, None)?;
/// assert_eq!(dst.to_vec::<u8>()?, [1, 2, 3, 4, 5, 6, 7, 8]);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub fn unshuffle(
    src: &DeviceBuffer,
    dst: &DeviceBuffer,
    blocks: &ShuffledBlocks,
    on: Option<&Stream>,
) -> Result<()> {
    if device::unshuffle(on, src, dst, blocks)? {
        return Ok(());
    }
    let b = blocks;
    let i = |v: usize| v as isize;
    strided_copy(
        src,
        b.offset,
        &[i(b.ustride), i(b.bstride), 1, i(b.n)],
        dst,
        b.offset,
        &[i(b.ustride), i(b.bstride), i(b.typesize), 1],
        &[b.groups, b.blocks, b.n, b.typesize],
        1,
        on,
    )
}

/// Reverses the bytes of every `width`-byte element of `buf` in place, on the device
/// (`width` 1, 2, 4 or 8; 1 does nothing). For complex values pass the component width
/// ([`swap_width`](crate::__private::swap_width)).
///
/// `on`: `None` runs on the legacy default stream and returns when the swap has
/// finished; `Some(stream)` queues it on `stream` and returns without waiting.
///
/// Errors: [`Error::InvalidArgument`] for another width or a length that is not a
/// multiple of it; [`Error::ReadOnly`] for a read-only buffer.
///
/// ```no_run
/// use devbuf_core::cuda::{Context, DeviceBuffer};
/// let ctx = Context::new(0)?;
/// let buf = DeviceBuffer::from_slice(&ctx, &[0x0102_0304u32])?;
/// devbuf_core::__private::ops::byteswap(&buf, 4, None)?;
/// assert_eq!(buf.to_vec::<u32>()?, vec![0x0403_0201]);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub fn byteswap(buf: &DeviceBuffer, width: usize, on: Option<&Stream>) -> Result<()> {
    device::byteswap(on, buf, width)
}

/// Whether every element of `buf` (kind `kind`) equals `value` (one native element of
/// `kind.size()` bytes) under `mode` — a reduction on the device; nothing of `buf` is
/// copied to the host. An empty buffer is all-equal (as `numpy.array_equal` of empty
/// arrays).
///
/// The kernel stops early once any block has seen a difference, so a buffer that
/// differs near its start answers quickly. See [`EqualMode`] for NaN and signed-zero
/// rules.
///
/// `on`: `None` runs on the legacy default stream; `Some(stream)` runs on `stream`.
/// Either way it waits for the stream before returning (the answer is needed on the
/// host).
///
/// Errors: [`Error::InvalidArgument`] when `value` is not one element or the length is
/// not a whole number of elements.
///
/// ```no_run
/// use devbuf_core::cuda::{Context, DeviceBuffer};
/// use devbuf_core::__private::ops::{all_equal, EqualMode, ElementType};
/// let ctx = Context::new(0)?;
/// let buf = DeviceBuffer::from_slice(&ctx, &[-0.0f64, 0.0])?;
/// let zero = 0.0f64.to_le_bytes();
/// assert!(!all_equal(&buf, ElementType::Float64, &zero, EqualMode::Bitwise, None)?);
/// assert!(all_equal(&buf, ElementType::Float64, &zero, EqualMode::Numeric { equal_nan: false }, None)?);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub fn all_equal(
    buf: &DeviceBuffer,
    kind: ElementType,
    value: &[u8],
    mode: EqualMode,
    on: Option<&Stream>,
) -> Result<bool> {
    device::all_equal(on, buf, kind, value, mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_table_is_consistent() {
        for (i, k) in ElementType::ALL.iter().enumerate() {
            assert_eq!(*k as u32, i as u32);
            assert!(k.size().is_power_of_two() && k.size() <= 16);
            assert_eq!(k.size() % k.swap_width(), 0);
            assert_eq!(k.to_string(), k.name());
        }
    }

    #[test]
    fn checks_name_the_sizes() {
        let e = check_pattern("fill", 10, &[0; 3]).unwrap_err();
        assert!(e.to_string().contains("10 bytes"), "{e}");
        assert!(check_pattern("fill", 10, &[]).is_err());
        assert!(check_pattern("fill", 17, &[0; 17]).is_err());
        let e = check_cast(12, ElementType::Float32, 16, ElementType::Float64).unwrap_err();
        assert!(e.to_string().contains("3 float32"), "{e}");
        let e = check_cast(12, ElementType::Float32, 20, ElementType::Float64).unwrap_err();
        assert!(
            e.to_string().contains(
                "the destination's 20 bytes are not a whole number of float64 elements (8 bytes)"
            ),
            "{e}"
        );
        let e = check_byteswap(6, 4).unwrap_err();
        assert!(
            e.to_string()
                .contains("6 bytes are not a whole number of 4-byte elements"),
            "{e}"
        );
        assert!(check_byteswap(8, 3).is_err());
        assert!(check_byteswap(6, 4).is_err());
        assert!(check_equal(8, ElementType::Float64, &[0; 4]).is_err());
        assert!(check_equal(12, ElementType::Float64, &[0; 8]).is_err());
    }
}
