//! The device workspace of a batch: tables, temporary space, staging and scratch
//! slots in one allocation, a page-locked mirror of the tables, the stream-ordered
//! sequence of one call (upload, copies in, nvCOMP, copies out, download) and the
//! bounded wait for it.

use std::time::{Duration, Instant};

use super::plan::{self, TableLayout};
use super::sys::Status;
use crate::cuda::driver::{self, transfer};
use crate::cuda::kernels::crc32::{Crc32Tables, launch_crc32_ranges};
use crate::cuda::kernels::{self, Segment};
use crate::cuda::{Context, DeviceBuffer, HostBuffer, Stream};
use crate::error::{Error, Result};

/// Preset in the actual-size table: nvCOMP did not report this chunk.
pub(crate) const SIZE_UNSET: u64 = u64::MAX;
/// Preset in the status table: nvCOMP did not report this chunk.
pub(crate) const STATUS_UNSET: Status = -1;

/// How long a call waits for its device work unless told otherwise.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The host-side contents of one call's tables.
pub(crate) struct CallTables<'a> {
    /// Where nvCOMP reads each chunk (in place or a staging slot).
    pub in_ptrs: &'a [u64],
    pub in_len: &'a [usize],
    /// Where nvCOMP writes each chunk (in place, a staging slot or a scratch slot).
    pub out_ptrs: &'a [u64],
    /// How much nvCOMP may write there.
    pub out_cap: &'a [usize],
    /// Copies before the nvCOMP call (misaligned inputs into staging slots).
    pub segs_in: &'a [Segment],
    /// Copies after it (staging or scratch slots into the destination ranges).
    pub segs_out: &'a [Segment],
    /// Whether the device computes the CRC-32 of each chunk's decoded bytes after the
    /// call (into the CRC-32 table, downloaded with the statuses).
    pub crc32: bool,
}

/// Device workspace and its page-locked table mirror, grown as needed, freed on drop.
pub(crate) struct Workspace {
    pub ctx: Context,
    pub device: Option<DeviceBuffer>,
    host: Option<HostBuffer>,
    /// How long a call waits for its device work; `None`: as long as it takes.
    pub timeout: Option<Duration>,
    /// Device bytes given up after calls that timed out.
    pub leaked: usize,
    /// Where the device workspace comes from: `Some(stream)`: the context's
    /// stream-ordered pool, ordered on that stream (every call of this workspace then
    /// runs on it); `None`: `cuMemAlloc`.
    pub pool_stream: Option<Stream>,
}

impl Workspace {
    pub(crate) fn new(ctx: &Context) -> Workspace {
        Workspace {
            ctx: ctx.clone(),
            device: None,
            host: None,
            timeout: Some(DEFAULT_TIMEOUT),
            leaked: 0,
            pool_stream: None,
        }
    }

    /// The workspace of a batch made by `what` for `ctx`, bound to `stream` when given
    /// (which must belong to `ctx`).
    pub(crate) fn for_batch(
        ctx: &Context,
        stream: Option<&Stream>,
        what: &str,
    ) -> Result<Workspace> {
        let mut ws = Workspace::new(ctx);
        if let Some(s) = stream {
            if !s.context().same_as(ctx) {
                return Err(Error::invalid(format!(
                    "{what}: the stream belongs to another context (device {}) than the \
                     batch (device {})",
                    s.context().ordinal(),
                    ctx.ordinal()
                )));
            }
            ws.pool_stream = Some(s.clone());
        }
        Ok(ws)
    }

    /// Makes the page-locked mirror at least `bytes` long now, so that later calls of
    /// up to that size do not replace it (freeing page-locked memory waits for all of
    /// the device's work, other streams' too).
    pub(crate) fn reserve_host(&mut self, bytes: usize) -> Result<()> {
        if self.host.as_ref().is_none_or(|h| h.len() < bytes) {
            self.host = None;
            self.host = Some(self.ctx.allocate_host(plan::round_up(bytes, 4096))?);
        }
        Ok(())
    }

