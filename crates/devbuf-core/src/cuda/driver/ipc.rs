//! Driver calls for interprocess communication: memory and event handles, plus the
//! few stream-ordered calls the IPC tests and examples use.

#[cfg(feature = "test-support")]
use std::ffi::c_void;

use cudarc::driver::sys;

#[cfg(feature = "test-support")]
use super::CUstream;
use super::{CUdeviceptr, CUevent, check};
use crate::error::Result;

/// Size of a `CUipcMemHandle` / `CUipcEventHandle` in bytes.
pub(crate) const IPC_HANDLE_SIZE: usize = sys::CU_IPC_HANDLE_SIZE as usize;

fn to_bytes(reserved: &[std::ffi::c_char; IPC_HANDLE_SIZE]) -> [u8; IPC_HANDLE_SIZE] {
    reserved.map(|c| c as u8)
}

fn from_bytes(bytes: &[u8; IPC_HANDLE_SIZE]) -> [std::ffi::c_char; IPC_HANDLE_SIZE] {
    bytes.map(|b| b as std::ffi::c_char)
}

/// `cuIpcGetMemHandle` for the allocation that starts at `base` (current context).
pub(crate) fn ipc_get_mem_handle(base: CUdeviceptr) -> Result<[u8; IPC_HANDLE_SIZE]> {
    let mut h = sys::CUipcMemHandle_st {
        reserved: [0; IPC_HANDLE_SIZE],
    };
    // Safety: valid out pointer; the driver validates `base`.
    check(
        unsafe { sys::cuIpcGetMemHandle(&mut h, base) },
        "cuIpcGetMemHandle",
    )?;
    Ok(to_bytes(&h.reserved))
}

/// `cuIpcOpenMemHandle_v2` with `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`, in the current
/// context. Returns the base address of the mapped allocation.
pub(crate) fn ipc_open_mem_handle(raw: &[u8; IPC_HANDLE_SIZE]) -> Result<CUdeviceptr> {
    let h = sys::CUipcMemHandle_st {
        reserved: from_bytes(raw),
    };
    let mut p: CUdeviceptr = 0;
    let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
    // Safety: valid out pointer; the handle is passed by value and validated by the
    // driver (a bad handle is an error code, not undefined behaviour).
    check(
        unsafe { sys::cuIpcOpenMemHandle_v2(&mut p, h, flags) },
        "cuIpcOpenMemHandle_v2",
    )?;
    Ok(p)
}

/// # Safety
/// `p` must be a base address returned by [`ipc_open_mem_handle`] that nothing uses
/// afterwards.
pub(crate) unsafe fn ipc_close_mem_handle(p: CUdeviceptr) -> Result<()> {
    // Safety: guaranteed by the caller.
    check(
        unsafe { sys::cuIpcCloseMemHandle(p) },
        "cuIpcCloseMemHandle",
    )
}

/// `cuIpcGetEventHandle` of an event created with `CU_EVENT_INTERPROCESS`.
pub(crate) fn ipc_get_event_handle(e: CUevent) -> Result<[u8; IPC_HANDLE_SIZE]> {
    let mut h = sys::CUipcEventHandle_st {
        reserved: [0; IPC_HANDLE_SIZE],
    };
    // Safety: valid out pointer; `e` is a live event.
    check(
        unsafe { sys::cuIpcGetEventHandle(&mut h, e) },
        "cuIpcGetEventHandle",
    )?;
    Ok(to_bytes(&h.reserved))
}

/// `cuIpcOpenEventHandle` in the current context. The event is destroyed with
/// `cuEventDestroy` like any other.
pub(crate) fn ipc_open_event_handle(raw: &[u8; IPC_HANDLE_SIZE]) -> Result<CUevent> {
    let h = sys::CUipcEventHandle_st {
        reserved: from_bytes(raw),
    };
    let mut e: CUevent = std::ptr::null_mut();
    // Safety: valid out pointer; the handle is validated by the driver.
    check(
        unsafe { sys::cuIpcOpenEventHandle(&mut e, h) },
        "cuIpcOpenEventHandle",
    )?;
    Ok(e)
}

/// Whether the memory at `p` can be exported with the legacy IPC calls
/// (`CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE`: true for `cuMemAlloc` memory,
/// false for stream-ordered pools, `cuMemCreate` and managed memory).
pub(crate) fn pointer_ipc_capable(p: CUdeviceptr) -> Result<bool> {
    let mut v: i32 = 0;
    // Safety: the attribute is written into an int, as documented.
    check(
        unsafe {
            sys::cuPointerGetAttribute(
                (&mut v as *mut i32).cast(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                p,
            )
        },
        "cuPointerGetAttribute(IS_LEGACY_CUDA_IPC_CAPABLE)",
    )?;
    Ok(v != 0)
}

/// The signature of a host function queued on a stream.
#[cfg(feature = "test-support")]
pub(crate) type HostFn = unsafe extern "C" fn(*mut c_void);

/// Queues `f(data)` on `stream` (`cuLaunchHostFunc`): later work on the stream waits
/// until it returns.
///
/// # Safety
/// `data` must stay valid until `f` has run, and `f` must not call the CUDA API.
#[cfg(feature = "test-support")]
pub(crate) unsafe fn launch_host_func(
    stream: CUstream,
    f: HostFn,
    data: *mut c_void,
) -> Result<()> {
    // Safety: guaranteed by the caller.
    check(
        unsafe { sys::cuLaunchHostFunc(stream, Some(f), data) },
        "cuLaunchHostFunc",
    )
}
