//! Reading arrays: [`Client::read`], a selection assembled into one [`NDBuffer`].
//!
//! A read first asks for the array's flight (its schema carries the array and chunk
//! shapes), resolves the selection to a box, asks for the flight of that box, checks
//! that its endpoints cut exactly the box's chunks into disjoint ranges, and fetches
//! them all at once. Every received chunk is claimed (it must be one of its endpoint's
//! and arrive once) and its part of the box is copied into place — on the host by the
//! receiving thread, on a device by the strided-copy kernel on that thread's stream
//! from the batch just uploaded. The result exists only when every endpoint delivered
//! every chunk.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use arrow_flight::FlightData;

use super::super::ticket::{ChunkRegion, Part, Query, Target};
use super::chunks;
use super::fetch::{Claims, Handler};
use super::receive::Receiver;
use super::{Client, Flight};
use devbuf_core::__private::HostOutput;
use devbuf_core::__private::host_ops;
use devbuf_core::__private::index::BoundingBox;
use devbuf_core::__private::ops::{layout, strided_copy};
use devbuf_core::arrow::{Batch, ChunkBatch};
use devbuf_core::cuda::{Context, DeviceBuffer, Stream};
use devbuf_core::error::{Error, Result};
use devbuf_core::memory::Memory;
use devbuf_core::zarr::{BufferPrototype, Dtype, NDBuffer, Order};
use devbuf_zarr::Selection;

/// The chunk grid a flight's schema describes.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Grid {
    pub(super) array_shape: Vec<u64>,
    pub(super) chunk_shape: Vec<u64>,
    pub(super) dtype: Dtype,
}

impl Grid {
    pub(super) fn of(flight: &Flight, path: &str) -> Result<Grid> {
        let cb = ChunkBatch::try_from(Batch::Host(RecordBatch::new_empty(flight.schema.clone())))
            .map_err(|e| {
            e.context(format_args!("the flight of {path:?} is not a chunk flight"))
        })?;
        let array_shape = cb.array_shape().ok_or_else(|| {
            Error::Malformed(format!(
                "the flight of {path:?} carries no array shape ({} metadata)",
                devbuf_core::arrow::CHUNK_GRID_METADATA_KEY
            ))
        })?;
        Ok(Grid {
            array_shape: array_shape.iter().map(|&n| n as u64).collect(),
            chunk_shape: cb.chunk_shape().iter().map(|&n| n as u64).collect(),
            dtype: Dtype::from(cb.tensors().tensor_type().element()),
        })
    }

    /// The chunk-grid box of the element box `sel` (as the server computes it).
    pub(super) fn region(&self, sel: &[Range<u64>]) -> Result<ChunkRegion> {
        let (start, end) = sel
            .iter()
            .zip(&self.chunk_shape)
            .map(|(r, &c)| {
                if r.start == r.end {
                    (0, 0)
                } else {
                    (r.start / c, (r.end - 1) / c + 1)
                }
            })
            .unzip();
        ChunkRegion::new(start, end)
    }

    /// Elements in one chunk.
    fn chunk_elems(&self) -> Result<usize> {
        self.chunk_shape
            .iter()
            .try_fold(1usize, |a, &c| usize::try_from(c).ok()?.checked_mul(a))
            .ok_or_else(|| Error::invalid("the chunk size overflows"))
    }

    /// The chunk coordinates of a chunk-batch message of this grid, read from the host
    /// message (`None` for a 0-d array and for messages in another layout than a devbuf
    /// server sends). For batches that went to a device: reading the coordinates back
    /// from there is a synchronous copy per column and batch (without them, device reads
    /// went from 0.53-0.60x to 0.89-0.98x of the host rate on the H100 machine).
    pub(super) fn host_coords(&self, fd: &FlightData) -> Result<Option<Vec<u64>>> {
        if self.chunk_shape.is_empty() {
            return Ok(None); // one chunk without coordinates
        }
        let v = chunks::view(
            fd,
            self.chunk_shape.len(),
            self.dtype.element(),
            self.chunk_elems()?,
        )?;
        Ok(v.map(|v| v.coords))
    }

