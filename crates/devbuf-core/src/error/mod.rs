//! The crate's one error type.
//!
//! Every fallible operation in devbuf returns [`Result<T>`]. Errors carry enough
//! context to act on: the driver call that failed and CUDA's name for the error,
//! the offending offset/length and the valid size, or the reason CUDA is not usable
//! on this machine.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

/// The result type of every fallible devbuf operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The cause an error carries, shared so that [`Error`] stays `Clone`: the
/// `std::io::Error`, `ArrowError`, object-store error or gRPC status that an
/// operation failed with. [`std::error::Error::source`] returns the cause itself, so
/// `e.source().and_then(|s| s.downcast_ref::<std::io::Error>())` finds it.
pub type ErrorSource = Arc<dyn StdError + Send + Sync + 'static>;

/// Everything that can go wrong in devbuf.
///
/// To act on an error, match on its [`kind`](Error::kind) (a small `Copy` enum that
/// stays the same when a message changes); the variants carry the details. Errors
/// caused by another library's or the operating system's error (an `std::io::Error`,
/// an `ArrowError`, an object store's error, a gRPC status) keep it as
/// [`source()`](std::error::Error::source); messages still say what it said.
///
/// ```
/// use devbuf_core::Error;
/// let e = Error::out_of_bounds("slice", 10, 8, 12);
/// assert_eq!(
///     e.to_string(),
///     "slice out of bounds: offset 10 + length 8 = 18 exceeds the size 12 (valid: offset + length <= 12)"
/// );
/// ```
///
/// Two errors compare equal when they are the same variant with the same message and
/// fields; their sources are not compared.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// CUDA cannot be used on this machine: no driver library, no device, or a driver
    /// that is too old. `reason` says which.
    CudaUnavailable {
        /// Why CUDA cannot be used.
        reason: String,
    },

    /// A CUDA driver call returned an error.
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
    InvalidArgument(String),

    /// A write was attempted through a read-only buffer.
    ReadOnly(String),

    /// Input bytes (e.g. a serialized handle or message, or a zarr metadata document)
    /// could not be parsed or describe something impossible. Input that is well formed
    /// but uses something devbuf cannot handle (a codec, a data type) is
    /// [`Error::Unsupported`] instead.
    Malformed(String),

    /// What was asked for does not exist: a file or directory, an object-store key or
    /// bucket, a Flight endpoint (gRPC `NOT_FOUND`).
    NotFound {
        /// What was looked for, and where.
        message: String,
        /// The cause (e.g. the `std::io::Error` or the object store's error).
        source: Option<ErrorSource>,
    },

    /// Access was refused: file permissions, or a server that rejected the credentials
    /// (HTTP 401/403, gRPC `PERMISSION_DENIED`/`UNAUTHENTICATED`).
    PermissionDenied {
        /// What was refused.
        message: String,
        /// The cause.
        source: Option<ErrorSource>,
    },

    /// Well-formed input that uses something devbuf does not support (a codec, a data
    /// type, a zarr extension, an Arrow feature, a gRPC method the server lacks).
    Unsupported {
        /// What is not supported, and where it was found.
        message: String,
        /// The cause, when another library reported it.
        source: Option<ErrorSource>,
    },

    /// An operation ran out of time (a socket, an HTTP request, a gRPC deadline, an
    /// idle stream).
    Timeout {
        /// What timed out, and the limit.
        message: String,
        /// The cause.
        source: Option<ErrorSource>,
    },

    /// An I/O error: from the operating system, an object store or the network.
    Io {
        /// What was being done.
        op: &'static str,
        /// The failure, usually ending with the cause's message.
        message: String,
        /// The cause (an `std::io::Error`, an object store's error, a gRPC status).
        source: Option<ErrorSource>,
    },

    /// The operation was cancelled by its caller (a zarr read's `Cancel` token, a
    /// cancelled gRPC call) before it finished; what it had produced was freed.
    /// The message says what was cancelled and how far it had got.
    ///
    /// ```
    /// use devbuf_core::{Error, ErrorKind};
    /// let e = Error::Cancelled("read of a.zarr after 3 of 8 chunks".into());
    /// assert_eq!(e.kind(), ErrorKind::Cancelled);
    /// assert_eq!(e.to_string(), "cancelled: read of a.zarr after 3 of 8 chunks");
    /// ```
    Cancelled(String),

    /// An Arrow error that is none of the kinds above.
    Arrow {
        /// Arrow's message (with devbuf's context in front).
        message: String,
        /// The `ArrowError` (or the error it wrapped).
        source: Option<ErrorSource>,
    },
}

