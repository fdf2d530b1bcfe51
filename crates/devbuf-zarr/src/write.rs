//! Writes from device memory, the read engine in reverse: the chunks a write touches
//! are planned once each; worker threads (one per core) claim batches of them, gather
//! each chunk's part of the value on the device into a chunk-contiguous staging slot
//! (strided-copy kernel; edges of clipped chunks filled with the fill value), one DMA
//! brings the slot to page-locked host memory, and the worker encodes and stores each
//! chunk with `zarrs` while the next batch's gather and DMA run. A chunk the write
//! covers only partly is read, updated and rewritten (once).
//!
//! With nvCOMP as the encoder (`encode.rs`, [`Encoder`](super::Encoder)) the chunks a
//! write covers whole are compressed on the device instead: gather, lay the cells
//! (inner chunks of a shard) out one after another, one batched nvCOMP call into device
//! memory, then the compressed cells to the host a staging slot at a time (a device copy
//! into the slot's scratch buffer, one DMA); the host adds checksums and shard indexes
//! and stores, a slot's chunks in parallel.

use crate::storage::DynStorage;
use std::borrow::Cow;
use std::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rayon::prelude::*;

use zarrs::array::{Array, ArrayBytes, CodecOptions};

use super::encode::{self, GpuEncode};
use super::guard;
use super::read::plan::{self as rplan, ReadBox, Unit, c_strides};
use devbuf_core::__private::ops::{fill, strided_copy};
use devbuf_core::__private::{UploadLane, as_lease_holder};
use devbuf_core::cuda::nvcomp::{CompressBatch, GpuCodec};
use devbuf_core::cuda::{Context, DeviceBuffer, Stream};
use devbuf_core::error::{Error, Result};

/// What a device write needs of the array.
pub(crate) struct DeviceWriteTarget<'a> {
    pub array: &'a Array<DynStorage>,
    pub location: &'a str,
    pub shape: &'a [u64],
    pub chunk_shape: &'a [u64],
    pub elem: usize,
    /// The fill value's native bytes (one element).
    pub fill: &'a [u8],
    /// nvCOMP encodes the chunks the write covers whole (`None`: the CPU workers).
    pub gpu: Option<&'a GpuEncode>,
}

/// Writes `values[i]` (C-order native bytes on one context) into the box of
/// `requests[i]` (its `offset` is the value's start within `values[i]`).
pub(crate) fn write_device(
    t: &DeviceWriteTarget<'_>,
    requests: &[ReadBox],
    values: &[DeviceBuffer],
    ctx: &Context,
    threads: usize,
    slot_target: usize,
) -> Result<()> {
    let total: u64 = requests
        .iter()
        .map(|r| r.shape.iter().product::<u64>())
        .sum();
    let units = rplan::plan(
        requests,
        t.shape,
        t.chunk_shape,
        t.elem,
        usize::try_from(total).unwrap_or(usize::MAX).max(1),
    )?;
    if units.is_empty() {
        return Ok(());
    }
    let chunk_bytes = t
        .chunk_shape
        .iter()
        .try_fold(t.elem, |a, &c| {
            usize::try_from(c).ok().and_then(|c| a.checked_mul(c))
        })
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| Error::invalid(format!("{}: chunks too large to stage", t.location)))?;
    let w = Work {
        t,
        values,
        ctx,
        threads,
        slot_target,
        chunk_bytes,
        stride: super::read::work::aligned(chunk_bytes),
        strides: c_strides(t.chunk_shape, t.elem),
    };
    // Chunks the write covers whole go to nvCOMP (when it encodes this array); the
    // others are read, updated and encoded on the CPU.
    let (on_gpu, on_cpu): (Vec<Unit>, Vec<Unit>) = units
        .into_iter()
        .partition(|u| t.gpu.is_some() && covers_chunk(t, u));
    if let Some(g) = t.gpu
        && !on_gpu.is_empty()
    {
        w.gpu(g, &on_gpu)?;
    }
    if !on_cpu.is_empty() {
        w.cpu(&on_cpu)?;
    }
    Ok(())
}