    /// Checks that a received batch belongs to this grid.
    fn check(&self, cb: &ChunkBatch) -> Result<()> {
        let same = cb
            .chunk_shape()
            .iter()
            .map(|&n| n as u64)
            .eq(self.chunk_shape.iter().copied())
            && cb.array_shape().is_some_and(|a| {
                a.iter()
                    .map(|&n| n as u64)
                    .eq(self.array_shape.iter().copied())
            })
            && cb.tensors().tensor_type().element() == self.dtype.element();
        if !same {
            return Err(Error::Malformed(format!(
                "a received batch of {} chunks of shape {:?} over an array of {:?} does not \
                 match the flight ({} chunks {:?} over {:?})",
                cb.tensors().tensor_type().element().name(),
                cb.chunk_shape(),
                cb.array_shape(),
                self.dtype,
                self.chunk_shape,
                self.array_shape
            )));
        }
        Ok(())
    }
}

/// The endpoints' ranges of a chunk flight, checked: every endpoint is a devbuf ticket
/// of `path` and `region`, and the ranges are disjoint and cover the region.
pub(super) fn ranges_of(
    flight: &Flight,
    path: &str,
    region: &ChunkRegion,
) -> Result<Vec<Range<u64>>> {
    let mut ranges = Vec::with_capacity(flight.endpoints.len());
    for (i, ep) in flight.endpoints.iter().enumerate() {
        match &ep.part() {
            Some(Part::Chunks {
                array,
                region: r,
                range,
            }) if array == path && r == region => ranges.push(range.clone()),
            _ => {
                return Err(Error::Malformed(format!(
                    "endpoint {i} of the flight of {path:?} is not a devbuf ticket for the \
                     chunks {:?}..{:?} that the selection touches",
                    region.start(),
                    region.end()
                )));
            }
        }
    }
    let mut sorted = ranges.clone();
    sorted.sort_by_key(|r| r.start);
    let mut next = 0u64;
    for r in &sorted {
        if r.start != next {
            return Err(Error::Malformed(format!(
                "the flight's endpoints {} chunks from {next} (their ranges must be disjoint \
                 and cover the region's {} chunks)",
                if r.start < next { "overlap at" } else { "skip" },
                region.len()
            )));
        }
        next = r.end;
    }
    if next != region.len() {
        return Err(Error::Malformed(format!(
            "the flight's endpoints cover {next} of the region's {} chunks",
            region.len()
        )));
    }
    Ok(ranges)
}

/// C-order byte strides.
fn c_strides(shape: &[usize], elem: usize) -> Vec<isize> {
    let mut s = vec![0isize; shape.len()];
    let mut acc = elem as isize;
    for d in (0..shape.len()).rev() {
        s[d] = acc;
        acc = acc.saturating_mul(shape[d] as isize);
    }
    s
}

/// Host output written by several receiving threads at disjoint bytes: fresh memory
/// from the read engine's allocator (huge pages where the kernel offers them, so the
/// first touch of a large result is not one page fault per 4 KiB).
struct HostOut {
    ptr: *mut u8,
    len: usize,
    mem: Mutex<Option<HostOutput>>,
}
// Safety: the threads write disjoint byte ranges through `ptr` (every output element
// lies in exactly one chunk, every chunk is claimed once, and the endpoints' ranges are
// disjoint: `ranges_of` and `Claims`); `mem` owns the allocation and is only taken out
// after every writer finished (the Arc is then unique).
unsafe impl Send for HostOut {}
// Safety: as above.
unsafe impl Sync for HostOut {}

enum Out {
    Host(Arc<HostOut>),
    Device(Context, DeviceBuffer),
}

