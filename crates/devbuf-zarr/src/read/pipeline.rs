//! The streaming read pipeline: worker threads (one per core unless told otherwise)
//! claim batches of decode units from one counter, fetch and decode each unit once, and
//! place its selected parts into the output.
//!
//! * Host output: a unit that is the whole of one contiguous output region is decoded
//!   straight into the output; others are decoded into the worker's scratch and copied
//!   into place.
//! * Device output: each worker holds an [`UploadLane`] of the context's page-locked
//!   pool; it decodes a batch of units chunk-contiguous into one slot, the slot goes to
//!   the device in one DMA, and the placement (strided-copy kernel, or one device copy
//!   when contiguous) runs on the device from there, while the worker decodes the next
//!   batch into the other slot. Backpressure is the two slots: a worker waits for its
//!   older slot's DMA before refilling it.
//!
//! The first error stops every worker; the caller gets it and no output.

use std::sync::Mutex;
use std::sync::atomic::Ordering;

use super::gpu::{GpuDecode, Tuning};
use super::options::ReadOptions;
use super::place::place_units;
use super::plan::{Placement, Unit};
use super::sched::{GpuModel, Schedule};
use super::source::ZarrSource;
use super::work::{DeviceWork, ReadCounters, WorkQueue, aligned, on_threads, slot_layout};
use devbuf_core::__private::UploadLane;
use devbuf_core::__private::stream_copy;
use devbuf_core::__private::zeroed_vec;
use devbuf_core::cuda::DeviceBuffer;
use devbuf_core::error::{Error, Result};

/// The output memory of a host read, written by several workers at disjoint bytes.
struct HostOut {
    ptr: *mut u8,
    len: usize,
}
// Safety: workers write disjoint byte ranges of the output (every output element
// belongs to exactly one placement of one unit, and each unit is decoded by one
// worker); the buffer outlives the scoped threads.
unsafe impl Sync for HostOut {}

impl HostOut {
    /// Copies `len` bytes from `src` to byte `at` of the output; `bypass`: with
    /// non-temporal stores ([`BYPASS_MIN_OUTPUT`]; the worker fences after the unit).
    ///
    /// # Safety
    ///
    /// `src..src+len` must be readable and `at..at+len` must lie within the output and
    /// belong to the calling worker's unit alone (see `HostOut`).
    unsafe fn copy(&self, src: *const u8, at: usize, len: usize, bypass: bool) {
        // Safety: the caller's contract; the output and a worker's scratch or piece
        // never overlap.
        unsafe {
            if bypass {
                stream_copy::copy_streaming(src, self.ptr.add(at), len);
            } else {
                std::ptr::copy_nonoverlapping(src, self.ptr.add(at), len);
            }
        }
    }
}

/// Host results from this size on are placed with non-temporal stores
/// (`stream_copy`): far larger than the caches, so the lines a placement would read
/// for ownership before overwriting them cost memory bandwidth and keep nothing
/// useful in the caches. Smaller results stay in the caches for whoever reads them
/// next.
pub(crate) const BYPASS_MIN_OUTPUT: usize = 64 << 20;

