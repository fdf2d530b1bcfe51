//! Host-or-device memory as one value, and its primitive operations.
//!
//! This layer sits between `cuda` (below: the driver, device buffers, kernels) and
//! `zarr` + `arrow` (above), and imports only `cuda`, `element` and `error`:
//!
//! * [`Memory`]: host or device bytes, the one value behind zarr's
//!   [`ByteBuffer`](crate::zarr::ByteBuffer) and [`NDBuffer`](crate::zarr::NDBuffer) and
//!   Arrow's chunk batches;
//! * crate-private: its views for the primitives (`MemRef`, `MemMut`), where memory
//!   lives (`Place`), the `prim` dispatch of the element-wise primitives to the host
//!   (`host_ops`) or the device (`cuda::kernels::ops`), and `zeroed_vec`;
//! * crate-private: bit packing of booleans (`pack_bits`, `unpack_bits`, in place
//!   `prim::pack_bits`; Arrow's bitmap layout), on the host or with the `bits` kernels;
//! * crate-private: `host_ops`, the CPU twins of the device kernels (numpy's semantics
//!   on the host), and `HostOutput`; devbuf-zarr and devbuf-flight reach them through
//!   the hidden `devbuf_core::__private`. Users call the same operations on an
//!   [`NDBuffer`](crate::zarr::NDBuffer) (`set_scalar`, `astype`, `copy_order`, `all_equal`).

use std::fmt;

use bytes::{Bytes, BytesMut};

// Shared with devbuf-zarr and devbuf-flight through `crate::__private`; not API.
pub(crate) mod host_ops;
pub(crate) mod host_output;
pub(crate) mod host_pool;
pub(crate) mod stream_copy;

pub(crate) use host_output::zeroed_vec;

use crate::cuda::kernels::{bits, ops};
use crate::cuda::{Context, DeviceBuffer, HostBuffer};
use crate::element::{ElementType, EqualMode};
use crate::error::{Error, Result, check_range};

/// Bytes on the host or on a CUDA device.
///
/// Host memory is [`bytes::Bytes`]: immutable, cheaply cloned and sliced, possibly
/// owned by someone else (an Arrow buffer, page-locked memory). Device memory is a
/// [`DeviceBuffer`]. Cloning either is zero-copy.
///
/// ```
/// use devbuf_core::memory::Memory;
/// let m = Memory::from(vec![1u8, 2, 3]);
/// assert!(m.prototype().is_host()); // `Memory::prototype` is defined in `zarr`
/// assert!(m.as_host().is_some());
/// assert_eq!(m.len(), 3);
/// assert_eq!(m.slice(1, 2)?.to_host()?.as_ref(), &[2, 3]);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone)]
pub enum Memory {
    /// Host memory.
    Host(Bytes),
    /// Device memory.
    Device(DeviceBuffer),
}