/// One device write's shared state.
struct Work<'a, 't> {
    t: &'a DeviceWriteTarget<'t>,
    values: &'a [DeviceBuffer],
    ctx: &'a Context,
    threads: usize,
    slot_target: usize,
    chunk_bytes: usize,
    /// Distance between gathered chunks in a staging buffer.
    stride: usize,
    /// The chunk's C-order byte strides.
    strides: Vec<isize>,
}

impl Work<'_, '_> {
    /// The CPU encoders: gather a batch, one DMA into a page-locked slot, encode and
    /// store each chunk with zarrs while the next batch is gathered and copied.
    fn cpu(&self, units: &[Unit]) -> Result<()> {
        let (slot_bytes, per) = super::read::work::slot_layout(self.chunk_bytes, self.slot_target);
        let batches = rplan::batches(units.len(), 1, per);
        let (t, stride, chunk_bytes) = (self.t, self.stride, self.chunk_bytes);
        pool(self.threads, &batches, &|w, claim| {
            let Some(mut lane) = UploadLane::new(self.ctx, slot_bytes, w == 0)? else {
                return Ok(());
            };
            let mut pending: Option<(usize, Range<usize>)> = None;
            loop {
                let b = claim();
                if let Some(b) = &b {
                    let batch = &units[b.clone()];
                    let used = (batch.len() - 1) * stride + chunk_bytes;
                    let slot = lane.download(used, |stream, scratch| {
                        for (j, u) in batch.iter().enumerate() {
                            self.gather(u, j * stride, stream, scratch)?;
                        }
                        Ok(())
                    })?;
                    if let Some((ps, pb)) = pending.take() {
                        let bytes = lane.downloaded(ps)?;
                        store(t, &units[pb], bytes, stride, chunk_bytes, &self.strides)?;
                    }
                    pending = Some((slot, b.clone()));
                } else {
                    if let Some((ps, pb)) = pending.take() {
                        let bytes = lane.downloaded(ps)?;
                        store(t, &units[pb], bytes, stride, chunk_bytes, &self.strides)?;
                    }
                    break;
                }
            }
            lane.finish()
        })
    }

