//! [`DecompressBatch`] and [`CompressBatch`]: batched nvCOMP calls over device buffers.

use std::ops::Range;

use super::plan::{self, Direction, Layout};
use super::sys::{self, BatchArgs, Call, Status};
use super::{GpuCodec, Nvcomp, library};
use crate::cuda::driver::{self, transfer};
use crate::cuda::{Context, DeviceBuffer, HostBuffer, Stream};
use crate::error::{Error, Result};

/// Preset in the actual-size table: nvCOMP did not report this chunk.
const SIZE_UNSET: u64 = u64::MAX;
/// Preset in the status table: nvCOMP did not report this chunk.
const STATUS_UNSET: Status = -1;

/// Device workspace and its page-locked table mirror, grown as needed, freed on drop.
struct Workspace {
    ctx: Context,
    device: Option<DeviceBuffer>,
    host: Option<HostBuffer>,
}

impl Workspace {
    fn new(ctx: &Context) -> Workspace {
        Workspace {
            ctx: ctx.clone(),
            device: None,
            host: None,
        }
    }

    /// Makes room for `layout`; returns the device workspace's address. Old space is
    /// freed first (every call waits for its work, so nothing still uses it).
    fn ensure(&mut self, layout: &Layout) -> Result<u64> {
        let dev = layout.device_bytes;
        if self.device.as_ref().is_none_or(|d| d.len() < dev) {
            self.device = None;
            let grown = plan::round_up(dev + dev / 4, 1 << 16);
            self.device = Some(self.ctx.allocate(grown)?);
        }
        let host = Layout::table_bytes(layout.n);
        if self.host.as_ref().is_none_or(|h| h.len() < host) {
            self.host = None;
            let grown = plan::round_up(host + host / 4, 4096);
            self.host = Some(self.ctx.allocate_host(grown)?);
        }
        Ok(self.device.as_ref().map_or(0, |d| d.address()))
    }

