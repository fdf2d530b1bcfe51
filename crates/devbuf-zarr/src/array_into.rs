//! Reads of a [`ZarrArray`] into memory the caller already holds: host memory (a `Vec`,
//! page-locked memory, any `&mut [u8]`) or a device buffer. A pipeline that reads many
//! selections of one size reuses one buffer instead of getting fresh memory for each
//! read, whose first touch (the kernel zero-fills every new page) costs about as much
//! as decoding on some machines (`docs/performance.md`).

use std::ops::Range;

use super::ZarrArray;
use super::read::{self, ReadBox, ReadReport};
use devbuf_core::cuda::{DeviceBuffer, HostBuffer};
use devbuf_core::error::Result;

/// Memory a read fills in place ([`Read::into`](crate::Read::into)): exactly the
/// selection's bytes, native-endian elements in C order, as
/// [`Read::to`](crate::Read::to) would return them.
///
/// Converts from `&mut [u8]`, `&mut Vec<u8>` and `&DeviceBuffer` (a writable buffer or
/// a view of one, on any device: the read decodes onto that buffer's device).
#[derive(Debug)]
#[non_exhaustive]
pub enum ReadInto<'a> {
    /// Host memory.
    Host(&'a mut [u8]),
    /// Device memory.
    Device(&'a DeviceBuffer),
}

impl<'a> From<&'a mut [u8]> for ReadInto<'a> {
    fn from(b: &'a mut [u8]) -> Self {
        ReadInto::Host(b)
    }
}

impl<'a> From<&'a mut Vec<u8>> for ReadInto<'a> {
    fn from(b: &'a mut Vec<u8>) -> Self {
        ReadInto::Host(b.as_mut_slice())
    }
}

impl<'a> From<&'a DeviceBuffer> for ReadInto<'a> {
    fn from(b: &'a DeviceBuffer) -> Self {
        ReadInto::Device(b)
    }
}

/// Memory an async read fills and hands back ([`Read::into_async`](crate::Read::into_async)):
/// owned, so the read's thread can hold it whatever happens to the future. Implemented
/// for `Vec<u8>`, page-locked [`HostBuffer`]s and [`DeviceBuffer`]s (a buffer or a view;
/// the handle is shared, so the caller's copy sees the values).
pub trait ReadTarget: Send + 'static + sealed::Sealed {
    /// The memory as a read's destination.
    #[doc(hidden)]
    fn as_read_into(&mut self) -> ReadInto<'_>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for Vec<u8> {}
    impl Sealed for devbuf_core::cuda::HostBuffer {}
    impl Sealed for devbuf_core::cuda::DeviceBuffer {}
}

impl ReadTarget for Vec<u8> {
    fn as_read_into(&mut self) -> ReadInto<'_> {
        ReadInto::Host(self.as_mut_slice())
    }
}

impl ReadTarget for HostBuffer {
    fn as_read_into(&mut self) -> ReadInto<'_> {
        ReadInto::Host(&mut self[..])
    }
}

impl ReadTarget for DeviceBuffer {
    fn as_read_into(&mut self) -> ReadInto<'_> {
        ReadInto::Device(self)
    }
}

impl ZarrArray {
    /// Reads the box `ranges` into `out` ([`Read::into`](crate::Read::into)'s engine).
    pub(crate) fn read_box_into(
        &self,
        ranges: &[Range<u64>],
        out: ReadInto<'_>,
    ) -> Result<ReadReport> {
        let (start, shape) = self.check_ranges(ranges)?;
        let total = super::read::plan::checked_bytes(&shape, self.elem())?;
        let request = ReadBox {
            start,
            shape,
            offset: 0,
        };
        let dest = match out {
            ReadInto::Host(h) => read::Dest::Host(h),
            ReadInto::Device(d) => read::Dest::Device(d),
        };
        Ok(self
            .run_read_to(std::slice::from_ref(&request), total, dest)?
            .1)
    }
}
