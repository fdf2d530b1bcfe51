//! Direct reads: `devbuf.open(path_or_url, **storage_options)` -> `ZarrArray`,
//! `ZarrArray.read(selection, device)` -> `Array`.
//!
//! Every use of the read engine's API in this crate is in this file.

use std::sync::{Arc, Mutex};

use devbuf::arrow::{ChunkBatch, ChunkGrid};
use devbuf::cuda::Context;
use devbuf::zarr::object_store::ObjectStoreOptions;
use devbuf::zarr::{AxisSel, BufferPrototype, Location, ReadReport, Slice, ZarrArray};
use pyo3::exceptions::{PyIndexError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyEllipsis, PyInt, PySlice, PyString, PyTuple};

use crate::array::new_array;
use crate::arrow_export::PyChunkBatch;
use crate::errors::IntoPy;

/// A zarr v2 or v3 array opened by devbuf's read engine.
#[pyclass(frozen, module = "devbuf", name = "ZarrArray")]
pub struct PyZarrArray {
    a: Arc<ZarrArray>,
    last_report: Arc<Mutex<Option<Py<PyDict>>>>,
}

/// Opens a zarr array: a directory path (str or os.PathLike) or a URL (`s3://`,
/// `gs://`, `az://`, `http(s)://`, `file://`) with its `storage_options`.
#[pyfunction]
#[pyo3(signature = (path_or_url, **storage_options))]
pub fn open(
    py: Python<'_>,
    path_or_url: &Bound<'_, PyAny>,
    storage_options: Option<&Bound<'_, PyDict>>,
) -> PyResult<PyZarrArray> {
    let text = path_text(py, path_or_url)?;
    let location = location(&text, storage_options)?;
    let a = py.detach(|| ZarrArray::open(location)).py()?;
    Ok(PyZarrArray {
        a: Arc::new(a),
        last_report: Arc::default(),
    })
}

/// `open` as a coroutine: awaits the metadata fetch (object stores) on devbuf's tokio
/// runtime; cancelling the awaiting task drops the fetch.
#[pyfunction]
#[pyo3(signature = (path_or_url, **storage_options))]
pub fn open_async<'py>(
    py: Python<'py>,
    path_or_url: &Bound<'py, PyAny>,
    storage_options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let text = path_text(py, path_or_url)?;
    let location = location(&text, storage_options)?;
    crate::aio::coroutine(py, async move {
        let a = ZarrArray::open_async(location).await.py()?;
        Ok(PyZarrArray {
            a: Arc::new(a),
            last_report: Arc::default(),
        })
    })
}

fn path_text(py: Python<'_>, path_or_url: &Bound<'_, PyAny>) -> PyResult<String> {
    if path_or_url.is_instance_of::<PyString>() {
        return path_or_url.extract();
    }
    py.import("os")?
        .call_method1("fspath", (path_or_url,))?
        .extract()
        .map_err(|_| PyTypeError::new_err("open() takes a path (str or os.PathLike) or a URL"))
}

