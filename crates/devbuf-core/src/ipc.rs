//! Sharing buffers between processes of one machine, with or without a GPU.
//!
//! * On a GPU: [`IpcMemHandle`] (device memory) and [`IpcEventHandle`] (device-side
//!   synchronisation).
//! * Everywhere (the host fallback): [`SharedMemory`], page-aligned host memory backed
//!   by an anonymous memory file (Linux `memfd`), exported as a [`HostIpcHandle`] that
//!   another process maps **read-only** and receives as an [`arrow_buffer::Buffer`]
//!   without a copy.
//! * [`IpcHandle`] holds either kind, so one program can hand over "a buffer" and the
//!   consumer need not know where it lives.
//!
//! The Arrow layer builds record batches on both: see
//! [`crate::arrow::serialize_record_batch`] (device) and
//! [`crate::arrow::serialize_record_batch_shared`] (host).
//!
//! # Host shared memory: how it works and the lifetime contract
//!
//! [`SharedMemory::create`] makes a `memfd`, sizes it, seals its size
//! (`F_SEAL_SHRINK | F_SEAL_GROW`, so a consumer's mapping can never fault on a truncated
//! file) and maps it read-write. The handle names the exporting process and its file
//! descriptor; the consumer opens `/proc/<pid>/fd/<fd>` read-only (the same user, or a
//! process allowed to inspect the exporter, may do so), checks that it is the very
//! memory file the handle names (a random tag in its name), its size and its seals, and
//! maps it.
//!
//! * The exporter must keep the [`SharedMemory`] alive until consumers have opened the
//!   handle: once it is dropped (or the exporter exits), opening fails with an error
//!   that says so. Mappings already opened stay valid after that: the memory lives
//!   until the last mapping is gone. Nothing is left behind in `/dev/shm` when a process
//!   crashes.
//! * The consumer's [`arrow_buffer::Buffer`] keeps its mapping; the mapping is removed
//!   when the last clone or slice of that buffer drops.
//! * Zero-length memory exports as the empty handle; opening it gives an empty buffer
//!   without a system call.
//! * **Write first, then share.** A consumer receives an [`arrow_buffer::Buffer`], whose
//!   bytes Rust and Arrow treat as immutable. Finish writing through the
//!   [`SharedMemory`] before you hand out a handle, and do not write the shared range
//!   while any consumer may hold it open: such writes race with the consumer's reads
//!   (it may see torn or stale values), and a consumer in the same process would hold
//!   a `&[u8]` that changes under it, which Rust's aliasing rules do not allow.
//!
//! # Byte layout of a `HostIpcHandle` (version 1, 64 bytes, little-endian)
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | magic `DEVBUFIH` |
//! | 8 | 2 | layout version (1) |
//! | 10 | 2 | total size in bytes (64) |
//! | 12 | 4 | flags (none defined: 0) |
//! | 16 | 4 | exporting process id |
//! | 20 | 4 | file descriptor in the exporting process |
//! | 24 | 8 | tag of the memory file (its name is `devbuf-<tag as 16 hex digits>`) |
//! | 32 | 8 | size of the memory file |
//! | 40 | 8 | offset of the shared range |
//! | 48 | 8 | length of the shared range |
//! | 56 | 8 | FNV-1a 64 checksum of bytes 0..56 |
//!
//! The empty handle has every field after the flags zero.
//!
//! # Device memory and events: how it works
//!
//! A producer exports a [`DeviceBuffer`](crate::cuda::DeviceBuffer) (any slice of it) with
//! [`DeviceBuffer::export_ipc`](crate::cuda::DeviceBuffer::export_ipc), sends the handle's bytes to another process of the same
//! machine (a pipe, a file, a socket), and the consumer maps the same memory with
//! [`Context::open_ipc`](crate::cuda::Context::open_ipc) — no copy. An [`IpcEventHandle`] lets the consumer's streams wait,
//! on the device, until the producer's work has finished.
//!
//! # Device handles: lifetime contract
//!
//! * The exporter's buffer (any clone or slice of its allocation) keeps the memory
//!   alive. **Keep it until every consumer has closed its mapping** (dropped every buffer
//!   it opened): what a consumer sees after the exporter freed the memory is up to the
//!   driver. Exporting does not leak: the process-wide registry of exports holds only weak
//!   references.
//! * A consumer's mapping is closed (`cuIpcCloseMemHandle`) when the last clone or slice of
//!   the opened buffer drops. Opening several handles of one allocation (e.g. slices)
//!   in one process maps it once and shares the mapping.
//! * Opening a handle in the process that exported it (which CUDA refuses) returns a
//!   zero-copy view of the original allocation: same address, same context.
//! * Zero-length buffers export as the *empty handle* (no CUDA handle inside); opening it
//!   returns an empty buffer without calling the driver.
//!
//! # Device handles: byte layout of an `IpcMemHandle` (version 1, 144 bytes, little-endian)
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | magic `DEVBUFIM` |
//! | 8 | 2 | layout version (1) |
//! | 10 | 2 | total size in bytes (144) |
//! | 12 | 4 | flags: bit 0 device known, bit 1 read-only; other bits 0 |
//! | 16 | 64 | `CUipcMemHandle` of the allocation (cupy's / torch's `cudaIpcMemHandle_t` bytes) |
//! | 80 | 8 | offset of the slice from the allocation's start |
//! | 88 | 8 | length of the slice |
//! | 96 | 8 | size of the whole allocation (0: unknown) |
//! | 104 | 16 | device UUID (zero when unknown) |
//! | 120 | 4 | device ordinal in the exporting process |
//! | 124 | 4 | exporting process id (0: unknown) |
//! | 128 | 8 | exporting process token (random per process; 0: unknown) |
//! | 136 | 8 | FNV-1a 64 checksum of bytes 0..136 |
//!
//! The empty handle has length 0, offset 0, allocation size 0 and an all-zero CUDA handle.
//!
//! # Device handles: byte layout of an `IpcEventHandle` (version 1, 120 bytes, little-endian)
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | magic `DEVBUFIE` |
//! | 8 | 2 | layout version (1) |
//! | 10 | 2 | total size in bytes (120) |
//! | 12 | 4 | flags: bit 0 device known, bit 1 blocking sync; other bits 0 |
//! | 16 | 64 | `CUipcEventHandle` |
//! | 80 | 16 | device UUID (zero when unknown) |
//! | 96 | 4 | device ordinal in the exporting process |
//! | 100 | 4 | exporting process id (0: unknown) |
//! | 104 | 8 | exporting process token (0: unknown) |
//! | 112 | 8 | FNV-1a 64 checksum of bytes 0..112 |

