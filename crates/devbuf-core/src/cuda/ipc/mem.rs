//! [`IpcMemHandle`]: the handle of a device buffer (any slice) for another process, its
//! byte layout, and the export / open methods on [`DeviceBuffer`] and [`Context`].

use super::*;

/// A handle to (a slice of) device memory that another process can open without a copy.
///
/// Made by [`DeviceBuffer::export_ipc`]; opened by [`Context::open_ipc`] or
/// [`IpcMemHandle::open`]. It records the CUDA handle of the allocation, the slice's
/// offset and length within it (so the consumer sees exactly the slice), the device
/// (UUID and ordinal) and the exporting process. It serializes to a fixed, versioned
/// layout (`Vec::<u8>::from(&handle)` and `IpcMemHandle::try_from(&bytes[..])`,
/// documented in the [module docs](crate::ipc)), and
/// converts to and from the raw 64-byte `CUipcMemHandle` that cupy, torch and C++
/// programs exchange ([`raw_cuda`](Self::raw_cuda), [`from_raw_cuda`](Self::from_raw_cuda)).
///
/// ```no_run
/// use devbuf_core::cuda::{Context, DeviceBuffer};
/// use devbuf_core::ipc::IpcMemHandle;
/// // Producer
/// let ctx = Context::new(0)?;
/// let data = DeviceBuffer::from_slice(&ctx, &[1u32, 2, 3, 4])?;
/// let handle = data.slice(4, 8)?.export_ipc()?;
/// let text = handle.to_string(); // send this to the consumer; keep `data` alive
///
/// // Consumer (another process)
/// let handle = text.parse::<IpcMemHandle>()?;
/// let view = handle.open()?; // maps the producer's memory: bytes 4..12 of `data`
/// assert_eq!(view.to_vec::<u32>()?, vec![2, 3]);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IpcMemHandle {
    pub(super) raw: [u8; RAW],
    pub(super) offset: u64,
    pub(super) len: u64,
    pub(super) alloc_size: u64,
    pub(super) device: Option<DeviceId>,
    pub(super) read_only: bool,
    pub(super) pid: u32,
    pub(super) token: u64,
}

impl IpcMemHandle {
    /// The size of the handle's bytes (`Vec::<u8>::from(&handle)`).
    pub const ENCODED_LEN: usize = MEM_SIZE;

    pub(super) fn empty(device: Option<DeviceId>, read_only: bool) -> IpcMemHandle {
        IpcMemHandle {
            raw: [0; RAW],
            offset: 0,
            len: 0,
            alloc_size: 0,
            device,
            read_only,
            pid: std::process::id(),
            token: handle_layout::process_token(),
        }
    }