/// The handler of a read: claims and places every received chunk.
struct Assemble {
    grid: Grid,
    region: ChunkRegion,
    ranges: Vec<Range<u64>>,
    sel: Vec<Range<u64>>,
    dst_strides: Vec<isize>,
    schema: arrow_schema::SchemaRef,
    out: Out,
    /// The chunk shape, and its number of elements.
    chunk_usize: Vec<usize>,
    chunk_elems: usize,
}

struct AsmState {
    claims: Claims,
    receiver: Receiver,
    scratch: Option<DeviceBuffer>,
    stream: Option<Stream>,
}

/// Where chunk `coords` (extent `shape`) meets the box `sel`: for each axis the offset
/// inside the chunk, the offset inside the box and the length; `None` when they do not
/// meet.
fn overlap(
    coords: &[u64],
    chunk_shape: &[u64],
    shape: &[usize],
    sel: &[Range<u64>],
) -> Option<Vec<(usize, usize, usize)>> {
    let mut v = Vec::with_capacity(sel.len());
    for d in 0..sel.len() {
        let origin = coords[d].checked_mul(chunk_shape[d])?;
        let lo = sel[d].start.max(origin);
        let hi = sel[d].end.min(origin.checked_add(shape[d] as u64)?);
        if lo >= hi {
            return None;
        }
        v.push((
            (lo - origin) as usize,
            (lo - sel[d].start) as usize,
            (hi - lo) as usize,
        ));
    }
    Some(v)
}

impl Assemble {
    /// Copies the part of `chunk` (chunk `coords`, cut to the array) inside the box.
    fn place(&self, chunk: &NDBuffer, coords: &[u64], stream: Option<&Stream>) -> Result<()> {
        let like = chunk.as_ndarray_like();
        match (&self.out, like.memory) {
            (Out::Host(out), Memory::Host(src)) => {
                self.place_host(out, src, like.offset, like.strides, like.shape, coords)
            }
            (Out::Device(_, out), Memory::Device(src)) => {
                let Some(ov) = overlap(coords, &self.grid.chunk_shape, like.shape, &self.sel)
                else {
                    return Ok(());
                };
                let (src_off, dst_off) = self.offsets(&ov, like.offset, like.strides);
                let src_strides: Vec<isize> = like.strides.iter().map(|&s| s as isize).collect();
                let shape: Vec<usize> = ov.iter().map(|o| o.2).collect();
                strided_copy(
                    src,
                    src_off,
                    &src_strides,
                    out,
                    dst_off,
                    &self.dst_strides,
                    &shape,
                    self.grid.dtype.element().size(),
                    stream,
                )
            }
            _ => Err(Error::invalid(
                "internal: a received chunk is not in the output's memory",
            )),
        }
    }

    /// Byte offsets of an overlap's first element in the chunk (whose first element is
    /// at `base`, with byte `strides`) and in the output.
    fn offsets(
        &self,
        ov: &[(usize, usize, usize)],
        base: usize,
        strides: &[usize],
    ) -> (usize, usize) {
        let mut src_off = base;
        let mut dst_off = 0usize;
        for (d, &(a, b, _)) in ov.iter().enumerate() {
            src_off += a * strides[d];
            dst_off += b * self.dst_strides[d] as usize;
        }
        (src_off, dst_off)
    }

