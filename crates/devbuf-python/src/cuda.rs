//! pyarrow.cuda-style objects: `Context`, `DeviceBuffer`, `HostBuffer` (page-locked,
//! the buffer protocol), `IpcMemHandle`.

use devbuf::cuda::{self, Context, DeviceBuffer, HostBuffer};
use devbuf::ipc::IpcMemHandle;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::buffer_protocol::{BorrowedBytes, Exported};
use crate::errors::IntoPy;
use crate::{Payload, PayloadValue, new_public};

/// Whether CUDA can be used (a driver and at least one device). Never raises.
#[pyfunction]
pub fn is_available() -> bool {
    cuda::is_available()
}

/// Number of CUDA devices (0 without a driver). Never raises.
#[pyfunction]
pub fn device_count() -> usize {
    cuda::device_count()
}

/// Why CUDA cannot be used, or None when it can.
#[pyfunction]
pub fn unavailable_reason() -> Option<String> {
    cuda::unavailable_reason()
}

/// A CUDA device's primary context (pyarrow.cuda's `Context`).
#[pyclass(frozen, module = "devbuf", name = "Context")]
pub struct PyContext {
    pub ctx: Context,
}

#[pymethods]
impl PyContext {
    #[new]
    #[pyo3(signature = (device = 0))]
    fn new(py: Python<'_>, device: usize) -> PyResult<Self> {
        let ctx = py.detach(|| Context::new(device)).py()?;
        Ok(PyContext { ctx })
    }

    /// The device ordinal.
    #[getter]
    fn device_number(&self) -> usize {
        self.ctx.ordinal()
    }

    /// The device's name, e.g. "NVIDIA H100 80GB HBM3".
    #[getter]
    fn name(&self) -> String {
        self.ctx.properties().name.clone()
    }

    /// Total device memory in bytes.
    #[getter]
    fn total_memory(&self) -> usize {
        self.ctx.properties().total_memory
    }

    /// Device memory this context's buffers hold now, in bytes.
    #[getter]
    fn bytes_allocated(&self) -> usize {
        self.ctx.bytes_allocated()
    }

    /// Free device memory in bytes, as the driver reports it.
    fn free_memory(&self) -> PyResult<usize> {
        self.ctx.free_memory().py()
    }

    /// Waits until all work queued on the device is done.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.ctx.synchronize()).py()
    }

    /// New device memory (`cuMemAlloc`: exportable over IPC), uninitialised.
    fn allocate(&self, py: Python<'_>, nbytes: usize) -> PyResult<PyDeviceBuffer> {
        let buf = py.detach(|| self.ctx.allocate(nbytes)).py()?;
        Ok(PyDeviceBuffer { buf })
    }

    /// New page-locked host memory (zeroed), a `HostBuffer`.
    fn allocate_host(&self, py: Python<'_>, nbytes: usize) -> PyResult<Py<PyAny>> {
        let h = py.detach(|| self.ctx.allocate_host(nbytes)).py()?;
        host_buffer(py, h)
    }

    /// Opens an IPC handle exported by another process (an `IpcMemHandle` or its
    /// `to_bytes()`), on this context's device.
    fn open_ipc_buffer(
        &self,
        py: Python<'_>,
        handle: &Bound<'_, PyAny>,
    ) -> PyResult<PyDeviceBuffer> {
        let h = handle_of(handle)?;
        let buf = py.detach(|| self.ctx.open_ipc(&h)).py()?;
        Ok(PyDeviceBuffer { buf })
    }

    /// A `DeviceBuffer` over device memory another library owns (a cupy or torch
    /// allocation): `address` and `size` in bytes; `base` is kept alive as long as the
    /// buffer and its slices live.
    #[pyo3(signature = (address, size, base = None))]
    fn foreign_buffer(
        &self,
        address: u64,
        size: usize,
        base: Option<Py<PyAny>>,
    ) -> PyResult<PyDeviceBuffer> {
        let buf = self.ctx.view(address, size, base).py()?;
        Ok(PyDeviceBuffer { buf })
    }

    fn __repr__(&self) -> String {
        format!(
            "<devbuf.Context device={} name={:?}>",
            self.ctx.ordinal(),
            self.ctx.properties().name
        )
    }
}

/// Device memory with zero-copy slices (pyarrow.cuda's `CudaBuffer`).
///
/// Exports `__cuda_array_interface__` (version 3, a 1-d uint8 array) and DLPack.
#[pyclass(frozen, module = "devbuf", name = "DeviceBuffer")]
pub struct PyDeviceBuffer {
    pub buf: DeviceBuffer,
}

#[pymethods]
impl PyDeviceBuffer {
    #[new]
    fn new() -> PyResult<Self> {
        Err(PyTypeError::new_err(
            "DeviceBuffer is made by Context.allocate, Context.foreign_buffer or open_ipc_buffer",
        ))
    }

    /// Size in bytes.
    #[getter]
    fn size(&self) -> usize {
        self.buf.len()
    }

