//! How [`Batch`]es (record batches in host or device memory) become Flight messages: the schema message, dictionary batches and record batches, IPC-encoded by
//! arrow-ipc on the host; a device batch is encoded on the device (device-to-device
//! copies) and crosses PCIe once into page-locked memory that the message body then
//! points at — no host copy.

use arrow_array::RecordBatch;
use arrow_flight::FlightData;
use arrow_ipc::MetadataVersion;
use arrow_ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
use arrow_schema::Schema;
use bytes::Bytes;

pub use devbuf_core::arrow::Batch;
use devbuf_core::arrow::serialize_record_batch;
use devbuf_core::error::{Error, Result};

/// Bytes of memory a batch holds (for the server's upload bound).
pub(crate) fn memory_bytes(b: &Batch) -> u64 {
    match b {
        Batch::Host(b) => b.get_array_memory_size() as u64,
        // A batch made of arrays (a C stream import) has an empty message: count its
        // buffers.
        Batch::Device(b) => b.message().len().max(
            b.columns()
                .iter()
                .flat_map(|c| c.all_buffers())
                .map(|x| x.len())
                .sum(),
        ) as u64,
    }
}

/// Bytes of a message on the wire (header and body).
pub(crate) fn wire_bytes(fd: &FlightData) -> u64 {
    (fd.data_header.len() + fd.data_body.len() + fd.app_metadata.len()) as u64
}

/// Encodes one stream: the schema, then batches (dictionaries are sent before the
/// batches that use them, as arrow-ipc tracks them).
pub(crate) struct IpcStreamEncoder {
    options: IpcWriteOptions,
    tracker: DictionaryTracker,
    generator: IpcDataGenerator,
}

impl IpcStreamEncoder {
    pub(crate) fn new() -> Result<IpcStreamEncoder> {
        Ok(IpcStreamEncoder {
            options: IpcWriteOptions::try_new(64, false, MetadataVersion::V5)?,
            tracker: DictionaryTracker::new(false),
            generator: IpcDataGenerator::default(),
        })
    }

    /// The schema message (registers the schema's dictionaries).
    pub(crate) fn schema(&mut self, schema: &Schema) -> FlightData {
        let ed = self.generator.schema_to_bytes_with_dictionary_tracker(
            schema,
            &mut self.tracker,
            &self.options,
        );
        FlightData::from(ed)
    }

    /// The messages of one batch (dictionary batches first, host batches only).
    pub(crate) fn host_batch(&mut self, batch: &RecordBatch) -> Result<Vec<FlightData>> {
        let (dictionaries, message) = self.generator.encode(
            batch,
            &mut self.tracker,
            &self.options,
            &mut IpcWriteContext::default(),
        )?;
        Ok(dictionaries
            .into_iter()
            .chain(std::iter::once(message))
            .map(FlightData::from)
            .collect())
    }

    /// The messages of one batch, host or device. A device batch is serialized on the
    /// device and copied once into page-locked memory, which the message's body then
    /// is; types the device serializer does not write (dictionaries, unions, run-end
    /// encoded, views) go through [`DeviceRecordBatch::to_host`](devbuf_core::arrow::DeviceRecordBatch::to_host)
    /// instead.
    pub(crate) fn batch(&mut self, batch: &Batch) -> Result<Vec<FlightData>> {
        match batch {
            Batch::Host(b) => self.host_batch(b),
            Batch::Device(b) => match serialize_record_batch(batch, &batch.prototype()) {
                Ok(message) => {
                    let host = message.to_host()?;
                    Ok(vec![split_message(host)?])
                }
                Err(Error::InvalidArgument(_)) => self.host_batch(&b.to_host()?),
                Err(e) => Err(e),
            },
        }
    }
}

