//! [`DeviceBuffer`]: a shared device allocation plus an offset and a length.
//!
//! # Ownership: the buffer frees through its owner
//!
//! A [`DeviceBuffer`] is `Arc<Allocation> + offset + len`. An [`Allocation`] is the
//! context, the base address, the size and a [`DeviceOwner`]: a trait object that knows
//! how the memory is released and what it may be used for, as arrow-buffer's
//! `Deallocation::Custom(Arc<dyn Allocation>)` does for host memory. When the last buffer
//! drops, the allocation calls [`DeviceOwner::release`] without knowing what the owner is.
//! The owners live beside the code that makes the memory:
//!
//! * [`NoMemory`] (here): an empty allocation; nothing to release.
//! * [`MemAlloc`] (here): `cuMemAlloc` by [`Context::allocate`]; freed with `cuMemFree`.
//! * [`ForeignOwner`] (here): a [`Context::view`] of someone else's memory; the owner value
//!   is kept alive and dropped with the allocation.
//! * the pool's owner (`mempool.rs`): `cuMemFreeAsync` on the allocating stream.
//! * the IPC mapping's owner (`ipc/registry.rs`): `cuIpcCloseMemHandle` and the
//!   open-mappings registry.
//!
//! Questions other modules ask about the memory (is it devbuf's? pooled? how may it be
//! exported over IPC?) go to the owner too ([`DeviceOwner::ipc_export`]), so this file
//! imports nothing from the IPC module. The byte accounting stays here: an allocation made
//! through `Context::counted_buffer` adds its size to `bytes_allocated` and subtracts it
//! when it drops, after the owner released the memory.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow_buffer::ArrowNativeType;

use super::context::Context;
use super::driver::{self, CUdeviceptr};
use super::host::HostBuffer;
use super::kernels;
use super::stream::Stream;
use crate::error::{Error, Result, check_range};

