//! The only module that calls the CUDA driver (through cudarc's `sys` layer).
//!
//! `mod.rs` holds initialisation, devices, contexts, memory, modules and events;
//! submodules group further families of calls (one file each). No other module of the
//! crate uses `cudarc` directly.
//!
//! Every function here turns a `CUresult` into [`Error`], and nothing here panics:
//! before the first driver call, [`init`] checks that `libcuda` can be loaded and that
//! every symbol devbuf calls is exported by it (cudarc panics on a missing library or
//! symbol; we answer [`Error::CudaUnavailable`] instead).
//!
//! The wrappers are thin and named after the driver calls they make. Callers are
//! responsible for making the right context current ([`ctx_set_current`]) and for
//! validating ranges; the wrappers are `unsafe` where the driver would read or write
//! host memory through a raw pointer.

use std::ffi::{CStr, c_void};
use std::sync::OnceLock;

use cudarc::driver::sys;

use crate::error::{Error, Result};

pub(crate) mod ipc;
pub(crate) mod transfer;

pub(crate) use sys::{CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUmodule, CUstream};

/// The oldest driver devbuf accepts (CUDA 12.0).
pub(crate) const MIN_DRIVER_VERSION: i32 = 12000;

/// Symbols that every devbuf code path may call. [`init`] checks all of them up front
/// so that a call never reaches cudarc's panicking loader with a missing symbol.
const REQUIRED_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem_v2",
    "cuDeviceGetUuid_v2",
    "cuDeviceGetPCIBusId",
    "cuDeviceCanAccessPeer",
    "cuDevicePrimaryCtxRetain",
    "cuCtxSetCurrent",
    "cuCtxGetCurrent",
    "cuCtxPopCurrent_v2",
    "cuCtxSynchronize",
    "cuCtxDestroy_v2",
    "cuCtxEnablePeerAccess",
    "cuMemGetInfo_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemHostGetDevicePointer_v2",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyDtoD_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemcpyPeer",
    "cuMemsetD8_v2",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuLaunchKernel",
    "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    "cuPointerGetAttribute",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamQuery",
    "cuStreamWaitEvent",
    "cuEventCreate",
    "cuEventQuery",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventDestroy_v2",
    "cuEventElapsedTime_v2",
    // ipc.rs
    "cuIpcGetMemHandle",
    "cuIpcOpenMemHandle_v2",
    "cuIpcCloseMemHandle",
    "cuIpcGetEventHandle",
    "cuIpcOpenEventHandle",
    "cuLaunchHostFunc",
];

/// What [`init`] found out about the driver.
#[derive(Debug, Clone)]
pub(crate) struct DriverInfo {
    /// `cuDriverGetVersion`, e.g. 13000 for CUDA 13.0.
    pub version: i32,
    /// `cuDeviceGetCount`.
    pub device_count: usize,
}

static INIT: OnceLock<std::result::Result<DriverInfo, String>> = OnceLock::new();

/// Whether a shared library named like libcuda can be opened. Cached.
pub(crate) fn library_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // Safety: `is_culib_present` only tries to open candidate library names with
    // libloading and drops them; it has no other preconditions.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

/// Whether the loaded driver library exports `name`. Only call after [`library_present`].
pub(crate) fn has_symbol(name: &str) -> bool {
    if !library_present() {
        return false;
    }
    // Safety: the library is present (checked above), so `culib` loads it without
    // panicking; we only look a symbol up and never call it through this pointer.
    unsafe { sys::culib().get::<*const c_void>(name.as_bytes()).is_ok() }
}

