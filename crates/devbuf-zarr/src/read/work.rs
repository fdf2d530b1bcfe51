//! The shared state of one read, which every worker of it uses and which uses none of
//! them: the work queue the workers claim batches of units from (and the first error),
//! the counters behind the read report, the threads they run on, and the layout of
//! units in a staging slot.

use std::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use super::plan::Unit;
use super::source::ZarrSource;
use devbuf_core::__private::UploadLane;
use devbuf_core::cuda::{Context, DeviceBuffer, Stream};
use devbuf_core::error::{Error, Result};

/// Alignment of units within a staging slot (keeps the placement kernels' 16-byte
/// accesses aligned).
const ALIGN: usize = 256;

/// What the workers of one read did, counted as they go (the read report's figures).
#[derive(Debug, Default)]
pub(crate) struct ReadCounters {
    pub cpu_units: AtomicU64,
    pub gpu_units: AtomicU64,
    pub gpu_workers: AtomicUsize,
    /// Microseconds GPU workers spent reading stored bytes, the device time of their
    /// claims (upload, nvCOMP, placement; events), and the time they waited for the
    /// device (summed over workers and claims).
    pub gpu_read_us: AtomicU64,
    pub gpu_decode_us: AtomicU64,
    pub gpu_wait_us: AtomicU64,
    /// Microseconds GPU workers spent queueing claims (host side: nvCOMP's set-up,
    /// the launches, a flight's first allocations).
    pub gpu_queue_us: AtomicU64,
    /// When (microseconds from the pipeline's start) the first GPU claim was queued,
    /// the GPU workers' last read ended, and their last claim finished on the device.
    pub gpu_first_us: AtomicU64,
    pub gpu_read_end_us: AtomicU64,
    pub gpu_end_us: AtomicU64,
    pub missing_units: AtomicU64,
    pub decoded_bytes: AtomicU64,
    pub workers: AtomicUsize,
    /// Set from outside the read to stop it (a read spread over several devices stops
    /// every device's part when one fails): workers take no more work and the read
    /// ends with an error.
    pub stop: Option<std::sync::Arc<AtomicBool>>,
    /// The caller's token ([`ReadOptions::cancel`](crate::ReadOptions::cancel)): like
    /// `stop`, but the read ends with an [`Error::Cancelled`].
    pub cancel: Option<super::progress::Cancel>,
    /// The read's progress, when it has a sink (set once the read is planned).
    pub progress: Option<super::progress::Tracker>,
}

impl ReadCounters {
    /// A CPU worker decoded a unit of `bytes` (`stored`: from stored bytes, else the
    /// fill value of a missing chunk).
    pub(crate) fn note_cpu_unit(&self, stored: bool, bytes: usize) {
        self.cpu_units.fetch_add(1, Ordering::Relaxed);
        self.decoded_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
        if !stored {
            self.missing_units.fetch_add(1, Ordering::Relaxed);
        }
        self.note_done(1, bytes as u64);
    }

    /// `units` more units done, of `bytes` decoded bytes, for the read's progress
    /// (nothing without a sink).
    pub(crate) fn note_done(&self, units: u64, bytes: u64) {
        if let Some(p) = &self.progress {
            p.add(units, bytes);
        }
    }

    /// Whether the caller cancelled the read.
    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(|c| c.is_cancelled())
    }
}

/// The work of one read: its units in batches, the counter the workers claim batches
/// from, and the first error (which stops every worker).
pub(crate) struct WorkQueue<'a> {
    pub units: &'a [Unit],
    batches: &'a [Range<usize>],
    next: AtomicUsize,
    failed: AtomicBool,
    /// [`ReadCounters::stop`] and [`ReadCounters::cancel`].
    stop: Option<&'a AtomicBool>,
    cancel: Option<&'a AtomicBool>,
    counts: &'a ReadCounters,
    error: Mutex<Option<Error>>,
    /// When the workers were started.
    pub started: Instant,
}

