//! [`DecompressBatch`] and [`CompressBatch`]: batched nvCOMP calls over device buffers.

use std::ops::Range;
use std::time::Duration;

use super::plan::{self, Direction, TableLayout};
use super::sys::{self, BatchArgs, Call, Status};
use super::workspace::{CallTables, SIZE_UNSET, STATUS_UNSET, Workspace};
use super::{GpuCodec, Nvcomp, library};
use crate::cuda::driver;
use crate::cuda::kernels::Segment;
use crate::cuda::{Context, DeviceBuffer, Stream};
use crate::error::{Error, Result};

/// Reusable state for batched decompression on one context: device tables of pointers
/// and sizes, nvCOMP's temporary space, statuses, and a scratch area that nvCOMP
/// decodes into. Grown as needed, freed on drop. One per thread (calls take
/// `&mut self`).
///
/// nvCOMP does not keep to the output sizes it is given: on the H100 its zstd decoder
/// wrote past an output range too small for the chunk, and the LZ4 and deflate
/// decoders wrote outside the ranges on damaged input. So by default every chunk is
/// decoded into a slot of this state's scratch area, with room to spare after it, and
/// copied into its output range by one kernel launch: the destination only ever
/// receives writes inside the output ranges. [`set_in_place`](Self::set_in_place)
/// skips the scratch area for data that is known to be intact.
///
/// ```no_run
/// use devbuf_core::cuda::nvcomp::{DecompressBatch, GpuCodec};
/// use devbuf_core::cuda::{Context, DeviceBuffer, Stream};
/// // Two raw deflate streams, back to back, each decoding to 4 bytes.
/// fn decode_two(frames: &[u8], first_len: usize) -> devbuf_core::Result<Vec<u8>> {
///     let ctx = Context::new(0)?;
///     let stream = Stream::new(&ctx)?;
///     let src = DeviceBuffer::from_slice(&ctx, frames)?;
///     let dst = ctx.allocate(8)?;
///     let mut batch = DecompressBatch::new(&ctx, None)?;
///     let inputs = [0..first_len, first_len..frames.len()];
///     batch.decompress(&stream, GpuCodec::Deflate, &src, &inputs, &dst, &[0..4, 4..8])?;
///     dst.to_vec::<u8>()
/// }
/// ```
pub struct DecompressBatch {
    ws: Workspace,
    in_place: bool,
    /// The call queued by [`queue_decompress`](Self::queue_decompress), not yet
    /// waited for.
    pending: Option<QueuedDecompression>,
    /// What [`expect_crc32`](Self::expect_crc32) asked of the next call.
    next_crc32: Option<Vec<u32>>,
}

/// What a queued decompression needs once its stream is done: where its results are,
/// what to check them against, and what to keep alive for good if it never finishes.
struct QueuedDecompression {
    layout: TableLayout,
    codec: GpuCodec,
    out_len: Vec<usize>,
    stream: Stream,
    keep: Vec<DeviceBuffer>,
    what: String,
    /// The CRC-32 each chunk's decoded bytes must have, when asked for.
    crc32: Option<Vec<u32>>,
}

impl DecompressBatch {
    /// Creates the state for `ctx`. Allocates nothing yet; fails when nvCOMP cannot be
    /// loaded (the error says why, see [`library`]).
    ///
    /// With `Some(stream)` (a stream of `ctx`) every call must run on that stream, and
    /// the device workspace comes from the context's stream-ordered pool, ordered on
    /// it (no `cuMemAlloc` / `cuMemFree`, which synchronise, when a worker makes and
    /// drops its state per read). With `None` calls may use any stream of `ctx` and
    /// the workspace is an ordinary allocation.
    ///
    /// ```no_run
    /// use devbuf_core::cuda::{nvcomp::DecompressBatch, Context, Stream};
    /// let ctx = Context::new(0)?;
    /// let any_stream = DecompressBatch::new(&ctx, None)?;
    /// let stream = Stream::new(&ctx)?;
    /// let on_stream = DecompressBatch::new(&ctx, Some(&stream))?; // calls on `stream` only
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn new(ctx: &Context, stream: Option<&Stream>) -> Result<Self> {
        library()?;
        Ok(DecompressBatch {
            ws: Workspace::for_batch(ctx, stream, "DecompressBatch::new")?,
            in_place: false,
            pending: None,
            next_crc32: None,
        })
    }

