//! [`ChunkBatch`]: many chunks of a zarr array as one Arrow record batch — one `UInt64`
//! column of chunk coordinates per grid dimension and one `arrow.fixed_shape_tensor`
//! column of chunk data — on the host ([`RecordBatch`]) or the device
//! ([`DeviceRecordBatch`]).
//!
//! This file: [`ChunkGrid`], [`ChunkBatch`] and reading batches back. `build.rs`: the
//! allocation plan and the one builder (host or device).

mod build;

#[allow(unused_imports)]
use build::*;

use std::borrow::Borrow;
use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, UInt64Array, make_array};
use arrow_buffer::{Buffer, MutableBuffer};
use arrow_schema::{DataType as ArrowType, Field, Schema, SchemaRef};

use super::Batch;
use super::device::{DeviceArray, Parts};
use super::ipc_format::DeviceRecordBatch;
use super::tensor::{TensorArray, TensorType};
use crate::cuda::kernels::bits;
use crate::cuda::{Context, DeviceBuffer};
use crate::element::ElementType;
use crate::error::{Error, Result};
use crate::memory::{MemMut, Place, prim};
use crate::zarr::{AxisSel, BufferPrototype, Dtype, NDBuffer, Order, Scalar};

/// Name of the chunk data column.
pub const CHUNK_COLUMN: &str = "chunk";

/// Schema metadata key of the grid (`{"array_shape":[..],"chunk_shape":[..]}`), which
/// lets [`ChunkBatch::chunk`] cut edge chunks back to the array's extent.
pub const CHUNK_GRID_METADATA_KEY: &str = "devbuf.chunk_grid";

/// Name of the coordinate column of grid dimension `d`: `coord_{d}`.
pub(crate) fn coord_column(d: usize) -> String {
    format!("coord_{d}")
}

/// Sections of one allocation start at multiples of this (Arrow's buffer alignment).
const SECTION: usize = 64;

fn round_up(n: usize) -> Result<usize> {
    n.checked_next_multiple_of(SECTION)
        .ok_or_else(|| Error::invalid("chunk batch size overflows"))
}

fn overflow() -> Error {
    Error::invalid("chunk batch size overflows")
}

/// The regular chunk grid of a zarr array: its shape, the chunk shape, the data type and
/// the fill value that pads edge chunks.
///
/// ```
/// use devbuf_core::arrow::ChunkGrid;
/// use devbuf_core::zarr::Dtype;
/// let g = ChunkGrid::new(&[10, 7], &[4, 4], Dtype::FLOAT32)?;
/// assert_eq!(g.grid_shape(), vec![3, 2]);
/// assert_eq!(g.chunk_extent(&[2, 1])?, vec![2, 3]); // an edge chunk
/// assert!(g.chunk_extent(&[3, 0]).is_err());
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkGrid {
    array_shape: Vec<usize>,
    chunk_shape: Vec<usize>,
    dtype: Dtype,
    fill_value: Option<Scalar>,
}

impl ChunkGrid {
    /// A grid of `chunk_shape` chunks (every entry at least 1, as zarr requires) over an
    /// array of `array_shape`. The fill value is zero until
    /// [`with_fill_value`](Self::with_fill_value).
    pub fn new(array_shape: &[usize], chunk_shape: &[usize], dtype: Dtype) -> Result<ChunkGrid> {
        if array_shape.len() != chunk_shape.len() {
            return Err(Error::invalid(format!(
                "array shape {array_shape:?} and chunk shape {chunk_shape:?} differ in length"
            )));
        }
        if chunk_shape.contains(&0) {
            return Err(Error::invalid(format!(
                "chunk shape {chunk_shape:?}: every chunk length must be at least 1"
            )));
        }
        Ok(ChunkGrid {
            array_shape: array_shape.to_vec(),
            chunk_shape: chunk_shape.to_vec(),
            dtype,
            fill_value: None,
        })
    }