/// Whether `text` starts with a URL scheme and `://` (RFC 3986: a letter, then letters,
/// digits, `+`, `-` or `.`); a path such as `./a://b` does not.
fn has_scheme(text: &str) -> bool {
    match text.split_once("://") {
        Some((scheme, _)) => {
            let mut chars = scheme.chars();
            chars.next().is_some_and(|c| c.is_ascii_alphabetic())
                && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        None => false,
    }
}

/// The engine's location of a path or URL and its storage options (`devbuf.open`'s).
pub fn location(text: &str, storage_options: Option<&Bound<'_, PyDict>>) -> PyResult<Location> {
    let is_url = has_scheme(text);
    let Some(opts) = storage_options.filter(|o| !o.is_empty()) else {
        return Ok(Location::from(text));
    };
    if !is_url {
        return Err(PyValueError::new_err(format!(
            "storage options are for URLs (s3://, gs://, az://, http(s)://, file://); {text:?} is a local path"
        )));
    }
    let mut o = ObjectStoreOptions::default();
    for (k, v) in opts.iter() {
        let key: String = k.extract()?;
        match key.as_str() {
            "concurrency" => o.concurrency = v.extract()?,
            "read_ahead_bytes" => o.read_ahead_bytes = v.extract()?,
            "coalesce_bytes" => o.coalesce_bytes = v.extract()?,
            "max_retries" => o.max_retries = v.extract()?,
            "read_only" => o.read_only = v.extract()?,
            _ => {
                let value = if v.is_instance_of::<PyBool>() {
                    if v.extract::<bool>()? {
                        "true"
                    } else {
                        "false"
                    }
                    .to_string()
                } else {
                    v.str()?.to_string()
                };
                o.config.push((key, value));
            }
        }
    }
    Ok(Location::Url(text.to_string(), o))
}

/// numpy's basic indexing (ints, slices with positive steps, `...`, tuples) as the read
/// engine's selection; None = the whole array. Without the `shape` (a Flight read, whose
/// server checks the selection) integers are not bounds-checked here and `...` may only
/// end the index.
pub fn selection(
    key: Option<&Bound<'_, PyAny>>,
    shape: Option<&[u64]>,
) -> PyResult<Option<Vec<AxisSel>>> {
    let Some(key) = key else { return Ok(None) };
    if key.is_none() || key.is_instance_of::<PyEllipsis>() {
        return Ok(None);
    }
    let items: Vec<Bound<'_, PyAny>> = match key.cast::<PyTuple>() {
        Ok(t) => t.iter().collect(),
        Err(_) => vec![key.clone()],
    };
    let ellipses = items
        .iter()
        .filter(|i| i.is_instance_of::<PyEllipsis>())
        .count();
    if ellipses > 1 {
        return Err(PyIndexError::new_err(
            "an index can only have a single ellipsis ('...')",
        ));
    }
    let given = items.len() - ellipses;
    let Some(shape) = shape else {
        return unchecked_selection(&items);
    };
    let ndim = shape.len();
    if given > ndim {
        return Err(PyIndexError::new_err(format!(
            "too many indices for array: array is {ndim}-dimensional, but {given} were indexed"
        )));
    }
    let mut out = Vec::with_capacity(ndim);
    for item in &items {
        if item.is_instance_of::<PyEllipsis>() {
            out.extend(std::iter::repeat_n(AxisSel::Full, ndim - given));
            continue;
        }
        let axis = out.len();
        let len = shape[axis];
        match axis_sel(item, axis)? {
            AxisSel::Index(i) => {
                let n = len as i128;
                let j = if i < 0 { i as i128 + n } else { i as i128 };
                if j < 0 || j >= n {
                    return Err(PyIndexError::new_err(format!(
                        "index {i} is out of bounds for axis {axis} with size {len}"
                    )));
                }
                out.push(AxisSel::Index(j as isize));
            }
            other => out.push(other),
        }
    }
    out.extend(std::iter::repeat_n(AxisSel::Full, ndim - out.len()));
    Ok(Some(out))
}

/// [`selection`] without the array's shape.
fn unchecked_selection(items: &[Bound<'_, PyAny>]) -> PyResult<Option<Vec<AxisSel>>> {
    let mut out = Vec::with_capacity(items.len());
    for (axis, item) in items.iter().enumerate() {
        if item.is_instance_of::<PyEllipsis>() {
            if axis + 1 != items.len() {
                return Err(PyIndexError::new_err(
                    "`...` may only end the index of a Flight read (the client does not know the array's shape)",
                ));
            }
            continue;
        }
        out.push(axis_sel(item, axis)?);
    }
    Ok(Some(out))
}

/// One axis' index without bounds checks (slices, integers).
fn axis_sel(item: &Bound<'_, PyAny>, axis: usize) -> PyResult<AxisSel> {
    if let Ok(s) = item.cast::<PySlice>() {
        // Bounds beyond isize clamp, as numpy's slices do (no array is that long).
        let get = |name: &str| -> PyResult<Option<isize>> {
            let v = s.getattr(name)?;
            if v.is_none() {
                return Ok(None);
            }
            match v.extract::<isize>() {
                Ok(n) => Ok(Some(n)),
                Err(_) if v.is_instance_of::<PyInt>() => {
                    Ok(Some(if v.gt(0)? { isize::MAX } else { isize::MIN }))
                }
                Err(e) => Err(e),
            }
        };
        let step = get("step")?.unwrap_or(1);
        if step <= 0 {
            return Err(PyValueError::new_err(format!(
                "slice step must be positive (got {step} on axis {axis}): devbuf reads numpy's basic selections with positive steps"
            )));
        }
        return Ok(AxisSel::Slice(Slice::new(
            get("start")?,
            get("stop")?,
            step,
        )));
    }
    if item.is_instance_of::<PyBool>() {
        return Err(PyIndexError::new_err(
            "boolean indices are not supported: devbuf reads ints, slices with positive steps and `...`",
        ));
    }
    match item.extract::<isize>() {
        Ok(i) => Ok(AxisSel::Index(i)),
        Err(_) if item.is_instance_of::<PyInt>() => Err(PyIndexError::new_err(format!(
            "index {item} is out of bounds for axis {axis}"
        ))),
        Err(_) => Err(PyIndexError::new_err(format!(
            "only integers, slices (`:`) with positive steps and ellipsis (`...`) are valid indices for devbuf reads (got {})",
            item.get_type().name()?
        ))),
    }
}

fn report_dict<'py>(py: Python<'py>, r: &ReadReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("decoder", r.decoder)?;
    d.set_item("codecs", &r.codecs)?;
    d.set_item("target", &r.target)?;
    d.set_item("cpu_chunks", r.cpu_chunks)?;
    d.set_item("gpu_chunks", r.gpu_chunks)?;
    d.set_item("missing_chunks", r.missing_chunks)?;
    d.set_item("workers", r.workers)?;
    d.set_item("gpu_workers", r.gpu_workers)?;
    d.set_item("decoded_bytes", r.decoded_bytes)?;
    d.set_item("elapsed_us", r.elapsed_us)?;
    d.set_item("gpu_note", &r.gpu_note)?;
    d.set_item("auto", &r.auto)?;
    d.set_item("summary", r.to_string())?;
    Ok(d)
}

