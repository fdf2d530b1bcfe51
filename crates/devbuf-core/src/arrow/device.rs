//! [`DeviceArray`]: an Arrow array whose buffers live in device memory.
//!
//! The layout follows arrow-rs's `ArrayData` (the Arrow columnar format): a data type,
//! a length, a null count, an offset into the buffers, an optional validity bitmap,
//! the type's buffers, child arrays, and — for dictionary arrays — the dictionary
//! values. Buffers are [`DeviceBuffer`]s, usually zero-copy slices of a larger buffer
//! (an Arrow IPC message read by [`read_record_batch`](super::read_record_batch)).
//! The Arrow C Device Data Interface builds on the same description.

use std::fmt;

use arrow_array::{Array, ArrayRef, make_array};
use arrow_buffer::Buffer;
use arrow_data::{ArrayData, ArrayDataBuilder, BufferSpec, DataTypeLayout, layout};
use arrow_schema::{DataType, Field, UnionMode};

use crate::cuda::{Context, DeviceBuffer};
use crate::error::{Error, Result};

/// Anything with a length in bytes (device or host buffers).
pub(crate) trait ByteLen {
    fn byte_len(&self) -> usize;
}

impl ByteLen for DeviceBuffer {
    fn byte_len(&self) -> usize {
        self.len()
    }
}

impl ByteLen for Buffer {
    fn byte_len(&self) -> usize {
        self.len()
    }
}

/// The description of an array, generic over where its buffers live (so that the IPC
/// reader runs the same code on host and device memory).
#[derive(Clone, Debug)]
pub(crate) struct Parts<B> {
    pub data_type: DataType,
    pub len: usize,
    pub null_count: usize,
    pub offset: usize,
    pub validity: Option<B>,
    pub buffers: Vec<B>,
    pub children: Vec<Parts<B>>,
    pub dictionary: Option<Box<Parts<B>>>,
}

fn bad(msg: impl fmt::Display) -> Error {
    Error::invalid(msg)
}

fn mul_add(a: usize, b: usize, c: usize, what: &str) -> Result<usize> {
    a.checked_mul(b)
        .and_then(|x| x.checked_add(c))
        .ok_or_else(|| bad(format!("{what}: size overflows")))
}

/// `arrow_data::layout`, except that a negative `FixedSizeBinary` width (for which it
/// panics) is an error.
pub(crate) fn layout_of(dt: &DataType) -> Result<DataTypeLayout> {
    match dt {
        DataType::FixedSizeBinary(n) if *n < 0 => Err(bad(format!(
            "{dt}: the width {n} is negative (valid: 0 or more bytes)"
        ))),
        DataType::Dictionary(key, _) => layout_of(key),
        _ => Ok(layout(dt)),
    }
}

/// Whether the type's first buffer holds `length + 1` offsets (the sizes of such
/// arrays are checked against `offset + len + 1` offsets).
pub(crate) fn has_offsets(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::List(_)
            | DataType::LargeList(_)
            | DataType::Map(_, _)
    )
}

/// The child fields of a nested type, in the order of its child arrays (not counting
/// dictionary values); none for other types.
pub(crate) fn child_fields(dt: &DataType) -> Vec<Field> {
    match dt {
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => vec![f.as_ref().clone()],
        DataType::Struct(fs) => fs.iter().map(|f| f.as_ref().clone()).collect(),
        DataType::Union(fs, _) => fs.iter().map(|(_, f)| f.as_ref().clone()).collect(),
        DataType::RunEndEncoded(r, v) => vec![r.as_ref().clone(), v.as_ref().clone()],
        _ => vec![],
    }
}

