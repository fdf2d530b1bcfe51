//! CUDA contexts: one shared, cached context per device, device queries and
//! allocation accounting.

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::buffer::{Allocation, DeviceBuffer, DeviceOwner, ForeignOwner, MemAlloc, NoMemory};
use super::driver::{self, CUcontext, CUdevice, DeviceAttr};
use super::host::HostBuffer;
use super::kernels::KernelCache;
use super::mempool::DevicePoolCell;
use super::transfer::EngineCell;
use crate::error::{Error, Result, check_range};

/// Whether CUDA can be used here: a driver library is present, it is new enough and it
/// reports at least one device. Never panics.
///
/// ```
/// // On a machine without a GPU this is simply `false`.
/// let _ = devbuf_core::cuda::is_available();
/// ```
pub fn is_available() -> bool {
    driver::init().map(|i| i.device_count > 0).unwrap_or(false)
}

/// Number of CUDA devices; 0 when there is no driver or no device. Never panics.
///
/// ```
/// assert_eq!(devbuf_core::cuda::device_count() > 0, devbuf_core::cuda::is_available());
/// ```
pub fn device_count() -> usize {
    driver::init().map(|i| i.device_count).unwrap_or(0)
}

/// Why CUDA is unavailable, or `None` when it is available.
///
/// ```
/// if let Some(why) = devbuf_core::cuda::unavailable_reason() {
///     println!("running on the host: {why}");
/// }
/// ```
pub fn unavailable_reason() -> Option<String> {
    match driver::init_with_device() {
        Ok(_) => None,
        Err(Error::CudaUnavailable { reason }) => Some(reason),
        Err(e) => Some(e.to_string()),
    }
}

/// The CUDA version the driver supports, as `(major, minor)` (e.g. `(13, 0)`).
///
/// Errors with [`Error::CudaUnavailable`] when there is no usable driver.
pub fn driver_version() -> Result<(u32, u32)> {
    let v = driver::init()?.version;
    Ok(((v / 1000) as u32, ((v % 1000) / 10) as u32))
}

/// Static facts about a device, read once when its context is created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceProperties {
    /// Device ordinal (0-based).
    pub ordinal: usize,
    /// Marketing name, e.g. `NVIDIA H200`.
    pub name: String,
    /// Compute capability `(major, minor)`.
    pub compute_capability: (u32, u32),
    /// Total device memory in bytes.
    pub total_memory: usize,
    /// The device's UUID (as `nvidia-smi -L` shows it, without the `GPU-` prefix).
    pub uuid: [u8; 16],
    /// PCI bus id, e.g. `0000:3B:00.0`.
    pub pci_bus_id: String,
    /// Number of streaming multiprocessors.
    pub multiprocessor_count: u32,
    /// Number of copy engines that can run transfers concurrently with kernels.
    pub async_engine_count: u32,
    /// Whether the device shares a unified address space with the host.
    pub unified_addressing: bool,
    /// Whether page-locked host memory can be mapped into the device address space.
    pub can_map_host_memory: bool,
    /// Whether the device is integrated (shares memory with the host).
    pub integrated: bool,
}

impl DeviceProperties {
    /// The UUID formatted as CUDA tools print it (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`).
    pub fn uuid_string(&self) -> String {
        format_uuid(&self.uuid)
    }
}

pub(crate) fn format_uuid(u: &[u8; 16]) -> String {
    let h = hex::encode(u);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

pub(crate) struct ContextInner {
    pub(crate) id: u64,
    pub(crate) ordinal: usize,
    pub(crate) device: CUdevice,
    pub(crate) raw: CUcontext,
    pub(crate) primary: bool,
    pub(crate) props: DeviceProperties,
    pub(crate) bytes_allocated: AtomicUsize,
    pub(crate) host_bytes_allocated: AtomicUsize,
    pub(crate) kernels: KernelCache,
    pub(crate) transfer: EngineCell,
    pub(crate) device_pool: DevicePoolCell,
}

// Safety: `raw` is a CUDA context handle; the driver API is thread-safe and the handle
// may be used from any thread. Everything else in the struct is Send + Sync.
unsafe impl Send for ContextInner {}
// Safety: see `Send`.
unsafe impl Sync for ContextInner {}
impl std::panic::RefUnwindSafe for ContextInner {}
impl std::panic::UnwindSafe for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // The transfer engine's workers and staging memory, and the memory pool, go
        // first, while the context is alive.
        self.transfer.shutdown();
        if driver::ctx_set_current(self.raw).is_ok() {
            self.device_pool.destroy();
        }
        self.kernels.unload(self.raw);
        if !self.primary {
            // Safety: a non-primary context is created by `Context::new_dedicated` and
            // owned solely by this value; every buffer holds a `Context` clone, so none
            // is alive any more.
            let _ = unsafe { driver::ctx_destroy(self.raw) };
        }
        // Primary contexts stay retained for the life of the process: they are shared
        // with every other CUDA user of the process (cupy, torch, the runtime API).
    }
}

