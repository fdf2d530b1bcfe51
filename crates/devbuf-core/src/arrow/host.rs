//! Zero-copy conversions between page-locked host memory and arrow-rs buffers.

use std::sync::Arc;

use arrow_array::{ArrowPrimitiveType, PrimitiveArray};
use arrow_buffer::{Buffer, ScalarBuffer};

use crate::cuda::HostBuffer;
use crate::error::{Error, Result};

/// Zero-copy: the Arrow buffer's pointer is the page-locked memory, freed when the last
/// Arrow buffer (or array) that shares it drops.
///
/// ```no_run
/// use devbuf_core::cuda::Context;
/// let h = Context::new(0)?.allocate_host(64)?;
/// let ptr = h.as_ptr();
/// let buffer = arrow_buffer::Buffer::from(h);
/// assert_eq!(buffer.as_ptr(), ptr);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
impl From<HostBuffer> for Buffer {
    fn from(h: HostBuffer) -> Buffer {
        let (ptr, len) = h.raw_parts();
        // Safety: `ptr` is valid for `len` initialised bytes for as long as the owner
        // (this HostBuffer, moved into the Arc) lives; Arrow never frees it itself and
        // only reads through the pointer while holding the owner.
        unsafe { Buffer::from_custom_allocation(ptr, len, Arc::new(h)) }
    }
}

/// Zero-copy: a [`PrimitiveArray<T>`] (no nulls) over the page-locked memory. The
/// length must be a multiple of the native size (else [`Error::InvalidArgument`]).
///
/// ```no_run
/// use arrow_array::Float64Array;
/// use devbuf_core::cuda::{Context, DeviceBuffer};
/// let ctx = Context::new(0)?;
/// let d = DeviceBuffer::from_slice(&ctx, &[1.5f64, 2.5])?;
/// let a = Float64Array::try_from(d.to_host()?)?;
/// assert_eq!(a.values(), &[1.5, 2.5]);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
impl<T: ArrowPrimitiveType> TryFrom<HostBuffer> for PrimitiveArray<T> {
    type Error = Error;

    fn try_from(h: HostBuffer) -> Result<PrimitiveArray<T>> {
        let size = std::mem::size_of::<T::Native>();
        let len = h.len();
        if !len.is_multiple_of(size) {
            return Err(Error::invalid(format!(
                "buffer of {len} bytes is not a whole number of {size}-byte {} values",
                T::DATA_TYPE
            )));
        }
        // Page-locked memory is page-aligned, so the typed view is always aligned.
        let values = ScalarBuffer::<T::Native>::new(Buffer::from(h), 0, len / size);
        Ok(PrimitiveArray::<T>::try_new(values, None)?)
    }
}