    /// Sets the fill value (zarr's `fill_value`), converted to the data type as numpy's
    /// unsafe cast does; it pads the out-of-bounds part of edge chunks.
    pub fn with_fill_value(mut self, fill_value: Scalar) -> ChunkGrid {
        self.fill_value = Some(fill_value);
        self
    }

    /// The array's shape.
    pub fn array_shape(&self) -> &[usize] {
        &self.array_shape
    }

    /// The chunk shape.
    pub fn chunk_shape(&self) -> &[usize] {
        &self.chunk_shape
    }

    /// The data type of the chunks.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The fill value, if set.
    pub fn fill_value(&self) -> Option<Scalar> {
        self.fill_value
    }

    /// Chunks per dimension: `ceil(array_shape / chunk_shape)`.
    pub fn grid_shape(&self) -> Vec<usize> {
        grid_shape(&self.array_shape, &self.chunk_shape)
    }

    /// The part of chunk `coords` inside the array (the chunk shape, cut at the array's
    /// end for edge chunks); coordinates outside the grid are an error.
    pub fn chunk_extent(&self, coords: &[u64]) -> Result<Vec<usize>> {
        chunk_extent(&self.array_shape, &self.chunk_shape, coords)
    }
}

fn grid_shape(array_shape: &[usize], chunk_shape: &[usize]) -> Vec<usize> {
    array_shape
        .iter()
        .zip(chunk_shape)
        .map(|(&a, &c)| a.div_ceil(c.max(1)))
        .collect()
}

fn chunk_extent(
    array_shape: &[usize],
    chunk_shape: &[usize],
    coords: &[u64],
) -> Result<Vec<usize>> {
    let grid = grid_shape(array_shape, chunk_shape);
    if coords.len() != grid.len() || coords.iter().zip(&grid).any(|(&c, &g)| c >= g as u64) {
        return Err(Error::invalid(format!(
            "chunk coordinates {coords:?} lie outside the chunk grid {grid:?} (array shape \
             {array_shape:?}, chunk shape {chunk_shape:?})"
        )));
    }
    Ok(coords
        .iter()
        .zip(array_shape.iter().zip(chunk_shape))
        .map(|(&c, (&a, &s))| s.min(a - c as usize * s))
        .collect())
}

/// C-order byte strides of `shape`.
fn c_strides(shape: &[usize], es: usize) -> Vec<isize> {
    let mut out = vec![0isize; shape.len()];
    let mut s = es;
    for j in (0..shape.len()).rev() {
        out[j] = s as isize;
        s = s.saturating_mul(shape[j]);
    }
    out
}