/// Loads and initialises the driver once, and reports why CUDA is unusable if it is.
pub(crate) fn init() -> Result<&'static DriverInfo> {
    let r = INIT.get_or_init(|| {
        if !library_present() {
            return Err("no CUDA driver library found (looked for libcuda.so, libcuda.so.1 and \
                        versioned names; install the NVIDIA driver or add its directory to \
                        LD_LIBRARY_PATH)"
                .to_string());
        }
        let missing: Vec<&str> = REQUIRED_SYMBOLS
            .iter()
            .chain(transfer::REQUIRED_SYMBOLS)
            .copied()
            .filter(|s| !has_symbol(s))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "the CUDA driver library is too old: it lacks {} (devbuf needs a driver for CUDA {}.{} or newer)",
                missing.join(", "),
                MIN_DRIVER_VERSION / 1000,
                (MIN_DRIVER_VERSION % 1000) / 10
            ));
        }
        // Safety: all symbols are present; cuInit takes flags 0.
        let r = unsafe { sys::cuInit(0) };
        if r == sys::CUresult::CUDA_ERROR_NO_DEVICE {
            return Err("the CUDA driver found no device (cuInit: CUDA_ERROR_NO_DEVICE)".into());
        }
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(format!(
                "cuInit failed: {} ({})",
                error_name(r),
                error_string(r)
            ));
        }
        let mut version = 0i32;
        // Safety: valid out pointer.
        let r = unsafe { sys::cuDriverGetVersion(&mut version) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(format!("cuDriverGetVersion failed: {}", error_name(r)));
        }
        if version < MIN_DRIVER_VERSION {
            return Err(format!(
                "the CUDA driver is too old: it supports CUDA {}.{}, devbuf needs {}.{} or newer",
                version / 1000,
                (version % 1000) / 10,
                MIN_DRIVER_VERSION / 1000,
                (MIN_DRIVER_VERSION % 1000) / 10
            ));
        }
        let mut count = 0i32;
        // Safety: valid out pointer; driver initialised.
        let r = unsafe { sys::cuDeviceGetCount(&mut count) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(format!("cuDeviceGetCount failed: {}", error_name(r)));
        }
        Ok(DriverInfo {
            version,
            device_count: count.max(0) as usize,
        })
    });
    r.as_ref().map_err(Error::unavailable)
}

/// Like [`init`], and also requires at least one device.
pub(crate) fn init_with_device() -> Result<&'static DriverInfo> {
    let info = init()?;
    if info.device_count == 0 {
        return Err(Error::unavailable(
            "the CUDA driver is loaded but reports no device (cuDeviceGetCount = 0)",
        ));
    }
    Ok(info)
}

fn error_name(r: sys::CUresult) -> String {
    if !library_present() {
        return format!("{r:?}");
    }
    let mut p: *const std::ffi::c_char = std::ptr::null();
    // Safety: valid out pointer; the driver returns a static string or an error.
    let ok = unsafe { sys::cuGetErrorName(r, &mut p) } == sys::CUresult::CUDA_SUCCESS;
    if ok && !p.is_null() {
        // Safety: the driver returned a NUL-terminated static string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    } else {
        format!("{r:?}")
    }
}

fn error_string(r: sys::CUresult) -> String {
    if !library_present() {
        return "no driver library to describe the error".to_string();
    }
    let mut p: *const std::ffi::c_char = std::ptr::null();
    // Safety: valid out pointer; the driver returns a static string or an error.
    let ok = unsafe { sys::cuGetErrorString(r, &mut p) } == sys::CUresult::CUDA_SUCCESS;
    if ok && !p.is_null() {
        // Safety: the driver returned a NUL-terminated static string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    } else {
        "unknown error".to_string()
    }
}

/// Turns a `CUresult` into `Result`, naming the call.
pub(crate) fn check(r: sys::CUresult, call: &'static str) -> Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Driver {
            call,
            code: r as u32,
            name: error_name(r),
            description: error_string(r),
        })
    }
}

/// True when `e` is the driver's out-of-memory error.
pub(crate) fn is_oom(e: &Error) -> bool {
    matches!(e, Error::Driver { name, .. } if name == "CUDA_ERROR_OUT_OF_MEMORY")
}

// ---------------------------------------------------------------------------
// Devices
// ---------------------------------------------------------------------------

pub(crate) fn device_get(ordinal: usize) -> Result<CUdevice> {
    let mut d: CUdevice = 0;
    let ord = i32::try_from(ordinal).map_err(|_| Error::invalid("device ordinal too large"))?;
    // Safety: valid out pointer; init() was called by the caller.
    check(unsafe { sys::cuDeviceGet(&mut d, ord) }, "cuDeviceGet")?;
    Ok(d)
}

pub(crate) fn device_name(dev: CUdevice) -> Result<String> {
    let mut buf = [0 as std::ffi::c_char; 256];
    // Safety: the buffer holds 256 bytes and we pass that length.
    check(
        unsafe { sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as i32, dev) },
        "cuDeviceGetName",
    )?;
    // Safety: the driver NUL-terminates within the given length; force a final NUL anyway.
    buf[255] = 0;
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