    fn __len__(&self) -> usize {
        self.buf.len()
    }

    /// Device address of the first byte.
    #[getter]
    fn address(&self) -> u64 {
        self.buf.address()
    }

    /// The device ordinal.
    #[getter]
    fn device(&self) -> usize {
        self.buf.context().ordinal()
    }

    /// The context the memory belongs to.
    #[getter]
    fn context(&self) -> PyContext {
        PyContext {
            ctx: self.buf.context().clone(),
        }
    }

    /// False for read-only handles (e.g. opened from a read-only IPC handle).
    #[getter]
    fn is_mutable(&self) -> bool {
        self.buf.is_mutable()
    }

    /// Bytes `offset .. offset + length` (to the end when length is None), without a
    /// copy; the slice keeps the whole allocation alive.
    #[pyo3(signature = (offset, length = None))]
    fn slice(&self, offset: usize, length: Option<usize>) -> PyResult<PyDeviceBuffer> {
        let length = length.unwrap_or_else(|| self.buf.len().saturating_sub(offset));
        Ok(PyDeviceBuffer {
            buf: self.buf.slice(offset, length).py()?,
        })
    }

    /// Copies bytes `position .. position + nbytes` (to the end when None) into new
    /// page-locked host memory: a `HostBuffer` (buffer protocol: `bytes(h)`,
    /// `numpy.frombuffer(h, dtype)`).
    #[pyo3(signature = (position = 0, nbytes = None))]
    fn copy_to_host(
        &self,
        py: Python<'_>,
        position: usize,
        nbytes: Option<usize>,
    ) -> PyResult<Py<PyAny>> {
        let n = nbytes.unwrap_or_else(|| self.buf.len().saturating_sub(position));
        let part = self.buf.slice(position, n).py()?;
        let h = py.detach(|| part.to_host()).py()?;
        host_buffer(py, h)
    }

    /// The bytes as a Python `bytes` (one copy through page-locked memory).
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let h = py.detach(|| self.buf.to_host()).py()?;
        Ok(PyBytes::new(py, &h))
    }

    /// Copies a bytes-like object (bytes, bytearray, memoryview, a C-contiguous numpy
    /// array, a `HostBuffer`) to byte `position`; returns the number of bytes copied.
    #[pyo3(signature = (data, position = 0))]
    fn copy_from_host(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        position: usize,
    ) -> PyResult<usize> {
        let src = BorrowedBytes::new(data)?;
        let bytes = src.as_slice();
        // The GIL stays held: `data` may be writable memory (a numpy array, a HostBuffer)
        // that other Python threads could write while the slice over it is alive.
        let _ = py;
        self.buf.copy_from_host(position, bytes).py()?;
        Ok(bytes.len())
    }

    /// Copies all of `buf` (a `DeviceBuffer`, any device) to byte `position`; returns the
    /// number of bytes copied.
    #[pyo3(signature = (buf, position = 0))]
    fn copy_from_device(
        &self,
        py: Python<'_>,
        buf: PyRef<'_, PyDeviceBuffer>,
        position: usize,
    ) -> PyResult<usize> {
        let src = buf.buf.clone();
        py.detach(|| self.buf.copy_from_device(position, &src))
            .py()?;
        Ok(src.len())
    }

    /// An IPC handle of exactly this buffer (slices keep their offset) for another
    /// process: `open_ipc_buffer(handle.to_bytes())` there. The memory stays valid while
    /// this process holds the buffer.
    fn export_for_ipc(&self) -> PyResult<PyIpcMemHandle> {
        Ok(PyIpcMemHandle {
            h: self.buf.export_ipc().py()?,
        })
    }

    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("shape", (self.buf.len(),))?;
        d.set_item("typestr", "|u1")?;
        d.set_item("data", (self.buf.address(), !self.buf.is_mutable()))?;
        d.set_item("strides", py.None())?;
        d.set_item("version", 3)?;
        // Copies into the buffer are synchronous: nothing is pending on any stream.
        d.set_item("stream", py.None())?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "<devbuf.DeviceBuffer size={} address={:#x} device={}>",
            self.buf.len(),
            self.buf.address(),
            self.buf.context().ordinal()
        )
    }
}

/// Page-locked host memory (pyarrow.cuda's `HostBuffer`), writable through the buffer
/// protocol; the public class `devbuf.HostBuffer` adds the protocol (buffer_protocol.rs).
#[pyclass(frozen, subclass, module = "devbuf._devbuf", name = "_HostBufferBase")]
pub struct HostBufferBase {
    h: HostBuffer,
    ptr: usize,
}

#[pymethods]
impl HostBufferBase {
    #[new]
    fn new(payload: &Bound<'_, Payload>) -> PyResult<Self> {
        match payload.get().take()? {
            PayloadValue::Host(mut h) => {
                let ptr = h.as_mut_ptr() as usize;
                Ok(HostBufferBase { h, ptr })
            }
            _ => Err(PyTypeError::new_err("not a host buffer")),
        }
    }

