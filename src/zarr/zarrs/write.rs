//! Writes from device memory, the read engine in reverse: the chunks a write touches
//! are planned once each; worker threads (one per core) claim batches of them, gather
//! each chunk's part of the value on the device into a chunk-contiguous staging slot
//! (strided-copy kernel; edges of clipped chunks filled with the fill value), one DMA
//! brings the slot to page-locked host memory, and the worker encodes and stores each
//! chunk with `zarrs` while the next batch's gather and DMA run. A chunk the write
//! covers only partly is read, updated and rewritten (once).

use std::borrow::Cow;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use zarrs::array::{Array, ArrayBytes, CodecOptions};
use zarrs::storage::ReadableWritableStorageTraits;

use super::guard;
use super::read::plan::{self as rplan, Request, Unit, c_strides};
use crate::cuda::kernels::ops::{fill, strided_copy};
use crate::cuda::{Context, DeviceBuffer, UploadLane};
use crate::error::{Error, Result};

type Storage = dyn ReadableWritableStorageTraits;

/// What a device write needs of the array.
pub(crate) struct Target<'a> {
    pub array: &'a Array<Storage>,
    pub location: &'a str,
    pub shape: &'a [u64],
    pub chunk_shape: &'a [u64],
    pub elem: usize,
    /// The fill value's native bytes (one element).
    pub fill: &'a [u8],
}

/// Writes `values[i]` (C-order native bytes on one context) into the box of
/// `requests[i]` (its `offset` is the value's start within `values[i]`).
pub(crate) fn write_device(
    t: &Target<'_>,
    requests: &[Request],
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
    let (slot_bytes, per) = super::read::pipeline::slot_layout(chunk_bytes, slot_target);
    let stride = super::read::pipeline::aligned(chunk_bytes);
    let batches = rplan::batches(units.len(), 1, per);
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
    let claim = || {
        if failed.load(Ordering::Acquire) {
            return None;
        }
        batches.get(next.fetch_add(1, Ordering::AcqRel)).cloned()
    };
    let strides = c_strides(t.chunk_shape, t.elem);
    let work = |w: usize| -> Result<()> {
        let Some(mut lane) = UploadLane::new(ctx, slot_bytes, w == 0)? else {
            return Ok(());
        };
        let mut pending: Option<(usize, std::ops::Range<usize>)> = None;
        loop {
            let b = claim();
            if let Some(b) = &b {
                let batch = &units[b.clone()];
                let used = (batch.len() - 1) * stride + chunk_bytes;
                let slot = lane.download(used, |stream, scratch| {
                    for (j, u) in batch.iter().enumerate() {
                        gather(
                            t,
                            u,
                            values,
                            &strides,
                            j * stride,
                            chunk_bytes,
                            stream,
                            scratch,
                        )?;
                    }
                    Ok(())
                })?;
                if let Some((ps, pb)) = pending.take() {
                    let bytes = lane.downloaded(ps)?;
                    store(t, &units[pb], bytes, stride, chunk_bytes, &strides)?;
                }
                pending = Some((slot, b.clone()));
            } else {
                if let Some((ps, pb)) = pending.take() {
                    let bytes = lane.downloaded(ps)?;
                    store(t, &units[pb], bytes, stride, chunk_bytes, &strides)?;
                }
                break;
            }
        }
        lane.finish()
    };
    let threads = threads.clamp(1, batches.len());
    std::thread::scope(|s| {
        for w in 1..threads {
            let (work, fail) = (&work, &fail);
            let spawned = std::thread::Builder::new()
                .name(format!("devbuf-write-{w}"))
                .spawn_scoped(s, move || {
                    if let Err(e) = work(w) {
                        fail(e);
                    }
                });
            if spawned.is_err() {
                break;
            }
        }
        if let Err(e) = work(0) {
            fail(e);
        }
    });
    match error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Whether unit `u`'s placements cover its whole chunk as clipped to the array.
fn covers_chunk(t: &Target<'_>, u: &Unit) -> bool {
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
    t: &Target<'_>,
    u: &Unit,
    values: &[DeviceBuffer],
    strides: &[isize],
    at: usize,
    chunk_bytes: usize,
    stream: &crate::cuda::Stream,
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
    t: &Target<'_>,
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
                    crate::memory::host_ops::strided_copy(
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
                .map_err(|e| Error::Io {
                    op: "writing a zarr chunk",
                    message: format!("{what}: {e}"),
                })
        })?;
    }
    Ok(())
}
