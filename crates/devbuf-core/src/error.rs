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

/// `[a, b, c]` of a shape or index, with at most [`MAX_LISTED_AXES`] entries shown
/// (`[a, b, ..., z] (N axes)` beyond): messages about arrays of thousands of axes stay
/// short.
pub fn fmt_axes<T: fmt::Display>(v: &[T]) -> String {
    use fmt::Write;
    let mut s = String::from("[");
    let n = v.len();
    let shown: Vec<usize> = if n <= MAX_LISTED_AXES {
        (0..n).collect()
    } else {
        (0..MAX_LISTED_AXES - 1).chain([n - 1]).collect()
    };
    for (k, &i) in shown.iter().enumerate() {
        if k > 0 {
            s.push_str(", ");
        }
        if n > MAX_LISTED_AXES && k == MAX_LISTED_AXES - 1 {
            s.push_str("..., ");
        }
        let _ = write!(s, "{}", v[i]);
    }
    s.push(']');
    if n > MAX_LISTED_AXES {
        let _ = write!(s, " ({n} axes)");
    }
    s
}

/// Axes [`fmt_axes`] lists before eliding.
pub const MAX_LISTED_AXES: usize = 8;

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

    /// Builds an [`Error::NotFound`] (no source; add one with
    /// [`with_source`](Self::with_source)).
    pub fn not_found(msg: impl fmt::Display) -> Self {
        Error::NotFound {
            message: msg.to_string(),
            source: None,
        }
    }

    /// Builds an [`Error::PermissionDenied`] (no source).
    pub fn permission_denied(msg: impl fmt::Display) -> Self {
        Error::PermissionDenied {
            message: msg.to_string(),
            source: None,
        }
    }

    /// Builds an [`Error::Unsupported`] (no source).
    pub fn unsupported(msg: impl fmt::Display) -> Self {
        Error::Unsupported {
            message: msg.to_string(),
            source: None,
        }
    }

    /// Builds an [`Error::Timeout`] (no source).
    pub fn timeout(msg: impl fmt::Display) -> Self {
        Error::Timeout {
            message: msg.to_string(),
            source: None,
        }
    }

    /// Builds an [`Error::Io`] without a source (a failure devbuf found itself, such as
    /// a stream that ended early).
    pub fn io(op: &'static str, msg: impl fmt::Display) -> Self {
        Error::Io {
            op,
            message: msg.to_string(),
            source: None,
        }
    }

    /// Builds an [`Error::Arrow`] without a source.
    pub fn arrow(msg: impl fmt::Display) -> Self {
        Error::Arrow {
            message: msg.to_string(),
            source: None,
        }
    }

    /// The error for an `std::io::Error` that happened during `op` (e.g. `"opening a
    /// zarr array"`), with `message` saying what failed (usually `"{path}: {e}"`), and
    /// `e` as its source. Its kind follows `e.kind()`: `NotFound`, `PermissionDenied`,
    /// `TimedOut` ([`Error::Timeout`]) and `Unsupported` get their own
    /// variant, with `op` in front of the message; any other is [`Error::Io`]. An
    /// `io::Error` that wraps a devbuf [`Error`] gives that error back.
    pub fn from_io(op: &'static str, message: impl fmt::Display, e: std::io::Error) -> Self {
        if e.get_ref().is_some_and(|inner| inner.is::<Error>()) {
            let inner = e.into_inner().expect("checked: wraps an error");
            return *inner.downcast::<Error>().expect("checked: a devbuf error");
        }
        let kind = e.kind();
        Self::of_io_kind(op, message, kind, Arc::new(e))
    }

    /// [`from_io`](Self::from_io) for an `io::Error` that is shared (as `zarrs`' storage
    /// errors hold theirs); an `io::Error` that wraps a devbuf [`Error`] gives a clone of
    /// it.
    pub fn from_shared_io(
        op: &'static str,
        message: impl fmt::Display,
        e: Arc<std::io::Error>,
    ) -> Self {
        if let Some(ours) = e.get_ref().and_then(|inner| inner.downcast_ref::<Error>()) {
            return ours.clone();
        }
        let kind = e.kind();
        Self::of_io_kind(op, message, kind, e)
    }

    fn of_io_kind(
        op: &'static str,
        message: impl fmt::Display,
        kind: std::io::ErrorKind,
        source: ErrorSource,
    ) -> Self {
        use std::io::ErrorKind as K;
        let source = Some(source);
        let with_op = || format!("{op}: {message}");
        match kind {
            K::NotFound => Error::NotFound {
                message: with_op(),
                source,
            },
            K::PermissionDenied => Error::PermissionDenied {
                message: with_op(),
                source,
            },
            K::TimedOut => Error::Timeout {
                message: with_op(),
                source,
            },
            K::Unsupported => Error::Unsupported {
                message: with_op(),
                source,
            },
            _ => Error::Io {
                op,
                message: message.to_string(),
                source,
            },
        }
    }

    /// The same error with `source` as its [`source()`](std::error::Error::source).
    /// Variants that carry a source ([`NotFound`](Error::NotFound),
    /// [`PermissionDenied`](Error::PermissionDenied), [`Unsupported`](Error::Unsupported),
    /// [`Timeout`](Error::Timeout), [`Io`](Error::Io), [`Arrow`](Error::Arrow)) take it,
    /// replacing any they had; the others are returned unchanged (their message is the
    /// whole story: devbuf's verdict on an argument or on input).
    pub fn with_source(self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.with_shared_source(Arc::new(source))
    }

    /// [`with_source`](Self::with_source) for a cause that is already shared (e.g. the
    /// source of another error).
    pub fn with_shared_source(mut self, new: ErrorSource) -> Self {
        match &mut self {
            Error::NotFound { source, .. }
            | Error::PermissionDenied { source, .. }
            | Error::Unsupported { source, .. }
            | Error::Timeout { source, .. }
            | Error::Io { source, .. }
            | Error::Arrow { source, .. } => *source = Some(new),
            _ => {}
        }
        self
    }

    /// The cause this error carries, shared (see [`ErrorSource`]).
    pub fn source_ref(&self) -> Option<&ErrorSource> {
        match self {
            Error::NotFound { source, .. }
            | Error::PermissionDenied { source, .. }
            | Error::Unsupported { source, .. }
            | Error::Timeout { source, .. }
            | Error::Io { source, .. }
            | Error::Arrow { source, .. } => source.as_ref(),
            _ => None,
        }
    }

    /// What kind of failure this is; see [`ErrorKind`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::CudaUnavailable { .. } => ErrorKind::CudaUnavailable,
            Error::Driver { name, .. } if name == "CUDA_ERROR_OUT_OF_MEMORY" => {
                ErrorKind::OutOfMemory
            }
            Error::Driver { .. } => ErrorKind::Cuda,
            Error::OutOfMemory { .. } => ErrorKind::OutOfMemory,
            Error::OutOfBounds { .. } => ErrorKind::OutOfBounds,
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::ReadOnly(_) => ErrorKind::ReadOnly,
            Error::Malformed(_) => ErrorKind::Malformed,
            Error::NotFound { .. } => ErrorKind::NotFound,
            Error::PermissionDenied { .. } => ErrorKind::PermissionDenied,
            Error::Unsupported { .. } => ErrorKind::Unsupported,
            Error::Timeout { .. } => ErrorKind::Timeout,
            Error::Io { .. } => ErrorKind::Io,
            Error::Arrow { .. } => ErrorKind::Arrow,
        }
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

    /// The same error with `context` in front of its message (`"{context}: {message}"`),
    /// keeping its kind and source: wrapping an error's `Display` in a new error would
    /// repeat the kind's prefix (`"axis 0: invalid argument: ..."`). Errors without a
    /// free-form message (driver, out-of-memory, out-of-bounds, CUDA unavailable) are
    /// returned unchanged.
    pub fn context(mut self, context: impl fmt::Display) -> Error {
        match &mut self {
            Error::InvalidArgument(m)
            | Error::ReadOnly(m)
            | Error::Malformed(m)
            | Error::NotFound { message: m, .. }
            | Error::PermissionDenied { message: m, .. }
            | Error::Unsupported { message: m, .. }
            | Error::Timeout { message: m, .. }
            | Error::Io { message: m, .. }
            | Error::Arrow { message: m, .. } => *m = format!("{context}: {m}"),
            _ => {}
        }
        self
    }

    /// A driver error with `why` added to its description (CUDA's call, name and code
    /// kept); any other error unchanged. For a refusal that should still say what was
    /// asked for (a request larger than any address space, a limit of the OS).
    pub(crate) fn explain_driver(self, why: impl fmt::Display) -> Error {
        match self {
            Error::Driver {
                call,
                code,
                name,
                description,
            } => Error::Driver {
                call,
                code,
                name,
                description: format!("{description}; {why}"),
            },
            other => other,
        }
    }

    /// The message without the kind's prefix (the whole `Display` for errors without a
    /// free-form message): for wrapping an error's cause in an error of another kind.
    /// Messages already end with their cause's text, so this is the whole story.
    pub fn detail(&self) -> String {
        match self {
            Error::InvalidArgument(m)
            | Error::ReadOnly(m)
            | Error::Malformed(m)
            | Error::NotFound { message: m, .. }
            | Error::PermissionDenied { message: m, .. }
            | Error::Unsupported { message: m, .. }
            | Error::Timeout { message: m, .. }
            | Error::Io { message: m, .. }
            | Error::Arrow { message: m, .. } => m.clone(),
            e => e.to_string(),
        }
    }

    fn display_end(offset: usize, len: usize) -> String {
        match offset.checked_add(len) {
            Some(end) => end.to_string(),
            None => "overflow".to_string(),
        }
    }
}