    /// Copies the part inside the box of chunk `coords` — `extent` elements (the chunk
    /// cut to the array) at byte `base` of `src` with byte `strides` — into the host
    /// output.
    fn place_host(
        &self,
        out: &HostOut,
        src: &[u8],
        base: usize,
        strides: &[usize],
        extent: &[usize],
        coords: &[u64],
    ) -> Result<()> {
        let Some(ov) = overlap(coords, &self.grid.chunk_shape, extent, &self.sel) else {
            return Ok(());
        };
        let (src_off, dst_off) = self.offsets(&ov, base, strides);
        let src_strides: Vec<isize> = strides.iter().map(|&s| s as isize).collect();
        let shape: Vec<usize> = ov.iter().map(|o| o.2).collect();
        let Some(plan) = layout::plan(
            src.len(),
            src_off,
            &src_strides,
            out.len,
            dst_off,
            &self.dst_strides,
            &shape,
            self.grid.dtype.element().size(),
        )?
        else {
            return Ok(());
        };
        host_ops::for_each_run(&plan, |s, d, run| {
            // Safety: `layout::plan` checked that every byte lies within `src` and within
            // the output's `len` bytes; these output bytes belong to this chunk alone
            // (see `HostOut`).
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().add(s), out.ptr.add(d), run) };
        });
        Ok(())
    }

    /// The host fast path: a chunk-batch message placed straight from its body
    /// (`chunks.rs`); false when the message is not one it takes.
    fn place_view(&self, out: &HostOut, fd: &FlightData, st: &mut AsmState) -> Result<bool> {
        let nd = self.grid.chunk_shape.len();
        let Some(v) = chunks::view(fd, nd, self.grid.dtype.element(), self.chunk_elems)? else {
            return Ok(false);
        };
        let es = self.grid.dtype.element().size();
        let strides: Vec<usize> = c_strides(&self.chunk_usize, es)
            .into_iter()
            .map(|s| s as usize)
            .collect();
        let chunk_bytes = self.chunk_elems * es;
        for r in 0..v.rows {
            let coords = &v.coords[r * nd..(r + 1) * nd];
            st.claims.claim(coords)?;
            let extent: Vec<usize> = coords
                .iter()
                .zip(self.grid.chunk_shape.iter().zip(&self.grid.array_shape))
                .map(|(&c, (&cs, &n))| {
                    c.checked_mul(cs)
                        .map(|o| cs.min(n.saturating_sub(o)) as usize)
                        .unwrap_or(0)
                })
                .collect();
            self.place_host(out, &v.data, r * chunk_bytes, &strides, &extent, coords)?;
        }
        Ok(true)
    }

    fn place_batch(&self, cb: &ChunkBatch, st: &mut AsmState) -> Result<Vec<NDBuffer>> {
        self.grid.check(cb)?;
        let mut keep = Vec::with_capacity(cb.len());
        for i in 0..cb.len() {
            let coords = cb.coords(i).unwrap_or_default();
            st.claims.claim(coords)?;
            let chunk = cb.chunk(i)?;
            self.place(&chunk, coords, st.stream.as_ref())?;
            keep.push(chunk);
        }
        Ok(keep)
    }
}

impl Handler for Assemble {
    type State = AsmState;

    fn begin(&self, i: usize) -> Result<AsmState> {
        let ctx = match &self.out {
            Out::Host(_) => None,
            Out::Device(ctx, _) => Some(ctx.clone()),
        };
        Ok(AsmState {
            claims: Claims::new(self.region.clone(), self.ranges[i].clone())?,
            stream: ctx.as_ref().map(Stream::new).transpose()?,
            receiver: Receiver::new(self.schema.clone(), None),
            scratch: None,
        })
    }

    fn message(&self, st: &mut AsmState, fd: FlightData) -> Result<()> {
        match &self.out {
            Out::Host(out) => {
                if self.place_view(out, &fd, st)? {
                    return Ok(());
                }
                if let Some(b) = st.receiver.message(&fd)? {
                    let cb = ChunkBatch::try_from(Batch::Host(b.to_host()?))?;
                    self.place_batch(&cb, st)?;
                }
            }
            Out::Device(ctx, _) => {
                let mut scratch = st.scratch.take();
                let got = st.receiver.message_into(&fd, ctx, &mut scratch);
                st.scratch = scratch;
                if let Some(drb) = got? {
                    let cb = match self.grid.host_coords(&fd)? {
                        Some(c) => devbuf_core::__private::arrow::chunk_batch_with_coords(drb, c)?,
                        None => ChunkBatch::try_from(Batch::Device(drb))?,
                    };
                    let placed = self.place_batch(&cb, st);
                    // The kernels read the batch (and `scratch`, reused by the next
                    // message): wait for them before either goes.
                    let synced = st.stream.as_ref().map_or(Ok(()), Stream::synchronize);
                    placed?;
                    synced?;
                }
            }
        }
        Ok(())
    }

