//! The Arrow IPC *format* (`ipc_format`): record batches serialized into device memory
//! (and, as the host fallback, into shared host memory) and read back. Not to be confused
//! with the process handles of [`crate::ipc`] and [`crate::cuda::ipc`], which share
//! those bytes with another process.
//!
//! The serialized form is the Arrow IPC *encapsulated message* format: each message is
//! the continuation marker `0xFFFFFFFF`, a little-endian `i32` metadata length, the
//! flatbuffer `Message` padded to 64 bytes, then the body (64-byte aligned buffers).
//! A batch with dictionary columns is preceded by one `DictionaryBatch` message per
//! dictionary; a batch without is exactly one `RecordBatch` message (what
//! `pyarrow.cuda.serialize_record_batch` writes, so either side can read the other's).
//! The schema travels separately, as arrow-ipc writes and reads it (the `Schema` message
//! that `arrow_ipc::writer::StreamWriter::try_new` writes first;
//! `arrow_ipc::convert::try_schema_from_ipc_buffer` reads it back); a leading `Schema`
//! message is accepted and checked against it.
//!
//! Reading copies only the messages' metadata to the host; every body buffer stays
//! where it is, as a zero-copy slice of the input. The reader ([`read_record_batch`],
//! host or device [`Memory`]) is one piece of code, generic over where the bytes live:
//! the host path runs it on every machine, and the device path runs the same code on
//! device memory.
//!
//! Writing is one encoder too: the writers of a host batch differ only in who owns the
//! bytes they return — device or host memory ([`serialize_record_batch`] with a
//! [`BufferPrototype`]; a [`DeviceBuffer`] exports over CUDA IPC) or shared host memory
//! ([`serialize_record_batch_shared`], a [`SharedMemory`] that exports as a host
//! handle); a batch already on the device is written device to device
//! (`arrow/ipc_format_encode.rs`).
//!
//! This file: writing, the schema, the public readers and [`DeviceRecordBatch`].
//! `parse.rs`: the one parser. The device encoder is `arrow/ipc_format_encode.rs`.

mod parse;

use parse::parse;
#[allow(unused_imports)]
use parse::*;

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, RecordBatchOptions, make_array};
use arrow_buffer::Buffer;
use arrow_ipc::writer::{
    DictionaryTracker, EncodedData, IpcDataGenerator, IpcWriteContext, IpcWriteOptions,
    write_message,
};
use arrow_ipc::{MessageHeader, MetadataVersion};
use arrow_schema::{DataType, Field, Schema, SchemaRef, UnionMode};

use super::Batch;
use super::device::{ByteLen, DeviceArray, Parts, child_fields, layout_of};
use super::ipc_format_encode::serialize_device_record_batch;
use crate::cuda::{Context, DeviceBuffer, DeviceBufferWriter};
use crate::error::{Error, Result};
use crate::ipc::SharedMemory;
use crate::memory::Memory;
use crate::zarr::BufferPrototype;

const ALIGNMENT: u8 = 64;
const CONTINUATION: [u8; 4] = [0xff; 4];

fn malformed(msg: impl std::fmt::Display) -> Error {
    Error::Malformed(format!("Arrow IPC message: {msg}"))
}

fn write_options() -> Result<IpcWriteOptions> {
    Ok(IpcWriteOptions::try_new(
        ALIGNMENT as usize,
        false,
        MetadataVersion::V5,
    )?)
}

// ---------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------

/// A record batch encoded as IPC messages: (prefix + metadata, body) per message.
pub(crate) struct Encoded {
    pieces: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Encoded {
    /// Encodes `batch` (dictionary messages, then the record batch message).
    pub(crate) fn new(batch: &RecordBatch) -> Result<Encoded> {
        let options = write_options()?;
        let generator = IpcDataGenerator::default();
        let mut tracker = DictionaryTracker::new(false);
        // Assigns the dictionary ids, exactly as a reader of the schema will.
        generator.schema_to_bytes_with_dictionary_tracker(
            batch.schema_ref(),
            &mut tracker,
            &options,
        );
        let (dictionaries, message) = generator.encode(
            batch,
            &mut tracker,
            &options,
            &mut IpcWriteContext::default(),
        )?;
        let mut pieces = Vec::with_capacity(dictionaries.len() + 1);
        for ed in dictionaries.into_iter().chain(std::iter::once(message)) {
            let mut head = Vec::new();
            let meta = EncodedData {
                ipc_message: ed.ipc_message,
                arrow_data: Vec::new(),
            };
            write_message(&mut head, meta, &options)?;
            pieces.push((head, ed.arrow_data));
        }
        Ok(Encoded { pieces })
    }

    /// Total length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.pieces.iter().map(|(h, b)| h.len() + b.len()).sum()
    }

