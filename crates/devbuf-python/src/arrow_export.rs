//! The Arrow PyCapsule interface (docs/python.md, "Arrow"): `__arrow_c_array__`,
//! `__arrow_c_device_array__`, `__arrow_c_stream__` and `__arrow_c_device_stream__` of
//! `devbuf.Array` and `devbuf.ChunkBatch`.
//!
//! The structures come from devbuf's C Device Data Interface
//! (`devbuf::arrow::c_device`, docs/c_device.md), whose release callbacks own clones of
//! the exported memory; arrow-rs's `FFI_ArrowArrayStream` makes the plain host stream.
//!
//! Lifetime: each structure is boxed and owned by its capsule. A consumer *moves* it out
//! (a bitwise copy, the source marked released, as the C Data Interface prescribes) and
//! calls its release callback when done; a capsule collected unconsumed still holds a
//! live structure, which its destructor releases (dropping the Rust value calls the
//! callback when it is set). Release callbacks need no GIL.

use std::ffi::{CStr, c_void};
use std::sync::Arc;

use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{RecordBatch, RecordBatchIterator, StructArray};
use arrow_schema::{Field, Schema};
use devbuf::arrow::c_device::{
    ArrowArray, ArrowDeviceArray, ArrowDeviceArrayStream, ExportDevice, FFI_ArrowSchema, SyncEvent,
    export_array, export_stream,
};
use devbuf::arrow::{AnyArray, Batch, ChunkBatch, DeviceArray};
use pyo3::exceptions::{PyNotImplementedError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::errors::IntoPy;

/// The capsule names of the Arrow PyCapsule interface.
pub const SCHEMA: &CStr = c"arrow_schema";
pub const ARRAY: &CStr = c"arrow_array";
pub const ARRAY_STREAM: &CStr = c"arrow_array_stream";
pub const DEVICE_ARRAY: &CStr = c"arrow_device_array";
pub const DEVICE_ARRAY_STREAM: &CStr = c"arrow_device_array_stream";

/// Frees the boxed `T` of a capsule; dropping a structure that is still live (not moved
/// out by a consumer) calls its release callback.
unsafe extern "C" fn destroy<T>(capsule: *mut ffi::PyObject) {
    // Safety: called by CPython with a capsule made by `capsule::<T>`, whose pointer is
    // a `Box<T>` and whose name is one of the static names above (never renamed by
    // Arrow consumers). GetName/GetPointer with the capsule's own name do not fail.
    unsafe {
        let name = ffi::PyCapsule_GetName(capsule);
        let p = ffi::PyCapsule_GetPointer(capsule, name).cast::<T>();
        if !p.is_null() {
            drop(Box::from_raw(p));
        }
    }
}

/// A capsule named `name` owning `value` (boxed; freed by the capsule's destructor).
fn capsule<T: Send + 'static>(
    py: Python<'_>,
    value: T,
    name: &'static CStr,
) -> PyResult<Py<PyAny>> {
    let p = Box::into_raw(Box::new(value));
    // Safety: `p` is non-null and owned by the capsule from here; `name` is static and
    // `destroy::<T>` frees exactly this `Box<T>`.
    let cap = unsafe { ffi::PyCapsule_New(p.cast::<c_void>(), name.as_ptr(), Some(destroy::<T>)) };
    if cap.is_null() {
        // Safety: not handed over: free (and release) it ourselves.
        drop(unsafe { Box::from_raw(p) });
        return Err(PyErr::fetch(py));
    }
    // Safety: a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, cap) }.unbind())
}

/// The spec's rule for `**kwargs`: keywords are for future extensions, a keyword with a
/// value other than None is not understood.
pub fn check_kwargs(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
    let Some(kw) = kwargs else { return Ok(()) };
    let mut unknown = Vec::new();
    for (k, v) in kw.iter() {
        if !v.is_none() {
            unknown.push(k.str()?.to_string());
        }
    }
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(PyNotImplementedError::new_err(format!(
            "unsupported keyword argument(s): {}",
            unknown.join(", ")
        )))
    }
}