/// An `std::io::Error` as [`Error::from_io`] maps it (kind from `e.kind()`, `e` as the
/// source), during an unnamed operation. Prefer [`Error::from_io`], which says what was
/// being done.
impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        let message = e.to_string();
        Error::from_io("an I/O operation", message, e)
    }
}

/// An `ArrowError` by its kind: `IoError` as [`Error::from_io`] maps its
/// `std::io::Error` (the source); `NotYetImplemented` is [`Error::Unsupported`];
/// `InvalidArgumentError` is [`Error::InvalidArgument`]; `ParseError` and `IpcError`
/// (unreadable Arrow IPC bytes) are [`Error::Malformed`]; an `ExternalError` that wraps a
/// devbuf [`Error`] gives that error back; any other is [`Error::Arrow`]. The variants
/// with a source keep the `ArrowError` (or the error it wrapped) as theirs; Arrow's
/// message is kept in every case.
impl From<arrow_schema::ArrowError> for Error {
    fn from(e: arrow_schema::ArrowError) -> Self {
        use arrow_schema::ArrowError as A;
        match e {
            A::ExternalError(inner) => match inner.downcast::<Error>() {
                Ok(ours) => *ours,
                Err(inner) => match inner.downcast::<std::io::Error>() {
                    Ok(io) => Error::from(*io),
                    Err(inner) => Error::Arrow {
                        message: inner.to_string(),
                        source: Some(Arc::from(inner)),
                    },
                },
            },
            A::IoError(message, io) => Error::from_io("an Arrow operation", message, io),
            A::NotYetImplemented(m) => Error::Unsupported {
                message: m.clone(),
                source: Some(Arc::new(A::NotYetImplemented(m))),
            },
            A::InvalidArgumentError(m) => Error::InvalidArgument(m),
            A::ParseError(m) | A::IpcError(m) => Error::Malformed(m),
            other => Error::Arrow {
                message: other.to_string(),
                source: Some(Arc::new(other)),
            },
        }
    }
}

