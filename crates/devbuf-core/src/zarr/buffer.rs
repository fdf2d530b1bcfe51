//! [`ByteBuffer`]: a flat, contiguous block of bytes on the host or a device.

use std::fmt;

use bytes::Bytes;

use super::index::{AxisSel, Resolved};
use super::prototype::BufferPrototype;
use crate::cuda::{DeviceBuffer, HostBuffer};
use crate::error::{Error, Result};
use crate::memory::{Memory, Place};

/// zarr-python's `Buffer` (`zarr.core.buffer.Buffer`): untyped, contiguous bytes in host or device memory (sizes and
/// indices are in bytes).
///
/// A `ByteBuffer` is a value: clones and slices share memory, and a write
/// ([`set`](Self::set)) copies first when anyone else can see the memory
/// (copy-on-write), so a write is never visible through another handle.
///
/// It is made four ways, all zero-copy where the memory already is: `ByteBuffer::from`
/// host bytes (`Bytes`, `Vec<u8>`, `&'static [u8]`, an Arrow `Buffer`, a `HostBuffer`),
/// device memory (a [`DeviceBuffer`]) or either ([`Memory`]); `ByteBuffer::default()`
/// (no bytes, on the host); [`to_prototype`](Self::to_prototype) (into another memory);
/// and [`concat`](Self::concat).
///
/// | zarr-python | devbuf |
/// |---|---|
/// | `Buffer.from_bytes(b)`, `Buffer.from_array_like(a)` | `ByteBuffer::from(b)` |
/// | `Buffer.create_zero_length()` | `ByteBuffer::default()` (host), `.to_prototype(&p)` |
/// | `prototype.buffer.from_bytes(b)`, `.from_buffer(buf)` | `ByteBuffer::from(b).to_prototype(&p)`, `buf.to_prototype(&p)` |
/// | `buf.as_array_like()` | [`as_memory`](Self::as_memory) |
/// | `buf.as_numpy_array()`, `buf.to_bytes()` | [`to_host`](Self::to_host) (`.to_vec()` for a `Vec<u8>`) |
/// | `buf.combine(others)` | [`ByteBuffer::concat`] |
/// | `buf[a:b]`, `buf[a:b] = v` | [`get`](Self::get), [`set`](Self::set) |
///
/// ```
/// use devbuf_core::zarr::{BufferPrototype, ByteBuffer, Slice};
/// let a = ByteBuffer::from(&b"hello "[..]);
/// let b = ByteBuffer::from(b"world".to_vec());
/// let ab = ByteBuffer::concat(&a.prototype(), [&a, &b])?;
/// assert_eq!(&ab.to_host()?[..], b"hello world");
/// assert_eq!(&ab.get(6..)?.to_host()?[..], b"world");
/// assert_eq!(&ab.get(Slice::new(Some(-5), Some(-3), 1))?.to_host()?[..], b"wo");
/// assert!(ab.get(Slice::new(None, None, 2)).is_err()); // steps are an error
/// assert!(ByteBuffer::default().is_empty());
/// // BufferPrototype::Device(0) on a GPU: one copy there
/// let on_host = ByteBuffer::from(vec![1u8, 2]).to_prototype(&BufferPrototype::Host)?;
/// assert!(on_host.prototype().is_host());
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone)]
pub struct ByteBuffer {
    mem: Memory,
}

impl ByteBuffer {
    /// `from_buffer`: this buffer in `prototype`'s memory; zero-copy when it is already
    /// there, else one copy (host→device, device→host, device→device).
    pub fn to_prototype(&self, prototype: &BufferPrototype) -> Result<ByteBuffer> {
        if self.mem.prototype() == *prototype {
            return Ok(self.clone());
        }
        let place = prototype.place()?;
        Ok(ByteBuffer {
            mem: place.bring(&self.mem, 0, self.len())?,
        })
    }

    /// `as_array_like`: the underlying memory, never a copy.
    ///
    /// ```
    /// use devbuf_core::zarr::ByteBuffer;
    /// let arrow = arrow_buffer::Buffer::from_vec(vec![1u8, 2, 3]);
    /// let b = ByteBuffer::from(arrow.clone());
    /// assert_eq!(b.as_memory().address(), arrow.as_ptr() as u64); // zero-copy
    /// ```
    pub fn as_memory(&self) -> &Memory {
        &self.mem
    }