/// `requested_schema`: None or a schema capsule. devbuf exports its one form (the
/// spec lets a producer ignore the request); anything but a capsule is refused.
pub fn check_requested_schema(requested_schema: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    match requested_schema {
        Some(s) if !s.is_none() => {
            // Safety: `s` is a live object; PyCapsule_CheckExact only reads its type.
            if unsafe { ffi::PyCapsule_CheckExact(s.as_ptr()) } == 0 {
                return Err(PyTypeError::new_err(
                    "requested_schema must be None or an \"arrow_schema\" PyCapsule",
                ));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// What an array export needs: the Arrow array (flat values or tensor storage) where
/// its memory lives, and its field (the tensor extension's metadata rides on it).
pub struct ArrayExport {
    pub array: AnyArray,
    pub field: Field,
}

fn schema_of_field(field: &Field) -> PyResult<FFI_ArrowSchema> {
    FFI_ArrowSchema::try_from(field).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// `(schema, device array)` capsules: CPU for host memory, CUDA for device memory with
/// an event recorded on the legacy default stream after devbuf's work.
pub fn device_array_capsules(py: Python<'_>, e: ArrayExport) -> PyResult<Py<PyAny>> {
    let schema = schema_of_field(&e.field)?;
    let device = match &e.array {
        AnyArray::Host(_) => ExportDevice::Cpu,
        AnyArray::Device(_) => ExportDevice::Cuda(SyncEvent::DefaultStream),
    };
    let array = e.array;
    let (c_array, _) = py.detach(move || export_array(array, device)).py()?;
    pair(
        py,
        schema,
        capsule::<ArrowDeviceArray>(py, c_array, DEVICE_ARRAY)?,
    )
}

/// `(schema, array)` capsules of a host array; device arrays are refused.
pub fn array_capsules(py: Python<'_>, e: ArrayExport) -> PyResult<Py<PyAny>> {
    if let AnyArray::Device(_) = &e.array {
        return Err(PyValueError::new_err(
            "__arrow_c_array__: the array is in device memory (use __arrow_c_device_array__, \
             or copy_to_host() first)",
        ));
    }
    let schema = schema_of_field(&e.field)?;
    let array = e.array;
    let (mut c_array, _) = py
        .detach(move || export_array(array, ExportDevice::Cpu))
        .py()?;
    let plain: ArrowArray = c_array.take_array();
    pair(py, schema, capsule::<ArrowArray>(py, plain, ARRAY)?)
}

fn pair(py: Python<'_>, schema: FFI_ArrowSchema, array: Py<PyAny>) -> PyResult<Py<PyAny>> {
    let schema = capsule::<FFI_ArrowSchema>(py, schema, SCHEMA)?;
    Ok(PyTuple::new(py, [schema, array])?.into_any().unbind())
}

/// `devbuf.ChunkBatch`: chunks of a zarr array as one Arrow record batch (coordinate
/// columns and an `arrow.fixed_shape_tensor` chunk column) in host or device memory.
#[pyclass(frozen, module = "devbuf", name = "ChunkBatch")]
pub struct PyChunkBatch {
    batch: ChunkBatch,
}

impl PyChunkBatch {
    pub fn new(batch: ChunkBatch) -> Self {
        PyChunkBatch { batch }
    }

    fn schema(&self) -> Arc<Schema> {
        self.batch.batch().schema()
    }
}

#[pymethods]
impl PyChunkBatch {
    #[new]
    fn py_new() -> PyResult<Self> {
        Err(PyTypeError::new_err(
            "use ZarrArray.read_chunks(indices) to make a ChunkBatch",
        ))
    }

    /// Number of chunks (rows).
    #[getter]
    fn num_rows(&self) -> usize {
        self.batch.len()
    }

    fn __len__(&self) -> usize {
        self.batch.len()
    }

    /// The device ordinal, or None for host memory.
    #[getter]
    fn device(&self) -> Option<usize> {
        match self.batch.prototype() {
            devbuf::zarr::BufferPrototype::Device(n) => Some(n),
            _ => None,
        }
    }

    /// The shape of every stored chunk (edge chunks padded to it with the fill value).
    #[getter]
    fn chunk_shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.batch.chunk_shape())
    }

    /// The zarr array's shape.
    #[getter]
    fn array_shape<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        self.batch
            .array_shape()
            .map(|s| PyTuple::new(py, s))
            .transpose()
    }

    /// Grid coordinates of chunk `i`.
    fn coords<'py>(&self, py: Python<'py>, i: usize) -> PyResult<Bound<'py, PyTuple>> {
        let c = self.batch.coords(i).ok_or_else(|| {
            pyo3::exceptions::PyIndexError::new_err(format!(
                "chunk {i} out of range ({} chunks)",
                self.batch.len()
            ))
        })?;
        PyTuple::new(py, c)
    }

    /// The batch as one `ArrowDeviceArrayStream` capsule (one batch; CPU for a host
    /// batch, CUDA with an event on the legacy default stream for a device batch).
    #[pyo3(signature = (requested_schema = None, **kwargs))]
    fn __arrow_c_device_stream__(
        &self,
        py: Python<'_>,
        requested_schema: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        check_kwargs(kwargs)?;
        check_requested_schema(requested_schema)?;
        let batch = self.batch.batch().clone();
        let device = match &batch {
            Batch::Host(_) => ExportDevice::Cpu,
            Batch::Device(_) => ExportDevice::Cuda(SyncEvent::DefaultStream),
        };
        let stream: ArrowDeviceArrayStream =
            export_stream(self.schema(), vec![Ok::<_, devbuf::Error>(batch)], device);
        capsule::<ArrowDeviceArrayStream>(py, stream, DEVICE_ARRAY_STREAM)
    }

    /// The batch as one `ArrowArrayStream` capsule (host batches only):
    /// `pyarrow.RecordBatchReader.from_stream(batch)`.
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_stream__(
        &self,
        py: Python<'_>,
        requested_schema: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        check_requested_schema(requested_schema)?;
        let rb = self.host_batch("__arrow_c_stream__")?;
        let reader = RecordBatchIterator::new(vec![Ok(rb)], self.schema());
        let stream = FFI_ArrowArrayStream::new(Box::new(reader));
        capsule::<FFI_ArrowArrayStream>(py, stream, ARRAY_STREAM)
    }

    /// The batch as `(schema, device array)` capsules of a struct array
    /// (`pyarrow.record_batch(batch)` on the host).
    #[pyo3(signature = (requested_schema = None, **kwargs))]
    fn __arrow_c_device_array__(
        &self,
        py: Python<'_>,
        requested_schema: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        check_kwargs(kwargs)?;
        check_requested_schema(requested_schema)?;
        let schema = self.ffi_schema()?;
        let batch = self.batch.batch().clone();
        let c_array = py
            .detach(move || match batch {
                Batch::Host(rb) => export_array(&StructArray::from(rb), ExportDevice::Cpu),
                Batch::Device(d) => {
                    export_array(DeviceArray::try_from(d)?, SyncEvent::DefaultStream)
                }
            })
            .py()?
            .0;
        pair(
            py,
            schema,
            capsule::<ArrowDeviceArray>(py, c_array, DEVICE_ARRAY)?,
        )
    }

    /// The batch as `(schema, array)` capsules of a struct array (host batches only):
    /// `pyarrow.record_batch(batch)`.
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_array__(
        &self,
        py: Python<'_>,
        requested_schema: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        check_requested_schema(requested_schema)?;
        let schema = self.ffi_schema()?;
        let rb = self.host_batch("__arrow_c_array__")?;
        let (mut c_array, _) = py
            .detach(move || export_array(&StructArray::from(rb), ExportDevice::Cpu))
            .py()?;
        pair(
            py,
            schema,
            capsule::<ArrowArray>(py, c_array.take_array(), ARRAY)?,
        )
    }

    fn __repr__(&self) -> String {
        let place = match self.device() {
            Some(o) => format!("device {o}"),
            None => "host".to_string(),
        };
        format!(
            "<devbuf.ChunkBatch {} chunks of shape {:?} {}>",
            self.batch.len(),
            self.batch.chunk_shape(),
            place
        )
    }
}

impl PyChunkBatch {
    fn host_batch(&self, what: &str) -> PyResult<RecordBatch> {
        match self.batch.batch() {
            Batch::Host(rb) => Ok(rb.clone()),
            Batch::Device(_) => Err(PyValueError::new_err(format!(
                "{what}: the batch is in device memory (use {}, or read_chunks(device=None))",
                if what.contains("stream") {
                    "__arrow_c_device_stream__"
                } else {
                    "__arrow_c_device_array__"
                }
            ))),
        }
    }

    /// The record batch's schema as a struct-typed C schema (fields and metadata).
    fn ffi_schema(&self) -> PyResult<FFI_ArrowSchema> {
        FFI_ArrowSchema::try_from(self.schema().as_ref())
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }
}