/// Many chunks of one array as one Arrow record batch: column `coord_{d}` (`UInt64`, not
/// nullable) holds each chunk's coordinate along grid dimension `d`, and column `chunk`
/// (`arrow.fixed_shape_tensor` of the chunk shape, C order) holds the chunk data.
///
/// **Edge chunks are padded** to the full chunk shape with the grid's fill value, as
/// zarr stores them, so every row is one fixed-shape tensor. The array and chunk
/// shapes are kept in the schema metadata ([`CHUNK_GRID_METADATA_KEY`]) so that
/// [`chunk`](Self::chunk) returns edge chunks cut back to the array
/// (`tensors().tensor(i)` returns the stored chunk).
///
/// **Memory.** All columns share one allocation (each column at a 64-byte aligned
/// offset): host memory for [`BufferPrototype::Host`], one device allocation for a
/// device prototype, whose coordinates are written with one host-to-device copy and
/// whose chunks are written with device-to-device copies (a C-contiguous full chunk is
/// one `cuMemcpyDtoD`; F-order, strided and edge chunks one strided-copy kernel, edge
/// chunks after a fill). Chunks in the other memory are moved to the prototype first
/// (one transfer each); big-endian chunks are byte-swapped; `bool` chunks are gathered
/// as bytes and bit-packed once. Building the batch therefore copies each chunk once;
/// reading chunks back ([`chunk`](Self::chunk)) is zero-copy (views of the batch) but for
/// `bool`. On the device the batch is a [`DeviceRecordBatch`] whose
/// [`message`](DeviceRecordBatch::message) is that allocation.
///
/// ```
/// use devbuf_core::arrow::{Batch, ChunkBatch, ChunkGrid};
/// use devbuf_core::zarr::{BufferPrototype, Dtype, NDBuffer, Scalar};
/// // A 5 x 3 int32 array in 2 x 2 chunks; two of its chunks:
/// let grid = ChunkGrid::new(&[5, 3], &[2, 2], Dtype::INT32)?.with_fill_value(Scalar::from(-1i32));
/// let c00 = NDBuffer::from_ndarray(ndarray::arr2(&[[0i32, 1], [3, 4]]));
/// let c21 = NDBuffer::from_ndarray(ndarray::arr2(&[[14i32]])); // the corner: 1 x 1
/// let batch = ChunkBatch::from_chunks(&grid, [(vec![0u64, 0], c00), (vec![2, 1], c21)], &BufferPrototype::Host)?;
/// let rb = batch.batch().as_host().unwrap();
/// assert_eq!(rb.num_rows(), 2);
/// assert_eq!(rb.schema().field(2).name(), "chunk");
/// let padded = batch.tensors().tensor(1)?; // as stored
/// assert_eq!(padded.to_ndarray::<i32>()?.into_raw_vec_and_offset().0, vec![14, -1, -1, -1]);
/// let back = ChunkBatch::try_from(Batch::Host(rb.clone()))?;
/// assert_eq!(back.coords(1), Some(&[2u64, 1][..]));
/// assert_eq!(back.chunk(1)?.shape(), &[1, 1]); // cut back to the array
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct ChunkBatch {
    chunk_shape: Vec<usize>,
    array_shape: Option<Vec<usize>>,
    /// `len * ndim` coordinates, row-major.
    coords: Vec<u64>,
    batch: Batch,
    /// The chunk column.
    tensors: TensorArray,
}

/// One chunk to write: native-endian, in the batch's memory.
struct Item {
    nd: NDBuffer,
    full: bool,
}

impl ChunkBatch {
    /// Builds a batch from `(coordinates, chunk)` pairs, in the order given (duplicates
    /// are not checked), in `prototype`'s memory.
    ///
    /// Every chunk must have the grid's element type (any byte order) and either the
    /// chunk shape or — for an edge chunk — its extent inside the array
    /// ([`ChunkGrid::chunk_extent`]), which is padded with the fill value; a full-shape
    /// edge chunk is stored as given. Coordinates outside the grid are an error.
    pub fn from_chunks<C, N, I>(
        grid: &ChunkGrid,
        chunks: I,
        prototype: &BufferPrototype,
    ) -> Result<ChunkBatch>
    where
        I: IntoIterator<Item = (C, N)>,
        C: AsRef<[u64]>,
        N: Borrow<NDBuffer>,
    {
        let element = grid.dtype.element();
        let native = Dtype::from(element);
        let ndim = grid.chunk_shape.len();
        let tensor_type = TensorType::new(element, &grid.chunk_shape);
        tensor_type.storage_type()?;
        let mut coords = Vec::new();
        let mut items = Vec::new();
        for (c, nd) in chunks {
            let (c, nd) = (c.as_ref(), nd.borrow());
            let extent = grid.chunk_extent(c)?;
            if nd.dtype().element() != element {
                return Err(Error::invalid(format!(
                    "chunk {c:?} holds {}, the grid's data type is {}",
                    nd.dtype(),
                    grid.dtype
                )));
            }
            let full = nd.shape() == grid.chunk_shape.as_slice();
            if !full && nd.shape() != extent.as_slice() {
                return Err(Error::invalid(format!(
                    "chunk {c:?} has shape {:?}: expected the chunk shape {:?}{}",
                    nd.shape(),
                    grid.chunk_shape,
                    if extent == grid.chunk_shape {
                        String::new()
                    } else {
                        format!(" or the edge chunk's extent {extent:?}")
                    }
                )));
            }
            let nd = nd.to_prototype(prototype)?.astype(native)?;
            coords.extend_from_slice(c);
            items.push(Item { nd, full });
        }
        let pattern = grid
            .fill_value
            .map(|v| v.to_bytes_as(native))
            .unwrap_or_else(|| vec![0u8; element.size()]);
        let plan = BatchAllocation::new(&tensor_type, items.len(), ndim)?;
        let mut md = HashMap::new();
        md.insert(
            CHUNK_GRID_METADATA_KEY.to_string(),
            format!(
                "{{\"array_shape\":{},\"chunk_shape\":{}}}",
                serde_json::Value::from(grid.array_shape.clone()),
                serde_json::Value::from(grid.chunk_shape.clone())
            ),
        );
        let mut fields: Vec<Field> = (0..ndim)
            .map(|d| Field::new(coord_column(d), ArrowType::UInt64, false))
            .collect();
        fields.push(tensor_type.field(CHUNK_COLUMN, false)?);
        let schema = Arc::new(Schema::new(fields).with_metadata(md));
        let place = prototype.place()?;
        if let Place::Device(ctx) = &place {
            for item in &mut items {
                item.nd = in_context(&item.nd, ctx)?;
            }
        }
        let (batch, tensors) = build(
            &place,
            &plan,
            &tensor_type,
            &coords,
            &items,
            &pattern,
            schema,
        )?;
        Ok(ChunkBatch {
            chunk_shape: grid.chunk_shape.clone(),
            array_shape: Some(grid.array_shape.clone()),
            coords,
            batch,
            tensors,
        })
    }