    /// Size in bytes.
    #[getter]
    fn size(&self) -> usize {
        self.h.len()
    }

    fn __len__(&self) -> usize {
        self.h.len()
    }

    /// Host address of the first byte.
    #[getter]
    fn address(&self) -> usize {
        self.ptr
    }

    /// The bytes as a Python `bytes` (a copy).
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.h)
    }

    fn __repr__(&self) -> String {
        format!(
            "<devbuf.HostBuffer size={} address={:#x}>",
            self.h.len(),
            self.ptr
        )
    }
}

impl HostBufferBase {
    pub fn exported(&self) -> PyResult<Exported> {
        Ok(Exported {
            ptr: self.ptr as *mut u8,
            len: self.h.len(),
            readonly: false,
            itemsize: 1,
            format: "B".into(),
            shape: vec![self.h.len()],
            strides: vec![1],
        })
    }
}

/// A `devbuf.HostBuffer` (the public subclass) owning `h`.
pub fn host_buffer(py: Python<'_>, h: HostBuffer) -> PyResult<Py<PyAny>> {
    new_public(py, "HostBuffer", PayloadValue::Host(h))
}

/// A CUDA IPC memory handle (`devbuf::ipc::IpcMemHandle`).
#[pyclass(frozen, module = "devbuf", name = "IpcMemHandle")]
pub struct PyIpcMemHandle {
    pub h: IpcMemHandle,
}

#[pymethods]
impl PyIpcMemHandle {
    /// devbuf's versioned bytes (offset, length, device UUID, process): what
    /// `open_ipc_buffer` takes.
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &Vec::<u8>::from(&self.h))
    }

    /// Parses `to_bytes()`'s output.
    #[staticmethod]
    fn from_bytes(data: &Bound<'_, PyAny>) -> PyResult<PyIpcMemHandle> {
        let b = BorrowedBytes::new(data)?;
        Ok(PyIpcMemHandle {
            h: IpcMemHandle::try_from(b.as_slice()).py()?,
        })
    }

    /// The 64-byte `cudaIpcMemHandle_t` of the allocation (for
    /// `cupy.cuda.runtime.ipcOpenMemHandle`, torch, C++). It maps the *allocation's*
    /// start: add `offset`.
    fn raw_cuda<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.h.raw_cuda())
    }

    /// A handle from a raw 64-byte `cudaIpcMemHandle_t` (`cupy.cuda.runtime.ipcGetMemHandle`)
    /// and the range of the allocation it stands for.
    #[staticmethod]
    fn from_raw_cuda(
        raw: &Bound<'_, PyAny>,
        offset: usize,
        size: usize,
    ) -> PyResult<PyIpcMemHandle> {
        let b = BorrowedBytes::new(raw)?;
        Ok(PyIpcMemHandle {
            h: IpcMemHandle::from_raw_cuda(b.as_slice(), offset, size, None).py()?,
        })
    }

    /// Offset of the exported bytes in their allocation.
    #[getter]
    fn offset(&self) -> usize {
        self.h.offset()
    }

    /// Length of the exported bytes.
    #[getter]
    fn size(&self) -> usize {
        self.h.len()
    }

    /// The exporter's device ordinal, when the handle records it.
    #[getter]
    fn device(&self) -> Option<usize> {
        self.h.device_ordinal()
    }

    /// Opens the handle on the device it names (in the exporting process: a view of
    /// the original buffer).
    fn open(&self, py: Python<'_>) -> PyResult<PyDeviceBuffer> {
        let buf = py.detach(|| self.h.open()).py()?;
        Ok(PyDeviceBuffer { buf })
    }

    fn __str__(&self) -> String {
        self.h.to_string()
    }

    fn __repr__(&self) -> String {
        format!(
            "<devbuf.IpcMemHandle offset={} size={}>",
            self.h.offset(),
            self.h.len()
        )
    }
}

fn handle_of(handle: &Bound<'_, PyAny>) -> PyResult<IpcMemHandle> {
    if let Ok(h) = handle.extract::<PyRef<'_, PyIpcMemHandle>>() {
        return Ok(h.h.clone());
    }
    if let Ok(s) = handle.extract::<String>() {
        return s.parse::<IpcMemHandle>().py();
    }
    let b = BorrowedBytes::new(handle).map_err(|_| {
        PyTypeError::new_err("an IPC handle is an IpcMemHandle, its to_bytes() or its str()")
    })?;
    IpcMemHandle::try_from(b.as_slice()).py()
}

/// Opens an IPC handle (an `IpcMemHandle`, its `to_bytes()` or its `str()`) on the
/// device it names: pyarrow.cuda's `Context.open_ipc_buffer` without a context.
#[pyfunction]
pub fn open_ipc_buffer(py: Python<'_>, handle: &Bound<'_, PyAny>) -> PyResult<PyDeviceBuffer> {
    let h = handle_of(handle)?;
    let buf = py.detach(|| h.open()).py()?;
    Ok(PyDeviceBuffer { buf })
}
