//! Arrow IPC encoding of batches whose buffers already live somewhere (device memory,
//! or host memory for the tests): the flatbuffer metadata is built on the host from the
//! arrays' structure, and the body is assembled by copying each buffer into place — for
//! a [`DeviceRecordBatch`] with device-to-device copies, so the data never crosses PCIe.
//!
//! The output is one encapsulated `RecordBatch` message (continuation marker, metadata
//! length, flatbuffer `Message` padded to 8 bytes, body with 64-byte aligned buffers),
//! the same format [`serialize_record_batch`](super::serialize_record_batch) writes for a
//! batch without dictionaries, readable by [`read_record_batch`](super::read_record_batch)
//! and any Arrow IPC reader.

use arrow_ipc::r#gen::Message as fb;
use arrow_ipc::r#gen::Schema as sc;
use arrow_schema::DataType;

use super::device::{ByteLen, Parts};
use super::ipc_format::DeviceRecordBatch;
use crate::cuda::DeviceBuffer;
use crate::error::{Error, Result};

/// Alignment of every buffer in the body.
const ALIGN: usize = 64;

/// Where each buffer goes.
pub(crate) struct IpcBodyPlan<'a, B> {
    /// Continuation marker, metadata length, flatbuffer and padding.
    pub prefix: Vec<u8>,
    /// `(source buffer, body offset)`; the whole source buffer is copied.
    pub pieces: Vec<(&'a B, usize)>,
    /// Bytes of body (a multiple of 8).
    pub body_len: usize,
}

impl<B> IpcBodyPlan<'_, B> {
    /// Total length of the message.
    pub fn len(&self) -> usize {
        self.prefix.len() + self.body_len
    }
}

fn pad(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

fn refuse(dt: &DataType, why: &str) -> Error {
    Error::invalid(format!(
        "cannot serialize a {dt} column from device memory without a host round trip: {why}; \
         copy it to the host and serialize that (serialize_record_batch(&Batch::Host(b.to_host()?), ..))"
    ))
}

fn walk<'a, B: ByteLen>(
    p: &'a Parts<B>,
    nodes: &mut Vec<fb::FieldNode>,
    bufs: &mut Vec<Option<&'a B>>,
) -> Result<()> {
    let dt = &p.data_type;
    match dt {
        DataType::Dictionary(_, _) => {
            return Err(refuse(dt, "dictionaries need dictionary messages"));
        }
        DataType::Union(_, _) => {
            return Err(refuse(
                dt,
                "union columns (no validity buffer in IPC v5) are not implemented by the \
                 device serializer",
            ));
        }
        DataType::RunEndEncoded(_, _) => {
            return Err(refuse(
                dt,
                "run-end encoded columns (no validity buffer in IPC v5) are not implemented \
                 by the device serializer",
            ));
        }
        DataType::Utf8View | DataType::BinaryView => {
            return Err(refuse(
                dt,
                "view types need the message's variadic buffer counts, which the device \
                 serializer does not write",
            ));
        }
        DataType::ListView(_) | DataType::LargeListView(_) => {
            return Err(refuse(
                dt,
                "list view columns are not implemented by the device serializer",
            ));
        }
        _ => {}
    }
    if p.offset != 0 {
        return Err(Error::invalid(format!(
            "cannot serialize a sliced {dt} column (offset {}) from device memory: Arrow IPC \
             has no array offset, and rebasing needs the host; slice after reading, or copy \
             the column to the host first",
            p.offset
        )));
    }
    let len = i64::try_from(p.len).map_err(|_| Error::invalid("array length overflows i64"))?;
    let nulls =
        i64::try_from(p.null_count).map_err(|_| Error::invalid("null count overflows i64"))?;
    nodes.push(fb::FieldNode::new(len, nulls));
    if matches!(dt, DataType::Null) {
        return Ok(());
    }
    bufs.push(p.validity.as_ref());
    bufs.extend(p.buffers.iter().map(Some));
    for c in &p.children {
        walk(c, nodes, bufs)?;
    }
    Ok(())
}

