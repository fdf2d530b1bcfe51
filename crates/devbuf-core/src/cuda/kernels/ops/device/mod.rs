//! Device implementations of the ops: parameter structs mirroring the `.cu` sources,
//! kernel selection, launch configuration, temporaries and the reduction scratch pool.
//!
//! This file: parameter structs, launching, pattern tables, fill and byteswap.
//! `cast.rs`, `strided.rs`, `equal.rs`: the other ops.

mod cast;
mod equal;
mod shuffle;
mod strided;
#[cfg(test)]
mod tests;

pub(super) use cast::cast;
pub(super) use equal::all_equal;
pub use shuffle::ShuffledBlocks;
pub(super) use shuffle::unshuffle;
pub(super) use strided::strided_copy;
#[allow(unused_imports)]
use {cast::*, equal::*, strided::*};

use std::collections::HashMap;
use std::ffi::{CStr, c_void};
use std::sync::{Mutex, OnceLock};

use super::layout::{self, Axis, MAX_DIMS, StridedCopyPlan};
use super::{ElementType, EqualMode};
use crate::cuda::context::Context;
use crate::cuda::driver::{self, CUdeviceptr, CUfunction, CUstream};
use crate::cuda::kernels::{
    BLOCK, BYTESWAP, CAST, EQUAL, FILL, PtxModule, SHUFFLE, STRIDED, Scratch, function,
};
use crate::cuda::{DeviceBuffer, Stream};
use crate::element::{Val, decode};
use crate::error::{Error, Result};

// ---------------------------------------------------------------------------------------
// Parameter structs (layouts asserted on both sides)

/// Declares a kernel parameter struct (`#[repr(C)]`, passed by value) and asserts at
/// compile time its size and every field's offset; the `.cu` source asserts the same
/// numbers (`static_assert` with `offsetof`), so a field moved on one side only fails to
/// build.
macro_rules! kernel_params {
    ($name:ident, size $size:literal { $($f:ident: $t:ty = $off:literal),+ $(,)? }) => {
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct $name {
            $($f: $t),+
        }
        const _: () = {
            assert!(std::mem::size_of::<$name>() == $size);
            $(assert!(std::mem::offset_of!($name, $f) == $off);)+
        };
    };
}

kernel_params!(FillParams, size 288 {
    base: u64 = 0,
    nvec: u64 = 8,
    start: u32 = 16,
    end: u32 = 20,
    period: u32 = 24,
    reserved: u32 = 28,
    table: [u32; 64] = 32,
});

kernel_params!(UnshuffleParams, size 56 {
    src: u64 = 0,
    dst: u64 = 8,
    groups: u64 = 16,
    ustride: u64 = 24,
    blocks: u64 = 32,
    bstride: u64 = 40,
    n: u64 = 48,
});

kernel_params!(EqualParams, size 560 {
    base: u64 = 0,
    nvec: u64 = 8,
    start: u32 = 16,
    end: u32 = 20,
    period: u32 = 24,
    epoch: u32 = 28,
    scratch: u64 = 32,
    result: u64 = 40,
    table: [u32; 64] = 48,
    mask: [u32; 64] = 304,
});

kernel_params!(PredParams, size 48 {
    first: u64 = 0,
    nbytes: u64 = 8,
    mode: u32 = 16,
    elem: u32 = 20,
    scratch: u64 = 24,
    result: u64 = 32,
    epoch: u32 = 40,
    reserved: u32 = 44,
});

kernel_params!(GeneralParams, size 800 {
    src: u64 = 0,
    dst: u64 = 8,
    count: u64 = 16,
    ndim: u32 = 24,
    reserved: u32 = 28,
    shape: [u64; MAX_DIMS] = 32,
    sstride: [i64; MAX_DIMS] = 288,
    dstride: [i64; MAX_DIMS] = 544,
});

kernel_params!(RunsParams, size 792 {
    src: u64 = 0,
    dst: u64 = 8,
    run_bytes: u64 = 16,
    nruns: u64 = 24,
    segs_per_run: u64 = 32,
    ndim: u32 = 40,
    reserved: u32 = 44,
    shape: [u64; MAX_DIMS - 1] = 48,
    sstride: [i64; MAX_DIMS - 1] = 296,
    dstride: [i64; MAX_DIMS - 1] = 544,
});

kernel_params!(TransposeParams, size 816 {
    src: u64 = 0,
    dst: u64 = 8,
    na: u64 = 16,
    nb: u64 = 24,
    sa: i64 = 32,
    sb: i64 = 40,
    da: i64 = 48,
    db: i64 = 56,
    tiles_a: u64 = 64,
    tiles_b: u64 = 72,
    ntiles: u64 = 80,
    ndim: u32 = 88,
    reserved: u32 = 92,
    shape: [u64; MAX_DIMS - 2] = 96,
    sstride: [i64; MAX_DIMS - 2] = 336,
    dstride: [i64; MAX_DIMS - 2] = 576,
});