/// How an allocation's memory may be exported over legacy CUDA IPC (asked by
/// `DeviceBuffer::export_ipc`).
pub(crate) enum IpcExport {
    /// The whole allocation came from `cuMemAlloc`: export its base address.
    Allocation,
    /// Memory devbuf did not allocate: ask the driver whether and how it can be exported.
    AskDriver,
    /// The memory is already a mapping of this `CUipcMemHandle` (64 bytes): export it again.
    Handle([u8; 64]),
    /// Cannot be exported; the reason, for the error message.
    Refused(&'static str),
}

/// The owner of an [`Allocation`]'s memory: releases it when the last buffer drops, and
/// answers what the memory may be used for. See the opening comment of this file.
pub(crate) trait DeviceOwner: Send + Sync {
    /// Releases `size` bytes at `ptr` of `ctx`; called once, from the drop of the last
    /// buffer that refers to the allocation. Failures cannot be reported (drop).
    fn release(&self, ctx: &Context, ptr: CUdeviceptr, size: usize);
    /// Whether devbuf allocated this memory ([`DeviceBuffer::is_owned`]).
    fn is_owned(&self) -> bool;
    /// Whether the memory comes from the context's stream-ordered pool.
    fn is_pooled(&self) -> bool {
        false
    }
    /// How the memory may be exported over legacy CUDA IPC.
    fn ipc_export(&self) -> IpcExport;
}

/// The owner of an empty allocation (zero bytes, nothing allocated).
pub(crate) struct NoMemory;

impl DeviceOwner for NoMemory {
    fn release(&self, _: &Context, _: CUdeviceptr, _: usize) {}
    fn is_owned(&self) -> bool {
        true
    }
    fn ipc_export(&self) -> IpcExport {
        IpcExport::Refused("a non-empty buffer over an empty allocation cannot be exported")
    }
}

/// `cuMemAlloc` memory allocated by devbuf ([`Context::allocate`]): freed with
/// `cuMemFree`.
pub(crate) struct MemAlloc;

impl DeviceOwner for MemAlloc {
    fn release(&self, ctx: &Context, ptr: CUdeviceptr, _: usize) {
        // A failure here cannot be reported (drop); the context stays usable.
        if ctx.bind().is_ok() {
            // Safety: `ptr` came from cuMemAlloc in this context, and this is the drop of
            // its last reference (all buffers hold an Arc to the allocation).
            let _ = unsafe { driver::mem_free(ptr) };
        }
    }
    fn is_owned(&self) -> bool {
        true
    }
    fn ipc_export(&self) -> IpcExport {
        IpcExport::Allocation
    }
}

/// Memory that belongs to someone else ([`Context::view`]): the owner value keeps it
/// alive and is dropped with the allocation.
pub(crate) struct ForeignOwner(#[allow(dead_code)] pub(crate) Box<dyn Any + Send + Sync>);

impl DeviceOwner for ForeignOwner {
    fn release(&self, _: &Context, _: CUdeviceptr, _: usize) {}
    fn is_owned(&self) -> bool {
        false
    }
    fn ipc_export(&self) -> IpcExport {
        IpcExport::AskDriver
    }
}

/// One device allocation (or foreign range), shared by every buffer that slices it.
pub(crate) struct Allocation {
    pub(crate) ctx: Context,
    pub(crate) ptr: CUdeviceptr,
    pub(crate) size: usize,
    /// Releases the memory and answers what it may be used for.
    pub(crate) owner: Box<dyn DeviceOwner>,
    /// Whether `size` was added to the context's `bytes_allocated` (subtracted on drop).
    pub(crate) counted: bool,
}

impl Allocation {
    /// An allocation of `size` bytes at `ptr` released by `owner`, not counted in
    /// `bytes_allocated` (see `Context::counted_buffer` for counted ones).
    pub(crate) fn new(
        ctx: &Context,
        ptr: CUdeviceptr,
        size: usize,
        owner: Box<dyn DeviceOwner>,
    ) -> Allocation {
        Allocation {
            ctx: ctx.clone(),
            ptr,
            size,
            owner,
            counted: false,
        }
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        self.owner.release(&self.ctx, self.ptr, self.size);
        if self.counted {
            self.ctx
                .inner
                .bytes_allocated
                .fetch_sub(self.size, Ordering::SeqCst);
        }
    }
}

/// A range of device memory: a shared allocation, an offset into it and a length.
///
/// This is Arrow C++'s `CudaBuffer` (pyarrow.cuda), with Rust ownership:
///
/// * Cloning and [`slice`](Self::slice) are zero-copy and keep the allocation alive; the
///   memory is freed when the last buffer that refers to it drops.
/// * Every range is checked before a driver call; out-of-range is an
///   [`Error::OutOfBounds`] naming the offset, length and size (never clamped).
/// * Device memory is never exposed as `&[u8]`: reading it means copying it to the host.
/// * `DeviceBuffer` is `Send + Sync`. Copies from several threads are safe; as with any
///   shared memory, concurrent writes to overlapping ranges race on the device.
///
/// ```no_run
/// use devbuf_core::cuda::{Context, DeviceBuffer};
/// let ctx = Context::new(0)?;
/// let buf = DeviceBuffer::from_slice(&ctx, &[1u32, 2, 3, 4])?;
/// let tail = buf.slice(8, 8)?; // the last two u32, zero-copy
/// assert_eq!(tail.address(), buf.address() + 8);
/// assert_eq!(tail.to_vec::<u32>()?, vec![3, 4]);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone)]
pub struct DeviceBuffer {
    alloc: Arc<Allocation>,
    offset: usize,
    len: usize,
    mutable: bool,
}

impl DeviceBuffer {
    pub(crate) fn from_allocation(alloc: Arc<Allocation>) -> DeviceBuffer {
        let len = alloc.size;
        DeviceBuffer {
            alloc,
            offset: 0,
            len,
            mutable: true,
        }
    }

    /// A buffer over `len` bytes at `offset` of `alloc` (the caller checked the range).
    pub(crate) fn from_parts(
        alloc: Arc<Allocation>,
        offset: usize,
        len: usize,
        mutable: bool,
    ) -> DeviceBuffer {
        DeviceBuffer {
            alloc,
            offset,
            len,
            mutable,
        }
    }

    /// The shared allocation this buffer slices.
    pub(crate) fn allocation(&self) -> &Arc<Allocation> {
        &self.alloc
    }

    /// Allocates a buffer on `ctx` holding a copy of `data` (bytes or any Arrow native
    /// type).
    pub fn from_slice<T: ArrowNativeType>(ctx: &Context, data: &[T]) -> Result<DeviceBuffer> {
        let data = as_bytes(data);
        let b = ctx.allocate(data.len())?;
        b.copy_from_host(0, data)?;
        Ok(b)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address of the first byte of this slice (0 for an empty allocation).
    pub fn address(&self) -> u64 {
        if self.alloc.ptr == 0 {
            0
        } else {
            self.alloc.ptr + self.offset as u64
        }
    }

    /// The context (and so the device) this memory belongs to.
    pub fn context(&self) -> &Context {
        &self.alloc.ctx
    }

    /// The whole allocation this buffer slices (itself when it is not a slice). This
    /// slice starts `address() - parent().address()` bytes into it.
    ///
    /// ```no_run
    /// let ctx = devbuf_core::cuda::Context::new(0)?;
    /// let whole = ctx.allocate(64)?;
    /// let s = whole.slice(8, 16)?.slice(4, 4)?;
    /// assert_eq!(s.parent().len(), 64);
    /// assert_eq!(s.address() - s.parent().address(), 12);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn parent(&self) -> DeviceBuffer {
        DeviceBuffer {
            alloc: self.alloc.clone(),
            offset: 0,
            len: self.alloc.size,
            mutable: self.mutable,
        }
    }

    /// Whether writes through this buffer are allowed.
    pub fn is_mutable(&self) -> bool {
        self.mutable
    }

    /// Whether devbuf allocated this memory (as opposed to a [`Context::view`] of
    /// someone else's).
    pub fn is_owned(&self) -> bool {
        self.alloc.owner.is_owned()
    }

    /// Whether this memory comes from the context's stream-ordered pool
    /// ([`Context::allocate_pooled`]). Pool memory cannot be exported over IPC.
    ///
    /// ```no_run
    /// let ctx = devbuf_core::cuda::Context::new(0)?;
    /// assert!(ctx.allocate_pooled(16, None)?.is_pooled());
    /// assert!(!ctx.allocate(16)?.is_pooled());
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn is_pooled(&self) -> bool {
        self.alloc.owner.is_pooled()
    }

    /// True when no other handle can see this memory: the only handle to a mutable
    /// allocation devbuf owns (no clone, slice or foreign owner shares it). Writers
    /// that promise value semantics (the zarr layer's copy-on-write) check this.
    pub(crate) fn is_exclusive(&self) -> bool {
        self.mutable
            && self.alloc.owner.is_owned()
            && !self.alloc.owner.is_pooled()
            && Arc::strong_count(&self.alloc) == 1
    }

    /// A read-only handle to the same memory (zero-copy). Writes through it are
    /// [`Error::ReadOnly`].
    pub fn read_only(&self) -> DeviceBuffer {
        DeviceBuffer {
            mutable: false,
            ..self.clone()
        }
    }

    /// A zero-copy view of `len` bytes starting at `offset`, keeping the allocation alive.
    /// Slices of slices compose. Out of range is an error, never clamped.
    pub fn slice(&self, offset: usize, len: usize) -> Result<DeviceBuffer> {
        check_range("slice", offset, len, self.len)?;
        Ok(DeviceBuffer {
            alloc: self.alloc.clone(),
            offset: self.offset + offset,
            len,
            mutable: self.mutable,
        })
    }

    /// `Ok` when this buffer may be written; an [`Error::ReadOnly`] naming `op` for a
    /// read-only view ([`read_only`](Self::read_only), imported read-only memory). Users
    /// ask [`is_mutable`](Self::is_mutable).
    pub(crate) fn check_writable(&self, op: &str) -> Result<()> {
        if self.mutable {
            Ok(())
        } else {
            Err(Error::ReadOnly(format!(
                "{op} on a read-only device buffer of {} bytes",
                self.len
            )))
        }
    }

    /// Copies the whole buffer into a new page-locked [`HostBuffer`] (which converts to
    /// Arrow or `Bytes` without another copy: `Bytes::from(h)`,
    /// `arrow_buffer::Buffer::from(h)`, `PrimitiveArray::<T>::try_from(h)`). A part:
    /// `d.slice(pos, n)?.to_host()`; into memory you already have:
    /// [`copy_to_host`](Self::copy_to_host).
    pub fn to_host(&self) -> Result<HostBuffer> {
        let nbytes = self.len;
        let mut h = HostBuffer::alloc_uninit(self.context(), nbytes)?;
        if nbytes > 0 {
            // Page-locked destination: one DMA (no staging, no driver query). Through a raw
            // pointer: the memory is not initialised yet, so no `&mut [u8]` may cover it.
            self.context().bind()?;
            // Safety: `h` owns `nbytes` writable page-locked bytes, the whole of this
            // buffer. The synchronous copy has written every byte when it returns.
            unsafe { driver::memcpy_dtoh(h.as_mut_ptr(), self.address(), nbytes)? };
        }
        Ok(h)
    }

    /// Copies `dst.len()` bytes starting at `position` into `dst`; every byte is
    /// written when the call returns. (Into new memory: [`to_host`](Self::to_host).)
    ///
    /// Into page-locked memory this is one DMA; into ordinary memory of at least
    /// [`TransferConfig::staging_min_bytes`](super::TransferConfig) it goes through the
    /// transfer engine's staging lanes (page-locked speed), below that through one
    /// driver call. See [`Context::set_transfer_config`].
    pub fn copy_to_host(&self, position: usize, dst: &mut [u8]) -> Result<()> {
        check_range("copy_to_host", position, dst.len(), self.len)?;
        if dst.is_empty() {
            return Ok(());
        }
        super::transfer::dtoh(self.context(), dst, self.address() + position as u64, false)
    }

    /// Copies `src` into this buffer starting at `position`.
    ///
    /// From page-locked memory this is one DMA; from ordinary memory of at least
    /// [`TransferConfig::staging_min_bytes`](super::TransferConfig) it goes through the
    /// transfer engine's staging lanes (page-locked speed), below that through one
    /// driver call. See [`Context::set_transfer_config`].
    pub fn copy_from_host(&self, position: usize, src: &[u8]) -> Result<()> {
        self.check_writable("copy_from_host")?;
        check_range("copy_from_host", position, src.len(), self.len)?;
        if src.is_empty() {
            return Ok(());
        }
        super::transfer::htod(self.context(), self.address() + position as u64, src)
    }

    /// Copies all of `src` into this buffer starting at `position`.
    ///
    /// `src` may live in the same context (a device-to-device copy), another context or
    /// another device (a peer copy, staged by the driver when the devices cannot reach
    /// each other directly). Overlapping ranges of one allocation are handled as
    /// `memmove` does. The copy has finished when this returns (the driver's
    /// device-to-device copies return early; devbuf waits for them), so the
    /// destination can be used on any stream at once.
    pub fn copy_from_device(&self, position: usize, src: &DeviceBuffer) -> Result<()> {
        if self.copy_from_device_queued(position, src)? {
            // The copies ran on the legacy stream of the bound context: wait for it.
            driver::stream_synchronize(std::ptr::null_mut())?;
        }
        Ok(())
    }

    /// [`copy_from_device`](Self::copy_from_device)'s copies, queued on the legacy
    /// stream of the context left bound; whether any was queued.
    fn copy_from_device_queued(&self, position: usize, src: &DeviceBuffer) -> Result<bool> {
        self.check_writable("copy_from_device")?;
        check_range("copy_from_device", position, src.len, self.len)?;
        let n = src.len;
        if n == 0 {
            return Ok(false);
        }
        let dst_addr = self.address() + position as u64;
        if self.context().same_as(src.context()) {
            self.context().bind()?;
            // One context has one address space: overlapping addresses are the same
            // memory, also when two views (e.g. `Context::view`s of foreign memory)
            // reach it through different allocations.
            let overlap =
                dst_addr < src.address() + n as u64 && src.address() < dst_addr + n as u64;
            if overlap && dst_addr != src.address() {
                // cuMemcpyDtoD is undefined on overlapping ranges: go through a temporary.
                let tmp = self.context().allocate(n)?;
                driver::memcpy_dtod(tmp.address(), src.address(), n)?;
                self.context().bind()?;
                driver::memcpy_dtod(dst_addr, tmp.address(), n)?;
                // `tmp` is freed on return: the copy out of it must have finished.
                driver::stream_synchronize(std::ptr::null_mut())?;
                Ok(false)
            } else if overlap {
                Ok(false)
            } else {
                driver::memcpy_dtod(dst_addr, src.address(), n).map(|()| true)
            }
        } else {
            if self.context().ordinal() != src.context().ordinal() {
                // Direct NVLink/PCIe peer transfers where the hardware allows; otherwise
                // the driver stages the copy through host memory.
                self.context().peer_access_for_copy(src.context())?;
            }
            self.context().bind()?;
            driver::memcpy_peer(
                dst_addr,
                self.context().inner.raw,
                src.address(),
                src.context().inner.raw,
                n,
            )
            .map(|()| true)
        }
    }

    /// Queues a copy of all of `src` into this buffer at `position` on `stream`, ordered
    /// after the stream's earlier work; returns without waiting for it.
    ///
    /// `src` may live in this buffer's context or in another one, on this device or
    /// another (a peer copy: direct over NVLink or PCIe where the devices allow it, see
    /// [`Context::set_peer_access`], else staged by the driver); the stream belongs
    /// to either buffer's context. Within one context the two ranges must not overlap
    /// (a stream-ordered copy cannot go through a temporary as
    /// [`copy_from_device`](Self::copy_from_device) does); anything else is an
    /// [`Error::InvalidArgument`] saying which. Both buffers must stay alive until the
    /// stream has run the copy (synchronize the stream or wait on an event recorded after it).
    ///
    /// ```no_run
    /// use devbuf_core::cuda::{Context, DeviceBuffer, Stream};
    /// let ctx = Context::new(0)?;
    /// let src = DeviceBuffer::from_slice(&ctx, &[1u32, 2, 3, 4])?;
    /// let dst = ctx.allocate(32)?;
    /// let stream = Stream::new(&ctx)?;
    /// dst.copy_from_device_on(16, &src, &stream)?;
    /// stream.synchronize()?;
    /// assert_eq!(dst.slice(16, 16)?.to_vec::<u32>()?, [1, 2, 3, 4]);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    ///
    /// Between two GPUs, on a stream of either one:
    ///
    /// ```no_run
    /// use devbuf_core::cuda::{device_count, Context, DeviceBuffer, Stream};
    /// if device_count() >= 2 {
    ///     let (d0, d1) = (Context::new(0)?, Context::new(1)?);
    ///     let src = DeviceBuffer::from_slice(&d0, &[7u8; 4096])?;
    ///     let dst = d1.allocate(4096)?;
    ///     let stream = Stream::new(&d0)?; // the source's device drives the copy
    ///     dst.copy_from_device_on(0, &src, &stream)?;
    ///     stream.synchronize()?;
    ///     assert_eq!(dst.to_vec::<u8>()?, vec![7u8; 4096]);
    /// }
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn copy_from_device_on(
        &self,
        position: usize,
        src: &DeviceBuffer,
        stream: &Stream,
    ) -> Result<()> {
        self.check_writable("copy_from_device_on")?;
        check_range("copy_from_device_on", position, src.len, self.len)?;
        let same = self.context().same_as(src.context());
        if !self.context().same_as(stream.context()) && !src.context().same_as(stream.context()) {
            return Err(Error::invalid(format!(
                "copy_from_device_on: the stream belongs to a context of device {}, neither \
                 the destination's (device {}) nor the source's (device {})",
                stream.context().ordinal(),
                self.context().ordinal(),
                src.context().ordinal()
            )));
        }
        let n = src.len;
        if n == 0 {
            return Ok(());
        }
        let dst_addr = self.address() + position as u64;
        if !same {
            if self.context().ordinal() != src.context().ordinal() {
                self.context().peer_access_for_copy(src.context())?;
            }
            stream.context().bind()?;
            return driver::transfer::memcpy_peer_async(
                dst_addr,
                self.context().inner.raw,
                src.address(),
                src.context().inner.raw,
                n,
                stream.raw(),
            );
        }
        if dst_addr < src.address() + n as u64 && src.address() < dst_addr + n as u64 {
            return Err(Error::invalid(format!(
                "copy_from_device_on: destination {dst_addr:#x}..+{n} overlaps the source \
                 {:#x}..+{n} (use copy_from_device)",
                src.address()
            )));
        }
        self.context().bind()?;
        driver::memcpy_dtod_async(dst_addr, src.address(), n, stream.raw())
    }

    /// Sets every byte to `value` (on the device).
    pub fn fill(&self, value: u8) -> Result<()> {
        self.check_writable("fill")?;
        if self.len == 0 {
            return Ok(());
        }
        self.context().bind()?;
        driver::memset_d8(self.address(), value, self.len)?;
        driver::stream_synchronize(std::ptr::null_mut())
    }

    /// Copies the contents into a `Vec<T>`. The length must be a multiple of
    /// `size_of::<T>()`.
    pub fn to_vec<T: ArrowNativeType>(&self) -> Result<Vec<T>> {
        let size = std::mem::size_of::<T>();
        if !self.len.is_multiple_of(size) {
            return Err(Error::invalid(format!(
                "buffer of {} bytes is not a whole number of {}-byte elements ({})",
                self.len,
                size,
                std::any::type_name::<T>()
            )));
        }
        let mut v = vec![T::default(); self.len / size];
        // Safety: `v` holds exactly `self.len` bytes of plain-old-data; any bit pattern is
        // a valid value of an Arrow native type.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), self.len) };
        self.copy_to_host(0, bytes)?;
        Ok(v)
    }

    /// Whether both buffers hold the same bytes. Compared on the device by a kernel
    /// (no copy of either buffer to the host); buffers of another context or device are
    /// first copied device-to-device into this one's context. Different lengths are
    /// simply unequal.
    pub fn equals(&self, other: &DeviceBuffer) -> Result<bool> {
        if self.len != other.len {
            return Ok(false);
        }
        if self.len == 0 {
            return Ok(true);
        }
        if self.context().same_as(other.context()) {
            if self.address() == other.address() {
                return Ok(true);
            }
            kernels::bytes_equal(self, other)
        } else {
            let tmp = self.context().allocate(other.len)?;
            tmp.copy_from_device(0, other)?;
            kernels::bytes_equal(self, &tmp)
        }
    }
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("device", &self.alloc.ctx.ordinal())
            .field("address", &format_args!("{:#x}", self.address()))
            .field("len", &self.len)
            .field("offset_in_parent", &self.offset)
            .field("mutable", &self.mutable)
            .finish()
    }
}

/// Views a slice of plain-old-data as bytes.
pub(crate) fn as_bytes<T: ArrowNativeType>(data: &[T]) -> &[u8] {
    // Safety: Arrow native types are plain-old-data without padding; the byte view
    // covers exactly the slice's memory and borrows it for the same lifetime.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn as_bytes_is_little_endian_layout() {
        let v = [1u32, 0x0203_0405];
        assert_eq!(as_bytes(&v), &[1, 0, 0, 0, 5, 4, 3, 2]);
    }
}