use std::fmt;
use std::ops::{Bound, Deref, DerefMut, RangeBounds};
use std::ptr::NonNull;
use std::sync::Arc;

use arrow_buffer::Buffer;

use crate::cuda::ipc::{EVENT_MAGIC, HOST_MAGIC, MEM_MAGIC};
pub use crate::cuda::ipc::{IpcEventHandle, IpcMemHandle};
use crate::error::{Error, Result, check_range};
use crate::handle_layout;

const VERSION: u16 = 1;
const HOST_SIZE: usize = 64;
const HOST_WHAT: &str = "a host shared-memory handle";

/// A mapping of a memory file; unmapped on drop.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// Safety: the mapping is plain shared memory owned by this value; it may be read from
// and unmapped on any thread.
unsafe impl Send for Mapping {}
// Safety: shared access only reads (or, for the exporter's writable mapping, writes
// through `&mut SharedMemory`, which is exclusive).
unsafe impl Sync for Mapping {}
impl std::panic::RefUnwindSafe for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        sys::unmap(self.ptr, self.len);
    }
}

/// Host memory that other processes can map read-only: see the [module docs](self).
///
/// It derefs to `[u8]` (zero-filled at first); the exporter writes through
/// `DerefMut`, and consumers see the writes (it is the same memory). Write before
/// exporting: see "write first, then share" in the [module docs](self).
///
/// ```
/// use devbuf_core::ipc::{HostIpcHandle, SharedMemory};
/// # if cfg!(not(target_os = "linux")) { return Ok(()); }
/// let mut shm = SharedMemory::create(4096)?;
/// shm[..5].copy_from_slice(b"hello");
/// let text = shm.export_ipc(0..5)?.to_string(); // send to another process
///
/// // In the consumer (here the same process, which works too):
/// let buf = text.parse::<HostIpcHandle>()?.open()?; // read-only, zero-copy
/// assert_eq!(buf.as_slice(), b"hello");
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub struct SharedMemory {
    map: Option<Mapping>,
    file: Option<std::fs::File>,
    tag: u64,
}

