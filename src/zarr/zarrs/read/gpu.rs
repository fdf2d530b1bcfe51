//! The GPU decode worker of a device read: it reads the *stored* bytes of a run of
//! units into a page-locked slot (one file read each, packed at 16-byte offsets), the
//! slot goes to the device in one DMA, nVCOMP decodes all of them in one batched call
//! into a device scratch buffer, and the placement runs from there as for CPU-decoded
//! units. CPU workers and GPU workers claim from the same counter, so the split of a
//! read between them follows their measured speed.
//!
//! Units that are not stored are filled with the fill value on the device; a unit whose
//! stored bytes do not fit the slot (larger than any valid encoding of the unit) is
//! decoded on the CPU by the same worker.

use std::ops::Range;

use super::codec::{self, Chain, Compression};
use super::pipeline::{Counts, Run, aligned, note, place_units};
use super::plan::Unit;
use super::source::{Source, StoredLen};
use crate::cuda::kernels::ops::{byteswap, fill};
use crate::cuda::nvcomp::{DecompressBatch, GpuCodec};
use crate::cuda::{Context, DeviceBuffer, UploadLane};
use crate::error::{Error, Result};

/// Decoded bytes a GPU worker aims to decode per nvCOMP call.
pub(crate) const GPU_CLAIM_BYTES: usize = 64 << 20;

/// The nvCOMP codec for a chain, or why the GPU cannot decode it.
pub(crate) fn gpu_codec(chain: &Chain) -> std::result::Result<GpuCodec, String> {
    match chain.compression {
        Compression::Zstd => Ok(GpuCodec::Zstd),
        Compression::Gzip => Ok(GpuCodec::Deflate),
        Compression::Blosc => Err(
            "blosc chunks hold blosc's own block and shuffle container, which nvCOMP does not \
             decode"
                .into(),
        ),
        Compression::None => Err("uncompressed chunks need no decoder".into()),
    }
}

/// Room for the stored bytes of one unit of `cell_bytes` decoded bytes: what zstd and
/// deflate need at worst for incompressible data, plus headers.
pub(crate) fn stored_room(cell_bytes: usize) -> usize {
    (cell_bytes + cell_bytes / 64 + 4096).next_multiple_of(16)
}

/// Units per GPU claim for units of `cell_bytes`.
pub(crate) fn units_per_claim(cell_bytes: usize) -> usize {
    (GPU_CLAIM_BYTES / cell_bytes.max(1)).clamp(1, 4096)
}

/// Runs one GPU worker until the work runs out. Returns `Ok` without doing anything
/// when the pool has no room for its staging (the other workers take the work).
#[allow(clippy::too_many_arguments)]
pub(crate) fn worker(
    src: &Source<'_>,
    chain: &Chain,
    codec: GpuCodec,
    run: &Run<'_>,
    out: &DeviceBuffer,
    ctx: &Context,
    claim_batches: usize,
    wait: bool,
    counts: &Counts,
) -> Result<()> {
    let per = units_per_claim(src.cell_bytes);
    let room = stored_room(src.cell_bytes);
    let Some(mut lane) = UploadLane::new(ctx, per * room, wait)? else {
        return Ok(());
    };
    let stride = aligned(src.cell_bytes);
    let decoded = ctx.allocate_pooled(per * stride, Some(lane.stream()))?;
    let mut batch = DecompressBatch::new(ctx)?;
    counts
        .gpu_workers
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    while let Some(range) = run.claim_many(claim_batches) {
        for piece in range.clone().step_by(per) {
            let units = &run.units[piece..(piece + per).min(range.end)];
            one_call(
                src, chain, codec, units, &mut lane, &decoded, &mut batch, out, counts,
            )?;
        }
    }
    lane.finish()
}

/// Threads that read one GPU call's stored bytes in parallel.
const READERS: usize = 4;

/// Where one unit's stored bytes went in the slot.
enum Got {
    Missing,
    /// Too large for the slot, or not for nvCOMP (e.g. a zstd frame without a declared
    /// size): decoded on the CPU.
    Cpu,
    /// `range` of the slot.
    At(Range<usize>),
}

