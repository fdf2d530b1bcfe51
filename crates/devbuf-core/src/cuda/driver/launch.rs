//! Driver calls for modules (PTX loading), functions, kernel launches and occupancy.

use super::*;

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
