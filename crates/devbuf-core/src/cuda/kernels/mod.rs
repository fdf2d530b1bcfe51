//! Device kernels and their loader.
//!
//! The CUDA C sources live beside this file (`*.cu`); `scripts/build-kernels.sh` turns
//! each into PTX under `ptx/`, which is compiled into the crate and JIT-compiled by the
//! driver on first use in each context (no CUDA toolkit needed at run time). Modules are
//! loaded lazily, once per context, and cached with their functions.
//!
//! [`ops`] holds the operations (fill, cast, strided copy, byte swap, all-equal) that
//! devbuf-zarr and devbuf-flight reach through `devbuf_core::__private::ops`; users call
//! them as `NDBuffer` methods.

use std::collections::HashMap;
use std::ffi::{CStr, c_void};
use std::sync::Mutex;

use super::DeviceBuffer;
use super::context::Context;
use super::driver::{self, CUcontext, CUdeviceptr, CUfunction, CUmodule};
use crate::error::{Error, Result};

pub(crate) mod bits;
pub(crate) mod crc32;
pub(crate) mod ops;

/// A PTX module compiled into the crate.
pub(crate) struct PtxModule {
    /// Module name (the `.cu` file's stem).
    pub name: &'static str,
    /// NUL-terminated PTX text.
    pub ptx: &'static str,
}

/// Byte comparison (`compare.cu`).
pub(crate) static COMPARE: PtxModule = PtxModule {
    name: "compare",
    ptx: concat!(include_str!("ptx/compare.ptx"), "\0"),
};

/// Segment copies of the transfer engine (`scatter.cu`).
pub(crate) static SCATTER: PtxModule = PtxModule {
    name: "scatter",
    ptx: concat!(include_str!("ptx/scatter.ptx"), "\0"),
};

/// Fill with a repeating pattern (`fill.cu`).
pub(crate) static FILL: PtxModule = PtxModule {
    name: "fill",
    ptx: concat!(include_str!("ptx/fill.ptx"), "\0"),
};

/// all_equal reductions (`equal.cu`).
pub(crate) static EQUAL: PtxModule = PtxModule {
    name: "equal",
    ptx: concat!(include_str!("ptx/equal.ptx"), "\0"),
};

/// Elementwise casts between scalar kinds (`cast.cu`).
pub(crate) static CAST: PtxModule = PtxModule {
    name: "cast",
    ptx: concat!(include_str!("ptx/cast.ptx"), "\0"),
};

/// Strided copies and transposes (`strided.cu`).
pub(crate) static STRIDED: PtxModule = PtxModule {
    name: "strided",
    ptx: concat!(include_str!("ptx/strided.ptx"), "\0"),
};

/// blosc's byte shuffle undone (`shuffle.cu`).
pub(crate) static SHUFFLE: PtxModule = PtxModule {
    name: "shuffle",
    ptx: concat!(include_str!("ptx/shuffle.ptx"), "\0"),
};

/// In-place byte swaps (`byteswap.cu`).
pub(crate) static BYTESWAP: PtxModule = PtxModule {
    name: "byteswap",
    ptx: concat!(include_str!("ptx/byteswap.ptx"), "\0"),
};

/// The PTX sources shipped with the crate, by module name (for tests and tooling).
#[cfg(feature = "test-support")]
pub fn shipped_ptx() -> Vec<(&'static str, &'static str)> {
    [
        &COMPARE,
        &SCATTER,
        &bits::BITS,
        &crc32::CRC32,
        &FILL,
        &EQUAL,
        &CAST,
        &STRIDED,
        &BYTESWAP,
        &SHUFFLE,
    ]
    .iter()
    .map(|m| (m.name, m.ptx.trim_end_matches('\0')))
    .collect()
}

/// Scratch words of a device reduction: 8 bytes of device memory (a flag, and a counter
/// that is zero between launches: the kernel resets it) and a page-locked,
/// device-mapped result word.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scratch {
    /// Device address of `{ u32 flag; u32 counter; }`.
    pub device: CUdeviceptr,
    /// The mark of the last launch that used these words (the flag holds a launch's
    /// mark when it saw a difference).
    pub epoch: u32,
    /// Host address of the result word.
    pub host: *mut u32,
    /// Device address of the same result word.
    pub host_device: CUdeviceptr,
}