    /// Makes room for `layout`; returns the device workspace's address. Old space is
    /// freed first (every call waits for its work, so nothing still uses it).
    pub(crate) fn ensure(&mut self, layout: &TableLayout) -> Result<u64> {
        let dev = layout.device_bytes;
        if self.device.as_ref().is_none_or(|d| d.len() < dev) {
            self.device = None;
            let grown = plan::round_up(dev + dev / 4, 1 << 16);
            self.device = Some(match &self.pool_stream {
                Some(s) => self.ctx.allocate_pooled(grown, Some(s))?,
                None => self.ctx.allocate(grown)?,
            });
        }
        let host = layout.table_bytes();
        if self.host.as_ref().is_none_or(|h| h.len() < host) {
            self.host = None;
            let grown = plan::round_up(host + host / 4, 4096);
            self.host = Some(self.ctx.allocate_host(grown)?);
        }
        Ok(self.device.as_ref().map_or(0, |d| d.address()))
    }

    /// Checks that the stream and buffers belong to this workspace's context.
    pub(crate) fn check_context(
        &self,
        stream: &Stream,
        src: &DeviceBuffer,
        dst: &DeviceBuffer,
    ) -> Result<()> {
        for (what, ctx) in [
            ("stream", stream.context()),
            ("source buffer", src.context()),
            ("destination buffer", dst.context()),
        ] {
            if !ctx.same_as(&self.ctx) {
                return Err(Error::invalid(format!(
                    "nvCOMP batch: the {what} belongs to another context (device {}) than the batch (device {}); create the batch for that context",
                    ctx.ordinal(),
                    self.ctx.ordinal()
                )));
            }
        }
        Ok(())
    }

    /// Fills the page-locked mirror for one call (after [`ensure`](Self::ensure)).
    pub(crate) fn fill(&mut self, l: &TableLayout, t: &CallTables<'_>) {
        if let Some(h) = self.host.as_mut() {
            write_tables(h, l, t);
        }
    }

    /// Chunk `i`'s reported size and status, from the mirror after a call.
    pub(crate) fn result(&self, l: &TableLayout, i: usize) -> (u64, Status) {
        match self.host.as_ref() {
            Some(h) => read_result(h, l, i),
            None => (SIZE_UNSET, STATUS_UNSET),
        }
    }

    /// The CRC-32 of chunk `i`'s decoded bytes, from the mirror after a call that
    /// computed them.
    pub(crate) fn crc32(&self, l: &TableLayout, i: usize) -> Option<u32> {
        let at = l.crcs() + 4 * i;
        self.host
            .as_ref()
            .and_then(|h| h.get(at..at + 4))
            .and_then(|b| b.try_into().ok())
            .map(u32::from_ne_bytes)
    }

    /// One call, in stream order on `stream`: upload every table, copy the segments in,
    /// `call` (the nvCOMP launch), the CRC-32 of every chunk's decoded bytes when
    /// `t.crc32` asks for it, copy the segments out, download sizes and statuses;
    /// then wait for the stream whatever happened (the page-locked tables and the
    /// workspace must outlive the queued work; see [`wait`](Self::wait)).
    pub(crate) fn run(
        &mut self,
        l: &TableLayout,
        base: u64,
        stream: &Stream,
        keep: (&str, &[&DeviceBuffer]),
        t: &CallTables<'_>,
        call: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let queued = self.queue(l, base, stream, t, call);
        let waited = self.wait(stream, keep.0, keep.1);
        queued.and(waited)
    }