pub(crate) fn device_attribute(dev: CUdevice, attr: sys::CUdevice_attribute) -> Result<i32> {
    let mut v = 0i32;
    // Safety: valid out pointer.
    check(
        unsafe { sys::cuDeviceGetAttribute(&mut v, attr, dev) },
        "cuDeviceGetAttribute",
    )?;
    Ok(v)
}

pub(crate) use sys::CUdevice_attribute as DeviceAttr;

pub(crate) fn device_total_mem(dev: CUdevice) -> Result<usize> {
    let mut v = 0usize;
    // Safety: valid out pointer.
    check(
        unsafe { sys::cuDeviceTotalMem_v2(&mut v, dev) },
        "cuDeviceTotalMem_v2",
    )?;
    Ok(v)
}

pub(crate) fn device_uuid(dev: CUdevice) -> Result<[u8; 16]> {
    let mut u = sys::CUuuid_st { bytes: [0; 16] };
    // Safety: valid out pointer.
    check(
        unsafe { sys::cuDeviceGetUuid_v2(&mut u, dev) },
        "cuDeviceGetUuid_v2",
    )?;
    Ok(u.bytes.map(|b| b as u8))
}

pub(crate) fn device_pci_bus_id(dev: CUdevice) -> Result<String> {
    let mut buf = [0 as std::ffi::c_char; 64];
    // Safety: buffer of 64 bytes, length passed.
    check(
        unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, dev) },
        "cuDeviceGetPCIBusId",
    )?;
    buf[63] = 0;
    // Safety: NUL-terminated (forced above).
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

pub(crate) fn device_can_access_peer(dev: CUdevice, peer: CUdevice) -> Result<bool> {
    let mut v = 0i32;
    // Safety: valid out pointer.
    check(
        unsafe { sys::cuDeviceCanAccessPeer(&mut v, dev, peer) },
        "cuDeviceCanAccessPeer",
    )?;
    Ok(v != 0)
}

// ---------------------------------------------------------------------------
// Contexts
// ---------------------------------------------------------------------------

pub(crate) fn primary_ctx_retain(dev: CUdevice) -> Result<CUcontext> {
    let mut c: CUcontext = std::ptr::null_mut();
    // Safety: valid out pointer.
    check(
        unsafe { sys::cuDevicePrimaryCtxRetain(&mut c, dev) },
        "cuDevicePrimaryCtxRetain",
    )?;
    Ok(c)
}

/// Creates a new (non-primary) context on `dev`. Leaves it current on this thread.
pub(crate) fn ctx_create(dev: CUdevice) -> Result<CUcontext> {
    if !has_symbol("cuCtxCreate_v4") {
        return Err(Error::unavailable(
            "the driver lacks cuCtxCreate_v4 (needs CUDA 12.5 or newer) for dedicated contexts",
        ));
    }
    let mut c: CUcontext = std::ptr::null_mut();
    // Safety: valid out pointer; null params are allowed; flags 0 = default scheduling.
    check(
        unsafe { sys::cuCtxCreate_v4(&mut c, std::ptr::null_mut(), 0, dev) },
        "cuCtxCreate_v4",
    )?;
    Ok(c)
}

/// Destroys a context made by [`ctx_create`].
///
/// # Safety
/// `c` must come from [`ctx_create`] and must not be used afterwards.
pub(crate) unsafe fn ctx_destroy(c: CUcontext) -> Result<()> {
    // Safety: guaranteed by the caller.
    check(unsafe { sys::cuCtxDestroy_v2(c) }, "cuCtxDestroy_v2")
}

pub(crate) fn ctx_set_current(c: CUcontext) -> Result<()> {
    // Safety: contexts handed here are live (owned by a `Context`).
    check(unsafe { sys::cuCtxSetCurrent(c) }, "cuCtxSetCurrent")
}

/// Pops the current context off this thread's context stack.
pub(crate) fn ctx_pop_current() -> Result<CUcontext> {
    let mut c: CUcontext = std::ptr::null_mut();
    // Safety: valid out pointer.
    check(
        unsafe { sys::cuCtxPopCurrent_v2(&mut c) },
        "cuCtxPopCurrent_v2",
    )?;
    Ok(c)
}

