//! zarr-python's `prototype.buffer.*` and `prototype.nd_buffer.*` constructors, as
//! methods of [`BufferPrototype`]. They make [`ByteBuffer`]s and [`NDBuffer`]s, which take a
//! prototype themselves: keeping them apart from the prototype's own definition keeps
//! the buffer types and the prototype from importing each other.

use bytes::Bytes;

use super::buffer::ByteBuffer;
use super::dtype::{Dtype, Element, Scalar};
use super::layout::Order;
use super::ndbuffer::NDBuffer;
use super::prototype::BufferPrototype;
use crate::error::Result;

impl BufferPrototype {
    /// `prototype.buffer.from_bytes`: a buffer of these host bytes in this prototype's
    /// memory (zero-copy on the host, one copy to a device).
    pub fn buffer_from_bytes(&self, bytes: impl Into<Bytes>) -> Result<ByteBuffer> {
        ByteBuffer::from_bytes(bytes).to_prototype(self)
    }

    /// `prototype.buffer.from_buffer`: `buffer` in this prototype's memory, zero-copy
    /// when it is already there.
    pub fn buffer_from_buffer(&self, buffer: &ByteBuffer) -> Result<ByteBuffer> {
        buffer.to_prototype(self)
    }

    /// `prototype.buffer.create_zero_length`.
    pub fn create_zero_length(&self) -> Result<ByteBuffer> {
        Ok(ByteBuffer::from_array_like(self.place()?.alloc(0, false)?))
    }

    /// `prototype.nd_buffer.create`: see [`NDBuffer::create`].
    pub fn nd_create(
        &self,
        shape: &[usize],
        dtype: Dtype,
        order: Order,
        fill_value: Option<Scalar>,
    ) -> Result<NDBuffer> {
        NDBuffer::create(self, shape, dtype, order, fill_value)
    }

    /// `prototype.nd_buffer.empty`: see [`NDBuffer::empty`].
    pub fn nd_empty(&self, shape: &[usize], dtype: Dtype, order: Order) -> Result<NDBuffer> {
        NDBuffer::empty(self, shape, dtype, order)
    }

    /// `prototype.nd_buffer.from_numpy_array`: a host `ndarray` in this prototype's
    /// memory (zero-copy on the host when the array is contiguous in C or F order or a
    /// transposition; one copy to a device).
    pub fn nd_from_ndarray<T: Element, D: ndarray::Dimension>(
        &self,
        array: ndarray::Array<T, D>,
    ) -> Result<NDBuffer> {
        NDBuffer::from_ndarray(array).to_prototype(self)
    }

    /// `prototype.nd_buffer.from_ndarray_like`: `nd` in this prototype's memory,
    /// zero-copy when it is already there.
    pub fn nd_from_ndbuffer(&self, nd: &NDBuffer) -> Result<NDBuffer> {
        nd.to_prototype(self)
    }
}
