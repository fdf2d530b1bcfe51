//! Driver calls of the transfer engine: stream-ordered copies between host and device
//! and between contexts (device-to-device within a context: `memcpy_dtod_async` in the
//! parent module, shared with IPC and the kernels), host memory registration and
//! classification, batched copies, and the stream-ordered device memory pool.
//!
//! Same rules as the parent module: thin wrappers named after the driver call, every
//! `CUresult` checked with [`check`], `unsafe` where the driver reads or writes host
//! memory through a raw pointer. Calls that only newer drivers export
//! (`cuMemcpyBatchAsync`, CUDA 12.8+) are looked up with [`has_symbol`] first.

use std::ffi::c_void;
use std::sync::OnceLock;

use cudarc::driver::sys;

use super::{CUdeviceptr, CUstream, check, has_symbol};
use crate::error::{Error, Result};

pub(crate) use sys::CUmemoryPool;

/// Symbols the transfer engine and the device memory pool call on every driver devbuf
/// accepts (all exist since CUDA 11.2). Checked by [`super::init`].
pub(crate) const REQUIRED_SYMBOLS: &[&str] = &[
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyPeerAsync",
    "cuMemHostRegister_v2",
    "cuMemHostUnregister",
    "cuPointerGetAttributes",
    "cuMemPoolCreate",
    "cuMemPoolDestroy",
    "cuMemPoolSetAttribute",
    "cuMemPoolGetAttribute",
    "cuMemPoolTrimTo",
    "cuMemAllocFromPoolAsync",
    "cuMemFreeAsync",
];

// ---------------------------------------------------------------------------
// Stream-ordered copies
// ---------------------------------------------------------------------------

/// Host-to-device copy queued on `stream`.
///
/// From page-locked memory the call returns at once and the DMA reads `src` later; from
/// ordinary memory the driver copies `src` into its own staging memory before returning.
///
/// # Safety
/// `src` must be valid for reads of `n` bytes until the copy has completed on `stream`;
/// `dst..dst+n` must be device memory of the current context.
pub(crate) unsafe fn memcpy_htod_async(
    dst: CUdeviceptr,
    src: *const u8,
    n: usize,
    stream: CUstream,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    // Safety: guaranteed by the caller.
    check(
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), n, stream) },
        "cuMemcpyHtoDAsync_v2",
    )
}

/// Device-to-host copy queued on `stream` (into ordinary memory the driver completes it
/// before returning).
///
/// # Safety
/// `dst` must be valid for writes of `n` bytes, and not otherwise accessed, until the
/// copy has completed on `stream`; `src..src+n` must be device memory.
pub(crate) unsafe fn memcpy_dtoh_async(
    dst: *mut u8,
    src: CUdeviceptr,
    n: usize,
    stream: CUstream,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    // Safety: guaranteed by the caller.
    check(
        unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, n, stream) },
        "cuMemcpyDtoHAsync_v2",
    )
}

/// Copy between two contexts queued on `stream` (a stream of the destination context).
pub(crate) fn memcpy_peer_async(
    dst: CUdeviceptr,
    dst_ctx: super::CUcontext,
    src: CUdeviceptr,
    src_ctx: super::CUcontext,
    n: usize,
    stream: CUstream,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    // Safety: only device memory is accessed; both contexts are live.
    check(
        unsafe { sys::cuMemcpyPeerAsync(dst, dst_ctx, src, src_ctx, n, stream) },
        "cuMemcpyPeerAsync",
    )
}

// ---------------------------------------------------------------------------
// Batched copies (cuMemcpyBatchAsync, CUDA 12.8+)
// ---------------------------------------------------------------------------

/// Which `cuMemcpyBatchAsync` ABI the driver offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BatchAbi {
    /// CUDA 13.0: `cuMemcpyBatchAsync_v2` (no `failIdx` argument).
    V2,
    /// CUDA 12.8/12.9: `cuMemcpyBatchAsync` with a `failIdx` argument.
    V1,
}

fn batch_abi() -> Option<BatchAbi> {
    static ABI: OnceLock<Option<BatchAbi>> = OnceLock::new();
    *ABI.get_or_init(|| {
        let version = super::init().map(|i| i.version).unwrap_or(0);
        if version >= 13000 && has_symbol("cuMemcpyBatchAsync_v2") {
            Some(BatchAbi::V2)
        } else if version >= 12080 && has_symbol("cuMemcpyBatchAsync") {
            Some(BatchAbi::V1)
        } else {
            None
        }
    })
}

