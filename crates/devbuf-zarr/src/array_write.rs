//! Writing a [`ZarrArray`]: chunks, many chunks or a box, from host or device arrays.
//! Host values are encoded by zarrs in parallel; device values go through the device
//! write engine (`write.rs`).

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use ::zarrs::array::{ArrayBytes, CodecOptions};
use rayon::prelude::*;

use super::ZarrArray;
use super::encode::{self, Encoder, WriteEncoding, WriteOptions};
use super::read::ReadBox;
use super::write_progress::Tracked;
use devbuf_core::cuda::DeviceBuffer;
use devbuf_core::error::{Error, Result};
use devbuf_core::memory::Memory;
use devbuf_core::zarr::{Dtype, NDBuffer, Order};

impl ZarrArray {
    // ------------------------------------------------------------------ writing

    /// Writes chunks: `values[i]` into the box of chunk `chunks[i]` clipped to the array
    /// (its shape must be that box's shape; see [`chunk_ranges`](Self::chunk_ranges)),
    /// host or device values of the array's element type in either byte order, in any
    /// layout. Each chunk may be listed once. Host values are encoded in parallel; device values come back
    /// through page-locked memory in batches (values that are consecutive slices of one
    /// device allocation, as [`read_chunks`](Self::read_chunks) returns them, in one
    /// copy per batch), encoded in parallel while the next batch is copied.
    ///
    /// ```
    /// use devbuf_zarr::{ArraySpec, ZarrArray};
    /// use devbuf_core::zarr::{BufferPrototype, Dtype, MemoryStore, NDBuffer, Order, Scalar};
    /// let a = ZarrArray::create((std::sync::Arc::new(MemoryStore::new()), ""),
    ///     &ArraySpec::new(&[5], &[2], Dtype::INT8))?;
    /// let one = NDBuffer::create(&BufferPrototype::Host, &[2], Dtype::INT8, Order::C, Some(Scalar::from(1i8)))?;
    /// let edge = NDBuffer::create(&BufferPrototype::Host, &[1], Dtype::INT8, Order::C, Some(Scalar::from(2i8)))?;
    /// a.write_chunks(&[[0u64], [2]], &[one, edge])?;
    /// let v = a.read(..).to(&BufferPrototype::Host)?.to_ndarray::<i8>()?;
    /// assert_eq!(v.as_slice().unwrap(), &[1, 1, 0, 0, 2]);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn write_chunks<I: AsRef<[u64]>>(&self, chunks: &[I], values: &[NDBuffer]) -> Result<()> {
        let span = tracing::info_span!(
            "devbuf.write",
            location = %self.location,
            call = "write_chunks",
            chunks = chunks.len(),
            bytes = values.iter().map(NDBuffer::nbytes).sum::<usize>(),
            device = values.iter().any(|v| v.prototype().is_device()),
        );
        traced_write(&span, || {
            self.tracked_write(chunks.len() as u64, |a| {
                a.write_chunks_untraced(chunks, values)
            })
        })
    }

    fn write_chunks_untraced<I: AsRef<[u64]>>(
        &self,
        chunks: &[I],
        values: &[NDBuffer],
    ) -> Result<()> {
        if chunks.len() != values.len() {
            return Err(Error::invalid(format!(
                "write_chunks: {} chunk indices but {} values",
                chunks.len(),
                values.len()
            )));
        }
        let mut seen = std::collections::HashSet::new();
        let mut host = Vec::new();
        let mut device = Vec::new();
        for (c, v) in chunks.iter().zip(values) {
            let idx = c.as_ref();
            if !seen.insert(idx.to_vec()) {
                return Err(Error::invalid(format!(
                    "write_chunks: chunk {idx:?} is listed more than once"
                )));
            }
            let (start, shape) = self.chunk_box(idx)?;
            let v = self.prepare(v, &shape, &format!("chunk {idx:?}"))?;
            if v.prototype().is_device() {
                device.push((start, shape, v));
            } else {
                host.push((start, shape, v));
            }
        }
        host.par_iter()
            .try_for_each(|(start, shape, v)| self.encode_host(start, shape, v))?;
        if device.is_empty() {
            return Ok(());
        }
        let mut requests = Vec::with_capacity(device.len());
        let mut bufs = Vec::with_capacity(device.len());
        for (start, shape, v) in device {
            requests.push(ReadBox {
                start,
                shape,
                offset: 0,
            });
            bufs.push(device_bytes(&v)?);
        }
        self.write_device(&requests, &bufs)
    }

    /// Writes `value` into the box that starts at `start` (per axis) and has `value`'s
    /// shape, which must lie within the array. `value` may be on the host or a device,
    /// of the array's element type in either byte order, in any layout. Chunks the box
    /// covers partly are read, updated and rewritten.
    ///
    /// ```
    /// use devbuf_zarr::{ArraySpec, ZarrArray};
    /// use devbuf_core::zarr::{BufferPrototype, Dtype, MemoryStore, NDBuffer};
    /// let a = ZarrArray::create((std::sync::Arc::new(MemoryStore::new()), ""),
    ///     &ArraySpec::new(&[4, 4], &[2, 2], Dtype::FLOAT32))?;
    /// a.write_subset(&[1, 1], &NDBuffer::from_ndarray(ndarray::arr2(&[[1.0f32, 2.0], [3.0, 4.0]])))?;
    /// let v = a.read(&[1..3, 1..3]).to(&BufferPrototype::Host)?.to_ndarray::<f32>()?;
    /// assert_eq!(v.as_slice().unwrap(), &[1.0, 2.0, 3.0, 4.0]);
    /// // Wrong element type: an error, no conversion.
    /// assert!(a.write_subset(&[0, 0], &NDBuffer::from_ndarray(ndarray::arr1(&[1i32]))).is_err());
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn write_subset(&self, start: &[u64], value: &NDBuffer) -> Result<()> {
        let span = tracing::info_span!(
            "devbuf.write",
            location = %self.location,
            call = "write_subset",
            start = ?start,
            shape = ?value.shape(),
            bytes = value.nbytes(),
            device = value.prototype().is_device(),
        );
        traced_write(&span, || {
            let chunks = self.chunks_touched(start, value.shape());
            self.tracked_write(chunks, |a| a.write_subset_untraced(start, value))
        })
    }

    /// Runs `write` on this array, or — when the write options ask for progress or can
    /// cancel — on a view of it whose storage counts the `chunks` chunks the write
    /// stores and stops storing once cancelled ([`crate::write_progress`]).
    fn tracked_write(
        &self,
        chunks: u64,
        write: impl FnOnce(&ZarrArray) -> Result<()>,
    ) -> Result<()> {
        let o = &self.write_options;
        if o.progress.is_none() && o.cancel.is_none() {
            return write(self);
        }
        if o.cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
            return Err(Error::cancelled(format!(
                "writing {}: the write's Cancel token was cancelled before it started                  (a cancelled token stays cancelled: give the write a new one)",
                self.location
            )));
        }
        let chunk_bytes = self
            .meta
            .chunk_shape
            .iter()
            .try_fold(self.elem() as u64, |n, &c| n.checked_mul(c))
            .unwrap_or(u64::MAX);
        let tracked = Arc::new(Tracked::new(
            self.array.storage(),
            o.progress.as_ref(),
            o.cancel.as_ref(),
            chunks,
            chunk_bytes,
        ));
        let storage: Arc<crate::storage::DynStorage> = tracked.clone();
        let view = ZarrArray {
            array: self.array.with_storage(storage),
            ..self.duplicate()
        };
        // An error the cancellation caused (a store refused by the counting view) is
        // `Cancelled`; any other error is the write's own, kept as it is.
        write(&view)?;
        tracked.finish();
        Ok(())
    }

    /// How many chunks (shards) the box at `start` of `shape` touches (0 when it is
    /// empty; the count of a box outside the array does not matter: the write refuses it).
    fn chunks_touched(&self, start: &[u64], shape: &[usize]) -> u64 {
        let mut n = 1u64;
        for ((&s, &len), &c) in start.iter().zip(shape).zip(&self.meta.chunk_shape) {
            let len = len as u64;
            if len == 0 || c == 0 {
                return 0;
            }
            let first = s / c;
            let last = s.saturating_add(len - 1) / c;
            n = n.saturating_mul(last - first + 1);
        }
        n
    }

    fn write_subset_untraced(&self, start: &[u64], value: &NDBuffer) -> Result<()> {
        if start.len() != self.meta.shape.len() {
            return Err(Error::invalid(format!(
                "write_subset: start {start:?} has {} coordinate(s), the array has {} \
                 dimension(s) (shape {:?})",
                start.len(),
                self.meta.shape.len(),
                self.meta.shape
            )));
        }
        let shape: Vec<u64> = value.shape().iter().map(|&s| s as u64).collect();
        let ranges: Vec<Range<u64>> = start
            .iter()
            .zip(&shape)
            .map(|(&s, &n)| s..s.saturating_add(n))
            .collect();
        let (start, shape) = self.check_ranges(&ranges)?;
        let v = self.prepare(value, &shape, "write_subset")?;
        if !v.prototype().is_device() {
            return self.encode_host(&start, &shape, &v);
        }
        let request = ReadBox {
            start,
            shape,
            offset: 0,
        };
        self.write_device(std::slice::from_ref(&request), &[device_bytes(&v)?])
    }

    /// How writes run: the encoder of device writes.
    pub fn write_options(&self) -> &WriteOptions {
        &self.write_options
    }

    /// Sets how writes run (see [`WriteOptions`], [`Encoder`]).
    ///
    /// ```
    /// use devbuf_zarr::{Encoder, WriteOptions, ZarrArray};
    /// let mut a = ZarrArray::open("../../tests/fixtures/zarr/v2_int16_zstd.zarr")?;
    /// a.set_write_options(WriteOptions { encoder: Encoder::Cpu, ..WriteOptions::default() });
    /// assert_eq!(a.write_encoding().encoder, "cpu");
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn set_write_options(&mut self, options: WriteOptions) {
        self.write_options = options;
    }

    /// Which encoder a write from device memory would use on this array under its
    /// [`WriteOptions`], and why the GPU would not (nvCOMP missing, a codec it does not
    /// write, chunks above [`AUTO_GPU_MAX_CHUNK_BYTES`](super::AUTO_GPU_MAX_CHUNK_BYTES)
    /// for [`Encoder::Auto`]). With [`Encoder::Gpu`] and a `"cpu"` answer, device writes
    /// fail with that reason.
    pub fn write_encoding(&self) -> WriteEncoding {
        let (plan, note) = self.encode_plan();
        encode::describe(&plan, note)
    }

    fn encode_plan(&self) -> (Option<encode::GpuEncode>, String) {
        encode::choose(
            &self.array,
            &self.meta.chunk_shape,
            self.elem(),
            devbuf_core::__private::swap_width(self.meta.stored_dtype.element()),
            self.write_options.encoder,
        )
    }

    /// Writes device values (C-order native) into the boxes of `requests` through the
    /// device write engine (`write.rs`).
    fn write_device(&self, requests: &[ReadBox], values: &[DeviceBuffer]) -> Result<()> {
        let Some(ctx) = values.first().map(|v| v.context().clone()) else {
            return Ok(());
        };
        let (gpu, note) = self.encode_plan();
        if gpu.is_none() && self.write_options.encoder == Encoder::Gpu {
            return Err(Error::invalid(format!(
                "writing {} with Encoder::Gpu: nvCOMP cannot encode its chunks: {note}",
                self.location
            )));
        }
        let fill = self.meta.fill_value.to_bytes_as(self.dtype());
        let target = super::write::DeviceWriteTarget {
            array: &self.array,
            location: &self.location,
            shape: &self.meta.shape,
            chunk_shape: &self.meta.chunk_shape,
            elem: self.elem(),
            fill: &fill,
            gpu: gpu.as_ref(),
        };
        let threads = self
            .read_options
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get()));
        super::write::write_device(
            &target,
            requests,
            values,
            &ctx,
            threads,
            self.read_options.slot_bytes,
        )
    }

    /// Encodes C-order native bytes of the box `start`/`shape` into the array.
    fn encode_from(&self, start: &[u64], shape: &[u64], bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.on_subset("writing", start, shape, |subset, what| {
            self.array
                .store_array_subset_opt(
                    subset,
                    ArrayBytes::new_flen(Cow::Borrowed(bytes)),
                    &CodecOptions::default(),
                )
                .map_err(|e| self.array_err(what, e))
        })
    }

    /// A host value (already prepared: native, C-contiguous) into the box.
    fn encode_host(&self, start: &[u64], shape: &[u64], v: &NDBuffer) -> Result<()> {
        let bytes = v.to_buffer()?.to_host()?;
        self.encode_from(start, shape, &bytes)
    }

    /// Checks a value against the box it is written to, and brings it to native byte
    /// order and C order (on its own side: host or device).
    fn prepare(&self, value: &NDBuffer, shape: &[u64], what: &str) -> Result<NDBuffer> {
        let element = self.meta.stored_dtype.element();
        if value.dtype().element() != element {
            return Err(Error::invalid(format!(
                "{what}: data type mismatch: the array at {} holds {element}, the value is {} \
                 (convert it with NDBuffer::astype first)",
                self.location,
                value.dtype()
            )));
        }
        let vshape: Vec<u64> = value.shape().iter().map(|&s| s as u64).collect();
        if vshape != shape {
            return Err(Error::invalid(format!(
                "{what}: the value has shape {vshape:?}, the destination box of {} has shape \
                 {shape:?}",
                self.location
            )));
        }
        let native = Dtype::from(element);
        let v = if value.dtype() != native {
            value.astype(native)?
        } else {
            value.clone()
        };
        if v.is_contiguous(Order::C) {
            Ok(v)
        } else {
            v.copy_order(Order::C)
        }
    }
}

/// The device bytes of a prepared (C-contiguous) device value.
fn device_bytes(v: &NDBuffer) -> Result<DeviceBuffer> {
    let buf = v.to_buffer()?;
    match buf.as_memory() {
        Memory::Device(d) => Ok(d.clone()),
        Memory::Host(_) => Err(Error::invalid("expected a device value")),
    }
}

/// Runs a write inside its span, closing it with an `info` event of its time (or a
/// `warn` event with the error).
fn traced_write(span: &tracing::Span, write: impl FnOnce() -> Result<()>) -> Result<()> {
    let _in = span.enter();
    let started = std::time::Instant::now();
    let r = write();
    let elapsed_us = started.elapsed().as_micros() as u64;
    match &r {
        Ok(()) => tracing::info!(elapsed_us, "write done"),
        Err(e) => tracing::warn!(elapsed_us, error = %e, "write failed"),
    }
    r
}