    /// The underlying memory, by value.
    pub fn into_memory(self) -> Memory {
        self.mem
    }

    /// The prototype whose memory this is (`prototype().is_host()`,
    /// `prototype().is_device()`).
    pub fn prototype(&self) -> BufferPrototype {
        self.mem.prototype()
    }

    /// `as_numpy_array` / `to_bytes`: the bytes in host memory (the same bytes for host
    /// memory; one copy into page-locked memory for device memory). `.to_vec()` on the
    /// result gives a `Vec<u8>`.
    pub fn to_host(&self) -> Result<Bytes> {
        self.mem.to_host()
    }

    /// Length in bytes (`len(buffer)`).
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    /// True when the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.mem.is_empty()
    }

    fn resolve_1d(&self, sel: AxisSel) -> Result<(usize, usize)> {
        if let AxisSel::Index(i) = sel {
            return Err(Error::invalid(format!(
                "buffer keys must be contiguous slices, got the integer index {i}"
            )));
        }
        match sel.resolve(0, self.len())? {
            Resolved::Range { start, count, step } => {
                if step != 1 {
                    return Err(Error::invalid(format!(
                        "slice must be contiguous: step {step} given, only 1 is allowed"
                    )));
                }
                Ok((start, count))
            }
            Resolved::Index(_) => Err(Error::invalid("buffer keys must be slices")),
        }
    }

    /// `buffer[key]` for a contiguous 1-D slice (zero-copy). Steps other than 1 and
    /// integer indices are errors; Rust ranges past the end are errors, [`Slice`]s clip
    /// like Python.
    ///
    /// [`Slice`]: super::Slice
    pub fn get(&self, key: impl Into<AxisSel>) -> Result<ByteBuffer> {
        let (start, len) = self.resolve_1d(key.into())?;
        Ok(ByteBuffer {
            mem: self.mem.slice(start, len)?,
        })
    }

    /// `buffer[key] = value`: overwrites a contiguous slice with `value`'s bytes (of the
    /// same length, from host or device memory). Copies this buffer first when its
    /// memory is shared (copy-on-write).
    pub fn set(&mut self, key: impl Into<AxisSel>, value: &ByteBuffer) -> Result<()> {
        let (start, len) = self.resolve_1d(key.into())?;
        if value.len() != len {
            return Err(Error::invalid(format!(
                "could not broadcast a value of {} bytes into a slice of {len} bytes",
                value.len()
            )));
        }
        if len == 0 {
            return Ok(());
        }
        if !self.mem.is_exclusive() {
            self.mem = match &self.mem {
                Memory::Host(b) => Memory::from(b.to_vec()),
                Memory::Device(src) => {
                    let d = src.context().allocate(src.len())?;
                    d.copy_from_device(0, src)?;
                    Memory::Device(d)
                }
            };
        }
        self.mem.write(|m| match (m, &value.mem) {
            (crate::memory::MemMut::Host(dst), Memory::Host(src)) => {
                dst[start..start + len].copy_from_slice(src);
                Ok(())
            }
            (crate::memory::MemMut::Host(dst), Memory::Device(src)) => {
                src.copy_to_host(0, &mut dst[start..start + len])
            }
            (crate::memory::MemMut::Device(dst), Memory::Host(src)) => {
                dst.copy_from_host(start, src)
            }
            (crate::memory::MemMut::Device(dst), Memory::Device(src)) => {
                dst.copy_from_device(start, src)
            }
        })
    }

    /// zarr-python's `combine`: concatenates `buffers` into one new buffer of
    /// `prototype`'s memory (one allocation, one copy of each part; parts in other
    /// memories are moved as they are copied). `buf.combine(others)` is
    /// `ByteBuffer::concat(&buf.prototype(), [&buf, ..others])`.
    pub fn concat<'a>(
        prototype: &BufferPrototype,
        buffers: impl IntoIterator<Item = &'a ByteBuffer>,
    ) -> Result<ByteBuffer> {
        let parts: Vec<&ByteBuffer> = buffers.into_iter().collect();
        ByteBuffer::concat_in(&prototype.place()?, &parts)
    }

    fn concat_in(place: &Place, parts: &[&ByteBuffer]) -> Result<ByteBuffer> {
        let total = parts.iter().try_fold(0usize, |acc, b| {
            acc.checked_add(b.len())
                .ok_or_else(|| Error::invalid("combined length overflows"))
        })?;
        match place {
            Place::Host => {
                let mut out = Vec::new();
                out.try_reserve_exact(total).map_err(|_| {
                    Error::invalid(format!(
                        "cannot allocate {total} bytes of host memory for the combined buffer"
                    ))
                })?;
                for b in parts {
                    match &b.mem {
                        Memory::Host(h) => out.extend_from_slice(h),
                        Memory::Device(d) => {
                            let at = out.len();
                            out.resize(at + d.len(), 0);
                            d.copy_to_host(0, &mut out[at..])?;
                        }
                    }
                }
                Ok(ByteBuffer::from(out))
            }
            Place::Device(ctx) => {
                let out = ctx.allocate(total)?;
                let mut at = 0;
                for b in parts {
                    match &b.mem {
                        Memory::Host(h) => out.copy_from_host(at, h)?,
                        Memory::Device(d) => out.copy_from_device(at, d)?,
                    }
                    at += b.len();
                }
                Ok(ByteBuffer::from(out))
            }
        }
    }

    /// Whether both buffers hold the same bytes, wherever they live (device buffers
    /// are compared on the device).
    pub fn equals(&self, other: &ByteBuffer) -> Result<bool> {
        if self.len() != other.len() {
            return Ok(false);
        }
        match (&self.mem, &other.mem) {
            (Memory::Host(a), Memory::Host(b)) => Ok(a == b),
            (Memory::Device(a), Memory::Device(b)) => a.equals(b),
            (Memory::Host(h), Memory::Device(d)) | (Memory::Device(d), Memory::Host(h)) => {
                Ok(d.to_vec::<u8>()? == h.as_ref())
            }
        }
    }
}

