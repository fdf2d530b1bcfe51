//! The native half of `devbuf.zarr.CodecPipeline` (zarr-python's codec pipeline,
//! `python/devbuf/zarr.py`): an array opened for the pipeline, either at a directory
//! (zarr-python's `LocalStore`) or from metadata and chunk bytes zarr-python fetched
//! through its own store (a devbuf `MemoryStore` the engine reads like any store), and
//! two reads: a box straight into memory the caller holds (numpy's or cupy's buffer of
//! zarr-python's output) and whole chunks as new arrays.
//!
//! The Python side checks what it passes (C-contiguous, writable, the box's size) and
//! keeps the destination alive during the call.

use std::sync::Arc;

use devbuf::cuda::Context;
use devbuf::zarr::{
    BufferPrototype, ByteBuffer, Decoder, Location, MemoryStore, NDBuffer, Order, ReadOptions,
    ReadReport, Store, ZarrArray,
};
use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::array::new_array;
use crate::errors::IntoPy;

/// An array opened by the read engine for the codec pipeline (internal).
#[pyclass(frozen, module = "devbuf._devbuf", name = "_PipelineArray")]
pub struct PipelineArray {
    a: Arc<ZarrArray>,
    /// The store of an array opened from bytes (`from_bytes`): writes land here and
    /// the Python side stores them through zarr-python's store (`stored`).
    memory: Option<Arc<MemoryStore>>,
}

fn read_options(
    decoder: Option<&str>,
    threads: Option<usize>,
    staging: Option<usize>,
) -> PyResult<ReadOptions> {
    let mut o = ReadOptions::default();
    if let Some(d) = decoder {
        o.decoder = match d.to_ascii_lowercase().as_str() {
            "auto" => Decoder::Auto,
            "cpu" => Decoder::Cpu,
            "gpu" => Decoder::Gpu,
            "both" => Decoder::Both,
            other => {
                return Err(PyValueError::new_err(format!(
                    "codec_pipeline.decoder must be auto, cpu, gpu or both (got {other:?})"
                )));
            }
        };
    }
    if threads.is_some() {
        o.threads = threads;
    }
    if let Some(b) = staging {
        // The engine checks the range when the options are set (1 byte to 1 GiB).
        o.slot_bytes = b;
    }
    Ok(o)
}

fn boxes(starts: &[u64], shape: &[u64]) -> Vec<std::ops::Range<u64>> {
    starts.iter().zip(shape).map(|(&s, &n)| s..s + n).collect()
}

fn opened(
    py: Python<'_>,
    location: Location,
    memory: Option<Arc<MemoryStore>>,
    decoder: Option<&str>,
    threads: Option<usize>,
    staging: Option<usize>,
) -> PyResult<PipelineArray> {
    let options = read_options(decoder, threads, staging)?;
    let a = py
        .detach(move || -> devbuf::Result<ZarrArray> {
            let mut a = ZarrArray::open(location)?;
            a.set_read_options(options)?;
            Ok(a)
        })
        .py()?;
    Ok(PipelineArray {
        a: Arc::new(a),
        memory,
    })
}

#[pymethods]
impl PipelineArray {
    /// Opens the array at a local directory.
    #[staticmethod]
    #[pyo3(signature = (path, decoder = None, threads = None, staging = None))]
    fn open_path(
        py: Python<'_>,
        path: String,
        decoder: Option<&str>,
        threads: Option<usize>,
        staging: Option<usize>,
    ) -> PyResult<PipelineArray> {
        opened(
            py,
            Location::Path(path.into()),
            None,
            decoder,
            threads,
            staging,
        )
    }

    /// Opens the array at an object-store URL (`s3://`, `gs://`, `az://`, `http(s)://`,
    /// `file://`) with its storage options (the keys `devbuf.open` takes).
    #[staticmethod]
    #[pyo3(signature = (url, storage_options, decoder = None, threads = None, staging = None))]
    fn open_url(
        py: Python<'_>,
        url: &str,
        storage_options: &Bound<'_, PyDict>,
        decoder: Option<&str>,
        threads: Option<usize>,
        staging: Option<usize>,
    ) -> PyResult<PipelineArray> {
        let location = crate::zarr::location(url, Some(storage_options))?;
        opened(py, location, None, decoder, threads, staging)
    }