/// Reads the stored bytes of `units` into `slot`, packed at 16-byte offsets: for a
/// filesystem store the files are opened first (to learn the sizes), then read by
/// [`READERS`] threads; other stores are read one unit after another.
fn read_stored(src: &Source<'_>, units: &[Unit], slot: &mut [u8]) -> Result<Vec<Got>> {
    let mut got = Vec::with_capacity(units.len());
    let mut at = 0usize;
    if !src.has_files() {
        for u in units {
            match src.stored_into(&u.cell, &mut slot[at..])? {
                StoredLen::Missing => got.push(Got::Missing),
                StoredLen::TooLarge => got.push(Got::Cpu),
                StoredLen::Fits(n) => {
                    got.push(Got::At(at..at + n));
                    at = (at + n).next_multiple_of(16).min(slot.len());
                }
            }
        }
        return Ok(got);
    }
    let mut reads = Vec::new();
    for (j, u) in units.iter().enumerate() {
        match src.open_stored(&u.cell)? {
            None => got.push(Got::Missing),
            Some((file, offset, len)) => {
                let n = usize::try_from(len).unwrap_or(usize::MAX);
                if n > slot.len() - at {
                    got.push(Got::Cpu);
                } else {
                    got.push(Got::At(at..at + n));
                    reads.push((j, file, offset, at..at + n));
                    at = (at + n).next_multiple_of(16).min(slot.len());
                }
            }
        }
    }
    // Disjoint slices of the slot, one per read, in order.
    let mut parts: Vec<(usize, std::fs::File, u64, &mut [u8])> = Vec::with_capacity(reads.len());
    let mut rest = &mut slot[..];
    let mut consumed = 0usize;
    for (j, file, offset, r) in reads {
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(r.start - consumed);
        let (mine, tail) = tail.split_at_mut(r.len());
        parts.push((j, file, offset, mine));
        rest = tail;
        consumed = r.end;
    }
    let per = parts.len().div_ceil(READERS).max(1);
    let failed: std::sync::Mutex<Option<Error>> = std::sync::Mutex::new(None);
    std::thread::scope(|sc| {
        for group in parts.chunks_mut(per) {
            let failed = &failed;
            sc.spawn(move || {
                for (j, file, offset, buf) in group.iter_mut() {
                    if let Err(e) = super::source::read_exact_at(file, buf, *offset) {
                        let e = src.storage_err(&src.describe(&units[*j].cell), e);
                        failed
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(e);
                        return;
                    }
                }
            });
        }
    });
    match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(got),
    }
}

/// The byte range nvCOMP decodes of one unit's stored bytes `slot[r]`, after the
/// host-side checks: crc32c, the gzip member's header and size, the zstd frame's
/// declared size and completeness. `None`: decode this unit on the CPU instead (a
/// valid encoding nvCOMP should not be given, e.g. several zstd frames).
fn gpu_input(
    src: &Source<'_>,
    chain: &Chain,
    slot: &[u8],
    r: Range<usize>,
    what: &dyn Fn() -> String,
) -> Result<Option<Range<usize>>> {
    let mut body = r.clone();
    if chain.crc32c {
        let inner = codec::strip_crc32c(&slot[body.clone()], what)?;
        body = r.start..r.start + inner.len();
    }
    match chain.compression {
        Compression::Gzip => {
            let g = codec::gzip_deflate_range(&slot[body.clone()], src.cell_bytes, what)?;
            Ok(Some(body.start + g.start..body.start + g.end))
        }
        Compression::Zstd => {
            let frame = &slot[body.clone()];
            // No declared size: the CPU decoder bounds it.
            if codec::zstd_declared_size(frame, src.cell_bytes, what)?.is_none() {
                return Ok(None);
            }
            // A frame with a content checksum: nvCOMP would not verify it; the CPU does.
            if frame.len() > 4 && frame[4] & 0x04 != 0 {
                return Ok(None);
            }
            match zstd::zstd_safe::find_frame_compressed_size(frame) {
                Ok(n) if n == frame.len() => Ok(Some(body)),
                // Several frames: valid zstd, decoded on the CPU.
                Ok(_) => Ok(None),
                Err(_) => Err(Error::Malformed(format!(
                    "{}: truncated or corrupt zstd frame ({} bytes)",
                    what(),
                    frame.len()
                ))),
            }
        }
        _ => Err(Error::invalid("not a chain for nvCOMP")),
    }
}

