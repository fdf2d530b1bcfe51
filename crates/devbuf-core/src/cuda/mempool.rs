//! A stream-ordered device memory pool per context, for fast allocation of buffers that
//! are never exported over IPC.
//!
//! `cuMemAlloc` costs tens of microseconds to milliseconds and synchronises; memory from
//! a `cuMemAllocFromPoolAsync` pool that keeps what is freed (release threshold:
//! unlimited) is handed out again in about a microsecond. The pool is devbuf's own
//! (`cuMemPoolCreate`), not the device's default pool, so other libraries in the
//! process keep their settings.
//!
//! Pool memory cannot be exported with the legacy IPC calls (`cuIpcGetMemHandle`
//! fails on it): such buffers report [`DeviceBuffer::is_pooled`], and IPC export
//! refuses them with a clear error. [`Context::allocate`] stays `cuMemAlloc`.

use std::sync::{Mutex, OnceLock};

use super::buffer::{DeviceBuffer, DeviceOwner, IpcExport};
use super::context::Context;
use super::driver::transfer::{self as dt, CUmemoryPool, PoolAttr};
use super::driver::{self, CUdeviceptr, CUstream};
use super::stream::Stream;
use crate::error::{Error, Result};

#[derive(Clone, Copy)]
struct RawPool(CUmemoryPool);
// Safety: a memory pool handle may be used from any thread (the driver is thread-safe).
unsafe impl Send for RawPool {}
// Safety: see `Send`.
unsafe impl Sync for RawPool {}

/// Where a context keeps its pool: created on first use, destroyed with the context.
///
/// A failed creation is not remembered: the error goes to the caller as it is (out of
/// memory, a driver error, or no pool support) and the next pooled allocation tries
/// again. (A transient failure used to disable pooled allocation in the context for
/// good, reported as "unavailable" whatever it was.)
#[derive(Default)]
pub(crate) struct DevicePoolCell {
    pool: OnceLock<RawPool>,
    /// Serialises creation, so that two first allocations make one pool.
    creating: Mutex<()>,
}

impl DevicePoolCell {
    fn get(&self, ctx: &Context) -> Result<CUmemoryPool> {
        if let Some(p) = self.pool.get() {
            return Ok(p.0);
        }
        let _one = self.creating.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = self.pool.get() {
            return Ok(p.0);
        }
        ctx.bind()?;
        if !dt::memory_pools_supported(ctx.inner.device)? {
            return Err(Error::unavailable(format!(
                "device {} does not support stream-ordered memory pools \
                 (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 0); use Context::allocate",
                ctx.ordinal()
            )));
        }
        let pool = dt::mem_pool_create(ctx.ordinal())?;
        // Keep freed memory cached for reuse (trim with Context::trim_device_pool).
        if let Err(e) =
            dt::mem_pool_set_u64(pool, PoolAttr::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, u64::MAX)
        {
            // Safety: created above, used by nobody.
            let _ = unsafe { dt::mem_pool_destroy(pool) };
            return Err(e);
        }
        // Only this thread sets the cell (under `creating`), and it was empty above.
        let _ = self.pool.set(RawPool(pool));
        Ok(pool)
    }

    fn get_if_created(&self) -> Option<CUmemoryPool> {
        self.pool.get().map(|p| p.0)
    }

    /// Destroys the pool. Called by the context's drop with the context current; every
    /// pooled allocation holds the context, so none is alive.
    pub(crate) fn destroy(&self) {
        if let Some(p) = self.get_if_created() {
            // Safety: no allocation of the pool is alive (see above) and the cell is
            // being dropped with its context, so the handle is not used again.
            let _ = unsafe { dt::mem_pool_destroy(p) };
        }
    }
}

/// Frees cached memory (the pool's and the transfer engine's idle staging) after an
/// out-of-memory error. Returns whether anything may have been released.
pub(crate) fn release_cached(ctx: &Context) -> bool {
    let mut any = ctx.trim_transfer_pool() > 0;
    if let Some(p) = ctx.inner.device_pool.get_if_created() {
        // Frees queued on streams complete first, so the trim can release them.
        let _ = ctx.bind().and_then(|_| driver::ctx_synchronize());
        any |= dt::mem_pool_trim_to(p, 0).is_ok();
    }
    let _ = ctx.bind();
    any
}

/// Sizes of a context's device memory pool ([`Context::device_pool_stats`]).
///
/// ```no_run
/// let ctx = devbuf_core::cuda::Context::new(0)?;
/// let st = ctx.device_pool_stats()?;
/// println!("pool: {} bytes reserved, {} in use", st.reserved_bytes, st.used_bytes);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DevicePoolStats {
    /// Device memory the pool holds from the driver now (in use and cached).
    pub reserved_bytes: u64,
    /// The most it ever held.
    pub reserved_high_water_bytes: u64,
    /// Memory in live pooled buffers now.
    pub used_bytes: u64,
    /// The most ever in live pooled buffers at once.
    pub used_high_water_bytes: u64,
}

/// The owner of memory from the context's pool (`cuMemAllocFromPoolAsync`): returned
/// with `cuMemFreeAsync` on `stream` (the legacy default stream when `None`). Cannot be
/// exported with `cuIpcGetMemHandle`.
struct PoolOwner {
    /// The stream the allocation and its free are ordered on.
    stream: Option<Stream>,
}