    /// Opens an array from its metadata document (`zarr.json` or `.zarray`, by
    /// `metadata_key`) and stored chunks given as `{key: bytes}` (keys relative to the
    /// array, as zarr-python's chunk key encoding names them). Missing keys read as
    /// the fill value.
    #[staticmethod]
    #[pyo3(signature = (metadata_key, metadata, chunks, decoder = None, threads = None, staging = None))]
    fn from_bytes(
        py: Python<'_>,
        metadata_key: &str,
        metadata: &[u8],
        chunks: &Bound<'_, PyDict>,
        decoder: Option<&str>,
        threads: Option<usize>,
        staging: Option<usize>,
    ) -> PyResult<PipelineArray> {
        let store = Arc::new(MemoryStore::new());
        store
            .set(metadata_key, &ByteBuffer::from(metadata.to_vec()))
            .py()?;
        for (k, v) in chunks.iter() {
            let key: String = k.extract()?;
            let bytes = v.cast::<PyBytes>()?;
            store
                .set(&key, &ByteBuffer::from(bytes.as_bytes().to_vec()))
                .py()?;
        }
        let location = Location::from((store.clone(), ""));
        opened(py, location, Some(store), decoder, threads, staging)
    }

    /// The shape.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.a.shape())
    }

    /// numpy's name of the data type reads return.
    #[getter]
    fn dtype(&self) -> String {
        self.a.dtype().to_string()
    }

    /// Reads the box `starts` + `shape` into `nbytes` bytes at `address`: host memory
    /// (`device=None`) or memory of GPU `device`. The caller guarantees the memory is
    /// writable, C-contiguous, exactly the box's size, and alive during the call.
    /// Returns the read report's summary.
    #[pyo3(signature = (starts, shape, address, nbytes, device = None))]
    fn read_into(
        &self,
        py: Python<'_>,
        starts: Vec<u64>,
        shape: Vec<u64>,
        address: u64,
        nbytes: usize,
        device: Option<usize>,
    ) -> PyResult<String> {
        let a = self.a.clone();
        let ranges = boxes(&starts, &shape);
        py.detach(move || -> devbuf::Result<String> {
            let mut report = ReadReport::default();
            match device {
                None => {
                    if nbytes == 0 {
                        return Ok(String::new());
                    }
                    let threads = a.read_options().threads.unwrap_or_else(|| {
                        std::thread::available_parallelism().map_or(1, |n| n.get())
                    });
                    // Safety: the Python caller passes a writable, C-contiguous numpy
                    // buffer of exactly `nbytes` bytes that it keeps alive during the
                    // call and nothing else touches; the read below overwrites all of it.
                    // Fresh memory (zarr-python's `np.empty`) gets huge pages and its
                    // first touch from all threads, as the engine's own results do.
                    unsafe {
                        devbuf_core::__private::prepare_output(
                            address as usize as *mut u8,
                            nbytes,
                            threads,
                        )
                    };
                    // Safety: as above.
                    let out = unsafe {
                        std::slice::from_raw_parts_mut(address as usize as *mut u8, nbytes)
                    };
                    a.read(ranges.as_slice()).report(&mut report).into(out)?;
                }
                Some(d) => {
                    if nbytes == 0 {
                        return Ok(String::new());
                    }
                    let ctx = Context::new(d)?;
                    let view = ctx.view(address, nbytes, ())?;
                    a.read(ranges.as_slice()).report(&mut report).into(&view)?;
                    // zarr-python uses the output right after the read returns.
                    ctx.synchronize()?;
                }
            }
            Ok(report.to_string())
        })
        .py()
    }

    /// Writes the box `starts` + `shape` from `nbytes` bytes at `address`: host memory
    /// (`device=None`, copied once) or memory of GPU `device` (read in place), C order,
    /// the array's data type in native byte order. Chunks the box covers partly are
    /// read, updated and rewritten; chunks equal to the fill value are not stored (an
    /// existing one is erased), as zarr-python does by default. The caller guarantees
    /// the memory is C-contiguous, exactly the box's size, and alive during the call.
    #[pyo3(signature = (starts, shape, address, nbytes, device = None))]
    fn write_box(
        &self,
        py: Python<'_>,
        starts: Vec<u64>,
        shape: Vec<u64>,
        address: u64,
        nbytes: usize,
        device: Option<usize>,
    ) -> PyResult<()> {
        let a = self.a.clone();
        py.detach(move || -> PyResult<()> {
            let dims = shape
                .iter()
                .map(|&n| usize::try_from(n))
                .collect::<Result<Vec<usize>, _>>()
                .map_err(|_| {
                    PyValueError::new_err(format!(
                        "a write box of shape {shape:?} does not fit this machine's memory"
                    ))
                })?;
            if nbytes == 0 {
                return Ok(());
            }
            let value = match device {
                None => {
                    // SAFETY: the Python caller passes a C-contiguous numpy buffer of
                    // exactly `nbytes` bytes that it keeps alive during the call; it is
                    // only read, and copied before the write starts.
                    let bytes = unsafe {
                        std::slice::from_raw_parts(address as usize as *const u8, nbytes)
                    };
                    let mut owned = Vec::new();
                    owned.try_reserve_exact(nbytes).map_err(|_| {
                        PyMemoryError::new_err(format!(
                            "cannot allocate {nbytes} bytes of host memory for the value of a write"
                        ))
                    })?;
                    owned.extend_from_slice(bytes);
                    NDBuffer::from_memory(owned, &dims, a.dtype(), Order::C).py()?
                }
                Some(d) => {
                    let ctx = Context::new(d).py()?;
                    // The value was written on the caller's streams: wait for them.
                    ctx.synchronize().py()?;
                    let view = ctx.view(address, nbytes, ()).py()?;
                    NDBuffer::from_memory(view, &dims, a.dtype(), Order::C).py()?
                }
            };
            a.write_subset(&starts, &value).py()
        })
    }

    /// The stored values of `keys` (relative to the array) in the store of an array
    /// opened with `from_bytes`, `None` for a key that is not stored (a chunk equal to
    /// the fill value). An error for an array opened at a directory.
    fn stored<'py>(&self, py: Python<'py>, keys: Vec<String>) -> PyResult<Bound<'py, PyList>> {
        let Some(store) = self.memory.clone() else {
            return Err(PyValueError::new_err(
                "stored(): this array was opened at a directory, not from bytes",
            ));
        };
        let values = py
            .detach(move || -> devbuf::Result<Vec<Option<Vec<u8>>>> {
                keys.iter()
                    .map(|k| {
                        store
                            .get(k, &BufferPrototype::Host, None)?
                            .map(|b| b.to_host().map(|h| h.to_vec()))
                            .transpose()
                    })
                    .collect()
            })
            .py()?;
        let items = values
            .into_iter()
            .map(|v| match v {
                Some(b) => Ok(PyBytes::new(py, &b).into_any()),
                None => Ok(py.None().into_bound(py)),
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// Reads whole chunks (clipped at the array's edges) by their grid indices, as a
    /// list of `devbuf.Array` on the host or GPU `device`.
    #[pyo3(signature = (indices, device = None))]
    fn read_chunks<'py>(
        &self,
        py: Python<'py>,
        indices: Vec<Vec<u64>>,
        device: Option<usize>,
    ) -> PyResult<Bound<'py, PyList>> {
        let a = self.a.clone();
        let proto = match device {
            None => BufferPrototype::Host,
            Some(d) => BufferPrototype::Device(d),
        };
        let chunks = py
            .detach(move || -> devbuf::Result<_> {
                let v = a.read_chunks(&indices).to(&proto)?;
                if let Some(d) = device {
                    Context::new(d)?.synchronize()?;
                }
                Ok(v)
            })
            .py()?;
        let items = chunks
            .into_iter()
            .map(|c| new_array(py, c))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }
}