/// 16-byte vectors per warp segment of the run kernel (`RUN_SEG_VECS` in strided.cu).
const RUN_SEG_VECS: u64 = 128;
/// Shortest run (bytes) copied by the run kernel; shorter runs go element by element.
const MIN_RUN_BYTES: u64 = 512;
/// Transpose tile edge (`TILE` in strided.cu).
const TILE: u64 = 32;
/// Smallest length of both transposed axes for the tiled kernel.
const MIN_TRANSPOSE: u64 = 16;

// ---------------------------------------------------------------------------------------
// Launching

/// The stream an op runs on: the caller's, or the legacy default stream.
#[derive(Clone, Copy)]
struct On<'a> {
    stream: Option<&'a Stream>,
}

impl On<'_> {
    fn raw(&self) -> CUstream {
        self.stream.map_or(std::ptr::null_mut(), |s| s.raw())
    }

    /// Checks that the stream belongs to `ctx`.
    fn check(&self, ctx: &Context, op: &str) -> Result<()> {
        if let Some(s) = self.stream
            && !s.context().same_as(ctx)
        {
            return Err(Error::invalid(format!(
                "{op}: the stream belongs to device {} ({:?}), the buffer to device {} ({:?}): use a stream of the buffer's context",
                s.context().ordinal(),
                s.context(),
                ctx.ordinal(),
                ctx
            )));
        }
        Ok(())
    }

    /// Ends an op: the synchronous variant (or one that made temporaries) waits.
    fn finish(&self, ctx: &Context, must_wait: bool) -> Result<()> {
        if self.stream.is_none() || must_wait {
            ctx.bind()?;
            driver::stream_synchronize(self.raw())?;
        }
        Ok(())
    }
}

/// Blocks of `BLOCK` threads of `f` resident on the whole device at once (cached).
fn resident_blocks(ctx: &Context, name: &'static CStr, f: CUfunction) -> Result<u64> {
    static CACHE: OnceLock<Mutex<HashMap<(u64, usize), u64>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let key = (ctx.inner.id, name.as_ptr() as usize);
    if let Some(&n) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(n);
    }
    let per_sm = driver::occupancy_max_active_blocks(f, BLOCK, 0)?.max(1) as u64;
    let sms = ctx.properties().multiprocessor_count.max(1) as u64;
    let n = per_sm * sms;
    cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, n);
    Ok(n)
}

/// Launches `name` of `module` with `BLOCK` threads per block and enough blocks for
/// `blocks_wanted` (at most one full wave: the kernels loop over the rest).
///
/// # Safety
/// `params` must match the kernel's parameter list exactly (one pointer per parameter,
/// each to a value of the parameter's type), and the memory the kernel touches for those
/// parameters must be valid device memory of `ctx`.
unsafe fn launch(
    ctx: &Context,
    on: On<'_>,
    module: &'static PtxModule,
    name: &'static CStr,
    blocks_wanted: u64,
    params: &mut [*mut c_void],
) -> Result<()> {
    let f = function(ctx, module, name)?;
    let grid = blocks_wanted
        .clamp(1, resident_blocks(ctx, name, f)?)
        .min(i32::MAX as u64) as u32;
    ctx.bind()?;
    // Safety: guaranteed by the caller.
    unsafe { driver::launch_kernel(f, (grid, 1, 1), (BLOCK, 1, 1), 0, on.raw(), params) }
}

/// Launches a kernel whose only parameter is the struct `p`.
///
/// # Safety
/// As [`launch`]: `P` must be the kernel's parameter struct.
unsafe fn launch_struct<P>(
    ctx: &Context,
    on: On<'_>,
    module: &'static PtxModule,
    name: &'static CStr,
    blocks_wanted: u64,
    p: &mut P,
) -> Result<()> {
    let mut params: [*mut c_void; 1] = [(p as *mut P).cast()];
    // Safety: guaranteed by the caller.
    unsafe { launch(ctx, on, module, name, blocks_wanted, &mut params) }
}

fn blocks_for(items: u64) -> u64 {
    items.div_ceil(BLOCK as u64).max(1)
}

/// A device-to-device copy of `n` bytes on the op's stream.
fn copy_d2d(ctx: &Context, on: On<'_>, dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> Result<()> {
    ctx.bind()?;
    driver::memcpy_dtod_async(dst, src, n, on.raw())
}