/// A devbuf error for code that returns Arrow's errors: `ArrowError::ExternalError`
/// wrapping it, so `source()` reaches it (and `Error::from` gives it back unchanged).
impl From<Error> for arrow_schema::ArrowError {
    fn from(e: Error) -> Self {
        arrow_schema::ArrowError::ExternalError(Box::new(e))
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

/// The message of a caught panic (`&str` or `String` payloads; otherwise "unknown panic").
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
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

    #[test]
    fn long_messages_keep_their_ends_and_control_characters_are_escaped() {
        let long = format!("start {} end", "x".repeat(100_000));
        let shown = Error::invalid(&long).to_string();
        assert!(shown.len() < MAX_MESSAGE_CHARS + 100, "{}", shown.len());
        assert!(shown.starts_with("invalid argument: start xxx"), "{shown}");
        assert!(shown.ends_with("xxx end"), "{shown}");
        assert!(shown.contains("characters left out"), "{shown}");
        // Exactly at the bound: shown whole.
        let at = "y".repeat(MAX_MESSAGE_CHARS);
        assert_eq!(
            Error::Malformed(at.clone()).to_string(),
            format!("malformed input: {at}")
        );
        // Multi-byte characters are cut at character boundaries.
        let wide = "é".repeat(3 * MAX_MESSAGE_CHARS);
        assert!(Error::invalid(&wide).to_string().ends_with("éé"));
        let e = Error::io("reading", "a\nb\u{1b}[31m\0");
        assert_eq!(
            e.to_string(),
            "I/O error during reading: a\\nb\\u{1b}[31m\\u{0}"
        );
    }

    #[test]
    fn context_keeps_the_kind_and_does_not_repeat_the_prefix() {
        let e = Error::invalid("slice step must be positive").context("axis 0");
        assert_eq!(
            e.to_string(),
            "invalid argument: axis 0: slice step must be positive"
        );
        let e = Error::Malformed("bad".into()).context("zarr.json");
        assert_eq!(e, Error::Malformed("zarr.json: bad".into()));
        let e = Error::out_of_bounds("slice", 1, 2, 2).context("ignored");
        assert!(matches!(e, Error::OutOfBounds { .. }));
    }

    #[test]
    fn axes_lists_are_bounded() {
        assert_eq!(fmt_axes(&[1u64, 2, 3]), "[1, 2, 3]");
        assert_eq!(fmt_axes::<u64>(&[]), "[]");
        let many: Vec<u64> = (0..10_000).collect();
        assert_eq!(
            fmt_axes(&many),
            "[0, 1, 2, 3, 4, 5, 6, ..., 9999] (10000 axes)"
        );
        let eight: Vec<u64> = (0..8).collect();
        assert_eq!(fmt_axes(&eight), "[0, 1, 2, 3, 4, 5, 6, 7]");
    }

    #[test]
    fn io_errors_keep_their_kind_and_source() {
        use std::error::Error as _;
        use std::io;
        let cases = [
            (io::ErrorKind::NotFound, ErrorKind::NotFound),
            (io::ErrorKind::PermissionDenied, ErrorKind::PermissionDenied),
            (io::ErrorKind::TimedOut, ErrorKind::Timeout),
            (io::ErrorKind::Unsupported, ErrorKind::Unsupported),
            (io::ErrorKind::BrokenPipe, ErrorKind::Io),
        ];
        for (io_kind, kind) in cases {
            let e = Error::from(io::Error::new(io_kind, "boom"));
            assert_eq!(e.kind(), kind, "{io_kind:?}: {e:?}");
            assert!(e.to_string().contains("boom"), "{e}");
            let src = e.source().expect("a source");
            let io = src
                .downcast_ref::<io::Error>()
                .expect("the io::Error itself");
            assert_eq!(io.kind(), io_kind);
        }
        let e = Error::from_io(
            "opening a zarr array",
            "/nowhere: no such file",
            io::Error::from(io::ErrorKind::NotFound),
        );
        assert_eq!(
            e.to_string(),
            "not found: opening a zarr array: /nowhere: no such file"
        );
        // An io::Error that wraps a devbuf error gives it back.
        let ours = Error::out_of_bounds("x", 1, 2, 2);
        assert_eq!(Error::from(io::Error::other(ours.clone())), ours);
        // Clones share the source; equality ignores it.
        let c = e.clone();
        assert_eq!(c, e);
        assert!(c.source().is_some());
        assert_eq!(
            e,
            Error::not_found("opening a zarr array: /nowhere: no such file")
        );
    }

    #[test]
    fn arrow_errors_convert_both_ways() {
        use arrow_schema::ArrowError;
        use std::error::Error as _;
        let e = Error::from(ArrowError::NotYetImplemented("float8".into()));
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(e.source().unwrap().downcast_ref::<ArrowError>().is_some());
        let e = Error::from(ArrowError::InvalidArgumentError("bad column".into()));
        assert_eq!(e, Error::invalid("bad column"));
        assert_eq!(
            Error::from(ArrowError::ParseError("junk".into())).kind(),
            ErrorKind::Malformed
        );
        let e = Error::from(ArrowError::IoError(
            "gone".into(),
            std::io::Error::from(std::io::ErrorKind::NotFound),
        ));
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(
            e.source()
                .unwrap()
                .downcast_ref::<std::io::Error>()
                .is_some()
        );
        let e = Error::from(ArrowError::SchemaError("no field x".into()));
        assert_eq!(e.kind(), ErrorKind::Arrow);
        assert!(e.to_string().contains("no field x"), "{e}");
        assert!(e.source().unwrap().downcast_ref::<ArrowError>().is_some());

        // Into ArrowError and back: the same error, reachable through source().
        let ours = Error::not_found("key c/0").with_source(std::io::Error::other("404"));
        let arrow = ArrowError::from(ours.clone());
        let inner = arrow.source().expect("the devbuf error");
        assert_eq!(inner.downcast_ref::<Error>(), Some(&ours));
        assert!(inner.source().is_some(), "and its own source");
        let back = Error::from(arrow);
        assert_eq!(back, ours);
        assert_eq!(back.kind(), ErrorKind::NotFound);
        assert!(back.source().is_some());
    }

    #[test]
    fn sources_survive_context_and_only_some_variants_take_one() {
        use std::error::Error as _;
        let e = Error::io("reading", "x")
            .with_source(std::io::Error::other("cause"))
            .context("key c/0");
        assert_eq!(e.to_string(), "I/O error during reading: key c/0: x");
        assert_eq!(e.source().unwrap().to_string(), "cause");
        let e = Error::invalid("x").with_source(std::io::Error::other("cause"));
        assert!(e.source().is_none());
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        let oom = Error::Driver {
            call: "cuMemAlloc_v2",
            code: 2,
            name: "CUDA_ERROR_OUT_OF_MEMORY".into(),
            description: "out of memory".into(),
        };
        assert_eq!(oom.kind(), ErrorKind::OutOfMemory);
        assert_eq!(
            Error::unavailable("no driver").kind(),
            ErrorKind::CudaUnavailable
        );
    }
}
