//! The crate's one error type.
//!
//! Every fallible operation in devbuf returns [`Result<T>`]. Errors carry enough
//! context to act on: the driver call that failed and CUDA's name for the error,
//! the offending offset/length and the valid size, or the reason CUDA is not usable
//! on this machine.

use std::fmt;

/// The result type of every fallible devbuf operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in devbuf.
///
/// ```
/// use devbuf::Error;
/// let e = Error::out_of_bounds("slice", 10, 8, 12);
/// assert_eq!(
///     e.to_string(),
///     "slice out of bounds: offset 10 + length 8 = 18 exceeds the size 12 (valid: offset + length <= 12)"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// CUDA cannot be used on this machine: no driver library, no device, or a driver
    /// that is too old. `reason` says which.
    #[error("CUDA is unavailable: {reason}")]
    CudaUnavailable {
        /// Why CUDA cannot be used.
        reason: String,
    },

    /// A CUDA driver call returned an error.
    #[error("CUDA driver call {call} failed: {name} ({code}): {description}")]
    Driver {
        /// The driver API function that failed, e.g. `cuMemAlloc_v2`.
        call: &'static str,
        /// The numeric `CUresult`.
        code: u32,
        /// CUDA's name for the error, e.g. `CUDA_ERROR_OUT_OF_MEMORY`.
        name: String,
        /// CUDA's description of the error.
        description: String,
    },

    /// A device allocation failed because the device has too little free memory.
    #[error(
        "out of device memory on device {device}: requested {requested} bytes, {free} bytes free of {total}"
    )]
    OutOfMemory {
        /// Device ordinal.
        device: usize,
        /// Bytes requested.
        requested: usize,
        /// Bytes free on the device when the allocation failed.
        free: usize,
        /// Total bytes of the device.
        total: usize,
    },

    /// An `offset + len` range does not fit in a buffer of `size` bytes (or overflows).
    #[error(
        "{what} out of bounds: offset {offset} + length {len} = {end} exceeds the size {size} (valid: offset + length <= {size})",
        end = Self::display_end(*.offset, *.len)
    )]
    OutOfBounds {
        /// What was being accessed (e.g. `"slice"`, `"copy_to_host"`).
        what: &'static str,
        /// The requested start.
        offset: usize,
        /// The requested length.
        len: usize,
        /// The size of the buffer the range must fit in.
        size: usize,
    },

    /// An argument is invalid; the message says which and what is allowed.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A write was attempted through a read-only buffer.
    #[error("buffer is read-only: {0}")]
    ReadOnly(String),

    /// Input bytes (e.g. a serialized handle or message) could not be parsed.
    #[error("malformed input: {0}")]
    Malformed(String),

    /// An I/O error from the operating system.
    #[error("I/O error during {op}: {message}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The operating system's message.
        message: String,
    },

    /// An Arrow error.
    #[error("Arrow error: {0}")]
    Arrow(String),
}

impl Error {
    /// Builds an [`Error::OutOfBounds`].
    pub fn out_of_bounds(what: &'static str, offset: usize, len: usize, size: usize) -> Self {
        Error::OutOfBounds {
            what,
            offset,
            len,
            size,
        }
    }

    /// Builds an [`Error::InvalidArgument`] from anything displayable.
    pub fn invalid(msg: impl fmt::Display) -> Self {
        Error::InvalidArgument(msg.to_string())
    }

    /// Builds an [`Error::CudaUnavailable`].
    pub fn unavailable(reason: impl fmt::Display) -> Self {
        Error::CudaUnavailable {
            reason: reason.to_string(),
        }
    }

    /// True when this error means CUDA is not usable here (as opposed to a failed call).
    pub fn is_cuda_unavailable(&self) -> bool {
        matches!(self, Error::CudaUnavailable { .. })
    }

    /// The CUDA error name when this is a driver error (`CUDA_ERROR_...`).
    pub fn cuda_error_name(&self) -> Option<&str> {
        match self {
            Error::Driver { name, .. } => Some(name),
            _ => None,
        }
    }

    fn display_end(offset: usize, len: usize) -> String {
        match offset.checked_add(len) {
            Some(end) => end.to_string(),
            None => "overflow".to_string(),
        }
    }
}

impl From<arrow_schema::ArrowError> for Error {
    fn from(e: arrow_schema::ArrowError) -> Self {
        Error::Arrow(e.to_string())
    }
}

/// Checks that `offset..offset+len` lies within `0..size`, without overflow.
///
/// Returns the end of the range.
pub(crate) fn check_range(
    what: &'static str,
    offset: usize,
    len: usize,
    size: usize,
) -> Result<usize> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(end),
        _ => Err(Error::out_of_bounds(what, offset, len, size)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_checks() {
        assert_eq!(check_range("x", 0, 0, 0), Ok(0));
        assert_eq!(check_range("x", 3, 4, 7), Ok(7));
        assert!(check_range("x", 3, 5, 7).is_err());
        assert!(check_range("x", 8, 0, 7).is_err());
        let e = check_range("x", usize::MAX, 2, 7).unwrap_err();
        assert!(e.to_string().contains("overflow"), "{e}");
    }
}