pub(crate) fn ctx_synchronize() -> Result<()> {
    // Safety: no arguments; acts on the current context.
    check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize")
}

/// Enables access from the current context to `peer`'s memory. Already enabled is fine.
pub(crate) fn ctx_enable_peer_access(peer: CUcontext) -> Result<()> {
    // Safety: `peer` is a live context; flags must be 0.
    let r = unsafe { sys::cuCtxEnablePeerAccess(peer, 0) };
    if r == sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
        return Ok(());
    }
    check(r, "cuCtxEnablePeerAccess")
}

/// `(free, total)` bytes of the current context's device.
pub(crate) fn mem_get_info() -> Result<(usize, usize)> {
    let (mut free, mut total) = (0usize, 0usize);
    // Safety: valid out pointers.
    check(
        unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) },
        "cuMemGetInfo_v2",
    )?;
    Ok((free, total))
}

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Modules and launches
// ---------------------------------------------------------------------------

/// Loads a PTX/cubin/fatbin image (NUL-terminated for PTX) into the current context.
pub(crate) fn module_load_data(image: &[u8]) -> Result<CUmodule> {
    if image.last() != Some(&0) {
        return Err(Error::invalid("module image must be NUL-terminated"));
    }
    let mut m: CUmodule = std::ptr::null_mut();
    // Safety: the image is a NUL-terminated buffer that lives through the call.
    check(
        unsafe { sys::cuModuleLoadData(&mut m, image.as_ptr().cast()) },
        "cuModuleLoadData",
    )?;
    Ok(m)
}

/// # Safety
/// `m` must be a loaded module whose functions are no longer used.
pub(crate) unsafe fn module_unload(m: CUmodule) -> Result<()> {
    // Safety: guaranteed by the caller.
    check(unsafe { sys::cuModuleUnload(m) }, "cuModuleUnload")
}

pub(crate) fn module_get_function(m: CUmodule, name: &CStr) -> Result<CUfunction> {
    let mut f: CUfunction = std::ptr::null_mut();
    // Safety: live module, NUL-terminated name, valid out pointer.
    check(
        unsafe { sys::cuModuleGetFunction(&mut f, m, name.as_ptr()) },
        "cuModuleGetFunction",
    )?;
    Ok(f)
}

