//! The buffer protocol (`memoryview(x)`, `numpy.frombuffer(x)`, `bytes(x)`) for host
//! memory, on an abi3 module for CPython 3.10.
//!
//! Why by hand: `Py_buffer` and the buffer slots entered the limited API in 3.11, so
//! PyO3 offers `__getbuffer__` to abi3 modules only from `abi3-py311`. The slot ids
//! (`Py_bf_getbuffer` = 1, `Py_bf_releasebuffer` = 2) are accepted by `PyType_FromSpec`
//! since 3.9 and `Py_buffer`'s layout has not changed since 3.3, so this module creates
//! one small type, `_BufferExport`, with those two slots, and the public classes
//! (`HostBuffer`, `Array`) are made as subclasses of their PyO3 class *and* of it
//! (CPython copies `tp_as_buffer` from a base into a subclass that lacks one). The slot
//! asks the object for its memory ([`exported`]) and sets `view.obj` to it: the object,
//! and so its Rust memory, lives as long as any view of it.

use std::ffi::{CString, c_int, c_void};
use std::ptr;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyType;

/// `Py_buffer` as CPython 3.3+ lays it out (`Include/pybuffer.h`); pyo3-ffi declares it
/// only for 3.11+ under abi3.
#[repr(C)]
pub struct PyBufferRaw {
    pub buf: *mut c_void,
    pub obj: *mut ffi::PyObject,
    pub len: ffi::Py_ssize_t,
    pub itemsize: ffi::Py_ssize_t,
    pub readonly: c_int,
    pub ndim: c_int,
    pub format: *mut std::ffi::c_char,
    pub shape: *mut ffi::Py_ssize_t,
    pub strides: *mut ffi::Py_ssize_t,
    pub suboffsets: *mut ffi::Py_ssize_t,
    pub internal: *mut c_void,
}

impl PyBufferRaw {
    pub const fn empty() -> PyBufferRaw {
        PyBufferRaw {
            buf: ptr::null_mut(),
            obj: ptr::null_mut(),
            len: 0,
            itemsize: 0,
            readonly: 0,
            ndim: 0,
            format: ptr::null_mut(),
            shape: ptr::null_mut(),
            strides: ptr::null_mut(),
            suboffsets: ptr::null_mut(),
            internal: ptr::null_mut(),
        }
    }
}

const PYBUF_WRITABLE: c_int = 0x0001;
const PYBUF_FORMAT: c_int = 0x0004;
const PYBUF_ND: c_int = 0x0008;
const PYBUF_STRIDES: c_int = 0x0010 | PYBUF_ND;
const PYBUF_C_CONTIGUOUS: c_int = 0x0020 | PYBUF_STRIDES;
const PYBUF_F_CONTIGUOUS: c_int = 0x0040 | PYBUF_STRIDES;
const PYBUF_ANY_CONTIGUOUS: c_int = 0x0080 | PYBUF_STRIDES;

// `PyObject_GetBuffer` / `PyBuffer_Release` exist in every CPython 3 (they entered the
// limited API in 3.11): declared here with the layout above, for reading bytes-like
// arguments without a copy.
unsafe extern "C" {
    fn PyObject_GetBuffer(obj: *mut ffi::PyObject, view: *mut PyBufferRaw, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut PyBufferRaw);
}

/// Host memory an object exports: what the slot fills a `Py_buffer` with.
pub struct Exported {
    pub ptr: *mut u8,
    pub len: usize,
    pub readonly: bool,
    pub itemsize: usize,
    /// `struct` module format of one element (`"B"` for bytes).
    pub format: String,
    pub shape: Vec<usize>,
    /// Byte strides.
    pub strides: Vec<usize>,
}

impl Exported {
    fn is_c_contiguous(&self) -> bool {
        let mut expect = self.itemsize;
        for (&n, &s) in self.shape.iter().zip(&self.strides).rev() {
            if n > 1 && s != expect {
                return false;
            }
            expect *= n;
        }
        true
    }

