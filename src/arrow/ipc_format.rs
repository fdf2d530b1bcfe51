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
//! The schema travels separately (see [`schema_to_bytes`]); a leading `Schema` message
//! is accepted and checked against it.
//!
//! Reading copies only the messages' metadata to the host; every body buffer stays
//! where it is, as a zero-copy slice of the input. The reader is one piece of code,
//! generic over where the bytes live: the host path ([`read_record_batch_host`]) runs it
//! on every machine, and the device path ([`read_record_batch`]) runs the same code on
//! device memory.

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

use super::device::{ByteLen, DeviceArray, Parts, child_fields, layout_of};
use crate::cuda::{Context, DeviceBuffer, DeviceBufferWriter};
use crate::error::{Error, Result};
use crate::ipc::SharedMemory;

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
                w.write_all(part).map_err(|e| Error::Io {
                    op: "writing an Arrow IPC message",
                    message: e.to_string(),
                })?;
            }
        }
        Ok(())
    }
}

/// Serializes a record batch as Arrow IPC messages (see the [module docs](self)) into
/// a new device buffer on `ctx`: the batch's bytes cross PCIe once, through a
/// page-locked staging buffer. Sliced batches are written correctly (only the slice's
/// data is written).
///
/// Read it back with [`read_record_batch`], in this process or, after
/// [`DeviceBuffer::export_ipc`], in another one.
///
/// ```no_run
/// use std::sync::Arc;
/// use arrow_array::{Int32Array, RecordBatch, StringArray};
/// use devbuf::arrow::{read_record_batch, serialize_record_batch};
/// use devbuf::cuda::Context;
/// let ctx = Context::new(0)?;
/// let batch = RecordBatch::try_from_iter([
///     ("id", Arc::new(Int32Array::from(vec![1, 2, 3])) as _),
///     ("name", Arc::new(StringArray::from(vec!["a", "b", "c"])) as _),
/// ])?;
/// let message = serialize_record_batch(&batch, &ctx)?;
/// let on_device = read_record_batch(&message, batch.schema())?;
/// assert_eq!(on_device.num_rows(), 3);
/// assert_eq!(on_device.to_host()?, batch);
/// # Ok::<(), devbuf::Error>(())
/// ```
pub fn serialize_record_batch(batch: &RecordBatch, ctx: &Context) -> Result<DeviceBuffer> {
    let encoded = Encoded::new(batch)?;
    let buf = ctx.allocate(encoded.len())?;
    let staging = encoded.len().min(4 << 20);
    let mut w = DeviceBufferWriter::with_capacity(buf, staging)?;
    encoded.write_to(&mut w)?;
    w.into_inner()
}

/// Serializes a record batch as Arrow IPC messages into new [`SharedMemory`] (the host
/// fallback of [`serialize_record_batch`]): export it with
/// [`SharedMemory::export_ipc`] and read it in another process with
/// [`read_record_batch_host`] over [`HostIpcHandle::open`](crate::ipc::HostIpcHandle::open)'s
/// buffer.
///
/// ```
/// # if cfg!(not(target_os = "linux")) { return Ok(()); }
/// use std::sync::Arc;
/// use arrow_array::{Int64Array, RecordBatch};
/// use devbuf::arrow::{read_record_batch_host, serialize_record_batch_shared};
/// let batch = RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from(vec![7, 8])) as _)])?;
/// let shm = serialize_record_batch_shared(&batch)?;
/// let handle = shm.export_ipc()?; // send handle.to_hex() to a consumer
/// let mapped = handle.open()?; // read-only mapping, zero-copy
/// let back = read_record_batch_host(&mapped, batch.schema())?;
/// assert_eq!(back, batch);
/// # Ok::<(), devbuf::Error>(())
/// ```
pub fn serialize_record_batch_shared(batch: &RecordBatch) -> Result<SharedMemory> {
    let encoded = Encoded::new(batch)?;
    let mut shm = SharedMemory::create(encoded.len())?;
    let mut out: &mut [u8] = &mut shm;
    encoded.write_to(&mut out)?;
    Ok(shm)
}

/// Serializes a record batch as Arrow IPC messages into a host vector (the format of
/// [`serialize_record_batch`]).
pub fn serialize_record_batch_to_vec(batch: &RecordBatch) -> Result<Vec<u8>> {
    let encoded = Encoded::new(batch)?;
    let mut v = Vec::with_capacity(encoded.len());
    encoded.write_to(&mut v)?;
    Ok(v)
}

