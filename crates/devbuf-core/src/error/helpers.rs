//! Message helpers that devbuf-zarr and devbuf-flight share with this crate: reached
//! through `devbuf_core::__private`, not API.

use std::fmt;

use super::{Error, ErrorSource};

/// `[a, b, c]` of a shape or index, with at most `MAX_LISTED_AXES` (8) entries shown
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
pub(crate) const MAX_LISTED_AXES: usize = 8;

/// The message of a caught panic (`&str` or `String` payloads; otherwise "unknown panic").
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// `e` with the shared cause `source` ([`Error::with_source`] for a cause that is
/// already an [`ErrorSource`], e.g. another error's), for devbuf's own crates.
pub fn with_shared_source(e: Error, source: ErrorSource) -> Error {
    e.with_shared_source(source)
}