impl Memory {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Memory::Host(b) => b.len(),
            Memory::Device(d) => d.len(),
        }
    }

    /// True when it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The host bytes, if this is host memory.
    pub fn as_host(&self) -> Option<&Bytes> {
        match self {
            Memory::Host(b) => Some(b),
            Memory::Device(_) => None,
        }
    }

    /// The device buffer, if this is device memory.
    pub fn as_device(&self) -> Option<&DeviceBuffer> {
        match self {
            Memory::Host(_) => None,
            Memory::Device(d) => Some(d),
        }
    }

    /// The address of the first byte: a host pointer or a device address. Two values
    /// with the same address share memory (zero-copy checks compare these).
    pub fn address(&self) -> u64 {
        match self {
            Memory::Host(b) => b.as_ptr() as u64,
            Memory::Device(d) => d.address(),
        }
    }

    /// A zero-copy view of `len` bytes from `offset`; out of range is an error.
    pub fn slice(&self, offset: usize, len: usize) -> Result<Memory> {
        let end = check_range("slice", offset, len, self.len())?;
        Ok(match self {
            Memory::Host(b) => Memory::Host(b.slice(offset..end)),
            Memory::Device(d) => Memory::Device(d.slice(offset, len)?),
        })
    }

    /// The bytes in host memory: the same bytes (zero-copy) for host memory, one copy
    /// into page-locked memory for device memory.
    pub fn to_host(&self) -> Result<Bytes> {
        match self {
            Memory::Host(b) => Ok(b.clone()),
            Memory::Device(d) => Ok(Bytes::from(d.to_host()?)),
        }
    }

    /// True when writing in place can be seen by no other handle: host bytes that only
    /// this value refers to, or an exclusively owned device allocation.
    pub(crate) fn is_exclusive(&self) -> bool {
        match self {
            Memory::Host(b) => b.is_unique(),
            Memory::Device(d) => d.is_exclusive(),
        }
    }

    pub(crate) fn view(&self) -> MemRef<'_> {
        match self {
            Memory::Host(b) => MemRef::Host(b),
            Memory::Device(d) => MemRef::Device(d),
        }
    }

    pub(crate) fn place(&self) -> Place {
        match self {
            Memory::Host(_) => Place::Host,
            Memory::Device(d) => Place::Device(d.context().clone()),
        }
    }

    /// Runs `f` with write access to this memory, in place. Callers make sure the
    /// memory [`is_exclusive`](Self::is_exclusive) first (copy-on-write); host bytes that
    /// turn out to be shared are copied rather than written through.
    pub(crate) fn write<R>(&mut self, f: impl FnOnce(MemMut<'_>) -> Result<R>) -> Result<R> {
        match self {
            Memory::Host(b) => {
                let taken = std::mem::take(b);
                let mut m = match taken.try_into_mut() {
                    Ok(m) => m,
                    Err(shared) => BytesMut::from(&shared[..]),
                };
                let r = f(MemMut::Host(&mut m[..]));
                *b = m.freeze();
                r
            }
            Memory::Device(d) => f(MemMut::Device(d)),
        }
    }
}

impl fmt::Debug for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Memory::Host(b) => f
                .debug_struct("Host")
                .field("address", &format_args!("{:#x}", b.as_ptr() as usize))
                .field("len", &b.len())
                .finish(),
            Memory::Device(d) => f
                .debug_struct("Device")
                .field("device", &d.context().ordinal())
                .field("address", &format_args!("{:#x}", d.address()))
                .field("len", &d.len())
                .finish(),
        }
    }
}

impl From<Bytes> for Memory {
    /// Zero-copy.
    fn from(b: Bytes) -> Memory {
        Memory::Host(b)
    }
}

impl From<Vec<u8>> for Memory {
    /// Zero-copy: the vector becomes the memory.
    fn from(v: Vec<u8>) -> Memory {
        Memory::Host(Bytes::from(v))
    }
}

impl From<DeviceBuffer> for Memory {
    /// Zero-copy.
    fn from(d: DeviceBuffer) -> Memory {
        Memory::Device(d)
    }
}

impl From<HostBuffer> for Memory {
    /// Zero-copy: the page-locked memory becomes host memory (see
    /// `From<HostBuffer> for Bytes`).
    fn from(h: HostBuffer) -> Memory {
        Memory::Host(Bytes::from(h))
    }
}

impl From<arrow_buffer::Buffer> for Memory {
    /// Zero-copy: the Arrow buffer is kept alive by the returned memory.
    fn from(b: arrow_buffer::Buffer) -> Memory {
        Memory::Host(Bytes::from_owner(b))
    }
}

/// Bytes to allocate for the bitmap of `n` booleans packed where `place` is: the
/// bitmap's `n.div_ceil(8)` bytes on the host; whole 32-bit words on a device (the
/// packing kernel writes words).
pub(crate) fn packed_alloc_bytes(place: &Place, n: usize) -> usize {
    match place {
        Place::Host => n.div_ceil(8),
        Place::Device(_) => bits::packed_words_bytes(n),
    }
}

/// Booleans (bytes, non-zero is true) bit-packed into an Arrow bitmap (least significant
/// bit first) of `bytes.len().div_ceil(8)` bytes, where they live: one host pass or one
/// kernel ([`prim::pack_bits`]).
pub(crate) fn pack_bits(bytes: &Memory) -> Result<Memory> {
    let n = bytes.len();
    let place = bytes.place();
    let mut packed = place.alloc(packed_alloc_bytes(&place, n), false)?;
    packed.write(|mut dst| prim::pack_bits(&bytes.view(), &mut dst))?;
    packed.slice(0, n.div_ceil(8))
}

