//! Building a batch: the layout plan of one allocation (coordinates, then chunk data),
//! and one builder that fills it on the host or on a device, each chunk copied once
//! (booleans packed once).

use super::*;

/// The one allocation of a batch: `ndim` coordinate columns, then the chunk data.
pub(super) struct BatchAllocation {
    pub(super) rows: usize,
    pub(super) ndim: usize,
    pub(super) element: ElementType,
    /// Elements per chunk.
    pub(super) chunk_len: usize,
    /// Bytes per chunk (as bytes; booleans are packed afterwards).
    pub(super) chunk_bytes: usize,
    /// Bytes of one coordinate column, and its stride in the allocation.
    pub(super) coord_bytes: usize,
    pub(super) coord_stride: usize,
    /// Offset and length of the chunk data (the bitmap for booleans).
    pub(super) data_offset: usize,
    pub(super) data_len: usize,
    /// Bytes allocated for the data (the packing kernel writes whole words).
    pub(super) data_alloc: usize,
}

impl BatchAllocation {
    pub(super) fn new(t: &TensorType, rows: usize, ndim: usize) -> Result<BatchAllocation> {
        let element = t.element();
        let chunk_len = t.list_size()?;
        let chunk_bytes = chunk_len.checked_mul(element.size()).ok_or_else(overflow)?;
        let coord_bytes = rows.checked_mul(8).ok_or_else(overflow)?;
        let coord_stride = round_up(coord_bytes)?;
        let data_offset = coord_stride.checked_mul(ndim).ok_or_else(overflow)?;
        let values = rows.checked_mul(chunk_len).ok_or_else(overflow)?;
        let (data_len, data_alloc) = if element == ElementType::Bool {
            (values.div_ceil(8), bits::packed_words_bytes(values))
        } else {
            let n = rows.checked_mul(chunk_bytes).ok_or_else(overflow)?;
            (n, n)
        };
        Ok(BatchAllocation {
            rows,
            ndim,
            element,
            chunk_len,
            chunk_bytes,
            coord_bytes,
            coord_stride,
            data_offset,
            data_len,
            data_alloc: round_up(data_alloc)?,
        })
    }

    pub(super) fn total(&self) -> Result<usize> {
        self.data_offset
            .checked_add(self.data_alloc)
            .ok_or_else(overflow)
    }

    /// The coordinate section: column `d` at `d * coord_stride`, native-endian `u64`s.
    pub(super) fn coord_section(&self, coords: &[u64]) -> Vec<u8> {
        let mut out = vec![0u8; self.data_offset];
        for i in 0..self.rows {
            for d in 0..self.ndim {
                let at = d * self.coord_stride + i * 8;
                out[at..at + 8].copy_from_slice(&coords[i * self.ndim + d].to_ne_bytes());
            }
        }
        out
    }

    /// The Arrow layout of the batch's columns over `buf`-typed slices.
    pub(super) fn parts<B: Clone>(
        &self,
        t: &TensorType,
        slice: impl Fn(usize, usize) -> Result<B>,
    ) -> Result<Vec<Parts<B>>> {
        let mut cols = Vec::with_capacity(self.ndim + 1);
        for d in 0..self.ndim {
            cols.push(Parts {
                data_type: ArrowType::UInt64,
                len: self.rows,
                null_count: 0,
                offset: 0,
                validity: None,
                buffers: vec![slice(d * self.coord_stride, self.coord_bytes)?],
                children: vec![],
                dictionary: None,
            });
        }
        let data = slice(self.data_offset, self.data_len)?;
        let values =
            crate::arrow::tensor::element_parts(self.element, self.rows * self.chunk_len, data);
        cols.push(Parts {
            data_type: t.storage_type()?,
            len: self.rows,
            null_count: 0,
            offset: 0,
            validity: None,
            buffers: vec![],
            children: vec![values],
            dictionary: None,
        });
        Ok(cols)
    }
}

/// The batch's one allocation while it is written: zeroed, 64-byte aligned host memory
/// (Arrow's alignment, so every column is zero-copy) or device memory.
enum Alloc {
    Host(MutableBuffer),
    Device(DeviceBuffer),
}

impl Alloc {
    fn new(place: &Place, n: usize) -> Result<Alloc> {
        Ok(match place {
            Place::Host => Alloc::Host(MutableBuffer::from_len_zeroed(n)),
            Place::Device(ctx) => Alloc::Device(ctx.allocate(n)?),
        })
    }

