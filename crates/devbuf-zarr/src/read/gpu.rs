//! The GPU decode workers of a device read. A worker claims a run of units and picks
//! one of its *flights* (a stream with its own device scratch and nvCOMP state; one
//! still busy with an earlier claim is waited for first). Its reader threads read the
//! units' *stored* bytes into one page-locked slot ([`stored`](super::stored): each
//! unit in its own region, checked on the host), and each reader queues the copy of
//! what it read to the flight's device buffer right away, while the bytes are still in
//! the caches (a copy after the whole claim read them from memory again: 16 ms for a
//! 363 MiB store against 11 ms, H200). Then the worker queues on the flight one
//! batched nvCOMP call, the fill values of missing units and the units decoded on the
//! host (both in stored byte order, like nvCOMP's output), the byte swap of every
//! unit, and the placement into the output. It does not wait: it reads the next claim
//! into its other slot while the device works, with up to `depth` claims in flight on
//! their streams. A slot is handed out again once its copies are done (an event
//! recorded right after them); a flight is reused only after its stream finished, when
//! nvCOMP's statuses are checked (an error names the chunk).
//! On any error the worker waits for all its flights before it returns, so nothing is
//! freed under queued work and the caller discards the output.
//!
//! CPU workers and GPU workers claim from the same counter; [`sched`](super::sched)
//! decides when a GPU worker stops taking claims (near the end of a read, where the
//! GPU's latency is longer than the CPU workers need for the rest).
//!
//! Tuning: [`GpuTuning`](super::GpuTuning) in the read's options, resolved for the
//! decoder by [`Tuning::resolve`].

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::blosc;
use super::codec::{Chain, Compression};
use super::place::place_units;
use super::plan::Unit;
use super::sched::GpuModel;
use super::sched::Schedule;
use super::source::ZarrSource;
#[cfg(test)]
use super::stored::upload_ranges;
use super::stored::{UnitOutcome, gzip_crc32s, name_chunk, read_claim, stored_room};
pub(crate) use super::tuning::{Tuning, units_per_claim};
use super::work::{DeviceWork, ReadCounters, WorkQueue, aligned};
use devbuf_core::__private::UploadLane;
use devbuf_core::__private::ops::{
    ShuffledBlocks, byteswap, fill, strided_copy, unshuffle as kernel_unshuffle,
};
use devbuf_core::cuda::nvcomp::{DecompressBatch, GpuCodec};
use devbuf_core::cuda::{Context, DeviceBuffer, Event, EventFlags, Stream};
use devbuf_core::error::Result;

/// The nvCOMP codec for a chain, or why the GPU cannot decode it.
pub(crate) fn gpu_codec(chain: &Chain) -> std::result::Result<GpuCodec, String> {
    use super::codec::{BloscInner, Compression};
    match chain.compression {
        Compression::Zstd => Ok(GpuCodec::Zstd),
        Compression::Gzip => Ok(GpuCodec::Deflate),
        Compression::Zlib if !chain.crc32c => Err(
            "zlib chunks without crc32c: zlib records no size, so the host cannot rule out a \
             truncated stream, and nvCOMP's deflate decoder has faulted the device on \
             truncated input (docs/nvcomp.md); they are decoded on the CPU"
                .into(),
        ),
        Compression::Zlib => Ok(GpuCodec::Deflate),
        Compression::Lz4 => Ok(GpuCodec::Lz4),
        Compression::Blosc(BloscInner::Lz4) => Ok(GpuCodec::Lz4),
        Compression::Blosc(BloscInner::Zstd) => Ok(GpuCodec::Zstd),
        Compression::Blosc(BloscInner::Other) => Err(
            "blosc chunks compressed with blosclz, zlib or snappy: nvCOMP decodes the LZ4 and \
             zstd streams of blosc containers only"
                .into(),
        ),
        Compression::None => Err("uncompressed chunks need no decoder".into()),
    }
}