/// Plans the message for a batch of `num_rows` rows with these columns.
pub(crate) fn plan<B: ByteLen>(
    num_rows: usize,
    columns: &[Parts<B>],
) -> Result<IpcBodyPlan<'_, B>> {
    let mut nodes = Vec::new();
    let mut bufs = Vec::new();
    for c in columns {
        walk(c, &mut nodes, &mut bufs)?;
    }
    let mut pieces = Vec::new();
    let mut specs = Vec::with_capacity(bufs.len());
    let mut offset = 0usize;
    for b in bufs {
        match b {
            Some(b) if b.byte_len() > 0 => {
                let n = b.byte_len();
                specs.push(sc::Buffer::new(offset as i64, n as i64));
                pieces.push((b, offset));
                offset = offset
                    .checked_add(pad(n, ALIGN))
                    .ok_or_else(|| Error::invalid("message body size overflows"))?;
            }
            _ => specs.push(sc::Buffer::new(offset as i64, 0)),
        }
    }
    let body_len = offset;
    let mut fbb = flatbuffers::FlatBufferBuilder::new();
    let nodes = fbb.create_vector(&nodes);
    let buffers = fbb.create_vector(&specs);
    let mut rb = fb::RecordBatchBuilder::new(&mut fbb);
    rb.add_length(num_rows as i64);
    rb.add_nodes(nodes);
    rb.add_buffers(buffers);
    let rb = rb.finish();
    let mut mb = fb::MessageBuilder::new(&mut fbb);
    mb.add_version(sc::MetadataVersion::V5);
    mb.add_header_type(fb::MessageHeader::RecordBatch);
    mb.add_header(rb.as_union_value());
    mb.add_bodyLength(body_len as i64);
    let m = mb.finish();
    fbb.finish(m, None);
    let meta = fbb.finished_data();
    // Continuation marker + length + flatbuffer, padded so the body starts 64-aligned.
    let meta_len = pad(8 + meta.len(), ALIGN) - 8;
    let mut prefix = Vec::with_capacity(8 + meta_len);
    prefix.extend_from_slice(&[0xff; 4]);
    prefix.extend_from_slice(&(meta_len as i32).to_le_bytes());
    prefix.extend_from_slice(meta);
    prefix.resize(8 + meta_len, 0);
    Ok(IpcBodyPlan {
        prefix,
        pieces,
        body_len,
    })
}

/// Serializes a device-resident batch as one Arrow IPC `RecordBatch` message in new
/// device memory on its device, without copying its data through the host:
/// [`serialize_record_batch`](super::serialize_record_batch)'s device-to-device path
/// (its documentation says which columns are refused).
pub(crate) fn serialize_device_record_batch(batch: &DeviceRecordBatch) -> Result<DeviceBuffer> {
    let parts: Vec<Parts<DeviceBuffer>> = batch.columns().iter().map(|c| c.to_parts()).collect();
    let plan = plan(batch.num_rows(), &parts)?;
    let ctx = batch.message().context().clone();
    let out = ctx.allocate(plan.len())?;
    out.copy_from_host(0, &plan.prefix)?;
    let body = out.slice(plan.prefix.len(), plan.body_len)?;
    // Padding bytes are zero, as writers are asked to.
    body.fill(0)?;
    for (src, offset) in &plan.pieces {
        body.copy_from_device(*offset, src)?;
    }
    ctx.synchronize()?;
    Ok(out)
}

/// The host twin of `serialize_device_record_batch` (same plan, host buffers): lets CI
/// check the encoding without a GPU. Only with the feature `test-support`; not part of
/// the API.
#[cfg(feature = "test-support")]
#[doc(hidden)]
pub fn serialize_like_device(batch: &arrow_array::RecordBatch) -> Result<Vec<u8>> {
    let parts = batch
        .columns()
        .iter()
        .map(|c| Parts::from_array_data(&c.to_data()))
        .collect::<Result<Vec<_>>>()?;
    let plan = plan(batch.num_rows(), &parts)?;
    let mut out = vec![0u8; plan.len()];
    out[..plan.prefix.len()].copy_from_slice(&plan.prefix);
    for (src, offset) in &plan.pieces {
        let at = plan.prefix.len() + offset;
        out[at..at + src.len()].copy_from_slice(src.as_slice());
    }
    Ok(out)
}