impl PyZarrArray {
    fn run_read(
        &self,
        py: Python<'_>,
        key: Option<&Bound<'_, PyAny>>,
        device: Option<usize>,
    ) -> PyResult<(Py<PyAny>, Py<PyDict>)> {
        let sel = selection(key, Some(self.a.shape()))?;
        let proto = match device {
            None => BufferPrototype::Host,
            Some(d) => BufferPrototype::Device(d),
        };
        let a = self.a.clone();
        let (nd, report) = py
            .detach(move || -> devbuf::Result<_> {
                let mut report = ReadReport::default();
                let nd = match &sel {
                    None => a.read(..).report(&mut report).to(&proto)?,
                    Some(s) => a.read(s.as_slice()).report(&mut report).to(&proto)?,
                };
                // The exports promise ready data (`stream: None`): wait for the device.
                if let Some(d) = device {
                    Context::new(d)?.synchronize()?;
                }
                Ok((nd, report))
            })
            .py()?;
        let report = report_dict(py, &report)?.unbind();
        *self.last_report.lock().unwrap_or_else(|p| p.into_inner()) = Some(report.clone_ref(py));
        Ok((new_array(py, nd)?, report))
    }
}

#[pymethods]
impl PyZarrArray {
    #[new]
    fn new() -> PyResult<Self> {
        Err(PyTypeError::new_err(
            "use devbuf.open(path_or_url) to open an array",
        ))
    }