/// GPU decoding of a device read: the chain, its nvCOMP codec, how many of the
/// workers decode on the GPU, how they are sized, and when they take claims.
pub(crate) struct GpuDecode {
    pub chain: Chain,
    pub codec: GpuCodec,
    pub workers: usize,
    pub tuning: Tuning,
    pub schedule: Schedule,
    /// Every worker feeds nvCOMP (`Decoder::Gpu`): no CPU workers.
    pub gpu_only: bool,
}

/// One claim's device side: a stream, the slot's copy, the decoded units, nvCOMP's
/// state, and two timing events around its work.
struct ClaimSlot {
    stream: Stream,
    stored: DeviceBuffer,
    decoded: DeviceBuffer,
    /// Reads of blosc chunks: their shuffled bytes (nvCOMP's output), unit `j` at the
    /// same offset as in `decoded`.
    shuffled: Option<DeviceBuffer>,
    batch: DecompressBatch,
    begin: Event,
    end: Event,
    /// The claim queued on it, if not finished yet.
    busy: Option<QueuedClaim>,
}

/// What a queued claim needs when it is finished.
struct QueuedClaim {
    units: Range<usize>,
    /// The call's chunk `i` is unit `owners[i]` of the claim.
    owners: Vec<usize>,
    /// Host time from the claim to the end of queueing, microseconds.
    host_us: u64,
}

impl ClaimSlot {
    /// A flight whose buffers hold `stored_bytes` of a claim's stored bytes and
    /// `decoded_bytes` of its units. `streams`: nvCOMP chunks a claim is expected to
    /// have (its tables are sized for them); `blosc`: the claims are blosc chunks (a
    /// buffer for their shuffled bytes too).
    fn new(
        ctx: &Context,
        streams: usize,
        stored_bytes: usize,
        decoded_bytes: usize,
        blosc: bool,
    ) -> Result<ClaimSlot> {
        let stream = Stream::new(ctx)?;
        let timing = EventFlags {
            timing: true,
            ..EventFlags::default()
        };
        let mut batch = DecompressBatch::new(ctx, Some(&stream))?;
        batch.reserve_chunks(streams)?;
        let f = ClaimSlot {
            stored: ctx.allocate_pooled(stored_bytes, Some(&stream))?,
            decoded: ctx.allocate_pooled(decoded_bytes, Some(&stream))?,
            shuffled: match blosc {
                true => Some(ctx.allocate_pooled(decoded_bytes, Some(&stream))?),
                false => None,
            },
            batch,
            begin: Event::new(ctx, timing)?,
            end: Event::new(ctx, timing)?,
            stream,
            busy: None,
        };
        Ok(f)
    }

    /// Waits for the queued claim, checks nvCOMP's statuses (an error names the
    /// chunk), and records its latency in the model.
    fn complete(
        &mut self,
        src: &ZarrSource<'_>,
        run: &WorkQueue<'_>,
        model: &GpuModel,
        counts: &ReadCounters,
    ) -> Result<()> {
        let Some(b) = self.busy.take() else {
            return Ok(());
        };
        let t0 = Instant::now();
        let finished = self.batch.finish();
        let synced = self.stream.synchronize();
        counts
            .gpu_wait_us
            .fetch_add(micros(t0.elapsed()), Ordering::Relaxed);
        finished.map_err(|e| name_chunk(e, src, &run.units[b.units.clone()], &b.owners))?;
        synced?;
        let device_us = (self.begin.elapsed_ms(&self.end)? as f64 * 1e3) as u64;
        counts.gpu_decode_us.fetch_add(device_us, Ordering::Relaxed);
        model.observe(b.host_us + device_us);
        Ok(())
    }
}

impl Drop for ClaimSlot {
    fn drop(&mut self) {
        // Nothing of the flight (nor the output its placements write) may be freed
        // under queued work: wait for it, unless nvCOMP never finished (then the batch
        // kept the buffers for good and waiting would block for ever).
        let _ = self.batch.finish();
        if self.batch.leaked_bytes() == 0 {
            let _ = self.stream.synchronize();
        }
    }
}