/// Decodes `units` (at most one claim's worth) with one nvCOMP call and places them.
#[allow(clippy::too_many_arguments)]
fn one_call(
    src: &Source<'_>,
    chain: &Chain,
    codec: GpuCodec,
    units: &[Unit],
    lane: &mut UploadLane,
    decoded: &DeviceBuffer,
    batch: &mut DecompressBatch,
    out: &DeviceBuffer,
    counts: &Counts,
) -> Result<()> {
    let stride = aligned(src.cell_bytes);
    let mut inputs: Vec<Range<usize>> = Vec::with_capacity(units.len());
    let mut outputs: Vec<Range<usize>> = Vec::with_capacity(units.len());
    let mut fills = Vec::new();
    let mut on_cpu = Vec::new();
    let t0 = std::time::Instant::now();
    let used = {
        let slot = lane.slot()?;
        let got = read_stored(src, units, slot)?;
        let mut used = 0;
        for (j, g) in got.into_iter().enumerate() {
            let what = || src.describe(&units[j].cell);
            match g {
                Got::Missing => fills.push(j),
                Got::Cpu => on_cpu.push(j),
                Got::At(r) => {
                    used = used.max(r.end);
                    match gpu_input(src, chain, slot, r, &what)? {
                        Some(input) => {
                            inputs.push(input);
                            outputs.push(j * stride..j * stride + src.cell_bytes);
                        }
                        None => on_cpu.push(j),
                    }
                }
            }
        }
        used
    };
    // Units decoded on the CPU go straight to their place in the decoded scratch;
    // the stream is idle first so no earlier placement still reads that scratch.
    if !on_cpu.is_empty() {
        lane.finish()?;
        let mut host = crate::memory::zeroed_vec(src.cell_bytes)?;
        for &j in &on_cpu {
            src.decode(&units[j].cell, &mut host)?;
            // In stored order, like nvCOMP's output: the swap below covers every unit.
            if let Some(w) = chain.swap {
                crate::memory::host_ops::swap_in_place(&mut host, w);
            }
            decoded.copy_from_host(j * stride, &host)?;
        }
    }
    // The fill value in stored order too, for the same reason.
    let mut fill_value = src.fill.clone();
    if let Some(w) = chain.swap {
        crate::memory::host_ops::swap_in_place(&mut fill_value, w);
    }
    let t1 = std::time::Instant::now();
    lane.submit(used, |stream, staged| {
        for &j in &fills {
            fill(
                &decoded.slice(j * stride, src.cell_bytes)?,
                &fill_value,
                Some(stream),
            )?;
        }
        batch
            .decompress(stream, codec, staged, &inputs, decoded, &outputs)
            .map_err(|e| name_chunk(e, src, units, &outputs, stride))?;
        if let Some(w) = chain.swap {
            byteswap(&decoded.slice(0, units.len() * stride)?, w, Some(stream))?;
        }
        place_units(src, units, stride, stream, decoded, out)
    })?;
    let us = |d: std::time::Duration| d.as_micros().min(u64::MAX as u128) as u64;
    counts
        .gpu_read_us
        .fetch_add(us(t1 - t0), std::sync::atomic::Ordering::Relaxed);
    counts
        .gpu_decode_us
        .fetch_add(us(t1.elapsed()), std::sync::atomic::Ordering::Relaxed);
    for _ in &on_cpu {
        note(counts, true, src.cell_bytes);
    }
    let on_gpu = (units.len() - on_cpu.len()) as u64;
    counts
        .gpu_units
        .fetch_add(on_gpu, std::sync::atomic::Ordering::Relaxed);
    counts.decoded_bytes.fetch_add(
        on_gpu * src.cell_bytes as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    counts
        .missing_units
        .fetch_add(fills.len() as u64, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// nvCOMP names the failing chunk by its index in the call: name it by its key.
fn name_chunk(
    e: Error,
    src: &Source<'_>,
    units: &[Unit],
    outputs: &[Range<usize>],
    stride: usize,
) -> Error {
    let msg = e.to_string();
    // The call's chunk i is the unit whose decoded range is outputs[i].
    let named: Vec<String> = outputs
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            msg.contains(&format!("chunk {i} ")) || msg.contains(&format!("chunk {i}:"))
        })
        .filter_map(|(_, r)| units.get(r.start / stride))
        .map(|u| src.describe(&u.cell))
        .collect();
    let which = if named.is_empty() {
        units
            .iter()
            .map(|u| src.describe(&u.cell))
            .take(3)
            .collect::<Vec<_>>()
            .join(", ")
            + if units.len() > 3 { ", ..." } else { "" }
    } else {
        named.join(", ")
    };
    Error::Malformed(format!("GPU decode of {which}: {msg}"))
}
