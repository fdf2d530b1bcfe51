//! The host memory a host read fills: a fresh anonymous mapping, asked for huge pages
//! where the kernel offers them (`MADV_HUGEPAGE`), so the workers' first touch of the
//! result takes one fault per 2 MiB instead of one per 4 KiB. Measured on the GPU
//! machine (gVisor), allocating and first-touching fresh memory with 16 threads ran at
//! about 7 GB/s with 4 KiB pages: below what the decoders deliver, so the result's
//! pages bounded host reads. Small results use the ordinary allocator.

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::memory::zeroed_vec;

/// Results from this size on get their own mapping.
const MAP_MIN: usize = 8 << 20;

/// Huge-page size the mappings are aligned to.
const HUGE: usize = 2 << 20;

/// An anonymous private mapping of zeroed memory, asked for huge pages
/// (`MADV_HUGEPAGE`; a refusal changes nothing else) and aligned to 2 MiB so that the
/// kernel can back all of it with them; unmapped on drop.
pub(crate) struct Mapping {
    /// What mmap returned, and its length (for munmap).
    base: *mut u8,
    mapped: usize,
    /// The usable memory: `len` bytes from `ptr`, 2 MiB-aligned, within the mapping.
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    /// `len` bytes (at least one) of fresh zeroed memory.
    pub(crate) fn new(len: usize) -> std::io::Result<Mapping> {
        let too_big = || std::io::Error::from_raw_os_error(libc::ENOMEM);
        let mapped = len
            .max(1)
            .checked_next_multiple_of(HUGE)
            .and_then(|n| n.checked_add(HUGE))
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or_else(too_big)?;
        // Safety: an anonymous private mapping of `mapped` bytes; the arguments are
        // valid for any length, and failure is reported as MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = p.cast::<u8>();
        let skip = (base as usize).next_multiple_of(HUGE) - base as usize;
        // Safety: `skip < HUGE` and `mapped >= len + HUGE`, so `base + skip .. + len`
        // lies within the mapping made above; so does the advised range.
        let ptr = unsafe { base.add(skip) };
        // Safety: see above.
        unsafe { libc::madvise(ptr.cast(), len.max(1), libc::MADV_HUGEPAGE) };
        Ok(Mapping {
            base,
            mapped,
            ptr,
            len,
        })
    }

    /// The memory's start (2 MiB-aligned) and length.
    pub(crate) fn raw(&self) -> (*mut u8, usize) {
        (self.ptr, self.len)
    }
}

// Safety: the mapping is plain memory owned by this value alone; it may be read from
// and dropped on any thread.
unsafe impl Send for Mapping {}
// Safety: shared access is read-only (`AsRef<[u8]>`).
unsafe impl Sync for Mapping {}

impl AsRef<[u8]> for Mapping {
    fn as_ref(&self) -> &[u8] {
        // Safety: `ptr` is a live mapping of `len` readable bytes (zero-filled by the
        // kernel, then written by the read) owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // Safety: `base`/`mapped` are exactly what mmap returned; nothing refers to
        // the memory after the owner drops (Bytes keeps the owner alive while borrowed).
        unsafe { libc::munmap(self.base.cast(), self.mapped) };
    }
}

/// `n` zeroed bytes of host memory for a read to fill through the returned pointer,
/// then hand out as `Bytes` with [`HostResult::into_bytes`].
pub(crate) struct HostResult {
    inner: Inner,
}

enum Inner {
    Vec(Vec<u8>),
    Map(Mapping),
}

impl HostResult {
    /// Fresh zeroed memory of `n` bytes (an error naming the size when the system
    /// cannot provide it).
    pub(crate) fn new(n: usize) -> Result<HostResult> {
        if n < MAP_MIN {
            return Ok(HostResult {
                inner: Inner::Vec(zeroed_vec(n)?),
            });
        }
        let m = Mapping::new(n).map_err(|e| {
            Error::invalid(format!(
                "cannot map {n} bytes of host memory for the read's result ({e})"
            ))
        })?;
        Ok(HostResult {
            inner: Inner::Map(m),
        })
    }

    /// The start of the memory and its length, for the workers to write.
    pub(crate) fn raw(&mut self) -> (*mut u8, usize) {
        match &mut self.inner {
            Inner::Vec(v) => (v.as_mut_ptr(), v.len()),
            Inner::Map(m) => m.raw(),
        }
    }

    /// Touches every page of a fresh mapping from `threads` threads at once, before
    /// the workers write it (`DEVBUF_PREFAULT=0` skips this; for benchmarks). Measured
    /// on the GPU machine (gVisor), where the first touch of fresh memory costs most.
    pub(crate) fn prefault(&mut self, threads: usize) {
        if std::env::var("DEVBUF_PREFAULT").is_ok_and(|v| v.trim() == "0") {
            return;
        }
        let Inner::Map(m) = &self.inner else {
            return;
        };
        let (base, n) = (m.ptr as usize, m.len);
        let threads = threads.clamp(1, n.div_ceil(2 << 20).max(1));
        let per = n.div_ceil(threads).next_multiple_of(4096);
        let touch = move |lo: usize, hi: usize| {
            for off in (lo..hi).step_by(4096) {
                // Safety: `off` lies within the mapping (`< n`), which `self` keeps
                // alive for the scope; the threads write disjoint pages, and a zero
                // keeps the memory's zeroed contents.
                unsafe { std::ptr::write_volatile((base + off) as *mut u8, 0) };
            }
        };
        std::thread::scope(|s| {
            for t in 1..threads {
                let (lo, hi) = (t * per, ((t + 1) * per).min(n));
                if lo >= hi {
                    break;
                }
                let spawned = std::thread::Builder::new().spawn_scoped(s, move || touch(lo, hi));
                if spawned.is_err() {
                    // No thread to be had: the pages are touched by the workers.
                    break;
                }
            }
            touch(0, per.min(n));
        });
    }

    /// The memory as a slice, for the workers to write.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        let (p, n) = self.raw();
        if n == 0 {
            return &mut [];
        }
        // Safety: `p..p+n` is memory owned by `self` (a live mapping or the Vec's
        // buffer), zero-filled and so initialised; the borrow of `self` keeps it
        // alive and exclusive for the slice's lifetime.
        unsafe { std::slice::from_raw_parts_mut(p, n) }
    }

    /// The filled memory, without a copy.
    pub(crate) fn into_bytes(self) -> Bytes {
        match self.inner {
            Inner::Vec(v) => Bytes::from(v),
            Inner::Map(m) => Bytes::from_owner(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_and_allocated_results_are_zeroed_writable_and_zero_copy() {
        for n in [0usize, 10, MAP_MIN, MAP_MIN + 4097] {
            let mut r = HostResult::new(n).unwrap();
            let (p, len) = r.raw();
            assert_eq!(len, n);
            if n > 0 {
                // Safety: `p..p+len` is the result's memory, exclusively ours here.
                unsafe {
                    assert_eq!(*p, 0);
                    assert_eq!(*p.add(n - 1), 0);
                    *p.add(n - 1) = 7;
                }
            }
            let b = r.into_bytes();
            assert_eq!(b.len(), n);
            if n > 0 {
                assert_eq!(b[n - 1], 7);
                assert_eq!(b.as_ptr(), p as *const u8, "no copy");
            }
        }
    }
}
