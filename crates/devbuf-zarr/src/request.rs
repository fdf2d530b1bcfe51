//! The one read call: [`ZarrArray::read`] (a selection) and [`ZarrArray::read_chunks`]
//! (whole chunks) return a request ([`Read`], [`ReadChunks`]) that says where the values
//! go (`to` new memory of a [`BufferPrototype`], `into` memory the caller holds,
//! `spread` over several devices) and whether to keep a [`ReadReport`].

use std::ops::{Range, RangeFull};

use super::ZarrArray;
use super::array_into::{ReadInto, ReadTarget};
use super::array_spread::{Spread, SpreadRead};
use super::read::ReadReport;
use crate::aio::spawn;
use devbuf_core::__private::index::{BoundingBox, bounding_box};
use devbuf_core::cuda::Context;
use devbuf_core::error::{Error, Result};
use devbuf_core::memory::Memory;
use devbuf_core::zarr::{AxisSel, BufferPrototype, NDBuffer};

/// What a read selects: the whole array, a box, or a numpy-style selection.
///
/// Converts from:
/// * `..` (`RangeFull`): the whole array;
/// * ranges, one `start..end` per axis (`&[Range<u64>]`, `[Range<u64>; N]`, `Vec`):
///   a box, every range within the shape (an error names the axis otherwise);
/// * [`AxisSel`]s (`&[AxisSel]`, `[AxisSel; N]`, `Vec`): integers (the axis is
///   dropped), ranges, [`Slice`](devbuf_core::zarr::Slice)s with positive steps and full
///   axes, numpy's rules (fewer selectors than axes select the rest whole). A stepped
///   selection is read as its bounding box and returned as a zero-copy strided view.
///
/// ```
/// use devbuf_zarr::ZarrArray;
/// use devbuf_core::zarr::{AxisSel, BufferPrototype, Slice};
/// let a = ZarrArray::open("../../tests/fixtures/zarr/v3_float64.zarr")?; // 10 x 7
/// let host = BufferPrototype::Host;
/// assert_eq!(a.read(..).to(&host)?.shape(), &[10, 7]);
/// assert_eq!(a.read([2..5, 0..7]).to(&host)?.shape(), &[3, 7]);
/// let v = a.read([Slice::new(None, None, 3).into(), AxisSel::Index(-1)]).to(&host)?;
/// assert_eq!(v.shape(), &[4]); // rows 0, 3, 6, 9 of the last column
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection(Sel);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Sel {
    All,
    Box(Vec<Range<u64>>),
    Numpy(Vec<AxisSel>),
}

impl From<RangeFull> for Selection {
    fn from(_: RangeFull) -> Self {
        Selection(Sel::All)
    }
}

impl From<&[Range<u64>]> for Selection {
    fn from(r: &[Range<u64>]) -> Self {
        Selection(Sel::Box(r.to_vec()))
    }
}

impl From<Vec<Range<u64>>> for Selection {
    fn from(r: Vec<Range<u64>>) -> Self {
        Selection(Sel::Box(r))
    }
}

impl From<&Vec<Range<u64>>> for Selection {
    fn from(r: &Vec<Range<u64>>) -> Self {
        Selection(Sel::Box(r.clone()))
    }
}

impl<const N: usize> From<[Range<u64>; N]> for Selection {
    fn from(r: [Range<u64>; N]) -> Self {
        Selection(Sel::Box(r.to_vec()))
    }
}

impl<const N: usize> From<&[Range<u64>; N]> for Selection {
    fn from(r: &[Range<u64>; N]) -> Self {
        Selection(Sel::Box(r.to_vec()))
    }
}

impl From<&[AxisSel]> for Selection {
    fn from(s: &[AxisSel]) -> Self {
        Selection(Sel::Numpy(s.to_vec()))
    }
}

impl From<Vec<AxisSel>> for Selection {
    fn from(s: Vec<AxisSel>) -> Self {
        Selection(Sel::Numpy(s))
    }
}

impl From<&Vec<AxisSel>> for Selection {
    fn from(s: &Vec<AxisSel>) -> Self {
        Selection(Sel::Numpy(s.clone()))
    }
}