    fn is_f_contiguous(&self) -> bool {
        let mut expect = self.itemsize;
        for (&n, &s) in self.shape.iter().zip(&self.strides) {
            if n > 1 && s != expect {
                return false;
            }
            expect *= n;
        }
        true
    }
}

/// What the slot keeps in `view.internal` (freed by the release slot).
struct Internal {
    _format: CString,
    shape: Vec<ffi::Py_ssize_t>,
    strides: Vec<ffi::Py_ssize_t>,
}

/// The memory `obj` exports, or the error to raise (a device array, a released buffer).
fn exported(obj: &Bound<'_, PyAny>) -> PyResult<Exported> {
    if let Ok(h) = obj.extract::<PyRef<'_, crate::cuda::HostBufferBase>>() {
        return h.exported();
    }
    if let Ok(a) = obj.extract::<PyRef<'_, crate::array::ArrayBase>>() {
        return a.exported();
    }
    Err(PyBufferError::new_err(
        "this object does not export host memory",
    ))
}

fn fill(obj: &Bound<'_, PyAny>, view: *mut PyBufferRaw, flags: c_int) -> PyResult<()> {
    let e = exported(obj)?;
    if flags & PYBUF_WRITABLE != 0 && e.readonly {
        return Err(PyBufferError::new_err(
            "the memory is read-only (devbuf's host arrays are immutable: copy it to write)",
        ));
    }
    let c = e.is_c_contiguous();
    let f = e.is_f_contiguous();
    if (flags & PYBUF_C_CONTIGUOUS) == PYBUF_C_CONTIGUOUS && !c {
        return Err(PyBufferError::new_err("the array is not C-contiguous"));
    }
    if (flags & PYBUF_F_CONTIGUOUS) == PYBUF_F_CONTIGUOUS && !f {
        return Err(PyBufferError::new_err(
            "the array is not Fortran-contiguous",
        ));
    }
    if (flags & PYBUF_ANY_CONTIGUOUS) == PYBUF_ANY_CONTIGUOUS && !(c || f) {
        return Err(PyBufferError::new_err("the array is not contiguous"));
    }
    if (flags & PYBUF_STRIDES) != PYBUF_STRIDES && !c {
        return Err(PyBufferError::new_err(
            "the array is not C-contiguous: ask for strides (PyBUF_STRIDES)",
        ));
    }
    let format = CString::new(e.format.clone()).expect("formats have no NUL");
    let mut internal = Box::new(Internal {
        _format: format,
        shape: e.shape.iter().map(|&n| n as ffi::Py_ssize_t).collect(),
        strides: e.strides.iter().map(|&s| s as ffi::Py_ssize_t).collect(),
    });
    // Safety: `view` is the consumer's `Py_buffer`, valid for writes during the call
    // (the buffer protocol's contract); the pointers stored in it point into `internal`,
    // which lives until the release slot frees it.
    unsafe {
        let v = &mut *view;
        v.buf = e.ptr.cast();
        v.len = e.len as ffi::Py_ssize_t;
        v.readonly = c_int::from(e.readonly);
        v.suboffsets = ptr::null_mut();
        if flags & PYBUF_ND != 0 {
            v.itemsize = e.itemsize as ffi::Py_ssize_t;
            v.ndim = e.shape.len() as c_int;
            v.shape = internal.shape.as_mut_ptr();
            v.format = if flags & PYBUF_FORMAT != 0 {
                internal._format.as_ptr().cast_mut()
            } else {
                ptr::null_mut()
            };
            v.strides = if (flags & PYBUF_STRIDES) == PYBUF_STRIDES {
                internal.strides.as_mut_ptr()
            } else {
                ptr::null_mut()
            };
        } else {
            // PyBUF_SIMPLE / PyBUF_WRITABLE: unsigned bytes, one dimension.
            v.itemsize = 1;
            v.ndim = 1;
            v.shape = ptr::null_mut();
            v.strides = ptr::null_mut();
            v.format = ptr::null_mut();
        }
        v.internal = Box::into_raw(internal).cast();
        v.obj = obj.clone().into_ptr();
    }
    Ok(())
}