    /// Checks that the stream and buffers belong to this workspace's context.
    fn check_context(&self, stream: &Stream, src: &DeviceBuffer, dst: &DeviceBuffer) -> Result<()> {
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

    /// Fills the host tables for one batch: pointers (staged or in place), sizes, and
    /// the sentinels of the reported sizes and statuses.
    fn fill_tables(
        &mut self,
        l: &Layout,
        in_ptrs: &[u64],
        in_len: &[usize],
        out_ptrs: &[u64],
        out_cap: &[usize],
    ) {
        let Some(h) = self.host.as_mut() else { return };
        let put = |h: &mut [u8], at: usize, i: usize, v: u64| {
            h[at + 8 * i..at + 8 * i + 8].copy_from_slice(&v.to_ne_bytes());
        };
        for i in 0..l.n {
            put(h, l.in_ptrs(), i, in_ptrs[i]);
            put(h, l.in_bytes(), i, in_len[i] as u64);
            put(h, l.out_capacity(), i, out_cap[i] as u64);
            put(h, l.out_ptrs(), i, out_ptrs[i]);
            put(h, l.out_bytes(), i, SIZE_UNSET);
            let s = l.statuses() + 4 * i;
            h[s..s + 4].copy_from_slice(&STATUS_UNSET.to_ne_bytes());
        }
    }

    /// Reads back chunk `i`'s reported size and status from the host tables.
    fn result(&self, l: &Layout, i: usize) -> (u64, Status) {
        let Some(h) = self.host.as_ref() else {
            return (SIZE_UNSET, STATUS_UNSET);
        };
        let s = l.out_bytes() + 8 * i;
        let t = l.statuses() + 4 * i;
        let size = u64::from_ne_bytes(h[s..s + 8].try_into().unwrap_or([0xff; 8]));
        let status = Status::from_ne_bytes(h[t..t + 4].try_into().unwrap_or([0xff; 4]));
        (size, status)
    }

    /// Queues the upload of all tables and, after `work`, the download of the reported
    /// sizes and statuses; then waits for the stream whatever happened (the page-locked
    /// tables and the workspace must outlive the queued copies).
    fn run(
        &mut self,
        l: &Layout,
        base: u64,
        stream: &Stream,
        work: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let Some(h) = self.host.as_mut() else {
            return Err(Error::invalid("nvCOMP batch: workspace not allocated"));
        };
        let host = h.as_mut_ptr();
        let queued = (|| {
            self.ctx.bind()?;
            // Safety: the page-locked tables hold `table_bytes(n)` initialised bytes and
            // are neither written nor freed until the stream has been synchronised
            // below; the destination is the start of this batch's device workspace,
            // at least that large (`ensure`).
            unsafe {
                transfer::memcpy_htod_async(base, host, Layout::table_bytes(l.n), stream.raw())?
            };
            work()?;
            let back = l.out_bytes();
            // Safety: as above: the last `12 n` bytes of the tables, written by the
            // device into page-locked memory that nothing reads until the stream has
            // been synchronised.
            unsafe {
                transfer::memcpy_dtoh_async(
                    host.add(back),
                    base + back as u64,
                    Layout::table_bytes(l.n) - back,
                    stream.raw(),
                )
            }
        })();
        let synced = self
            .ctx
            .bind()
            .and_then(|_| driver::stream_synchronize(stream.raw()));
        queued.and(synced)
    }
}

/// Reusable state for batched decompression on one context: device tables of pointers
/// and sizes, nvCOMP's temporary space, statuses, and a staging area for misaligned
/// chunks. Grown as needed, freed on drop. One per thread (calls take `&mut self`).
///
/// ```no_run
/// use devbuf::cuda::nvcomp::{DecompressBatch, GpuCodec};
/// use devbuf::cuda::{Context, DeviceBuffer, Stream};
/// // Two raw deflate streams, back to back, each decoding to 4 bytes.
/// fn decode_two(frames: &[u8], first_len: usize) -> devbuf::Result<Vec<u8>> {
///     let ctx = Context::new(0)?;
///     let stream = Stream::new(&ctx)?;
///     let src = DeviceBuffer::from_host(&ctx, frames)?;
///     let dst = ctx.allocate(8)?;
///     let mut batch = DecompressBatch::new(&ctx)?;
///     let inputs = [0..first_len, first_len..frames.len()];
///     batch.decompress(&stream, GpuCodec::Deflate, &src, &inputs, &dst, &[0..4, 4..8])?;
///     dst.to_host_vec()
/// }
/// ```
pub struct DecompressBatch {
    ws: Workspace,
}

impl DecompressBatch {
    /// Creates the state for `ctx`. Allocates nothing yet; fails when nvCOMP cannot be
    /// loaded (the error says why, see [`library`]).
    pub fn new(ctx: &Context) -> Result<Self> {
        library()?;
        Ok(DecompressBatch {
            ws: Workspace::new(ctx),
        })
    }

    /// The context this state belongs to.
    pub fn context(&self) -> &Context {
        &self.ws.ctx
    }

    /// Bytes of device memory this state holds now (workspace, tables, temporary space).
    pub fn device_bytes(&self) -> usize {
        self.ws.device.as_ref().map_or(0, |d| d.len())
    }

