//! Flight messages back into record batches, on either side (DoPut on the server, DoGet
//! on the client): the schema message, dictionary batches, record batches. The body
//! stays zero-copy where arrow-ipc can use it in place (buffers it finds misaligned
//! for their type are copied); every array is validated; malformed input is an error
//! naming what was wrong, and a panic inside arrow-ipc on hostile input is caught and
//! reported as an error too.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_buffer::Buffer;
use arrow_flight::FlightData;
use arrow_ipc::MessageHeader;
use arrow_schema::{Schema, SchemaRef};

use devbuf_core::error::{Error, Result};

fn malformed(msg: impl std::fmt::Display) -> Error {
    Error::Malformed(format!("Flight message: {msg}"))
}

/// Runs `f`, turning a panic into an error.
pub(crate) fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = devbuf_core::__private::panic_message(p.as_ref());
            Err(malformed(format!("{what}: the decoder panicked: {msg}")))
        }
    }
}

/// What one message was.
pub(crate) enum Decoded {
    /// The schema (the first message of a stream).
    Schema(SchemaRef),
    /// A dictionary batch (kept for the record batches that follow).
    Dictionary,
    /// A record batch.
    Batch(RecordBatch),
}

/// The header type of a message (checked flatbuffer), with its version.
pub(crate) fn header_type(fd: &FlightData) -> Result<MessageHeader> {
    let m = arrow_ipc::root_as_message(&fd.data_header)
        .map_err(|e| malformed(format!("the header is not an IPC Message flatbuffer: {e}")))?;
    Ok(m.header_type())
}

/// Checks that every buffer a message's header names lies inside its body (arrow-ipc
/// slices them unchecked, with a panic past the end).
fn check_buffers<'a>(
    buffers: Option<impl Iterator<Item = &'a arrow_ipc::Buffer>>,
    body: usize,
    what: &str,
) -> Result<()> {
    for (i, b) in buffers.into_iter().flatten().enumerate() {
        let (off, len) = (b.offset(), b.length());
        let end = off.checked_add(len);
        if off < 0 || len < 0 || end.is_none_or(|e| e as u64 > body as u64) {
            return Err(malformed(format!(
                "{what}: buffer {i} at offset {off} of {len} bytes lies outside the body of \
                 {body} bytes"
            )));
        }
    }
    Ok(())
}

/// Decodes the messages of one stream in order.
#[derive(Default)]
pub(crate) struct IpcStreamDecoder {
    schema: Option<SchemaRef>,
    dictionaries: HashMap<i64, ArrayRef>,
}

impl IpcStreamDecoder {
    /// A decoder that already knows the schema (from `GetFlightInfo`); a schema message
    /// in the stream must then equal it.
    pub(crate) fn with_schema(schema: SchemaRef) -> IpcStreamDecoder {
        IpcStreamDecoder {
            schema: Some(schema),
            dictionaries: HashMap::new(),
        }
    }

    /// The schema, once known.
    pub(crate) fn schema(&self) -> Option<&SchemaRef> {
        self.schema.as_ref()
    }

    /// Decodes one message.
    pub(crate) fn decode(&mut self, fd: &FlightData) -> Result<Decoded> {
        guarded("decoding a Flight message", || self.decode_inner(fd))
    }

    fn decode_inner(&mut self, fd: &FlightData) -> Result<Decoded> {
        let message = arrow_ipc::root_as_message(&fd.data_header)
            .map_err(|e| malformed(format!("the header is not an IPC Message flatbuffer: {e}")))?;
        match message.header_type() {
            MessageHeader::Schema => {
                let schema = Arc::new(
                    Schema::try_from(fd).map_err(|e| malformed(format!("schema message: {e}")))?,
                );
                if let Some(known) = &self.schema
                    && known.fields() != schema.fields()
                {
                    return Err(malformed(format!(
                        "the stream's schema {schema} differs from the flight's {known}"
                    )));
                }
                self.schema = Some(schema.clone());
                Ok(Decoded::Schema(schema))
            }
            MessageHeader::DictionaryBatch => {
                let schema = self
                    .schema
                    .as_ref()
                    .ok_or_else(|| malformed("a dictionary batch before the schema"))?;
                let batch = message
                    .header_as_dictionary_batch()
                    .ok_or_else(|| malformed("a DictionaryBatch header without its table"))?;
                check_buffers(
                    batch.data().and_then(|d| d.buffers()).map(|b| b.iter()),
                    fd.data_body.len(),
                    "dictionary batch",
                )?;
                let body = Buffer::from(fd.data_body.clone());
                arrow_ipc::reader::read_dictionary(
                    &body,
                    batch,
                    schema,
                    &mut self.dictionaries,
                    &message.version(),
                )
                .map_err(|e| malformed(format!("dictionary batch: {e}")))?;
                Ok(Decoded::Dictionary)
            }
            MessageHeader::RecordBatch => {
                let schema = self
                    .schema
                    .clone()
                    .ok_or_else(|| malformed("a record batch before the schema"))?;
                let batch = message
                    .header_as_record_batch()
                    .ok_or_else(|| malformed("a RecordBatch header without its table"))?;
                check_buffers(
                    batch.buffers().map(|b| b.iter()),
                    fd.data_body.len(),
                    "record batch",
                )?;
                let body = Buffer::from(fd.data_body.clone());
                let rb = arrow_ipc::reader::read_record_batch(
                    &body,
                    batch,
                    schema,
                    &self.dictionaries,
                    None,
                    &message.version(),
                )
                .map_err(|e| malformed(format!("record batch: {e}")))?;
                Ok(Decoded::Batch(rb))
            }
            other => Err(malformed(format!(
                "unexpected message type {} (expected Schema, DictionaryBatch or RecordBatch)",
                other.variant_name().unwrap_or("UNKNOWN")
            ))),
        }
    }
}