unsafe extern "C" fn getbuffer(
    exporter: *mut ffi::PyObject,
    view: *mut PyBufferRaw,
    flags: c_int,
) -> c_int {
    // Safety: CPython calls the slot with the GIL held and a live `exporter`.
    let py = unsafe { Python::assume_attached() };
    let obj = unsafe { Bound::from_borrowed_ptr(py, exporter) };
    match fill(&obj, view, flags) {
        Ok(()) => 0,
        Err(e) => {
            // Safety: the protocol asks for `view.obj` = NULL on failure.
            unsafe { (*view).obj = ptr::null_mut() };
            e.restore(py);
            -1
        }
    }
}

unsafe extern "C" fn releasebuffer(_exporter: *mut ffi::PyObject, view: *mut PyBufferRaw) {
    // Safety: `internal` was set by `getbuffer` from `Box::into_raw` and is released
    // once (CPython calls this once per successful getbuffer).
    unsafe {
        let internal = (*view).internal;
        if !internal.is_null() {
            drop(Box::from_raw(internal.cast::<Internal>()));
            (*view).internal = ptr::null_mut();
        }
    }
}

/// Creates `_devbuf._BufferExport`: no instance data, the two buffer slots, subclassable.
pub fn export_type(py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
    let mut slots = [
        ffi::PyType_Slot {
            slot: ffi::Py_bf_getbuffer,
            pfunc: getbuffer as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: ffi::Py_bf_releasebuffer,
            pfunc: releasebuffer as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: 0,
            pfunc: ptr::null_mut(),
        },
    ];
    let mut spec = ffi::PyType_Spec {
        name: c"devbuf._devbuf._BufferExport".as_ptr(),
        basicsize: 0, // no instance data: inherits object's size, so any solid base mixes in
        itemsize: 0,
        flags: (ffi::Py_TPFLAGS_DEFAULT | ffi::Py_TPFLAGS_BASETYPE) as _,
        slots: slots.as_mut_ptr(),
    };
    // Safety: `spec` and `slots` are valid for the call; CPython copies what it keeps.
    let t = unsafe { ffi::PyType_FromSpec(&mut spec) };
    // Safety: a new reference or NULL with an exception set.
    let t = unsafe { Bound::from_owned_ptr_or_err(py, t)? };
    Ok(t.cast_into::<PyType>()?)
}

/// A bytes-like argument, borrowed without a copy through the buffer protocol (bytes,
/// bytearray, memoryview, numpy arrays, our `HostBuffer`) while the guard lives.
pub struct BorrowedBytes {
    view: PyBufferRaw,
}

impl BorrowedBytes {
    /// Asks `obj` for a C-contiguous buffer.
    pub fn new(obj: &Bound<'_, PyAny>) -> PyResult<BorrowedBytes> {
        let mut view = PyBufferRaw::empty();
        // PyBUF_C_CONTIGUOUS | FORMAT-less: the bytes in C order.
        // Safety: `obj` is a live object, `view` a writable Py_buffer; the GIL is held.
        let rc = unsafe {
            PyObject_GetBuffer(obj.as_ptr(), &mut view, PYBUF_C_CONTIGUOUS & !PYBUF_FORMAT)
        };
        if rc != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        Ok(BorrowedBytes { view })
    }

    pub fn as_slice(&self) -> &[u8] {
        if self.view.len == 0 {
            return &[];
        }
        // Safety: a successful C-contiguous request gives `len` readable bytes at `buf`,
        // valid until `PyBuffer_Release` (our drop).
        unsafe { std::slice::from_raw_parts(self.view.buf.cast::<u8>(), self.view.len as usize) }
    }
}

impl Drop for BorrowedBytes {
    fn drop(&mut self) {
        // Safety: `view` came from a successful `PyObject_GetBuffer`; released once. The
        // GIL is held: guards live only inside methods called from Python.
        unsafe { PyBuffer_Release(&mut self.view) };
    }
}
