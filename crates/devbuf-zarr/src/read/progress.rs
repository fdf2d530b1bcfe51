//! A read's progress and its cancellation, as its caller sees them: [`Progress`], the
//! [`ProgressSink`] that receives it, the [`Cancel`] token; and the engine's side of
//! both (`Tracker`, which counts and throttles the reports).
//!
//! The engine already counts each unit it decodes (the read report's figures); with a
//! sink set, those places also add to the tracker, and a worker whose addition finds a
//! report due (and no other worker reporting) calls the sink from its own thread. The
//! engine holds none of its own locks then, only the tracker's, so reports never run
//! at the same time and their values never go down.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a [`ProgressSink`] hears of a read by default: at most once per 100 ms
/// between the first and the last report ([`ProgressSink::every`] changes it).
pub const DEFAULT_PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

/// How far a read has got: chunks and decoded bytes done, of the read's totals.
///
/// A chunk is a unit the engine decodes: a chunk, or an inner chunk of a shard. Bytes
/// are *decoded* bytes of whole chunks, before the selection (as
/// [`ReadReport::decoded_bytes`](crate::ReadReport::decoded_bytes) counts them), so
/// `bytes_total` is `chunks_total` times the decoded size of one chunk, whatever part
/// of each chunk the selection takes; chunks that are not stored count as done when
/// their fill value is placed. A chunk counts as done when it is decoded and placed on
/// the host or, on a device read, queued for the device.
///
/// ```
/// use devbuf_zarr::Progress;
/// let p = Progress::default();
/// assert_eq!(p.fraction(), 1.0); // nothing to do is done
/// assert!(p.is_done());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Progress {
    /// Chunks (inner chunks of shards) done.
    pub chunks_done: u64,
    /// Chunks the read touches.
    pub chunks_total: u64,
    /// Decoded bytes of the chunks done.
    pub bytes_done: u64,
    /// Decoded bytes of all the chunks the read touches.
    pub bytes_total: u64,
    /// Time since the read started (planning and allocation included).
    pub elapsed: Duration,
}

impl Progress {
    /// The part of the read done, by bytes: 0.0 to 1.0 (1.0 for a read of nothing).
    pub fn fraction(&self) -> f64 {
        if self.bytes_total == 0 {
            return if self.chunks_total == 0 {
                1.0
            } else {
                self.chunks_done as f64 / self.chunks_total as f64
            };
        }
        (self.bytes_done as f64 / self.bytes_total as f64).min(1.0)
    }

    /// Whether every chunk is done.
    pub fn is_done(&self) -> bool {
        self.chunks_done >= self.chunks_total
    }

    /// The sum of two reads' progress (the parts of a read spread over devices).
    pub(crate) fn plus(self, o: Progress) -> Progress {
        Progress {
            chunks_done: self.chunks_done.saturating_add(o.chunks_done),
            chunks_total: self.chunks_total.saturating_add(o.chunks_total),
            bytes_done: self.bytes_done.saturating_add(o.bytes_done),
            bytes_total: self.bytes_total.saturating_add(o.bytes_total),
            elapsed: self.elapsed.max(o.elapsed),
        }
    }
}