impl<const N: usize> From<[AxisSel; N]> for Selection {
    fn from(s: [AxisSel; N]) -> Self {
        Selection(Sel::Numpy(s.to_vec()))
    }
}

impl<const N: usize> From<&[AxisSel; N]> for Selection {
    fn from(s: &[AxisSel; N]) -> Self {
        Selection(Sel::Numpy(s.to_vec()))
    }
}

/// A selection resolved on an array: the box to read, and the view of it to return.
struct Planned {
    ranges: Vec<Range<u64>>,
    view: Option<Vec<AxisSel>>,
}

impl Selection {
    fn plan(&self, a: &ZarrArray) -> Result<Planned> {
        let BoundingBox { ranges, view } = self.resolve(a.shape(), a.location())?;
        Ok(Planned { ranges, view })
    }

    /// The selection on the array at `location` of `shape`, checked: the box to read
    /// and the view of it to return (`None`: the box itself). Hidden: devbuf-flight's
    /// `Client::read` takes the same selections.
    #[doc(hidden)]
    pub fn resolve(&self, shape: &[u64], location: &str) -> Result<BoundingBox> {
        match &self.0 {
            Sel::All => Ok(BoundingBox {
                ranges: shape.iter().map(|&n| 0..n).collect(),
                view: None,
            }),
            Sel::Box(r) => {
                check_box(r, shape, location)?;
                Ok(BoundingBox {
                    ranges: r.clone(),
                    view: None,
                })
            }
            Sel::Numpy(s) => {
                let shape = shape
                    .iter()
                    .map(|&n| {
                        usize::try_from(n).map_err(|_| {
                            Error::invalid(format!("extent {n} does not fit in usize"))
                        })
                    })
                    .collect::<Result<Vec<usize>>>()?;
                bounding_box(s, &shape)
            }
        }
    }
}

/// Checks a box (`start..end` per axis) against `shape` of the array at `location`, with
/// [`ZarrArray::read`]'s messages.
pub(crate) fn check_box(ranges: &[Range<u64>], shape: &[u64], location: &str) -> Result<()> {
    if ranges.len() != shape.len() {
        return Err(Error::invalid(format!(
            "selection {ranges:?} has {} range(s), the array at {location} has {} dimension(s) \
             (shape {shape:?})",
            ranges.len(),
            shape.len()
        )));
    }
    for (axis, (r, &n)) in ranges.iter().zip(shape).enumerate() {
        if r.start > r.end || r.end > n {
            return Err(Error::invalid(format!(
                "range {r:?} is out of bounds for axis {axis} of {location} with size {n} \
                 (valid: start <= end <= {n})"
            )));
        }
    }
    Ok(())
}

/// A read of a selection of a [`ZarrArray`] ([`ZarrArray::read`]); nothing is read until
/// [`to`](Self::to), [`into`](Self::into) or [`spread`](Self::spread) (or their async
/// forms) runs it.
///
/// Every read goes through the read engine (`docs/zarr.md`, "The read engine"): each
/// chunk the selection touches is fetched and decoded once, on one worker per core (and
/// nvCOMP where [`ReadOptions::decoder`](crate::ReadOptions::decoder) says so), and its
/// part placed into host memory or, through page-locked staging slots, onto the device.
/// Values come back native-endian and C-contiguous whatever the stored byte order and
/// order; missing chunks read as the fill value.
///
/// ```
/// use devbuf_zarr::{ReadReport, ZarrArray};
/// use devbuf_core::zarr::BufferPrototype;
/// let a = ZarrArray::open("../../tests/fixtures/zarr/v2_int16_zstd.zarr")?; // 6 x 5 x 4
/// // BufferPrototype::Device(0) on a machine with a GPU.
/// let s = a.read([1..5, 0..5, 2..3]).to(&BufferPrototype::Host)?;
/// assert_eq!(s.shape(), &[4, 5, 1]);
/// assert!(a.read([0..7, 0..5, 0..4]).to(&BufferPrototype::Host).is_err()); // 7 > 6
/// let mut report = ReadReport::default();
/// a.read(..).report(&mut report).to(&BufferPrototype::Host)?;
/// assert_eq!(report.decoder, "cpu");
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[must_use = "a read does nothing until `to`, `into` or `spread` runs it"]
pub struct Read<'a> {
    array: &'a ZarrArray,
    selection: Selection,
    report: Option<&'a mut ReadReport>,
}