    /// A device record batch whose chunk coordinates (row-major, one per axis per
    /// chunk) the caller read on the host from the very message the batch was uploaded
    /// from: no copy back from the device, which
    /// `ChunkBatch::try_from(Batch::Device(..))` makes per
    /// coordinate column of a device batch (and then calls this). The coordinates are checked as there
    /// (count, and the grid). devbuf-flight's, through
    /// `devbuf_core::__private::arrow::chunk_batch_with_coords`.
    pub(crate) fn from_device_record_batch_with_coords(
        batch: DeviceRecordBatch,
        coords: Vec<u64>,
    ) -> Result<ChunkBatch> {
        let schema = batch.schema();
        let layout = SchemaLayout::of(&schema)?;
        let tensor_column = batch
            .columns()
            .get(layout.tensor)
            .ok_or_else(|| Error::invalid("the batch has fewer columns than its schema"))?;
        let tensors = TensorArray::try_new(
            TensorType::from_field(schema.field(layout.tensor))?,
            tensor_column.clone(),
        )?;
        ChunkBatch::checked(layout, coords, Batch::Device(batch), tensors)
    }

    fn checked(
        layout: SchemaLayout,
        coords: Vec<u64>,
        batch: Batch,
        tensors: TensorArray,
    ) -> Result<ChunkBatch> {
        let b = ChunkBatch {
            chunk_shape: layout.chunk_shape,
            array_shape: layout.array_shape,
            coords,
            batch,
            tensors,
        };
        let ndim = b.chunk_shape.len();
        if b.coords.len() != b.len() * ndim {
            return Err(Error::invalid(format!(
                "the batch has {} coordinate rows and {} chunks",
                b.coords.len() / ndim.max(1),
                b.len()
            )));
        }
        if let Some(a) = &b.array_shape {
            for i in 0..b.len() {
                chunk_extent(a, &b.chunk_shape, b.coords(i).unwrap_or_default())?;
            }
        }
        Ok(b)
    }

    /// Number of chunks.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// True when the batch holds no chunks.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The chunk shape (logical); its length is the number of grid dimensions.
    pub fn chunk_shape(&self) -> &[usize] {
        &self.chunk_shape
    }

    /// The array shape, when the batch carries it.
    pub fn array_shape(&self) -> Option<&[usize]> {
        self.array_shape.as_deref()
    }

