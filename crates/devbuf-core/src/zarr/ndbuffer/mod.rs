//! [`NDBuffer`]: a typed n-d view of host or device memory.
//!
//! This file: the type, construction, properties, conversions, helpers and formatting.
//! `views.rs`: new arrays and zero-copy views. `write.rs`: writes and comparison.

mod views;
mod write;

use std::fmt;

use bytes::Bytes;
use ndarray::{ArrayD, ArrayViewD, IxDyn, ShapeBuilder};

use super::buffer::ByteBuffer;
use super::dtype::{Dtype, Element, Endianness, Scalar, promote_types, read_scalar};
use super::index::{AxisSel, Resolved, resolve};
use super::layout::{Order, StridedLayout, checked_size};
use super::prototype::BufferPrototype;
use crate::cuda::DeviceBuffer;
use crate::element::{ElementType, EqualMode};
use crate::error::{Error, Result};
use crate::memory::host_ops;
use crate::memory::{MemMut, MemRef, Memory, Place, prim};

/// zarr's `NDBuffer`: an n-d array of one [`Dtype`] in host or device memory.
///
/// Internally it is [`Memory`] plus a data type, a shape, byte strides and a byte
/// offset, so [`get`](Self::get), [`transpose`](Self::transpose),
/// [`squeeze`](Self::squeeze) and (on contiguous data) [`reshape`](Self::reshape) are
/// views that copy nothing. Operations that need the elements contiguous
/// ([`astype`](Self::astype), [`all_equal`](Self::all_equal), moving to another memory)
/// run directly on the memory when the view is dense (contiguous in C, F or any
/// transposed order), and otherwise copy the view once into a dense temporary.
///
/// **Value semantics (copy-on-write).** Clones and views share memory; a write
/// ([`set`](Self::set), [`set_scalar`](Self::set_scalar)) first
/// copies the view into memory of its own when any other handle can see the memory
/// (another clone or view, the `Bytes` or `DeviceBuffer` it was made from, a store
/// holding it), on the host and on the device alike. A write is therefore never
/// visible through another handle, and writing into a buffer that only you hold
/// happens in place. (numpy and cupy views would share the write; zarr-python copies
/// explicitly where it matters.)
///
/// **Device.** On a device every operation runs there through the kernels in
/// `cuda::kernels::ops` (fill, cast, strided copy, byte swap, all-equal); data crosses
/// to the host only when asked ([`to_ndarray`](Self::to_ndarray),
/// [`to_prototype`](Self::to_prototype), [`as_scalar`](Self::as_scalar)).
///
/// ```
/// use devbuf_core::zarr::{AxisSel, BufferPrototype, Dtype, NDBuffer, Order, Scalar, Slice};
/// use ndarray::ArrayD;
///
/// let a = ArrayD::from_shape_vec(vec![3, 4], (0..12).map(|v| v as f32).collect()).unwrap();
/// let mut nd = NDBuffer::from_ndarray(a);
/// let view = nd.get(&[Slice::new(None, None, 2).into(), Slice::new(Some(1), Some(-1), 1).into()])?; // [::2, 1:-1]
/// assert_eq!(view.shape(), &[2, 2]);
/// assert_eq!(view.to_ndarray::<f32>()?.into_raw_vec_and_offset().0, vec![1.0, 2.0, 9.0, 10.0]);
/// nd.set_scalar(&[AxisSel::Index(0)], Scalar::from(-1.0f32))?;
/// assert!(nd.get(&[0.into()])?.all_equal(Some(Scalar::from(-1.0f32)), true)?);
/// assert_eq!(nd.transpose(None)?.shape(), &[4, 3]);
/// let f64s = nd.astype(Dtype::FLOAT64)?;
/// assert_eq!(f64s.get(&[2.into(), 3.into()])?.as_scalar()?, Scalar::Float64(11.0));
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone)]
pub struct NDBuffer {
    mem: Memory,
    dtype: Dtype,
    layout: StridedLayout,
}

