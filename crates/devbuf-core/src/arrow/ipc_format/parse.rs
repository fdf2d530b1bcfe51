//! Reading: one parser of encapsulated IPC messages, generic over where the bytes live
//! (a [`IpcBytes`]: device memory or a host buffer); only the metadata is copied to the
//! host, every body buffer stays a zero-copy slice of the input.

use super::*;

/// Bytes the IPC reader can parse: it copies small ranges (metadata) to the host and
/// slices the rest without copying.
pub(crate) trait IpcBytes {
    type Buf: Clone + ByteLen;
    fn len(&self) -> usize;
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()>;
    fn slice(&self, offset: usize, len: usize) -> Result<Self::Buf>;
}

impl IpcBytes for DeviceBuffer {
    type Buf = DeviceBuffer;
    fn len(&self) -> usize {
        DeviceBuffer::len(self)
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.copy_to_host(offset, dst)
    }
    fn slice(&self, offset: usize, len: usize) -> Result<DeviceBuffer> {
        DeviceBuffer::slice(self, offset, len)
    }
}

impl IpcBytes for Buffer {
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
pub(super) fn schema_with_dict_ids(schema: &Schema) -> Result<Schema> {
    let (ed, _) = schema_message(schema)?;
    let msg = arrow_ipc::root_as_message(&ed.ipc_message)
        .map_err(|e| Error::arrow(format!("re-reading the schema: {e}")))?;
    let fb = msg
        .header_as_schema()
        .ok_or_else(|| Error::arrow("re-reading the schema: not a schema message"))?;
    Ok(arrow_ipc::convert::try_fb_to_schema(fb)?)
}

#[allow(deprecated)]
pub(super) fn dict_id(f: &Field) -> Result<i64> {
    f.dict_id()
        .ok_or_else(|| Error::arrow(format!("field {:?} has no dictionary id", f.name())))
}

/// Collects, for every dictionary field in `(user, ids)`, its id and value types.
pub(super) fn collect_dictionaries(
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

pub(super) struct IpcBodyDecoder<'a, S: IpcBytes> {
    pub(super) src: &'a S,
    pub(super) body_start: usize,
    pub(super) body_len: usize,
    pub(super) nodes: Vec<(i64, i64)>,
    pub(super) next_node: usize,
    pub(super) buffers: Vec<(i64, i64)>,
    pub(super) next_buffer: usize,
    pub(super) variadic: Vec<i64>,
    pub(super) next_variadic: usize,
    pub(super) version: MetadataVersion,
    pub(super) dictionaries: &'a HashMap<i64, Parts<S::Buf>>,
}

pub(super) fn to_usize(v: i64, what: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| malformed(format!("{what} {v} is negative or too large")))
}

impl<S: IpcBytes> IpcBodyDecoder<'_, S> {
    pub(super) fn node(&mut self, field: &Field) -> Result<(usize, usize)> {
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

    pub(super) fn buffer(&mut self) -> Result<S::Buf> {
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

    pub(super) fn validity(&mut self, null_count: usize) -> Result<Option<S::Buf>> {
        let b = self.buffer()?;
        Ok((null_count > 0).then_some(b))
    }

    pub(super) fn leaf(
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
    pub(super) fn array(&mut self, user: &Field, ids: &Field) -> Result<Parts<S::Buf>> {
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
    pub(super) fn empty(&self, dt: &DataType) -> Result<Parts<S::Buf>> {
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
pub(super) struct MessageAt {
    pub(super) metadata: Vec<u8>,
    pub(super) body_start: usize,
}

/// Reads the prefix and metadata of the message at `pos` (copied to the host).
/// `None` at an end-of-stream marker.
pub(super) fn read_message<S: IpcBytes>(src: &S, pos: usize) -> Result<Option<MessageAt>> {
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
pub(crate) fn parse<S: IpcBytes>(src: &S, schema: &Schema) -> Result<Parsed<S::Buf>> {
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
            return Err(Error::unsupported(format!(
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
                return Err(Error::unsupported(
                    "compressed Arrow IPC bodies are not supported: buffers could not stay \
                     zero-copy (write the batch without compression)",
                ));
            }
            let mut d = IpcBodyDecoder {
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
                    return Err(Error::unsupported(
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
