//! Copies into large results that bypass the caches: [`copy_streaming`] writes whole
//! 64-byte lines with non-temporal stores, so the CPU does not first read each line
//! of the destination into its caches (a read for ownership) only to overwrite it.
//! A host read places every decoded chunk into a result far larger than the caches,
//! one row of the chunk at a time; with ordinary stores each row costs its
//! destination's lines read from memory as well as written.
//!
//! Non-temporal stores are weakly ordered: a thread that wrote with them calls
//! [`fence`] before it tells another thread the bytes are there (the read engine's
//! workers call it after each chunk they place, before the read returns).
//!
//! ```
//! use devbuf_core::__private::stream_copy::{copy_streaming, fence};
//!
//! let src: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
//! let mut dst = vec![0u8; 5003];
//! // Safety: both ranges lie within their vectors and do not overlap.
//! unsafe { copy_streaming(src.as_ptr(), dst.as_mut_ptr().add(3), src.len()) };
//! fence();
//! assert_eq!(&dst[3..], &src[..]);
//! ```

/// Runs shorter than this are copied with ordinary stores: a partly written line
/// costs a non-temporal store more than the read it saves.
pub const MIN_STREAMING_RUN: usize = 256;

/// Copies `len` bytes from `src` to `dst`, the 16-byte aligned middle of `dst` with
/// non-temporal stores (x86-64; elsewhere an ordinary copy). Runs shorter than
/// [`MIN_STREAMING_RUN`] are copied ordinarily. Call [`fence`] before another thread
/// reads the bytes.
///
/// # Safety
///
/// `src..src+len` must be readable, `dst..dst+len` writable, and the two must not
/// overlap (as for [`std::ptr::copy_nonoverlapping`]).
pub unsafe fn copy_streaming(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    if len >= MIN_STREAMING_RUN {
        // Safety: the caller's contract, passed on.
        unsafe { copy_sse2(src, dst, len) };
        return;
    }
    // Safety: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

/// Orders this thread's earlier non-temporal stores before its later stores (an
/// `sfence` on x86-64; nothing elsewhere, where [`copy_streaming`] stores ordinarily).
pub fn fence() {
    #[cfg(target_arch = "x86_64")]
    // Safety: `sfence` has no operands and no preconditions; SSE2 is part of x86-64.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// [`copy_streaming`] on x86-64 (SSE2, which every x86-64 CPU has): an ordinary copy
/// up to `dst`'s first 16-byte boundary, 64 bytes a step with `movntdq` (unaligned
/// loads), an ordinary copy of the rest.
///
/// # Safety
///
/// As [`copy_streaming`].
#[cfg(target_arch = "x86_64")]
unsafe fn copy_sse2(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    let head = dst.align_offset(16).min(len);
    // Safety: `head <= len` bytes of both ranges (the caller's contract).
    unsafe { std::ptr::copy_nonoverlapping(src, dst, head) };
    let mut at = head;
    while at + 64 <= len {
        // Safety: `at + 64 <= len`, so the 64 bytes read and written lie within the
        // caller's ranges; `dst + at` is 16-byte aligned (`head` aligned it and every
        // step is 64 bytes), as `_mm_stream_si128` needs; the loads are unaligned.
        unsafe {
            let s = src.add(at) as *const __m128i;
            let d = dst.add(at) as *mut __m128i;
            let (a, b) = (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)));
            let (c, e) = (_mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
        }
        at += 64;
    }
    // Safety: the last `len - at` bytes of both ranges.
    unsafe { std::ptr::copy_nonoverlapping(src.add(at), dst.add(at), len - at) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_and_alignment_copies_exactly_and_touches_nothing_else() {
        let src: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [0, 1, 15, 16, 63, 64, 255, 256, 257, 1000, 1024, 4000] {
            for (s_off, d_off) in [(0, 0), (1, 0), (0, 5), (3, 13), (17, 31)] {
                let mut dst = vec![0xAAu8; 4200];
                // Safety: `s_off + len <= 4096` and `d_off + len < 4200`: both in bounds,
                // two vectors do not overlap.
                unsafe {
                    copy_streaming(src.as_ptr().add(s_off), dst.as_mut_ptr().add(d_off), len)
                };
                fence();
                assert_eq!(
                    &dst[d_off..d_off + len],
                    &src[s_off..s_off + len],
                    "{len} {s_off} {d_off}"
                );
                assert!(
                    dst[..d_off].iter().all(|&b| b == 0xAA),
                    "before: {len} {d_off}"
                );
                assert!(
                    dst[d_off + len..].iter().all(|&b| b == 0xAA),
                    "after: {len} {d_off}"
                );
            }
        }
    }
}