/// What [`NDBuffer::as_ndarray_like`] returns: the memory and how the array sits in it
/// (never a copy).
#[derive(Clone, Copy, Debug)]
pub struct NdArrayLike<'a> {
    /// The memory (host `Bytes` or a `DeviceBuffer`).
    pub memory: &'a Memory,
    /// The data type.
    pub dtype: Dtype,
    /// The shape.
    pub shape: &'a [usize],
    /// Byte strides, one per axis.
    pub strides: &'a [usize],
    /// Byte offset of element `[0, .., 0]` in `memory`.
    pub offset: usize,
}

/// A `Vec<T>` of plain-old-data elements seen as bytes (for zero-copy `Bytes`).
struct VecBytes<T: Element>(Vec<T>);

impl<T: Element> AsRef<[u8]> for VecBytes<T> {
    fn as_ref(&self) -> &[u8] {
        // Safety: every `Element` type is plain-old-data without padding (bool, fixed
        // width integers and floats, `#[repr(C)]` complex pairs); the byte view covers
        // exactly the vector's initialised elements and borrows `self`.
        unsafe {
            std::slice::from_raw_parts(
                self.0.as_ptr().cast::<u8>(),
                std::mem::size_of_val(self.0.as_slice()),
            )
        }
    }
}

impl NDBuffer {
    // ------------------------------------------------------------------ construction

    /// `create`: a new array of `shape` in `prototype`'s memory, laid out in `order`,
    /// every element `fill_value` (converted to `dtype` as numpy's unsafe cast does), or
    /// zero when `fill_value` is `None`.
    ///
    /// zarr-python's GPU `create` leaves the memory uninitialised when `fill_value` is
    /// `None`; here both memories are zeroed, so results never depend on old memory.
    /// Use [`empty`](Self::empty) for uninitialised device memory.
    pub fn create(
        prototype: &BufferPrototype,
        shape: &[usize],
        dtype: Dtype,
        order: Order,
        fill_value: Option<Scalar>,
    ) -> Result<NDBuffer> {
        let (_, nbytes) = checked_size(shape, dtype.element().size())?;
        let place = prototype.place()?;
        let layout = StridedLayout::contiguous(shape, dtype.element().size(), order);
        let pattern = fill_value.map(|v| v.to_bytes_as(dtype));
        let zero = pattern.as_ref().is_none_or(|p| p.iter().all(|&b| b == 0));
        let mut mem = place.alloc(nbytes, zero)?;
        if let Some(p) = pattern.filter(|_| !zero) {
            mem.write(|mut m| prim::fill(&mut m, 0, nbytes, &p))?;
        }
        Ok(NDBuffer { mem, dtype, layout })
    }

    /// `empty`: like [`create`](Self::create) without a fill: device memory is left
    /// uninitialised (host memory is zeroed, as safe Rust requires). The layout honours
    /// `order`.
    pub fn empty(
        prototype: &BufferPrototype,
        shape: &[usize],
        dtype: Dtype,
        order: Order,
    ) -> Result<NDBuffer> {
        let (_, nbytes) = checked_size(shape, dtype.element().size())?;
        let mem = prototype.place()?.alloc(nbytes, false)?;
        Ok(NDBuffer {
            mem,
            dtype,
            layout: StridedLayout::contiguous(shape, dtype.element().size(), order),
        })
    }

    /// `from_numpy_array` on the host: takes an `ndarray` array **without copying** when
    /// its strides are not negative (any C, F or transposed layout, and slices of them);
    /// otherwise copies it into standard layout first. The data type is `T`'s element
    /// type in native byte order.
    ///
    /// ```
    /// use devbuf_core::zarr::NDBuffer;
    /// let a = ndarray::arr2(&[[1u16, 2], [3, 4]]).into_dyn();
    /// let ptr = a.as_ptr() as u64;
    /// let nd = NDBuffer::from_ndarray(a);
    /// assert_eq!(nd.as_ndarray_like().memory.address(), ptr); // zero-copy
    /// ```
    pub fn from_ndarray<T: Element, D: ndarray::Dimension>(
        array: ndarray::Array<T, D>,
    ) -> NDBuffer {
        let array = array.into_dyn();
        let array = if array.strides().iter().any(|&s| s < 0) {
            array.as_standard_layout().into_owned()
        } else {
            array
        };
        let es = T::ELEMENT_TYPE.size();
        let shape = array.shape().to_vec();
        let strides: Vec<usize> = array.strides().iter().map(|&s| s as usize * es).collect();
        let (vec, offset) = array.into_raw_vec_and_offset();
        let size: usize = shape.iter().product();
        let offset = if size == 0 {
            0
        } else {
            offset.unwrap_or(0) * es
        };
        NDBuffer {
            mem: Memory::Host(Bytes::from_owner(VecBytes(vec))),
            dtype: Dtype::from(T::ELEMENT_TYPE),
            layout: StridedLayout {
                shape,
                strides,
                offset,
            },
        }
    }