/// An encapsulated IPC message (continuation marker, metadata length, flatbuffer,
/// body) as Flight data: header and body are zero-copy slices of `message`.
pub(crate) fn split_message(message: Bytes) -> Result<FlightData> {
    let bad = |m: String| Error::Malformed(format!("Arrow IPC message: {m}"));
    if message.len() < 8 || message[..4] != [0xff; 4] {
        return Err(bad(format!(
            "{} bytes that do not start with the continuation marker and a length",
            message.len()
        )));
    }
    let meta = i32::from_le_bytes([message[4], message[5], message[6], message[7]]);
    let meta = usize::try_from(meta)
        .ok()
        .filter(|&m| m <= message.len() - 8)
        .ok_or_else(|| {
            bad(format!(
                "metadata length {meta} in a message of {} bytes",
                message.len()
            ))
        })?;
    let header = message.slice(8..8 + meta);
    let body_len = arrow_ipc::root_as_message(&header)
        .map_err(|e| bad(format!("metadata: {e}")))?
        .bodyLength();
    let body_len = usize::try_from(body_len)
        .ok()
        .filter(|&b| b <= message.len() - 8 - meta)
        .ok_or_else(|| {
            bad(format!(
                "body length {body_len} exceeds the {} bytes after the metadata",
                message.len() - 8 - meta
            ))
        })?;
    Ok(FlightData::new()
        .with_data_header(header)
        .with_data_body(message.slice(8 + meta..8 + meta + body_len)))
}

/// The encapsulation of a Flight message's header (continuation marker, length, the
/// header padded to 64 bytes in all): the body follows it at a 64-byte boundary.
pub(crate) fn message_prefix(header: &[u8]) -> Result<Vec<u8>> {
    let padded = (8 + header.len()).next_multiple_of(64);
    let meta = i32::try_from(padded - 8)
        .map_err(|_| Error::Malformed(format!("a message header of {} bytes", header.len())))?;
    let mut p = Vec::with_capacity(padded);
    p.extend_from_slice(&[0xff; 4]);
    p.extend_from_slice(&meta.to_le_bytes());
    p.extend_from_slice(header);
    p.resize(padded, 0);
    Ok(p)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Float64Array, Int32Array, StringArray};

    use super::*;
    use crate::decode::{Decoded, IpcStreamDecoder};

    fn batch() -> RecordBatch {
        RecordBatch::try_from_iter([
            ("i", Arc::new(Int32Array::from(vec![1, -2, 3])) as _),
            (
                "f",
                Arc::new(Float64Array::from(vec![0.5, f64::NAN, -0.0])) as _,
            ),
            (
                "s",
                Arc::new(StringArray::from(vec![Some("a"), None, Some("ccc")])) as _,
            ),
        ])
        .unwrap()
    }

    #[test]
    fn an_encapsulated_message_split_into_flight_data_decodes_to_the_batch() {
        // The encapsulated message format the device serializer writes too.
        let b = batch();
        let message = devbuf_core::arrow::serialize_record_batch(
            &Batch::Host(b.clone()),
            &devbuf_core::zarr::BufferPrototype::Host,
        )
        .unwrap();
        let fd = split_message(message.to_host().unwrap()).unwrap();
        let mut enc = IpcStreamEncoder::new().unwrap();
        let schema = enc.schema(&b.schema());
        let mut dec = IpcStreamDecoder::default();
        assert!(matches!(dec.decode(&schema).unwrap(), Decoded::Schema(_)));
        let Decoded::Batch(got) = dec.decode(&fd).unwrap() else {
            panic!("not a batch")
        };
        assert_eq!(got, b);
        // And back into an encapsulated message.
        let mut again = message_prefix(&fd.data_header).unwrap();
        assert_eq!(again.len() % 64, 0);
        again.extend_from_slice(&fd.data_body);
        let back = devbuf_core::arrow::read_record_batch(
            &devbuf_core::memory::Memory::from(again),
            b.schema(),
        )
        .unwrap();
        assert_eq!(back.as_host(), Some(&b));
    }

    #[test]
    fn split_refuses_damaged_messages() {
        for m in [
            vec![],
            vec![0xff; 7],
            vec![0, 0, 0, 0, 8, 0, 0, 0],
            vec![0xff, 0xff, 0xff, 0xff, 100, 0, 0, 0, 1, 2],
            vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        ] {
            assert!(split_message(Bytes::from(m)).is_err());
        }
    }
}