/// Reads `units` (each `src.cell_bytes` decoded) into the host memory `out`, every
/// byte of which belongs to exactly one placement (`out` need not be zeroed).
pub(crate) fn read_host(
    src: &ZarrSource<'_>,
    units: &[Unit],
    out: &mut [u8],
    threads: usize,
    options: &ReadOptions,
    counts: &ReadCounters,
) -> Result<()> {
    let batches = super::plan::batches(units.len(), 1, 1);
    let run = WorkQueue::new(units, &batches, counts);
    let host = HostOut {
        ptr: out.as_mut_ptr(),
        len: out.len(),
    };
    let threads = threads.clamp(1, batches.len().max(1));
    counts.workers.store(threads, Ordering::Relaxed);
    let whole_c = src.cell_strides == super::plan::c_strides(&src.cell_shape, src.elem);
    let (stream_min, piece_bytes) = (
        options.stream_min_bytes,
        options.stream_piece_bytes.next_multiple_of(64),
    );
    let streamed = super::incremental::streams(src, stream_min);
    let bypass = out.len() >= BYPASS_MIN_OUTPUT;
    on_threads(threads, &run, &|_| {
        let mut scratch: Vec<u8> = Vec::new();
        let mut piece: Vec<u8> = Vec::new();
        let mut runs: Vec<super::incremental::CopyRun> = Vec::new();
        // The worker's open chunk (shard) file, for this read only.
        let mut last = None;
        while let Some(b) = run.claim() {
            for u in &run.units[b] {
                // A unit that fills one contiguous region of the output, in C order:
                // decoded in place.
                if let [p] = u.placements.as_slice()
                    && whole_c
                    && p.shape == src.cell_shape
                    && is_contiguous(&p.shape, &p.dst_strides, src.elem)
                {
                    let end = p
                        .dst_offset
                        .checked_add(src.cell_bytes)
                        .filter(|&e| e <= host.len);
                    let Some(_) = end else {
                        return Err(Error::invalid("read plan: a unit lies past the output"));
                    };
                    // Safety: `dst_offset..end` lies within the output (checked) and no
                    // other worker writes these bytes (see `HostOut`).
                    let dst = unsafe {
                        std::slice::from_raw_parts_mut(host.ptr.add(p.dst_offset), src.cell_bytes)
                    };
                    counts.note_cpu_unit(src.decode_in(&u.cell, dst, &mut last)?, src.cell_bytes);
                    continue;
                }
                // A large unit placed once in long runs: its pieces go straight to
                // their places.
                if let [p] = u.placements.as_slice()
                    && streamed
                    && super::incremental::runs_of(src, p, host.len, &mut runs)?
                {
                    // Not stored: the fill value where the read places it, not the
                    // whole chunk piece by piece.
                    if src.open_stored_with(&u.cell, &mut last)?.is_none() {
                        fill_host(src, p, &host)?;
                        counts.note_cpu_unit(false, src.cell_bytes);
                        continue;
                    }
                    if piece.is_empty() {
                        piece = zeroed_vec(piece_bytes)?;
                    }
                    let mut next = 0;
                    let mut sink = super::incremental::Scatter {
                        piece: &mut piece,
                        put: |at: usize, bytes: &[u8]| {
                            super::incremental::scatter(&runs, &mut next, at, bytes, &mut |d, b| {
                                // Safety: the runs come from `layout::plan`, which checked that
                                // every destination byte lies within the output's `len`
                                // bytes; they belong to this unit's placement alone (see
                                // `HostOut`).
                                unsafe { host.copy(b.as_ptr(), d, b.len(), bypass) }
                            })
                        },
                    };
                    let stored = super::incremental::decode(src, &u.cell, &mut last, &mut sink)?;
                    if bypass {
                        stream_copy::fence();
                    }
                    if let Some(stored) = stored {
                        counts.note_cpu_unit(stored, src.cell_bytes);
                        continue;
                    }
                }
                // Decoded whole into the worker's scratch (allocated for the first
                // stored unit), then placed; a unit that is not stored is the fill
                // value where the read places it: memory of the read's size, not of
                // the chunk's (see `ZarrSource::decode_stored`).
                let stored = src.decode_stored(
                    &u.cell,
                    || {
                        if scratch.is_empty() {
                            scratch = zeroed_vec(src.cell_bytes)?;
                        }
                        Ok(scratch.as_mut_slice())
                    },
                    &mut last,
                )?;
                counts.note_cpu_unit(stored, src.cell_bytes);
                for p in &u.placements {
                    if stored {
                        place_host(src, &scratch, p, &host, bypass)?;
                    } else {
                        fill_host(src, p, &host)?;
                    }
                }
                if bypass && stored {
                    stream_copy::fence();
                }
            }
        }
        Ok(())
    });
    run.finish()
}

/// Writes the fill value into the bytes of the host output that placement `p` of a
/// unit that is not stored covers.
fn fill_host(src: &ZarrSource<'_>, p: &Placement, out: &HostOut) -> Result<()> {
    let Some(plan) = super::place::unit_plan(src, p, out.len)? else {
        return Ok(());
    };
    devbuf_core::__private::host_ops::for_each_run(&plan, |_, d, run| {
        // Safety: `layout::plan` checked that every destination byte lies within the
        // output's `len` bytes; they belong to this unit's placement alone (see
        // `HostOut`). Runs are whole elements.
        let dst = unsafe { std::slice::from_raw_parts_mut(out.ptr.add(d), run) };
        src.fill_into(dst);
    });
    Ok(())
}

/// Whether a box of `shape` with byte `strides` covers one contiguous C-order run.
pub(crate) fn is_contiguous(shape: &[u64], strides: &[isize], elem: usize) -> bool {
    let mut want = elem as isize;
    for (&n, &s) in shape.iter().zip(strides).rev() {
        if n == 1 {
            continue;
        }
        if s != want {
            return false;
        }
        want = want.saturating_mul(n as isize);
    }
    true
}

