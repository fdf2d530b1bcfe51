//! `devbuf.Array`: the read engine's `NDBuffer` (host or device), exported without
//! copies: the buffer protocol and `__array_interface__` on the host,
//! `__cuda_array_interface__` on a device, DLPack on both.
//!
//! Every use of `NDBuffer`'s API in this crate is in this file.

use devbuf::ElementType;
use devbuf::memory::Memory;
use devbuf::zarr::{BufferPrototype, Dtype, NDBuffer, Order};
use pyo3::exceptions::{PyAttributeError, PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::arrow_export::{self, ArrayExport};
use crate::buffer_protocol::Exported;
use crate::dlpack;
use crate::errors::IntoPy;
use crate::{Payload, PayloadValue, new_public};

/// The public `devbuf.Array` (a subclass of this and of the buffer-protocol type).
#[pyclass(frozen, subclass, module = "devbuf._devbuf", name = "_ArrayBase")]
pub struct ArrayBase {
    nd: NDBuffer,
}

/// A `devbuf.Array` holding `nd`.
pub fn new_array(py: Python<'_>, nd: NDBuffer) -> PyResult<Py<PyAny>> {
    new_public(py, "Array", PayloadValue::Array(nd))
}

/// numpy's type string (`"<f4"`, `"|u1"`, `"|b1"`).
fn typestr(d: Dtype) -> String {
    let e = d.element();
    let order = if e.size() == 1 {
        '|'
    } else if d.byteorder() == devbuf::zarr::Endianness::Big {
        '>'
    } else {
        '<'
    };
    format!("{order}{}{}", e.kind(), e.size())
}

/// The `struct` module's format of one element (the buffer protocol's `format`).
fn struct_format(d: Dtype) -> String {
    use ElementType::*;
    let c = match d.element() {
        Bool => "?",
        Int8 => "b",
        Int16 => "h",
        Int32 => "i",
        Int64 => "q",
        UInt8 => "B",
        UInt16 => "H",
        UInt32 => "I",
        UInt64 => "Q",
        Float16 => "e",
        Float32 => "f",
        Float64 => "d",
        Complex64 => "Zf",
        Complex128 => "Zd",
    };
    if d.byteorder() == devbuf::zarr::Endianness::NATIVE || d.element().size() == 1 {
        c.to_string()
    } else if d.byteorder() == devbuf::zarr::Endianness::Big {
        format!(">{c}")
    } else {
        format!("<{c}")
    }
}

impl ArrayBase {
    /// Address of element `[0, .., 0]`.
    fn data_address(&self) -> u64 {
        let a = self.nd.as_ndarray_like();
        a.memory.address() + a.offset as u64
    }

    fn device_ordinal(&self) -> Option<usize> {
        match self.nd.prototype() {
            devbuf::zarr::BufferPrototype::Device(n) => Some(n),
            _ => None,
        }
    }

    /// The interfaces' `strides`: None for C-contiguous data, else a tuple of bytes.
    fn strides_tuple_if_not_c<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        if self.nd.is_contiguous(Order::C) {
            Ok(None)
        } else {
            Ok(Some(PyTuple::new(py, self.nd.strides())?))
        }
    }

    /// The Arrow form of the array (docs/python.md, "Arrow"): 0-d and 1-d arrays flat,
    /// in their primitive type; n-d arrays as `arrow.fixed_shape_tensor` rows (axis 0
    /// the rows, pyarrow's `FixedShapeTensorArray.from_numpy_ndarray`). Zero-copy for
    /// C-contiguous, native-endian, non-bool arrays; one copy where the data lives
    /// otherwise.
    fn arrow_export(&self, py: Python<'_>) -> PyResult<ArrayExport> {
        let nd = self.nd.clone();
        py.detach(move || -> devbuf::Result<ArrayExport> {
            if nd.ndim() <= 1 {
                let array = nd.into_arrow()?;
                let field = arrow_schema::Field::new("", array.data_type().clone(), false);
                Ok(ArrayExport { array, field })
            } else {
                let t = nd.into_tensor_rows()?;
                let field = t.tensor_type().field("", false)?;
                Ok(ArrayExport {
                    array: t.into_storage(),
                    field,
                })
            }
        })
        .py()
    }

    /// The host memory for the buffer protocol (an error for device arrays).
    pub fn exported(&self) -> PyResult<Exported> {
        let a = self.nd.as_ndarray_like();
        match a.memory {
            Memory::Host(_) => Ok(Exported {
                ptr: self.data_address() as *mut u8,
                len: self.nd.nbytes(),
                readonly: true,
                itemsize: a.dtype.element().size(),
                format: struct_format(a.dtype),
                shape: a.shape.to_vec(),
                strides: a.strides.to_vec(),
            }),
            _ => Err(PyBufferError::new_err(format!(
                "the array is in the memory of device {}: use __cuda_array_interface__, \
                 __dlpack__ (cupy.asarray, torch.from_dlpack) or copy_to_host()",
                self.device_ordinal().unwrap_or(0)
            ))),
        }
    }
}

