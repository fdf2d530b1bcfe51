//! The bounded pool of staging kits (page-locked buffers with their stream), as pure
//! accounting over any item type so that it is tested on the host.
//!
//! * Items are reused across transfers (allocating page-locked memory costs about a
//!   millisecond per megabyte; doing it inside a transfer cut the measured bandwidth
//!   from 50 to 17 GB/s).
//! * The bytes held (idle + in use + being allocated) never exceed the limit; an
//!   acquisition that would exceed it first frees idle items of another chunk size,
//!   then either gives up ([`StagingPool::try_acquire`]) or waits for a release
//!   ([`StagingPool::acquire`]).
//! * A transfer lane holds at most one item and never waits for anything but the GPU
//!   while holding it, so waiting for an item cannot deadlock.
//! * Slow work (allocating, freeing) happens outside the lock.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::error::{Error, Result};

/// An acquisition may take an idle item up to this many times larger than asked for.
pub(crate) const REUSE_LARGER: usize = 8;

/// Something the pool holds: an amount of page-locked memory cut for one chunk size.
pub(crate) trait PoolItem {
    /// Page-locked bytes the item holds.
    fn bytes(&self) -> usize;
    /// The chunk size it serves.
    fn chunk_bytes(&self) -> usize;
}

/// Counters of a pool, as [`StagingPool::snapshot`] reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PoolCounters {
    /// Bytes held now (idle + in use + being allocated).
    pub held: usize,
    /// Bytes of items handed out now.
    pub in_use: usize,
    /// Highest `held` so far.
    pub high_water: usize,
    /// Highest `in_use` so far.
    pub in_use_high_water: usize,
    /// The limit on `held`.
    pub limit: usize,
    /// Items allocated.
    pub allocations: u64,
    /// Acquisitions served by an idle item.
    pub reuses: u64,
    /// Times an acquisition waited for a release.
    pub waits: u64,
    /// Items given up on (not returned: a failed stream left them unsafe to reuse).
    pub abandoned: u64,
    /// Idle items now.
    pub idle_items: usize,
}

struct State<K> {
    idle: Vec<K>,
    c: PoolCounters,
}

/// A bounded pool of reusable items.
pub(crate) struct StagingPool<K> {
    state: Mutex<State<K>>,
    released: Condvar,
}

impl<K: PoolItem> StagingPool<K> {
    /// An empty pool that holds at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        StagingPool {
            state: Mutex::new(State {
                idle: Vec::new(),
                c: PoolCounters {
                    limit,
                    ..PoolCounters::default()
                },
            }),
            released: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The counters now.
    pub fn snapshot(&self) -> PoolCounters {
        let s = self.lock();
        let mut c = s.c;
        c.idle_items = s.idle.len();
        c
    }

    /// Changes the limit. Idle items beyond it are freed now, items in use when they
    /// come back.
    pub fn set_limit(&self, limit: usize) {
        let freed = {
            let mut s = self.lock();
            s.c.limit = limit;
            let mut freed = Vec::new();
            while s.c.held > limit {
                match s.idle.pop() {
                    Some(k) => {
                        s.c.held -= k.bytes();
                        freed.push(k);
                    }
                    None => break,
                }
            }
            freed
        };
        drop(freed);
        self.released.notify_all();
    }

    /// Frees every idle item; returns the bytes freed.
    pub fn trim(&self) -> usize {
        let freed: Vec<K> = {
            let mut s = self.lock();
            let v: Vec<K> = s.idle.drain(..).collect();
            let bytes: usize = v.iter().map(|k| k.bytes()).sum();
            s.c.held -= bytes;
            v
        };
        let bytes = freed.iter().map(|k| k.bytes()).sum();
        drop(freed);
        self.released.notify_all();
        bytes
    }

