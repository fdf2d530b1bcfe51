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
/// use devbuf_core::Error;
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
    #[error("invalid argument: {}", Clean(.0))]
    InvalidArgument(String),

    /// A write was attempted through a read-only buffer.
    #[error("buffer is read-only: {}", Clean(.0))]
    ReadOnly(String),

    /// Input bytes (e.g. a serialized handle or message, or a zarr metadata document)
    /// could not be parsed or describe something impossible.
    #[error("malformed input: {}", Clean(.0))]
    Malformed(String),

    /// An I/O error from the operating system.
    #[error("I/O error during {op}: {}", Clean(.message))]
    Io {
        /// What was being done.
        op: &'static str,
        /// The operating system's message.
        message: String,
    },

    /// An Arrow error.
    #[error("Arrow error: {}", Clean(.0))]
    Arrow(String),
}

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
    /// keeping its kind: wrapping an error's `Display` in a new error would repeat the
    /// kind's prefix (`"axis 0: invalid argument: ..."`). Errors without a free-form
    /// message (driver, out-of-memory, out-of-bounds, CUDA unavailable) are returned
    /// unchanged.
    pub fn context(self, context: impl fmt::Display) -> Error {
        match self {
            Error::InvalidArgument(m) => Error::InvalidArgument(format!("{context}: {m}")),
            Error::ReadOnly(m) => Error::ReadOnly(format!("{context}: {m}")),
            Error::Malformed(m) => Error::Malformed(format!("{context}: {m}")),
            Error::Arrow(m) => Error::Arrow(format!("{context}: {m}")),
            Error::Io { op, message } => Error::Io {
                op,
                message: format!("{context}: {message}"),
            },
            e => e,
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
    pub fn detail(&self) -> String {
        match self {
            Error::InvalidArgument(m)
            | Error::ReadOnly(m)
            | Error::Malformed(m)
            | Error::Arrow(m) => m.clone(),
            Error::Io { message, .. } => message.clone(),
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
        let e = Error::Io {
            op: "reading",
            message: "a\nb\u{1b}[31m\0".to_string(),
        };
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
}