    /// `from_ndarray_like` for raw memory: wraps `memory` (host or device, zero-copy) as
    /// a contiguous array of `shape` in `order`. The memory must hold exactly
    /// `shape.product() * dtype.element().size()` bytes. A [`ByteBuffer`]'s bytes as an
    /// array (numpy's `np.frombuffer(...).reshape(...)`) is
    /// `NDBuffer::from_memory(buffer.into_memory(), ...)`.
    ///
    /// ```
    /// use devbuf_core::ElementType;
    /// use devbuf_core::zarr::{Dtype, Endianness, NDBuffer, Order, Scalar};
    /// let be_u16 = Dtype::new(ElementType::UInt16, Endianness::Big);
    /// let nd = NDBuffer::from_memory(vec![0u8, 1, 0, 2], &[2], be_u16, Order::C)?;
    /// assert_eq!(nd.get(&[1.into()])?.as_scalar()?, Scalar::UInt16(2));
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn from_memory(
        memory: impl Into<Memory>,
        shape: &[usize],
        dtype: Dtype,
        order: Order,
    ) -> Result<NDBuffer> {
        let mem = memory.into();
        let (_, nbytes) = checked_size(shape, dtype.element().size())?;
        if mem.len() != nbytes {
            return Err(Error::invalid(format!(
                "memory of {} bytes cannot hold shape {shape:?} of {dtype} ({nbytes} bytes)",
                mem.len()
            )));
        }
        Ok(NDBuffer {
            mem,
            dtype,
            layout: StridedLayout::contiguous(shape, dtype.element().size(), order),
        })
    }

    /// A view with explicit byte `strides` and byte `offset` into `memory` (zero-copy);
    /// the view must lie inside the memory.
    pub fn from_parts(
        memory: impl Into<Memory>,
        dtype: Dtype,
        shape: &[usize],
        strides: &[usize],
        offset: usize,
    ) -> Result<NDBuffer> {
        let mem = memory.into();
        let layout = StridedLayout {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            offset,
        };
        checked_size(shape, dtype.element().size())?;
        layout.check_fits(mem.len(), dtype.element().size())?;
        Ok(NDBuffer { mem, dtype, layout })
    }

    // ------------------------------------------------------------------ properties

    /// The shape. Python's `len(buffer)` is `shape()[0]` (`shape().first()`: `None` for a
    /// 0-d array, where Python raises).
    pub fn shape(&self) -> &[usize] {
        &self.layout.shape
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.layout.ndim()
    }

    /// The data type; `dtype().byteorder()` is zarr's `NDBuffer.byteorder`.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// Number of elements.
    pub fn size(&self) -> usize {
        self.layout.size()
    }

    /// Bytes the elements occupy (`size * itemsize`).
    pub fn nbytes(&self) -> usize {
        self.size() * self.dtype.element().size()
    }