impl<B: ByteLen> Parts<B> {
    /// Checks the structure and that every buffer is large enough for `offset + len`
    /// elements (the values of offsets, UTF-8 and dictionary keys are checked when the
    /// array reaches the host).
    pub(crate) fn validate(&self) -> Result<()> {
        let dt = &self.data_type;
        let what = format!("{dt} array of length {}", self.len);
        let end = self
            .offset
            .checked_add(self.len)
            .ok_or_else(|| bad(format!("{what}: offset {} overflows", self.offset)))?;
        let l = layout_of(dt)?;
        if self.null_count > self.len {
            return Err(bad(format!(
                "{what}: null count {} exceeds the length",
                self.null_count
            )));
        }
        match &self.validity {
            Some(v) => {
                if !l.can_contain_null_mask {
                    return Err(bad(format!("{what}: this type has no validity bitmap")));
                }
                let need = end.div_ceil(8);
                if v.byte_len() < need {
                    return Err(bad(format!(
                        "{what}: validity bitmap of {} bytes, needs {need} (offset {} + length {} bits)",
                        v.byte_len(),
                        self.offset,
                        self.len
                    )));
                }
            }
            None => {
                if self.null_count > 0 && l.can_contain_null_mask && *dt != DataType::Null {
                    return Err(bad(format!(
                        "{what}: null count {} without a validity bitmap",
                        self.null_count
                    )));
                }
            }
        }
        let count_ok = if l.variadic {
            self.buffers.len() >= l.buffers.len()
        } else {
            self.buffers.len() == l.buffers.len()
        };
        if !count_ok {
            return Err(bad(format!(
                "{what}: {} buffers, the type has {}{}",
                self.buffers.len(),
                if l.variadic { "at least " } else { "" },
                l.buffers.len()
            )));
        }
        let has_offsets = has_offsets(dt);
        for (i, (b, spec)) in self.buffers.iter().zip(&l.buffers).enumerate() {
            let need = match spec {
                BufferSpec::FixedWidth { byte_width, .. } => {
                    if i == 0 && has_offsets {
                        if self.len == 0 && b.byte_len() == 0 {
                            0
                        } else {
                            mul_add(end, *byte_width, *byte_width, &what)?
                        }
                    } else {
                        mul_add(end, *byte_width, 0, &what)?
                    }
                }
                BufferSpec::BitMap => end.div_ceil(8),
                BufferSpec::VariableWidth | BufferSpec::AlwaysNull => 0,
            };
            if b.byte_len() < need {
                return Err(bad(format!(
                    "{what}: buffer {i} holds {} bytes, needs at least {need}",
                    b.byte_len()
                )));
            }
        }
        let want = child_fields(dt);
        if self.children.len() != want.len() {
            return Err(bad(format!(
                "{what}: {} child arrays, the type has {}",
                self.children.len(),
                want.len()
            )));
        }
        for (i, (c, t)) in self
            .children
            .iter()
            .zip(want.iter().map(Field::data_type))
            .enumerate()
        {
            if &c.data_type != t {
                return Err(bad(format!(
                    "{what}: child {i} is {}, the type says {t}",
                    c.data_type
                )));
            }
            let need = match dt {
                DataType::Struct(_) | DataType::Union(_, UnionMode::Sparse) => end,
                DataType::FixedSizeList(_, n) => mul_add(end, (*n).max(0) as usize, 0, &what)?,
                _ => 0,
            };
            if c.len < need {
                return Err(bad(format!(
                    "{what}: child {i} has {} elements, needs at least {need}",
                    c.len
                )));
            }
            c.validate()?;
        }
        match (dt, &self.dictionary) {
            (DataType::Dictionary(_, v), Some(d)) => {
                if &d.data_type != v.as_ref() {
                    return Err(bad(format!(
                        "{what}: dictionary values are {}, the type says {v}",
                        d.data_type
                    )));
                }
                d.validate()?;
            }
            (DataType::Dictionary(_, _), None) => {
                return Err(bad(format!("{what}: no dictionary values")));
            }
            (_, Some(_)) => {
                return Err(bad(format!(
                    "{what}: dictionary values given for a type that is not a dictionary"
                )));
            }
            _ => {}
        }
        Ok(())
    }