/// Where a read reports its [`Progress`] ([`ReadOptions::progress`](crate::ReadOptions::progress)):
/// a callback, or a `tokio::sync::watch` channel.
///
/// Reports come from the read's worker threads (or the calling thread), one at a time,
/// never at the same time as each other, with values that never go down: the first
/// once the read is planned (nothing done, the totals known), then at most one per
/// interval ([`DEFAULT_PROGRESS_INTERVAL`]; see [`every`](Self::every)), and the last,
/// with everything done, when the read succeeded. A failed or cancelled read sends no
/// last report. Keep the callback short: a worker decodes no chunk while it runs.
///
/// A callback that panics is not called again for that read, and the read goes on
/// (the panic is caught and logged as a `tracing` warning): progress is for watching
/// a read, and a fault in the watcher should not lose the data.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use devbuf_zarr::{ProgressSink, ReadOptions, ZarrArray};
/// use devbuf_core::zarr::BufferPrototype;
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let log = seen.clone();
/// let mut a = ZarrArray::open("../../tests/fixtures/zarr/v3_float32.zarr")?;
/// a.set_read_options(ReadOptions {
///     progress: Some(ProgressSink::new(move |p| log.lock().unwrap().push(*p))),
///     ..ReadOptions::default()
/// })?;
/// a.read(..).to(&BufferPrototype::Host)?;
/// let last = *seen.lock().unwrap().last().unwrap();
/// assert!(last.is_done() && last.bytes_done == last.bytes_total);
///
/// // Or a watch channel, for async code:
/// let (tx, rx) = tokio::sync::watch::channel(devbuf_zarr::Progress::default());
/// a.set_read_options(ReadOptions { progress: Some(tx.into()), ..ReadOptions::default() })?;
/// a.read(..).to(&BufferPrototype::Host)?;
/// assert!(rx.borrow().is_done());
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone)]
pub struct ProgressSink {
    call: Arc<dyn Fn(&Progress) + Send + Sync>,
    every: Duration,
}

impl ProgressSink {
    /// A sink that calls `f` with each report.
    pub fn new(f: impl Fn(&Progress) + Send + Sync + 'static) -> ProgressSink {
        ProgressSink {
            call: Arc::new(f),
            every: DEFAULT_PROGRESS_INTERVAL,
        }
    }

    /// A sink that stores each report in a watch channel (`send_replace`: whether or
    /// not a receiver is left). The same as `ProgressSink::from(tx)`.
    pub fn watch(tx: tokio::sync::watch::Sender<Progress>) -> ProgressSink {
        ProgressSink::new(move |p| {
            tx.send_replace(*p);
        })
    }

    /// The same sink, reporting at most once per `interval` between the first and the
    /// last report (`Duration::ZERO`: after every chunk).
    ///
    /// ```
    /// use std::time::Duration;
    /// use devbuf_zarr::ProgressSink;
    /// let s = ProgressSink::new(|p| println!("{:.0}%", p.fraction() * 100.0)).every(Duration::from_secs(1));
    /// assert_eq!(s.interval(), Duration::from_secs(1));
    /// ```
    pub fn every(mut self, interval: Duration) -> ProgressSink {
        self.every = interval;
        self
    }

    /// The least time between two reports ([`every`](Self::every)).
    pub fn interval(&self) -> Duration {
        self.every
    }

    /// Calls the sink; `false` when it panicked (the panic is caught).
    pub(crate) fn deliver(&self, p: &Progress) -> bool {
        match catch_unwind(AssertUnwindSafe(|| (self.call)(p))) {
            Ok(()) => true,
            Err(panic) => {
                tracing::warn!(
                    panic = %devbuf_core::__private::panic_message(panic.as_ref()),
                    "the progress callback panicked; it is not called again for this read"
                );
                false
            }
        }
    }
}

impl From<tokio::sync::watch::Sender<Progress>> for ProgressSink {
    fn from(tx: tokio::sync::watch::Sender<Progress>) -> ProgressSink {
        ProgressSink::watch(tx)
    }
}

impl std::fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressSink")
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

/// Two sinks are equal when they are clones of one (the same callback) with the same
/// interval.
impl PartialEq for ProgressSink {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.call, &other.call) && self.every == other.every
    }
}

impl Eq for ProgressSink {}