/// `src` as a buffer of `ctx`: itself, or (for another context) a copy made in `ctx`,
/// complete when this returns.
fn in_context(ctx: &Context, src: &DeviceBuffer) -> Result<Option<DeviceBuffer>> {
    if src.context().same_as(ctx) {
        return Ok(None);
    }
    let tmp = ctx.allocate(src.len())?;
    tmp.copy_from_device(0, src)?;
    ctx.synchronize()?;
    Ok(Some(tmp))
}

fn check_writable(buf: &DeviceBuffer, op: &str) -> Result<()> {
    if buf.is_mutable() {
        Ok(())
    } else {
        Err(Error::ReadOnly(format!(
            "{op} on a read-only device buffer of {} bytes",
            buf.len()
        )))
    }
}

fn ranges_overlap(a: u64, a_len: u64, b: u64, b_len: u64) -> bool {
    a_len > 0 && b_len > 0 && a < b + b_len && b < a + a_len
}

// ---------------------------------------------------------------------------------------
// Pattern tables (fill, all_equal)

/// The 16-byte-vector view of `len` bytes at `addr` filled with a repeating pattern.
struct PatternVectors {
    base: u64,
    nvec: u64,
    start: u32,
    end: u32,
    period: u32,
    table: [u32; 64],
    mask: [u32; 64],
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// `pattern` and `mask` have the same length, 1 to 16; `len > 0` is a multiple of it.
fn tables(addr: u64, len: usize, pattern: &[u8], mask: &[u8]) -> PatternVectors {
    let w = pattern.len();
    let base = addr & !15;
    let start = (addr - base) as u32;
    let end_addr = addr + len as u64;
    let nvec = (end_addr - base).div_ceil(16);
    let end = (end_addr - (base + 16 * (nvec - 1))) as u32;
    let period = w / gcd(w, 16);
    let mut tb = [0u8; 256];
    let mut mb = [0u8; 256];
    for p in 0..period {
        for j in 0..16 {
            // Byte j of vector p sits this far from the first byte of the range.
            let off = (16 * p + j) as i64 - start as i64;
            let phase = off.rem_euclid(w as i64) as usize;
            tb[16 * p + j] = pattern[phase];
            mb[16 * p + j] = mask[phase];
        }
    }
    let words = |b: &[u8; 256]| {
        let mut out = [0u32; 64];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
        }
        out
    };
    PatternVectors {
        base,
        nvec,
        start,
        end,
        period: period as u32,
        table: words(&tb),
        mask: words(&mb),
    }
}

// ---------------------------------------------------------------------------------------
// fill

pub(super) fn fill(stream: Option<&Stream>, dst: &DeviceBuffer, pattern: &[u8]) -> Result<()> {
    super::check_pattern("fill", dst.len(), pattern)?;
    check_writable(dst, "fill")?;
    if dst.is_empty() {
        return Ok(());
    }
    let on = On { stream };
    let ctx = dst.context();
    on.check(ctx, "fill")?;
    let t = tables(
        dst.address(),
        dst.len(),
        pattern,
        &[0xff; 16][..pattern.len()],
    );
    let mut p = FillParams {
        base: t.base,
        nvec: t.nvec,
        start: t.start,
        end: t.end,
        period: t.period,
        reserved: 0,
        table: t.table,
    };
    let name = if t.period == 1 {
        c"devbuf_fill_single"
    } else {
        c"devbuf_fill_periodic"
    };
    // Safety: `FillParams` mirrors the kernels' parameter; the vectors from `base` cover
    // exactly the buffer's bytes, and only bytes within the buffer are written (the
    // partial vectors at the ends byte by byte).
    unsafe { launch_struct(ctx, on, &FILL, name, blocks_for(t.nvec / 4), &mut p)? };
    on.finish(ctx, false)
}

// ---------------------------------------------------------------------------------------
// byteswap

pub(super) fn byteswap(stream: Option<&Stream>, buf: &DeviceBuffer, width: usize) -> Result<()> {
    super::check_byteswap(buf.len(), width)?;
    check_writable(buf, "byteswap")?;
    if buf.is_empty() || width == 1 {
        return Ok(());
    }
    let on = On { stream };
    let ctx = buf.context();
    on.check(ctx, "byteswap")?;
    let name = match width {
        2 => c"devbuf_byteswap2",
        4 => c"devbuf_byteswap4",
        _ => c"devbuf_byteswap8",
    };
    let mut first = buf.address();
    let mut n = buf.len() as u64;
    let mut params: [*mut c_void; 2] =
        [(&mut first as *mut u64).cast(), (&mut n as *mut u64).cast()];
    // Safety: the parameters match `devbuf_byteswapN(u8*, u64)`; the buffer holds `n`
    // bytes, a multiple of the width (checked).
    unsafe {
        launch(
            ctx,
            on,
            &BYTESWAP,
            name,
            blocks_for(n.div_ceil(64)),
            &mut params,
        )?
    };
    on.finish(ctx, false)
}