impl std::fmt::Debug for Read<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Read")
            .field("array", &self.array.location())
            .field("selection", &self.selection)
            .field("report", &self.report.is_some())
            .finish()
    }
}

/// A read of whole chunks of a [`ZarrArray`] ([`ZarrArray::read_chunks`]); nothing is
/// read until [`to`](Self::to) (or [`to_async`](Self::to_async), [`stream`](Self::stream))
/// runs it.
///
/// ```
/// use devbuf_zarr::ZarrArray;
/// use devbuf_core::zarr::{BufferPrototype, Scalar};
/// let a = ZarrArray::open("../../tests/fixtures/zarr/v3_int16.zarr")?; // chunk (1, 1) missing
/// let chunks = a.read_chunks(&[[0u64, 0], [1, 1]]).to(&BufferPrototype::Host)?;
/// assert_eq!(chunks[0].shape(), &[4, 3]);
/// assert!(chunks[1].all_equal(Some(Scalar::from(-7i16)), true)?); // the fill value
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[must_use = "a read does nothing until `to` or `stream` runs it"]
pub struct ReadChunks<'a> {
    array: &'a ZarrArray,
    chunks: Vec<Vec<u64>>,
    report: Option<&'a mut ReadReport>,
}

impl std::fmt::Debug for ReadChunks<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadChunks")
            .field("array", &self.array.location())
            .field("chunks", &self.chunks)
            .field("report", &self.report.is_some())
            .finish()
    }
}

impl ZarrArray {
    /// A read of `selection` (the whole array `..`, a box of ranges, or numpy-style
    /// [`AxisSel`]s: see [`Selection`]); run it with [`Read::to`] (new memory of a
    /// prototype, host or device), [`Read::into`] (memory you hold), [`Read::spread`]
    /// (several devices) or their async forms.
    ///
    /// ```
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::{BufferPrototype, Order};
    /// let a = ZarrArray::open("../../tests/fixtures/zarr/v2_float32_F.zarr")?;
    /// let whole = a.read(..).to(&BufferPrototype::Host)?;
    /// assert!(whole.is_contiguous(Order::C));
    /// assert_eq!(whole.shape(), &[10, 7]);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn read(&self, selection: impl Into<Selection>) -> Read<'_> {
        Read {
            array: self,
            selection: selection.into(),
            report: None,
        }
    }

    /// A read of whole chunks (shards, for a sharded array), each clipped to the
    /// array's bounds, in the order given (repeats allowed); run it with
    /// [`ReadChunks::to`], [`to_async`](ReadChunks::to_async) or
    /// [`stream`](ReadChunks::stream).
    ///
    /// The chunks land in **one** allocation (host or device); the returned arrays are
    /// consecutive zero-copy slices of it (so writing into one of them first copies that
    /// chunk: copy-on-write). A chunk listed twice is decoded once.
    ///
    /// ```
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::BufferPrototype;
    /// let a = ZarrArray::open("../../tests/fixtures/zarr/v3_float32.zarr")?; // 10 x 7, chunks 4 x 3
    /// let c = a.read_chunks(&[[2u64, 2]]).to(&BufferPrototype::Host)?;
    /// assert_eq!(c[0].shape(), &[2, 1]); // clipped at the edge
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn read_chunks<I: AsRef<[u64]>>(&self, chunks: &[I]) -> ReadChunks<'_> {
        ReadChunks {
            array: self,
            chunks: chunks.iter().map(|c| c.as_ref().to_vec()).collect(),
            report: None,
        }
    }
}

impl<'a> Read<'a> {
    /// Keeps what the read engine did (decoder, chunks, workers, time) in `report`
    /// when the read succeeds. For a [`spread`](Self::spread) read it receives the
    /// parts' sums (chunks, bytes, workers) and the whole read's time; each part's own
    /// report is in [`DevicePart::report`](crate::DevicePart::report).
    pub fn report(mut self, report: &'a mut ReadReport) -> Self {
        self.report = Some(report);
        self
    }