    /// The shape.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.a.shape())
    }

    /// numpy's name of the data type reads return (native-endian; datetime64 and
    /// timedelta64 arrays read as int64).
    #[getter]
    fn dtype(&self) -> String {
        self.a.dtype().to_string()
    }

    /// Number of axes.
    #[getter]
    fn ndim(&self) -> usize {
        self.a.shape().len()
    }

    /// The chunk shape (for a sharded array, its inner chunks', as zarr-python's
    /// `chunks`).
    #[getter]
    fn chunks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let m = self.a.metadata();
        PyTuple::new(py, m.subchunk_shape.as_ref().unwrap_or(&m.chunk_shape))
    }

    /// The shard shape of a sharded array, else None (zarr-python's `shards`).
    #[getter]
    fn shards<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let m = self.a.metadata();
        match &m.subchunk_shape {
            Some(_) => Ok(Some(PyTuple::new(py, &m.chunk_shape)?)),
            None => Ok(None),
        }
    }

    /// 2 or 3.
    #[getter]
    fn zarr_format(&self) -> u8 {
        self.a.metadata().zarr_format
    }

    /// The codecs (zarr v3 names).
    #[getter]
    fn codecs(&self) -> Vec<String> {
        self.a.metadata().codecs.clone()
    }

    /// Where the array is (its path or URL).
    #[getter]
    fn location(&self) -> String {
        self.a.location().to_string()
    }

    /// The report of the last read of this object (a dict, see `read`), or None.
    #[getter]
    fn read_report(&self, py: Python<'_>) -> Option<Py<PyDict>> {
        self.last_report
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|r| r.clone_ref(py))
    }

    /// Reads a selection (numpy's basic indexing: ints, slices with positive steps,
    /// `...`, tuples; None = everything) into host memory (`device=None`) or onto GPU
    /// `device`, as a `devbuf.Array`. With `report=True` returns `(array, report)`, the
    /// report a dict of what the engine did (decoder, codecs, chunks, workers, ...).
    /// The GIL is released while the engine reads.
    #[pyo3(signature = (selection = None, *, device = None, report = false))]
    fn read(
        &self,
        py: Python<'_>,
        selection: Option<&Bound<'_, PyAny>>,
        device: Option<usize>,
        report: bool,
    ) -> PyResult<Py<PyAny>> {
        let (array, r) = self.run_read(py, selection, device)?;
        if report {
            Ok((array, r).into_pyobject(py)?.into_any().unbind())
        } else {
            Ok(array)
        }
    }

    /// `read` as a coroutine on devbuf's tokio runtime (no thread is blocked while the
    /// chunks are fetched; decoding runs on the engine's workers). Cancelling the
    /// awaiting task drops the read: fetches stop and its memory is freed.
    #[pyo3(signature = (selection = None, *, device = None, report = false))]
    fn read_async<'py>(
        &self,
        py: Python<'py>,
        selection: Option<&Bound<'py, PyAny>>,
        device: Option<usize>,
        report: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let sel = self::selection(selection, Some(self.a.shape()))?;
        let proto = match device {
            None => BufferPrototype::Host,
            Some(d) => BufferPrototype::Device(d),
        };
        let a = self.a.clone();
        let last = self.last_report.clone();
        crate::aio::coroutine(py, async move {
            let mut r = ReadReport::default();
            let nd = match &sel {
                None => a.read(..).report(&mut r).to_async(&proto).await,
                Some(s) => a.read(s.as_slice()).report(&mut r).to_async(&proto).await,
            }
            .py()?;
            if let Some(d) = device {
                // The exports promise ready data (`stream: None`).
                tokio::task::spawn_blocking(move || Context::new(d)?.synchronize())
                    .await
                    .map_err(|e| {
                        PyRuntimeError::new_err(format!(
                            "the device synchronisation task failed: {e}"
                        ))
                    })?
                    .py()?;
            }
            Python::attach(|py| -> PyResult<Py<PyAny>> {
                let rd = report_dict(py, &r)?.unbind();
                *last.lock().unwrap_or_else(|p| p.into_inner()) = Some(rd.clone_ref(py));
                let array = new_array(py, nd)?;
                if report {
                    Ok((array, rd).into_pyobject(py)?.into_any().unbind())
                } else {
                    Ok(array)
                }
            })
        })
    }

    /// Reads whole chunks (shards, for a sharded array) by grid coordinates, in the
    /// order given, into one Arrow record batch (`ChunkBatch`: a `UInt64` column per
    /// axis and an `arrow.fixed_shape_tensor` column of the chunks, edge chunks padded
    /// with the fill value) in host memory (`device=None`) or on GPU `device`. The
    /// batch speaks the Arrow PyCapsule stream protocols
    /// (`pyarrow.RecordBatchReader.from_stream(batch)` on the host).
    #[pyo3(signature = (indices, *, device = None))]
    fn read_chunks(
        &self,
        py: Python<'_>,
        indices: Vec<Vec<u64>>,
        device: Option<usize>,
    ) -> PyResult<PyChunkBatch> {
        let ndim = self.a.shape().len();
        if let Some(bad) = indices.iter().find(|c| c.len() != ndim) {
            return Err(PyValueError::new_err(format!(
                "chunk coordinates {bad:?} do not have one index per axis ({ndim})"
            )));
        }
        let proto = match device {
            None => BufferPrototype::Host,
            Some(d) => BufferPrototype::Device(d),
        };
        let a = self.a.clone();
        let (batch, report) = py
            .detach(move || -> devbuf::Result<_> {
                let m = a.metadata();
                let to_usize = |v: &[u64]| v.iter().map(|&n| n as usize).collect::<Vec<_>>();
                let grid =
                    ChunkGrid::new(&to_usize(&m.shape), &to_usize(&m.chunk_shape), a.dtype())?
                        .with_fill_value(m.fill_value);
                let mut report = ReadReport::default();
                let chunks = a.read_chunks(&indices).report(&mut report).to(&proto)?;
                let batch = ChunkBatch::from_chunks(&grid, indices.iter().zip(chunks), &proto)?;
                // The exports record an event after devbuf's work; waiting here too keeps
                // `device` reads as ready as `read`'s.
                if let Some(d) = device {
                    Context::new(d)?.synchronize()?;
                }
                Ok((batch, report))
            })
            .py()?;
        let report = report_dict(py, &report)?.unbind();
        *self.last_report.lock().unwrap_or_else(|p| p.into_inner()) = Some(report);
        Ok(PyChunkBatch::new(batch))
    }

    /// `a[selection]`: a host read (`read(selection)`).
    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        Ok(self.run_read(py, Some(key), None)?.0)
    }

    fn __len__(&self) -> PyResult<usize> {
        match self.a.shape().first() {
            Some(&n) => Ok(n as usize),
            None => Err(PyTypeError::new_err("len() of a 0-d array")),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "<devbuf.ZarrArray {} shape={:?} dtype={} chunks={:?}>",
            self.a.location(),
            self.a.shape(),
            self.a.dtype(),
            self.a.metadata().chunk_shape
        )
    }
}
