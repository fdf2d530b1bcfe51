//! Registrations: host memory page-locked in place (`cuMemHostRegister`) for reuse,
//! cached by address range.

use super::*;

// ---------------------------------------------------------------------------
// Registrations
// ---------------------------------------------------------------------------

/// Host ranges of the copies that have pages registered (`cuMemHostRegister`) by the
/// engine right now, in the whole process (registrations are portable: every context
/// sees them).
///
/// While a range is registered the driver reports its pages as page-locked, so another
/// thread's copy of the same memory (two uploads of one shared `&[u8]`) would take the
/// direct route: a DMA straight from pages that the registering copy unregisters when
/// it is done — possibly while that DMA still runs. So a copy that would go direct but
/// overlaps a live entry is staged instead (the CPU reads the memory, right for any
/// memory), and two registered copies never overlap (the second one stages). An entry
/// is the registering copy's whole byte range (its partial end pages, which the driver
/// copies directly, included); it is made before registering and removed after
/// unregistering, so every moment the driver sees pages pinned by the engine is
/// covered. (What remains is a copy that checked just before another thread claimed
/// *and* registered an overlapping range — registering takes milliseconds — and whose
/// DMA then outlasted that other copy's whole DMA.)
#[derive(Default)]
pub(crate) struct Registrations {
    pub(super) live: AtomicUsize,
    pub(super) ranges: Mutex<Vec<(usize, usize)>>,
}

impl Registrations {
    pub(crate) const fn new() -> Registrations {
        Registrations {
            live: AtomicUsize::new(0),
            ranges: Mutex::new(Vec::new()),
        }
    }

    /// Records `a..b` as registered, unless it overlaps a live registration.
    pub(crate) fn claim(&self, a: usize, b: usize) -> bool {
        let mut r = self.ranges.lock().unwrap_or_else(|p| p.into_inner());
        if r.iter().any(|&(x, y)| x < b && a < y) {
            return false;
        }
        r.push((a, b));
        self.live.fetch_add(1, Ordering::SeqCst);
        true
    }

    /// Forgets `a..b` (after it was unregistered).
    pub(crate) fn release(&self, a: usize, b: usize) {
        let mut r = self.ranges.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = r.iter().position(|&x| x == (a, b)) {
            r.swap_remove(i);
            self.live.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Whether `a..b` overlaps a live registration (one atomic load when none is live).
    pub(crate) fn overlaps(&self, a: usize, b: usize) -> bool {
        if self.live.load(Ordering::SeqCst) == 0 {
            return false;
        }
        let r = self.ranges.lock().unwrap_or_else(|p| p.into_inner());
        r.iter().any(|&(x, y)| x < b && a < y)
    }
}

pub(super) static REGISTRATIONS: Registrations = Registrations::new();