    /// Runs `f` with write access to the `len` bytes from `offset`.
    fn region<R>(
        &mut self,
        offset: usize,
        len: usize,
        f: impl FnOnce(MemMut<'_>) -> Result<R>,
    ) -> Result<R> {
        match self {
            Alloc::Host(m) => {
                let end = crate::error::check_range("chunk batch section", offset, len, m.len())?;
                f(MemMut::Host(&mut m.as_slice_mut()[offset..end]))
            }
            Alloc::Device(d) => f(MemMut::Device(&d.slice(offset, len)?)),
        }
    }
}

/// Copies `bytes` (exactly the region's length) from the host into `dst`.
fn copy_from_host(dst: MemMut<'_>, bytes: &[u8]) -> Result<()> {
    match dst {
        MemMut::Host(d) => {
            crate::error::check_range("chunk batch section", 0, bytes.len(), d.len())?;
            d[..bytes.len()].copy_from_slice(bytes);
            Ok(())
        }
        MemMut::Device(d) => d.copy_from_host(0, bytes),
    }
}

/// Builds the batch in `place` (the host, or the device context every item already
/// lives in): one allocation, the coordinates written in one copy, every chunk written
/// into its slot once (booleans gathered as bytes, then packed once into the batch),
/// the columns zero-copy views of the allocation. The same steps on both sides, through
/// the memory layer; only the result's owner differs (an arrow-rs `RecordBatch` or a
/// [`DeviceRecordBatch`] whose message is the allocation).
pub(super) fn build(
    place: &Place,
    plan: &BatchAllocation,
    t: &TensorType,
    coords: &[u64],
    items: &[Item],
    pattern: &[u8],
    schema: SchemaRef,
) -> Result<(Batch, TensorArray)> {
    let mut all = Alloc::new(place, plan.total()?)?;
    all.region(0, plan.data_offset, |dst| {
        copy_from_host(dst, &plan.coord_section(coords))
    })?;
    let es = plan.element.size();
    let bytes_len = plan.rows * plan.chunk_bytes;
    let write_chunks = |dst: &mut MemMut<'_>| -> Result<()> {
        for (i, item) in items.iter().enumerate() {
            write_chunk(dst, i * plan.chunk_bytes, item, t.shape(), es, pattern)?;
        }
        Ok(())
    };
    if plan.element == ElementType::Bool {
        let mut staged = place.alloc(bytes_len, false)?;
        staged.write(|mut dst| write_chunks(&mut dst))?;
        all.region(plan.data_offset, plan.data_alloc, |mut dst| {
            prim::pack_bits(&staged.view(), &mut dst)
        })?;
    } else {
        all.region(plan.data_offset, bytes_len, |mut dst| {
            write_chunks(&mut dst)
        })?;
    }
    let tensor_field = schema.field(plan.ndim).clone();
    match all {
        Alloc::Host(all) => {
            let all: Buffer = all.into();
            let parts = plan.parts(t, |off, len| {
                crate::error::check_range("chunk batch column", off, len, all.len())?;
                Ok(all.slice_with_length(off, len))
            })?;
            let columns = parts
                .into_iter()
                .map(|p| Ok(make_array(p.into_array_data()?)))
                .collect::<Result<Vec<ArrayRef>>>()?;
            let batch = RecordBatch::try_new(schema, columns)?;
            let tensors = TensorArray::try_new(
                TensorType::from_field(&tensor_field)?,
                batch.column(plan.ndim).clone(),
            )?;
            Ok((Batch::Host(batch), tensors))
        }
        Alloc::Device(all) => {
            let parts = plan.parts(t, |off, len| all.slice(off, len))?;
            let columns = parts
                .into_iter()
                .map(|p| {
                    p.validate()?;
                    Ok(DeviceArray::from_parts(p))
                })
                .collect::<Result<Vec<_>>>()?;
            let tensors = TensorArray::try_new(
                TensorType::from_field(&tensor_field)?,
                columns[plan.ndim].clone(),
            )?;
            let batch = DeviceRecordBatch::from_device_columns(schema, plan.rows, columns, all);
            Ok((Batch::Device(batch), tensors))
        }
    }
}

/// Writes one chunk into its slot (`chunk_shape`, C order) at byte `slot` of `dst`:
/// padding with the fill pattern first when the chunk is an edge chunk, then one n-d copy
/// (a single memcpy when the chunk is C-contiguous; the copy planners merge its axes).
/// The same code for host and device memory, through the zarr layer's primitives.
pub(super) fn write_chunk(
    dst: &mut MemMut<'_>,
    slot: usize,
    item: &Item,
    chunk_shape: &[usize],
    es: usize,
    pattern: &[u8],
) -> Result<()> {
    let nd = &item.nd;
    let like = nd.as_ndarray_like();
    let chunk_bytes = chunk_shape
        .iter()
        .try_fold(es, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::invalid("chunk size overflows"))?;
    if !item.full {
        prim::fill(dst, slot, chunk_bytes, pattern)?;
    }
    if nd.size() > 0 {
        let src_strides: Vec<isize> = like.strides.iter().map(|&s| s as isize).collect();
        prim::strided_copy(
            &like.memory.view(),
            like.offset,
            &src_strides,
            dst,
            slot,
            &c_strides(chunk_shape, es),
            nd.shape(),
            es,
        )?;
    }
    Ok(())
}

/// `nd` in `ctx`: itself, or — for device memory of another context of the same device
/// (a dedicated context) — a C-order copy moved with one device-to-device copy.
pub(super) fn in_context(nd: &NDBuffer, ctx: &Context) -> Result<NDBuffer> {
    match nd.as_ndarray_like().memory.as_device() {
        Some(d) if !d.context().same_as(ctx) => {
            let dense = nd.copy_order(Order::C)?;
            let nbytes = dense.nbytes();
            let like = dense.as_ndarray_like();
            let src = like
                .memory
                .as_device()
                .ok_or_else(|| Error::invalid("internal: a device copy on the host"))?;
            let out = ctx.allocate(nbytes)?;
            out.copy_from_device(0, &src.slice(like.offset, nbytes)?)?;
            NDBuffer::from_memory(out, nd.shape(), nd.dtype(), Order::C)
        }
        _ => Ok(nd.clone()),
    }
}
