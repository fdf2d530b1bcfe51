//! [`HostOutput`]: the host memory a read fills: a fresh anonymous mapping, asked for huge pages
//! where the kernel offers them (`MADV_HUGEPAGE`), so the workers' first touch of the
//! result takes one fault per 2 MiB instead of one per 4 KiB. Measured on the GPU
//! machine (gVisor), allocating and first-touching fresh memory with 16 threads ran at
//! about 7 GB/s with 4 KiB pages: below what the decoders deliver, so the result's
//! pages bounded host reads. Small results use the ordinary allocator. A dropped
//! result's mapping goes to the pool of [`host_pool`](super::host_pool), where a later
//! read that overwrites all of its result ([`HostOutput::recycled`]) finds its pages
//! already faulted in.

use bytes::Bytes;

use crate::error::{Error, Result};

/// Results from this size on get their own mapping.
const MAP_MIN: usize = 8 << 20;

/// An anonymous private mapping of `len` bytes whose first `used` bytes are the result;
/// given to the pool (or unmapped) on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
    used: usize,
}

// Safety: the mapping is plain memory owned by this value alone; it may be read from
// and dropped on any thread.
unsafe impl Send for Mapping {}
// Safety: shared access is read-only (`AsRef<[u8]>`).
unsafe impl Sync for Mapping {}

impl AsRef<[u8]> for Mapping {
    fn as_ref(&self) -> &[u8] {
        // Safety: `ptr` is a live mapping of `len >= used` readable bytes (zero-filled by
        // the kernel or left by an earlier result, then written by the read) owned by
        // `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.used) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // Safety: `ptr`/`len` are exactly what mmap returned; nothing refers to the
        // memory after the owner drops (Bytes keeps the owner alive while borrowed).
        unsafe { super::host_pool::give(self.ptr, self.len) };
    }
}

/// `n` zeroed bytes of host memory for a read to fill through the returned pointer,
/// then hand out as `Bytes` with [`HostOutput::into_bytes`].
///
/// ```
/// use devbuf_core::__private::HostOutput;
/// let mut out = HostOutput::new(16 << 20)?;   // a mapping of its own, with huge pages
/// out.prefault(4);                             // first touch from 4 threads
/// out.as_mut_slice()[0] = 7;
/// let bytes = out.into_bytes();                // no copy
/// assert_eq!((bytes.len(), bytes[0]), (16 << 20, 7));
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub struct HostOutput {
    inner: Inner,
}

enum Inner {
    Vec(Vec<u8>),
    Map(Mapping),
}

impl HostOutput {
    /// Fresh zeroed memory of `n` bytes (an error naming the size when the system
    /// cannot provide it).
    pub fn new(n: usize) -> Result<HostOutput> {
        if n < MAP_MIN {
            return Ok(HostOutput {
                inner: Inner::Vec(zeroed_vec(n)?),
            });
        }
        Ok(HostOutput {
            inner: Inner::Map(map(n, n)?),
        })
    }

    /// `n` bytes for a result whose every byte the caller writes before it reads any:
    /// from 8 MiB on, an earlier result's mapping of about that size when the pool
    /// keeps one (its pages already faulted in; its bytes what that result left, or
    /// zero), else fresh memory as [`new`](Self::new) gives. An error names the size
    /// when the system cannot provide it.
    ///
    /// ```
    /// use devbuf_core::__private::HostOutput;
    /// let n = 24 << 20;
    /// let first = HostOutput::recycled(n)?.into_bytes();
    /// let at = first.as_ptr();
    /// drop(first);                                 // the mapping goes to the pool
    /// let mut again = HostOutput::recycled(n)?;    // and comes back, pages faulted in
    /// again.as_mut_slice().fill(1);                // every byte written before use
    /// assert_eq!(again.as_mut_slice().len(), n);
    /// # let _ = at;
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn recycled(n: usize) -> Result<HostOutput> {
        if n < MAP_MIN {
            return HostOutput::new(n);
        }
        if let Some((ptr, len)) = super::host_pool::take(n) {
            return Ok(HostOutput {
                inner: Inner::Map(Mapping { ptr, len, used: n }),
            });
        }
        // Rounded up to whole huge pages, so that results of nearby sizes share mappings.
        let len = n.checked_next_multiple_of(2 << 20).unwrap_or(n);
        Ok(HostOutput {
            inner: Inner::Map(map(len, n)?),
        })
    }
}

/// A fresh anonymous mapping of `len` bytes asked for huge pages, for a result of
/// `used <= len` bytes.
fn map(len: usize, used: usize) -> Result<Mapping> {
    let ptr = map_anonymous(len).map_err(|e| {
        Error::invalid(format!(
            "cannot map {used} bytes of host memory for the read's result ({e})"
        ))
    })?;
    Ok(Mapping { ptr, len, used })
}