    /// nvCOMP: a worker gathers a call's worth of whole chunks on the device, lays
    /// their cells out one after another, compresses all of them in one nvCOMP call
    /// into device memory, then brings the compressed cells to the host through its
    /// staging lane a slot at a time (a device copy into the slot's scratch, one DMA),
    /// storing one slot's chunks while the next slot's copy runs; the host adds
    /// checksums and shard indexes. nvCOMP compresses chunks in parallel within a call,
    /// so a call holds [`GPU_CALL_SLOTS`] staging slots' worth of chunks in device
    /// memory, and the page-locked slots only carry its output.
    fn gpu(&self, g: &GpuEncode, units: &[Unit]) -> Result<()> {
        let out_per_chunk = g.cells * g.cap;
        let call_bytes = self.slot_target.saturating_mul(GPU_CALL_SLOTS);
        let per_call = (call_bytes / self.stride.max(out_per_chunk)).max(1);
        let per_slot = (self.slot_target / out_per_chunk).max(1);
        let batches = rplan::batches(units.len(), 1, per_call);
        let (t, stride) = (self.t, self.stride);
        pool(self.threads.min(GPU_WORKERS), &batches, &|w, claim| {
            let Some(mut lane) = UploadLane::new(self.ctx, per_slot * out_per_chunk, w == 0)?
            else {
                return Ok(());
            };
            let stream = Stream::new(self.ctx)?;
            let mut nv = CompressBatch::new(self.ctx, Some(&stream))?;
            let n = per_call.min(units.len());
            let gathered = self.ctx.allocate_pooled(n * stride, Some(&stream))?;
            let cells = match g.relayout {
                Some(_) => Some(self.ctx.allocate_pooled(n * stride, Some(&stream))?),
                None => None,
            };
            let out = self.ctx.allocate_pooled(n * out_per_chunk, Some(&stream))?;
            // On error too, the lane's copies (which read `out`) finish before the
            // buffers go back to the pool.
            let ran = (|| -> Result<()> {
                while let Some(b) = claim() {
                    let batch = &units[b];
                    let sizes = self
                        .compress(g, batch, &stream, &mut nv, &gathered, cells.as_ref(), &out)
                        .map_err(|e| {
                            e.context(format_args!(
                                "writing chunks {:?} .. {:?} of {}",
                                batch[0].cell,
                                batch[batch.len() - 1].cell,
                                t.location
                            ))
                        })?;
                    // Slot by slot: queue the next slot's copy before storing this one's.
                    let mut pending: Option<(usize, Range<usize>)> = None;
                    let pieces: Vec<Range<usize>> = (0..batch.len())
                        .step_by(per_slot)
                        .map(|a| a..(a + per_slot).min(batch.len()))
                        .chain(std::iter::once(0..0))
                        .collect();
                    for piece in pieces {
                        let next = if piece.is_empty() {
                            None
                        } else {
                            let (from, len) =
                                (piece.start * out_per_chunk, piece.len() * out_per_chunk);
                            let slot = lane.download(len, |s, scratch| {
                                // Both ranges lie inside their buffers (`out` holds the
                                // call's `batch.len()` chunks, the scratch a slot of
                                // `per_slot`), both of this context.
                                scratch.copy_from_device_on(0, &out.slice(from, len)?, s)
                            })?;
                            Some((slot, piece))
                        };
                        if let Some((ps, pp)) = pending.take() {
                            let bytes: &[u8] = lane.downloaded(ps)?;
                            // The slot's chunks are stored in parallel (the CPU's share
                            // of a GPU-encoded write: checksums, indexes, file writes).
                            // Its threads store as this lane holder would: without
                            // waiting for the page-locked pool (a device memory store's
                            // copy would wait for the kits that this worker holds).
                            pp.clone().into_par_iter().try_for_each(|j| {
                                as_lease_holder(|| {
                                    let k = j - pp.start;
                                    let u = &batch[j];
                                    let what = || {
                                        format!(
                                            "writing chunk {:?} (key {}) of {}",
                                            u.cell,
                                            t.array.chunk_key(&u.cell),
                                            t.location
                                        )
                                    };
                                    guard(&what(), || {
                                        encode::store(
                                            t.array,
                                            &u.cell,
                                            g,
                                            &bytes[k * out_per_chunk..(k + 1) * out_per_chunk],
                                            &sizes[j * g.cells..(j + 1) * g.cells],
                                            &what,
                                        )
                                    })
                                })
                            })?;
                        }
                        pending = next;
                    }
                }
                Ok(())
            })();
            let finished = lane.finish();
            ran.and(finished).and(stream.synchronize())
        })
    }

    /// One nvCOMP call: gathers `batch` into `gathered`, lays the cells out (into
    /// `cells` when the chain needs it), compresses every cell into `out` (cell `i` at
    /// `i * cap`) and returns the compressed sizes.
    #[allow(clippy::too_many_arguments)]
    fn compress(
        &self,
        g: &GpuEncode,
        batch: &[Unit],
        stream: &Stream,
        nv: &mut CompressBatch,
        gathered: &DeviceBuffer,
        cells: Option<&DeviceBuffer>,
        out: &DeviceBuffer,
    ) -> Result<Vec<usize>> {
        let stride = self.stride;
        for (j, u) in batch.iter().enumerate() {
            self.gather(u, j * stride, stream, gathered)?;
        }
        let src = match (&g.relayout, cells) {
            (Some(r), Some(c)) => {
                for j in 0..batch.len() {
                    strided_copy(
                        gathered,
                        j * stride,
                        &r.src,
                        c,
                        j * stride,
                        &r.dst,
                        &r.shape,
                        self.t.elem,
                        Some(stream),
                    )?;
                }
                c
            }
            _ => gathered,
        };
        let inputs: Vec<Range<usize>> = (0..batch.len())
            .flat_map(|j| {
                (0..g.cells).map(move |k| {
                    let at = j * stride + k * g.cell_bytes;
                    at..at + g.cell_bytes
                })
            })
            .collect();
        let outputs: Vec<Range<usize>> = (0..inputs.len())
            .map(|i| i * g.cap..(i + 1) * g.cap)
            .collect();
        nv.compress(stream, GpuCodec::Zstd, src, &inputs, out, &outputs)
    }

