//! The host fast path of [`Client::read`](super::Client::read): a chunk-batch message
//! read straight from its header and body, without building Arrow arrays — a received
//! body is rarely aligned for its types (where it starts in the gRPC buffer is up to
//! the transport), and arrow-ipc would copy it to realign it before the assembly copies
//! it again. Here each chunk's bytes are copied once, from the body into the result.
//!
//! Only the layout a devbuf server sends is taken this way (`coord_*` `UInt64` columns
//! and one fixed-size-list column of a fixed-width element, no nulls, no compression);
//! anything else — booleans (bit-packed), or another layout — returns `None` and goes
//! through the general path.

use arrow_flight::FlightData;
use arrow_ipc::MessageHeader;
use bytes::Bytes;

use devbuf_core::element::ElementType;
use devbuf_core::error::{Error, Result};

/// One received batch of chunks: `rows` chunks, their coordinates (row-major, `ndim`
/// per chunk), and their data (`rows` padded chunks in C order, back to back).
pub(crate) struct ChunkView {
    pub rows: usize,
    pub coords: Vec<u64>,
    pub data: Bytes,
}

fn bad(msg: impl std::fmt::Display) -> Error {
    Error::Malformed(format!("Flight chunk batch: {msg}"))
}

/// Reads a record batch message of `ndim` coordinate columns and chunks of
/// `chunk_elems` elements of `element`; `None` when the message is not such a batch in
/// the layout this path takes (see the module docs).
pub(crate) fn view(
    fd: &FlightData,
    ndim: usize,
    element: ElementType,
    chunk_elems: usize,
) -> Result<Option<ChunkView>> {
    if element == ElementType::Bool {
        return Ok(None);
    }
    let Ok(message) = arrow_ipc::root_as_message(&fd.data_header) else {
        return Ok(None);
    };
    if message.header_type() != MessageHeader::RecordBatch {
        return Ok(None);
    }
    let Some(batch) = message.header_as_record_batch() else {
        return Ok(None);
    };
    if batch.compression().is_some() {
        return Ok(None);
    }
    let (Some(nodes), Some(buffers)) = (batch.nodes(), batch.buffers()) else {
        return Ok(None);
    };
    // coord_0..coord_{n-1}: (validity, values); the list: (validity); its child:
    // (validity, values).
    if nodes.len() != ndim + 2 || buffers.len() != 2 * ndim + 3 {
        return Ok(None);
    }
    let rows = usize::try_from(batch.length()).map_err(|_| bad("a negative row count"))?;
    let body = &fd.data_body;
    let range = |i: usize, want: usize| -> Result<std::ops::Range<usize>> {
        let b = buffers.get(i);
        let (off, len) = (b.offset(), b.length());
        let start = usize::try_from(off).map_err(|_| bad(format!("buffer {i} at {off}")))?;
        let n = usize::try_from(len).map_err(|_| bad(format!("buffer {i} of {len} bytes")))?;
        start
            .checked_add(n)
            .filter(|&e| e <= body.len())
            .ok_or_else(|| {
                bad(format!(
                    "buffer {i} at {off} of {len} bytes lies outside the body of {} bytes",
                    body.len()
                ))
            })?;
        if n < want {
            return Err(bad(format!("buffer {i} holds {n} bytes, needs {want}")));
        }
        Ok(start..start + want)
    };
    let values = rows
        .checked_mul(chunk_elems)
        .ok_or_else(|| bad("the chunk data size overflows"))?;
    for (k, n) in nodes.iter().enumerate() {
        let want = if k == ndim + 1 { values } else { rows };
        if n.null_count() != 0 || usize::try_from(n.length()).ok() != Some(want) {
            return Err(bad(format!(
                "column {k}: {} values with {} nulls (expected {want} without nulls)",
                n.length(),
                n.null_count()
            )));
        }
    }
    let mut coords = vec![0u64; rows * ndim];
    for d in 0..ndim {
        let r = range(2 * d + 1, rows * 8)?;
        for (i, c) in body[r].chunks_exact(8).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            coords[i * ndim + d] = u64::from_le_bytes(b);
        }
    }
    let bytes = values
        .checked_mul(element.size())
        .ok_or_else(|| bad("the chunk data size overflows"))?;
    let data = body.slice(range(2 * ndim + 2, bytes)?);
    Ok(Some(ChunkView { rows, coords, data }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::IpcStreamEncoder;
    use devbuf_core::arrow::{ChunkBatch, ChunkGrid};
    use devbuf_core::zarr::{BufferPrototype, Dtype, NDBuffer, Scalar};

    fn message(dtype: Dtype) -> FlightData {
        let grid = ChunkGrid::new(&[5, 3], &[2, 2], dtype)
            .unwrap()
            .with_fill_value(Scalar::from(1i32));
        let c00 = NDBuffer::create(
            &BufferPrototype::Host,
            &[2, 2],
            dtype,
            devbuf_core::zarr::Order::C,
            Some(Scalar::from(7i32)),
        )
        .unwrap();
        let c21 = NDBuffer::create(
            &BufferPrototype::Host,
            &[1, 1],
            dtype,
            devbuf_core::zarr::Order::C,
            Some(Scalar::from(9i32)),
        )
        .unwrap();
        let b = ChunkBatch::from_chunks(
            &grid,
            [(vec![0u64, 0], c00), (vec![2, 1], c21)],
            &BufferPrototype::Host,
        )
        .unwrap();
        let mut enc = IpcStreamEncoder::new().unwrap();
        enc.host_batch(&b.batch().to_host().unwrap())
            .unwrap()
            .pop()
            .unwrap()
    }

    #[test]
    fn chunk_messages_are_read_in_place_and_checked() {
        let fd = message(Dtype::INT32);
        let v = view(&fd, 2, ElementType::Int32, 4).unwrap().unwrap();
        assert_eq!((v.rows, v.coords.clone()), (2, vec![0, 0, 2, 1]));
        let vals: Vec<i32> = v
            .data
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(vals, vec![7, 7, 7, 7, 9, 1, 1, 1]); // the edge chunk padded with 1
        // Another layout than asked for: an error or not taken, never a wrong view.
        assert!(view(&fd, 3, ElementType::Int32, 4).unwrap().is_none());
        assert!(view(&fd, 2, ElementType::Int32, 5).is_err());
        assert!(
            view(&message(Dtype::BOOL), 2, ElementType::Bool, 4)
                .unwrap()
                .is_none()
        );
        let mut short = fd.clone();
        short.data_body = short.data_body.slice(0..140); // coordinates, but not all the data
        assert!(view(&short, 2, ElementType::Int32, 4).is_err());
    }
}