    /// The same description over other buffers (e.g. copied to the host).
    pub(crate) fn map<C>(&self, f: &mut impl FnMut(&B) -> Result<C>) -> Result<Parts<C>> {
        Ok(Parts {
            data_type: self.data_type.clone(),
            len: self.len,
            null_count: self.null_count,
            offset: self.offset,
            validity: self.validity.as_ref().map(&mut *f).transpose()?,
            buffers: self.buffers.iter().map(&mut *f).collect::<Result<_>>()?,
            children: self
                .children
                .iter()
                .map(|c| c.map(f))
                .collect::<Result<_>>()?,
            dictionary: match &self.dictionary {
                Some(d) => Some(Box::new(d.map(f)?)),
                None => None,
            },
        })
    }
}

impl Parts<Buffer> {
    /// Builds (and fully validates) an arrow-rs `ArrayData` over these host buffers,
    /// without copying them (except buffers misaligned for their type).
    pub(crate) fn into_array_data(self) -> Result<ArrayData> {
        if self.data_type == DataType::Null {
            return Ok(ArrayDataBuilder::new(DataType::Null)
                .len(self.len)
                .offset(self.offset)
                .build()?);
        }
        let mut children = self
            .children
            .into_iter()
            .map(Parts::into_array_data)
            .collect::<Result<Vec<_>>>()?;
        if let Some(d) = self.dictionary {
            children.push(d.into_array_data()?);
        }
        // arrow-rs views fixed-width buffers as typed slices with an assertion (a panic)
        // that the length is a whole number of elements; a buffer from an IPC message may
        // be longer than needed by a few bytes. Drop the partial element at the end
        // (`validate` checked that the whole elements cover `offset + len`).
        let spec = layout_of(&self.data_type)?;
        let buffers = self
            .buffers
            .into_iter()
            .zip(spec.buffers.iter().map(Some).chain(std::iter::repeat(None)))
            .map(|(b, spec)| match spec {
                Some(BufferSpec::FixedWidth { byte_width, .. }) if b.len() % byte_width != 0 => {
                    b.slice_with_length(0, b.len() - b.len() % byte_width)
                }
                _ => b,
            })
            .collect::<Vec<_>>();
        let b = ArrayDataBuilder::new(self.data_type)
            .len(self.len)
            .offset(self.offset)
            .null_count(self.null_count)
            .null_bit_buffer(if self.null_count > 0 {
                self.validity
            } else {
                None
            })
            .buffers(buffers)
            .child_data(children)
            .align_buffers(true);
        // The buffers came from outside (an IPC message, a C Data Interface producer):
        // arrow-rs's validation failing means the data is damaged, not that devbuf was
        // called wrongly.
        b.build().map_err(|e| match e {
            arrow_schema::ArrowError::InvalidArgumentError(m) => Error::Malformed(m),
            e => Error::from(e),
        })
    }

    /// The description of a host array (normalised to offset 0 by a copy).
    pub(crate) fn from_array_data(data: &ArrayData) -> Result<Parts<Buffer>> {
        let data = if data.offset() != 0
            || data.nulls().is_some_and(|n| n.offset() != 0)
            || data.data_type().is_nested()
        {
            // One layout offset for validity and buffers: copy into a fresh array.
            let mut m = arrow_data::transform::MutableArrayData::new(vec![data], false, data.len());
            m.try_extend(0, 0, data.len())?;
            m.freeze()
        } else {
            data.clone()
        };
        if data.offset() != 0 || data.nulls().is_some_and(|n| n.offset() != 0) {
            return Err(bad(format!(
                "cannot describe a {} array with offset {} as device buffers",
                data.data_type(),
                data.offset()
            )));
        }
        let mut children: Vec<Parts<Buffer>> = data
            .child_data()
            .iter()
            .map(Parts::from_array_data)
            .collect::<Result<_>>()?;
        let dictionary = if matches!(data.data_type(), DataType::Dictionary(_, _)) {
            Some(Box::new(
                children
                    .pop()
                    .ok_or_else(|| bad("dictionary array without values"))?,
            ))
        } else {
            None
        };
        let null_count = if *data.data_type() == DataType::Null {
            data.len()
        } else {
            data.null_count()
        };
        Ok(Parts {
            data_type: data.data_type().clone(),
            len: data.len(),
            null_count,
            offset: 0,
            validity: data.nulls().map(|n| n.buffer().clone()),
            buffers: data.buffers().to_vec(),
            children,
            dictionary,
        })
    }
}

