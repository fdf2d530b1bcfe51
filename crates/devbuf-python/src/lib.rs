//! `devbuf._devbuf`: the native module of the `devbuf` Python package (docs/python.md).
//!
//! Built with maturin as one abi3 wheel for CPython 3.10+ (`pyproject.toml`); the Python
//! package around it is `python/devbuf/`.

use std::sync::Mutex;

use devbuf::cuda::HostBuffer;
use devbuf::zarr::NDBuffer;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

mod aio;
mod array;
mod arrow_export;
mod buffer_protocol;
mod cuda;
mod dlpack;
mod errors;
mod flight;
mod pipeline;
mod zarr;

/// What a public subclass's constructor takes over: the Rust value of a new
/// `HostBuffer` or `Array` (see [`new_public`]).
pub enum PayloadValue {
    Host(HostBuffer),
    Array(NDBuffer),
}

/// Carries a Rust value into a public class's constructor (internal).
#[pyclass(frozen, module = "devbuf._devbuf", name = "_Payload")]
pub struct Payload(Mutex<Option<PayloadValue>>);

impl Payload {
    fn take(&self) -> PyResult<PayloadValue> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| PyTypeError::new_err("this payload was used already"))
    }
}

/// The public classes made at import: `HostBuffer` and `Array`, each a subclass of its
/// PyO3 class and of `_BufferExport` (buffer_protocol.rs says why).
static HOST_BUFFER: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static ARRAY: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// A new instance of public class `name` ("HostBuffer" or "Array") owning `value`.
pub fn new_public(py: Python<'_>, name: &str, value: PayloadValue) -> PyResult<Py<PyAny>> {
    let cell = if name == "HostBuffer" {
        &HOST_BUFFER
    } else {
        &ARRAY
    };
    let cls = cell
        .get(py)
        .ok_or_else(|| PyTypeError::new_err("devbuf._devbuf is not initialised"))?;
    let payload = Py::new(py, Payload(Mutex::new(Some(value))))?;
    Ok(cls.bind(py).call1((payload,))?.unbind())
}

fn public_class<'py>(
    py: Python<'py>,
    name: &str,
    base: Bound<'py, PyType>,
    export: &Bound<'py, PyType>,
    doc: &str,
) -> PyResult<Bound<'py, PyType>> {
    let ns = PyDict::new(py);
    ns.set_item("__slots__", PyTuple::empty(py))?;
    ns.set_item("__module__", "devbuf")?;
    ns.set_item("__doc__", doc)?;
    let bases = PyTuple::new(py, [base.into_any(), export.clone().into_any()])?;
    let t = py.get_type::<PyType>().call1((name, bases, ns))?;
    Ok(t.cast_into::<PyType>()?)
}

#[pymodule]
fn _devbuf(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    let export = buffer_protocol::export_type(py)?;
    m.add("_BufferExport", &export)?;
    m.add_class::<Payload>()?;
    m.add_class::<cuda::HostBufferBase>()?;
    m.add_class::<array::ArrayBase>()?;
    let host = public_class(
        py,
        "HostBuffer",
        py.get_type::<cuda::HostBufferBase>(),
        &export,
        "Page-locked host memory (pyarrow.cuda's HostBuffer): writable through the buffer \
         protocol (memoryview, numpy.frombuffer) without a copy.",
    )?;
    let array = public_class(
        py,
        "Array",
        py.get_type::<array::ArrayBase>(),
        &export,
        "An n-d array in host or device memory (a read's result), exported without copies: \
         the buffer protocol and __array_interface__ on the host, \
         __cuda_array_interface__ on a device, __dlpack__ on both.",
    )?;
    m.add("HostBuffer", &host)?;
    m.add("Array", &array)?;
    let _ = HOST_BUFFER.set(py, host.unbind());
    let _ = ARRAY.set(py, array.unbind());
    m.add_class::<cuda::PyContext>()?;
    m.add_class::<cuda::PyDeviceBuffer>()?;
    m.add_class::<cuda::PyIpcMemHandle>()?;
    m.add_class::<zarr::PyZarrArray>()?;
    m.add_class::<pipeline::PipelineArray>()?;
    m.add_class::<arrow_export::PyChunkBatch>()?;
    m.add_class::<flight::PyServer>()?;
    m.add_class::<flight::PyClient>()?;
    m.add_function(wrap_pyfunction!(cuda::is_available, m)?)?;
    m.add_function(wrap_pyfunction!(cuda::device_count, m)?)?;
    m.add_function(wrap_pyfunction!(cuda::unavailable_reason, m)?)?;
    m.add_function(wrap_pyfunction!(cuda::open_ipc_buffer, m)?)?;
    m.add_function(wrap_pyfunction!(zarr::open, m)?)?;
    m.add_function(wrap_pyfunction!(zarr::open_async, m)?)?;
    Ok(())
}