    /// A handle from a raw 64-byte `CUipcMemHandle` (`cudaIpcMemHandle_t`), e.g. the
    /// bytes of cupy's `cupy.cuda.runtime.ipcGetMemHandle(ptr)` or torch's storage
    /// handle, with the slice of the allocation to open: `offset` bytes from the
    /// allocation's start, `len` bytes long.
    ///
    /// `device_uuid` records the device the raw handle belongs to (its UUID, as
    /// [`DeviceProperties::uuid`](crate::cuda::DeviceProperties::uuid) gives it), so
    /// that opening it on another device is a clear error and [`open`](Self::open)
    /// picks the right device. With `None` [`Context::open_ipc`] opens it on any
    /// context (CUDA checks the device) and [`open`](Self::open) uses device 0. `len == 0`
    /// gives the empty handle (`offset` is then ignored). The range is checked against
    /// the allocation's real size when the handle is opened.
    ///
    /// ```
    /// use devbuf_core::ipc::IpcMemHandle;
    /// let raw = [7u8; 64]; // e.g. from cupy.cuda.runtime.ipcGetMemHandle
    /// let h = IpcMemHandle::from_raw_cuda(&raw, 256, 1024, None)?;
    /// assert_eq!((h.offset(), h.len()), (256, 1024));
    /// assert_eq!(h.raw_cuda(), raw);
    /// assert_eq!(IpcMemHandle::try_from(&Vec::from(&h)[..])?, h);
    /// assert!(IpcMemHandle::from_raw_cuda(&raw[..10], 0, 1, None).is_err());
    /// let on = IpcMemHandle::from_raw_cuda(&raw, 256, 1024, Some([3; 16]))?; // its device
    /// assert_eq!(on.device_uuid(), Some([3; 16]));
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn from_raw_cuda(
        raw: &[u8],
        offset: usize,
        len: usize,
        device_uuid: Option<[u8; 16]>,
    ) -> Result<IpcMemHandle> {
        let device = device_uuid.map(|uuid| DeviceId { uuid, ordinal: 0 });
        let raw: [u8; RAW] = raw.try_into().map_err(|_| {
            Error::invalid(format!(
                "a CUipcMemHandle is exactly {RAW} bytes, got {}",
                raw.len()
            ))
        })?;
        if offset.checked_add(len).is_none() {
            return Err(Error::out_of_bounds("IPC handle", offset, len, usize::MAX));
        }
        if len == 0 {
            return Ok(IpcMemHandle {
                pid: 0,
                token: 0,
                ..IpcMemHandle::empty(device, false)
            });
        }
        if raw == [0; RAW] {
            return Err(Error::invalid(
                "an all-zero CUipcMemHandle names no allocation",
            ));
        }
        Ok(IpcMemHandle {
            raw,
            offset: offset as u64,
            len: len as u64,
            alloc_size: 0,
            device,
            read_only: false,
            pid: 0,
            token: 0,
        })
    }

    /// Builds a handle from all of its fields, for tests and tools; prefer
    /// [`DeviceBuffer::export_ipc`] and [`from_raw_cuda`](Self::from_raw_cuda).
    /// Inconsistent fields are [`Error::Malformed`] as in `IpcMemHandle::try_from(&[u8])`.
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub fn from_parts(
        raw: [u8; 64],
        offset: u64,
        len: u64,
        allocation_size: u64,
        device: Option<([u8; 16], u32)>,
        read_only: bool,
        exporter_pid: u32,
        exporter_token: u64,
    ) -> Result<IpcMemHandle> {
        let h = IpcMemHandle {
            raw,
            offset,
            len,
            alloc_size: allocation_size,
            device: device.map(|(uuid, ordinal)| DeviceId { uuid, ordinal }),
            read_only,
            pid: exporter_pid,
            token: exporter_token,
        };
        h.validate()?;
        Ok(h)
    }

    pub(super) fn validate(&self) -> Result<()> {
        let end = self.offset.checked_add(self.len).ok_or_else(|| {
            Error::Malformed(format!(
                "{MEM_WHAT}: offset {} + length {} overflows",
                self.offset, self.len
            ))
        })?;
        if usize::try_from(end).is_err() {
            return Err(Error::Malformed(format!(
                "{MEM_WHAT}: range end {end} does not fit this machine's address size"
            )));
        }
        if self.alloc_size != 0 && end > self.alloc_size {
            return Err(Error::Malformed(format!(
                "{MEM_WHAT} is inconsistent: offset {} + length {} = {end} exceeds the allocation size {} it records",
                self.offset, self.len, self.alloc_size
            )));
        }
        if self.len == 0 {
            if self.raw != [0; RAW] || self.offset != 0 || self.alloc_size != 0 {
                return Err(Error::Malformed(format!(
                    "{MEM_WHAT} of length 0 must be the empty handle (no CUDA handle, offset 0, allocation size 0)"
                )));
            }
        } else if self.raw == [0; RAW] {
            return Err(Error::Malformed(format!(
                "{MEM_WHAT} of {} bytes has an all-zero CUDA handle",
                self.len
            )));
        }
        Ok(())
    }