/// A CUDA context on one device.
///
/// [`Context::new`] returns the device's *primary* context — the one the CUDA runtime,
/// cupy and PyTorch use — cached so that every call for the same ordinal returns the same
/// context. Cloning is cheap (an `Arc`). Every buffer keeps its context alive.
///
/// ```no_run
/// use devbuf_core::cuda::Context;
/// let ctx = Context::new(0)?;
/// println!("{} (sm_{}{})", ctx.properties().name, ctx.properties().compute_capability.0, ctx.properties().compute_capability.1);
/// let buf = ctx.allocate(1 << 20)?;
/// assert_eq!(ctx.bytes_allocated(), 1 << 20);
/// drop(buf);
/// assert_eq!(ctx.bytes_allocated(), 0);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn primary_cache() -> &'static Mutex<Vec<Option<Context>>> {
    static CACHE: OnceLock<Mutex<Vec<Option<Context>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(Vec::new()))
}

fn read_properties(ordinal: usize, dev: CUdevice) -> Result<DeviceProperties> {
    let attr = |a| driver::device_attribute(dev, a);
    Ok(DeviceProperties {
        ordinal,
        name: driver::device_name(dev)?,
        compute_capability: (
            attr(DeviceAttr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? as u32,
            attr(DeviceAttr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)? as u32,
        ),
        total_memory: driver::device_total_mem(dev)?,
        uuid: driver::device_uuid(dev)?,
        pci_bus_id: driver::device_pci_bus_id(dev)?,
        multiprocessor_count: attr(DeviceAttr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
        async_engine_count: attr(DeviceAttr::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT)? as u32,
        unified_addressing: attr(DeviceAttr::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)? != 0,
        can_map_host_memory: attr(DeviceAttr::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)? != 0,
        integrated: attr(DeviceAttr::CU_DEVICE_ATTRIBUTE_INTEGRATED)? != 0,
    })
}

fn check_ordinal(ordinal: usize) -> Result<CUdevice> {
    let info = driver::init_with_device()?;
    if ordinal >= info.device_count {
        return Err(Error::invalid(format!(
            "device ordinal {ordinal} does not exist: this machine has {} CUDA device(s), valid ordinals are 0..={}",
            info.device_count,
            info.device_count - 1
        )));
    }
    driver::device_get(ordinal)
}

impl Context {
    /// The shared (primary) context of device `ordinal`, created on first use and cached.
    ///
    /// Errors: [`Error::CudaUnavailable`] without a usable driver or device;
    /// [`Error::InvalidArgument`] naming the valid range for a bad ordinal.
    pub fn new(ordinal: usize) -> Result<Context> {
        let dev = check_ordinal(ordinal)?;
        let mut cache = primary_cache()
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if cache.len() <= ordinal {
            cache.resize(ordinal + 1, None);
        }
        if let Some(ctx) = &cache[ordinal] {
            return Ok(ctx.clone());
        }
        let raw = driver::primary_ctx_retain(dev)?;
        let ctx = Context::from_parts(ordinal, dev, raw, true)?;
        cache[ordinal] = Some(ctx.clone());
        Ok(ctx)
    }

    /// A new context of its own on device `ordinal` (not the primary context, not cached).
    ///
    /// Memory allocated in it is a different context's memory: copies between it and
    /// buffers of [`Context::new`] go through `cuMemcpyPeer`. The context is destroyed when
    /// the last clone and the last buffer allocated in it drop. Most programs want
    /// [`Context::new`]; this exists for isolation and for testing cross-context paths.
    pub fn new_dedicated(ordinal: usize) -> Result<Context> {
        let dev = check_ordinal(ordinal)?;
        let raw = driver::ctx_create(dev)?;
        // cuCtxCreate pushed the new context; restore the thread's previous one.
        let made =
            driver::ctx_pop_current().and_then(|_| Context::from_parts(ordinal, dev, raw, false));
        if made.is_err() {
            // Safety: `raw` was just created and is not shared with anyone (a failed
            // pop included: nothing else refers to it).
            let _ = unsafe { driver::ctx_destroy(raw) };
        }
        made
    }

    fn from_parts(ordinal: usize, dev: CUdevice, raw: CUcontext, primary: bool) -> Result<Context> {
        let props = read_properties(ordinal, dev)?;
        Ok(Context {
            inner: Arc::new(ContextInner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                ordinal,
                device: dev,
                raw,
                primary,
                props,
                bytes_allocated: AtomicUsize::new(0),
                host_bytes_allocated: AtomicUsize::new(0),
                kernels: KernelCache::default(),
                transfer: EngineCell::default(),
                device_pool: DevicePoolCell::default(),
            }),
        })
    }

    /// Makes this context current on the calling thread (cheap; done by every method).
    pub(crate) fn bind(&self) -> Result<()> {
        driver::ctx_set_current(self.inner.raw)
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.inner.ordinal
    }

    /// Free memory of the device in bytes, as the driver reports it now.
    pub fn free_memory(&self) -> Result<usize> {
        self.bind()?;
        Ok(driver::mem_get_info()?.0)
    }

    /// All static properties of the device.
    pub fn properties(&self) -> &DeviceProperties {
        &self.inner.props
    }

    /// Whether this is the device's primary context (from [`Context::new`]).
    pub fn is_primary(&self) -> bool {
        self.inner.primary
    }

    /// The raw `CUcontext` handle, for interop with other CUDA code. devbuf keeps
    /// ownership; do not destroy it.
    pub fn as_raw(&self) -> *mut std::ffi::c_void {
        self.inner.raw.cast()
    }

    /// Bytes of device memory currently allocated through this context by devbuf
    /// (live [`DeviceBuffer`] allocations; views of foreign memory are not counted).
    pub fn bytes_allocated(&self) -> usize {
        self.inner.bytes_allocated.load(Ordering::SeqCst)
    }

    /// Bytes of page-locked host memory currently allocated through this context.
    pub fn host_bytes_allocated(&self) -> usize {
        self.inner.host_bytes_allocated.load(Ordering::SeqCst)
    }

    /// Blocks until all work queued in this context has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        driver::ctx_synchronize()
    }

    /// True when both handles are the same context (what `==` compares).
    pub(crate) fn same_as(&self, other: &Context) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Turns direct access between this context's device and `peer`'s (NVLink or PCIe
    /// peer-to-peer) on or off, in both directions, and returns whether it is on now.
    ///
    /// * `true`: lets each device read and write the other's memory directly, where the
    ///   hardware allows (`false` back when it does not). Copies between devices work
    ///   either way (the driver stages them through host memory otherwise); devbuf
    ///   turns access on by itself before the first copy between two devices, unless
    ///   the pair was turned off. Idempotent and cheap after the first call for a pair.
    /// * `false`: turns access off and keeps devbuf from turning it on by itself:
    ///   copies between the two (`copy_from_device`, `copy_from_device_on`) then go
    ///   through the driver's staging in host memory, until `set_peer_access(peer,
    ///   true)`. For measuring both paths, and for systems where peer transfers are
    ///   unreliable. A pair whose access was never on is fine; returns `false`.
    ///
    /// Two contexts of one device always share memory: `true` either way.
    ///
    /// ```no_run
    /// use devbuf_core::cuda::{device_count, Context};
    /// if device_count() >= 2 {
    ///     let (d0, d1) = (Context::new(0)?, Context::new(1)?);
    ///     println!("direct access between devices 0 and 1: {}", d0.set_peer_access(&d1, true)?);
    ///     assert!(!d0.set_peer_access(&d1, false)?);
    ///     let a = d0.allocate(1 << 20)?;
    ///     let b = d1.allocate(1 << 20)?;
    ///     b.copy_from_device(0, &a)?; // staged through host memory by the driver
    /// }
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn set_peer_access(&self, peer: &Context, enabled: bool) -> Result<bool> {
        if enabled {
            return self.peer_access(peer, true);
        }
        if self.ordinal() == peer.ordinal() {
            return Ok(true);
        }
        let mut map = peer_states().lock().unwrap_or_else(|p| p.into_inner());
        let key = (self.inner.id, peer.inner.id);
        if map.get(&key) == Some(&PeerState::On) {
            self.bind()?;
            driver::ctx_disable_peer_access(peer.inner.raw)?;
            peer.bind()?;
            driver::ctx_disable_peer_access(self.inner.raw)?;
        }
        map.insert(key, PeerState::Off);
        map.insert((key.1, key.0), PeerState::Off);
        Ok(false)
    }

    /// Direct access to `peer` for a copy: on where the hardware allows, unless the
    /// pair was turned off by [`set_peer_access`](Self::set_peer_access)`(peer, false)`.
    pub(crate) fn peer_access_for_copy(&self, peer: &Context) -> Result<bool> {
        self.peer_access(peer, false)
    }

    fn peer_access(&self, peer: &Context, explicit: bool) -> Result<bool> {
        if self.ordinal() == peer.ordinal() {
            return Ok(true);
        }
        let key = (self.inner.id, peer.inner.id);
        // One lock over the check and the change: two threads turning a pair on (or
        // one on and one off) cannot interleave their driver calls.
        let mut map = peer_states().lock().unwrap_or_else(|p| p.into_inner());
        match map.get(&key) {
            Some(PeerState::On) => return Ok(true),
            Some(PeerState::Unavailable) => return Ok(false),
            Some(PeerState::Off) if !explicit => return Ok(false),
            _ => {}
        }
        let on = driver::device_can_access_peer(self.inner.device, peer.inner.device)?
            && driver::device_can_access_peer(peer.inner.device, self.inner.device)?;
        if on {
            self.bind()?;
            driver::ctx_enable_peer_access(peer.inner.raw)?;
            peer.bind()?;
            driver::ctx_enable_peer_access(self.inner.raw)?;
        }
        let state = if on {
            PeerState::On
        } else {
            PeerState::Unavailable
        };
        map.insert(key, state);
        map.insert((key.1, key.0), state);
        Ok(on)
    }

    /// Allocates `nbytes` of device memory with `cuMemAlloc` (so it can be exported over
    /// IPC). The contents are uninitialised device memory (never readable as host
    /// memory). Zero bytes is allowed and allocates nothing.
    ///
    /// Errors: [`Error::OutOfMemory`] with the free and total sizes when the device is
    /// full; the process carries on.
    pub fn allocate(&self, nbytes: usize) -> Result<DeviceBuffer> {
        if nbytes == 0 {
            return Ok(self.empty_buffer());
        }
        self.bind()?;
        let mut first = driver::mem_alloc(nbytes);
        if matches!(&first, Err(e) if driver::is_oom(e)) && super::mempool::release_cached(self) {
            // Cached pool or staging memory was released: try once more.
            first = driver::mem_alloc(nbytes);
        }
        let ptr = first.map_err(|e| self.allocation_error(nbytes, e))?;
        Ok(self.counted_buffer(ptr, nbytes, Box::new(MemAlloc)))
    }

    /// A buffer of no bytes (nothing allocated).
    pub(crate) fn empty_buffer(&self) -> DeviceBuffer {
        DeviceBuffer::from_allocation(Arc::new(Allocation::new(self, 0, 0, Box::new(NoMemory))))
    }

    /// The error of a failed allocation of `nbytes`: the driver's out-of-memory error
    /// becomes [`Error::OutOfMemory`] with the sizes the driver reports now (the
    /// context must be current); anything else is returned as it is.
    pub(crate) fn allocation_error(&self, nbytes: usize, e: Error) -> Error {
        if !driver::is_oom(&e) {
            return e;
        }
        let (free, total) = driver::mem_get_info().unwrap_or((0, self.properties().total_memory));
        Error::OutOfMemory {
            device: self.ordinal(),
            requested: nbytes,
            free,
            total,
        }
    }

    /// Wraps `nbytes > 0` just allocated at `ptr` (owned or pooled), counting them in
    /// [`bytes_allocated`](Self::bytes_allocated) until the allocation drops (after
    /// `owner` released the memory).
    pub(crate) fn counted_buffer(
        &self,
        ptr: u64,
        nbytes: usize,
        owner: Box<dyn DeviceOwner>,
    ) -> DeviceBuffer {
        self.inner
            .bytes_allocated
            .fetch_add(nbytes, Ordering::SeqCst);
        let mut alloc = Allocation::new(self, ptr, nbytes, owner);
        alloc.counted = true;
        DeviceBuffer::from_allocation(Arc::new(alloc))
    }

    /// Allocates `nbytes` of page-locked host memory (portable and mapped into the
    /// device address space), zero-filled. See [`HostBuffer`].
    pub fn allocate_host(&self, nbytes: usize) -> Result<HostBuffer> {
        let mut h = HostBuffer::alloc_uninit(self, nbytes)?;
        h.zero_fill();
        Ok(h)
    }

    /// Wraps device memory that devbuf did not allocate (from cudarc, cupy, torch, a
    /// C library) as a [`DeviceBuffer`] without taking ownership.
    ///
    /// `owner` is kept alive until the last clone or slice of the returned buffer drops;
    /// pass whatever keeps the memory allocated (e.g. the `CudaSlice` it came from).
    /// The range is checked with the driver: `address..address+len` must be device
    /// memory of this context's device, inside one allocation. `len == 0` accepts any
    /// address and touches nothing.
    ///
    /// ```no_run
    /// use devbuf_core::cuda::Context;
    /// let ctx = Context::new(0)?;
    /// let mine = ctx.allocate(256)?;
    /// // Pretend `mine` came from another library: view bytes 16..80 of it.
    /// let view = ctx.view(mine.address() + 16, 64, mine.clone())?;
    /// assert_eq!(view.address(), mine.address() + 16);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn view<O: Any + Send + Sync>(
        &self,
        address: u64,
        len: usize,
        owner: O,
    ) -> Result<DeviceBuffer> {
        if len > 0 {
            self.bind()?;
            let info = driver::pointer_info(address).map_err(|e| {
                Error::invalid(format!(
                    "address {address:#x} is not device memory known to the CUDA driver ({e})"
                ))
            })?;
            if !info.is_device_memory {
                return Err(Error::invalid(format!(
                    "address {address:#x} is not device memory (it is host or managed memory)"
                )));
            }
            if info.device_ordinal >= 0 && info.device_ordinal as usize != self.ordinal() {
                return Err(Error::invalid(format!(
                    "address {address:#x} belongs to device {}, not to this context's device {}",
                    info.device_ordinal,
                    self.ordinal()
                )));
            }
            let off = (address - info.range_start) as usize;
            check_range("view", off, len, info.range_size)?;
        }
        Ok(DeviceBuffer::from_allocation(Arc::new(Allocation::new(
            self,
            address,
            len,
            Box::new(ForeignOwner(Box::new(owner))),
        ))))
    }

    /// Number of milliseconds between two points, measured with CUDA events around
    /// `f` on the legacy default stream (used by the benchmarks).
    #[doc(hidden)]
    pub fn time_ms<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<(R, f64)> {
        self.bind()?;
        let start = driver::event_create(true)?;
        let end = match driver::event_create(true) {
            Ok(e) => e,
            Err(e) => {
                // Safety: created above, not used elsewhere.
                let _ = unsafe { driver::event_destroy(start) };
                return Err(e);
            }
        };
        let run = || -> Result<(R, f64)> {
            driver::event_record(start, std::ptr::null_mut())?;
            let r = f()?;
            self.bind()?;
            driver::event_record(end, std::ptr::null_mut())?;
            driver::event_synchronize(end)?;
            Ok((r, driver::event_elapsed_ms(start, end)? as f64))
        };
        let out = run();
        // Safety: both events were created above and are not used after this.
        unsafe {
            let _ = driver::event_destroy(start);
            let _ = driver::event_destroy(end);
        }
        out
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("ordinal", &self.inner.ordinal)
            .field("device", &self.inner.props.name)
            .field("primary", &self.inner.primary)
            .finish()
    }
}

/// True when both handles are the same context (clones of one `Context`, or
/// `Context::new` twice for one device's primary context).
impl PartialEq for Context {
    fn eq(&self, other: &Self) -> bool {
        self.same_as(other)
    }
}
impl Eq for Context {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_format() {
        let u = [
            0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
            0xcd, 0xef,
        ];
        assert_eq!(format_uuid(&u), "12345678-9abc-def0-0123-456789abcdef");
    }

    #[test]
    fn queries_never_panic_without_gpu() {
        let n = device_count();
        assert_eq!(n > 0, is_available());
        if n == 0 {
            let e = Context::new(0).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::CudaUnavailable, "{e}");
            assert!(unavailable_reason().is_some());
        }
    }
}

/// Direct access between two contexts (by their ids), as devbuf last set it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PeerState {
    /// On in both directions.
    On,
    /// The hardware does not allow it.
    Unavailable,
    /// Turned off by [`Context::set_peer_access`]`(peer, false)`.
    Off,
}

fn peer_states() -> &'static Mutex<HashMap<(u64, u64), PeerState>> {
    static STATES: OnceLock<Mutex<HashMap<(u64, u64), PeerState>>> = OnceLock::new();
    STATES.get_or_init(|| Mutex::new(HashMap::new()))
}
