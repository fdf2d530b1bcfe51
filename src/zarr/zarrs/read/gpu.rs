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
use crate::cuda::kernels::ops::{byteswap_on, fill_on};
use crate::cuda::nvcomp::{DecompressBatch, GpuCodec};
use crate::cuda::{Context, DeviceBuffer, UploadLane};
use crate::error::{Error, Result};

/// Decoded bytes a GPU worker aims to decode per nvCOMP call.
pub(crate) const GPU_CLAIM_BYTES: usize = 16 << 20;

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
    let decoded = ctx.allocate_pooled_on(per * stride, lane.stream())?;
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
    let used = {
        let slot = lane.slot()?;
        let mut at = 0usize;
        for (j, u) in units.iter().enumerate() {
            let what = || src.describe(&u.cell);
            match src.stored_into(&u.cell, &mut slot[at..])? {
                StoredLen::Missing => fills.push(j),
                StoredLen::TooLarge => on_cpu.push(j),
                StoredLen::Fits(n) => {
                    let mut body = at..at + n;
                    if chain.crc32c {
                        let inner = codec::strip_crc32c(&slot[body.clone()], &what)?;
                        body = at..at + inner.len();
                    }
                    if chain.compression == Compression::Gzip {
                        let r =
                            codec::gzip_deflate_range(&slot[body.clone()], src.cell_bytes, &what)?;
                        body = at + r.start..at + r.end;
                    }
                    inputs.push(body);
                    outputs.push(j * stride..j * stride + src.cell_bytes);
                    at = (at + n).next_multiple_of(16);
                }
            }
        }
        at
    };
    // Units decoded on the CPU go straight to their place in the decoded scratch;
    // the stream is idle first so no earlier placement still reads that scratch.
    if !on_cpu.is_empty() {
        lane.finish()?;
        let mut host = crate::zarr::memory::zeroed_vec(src.cell_bytes)?;
        for &j in &on_cpu {
            src.decode(&units[j].cell, &mut host)?;
            decoded.copy_from_host(j * stride, &host)?;
        }
    }
    lane.submit(used, |stream, staged| {
        for &j in &fills {
            fill_on(
                stream,
                &decoded.slice(j * stride, src.cell_bytes)?,
                &src.fill,
            )?;
        }
        batch
            .decompress(stream, codec, staged, &inputs, decoded, &outputs)
            .map_err(|e| name_chunk(e, src, units, &outputs, stride))?;
        if let Some(w) = chain.swap {
            byteswap_on(stream, &decoded.slice(0, units.len() * stride)?, w)?;
        }
        place_units(src, units, stride, stream, decoded, out)
    })?;
    for j in 0..units.len() {
        let missing = fills.contains(&j);
        let cpu = on_cpu.contains(&j);
        if cpu {
            note(counts, true, src.cell_bytes);
        } else {
            counts
                .gpu_units
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            counts
                .decoded_bytes
                .fetch_add(src.cell_bytes as u64, std::sync::atomic::Ordering::Relaxed);
            if missing {
                counts
                    .missing_units
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
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
