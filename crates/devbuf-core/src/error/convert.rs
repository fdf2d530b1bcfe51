//! Conversions from and into the errors of std and arrow-rs.

use super::*;

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
