//! What a DoGet stream's producer thread does: for a chunk ticket, read its chunks with
//! the read engine a batch at a time (about [`ServerConfig::batch_bytes`] each, at least
//! one chunk), build each [`ChunkBatch`] and encode it; for a batch ticket, encode the
//! stored batches (device batches cross PCIe once, into page-locked memory).
//!
//! [`ServerConfig::batch_bytes`]: super::ServerConfig::batch_bytes

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use tonic::Status;

use super::encode::IpcStreamEncoder;
use super::info::ArraySource;
use super::registry::Entry;
use super::status::to_status;
use super::stream::StreamProducer;
use super::ticket::ChunkRegion;
use devbuf_core::arrow::ChunkBatch;
use devbuf_core::zarr::BufferPrototype;

/// Most chunks in one batch (however small the chunks).
const MAX_CHUNKS_PER_BATCH: u64 = 1 << 16;

/// Streams chunks `range` of `region` of `src`.
pub(crate) fn chunks(
    src: ArraySource,
    region: ChunkRegion,
    range: Range<u64>,
    batch_bytes: usize,
    root: Option<PathBuf>,
    sink: &mut StreamProducer,
) -> Result<(), Status> {
    let hide = root.as_deref();
    let st = |e: devbuf_core::Error| to_status(&e, hide);
    let mut enc = IpcStreamEncoder::new().map_err(st)?;
    if !sink.send(enc.schema(&src.schema)) {
        return Ok(());
    }
    let per = (batch_bytes as u64 / src.row_bytes.max(1)).clamp(1, MAX_CHUNKS_PER_BATCH);
    let mut i = range.start;
    while i < range.end {
        let j = range.end.min(i.saturating_add(per));
        let coords = (i..j)
            .map(|l| region.coords(l))
            .collect::<devbuf_core::Result<Vec<_>>>()
            .map_err(st)?;
        let chunks = src
            .array
            .read_chunks(&coords)
            .to(&BufferPrototype::Host)
            .map_err(|e| st(e.context(format_args!("reading {:?}", src.path))))?;
        let batch = ChunkBatch::from_chunks(
            &src.grid,
            coords.iter().zip(chunks.iter()),
            &BufferPrototype::Host,
        )
        .map_err(st)?;
        drop(chunks);
        let rb = batch.batch().to_host().map_err(st)?;
        drop(batch);
        for fd in enc.host_batch(&rb).map_err(st)? {
            if !sink.send(fd) {
                return Ok(());
            }
        }
        i = j;
    }
    Ok(())
}

/// Streams batches `range` of a registered entry.
pub(crate) fn batches(
    name: &str,
    entry: Arc<Entry>,
    range: Range<u64>,
    sink: &mut StreamProducer,
) -> Result<(), Status> {
    let n = entry.batches.len() as u64;
    if range.end > n {
        return Err(Status::invalid_argument(format!(
            "the ticket asks for batches {}..{} of {name:?}, which has {n} (was it replaced \
             since GetFlightInfo?)",
            range.start, range.end
        )));
    }
    let st = |e: devbuf_core::Error| to_status(&e, None);
    let mut enc = IpcStreamEncoder::new().map_err(st)?;
    if !sink.send(enc.schema(&entry.schema)) {
        return Ok(());
    }
    for b in &entry.batches[range.start as usize..range.end as usize] {
        for fd in enc.batch(b).map_err(st)? {
            if !sink.send(fd) {
                return Ok(());
            }
        }
    }
    Ok(())
}