/// The schema as an Arrow IPC `Schema` message (continuation marker, length,
/// flatbuffer), for handing it to the reading side.
pub fn schema_to_bytes(schema: &Schema) -> Result<Vec<u8>> {
    let (ed, options) = schema_message(schema)?;
    let mut v = Vec::new();
    write_message(&mut v, ed, &options)?;
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

/// Parses [`schema_to_bytes`]'s output.
pub fn schema_from_bytes(bytes: &[u8]) -> Result<SchemaRef> {
    arrow_ipc::convert::try_schema_from_ipc_buffer(bytes)
        .map(Arc::new)
        .map_err(|e| Error::Malformed(format!("Arrow IPC schema message: {e}")))
}

// ---------------------------------------------------------------------------
// Reading: one parser, generic over where the bytes live
// ---------------------------------------------------------------------------

/// Bytes the IPC reader can parse: it copies small ranges (metadata) to the host and
/// slices the rest without copying.
pub(crate) trait Source {
    type Buf: Clone + ByteLen;
    fn len(&self) -> usize;
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()>;
    fn slice(&self, offset: usize, len: usize) -> Result<Self::Buf>;
}

impl Source for DeviceBuffer {
    type Buf = DeviceBuffer;
    fn len(&self) -> usize {
        DeviceBuffer::len(self)
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.copy_to_host_into(offset, dst)
    }
    fn slice(&self, offset: usize, len: usize) -> Result<DeviceBuffer> {
        DeviceBuffer::slice(self, offset, len)
    }
}

impl Source for Buffer {
    type Buf = Buffer;
    fn len(&self) -> usize {
        Buffer::len(self)
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let end = crate::error::check_range("read", offset, dst.len(), self.len())?;
        dst.copy_from_slice(&self.as_slice()[offset..end]);
        Ok(())
    }
    fn slice(&self, offset: usize, len: usize) -> Result<Buffer> {
        crate::error::check_range("slice", offset, len, self.len())?;
        Ok(self.slice_with_length(offset, len))
    }
}

/// A parsed batch: row count and one description per column.
pub(crate) struct Parsed<B> {
    pub rows: usize,
    pub columns: Vec<Parts<B>>,
}

/// The schema with the dictionary ids a writer of it assigns (arrow-ipc's own
/// assignment, obtained by encoding and decoding the schema).
fn schema_with_dict_ids(schema: &Schema) -> Result<Schema> {
    let (ed, _) = schema_message(schema)?;
    let msg = arrow_ipc::root_as_message(&ed.ipc_message)
        .map_err(|e| Error::Arrow(format!("re-reading the schema: {e}")))?;
    let fb = msg
        .header_as_schema()
        .ok_or_else(|| Error::Arrow("re-reading the schema: not a schema message".into()))?;
    Ok(arrow_ipc::convert::try_fb_to_schema(fb)?)
}

#[allow(deprecated)]
fn dict_id(f: &Field) -> Result<i64> {
    f.dict_id()
        .ok_or_else(|| Error::Arrow(format!("field {:?} has no dictionary id", f.name())))
}

/// Collects, for every dictionary field in `(user, ids)`, its id and value types.
fn collect_dictionaries(
    user: &Field,
    ids: &Field,
    out: &mut HashMap<i64, (Field, Field)>,
) -> Result<()> {
    if let (DataType::Dictionary(_, uv), DataType::Dictionary(_, iv)) =
        (user.data_type(), ids.data_type())
    {
        let id = dict_id(ids)?;
        let uf = Field::new("values", uv.as_ref().clone(), true);
        let idf = Field::new("values", iv.as_ref().clone(), true);
        collect_dictionaries(&uf, &idf, out)?;
        out.insert(id, (uf, idf));
    }
    for (u, i) in child_fields(user.data_type())
        .iter()
        .zip(child_fields(ids.data_type()).iter())
    {
        collect_dictionaries(u, i, out)?;
    }
    Ok(())
}

struct Decoder<'a, S: Source> {
    src: &'a S,
    body_start: usize,
    body_len: usize,
    nodes: Vec<(i64, i64)>,
    next_node: usize,
    buffers: Vec<(i64, i64)>,
    next_buffer: usize,
    variadic: Vec<i64>,
    next_variadic: usize,
    version: MetadataVersion,
    dictionaries: &'a HashMap<i64, Parts<S::Buf>>,
}