    /// Sizes the page-locked tables for calls of up to `chunks` chunks now: a call
    /// that outgrows them replaces them, and freeing page-locked memory waits for all
    /// of the device's work (every stream's), which would stall a pipeline that keeps
    /// several calls in flight.
    pub fn reserve_chunks(&mut self, chunks: usize) -> Result<()> {
        let n = chunks.max(1);
        self.ws
            .reserve_host(TableLayout::new(n, n, n, 0, 0).table_bytes())
    }

    /// Bytes of device memory this state holds now (tables, temporary space, staging
    /// and scratch slots).
    pub fn device_bytes(&self) -> usize {
        self.ws.device.as_ref().map_or(0, |d| d.len())
    }

    /// Whether nvCOMP decodes straight into the destination (`true`) or into the
    /// scratch area first (`false`, the default). In place saves the scratch memory
    /// (about the decoded size of a batch) and one device-to-device copy of the decoded
    /// bytes, but on damaged input, or input that decodes to more than its output
    /// range, nvCOMP may write outside the output ranges: use it only for data known
    /// to be intact (e.g. checksums verified).
    ///
    /// ```no_run
    /// # let ctx = devbuf_core::cuda::Context::new(0)?;
    /// let mut batch = devbuf_core::cuda::nvcomp::DecompressBatch::new(&ctx, None)?;
    /// batch.set_in_place(true); // trusted data only
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn set_in_place(&mut self, in_place: bool) {
        self.in_place = in_place;
    }

