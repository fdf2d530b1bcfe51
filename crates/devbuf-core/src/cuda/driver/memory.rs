//! Driver calls for memory: device and page-locked host allocations, synchronous
//! copies, memset, pointer attributes.

use super::*;

/// `cuMemAlloc` in the current context. `n` must be > 0.
pub(crate) fn mem_alloc(n: usize) -> Result<CUdeviceptr> {
    let mut p: CUdeviceptr = 0;
    // Safety: valid out pointer.
    check(unsafe { sys::cuMemAlloc_v2(&mut p, n) }, "cuMemAlloc_v2")?;
    Ok(p)
}

/// # Safety
/// `p` must come from [`mem_alloc`] and not be used afterwards.
pub(crate) unsafe fn mem_free(p: CUdeviceptr) -> Result<()> {
    // Safety: guaranteed by the caller.
    check(unsafe { sys::cuMemFree_v2(p) }, "cuMemFree_v2")
}

/// Page-locked, portable, device-mapped host memory. `n` must be > 0.
pub(crate) fn mem_host_alloc(n: usize) -> Result<*mut u8> {
    let mut p: *mut c_void = std::ptr::null_mut();
    let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
    // Safety: valid out pointer.
    check(
        unsafe { sys::cuMemHostAlloc(&mut p, n, flags) },
        "cuMemHostAlloc",
    )?;
    if p.is_null() {
        return Err(Error::invalid("cuMemHostAlloc returned a null pointer"));
    }
    Ok(p.cast())
}

/// # Safety
/// `p` must come from [`mem_host_alloc`] and not be used afterwards.
pub(crate) unsafe fn mem_free_host(p: *mut u8) -> Result<()> {
    // Safety: guaranteed by the caller.
    check(unsafe { sys::cuMemFreeHost(p.cast()) }, "cuMemFreeHost")
}

pub(crate) fn host_get_device_pointer(p: *mut u8) -> Result<CUdeviceptr> {
    let mut d: CUdeviceptr = 0;
    // Safety: valid out pointer; `p` is page-locked memory from cuMemHostAlloc.
    check(
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, p.cast(), 0) },
        "cuMemHostGetDevicePointer_v2",
    )?;
    Ok(d)
}

/// # Safety
/// `src` must be valid for reads of `n` bytes; `dst..dst+n` must be device memory.
pub(crate) unsafe fn memcpy_htod(dst: CUdeviceptr, src: *const u8, n: usize) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    // Safety: guaranteed by the caller.
    check(
        unsafe { sys::cuMemcpyHtoD_v2(dst, src.cast(), n) },
        "cuMemcpyHtoD_v2",
    )
}

/// # Safety
/// `dst` must be valid for writes of `n` bytes; `src..src+n` must be device memory.
pub(crate) unsafe fn memcpy_dtoh(dst: *mut u8, src: CUdeviceptr, n: usize) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    // Safety: guaranteed by the caller.
    check(
        unsafe { sys::cuMemcpyDtoH_v2(dst.cast(), src, n) },
        "cuMemcpyDtoH_v2",
    )
}

/// Device-to-device copy within the current context (device memory only; no host
/// memory is touched, so a bad range is a CUDA error, not undefined behaviour).
pub(crate) fn memcpy_dtod(dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    // Safety: only device memory is accessed; the driver validates the pointers.
    check(
        unsafe { sys::cuMemcpyDtoD_v2(dst, src, n) },
        "cuMemcpyDtoD_v2",
    )
}

/// Device-to-device copy within the current context, queued on `stream` (null: the
/// legacy default stream). Device memory only, as [`memcpy_dtod`].
pub(crate) fn memcpy_dtod_async(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    stream: CUstream,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    // Safety: only device memory is accessed; the driver validates the pointers; the
    // stream is live or null.
    check(
        unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, n, stream) },
        "cuMemcpyDtoDAsync_v2",
    )
}

/// Copy between two contexts (possibly two devices).
pub(crate) fn memcpy_peer(
    dst: CUdeviceptr,
    dst_ctx: CUcontext,
    src: CUdeviceptr,
    src_ctx: CUcontext,
    n: usize,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    // Safety: only device memory is accessed; the contexts are live.
    check(
        unsafe { sys::cuMemcpyPeer(dst, dst_ctx, src, src_ctx, n) },
        "cuMemcpyPeer",
    )
}

pub(crate) fn memset_d8(dst: CUdeviceptr, value: u8, n: usize) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    // Safety: only device memory is written.
    check(
        unsafe { sys::cuMemsetD8_v2(dst, value, n) },
        "cuMemsetD8_v2",
    )
}

/// What the driver knows about a device pointer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PointerInfo {
    pub is_device_memory: bool,
    pub device_ordinal: i32,
    pub range_start: CUdeviceptr,
    pub range_size: usize,
}

pub(crate) fn pointer_info(p: CUdeviceptr) -> Result<PointerInfo> {
    use sys::CUpointer_attribute as A;
    let mut mem_type: u32 = 0;
    // Safety: each attribute is written into a value of the documented type.
    check(
        unsafe {
            sys::cuPointerGetAttribute(
                (&mut mem_type as *mut u32).cast(),
                A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                p,
            )
        },
        "cuPointerGetAttribute(MEMORY_TYPE)",
    )?;
    let mut ordinal: i32 = -1;
    // Safety: as above (int).
    check(
        unsafe {
            sys::cuPointerGetAttribute(
                (&mut ordinal as *mut i32).cast(),
                A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                p,
            )
        },
        "cuPointerGetAttribute(DEVICE_ORDINAL)",
    )?;
    let mut start: CUdeviceptr = 0;
    // Safety: as above (CUdeviceptr).
    check(
        unsafe {
            sys::cuPointerGetAttribute(
                (&mut start as *mut CUdeviceptr).cast(),
                A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                p,
            )
        },
        "cuPointerGetAttribute(RANGE_START_ADDR)",
    )?;
    let mut size: usize = 0;
    // Safety: as above (size_t).
    check(
        unsafe {
            sys::cuPointerGetAttribute(
                (&mut size as *mut usize).cast(),
                A::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                p,
            )
        },
        "cuPointerGetAttribute(RANGE_SIZE)",
    )?;
    Ok(PointerInfo {
        is_device_memory: mem_type == sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32,
        device_ordinal: ordinal,
        range_start: start,
        range_size: size,
    })
}

/// Whether the driver knows `p` as page-locked host memory (`cuMemHostAlloc`,
/// `cuMemAllocHost` or `cuMemHostRegister`): `CU_POINTER_ATTRIBUTE_MEMORY_TYPE` is
/// `CU_MEMORYTYPE_HOST`. Ordinary (pageable) memory is unknown to the driver, which
/// answers `CUDA_ERROR_INVALID_VALUE`: that is `Ok(false)`, not an error.
pub(crate) fn pointer_is_page_locked_host(p: *const u8) -> Result<bool> {
    let mut mem_type: u32 = 0;
    // Safety: the attribute is written into an unsigned int, as documented; the driver
    // only looks the address up and never dereferences it.
    let r = unsafe {
        sys::cuPointerGetAttribute(
            (&mut mem_type as *mut u32).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            p as CUdeviceptr,
        )
    };
    if r == sys::CUresult::CUDA_ERROR_INVALID_VALUE {
        return Ok(false);
    }
    check(r, "cuPointerGetAttribute(MEMORY_TYPE)")?;
    Ok(mem_type == sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32)
}