    /// An idle item for `chunk` or a new one of `bytes` from `alloc` if the limit
    /// allows; `Ok(None)` when the pool is at its limit with nothing idle to reuse.
    pub fn try_acquire(
        &self,
        chunk: usize,
        bytes: usize,
        alloc: &mut dyn FnMut() -> Result<K>,
    ) -> Result<Option<K>> {
        let mut evicted = Vec::new();
        {
            let mut s = self.lock();
            // An idle item for this chunk size, else the smallest idle one up to
            // `REUSE_LARGER` times larger (its user takes the first `chunk` bytes of
            // each buffer): reads that alternate decoders (whose slots differ in size)
            // then reuse what the other allocated instead of freeing it and allocating
            // anew, which costs about a millisecond per megabyte.
            let exact = s.idle.iter().position(|k| k.chunk_bytes() == chunk);
            let larger = || {
                s.idle
                    .iter()
                    .enumerate()
                    .filter(|(_, k)| {
                        k.chunk_bytes() > chunk
                            && k.chunk_bytes() <= chunk.saturating_mul(REUSE_LARGER)
                    })
                    .min_by_key(|(_, k)| k.chunk_bytes())
                    .map(|(i, _)| i)
            };
            if let Some(pos) = exact.or_else(larger) {
                let k = s.idle.swap_remove(pos);
                s.c.in_use += k.bytes();
                s.c.in_use_high_water = s.c.in_use_high_water.max(s.c.in_use);
                s.c.reuses += 1;
                return Ok(Some(k));
            }
            // Make room: idle items of other chunk sizes go first.
            while s.c.held + bytes > s.c.limit {
                match s.idle.pop() {
                    Some(k) => {
                        s.c.held -= k.bytes();
                        evicted.push(k);
                    }
                    None => break,
                }
            }
            if s.c.held + bytes > s.c.limit {
                drop(s);
                drop(evicted);
                return Ok(None);
            }
            s.c.held += bytes;
            s.c.in_use += bytes;
            s.c.high_water = s.c.high_water.max(s.c.held);
            s.c.in_use_high_water = s.c.in_use_high_water.max(s.c.in_use);
            s.c.allocations += 1;
        }
        drop(evicted);
        match alloc() {
            Ok(k) => {
                let actual = k.bytes();
                if actual != bytes {
                    let mut s = self.lock();
                    s.c.held = s.c.held + actual - bytes;
                    s.c.in_use = s.c.in_use + actual - bytes;
                    s.c.high_water = s.c.high_water.max(s.c.held);
                }
                Ok(Some(k))
            }
            Err(e) => {
                {
                    let mut s = self.lock();
                    s.c.held -= bytes;
                    s.c.in_use -= bytes;
                    s.c.allocations -= 1;
                }
                self.released.notify_all();
                Err(e)
            }
        }
    }