/// One GPU worker of a device read, as a value with its inputs. [`run`](Self::run)
/// runs it until the work runs out or the model leaves the rest to the
/// CPU workers, then `then` (the worker's CPU work, given the worker's staging lane
/// when it had one) while its last claims finish on the device, then waits for them.
/// `(claim_batches, per)`: batches a claim takes, and the most units that makes (one
/// batch when the model would not take the first claim that `Decoder::Both` forces).
/// When the pool has no room for its staging (and `wait` is false) it runs `then`
/// only. `stream`: one its staging lane may wait on
/// (the lane queues nothing itself), else the lane makes one. `stopped` is called once
/// the worker takes no more claims (and may be called again).
pub(crate) struct GpuWorker<'a> {
    /// The read's shared inputs.
    pub work: DeviceWork<'a>,
    /// The GPU side of the read.
    pub gpu: &'a GpuDecode,
    /// The cost model the worker asks before each claim.
    pub model: &'a GpuModel,
    /// Batches a claim takes.
    pub claim_batches: usize,
    /// The most units a claim makes.
    pub per: usize,
    /// Whether the worker waits for page-locked staging (else it does not join when the
    /// pool is full).
    pub wait: bool,
    /// A stream its staging lane may wait on (the lane queues nothing itself), else the
    /// lane makes one.
    pub stream: Option<&'a Stream>,
}

