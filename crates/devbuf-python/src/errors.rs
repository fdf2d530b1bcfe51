//! devbuf's error kinds as Python exceptions (docs/python.md, "Errors").
//!
//! The message is the Rust error's `Display` text, which ends with its cause's text.

use devbuf::{Error, ErrorKind};
use pyo3::create_exception;
use pyo3::exceptions::{
    PyFileNotFoundError, PyIndexError, PyMemoryError, PyNotImplementedError, PyOSError,
    PyPermissionError, PyRuntimeError, PyTimeoutError, PyValueError,
};
use pyo3::prelude::*;

create_exception!(
    devbuf,
    CudaUnavailableError,
    PyRuntimeError,
    "CUDA cannot be used on this machine (no driver, no device); the message says why."
);
create_exception!(
    devbuf,
    CudaError,
    PyRuntimeError,
    "A CUDA driver call failed; the message names the call and CUDA's error."
);
create_exception!(
    devbuf,
    InvalidArgumentError,
    PyValueError,
    "An argument was out of its valid range or inconsistent (devbuf's InvalidArgument)."
);
create_exception!(
    devbuf,
    MalformedError,
    PyValueError,
    "Stored data or metadata is corrupt or not what it claims to be (devbuf's Malformed)."
);
create_exception!(
    devbuf,
    UnsupportedError,
    PyNotImplementedError,
    "Valid data that devbuf does not read (a codec or data type; devbuf's Unsupported)."
);
create_exception!(
    devbuf,
    OutOfBoundsError,
    PyIndexError,
    "An offset or length past the end of a buffer (devbuf's OutOfBounds)."
);
create_exception!(
    devbuf,
    ReadOnlyError,
    PyValueError,
    "A write into read-only memory (devbuf's ReadOnly)."
);
create_exception!(
    devbuf,
    ArrowError,
    PyValueError,
    "Arrow data that devbuf cannot use (devbuf's Arrow)."
);
create_exception!(
    devbuf,
    CancelledError,
    PyRuntimeError,
    "The operation was cancelled (devbuf's Cancelled)."
);

/// The Python exception for a devbuf error: the kind picks the class, the message is
/// the error's text.
pub fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match e.kind() {
        ErrorKind::NotFound => PyFileNotFoundError::new_err(msg),
        ErrorKind::PermissionDenied => PyPermissionError::new_err(msg),
        ErrorKind::Unsupported => UnsupportedError::new_err(msg),
        ErrorKind::InvalidArgument => InvalidArgumentError::new_err(msg),
        ErrorKind::Malformed => MalformedError::new_err(msg),
        ErrorKind::OutOfBounds => OutOfBoundsError::new_err(msg),
        ErrorKind::ReadOnly => ReadOnlyError::new_err(msg),
        ErrorKind::OutOfMemory => PyMemoryError::new_err(msg),
        ErrorKind::Timeout => PyTimeoutError::new_err(msg),
        ErrorKind::CudaUnavailable => CudaUnavailableError::new_err(msg),
        ErrorKind::Cuda => CudaError::new_err(msg),
        ErrorKind::Io => PyOSError::new_err(msg),
        ErrorKind::Arrow => ArrowError::new_err(msg),
        ErrorKind::Cancelled => CancelledError::new_err(msg),
        // `ErrorKind` is non-exhaustive: a kind added later is still an error.
        #[allow(unreachable_patterns)]
        _ => PyRuntimeError::new_err(msg),
    }
}

/// `Result<T, devbuf::Error>` -> `PyResult<T>`.
pub trait IntoPy<T> {
    /// Converts the error with [`to_py`].
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for devbuf::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// Adds the exception classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add(
        "CudaUnavailableError",
        py.get_type::<CudaUnavailableError>(),
    )?;
    m.add("CudaError", py.get_type::<CudaError>())?;
    m.add(
        "InvalidArgumentError",
        py.get_type::<InvalidArgumentError>(),
    )?;
    m.add("MalformedError", py.get_type::<MalformedError>())?;
    m.add("UnsupportedError", py.get_type::<UnsupportedError>())?;
    m.add("OutOfBoundsError", py.get_type::<OutOfBoundsError>())?;
    m.add("ReadOnlyError", py.get_type::<ReadOnlyError>())?;
    m.add("ArrowError", py.get_type::<ArrowError>())?;
    m.add("CancelledError", py.get_type::<CancelledError>())?;
    Ok(())
}
