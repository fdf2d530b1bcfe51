//! Boolean bytes <-> bit-packed bitmaps on the device (`bits.cu`).
//!
//! The bitmap layout is Arrow's: bit `i` is bit `i % 8` (least significant first) of
//! byte `i / 8`. Both launches run on the legacy default stream and wait for it, so the
//! result is complete (and any launch error reported) when they return.

use std::ffi::c_void;

use super::{BLOCK, PtxModule, function, grid_for};
use crate::cuda::DeviceBuffer;
use crate::cuda::driver::{self, CUdeviceptr};
use crate::error::{Error, Result};

/// Bit packing and unpacking (`bits.cu`).
pub(crate) static BITS: PtxModule = PtxModule {
    name: "bits",
    ptx: concat!(include_str!("ptx/bits.ptx"), "\0"),
};

/// Bytes the packing kernel writes for `n` booleans: whole 32-bit words.
pub(crate) fn packed_words_bytes(n: usize) -> usize {
    n.div_ceil(32) * 4
}

/// Packs the `src.len()` booleans of `src` (one byte each, non-zero is true) into the
/// bitmap at the start of `dst`. `dst` must be 4-byte aligned and hold
/// [`packed_words_bytes`]`(src.len())` bytes (the bits past `src.len()` are written as
/// zero); both buffers must belong to the same context.
pub(crate) fn pack_bits(src: &DeviceBuffer, dst: &DeviceBuffer) -> Result<()> {
    let n = src.len();
    if n == 0 {
        return Ok(());
    }
    same_context(src, dst, "pack_bits")?;
    let need = packed_words_bytes(n);
    if dst.len() < need {
        return Err(Error::invalid(format!(
            "pack_bits: the destination holds {} bytes, packing {n} booleans writes {need}",
            dst.len()
        )));
    }
    if !dst.address().is_multiple_of(4) {
        return Err(Error::invalid(format!(
            "pack_bits: the destination address {:#x} is not 4-byte aligned",
            dst.address()
        )));
    }
    if !dst.is_mutable() {
        return Err(Error::ReadOnly(
            "pack_bits into a read-only device buffer".into(),
        ));
    }
    let ctx = src.context();
    let f = function(ctx, &BITS, c"devbuf_pack_bits")?;
    let mut p_src: CUdeviceptr = src.address();
    let mut p_n = n as u64;
    let mut p_dst: CUdeviceptr = dst.address();
    let mut params: [*mut c_void; 3] = [
        (&mut p_src as *mut CUdeviceptr).cast(),
        (&mut p_n as *mut u64).cast(),
        (&mut p_dst as *mut CUdeviceptr).cast(),
    ];
    let threads = (n as u64).div_ceil(32) * 32;
    ctx.bind()?;
    // Safety: the parameters match `devbuf_pack_bits(const u8*, u64, u32*)`; `src` is
    // valid for `n` bytes, `dst` for ceil(n/32) aligned words (checked above); BLOCK is
    // a multiple of 32 as the kernel's ballot requires.
    unsafe {
        driver::launch_kernel(
            f,
            (grid_for(ctx, threads), 1, 1),
            (BLOCK, 1, 1),
            0,
            std::ptr::null_mut(),
            &mut params,
        )?
    };
    driver::stream_synchronize(std::ptr::null_mut())
}

/// Writes booleans `bit_offset .. bit_offset + dst.len()` of the bitmap `src` into `dst`,
/// one byte (0 or 1) each. Both buffers must belong to the same context.
pub(crate) fn unpack_bits(src: &DeviceBuffer, bit_offset: usize, dst: &DeviceBuffer) -> Result<()> {
    let n = dst.len();
    if n == 0 {
        return Ok(());
    }
    same_context(src, dst, "unpack_bits")?;
    let end_bit = bit_offset
        .checked_add(n)
        .ok_or_else(|| Error::invalid("unpack_bits: bit range overflows"))?;
    if src.len() < end_bit.div_ceil(8) {
        return Err(Error::invalid(format!(
            "unpack_bits: bits {bit_offset}..{end_bit} lie past the bitmap of {} bytes",
            src.len()
        )));
    }
    if !dst.is_mutable() {
        return Err(Error::ReadOnly(
            "unpack_bits into a read-only device buffer".into(),
        ));
    }
    let ctx = src.context();
    let f = function(ctx, &BITS, c"devbuf_unpack_bits")?;
    let mut p_src: CUdeviceptr = src.address();
    let mut p_off = bit_offset as u64;
    let mut p_n = n as u64;
    let mut p_dst: CUdeviceptr = dst.address();
    let mut params: [*mut c_void; 4] = [
        (&mut p_src as *mut CUdeviceptr).cast(),
        (&mut p_off as *mut u64).cast(),
        (&mut p_n as *mut u64).cast(),
        (&mut p_dst as *mut CUdeviceptr).cast(),
    ];
    ctx.bind()?;
    // Safety: the parameters match `devbuf_unpack_bits(const u8*, u64, u64, u8*)`; the
    // kernel reads bytes of `src` below ceil(end_bit / 8) and writes `n` bytes of `dst`
    // (both checked above).
    unsafe {
        driver::launch_kernel(
            f,
            (grid_for(ctx, n as u64), 1, 1),
            (BLOCK, 1, 1),
            0,
            std::ptr::null_mut(),
            &mut params,
        )?
    };
    driver::stream_synchronize(std::ptr::null_mut())
}

fn same_context(a: &DeviceBuffer, b: &DeviceBuffer, op: &str) -> Result<()> {
    if a.context().same_as(b.context()) {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{op}: source and destination belong to different contexts (devices {} and {})",
            a.context().ordinal(),
            b.context().ordinal()
        )))
    }
}