// Safety: the pointers are plain addresses of memory owned by the context's cache; they
// are only dereferenced by the thread that took the scratch out of the pool.
unsafe impl Send for Scratch {}

/// Loaded modules and looked-up functions of one context.
#[derive(Default)]
pub(crate) struct KernelCache {
    modules: Mutex<HashMap<&'static str, CUmodule>>,
    functions: Mutex<HashMap<(&'static str, &'static CStr), CUfunction>>,
    /// Every scratch allocated in this context, and those not in use now.
    scratch_all: Mutex<Vec<Scratch>>,
    scratch_free: Mutex<Vec<Scratch>>,
}

impl KernelCache {
    /// Takes a free scratch out of the pool.
    pub(crate) fn take_scratch(&self) -> Option<Scratch> {
        self.scratch_free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
    }

    /// Returns a scratch taken with [`take_scratch`](Self::take_scratch) (only when its
    /// device words are known to be zero again).
    pub(crate) fn put_scratch(&self, s: Scratch) {
        self.scratch_free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(s);
    }

    /// Records a newly allocated scratch, freed with the context.
    pub(crate) fn register_scratch(&self, s: Scratch) {
        self.scratch_all
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(s);
    }

    /// Unloads every module and frees the scratch words (when the context goes away).
    pub(crate) fn unload(&self, ctx: CUcontext) {
        let scratch =
            std::mem::take(&mut *self.scratch_all.lock().unwrap_or_else(|p| p.into_inner()));
        self.scratch_free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        let mut modules = self.modules.lock().unwrap_or_else(|p| p.into_inner());
        if modules.is_empty() && scratch.is_empty() {
            return;
        }
        if driver::ctx_set_current(ctx).is_ok() {
            for s in scratch {
                // Safety: both allocations were made for this scratch in this context and
                // the context's last owner is gone, so no kernel uses them any more.
                unsafe {
                    let _ = driver::mem_free(s.device);
                    let _ = driver::mem_free_host(s.host.cast());
                }
            }
            for (_, m) in modules.drain() {
                // Safety: the module was loaded in this context and no function of it is
                // used after the context's last owner is gone.
                let _ = unsafe { driver::module_unload(m) };
            }
        }
    }
}

/// Looks up (loading the module on first use) a kernel function in `ctx`.
pub(crate) fn function(
    ctx: &Context,
    module: &'static PtxModule,
    name: &'static CStr,
) -> Result<CUfunction> {
    let cache = &ctx.inner.kernels;
    {
        let fns = cache.functions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = fns.get(&(module.name, name)) {
            return Ok(*f);
        }
    }
    let loaded = cache
        .modules
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(module.name)
        .copied();
    let m = match loaded {
        Some(m) => m,
        None => {
            // Loaded without holding the cache's lock: module loads synchronise the
            // device, and a stream held by another thread must not stall every other
            // kernel lookup behind this one.
            ctx.bind()?;
            let m = driver::module_load_data(module.ptx.as_bytes()).map_err(|e| {
                let version = driver::init().map(|i| i.version).unwrap_or(0);
                if version < 13000 {
                    Error::unavailable(format!(
                        "devbuf's kernels (PTX ISA 9.0) need a driver for CUDA 13.0 or newer; \
                         this driver supports CUDA {}.{} ({e})",
                        version / 1000,
                        (version % 1000) / 10
                    ))
                } else {
                    e
                }
            })?;
            let mut modules = cache.modules.lock().unwrap_or_else(|p| p.into_inner());
            match modules.get(module.name) {
                // Another thread loaded it meanwhile: keep theirs, drop ours.
                Some(&theirs) => {
                    drop(modules);
                    // Safety: `m` was loaded just above and no function of it was looked up.
                    let _ = unsafe { driver::module_unload(m) };
                    theirs
                }
                None => {
                    modules.insert(module.name, m);
                    m
                }
            }
        }
    };
    let f = driver::module_get_function(m, name)?;
    cache
        .functions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert((module.name, name), f);
    Ok(f)
}