impl<'a> WorkQueue<'a> {
    /// The work of `units` in `batches` (ranges of `units`, in claim order), stopped
    /// early when `counts.stop` is set or `counts.cancel` cancelled.
    pub(crate) fn new(
        units: &'a [Unit],
        batches: &'a [Range<usize>],
        counts: &'a ReadCounters,
    ) -> WorkQueue<'a> {
        WorkQueue {
            units,
            batches,
            next: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
            stop: counts.stop.as_deref(),
            cancel: counts.cancel.as_ref().map(|c| c.flag()),
            counts,
            error: Mutex::new(None),
            started: Instant::now(),
        }
    }

    /// Whether a worker failed or the read was stopped or cancelled from outside.
    fn halted(&self) -> bool {
        let set = |f: Option<&AtomicBool>| f.is_some_and(|f| f.load(Ordering::Acquire));
        self.failed.load(Ordering::Acquire) || set(self.stop) || set(self.cancel)
    }

    /// The next batch of units, if any is left and the read was not halted.
    pub(crate) fn claim(&self) -> Option<Range<usize>> {
        if self.halted() {
            return None;
        }
        let b = self.next.fetch_add(1, Ordering::AcqRel);
        self.batches.get(b).cloned()
    }

    /// Units not claimed yet.
    pub(crate) fn remaining(&self) -> usize {
        let b = self.next.load(Ordering::Acquire);
        match self.batches.get(b) {
            Some(r) => self.units.len().saturating_sub(r.start),
            None => 0,
        }
    }

    /// Up to `k` consecutive batches at once: the units they hold.
    pub(crate) fn claim_many(&self, k: usize) -> Option<Range<usize>> {
        if self.halted() {
            return None;
        }
        let b = self.next.fetch_add(k.max(1), Ordering::AcqRel);
        let first = self.batches.get(b)?;
        let last = &self.batches[(b + k.max(1)).min(self.batches.len()) - 1];
        Some(first.start..last.end)
    }

    pub(crate) fn fail(&self, e: Error) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
        }
        self.failed.store(true, Ordering::Release);
    }

    /// The first error of any worker, if one failed; an error too when the read was
    /// stopped from outside (its output is incomplete). A cancelled read is an
    /// [`Error::Cancelled`] whatever else happened: what the caller asked for.
    pub(crate) fn finish(self) -> Result<()> {
        if self.cancel.is_some_and(|c| c.load(Ordering::Acquire)) {
            let decoded = self.counts.cpu_units.load(Ordering::Relaxed)
                + self.counts.gpu_units.load(Ordering::Relaxed);
            return Err(Error::cancelled(format!(
                "the read was cancelled after decoding {decoded} of its {} chunks",
                self.units.len()
            )));
        }
        match self.error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => Err(e),
            None if self.stop.is_some_and(|s| s.load(Ordering::Acquire)) => Err(Error::cancelled(
                "the read was stopped before it finished: another part of it failed, or \
                     its async call was dropped",
            )),
            None => Ok(()),
        }
    }
}

/// Runs `work` on `threads` scoped threads (the caller's thread is one of them), each
/// in the caller's async scope (if any: see `crate::aio`).
pub(crate) fn on_threads(
    threads: usize,
    queue: &WorkQueue<'_>,
    work: &(dyn Fn(usize) -> Result<()> + Sync),
) {
    // The workers' events (file reads, fetches) belong to the read's span, and their
    // fetches to the caller's runtime (async reads).
    let span = tracing::Span::current();
    let scope = crate::aio::scope::current();
    std::thread::scope(|s| {
        for t in 1..threads {
            let span = span.clone();
            let scope = scope.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("devbuf-read-{t}"))
                .spawn_scoped(s, move || {
                    let _in = span.enter();
                    let _rt = crate::aio::scope::enter(scope);
                    if let Err(e) = work(t) {
                        queue.fail(e);
                    }
                });
            if spawned.is_err() {
                break; // fewer workers; the others take the work
            }
        }
        if let Err(e) = work(0) {
            queue.fail(e);
        }
    });
}

/// Bytes of one unit's place in a staging slot.
pub(crate) fn aligned(n: usize) -> usize {
    n.div_ceil(ALIGN).saturating_mul(ALIGN).max(ALIGN)
}

/// Staging slot size and units per slot for units of `cell_bytes`, aiming at
/// `target` bytes per slot.
pub(crate) fn slot_layout(cell_bytes: usize, target: usize) -> (usize, usize) {
    let per = (target / aligned(cell_bytes)).max(1);
    (per * aligned(cell_bytes), per)
}

/// What every worker of a device read works with: the array as the engine sees it, the
/// read's work queue and counters, and the output with its context.
#[derive(Clone, Copy)]
pub(crate) struct DeviceWork<'a> {
    pub src: &'a ZarrSource<'a>,
    pub queue: &'a WorkQueue<'a>,
    pub out: &'a DeviceBuffer,
    pub ctx: &'a Context,
    pub counts: &'a ReadCounters,
}

impl DeviceWork<'_> {
    /// The staging lane of a CPU worker of this read, or `None` when no work is left or
    /// (unless `wait`) the page-locked pool has no room for one. `held`: staging the
    /// worker already holds (a GPU worker's, now decoding on the CPU), used when its
    /// slots hold `slot_bytes`. `stream`: the lane's (shared) stream, else one of its
    /// own. `scratch`: the lane also has device scratch for its slots (batches placed
    /// from there), else it is bare (pieces copied straight to their unit).
    pub(crate) fn cpu_lane(
        &self,
        held: Option<UploadLane>,
        slot_bytes: usize,
        wait: bool,
        stream: Option<&Stream>,
        scratch: bool,
    ) -> Result<Option<UploadLane>> {
        if self.queue.remaining() == 0 {
            return Ok(None);
        }
        if let Some(l) = held.filter(|l| l.slot_bytes() >= slot_bytes) {
            return Ok(Some(if scratch { l.with_scratch()? } else { l }));
        }
        match (stream, scratch) {
            (Some(s), true) => UploadLane::new_on(self.ctx, slot_bytes, wait, s),
            (None, true) => UploadLane::new(self.ctx, slot_bytes, wait),
            (Some(s), false) => UploadLane::bare_on(self.ctx, slot_bytes, wait, s),
            (None, false) => UploadLane::bare(self.ctx, slot_bytes, wait),
        }
    }
}