    /// Like [`try_acquire`](Self::try_acquire), but waits for a release while the pool
    /// is at its limit, until `give_up()` says the item is no longer needed.
    ///
    /// An item larger than the whole limit (the limit was lowered while a transfer
    /// planned with the old configuration was running, or a zarr read or write stages
    /// chunks larger than half the limit) can never be had by waiting: that is an error
    /// naming both sizes and the bound to raise, unless `give_up()` already holds.
    pub fn acquire(
        &self,
        chunk: usize,
        bytes: usize,
        alloc: &mut dyn FnMut() -> Result<K>,
        give_up: &dyn Fn() -> bool,
    ) -> Result<Option<K>> {
        let mut counted = false;
        loop {
            if let Some(k) = self.try_acquire(chunk, bytes, alloc)? {
                return Ok(Some(k));
            }
            if give_up() {
                return Ok(None);
            }
            let mut s = self.lock();
            if bytes > s.c.limit {
                // Two ways here: the bound was lowered while a transfer planned with a
                // larger chunk ran, or a zarr read or write needs staging slots of whole
                // chunks and one chunk is larger than half the bound.
                return Err(Error::invalid(format!(
                    "a staging lane_resources of {bytes} bytes (two {chunk}-byte page-locked buffers) does \
                     not fit the page-locked pool's bound of {} bytes \
                     (TransferConfig::max_pinned_bytes): raise the bound to at least {bytes} \
                     (a zarr read or write stages whole chunks, at least one per buffer), or \
                     retry the copy if the bound was lowered while it ran",
                    s.c.limit
                )));
            }
            if !counted {
                s.c.waits += 1;
                counted = true;
            }
            // Re-checked after a release or every few milliseconds (`give_up` depends on
            // state this condition variable does not see).
            let (_s, _) = self
                .released
                .wait_timeout(s, Duration::from_millis(2))
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Makes sure up to `count` items for `chunk` are idle in the pool (allocating
    /// within the limit), e.g. ahead of a first transfer. Returns how many items were
    /// acquired and put back. On an allocation error the items acquired so far go back
    /// to the pool (so the books stay right) before the error is returned.
    pub fn prefill(
        &self,
        count: usize,
        chunk: usize,
        bytes: usize,
        alloc: &mut dyn FnMut() -> Result<K>,
    ) -> Result<usize> {
        let mut got = Vec::new();
        let mut failed = None;
        while got.len() < count {
            match self.try_acquire(chunk, bytes, alloc) {
                Ok(Some(k)) => got.push(k),
                Ok(None) => break,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let n = got.len();
        for k in got {
            self.release(k);
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// Returns an item. It stays idle for reuse unless the pool holds more than its
    /// limit (after a [`set_limit`](Self::set_limit)), in which case it is freed.
    pub fn release(&self, k: K) {
        let freed = {
            let mut s = self.lock();
            s.c.in_use -= k.bytes();
            if s.c.held > s.c.limit {
                s.c.held -= k.bytes();
                Some(k)
            } else {
                s.idle.push(k);
                None
            }
        };
        drop(freed);
        self.released.notify_all();
    }

    /// Forgets an item that must not be reused or freed (its stream failed, so a DMA
    /// into it may never have been confirmed finished): it is leaked on purpose.
    pub fn abandon(&self, k: K) {
        {
            let mut s = self.lock();
            s.c.in_use -= k.bytes();
            s.c.held -= k.bytes();
            s.c.abandoned += 1;
        }
        std::mem::forget(k);
        self.released.notify_all();
    }

    /// Removes and returns every idle item (for shutdown; the caller frees them).
    pub fn drain(&self) -> Vec<K> {
        let mut s = self.lock();
        let v: Vec<K> = s.idle.drain(..).collect();
        let bytes: usize = v.iter().map(|k| k.bytes()).sum();
        s.c.held -= bytes;
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Fake {
        bytes: usize,
        chunk: usize,
        live: Arc<AtomicUsize>,
    }
    impl PoolItem for Fake {
        fn bytes(&self) -> usize {
            self.bytes
        }
        fn chunk_bytes(&self) -> usize {
            self.chunk
        }
    }
    impl Drop for Fake {
        fn drop(&mut self) {
            self.live.fetch_sub(self.bytes, Ordering::SeqCst);
        }
    }

    fn maker(live: &Arc<AtomicUsize>, chunk: usize) -> impl FnMut() -> Result<Fake> + use<> {
        let live = live.clone();
        move || {
            live.fetch_add(2 * chunk, Ordering::SeqCst);
            Ok(Fake {
                bytes: 2 * chunk,
                chunk,
                live: live.clone(),
            })
        }
    }

    #[test]
    fn reuse_and_high_water() {
        let live = Arc::new(AtomicUsize::new(0));
        let pool = StagingPool::new(100);
        let mut mk = maker(&live, 10);
        let a = pool.try_acquire(10, 20, &mut mk).unwrap().unwrap();
        let b = pool.try_acquire(10, 20, &mut mk).unwrap().unwrap();
        let c = pool.snapshot();
        assert_eq!((c.held, c.in_use, c.allocations), (40, 40, 2));
        pool.release(a);
        let c = pool.snapshot();
        assert_eq!((c.held, c.in_use, c.idle_items), (40, 20, 1));
        let a2 = pool.try_acquire(10, 20, &mut mk).unwrap().unwrap();
        let c = pool.snapshot();
        assert_eq!((c.allocations, c.reuses), (2, 1), "served by the idle item");
        pool.release(a2);
        pool.release(b);
        let c = pool.snapshot();
        assert_eq!(
            (c.held, c.in_use, c.high_water, c.in_use_high_water),
            (40, 0, 40, 40)
        );
        assert_eq!(live.load(Ordering::SeqCst), 40);
        assert_eq!(pool.trim(), 40);
        assert_eq!(live.load(Ordering::SeqCst), 0, "trim frees idle items");
        assert_eq!(pool.snapshot().held, 0);
        assert_eq!(pool.snapshot().high_water, 40, "high water stays");
    }

    #[test]
    fn limit_is_never_exceeded() {
        let live = Arc::new(AtomicUsize::new(0));
        let pool = StagingPool::new(50);
        let mut mk = maker(&live, 10);
        let a = pool.try_acquire(10, 20, &mut mk).unwrap().unwrap();
        let b = pool.try_acquire(10, 20, &mut mk).unwrap().unwrap();
        assert!(pool.try_acquire(10, 20, &mut mk).unwrap().is_none());
        assert_eq!(pool.snapshot().held, 40);
        // Waiting gives up when told to.
        assert!(pool.acquire(10, 20, &mut mk, &|| true).unwrap().is_none());
        assert!(pool.snapshot().waits == 0);
        pool.release(a);
        pool.release(b);
        assert!(live.load(Ordering::SeqCst) <= 50);
    }

    #[test]
    fn other_chunk_sizes_are_evicted_for_room() {
        let live = Arc::new(AtomicUsize::new(0));
        let pool = StagingPool::new(60);
        let mut small = maker(&live, 10);
        let mut big = maker(&live, 20);
        let a = pool.try_acquire(10, 20, &mut small).unwrap().unwrap();
        let b = pool.try_acquire(10, 20, &mut small).unwrap().unwrap();
        pool.release(a);
        pool.release(b);
        assert_eq!(pool.snapshot().idle_items, 2);
        let x = pool.try_acquire(20, 40, &mut big).unwrap().unwrap();
        let c = pool.snapshot();
        assert_eq!(c.held, 60, "one small item evicted to fit the big one");
        assert_eq!(live.load(Ordering::SeqCst), 60);
        pool.release(x);
        pool.set_limit(0);
        assert_eq!(pool.snapshot().held, 0);
        assert_eq!(live.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_larger_idle_item_serves_a_smaller_chunk() {
        let live = Arc::new(AtomicUsize::new(0));
        let pool = StagingPool::new(850);
        let mut big = maker(&live, 40);
        let mut huge = maker(&live, 400);
        let mut small = maker(&live, 10);
        let b = pool.try_acquire(40, 80, &mut big).unwrap().unwrap();
        let h = pool.try_acquire(400, 800, &mut huge);
        assert!(h.unwrap().is_none(), "over the limit with nothing idle");
        pool.release(b);
        // 10-byte chunks: the idle 40-byte item (4x) serves, nothing is allocated.
        let got = pool.try_acquire(10, 20, &mut small).unwrap().unwrap();
        assert_eq!(got.chunk_bytes(), 40);
        let c = pool.snapshot();
        assert_eq!((c.allocations, c.reuses, c.in_use), (1, 1, 80));
        pool.release(got);
        // 4-byte chunks: the 40-byte item is more than REUSE_LARGER times larger.
        let mut tiny = maker(&live, 4);
        let t = pool.try_acquire(4, 8, &mut tiny).unwrap().unwrap();
        assert_eq!(t.chunk_bytes(), 4);
        // An exact match wins over a larger one.
        pool.release(t);
        let t = pool.try_acquire(4, 8, &mut tiny).unwrap().unwrap();
        assert_eq!(t.chunk_bytes(), 4);
        pool.release(t);
        assert_eq!(pool.trim(), 88);
        assert_eq!(live.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn lowered_limit_frees_items_on_release() {
        let live = Arc::new(AtomicUsize::new(0));
        let pool = StagingPool::new(100);
        let mut mk = maker(&live, 10);
        let a = pool.try_acquire(10, 20, &mut mk).unwrap().unwrap();
        pool.set_limit(10);
        pool.release(a);
        assert_eq!(pool.snapshot().held, 0);
        assert_eq!(live.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn failed_allocation_is_rolled_back() {
        let pool: StagingPool<Fake> = StagingPool::new(100);
        let e = pool
            .try_acquire(10, 20, &mut || Err(crate::Error::invalid("no memory")))
            .err()
            .unwrap();
        assert!(e.to_string().contains("no memory"));
        let c = pool.snapshot();
        assert_eq!((c.held, c.in_use, c.allocations), (0, 0, 0));
    }

    #[test]
    fn abandoned_items_leave_the_books() {
        let live = Arc::new(AtomicUsize::new(0));
        let pool = StagingPool::new(100);
        let mut mk = maker(&live, 10);
        let a = pool.try_acquire(10, 20, &mut mk).unwrap().unwrap();
        pool.abandon(a);
        let c = pool.snapshot();
        assert_eq!((c.held, c.in_use, c.abandoned), (0, 0, 1));
        assert_eq!(live.load(Ordering::SeqCst), 20, "leaked, not freed");
    }

    #[test]
    fn waiters_are_woken_by_releases() {
        let live = Arc::new(AtomicUsize::new(0));
        let pool = Arc::new(StagingPool::new(20));
        let mut mk = maker(&live, 10);
        let a = pool.try_acquire(10, 20, &mut mk).unwrap().unwrap();
        let p2 = pool.clone();
        let live2 = live.clone();
        let t = std::thread::spawn(move || {
            let mut mk = maker(&live2, 10);
            let k = p2.acquire(10, 20, &mut mk, &|| false).unwrap().unwrap();
            p2.release(k);
        });
        // Long enough for many of the waiter's 2 ms polls: still one wait.
        std::thread::sleep(Duration::from_millis(50));
        pool.release(a);
        t.join().unwrap();
        let c = pool.snapshot();
        assert_eq!(c.waits, 1, "one acquisition waited (polls are not waits)");
        assert_eq!((c.held, c.in_use, c.allocations), (20, 0, 1));
    }

    #[test]
    fn an_item_larger_than_a_lowered_limit_is_an_error_not_a_hang() {
        // A transfer planned with a large chunk, then the limit is lowered below one kit:
        // waiting could never succeed.
        let live = Arc::new(AtomicUsize::new(0));
        let pool = StagingPool::new(100);
        let mut mk = maker(&live, 40);
        pool.set_limit(60);
        let (tx, rx) = std::sync::mpsc::channel();
        let p = Arc::new(pool);
        let p2 = p.clone();
        std::thread::spawn(move || {
            let _ = tx.send(p2.acquire(40, 80, &mut mk, &|| false).map(|k| k.is_some()));
        });
        let r = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("acquire of an item larger than the limit must not wait forever");
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains("80") && e.contains("60") && e.contains("max_pinned_bytes"),
            "{e}"
        );
        assert!(e.contains("raise the bound to at least 80"), "{e}");
        let c = p.snapshot();
        assert_eq!((c.held, c.in_use, c.waits), (0, 0, 0));
        // Already given up: no error.
        let mut mk = maker(&live, 40);
        assert!(p.acquire(40, 80, &mut mk, &|| true).unwrap().is_none());
    }

    #[test]
    fn prefill_keeps_the_books_right_when_an_allocation_fails() {
        let live = Arc::new(AtomicUsize::new(0));
        let pool = StagingPool::new(1000);
        let mut made = 0;
        let live2 = live.clone();
        let mut flaky = move || {
            made += 1;
            if made == 3 {
                return Err(crate::Error::invalid("out of page-locked memory"));
            }
            live2.fetch_add(20, Ordering::SeqCst);
            Ok(Fake {
                bytes: 20,
                chunk: 10,
                live: live2.clone(),
            })
        };
        let e = pool.prefill(5, 10, 20, &mut flaky).unwrap_err();
        assert!(e.to_string().contains("page-locked"), "{e}");
        let c = pool.snapshot();
        assert_eq!(
            (c.held, c.in_use, c.idle_items, c.allocations),
            (40, 0, 2, 2),
            "the two kits made before the failure are idle and counted once"
        );
        assert_eq!(live.load(Ordering::SeqCst), 40);
        // Within the limit: stops at the bound without an error.
        let pool = StagingPool::new(50);
        let mut mk = maker(&live, 10);
        assert_eq!(pool.prefill(5, 10, 20, &mut mk).unwrap(), 2);
        let c = pool.snapshot();
        assert_eq!((c.held, c.in_use, c.idle_items), (40, 0, 2));
    }

    #[test]
    fn many_threads_stay_within_the_limit() {
        let live = Arc::new(AtomicUsize::new(0));
        let pool = Arc::new(StagingPool::new(80));
        let peak = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let pool = pool.clone();
                let live = live.clone();
                let peak = peak.clone();
                std::thread::spawn(move || {
                    let mut mk = maker(&live, 10);
                    for _ in 0..200 {
                        let k = pool.acquire(10, 20, &mut mk, &|| false).unwrap().unwrap();
                        peak.fetch_max(live.load(Ordering::SeqCst), Ordering::SeqCst);
                        pool.release(k);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(peak.load(Ordering::SeqCst) <= 80);
        let c = pool.snapshot();
        assert!(c.allocations <= 4);
        assert_eq!(c.in_use, 0);
    }
}
