//! devbuf errors as gRPC statuses (server side) and gRPC statuses as devbuf errors
//! (client side).

use std::path::Path;

use tonic::{Code, Status};

use super::root::Refusal;
use devbuf_core::error::{Error, ErrorKind};

/// The status for an error met while serving a request. Paths under the server's
/// `root` are shown relative to it (`<root>/...`): clients learn nothing of the
/// server's file system layout.
pub(crate) fn to_status(e: &Error, root: Option<&Path>) -> Status {
    let msg = hide_root(&message(e), root);
    match e.kind() {
        ErrorKind::InvalidArgument | ErrorKind::OutOfBounds => Status::invalid_argument(msg),
        ErrorKind::NotFound => Status::not_found(msg),
        ErrorKind::PermissionDenied => Status::permission_denied(msg),
        ErrorKind::Unsupported => Status::unimplemented(msg),
        ErrorKind::Timeout => Status::deadline_exceeded(msg),
        ErrorKind::OutOfMemory => Status::resource_exhausted(msg),
        ErrorKind::CudaUnavailable => Status::unavailable(msg),
        ErrorKind::Cancelled => Status::cancelled(msg),
        _ => Status::internal(msg),
    }
}

/// The status for a path the root refused.
pub(crate) fn refusal_status(r: Refusal, root: Option<&Path>) -> Status {
    match r {
        Refusal::Invalid(e) => Status::invalid_argument(hide_root(&message(&e), root)),
        Refusal::Missing(m) => Status::not_found(hide_root(&m, root)),
        Refusal::Escapes(m) => Status::permission_denied(hide_root(&m, root)),
        Refusal::Io(m) => Status::internal(hide_root(&m, root)),
    }
}

/// An error's message for a status: without the kind's prefix where the status code
/// already says it (`invalid argument: ...` is `InvalidArgument`).
pub(crate) fn message(e: &Error) -> String {
    match e.kind() {
        ErrorKind::InvalidArgument
        | ErrorKind::NotFound
        | ErrorKind::PermissionDenied
        | ErrorKind::Unsupported
        | ErrorKind::Timeout
        | ErrorKind::Cancelled => e.detail(),
        _ => e.to_string(),
    }
}

fn hide_root(msg: &str, root: Option<&Path>) -> String {
    match root.and_then(|r| r.to_str()).filter(|r| r.len() > 1) {
        Some(r) => msg.replace(r, "<root>"),
        None => msg.to_string(),
    }
}

/// The name gRPC gives a status code (`Unauthenticated`, `NotFound`, ...).
pub(crate) fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "Ok",
        Code::Cancelled => "Cancelled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

/// A status a server answered with, as a devbuf error of the status's kind, with the
/// status as its source: `NOT_FOUND` is [`Error::NotFound`], `PERMISSION_DENIED` and
/// `UNAUTHENTICATED` [`Error::PermissionDenied`], `DEADLINE_EXCEEDED`
/// [`Error::Timeout`], `UNIMPLEMENTED` [`Error::Unsupported`], `CANCELLED`
/// [`Error::Cancelled`] (their messages start with
/// `op`), any other [`Error::Io`]. The message names the status code
/// (`"Unauthenticated: invalid bearer token"`).
pub(crate) fn from_status(op: &'static str, s: Status) -> Error {
    let message = format!("{}: {}", code_name(s.code()), s.message());
    let e = match s.code() {
        Code::NotFound => Error::not_found(format!("{op}: {message}")),
        Code::PermissionDenied | Code::Unauthenticated => {
            Error::permission_denied(format!("{op}: {message}"))
        }
        Code::DeadlineExceeded => Error::timeout(format!("{op}: {message}")),
        Code::Unimplemented => Error::unsupported(format!("{op}: {message}")),
        Code::Cancelled => Error::cancelled(format!("{op}: {message}")),
        _ => Error::io(op, message),
    };
    e.with_source(s)
}