    /// Limits how long a call waits for its device work (default: 60 s). nvCOMP's zstd
    /// decoder has been seen to loop on damaged input; after the limit such a call
    /// returns [`Error::Malformed`] instead of blocking for good. The device work
    /// cannot be stopped: its stream stays busy, and the memory it may touch (this
    /// state's workspace, the call's source and destination allocations) is never
    /// freed (see [`leaked_bytes`](Self::leaked_bytes)). `None` waits as long as it
    /// takes.
    ///
    /// ```no_run
    /// # let ctx = devbuf_core::cuda::Context::new(0)?;
    /// let mut batch = devbuf_core::cuda::nvcomp::DecompressBatch::new(&ctx, None)?;
    /// batch.set_timeout(Some(std::time::Duration::from_secs(5)));
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.ws.timeout = timeout;
    }

    /// Device bytes of workspace given up after calls that timed out (the source and
    /// destination buffers kept alive with them are not counted).
    pub fn leaked_bytes(&self) -> usize {
        self.ws.leaked
    }

    /// Makes the next call ([`decompress`](Self::decompress) or
    /// [`queue_decompress`](Self::queue_decompress), that one only) also check each
    /// chunk's decoded bytes against a CRC-32: `crc32[i]` for chunk `i`, gzip's CRC-32
    /// (ISO-HDLC, the one in a gzip member's trailer). nvCOMP's deflate decoder does not
    /// check it; with this the device computes it over what nvCOMP decoded, in stream
    /// order after the decode, and the call (or [`finish`](Self::finish)) returns
    /// [`Error::Malformed`] naming the chunks whose bytes differ. The next call fails
    /// before any device work when its chunk count is not `crc32.len()`.
    ///
    /// ```no_run
    /// use devbuf_core::cuda::nvcomp::{DecompressBatch, GpuCodec};
    /// use devbuf_core::cuda::{Context, DeviceBuffer, Stream};
    /// // One gzip member: a 10-byte header, the deflate stream, CRC-32 and size.
    /// fn gunzip(member: &[u8], decoded_len: usize) -> devbuf_core::Result<Vec<u8>> {
    ///     let ctx = Context::new(0)?;
    ///     let stream = Stream::new(&ctx)?;
    ///     let src = DeviceBuffer::from_slice(&ctx, member)?;
    ///     let dst = ctx.allocate(decoded_len)?;
    ///     let trailer = member.len() - 8;
    ///     let crc = u32::from_le_bytes(member[trailer..trailer + 4].try_into().unwrap());
    ///     let mut batch = DecompressBatch::new(&ctx, None)?;
    ///     batch.expect_crc32(&[crc]);
    ///     batch.decompress(&stream, GpuCodec::Deflate, &src, &[10..trailer], &dst,
    ///                      &[0..decoded_len])?; // an error if the bytes' CRC-32 differs
    ///     dst.to_vec::<u8>()
    /// }
    /// ```
    pub fn expect_crc32(&mut self, crc32: &[u32]) {
        self.next_crc32 = Some(crc32.to_vec());
    }

    /// Queues one batched decompression on `stream`: chunk `i` is `src` bytes
    /// `inputs[i]` (device), decoded into `dst` bytes `outputs[i]` (device; the range's
    /// length is the exact expected decoded size). Waits for it, then checks every
    /// status and actual size: an error names the chunk index, the nvCOMP status, and
    /// the expected vs actual size. Never writes outside `outputs[i]` (unless
    /// [`set_in_place`](Self::set_in_place) was asked for: see there).
    ///
    /// Checked before any device work: the ranges (one output per input, each range
    /// ordered, non-empty, inside its buffer and within the codec's chunk limit), that
    /// `stream`, `src` and `dst` belong to this batch's context, that `dst` is writable
    /// and that no output overlaps an input. Ranges may start at any byte; inputs that
    /// miss nvCOMP's alignment are staged (module docs). On error the contents of the
    /// output ranges are unspecified. An empty batch does nothing.
    pub fn decompress(
        &mut self,
        stream: &Stream,
        codec: GpuCodec,
        src: &DeviceBuffer,
        inputs: &[Range<usize>],
        dst: &DeviceBuffer,
        outputs: &[Range<usize>],
    ) -> Result<()> {
        self.queue_decompress(stream, codec, src, inputs, dst, outputs, &[], &[])?;
        self.finish()
    }

    /// [`decompress`](Self::decompress) without the wait: the call is queued on
    /// `stream` (after the checks, which fail before any device work) and checked by
    /// [`finish`](Self::finish), which waits for everything queued on `stream` by then.
    /// A call still pending is finished first (its error, if any, is returned and
    /// nothing new is queued). `keep`: further buffers the caller's later work on
    /// `stream` uses, kept allocated for good with `src` and `dst` if the stream never
    /// finishes (see [`set_timeout`](Self::set_timeout)). Until `finish`, `src`, `dst`
    /// and this state must not be reused: dropping the state waits.
    ///
    /// `copies`: `src` ranges copied verbatim to `dst` offsets after the decode (blosc
    /// streams stored uncompressed), checked like the chunks (in range, no copy's
    /// destination over an input, an output or another copy's destination). A call of
    /// copies only (no `inputs`) runs just the copies.
    #[allow(clippy::too_many_arguments)]
    pub fn queue_decompress(
        &mut self,
        stream: &Stream,
        codec: GpuCodec,
        src: &DeviceBuffer,
        inputs: &[Range<usize>],
        dst: &DeviceBuffer,
        outputs: &[Range<usize>],
        copies: &[(Range<usize>, usize)],
        keep: &[&DeviceBuffer],
    ) -> Result<()> {
        // This call's, whatever becomes of it.
        let expect_crc32 = self.next_crc32.take();
        self.finish()?;
        if let Some(c) = &expect_crc32
            && c.len() != inputs.len()
        {
            return Err(Error::invalid(format!(
                "nvCOMP batch: expect_crc32 gave {} CRC-32s for a call of {} chunks (one \
                 per chunk)",
                c.len(),
                inputs.len()
            )));
        }
        if let Some(s) = &self.ws.pool_stream
            && s.raw() != stream.raw()
        {
            return Err(Error::invalid(
                "nvCOMP batch: made for one stream (DecompressBatch::new(ctx, Some(stream))), called on another",
            ));
        }
        plan::check_ranges(
            Direction::Decompress,
            codec,
            src.len(),
            inputs,
            dst.len(),
            outputs,
        )?;
        if inputs.is_empty() && copies.is_empty() {
            return Ok(());
        }
        for (k, (r, to)) in copies.iter().enumerate() {
            let fits = r.start <= r.end
                && r.end <= src.len()
                && to.checked_add(r.len()).is_some_and(|e| e <= dst.len());
            if !fits {
                return Err(Error::invalid(format!(
                    "nvCOMP batch: copy {k} of bytes {r:?} to offset {to}: outside the {} \
                     source or {} destination bytes",
                    src.len(),
                    dst.len()
                )));
            }
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
        // Copies are checked as further chunks: their sources as inputs, their
        // destinations as outputs.
        let copy_src: Vec<(u64, usize)> = copies
            .iter()
            .map(|(r, _)| (src.address() + r.start as u64, r.len()))
            .collect();
        let copy_dst: Vec<(u64, usize)> = copies
            .iter()
            .map(|(r, to)| (dst.address() + *to as u64, r.len()))
            .collect();
        let mut all_in = pairs(&in_addr, &in_len);
        all_in.extend_from_slice(&copy_src);
        let mut all_out = pairs(&out_addr, &out_len);
        all_out.extend_from_slice(&copy_dst);
        plan::check_overlaps(&all_in, &all_out)?;

        // In place: nvCOMP may write exactly the output ranges (misaligned ones staged).
        // Scratch: every chunk gets a slot with room to spare, copied out afterwards.
        let limit = codec.max_decompress_chunk_bytes();
        let out_cap: Vec<usize> = if self.in_place {
            out_len.clone()
        } else {
            out_len
                .iter()
                .map(|&k| (k + plan::slack(k)).min(limit).max(k))
                .collect()
        };
        let (in_stage, in_total) = plan::staging(&in_addr, align.input, |i| in_len[i]);
        let (out_stage, out_total) = if self.in_place {
            plan::staging(&out_addr, align.output, |i| out_len[i])
        } else {
            plan::slots(n, |i| out_cap[i] + plan::slack(out_len[i]))
        };
        let max_cap = out_cap.iter().copied().max().unwrap_or(0);
        let total_cap: usize = out_cap.iter().sum();
        self.ws.ctx.bind()?;
        let temp_bytes = if n == 0 {
            0
        } else {
            api.decompress_temp_size(n, max_cap, total_cap)
                .map_err(|s| lib.call_error(api.call_name(Call::DecompressGetTempSize), s))?
        };
        let k_in = in_stage.iter().flatten().count();
        let k_out = out_stage.iter().flatten().count();
        let layout = TableLayout::new(
            n,
            k_in,
            k_out + copies.len(),
            temp_bytes,
            in_total + out_total,
        );
        let base = self.ws.ensure(&layout)?;
        let stage_in = base + layout.staging as u64;
        let stage_out = stage_in + in_total as u64;
        let eff_in = effective(&in_addr, &in_stage, stage_in);
        let eff_out = effective(&out_addr, &out_stage, stage_out);
        let segs_in = segments(&in_stage, &eff_in, &in_addr, &in_len);
        let mut segs_out = segments(&out_stage, &out_addr, &eff_out, &out_len);
        segs_out.extend(
            copy_src
                .iter()
                .zip(&copy_dst)
                .map(|(&(from, len), &(to, _))| Segment {
                    dst: to,
                    src: from,
                    len: len as u64,
                }),
        );
        let tables = CallTables {
            in_ptrs: &eff_in,
            in_len: &in_len,
            out_ptrs: &eff_out,
            out_cap: &out_cap,
            segs_in: &segs_in,
            segs_out: &segs_out,
            crc32: expect_crc32.is_some(),
        };
        self.ws.fill(&layout, &tables);

        let what = format!("nvCOMP {codec} decompression of {n} chunks");
        let queued = self.ws.queue(&layout, base, stream, &tables, || {
            if n == 0 {
                return Ok(());
            }
            let args = args(&layout, base, temp_bytes, 0, stream);
            // Safety: the tables were uploaded to `base` before, on the same stream;
            // every pointer in them lies inside `src`, `dst` (ranges checked above, the
            // buffers outlive the call: `finish` waits for the stream, or leaks them) or
            // a staging / scratch slot of the workspace holding the capacity given for
            // it; staged inputs honour nvCOMP's alignment; temporary space of the
            // queried size at a 256-byte-aligned offset. The context is current.
            let st = unsafe { api.decompress_async(&args) };
            if st != sys::SUCCESS {
                return Err(lib.call_error(api.call_name(Call::DecompressAsync), st));
            }
            Ok(())
        });
        let mut kept = vec![src.clone(), dst.clone()];
        kept.extend(keep.iter().map(|b| (*b).clone()));
        if let Err(e) = queued {
            // Part of the sequence may be queued: wait before the tables are reused.
            let refs: Vec<&DeviceBuffer> = kept.iter().collect();
            let _ = self.ws.wait(stream, &what, &refs);
            return Err(e);
        }
        self.pending = Some(QueuedDecompression {
            layout,
            codec,
            out_len,
            stream: stream.clone(),
            keep: kept,
            what,
            crc32: expect_crc32,
        });
        Ok(())
    }

    /// Waits for the queued call's stream (at most the timeout) and checks every
    /// chunk's status and actual size (and CRC-32, when
    /// [`expect_crc32`](Self::expect_crc32) asked for it): an error names the chunk
    /// index, the nvCOMP status, and the expected vs actual size (or CRC-32). Nothing
    /// queued: `Ok`.
    pub fn finish(&mut self) -> Result<()> {
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        let refs: Vec<&DeviceBuffer> = p.keep.iter().collect();
        self.ws.wait(&p.stream, &p.what, &refs)?;
        let n = p.layout.n;
        let failed: Vec<(usize, u64, Status)> = (0..n)
            .map(|i| (i, self.ws.result(&p.layout, i)))
            .filter(|&(i, (size, st))| st != sys::SUCCESS || size != p.out_len[i] as u64)
            .map(|(i, (size, st))| (i, size, st))
            .collect();
        if failed.is_empty() {
            return match &p.crc32 {
                Some(want) => self.check_crc32(&p, want),
                None => Ok(()),
            };
        }
        let lib = library()?;
        Err(chunk_error(
            lib,
            Direction::Decompress,
            p.codec,
            n,
            &failed,
            |i| format!("expected {} decoded bytes", p.out_len[i]),
        ))
    }
}