    /// Reads into new memory of `prototype` (the host, or a device) and returns it as
    /// one C-contiguous array of the selection's shape (a strided view for a stepped
    /// selection).
    ///
    /// ```
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::BufferPrototype;
    /// let a = ZarrArray::open("../../tests/fixtures/zarr/v3_float32_sharded.zarr")?;
    /// let all = a.read(..).to(&BufferPrototype::Host)?;
    /// assert_eq!(all.shape().len(), 2);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn to(self, prototype: &BufferPrototype) -> Result<NDBuffer> {
        let plan = self.selection.plan(self.array)?;
        let (boxed, report) = self.array.read_box(&plan.ranges, prototype)?;
        let out = match plan.view {
            Some(rel) => boxed.get(&rel)?,
            None => boxed,
        };
        if let Some(r) = self.report {
            *r = report;
        }
        Ok(out)
    }

    /// [`to`](Self::to) without blocking the caller's executor: the read runs on a
    /// thread of its own and its object-store requests on the caller's tokio runtime
    /// (no runtime is started). Dropping the future cancels the read: workers take no
    /// more chunks, fetches are aborted, and the drop returns once the read's thread
    /// has released what it held (staging, device memory of the result).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use devbuf_zarr::{ReadReport, ZarrArray};
    /// use devbuf_core::zarr::BufferPrototype;
    /// let a = ZarrArray::open_async("../../tests/fixtures/zarr/v2_int16_zstd.zarr").await?;
    /// let mut report = ReadReport::default();
    /// let s = a.read([1..5, 0..5, 2..3]).report(&mut report).to_async(&BufferPrototype::Host).await?;
    /// assert_eq!((s.shape(), report.decoder), (&[4, 5, 1][..], "cpu"));
    /// # Ok::<(), devbuf_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn to_async(self, prototype: &BufferPrototype) -> Result<NDBuffer> {
        let Read {
            array,
            selection,
            report,
        } = self;
        let (a, p) = (array.duplicate(), *prototype);
        let (out, r) = spawn("a zarr read", move || {
            let a = a.in_scope();
            let mut r = ReadReport::default();
            let out = a.read(selection).report(&mut r).to(&p)?;
            Ok((out, r))
        })
        .await?;
        if let Some(slot) = report {
            *slot = r;
        }
        Ok(out)
    }

    /// Reads into `out`, memory the caller holds: host memory (`&mut [u8]`, `&mut
    /// Vec<u8>`, page-locked memory) or a device buffer (or a view of one); see
    /// [`ReadInto`]. A pipeline that reads many selections of one size reuses one buffer
    /// instead of getting fresh memory for each read, whose first touch costs about as
    /// much as decoding on some machines.
    ///
    /// `out` must hold exactly the selection's bytes (element count times element
    /// size; an error names both sizes otherwise). The values land as [`to`](Self::to)
    /// returns them: native-endian, C order, missing chunks as the fill value. Every
    /// byte of `out` is written. A box is decoded straight into `out`; a stepped
    /// selection is read as its bounding box and its elements copied into `out`. The
    /// call returns when the values are in place (for a device buffer: every copy
    /// finished).
    ///
    /// On an error `out` may hold part of the selection. A device `out` is written on
    /// the read engine's own streams, which do not wait for other work: device work
    /// queued elsewhere that still uses `out` must have finished first.
    ///
    /// ```
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::BufferPrototype;
    /// let a = ZarrArray::open("../../tests/fixtures/zarr/v2_int16_zstd.zarr")?; // 6 x 5 x 4 int16
    /// let mut frame = vec![0u8; 5 * 4 * 2]; // one [1, 5, 4] box, reused for every read
    /// for i in 0..6 {
    ///     a.read([i..i + 1, 0..5, 0..4]).into(&mut frame)?;
    ///     let fresh = a.read([i..i + 1, 0..5, 0..4]).to(&BufferPrototype::Host)?;
    ///     assert_eq!(&frame[..], &fresh.to_buffer()?.into_memory().to_host()?[..]);
    /// }
    /// assert!(a.read([0..2, 0..5, 0..4]).into(&mut frame).is_err()); // 80 bytes needed
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
    /// let bytes = a.shape().iter().product::<u64>() as usize * 4;
    /// let both = ctx.allocate(2 * bytes)?; // two arrays side by side
    /// a.read(..).into(&both.slice(0, bytes)?)?;
    /// a.read(..).into(&both.slice(bytes, bytes)?)?;
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    #[allow(clippy::should_implement_trait)]
    pub fn into<'o>(self, out: impl Into<ReadInto<'o>>) -> Result<()> {
        let plan = self.selection.plan(self.array)?;
        let out = out.into();
        // Integer indices only drop axes of length one: the box's bytes are the
        // selection's, read straight into `out`.
        let stepped = plan.view.as_ref().is_some_and(|rel| {
            rel.iter()
                .any(|s| matches!(s, AxisSel::Range { step, .. } if *step != 1))
        });
        let report = match plan.view {
            Some(_) if !stepped => self.array.read_box_into(&plan.ranges, out)?,
            None => self.array.read_box_into(&plan.ranges, out)?,
            Some(rel) => {
                // A stepped selection: check `out` first, read the bounding box where
                // `out` is, then copy the selected elements into `out`.
                let itemsize = self.array.dtype().element().size() as u128;
                let needed = rel.iter().fold(itemsize, |n, s| match s {
                    AxisSel::Range { start, end, step } if *step > 0 => {
                        n * (end.saturating_sub(*start)).div_ceil(*step) as u128
                    }
                    _ => n,
                });
                let held = match &out {
                    ReadInto::Host(h) => h.len(),
                    ReadInto::Device(d) => d.len(),
                } as u128;
                if held != needed {
                    return Err(Error::invalid(format!(
                        "the read's destination holds {held} bytes; the selection needs exactly {needed}"
                    )));
                }
                let prototype = match &out {
                    ReadInto::Host(_) => BufferPrototype::Host,
                    ReadInto::Device(d) => BufferPrototype::Device(d.context().ordinal()),
                };
                let (boxed, report) = self.array.read_box(&plan.ranges, &prototype)?;
                let picked = boxed.get(&rel)?.to_buffer()?.into_memory();
                copy_into(&picked, out)?;
                report
            }
        };
        if let Some(r) = self.report {
            *r = report;
        }
        Ok(())
    }

    /// [`into`](Self::into) without blocking the caller's executor, into memory the
    /// read owns until it ends (a `Vec<u8>`, a page-locked [`HostBuffer`](devbuf_core::cuda::HostBuffer)
    /// or a [`DeviceBuffer`](devbuf_core::cuda::DeviceBuffer): [`ReadTarget`]), handed back
    /// with the values in place. Dropping the future cancels the read (see
    /// [`to_async`](Self::to_async)); the memory goes with it.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::BufferPrototype;
    /// let a = ZarrArray::open_async("../../tests/fixtures/zarr/v2_int16_zstd.zarr").await?; // 6 x 5 x 4 int16
    /// let mut frame = vec![0u8; 5 * 4 * 2];
    /// for i in 0..6 {
    ///     frame = a.read([i..i + 1, 0..5, 0..4]).into_async(frame).await?;
    /// }
    /// assert_eq!(frame.len(), 40);
    /// # Ok::<(), devbuf_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn into_async<M: ReadTarget>(self, out: M) -> Result<M> {
        let Read {
            array,
            selection,
            report,
        } = self;
        let a = array.duplicate();
        let (out, r) = spawn("a zarr read", move || {
            let a = a.in_scope();
            let mut out = out;
            let mut r = ReadReport::default();
            a.read(selection).report(&mut r).into(out.as_read_into())?;
            Ok((out, r))
        })
        .await?;
        if let Some(slot) = report {
            *slot = r;
        }
        Ok(out)
    }

    /// Reads a box onto several devices at once: partitioned (each device holds a part)
    /// or replicated (each holds all of it), as `spread` says. Every part is a normal
    /// device array of its device. The selection must be a box (ranges or `..`).
    ///
    /// The devices' reads run at the same time, each with its share of the read's
    /// threads ([`ReadOptions::threads`](crate::ReadOptions::threads), one per core by
    /// default, divided evenly) and with its own context's page-locked staging pool and
    /// nvCOMP; the other [`ReadOptions`](crate::ReadOptions) apply to each. A failure on
    /// one device (a damaged chunk, a device out of memory) stops the reads on every
    /// device; the call then returns that first error and every device's memory of the
    /// read is freed. `devices` names each device once (an error otherwise), in the
    /// order the parts are cut and returned.
    ///
    /// ```no_run
    /// use devbuf_core::cuda::{device_count, Context};
    /// use devbuf_zarr::{Spread, ZarrArray};
    /// let a = ZarrArray::open("../../tests/fixtures/zarr/v3_float32.zarr")?;
    /// let devices = (0..device_count()).map(Context::new).collect::<Result<Vec<_>, _>>()?;
    /// let read = a.read(..).spread(&devices, Spread::Partition { axis: 0 })?;
    /// for part in &read.parts {
    ///     println!("device {} holds rows {:?}", part.device, part.ranges[0]);
    /// }
    /// let copies = a.read(..).spread(&devices, Spread::Replicate)?;
    /// println!("{copies}");
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn spread(self, devices: &[Context], spread: Spread) -> Result<SpreadRead> {
        let ranges = self.spread_box()?;
        let read = self.array.read_box_spread(&ranges, devices, spread)?;
        if let Some(r) = self.report {
            *r = spread_summary(&read, devices.len(), spread);
        }
        Ok(read)
    }

    /// [`spread`](Self::spread) without blocking the caller's executor (see
    /// [`to_async`](Self::to_async)); dropping the future stops every device's read and
    /// frees its memory.
    ///
    /// ```no_run
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use devbuf_core::cuda::Context;
    /// use devbuf_zarr::{Spread, ZarrArray};
    /// let a = ZarrArray::open_async("../../tests/fixtures/zarr/v3_float32.zarr").await?;
    /// let devices = vec![Context::new(0)?, Context::new(1)?];
    /// let read = a.read(..).spread_async(&devices, Spread::Replicate).await?;
    /// assert_eq!(read.parts.len(), 2);
    /// # Ok::<(), devbuf_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn spread_async(self, devices: &[Context], spread: Spread) -> Result<SpreadRead> {
        let ranges = self.spread_box()?;
        let (a, devs) = (self.array.duplicate(), devices.to_vec());
        let read = spawn("a zarr read", move || {
            a.in_scope().read_box_spread(&ranges, &devs, spread)
        })
        .await?;
        if let Some(r) = self.report {
            *r = spread_summary(&read, devices.len(), spread);
        }
        Ok(read)
    }

    /// The box a spread read covers: the selection when it is one.
    fn spread_box(&self) -> Result<Vec<Range<u64>>> {
        let plan = self.selection.plan(self.array)?;
        if plan.view.is_some() {
            return Err(Error::invalid(format!(
                "a read spread over devices takes a box (one start..end range per axis, or \
                 `..`), not the numpy-style selection {:?} of {}",
                self.selection.0,
                self.array.location()
            )));
        }
        Ok(plan.ranges)
    }
}