    /// Writes every message in order.
    pub(crate) fn write_to(&self, w: &mut impl Write) -> Result<()> {
        for (h, b) in &self.pieces {
            for part in [h, b] {
                w.write_all(part).map_err(|e| {
                    Error::from_io("writing an Arrow IPC message", e.to_string(), e)
                })?;
            }
        }
        Ok(())
    }
}

/// Serializes a record batch — on the host or on a device — as Arrow IPC messages (the
/// message layout is in `docs/ipc.md`) into new memory where `prototype` says:
///
/// * a host batch to a device: the batch's bytes cross PCIe once, through a
///   page-locked staging buffer ([`Memory::Device`], exportable with
///   [`DeviceBuffer::export_ipc`]);
/// * a host batch to the host: a vector ([`Memory::Host`]);
/// * a device batch to a device: device to device, the data never crosses PCIe (the
///   metadata is built on the host and copied over, a few hundred bytes); written on
///   the batch's device and copied to another one if the prototype names it. Columns
///   must not be sliced (Arrow IPC has no array offset), and dictionary (they need
///   dictionary messages), union, run-end-encoded, list-view and view columns are
///   refused with an error that says which: serialize `Batch::Host(b.to_host()?)` for
///   those;
/// * a device batch to the host: copied to the host first ([`Batch::to_host`]).
///
/// Sliced host batches are written correctly (only the slice's data is written). A
/// host batch without dictionary columns is exactly one `RecordBatch` message; the
/// device encoder always writes one. Read it back with [`read_record_batch`], in this
/// process or, after [`DeviceBuffer::export_ipc`], in another one. (For device memory
/// of a context of your own, serialize to the host and copy:
/// `DeviceBuffer::from_slice(&ctx, &host_message)`.)
///
/// ```
/// use std::sync::Arc;
/// use arrow_array::{Int32Array, RecordBatch, StringArray};
/// use devbuf_core::arrow::{Batch, read_record_batch, serialize_record_batch};
/// use devbuf_core::zarr::BufferPrototype;
/// let batch = RecordBatch::try_from_iter([
///     ("id", Arc::new(Int32Array::from(vec![1, 2, 3])) as _),
///     ("name", Arc::new(StringArray::from(vec!["a", "b", "c"])) as _),
/// ])?;
/// let message = serialize_record_batch(&Batch::from(batch.clone()), &BufferPrototype::Host)?;
/// let back = read_record_batch(&message, batch.schema())?;
/// assert_eq!(back.as_host(), Some(&batch));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// On a device, and again device to device:
///
/// ```no_run
/// # use std::sync::Arc;
/// # use arrow_array::{Int32Array, RecordBatch};
/// use devbuf_core::arrow::{Batch, read_record_batch, serialize_record_batch};
/// use devbuf_core::zarr::BufferPrototype;
/// # let batch = RecordBatch::try_from_iter([("x", Arc::new(Int32Array::from(vec![1, 2, 3])) as _)])?;
/// let gpu = BufferPrototype::Device(0);
/// let message = serialize_record_batch(&Batch::from(batch.clone()), &gpu)?; // Memory::Device
/// let on_device = read_record_batch(&message, batch.schema())?; // Batch::Device
/// assert_eq!(on_device.to_host()?, batch);
/// let again = serialize_record_batch(&on_device, &gpu)?; // device to device
/// assert_eq!(read_record_batch(&again, batch.schema())?.to_host()?, batch);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn serialize_record_batch(batch: &Batch, prototype: &BufferPrototype) -> Result<Memory> {
    match (batch, prototype.context()?) {
        (Batch::Host(b), None) => Ok(Memory::from(serialize_to_vec(b)?)),
        (Batch::Host(b), Some(ctx)) => Ok(Memory::Device(serialize_record_batch_on(b, &ctx)?)),
        (Batch::Device(b), None) => Ok(Memory::from(serialize_to_vec(&b.to_host()?)?)),
        (Batch::Device(b), Some(ctx)) => {
            let m = serialize_device_record_batch(b)?;
            if m.context().ordinal() == ctx.ordinal() {
                return Ok(Memory::Device(m));
            }
            let out = ctx.allocate(m.len())?;
            out.copy_from_device(0, &m)?;
            Ok(Memory::Device(out))
        }
    }
}