impl PartialEq for ByteBuffer {
    /// [`equals`](ByteBuffer::equals); a device error (which `==` cannot report) counts as
    /// unequal.
    fn eq(&self, other: &ByteBuffer) -> bool {
        self.equals(other).unwrap_or(false)
    }
}

impl fmt::Debug for ByteBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ByteBuffer")
            .field("memory", &self.mem)
            .finish()
    }
}

impl Default for ByteBuffer {
    /// zarr-python's `create_zero_length`: no bytes, on the host
    /// (`ByteBuffer::default().to_prototype(&p)` for another memory).
    fn default() -> ByteBuffer {
        ByteBuffer::from(Bytes::new())
    }
}

impl From<Bytes> for ByteBuffer {
    /// Zero-copy.
    fn from(b: Bytes) -> ByteBuffer {
        ByteBuffer {
            mem: Memory::from(b),
        }
    }
}

impl From<Vec<u8>> for ByteBuffer {
    /// Zero-copy: the vector becomes the memory.
    fn from(v: Vec<u8>) -> ByteBuffer {
        ByteBuffer {
            mem: Memory::from(v),
        }
    }
}

impl From<&'static [u8]> for ByteBuffer {
    /// Zero-copy (`Bytes::from_static`).
    fn from(s: &'static [u8]) -> ByteBuffer {
        ByteBuffer::from(Bytes::from_static(s))
    }
}

impl From<DeviceBuffer> for ByteBuffer {
    /// Zero-copy: the buffer stays on its device.
    fn from(d: DeviceBuffer) -> ByteBuffer {
        ByteBuffer {
            mem: Memory::from(d),
        }
    }
}

impl From<HostBuffer> for ByteBuffer {
    /// Zero-copy: the page-locked memory becomes host memory.
    fn from(h: HostBuffer) -> ByteBuffer {
        ByteBuffer {
            mem: Memory::from(h),
        }
    }
}

impl From<arrow_buffer::Buffer> for ByteBuffer {
    /// Zero-copy: the Arrow buffer is kept alive by the returned buffer.
    fn from(b: arrow_buffer::Buffer) -> ByteBuffer {
        ByteBuffer {
            mem: Memory::from(b),
        }
    }
}

impl From<Memory> for ByteBuffer {
    /// Zero-copy, host or device.
    fn from(m: Memory) -> ByteBuffer {
        ByteBuffer { mem: m }
    }
}