/// Threads per block for the memory-bound kernels.
pub(crate) const BLOCK: u32 = 256;

/// A grid that covers `work` items with [`BLOCK`] threads each, capped at a few waves
/// of the device's multiprocessors (the kernels use grid-stride loops).
pub(crate) fn grid_for(ctx: &Context, work: u64) -> u32 {
    let sms = ctx.properties().multiprocessor_count.max(1) as u64;
    let blocks = work.div_ceil(BLOCK as u64).max(1);
    blocks.min(sms * 8).min(u32::MAX as u64) as u32
}

/// Whether `a` and `b` (same length, both in `a`'s context) hold the same bytes.
pub(crate) fn bytes_equal(a: &DeviceBuffer, b: &DeviceBuffer) -> Result<bool> {
    let ctx = a.context();
    if a.len() != b.len() || !ctx.same_as(b.context()) {
        return Err(Error::invalid(format!(
            "bytes_equal: needs two buffers of one length in one context (got {} and {} bytes)",
            a.len(),
            b.len()
        )));
    }
    let (a, b, n) = (a.address(), b.address(), a.len());
    let f = function(ctx, &COMPARE, c"devbuf_bytes_equal")?;
    let flag = ctx.allocate(4)?;
    ctx.bind()?;
    driver::memset_d8(flag.address(), 0, 4)?;
    let mut pa = a;
    let mut pb = b;
    let mut pn = n as u64;
    let mut pf = flag.address();
    let mut params: [*mut c_void; 4] = [
        (&mut pa as *mut CUdeviceptr).cast(),
        (&mut pb as *mut CUdeviceptr).cast(),
        (&mut pn as *mut u64).cast(),
        (&mut pf as *mut CUdeviceptr).cast(),
    ];
    let work = (n as u64).div_ceil(16);
    // Safety: the parameters match `devbuf_bytes_equal(const u8*, const u8*, u64, u32*)`;
    // `a` and `b` are whole device buffers of `n` bytes in this context (checked above)
    // `a` and `b` are valid for `n` bytes (checked by the callers) and `flag` holds 4.
    unsafe {
        driver::launch_kernel(
            f,
            (grid_for(ctx, work), 1, 1),
            (BLOCK, 1, 1),
            0,
            std::ptr::null_mut(),
            &mut params,
        )?
    };
    let mut out = [0u8; 4];
    flag.copy_to_host(0, &mut out)?;
    Ok(u32::from_ne_bytes(out) == 0)
}

/// One entry of `devbuf_copy_segments`' table: copy `len` bytes from `src` to `dst`
/// (device addresses). Layout matches `struct Segment` in `scatter.cu`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Segment {
    pub dst: u64,
    pub src: u64,
    pub len: u64,
}

/// Looks up `devbuf_copy_segments` in `ctx` (loading `scatter.ptx` on first use).
pub(crate) fn copy_segments_function(ctx: &Context) -> Result<CUfunction> {
    function(ctx, &SCATTER, c"devbuf_copy_segments")
}

/// Queues `devbuf_copy_segments(table, count)` on `stream` with `blocks` blocks.
///
/// # Safety
/// `f` must be `devbuf_copy_segments` of the current context; `table` must be device
/// memory holding `count` [`Segment`]s whose ranges are valid device memory, do not
/// overlap each other, and stay valid until the kernel completes on `stream`.
pub(crate) unsafe fn launch_copy_segments(
    f: CUfunction,
    table: CUdeviceptr,
    count: u32,
    blocks: u32,
    stream: driver::CUstream,
) -> Result<()> {
    if count == 0 {
        return Ok(());
    }
    let mut pt = table;
    let mut pc = count;
    let mut params: [*mut c_void; 2] = [
        (&mut pt as *mut CUdeviceptr).cast(),
        (&mut pc as *mut u32).cast(),
    ];
    // Safety: the parameters match `devbuf_copy_segments(const Segment*, u32)`; the
    // caller guarantees the table and its ranges.
    unsafe {
        driver::launch_kernel(
            f,
            (blocks.clamp(1, count), 1, 1),
            (BLOCK, 1, 1),
            0,
            stream,
            &mut params,
        )
    }
}
