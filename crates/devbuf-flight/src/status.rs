//! devbuf errors as gRPC statuses (server side) and gRPC statuses as devbuf errors
//! (client side).

use std::path::Path;

use tonic::{Code, Status};

use super::root::Refusal;
use devbuf_core::error::Error;

/// The status for an error met while serving a request. Paths under the server's
/// `root` are shown relative to it (`<root>/...`): clients learn nothing of the
/// server's file system layout.
pub(crate) fn to_status(e: &Error, root: Option<&Path>) -> Status {
    let msg = hide_root(&message(e), root);
    match e {
        Error::InvalidArgument(_) | Error::OutOfBounds { .. } => Status::invalid_argument(msg),
        Error::OutOfMemory { .. } => Status::resource_exhausted(msg),
        Error::CudaUnavailable { .. } => Status::unavailable(msg),
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
    match e {
        Error::InvalidArgument(m) => m.clone(),
        e => e.to_string(),
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

/// A status a server answered with, as a devbuf error: [`Error::Io`] whose message
/// starts with the status code's name (`"Unauthenticated: invalid bearer token"`), so
/// callers can tell a refusal from a broken connection.
pub(crate) fn from_status(op: &'static str, s: &Status) -> Error {
    Error::Io {
        op,
        message: format!("{}: {}", code_name(s.code()), s.message()),
    }
}