/// An Arrow array whose buffers live in device memory.
///
/// Usually made by [`read_record_batch`](super::read_record_batch) (zero-copy slices of
/// an IPC message in device memory) or [`DeviceArray::from_host`] (a copy). Buffers
/// follow arrow-rs's `ArrayData` layout: [`validity`](Self::validity) is separate,
/// [`buffers`](Self::buffers) are the type's buffers (values; offsets and values;
/// views and data; type ids and offsets...), [`children`](Self::children) the child
/// arrays, and a dictionary array's values are [`dictionary`](Self::dictionary).
///
/// ```no_run
/// use arrow_array::{Array, Int32Array};
/// use devbuf_core::arrow::DeviceArray;
/// use devbuf_core::cuda::Context;
/// let ctx = Context::new(0)?;
/// let host = Int32Array::from(vec![Some(1), None, Some(3)]);
/// let d = DeviceArray::from_host(&host, &ctx)?;
/// assert_eq!((d.len(), d.null_count()), (3, 1));
/// let back = d.to_host()?;
/// assert_eq!(back.as_ref(), &host as &dyn Array);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone)]
pub struct DeviceArray {
    data_type: DataType,
    len: usize,
    null_count: usize,
    offset: usize,
    validity: Option<DeviceBuffer>,
    buffers: Vec<DeviceBuffer>,
    children: Vec<DeviceArray>,
    dictionary: Option<Box<DeviceArray>>,
}

impl DeviceArray {
    /// Builds a device array from its parts, checking the structure (buffer and child
    /// counts, child and dictionary types) and that every buffer is large enough for
    /// `offset + len` elements. Values (offsets, UTF-8, dictionary keys) are checked by
    /// [`to_host`](Self::to_host).
    #[allow(clippy::too_many_arguments)]
    pub fn try_new(
        data_type: DataType,
        len: usize,
        null_count: usize,
        offset: usize,
        validity: Option<DeviceBuffer>,
        buffers: Vec<DeviceBuffer>,
        children: Vec<DeviceArray>,
        dictionary: Option<DeviceArray>,
    ) -> Result<DeviceArray> {
        let a = DeviceArray {
            data_type,
            len,
            null_count,
            offset,
            validity,
            buffers,
            children,
            dictionary: dictionary.map(Box::new),
        };
        a.to_parts().validate()?;
        Ok(a)
    }

    pub(crate) fn from_parts(p: Parts<DeviceBuffer>) -> DeviceArray {
        DeviceArray {
            data_type: p.data_type,
            len: p.len,
            null_count: p.null_count,
            offset: p.offset,
            validity: p.validity,
            buffers: p.buffers,
            children: p
                .children
                .into_iter()
                .map(DeviceArray::from_parts)
                .collect(),
            dictionary: p.dictionary.map(|d| Box::new(DeviceArray::from_parts(*d))),
        }
    }

    pub(crate) fn to_parts(&self) -> Parts<DeviceBuffer> {
        Parts {
            data_type: self.data_type.clone(),
            len: self.len,
            null_count: self.null_count,
            offset: self.offset,
            validity: self.validity.clone(),
            buffers: self.buffers.clone(),
            children: self.children.iter().map(DeviceArray::to_parts).collect(),
            dictionary: self.dictionary.as_ref().map(|d| Box::new(d.to_parts())),
        }
    }

    /// Copies a host array's buffers to the device (one copy each).
    pub fn from_host(array: &dyn Array, ctx: &Context) -> Result<DeviceArray> {
        let host = Parts::from_array_data(&array.to_data())?;
        let dev = host.map(&mut |b: &Buffer| DeviceBuffer::from_slice(ctx, b.as_slice()))?;
        dev.validate()?;
        Ok(DeviceArray::from_parts(dev))
    }