    /// The fixed layout described in the [module docs](crate::ipc).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut flags = device_flag(self.device);
        if self.read_only {
            flags |= FLAG_READ_ONLY;
        }
        let mut w = handle_layout::Writer::default();
        w.bytes(MEM_MAGIC)
            .u16(VERSION)
            .u16(MEM_SIZE as u16)
            .u32(flags)
            .bytes(&self.raw)
            .u64(self.offset)
            .u64(self.len)
            .u64(self.alloc_size);
        write_origin(&mut w, self.device, self.pid, self.token);
        w.finish_with_checksum()
    }

    /// Parses [`encode`](Self::encode)'s output (see the `TryFrom<&[u8]>` impl).
    pub(crate) fn decode(bytes: &[u8]) -> Result<IpcMemHandle> {
        let (mut r, flags) = handle_layout::open_layout(
            bytes,
            MEM_WHAT,
            MEM_MAGIC,
            VERSION,
            MEM_SIZE,
            &[(EVENT_MAGIC, EVENT_WHAT), (HOST_MAGIC, HOST_WHAT)],
        )?;
        if flags & !(FLAG_DEVICE_KNOWN | FLAG_READ_ONLY) != 0 {
            return Err(Error::Malformed(format!(
                "{MEM_WHAT} has unknown flag bits {flags:#x} (known: 0x3)"
            )));
        }
        let raw = r.array::<RAW>()?;
        let offset = r.u64()?;
        let len = r.u64()?;
        let alloc_size = r.u64()?;
        let (device, pid, token) = read_origin(&mut r, flags, MEM_WHAT)?;
        let h = IpcMemHandle {
            raw,
            offset,
            len,
            alloc_size,
            device,
            read_only: flags & FLAG_READ_ONLY != 0,
            pid,
            token,
        };
        h.validate()?;
        Ok(h)
    }

    /// The raw 64-byte `CUipcMemHandle` of the allocation (all zero for the empty
    /// handle). Hand it with [`offset`](Self::offset) and [`len`](Self::len) to other
    /// CUDA programs: `cudaIpcOpenMemHandle` maps the allocation's start.
    pub fn raw_cuda(&self) -> [u8; 64] {
        self.raw
    }

    /// Byte offset of the slice from the start of the allocation.
    pub fn offset(&self) -> usize {
        self.offset as usize
    }

    /// Length of the slice in bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True for the empty handle (a zero-length buffer).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The size of the whole exported allocation, when known.
    pub fn allocation_size(&self) -> Option<usize> {
        (self.alloc_size != 0).then_some(self.alloc_size as usize)
    }

    /// The UUID of the device the memory lives on, when known.
    pub fn device_uuid(&self) -> Option<[u8; 16]> {
        self.device.map(|d| d.uuid)
    }

    /// The device's ordinal in the exporting process, when known (it may differ here).
    pub fn device_ordinal(&self) -> Option<usize> {
        self.device.map(|d| d.ordinal as usize)
    }

    /// Whether the exported buffer was read-only; opened buffers are read-only then.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The exporting process's id, when known.
    pub fn exporter_pid(&self) -> Option<u32> {
        (self.pid != 0).then_some(self.pid)
    }

    /// Whether this process exported the handle.
    pub fn is_from_this_process(&self) -> bool {
        self.token != 0 && self.token == handle_layout::process_token()
    }

    /// Opens the handle on the device it belongs to (found by UUID among this process's
    /// devices; device 0 when the handle does not record one). See [`Context::open_ipc`].
    pub fn open(&self) -> Result<DeviceBuffer> {
        Context::new(local_ordinal(self.device)?)?.open_ipc(self)
    }
}

/// The handle's bytes: the fixed, versioned layout described in the
/// [module docs](crate::ipc) ([`IpcMemHandle::ENCODED_LEN`] bytes).
///
/// ```
/// use devbuf_core::ipc::IpcMemHandle;
/// let h = IpcMemHandle::from_raw_cuda(&[7u8; 64], 0, 16, None)?;
/// let bytes = Vec::<u8>::from(&h);
/// assert_eq!(bytes.len(), IpcMemHandle::ENCODED_LEN);
/// assert_eq!(IpcMemHandle::try_from(&bytes[..])?, h);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
impl From<&IpcMemHandle> for Vec<u8> {
    fn from(handle: &IpcMemHandle) -> Vec<u8> {
        handle.encode()
    }
}