fn to_usize(v: i64, what: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| malformed(format!("{what} {v} is negative or too large")))
}

impl<S: Source> Decoder<'_, S> {
    fn node(&mut self, field: &Field) -> Result<(usize, usize)> {
        let (len, nulls) = *self.nodes.get(self.next_node).ok_or_else(|| {
            malformed(format!(
                "the message has {} field nodes, the schema needs more (at field {:?}): \
                 is the schema the one the batch was written with?",
                self.nodes.len(),
                field.name()
            ))
        })?;
        self.next_node += 1;
        Ok((
            to_usize(len, "field length")?,
            to_usize(nulls, "null count")?,
        ))
    }

    fn buffer(&mut self) -> Result<S::Buf> {
        let (offset, len) = *self.buffers.get(self.next_buffer).ok_or_else(|| {
            malformed(format!(
                "the message has {} buffers, the schema needs more",
                self.buffers.len()
            ))
        })?;
        self.next_buffer += 1;
        let (offset, len) = (
            to_usize(offset, "buffer offset")?,
            to_usize(len, "buffer length")?,
        );
        match offset.checked_add(len) {
            Some(end) if end <= self.body_len => {}
            _ => {
                return Err(malformed(format!(
                    "buffer {} at body offset {offset} + length {len} lies outside the body of {} bytes",
                    self.next_buffer - 1,
                    self.body_len
                )));
            }
        }
        self.src.slice(self.body_start + offset, len)
    }

    fn validity(&mut self, null_count: usize) -> Result<Option<S::Buf>> {
        let b = self.buffer()?;
        Ok((null_count > 0).then_some(b))
    }

    fn leaf(
        &self,
        dt: &DataType,
        (len, null_count): (usize, usize),
        validity: Option<S::Buf>,
        buffers: Vec<S::Buf>,
        children: Vec<Parts<S::Buf>>,
    ) -> Parts<S::Buf> {
        Parts {
            data_type: dt.clone(),
            len,
            null_count,
            offset: 0,
            validity,
            buffers,
            children,
            dictionary: None,
        }
    }

    /// Decodes one array of type `user`'s, taking dictionary ids from `ids` (the same
    /// field of the schema with ids).
    fn array(&mut self, user: &Field, ids: &Field) -> Result<Parts<S::Buf>> {
        let dt = user.data_type();
        let children = |d: &mut Self| -> Result<Vec<Parts<S::Buf>>> {
            child_fields(dt)
                .iter()
                .zip(child_fields(ids.data_type()).iter())
                .map(|(u, i)| d.array(u, i))
                .collect()
        };
        Ok(match dt {
            DataType::Null => {
                let n = self.node(user)?;
                self.leaf(dt, n, None, vec![], vec![])
            }
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary => {
                let n = self.node(user)?;
                let v = self.validity(n.1)?;
                let b = vec![self.buffer()?, self.buffer()?];
                self.leaf(dt, n, v, b, vec![])
            }
            DataType::Utf8View | DataType::BinaryView => {
                let count = *self.variadic.get(self.next_variadic).ok_or_else(|| {
                    malformed(format!(
                        "no variadic buffer count for the {dt} column {:?}",
                        user.name()
                    ))
                })?;
                self.next_variadic += 1;
                let count = to_usize(count, "variadic buffer count")?;
                if count > self.buffers.len() {
                    return Err(malformed(format!(
                        "variadic buffer count {count} exceeds the {} buffers of the message",
                        self.buffers.len()
                    )));
                }
                let n = self.node(user)?;
                let v = self.validity(n.1)?;
                let mut b = vec![self.buffer()?];
                for _ in 0..count {
                    b.push(self.buffer()?);
                }
                self.leaf(dt, n, v, b, vec![])
            }
            DataType::List(_) | DataType::LargeList(_) | DataType::Map(_, _) => {
                let n = self.node(user)?;
                let v = self.validity(n.1)?;
                let b = vec![self.buffer()?];
                let c = children(self)?;
                self.leaf(dt, n, v, b, c)
            }
            DataType::ListView(_) | DataType::LargeListView(_) => {
                let n = self.node(user)?;
                let v = self.validity(n.1)?;
                let b = vec![self.buffer()?, self.buffer()?];
                let c = children(self)?;
                self.leaf(dt, n, v, b, c)
            }
            DataType::FixedSizeList(_, _) | DataType::Struct(_) => {
                let n = self.node(user)?;
                let v = self.validity(n.1)?;
                let c = children(self)?;
                self.leaf(dt, n, v, vec![], c)
            }
            DataType::RunEndEncoded(_, _) => {
                let n = self.node(user)?;
                if self.version < MetadataVersion::V5 {
                    self.buffer()?;
                }
                let c = children(self)?;
                self.leaf(dt, (n.0, 0), None, vec![], c)
            }
            DataType::Union(_, mode) => {
                let n = self.node(user)?;
                if self.version < MetadataVersion::V5 {
                    self.buffer()?;
                }
                let mut b = vec![self.buffer()?];
                if *mode == UnionMode::Dense {
                    b.push(self.buffer()?);
                }
                let c = children(self)?;
                self.leaf(dt, (n.0, 0), None, b, c)
            }
            DataType::Dictionary(_, values) => {
                let n = self.node(user)?;
                let v = self.validity(n.1)?;
                let keys = self.buffer()?;
                let id = dict_id(ids)?;
                let dictionary = match self.dictionaries.get(&id) {
                    Some(d) => d.clone(),
                    // The IPC format may omit the dictionary of an all-null column.
                    None if n.1 == n.0 => self.empty(values)?,
                    None => {
                        return Err(malformed(format!(
                            "no dictionary batch with id {id} for the column {:?}",
                            user.name()
                        )));
                    }
                };
                let mut p = self.leaf(dt, n, v, vec![keys], vec![]);
                p.dictionary = Some(Box::new(dictionary));
                p
            }
            _ => {
                let n = self.node(user)?;
                let v = self.validity(n.1)?;
                let b = vec![self.buffer()?];
                self.leaf(dt, n, v, b, vec![])
            }
        })
    }

    /// An empty array of type `dt` over zero-length buffers.
    fn empty(&self, dt: &DataType) -> Result<Parts<S::Buf>> {
        let l = layout_of(dt)?;
        let buffers = (0..l.buffers.len())
            .map(|_| self.src.slice(0, 0))
            .collect::<Result<Vec<_>>>()?;
        let children = child_fields(dt)
            .iter()
            .map(|f| self.empty(f.data_type()))
            .collect::<Result<Vec<_>>>()?;
        let dictionary = match dt {
            DataType::Dictionary(_, v) => Some(Box::new(self.empty(v)?)),
            _ => None,
        };
        Ok(Parts {
            data_type: dt.clone(),
            len: 0,
            null_count: 0,
            offset: 0,
            validity: None,
            buffers,
            children,
            dictionary,
        })
    }
}