    /// Queues one batched decompression on `stream`: chunk `i` is `src` bytes
    /// `inputs[i]` (device), decoded into `dst` bytes `outputs[i]` (device; the range's
    /// length is the exact expected decoded size). Waits for it, then checks every
    /// status and actual size: an error names the chunk index, the nvCOMP status, and
    /// the expected vs actual size. Never writes outside `outputs[i]`.
    ///
    /// Checked before any device work: the ranges ([`check_decompress_ranges`]), that
    /// `stream`, `src` and `dst` belong to this batch's context, that `dst` is writable
    /// and that no output overlaps an input. Ranges may start at any byte; chunks that
    /// miss nvCOMP's alignment are staged (module docs). On error the contents of the
    /// outputs are unspecified. An empty batch does nothing.
    ///
    /// [`check_decompress_ranges`]: super::check_decompress_ranges
    pub fn decompress(
        &mut self,
        stream: &Stream,
        codec: GpuCodec,
        src: &DeviceBuffer,
        inputs: &[Range<usize>],
        dst: &DeviceBuffer,
        outputs: &[Range<usize>],
    ) -> Result<()> {
        plan::check_ranges(
            Direction::Decompress,
            codec,
            src.len(),
            inputs,
            dst.len(),
            outputs,
        )?;
        if inputs.is_empty() {
            return Ok(());
        }
        self.ws.check_context(stream, src, dst)?;
        dst.check_writable("nvCOMP decompression")?;
        let lib = library()?;
        let api = lib.codec(codec);
        let align = lib.decompress_alignment(codec);
        let n = inputs.len();
        let in_addr: Vec<u64> = inputs
            .iter()
            .map(|r| src.address() + r.start as u64)
            .collect();
        let in_len: Vec<usize> = inputs.iter().map(|r| r.len()).collect();
        let out_addr: Vec<u64> = outputs
            .iter()
            .map(|r| dst.address() + r.start as u64)
            .collect();
        let out_len: Vec<usize> = outputs.iter().map(|r| r.len()).collect();
        plan::check_overlaps(&pairs(&in_addr, &in_len), &pairs(&out_addr, &out_len))?;

        let max_out = out_len.iter().copied().max().unwrap_or(0);
        let total_out: usize = out_len.iter().sum();
        self.ws.ctx.bind()?;
        let temp_bytes = api
            .decompress_temp_size(n, max_out, total_out)
            .map_err(|s| lib.call_error(api.call_name(Call::DecompressGetTempSize), s))?;
        let (in_stage, in_total) = plan::staging(&in_addr, align.input, |i| in_len[i]);
        let (out_stage, out_total) = plan::staging(&out_addr, align.output, |i| out_len[i]);
        let layout = Layout::new(n, temp_bytes, in_total + out_total);
        let base = self.ws.ensure(&layout)?;
        let stage_in = base + layout.staging as u64;
        let stage_out = stage_in + in_total as u64;
        let eff_in = effective(&in_addr, &in_stage, stage_in);
        let eff_out = effective(&out_addr, &out_stage, stage_out);
        self.ws
            .fill_tables(&layout, &eff_in, &in_len, &eff_out, &out_len);

        let s = stream.raw();
        self.ws.run(&layout, base, stream, || {
            for i in staged(&in_stage) {
                driver::memcpy_dtod_async(eff_in[i], in_addr[i], in_len[i], s)?;
            }
            let args = args(&layout, base, temp_bytes, 0, stream);
            // Safety: the tables were uploaded to `base` just before, on the same
            // stream; every pointer in them lies inside `src`, `dst` (ranges checked
            // above, the buffers outlive this call, which waits for the stream) or
            // the workspace's staging area; the staged copies honour nvCOMP's
            // alignment; each output holds its capacity; temp space of the queried
            // size at a 256-byte-aligned offset. The context is current.
            let st = unsafe { api.decompress_async(&args) };
            if st != sys::SUCCESS {
                return Err(lib.call_error(api.call_name(Call::DecompressAsync), st));
            }
            for i in staged(&out_stage) {
                driver::memcpy_dtod_async(out_addr[i], eff_out[i], out_len[i], s)?;
            }
            Ok(())
        })?;

        let failed: Vec<(usize, u64, Status)> = (0..n)
            .map(|i| (i, self.ws.result(&layout, i)))
            .filter(|&(i, (size, st))| st != sys::SUCCESS || size != out_len[i] as u64)
            .map(|(i, (size, st))| (i, size, st))
            .collect();
        if failed.is_empty() {
            return Ok(());
        }
        Err(chunk_error(
            lib,
            Direction::Decompress,
            codec,
            n,
            &failed,
            |i| format!("expected {} decoded bytes", out_len[i]),
        ))
    }
}

/// Reusable state for batched compression on one context (the device write path): as
/// [`DecompressBatch`], for [`CompressBatch::compress`].
///
/// ```no_run
/// use devbuf::cuda::nvcomp::{self, CompressBatch, GpuCodec};
/// use devbuf::cuda::{Context, DeviceBuffer, Stream};
/// let ctx = Context::new(0)?;
/// let stream = Stream::new(&ctx)?;
/// let data = DeviceBuffer::from_host(&ctx, &[1u8; 1 << 17])?; // two 64 KiB chunks
/// let cap = nvcomp::library()?.max_compressed_chunk_size(GpuCodec::Zstd, 1 << 16)?;
/// let out = ctx.allocate(2 * cap)?;
/// let mut batch = CompressBatch::new(&ctx)?;
/// let sizes = batch.compress(&stream, GpuCodec::Zstd, &data, &[0..1 << 16, 1 << 16..1 << 17],
///                            &out, &[0..cap, cap..2 * cap])?;
/// println!("compressed to {sizes:?} bytes");
/// # Ok::<(), devbuf::Error>(())
/// ```
pub struct CompressBatch {
    ws: Workspace,
}

impl CompressBatch {
    /// Creates the state for `ctx`. Allocates nothing yet; fails when nvCOMP cannot be
    /// loaded.
    pub fn new(ctx: &Context) -> Result<Self> {
        library()?;
        Ok(CompressBatch {
            ws: Workspace::new(ctx),
        })
    }