    /// Queues the gather of `u`'s part of the values into `scratch` at `at`.
    fn gather(
        &self,
        u: &Unit,
        at: usize,
        stream: &devbuf_core::cuda::Stream,
        scratch: &DeviceBuffer,
    ) -> Result<()> {
        gather(
            self.t,
            u,
            self.values,
            &self.strides,
            at,
            self.chunk_bytes,
            stream,
            scratch,
        )
    }
}

/// Chunks per nvCOMP call of a device write, in staging slots (`ReadOptions::slot_bytes`,
/// 4 MiB by default: calls of 64 MiB; at least one chunk): nvCOMP compresses chunks in
/// parallel within a call, so its rate grows with the chunks per call (measured on an
/// H100, zstd, 256 KiB chunks: 8.6 GB/s in calls of 256 MiB, 3.9 in calls of 32 MiB from
/// four threads). Each GPU worker holds about three calls' bytes of device memory
/// (gathered chunks, their cells, the compressed cells).
const GPU_CALL_SLOTS: usize = 16;

/// Workers of a GPU-encoded write: while one worker's call runs, the others download,
/// checksum and store their chunks (each slot's chunks in parallel, on rayon's pool).
const GPU_WORKERS: usize = 4;

/// A claim function: the next batch, or `None` when all are taken or a worker failed.
type Claim<'a> = &'a dyn Fn() -> Option<Range<usize>>;

/// Runs `work(worker, claim)` on `threads` threads (at most one per batch); workers
/// claim `batches` in turn. The first error stops further claims and is returned.
fn pool(
    threads: usize,
    batches: &[Range<usize>],
    work: &(dyn Fn(usize, Claim<'_>) -> Result<()> + Sync),
) -> Result<()> {
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let error: Mutex<Option<Error>> = Mutex::new(None);
    let fail = |e: Error| {
        error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(e);
        failed.store(true, Ordering::Release);
    };
    // An async write's dropped future stops it (see `crate::aio`).
    let scope = crate::aio::scope::current();
    let stop = scope.as_ref().map(|s| s.stop.clone());
    let claim = || {
        if failed.load(Ordering::Acquire) || stop.as_ref().is_some_and(|s| s.is_set()) {
            return None;
        }
        batches.get(next.fetch_add(1, Ordering::AcqRel)).cloned()
    };
    let threads = threads.clamp(1, batches.len().max(1));
    std::thread::scope(|s| {
        for w in 1..threads {
            let (claim, fail) = (&claim, &fail);
            let scope = scope.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("devbuf-write-{w}"))
                .spawn_scoped(s, move || {
                    let _in = crate::aio::scope::enter(scope);
                    if let Err(e) = work(w, claim) {
                        fail(e);
                    }
                });
            if spawned.is_err() {
                break;
            }
        }
        if let Err(e) = work(0, &claim) {
            fail(e);
        }
    });
    match error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None if stop.is_some_and(|s| s.is_set()) => {
            Err(crate::aio::scope::cancelled("a zarr write"))
        }
        None => Ok(()),
    }
}