/// Whether the driver offers `cuMemcpyBatchAsync` (CUDA 12.8 or newer).
pub(crate) fn memcpy_batch_available() -> bool {
    batch_abi().is_some()
}

/// Queues `dsts.len()` copies on `stream` (not the legacy default stream) in one driver
/// call. Sources are read in stream order. `dsts`, `srcs` and `sizes` have equal lengths
/// (checked). Addresses are unified virtual addresses: device memory of device
/// `ordinal` or page-locked host memory; `host_to_device` says which side is the host
/// (used for the location hints).
///
/// # Safety
/// Every `srcs[i]..+sizes[i]` must be readable and every `dsts[i]..+sizes[i]` writable
/// (device memory or page-locked host memory, valid until the copies complete on
/// `stream`).
pub(crate) unsafe fn memcpy_batch_async(
    dsts: &mut [CUdeviceptr],
    srcs: &mut [CUdeviceptr],
    sizes: &mut [usize],
    host_to_device: bool,
    ordinal: usize,
    stream: CUstream,
) -> Result<()> {
    if dsts.len() != srcs.len() || dsts.len() != sizes.len() {
        return Err(Error::invalid(
            "memcpy_batch_async: dsts, srcs and sizes differ in length",
        ));
    }
    if dsts.is_empty() {
        return Ok(());
    }
    let abi = batch_abi().ok_or_else(|| {
        Error::unavailable("cuMemcpyBatchAsync needs a driver for CUDA 12.8 or newer")
    })?;
    let host = sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
        id: 0,
    };
    let device = sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: i32::try_from(ordinal).map_err(|_| Error::invalid("device ordinal too large"))?,
    };
    let (src_loc, dst_loc) = if host_to_device {
        (host, device)
    } else {
        (device, host)
    };
    let mut attrs = sys::CUmemcpyAttributes {
        srcAccessOrder: sys::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
        srcLocHint: src_loc,
        dstLocHint: dst_loc,
        flags: 0,
    };
    let mut attr_idx: usize = 0;
    match abi {
        BatchAbi::V2 => {
            // Safety: the three arrays hold `len` entries each (checked above); one
            // attribute applies from copy 0 on; the caller guarantees the ranges.
            check(
                unsafe {
                    sys::cuMemcpyBatchAsync_v2(
                        dsts.as_mut_ptr(),
                        srcs.as_mut_ptr(),
                        sizes.as_mut_ptr(),
                        dsts.len(),
                        &mut attrs,
                        &mut attr_idx,
                        1,
                        stream,
                    )
                },
                "cuMemcpyBatchAsync_v2",
            )
        }
        BatchAbi::V1 => {
            // The CUDA 12.8 signature, which cudarc's CUDA 13 bindings do not declare.
            type BatchV1 = unsafe extern "C" fn(
                *mut CUdeviceptr,
                *mut CUdeviceptr,
                *mut usize,
                usize,
                *mut sys::CUmemcpyAttributes,
                *mut usize,
                usize,
                *mut usize,
                CUstream,
            ) -> sys::CUresult;
            // Safety: `batch_abi` found the symbol in the loaded driver (present, so
            // `culib` does not panic), and drivers for CUDA 12.8+ export it with
            // exactly this signature.
            let f = unsafe { sys::culib().get::<BatchV1>(b"cuMemcpyBatchAsync") }.map_err(|e| {
                Error::unavailable(format!("cuMemcpyBatchAsync could not be loaded: {e}"))
            })?;
            let mut fail_idx: usize = usize::MAX;
            // Safety: as for V2, plus a valid out pointer for the failing index.
            check(
                unsafe {
                    (*f)(
                        dsts.as_mut_ptr(),
                        srcs.as_mut_ptr(),
                        sizes.as_mut_ptr(),
                        dsts.len(),
                        &mut attrs,
                        &mut attr_idx,
                        1,
                        &mut fail_idx,
                        stream,
                    )
                },
                "cuMemcpyBatchAsync",
            )
        }
    }
}

// ---------------------------------------------------------------------------
// Host memory: classification and registration
// ---------------------------------------------------------------------------

