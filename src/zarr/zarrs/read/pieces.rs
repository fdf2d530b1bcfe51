//! Device reads of large units in pieces: a CPU worker decodes a unit of a streamed
//! chain (uncompressed, zstd or gzip from a filesystem store, see `stream`) one
//! page-locked slot at a time. Each full slot goes by DMA to its place in a device
//! buffer of the whole unit while the worker decodes the next piece into the lane's
//! other slot, and the unit's placement runs on the device from that buffer, queued on
//! the same stream after its last piece.
//!
//! Against decoding the whole unit into a slot as large as the unit and sending it in
//! one DMA (`pipeline::cpu_worker`, which units that fit a slot still take):
//! * the slot bounds the page-locked memory a worker holds, whatever the chunk size:
//!   two slots, not two units (16 workers and 16 MiB chunks: 128 MiB, not 512);
//! * the DMAs run while the unit is decoded, so a worker's last unit reaches the device
//!   one piece after its decode ends, not one unit after (16 MiB uncompressed chunks,
//!   4 MiB slots: 30.6 GB/s before, about 40 now).
//!
//! Pieces much smaller than a MiB are slower: each DMA has a cost of its own, and 16
//! workers' small copies queue behind each other on the lanes' few streams.

use std::sync::atomic::Ordering;

use super::pipeline::{Run, note};
use super::place::place_units;
use super::source::Source;
use super::stream::Sink;
use crate::cuda::{Context, DeviceBuffer, Stream, UploadLane};
use crate::error::{Error, Result};
use crate::memory::zeroed_vec;

/// The lane's slots as a [`Sink`]: each piece is decoded into the current slot and
/// sent to its offset in `dst`, the device buffer of the unit.
struct LaneSink<'a> {
    lane: &'a mut UploadLane,
    piece: usize,
    dst: &'a DeviceBuffer,
}

impl Sink for LaneSink<'_> {
    fn buf(&mut self) -> Result<&mut [u8]> {
        let piece = self.piece;
        self.lane
            .slot()?
            .get_mut(..piece)
            .ok_or_else(|| Error::invalid("read engine: a staging slot smaller than a piece"))
    }

    fn put(&mut self, offset: usize, len: usize) -> Result<()> {
        self.lane.upload_to(len, self.dst, offset)
    }
}

/// One CPU worker of a device read whose units decode in pieces of `piece` bytes (a
/// multiple of 256): decodes its claims' units until the work runs out. Does nothing
/// when no work is left or (unless `wait`) the pool has no room for its lane.
/// `stream`: the lane's (shared) stream, else one of its own. `lane`: staging the
/// worker already holds (a GPU worker's, now decoding on the CPU), used when its slots
/// hold a piece.
#[allow(clippy::too_many_arguments)]
pub(crate) fn worker(
    src: &Source<'_>,
    run: &Run<'_>,
    out: &DeviceBuffer,
    ctx: &Context,
    piece: usize,
    wait: bool,
    stream: Option<&Stream>,
    lane: Option<UploadLane>,
    counts: &super::pipeline::Counts,
) -> Result<()> {
    if run.remaining() == 0 {
        return Ok(());
    }
    let lane = match lane.filter(|l| l.slot_bytes() >= piece) {
        Some(l) => Some(l),
        None => match stream {
            Some(s) => UploadLane::bare_on(ctx, piece, wait, s)?,
            None => UploadLane::bare(ctx, piece, wait)?,
        },
    };
    let Some(mut lane) = lane else {
        return Ok(());
    };
    counts.workers.fetch_add(1, Ordering::Relaxed);
    // One unit's device buffer: the next unit's pieces are queued on the same stream
    // after this unit's placement, so one buffer serves every unit of the worker.
    let unit = ctx.allocate_pooled(src.cell_bytes, Some(lane.stream()))?;
    // The worker's open chunk (shard) file, for this read only.
    let mut last = None;
    // A unit that does not stream (a zstd frame without its size) is decoded whole here.
    let mut whole: Vec<u8> = Vec::new();
    while let Some(b) = run.claim() {
        for u in &run.units[b] {
            let mut sink = LaneSink {
                lane: &mut lane,
                piece,
                dst: &unit,
            };
            let stored = match super::stream::decode(src, &u.cell, &mut last, &mut sink)? {
                Some(stored) => stored,
                None => {
                    if whole.is_empty() {
                        whole = zeroed_vec(src.cell_bytes)?;
                    }
                    let stored = src.decode_in(&u.cell, &mut whole, &mut last)?;
                    for (k, part) in whole.chunks(piece).enumerate() {
                        lane.slot()?[..part.len()].copy_from_slice(part);
                        lane.upload_to(part.len(), &unit, k * piece)?;
                    }
                    stored
                }
            };
            note(counts, stored, src.cell_bytes);
            place_units(
                src,
                std::slice::from_ref(u),
                src.cell_bytes,
                lane.stream(),
                &unit,
                out,
            )?;
        }
    }
    lane.finish()
}