/// # Safety
/// `params` must point at one pointer per kernel parameter, each to a value of the
/// parameter's exact type, and the kernel must only touch memory it is allowed to.
pub(crate) unsafe fn launch_kernel(
    f: CUfunction,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    shared_mem: u32,
    stream: CUstream,
    params: &mut [*mut c_void],
) -> Result<()> {
    // Safety: guaranteed by the caller.
    check(
        unsafe {
            sys::cuLaunchKernel(
                f,
                grid.0,
                grid.1,
                grid.2,
                block.0,
                block.1,
                block.2,
                shared_mem,
                stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        },
        "cuLaunchKernel",
    )
}

/// How many blocks of `block_size` threads (and `dynamic_smem` bytes of dynamic shared
/// memory) of `f` fit on one multiprocessor at once.
pub(crate) fn occupancy_max_active_blocks(
    f: CUfunction,
    block_size: u32,
    dynamic_smem: usize,
) -> Result<u32> {
    let mut n = 0i32;
    // Safety: valid out pointer; `f` is a function of a loaded module.
    check(
        unsafe {
            sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(
                &mut n,
                f,
                block_size as i32,
                dynamic_smem,
            )
        },
        "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    )?;
    Ok(n.max(0) as u32)
}

// ---------------------------------------------------------------------------
// Streams and events
// ---------------------------------------------------------------------------

/// Creates a stream. `non_blocking`: it does not synchronise with the legacy default
/// stream.
pub(crate) fn stream_create(non_blocking: bool) -> Result<CUstream> {
    let mut s: CUstream = std::ptr::null_mut();
    let flags = if non_blocking {
        sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32
    } else {
        0
    };
    // Safety: valid out pointer.
    check(
        unsafe { sys::cuStreamCreate(&mut s, flags) },
        "cuStreamCreate",
    )?;
    Ok(s)
}

/// # Safety
/// `s` must come from [`stream_create`] and not be used afterwards.
pub(crate) unsafe fn stream_destroy(s: CUstream) -> Result<()> {
    // Safety: guaranteed by the caller.
    check(unsafe { sys::cuStreamDestroy_v2(s) }, "cuStreamDestroy_v2")
}

pub(crate) fn stream_synchronize(s: CUstream) -> Result<()> {
    // Safety: `s` is a live stream or null (legacy default stream).
    check(
        unsafe { sys::cuStreamSynchronize(s) },
        "cuStreamSynchronize",
    )
}

/// Whether all work queued on `s` has finished.
pub(crate) fn stream_query(s: CUstream) -> Result<bool> {
    // Safety: `s` is a live stream or null.
    let r = unsafe { sys::cuStreamQuery(s) };
    if r == sys::CUresult::CUDA_ERROR_NOT_READY {
        return Ok(false);
    }
    check(r, "cuStreamQuery").map(|_| true)
}

/// Makes future work on `s` wait until `e` has completed (device-side; the host does
/// not block).
pub(crate) fn stream_wait_event(s: CUstream, e: CUevent) -> Result<()> {
    // Safety: live stream (or null) and live event; flags must be 0.
    check(
        unsafe { sys::cuStreamWaitEvent(s, e, 0) },
        "cuStreamWaitEvent",
    )
}

/// Event creation flags (`CU_EVENT_*`).
pub(crate) fn event_create_flags(flags: u32) -> Result<CUevent> {
    let mut e: CUevent = std::ptr::null_mut();
    // Safety: valid out pointer.
    check(
        unsafe { sys::cuEventCreate(&mut e, flags) },
        "cuEventCreate",
    )?;
    Ok(e)
}

pub(crate) const EVENT_BLOCKING_SYNC: u32 = sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;
pub(crate) const EVENT_DISABLE_TIMING: u32 = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
pub(crate) const EVENT_INTERPROCESS: u32 = sys::CUevent_flags::CU_EVENT_INTERPROCESS as u32;

pub(crate) fn event_create(timing: bool) -> Result<CUevent> {
    event_create_flags(if timing { 0 } else { EVENT_DISABLE_TIMING })
}

pub(crate) fn event_record(e: CUevent, s: CUstream) -> Result<()> {
    // Safety: live event and stream.
    check(unsafe { sys::cuEventRecord(e, s) }, "cuEventRecord")
}

pub(crate) fn event_synchronize(e: CUevent) -> Result<()> {
    // Safety: live event.
    check(unsafe { sys::cuEventSynchronize(e) }, "cuEventSynchronize")
}

/// Whether the work captured by `e` has completed.
pub(crate) fn event_query(e: CUevent) -> Result<bool> {
    // Safety: live event.
    let r = unsafe { sys::cuEventQuery(e) };
    if r == sys::CUresult::CUDA_ERROR_NOT_READY {
        return Ok(false);
    }
    check(r, "cuEventQuery").map(|_| true)
}

/// Milliseconds between two recorded timing events.
pub(crate) fn event_elapsed_ms(start: CUevent, end: CUevent) -> Result<f32> {
    let mut ms = 0f32;
    // Safety: valid out pointer; live events.
    check(
        unsafe { sys::cuEventElapsedTime_v2(&mut ms, start, end) },
        "cuEventElapsedTime_v2",
    )?;
    Ok(ms)
}

/// # Safety
/// `e` must come from [`event_create_flags`] and not be used afterwards.
pub(crate) unsafe fn event_destroy(e: CUevent) -> Result<()> {
    // Safety: guaranteed by the caller.
    check(unsafe { sys::cuEventDestroy_v2(e) }, "cuEventDestroy_v2")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_maps_errors_to_names() {
        assert!(check(sys::CUresult::CUDA_SUCCESS, "x").is_ok());
        if library_present() {
            // With a driver we get CUDA's own name.
            let e = check(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc_v2").unwrap_err();
            assert!(is_oom(&e), "{e}");
        }
    }

    #[test]
    fn init_never_panics() {
        // On a machine without a driver this is an error naming the reason.
        match init() {
            Ok(info) => assert!(info.version >= MIN_DRIVER_VERSION),
            Err(e) => {
                assert!(e.is_cuda_unavailable());
                assert!(!e.to_string().is_empty());
            }
        }
    }
}