/// Parses the handle's bytes (`Vec::<u8>::from(&handle)`). Anything else — truncated
/// or trailing bytes, another magic, another version, a bad checksum, unknown flags, a
/// range that overflows or exceeds the recorded allocation size — is
/// [`Error::Malformed`] saying what was wrong. Never panics.
impl TryFrom<&[u8]> for IpcMemHandle {
    type Error = Error;

    fn try_from(bytes: &[u8]) -> Result<IpcMemHandle> {
        IpcMemHandle::decode(bytes)
    }
}

/// Lowercase hexadecimal of the handle's bytes (`Vec::<u8>::from(&handle)`): text to
/// hand to another process.
impl fmt::Display for IpcMemHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&handle_layout::hex(&self.encode()))
    }
}

/// Parses the [`Display`](fmt::Display) text (surrounding whitespace ignored):
/// `text.parse::<IpcMemHandle>()`.
impl std::str::FromStr for IpcMemHandle {
    type Err = Error;

    fn from_str(text: &str) -> Result<IpcMemHandle> {
        Self::decode(&handle_layout::from_hex(text, MEM_WHAT)?)
    }
}

impl fmt::Debug for IpcMemHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("IpcMemHandle");
        d.field("offset", &self.offset).field("len", &self.len);
        if self.alloc_size != 0 {
            d.field("allocation_size", &self.alloc_size);
        }
        debug_device(&mut d, self.device);
        d.field("read_only", &self.read_only)
            .field("exporter_pid", &self.pid)
            .field(
                "raw",
                &format_args!("{}", handle_layout::hex(&self.raw[..8])),
            )
            .finish()
    }
}

impl DeviceBuffer {
    /// Exports this buffer (any slice of an allocation) for another process: see
    /// [`IpcMemHandle`] and the lifetime contract in the [IPC module docs](crate::ipc).
    ///
    /// The handle records the slice's offset within its allocation and its length, so
    /// the consumer sees exactly this slice. Memory from [`Context::allocate`] is always
    /// exportable; a [`Context::view`] of foreign memory is exportable when it is
    /// `cuMemAlloc` memory (the driver is asked; stream-ordered pool, `cuMemCreate` and
    /// managed memory are refused with an error saying so); a buffer opened from a
    /// handle re-exports that handle (a third process can open it). A zero-length
    /// buffer gives the empty handle.
    ///
    /// Keep this buffer (or any clone of its allocation) alive until every consumer has
    /// dropped what it opened. Exporting does not extend the allocation's life and does
    /// not leak it.
    ///
    /// ```no_run
    /// use devbuf_core::cuda::{Context, DeviceBuffer};
    /// let ctx = Context::new(0)?;
    /// let buf = DeviceBuffer::from_slice(&ctx, &[0u8; 1000])?;
    /// let h = buf.slice(3, 500)?.export_ipc()?;
    /// assert_eq!((h.offset(), h.len(), h.allocation_size()), (3, 500, Some(1000)));
    /// // In the exporting process, opening gives back the same memory.
    /// assert_eq!(ctx.open_ipc(&h)?.address(), buf.address() + 3);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn export_ipc(&self) -> Result<IpcMemHandle> {
        let ctx = self.context();
        let dev = Some(device_id(ctx));
        if self.is_empty() {
            return Ok(IpcMemHandle::empty(dev, !self.is_mutable()));
        }
        let alloc = self.allocation();
        let (raw, base, size) = match alloc.owner.ipc_export() {
            IpcExport::Allocation => {
                if let Some(raw) = exported_raw(alloc) {
                    (raw, alloc.ptr, alloc.size)
                } else {
                    ctx.bind()?;
                    let raw = dipc::ipc_get_mem_handle(alloc.ptr).map_err(|e| {
                        e.explain_driver(
                            "the driver refused to export cuMemAlloc memory (legacy CUDA IPC is \
                         not supported on every platform, e.g. WSL)",
                        )
                    })?;
                    register_export(raw, alloc, alloc.ptr);
                    (raw, alloc.ptr, alloc.size)
                }
            }
            IpcExport::Handle(raw) => (raw, alloc.ptr, alloc.size),
            IpcExport::AskDriver => {
                ctx.bind()?;
                let info = driver::pointer_info(alloc.ptr)?;
                if !info.is_device_memory {
                    return Err(Error::invalid(format!(
                        "cannot export memory at {:#x} over CUDA IPC: it is not device memory",
                        alloc.ptr
                    )));
                }
                if !dipc::pointer_ipc_capable(alloc.ptr)? {
                    return Err(Error::invalid(format!(
                        "cannot export memory at {:#x} over legacy CUDA IPC: it does not come \
                         from cuMemAlloc (stream-ordered pool, cuMemCreate or managed memory); \
                         copy it into a buffer from Context::allocate and export that",
                        alloc.ptr
                    )));
                }
                let raw = match exported_raw(alloc) {
                    Some(raw) => raw,
                    None => dipc::ipc_get_mem_handle(info.range_start)?,
                };
                register_export(raw, alloc, info.range_start);
                (raw, info.range_start, info.range_size)
            }
            IpcExport::Refused(why) => {
                return Err(Error::invalid(format!(
                    "cannot export {} bytes at {:#x} over CUDA IPC: {why}",
                    self.len(),
                    self.address()
                )));
            }
        };
        let offset = self.address() - base;
        let h = IpcMemHandle {
            raw,
            offset,
            len: self.len() as u64,
            alloc_size: size as u64,
            device: dev,
            read_only: !self.is_mutable(),
            pid: std::process::id(),
            token: handle_layout::process_token(),
        };
        h.validate()?;
        Ok(h)
    }
}