/// A host batch serialized into new device memory of `ctx`, a context you choose (a
/// dedicated one, say: [`serialize_record_batch`] with a `BufferPrototype::Device(n)`
/// uses device `n`'s primary context). The message can be read back with
/// [`read_record_batch`].
///
/// ```no_run
/// use std::sync::Arc;
/// use arrow_array::{Int32Array, RecordBatch};
/// use devbuf_core::arrow::{read_record_batch, serialize_record_batch_on};
/// use devbuf_core::cuda::Context;
/// use devbuf_core::memory::Memory;
/// let ctx = Context::new_dedicated(0)?;
/// let rb = RecordBatch::try_from_iter([("x", Arc::new(Int32Array::from(vec![1, 2])) as _)])?;
/// let message = serialize_record_batch_on(&rb, &ctx)?; // in `ctx`
/// let back = read_record_batch(&Memory::Device(message), rb.schema())?;
/// assert_eq!(back.to_host()?, rb);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn serialize_record_batch_on(batch: &RecordBatch, ctx: &Context) -> Result<DeviceBuffer> {
    let encoded = Encoded::new(batch)?;
    let buf = ctx.allocate(encoded.len())?;
    let staging = encoded.len().min(4 << 20);
    let mut w = DeviceBufferWriter::with_capacity(buf, staging)?;
    encoded.write_to(&mut w)?;
    w.into_inner()
}

/// Serializes a record batch as Arrow IPC messages into new [`SharedMemory`] (the host
/// fallback of [`serialize_record_batch`] to a device): export it with
/// [`SharedMemory::export_ipc`] and read it in another process with
/// [`read_record_batch`] over [`HostIpcHandle::open`](crate::ipc::HostIpcHandle::open)'s
/// buffer (`Memory::from(buffer)`).
///
/// ```
/// # if cfg!(not(target_os = "linux")) { return Ok(()); }
/// use std::sync::Arc;
/// use arrow_array::{Int64Array, RecordBatch};
/// use devbuf_core::memory::Memory;
/// use devbuf_core::arrow::{read_record_batch, serialize_record_batch_shared};
/// let batch = RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from(vec![7, 8])) as _)])?;
/// let shm = serialize_record_batch_shared(&batch)?;
/// let handle = shm.export_ipc(..)?; // send handle.to_string() to a consumer
/// let mapped = handle.open()?; // read-only mapping, zero-copy
/// let back = read_record_batch(&Memory::from(mapped), batch.schema())?;
/// assert_eq!(back.as_host(), Some(&batch));
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub fn serialize_record_batch_shared(batch: &RecordBatch) -> Result<SharedMemory> {
    let encoded = Encoded::new(batch)?;
    let mut shm = SharedMemory::create(encoded.len())?;
    let mut out: &mut [u8] = &mut shm;
    encoded.write_to(&mut out)?;
    Ok(shm)
}

/// A host batch serialized into a vector: [`serialize_record_batch`]'s host path.
pub(crate) fn serialize_to_vec(batch: &RecordBatch) -> Result<Vec<u8>> {
    let encoded = Encoded::new(batch)?;
    let mut v = Vec::with_capacity(encoded.len());
    encoded.write_to(&mut v)?;
    Ok(v)
}

/// The schema's IPC `Schema` message (flatbuffer only), as a writer encodes it (with
/// its dictionary ids), and the options it was encoded with.
fn schema_message(schema: &Schema) -> Result<(EncodedData, IpcWriteOptions)> {
    let options = write_options()?;
    let mut tracker = DictionaryTracker::new(false);
    let ed = IpcDataGenerator::default().schema_to_bytes_with_dictionary_tracker(
        schema,
        &mut tracker,
        &options,
    );
    Ok((ed, options))
}

fn strip(e: &Error) -> String {
    match e {
        Error::InvalidArgument(m) | Error::Malformed(m) => m.clone(),
        other => other.to_string(),
    }
}

fn build_batch(schema: SchemaRef, rows: usize, columns: Vec<ArrayRef>) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new_with_options(
        schema,
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )?)
}

