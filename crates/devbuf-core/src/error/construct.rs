//! Building errors and reading them: constructors, the kind, the source.

use super::*;

impl Error {
    /// Builds an [`Error::OutOfBounds`].
    #[doc(hidden)] // devbuf-zarr and devbuf-flight build errors with it; users build the variant
    pub fn out_of_bounds(what: &'static str, offset: usize, len: usize, size: usize) -> Self {
        Error::OutOfBounds {
            what,
            offset,
            len,
            size,
        }
    }

    /// Builds an [`Error::InvalidArgument`] from anything displayable.
    #[doc(hidden)] // devbuf-zarr and devbuf-flight build errors with it; users build the variant
    pub fn invalid(msg: impl fmt::Display) -> Self {
        Error::InvalidArgument(msg.to_string())
    }

    /// Builds an [`Error::NotFound`] (no source; add one with
    /// [`with_source`](Self::with_source)).
    #[doc(hidden)] // devbuf-zarr and devbuf-flight build errors with it; users build the variant
    pub fn not_found(msg: impl fmt::Display) -> Self {
        Error::NotFound {
            message: msg.to_string(),
            source: None,
        }
    }

    /// Builds an [`Error::PermissionDenied`] (no source).
    #[doc(hidden)] // devbuf-zarr and devbuf-flight build errors with it; users build the variant
    pub fn permission_denied(msg: impl fmt::Display) -> Self {
        Error::PermissionDenied {
            message: msg.to_string(),
            source: None,
        }
    }

    /// Builds an [`Error::Unsupported`] (no source).
    #[doc(hidden)] // devbuf-zarr and devbuf-flight build errors with it; users build the variant
    pub fn unsupported(msg: impl fmt::Display) -> Self {
        Error::Unsupported {
            message: msg.to_string(),
            source: None,
        }
    }

    /// Builds an [`Error::Timeout`] (no source).
    #[doc(hidden)] // devbuf-zarr and devbuf-flight build errors with it; users build the variant
    pub fn timeout(msg: impl fmt::Display) -> Self {
        Error::Timeout {
            message: msg.to_string(),
            source: None,
        }
    }

    /// Builds an [`Error::Io`] without a source (a failure devbuf found itself, such as
    /// a stream that ended early).
    #[doc(hidden)] // devbuf-zarr and devbuf-flight build errors with it; users build the variant
    pub fn io(op: &'static str, msg: impl fmt::Display) -> Self {
        Error::Io {
            op,
            message: msg.to_string(),
            source: None,
        }
    }

    /// Builds an [`Error::Cancelled`]: `msg` says what was cancelled.
    #[doc(hidden)] // devbuf-zarr and devbuf-flight build errors with it; users build the variant
    pub fn cancelled(msg: impl fmt::Display) -> Self {
        Error::Cancelled(msg.to_string())
    }

    /// Builds an [`Error::Arrow`] without a source.
    #[doc(hidden)] // devbuf-zarr and devbuf-flight build errors with it; users build the variant
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
    /// `io::Error` that wraps a devbuf [`Error`] gives that error back. `e` may be
    /// shared (`Arc<io::Error>`, as `zarrs`' storage errors hold theirs).
    pub fn from_io(
        op: &'static str,
        message: impl fmt::Display,
        e: impl Into<Arc<std::io::Error>>,
    ) -> Self {
        let e = e.into();
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
    /// source of another error); devbuf's crates reach it through `__private`.
    pub(crate) fn with_shared_source(mut self, new: ErrorSource) -> Self {
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

    /// The cause this error carries, shared (see [`ErrorSource`]); users call
    /// [`std::error::Error::source`].
    pub(crate) fn source_ref(&self) -> Option<&ErrorSource> {
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
            Error::Cancelled(_) => ErrorKind::Cancelled,
        }
    }

    /// Builds an [`Error::CudaUnavailable`].
    #[doc(hidden)] // devbuf-zarr and devbuf-flight build errors with it; users build the variant
    pub fn unavailable(reason: impl fmt::Display) -> Self {
        Error::CudaUnavailable {
            reason: reason.to_string(),
        }
    }

    /// The same error with `context` in front of its message (`"{context}: {message}"`),
    /// keeping its kind and source: wrapping an error's `Display` in a new error would
    /// repeat the kind's prefix (`"axis 0: invalid argument: ..."`). Errors without a
    /// free-form message (driver, out-of-memory, out-of-bounds, CUDA unavailable) are
    /// returned unchanged.
    pub fn context(mut self, context: impl fmt::Display) -> Error {
        if let Some(m) = self.message_mut() {
            *m = format!("{context}: {m}");
        }
        self
    }

    /// The free-form message of the variants that have one.
    fn message_mut(&mut self) -> Option<&mut String> {
        match self {
            Error::InvalidArgument(m)
            | Error::ReadOnly(m)
            | Error::Malformed(m)
            | Error::Cancelled(m)
            | Error::NotFound { message: m, .. }
            | Error::PermissionDenied { message: m, .. }
            | Error::Unsupported { message: m, .. }
            | Error::Timeout { message: m, .. }
            | Error::Io { message: m, .. }
            | Error::Arrow { message: m, .. } => Some(m),
            _ => None,
        }
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
        match self.clone().message_mut() {
            Some(m) => std::mem::take(m),
            None => self.to_string(),
        }
    }

    pub(super) fn display_end(offset: usize, len: usize) -> String {
        match offset.checked_add(len) {
            Some(end) => end.to_string(),
            None => "overflow".to_string(),
        }
    }
}