/// A fresh private anonymous mapping of `len` bytes, asked for huge pages where the
/// kernel offers them (a refusal changes nothing else); the system's error when it
/// cannot be made.
pub(crate) fn map_anonymous(len: usize) -> std::io::Result<*mut u8> {
    // Safety: an anonymous private mapping of `len` bytes; the arguments are valid for
    // any `len`, and failure is reported as MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // Safety: `p..p+len` is the mapping made above.
    unsafe { libc::madvise(p, len, libc::MADV_HUGEPAGE) };
    Ok(p.cast())
}

impl HostOutput {
    /// The start of the memory and its length, for the workers to write.
    pub fn raw(&mut self) -> (*mut u8, usize) {
        match &mut self.inner {
            Inner::Vec(v) => (v.as_mut_ptr(), v.len()),
            Inner::Map(m) => (m.ptr, m.used),
        }
    }

    /// Touches every page of a mapping from `threads` threads at once, before the
    /// workers write it (fresh memory's first touch, or a recycled page the kernel took
    /// back); nothing when every page is in memory already (`mincore`), as a recycled
    /// mapping's usually are. Measured on the GPU machine, where the first touch of
    /// fresh memory costs most; a page already there would cost one read of its line.
    /// Memory from the ordinary allocator (results under 8 MiB) is left as it is.
    pub fn prefault(&mut self, threads: usize) {
        let Inner::Map(m) = &self.inner else {
            return;
        };
        // A recycled mapping whose pages are all still there: a touch would only read
        // every page's first line from memory (about a millisecond for 512 MiB on 16
        // cores, 2% of a host read).
        if all_resident(m.ptr, m.used) {
            return;
        }
        // Safety: the mapping is owned by `self`, alive and exclusive for this call, and
        // its contents are zeros (which the touch keeps) or, recycled, bytes the caller
        // overwrites.
        unsafe { touch_pages(m.ptr, m.used, threads) };
    }

    /// The memory as a slice, for the workers to write.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
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
    pub fn into_bytes(self) -> Bytes {
        match self.inner {
            Inner::Vec(v) => Bytes::from(v),
            Inner::Map(m) => Bytes::from_owner(m),
        }
    }
}

/// `n` zero bytes of host memory, or an error when the allocator cannot provide them
/// (`vec![0; n]` panics or aborts the process instead). Zeroed by the allocator
/// (`calloc`), so untouched pages cost nothing.
pub fn zeroed_vec(n: usize) -> Result<Vec<u8>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let too_big = || {
        Error::invalid(format!(
            "cannot allocate {n} bytes of host memory (out of memory or more than the \
             address space allows; at most {} bytes can be asked for)",
            isize::MAX
        ))
    };
    let layout = std::alloc::Layout::array::<u8>(n).map_err(|_| too_big())?;
    // Safety: `layout` has a non-zero size (n > 0).
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return Err(too_big());
    }
    // Safety: `p` comes from the global allocator with the layout of `n` bytes of
    // alignment 1 (what a `Vec<u8>` of capacity `n` uses), and all `n` bytes are
    // initialised (zero); the vector takes ownership of the allocation.
    Ok(unsafe { Vec::from_raw_parts(p, n, n) })
}

/// Readies `len` bytes at `ptr`, host memory the caller owns and a read is about to
/// overwrite whole (numpy's output of zarr-python's pipeline, say): asks for huge pages
/// over its 2 MiB-aligned interior and touches every page from `threads` threads, as a
/// read does for its own results ([`HostOutput`]), so that fresh memory's first touch
/// does not bound the read. Memory already touched only costs one write per page.
/// Nothing is done below 8 MiB.
///
/// # Safety
///
/// `ptr..ptr + len` must be writable memory, not read or written by anything else
/// during the call, whose contents the caller overwrites afterwards: one byte of each
/// 4 KiB page is set to zero.
pub unsafe fn prepare_output(ptr: *mut u8, len: usize, threads: usize) {
    if len < MAP_MIN {
        return;
    }
    const HUGE: usize = 2 << 20;
    let (lo, hi) = (
        (ptr as usize).next_multiple_of(HUGE),
        (ptr as usize + len) / HUGE * HUGE,
    );
    if hi > lo {
        // Huge pages where the kernel offers them; a refusal changes nothing else.
        // Safety: `lo..hi` lies within the caller's memory and is page aligned.
        unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE) };
    }
    // Safety: the caller's guarantees, passed on.
    unsafe { touch_pages(ptr, len, threads) };
}