    /// True when the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.size() == 0
    }

    /// Byte strides, one per axis.
    pub fn strides(&self) -> &[usize] {
        &self.layout.strides
    }

    /// True when the elements are contiguous in `order` (numpy's `C_CONTIGUOUS` /
    /// `F_CONTIGUOUS` flags: axes of length 1 do not count).
    ///
    /// ```
    /// use devbuf_core::zarr::{NDBuffer, Order};
    /// let nd = NDBuffer::from_ndarray(ndarray::arr2(&[[1u8, 2, 3], [4, 5, 6]]));
    /// assert!(nd.is_contiguous(Order::C) && !nd.is_contiguous(Order::F));
    /// assert!(nd.transpose(None)?.is_contiguous(Order::F));
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn is_contiguous(&self, order: Order) -> bool {
        let es = self.dtype.element().size();
        match order {
            Order::C => self.layout.is_c_contiguous(es),
            Order::F => self.layout.is_f_contiguous(es),
        }
    }

    /// The prototype whose memory this is (`prototype().is_host()`,
    /// `prototype().is_device()`).
    pub fn prototype(&self) -> BufferPrototype {
        self.mem.prototype()
    }

    /// `as_ndarray_like`: the underlying memory and layout, never a copy.
    pub fn as_ndarray_like(&self) -> NdArrayLike<'_> {
        NdArrayLike {
            memory: &self.mem,
            dtype: self.dtype,
            shape: &self.layout.shape,
            strides: &self.layout.strides,
            offset: self.layout.offset,
        }
    }

    // ------------------------------------------------------------------ conversions

    /// `as_numpy_array`: the values as a host `ndarray` (a copy; device data crosses
    /// once; big-endian data is converted to native values). The array keeps this
    /// buffer's memory order (C, F or a transposition). `T` must be the element type.
    pub fn to_ndarray<T: Element>(&self) -> Result<ArrayD<T>> {
        self.check_element::<T>()?;
        let es = self.dtype.element().size();
        let dense = self.to_dense_le()?;
        let start = dense.layout.offset;
        let bytes = Place::Host.bring(&dense.mem, start, self.nbytes())?;
        let bytes = bytes.as_host().cloned().unwrap_or_default();
        let values: Vec<T> = bytes.chunks_exact(es).map(T::read_le).collect();
        let shape = self.layout.shape.clone();
        if self.size() == 0 || self.ndim() <= 1 {
            return ArrayD::from_shape_vec(IxDyn(&shape), values)
                .map_err(|e| Error::invalid(format!("internal: ndarray shape: {e}")));
        }
        let k = dense.layout.k_compact(es);
        let strides: Vec<usize> = k.strides.iter().map(|s| s / es).collect();
        ArrayD::from_shape_vec(IxDyn(&shape).strides(IxDyn(&strides)), values)
            .map_err(|e| Error::invalid(format!("internal: ndarray layout: {e}")))
    }

    /// A zero-copy `ndarray` view of host data in native byte order. Errors for device
    /// memory, another byte order, a `T` that is not the element type, memory that is
    /// not aligned for `T`, and `bool` data holding bytes other than 0 and 1.
    pub fn as_array_view<T: Element>(&self) -> Result<ArrayViewD<'_, T>> {
        self.check_element::<T>()?;
        let Memory::Host(bytes) = &self.mem else {
            return Err(Error::invalid(
                "as_array_view needs host memory; this NDBuffer is on a device (use to_ndarray)",
            ));
        };
        if self.dtype.byteorder() != Endianness::NATIVE {
            return Err(Error::invalid(format!(
                "as_array_view needs native byte order; the data is {} (use to_ndarray)",
                self.dtype
            )));
        }
        let es = self.dtype.element().size();
        let align = std::mem::align_of::<T>();
        let shape = self.layout.shape.clone();
        if self.size() == 0 {
            return ArrayViewD::from_shape(IxDyn(&shape), &[][..])
                .map_err(|e| Error::invalid(format!("internal: ndarray view: {e}")));
        }
        // An invariant of every NDBuffer, checked again here (it is cheap) because the
        // unsafe view below relies on it.
        self.layout.check_fits(bytes.len(), es)?;
        // In bounds: the view is not empty, so its first element lies inside `bytes`.
        let first = bytes[self.layout.offset..].as_ptr();
        let base = first as usize;
        // Strides that are stepped along (others, of axes of length 1, may be anything,
        // even beyond `isize`; they become 0).
        let strides = self.layout.istrides();
        if !base.is_multiple_of(align)
            || strides
                .iter()
                .any(|&s| !(s as usize).is_multiple_of(es) || !(s as usize).is_multiple_of(align))
        {
            return Err(Error::invalid(format!(
                "as_array_view: the data at {base:#x} with byte strides {:?} is not aligned \
                 for {} ({align}-byte alignment); use to_ndarray",
                self.layout.strides,
                T::ELEMENT_TYPE
            )));
        }
        if T::ELEMENT_TYPE == ElementType::Bool {
            let mut ok = true;
            self.for_each_offset(|off| {
                ok = bytes[off] <= 1;
                ok
            });
            if !ok {
                return Err(Error::invalid(
                    "as_array_view::<bool>: the data holds bytes other than 0 and 1",
                ));
            }
        }
        let strides: Vec<usize> = strides.iter().map(|&s| s as usize / es).collect();
        // Safety: `check_fits` (checked above) keeps every element of the view inside
        // `bytes` (and `first` is derived from `bytes`, keeping its provenance), and `checked_size` keeps the element count within
        // `isize::MAX`; the pointer and strides are aligned for `T`, and the strides
        // are non-negative (`istrides` is `0..=isize::MAX` here: a stepped stride lies
        // inside the memory); every bit pattern is a valid `T` (bool checked above);
        // `Bytes` is immutable and borrowed through `&self` for the view's lifetime, so
        // nothing writes it meanwhile.
        unsafe {
            Ok(ArrayViewD::from_shape_ptr(
                IxDyn(&shape).strides(IxDyn(&strides)),
                first.cast::<T>(),
            ))
        }
    }

    /// This array in `prototype`'s memory: zero-copy when it is already there, else one
    /// transfer of the elements (a dense view moves as it is; a strided view is first
    /// gathered on its own side).
    pub fn to_prototype(&self, prototype: &BufferPrototype) -> Result<NDBuffer> {
        if self.mem.prototype() == *prototype {
            return Ok(self.clone());
        }
        self.to_place(&prototype.place()?)
    }

    fn to_place(&self, place: &Place) -> Result<NDBuffer> {
        if place.same(&self.mem.place()) {
            return Ok(self.clone());
        }
        let dense = self.to_dense()?;
        let mem = place.bring(&dense.mem, dense.layout.offset, self.nbytes())?;
        Ok(NDBuffer {
            mem,
            dtype: self.dtype,
            layout: StridedLayout {
                offset: 0,
                ..dense.layout
            },
        })
    }

    /// The elements' bytes in C order as a [`ByteBuffer`] (what zarr's bytes codec
    /// writes): zero-copy when the array is C-contiguous, else one copy.
    pub fn to_buffer(&self) -> Result<ByteBuffer> {
        let src = if self.is_contiguous(Order::C) {
            self.clone()
        } else {
            self.copy_order(Order::C)?
        };
        let off = if self.size() == 0 {
            0
        } else {
            src.layout.offset
        };
        Ok(ByteBuffer::from(src.mem.slice(off, self.nbytes())?))
    }

    /// `as_scalar`: the value of an array with exactly one element (of any shape: 0-d,
    /// `(1,)`, `(1, 1)`, ...; numpy returns a 1-element array for the latter, whose
    /// value is this). Errors otherwise with zarr's message.
    pub fn as_scalar(&self) -> Result<Scalar> {
        if self.size() != 1 {
            return Err(Error::invalid(format!(
                "Buffer does not contain a single scalar value (shape {:?} has {} elements)",
                self.layout.shape,
                self.size()
            )));
        }
        let es = self.dtype.element().size();
        let off = self.layout.offset;
        let mut b = vec![0u8; es];
        match &self.mem {
            Memory::Host(h) => b.copy_from_slice(&h[off..off + es]),
            Memory::Device(d) => d.copy_to_host(off, &mut b)?,
        }
        if self.dtype.needs_swap() {
            host_ops::swap_in_place(&mut b, self.dtype.element().swap_width());
        }
        Scalar::from_le_bytes(self.dtype.element(), &b)
    }

    // ------------------------------------------------------------------ helpers

    fn check_element<T: Element>(&self) -> Result<()> {
        if T::ELEMENT_TYPE != self.dtype.element() {
            return Err(Error::invalid(format!(
                "the NDBuffer holds {}, not {} ({})",
                self.dtype,
                T::ELEMENT_TYPE,
                std::any::type_name::<T>()
            )));
        }
        Ok(())
    }

    /// Calls `f` with the byte offset of every element, in C order, until it returns
    /// `false`.
    fn for_each_offset(&self, mut f: impl FnMut(usize) -> bool) {
        if self.size() == 0 {
            return;
        }
        let nd = self.ndim();
        let mut idx = vec![0usize; nd];
        loop {
            let off = self.layout.offset
                + idx
                    .iter()
                    .zip(&self.layout.strides)
                    .map(|(i, s)| i * s)
                    .sum::<usize>();
            if !f(off) {
                return;
            }
            let mut k = nd;
            loop {
                if k == 0 {
                    return;
                }
                k -= 1;
                idx[k] += 1;
                if idx[k] < self.layout.shape[k] {
                    break;
                }
                idx[k] = 0;
            }
        }
    }
}