/// A token that cancels the reads whose [`ReadOptions::cancel`](crate::ReadOptions::cancel)
/// it is, from any thread: their workers take no more chunks, the read frees what it
/// allocated and returns an error of kind
/// [`ErrorKind::Cancelled`](devbuf_core::ErrorKind::Cancelled). Clones share one flag.
/// A cancelled token stays cancelled: later reads with it fail at once (set a new
/// token for them).
///
/// A read stops within one claim of work per worker: one chunk on the host, a staging
/// slot's chunks (4 MiB by default) for a CPU worker of a device read, a GPU claim
/// (up to [`GpuTuning::claim_bytes`](crate::GpuTuning::claim_bytes)) for a GPU worker.
/// A worker waiting for an object-store fetch notices it when that fetch returns (or
/// times out); dropping an async read's future aborts the fetches at once.
///
/// ```
/// use devbuf_zarr::{Cancel, ReadOptions, ZarrArray};
/// use devbuf_core::{zarr::BufferPrototype, ErrorKind};
/// let cancel = Cancel::new();
/// let mut a = ZarrArray::open("../../tests/fixtures/zarr/v3_float32.zarr")?;
/// a.set_read_options(ReadOptions { cancel: Some(cancel.clone()), ..ReadOptions::default() })?;
/// cancel.cancel(); // from another thread, a signal handler's flag, a progress callback ...
/// let e = a.read(..).to(&BufferPrototype::Host).unwrap_err();
/// assert_eq!(e.kind(), ErrorKind::Cancelled);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// A token not cancelled yet.
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Cancels every read that has this token (and later ones).
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// The flag itself, for the engine's work queue.
    pub(crate) fn flag(&self) -> &AtomicBool {
        &self.0
    }
}

impl std::fmt::Debug for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancel")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// Two tokens are equal when they share one flag.
impl PartialEq for Cancel {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Cancel {}

/// The engine's side of a read's progress: what is done of the totals, and when the
/// next report is due. Only built when the read has a sink.
pub(crate) struct Tracker {
    sink: ProgressSink,
    started: Instant,
    chunks_total: u64,
    bytes_total: u64,
    chunks_done: AtomicU64,
    bytes_done: AtomicU64,
    /// Microseconds from `started` at which the next report is due.
    next_due_us: AtomicU64,
    /// Held while reporting: one report at a time, in order.
    reporting: Mutex<()>,
    /// The sink panicked: no more reports.
    muted: AtomicBool,
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker")
            .field("snapshot", &self.snapshot())
            .finish_non_exhaustive()
    }
}

fn micros(d: Duration) -> u64 {
    d.as_micros().min(u64::MAX as u128) as u64
}

impl Tracker {
    /// The tracker of a read of `chunks` units of `cell_bytes` decoded bytes that
    /// started at `started`.
    pub(crate) fn new(sink: ProgressSink, started: Instant, chunks: u64, cell_bytes: u64) -> Self {
        Tracker {
            sink,
            started,
            chunks_total: chunks,
            bytes_total: chunks.saturating_mul(cell_bytes),
            chunks_done: AtomicU64::new(0),
            bytes_done: AtomicU64::new(0),
            next_due_us: AtomicU64::new(0),
            reporting: Mutex::new(()),
            muted: AtomicBool::new(false),
        }
    }

    fn snapshot(&self) -> Progress {
        Progress {
            chunks_done: self.chunks_done.load(Ordering::Relaxed),
            chunks_total: self.chunks_total,
            bytes_done: self.bytes_done.load(Ordering::Relaxed),
            bytes_total: self.bytes_total,
            elapsed: self.started.elapsed(),
        }
    }

    /// Reports the current values now (called with `reporting` held); `last`: the
    /// report of [`start`](Self::start) or [`finish`](Self::finish). Any other report
    /// with everything done is left out: a worker that counted its units before
    /// another counted the last ones may report after that, and the one report with
    /// everything done is `finish`'s.
    fn report(&self, last: bool) {
        if self.muted.load(Ordering::Relaxed) {
            return;
        }
        let now = self.snapshot();
        if !last && now.is_done() {
            return;
        }
        let due = micros(now.elapsed).saturating_add(micros(self.sink.every));
        self.next_due_us.store(due, Ordering::Relaxed);
        if !self.sink.deliver(&now) {
            self.muted.store(true, Ordering::Relaxed);
        }
    }

    /// The first report: nothing done, the totals known.
    pub(crate) fn start(&self) {
        let _held = self.reporting.lock().unwrap_or_else(|p| p.into_inner());
        self.report(true);
    }