/// Whether every page of `base..base + n` is in memory (`mincore`); `false` when the
/// kernel cannot say.
fn all_resident(base: *mut u8, n: usize) -> bool {
    let page = 4096usize;
    let start = (base as usize) & !(page - 1);
    let len = (base as usize + n).next_multiple_of(page) - start;
    let mut flags: Vec<u8> = Vec::new();
    if n == 0 || flags.try_reserve_exact(len / page).is_err() {
        return false;
    }
    flags.resize(len / page, 0);
    // Safety: `start..start + len` is page-aligned and covers the caller's live
    // mapping (mappings are whole pages); `flags` holds one byte per page of it.
    let r = unsafe { libc::mincore(start as *mut libc::c_void, len, flags.as_mut_ptr()) };
    r == 0 && flags.iter().all(|f| f & 1 == 1)
}

/// Writes a zero to one byte of every 4 KiB page of `base..base + n` (from the first
/// page boundary on) from `threads` threads at once.
///
/// # Safety
///
/// The memory must be writable, exclusive to this call, and either zero already or
/// about to be overwritten.
unsafe fn touch_pages(base: *mut u8, n: usize, threads: usize) {
    let base = base as usize;
    let first = base.next_multiple_of(4096) - base;
    let threads = threads.clamp(1, n.div_ceil(2 << 20).max(1));
    let per = n.div_ceil(threads).next_multiple_of(4096);
    let touch = move |lo: usize, hi: usize| {
        for off in (lo + first..hi).step_by(4096) {
            // Safety: `off < n` lies within the memory, which the caller keeps alive
            // and exclusive for the scope; the threads write disjoint pages.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_and_allocated_results_are_zeroed_writable_and_zero_copy() {
        for n in [0usize, 10, MAP_MIN, MAP_MIN + 4097] {
            let mut r = HostOutput::new(n).unwrap();
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

    #[test]
    fn a_fresh_mapping_is_not_resident_until_touched() {
        let n = MAP_MIN + 3 * 4096 + 5;
        let mut r = HostOutput::new(n).unwrap();
        let (p, len) = r.raw();
        assert!(!all_resident(p, len), "nothing touched yet");
        r.prefault(2);
        let (p, len) = r.raw();
        assert!(all_resident(p, len), "every page touched");
        assert!(r.as_mut_slice().iter().all(|&b| b == 0));
        assert!(!all_resident(p, 0), "an empty range says nothing");
    }

    #[test]
    fn dropped_results_are_recycled_by_size_and_fresh_ones_stay_zeroed() {
        // A size no other test of this process asks for.
        let n = (37 << 20) + 7 * 4096 + 3;
        let mut a = HostOutput::recycled(n).unwrap();
        a.as_mut_slice().fill(0x5A);
        let (a_at, len) = a.raw();
        assert_eq!(len, n);
        let bytes = a.into_bytes();
        assert_eq!((bytes.len(), bytes[n - 1]), (n, 0x5A));
        assert_eq!(bytes.as_ptr(), a_at as *const u8, "no copy");
        drop(bytes);
        assert!(super::super::host_pool::kept_bytes() >= n);
        // `new` never takes kept memory: it is zero.
        let mut z = HostOutput::new(n).unwrap();
        let z_at = z.raw().0;
        assert_ne!(z_at, a_at);
        assert!(z.as_mut_slice().iter().step_by(4093).all(|&b| b == 0));
        drop(z);
        // A much smaller result takes neither kept mapping.
        let small = HostOutput::recycled(n / 2).unwrap().raw().0;
        assert!(small != a_at && small != z_at);
        // One of about the size takes one of them back, and sees only its own length.
        let mut b = HostOutput::recycled(n - 4096).unwrap();
        let (b_at, blen) = b.raw();
        assert!(b_at == a_at || b_at == z_at, "a kept mapping is reused");
        assert_eq!(blen, n - 4096);
        b.prefault(4);
        b.as_mut_slice().fill(1);
        let b = b.into_bytes();
        assert_eq!(b.len(), n - 4096);
        assert!(b.iter().all(|&x| x == 1));
    }

    #[test]
    fn prepared_outputs_get_one_zero_per_page_inside_their_range_only() {
        let mut v = vec![0xABu8; MAP_MIN + 3 * 4096 + 100];
        let (skip, len) = (3, MAP_MIN + 4096 + 5);
        let base = v.as_mut_ptr() as usize;
        // Safety: a range of `v`, exclusively ours; the test reads it back only.
        unsafe { prepare_output(v.as_mut_ptr().add(skip), len, 4) };
        for (i, &b) in v.iter().enumerate() {
            let inside = (skip..skip + len).contains(&i);
            let page_start = (base + i).is_multiple_of(4096);
            let want = if inside && page_start { 0 } else { 0xAB };
            assert_eq!(b, want, "byte {i}");
        }
        assert!(v.iter().filter(|&&b| b == 0).count() >= len / 4096);
        // Below 8 MiB nothing is written.
        let mut small = vec![0xABu8; MAP_MIN - 1];
        // Safety: `small`, exclusively ours.
        unsafe { prepare_output(small.as_mut_ptr(), small.len(), 4) };
        assert!(small.iter().all(|&b| b == 0xAB));
    }
}
