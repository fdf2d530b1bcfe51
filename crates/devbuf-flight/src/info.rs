//! What `GetFlightInfo` answers: for a zarr array, the chunk-batch schema, the chunk
//! region a selection touches, its totals, and endpoints that cut the region into
//! contiguous ranges of chunks (each on this server or on one of the configured
//! locations); for registered batches, ranges of the stored batches.

use std::ops::Range;

use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
use arrow_schema::SchemaRef;
use tonic::Status;

use super::registry::Entry;
use super::root::Root;
use super::status::{refusal_status, to_status};
use super::ticket::{ChunkRegion, Part};
use devbuf_core::arrow::{ChunkBatch, ChunkGrid};
use devbuf_core::error::Result;
use devbuf_core::zarr::{BufferPrototype, NDBuffer};
use devbuf_zarr::{ReadOptions, ZarrArray};

/// An opened array, as the server serves it.
pub(crate) struct ArraySource {
    pub path: String,
    pub array: ZarrArray,
    pub grid: ChunkGrid,
    pub schema: SchemaRef,
    /// Bytes of one chunk as a batch holds it (coordinates and padded data).
    pub row_bytes: u64,
}

fn usize_of(v: u64) -> std::result::Result<usize, Status> {
    usize::try_from(v).map_err(|_| Status::internal(format!("extent {v} does not fit usize")))
}

impl ArraySource {
    /// Opens the array at `path` under `root`.
    pub(crate) fn open(
        root: &Root,
        path: &str,
        read_options: &ReadOptions,
    ) -> std::result::Result<ArraySource, Status> {
        let hide = Some(root.dir());
        let dir = root.resolve(path).map_err(|r| refusal_status(r, hide))?;
        let mut array = ZarrArray::open(&dir).map_err(|e| to_status(&e, hide))?;
        array
            .set_read_options(read_options.clone())
            .map_err(|e| to_status(&e, hide))?;
        let meta = array.metadata();
        if meta.shape.is_empty() {
            return Err(Status::failed_precondition(format!(
                "{path:?} is a 0-dimensional array: chunk batches need at least one axis"
            )));
        }
        let shape = meta
            .shape
            .iter()
            .map(|&s| usize_of(s))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let chunk = meta
            .chunk_shape
            .iter()
            .map(|&s| usize_of(s))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let grid = ChunkGrid::new(&shape, &chunk, array.dtype())
            .map_err(|e| to_status(&e, hide))?
            .with_fill_value(meta.fill_value);
        let schema = schema_of(&grid).map_err(|e| to_status(&e, hide))?;
        let chunk_bytes = chunk
            .iter()
            .try_fold(array.dtype().element().size() as u64, |a, &c| {
                a.checked_mul(c as u64)
            })
            .ok_or_else(|| Status::internal("chunk size overflows"))?;
        Ok(ArraySource {
            path: path.to_string(),
            row_bytes: chunk_bytes.saturating_add(8 * shape.len() as u64),
            array,
            grid,
            schema,
        })
    }

    /// The chunk-grid box a selection (element ranges per axis; the whole array when
    /// `None`) touches; an error naming the axis and the valid range when a range does
    /// not fit the array.
    pub(crate) fn region(
        &self,
        selection: Option<&[Range<u64>]>,
    ) -> std::result::Result<ChunkRegion, Status> {
        let meta = self.array.metadata();
        let (shape, chunk) = (&meta.shape, &meta.chunk_shape);
        let whole: Vec<Range<u64>>;
        let sel = match selection {
            Some(s) => s,
            None => {
                whole = shape.iter().map(|&n| 0..n).collect();
                &whole
            }
        };
        if sel.len() != shape.len() {
            return Err(Status::invalid_argument(format!(
                "a selection of {} axes for {:?}, which has {} (shape {shape:?})",
                sel.len(),
                self.path,
                shape.len()
            )));
        }
        let mut start = Vec::with_capacity(sel.len());
        let mut end = Vec::with_capacity(sel.len());
        for (d, r) in sel.iter().enumerate() {
            if r.start > r.end || r.end > shape[d] {
                return Err(Status::invalid_argument(format!(
                    "selection {}..{} on axis {d} of {:?}: valid is start <= end <= {}",
                    r.start, r.end, self.path, shape[d]
                )));
            }
            if r.start == r.end {
                start.push(0);
                end.push(0);
            } else {
                start.push(r.start / chunk[d]);
                end.push((r.end - 1) / chunk[d] + 1);
            }
        }
        ChunkRegion::new(start, end).map_err(|e| Status::invalid_argument(e.to_string()))
    }