    /// The sequence of [`run`](Self::run) queued on `stream`, without waiting. Until
    /// the stream has been waited for ([`wait`](Self::wait)) the workspace must not be
    /// filled, grown or dropped; whatever this returns, something may have been queued.
    pub(crate) fn queue(
        &mut self,
        l: &TableLayout,
        base: u64,
        stream: &Stream,
        t: &CallTables<'_>,
        call: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let Some(h) = self.host.as_mut() else {
            return Err(Error::invalid("nvCOMP batch: workspace not allocated"));
        };
        let host = h.as_mut_ptr();
        let s = stream.raw();
        self.ctx.bind()?;
        // Safety: the page-locked mirror holds `table_bytes()` initialised bytes
        // (`fill`) and is neither written nor freed until the stream has been waited
        // for (the callers wait before the next `fill` or drop, or after a timeout
        // never free it); the destination is the start of this call's device
        // workspace, at least that large (`ensure`).
        unsafe { transfer::memcpy_htod_async(base, host, l.table_bytes(), s)? };
        copy_segments(&self.ctx, stream, base + l.seg_in() as u64, t.segs_in)?;
        call()?;
        if t.crc32 {
            let tables = Crc32Tables {
                ptrs: base + l.out_ptrs() as u64,
                sizes: base + l.out_bytes() as u64,
                caps: base + l.out_capacity() as u64,
                crcs: base + l.crcs() as u64,
                n: l.n as u64,
            };
            let longest = t.out_cap.iter().copied().max().unwrap_or(0) as u64;
            // Safety: the tables were uploaded above on this stream (the CRC-32s as
            // zero); each range is a slot or output range of the call, readable for its
            // capacity, and the workspace and the call's buffers outlive the stream's
            // work (the callers wait for it, or leak them after a timeout).
            unsafe { launch_crc32_ranges(&self.ctx, &tables, longest, s)? };
        }
        copy_segments(&self.ctx, stream, base + l.seg_out() as u64, t.segs_out)?;
        let back = l.out_bytes();
        // Safety: as above: the tail of the tables from the actual sizes on, written
        // by the device into page-locked memory that nothing reads until the stream
        // has been waited for.
        unsafe {
            transfer::memcpy_dtoh_async(
                host.add(back),
                base + back as u64,
                l.table_bytes() - back,
                s,
            )
        }
    }