/// Booleans `start .. start + count` of the bitmap `bits` as bytes (0 or 1), where
/// they live.
pub(crate) fn unpack_bits(bits: &Memory, start: usize, count: usize) -> Result<Memory> {
    let end = start
        .checked_add(count)
        .ok_or_else(|| Error::invalid("boolean range overflows"))?;
    if bits.len() < end.div_ceil(8) {
        return Err(Error::invalid(format!(
            "booleans {start}..{end} lie past the bitmap of {} bytes",
            bits.len()
        )));
    }
    match bits {
        Memory::Host(b) => Ok(Memory::from(host_ops::unpack_bits(b, start, count))),
        Memory::Device(d) => {
            let out = d.context().allocate(count)?;
            bits::unpack_bits(d, start, &out)?;
            Ok(Memory::Device(out))
        }
    }
}

/// Where memory lives: the host, or one device context.
#[derive(Clone, Debug)]
pub(crate) enum Place {
    Host,
    Device(Context),
}

impl Place {
    pub(crate) fn same(&self, other: &Place) -> bool {
        match (self, other) {
            (Place::Host, Place::Host) => true,
            (Place::Device(a), Place::Device(b)) => a.same_as(b),
            _ => false,
        }
    }

    /// `n` bytes of new, exclusively owned memory here: zeroed on the host,
    /// uninitialised on the device unless `zeroed`.
    pub(crate) fn alloc(&self, n: usize, zeroed: bool) -> Result<Memory> {
        Ok(match self {
            Place::Host => Memory::Host(Bytes::from(zeroed_vec(n)?)),
            Place::Device(ctx) => {
                let d = ctx.allocate(n)?;
                if zeroed {
                    d.fill(0)?;
                }
                Memory::Device(d)
            }
        })
    }

    /// `len` bytes of `src` from `offset`, here: a zero-copy slice when `src` already
    /// lives here, else one copy (host→device, device→host through page-locked memory,
    /// device→device across contexts).
    pub(crate) fn bring(&self, src: &Memory, offset: usize, len: usize) -> Result<Memory> {
        if self.same(&src.place()) {
            return src.slice(offset, len);
        }
        check_range("transfer", offset, len, src.len())?;
        Ok(match (self, src) {
            (Place::Host, Memory::Device(d)) => {
                Memory::Host(Bytes::from(d.slice(offset, len)?.to_host()?))
            }
            (Place::Device(ctx), Memory::Host(b)) => {
                Memory::Device(DeviceBuffer::from_slice(ctx, &b[offset..offset + len])?)
            }
            (Place::Device(ctx), Memory::Device(d)) => {
                let out = ctx.allocate(len)?;
                out.copy_from_device(0, &d.slice(offset, len)?)?;
                Memory::Device(out)
            }
            (Place::Host, Memory::Host(b)) => Memory::Host(b.slice(offset..offset + len)),
        })
    }
}

/// Read access to memory for a primitive.
pub(crate) enum MemRef<'a> {
    Host(&'a [u8]),
    Device(&'a DeviceBuffer),
}

/// Write access to memory for a primitive.
pub(crate) enum MemMut<'a> {
    Host(&'a mut [u8]),
    Device(&'a DeviceBuffer),
}

fn mixed(op: &str) -> Error {
    Error::invalid(format!(
        "{op}: source and destination are in different memories (host/device or two \
         device contexts); move one first"
    ))
}

fn host_range<'a>(b: &'a [u8], offset: usize, len: usize, what: &'static str) -> Result<&'a [u8]> {
    let end = check_range(what, offset, len, b.len())?;
    Ok(&b[offset..end])
}

fn host_range_mut<'a>(
    b: &'a mut [u8],
    offset: usize,
    len: usize,
    what: &'static str,
) -> Result<&'a mut [u8]> {
    let end = check_range(what, offset, len, b.len())?;
    Ok(&mut b[offset..end])
}

/// The five primitives, on whichever side the memory is.
pub(crate) mod prim {
    use super::*;

    /// Fills `len` bytes from `offset` with `pattern`.
    pub(crate) fn fill(
        dst: &mut MemMut<'_>,
        offset: usize,
        len: usize,
        pattern: &[u8],
    ) -> Result<()> {
        match dst {
            MemMut::Host(b) => host_ops::fill(host_range_mut(b, offset, len, "fill")?, pattern),
            MemMut::Device(d) => {
                if len == 0 {
                    return Ok(());
                }
                ops::fill(&d.slice(offset, len)?, pattern, None)
            }
        }
    }