impl SharedMemory {
    /// Creates `len` bytes of zero-filled shared memory (a sealed `memfd`). Zero bytes
    /// is allowed and creates nothing.
    pub fn create(len: usize) -> Result<SharedMemory> {
        if len == 0 {
            return Ok(SharedMemory {
                map: None,
                file: None,
                tag: 0,
            });
        }
        let tag = handle_layout::random_u64();
        let (file, ptr) = sys::create(tag, len)?;
        Ok(SharedMemory {
            map: Some(Mapping { ptr, len }),
            file: Some(file),
            tag,
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.map.as_ref().map_or(0, |m| m.len)
    }

    /// True when it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A handle to the bytes in `range` (the consumer sees exactly those); `..` is all
    /// of it.
    pub fn export_ipc(&self, range: impl RangeBounds<usize>) -> Result<HostIpcHandle> {
        let offset = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => self.len(),
        };
        if end < offset {
            return Err(Error::invalid(format!(
                "export_ipc: the range {offset}..{end} ends before it starts"
            )));
        }
        let len = end - offset;
        check_range("export_ipc", offset, len, self.len())?;
        let (Some(file), true) = (&self.file, len > 0) else {
            return Ok(HostIpcHandle::EMPTY);
        };
        Ok(HostIpcHandle {
            pid: std::process::id(),
            fd: sys::raw_fd(file),
            tag: self.tag,
            size: self.len() as u64,
            offset: offset as u64,
            len: len as u64,
        })
    }
}

impl Deref for SharedMemory {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.map {
            // Safety: the mapping is `len` readable bytes for as long as `self` lives.
            Some(m) => unsafe { std::slice::from_raw_parts(m.ptr.as_ptr(), m.len) },
            None => &[],
        }
    }
}

impl DerefMut for SharedMemory {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &self.map {
            // Safety: the mapping is `len` writable bytes, and `&mut self` is exclusive
            // within this process (other processes only map it read-only).
            Some(m) => unsafe { std::slice::from_raw_parts_mut(m.ptr.as_ptr(), m.len) },
            None => &mut [],
        }
    }
}

impl fmt::Debug for SharedMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedMemory")
            .field("len", &self.len())
            .field("tag", &format_args!("{:016x}", self.tag))
            .finish()
    }
}

/// A handle to host [`SharedMemory`] of another process; [`open`](Self::open) maps it
/// read-only. Serializes to the fixed layout in the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HostIpcHandle {
    pid: u32,
    fd: i32,
    tag: u64,
    size: u64,
    offset: u64,
    len: u64,
}

impl HostIpcHandle {
    /// The size of the handle's bytes (`Vec::<u8>::from(&handle)`).
    pub const ENCODED_LEN: usize = HOST_SIZE;

    const EMPTY: HostIpcHandle = HostIpcHandle {
        pid: 0,
        fd: 0,
        tag: 0,
        size: 0,
        offset: 0,
        len: 0,
    };

    /// Builds a handle from its fields, for tests and tools. Inconsistent fields are
    /// [`Error::Malformed`] as in `HostIpcHandle::try_from(&[u8])`.
    #[doc(hidden)]
    pub fn from_parts(
        pid: u32,
        fd: i32,
        tag: u64,
        size: u64,
        offset: u64,
        len: u64,
    ) -> Result<HostIpcHandle> {
        let h = HostIpcHandle {
            pid,
            fd,
            tag,
            size,
            offset,
            len,
        };
        h.validate()?;
        Ok(h)
    }

    fn validate(&self) -> Result<()> {
        if self.len == 0 {
            if *self != Self::EMPTY {
                return Err(Error::Malformed(format!(
                    "{HOST_WHAT} of length 0 must be the empty handle (all fields zero)"
                )));
            }
            return Ok(());
        }
        let end = self.offset.checked_add(self.len);
        if end.is_none_or(|e| e > self.size) {
            return Err(Error::Malformed(format!(
                "{HOST_WHAT} is inconsistent: offset {} + length {} exceeds the memory size {}",
                self.offset, self.len, self.size
            )));
        }
        if usize::try_from(self.size).is_err() {
            return Err(Error::Malformed(format!(
                "{HOST_WHAT}: size {} does not fit this machine's address size",
                self.size
            )));
        }
        if self.pid == 0 || self.fd < 0 || self.tag == 0 {
            return Err(Error::Malformed(format!(
                "{HOST_WHAT} names no memory file (pid {}, fd {}, tag {:#x})",
                self.pid, self.fd, self.tag
            )));
        }
        Ok(())
    }