impl Context {
    /// Opens an [`IpcMemHandle`] from another process: maps the exporter's memory into
    /// this process (`cuIpcOpenMemHandle` with lazy peer access) and returns exactly the
    /// exported slice, without copying. The mapping is closed when the last clone or
    /// slice of the returned buffer drops.
    ///
    /// * A handle that records another device is an [`Error::InvalidArgument`] naming
    ///   both devices (open it with [`IpcMemHandle::open`], which finds the device).
    /// * A handle this process exported returns a zero-copy view of the original
    ///   allocation (CUDA refuses to open it); if that allocation has been freed, the
    ///   error says so.
    /// * A handle whose exporter freed the memory or exited is the driver's error, with
    ///   that explanation added.
    /// * A range beyond the mapped allocation is [`Error::OutOfBounds`] (nothing stays
    ///   mapped).
    /// * The empty handle gives an empty buffer without calling the driver.
    ///
    /// Opening several handles of one allocation shares one mapping (one per device
    /// and process, as CUDA requires); the buffer's context is then the context that
    /// mapped it first. The buffer is writable unless the exported buffer was read-only.
    pub fn open_ipc(&self, handle: &IpcMemHandle) -> Result<DeviceBuffer> {
        handle.validate()?;
        check_device(handle.device, self, "the IPC memory handle")?;
        let mutable = !handle.read_only;
        if handle.len == 0 {
            let b = self.allocate(0)?;
            return Ok(if mutable { b } else { b.read_only() });
        }
        if let Some(b) = lookup_export(handle, self) {
            return Ok(b);
        }
        if handle.is_from_this_process() {
            return Err(Error::invalid(format!(
                "this IPC memory handle was exported by this process (pid {}), and the exported \
                 allocation has been freed since (or lies elsewhere): the handle is dead. CUDA \
                 cannot open a handle in the process that exported it; devbuf returns a view of \
                 the exported buffer while it is alive",
                std::process::id()
            )));
        }
        let uuid = self.properties().uuid;
        let key = (handle.raw, uuid);
        loop {
            let mut reg = registry();
            match reg.opened.get(&key).map(Weak::upgrade) {
                Some(Some(alloc)) => {
                    drop(reg);
                    return slice_mapping(alloc, handle, mutable);
                }
                Some(None) => {
                    // The previous mapping's last owner is closing it right now (its drop
                    // waits for this lock): let it finish, then map anew.
                    drop(reg);
                    std::thread::yield_now();
                    continue;
                }
                None => {}
            }
            self.bind()?;
            let base = dipc::ipc_open_mem_handle(&handle.raw).map_err(|e| {
                e.explain_driver(format!(
                    "could not map the IPC memory handle{}: the exporting process may have \
                         freed the memory or exited, the handle may belong to another device or \
                         machine, or it may have been exported in this very process by code other \
                         than devbuf (CUDA refuses those)",
                    match handle.pid {
                        0 => String::new(),
                        p => format!(" exported by process {p}"),
                    }
                ))
            })?;
            let size = match driver::pointer_info(base) {
                Ok(info) => info.range_size,
                Err(_) if handle.alloc_size != 0 => handle.alloc_size as usize,
                Err(e) => {
                    // Safety: `base` was just mapped above and nothing else refers to it.
                    let _ = unsafe { dipc::ipc_close_mem_handle(base) };
                    return Err(e.explain_driver(
                        "could not learn the size of the mapped allocation to check the handle's range",
                    ));
                }
            };
            let alloc = Arc::new(Allocation::new(
                self,
                base,
                size,
                Box::new(IpcMapping { raw: handle.raw }),
            ));
            reg.opened.insert(key, Arc::downgrade(&alloc));
            drop(reg);
            // On a range error `alloc` drops here, which closes the mapping.
            return slice_mapping(alloc, handle, mutable);
        }
    }