/// Whether unit `u`'s placements cover its whole chunk as clipped to the array.
fn covers_chunk(t: &DeviceWriteTarget<'_>, u: &Unit) -> bool {
    let [p] = u.placements.as_slice() else {
        return false;
    };
    p.start.iter().all(|&s| s == 0)
        && p.shape.iter().enumerate().all(|(k, &n)| {
            let c0 = u.cell[k] * t.chunk_shape[k];
            n == t.chunk_shape[k].min(t.shape[k] - c0)
        })
}

/// Queues the gather of unit `u`'s part of the values into `scratch` at `at` (the
/// whole chunk, C order; a clipped chunk's outside is the fill value).
#[allow(clippy::too_many_arguments)]
fn gather(
    t: &DeviceWriteTarget<'_>,
    u: &Unit,
    values: &[DeviceBuffer],
    strides: &[isize],
    at: usize,
    chunk_bytes: usize,
    stream: &devbuf_core::cuda::Stream,
    scratch: &DeviceBuffer,
) -> Result<()> {
    let clipped = u
        .placements
        .first()
        .is_some_and(|p| p.shape.iter().zip(t.chunk_shape).any(|(&n, &c)| n != c));
    if clipped && covers_chunk(t, u) {
        fill(&scratch.slice(at, chunk_bytes)?, t.fill, Some(stream))?;
    }
    for p in &u.placements {
        let value = values
            .get(p.req)
            .ok_or_else(|| Error::invalid("write plan: a placement without its value"))?;
        let off: isize = p
            .start
            .iter()
            .zip(strides)
            .map(|(&i, &s)| i as isize * s)
            .sum();
        let shape: Vec<usize> = p.shape.iter().map(|&n| n as usize).collect();
        strided_copy(
            value,
            p.dst_offset,
            &p.dst_strides,
            scratch,
            at + off as usize,
            strides,
            &shape,
            t.elem,
            Some(stream),
        )?;
    }
    Ok(())
}

/// Encodes and stores the chunks of one downloaded batch (`bytes`: chunk `j` at
/// `j * stride`, C order).
fn store(
    t: &DeviceWriteTarget<'_>,
    units: &[Unit],
    bytes: &mut [u8],
    stride: usize,
    chunk_bytes: usize,
    strides: &[isize],
) -> Result<()> {
    for (j, u) in units.iter().enumerate() {
        let mine = &bytes[j * stride..j * stride + chunk_bytes];
        let what = format!(
            "writing chunk {:?} (key {}) of {}",
            u.cell,
            t.array.chunk_key(&u.cell),
            t.location
        );
        guard(&what, || {
            let data: Cow<'_, [u8]> = if covers_chunk(t, u) {
                Cow::Borrowed(mine)
            } else {
                // Read, update, rewrite: the chunk as stored (or the fill value), then
                // the written boxes over it.
                let old = t
                    .array
                    .retrieve_chunk::<ArrayBytes<'static>>(&u.cell)
                    .map_err(|e| Error::Malformed(format!("{what}: reading it first: {e}")))?
                    .into_fixed()
                    .map_err(|e| Error::Malformed(format!("{what}: {e}")))?;
                let mut old = old.into_owned();
                if old.len() != chunk_bytes {
                    return Err(Error::Malformed(format!(
                        "{what}: the stored chunk decodes to {} bytes, expected {chunk_bytes}",
                        old.len()
                    )));
                }
                for p in &u.placements {
                    let off: isize = p
                        .start
                        .iter()
                        .zip(strides)
                        .map(|(&i, &s)| i as isize * s)
                        .sum();
                    let shape: Vec<usize> = p.shape.iter().map(|&n| n as usize).collect();
                    devbuf_core::__private::host_ops::strided_copy(
                        mine,
                        off as usize,
                        strides,
                        &mut old,
                        off as usize,
                        strides,
                        &shape,
                        t.elem,
                    )?;
                }
                Cow::Owned(old)
            };
            t.array
                .store_chunk_opt(
                    &u.cell,
                    ArrayBytes::new_flen(data),
                    &CodecOptions::default(),
                )
                .map_err(|e| crate::storage::write_error(&what, e))
        })?;
    }
    Ok(())
}
