//! Reads of a [`ZarrArray`] into memory the caller already holds: host memory (a `Vec`,
//! page-locked memory, any `&mut [u8]`) or a device buffer. A pipeline that reads many
//! selections of one size reuses one buffer instead of getting fresh memory for each
//! read, whose first touch (the kernel zero-fills every new page) costs about as much
//! as decoding on some machines (`docs/performance.md`).

use std::ops::Range;

use super::ZarrArray;
use super::read::{self, ReadBox, ReadReport};
use devbuf_core::cuda::DeviceBuffer;
use devbuf_core::error::Result;

/// Memory a read fills in place ([`ZarrArray::read_subset_into`]): exactly the
/// selection's bytes, native-endian elements in C order, as
/// [`read_subset`](ZarrArray::read_subset) would return them.
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

impl ZarrArray {
    /// Reads the box `ranges` (one half-open range per axis, as
    /// [`read_subset`](Self::read_subset)) into `out`, memory the caller holds, and says
    /// what the read engine did.
    ///
    /// `out` must hold exactly the box's bytes (element count times element size; an
    /// error names both sizes otherwise). The values land as `read_subset` returns them:
    /// native-endian, C order, missing chunks as the fill value. Every byte of `out` is
    /// written, so it need not be cleared between reads. The engine is the same as for
    /// new memory: each chunk decoded once, on one worker per core (host) or through the
    /// page-locked staging slots and device copies, with nvCOMP where
    /// [`ReadOptions::decoder`](super::ReadOptions::decoder) says so (device). The call
    /// returns when the values are in place (for a device buffer: on the device, every
    /// copy finished).
    ///
    /// On an error (a damaged chunk, a failed fetch) `out` may hold part of the
    /// selection; its contents are unspecified until a read into it succeeds.
    ///
    /// A device `out` is written on the read engine's own streams, which do not wait
    /// for other work: device work queued elsewhere that still reads or writes `out`
    /// must have finished first (synchronize its stream), as for any copy into device
    /// memory.
    ///
    /// ```
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::BufferPrototype;
    /// let a = ZarrArray::open("../../tests/fixtures/zarr/v2_int16_zstd.zarr")?; // 6 x 5 x 4 int16
    /// let mut frame = vec![0u8; 5 * 4 * 2]; // one [1, 5, 4] box, reused for every read
    /// for i in 0..6 {
    ///     let report = a.read_subset_into(&[i..i + 1, 0..5, 0..4], &mut frame)?;
    ///     assert_eq!(report.target, "host (the caller's memory)");
    ///     let fresh = a.read_subset(&[i..i + 1, 0..5, 0..4], &BufferPrototype::Host)?;
    ///     assert_eq!(&frame[..], &fresh.to_buffer()?.to_host()?[..]);
    /// }
    /// assert!(a.read_subset_into(&[0..2, 0..5, 0..4], &mut frame).is_err()); // 80 bytes needed
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    ///
    /// Into device memory (a buffer kept across reads, or a view of a larger one):
    ///
    /// ```no_run
    /// use devbuf_core::cuda::Context;
    /// use devbuf_zarr::ZarrArray;
    /// let a = ZarrArray::open("../../tests/fixtures/zarr/v3_float32.zarr")?;
    /// let ctx = Context::new(0)?;
    /// let shape = a.shape().to_vec();
    /// let bytes = shape.iter().product::<u64>() as usize * 4;
    /// let both = ctx.allocate(2 * bytes)?; // two arrays side by side
    /// let whole: Vec<_> = shape.iter().map(|&n| 0..n).collect();
    /// a.read_subset_into(&whole, &both.slice(0, bytes)?)?;
    /// a.read_subset_into(&whole, &both.slice(bytes, bytes)?)?;
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn read_subset_into<'a>(
        &self,
        ranges: &[Range<u64>],
        out: impl Into<ReadInto<'a>>,
    ) -> Result<ReadReport> {
        let (start, shape) = self.check_ranges(ranges)?;
        let total = super::read::plan::checked_bytes(&shape, self.elem())?;
        let request = ReadBox {
            start,
            shape,
            offset: 0,
        };
        let dest = match out.into() {
            ReadInto::Host(h) => read::Dest::Host(h),
            ReadInto::Device(d) => read::Dest::Device(d),
        };
        Ok(self
            .run_read_to(std::slice::from_ref(&request), total, dest)?
            .1)
    }

    /// Reads the whole array into `out` (see [`read_subset_into`](Self::read_subset_into)).
    ///
    /// ```
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::BufferPrototype;
    /// let a = ZarrArray::open("../../tests/fixtures/zarr/v3_float64.zarr")?; // 10 x 7 float64
    /// let mut out = vec![0xA5u8; 10 * 7 * 8];
    /// a.read_all_into(&mut out)?;
    /// assert_eq!(&out[..], &a.read_all(&BufferPrototype::Host)?.to_buffer()?.to_host()?[..]);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn read_all_into<'a>(&self, out: impl Into<ReadInto<'a>>) -> Result<ReadReport> {
        let ranges: Vec<Range<u64>> = self.shape().iter().map(|&s| 0..s).collect();
        self.read_subset_into(&ranges, out)
    }
}