impl DecompressBatch {
    /// Compares the CRC-32s the device computed for a finished call with `want`.
    fn check_crc32(&self, p: &QueuedDecompression, want: &[u32]) -> Result<()> {
        let bad: Vec<(usize, Option<u32>)> = want
            .iter()
            .enumerate()
            .map(|(i, &w)| (i, w, self.ws.crc32(&p.layout, i)))
            .filter(|&(_, w, got)| got != Some(w))
            .map(|(i, _, got)| (i, got))
            .collect();
        let Some(&(i, got)) = bad.first() else {
            return Ok(());
        };
        let got = got.map_or("none".to_string(), |g| format!("{g:#010x}"));
        let mut msg = format!(
            "nvCOMP {} decompression: {} of {} chunks decoded to bytes with another CRC-32 \
             than expected (damaged data); chunk {i}: CRC-32 {got}, expected {:#010x}",
            p.codec,
            bad.len(),
            p.layout.n,
            want[i]
        );
        msg.push_str(&also_chunks(bad[1..].iter().map(|b| b.0)));
        Err(Error::Malformed(msg))
    }
}

impl Drop for DecompressBatch {
    fn drop(&mut self) {
        // The workspace must outlive the queued work (or be leaked by the bounded wait).
        let _ = self.finish();
    }
}

