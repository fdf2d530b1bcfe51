//! The recycling of large host results: a read's result mapping, once its last owner
//! drops it, is kept for a while and handed to the next read of about its size, whose
//! pages are then already faulted in. Fresh memory costs the kernel a fault and a
//! zeroing per page: measured on 16-core H100 machines, 16 threads allocate and
//! first-touch new memory at 27-44 GB/s with huge pages (9-15 GB/s without), against
//! 11-13 GB/s for the same cores decoding zstd-1 in memory, and host reads of 512 MiB
//! into fresh pages ran 10-30% slower than into a reused buffer (docs/performance.md,
//! issue 28's parts 2 and 3).
//!
//! What is kept is bounded three ways: at most [`MAX_KEPT`] mappings and an eighth of
//! the machine's memory (at most 8 GiB) in all; a mapping kept for [`KEEP_FOR`]
//! without being taken is unmapped at the pool's next use; and every kept mapping is
//! `MADV_FREE`d, so the kernel takes its pages back under memory pressure without
//! asking (a page it took reads as zero and is faulted in again when written). The
//! memory is not zeroed for the next read: only a read that writes every byte of its
//! result takes recycled memory (see [`HostOutput::recycled`](super::host_output::HostOutput::recycled)).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The most mappings kept at once.
pub(crate) const MAX_KEPT: usize = 16;
/// How long a kept mapping waits to be taken before it is unmapped.
pub(crate) const KEEP_FOR: Duration = Duration::from_secs(10);
/// The most bytes kept, whatever the machine's memory.
const MAX_KEPT_BYTES: usize = 8 << 30;

/// A kept mapping: its start, its length, and when it was given back.
struct Kept {
    ptr: usize,
    len: usize,
    since: Instant,
}

/// The kept mappings, oldest first.
static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());

/// The most bytes the pool keeps on this machine: an eighth of its memory, at most
/// [`MAX_KEPT_BYTES`] (nothing when the size cannot be read).
fn budget() -> usize {
    static BUDGET: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(|| {
        // Safety: sysconf has no preconditions; a negative answer means unknown.
        let (pages, size) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if pages <= 0 || size <= 0 {
            return 0;
        }
        ((pages as u128 * size as u128 / 8).min(MAX_KEPT_BYTES as u128)) as usize
    })
}

/// Unmaps `ptr..ptr + len`.
///
/// # Safety
///
/// The range must be a whole mapping made by `mmap`, which nothing uses any more.
unsafe fn unmap(ptr: usize, len: usize) {
    // Safety: the caller's guarantee.
    unsafe { libc::munmap(ptr as *mut libc::c_void, len) };
}

/// Takes the kept mappings older than [`KEEP_FOR`] out of `kept` (the locked list), for
/// the caller to unmap once the lock is released.
fn expire(kept: &mut Vec<Kept>, now: Instant) -> Vec<Kept> {
    let (old, young): (Vec<Kept>, Vec<Kept>) = std::mem::take(kept)
        .into_iter()
        .partition(|k| now.duration_since(k.since) >= KEEP_FOR);
    *kept = young;
    old
}

/// Unmaps mappings taken out of the pool.
fn unmap_all(gone: Vec<Kept>) {
    for k in gone {
        // Safety: a mapping taken out of the pool is a whole mapping nothing refers to.
        unsafe { unmap(k.ptr, k.len) };
    }
}

/// A kept mapping of at least `n` and at most `n + n / 4` bytes (the smallest such),
/// taken out of the pool: `(start, length)`. Its bytes are whatever an earlier result
/// left there (or zero where the kernel took a page back).
pub(crate) fn take(n: usize) -> Option<(*mut u8, usize)> {
    let most = n.saturating_add(n / 4);
    let (gone, found) = {
        let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
        let gone = expire(&mut kept, Instant::now());
        let best = kept
            .iter()
            .enumerate()
            .filter(|(_, k)| k.len >= n && k.len <= most)
            .min_by_key(|(_, k)| k.len)
            .map(|(i, _)| i);
        (gone, best.map(|i| kept.remove(i)))
    };
    // Unmapping takes a while for large mappings: not under the lock.
    unmap_all(gone);
    found.map(|k| (k.ptr as *mut u8, k.len))
}

/// Gives the mapping `ptr..ptr + len` to the pool, or unmaps it when the pool is full
/// (the oldest kept mappings are unmapped first to make room).
///
/// # Safety
///
/// The range must be a whole private anonymous mapping made by `mmap`, which nothing
/// reads or writes any more (the pool owns it from here on).
pub(crate) unsafe fn give(ptr: *mut u8, len: usize) {
    let budget = budget();
    if len == 0 || len > budget {
        // Safety: the caller's guarantee.
        unsafe { unmap(ptr as usize, len) };
        return;
    }
    // The kernel may take the pages back whenever it needs them, without a write-back.
    // Safety: the caller's guarantee; advice changes no mapping.
    unsafe { libc::madvise(ptr.cast(), len, libc::MADV_FREE) };
    let gone = {
        let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let mut gone = expire(&mut kept, now);
        let mut total: usize = kept.iter().map(|k| k.len).sum();
        while !kept.is_empty() && (kept.len() >= MAX_KEPT || total + len > budget) {
            let old = kept.remove(0);
            total -= old.len;
            gone.push(old);
        }
        kept.push(Kept {
            ptr: ptr as usize,
            len,
            since: now,
        });
        gone
    };
    unmap_all(gone);
}

/// Unmaps every kept mapping now (benchmarks measure fresh memory after it).
pub fn release() {
    let gone = std::mem::take(&mut *KEPT.lock().unwrap_or_else(|p| p.into_inner()));
    unmap_all(gone);
}

/// Bytes the pool keeps now.
#[cfg(test)]
pub(crate) fn kept_bytes() -> usize {
    let kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    kept.iter().map(|k| k.len).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh private mapping of `len` bytes, for the pool's lists.
    fn mapping(len: usize) -> usize {
        super::super::host_output::map_anonymous(len).unwrap() as usize
    }

    #[test]
    fn kept_mappings_expire_after_their_time_and_the_budget_is_bounded() {
        let now = Instant::now();
        let mut kept = vec![
            Kept {
                ptr: mapping(4096),
                len: 4096,
                since: now,
            },
            Kept {
                ptr: mapping(8192),
                len: 8192,
                since: now + KEEP_FOR / 2,
            },
        ];
        let gone = expire(&mut kept, now + KEEP_FOR);
        assert_eq!((gone.len(), gone[0].len), (1, 4096), "the older one goes");
        unmap_all(gone);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].len, 8192);
        unmap_all(expire(&mut kept, now + 2 * KEEP_FOR));
        assert!(kept.is_empty());
        assert!(budget() <= MAX_KEPT_BYTES);
        assert!(budget() > 0, "this machine's memory size is readable");
    }

    #[test]
    fn a_mapping_larger_than_a_quarter_more_is_not_taken() {
        // Sizes no other test asks for: 41 MiB kept, asked for 32 MiB + 1.
        let len = 41 << 20;
        // Safety: a fresh whole mapping, given to the pool and not used after.
        unsafe { give(mapping(len) as *mut u8, len) };
        assert!(take((32 << 20) + 1).is_none_or(|(_, l)| l <= (40 << 20) + 2));
        let (p, l) = take(len - 4096).expect("the kept mapping");
        assert_eq!(l, len);
        // Safety: taken from the pool, ours alone; unmapped once.
        unsafe { unmap(p as usize, l) };
    }
}