    /// Opens an [`IpcEventHandle`] from another process as an [`Event`] of this
    /// context, which this process's streams can [`wait`](crate::cuda::Stream::wait_event) on:
    /// the wait happens on the device. The opened event is released when dropped.
    ///
    /// A handle of another device is an [`Error::InvalidArgument`] naming both; a handle
    /// exported by this very process is refused (CUDA does not open those: use the
    /// [`Event`] itself).
    pub fn open_ipc_event(&self, handle: &IpcEventHandle) -> Result<Event> {
        check_device(handle.device, self, "the IPC event handle")?;
        if handle.token != 0 && handle.token == handle_layout::process_token() {
            return Err(Error::invalid(
                "this IPC event handle was exported by this process: CUDA cannot open an event \
                 handle in its exporting process; share the Event itself (e.g. in an Arc)",
            ));
        }
        self.bind()?;
        let raw = dipc::ipc_open_event_handle(&handle.raw).map_err(|e| {
            e.explain_driver(
                "could not open the IPC event handle: the exporting process may have destroyed \
                 the event or exited, or the handle belongs to another device or machine",
            )
        })?;
        let flags = EventFlags {
            timing: false,
            blocking_sync: handle.blocking_sync,
            interprocess: true,
        };
        // Safety: `raw` was just opened in this context, and the Event becomes its only
        // owner (cuEventDestroy releases an opened IPC event).
        Ok(unsafe { Event::from_raw(self, raw, flags) })
    }
}

pub(super) fn slice_mapping(
    alloc: Arc<Allocation>,
    h: &IpcMemHandle,
    mutable: bool,
) -> Result<DeviceBuffer> {
    let (offset, len) = (h.offset as usize, h.len as usize);
    // The driver may report a mapping rounded up to its allocation granularity, never
    // a smaller one.
    if h.alloc_size != 0 && h.alloc_size as usize > alloc.size {
        return Err(Error::invalid(format!(
            "the IPC memory handle records an allocation of {} bytes, but the driver mapped only \
             {} bytes: the handle is stale or was altered",
            h.alloc_size, alloc.size
        )));
    }
    check_range("IPC handle range", offset, len, alloc.size)?;
    Ok(DeviceBuffer::from_parts(alloc, offset, len, mutable))
}