/// One message: where its metadata is and where its body starts.
struct MessageAt {
    metadata: Vec<u8>,
    body_start: usize,
}

/// Reads the prefix and metadata of the message at `pos` (copied to the host).
/// `None` at an end-of-stream marker.
fn read_message<S: Source>(src: &S, pos: usize) -> Result<Option<MessageAt>> {
    let total = src.len();
    let avail = total - pos;
    if avail < 4 {
        return Err(malformed(format!(
            "{avail} bytes at offset {pos} are too few for a message prefix"
        )));
    }
    let mut word = [0u8; 4];
    src.read(pos, &mut word)?;
    let (meta_len, header) = if word == CONTINUATION {
        if avail < 8 {
            return Err(malformed(format!(
                "truncated message prefix at offset {pos}"
            )));
        }
        src.read(pos + 4, &mut word)?;
        (i32::from_le_bytes(word), 8)
    } else {
        (i32::from_le_bytes(word), 4)
    };
    if meta_len == 0 {
        return Ok(None);
    }
    let meta_len = usize::try_from(meta_len).map_err(|_| {
        malformed(format!(
            "negative metadata length {meta_len} at offset {pos}"
        ))
    })?;
    if meta_len > avail - header {
        return Err(malformed(format!(
            "metadata of {meta_len} bytes at offset {pos} runs past the end of the {total}-byte input"
        )));
    }
    let mut metadata = vec![0u8; meta_len];
    src.read(pos + header, &mut metadata)?;
    Ok(Some(MessageAt {
        metadata,
        body_start: pos + header + meta_len,
    }))
}