impl DeviceOwner for PoolOwner {
    fn release(&self, ctx: &Context, ptr: CUdeviceptr, _: usize) {
        if ctx.bind().is_ok() {
            let s = self
                .stream
                .as_ref()
                .map_or(std::ptr::null_mut(), |s| s.raw());
            // Safety: `ptr` came from the context's pool and this is the drop of its last
            // reference; devbuf's asynchronous copies hold a reference until they
            // complete, and work queued later on `s` cannot reach it.
            let _ = unsafe { dt::mem_free_async(ptr, s) };
        }
    }
    fn is_owned(&self) -> bool {
        true
    }
    fn is_pooled(&self) -> bool {
        true
    }
    fn ipc_export(&self) -> IpcExport {
        IpcExport::Refused(
            "the memory comes from the stream-ordered pool (Context::allocate_pooled), which \
             legacy CUDA IPC cannot share; allocate it with Context::allocate to export it",
        )
    }
}

impl Context {
    fn pooled(&self, nbytes: usize, stream: Option<&Stream>) -> Result<DeviceBuffer> {
        if let Some(s) = stream
            && !s.context().same_as(self)
        {
            return Err(Error::invalid(format!(
                "allocate_pooled: the stream belongs to another context (device {}) than this one (device {})",
                s.context().ordinal(),
                self.ordinal()
            )));
        }
        if nbytes == 0 {
            return Ok(self.empty_buffer());
        }
        let pool = self.inner.device_pool.get(self)?;
        self.bind()?;
        let raw: CUstream = stream.map_or(std::ptr::null_mut(), |s| s.raw());
        let ptr = dt::mem_alloc_from_pool_async(nbytes, pool, raw)
            .map_err(|e| self.allocation_error(nbytes, e))?;
        Ok(self.counted_buffer(
            ptr,
            nbytes,
            Box::new(PoolOwner {
                stream: stream.cloned(),
            }),
        ))
    }

    /// Allocates `nbytes` from this context's stream-ordered memory pool: after the
    /// pool has grown, an allocation costs about a microsecond instead of a `cuMemAlloc`.
    /// The memory is uninitialised. Pool memory cannot be exported over IPC
    /// ([`DeviceBuffer::is_pooled`]); freed memory stays cached in the pool until
    /// [`trim_device_pool`](Self::trim_device_pool) (or an out-of-memory error in
    /// [`allocate`](Self::allocate), which trims it).
    ///
    /// `on`: with `None`, the allocation and, when the last handle drops, the free are
    /// ordered on the legacy default stream — before devbuf's synchronous copies and
    /// kernels, which are ordered after it. With `Some(stream)`, they are ordered on
    /// `stream`: the buffer may be used by work queued on `stream` right away (other
    /// streams: after an event), and it returns to the pool in `stream`'s order when its
    /// last handle drops (the buffer keeps the stream alive). devbuf's synchronous
    /// copies are not ordered after `stream`: synchronise it first, or use the
    /// `*_async` copies on it.
    ///
    /// Errors: [`Error::CudaUnavailable`] when the device has no memory pools,
    /// [`Error::OutOfMemory`] when it is full.
    ///
    /// ```no_run
    /// use devbuf_core::cuda::{Context, Stream};
    /// let ctx = Context::new(0)?;
    /// let b = ctx.allocate_pooled(4096, None)?;
    /// assert!(b.is_pooled());
    /// b.copy_from_host(0, &[1u8; 4096])?;
    ///
    /// let s = Stream::new(&ctx)?;
    /// let b = ctx.allocate_pooled(1 << 20, Some(&s))?;
    /// let back = b.copy_to_host_async(0, vec![0u8; 1 << 20], &s)?.wait()?;
    /// # drop(back);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn allocate_pooled(&self, nbytes: usize, on: Option<&Stream>) -> Result<DeviceBuffer> {
        self.pooled(nbytes, on)
    }

    /// Sizes of the pool (all zero before the first pooled allocation).
    ///
    /// ```no_run
    /// let ctx = devbuf_core::cuda::Context::new(0)?;
    /// let b = ctx.allocate_pooled(1 << 20, None)?;
    /// assert!(ctx.device_pool_stats()?.used_bytes >= 1 << 20);
    /// # drop(b);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn device_pool_stats(&self) -> Result<DevicePoolStats> {
        let Some(p) = self.inner.device_pool.get_if_created() else {
            return Ok(DevicePoolStats::default());
        };
        self.bind()?;
        let g = |a| dt::mem_pool_get_u64(p, a);
        Ok(DevicePoolStats {
            reserved_bytes: g(PoolAttr::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
            reserved_high_water_bytes: g(PoolAttr::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)?,
            used_bytes: g(PoolAttr::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
            used_high_water_bytes: g(PoolAttr::CU_MEMPOOL_ATTR_USED_MEM_HIGH)?,
        })
    }

    /// Returns cached pool memory to the device until at most `keep_bytes` stay
    /// reserved (memory of live buffers, and frees not yet reached in stream order,
    /// stay).
    ///
    /// ```no_run
    /// let ctx = devbuf_core::cuda::Context::new(0)?;
    /// drop(ctx.allocate_pooled(64 << 20, None)?);
    /// ctx.synchronize()?;
    /// ctx.trim_device_pool(0)?;
    /// assert_eq!(ctx.device_pool_stats()?.reserved_bytes, 0);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn trim_device_pool(&self, keep_bytes: usize) -> Result<()> {
        if let Some(p) = self.inner.device_pool.get_if_created() {
            self.bind()?;
            dt::mem_pool_trim_to(p, keep_bytes)?;
        }
        Ok(())
    }
}