    /// Length of the shared range in bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True for the empty handle.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offset of the shared range in the memory file.
    pub fn offset(&self) -> usize {
        self.offset as usize
    }

    /// The exporting process's id (0 for the empty handle).
    pub fn exporter_pid(&self) -> u32 {
        self.pid
    }

    /// The fixed layout described in the [module docs](self).
    fn encode(&self) -> Vec<u8> {
        let mut w = handle_layout::Writer::default();
        w.bytes(HOST_MAGIC)
            .u16(VERSION)
            .u16(HOST_SIZE as u16)
            .u32(0)
            .u32(self.pid)
            .i32(self.fd)
            .u64(self.tag)
            .u64(self.size)
            .u64(self.offset)
            .u64(self.len);
        w.finish_with_checksum()
    }

    /// Parses [`encode`](Self::encode)'s output (see the `TryFrom<&[u8]>` impl).
    fn decode(bytes: &[u8]) -> Result<HostIpcHandle> {
        let (mut r, flags) = handle_layout::open_layout(
            bytes,
            HOST_WHAT,
            HOST_MAGIC,
            VERSION,
            HOST_SIZE,
            &[
                (MEM_MAGIC, "an IPC memory handle"),
                (EVENT_MAGIC, "an IPC event handle"),
            ],
        )?;
        if flags != 0 {
            return Err(Error::Malformed(format!(
                "{HOST_WHAT} has unknown flag bits {flags:#x} (none are defined)"
            )));
        }
        let h = HostIpcHandle {
            pid: r.u32()?,
            fd: r.i32()?,
            tag: r.u64()?,
            size: r.u64()?,
            offset: r.u64()?,
            len: r.u64()?,
        };
        h.validate()?;
        Ok(h)
    }

    /// Maps the shared range read-only into this process and returns it as an Arrow
    /// buffer, without copying: the buffer's bytes *are* the exporter's memory. The
    /// mapping is removed when the last clone or slice of the buffer drops.
    ///
    /// Errors (never a crash): the exporter has exited or dropped its
    /// [`SharedMemory`] (the error says so), the descriptor now names another file, the
    /// file's size or seals are not what the handle says, or this process may not
    /// inspect the exporter's descriptors (another user).
    pub fn open(&self) -> Result<Buffer> {
        self.validate()?;
        if self.len == 0 {
            return Ok(Buffer::from_vec(Vec::<u8>::new()));
        }
        let (ptr, size) = sys::open_read_only(self)?;
        let map = Arc::new(Mapping { ptr, len: size });
        let (offset, len) = (self.offset as usize, self.len as usize);
        check_range("host IPC handle range", offset, len, size)?;
        // Safety: `offset + len <= size` (checked); the mapping stays valid for as long
        // as the Arc owner lives, and the memory file's size is sealed, so reads through
        // the pointer never fault.
        let start = unsafe { NonNull::new_unchecked(ptr.as_ptr().add(offset)) };
        // Safety: as above; Arrow only reads through the pointer while holding `map`.
        Ok(unsafe { Buffer::from_custom_allocation(start, len, map) })
    }
}

/// A handle to a buffer in another process: device memory or host shared memory.
///
/// Its bytes (`Vec::<u8>::from(&handle)`) are those of the handle it holds;
/// `IpcHandle::try_from(&bytes[..])` tells the kinds apart by their magic.
///
/// ```
/// use devbuf_core::ipc::{IpcHandle, SharedMemory};
/// # if cfg!(not(target_os = "linux")) { return Ok(()); }
/// let shm = SharedMemory::create(100)?;
/// let h = IpcHandle::Host(shm.export_ipc(..)?);
/// let back = h.to_string().parse::<IpcHandle>()?;
/// assert_eq!(back, h);
/// let IpcHandle::Host(host) = back else { unreachable!() };
/// assert_eq!(host.len(), 100); // the length is the held handle's
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IpcHandle {
    /// Device memory (open it with [`IpcMemHandle::open`] or
    /// [`Context::open_ipc`](crate::cuda::Context::open_ipc)).
    Device(IpcMemHandle),
    /// Host shared memory (open it with [`HostIpcHandle::open`]).
    Host(HostIpcHandle),
}

/// The bytes of the handle it holds.
impl From<&IpcHandle> for Vec<u8> {
    fn from(handle: &IpcHandle) -> Vec<u8> {
        match handle {
            IpcHandle::Device(h) => h.encode(),
            IpcHandle::Host(h) => h.encode(),
        }
    }
}