/// Copies placement `p` of a decoded unit (`unit`, laid out as `src` says) into the
/// host output.
fn place_host(
    src: &ZarrSource<'_>,
    unit: &[u8],
    p: &Placement,
    out: &HostOut,
    bypass: bool,
) -> Result<()> {
    if unit.len() != src.cell_bytes {
        return Err(Error::invalid(
            "read engine: a decoded unit of the wrong size",
        ));
    }
    let Some(plan) = super::place::unit_plan(src, p, out.len)? else {
        return Ok(());
    };
    devbuf_core::__private::host_ops::for_each_run(&plan, |s, d, run| {
        // Safety: `layout::plan` checked that every byte the copy touches lies within
        // `unit` (source) and within the output's `len` bytes (destination); the
        // destination bytes belong to this unit's placement alone (see `HostOut`).
        unsafe { out.copy(unit.as_ptr().add(s), d, run, bypass) };
    });
    Ok(())
}

/// Reads `units` into the device allocation `out` (in its context), decoding on
/// `threads` workers (the first `gpu.workers` of them through nvCOMP) through staging
/// slots of about `options.slot_bytes` bytes.
pub(crate) fn read_device(
    src: &ZarrSource<'_>,
    units: &[Unit],
    out: DeviceBuffer,
    threads: usize,
    options: &ReadOptions,
    gpu: Option<&GpuDecode>,
    counts: &ReadCounters,
) -> Result<DeviceBuffer> {
    if units.is_empty() {
        return Ok(out);
    }
    let ctx = &out.context().clone();
    let slot_target = options.slot_bytes;
    // Uncompressed units larger than a slot go to the device in pieces; the others are
    // decoded whole into slots of about `slot_target` bytes (at least one unit each).
    let pieces = super::pieces::applies(src, slot_target);
    let (slot_bytes, per) = if pieces {
        (super::pieces::piece_bytes(slot_target), 1)
    } else {
        slot_layout(src.cell_bytes, slot_target)
    };
    let batches = super::plan::batches(units.len(), 1, per);
    let run = WorkQueue::new(units, &batches, counts);
    let gpu_workers = gpu.map_or(0, |g| g.workers);
    let threads = match gpu {
        Some(g) if g.gpu_only => g.workers,
        _ => threads.clamp(1, batches.len().max(gpu_workers)),
    };
    // Workers of a read in pieces each hold a device buffer of a whole unit.
    let threads = if pieces {
        threads.min(super::pieces::max_workers(ctx, src.cell_bytes).max(gpu_workers + 1))
    } else {
        threads
    };
    // GPU claims: whole batches, about `units_per_claim` units each, with as many
    // claims in flight per worker as the device's free memory allows (a quarter of it).
    let (claim_batches, gpu_per, depth) = match gpu {
        Some(g) => {
            let want =
                super::gpu::units_per_claim(src.cell_bytes, units.len(), g.workers, &g.tuning);
            let claim_batches = want.div_ceil(per).max(1);
            let gpu_per = claim_batches * per;
            let blosc = matches!(g.chain.compression, super::codec::Compression::Blosc(_));
            let one = super::gpu::claim_device_bytes(gpu_per, src.cell_bytes, blosc).max(1);
            let room = ctx.free_memory().unwrap_or(0) / 4 / g.workers.max(1);
            (
                claim_batches,
                gpu_per,
                g.tuning
                    .depth
                    .min(g.tuning.flights / g.workers.max(1))
                    .min(room / one)
                    .max(1),
            )
        }
        None => (1, per, 1),
    };
    let model = gpu.map(|g| {
        GpuModel::new(
            g.schedule,
            g.chain.compression,
            src.cell_bytes,
            gpu_per,
            threads.saturating_sub(g.workers),
            g.tuning.readers(),
            GpuModel::one_wave(units.len(), ctx.properties().multiprocessor_count as usize),
        )
    });
    // The CPU workers' lanes share a few streams (see `UploadLane::new_on`).
    let streams = (0..options.lane_streams.min(threads))
        .map(|_| devbuf_core::cuda::Stream::new(ctx))
        .collect::<Result<Vec<_>>>()?;
    // With both decoders asked for, the CPU workers start once every GPU worker stopped
    // claiming (the model found the device's latency longer than the CPU workers need
    // for the rest, or the work ran out): until then every core reads stored bytes for
    // the device, whose rate needs many chunks in flight early, and the CPU workers
    // decode the tail while the device finishes its claims. (Started at once, they
    // would take all of a small read while the GPU workers set up, and on large ones
    // take cores from the device's readers while the device idles.)
    let gate = Gate::new(match gpu {
        Some(g) if g.schedule != Schedule::Model && !g.gpu_only => g.workers,
        _ => 0,
    });
    on_threads(threads, &run, &|t| {
        let stream = (!streams.is_empty()).then(|| &streams[t % streams.len()]);
        // The first CPU worker waits for a lane (the bound on page-locked memory is the
        // pool's); the others join only when the pool has room.
        let work = DeviceWork {
            src,
            queue: &run,
            out: &out,
            ctx,
            counts,
        };
        let cpu = |wait: bool, lane: Option<UploadLane>| {
            if pieces {
                super::pieces::worker(work, slot_bytes, wait, stream, lane)
            } else {
                cpu_worker(work, slot_bytes, wait, stream, lane)
            }
        };
        if let (Some(g), Some(model)) = (gpu.filter(|g| t < g.workers), model.as_ref()) {
            // In a GPU-only read the first GPU worker waits for staging: someone must.
            let wait = t == 0 && g.workers >= threads;
            let plan = GpuDecode {
                tuning: Tuning { depth, ..g.tuning },
                ..*g
            };
            // A GPU worker the model sends home decodes on the CPU from then on (while
            // its last claims finish on the device).
            let then = |lane| if g.gpu_only { Ok(()) } else { cpu(false, lane) };
            // Arrives once: when the worker stops claiming, or when it returns or
            // unwinds before that.
            let arrival = Arrival {
                gate: &gate,
                done: std::cell::Cell::new(false),
            };
            let stopped = || arrival.arrive();
            let worker = super::gpu::GpuWorker {
                work,
                gpu: &plan,
                model,
                claim_batches,
                per: gpu_per,
                wait,
                stream,
            };
            let r = worker.run(&stopped, &then);
            return r;
        }
        gate.wait();
        cpu(t == gpu_workers, None)
    });
    run.finish()?;
    Ok(out)
}

