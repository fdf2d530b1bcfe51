//! Driver calls for devices (queries, UUIDs, peer access) and contexts (primary and
//! dedicated, current, synchronize, memory info).

use super::*;

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

/// Disables access from the current context to `peer`'s memory. Not enabled is fine.
pub(crate) fn ctx_disable_peer_access(peer: CUcontext) -> Result<()> {
    // Safety: `peer` is a live context.
    let r = unsafe { sys::cuCtxDisablePeerAccess(peer) };
    if r == sys::CUresult::CUDA_ERROR_PEER_ACCESS_NOT_ENABLED {
        return Ok(());
    }
    check(r, "cuCtxDisablePeerAccess")
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