    /// The chunk column: a tensor array over the batch's memory (host or device);
    /// `tensors().tensor_type().element()` is the chunks' element type (native-endian).
    pub fn tensors(&self) -> &TensorArray {
        &self.tensors
    }

    /// Where the batch lives: [`BufferPrototype::Host`] or its device.
    pub fn prototype(&self) -> BufferPrototype {
        self.batch.prototype()
    }

    /// The coordinates of chunk `i` (`None` past the end).
    pub fn coords(&self, i: usize) -> Option<&[u64]> {
        let nd = self.chunk_shape.len();
        if i >= self.len() {
            return None;
        }
        self.coords.get(i * nd..(i + 1) * nd)
    }

    /// The record batch, on the host or on a device ([`Batch::as_host`],
    /// [`Batch::as_device`]).
    pub fn batch(&self) -> &Batch {
        &self.batch
    }

    /// Chunk `i` cut to its extent inside the array when the batch carries the array
    /// shape (else as stored): a zero-copy view (but for booleans).
    pub fn chunk(&self, i: usize) -> Result<NDBuffer> {
        let padded = self.tensors.tensor(i)?;
        let Some(a) = &self.array_shape else {
            return Ok(padded);
        };
        let extent = chunk_extent(a, &self.chunk_shape, self.coords(i).unwrap_or_default())?;
        if extent == self.chunk_shape {
            return Ok(padded);
        }
        let sel: Vec<AxisSel> = extent.iter().map(|&e| AxisSel::from(0..e)).collect();
        padded.get(&sel)
    }

    /// Every chunk with its coordinates, in row order (see [`chunk`](Self::chunk)).
    pub fn iter(&self) -> impl Iterator<Item = Result<(&[u64], NDBuffer)>> + '_ {
        (0..self.len()).map(|i| Ok((self.coords(i).unwrap_or_default(), self.chunk(i)?)))
    }
}

impl TryFrom<Batch> for ChunkBatch {
    type Error = Error;

    /// Reads a batch, host or device: one `arrow.fixed_shape_tensor` column (the chunks,
    /// any permutation) and one non-null `UInt64` coordinate column per logical
    /// dimension of the tensor, in schema order (any names); nothing else. The array
    /// shape comes from [`CHUNK_GRID_METADATA_KEY`] when present. Zero-copy; of a
    /// device batch the coordinates are copied to the host (one small copy per column),
    /// the chunks stay where they are.
    fn try_from(batch: Batch) -> Result<ChunkBatch> {
        match batch {
            Batch::Host(batch) => {
                let schema = batch.schema();
                let layout = SchemaLayout::of(&schema)?;
                let tensors = TensorArray::try_new(
                    TensorType::from_field(schema.field(layout.tensor))?,
                    batch.column(layout.tensor).clone(),
                )?;
                let columns: Vec<ArrayRef> = layout
                    .coords
                    .iter()
                    .map(|&i| batch.column(i).clone())
                    .collect();
                let coords = interleave_coords(&columns, batch.num_rows())?;
                ChunkBatch::checked(layout, coords, Batch::Host(batch), tensors)
            }
            Batch::Device(batch) => {
                let layout = SchemaLayout::of(&batch.schema())?;
                let columns = layout
                    .coords
                    .iter()
                    .map(|&i| {
                        batch
                            .columns()
                            .get(i)
                            .ok_or_else(|| {
                                Error::invalid("the batch has fewer columns than its schema")
                            })?
                            .to_host()
                    })
                    .collect::<Result<Vec<_>>>()?;
                let coords = interleave_coords(&columns, batch.num_rows())?;
                ChunkBatch::from_device_record_batch_with_coords(batch, coords)
            }
        }
    }
}

/// Which columns of a schema are what.
struct SchemaLayout {
    tensor: usize,
    coords: Vec<usize>,
    chunk_shape: Vec<usize>,
    array_shape: Option<Vec<usize>>,
}