/// Parses the bytes of either kind of handle; anything else is [`Error::Malformed`].
impl TryFrom<&[u8]> for IpcHandle {
    type Error = Error;

    fn try_from(bytes: &[u8]) -> Result<IpcHandle> {
        match bytes.get(..8) {
            Some(m) if m == MEM_MAGIC => Ok(IpcHandle::Device(IpcMemHandle::decode(bytes)?)),
            Some(m) if m == HOST_MAGIC => Ok(IpcHandle::Host(HostIpcHandle::decode(bytes)?)),
            Some(m) if m == EVENT_MAGIC => Err(Error::Malformed(
                "these bytes are an IPC event handle, not a buffer handle".into(),
            )),
            _ => Err(Error::Malformed(format!(
                "not a devbuf buffer handle: expected the magic \"DEVBUFIM\" (device) or \
                 \"DEVBUFIH\" (host) at the start of {} bytes",
                bytes.len()
            ))),
        }
    }
}

/// The handle's bytes: the fixed, versioned layout described in the
/// [module docs](self) ([`HostIpcHandle::ENCODED_LEN`] bytes).
///
/// ```
/// use devbuf_core::ipc::{HostIpcHandle, SharedMemory};
/// # if cfg!(not(target_os = "linux")) { return Ok(()); }
/// let shm = SharedMemory::create(100)?;
/// let h = shm.export_ipc(..)?;
/// let bytes = Vec::<u8>::from(&h);
/// assert_eq!(bytes.len(), HostIpcHandle::ENCODED_LEN);
/// assert_eq!(HostIpcHandle::try_from(&bytes[..])?, h);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
impl From<&HostIpcHandle> for Vec<u8> {
    fn from(handle: &HostIpcHandle) -> Vec<u8> {
        handle.encode()
    }
}

/// Parses the handle's bytes (`Vec::<u8>::from(&handle)`); anything else is
/// [`Error::Malformed`] saying what was wrong. Never panics.
impl TryFrom<&[u8]> for HostIpcHandle {
    type Error = Error;

    fn try_from(bytes: &[u8]) -> Result<HostIpcHandle> {
        HostIpcHandle::decode(bytes)
    }
}

/// Lowercase hexadecimal of the handle's bytes (`Vec::<u8>::from(&handle)`): text to
/// hand to another process.
impl fmt::Display for HostIpcHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&handle_layout::hex(&self.encode()))
    }
}

/// Parses the [`Display`](fmt::Display) text (surrounding whitespace ignored):
/// `text.parse::<HostIpcHandle>()`.
impl std::str::FromStr for HostIpcHandle {
    type Err = Error;

    fn from_str(text: &str) -> Result<HostIpcHandle> {
        Self::decode(&handle_layout::from_hex(text, HOST_WHAT)?)
    }
}

/// Lowercase hexadecimal of the handle's bytes (`Vec::<u8>::from(&handle)`): text to
/// hand to another process.
impl fmt::Display for IpcHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&handle_layout::hex(&Vec::from(self)))
    }
}

/// Parses the [`Display`](fmt::Display) text (surrounding whitespace ignored):
/// `text.parse::<IpcHandle>()`.
impl std::str::FromStr for IpcHandle {
    type Err = Error;

    fn from_str(text: &str) -> Result<IpcHandle> {
        IpcHandle::try_from(&handle_layout::from_hex(text, "a buffer handle")?[..])
    }
}

#[cfg(target_os = "linux")]
mod sys {
    use std::ffi::CString;
    use std::fs::File;
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::fs::OpenOptionsExt;
    use std::ptr::NonNull;

    use super::HostIpcHandle;
    use crate::error::{Error, Result};

    fn os_err(op: &'static str, what: impl std::fmt::Display) -> Error {
        let e = std::io::Error::last_os_error();
        Error::from_io(op, format!("{what}: {e}"), e)
    }

    fn name_of(tag: u64) -> String {
        format!("devbuf-{tag:016x}")
    }

    pub(super) fn raw_fd(f: &File) -> i32 {
        f.as_raw_fd()
    }