impl GpuWorker<'_> {
    /// Runs the worker (see the type's docs); `stopped` is called once the worker takes
    /// no more claims (and may be called again), `then` runs the worker's CPU work.
    pub(crate) fn run(
        &self,
        stopped: &dyn Fn(),
        then: &dyn Fn(Option<UploadLane>) -> Result<()>,
    ) -> Result<()> {
        let GpuWorker {
            work,
            gpu: plan,
            model,
            claim_batches,
            per,
            wait,
            stream,
        } = *self;
        let DeviceWork {
            src,
            queue: run,
            out,
            ctx,
            counts,
        } = work;
        let room = stored_room(src.cell_bytes);
        let stride = aligned(src.cell_bytes);
        // No staging held by a worker the model sends home at once.
        let cpu_done = counts.cpu_units.load(Ordering::Relaxed);
        if !model.should_claim(true, run.remaining(), cpu_done) {
            stopped();
            return then(None);
        }
        // A first claim taken only because both decoders were asked for (the model would
        // leave the read to the CPU workers: large chunks) is one batch, and the worker's
        // staging holds only that: the CPU workers need the page-locked pool more. None at
        // all when that one batch would keep the read waiting (see `forced_claim_pays`).
        let forced = !model.advises(run.remaining(), cpu_done);
        if forced && !model.forced_claim_pays(run.remaining(), cpu_done) {
            stopped();
            return then(None);
        }
        let (claim_batches, per) = if forced {
            (1, per / claim_batches.max(1))
        } else {
            (claim_batches, per)
        };
        // The lane queues nothing on a stream of its own: it need not make one.
        let lane = match stream {
            Some(s) => UploadLane::bare_on(ctx, per * room, wait, s)?,
            None => UploadLane::bare(ctx, per * room, wait)?,
        };
        let Some(lane) = lane else {
            stopped();
            return then(None);
        };
        let mut lane = Some(lane);
        counts.gpu_workers.fetch_add(1, Ordering::Relaxed);
        // The fill value in stored byte order, like nvCOMP's output: the claim's byte swap
        // covers every unit.
        let mut fill_value = src.fill.clone();
        if let Some(w) = plan.chain.swap {
            devbuf_core::__private::host_ops::swap_in_place(&mut fill_value, w);
        }
        let depth = plan.tuning.depth.max(1);
        let mut flights: Vec<ClaimSlot> = Vec::with_capacity(depth);
        let mut k = 0usize;
        let result = (|| {
            loop {
                let cpu_done = counts.cpu_units.load(Ordering::Relaxed);
                if (forced && k > 0) || !model.should_claim(k == 0, run.remaining(), cpu_done) {
                    break;
                }
                let Some(lane) = lane.as_mut() else {
                    break;
                };
                let claim = run.claim_many(plan.tuning.claim_batches(k, claim_batches));
                let Some(range) = claim else {
                    break;
                };
                let units = &run.units[range.clone()];
                // The claim's flight first: its readers copy what they read into the
                // flight's buffer as they go (while the bytes are in the caches), so a
                // flight still busy with an earlier claim is waited for before the read.
                let f = k % depth;
                if f < flights.len() {
                    flights[f].complete(src, run, model, counts)?;
                }
                if f == flights.len() {
                    let blosc = matches!(plan.chain.compression, Compression::Blosc(_));
                    // A blosc chunk is many streams: about one per 32 KiB.
                    let streams = if blosc {
                        per.saturating_mul((src.cell_bytes >> 15).clamp(1, 256))
                    } else {
                        per
                    };
                    flights.push(ClaimSlot::new(
                        ctx,
                        streams,
                        per * room,
                        per * stride,
                        blosc,
                    )?);
                }
                let t0 = Instant::now();
                let flight = &mut flights[f];
                let (got, crc32) = {
                    let (slot, uploads) = lane.slot_uploads(&flight.stream, &flight.stored)?;
                    let copy = |r: Range<usize>| uploads.copy(r);
                    let read =
                        read_claim(src, &plan.chain, units, slot, plan.tuning.readers(), &copy);
                    let read = read.map(|(got, _)| {
                        let crc32 = gzip_crc32s(&plan.chain, &got, slot);
                        (got, crc32)
                    });
                    // The slot goes out again only after the copies queued so far, also
                    // when the read failed.
                    let handed = lane.uploaded(&flight.stream);
                    let read = read?;
                    handed?;
                    read
                };
                counts
                    .gpu_read_us
                    .fetch_add(micros(t0.elapsed()), Ordering::Relaxed);
                counts
                    .gpu_read_end_us
                    .fetch_max(micros(run.started.elapsed()), Ordering::Relaxed);
                let t1 = Instant::now();
                let flight = &mut flights[f];
                let owners = queue_claim(
                    src,
                    plan,
                    ClaimRead {
                        units,
                        got: &got,
                        crc32: crc32.as_deref(),
                    },
                    &fill_value,
                    flight,
                    out,
                )?;
                counts
                    .gpu_queue_us
                    .fetch_add(micros(t1.elapsed()), Ordering::Relaxed);
                let _ = counts.gpu_first_us.compare_exchange(
                    0,
                    micros(run.started.elapsed()).max(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                flight.busy = Some(QueuedClaim {
                    units: range,
                    owners,
                    host_us: micros(t0.elapsed()),
                });
                tally(&got, src.cell_bytes, counts);
                k += 1;
            }
            stopped();
            // The worker's CPU work goes on with the same staging (its slots are handed
            // out once their copies are done): no second kit of the pool.
            then(lane.take())?;
            for f in &mut flights {
                f.complete(src, run, model, counts)?;
            }
            counts
                .gpu_end_us
                .fetch_max(micros(run.started.elapsed()), Ordering::Relaxed);
            Ok(())
        })();
        // On error the flights' drops wait for their streams, then the lane's for its slots.
        drop(flights);
        result
    }
}

/// One claim as its readers left it (its stored bytes copied to its flight): its
/// units, what each reader got, and the CRC-32 each of nvCOMP's chunks must decode to
/// (gzip).
#[derive(Clone, Copy)]
struct ClaimRead<'a> {
    units: &'a [Unit],
    got: &'a [UnitOutcome],
    crc32: Option<&'a [u32]>,
}

