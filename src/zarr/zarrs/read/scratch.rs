//! Scratch memory of a read's worker (stored bytes read from a file before they are
//! decoded, a decoded unit before its placement, a streamed unit's piece): grown to
//! the largest size asked for during the read and reused across its units.
//!
//! The workers are new threads for every read, so their scratch is fresh memory every
//! read. From [`MAP_FROM`] on it is a huge-page mapping ([`Mapping`]): the first
//! touch takes one fault per 2 MiB instead of one per 4 KiB. Measured on the GPU
//! machine (gVisor, 16 threads first-touching fresh memory): 8.7 GB/s with 4 KiB pages,
//! 41.8 with huge pages. Before, a read of 16 MiB zstd-1 chunks (12 MiB stored each)
//! spent about 23 ms of its 69 ms faulting in the 16 workers' buffers for stored bytes.

use super::hostmem::Mapping;
use crate::error::{Error, Result};

/// Scratch from this size on is mapped (smaller: the ordinary allocator).
pub(crate) const MAP_FROM: usize = 256 << 10;

/// Whether large scratch is mapped: `DEVBUF_SCRATCH_MAP=0` (read when a buffer grows;
/// for benchmarks) uses the ordinary allocator for every size.
fn mapped() -> bool {
    std::env::var("DEVBUF_SCRATCH_MAP").map_or(true, |v| v.trim() != "0")
}

/// A worker's growable scratch buffer.
pub(crate) struct Scratch {
    mem: Mem,
}

enum Mem {
    Vec(Vec<u8>),
    Map(Mapping),
}

impl Scratch {
    /// An empty buffer (allocates nothing).
    pub(crate) const fn new() -> Scratch {
        Scratch {
            mem: Mem::Vec(Vec::new()),
        }
    }

    /// Bytes the buffer holds now.
    pub(crate) fn capacity(&self) -> usize {
        match &self.mem {
            Mem::Vec(v) => v.len(),
            Mem::Map(m) => m.raw().1,
        }
    }

    /// The first `n` bytes of the buffer, grown first when it is smaller (its contents
    /// are then lost). The bytes are zero or what earlier use left there. An error
    /// names the size when the memory cannot be had.
    pub(crate) fn get(&mut self, n: usize) -> Result<&mut [u8]> {
        if self.capacity() < n {
            // Give the old memory back first: the new buffer replaces it.
            self.mem = Mem::Vec(Vec::new());
            self.mem = if n < MAP_FROM || !mapped() {
                Mem::Vec(crate::memory::zeroed_vec(n)?)
            } else {
                Mem::Map(Mapping::new(n).map_err(|e| {
                    Error::invalid(format!(
                        "cannot map {n} bytes of host memory for a read worker's scratch ({e})"
                    ))
                })?)
            };
        }
        Ok(match &mut self.mem {
            Mem::Vec(v) => &mut v[..n],
            Mem::Map(m) => {
                let (p, len) = m.raw();
                debug_assert!(n <= len);
                // Safety: `p..p+len` is the live mapping owned by `self` (zero-filled
                // by the kernel, so initialised), `n <= len` (grown above), and the
                // `&mut self` borrow keeps it alive and exclusive for the slice.
                unsafe { std::slice::from_raw_parts_mut(p, n.min(len)) }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_keeps_and_maps_large_buffers() {
        let mut s = Scratch::new();
        assert_eq!(s.capacity(), 0);
        assert!(s.get(0).unwrap().is_empty());
        let small = s.get(1000).unwrap();
        assert_eq!(small.len(), 1000);
        assert!(small.iter().all(|&b| b == 0));
        small[999] = 5;
        // A smaller request reuses the memory (and sees what was left there).
        assert_eq!(s.get(1000).unwrap()[999], 5);
        assert_eq!(s.get(10).unwrap().len(), 10);
        assert_eq!(s.capacity(), 1000);
        // A large one maps fresh zeroed memory, 2 MiB-aligned.
        let big = s.get(MAP_FROM * 9 + 3).unwrap();
        assert_eq!(big.len(), MAP_FROM * 9 + 3);
        assert_eq!(big.as_ptr() as usize % (2 << 20), 0);
        assert!(big.iter().all(|&b| b == 0));
        big[MAP_FROM * 9 + 2] = 7;
        let again = s.get(MAP_FROM * 9 + 3).unwrap();
        assert_eq!(again[MAP_FROM * 9 + 2], 7);
        assert!(s.capacity() >= MAP_FROM * 9 + 3);
    }

    #[test]
    fn sizes_beyond_memory_are_errors_that_name_the_size() {
        let mut s = Scratch::new();
        let e = s.get(usize::MAX).unwrap_err().to_string();
        assert!(e.contains(&usize::MAX.to_string()), "{e}");
        // The buffer still works after the failure.
        assert_eq!(s.get(64).unwrap().len(), 64);
    }
}