#[pymethods]
impl ArrayBase {
    #[new]
    fn new(payload: &Bound<'_, Payload>) -> PyResult<Self> {
        match payload.get().take()? {
            PayloadValue::Array(nd) => Ok(ArrayBase { nd }),
            _ => Err(PyTypeError::new_err("not an array")),
        }
    }

    /// The shape.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.nd.shape())
    }

    /// numpy's name of the data type (`"float32"`; `">f4"` for big-endian data):
    /// `numpy.dtype(a.dtype)`.
    #[getter]
    fn dtype(&self) -> String {
        self.nd.dtype().to_string()
    }

    /// Byte strides, one per axis.
    #[getter]
    fn strides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.nd.strides())
    }

    /// Number of axes.
    #[getter]
    fn ndim(&self) -> usize {
        self.nd.ndim()
    }

    /// Number of elements.
    #[getter]
    fn size(&self) -> usize {
        self.nd.size()
    }

    /// Bytes of the elements.
    #[getter]
    fn nbytes(&self) -> usize {
        self.nd.nbytes()
    }

    /// Size of one element in bytes.
    #[getter]
    fn itemsize(&self) -> usize {
        self.nd.dtype().element().size()
    }

    /// The device ordinal, or None for host memory.
    #[getter]
    fn device(&self) -> Option<usize> {
        self.device_ordinal()
    }

    /// Address of the first element (host or device).
    #[getter]
    fn address(&self) -> u64 {
        self.data_address()
    }

    /// True for C-contiguous arrays (every read returns one).
    #[getter]
    fn is_c_contiguous(&self) -> bool {
        self.nd.is_contiguous(Order::C)
    }

    fn __len__(&self) -> PyResult<usize> {
        self.nd
            .shape()
            .first()
            .copied()
            .ok_or_else(|| PyTypeError::new_err("len() of a 0-d array"))
    }

    /// A host copy (a host array is returned as it is).
    fn copy_to_host(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let me = slf.get();
        if me.nd.prototype().is_host() {
            return Ok(slf.clone().into_any().unbind());
        }
        let nd = me.nd.clone();
        let host = py.detach(|| nd.to_prototype(&BufferPrototype::Host)).py()?;
        new_array(py, host)
    }

    /// A copy on device `device` (the array itself when it is there already).
    #[pyo3(signature = (device = 0))]
    fn to_device(slf: &Bound<'_, Self>, device: usize) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let me = slf.get();
        if me.device_ordinal() == Some(device) {
            return Ok(slf.clone().into_any().unbind());
        }
        let nd = me.nd.clone();
        let d = py
            .detach(|| nd.to_prototype(&BufferPrototype::Device(device)))
            .py()?;
        new_array(py, d)
    }

    /// A numpy array: zero-copy (read-only) for host arrays, one copy for device arrays.
    fn to_numpy(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let host = Self::copy_to_host(slf)?;
        Ok(py
            .import("numpy")?
            .call_method1("asarray", (host,))?
            .unbind())
    }

    /// numpy's array interface (host arrays only): numpy consumes it without a copy and
    /// keeps this array alive as the result's base.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if !self.nd.prototype().is_host() {
            return Err(PyAttributeError::new_err(
                "__array_interface__: the array is in device memory (use __cuda_array_interface__)",
            ));
        }
        let d = PyDict::new(py);
        d.set_item("shape", PyTuple::new(py, self.nd.shape())?)?;
        d.set_item("typestr", typestr(self.nd.dtype()))?;
        d.set_item("data", (self.data_address(), true))?;
        d.set_item("strides", self.strides_tuple_if_not_c(py)?)?;
        d.set_item("version", 3)?;
        Ok(d)
    }

    /// The CUDA Array Interface, version 3 (device arrays only). `stream` is None: the
    /// read that made the array synchronised its device, so no work on any stream is
    /// pending and a consumer need not wait.
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if self.nd.prototype().is_host() {
            return Err(PyAttributeError::new_err(
                "__cuda_array_interface__: the array is in host memory (use __array_interface__)",
            ));
        }
        let d = PyDict::new(py);
        d.set_item("shape", PyTuple::new(py, self.nd.shape())?)?;
        d.set_item("typestr", typestr(self.nd.dtype()))?;
        d.set_item("data", (self.data_address(), false))?;
        d.set_item("strides", self.strides_tuple_if_not_c(py)?)?;
        d.set_item("version", 3)?;
        d.set_item("stream", py.None())?;
        Ok(d)
    }

    /// `(device_type, device_id)`: `(kDLCUDA = 2, ordinal)` or `(kDLCPU = 1, 0)`.
    fn __dlpack_device__(&self) -> (i32, i32) {
        match self.device_ordinal() {
            Some(o) => (dlpack::KDL_CUDA, o as i32),
            None => (dlpack::KDL_CPU, 0),
        }
    }

    /// A DLPack capsule of the array without a copy (DLPack 1.0 with the read-only flag
    /// on host arrays when `max_version >= (1, 0)`, else the legacy struct). `stream`
    /// is accepted and needs no wait (the data is ready, see
    /// `__cuda_array_interface__`); `copy=True` and other devices are refused.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<&Bound<'_, PyAny>>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let _ = stream;
        if copy == Some(true) {
            return Err(PyValueError::new_err(
                "__dlpack__(copy=True): devbuf exports without copies only (copy with copy_to_host / to_device first)",
            ));
        }
        let here = self.__dlpack_device__();
        if let Some(want) = dl_device
            && want != here
        {
            return Err(PyBufferError::new_err(format!(
                "__dlpack__(dl_device={want:?}): the array is on {here:?}"
            )));
        }
        let versioned = dlpack::wants_versioned(max_version)?;
        if !versioned && self.nd.prototype().is_host() {
            // The legacy struct has no read-only flag, and host arrays are memory devbuf
            // treats as immutable (it may be read, or shared with other arrays).
            return Err(PyBufferError::new_err(
                "__dlpack__: a host array is read-only and the legacy DLPack capsule cannot \
                 say so; ask for DLPack 1 (max_version=(1, 0); numpy >= 2.1 does) or use \
                 np.asarray(arr), which is zero-copy and read-only",
            ));
        }
        let dtype = self.nd.dtype();
        if dtype.byteorder() != devbuf::zarr::Endianness::NATIVE && dtype.element().size() > 1 {
            return Err(PyBufferError::new_err(
                "DLPack has no byte order: the array is not native-endian",
            ));
        }
        let export = dlpack::Export {
            owner: Box::new(self.nd.clone()),
            data: self.data_address(),
            device_type: here.0,
            device_id: here.1,
            element: dtype.element(),
            shape: self.nd.shape().to_vec(),
            strides: self.nd.strides().to_vec(),
            readonly: self.nd.prototype().is_host(),
        };
        dlpack::capsule(py, export, versioned)
    }

    /// The Arrow PyCapsule device protocol: `(schema, device array)` capsules, device
    /// type CPU for host arrays, CUDA for device arrays (with an event on the legacy
    /// default stream). `requested_schema` is accepted and not applied (one form).
    #[pyo3(signature = (requested_schema = None, **kwargs))]
    fn __arrow_c_device_array__(
        &self,
        py: Python<'_>,
        requested_schema: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        arrow_export::check_kwargs(kwargs)?;
        arrow_export::check_requested_schema(requested_schema)?;
        arrow_export::device_array_capsules(py, self.arrow_export(py)?)
    }

    /// The Arrow PyCapsule protocol (host arrays): `(schema, array)` capsules
    /// (`pyarrow.array(a)`).
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_array__(
        &self,
        py: Python<'_>,
        requested_schema: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        arrow_export::check_requested_schema(requested_schema)?;
        if !self.nd.prototype().is_host() {
            return Err(PyValueError::new_err(
                "__arrow_c_array__: the array is in device memory (use \
                 __arrow_c_device_array__, or copy_to_host() first)",
            ));
        }
        arrow_export::array_capsules(py, self.arrow_export(py)?)
    }

    fn __repr__(&self) -> String {
        let place = match self.device_ordinal() {
            Some(o) => format!("device {o}"),
            None => "host".to_string(),
        };
        format!(
            "<devbuf.Array shape={:?} dtype={} {}>",
            self.nd.shape(),
            self.nd.dtype(),
            place
        )
    }
}
