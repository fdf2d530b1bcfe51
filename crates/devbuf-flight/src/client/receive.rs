//! Received messages into host or device record batches.
//!
//! On the host a batch's arrays are zero-copy views of the received body (arrow-ipc
//! copies only buffers it finds misaligned for their type). Into a device, the message
//! is re-encapsulated (its header, padded to 64 bytes, then the body) into device
//! memory: the body goes through the transfer engine, which stages ordinary memory
//! through page-locked buffers at page-locked speed — one copy per batch, no other host
//! copy — and the columns are zero-copy slices of that device message
//! (`read_device_record_batch`). Batches with dictionary columns are decoded on the host
//! and then uploaded (`serialize_record_batch_on`).

use arrow_flight::FlightData;
use arrow_ipc::MessageHeader;
use arrow_schema::{DataType, SchemaRef};

use super::super::decode::{Decoded, IpcStreamDecoder, header_type};
use super::super::encode::{Batch, message_prefix};
use devbuf_core::__private::arrow::read_device_record_batch;
use devbuf_core::arrow::DeviceRecordBatch;
use devbuf_core::arrow::serialize_record_batch_on;
use devbuf_core::cuda::{Context, DeviceBuffer};
use devbuf_core::error::{Error, Result};

/// Whether a data type holds dictionaries anywhere.
fn has_dictionary(dt: &DataType) -> bool {
    match dt {
        DataType::Dictionary(_, _) => true,
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => has_dictionary(f.data_type()),
        DataType::Struct(fs) => fs.iter().any(|f| has_dictionary(f.data_type())),
        DataType::Union(fs, _) => fs.iter().any(|(_, f)| has_dictionary(f.data_type())),
        DataType::RunEndEncoded(_, v) => has_dictionary(v.data_type()),
        _ => false,
    }
}

/// Turns one endpoint's messages into batches in host memory or on a device.
pub(crate) struct Receiver {
    decoder: IpcStreamDecoder,
    ctx: Option<Context>,
    dictionaries: bool,
}

impl Receiver {
    /// A receiver of batches of `schema` into `ctx`'s memory (`None`: the host).
    pub(crate) fn new(schema: SchemaRef, ctx: Option<Context>) -> Receiver {
        Receiver {
            dictionaries: schema
                .fields()
                .iter()
                .any(|f| has_dictionary(f.data_type())),
            decoder: IpcStreamDecoder::with_schema(schema),
            ctx,
        }
    }

    /// The schema the batches have.
    fn schema(&self) -> Result<SchemaRef> {
        self.decoder
            .schema()
            .cloned()
            .ok_or_else(|| Error::Malformed("Flight message: a batch before the schema".into()))
    }

    /// One message: a batch, or `None` for the schema and dictionary messages. Device
    /// batches get an allocation of their own, from the context's stream-ordered pool
    /// ([`Context::allocate_pooled`]; `cuMemAlloc` where the device has no pools): a
    /// pooled allocation and free cost about a microsecond where `cuMemAlloc` +
    /// `cuMemFree` cost 75-90 us and synchronise (bench_transfer on the H100).
    pub(crate) fn message(&mut self, fd: &FlightData) -> Result<Option<Batch>> {
        match (&self.ctx, header_type(fd)?) {
            (Some(ctx), MessageHeader::RecordBatch) if !self.dictionaries => {
                let ctx = ctx.clone();
                let need = message_len(fd)?;
                let own = match ctx.allocate_pooled(need, None) {
                    Err(Error::CudaUnavailable { .. }) => ctx.allocate(need)?,
                    other => other?,
                };
                let mut fresh = Some(own);
                Ok(Some(Batch::Device(upload(
                    fd,
                    self.schema()?,
                    &ctx,
                    &mut fresh,
                )?)))
            }
            (ctx, _) => match self.decoder.decode(fd)? {
                Decoded::Batch(rb) => Ok(Some(match ctx {
                    None => Batch::Host(rb),
                    Some(ctx) => Batch::Device(read_device_record_batch(
                        &serialize_record_batch_on(&rb, ctx)?,
                        rb.schema(),
                    )?),
                })),
                _ => Ok(None),
            },
        }
    }

    /// One message into a device batch whose message lives in `scratch` (grown when too
    /// small, reused otherwise): for batches used and dropped before the next message.
    /// `None` for the schema and dictionary messages.
    pub(crate) fn message_into(
        &mut self,
        fd: &FlightData,
        ctx: &Context,
        scratch: &mut Option<DeviceBuffer>,
    ) -> Result<Option<DeviceRecordBatch>> {
        if header_type(fd)? == MessageHeader::RecordBatch && !self.dictionaries {
            return upload(fd, self.schema()?, ctx, scratch).map(Some);
        }
        match self.decoder.decode(fd)? {
            Decoded::Batch(rb) => Ok(Some(read_device_record_batch(
                &serialize_record_batch_on(&rb, ctx)?,
                rb.schema(),
            )?)),
            _ => Ok(None),
        }
    }
}

/// The bytes of `fd` re-encapsulated: its header's prefix (padded) and its body.
fn message_len(fd: &FlightData) -> Result<usize> {
    message_prefix(&fd.data_header)?
        .len()
        .checked_add(fd.data_body.len())
        .ok_or_else(|| Error::invalid("a message too large to hold"))
}

/// Copies a record batch message into device memory (into `scratch` when it is large
/// enough, else into a new allocation left in `scratch`) and reads it there.
fn upload(
    fd: &FlightData,
    schema: SchemaRef,
    ctx: &Context,
    scratch: &mut Option<DeviceBuffer>,
) -> Result<DeviceRecordBatch> {
    let prefix = message_prefix(&fd.data_header)?;
    let need = message_len(fd)?;
    let buf = match scratch {
        Some(b) if b.len() >= need => b.clone(),
        _ => {
            *scratch = None; // free the old one first
            let b = ctx.allocate(need)?;
            *scratch = Some(b.clone());
            b
        }
    };
    let msg = buf.slice(0, need)?;
    msg.copy_from_host(0, &prefix)?;
    msg.copy_from_host(prefix.len(), &fd.data_body)?;
    read_device_record_batch(&msg, schema)
}
