//! Arrow IPC messages in host memory for the tests (host tests and tests/gpu): a host
//! batch serialized to bytes, and a host message read back as its host batch, through
//! the one `serialize_record_batch` / `read_record_batch` pair.

#![allow(dead_code)]

/// A host batch serialized as Arrow IPC into host memory, as bytes
/// (`serialize_record_batch` to `BufferPrototype::Host`).
pub fn serialize_to_vec(b: &arrow_array::RecordBatch) -> devbuf::Result<Vec<u8>> {
    let m = devbuf::arrow::serialize_record_batch(
        &devbuf::arrow::Batch::Host(b.clone()),
        &devbuf::zarr::BufferPrototype::Host,
    )?;
    Ok(m.to_host()?.to_vec())
}

/// `read_record_batch` of a message in host memory (zero-copy: the memory is the
/// buffer's), as the host batch it always is.
pub fn read_host(
    message: &arrow_buffer::Buffer,
    schema: arrow_schema::SchemaRef,
) -> devbuf::Result<arrow_array::RecordBatch> {
    let m = devbuf::memory::Memory::from(message.clone());
    match devbuf::arrow::read_record_batch(&m, schema)? {
        devbuf::arrow::Batch::Host(b) => Ok(b),
        devbuf::arrow::Batch::Device(_) => unreachable!("host memory reads to a host batch"),
    }
}

/// The schema as an Arrow IPC `Schema` message, to hand to the reading side: the first
/// message arrow-ipc's `StreamWriter` writes.
pub fn schema_message(schema: &arrow_schema::Schema) -> Vec<u8> {
    let mut v = Vec::new();
    arrow_ipc::writer::StreamWriter::try_new(&mut v, schema).expect("a schema message");
    v
}

/// A `Schema` message read back (arrow-ipc's `try_schema_from_ipc_buffer`).
pub fn schema_of(bytes: &[u8]) -> Result<arrow_schema::SchemaRef, arrow_schema::ArrowError> {
    arrow_ipc::convert::try_schema_from_ipc_buffer(bytes).map(std::sync::Arc::new)
}