    /// Casts `n` elements.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn cast(
        src: &MemRef<'_>,
        src_offset: usize,
        src_kind: ElementType,
        dst: &mut MemMut<'_>,
        dst_offset: usize,
        dst_kind: ElementType,
        n: usize,
    ) -> Result<()> {
        let (sl, dl) = (n * src_kind.size(), n * dst_kind.size());
        match (src, dst) {
            (MemRef::Host(s), MemMut::Host(d)) => host_ops::cast(
                host_range(s, src_offset, sl, "cast source")?,
                src_kind,
                host_range_mut(d, dst_offset, dl, "cast destination")?,
                dst_kind,
            ),
            (MemRef::Device(s), MemMut::Device(d)) if s.context().same_as(d.context()) => {
                if n == 0 {
                    return Ok(());
                }
                ops::cast(
                    &s.slice(src_offset, sl)?,
                    src_kind,
                    &d.slice(dst_offset, dl)?,
                    dst_kind,
                    None,
                )
            }
            _ => Err(mixed("cast")),
        }
    }

    /// Copies an n-d view into an n-d view.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn strided_copy(
        src: &MemRef<'_>,
        src_offset: usize,
        src_strides: &[isize],
        dst: &mut MemMut<'_>,
        dst_offset: usize,
        dst_strides: &[isize],
        shape: &[usize],
        elem: usize,
    ) -> Result<()> {
        match (src, dst) {
            (MemRef::Host(s), MemMut::Host(d)) => host_ops::strided_copy(
                s,
                src_offset,
                src_strides,
                d,
                dst_offset,
                dst_strides,
                shape,
                elem,
            ),
            (MemRef::Device(s), MemMut::Device(d)) if s.context().same_as(d.context()) => {
                if shape.contains(&0) {
                    return Ok(());
                }
                ops::strided_copy(
                    s,
                    src_offset,
                    src_strides,
                    d,
                    dst_offset,
                    dst_strides,
                    shape,
                    elem,
                    None,
                )
            }
            _ => Err(mixed("strided_copy")),
        }
    }

    /// Swaps the bytes of every `width`-byte unit of `len` bytes from `offset`.
    pub(crate) fn byteswap(
        dst: &mut MemMut<'_>,
        offset: usize,
        len: usize,
        width: usize,
    ) -> Result<()> {
        match dst {
            MemMut::Host(b) => {
                host_ops::byteswap(host_range_mut(b, offset, len, "byteswap")?, width)
            }
            MemMut::Device(d) => {
                if len == 0 || width == 1 {
                    return Ok(());
                }
                ops::byteswap(&d.slice(offset, len)?, width, None)
            }
        }
    }

    /// Packs the booleans of `src` (one byte each, non-zero is true) into the bitmap at
    /// the start of `dst` (least significant bit first). `dst` holds
    /// [`packed_alloc_bytes`] bytes for its place (whole words on a device, 4-byte
    /// aligned); the bits past `src`'s booleans are zero.
    pub(crate) fn pack_bits(src: &MemRef<'_>, dst: &mut MemMut<'_>) -> Result<()> {
        match (src, dst) {
            (MemRef::Host(s), MemMut::Host(d)) => {
                let need = s.len().div_ceil(8);
                if d.len() < need {
                    return Err(Error::invalid(format!(
                        "pack_bits: the destination holds {} bytes, packing {} booleans \
                         writes {need}",
                        d.len(),
                        s.len()
                    )));
                }
                host_ops::pack_bits(s, d);
                Ok(())
            }
            (MemRef::Device(s), MemMut::Device(d)) => bits::pack_bits(s, d),
            _ => Err(mixed("pack_bits")),
        }
    }

    /// Whether all `len / t.size()` elements from `offset` equal `value`.
    pub(crate) fn all_equal(
        src: &MemRef<'_>,
        offset: usize,
        len: usize,
        t: ElementType,
        value: &[u8],
        mode: EqualMode,
    ) -> Result<bool> {
        match src {
            MemRef::Host(b) => {
                host_ops::all_equal(host_range(b, offset, len, "all_equal")?, t, value, mode)
            }
            MemRef::Device(d) => {
                if len == 0 {
                    return Ok(true);
                }
                ops::all_equal(&d.slice(offset, len)?, t, value, mode, None)
            }
        }
    }
}