    /// Checks a ticket's region against the array's chunk grid.
    pub(crate) fn check_region(&self, region: &ChunkRegion) -> std::result::Result<(), Status> {
        let grid = &self.array.metadata().grid_shape;
        if region.start().len() != grid.len() || region.end().iter().zip(grid).any(|(e, g)| e > g) {
            return Err(Status::invalid_argument(format!(
                "the ticket's chunk region {:?}..{:?} does not fit the chunk grid {grid:?} of \
                 {:?} (was the array rewritten since GetFlightInfo?)",
                region.start(),
                region.end(),
                self.path
            )));
        }
        Ok(())
    }

    /// The flight of `region`, cut into `endpoints` endpoints over `locations`.
    pub(crate) fn info(
        &self,
        region: &ChunkRegion,
        endpoints: usize,
        locations: &[String],
        descriptor: FlightDescriptor,
    ) -> std::result::Result<FlightInfo, Status> {
        let eps = split(region.len(), endpoints)
            .into_iter()
            .enumerate()
            .map(|(i, range)| {
                let part = Part::Chunks {
                    array: self.path.clone(),
                    region: region.clone(),
                    range,
                };
                endpoint(&part, i, endpoints_of(region.len(), endpoints), locations)
            })
            .collect();
        FlightInfo::new()
            .try_with_schema(&self.schema)
            .map_err(|e| Status::internal(format!("encoding the schema: {e}")))
            .map(|info| {
                info.with_descriptor(descriptor)
                    .with_endpoints(eps)
                    .with_total_records(i64::try_from(region.len()).unwrap_or(i64::MAX))
                    .with_total_bytes(
                        i64::try_from(region.len().saturating_mul(self.row_bytes))
                            .unwrap_or(i64::MAX),
                    )
                    .with_ordered(true)
            })
    }
}

/// The schema of a grid's chunk batches (a batch of no chunks).
pub(crate) fn schema_of(grid: &ChunkGrid) -> Result<SchemaRef> {
    let empty = ChunkBatch::from_chunks(
        grid,
        std::iter::empty::<(Vec<u64>, NDBuffer)>(),
        &BufferPrototype::Host,
    )?;
    Ok(empty.batch().to_host()?.schema())
}

/// How many endpoints `n` items are cut into when `asked` are wanted.
fn endpoints_of(n: u64, asked: usize) -> usize {
    (asked as u64).min(n).max(1) as usize
}

/// `0..n` cut into `parts` contiguous near-equal ranges (fewer when `n` is smaller; none
/// when `n` is 0).
pub(crate) fn split(n: u64, parts: usize) -> Vec<Range<u64>> {
    if n == 0 {
        return Vec::new();
    }
    let p = endpoints_of(n, parts) as u64;
    (0..p)
        .map(|i| {
            let a = (n as u128 * i as u128 / p as u128) as u64;
            let b = (n as u128 * (i as u128 + 1) / p as u128) as u64;
            a..b
        })
        .collect()
}

/// Endpoint `i` of `n`: its ticket, and location `i * L / n` of the `L` locations.
fn endpoint(part: &Part, i: usize, n: usize, locations: &[String]) -> FlightEndpoint {
    let ep = FlightEndpoint::new().with_ticket(Ticket::new(part.encode()));
    if locations.is_empty() {
        return ep;
    }
    let at = (i * locations.len() / n.max(1)).min(locations.len() - 1);
    ep.with_location(locations[at].clone())
}

/// The flight of a registered name: its batches cut into `endpoints` ranges.
pub(crate) fn batch_info(
    name: &str,
    entry: &Entry,
    endpoints: usize,
    locations: &[String],
    descriptor: FlightDescriptor,
) -> std::result::Result<FlightInfo, Status> {
    let n = entry.batches.len() as u64;
    let eps = split(n, endpoints)
        .into_iter()
        .enumerate()
        .map(|(i, range)| {
            let part = Part::Batches {
                name: name.to_string(),
                range,
            };
            endpoint(&part, i, endpoints_of(n, endpoints), locations)
        })
        .collect();
    FlightInfo::new()
        .try_with_schema(&entry.schema)
        .map_err(|e| Status::internal(format!("encoding the schema: {e}")))
        .map(|info| {
            info.with_descriptor(descriptor)
                .with_endpoints(eps)
                .with_total_records(i64::try_from(entry.rows).unwrap_or(i64::MAX))
                .with_total_bytes(i64::try_from(entry.bytes).unwrap_or(i64::MAX))
                .with_ordered(true)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_everything_once() {
        for n in [0u64, 1, 2, 5, 17, 1000] {
            for parts in [1usize, 2, 3, 7, 1024] {
                let s = split(n, parts);
                assert_eq!(s.len() as u64, (parts as u64).min(n));
                let mut next = 0;
                for r in &s {
                    assert_eq!(r.start, next);
                    assert!(r.end > r.start);
                    next = r.end;
                }
                assert_eq!(next, n);
            }
        }
    }
}