/// Holds threads until a count of others arrived.
struct Gate {
    left: Mutex<usize>,
    open: std::sync::Condvar,
}

impl Gate {
    fn new(count: usize) -> Gate {
        Gate {
            left: Mutex::new(count),
            open: std::sync::Condvar::new(),
        }
    }

    /// One of the awaited threads arrived (each calls this once).
    fn arrive(&self) {
        let mut left = self.left.lock().unwrap_or_else(|p| p.into_inner());
        *left = left.saturating_sub(1);
        if *left == 0 {
            self.open.notify_all();
        }
    }

    /// Waits until every awaited thread arrived.
    fn wait(&self) {
        let mut left = self.left.lock().unwrap_or_else(|p| p.into_inner());
        while *left > 0 {
            left = self.open.wait(left).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// One awaited thread's arrival at a [`Gate`]: at most once, and on drop at the latest
/// (an error or a panic before the thread arrived must not hold the others for ever).
struct Arrival<'a> {
    gate: &'a Gate,
    done: std::cell::Cell<bool>,
}

impl Arrival<'_> {
    fn arrive(&self) {
        if !self.done.replace(true) {
            self.gate.arrive();
        }
    }
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        self.arrive();
    }
}

/// One CPU worker of a device read: decodes batches into its lane's slots until the
/// work runs out. Does nothing when no work is left or (unless `wait`) the pool has
/// no room for its lane. `stream`: the lane's (shared) stream, else one of its own.
/// `lane`: staging the worker already holds (a GPU worker's, now decoding on the CPU),
/// used when its slots hold a batch.
fn cpu_worker(
    work: DeviceWork<'_>,
    slot_bytes: usize,
    wait: bool,
    stream: Option<&devbuf_core::cuda::Stream>,
    lane: Option<UploadLane>,
) -> Result<()> {
    let DeviceWork {
        src,
        queue: run,
        out,
        counts,
        ..
    } = work;
    let lane = work.cpu_lane(lane, slot_bytes, wait, stream, true)?;
    let Some(mut lane) = lane else {
        return Ok(());
    };
    let stride = aligned(src.cell_bytes);
    counts.workers.fetch_add(1, Ordering::Relaxed);
    // The worker's open chunk (shard) file, for this read only.
    let mut last = None;
    while let Some(b) = run.claim() {
        let batch = &run.units[b];
        {
            let slot = lane.slot()?;
            for (j, u) in batch.iter().enumerate() {
                let at = j * stride;
                counts.note_cpu_unit(
                    src.decode_in(&u.cell, &mut slot[at..at + src.cell_bytes], &mut last)?,
                    src.cell_bytes,
                );
            }
        }
        let used = (batch.len() - 1) * stride + src.cell_bytes;
        lane.submit(used, |stream, scratch| {
            place_units(src, batch, stride, stream, scratch, out)
        })?;
    }
    lane.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguity() {
        assert!(is_contiguous(&[2, 3], &[12, 4], 4));
        assert!(is_contiguous(&[1, 3], &[400, 4], 4));
        assert!(!is_contiguous(&[2, 3], &[16, 4], 4));
        assert!(is_contiguous(&[], &[], 4));
    }

    #[test]
    fn slots_hold_whole_aligned_units() {
        assert_eq!(slot_layout(1000, 4096), (4096, 4));
        assert_eq!(slot_layout(10 << 20, 4 << 20), (10 << 20, 1));
        assert_eq!(slot_layout(1, 0), (256, 1));
    }
}