/// Strides that broadcast `value` to `target` shape, numpy's rules: leading axes of
/// length 1 in `value` may be dropped, axes are aligned at the end, and an axis of
/// length 1 (or a missing one) repeats.
fn broadcast_strides(value: &StridedLayout, target: &[usize]) -> Result<Vec<isize>> {
    let err = || {
        Error::invalid(format!(
            "could not broadcast input array from shape {:?} into shape {target:?}",
            value.shape
        ))
    };
    let mut vs: &[usize] = &value.shape;
    let mut vt: &[usize] = &value.strides;
    while vs.len() > target.len() {
        if vs[0] != 1 {
            return Err(err());
        }
        vs = &vs[1..];
        vt = &vt[1..];
    }
    let lead = target.len() - vs.len();
    let mut out = vec![0isize; target.len()];
    for (i, &n) in target.iter().enumerate() {
        if i < lead {
            continue;
        }
        let j = i - lead;
        if vs[j] == n {
            // An axis of length 1 is never stepped along (its stride may be anything).
            out[i] = if n <= 1 { 0 } else { vt[j] as isize };
        } else if vs[j] == 1 {
            out[i] = 0;
        } else {
            return Err(err());
        }
    }
    Ok(out)
}

impl fmt::Debug for NDBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NDBuffer")
            .field("shape", &self.layout.shape)
            .field("dtype", &format_args!("{}", self.dtype))
            .field("strides", &self.layout.strides)
            .field("offset", &self.layout.offset)
            .field("memory", &self.mem)
            .finish()
    }
}