/// Reads a record batch from Arrow IPC messages in host or device memory: only the
/// metadata is read on the host; every column's buffers are zero-copy slices of
/// `message`.
///
/// * Host memory (e.g. a read-only mapping of another process's shared memory: a
///   [`HostIpcHandle::open`](crate::ipc::HostIpcHandle::open)ed buffer is
///   `Memory::from(buffer)`): a [`Batch::Host`], every array fully validated (a buffer
///   misaligned for its type is the only thing copied).
/// * Device memory: a [`Batch::Device`] ([`DeviceRecordBatch`]); the values themselves
///   (offsets, UTF-8, dictionary keys) are checked by [`DeviceRecordBatch::to_host`].
///
/// `schema` must be the schema the batch was written with (to hand it to another
/// process: the `Schema` message `arrow_ipc::writer::StreamWriter::try_new(&mut v,
/// &schema)` writes, read back with `arrow_ipc::convert::try_schema_from_ipc_buffer`).
/// Malformed metadata — truncated, bad flatbuffers, buffers outside the body, too
/// small for their arrays, a schema that does not match — is an
/// [`Error::Malformed`] saying what is wrong, never a panic.
///
/// ```
/// # if cfg!(not(target_os = "linux")) { return Ok(()); }
/// use std::sync::Arc;
/// use arrow_array::{Int64Array, RecordBatch};
/// use devbuf_core::memory::Memory;
/// use devbuf_core::arrow::{read_record_batch, serialize_record_batch_shared};
/// let batch = RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from(vec![7, 8])) as _)])?;
/// let shm = serialize_record_batch_shared(&batch)?;
/// let mapped = shm.export_ipc(..)?.open()?; // as another process would, zero-copy
/// let back = read_record_batch(&Memory::from(mapped), batch.schema())?;
/// assert_eq!(back.as_host(), Some(&batch));
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub fn read_record_batch(message: &Memory, schema: SchemaRef) -> Result<Batch> {
    match message {
        Memory::Host(b) => Ok(Batch::Host(read_host(&Buffer::from(b.clone()), schema)?)),
        Memory::Device(d) => Ok(Batch::Device(read_device_record_batch(d, schema)?)),
    }
}

/// [`read_record_batch`] of host memory.
pub(crate) fn read_host(message: &Buffer, schema: SchemaRef) -> Result<RecordBatch> {
    let parsed = parse(message, &schema)?;
    let columns = parsed
        .columns
        .into_iter()
        .map(|p| Ok(make_array(p.into_array_data()?)))
        .collect::<Result<Vec<_>>>()?;
    build_batch(schema, parsed.rows, columns)
}

/// [`read_record_batch`] of device memory, as the device batch.
pub fn read_device_record_batch(
    message: &DeviceBuffer,
    schema: SchemaRef,
) -> Result<DeviceRecordBatch> {
    let parsed = parse(message, &schema)?;
    Ok(DeviceRecordBatch {
        schema,
        num_rows: parsed.rows,
        columns: parsed
            .columns
            .into_iter()
            .map(DeviceArray::from_parts)
            .collect(),
        message: message.clone(),
    })
}

/// A record batch whose columns live in device memory: see [`read_record_batch`].
#[derive(Clone, Debug)]
pub struct DeviceRecordBatch {
    schema: SchemaRef,
    num_rows: usize,
    columns: Vec<DeviceArray>,
    message: DeviceBuffer,
}

impl DeviceRecordBatch {
    /// A batch of `columns` (checked against `schema` by the caller) whose buffers lie
    /// in `message` (built by `ChunkBatch`, not read from IPC).
    pub(crate) fn from_device_columns(
        schema: SchemaRef,
        num_rows: usize,
        columns: Vec<DeviceArray>,
        message: DeviceBuffer,
    ) -> DeviceRecordBatch {
        DeviceRecordBatch {
            schema,
            num_rows,
            columns,
            message,
        }
    }

    /// The batch of a struct array whose children are the columns (zero-copy), with
    /// `schema` (whose fields must be the struct's). A struct with an offset has it
    /// moved into its columns; null rows at the top level are an error. The message is
    /// an empty buffer on the batch's device (`device` when the array has no buffers).
    pub(crate) fn from_struct(
        schema: SchemaRef,
        array: DeviceArray,
        device: usize,
    ) -> Result<DeviceRecordBatch> {
        let DataType::Struct(fields) = array.data_type() else {
            return Err(Error::invalid(format!(
                "a {} array is not a record batch: a batch is a struct array",
                array.data_type()
            )));
        };
        if fields != schema.fields() {
            return Err(Error::invalid(
                "the struct array's fields are not the schema's".to_string(),
            ));
        }
        if array.null_count() > 0 {
            return Err(Error::invalid(format!(
                "the struct array has {} null rows at the top level: a record batch cannot",
                array.null_count()
            )));
        }
        let (off, rows) = (array.offset(), array.len());
        let columns = array
            .children()
            .iter()
            .map(|c| {
                if off == 0 && c.len() == rows {
                    return Ok(c.clone());
                }
                let mut p = c.to_parts();
                p.offset += off;
                p.len = rows;
                p.null_count = match (&p.validity, &p.data_type) {
                    (_, DataType::Null) => rows,
                    (None, _) => 0,
                    (Some(v), _) => {
                        let bits = v.to_host()?;
                        (p.offset..p.offset + rows)
                            .filter(|&b| bits.get(b / 8).is_none_or(|x| x & (1 << (b % 8)) == 0))
                            .count()
                    }
                };
                p.validate()?;
                Ok(DeviceArray::from_parts(p))
            })
            .collect::<Result<Vec<_>>>()?;
        let ctx = match array.all_buffers().first() {
            Some(b) => b.context().clone(),
            None => Context::new(device)?,
        };
        Ok(DeviceRecordBatch {
            schema,
            num_rows: rows,
            columns,
            message: ctx.allocate(0)?,
        })
    }