/// Reusable state for batched compression on one context (the device write path): as
/// [`DecompressBatch`], for [`CompressBatch::compress`].
///
/// ```no_run
/// use devbuf_core::cuda::nvcomp::{self, CompressBatch, GpuCodec};
/// use devbuf_core::cuda::{Context, DeviceBuffer, Stream};
/// let ctx = Context::new(0)?;
/// let stream = Stream::new(&ctx)?;
/// let data = DeviceBuffer::from_slice(&ctx, &[1u8; 1 << 17])?; // two 64 KiB chunks
/// let cap = nvcomp::library()?.max_compressed_chunk_size(GpuCodec::Zstd, 1 << 16)?;
/// let out = ctx.allocate(2 * cap)?;
/// let mut batch = CompressBatch::new(&ctx, None)?;
/// let sizes = batch.compress(&stream, GpuCodec::Zstd, &data, &[0..1 << 16, 1 << 16..1 << 17],
///                            &out, &[0..cap, cap..2 * cap])?;
/// println!("compressed to {sizes:?} bytes");
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub struct CompressBatch {
    ws: Workspace,
}

impl CompressBatch {
    /// Creates the state for `ctx`. Allocates nothing yet; fails when nvCOMP cannot be
    /// loaded. `Some(stream)` binds every call to that stream of `ctx`, with the
    /// workspace from the stream-ordered pool (as [`DecompressBatch::new`]).
    pub fn new(ctx: &Context, stream: Option<&Stream>) -> Result<Self> {
        library()?;
        Ok(CompressBatch {
            ws: Workspace::for_batch(ctx, stream, "CompressBatch::new")?,
        })
    }

    /// Bytes of device memory this state holds now.
    pub fn device_bytes(&self) -> usize {
        self.ws.device.as_ref().map_or(0, |d| d.len())
    }