impl SchemaLayout {
    fn of(schema: &Schema) -> Result<SchemaLayout> {
        let tagged: Vec<usize> = schema
            .fields()
            .iter()
            .enumerate()
            .filter(|(_, f)| f.extension_type_name() == Some(super::tensor::FIXED_SHAPE_TENSOR))
            .map(|(i, _)| i)
            .collect();
        let [tensor] = tagged[..] else {
            return Err(Error::invalid(format!(
                "a chunk batch has exactly one {} column; this schema has {}",
                super::tensor::FIXED_SHAPE_TENSOR,
                tagged.len()
            )));
        };
        let t = TensorType::from_field(schema.field(tensor))?;
        let chunk_shape = t.logical_shape();
        let coords: Vec<usize> = (0..schema.fields().len())
            .filter(|&i| i != tensor)
            .collect();
        for &i in &coords {
            let f = schema.field(i);
            if f.data_type() != &ArrowType::UInt64 {
                return Err(Error::invalid(format!(
                    "chunk batch column {:?} is {}, coordinates are UInt64",
                    f.name(),
                    f.data_type()
                )));
            }
        }
        if coords.len() != chunk_shape.len() {
            return Err(Error::invalid(format!(
                "a chunk batch of {}-dimensional chunks needs {} coordinate columns, the \
                 schema has {}",
                chunk_shape.len(),
                chunk_shape.len(),
                coords.len()
            )));
        }
        let array_shape = match schema.metadata().get(CHUNK_GRID_METADATA_KEY) {
            None => None,
            Some(json) => Some(parse_grid(json, &chunk_shape)?),
        };
        Ok(SchemaLayout {
            tensor,
            coords,
            chunk_shape,
            array_shape,
        })
    }
}

/// The array shape of [`CHUNK_GRID_METADATA_KEY`] metadata, checked against the chunk
/// shape.
fn parse_grid(json: &str, chunk_shape: &[usize]) -> Result<Vec<usize>> {
    let bad = |m: &str| Error::invalid(format!("{CHUNK_GRID_METADATA_KEY} metadata {json:?}: {m}"));
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| bad(&e.to_string()))?;
    let list = |key: &str| -> Result<Vec<usize>> {
        v.get(key)
            .and_then(|a| a.as_array())
            .ok_or_else(|| bad(&format!("no {key} array")))?
            .iter()
            .map(|x| {
                x.as_u64()
                    .and_then(|u| usize::try_from(u).ok())
                    .ok_or_else(|| bad(&format!("{key} holds {x}")))
            })
            .collect()
    };
    let array_shape = list("array_shape")?;
    if list("chunk_shape")? != chunk_shape || array_shape.len() != chunk_shape.len() {
        return Err(bad(&format!(
            "does not match the chunk column's shape {chunk_shape:?}"
        )));
    }
    Ok(array_shape)
}

/// Row-major coordinates from one `UInt64` column per dimension (no nulls).
fn interleave_coords(columns: &[ArrayRef], rows: usize) -> Result<Vec<u64>> {
    let nd = columns.len();
    let mut out = vec![0u64; rows * nd];
    for (d, c) in columns.iter().enumerate() {
        let a = c.as_any().downcast_ref::<UInt64Array>().ok_or_else(|| {
            Error::invalid(format!(
                "coordinate column {d} is {}, not UInt64",
                c.data_type()
            ))
        })?;
        if a.null_count() > 0 || a.len() != rows {
            return Err(Error::invalid(format!(
                "coordinate column {d} has {} nulls and {} rows (needs none and {rows})",
                a.null_count(),
                a.len()
            )));
        }
        for (i, &v) in a.values().iter().enumerate() {
            out[i * nd + d] = v;
        }
    }
    Ok(out)
}

/// `ChunkBatch::from_device_record_batch_with_coords` for devbuf-flight (hidden, through
/// `devbuf_core::__private::arrow`): a device batch with the coordinates read on the host.
pub fn chunk_batch_with_coords(batch: DeviceRecordBatch, coords: Vec<u64>) -> Result<ChunkBatch> {
    ChunkBatch::from_device_record_batch_with_coords(batch, coords)
}