/// What the driver knows about a host range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostMemoryKind {
    /// Ordinary (pageable) memory the driver does not know.
    Pageable,
    /// Page-locked host memory of one CUDA allocation or registration: DMA reaches it
    /// directly.
    PageLocked,
    /// Memory the driver knows that is not page-locked host memory (managed memory, or a
    /// host mapping of device memory): the driver's own copy handles it.
    OtherCuda,
}

/// What `cuPointerGetAttributes` says about one address (zeros when the driver does not
/// know it).
#[derive(Debug, Clone, Copy, Default)]
struct PointerFacts {
    mem_type: u32,
    buffer_id: u64,
    managed: bool,
    range_start: u64,
    range_size: usize,
}

fn pointer_facts(p: CUdeviceptr) -> Result<PointerFacts> {
    // All five at once; should a driver refuse the range attributes for host memory,
    // ask again without them (the buffer ids then decide).
    match query_pointer(p, 5) {
        Ok(f) => Ok(f),
        Err(_) => query_pointer(p, 3),
    }
}

/// `cuPointerGetAttributes` for the first `count` (3 or 5) attributes of
/// [`PointerFacts`].
fn query_pointer(p: CUdeviceptr, count: usize) -> Result<PointerFacts> {
    use sys::CUpointer_attribute as A;
    let mut mem_type: u32 = 0;
    let mut buffer_id: u64 = 0;
    let mut managed: u32 = 0;
    let mut range_start: u64 = 0;
    let mut range_size: usize = 0;
    let mut attrs = [
        A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        A::CU_POINTER_ATTRIBUTE_BUFFER_ID,
        A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        A::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    ];
    let mut data: [*mut c_void; 5] = [
        (&mut mem_type as *mut u32).cast(),
        (&mut buffer_id as *mut u64).cast(),
        (&mut managed as *mut u32).cast(),
        (&mut range_start as *mut u64).cast(),
        (&mut range_size as *mut usize).cast(),
    ];
    let count = count.min(attrs.len());
    // Safety: each of the first `count` data pointers points at a zeroed value at least
    // as large as its attribute's documented type (unsigned int, unsigned long long,
    // bool, CUdeviceptr, size_t); the plural call writes defaults for pointers the
    // driver does not know instead of failing.
    check(
        unsafe {
            sys::cuPointerGetAttributes(count as u32, attrs.as_mut_ptr(), data.as_mut_ptr(), p)
        },
        "cuPointerGetAttributes",
    )?;
    Ok(PointerFacts {
        mem_type,
        buffer_id,
        managed: managed != 0,
        range_start,
        range_size,
    })
}

/// Classifies the host range `p..p+n`: page-locked only when the driver confirms that
/// the whole range lies in one page-locked allocation or registration (its reported
/// range covers it, or its first and last byte have the same buffer id). Only a cheap
/// query; the memory is not touched. Anything the driver does not know is ordinary.
pub(crate) fn host_memory_kind(p: *const u8, n: usize) -> Result<HostMemoryKind> {
    if n == 0 {
        return Ok(HostMemoryKind::Pageable);
    }
    let first = p as CUdeviceptr;
    let last = first + (n as u64 - 1);
    let f = pointer_facts(first)?;
    if f.mem_type == 0 && !f.managed {
        return Ok(HostMemoryKind::Pageable);
    }
    if f.managed || f.mem_type != sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32 {
        return Ok(HostMemoryKind::OtherCuda);
    }
    if f.range_size > 0
        && f.range_start <= first
        && last < f.range_start.saturating_add(f.range_size as u64)
    {
        return Ok(HostMemoryKind::PageLocked);
    }
    let l = pointer_facts(last)?;
    if l.mem_type == f.mem_type && f.buffer_id != 0 && f.buffer_id == l.buffer_id {
        Ok(HostMemoryKind::PageLocked)
    } else {
        // Straddles the end of a page-locked allocation: treat as ordinary memory (the
        // staging path reads it with the CPU, which is correct for any memory).
        Ok(HostMemoryKind::Pageable)
    }
}

/// Page-locks `p..p+n` for DMA (portable across contexts).
///
/// # Safety
/// `p..p+n` must be mapped host memory that stays mapped until [`mem_host_unregister`]
/// is called with the same `p`.
pub(crate) unsafe fn mem_host_register(p: *mut u8, n: usize) -> Result<()> {
    // Safety: guaranteed by the caller.
    check(
        unsafe { sys::cuMemHostRegister_v2(p.cast(), n, sys::CU_MEMHOSTREGISTER_PORTABLE) },
        "cuMemHostRegister_v2",
    )
}