/// A spread read's parts summed up as one report.
fn spread_summary(read: &SpreadRead, devices: usize, spread: Spread) -> ReadReport {
    let mut r = ReadReport::default();
    for p in &read.parts {
        let q = &p.report;
        if r.decoder.is_empty() {
            r.decoder = q.decoder;
        } else if r.decoder != q.decoder {
            r.decoder = "cpu+gpu";
        }
        r.cpu_chunks += q.cpu_chunks;
        r.gpu_chunks += q.gpu_chunks;
        r.gpu_workers += q.gpu_workers;
        r.missing_chunks += q.missing_chunks;
        r.decoded_bytes += q.decoded_bytes;
        r.workers += q.workers;
        if r.codecs.is_empty() {
            r.codecs = q.codecs.clone();
        }
        if r.auto.is_empty() {
            r.auto = q.auto.clone();
        }
    }
    r.elapsed_us = read.elapsed_us;
    r.target = format!(
        "{devices} device(s), {}",
        match spread {
            Spread::Partition { axis } => format!("partitioned along axis {axis}"),
            Spread::Replicate => "replicated".to_string(),
        }
    );
    r
}

/// Copies `src` (C-order bytes) into `out`, which must be as long.
fn copy_into(src: &Memory, out: ReadInto<'_>) -> Result<()> {
    let n = src.len();
    match out {
        ReadInto::Host(h) => {
            if h.len() != n {
                return Err(Error::invalid(format!(
                    "the read's destination holds {} bytes; the selection needs exactly {n}",
                    h.len()
                )));
            }
            match src {
                Memory::Host(b) => h.copy_from_slice(b),
                Memory::Device(d) => d.copy_to_host(0, h)?,
            }
        }
        ReadInto::Device(d) => {
            if d.len() != n {
                return Err(Error::invalid(format!(
                    "the read's destination holds {} bytes; the selection needs exactly {n}",
                    d.len()
                )));
            }
            match src {
                Memory::Host(b) => d.copy_from_host(0, b)?,
                Memory::Device(s) => d.copy_from_device(0, s)?,
            }
        }
    }
    Ok(())
}