    fn end(&self, i: usize, st: AsmState) -> Result<()> {
        st.claims.finish(i)
    }
}

fn to_usizes(v: &[u64]) -> Result<Vec<usize>> {
    v.iter()
        .map(|&n| {
            usize::try_from(n).map_err(|_| Error::invalid(format!("extent {n} does not fit usize")))
        })
        .collect()
}

impl Client {
    /// Reads a selection of the array at `path` (under the server's root) into
    /// `prototype`'s memory: the same [`Selection`]s as
    /// [`ZarrArray::read`](devbuf_zarr::ZarrArray::read) takes, with the same meaning
    /// (`..` for the whole array; a box of ranges; numpy-style [`AxisSel`](devbuf_core::zarr::AxisSel)s: integers,
    /// ranges, [`Slice`](devbuf_core::zarr::Slice)s with positive steps, full axes, fewer
    /// selectors than axes select the rest whole, integer axes are dropped). Every
    /// endpoint is fetched at once; the result is C-contiguous (a stepped selection is a
    /// zero-copy strided view of its bounding box, as there).
    ///
    /// ```no_run
    /// use devbuf_core::zarr::{AxisSel, BufferPrototype};
    /// use devbuf_flight::{Client, ClientOptions};
    /// let client = Client::connect("grpc://127.0.0.1:8815", &ClientOptions::default())?;
    /// let all = client.read("v3_float32.zarr", .., &BufferPrototype::Host)?;
    /// let rows = client.read("v3_float32.zarr", [2..7, 0..all.shape()[1] as u64], &BufferPrototype::Host)?;
    /// let col = client.read("v3_float32.zarr", [AxisSel::from(..), AxisSel::Index(-1)], &BufferPrototype::Host)?;
    /// assert_eq!((rows.shape()[0], col.shape().len()), (5, 1));
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    ///
    /// An error when any endpoint fails or delivers less or other than its ticket
    /// names: never a partial result. Blocking: see [`read_async`](Self::read_async).
    pub fn read(
        &self,
        path: &str,
        selection: impl Into<Selection>,
        prototype: &BufferPrototype,
    ) -> Result<NDBuffer> {
        self.block_on(
            "Client::read_async",
            self.read_async(path, selection, prototype),
        )
    }

    /// [`read`](Self::read) on the caller's tokio runtime (current-thread or
    /// multi-thread; no runtime is started). The received messages are copied into
    /// place on the runtime's blocking threads, never on the executor.
    ///
    /// Dropping the future cancels the read: every endpoint's stream is dropped (the
    /// server sees it cancelled), and the drop returns once no message is being copied,
    /// with the memory being assembled (host or device) freed.
    ///
    /// ```no_run
    /// use devbuf_core::zarr::{AxisSel, BufferPrototype};
    /// # async fn f(client: &devbuf_flight::Client) -> devbuf_core::Result<()> {
    /// let part = client
    ///     .read_async("v3_float32.zarr", &[AxisSel::from(2..7)], &BufferPrototype::Host)
    ///     .await?;
    /// assert_eq!(part.shape()[0], 5);
    /// # Ok(()) }
    /// ```
    pub async fn read_async(
        &self,
        path: &str,
        selection: impl Into<Selection>,
        prototype: &BufferPrototype,
    ) -> Result<NDBuffer> {
        let selection = selection.into();
        let span = tracing::info_span!(
            "devbuf.flight.client",
            uri = %self.uri(),
            call = "read",
            path,
            selection = ?selection,
            device = prototype.is_device(),
        );
        super::trace::call(span, self.read_untraced(path, &selection, prototype), |a| {
            (1, 0, a.nbytes())
        })
        .await
    }