    /// Waits until the work queued on `stream` has finished, at most `self.timeout`.
    /// When it has not finished by then, the workspace and `keep` (the call's buffers)
    /// are given up (leaked: device work still running may use them, so they must never
    /// be freed or reused) and the error says so.
    pub(crate) fn wait(
        &mut self,
        stream: &Stream,
        what: &str,
        keep: &[&DeviceBuffer],
    ) -> Result<()> {
        self.ctx.bind()?;
        let Some(limit) = self.timeout else {
            return driver::stream_synchronize(stream.raw());
        };
        let start = Instant::now();
        let mut pause = Duration::from_micros(2);
        while !driver::stream_query(stream.raw())? {
            if start.elapsed() >= limit {
                let bytes = self.device.as_ref().map_or(0, |d| d.len());
                self.leaked += bytes;
                std::mem::forget(self.device.take());
                std::mem::forget(self.host.take());
                keep.iter().for_each(|b| std::mem::forget((*b).clone()));
                return Err(Error::Malformed(format!(
                    "{what} did not finish within {limit:?} (nvCOMP can loop on corrupt input); \
                     the stream stays busy, and the batch's workspace ({bytes} bytes) and the \
                     call's source and destination buffers are kept allocated for good, \
                     since the device work may still use them"
                )));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
        Ok(())
    }
}

/// Writes one call's tables into `h` (at least `l.table_bytes()` long) as the device
/// expects them: native-endian `size_t`s and pointers, `nvcompStatus_t`s, segments.
pub(crate) fn write_tables(h: &mut [u8], l: &TableLayout, t: &CallTables<'_>) {
    let put = |h: &mut [u8], at: usize, v: u64| h[at..at + 8].copy_from_slice(&v.to_ne_bytes());
    for i in 0..l.n {
        put(h, l.in_ptrs() + 8 * i, t.in_ptrs[i]);
        put(h, l.in_bytes() + 8 * i, t.in_len[i] as u64);
        put(h, l.out_capacity() + 8 * i, t.out_cap[i] as u64);
        put(h, l.out_ptrs() + 8 * i, t.out_ptrs[i]);
        put(h, l.out_bytes() + 8 * i, SIZE_UNSET);
        let s = l.statuses() + 4 * i;
        h[s..s + 4].copy_from_slice(&STATUS_UNSET.to_ne_bytes());
        let c = l.crcs() + 4 * i;
        h[c..c + 4].copy_from_slice(&0u32.to_ne_bytes());
    }
    for (base, segs) in [(l.seg_in(), t.segs_in), (l.seg_out(), t.segs_out)] {
        for (k, g) in segs.iter().enumerate() {
            let at = base + plan::SEGMENT_BYTES * k;
            put(h, at, g.dst);
            put(h, at + 8, g.src);
            put(h, at + 16, g.len);
        }
    }
}

/// Chunk `i`'s reported size and status in tables written by [`write_tables`] and
/// downloaded after the call.
pub(crate) fn read_result(h: &[u8], l: &TableLayout, i: usize) -> (u64, Status) {
    let s = l.out_bytes() + 8 * i;
    let t = l.statuses() + 4 * i;
    let size = h
        .get(s..s + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(SIZE_UNSET, u64::from_ne_bytes);
    let status = h
        .get(t..t + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(STATUS_UNSET, Status::from_ne_bytes);
    (size, status)
}

/// Queues the copies of `segs` (whose table the upload already put at device address
/// `table`) on `stream`: one launch of devbuf's segment-copy kernel, or one
/// device-to-device copy per segment where the kernel cannot be loaded.
fn copy_segments(ctx: &Context, stream: &Stream, table: u64, segs: &[Segment]) -> Result<()> {
    if segs.is_empty() {
        return Ok(());
    }
    let count = u32::try_from(segs.len()).ok();
    match (count, kernels::copy_segments_function(ctx)) {
        (Some(count), Ok(f)) => {
            ctx.bind()?;
            let blocks = kernels::grid_for(ctx, u64::from(count) * u64::from(kernels::BLOCK));
            // Safety: `table` holds `count` segments (uploaded earlier on this stream);
            // each copies between ranges checked against their buffers or slots of
            // this workspace, which do not overlap each other; all stay allocated until
            // the stream has been waited for (or for good after a timeout).
            unsafe { kernels::launch_copy_segments(f, table, count, blocks, stream.raw()) }
        }
        _ => {
            ctx.bind()?;
            segs.iter().try_for_each(|g| {
                driver::memcpy_dtod_async(g.dst, g.src, g.len as usize, stream.raw())
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u64_at(h: &[u8], at: usize) -> u64 {
        u64::from_ne_bytes(h[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn tables_land_where_the_layout_says() {
        let seg = |d, s, n| Segment {
            dst: d,
            src: s,
            len: n,
        };
        let segs_in = [seg(0x10, 0x20, 3)];
        let segs_out = [seg(0x30, 0x40, 5), seg(0x50, 0x60, 7)];
        let t = CallTables {
            in_ptrs: &[0x1000, 0x2000],
            in_len: &[11, 22],
            out_ptrs: &[0x3000, 0x4000],
            out_cap: &[33, 44],
            segs_in: &segs_in,
            segs_out: &segs_out,
            crc32: false,
        };
        let l = TableLayout::new(2, 1, 2, 0, 0);
        let mut h = vec![0xAAu8; l.table_bytes()];
        write_tables(&mut h, &l, &t);
        assert_eq!(u64_at(&h, l.in_ptrs() + 8), 0x2000);
        assert_eq!(u64_at(&h, l.in_bytes()), 11);
        assert_eq!(u64_at(&h, l.out_capacity() + 8), 44);
        assert_eq!(u64_at(&h, l.out_ptrs()), 0x3000);
        assert_eq!(u64_at(&h, l.seg_in() + 16), 3);
        assert_eq!(u64_at(&h, l.seg_out() + plan::SEGMENT_BYTES + 8), 0x60);
        assert_eq!(read_result(&h, &l, 1), (SIZE_UNSET, STATUS_UNSET));
        // What the device writes back: sizes then statuses.
        h[l.out_bytes() + 8..l.out_bytes() + 16].copy_from_slice(&99u64.to_ne_bytes());
        h[l.statuses() + 4..l.statuses() + 8].copy_from_slice(&12i32.to_ne_bytes());
        assert_eq!(read_result(&h, &l, 1), (99, 12));
        assert_eq!(read_result(&h, &l, 0), (SIZE_UNSET, STATUS_UNSET));
        // CRC-32s start at zero (the kernel XORs into them).
        assert_eq!(&h[l.crcs()..l.crcs() + 8], &[0; 8]);
        assert_eq!(l.crcs() + 8, h.len());
    }
}