impl<'a> ReadChunks<'a> {
    /// Keeps what the read engine did in `report` when the read succeeds.
    pub fn report(mut self, report: &'a mut ReadReport) -> Self {
        self.report = Some(report);
        self
    }

    /// Reads the chunks into new memory of `prototype` (one allocation; each chunk a
    /// zero-copy slice of it), in the order given.
    pub fn to(self, prototype: &BufferPrototype) -> Result<Vec<NDBuffer>> {
        let (out, report) = self.array.read_chunk_list(&self.chunks, prototype)?;
        if let Some(r) = self.report {
            *r = report;
        }
        Ok(out)
    }

    /// [`to`](Self::to) without blocking the caller's executor; dropping the future
    /// cancels the read (see [`Read::to_async`]).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use devbuf_zarr::{ReadReport, ZarrArray};
    /// use devbuf_core::zarr::BufferPrototype;
    /// let a = ZarrArray::open_async("../../tests/fixtures/zarr/v3_int16.zarr").await?;
    /// let mut report = ReadReport::default();
    /// let chunks = a
    ///     .read_chunks(&[[0u64, 0], [1, 1]])
    ///     .report(&mut report)
    ///     .to_async(&BufferPrototype::Host)
    ///     .await?;
    /// assert_eq!((chunks.len(), report.missing_chunks), (2, 1));
    /// # Ok::<(), devbuf_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn to_async(self, prototype: &BufferPrototype) -> Result<Vec<NDBuffer>> {
        let ReadChunks {
            array,
            chunks,
            report,
        } = self;
        let (a, p) = (array.duplicate(), *prototype);
        let (out, r) = spawn("a zarr read", move || {
            a.in_scope().read_chunk_list(&chunks, &p)
        })
        .await?;
        if let Some(slot) = report {
            *slot = r;
        }
        Ok(out)
    }

    /// The chunks decoded into `prototype`'s memory as a stream of `(indices, array)`
    /// (see [`ChunkStream`](crate::ChunkStream)), `in_flight` (at least 1) chunks
    /// decoded at once. Object-store requests run on the caller's tokio runtime. A
    /// report set with [`report`](Self::report) is not filled (each batch of chunks is
    /// a read of its own).
    ///
    /// ```
    /// use futures::StreamExt;
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::BufferPrototype;
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let a = ZarrArray::open("../../tests/fixtures/zarr/v3_float32.zarr")?; // 10 x 7, chunks 4 x 3
    /// let all: Vec<Vec<u64>> = (0..3).flat_map(|i| (0..3).map(move |j| vec![i, j])).collect();
    /// let mut s = a.read_chunks(&all).stream(&BufferPrototype::Host, 4);
    /// let mut n = 0;
    /// while let Some(c) = s.next().await {
    ///     let (indices, values) = c?;
    ///     assert_eq!(values.shape(), a.read_chunks(&[indices]).to(&BufferPrototype::Host)?[0].shape());
    ///     n += 1;
    /// }
    /// assert_eq!(n, 9);
    /// # Ok::<(), devbuf_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn stream(self, prototype: &BufferPrototype, in_flight: usize) -> crate::ChunkStream {
        self.array.chunk_stream(self.chunks, *prototype, in_flight)
    }
}
