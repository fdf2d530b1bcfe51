//! The only module that calls the CUDA driver (through cudarc's `sys` layer).
//!
//! `mod.rs` holds initialisation and error mapping; one file per family of calls:
//! `device.rs` (devices, contexts), `memory.rs`, `launch.rs` (modules, kernels),
//! `stream.rs` (streams, events), `ipc.rs`, `transfer.rs`. No other module of the crate
//! uses `cudarc` directly.
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

mod device;
pub(crate) mod ipc;
mod launch;
mod memory;
mod stream;
pub(crate) mod transfer;

pub(crate) use device::*;
pub(crate) use launch::*;
pub(crate) use memory::*;
pub(crate) use stream::*;

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
                assert_eq!(e.kind(), crate::ErrorKind::CudaUnavailable);
                assert!(!e.to_string().is_empty());
            }
        }
    }
}
