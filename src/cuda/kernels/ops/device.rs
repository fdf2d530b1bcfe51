//! Device implementations of the ops: parameter structs mirroring the `.cu` sources,
//! kernel selection, launch configuration, temporaries and the reduction scratch pool.

use std::collections::HashMap;
use std::ffi::{CStr, c_void};
use std::sync::{Mutex, OnceLock};

use super::layout::{self, Axis, MAX_DIMS, Plan};
use super::{ElementType, EqualMode};
use crate::cuda::context::Context;
use crate::cuda::driver::{self, CUdeviceptr, CUfunction, CUstream};
use crate::cuda::kernels::{
    BLOCK, BYTESWAP, CAST, EQUAL, FILL, PtxModule, STRIDED, Scratch, function,
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
        if let Some(s) = self.stream {
            if !s.context().same_as(ctx) {
                return Err(Error::invalid(format!(
                    "{op}: the stream belongs to device {} ({:?}), the buffer to device {} ({:?}): use a stream of the buffer's context",
                    s.context().ordinal(),
                    s.context(),
                    ctx.ordinal(),
                    ctx
                )));
            }
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
struct Tables {
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
fn tables(addr: u64, len: usize, pattern: &[u8], mask: &[u8]) -> Tables {
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
    Tables {
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

// ---------------------------------------------------------------------------------------
// cast

const fn cstr(b: &'static [u8]) -> &'static CStr {
    match CStr::from_bytes_with_nul(b) {
        Ok(c) => c,
        Err(_) => panic!("kernel names end with one NUL"),
    }
}

macro_rules! cast_row {
    ($s:literal) => {
        [
            cstr(concat!("devbuf_cast_", $s, "_bool\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_i8\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_i16\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_i32\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_i64\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_u8\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_u16\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_u32\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_u64\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_f16\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_f32\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_f64\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_c64\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_c128\0").as_bytes()),
        ]
    };
}

/// `CAST_NAMES[src as usize][dst as usize]`.
static CAST_NAMES: [[&CStr; 14]; 14] = [
    cast_row!("bool"),
    cast_row!("i8"),
    cast_row!("i16"),
    cast_row!("i32"),
    cast_row!("i64"),
    cast_row!("u8"),
    cast_row!("u16"),
    cast_row!("u32"),
    cast_row!("u64"),
    cast_row!("f16"),
    cast_row!("f32"),
    cast_row!("f64"),
    cast_row!("c64"),
    cast_row!("c128"),
];

/// Name of the kernel casting `s` to `d`.
fn cast_kernel(s: ElementType, d: ElementType) -> &'static CStr {
    CAST_NAMES[s as usize][d as usize]
}

pub(super) fn cast(
    stream: Option<&Stream>,
    src: &DeviceBuffer,
    src_kind: ElementType,
    dst: &DeviceBuffer,
    dst_kind: ElementType,
) -> Result<()> {
    super::check_cast(src.len(), src_kind, dst.len(), dst_kind)?;
    check_writable(dst, "cast")?;
    let n = src.len() / src_kind.size();
    if n == 0 {
        return Ok(());
    }
    let on = On { stream };
    let ctx = dst.context();
    on.check(ctx, "cast")?;
    let staged = in_context(ctx, src)?;
    let mut must_wait = staged.is_some();
    let src = staged.as_ref().unwrap_or(src);

    if src_kind == dst_kind {
        if src.address() != dst.address() {
            if ranges_overlap(
                src.address(),
                src.len() as u64,
                dst.address(),
                dst.len() as u64,
            ) {
                let tmp = ctx.allocate(src.len())?;
                copy_d2d(ctx, on, tmp.address(), src.address(), src.len())?;
                copy_d2d(ctx, on, dst.address(), tmp.address(), src.len())?;
                return on.finish(ctx, true);
            }
            copy_d2d(ctx, on, dst.address(), src.address(), src.len())?;
        }
        return on.finish(ctx, must_wait);
    }

    // The kernels need component-aligned, non-overlapping operands: otherwise go
    // through aligned temporaries (fresh allocations are 256-byte aligned).
    let mut src_tmp = None;
    if src.address() % src_kind.swap_width() as u64 != 0
        || ranges_overlap(
            src.address(),
            src.len() as u64,
            dst.address(),
            dst.len() as u64,
        )
    {
        let tmp = ctx.allocate(src.len())?;
        copy_d2d(ctx, on, tmp.address(), src.address(), src.len())?;
        src_tmp = Some(tmp);
        must_wait = true;
    }
    let src_addr = src_tmp.as_ref().map_or(src.address(), |t| t.address());
    let dst_tmp = if dst.address() % dst_kind.swap_width() as u64 != 0 {
        must_wait = true;
        Some(ctx.allocate(dst.len())?)
    } else {
        None
    };
    let dst_addr = dst_tmp.as_ref().map_or(dst.address(), |t| t.address());

    let mut ps = src_addr;
    let mut pd = dst_addr;
    let mut pn = n as u64;
    let mut params: [*mut c_void; 3] = [
        (&mut ps as *mut u64).cast(),
        (&mut pd as *mut u64).cast(),
        (&mut pn as *mut u64).cast(),
    ];
    let chunk = 16 / src_kind.size().min(dst_kind.size()) as u64;
    // Safety: the parameters match `devbuf_cast_<s>_<d>(const u8*, u8*, u64)`; the
    // source holds `n` elements of `src_kind` and the destination `n` of `dst_kind`
    // (checked), both aligned to their components and not overlapping (staged above).
    unsafe {
        launch(
            ctx,
            on,
            &CAST,
            cast_kernel(src_kind, dst_kind),
            blocks_for((n as u64).div_ceil(chunk * 2)),
            &mut params,
        )?
    };
    if dst_tmp.is_some() {
        copy_d2d(ctx, on, dst.address(), dst_addr, dst.len())?;
    }
    on.finish(ctx, must_wait)
}

// ---------------------------------------------------------------------------------------
// strided_copy

#[allow(clippy::too_many_arguments)]
pub(super) fn strided_copy(
    stream: Option<&Stream>,
    src: &DeviceBuffer,
    src_offset: usize,
    src_strides: &[isize],
    dst: &DeviceBuffer,
    dst_offset: usize,
    dst_strides: &[isize],
    shape: &[usize],
    elem_size: usize,
) -> Result<()> {
    let Some(mut plan) = layout::plan(
        src.len(),
        src_offset,
        src_strides,
        dst.len(),
        dst_offset,
        dst_strides,
        shape,
        elem_size,
    )?
    else {
        check_writable(dst, "strided_copy")?;
        return Ok(());
    };
    check_writable(dst, "strided_copy")?;
    let on = On { stream };
    let ctx = dst.context();
    on.check(ctx, "strided_copy")?;

    // The source's extent, in this context and not overlapping the destination's.
    let mut must_wait = false;
    let mut src_addr = src.address();
    let mut src_tmp = None;
    let (lo, hi) = (plan.src_lo, plan.src_hi);
    if !src.context().same_as(ctx) {
        let piece = src.slice(lo as usize, (hi - lo) as usize)?;
        let tmp = in_context(ctx, &piece)?;
        if let Some(t) = tmp {
            plan.rebase_src(0);
            src_addr = t.address();
            src_tmp = Some(t);
            must_wait = true;
        }
    } else if ranges_overlap(
        src_addr + lo,
        hi - lo,
        dst.address() + plan.dst_lo,
        plan.dst_hi - plan.dst_lo,
    ) {
        let tmp = ctx.allocate((hi - lo) as usize)?;
        copy_d2d(ctx, on, tmp.address(), src_addr + lo, (hi - lo) as usize)?;
        plan.rebase_src(0);
        src_addr = tmp.address();
        src_tmp = Some(tmp);
        must_wait = true;
    }
    let dst_addr = dst.address();

    // Accesses of `unit` bytes must be aligned: shrink the unit until they are.
    let mut bits = (src_addr + plan.src_base) | (dst_addr + plan.dst_base);
    for a in plan.axes() {
        bits |= a.s.unsigned_abs() | a.d.unsigned_abs();
    }
    let mut unit = plan.unit;
    while unit > 1 && bits % unit as u64 != 0 {
        unit /= 2;
    }
    plan.split_unit(unit);

    // Safety (all launches below): the parameter structs mirror the kernels'; every
    // address the kernels form is `base + Σ i_k * stride_k` for an index within `shape`,
    // which lies within the validated extents of `src` (or its staged copy) and `dst`.
    // The run kernel also reads whole aligned 16-byte vectors of the source: up to 15
    // bytes before a run (in the same aligned vector as its first byte, so within the
    // allocation, whose start is at least 16-byte aligned; the values are discarded),
    // never past a run's end (the last vector's bytes are read one by one there).
    run_plan(ctx, on, &plan, src_addr, dst_addr)?;
    drop(src_tmp);
    on.finish(ctx, must_wait)
}

/// Copies a normalised plan (addresses of the two buffers' first bytes).
fn run_plan(ctx: &Context, on: On<'_>, plan: &Plan, src_addr: u64, dst_addr: u64) -> Result<()> {
    let unit = plan.unit as i64;
    let src = src_addr + plan.src_base;
    let dst = dst_addr + plan.dst_base;
    let axes = plan.axes();
    if axes.len() > MAX_DIMS {
        return Err(Error::invalid(format!(
            "strided_copy: the layout needs {} axes after splitting elements into aligned units; at most {MAX_DIMS} are supported",
            axes.len()
        )));
    }
    if plan.is_contiguous() {
        let bytes = plan.count() as usize * plan.unit;
        return copy_d2d(ctx, on, dst, src, bytes);
    }
    let last = axes[axes.len() - 1];

    // Runs: innermost axis contiguous on both sides.
    if last.s == unit && last.d == unit && last.n * unit as u64 >= MIN_RUN_BYTES {
        let outer = &axes[..axes.len() - 1];
        let run_bytes = last.n * unit as u64;
        let segs = (run_bytes / 16).div_ceil(RUN_SEG_VECS).max(1);
        let nruns: u64 = outer.iter().map(|a| a.n).product();
        let mut p = RunsParams {
            src,
            dst,
            run_bytes,
            nruns,
            segs_per_run: segs,
            ndim: outer.len() as u32,
            reserved: 0,
            shape: [0; MAX_DIMS - 1],
            sstride: [0; MAX_DIMS - 1],
            dstride: [0; MAX_DIMS - 1],
        };
        fill_axes(outer, &mut p.shape, &mut p.sstride, &mut p.dstride);
        // Segments are counted in 32 bits: at least 512 bytes each, 2^32 of them would
        // be 2 TiB; anything larger goes to the general kernel below.
        let warps = nruns * segs;
        if warps <= u32::MAX as u64 {
            // Safety: see strided_copy.
            return unsafe {
                launch_struct(
                    ctx,
                    on,
                    &STRIDED,
                    c"devbuf_strided_runs",
                    warps.div_ceil(BLOCK as u64 / 32),
                    &mut p,
                )
            };
        }
    }

    // Transpose: the destination's contiguous axis is not the source's.
    if last.d == unit && last.s.unsigned_abs() != unit as u64 && last.n >= MIN_TRANSPOSE {
        let b = axes[..axes.len() - 1]
            .iter()
            .position(|a| a.s.unsigned_abs() == unit as u64 && a.n >= MIN_TRANSPOSE);
        if let Some(b) = b {
            let ab = axes[b];
            let batch: Vec<Axis> = axes[..axes.len() - 1]
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != b)
                .map(|(_, a)| *a)
                .collect();
            let tiles_a = last.n.div_ceil(TILE);
            let tiles_b = ab.n.div_ceil(TILE);
            let nbatch: u64 = batch.iter().map(|a| a.n).product();
            let mut p = TransposeParams {
                src,
                dst,
                na: last.n,
                nb: ab.n,
                sa: last.s,
                sb: ab.s,
                da: last.d,
                db: ab.d,
                tiles_a,
                tiles_b,
                ntiles: tiles_a * tiles_b * nbatch,
                ndim: batch.len() as u32,
                reserved: 0,
                shape: [0; MAX_DIMS - 2],
                sstride: [0; MAX_DIMS - 2],
                dstride: [0; MAX_DIMS - 2],
            };
            fill_axes(&batch, &mut p.shape, &mut p.sstride, &mut p.dstride);
            let name = match plan.unit {
                1 => c"devbuf_strided_transpose_1",
                2 => c"devbuf_strided_transpose_2",
                4 => c"devbuf_strided_transpose_4",
                8 => c"devbuf_strided_transpose_8",
                _ => c"devbuf_strided_transpose_16",
            };
            let ntiles = p.ntiles;
            // Safety: see strided_copy.
            return unsafe { launch_struct(ctx, on, &STRIDED, name, ntiles, &mut p) };
        }
    }

    // General.
    let count = plan.count();
    let mut p = GeneralParams {
        src,
        dst,
        count,
        ndim: axes.len() as u32,
        reserved: 0,
        shape: [0; MAX_DIMS],
        sstride: [0; MAX_DIMS],
        dstride: [0; MAX_DIMS],
    };
    fill_axes(axes, &mut p.shape, &mut p.sstride, &mut p.dstride);
    let small = count < (1u64 << 31);
    let name = match (plan.unit, small) {
        (1, true) => c"devbuf_strided_general_1_32",
        (1, false) => c"devbuf_strided_general_1_64",
        (2, true) => c"devbuf_strided_general_2_32",
        (2, false) => c"devbuf_strided_general_2_64",
        (4, true) => c"devbuf_strided_general_4_32",
        (4, false) => c"devbuf_strided_general_4_64",
        (8, true) => c"devbuf_strided_general_8_32",
        (8, false) => c"devbuf_strided_general_8_64",
        (_, true) => c"devbuf_strided_general_16_32",
        (_, false) => c"devbuf_strided_general_16_64",
    };
    // Safety: see strided_copy.
    unsafe {
        launch_struct(
            ctx,
            on,
            &STRIDED,
            name,
            blocks_for(count.div_ceil(4)),
            &mut p,
        )
    }
}

fn fill_axes(axes: &[Axis], shape: &mut [u64], s: &mut [i64], d: &mut [i64]) {
    for (i, a) in axes.iter().enumerate() {
        shape[i] = a.n;
        s[i] = a.s;
        d[i] = a.d;
    }
}

// ---------------------------------------------------------------------------------------
// all_equal

/// How a device all_equal is answered.
enum EqualPlan {
    /// Every byte, masked, equals the repeating pattern.
    Pattern { pattern: Vec<u8>, mask: Vec<u8> },
    /// Every element satisfies a predicate (mode of `devbuf_equal_pred`).
    Pred { mode: u32, elem: usize },
    /// The answer without looking (a NaN value without `equal_nan`).
    Known(bool),
}

const PRED_NONZERO_BYTES: u32 = 0;

/// Sign-bit mask of one float component of `size` bytes (little-endian).
fn no_sign(size: usize) -> Vec<u8> {
    let mut m = vec![0xff; size];
    m[size - 1] = 0x7f;
    m
}

/// +0.0 or -0.0.
fn is_zero(x: f64) -> bool {
    x == 0.0
}

fn equal_plan(kind: ElementType, value: &[u8], mode: EqualMode) -> EqualPlan {
    let ones = || vec![0xff; value.len()];
    let equal_nan = match mode {
        EqualMode::Bitwise => {
            return EqualPlan::Pattern {
                pattern: value.to_vec(),
                mask: ones(),
            };
        }
        EqualMode::Numeric { equal_nan } => equal_nan,
    };
    let nan_mode = match kind {
        ElementType::Float16 => 1,
        ElementType::Float32 => 2,
        ElementType::Float64 => 3,
        ElementType::Complex64 => 4,
        ElementType::Complex128 => 5,
        _ => 0,
    };
    match decode(kind, value) {
        Val::I(v) if kind == ElementType::Bool => {
            if v == 0 {
                EqualPlan::Pattern {
                    pattern: vec![0],
                    mask: vec![0xff],
                }
            } else {
                EqualPlan::Pred {
                    mode: PRED_NONZERO_BYTES,
                    elem: 1,
                }
            }
        }
        Val::F(v) if v.is_nan() => {
            if equal_nan {
                EqualPlan::Pred {
                    mode: nan_mode,
                    elem: kind.size(),
                }
            } else {
                EqualPlan::Known(false)
            }
        }
        Val::F(v) if is_zero(v) => EqualPlan::Pattern {
            pattern: vec![0; kind.size()],
            mask: no_sign(kind.size()),
        },
        Val::C(re, im) if re.is_nan() || im.is_nan() => {
            if equal_nan {
                EqualPlan::Pred {
                    mode: nan_mode,
                    elem: kind.size(),
                }
            } else {
                EqualPlan::Known(false)
            }
        }
        Val::C(re, im) => {
            // Per component: zero of either sign by masking the sign off, otherwise the
            // exact bits (a non-zero, non-NaN float has one encoding).
            let c = kind.swap_width();
            let mut pattern = value.to_vec();
            let mut mask = ones();
            for (k, part) in [re, im].into_iter().enumerate() {
                if is_zero(part) {
                    pattern[k * c..(k + 1) * c].fill(0);
                    mask[k * c..(k + 1) * c].copy_from_slice(&no_sign(c));
                }
            }
            EqualPlan::Pattern { pattern, mask }
        }
        // Integers; non-zero floats.
        _ => EqualPlan::Pattern {
            pattern: value.to_vec(),
            mask: ones(),
        },
    }
}

/// A scratch of `ctx`'s pool, returned on success (dropped with the context otherwise).
fn take_scratch(ctx: &Context) -> Result<Scratch> {
    let cache = &ctx.inner.kernels;
    if let Some(s) = cache.take_scratch() {
        return Ok(s);
    }
    ctx.bind()?;
    let device = driver::mem_alloc(8)?;
    let host = match driver::mem_host_alloc(4) {
        Ok(h) => h,
        Err(e) => {
            // Safety: allocated just above, not shared.
            let _ = unsafe { driver::mem_free(device) };
            return Err(e);
        }
    };
    let host_device = match driver::host_get_device_pointer(host) {
        Ok(d) => d,
        Err(e) => {
            // Safety: both allocated just above, not shared.
            unsafe {
                let _ = driver::mem_free(device);
                let _ = driver::mem_free_host(host);
            }
            return Err(e);
        }
    };
    let s = Scratch {
        device,
        epoch: 0,
        host: host.cast(),
        host_device,
    };
    // Registered first, so both allocations are freed with the context from now on.
    cache.register_scratch(s);
    driver::memset_d8(device, 0, 8)?;
    driver::stream_synchronize(std::ptr::null_mut())?;
    Ok(s)
}

pub(super) fn all_equal(
    stream: Option<&Stream>,
    buf: &DeviceBuffer,
    kind: ElementType,
    value: &[u8],
    mode: EqualMode,
) -> Result<bool> {
    super::check_equal(buf.len(), kind, value)?;
    if buf.is_empty() {
        return Ok(true);
    }
    let on = On { stream };
    let ctx = buf.context();
    on.check(ctx, "all_equal")?;
    let plan = equal_plan(kind, value, mode);
    if let EqualPlan::Known(answer) = plan {
        return Ok(answer);
    }
    let mut scratch = take_scratch(ctx)?;
    // A new mark for this launch, never 0 (the flag's initial value). When the marks
    // wrap around, clear the flag so that a mark from 2^32 launches ago cannot match.
    if scratch.epoch == u32::MAX {
        ctx.bind()?;
        driver::memset_d8(scratch.device, 0, 4)?;
        driver::stream_synchronize(std::ptr::null_mut())?;
        scratch.epoch = 0;
    }
    scratch.epoch += 1;
    // Safety: the scratch's result word is page-locked host memory owned by the pool and
    // used by this thread only until it is returned.
    unsafe { std::ptr::write_volatile(scratch.host, u32::MAX) };
    let mut staged = None;
    match plan {
        EqualPlan::Pattern { pattern, mask } => {
            let t = tables(buf.address(), buf.len(), &pattern, &mask);
            let mut p = EqualParams {
                base: t.base,
                nvec: t.nvec,
                start: t.start,
                end: t.end,
                period: t.period,
                epoch: scratch.epoch,
                scratch: scratch.device,
                result: scratch.host_device,
                table: t.table,
                mask: t.mask,
            };
            // Element sizes divide 16, so every whole vector is the same (period 1).
            debug_assert_eq!(t.period, 1);
            // Safety: `EqualParams` mirrors the kernel's parameter; it reads only the
            // buffer's bytes (whole vectors within it, partial ones byte by byte) and
            // writes the scratch's device words and its mapped result word, both owned
            // by this call until the scratch is returned.
            unsafe {
                launch_struct(
                    ctx,
                    on,
                    &EQUAL,
                    c"devbuf_equal_pattern",
                    blocks_for(t.nvec / 4),
                    &mut p,
                )?
            };
        }
        EqualPlan::Pred { mode, elem } => {
            let mut first = buf.address();
            if first % elem as u64 != 0 {
                let tmp = ctx.allocate(buf.len())?;
                copy_d2d(ctx, on, tmp.address(), first, buf.len())?;
                first = tmp.address();
                staged = Some(tmp);
            }
            let mut p = PredParams {
                first,
                nbytes: buf.len() as u64,
                mode,
                elem: elem as u32,
                scratch: scratch.device,
                result: scratch.host_device,
                epoch: scratch.epoch,
                reserved: 0,
            };
            // Safety: `PredParams` mirrors the kernel's parameter; `first` is aligned to
            // the element size and holds `nbytes` bytes, a whole number of elements,
            // read exactly (vectors in between, elements one by one at both ends); the
            // kernel writes the scratch words as above.
            unsafe {
                launch_struct(
                    ctx,
                    on,
                    &EQUAL,
                    c"devbuf_equal_pred",
                    blocks_for(buf.len() as u64 / 64),
                    &mut p,
                )?
            };
        }
        EqualPlan::Known(_) => unreachable!("answered above"),
    }
    on.finish(ctx, true)?;
    drop(staged);
    // Safety: as above; the kernel has completed (stream synchronised), so its write to
    // the mapped word is visible.
    let r = unsafe { std::ptr::read_volatile(scratch.host) };
    match r {
        0 | 1 => {
            ctx.inner.kernels.put_scratch(scratch);
            Ok(r == 1)
        }
        other => Err(Error::invalid(format!(
            "all_equal: the reduction kernel reported {other:#x} instead of 0 or 1"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes the tables say vector k holds.
    fn vector(t: &Tables, k: u64) -> [u8; 16] {
        let p = (k % t.period as u64) as usize;
        std::array::from_fn(|j| t.table[4 * p + j / 4].to_le_bytes()[j % 4])
    }

    #[test]
    fn pattern_tables_reproduce_the_fill() {
        for w in 1..=16usize {
            let pattern: Vec<u8> = (0..w as u8).map(|i| 0x10 + i).collect();
            for addr in [0x1000u64, 0x1003, 0x100f, 0x1011] {
                for count in [1usize, 2, 3, 7, 16, 33] {
                    let len = w * count;
                    let t = tables(addr, len, &pattern, &vec![0xff; w]);
                    assert!(t.period >= 1 && t.period <= 16);
                    assert_eq!(t.base % 16, 0);
                    assert_eq!(t.base + t.start as u64, addr);
                    assert_eq!(t.base + 16 * (t.nvec - 1) + t.end as u64, addr + len as u64);
                    for i in 0..len as u64 {
                        let a = addr + i;
                        let k = (a - t.base) / 16;
                        let j = ((a - t.base) % 16) as usize;
                        assert_eq!(
                            vector(&t, k)[j],
                            pattern[i as usize % w],
                            "w {w} addr {addr:#x} count {count} byte {i}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn equal_plans() {
        let f32z = 0.0f32.to_le_bytes();
        let num = EqualMode::Numeric { equal_nan: false };
        match equal_plan(ElementType::Float32, &f32z, num) {
            EqualPlan::Pattern { pattern, mask } => {
                assert_eq!(pattern, [0; 4]);
                assert_eq!(mask, [0xff, 0xff, 0xff, 0x7f]);
            }
            _ => panic!("zero compares masked"),
        }
        assert!(matches!(
            equal_plan(ElementType::Float32, &f32z, EqualMode::Bitwise),
            EqualPlan::Pattern { ref mask, .. } if mask == &[0xff; 4]
        ));
        let nan = f64::NAN.to_le_bytes();
        assert!(matches!(
            equal_plan(ElementType::Float64, &nan, num),
            EqualPlan::Known(false)
        ));
        assert!(matches!(
            equal_plan(
                ElementType::Float64,
                &nan,
                EqualMode::Numeric { equal_nan: true }
            ),
            EqualPlan::Pred { mode: 3, elem: 8 }
        ));
        assert!(matches!(
            equal_plan(ElementType::Bool, &[1], num),
            EqualPlan::Pred { mode: 0, elem: 1 }
        ));
        let c: Vec<u8> = [(-0.0f32).to_le_bytes(), 2.0f32.to_le_bytes()].concat();
        match equal_plan(ElementType::Complex64, &c, num) {
            EqualPlan::Pattern { pattern, mask } => {
                assert_eq!(&pattern[..4], &[0; 4]);
                assert_eq!(&pattern[4..], &2.0f32.to_le_bytes());
                assert_eq!(mask, [0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0xff]);
            }
            _ => panic!("complex compares masked"),
        }
    }

    #[test]
    fn every_cast_has_a_kernel_name() {
        for s in ElementType::ALL {
            for d in ElementType::ALL {
                let name = cast_kernel(s, d).to_str().unwrap();
                assert_eq!(name, format!("devbuf_cast_{}_{}", s.short(), d.short()));
            }
        }
    }
}