    /// The context this state belongs to.
    pub fn context(&self) -> &Context {
        &self.ws.ctx
    }

    /// Bytes of device memory this state holds now.
    pub fn device_bytes(&self) -> usize {
        self.ws.device.as_ref().map_or(0, |d| d.len())
    }

    /// Compresses chunk `i` = `src` bytes `inputs[i]` into `dst` bytes `outputs[i]`,
    /// on `stream`, waits, and returns each chunk's compressed size (the compressed
    /// bytes are the first `sizes[i]` of `outputs[i]`).
    ///
    /// Every output range must hold at least
    /// [`Nvcomp::max_compressed_chunk_size`]`(codec, largest input)` bytes (nvCOMP may
    /// use all of it); inputs at most [`GpuCodec::max_compress_chunk_bytes`]. Other
    /// checks as [`DecompressBatch::decompress`]. An error names the chunk and status.
    pub fn compress(
        &mut self,
        stream: &Stream,
        codec: GpuCodec,
        src: &DeviceBuffer,
        inputs: &[Range<usize>],
        dst: &DeviceBuffer,
        outputs: &[Range<usize>],
    ) -> Result<Vec<usize>> {
        plan::check_ranges(
            Direction::Compress,
            codec,
            src.len(),
            inputs,
            dst.len(),
            outputs,
        )?;
        if inputs.is_empty() {
            return Ok(Vec::new());
        }
        self.ws.check_context(stream, src, dst)?;
        dst.check_writable("nvCOMP compression")?;
        let lib = library()?;
        let api = lib.codec(codec);
        let align = lib.compress_alignment(codec);
        let n = inputs.len();
        let in_len: Vec<usize> = inputs.iter().map(|r| r.len()).collect();
        let max_in = in_len.iter().copied().max().unwrap_or(0);
        let cap = lib.max_compressed_chunk_size(codec, max_in)?;
        if let Some((i, o)) = outputs.iter().enumerate().find(|(_, o)| o.len() < cap) {
            return Err(Error::invalid(format!(
                "nvCOMP {codec} compression: chunk {i}: output range of {} bytes is smaller than the {cap} bytes nvCOMP may write for chunks of up to {max_in} bytes (Nvcomp::max_compressed_chunk_size)",
                o.len()
            )));
        }
        let in_addr: Vec<u64> = inputs
            .iter()
            .map(|r| src.address() + r.start as u64)
            .collect();
        let out_addr: Vec<u64> = outputs
            .iter()
            .map(|r| dst.address() + r.start as u64)
            .collect();
        let out_len: Vec<usize> = outputs.iter().map(|r| r.len()).collect();
        plan::check_overlaps(&pairs(&in_addr, &in_len), &pairs(&out_addr, &out_len))?;

        self.ws.ctx.bind()?;
        let total_in: usize = in_len.iter().sum();
        let temp_bytes = api
            .compress_temp_size(n, max_in, total_in)
            .map_err(|s| lib.call_error(api.call_name(Call::CompressGetTempSize), s))?;
        let (in_stage, in_total) = plan::staging(&in_addr, align.input, |i| in_len[i]);
        let (out_stage, out_total) = plan::staging(&out_addr, align.output, |_| cap);
        let layout = Layout::new(n, temp_bytes, in_total + out_total);
        let base = self.ws.ensure(&layout)?;
        let stage_in = base + layout.staging as u64;
        let stage_out = stage_in + in_total as u64;
        let eff_in = effective(&in_addr, &in_stage, stage_in);
        let eff_out = effective(&out_addr, &out_stage, stage_out);
        let caps = vec![cap; n];
        self.ws
            .fill_tables(&layout, &eff_in, &in_len, &eff_out, &caps);

        let s = stream.raw();
        self.ws.run(&layout, base, stream, || {
            for i in staged(&in_stage) {
                driver::memcpy_dtod_async(eff_in[i], in_addr[i], in_len[i], s)?;
            }
            let args = args(&layout, base, temp_bytes, max_in, stream);
            // Safety: as in `DecompressBatch::decompress`; every output (in place or
            // staged) holds at least the max-output-chunk size for `max_in`.
            let st = unsafe { api.compress_async(&args) };
            if st != sys::SUCCESS {
                return Err(lib.call_error(api.call_name(Call::CompressAsync), st));
            }
            Ok(())
        })?;

        let mut sizes = Vec::with_capacity(n);
        let mut failed = Vec::new();
        for i in 0..n {
            let (size, st) = self.ws.result(&layout, i);
            if st != sys::SUCCESS || size > cap as u64 {
                failed.push((i, size, st));
            }
            sizes.push(size as usize);
        }
        if !failed.is_empty() {
            return Err(chunk_error(
                lib,
                Direction::Compress,
                codec,
                n,
                &failed,
                |_| format!("at most {cap} compressed bytes"),
            ));
        }
        if out_total > 0 {
            // Staged outputs: copy the compressed bytes (now known) into place.
            self.ws.ctx.bind()?;
            let copied = staged(&out_stage)
                .try_for_each(|i| driver::memcpy_dtod_async(out_addr[i], eff_out[i], sizes[i], s));
            let synced = self
                .ws
                .ctx
                .bind()
                .and_then(|_| driver::stream_synchronize(s));
            copied.and(synced)?;
        }
        Ok(sizes)
    }
}

fn pairs(addr: &[u64], len: &[usize]) -> Vec<(u64, usize)> {
    addr.iter().copied().zip(len.iter().copied()).collect()
}

/// The address nvCOMP uses for each chunk: its staging slot, or the chunk in place.
fn effective(addr: &[u64], stage: &[Option<usize>], stage_base: u64) -> Vec<u64> {
    addr.iter()
        .zip(stage)
        .map(|(&a, s)| s.map_or(a, |off| stage_base + off as u64))
        .collect()
}

fn staged(stage: &[Option<usize>]) -> impl Iterator<Item = usize> + '_ {
    stage
        .iter()
        .enumerate()
        .filter(|(_, s)| s.is_some())
        .map(|(i, _)| i)
}