    /// Limits how long a call waits for its device work (default: 60 s); see
    /// [`DecompressBatch::set_timeout`].
    ///
    /// ```no_run
    /// # let ctx = devbuf_core::cuda::Context::new(0)?;
    /// let mut batch = devbuf_core::cuda::nvcomp::CompressBatch::new(&ctx, None)?;
    /// batch.set_timeout(None); // wait as long as it takes
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.ws.timeout = timeout;
    }

    /// Device bytes of workspace given up after calls that timed out.
    pub fn leaked_bytes(&self) -> usize {
        self.ws.leaked
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
        let k_in = in_stage.iter().flatten().count();
        let layout = TableLayout::new(n, k_in, 0, temp_bytes, in_total + out_total);
        let base = self.ws.ensure(&layout)?;
        let stage_in = base + layout.staging as u64;
        let stage_out = stage_in + in_total as u64;
        let eff_in = effective(&in_addr, &in_stage, stage_in);
        let eff_out = effective(&out_addr, &out_stage, stage_out);
        let caps = vec![cap; n];
        let segs_in = segments(&in_stage, &eff_in, &in_addr, &in_len);
        let tables = CallTables {
            in_ptrs: &eff_in,
            in_len: &in_len,
            out_ptrs: &eff_out,
            out_cap: &caps,
            segs_in: &segs_in,
            segs_out: &[],
            crc32: false,
        };
        self.ws.fill(&layout, &tables);

        let what = format!("nvCOMP {codec} compression of {n} chunks");
        self.ws
            .run(&layout, base, stream, (&what, &[src, dst]), &tables, || {
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
            // Staged outputs (rare: compression outputs need 8-byte alignment at most):
            // copy the compressed bytes, now that their sizes are known, into place.
            self.ws.ctx.bind()?;
            let s = stream.raw();
            let copied = staged(&out_stage)
                .try_for_each(|i| driver::memcpy_dtod_async(out_addr[i], eff_out[i], sizes[i], s));
            let waited = self.ws.wait(stream, &what, &[src, dst]);
            copied.and(waited)?;
        }
        Ok(sizes)
    }
}

/// The copies for the chunks that have a slot: `len[i]` bytes from `from[i]` to `to[i]`.
fn segments(stage: &[Option<usize>], to: &[u64], from: &[u64], len: &[usize]) -> Vec<Segment> {
    staged(stage)
        .map(|i| Segment {
            dst: to[i],
            src: from[i],
            len: len[i] as u64,
        })
        .collect()
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

fn args(
    l: &TableLayout,
    base: u64,
    temp_bytes: usize,
    max_in: usize,
    stream: &Stream,
) -> BatchArgs {
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
    msg.push_str(&also_chunks(failed[1..].iter().map(|f| f.0)));
    Error::Malformed(msg)
}

/// `"; also chunks 3, 9, ..."` for the failed chunks after the first (at most 16 named;
/// empty when there are none).
fn also_chunks(rest: impl ExactSizeIterator<Item = usize>) -> String {
    let n = rest.len();
    if n == 0 {
        return String::new();
    }
    let named: Vec<String> = rest.take(16).map(|i| i.to_string()).collect();
    let ellipsis = if n > 16 { ", ..." } else { "" };
    format!("; also chunks {}{ellipsis}", named.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scratch plan of a decompression: each output gets a slot with its capacity
    /// and a guard band inside the area, and one copy moves exactly its range out.
    #[test]
    fn scratch_slots_copy_exactly_the_outputs() {
        let out_addr = [0x7000_0003u64, 0x7000_2000, 0x7001_0001];
        let out_len = [100usize, 70_000, 1];
        let cap: Vec<usize> = out_len.iter().map(|&k| k + plan::slack(k)).collect();
        let (slots, total) = plan::slots(3, |i| cap[i] + plan::slack(out_len[i]));
        let area = 0x9000_0000u64;
        let eff = effective(&out_addr, &slots, area);
        let segs = segments(&slots, &out_addr, &eff, &out_len);
        assert_eq!(segs.len(), 3);
        for i in 0..3 {
            assert_eq!(
                (segs[i].dst, segs[i].src, segs[i].len),
                (out_addr[i], eff[i], out_len[i] as u64)
            );
            assert_eq!(eff[i] % plan::STAGE_ALIGN as u64, 0);
            let end = eff[i] + (cap[i] + plan::slack(out_len[i])) as u64;
            assert!(end <= area + total as u64);
            if i + 1 < 3 {
                assert!(end <= eff[i + 1], "slot {i} runs into the next");
            }
        }
        // In place: only misaligned chunks are staged, and copied back.
        let (stage, _) = plan::staging(&out_addr, 4, |i| out_len[i]);
        let eff = effective(&out_addr, &stage, area);
        assert_eq!(eff[1], out_addr[1]);
        let segs = segments(&stage, &out_addr, &eff, &out_len);
        assert_eq!(
            segs.iter().map(|g| g.dst).collect::<Vec<_>>(),
            [out_addr[0], out_addr[2]]
        );
    }
}