/// Undoes [`mem_host_register`].
///
/// # Safety
/// `p` must have been registered by [`mem_host_register`] and no copy may still use it.
pub(crate) unsafe fn mem_host_unregister(p: *mut u8) -> Result<()> {
    // Safety: guaranteed by the caller.
    check(
        unsafe { sys::cuMemHostUnregister(p.cast()) },
        "cuMemHostUnregister",
    )
}

// ---------------------------------------------------------------------------
// Stream-ordered device memory pool
// ---------------------------------------------------------------------------

/// Whether device `dev` supports `cuMemAllocAsync` pools.
pub(crate) fn memory_pools_supported(dev: super::CUdevice) -> Result<bool> {
    Ok(super::device_attribute(
        dev,
        super::DeviceAttr::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
    )? != 0)
}

/// Creates a pool of device memory on device `ordinal` (pinned device memory, no IPC
/// handle types: its allocations cannot be exported).
pub(crate) fn mem_pool_create(ordinal: usize) -> Result<CUmemoryPool> {
    // Safety: the props struct is plain data; zero is a valid "unset" value for every
    // field we do not fill in (reserved bytes must be zero).
    let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
    props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
    props.location = sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: i32::try_from(ordinal).map_err(|_| Error::invalid("device ordinal too large"))?,
    };
    let mut pool: CUmemoryPool = std::ptr::null_mut();
    // Safety: valid out pointer and props.
    check(
        unsafe { sys::cuMemPoolCreate(&mut pool, &props) },
        "cuMemPoolCreate",
    )?;
    Ok(pool)
}

/// # Safety
/// `pool` must come from [`mem_pool_create`] and not be used afterwards.
pub(crate) unsafe fn mem_pool_destroy(pool: CUmemoryPool) -> Result<()> {
    // Safety: guaranteed by the caller.
    check(unsafe { sys::cuMemPoolDestroy(pool) }, "cuMemPoolDestroy")
}

pub(crate) use sys::CUmemPool_attribute as PoolAttr;

/// Sets a 64-bit pool attribute (thresholds).
pub(crate) fn mem_pool_set_u64(pool: CUmemoryPool, attr: PoolAttr, value: u64) -> Result<()> {
    let mut v = value;
    // Safety: the attributes set through this function take a cuuint64_t.
    check(
        unsafe { sys::cuMemPoolSetAttribute(pool, attr, (&mut v as *mut u64).cast()) },
        "cuMemPoolSetAttribute",
    )
}

/// Reads a 64-bit pool attribute (sizes and high-water marks).
pub(crate) fn mem_pool_get_u64(pool: CUmemoryPool, attr: PoolAttr) -> Result<u64> {
    let mut v: u64 = 0;
    // Safety: the attributes read through this function are cuuint64_t values.
    check(
        unsafe { sys::cuMemPoolGetAttribute(pool, attr, (&mut v as *mut u64).cast()) },
        "cuMemPoolGetAttribute",
    )?;
    Ok(v)
}

/// Releases cached memory of the pool until at most `keep` bytes stay reserved.
pub(crate) fn mem_pool_trim_to(pool: CUmemoryPool, keep: usize) -> Result<()> {
    // Safety: live pool.
    check(
        unsafe { sys::cuMemPoolTrimTo(pool, keep) },
        "cuMemPoolTrimTo",
    )
}

/// Allocates `n > 0` bytes from `pool`, ordered on `stream`.
pub(crate) fn mem_alloc_from_pool_async(
    n: usize,
    pool: CUmemoryPool,
    stream: CUstream,
) -> Result<CUdeviceptr> {
    let mut p: CUdeviceptr = 0;
    // Safety: valid out pointer; live pool and stream.
    check(
        unsafe { sys::cuMemAllocFromPoolAsync(&mut p, n, pool, stream) },
        "cuMemAllocFromPoolAsync",
    )?;
    Ok(p)
}

/// Returns `p` to its pool, ordered on `stream`.
///
/// # Safety
/// `p` must come from [`mem_alloc_from_pool_async`], and no work queued after this call
/// (in stream order) may use it.
pub(crate) unsafe fn mem_free_async(p: CUdeviceptr, stream: CUstream) -> Result<()> {
    // Safety: guaranteed by the caller.
    check(unsafe { sys::cuMemFreeAsync(p, stream) }, "cuMemFreeAsync")
}