impl fmt::Display for NDBuffer {
    /// zarr's repr: `<NDBuffer shape=(2, 3) dtype=float32 host [0, 1, 2, 3, 4, 5]>`; the
    /// values (the first 16, in C order) are shown for host memory only (showing device
    /// values would need a copy).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shape: Vec<String> = self.layout.shape.iter().map(|d| d.to_string()).collect();
        let shape = if shape.len() == 1 {
            format!("({},)", shape[0])
        } else {
            format!("({})", shape.join(", "))
        };
        write!(
            f,
            "<NDBuffer shape={shape} dtype={} {}",
            self.dtype,
            self.prototype()
        )?;
        if let Memory::Host(bytes) = &self.mem {
            let es = self.dtype.element().size();
            let mut vals = Vec::new();
            let mut more = false;
            self.for_each_offset(|off| {
                if vals.len() == 16 {
                    more = true;
                    return false;
                }
                let mut b = bytes[off..off + es].to_vec();
                if self.dtype.needs_swap() {
                    host_ops::swap_in_place(&mut b, self.dtype.element().swap_width());
                }
                vals.push(read_scalar(self.dtype.element(), &b).to_string());
                true
            });
            write!(
                f,
                " [{}{}]",
                vals.join(", "),
                if more { ", ..." } else { "" }
            )?;
        } else {
            write!(f, " address={:#x}", self.mem.address())?;
        }
        f.write_str(">")
    }
}

#[cfg(test)]
mod tests;