    pub(super) fn create(tag: u64, len: usize) -> Result<(File, NonNull<u8>)> {
        let name = CString::new(name_of(tag)).map_err(|_| Error::invalid("memfd name"))?;
        // Safety: `name` is a NUL-terminated string; the flags are valid.
        let fd = unsafe {
            libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if fd < 0 {
            return Err(os_err("creating shared memory", "memfd_create"));
        }
        // Safety: `fd` was just created and is owned by nothing else.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(len as u64).map_err(|e| {
            let message = format!("sizing the memory file to {len} bytes: {e}");
            Error::from_io("creating shared memory", message, e)
        })?;
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // Safety: fcntl on a descriptor we own, with a documented command.
        if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) } != 0 {
            return Err(os_err("creating shared memory", "sealing the memory file"));
        }
        // Safety: mapping `len` bytes of a file of `len` bytes; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os_err(
                "creating shared memory",
                format!("mapping {len} bytes"),
            ));
        }
        let ptr = NonNull::new(p.cast()).ok_or_else(|| Error::invalid("mmap returned null"))?;
        Ok((file, ptr))
    }

    pub(super) fn unmap(ptr: NonNull<u8>, len: usize) {
        // Safety: `ptr..ptr+len` is a mapping made by `create` or `open_read_only`,
        // owned by the caller, and not used afterwards.
        unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
    }

    pub(super) fn open_read_only(h: &HostIpcHandle) -> Result<(NonNull<u8>, usize)> {
        const OP: &str = "opening host shared memory";
        let path = format!("/proc/{}/fd/{}", h.pid, h.fd);
        let io_err = |e: std::io::Error| {
            let message = match e.kind() {
                std::io::ErrorKind::NotFound => format!(
                    "{path} does not exist: the exporting process {} has exited or dropped the \
                     shared memory (keep the SharedMemory alive until consumers have opened it)",
                    h.pid
                ),
                std::io::ErrorKind::PermissionDenied => format!(
                    "{path}: permission denied (the exporter runs as another user, or this \
                     process may not inspect it)"
                ),
                _ => format!("{path}: {e}"),
            };
            Error::from_io(OP, message, e)
        };
        // The descriptor must name the memory file of the handle (the exporter may have
        // closed it and reused the number, and a forged handle may name anything):
        // checked before opening, so that nothing else is opened (opening a FIFO
        // without a writer would wait forever), and again on what was opened.
        let expected = format!("/memfd:{} (deleted)", name_of(h.tag));
        let not_ours = |target: &str| {
            Error::io(
                OP,
                format!(
                    "{path} is {target:?}, not the shared memory the handle names ({expected:?}): \
                     the handle is stale (its memory was dropped and the descriptor number \
                     reused) or was not made by that process's SharedMemory::export_ipc"
                ),
            )
        };
        let before = std::fs::read_link(&path).map_err(io_err)?;
        if before.as_os_str() != expected.as_str() {
            return Err(not_ours(&before.to_string_lossy()));
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .map_err(io_err)?;
        let fd = file.as_raw_fd();
        let target = std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        if target != expected {
            return Err(not_ours(&target));
        }
        let size = file
            .metadata()
            .map_err(|e| Error::from_io(OP, format!("{path}: {e}"), e))?
            .len();
        if size != h.size {
            return Err(Error::io(
                OP,
                format!(
                    "the memory file is {size} bytes, the handle says {}",
                    h.size
                ),
            ));
        }
        // Safety: fcntl on a descriptor we own, with a documented command.
        let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(Error::io(
                OP,
                "the memory file's size is not sealed; mapping it could fault",
            ));
        }
        let len = size as usize;
        // Safety: mapping `len` bytes of a file of exactly `len` bytes whose size is
        // sealed; read-only; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os_err(OP, format!("mapping {len} bytes of {path}")));
        }
        let ptr = NonNull::new(p.cast()).ok_or_else(|| Error::invalid("mmap returned null"))?;
        Ok((ptr, len))
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    use std::fs::File;
    use std::ptr::NonNull;

    use super::HostIpcHandle;
    use crate::error::{Error, Result};

    fn unsupported() -> Error {
        Error::invalid("host shared memory needs Linux (memfd and /proc)")
    }
    pub(super) fn raw_fd(_: &File) -> i32 {
        -1
    }
    pub(super) fn create(_: u64, _: usize) -> Result<(File, NonNull<u8>)> {
        Err(unsupported())
    }
    pub(super) fn unmap(_: NonNull<u8>, _: usize) {}
    pub(super) fn open_read_only(_: &HostIpcHandle) -> Result<(NonNull<u8>, usize)> {
        Err(unsupported())
    }
}