/// Queues one claim on `flight`, after the copies of its stored bytes its readers
/// queued there: the nvCOMP call, the fill values
/// (`fill_value`: in stored byte order) and host-decoded units (put in stored byte
/// order by their reader), the byte swap of every unit, the placement. Returns which
/// unit each of the call's chunks is.
fn queue_claim(
    src: &ZarrSource<'_>,
    plan: &GpuDecode,
    claim: ClaimRead<'_>,
    fill_value: &[u8],
    flight: &mut ClaimSlot,
    out: &DeviceBuffer,
) -> Result<Vec<usize>> {
    let ClaimRead { units, got, crc32 } = claim;
    let room = stored_room(src.cell_bytes);
    let stride = aligned(src.cell_bytes);
    let s = &flight.stream;
    let mut inputs = Vec::with_capacity(units.len());
    let mut outputs = Vec::with_capacity(units.len());
    let mut owners = Vec::with_capacity(units.len());
    let mut copies = Vec::new();
    for (j, g) in got.iter().enumerate() {
        match g {
            UnitOutcome::Gpu(r) => {
                inputs.push(r.clone());
                outputs.push(j * stride..j * stride + src.cell_bytes);
                owners.push(j);
            }
            UnitOutcome::Blosc(r, b) => {
                let at = j * stride;
                for p in &b.streams {
                    inputs.push(r.start + p.src..r.start + p.src + p.len);
                    outputs.push(at + p.dst..at + p.dst + p.out);
                    owners.push(j);
                }
                copies.extend(
                    b.copies
                        .iter()
                        .map(|p| (r.start + p.src..r.start + p.src + p.len, at + p.dst)),
                );
            }
            UnitOutcome::Missing | UnitOutcome::Host => {}
        }
    }
    // nvCOMP's output: the units themselves, or blosc's shuffled bytes.
    let target = flight.shuffled.as_ref().unwrap_or(&flight.decoded);
    flight.begin.record(s)?;
    if let Some(c) = crc32 {
        flight.batch.expect_crc32(c);
    }
    flight
        .batch
        .queue_decompress(
            s,
            plan.codec,
            &flight.stored,
            &inputs,
            target,
            &outputs,
            &copies,
            &[out, &flight.decoded],
        )
        .map_err(|e| name_chunk(e, src, units, &owners))?;
    if let Some(shuffled) = &flight.shuffled {
        unshuffle(got, src.cell_bytes, stride, shuffled, &flight.decoded, s)?;
    }
    // Before the swap, in stored order like nvCOMP's output: the fill value of missing
    // units and the units decoded on the host.
    for (j, g) in got.iter().enumerate() {
        match g {
            UnitOutcome::Missing => fill(
                &flight.decoded.slice(j * stride, src.cell_bytes)?,
                fill_value,
                Some(s),
            )?,
            UnitOutcome::Host => strided_copy(
                &flight.stored,
                j * room,
                &[1],
                &flight.decoded,
                j * stride,
                &[1],
                &[src.cell_bytes],
                1,
                Some(s),
            )?,
            UnitOutcome::Gpu(_) | UnitOutcome::Blosc(..) => {}
        }
    }
    if let Some(w) = plan.chain.swap {
        byteswap(&flight.decoded.slice(0, units.len() * stride)?, w, Some(s))?;
    }
    place_units(src, units, stride, s, &flight.decoded, out)?;
    flight.end.record(s)?;
    Ok(owners)
}