/// What kind of failure an [`Error`] is: what a program matches on to decide what to
/// do (retry, ask for credentials, fall back to the host, report bad input).
///
/// ```
/// use devbuf_core::{Error, ErrorKind};
/// # fn open(_: &str) -> devbuf_core::Result<()> { Err(Error::not_found("/data/a.zarr")) }
/// match open("/data/a.zarr") {
///     Ok(()) => {}
///     Err(e) => match e.kind() {
///         ErrorKind::NotFound => println!("no such array: {e}"),
///         ErrorKind::PermissionDenied => println!("check the credentials: {e}"),
///         ErrorKind::Unsupported => println!("this array needs a newer devbuf: {e}"),
///         ErrorKind::Timeout | ErrorKind::Io => println!("try again later: {e}"),
///         _ => println!("{e}"),
///     },
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// [`Error::NotFound`].
    NotFound,
    /// [`Error::PermissionDenied`].
    PermissionDenied,
    /// [`Error::Unsupported`].
    Unsupported,
    /// [`Error::InvalidArgument`].
    InvalidArgument,
    /// [`Error::Malformed`].
    Malformed,
    /// [`Error::OutOfBounds`].
    OutOfBounds,
    /// [`Error::ReadOnly`].
    ReadOnly,
    /// [`Error::OutOfMemory`], or a driver call that failed with
    /// `CUDA_ERROR_OUT_OF_MEMORY`.
    OutOfMemory,
    /// [`Error::Timeout`].
    Timeout,
    /// [`Error::CudaUnavailable`]: CUDA cannot be used on this machine.
    CudaUnavailable,
    /// [`Error::Driver`]: a CUDA driver call failed.
    Cuda,
    /// [`Error::Io`].
    Io,
    /// [`Error::Arrow`].
    Arrow,
    /// [`Error::Cancelled`]: the caller cancelled the operation.
    Cancelled,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::CudaUnavailable { reason } => write!(f, "CUDA is unavailable: {reason}"),
            Error::Driver {
                call,
                code,
                name,
                description,
            } => write!(
                f,
                "CUDA driver call {call} failed: {name} ({code}): {description}"
            ),
            Error::OutOfMemory {
                device,
                requested,
                free,
                total,
            } => write!(
                f,
                "out of device memory on device {device}: requested {requested} bytes, {free} bytes free of {total}"
            ),
            Error::OutOfBounds {
                what,
                offset,
                len,
                size,
            } => write!(
                f,
                "{what} out of bounds: offset {offset} + length {len} = {end} exceeds the size {size} (valid: offset + length <= {size})",
                end = Self::display_end(*offset, *len)
            ),
            Error::InvalidArgument(m) => write!(f, "invalid argument: {}", Clean(m)),
            Error::ReadOnly(m) => write!(f, "buffer is read-only: {}", Clean(m)),
            Error::Malformed(m) => write!(f, "malformed input: {}", Clean(m)),
            Error::NotFound { message, .. } => write!(f, "not found: {}", Clean(message)),
            Error::PermissionDenied { message, .. } => {
                write!(f, "permission denied: {}", Clean(message))
            }
            Error::Unsupported { message, .. } => write!(f, "unsupported: {}", Clean(message)),
            Error::Timeout { message, .. } => write!(f, "timed out: {}", Clean(message)),
            Error::Io { op, message, .. } => {
                write!(f, "I/O error during {op}: {}", Clean(message))
            }
            Error::Arrow { message, .. } => write!(f, "Arrow error: {}", Clean(message)),
            Error::Cancelled(m) => write!(f, "cancelled: {}", Clean(m)),
        }
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source_ref().map(|s| &**s as &(dyn StdError + 'static))
    }
}

impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        use Error::*;
        match (self, other) {
            (CudaUnavailable { reason: a }, CudaUnavailable { reason: b }) => a == b,
            (
                Driver {
                    call: a0,
                    code: a1,
                    name: a2,
                    description: a3,
                },
                Driver {
                    call: b0,
                    code: b1,
                    name: b2,
                    description: b3,
                },
            ) => a0 == b0 && a1 == b1 && a2 == b2 && a3 == b3,
            (
                OutOfMemory {
                    device: a0,
                    requested: a1,
                    free: a2,
                    total: a3,
                },
                OutOfMemory {
                    device: b0,
                    requested: b1,
                    free: b2,
                    total: b3,
                },
            ) => a0 == b0 && a1 == b1 && a2 == b2 && a3 == b3,
            (
                OutOfBounds {
                    what: a0,
                    offset: a1,
                    len: a2,
                    size: a3,
                },
                OutOfBounds {
                    what: b0,
                    offset: b1,
                    len: b2,
                    size: b3,
                },
            ) => a0 == b0 && a1 == b1 && a2 == b2 && a3 == b3,
            (InvalidArgument(a), InvalidArgument(b))
            | (ReadOnly(a), ReadOnly(b))
            | (Malformed(a), Malformed(b))
            | (Cancelled(a), Cancelled(b))
            | (NotFound { message: a, .. }, NotFound { message: b, .. })
            | (PermissionDenied { message: a, .. }, PermissionDenied { message: b, .. })
            | (Unsupported { message: a, .. }, Unsupported { message: b, .. })
            | (Timeout { message: a, .. }, Timeout { message: b, .. })
            | (Arrow { message: a, .. }, Arrow { message: b, .. }) => a == b,
            (
                Io {
                    op: a0,
                    message: a1,
                    ..
                },
                Io {
                    op: b0,
                    message: b1,
                    ..
                },
            ) => a0 == b0 && a1 == b1,
            _ => false,
        }
    }
}

impl Eq for Error {}

/// The most characters of a message an error displays: longer messages (a shape of
/// thousands of axes, a dependency's error quoting a whole document) keep their start
/// and their end, with the number of characters left out in between.
pub const MAX_MESSAGE_CHARS: usize = 2048;

/// A message as errors display it: control characters escaped (a file name or a
/// dependency's message cannot move the cursor or start a new line), at most
/// [`MAX_MESSAGE_CHARS`] characters.
struct Clean<'a>(&'a str);

impl fmt::Display for Clean<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const TAIL: usize = MAX_MESSAGE_CHARS / 4;
        let n = self.0.chars().count();
        let write = |f: &mut fmt::Formatter<'_>, s: &str| -> fmt::Result {
            for c in s.chars() {
                if c.is_control() {
                    write!(f, "{}", c.escape_default())?;
                } else {
                    fmt::Write::write_char(f, c)?;
                }
            }
            Ok(())
        };
        if n <= MAX_MESSAGE_CHARS {
            return write(f, self.0);
        }
        let head_end = self
            .0
            .char_indices()
            .nth(MAX_MESSAGE_CHARS - TAIL)
            .map_or(self.0.len(), |(i, _)| i);
        let tail_start = self
            .0
            .char_indices()
            .nth(n - TAIL)
            .map_or(self.0.len(), |(i, _)| i);
        write(f, &self.0[..head_end])?;
        write!(
            f,
            " [... {} characters left out ...] ",
            n - (MAX_MESSAGE_CHARS - TAIL) - TAIL
        )?;
        write(f, &self.0[tail_start..])
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

mod construct;
mod convert;
pub(crate) mod helpers;
#[cfg(test)]
mod tests;
