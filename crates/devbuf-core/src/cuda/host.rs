//! [`HostBuffer`]: page-locked (pinned) host memory.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;

use super::context::Context;
use super::driver;
use crate::error::{Error, Result};

/// A type whose alignment (64, like Arrow's allocations) the dangling pointer of an
/// empty buffer takes.
#[repr(align(64))]
struct Align64;

/// Page-locked host memory from `cuMemHostAlloc` (portable across contexts and mapped
/// into the device address space).
///
/// Transfers between page-locked memory and the device run at full PCIe speed, and a
/// `HostBuffer` converts into an `arrow_buffer::Buffer`, a `PrimitiveArray<T>` or
/// `bytes::Bytes` *without a copy* (`From`/`TryFrom`): the converted value points at the
/// same memory and frees it when its last owner drops.
///
/// It derefs to `[u8]`. Memory is always initialised: [`Context::allocate_host`] zeroes
/// it and device-to-host copies fill it.
///
/// ```no_run
/// use devbuf_core::cuda::Context;
/// let ctx = Context::new(0)?;
/// let mut h = ctx.allocate_host(4)?;
/// h.copy_from_slice(&[1, 2, 3, 4]);
/// let ptr = h.as_ptr();
/// let bytes = bytes::Bytes::from(h); // zero-copy
/// assert_eq!(bytes.as_ptr(), ptr);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub struct HostBuffer {
    ptr: NonNull<u8>,
    len: usize,
    ctx: Context,
}

// Safety: the buffer exclusively owns its allocation (like a Box<[u8]>); page-locked
// memory may be accessed and freed from any thread.
unsafe impl Send for HostBuffer {}
// Safety: shared access only hands out `&[u8]`.
unsafe impl Sync for HostBuffer {}
impl std::panic::RefUnwindSafe for HostBuffer {}
impl std::panic::UnwindSafe for HostBuffer {}

impl HostBuffer {
    /// Allocates without initialising. Callers must write every byte before the buffer
    /// is read through `Deref` (see `DeviceBuffer::to_host`, `zero_fill`).
    pub(crate) fn alloc_uninit(ctx: &Context, len: usize) -> Result<HostBuffer> {
        if len == 0 {
            return Ok(HostBuffer {
                // Aligned for every Arrow native type, so typed views of an empty
                // buffer are valid too.
                ptr: NonNull::<Align64>::dangling().cast(),
                len: 0,
                ctx: ctx.clone(),
            });
        }
        ctx.bind()?;
        let p = driver::mem_host_alloc(len).map_err(|e| {
            if driver::is_oom(&e) {
                Error::invalid(format!(
                    "could not allocate {len} bytes of page-locked host memory (out of memory: {e})"
                ))
            } else {
                e.explain_driver(format_args!(
                    "allocating {len} bytes of page-locked host memory"
                ))
            }
        })?;
        ctx.inner
            .host_bytes_allocated
            .fetch_add(len, Ordering::SeqCst);
        Ok(HostBuffer {
            // `mem_host_alloc` never returns null (checked there).
            ptr: NonNull::new(p).ok_or_else(|| Error::invalid("null page-locked pointer"))?,
            len,
            ctx: ctx.clone(),
        })
    }

    /// Writes zeroes over the whole buffer.
    pub(crate) fn zero_fill(&mut self) {
        if self.len > 0 {
            // Safety: the buffer owns `len` writable bytes.
            unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), 0, self.len) };
        }
    }

    /// Raw pointer to the first byte (valid for `len` bytes).
    #[allow(dead_code)]
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The context that allocated the memory.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The device address under which kernels of this context's device can read and
    /// write this memory directly (zero-copy access over PCIe). With unified addressing
    /// it equals the host address.
    pub fn device_address(&self) -> Result<u64> {
        if self.len == 0 {
            return Err(Error::invalid(
                "an empty HostBuffer has no memory to map into the device",
            ));
        }
        if !self.ctx.properties().can_map_host_memory {
            return Err(Error::invalid(format!(
                "device {} cannot map host memory",
                self.ctx.ordinal()
            )));
        }
        self.ctx.bind()?;
        driver::host_get_device_pointer(self.ptr.as_ptr())
    }

    /// Pointer and length of the memory, for zero-copy conversions.
    pub(crate) fn raw_parts(&self) -> (NonNull<u8>, usize) {
        (self.ptr, self.len)
    }
}

/// Zero-copy: the `Bytes` points at the page-locked memory, which is freed when the
/// last `Bytes` clone drops.
impl From<HostBuffer> for bytes::Bytes {
    fn from(h: HostBuffer) -> bytes::Bytes {
        bytes::Bytes::from_owner(h)
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        if self.len > 0 {
            if self.ctx.bind().is_ok() {
                // Safety: `ptr` came from cuMemHostAlloc and this is its only owner.
                let _ = unsafe { driver::mem_free_host(self.ptr.as_ptr()) };
            }
            self.ctx
                .inner
                .host_bytes_allocated
                .fetch_sub(self.len, Ordering::SeqCst);
        }
    }
}

impl Deref for HostBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // Safety: `ptr` is valid for `len` initialised bytes (dangling and 0 when empty)
        // for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for HostBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // Safety: as for `deref`, and `&mut self` gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl AsRef<[u8]> for HostBuffer {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for HostBuffer {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostBuffer")
            .field("address", &self.ptr)
            .field("len", &self.len)
            .field("context", &self.ctx)
            .finish()
    }
}