    async fn read_untraced(
        &self,
        path: &str,
        selection: &Selection,
        prototype: &BufferPrototype,
    ) -> Result<NDBuffer> {
        super::run::need_tokio("Client::read_async")?;
        let target = Target::array(path)?;
        let whole = self.info_async(&Query::whole(target.clone())).await?;
        let grid = Grid::of(&whole, path)?;
        let BoundingBox { ranges, view } = selection.resolve(&grid.array_shape, path)?;
        let boxed = self
            .read_box(path, target, &grid, ranges, whole, prototype)
            .await?;
        match view {
            Some(rel) => boxed.get(&rel),
            None => Ok(boxed),
        }
    }

    async fn read_box(
        &self,
        path: &str,
        target: Target,
        grid: &Grid,
        sel: Vec<Range<u64>>,
        whole: Flight,
        prototype: &BufferPrototype,
    ) -> Result<NDBuffer> {
        let shape = to_usizes(&sel.iter().map(|r| r.end - r.start).collect::<Vec<_>>())?;
        let es = grid.dtype.element().size();
        let total = shape
            .iter()
            .try_fold(es, |a, &n| a.checked_mul(n))
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "a selection of shape {shape:?} of {} is too large to hold in memory",
                    grid.dtype
                ))
            })?;
        let region = grid.region(&sel)?;
        let ctx = prototype.context()?;
        // The result first: a selection too large for memory fails before any transfer.
        let out = match &ctx {
            None => {
                let mut mem = HostOutput::new(total)?;
                let (ptr, len) = mem.raw();
                Out::Host(Arc::new(HostOut {
                    ptr,
                    len,
                    mem: Mutex::new(Some(mem)),
                }))
            }
            Some(ctx) => Out::Device(ctx.clone(), ctx.allocate(total)?),
        };
        if !region.is_empty() {
            // The whole array's flight already describes a selection of everything.
            let everything = sel
                .iter()
                .zip(&grid.array_shape)
                .all(|(r, &n)| *r == (0..n));
            let flight = if everything {
                whole
            } else {
                self.info_async(&Query {
                    target,
                    selection: Some(sel.clone()),
                    endpoints: None,
                })
                .await?
            };
            if Grid::of(&flight, path)? != *grid {
                return Err(Error::Malformed(format!(
                    "the flight of the selection of {path:?} describes another array than the \
                     whole array's flight (was it rewritten?)"
                )));
            }
            let ranges = ranges_of(&flight, path, &region)?;
            let chunk_usize = to_usizes(&grid.chunk_shape)?;
            let chunk_elems = grid.chunk_elems()?;
            let handler = Arc::new(Assemble {
                chunk_usize,
                chunk_elems,
                grid: grid.clone(),
                region,
                ranges,
                dst_strides: c_strides(&shape, es),
                sel,
                schema: flight.schema.clone(),
                out,
            });
            self.fetch_all(&flight.endpoints, handler.clone()).await?;
            let handler = Arc::try_unwrap(handler)
                .map_err(|_| Error::invalid("internal: a receiving task outlived the read"))?;
            return finish(handler.out, &shape, grid.dtype);
        }
        finish(out, &shape, grid.dtype)
    }
}

/// The filled output as an array.
fn finish(out: Out, shape: &[usize], dtype: Dtype) -> Result<NDBuffer> {
    let mem = match out {
        Out::Host(h) => {
            let h = Arc::try_unwrap(h)
                .map_err(|_| Error::invalid("internal: a receiving task outlived the read"))?;
            let mem = h
                .mem
                .into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .ok_or_else(|| Error::invalid("internal: the read's result was taken twice"))?;
            Memory::Host(mem.into_bytes())
        }
        Out::Device(_, d) => Memory::Device(d),
    };
    NDBuffer::from_memory(mem, shape, dtype, Order::C)
}