/// Undoes blosc's byte shuffle of a claim's blosc units, from `shuffled` into
/// `decoded` (unit `j` at `j * stride` in both), for each run of consecutive units with
/// the same block size and type size: the whole blocks of the run in one
/// [`unshuffle`](kernel_unshuffle) (one launch of the vector kernel for type sizes 2,
/// 4, 8 and 16), the rest as strided copies with an axis over the run's units.
fn unshuffle(
    got: &[UnitOutcome],
    cell_bytes: usize,
    stride: usize,
    shuffled: &DeviceBuffer,
    decoded: &DeviceBuffer,
    s: &Stream,
) -> Result<()> {
    let layout = |g: &UnitOutcome| match g {
        UnitOutcome::Blosc(_, b) => Some((b.blocksize, b.typesize)),
        _ => None,
    };
    let mut j = 0;
    while j < got.len() {
        let Some((blocksize, typesize)) = layout(&got[j]) else {
            j += 1;
            continue;
        };
        let run = got[j..]
            .iter()
            .take_while(|g| layout(g) == Some((blocksize, typesize)))
            .count();
        let stride_i = stride as isize;
        for step in blosc::unshuffle_steps(cell_bytes, blocksize, typesize) {
            match step {
                blosc::Step::Blocks {
                    count,
                    stride: bstride,
                    n,
                    typesize,
                } => {
                    let blocks = ShuffledBlocks {
                        offset: j * stride,
                        groups: run,
                        ustride: stride,
                        blocks: count,
                        bstride,
                        n,
                        typesize,
                    };
                    kernel_unshuffle(shuffled, decoded, &blocks, Some(s))?;
                }
                blosc::Step::Copy((at, shape, from, to)) => {
                    let shape: Vec<usize> = std::iter::once(run).chain(shape).collect();
                    let from: Vec<isize> = std::iter::once(stride_i).chain(from).collect();
                    let to: Vec<isize> = std::iter::once(stride_i).chain(to).collect();
                    let base = j * stride + at;
                    strided_copy(
                        shuffled,
                        base,
                        &from,
                        decoded,
                        base,
                        &to,
                        &shape,
                        1,
                        Some(s),
                    )?;
                }
            }
        }
        j += run;
    }
    Ok(())
}

/// Counts one queued claim's units.
fn tally(got: &[UnitOutcome], cell_bytes: usize, counts: &ReadCounters) {
    let (mut gpu, mut missing) = (0u64, 0u64);
    for g in got {
        match g {
            UnitOutcome::Missing => missing += 1,
            UnitOutcome::Host => counts.note_cpu_unit(true, cell_bytes),
            UnitOutcome::Gpu(_) | UnitOutcome::Blosc(..) => gpu += 1,
        }
    }
    counts.gpu_units.fetch_add(gpu, Ordering::Relaxed);
    counts
        .decoded_bytes
        .fetch_add(gpu * cell_bytes as u64, Ordering::Relaxed);
    counts.missing_units.fetch_add(missing, Ordering::Relaxed);
    // Units decoded on the host were counted by `note_cpu_unit`.
    counts.note_done(gpu + missing, (gpu + missing) * cell_bytes as u64);
}

fn micros(d: std::time::Duration) -> u64 {
    d.as_micros().min(u64::MAX as u128) as u64
}

/// Device bytes one flight holds for claims of `per` units of `cell_bytes` (its
/// buffers and nvCOMP's scratch, about the decoded size again; blosc chunks: their
/// shuffled bytes too).
pub(crate) fn claim_device_bytes(per: usize, cell_bytes: usize, blosc: bool) -> usize {
    let decoded = if blosc { 3 } else { 2 };
    per.saturating_mul(stored_room(cell_bytes) + decoded * aligned(cell_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uploads_cover_what_the_device_reads_and_skip_large_gaps() {
        let room = 1 << 20;
        let got = [
            UnitOutcome::Gpu(0..700_000),
            UnitOutcome::Missing,
            UnitOutcome::Gpu(2 * room..2 * room + 1_000_000),
            UnitOutcome::Host,
            UnitOutcome::Gpu(4 * room..4 * room + 10),
        ];
        let r = upload_ranges(got.iter().enumerate(), room, 900_000);
        // Unit 2 ends 48 KiB before unit 3's region: one range; unit 4 apart.
        assert_eq!(
            r,
            [
                0..700_000,
                2 * room..3 * room + 900_000,
                4 * room..4 * room + 10
            ]
        );
        assert!(upload_ranges([(0, &UnitOutcome::Missing)], room, 10).is_empty());
    }
}