fn args(l: &Layout, base: u64, temp_bytes: usize, max_in: usize, stream: &Stream) -> BatchArgs {
    let at = |off: usize| base + off as u64;
    BatchArgs {
        num_chunks: l.n,
        in_ptrs: at(l.in_ptrs()),
        in_bytes: at(l.in_bytes()),
        out_capacity: at(l.out_capacity()),
        out_bytes: at(l.out_bytes()),
        out_ptrs: at(l.out_ptrs()),
        statuses: at(l.statuses()),
        temp: at(l.temp),
        temp_bytes,
        max_in_bytes: max_in,
        stream: stream.raw().cast(),
    }
}

/// The error of a batch with failed chunks `(index, reported size, status)`: the first
/// in detail, then how many more and which (up to 16).
fn chunk_error(
    lib: &Nvcomp,
    dir: Direction,
    codec: GpuCodec,
    n: usize,
    failed: &[(usize, u64, Status)],
    expected: impl Fn(usize) -> String,
) -> Error {
    let (i, size, st) = failed[0];
    let got = if size == SIZE_UNSET {
        "no size reported".to_string()
    } else {
        format!("got {size}")
    };
    let status = if st == STATUS_UNSET {
        "no status reported".to_string()
    } else {
        lib.describe(st)
    };
    let verb = match dir {
        Direction::Compress => "compression",
        Direction::Decompress => "decompression",
    };
    let mut msg = format!(
        "nvCOMP {codec} {verb} failed for {} of {n} chunks; chunk {i}: status {status}; {}, {got}",
        failed.len(),
        expected(i)
    );
    if failed.len() > 1 {
        let more: Vec<String> = failed[1..]
            .iter()
            .take(16)
            .map(|f| f.0.to_string())
            .collect();
        let ellipsis = if failed.len() > 17 { ", ..." } else { "" };
        msg.push_str(&format!("; also chunks {}{ellipsis}", more.join(", ")));
    }
    Error::Malformed(msg)
}