    /// `chunks` more units done, of `bytes` decoded bytes; reports when one is due and
    /// no other thread is reporting. The last report is [`finish`](Self::finish)'s.
    pub(crate) fn add(&self, chunks: u64, bytes: u64) {
        let done = self.chunks_done.fetch_add(chunks, Ordering::Relaxed) + chunks;
        self.bytes_done.fetch_add(bytes, Ordering::Relaxed);
        if done >= self.chunks_total {
            return;
        }
        let now = micros(self.started.elapsed());
        if now < self.next_due_us.load(Ordering::Relaxed) {
            return;
        }
        // Another worker reporting now has this unit's count or will soon report again.
        if let Ok(_held) = self.reporting.try_lock()
            && now >= self.next_due_us.load(Ordering::Relaxed)
        {
            self.report(false);
        }
    }

    /// The last report of a read that succeeded: everything done.
    pub(crate) fn finish(&self) {
        let _held = self.reporting.lock().unwrap_or_else(|p| p.into_inner());
        self.report(true);
    }
}

/// A sink for each part of a read spread over several devices that adds the parts'
/// progress up and passes the sum to `sink`, once every part has reported (before
/// that, the totals are not all known).
pub(crate) fn spread_sinks(sink: &ProgressSink, parts: usize) -> Vec<ProgressSink> {
    struct Sum {
        latest: Vec<Option<Progress>>,
        muted: bool,
    }
    let sum = Arc::new(Mutex::new(Sum {
        latest: vec![None; parts],
        muted: false,
    }));
    (0..parts)
        .map(|i| {
            let (sum, sink, every) = (sum.clone(), sink.clone(), sink.every);
            ProgressSink {
                call: Arc::new(move |p: &Progress| {
                    let mut s = sum.lock().unwrap_or_else(|p| p.into_inner());
                    s.latest[i] = Some(*p);
                    if s.muted {
                        return;
                    }
                    let total = s
                        .latest
                        .iter()
                        .try_fold(Progress::default(), |acc, p| p.map(|p| acc.plus(p)));
                    if let Some(total) = total
                        && !sink.deliver(&total)
                    {
                        s.muted = true;
                    }
                }),
                every,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_throttled_and_end_at_the_totals() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let sink = ProgressSink::new(move |p| log.lock().unwrap().push(*p))
            .every(Duration::from_secs(3600));
        let t = Tracker::new(sink, Instant::now(), 4, 10);
        t.start();
        for _ in 0..4 {
            t.add(1, 10);
        }
        t.finish();
        let seen = seen.lock().unwrap();
        // The first, then none within the hour, then the last.
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!((seen[0].chunks_done, seen[0].chunks_total), (0, 4));
        assert_eq!((seen[1].chunks_done, seen[1].bytes_done), (4, 40));
        assert_eq!(seen[1].bytes_total, 40);
    }

    #[test]
    fn a_panicking_sink_is_muted() {
        let calls = Arc::new(AtomicU64::new(0));
        let c = calls.clone();
        let sink = ProgressSink::new(move |_| {
            c.fetch_add(1, Ordering::Relaxed);
            panic!("progress bar broke");
        })
        .every(Duration::ZERO);
        let t = Tracker::new(sink, Instant::now(), 3, 1);
        t.start();
        t.add(1, 1);
        t.finish();
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn spread_sums_once_every_part_reported() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let sink = ProgressSink::new(move |p| log.lock().unwrap().push(*p));
        let parts = spread_sinks(&sink, 2);
        let p = |done, total| Progress {
            chunks_done: done,
            chunks_total: total,
            bytes_done: done * 8,
            bytes_total: total * 8,
            elapsed: Duration::ZERO,
        };
        parts[0].deliver(&p(0, 3));
        parts[0].deliver(&p(2, 3));
        parts[1].deliver(&p(1, 5));
        parts[1].deliver(&p(5, 5));
        parts[0].deliver(&p(3, 3));
        let seen = seen.lock().unwrap();
        let done: Vec<_> = seen
            .iter()
            .map(|p| (p.chunks_done, p.chunks_total))
            .collect();
        assert_eq!(done, [(3, 8), (7, 8), (8, 8)]);
        assert_eq!(seen[2].bytes_done, 64);
    }
}