    /// The schema.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Number of rows.
    pub fn num_rows(&self) -> usize {
        self.num_rows
    }

    /// The columns (`columns().len()` of them; column `i`: `columns().get(i)`).
    pub fn columns(&self) -> &[DeviceArray] {
        &self.columns
    }

    /// The column named `name`.
    pub fn column_by_name(&self, name: &str) -> Option<&DeviceArray> {
        self.schema
            .index_of(name)
            .ok()
            .and_then(|i| self.columns.get(i))
    }

    /// The device buffer the batch was read from (its columns slice it); an empty
    /// buffer on the batch's device for a batch made of arrays (a C stream import,
    /// `DeviceRecordBatch::try_from(DeviceArray)`).
    pub fn message(&self) -> &DeviceBuffer {
        &self.message
    }

    /// Copies the batch to the host — the whole message in one transfer, into
    /// page-locked memory that the arrays then share without further copies — and
    /// validates every array fully.
    pub fn to_host(&self) -> Result<RecordBatch> {
        let base = self.message.address();
        let end = base + self.message.len() as u64;
        let host = Buffer::from(self.message.to_host()?);
        let ctx = self.message.context().clone();
        let mut map = |b: &DeviceBuffer| -> Result<Buffer> {
            if b.is_empty() {
                return Ok(Buffer::from_vec(Vec::<u8>::new()));
            }
            let a = b.address();
            if b.context().same_as(&ctx) && a >= base && a + b.len() as u64 <= end {
                Ok(host.slice_with_length((a - base) as usize, b.len()))
            } else {
                Ok(Buffer::from(b.to_host()?))
            }
        };
        let columns = self
            .columns
            .iter()
            .map(|c| c.to_host_with(&mut map))
            .collect::<Result<Vec<_>>>()?;
        build_batch(self.schema.clone(), self.num_rows, columns)
    }
}

impl TryFrom<DeviceArray> for DeviceRecordBatch {
    type Error = Error;

    /// A struct array as a record batch whose columns are its children (zero-copy; as
    /// arrow-rs's `RecordBatch::from(StructArray)`): what a C device stream carries.
    /// The schema is the struct's fields; a struct offset is moved into the columns;
    /// null rows at the top level are an error. The batch's
    /// [`message`](DeviceRecordBatch::message) is an empty buffer on the device of the
    /// array's buffers; an array without any (no columns, or only columns of type
    /// `Null`) names no device, and its batch's message is on GPU 0 (build such a batch
    /// on another device from the C stream, which carries the device).
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use arrow_array::{Int32Array, RecordBatch, StructArray};
    /// use devbuf_core::arrow::{DeviceArray, DeviceRecordBatch};
    /// use devbuf_core::cuda::Context;
    /// let ctx = Context::new(0)?;
    /// let batch = RecordBatch::try_from_iter([("x", Arc::new(Int32Array::from(vec![1, 2])) as _)])?;
    /// let s = DeviceArray::from_host(&StructArray::from(batch.clone()), &ctx)?;
    /// let b = DeviceRecordBatch::try_from(s)?;
    /// assert_eq!(b.to_host()?, batch);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn try_from(array: DeviceArray) -> Result<DeviceRecordBatch> {
        let DataType::Struct(fields) = array.data_type() else {
            return Err(Error::invalid(format!(
                "a {} array is not a record batch: a batch is a struct array",
                array.data_type()
            )));
        };
        let schema = Arc::new(Schema::new(fields.clone()));
        DeviceRecordBatch::from_struct(schema, array, 0)
    }
}
