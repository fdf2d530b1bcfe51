//! Device reads of large uncompressed units in pieces: a CPU worker reads a unit larger
//! than a slot (uncompressed, from a filesystem store, see `stream`) one page-locked
//! piece at a time. Each piece goes by DMA to its place in a device buffer of the whole
//! unit while the worker reads the next piece into the lane's other slot, and the
//! unit's placement runs on the device from that buffer, queued on the same stream
//! after its last piece.
//!
//! Against reading the whole unit into a slot as large as the unit and sending it in
//! one DMA (`pipeline::cpu_worker`, which the other units take):
//! * the DMAs run while the unit is read, so a worker's last unit reaches the device
//!   one piece after its read ends, not one unit after. Measured on the GPU machine (16
//!   workers, 512 MiB, interleaved with whole units in three calls): 16 MiB chunks
//!   26.7-31.4 GB/s whole, 32.5-40.7 in pieces of 2 MiB (16-38% more in the same call);
//!   pieces of 1 MiB 31.5-34.7, of 4 MiB 31.4-35.9, of 256 KiB 16.7 (each DMA has a
//!   cost of its own, and 16 workers' copies queue on the lanes' few streams);
//! * the slot bounds the page-locked memory a worker holds, whatever the chunk size.
//!
//! Compressed units are not sent in pieces: the streaming zstd decoder writes through a
//! window buffer of its own, one more copy than decoding the whole unit straight into
//! a slot, and 16 MiB zstd-1 chunks read 5-20% slower in 4 MiB pieces (equal in 512 KiB
//! pieces, which stay in the cache, but no faster either); gzip was no faster.

use std::sync::atomic::Ordering;

use super::codec::Compression;
use super::incremental::PieceSink;
use super::place::place_units;
use super::source::ZarrSource;
use super::work::DeviceWork;
use devbuf_core::__private::UploadLane;
use devbuf_core::cuda::{Context, DeviceBuffer, Stream};
use devbuf_core::error::{Error, Result};

/// Largest piece: see the measurements above.
const PIECE: usize = 2 << 20;

/// Whether a device read with slots of `slot_target` bytes sends `src`'s units in
/// pieces: uncompressed units larger than a slot that stream (see `incremental::streams`).
pub(crate) fn applies(src: &ZarrSource<'_>, slot_target: usize) -> bool {
    src.cell_bytes > slot_target
        && super::incremental::streams(src, 0)
        && src
            .chain()
            .is_some_and(|c| c.compression == Compression::None)
}

/// Workers of a read in pieces: each holds a device buffer of one unit, and together
/// they take at most a quarter of the device's free memory (at least one worker).
pub(crate) fn max_workers(ctx: &Context, cell_bytes: usize) -> usize {
    let room = ctx.free_memory().unwrap_or(0) / 4;
    (room / cell_bytes.max(1)).max(1)
}

/// Bytes of a piece with slots of `slot_target` bytes: the slot, at most [`PIECE`],
/// a multiple of 256.
pub(crate) fn piece_bytes(slot_target: usize) -> usize {
    slot_target.min(PIECE).next_multiple_of(256).max(256)
}

/// The lane's slots as a [`PieceSink`]: each piece is decoded into the current slot and
/// sent to its offset in `dst`, the device buffer of the unit.
struct LaneSink<'a> {
    lane: &'a mut UploadLane,
    piece: usize,
    dst: &'a DeviceBuffer,
}

impl PieceSink for LaneSink<'_> {
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

/// One CPU worker of a device read whose units go in pieces of `piece` bytes (a
/// multiple of 256, see [`piece_bytes`]): sends its claims' units until the work runs
/// out. Does nothing when no work is left or (unless `wait`) the pool has no room for
/// its lane. `stream`: the lane's (shared) stream, else one of its own. `lane`: staging the
/// worker already holds (a GPU worker's, now decoding on the CPU), used when its slots
/// hold a piece.
pub(crate) fn worker(
    work: DeviceWork<'_>,
    piece: usize,
    wait: bool,
    stream: Option<&Stream>,
    lane: Option<UploadLane>,
) -> Result<()> {
    let DeviceWork {
        src,
        queue: run,
        out,
        ctx,
        counts,
    } = work;
    let lane = work.cpu_lane(lane, piece, wait, stream, false)?;
    let Some(mut lane) = lane else {
        return Ok(());
    };
    // One unit's device buffer: the next unit's pieces are queued on the same stream
    // after this unit's placement, so one buffer serves every unit of the worker. The
    // first worker must have it; the others join only when the device has room (the
    // read bounds their number by free memory too, see `max_workers`).
    let unit = match ctx.allocate_pooled(src.cell_bytes, Some(lane.stream())) {
        Ok(u) => u,
        Err(Error::OutOfMemory { .. }) if !wait => return Ok(()),
        Err(e) => return Err(e),
    };
    counts.workers.fetch_add(1, Ordering::Relaxed);
    // The worker's open chunk (shard) file, for this read only.
    let mut last = None;
    while let Some(b) = run.claim() {
        for u in &run.units[b] {
            let mut sink = LaneSink {
                lane: &mut lane,
                piece,
                dst: &unit,
            };
            // Uncompressed units always stream (only a zstd frame without its size
            // does not, and `applies` keeps compressed chains out).
            let stored = super::incremental::decode(src, &u.cell, &mut last, &mut sink)?
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "{}: read engine: a unit sent in pieces did not stream",
                        src.describe(&u.cell)
                    ))
                })?;
            counts.note_cpu_unit(stored, src.cell_bytes);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ZarrArray, fixtures};

    #[test]
    fn only_uncompressed_units_larger_than_a_slot_go_in_pieces() {
        let source = |name: &str| ZarrArray::open(fixtures::path(name)).unwrap();
        let none = source("v3_float32_none.zarr");
        let none = none.source().unwrap();
        let n = none.cell_bytes;
        assert!(n > 1, "the fixture's chunks: {n} bytes");
        assert!(applies(&none, n - 1));
        assert!(applies(&none, 0));
        assert!(!applies(&none, n), "a unit that fits a slot is read whole");
        for name in [
            "v3_float32_zstd.zarr",
            "v3_float32_gzip.zarr",
            "v3_float32_blosc.zarr",
        ] {
            let a = source(name);
            let src = a.source().unwrap();
            assert!(
                !applies(&src, 256),
                "{name}: compressed units are decoded whole"
            );
        }
        assert_eq!(piece_bytes(4 << 20), 2 << 20);
        assert_eq!(piece_bytes(1000), 1024);
        assert_eq!(piece_bytes(0), 256);
        assert_eq!(piece_bytes(usize::MAX), 2 << 20);
    }
}