/// Parses the messages of one record batch (dictionaries first) from `src`.
pub(crate) fn parse<S: Source>(src: &S, schema: &Schema) -> Result<Parsed<S::Buf>> {
    let ids = schema_with_dict_ids(schema)?;
    let mut dict_types = HashMap::new();
    for (u, i) in schema.fields().iter().zip(ids.fields().iter()) {
        collect_dictionaries(u, i, &mut dict_types)?;
    }
    let mut dictionaries: HashMap<i64, Parts<S::Buf>> = HashMap::new();
    let mut pos = 0usize;
    loop {
        if pos >= src.len() {
            return Err(malformed(format!(
                "no record batch message in {} bytes",
                src.len()
            )));
        }
        let Some(m) = read_message(src, pos)? else {
            return Err(malformed(format!(
                "end-of-stream marker at offset {pos} before a record batch"
            )));
        };
        let msg = arrow_ipc::root_as_message(&m.metadata)
            .map_err(|e| malformed(format!("invalid metadata flatbuffer at offset {pos}: {e}")))?;
        let version = msg.version();
        if version < MetadataVersion::V4 || version > MetadataVersion::V5 {
            return Err(malformed(format!(
                "metadata version {version:?} is not supported (V4 and V5 are)"
            )));
        }
        let body_len = to_usize(msg.bodyLength(), "body length")?;
        let body_end = m
            .body_start
            .checked_add(body_len)
            .filter(|&e| e <= src.len())
            .ok_or_else(|| {
                malformed(format!(
                    "body of {body_len} bytes at offset {} runs past the end of the {}-byte input",
                    m.body_start,
                    src.len()
                ))
            })?;
        let decode = |rb: arrow_ipc::RecordBatch,
                      fields: &[(&Field, &Field)],
                      dictionaries: &HashMap<i64, Parts<S::Buf>>|
         -> Result<Parsed<S::Buf>> {
            if rb.compression().is_some() {
                return Err(Error::invalid(
                    "compressed Arrow IPC bodies are not supported: buffers could not stay \
                     zero-copy (write the batch without compression)",
                ));
            }
            let mut d = Decoder {
                src,
                body_start: m.body_start,
                body_len,
                nodes: rb
                    .nodes()
                    .map(|v| v.iter().map(|n| (n.length(), n.null_count())).collect())
                    .unwrap_or_default(),
                next_node: 0,
                buffers: rb
                    .buffers()
                    .map(|v| v.iter().map(|b| (b.offset(), b.length())).collect())
                    .unwrap_or_default(),
                next_buffer: 0,
                variadic: rb
                    .variadicBufferCounts()
                    .map(|v| v.iter().collect())
                    .unwrap_or_default(),
                next_variadic: 0,
                version,
                dictionaries,
            };
            let rows = to_usize(rb.length(), "row count")?;
            let mut columns = Vec::with_capacity(fields.len());
            for (u, i) in fields {
                let p = d.array(u, i)?;
                if p.len != rows {
                    return Err(malformed(format!(
                        "column {:?} has {} rows, the batch {rows}",
                        u.name(),
                        p.len
                    )));
                }
                p.validate()
                    .map_err(|e| malformed(format!("column {:?}: {}", u.name(), strip(&e))))?;
                columns.push(p);
            }
            if d.next_node != d.nodes.len() || d.next_buffer != d.buffers.len() {
                return Err(malformed(format!(
                    "the message has {} field nodes and {} buffers, the schema uses {} and {}: \
                     is the schema the one the batch was written with?",
                    d.nodes.len(),
                    d.buffers.len(),
                    d.next_node,
                    d.next_buffer
                )));
            }
            Ok(Parsed { rows, columns })
        };
        match msg.header_type() {
            MessageHeader::Schema => {
                let fb = msg
                    .header_as_schema()
                    .ok_or_else(|| malformed("schema message without a schema"))?;
                let theirs = arrow_ipc::convert::try_fb_to_schema(fb)?;
                let same = theirs.fields().len() == schema.fields().len()
                    && theirs
                        .fields()
                        .iter()
                        .zip(schema.fields())
                        .all(|(a, b)| a.data_type() == b.data_type());
                if !same {
                    return Err(Error::invalid(format!(
                        "the message's schema ({theirs}) does not match the given one ({schema})"
                    )));
                }
            }
            MessageHeader::DictionaryBatch => {
                let db = msg
                    .header_as_dictionary_batch()
                    .ok_or_else(|| malformed("dictionary message without a dictionary batch"))?;
                if db.isDelta() {
                    return Err(Error::invalid(
                        "delta dictionary batches are not supported (concatenating them would \
                         copy); write the whole dictionary",
                    ));
                }
                let id = db.id();
                let (uf, idf) = dict_types.get(&id).ok_or_else(|| {
                    malformed(format!(
                        "dictionary batch id {id} matches no dictionary field of the schema: is the \
                         schema the one the batch was written with?"
                    ))
                })?;
                let rb = db
                    .data()
                    .ok_or_else(|| malformed("dictionary batch without data"))?;
                let mut parsed = decode(rb, &[(uf, idf)], &dictionaries)?;
                let values = parsed
                    .columns
                    .pop()
                    .ok_or_else(|| malformed("empty dictionary batch"))?;
                dictionaries.insert(id, values);
            }
            MessageHeader::RecordBatch => {
                let rb = msg
                    .header_as_record_batch()
                    .ok_or_else(|| malformed("record batch message without a record batch"))?;
                let pairs: Vec<(&Field, &Field)> = schema
                    .fields()
                    .iter()
                    .map(|f| f.as_ref())
                    .zip(ids.fields().iter().map(|f| f.as_ref()))
                    .collect();
                return decode(rb, &pairs, &dictionaries);
            }
            other => {
                return Err(malformed(format!(
                    "unexpected {other:?} message at offset {pos}"
                )));
            }
        }
        pos = body_end;
    }
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

/// Reads a record batch from Arrow IPC messages in host memory (the host fallback of
/// [`read_record_batch`]): the returned arrays' buffers are zero-copy slices of
/// `message` (e.g. a read-only mapping of another process's shared memory; a buffer
/// misaligned for its type is the only thing copied). Every array is fully validated.
///
/// `schema` must be the schema the batch was written with. Malformed input is an
/// [`Error::Malformed`] saying what is wrong; never a panic.
pub fn read_record_batch_host(message: &Buffer, schema: SchemaRef) -> Result<RecordBatch> {
    let parsed = parse(message, &schema)?;
    let columns = parsed
        .columns
        .into_iter()
        .map(|p| Ok(make_array(p.into_array_data()?)))
        .collect::<Result<Vec<_>>>()?;
    build_batch(schema, parsed.rows, columns)
}

/// Reads a record batch from Arrow IPC messages in device memory: only the metadata is
/// copied to the host; every column's buffers are zero-copy slices of `message`.
///
/// `schema` must be the schema the batch was written with (see [`schema_to_bytes`]).
/// Malformed metadata — truncated, bad flatbuffers, buffers outside the body, too
/// small for their arrays, a schema that does not match — is an error, never a panic;
/// the values themselves (offsets, UTF-8, dictionary keys) are checked by
/// [`DeviceRecordBatch::to_host`].
pub fn read_record_batch(message: &DeviceBuffer, schema: SchemaRef) -> Result<DeviceRecordBatch> {
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

    /// The schema.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Number of rows.
    pub fn num_rows(&self) -> usize {
        self.num_rows
    }

    /// Number of columns.
    pub fn num_columns(&self) -> usize {
        self.columns.len()
    }

    /// The columns.
    pub fn columns(&self) -> &[DeviceArray] {
        &self.columns
    }

    /// Column `i` (`None` past the end).
    pub fn column(&self, i: usize) -> Option<&DeviceArray> {
        self.columns.get(i)
    }

    /// The column named `name`.
    pub fn column_by_name(&self, name: &str) -> Option<&DeviceArray> {
        self.schema
            .index_of(name)
            .ok()
            .and_then(|i| self.columns.get(i))
    }

    /// The device buffer the batch was read from (its columns slice it).
    pub fn message(&self) -> &DeviceBuffer {
        &self.message
    }

    /// Copies the batch to the host — the whole message in one transfer, into
    /// page-locked memory that the arrays then share without further copies — and
    /// validates every array fully.
    pub fn to_host(&self) -> Result<RecordBatch> {
        let base = self.message.address();
        let end = base + self.message.len() as u64;
        let host = self.message.to_arrow_buffer()?;
        let ctx = self.message.context().clone();
        let mut map = |b: &DeviceBuffer| -> Result<Buffer> {
            if b.is_empty() {
                return Ok(Buffer::from_vec(Vec::<u8>::new()));
            }
            let a = b.address();
            if b.context().same_as(&ctx) && a >= base && a + b.len() as u64 <= end {
                Ok(host.slice_with_length((a - base) as usize, b.len()))
            } else {
                b.to_arrow_buffer()
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