    /// The Arrow data type.
    pub fn data_type(&self) -> &DataType {
        &self.data_type
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of null elements (for the `Null` type, the length).
    pub fn null_count(&self) -> usize {
        self.null_count
    }

    /// Offset of the first element in the buffers, in elements.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The validity bitmap (bit set = valid), absent when there are no nulls.
    pub fn validity(&self) -> Option<&DeviceBuffer> {
        self.validity.as_ref()
    }

    /// The type's buffers, as in arrow-rs's `ArrayData::buffers`.
    pub fn buffers(&self) -> &[DeviceBuffer] {
        &self.buffers
    }

    /// The child arrays (list values, struct fields, union members, run ends and values).
    pub fn children(&self) -> &[DeviceArray] {
        &self.children
    }

    /// The dictionary values of a dictionary array.
    pub fn dictionary(&self) -> Option<&DeviceArray> {
        self.dictionary.as_deref()
    }

    /// Copies the array to the host and checks it fully (offsets, UTF-8, dictionary
    /// keys): an invalid array is an error, never undefined behaviour.
    pub fn to_host(&self) -> Result<ArrayRef> {
        self.to_host_with(&mut |b: &DeviceBuffer| Ok(Buffer::from(b.to_host()?)))
    }

    pub(crate) fn to_host_with(
        &self,
        f: &mut impl FnMut(&DeviceBuffer) -> Result<Buffer>,
    ) -> Result<ArrayRef> {
        Ok(make_array(self.to_parts().map(f)?.into_array_data()?))
    }

    /// The device ordinal of the first buffer (`None` for an array without buffers).
    pub(crate) fn device_ordinal(&self) -> Option<usize> {
        self.all_buffers().first().map(|b| b.context().ordinal())
    }

    /// Every device buffer of the array, its children and dictionary (for checks of
    /// where the memory lives).
    pub fn all_buffers(&self) -> Vec<&DeviceBuffer> {
        let mut v: Vec<&DeviceBuffer> = self.validity.iter().chain(&self.buffers).collect();
        for c in &self.children {
            v.extend(c.all_buffers());
        }
        if let Some(d) = &self.dictionary {
            v.extend(d.all_buffers());
        }
        v
    }
}

impl fmt::Debug for DeviceArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceArray")
            .field("data_type", &self.data_type)
            .field("len", &self.len)
            .field("null_count", &self.null_count)
            .field("offset", &self.offset)
            .field("validity", &self.validity)
            .field("buffers", &self.buffers)
            .field("children", &self.children)
            .field("dictionary", &self.dictionary)
            .finish()
    }
}

impl TryFrom<super::DeviceRecordBatch> for DeviceArray {
    type Error = Error;

    /// A device record batch as one struct array whose children are its columns
    /// (zero-copy; as arrow-rs's `StructArray::from(RecordBatch)`): the form in which
    /// batches cross a C device stream.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use arrow_array::{Int32Array, RecordBatch};
    /// use devbuf_core::arrow::{Batch, DeviceArray, read_record_batch, serialize_record_batch};
    /// use devbuf_core::zarr::BufferPrototype;
    /// let batch = RecordBatch::try_from_iter(vec![("x", Arc::new(Int32Array::from(vec![1, 2])) as _)])?;
    /// let message = serialize_record_batch(&Batch::from(batch.clone()), &BufferPrototype::Device(0))?;
    /// let Batch::Device(on_device) = read_record_batch(&message, batch.schema())? else { unreachable!() };
    /// let s = DeviceArray::try_from(on_device.clone())?;
    /// assert_eq!(s.children()[0].buffers()[0].address(), on_device.columns()[0].buffers()[0].address());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn try_from(batch: super::DeviceRecordBatch) -> Result<DeviceArray> {
        DeviceArray::try_new(
            DataType::Struct(batch.schema().fields().clone()),
            batch.num_rows(),
            0,
            0,
            None,
            Vec::new(),
            batch.columns().to_vec(),
            None,
        )
    }
}
