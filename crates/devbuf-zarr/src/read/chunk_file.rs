//! A stored chunk (or shard) file as the engine's workers read it: the file kept open
//! across units, exact reads of it, each worker's buffer for stored bytes, and the
//! choice between reading a unit's bytes into that buffer and decoding them from a
//! mapping of the file (`mapped`).

use std::cell::RefCell;
use std::fs::File;
use std::os::unix::fs::FileExt;

use devbuf_core::error::{Error, Result};

thread_local! {
    /// Each worker's buffer for stored bytes, reused across chunks and reads.
    static STORED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on the calling worker's buffer for stored bytes, `n` bytes long (grown as
/// needed; an error naming the chunk when `n` bytes cannot be had).
pub(crate) fn with_stored_buf<T>(
    n: usize,
    what: &dyn Fn() -> String,
    f: impl FnOnce(&mut [u8]) -> Result<T>,
) -> Result<T> {
    STORED.with(|cell_buf| {
        let mut buf = cell_buf.borrow_mut();
        if buf.len() < n {
            let more = n - buf.len();
            buf.try_reserve(more).map_err(|_| {
                Error::invalid(format!(
                    "{}: cannot allocate {n} bytes to read the chunk file",
                    what()
                ))
            })?;
            buf.resize(n, 0);
        }
        f(&mut buf[..n])
    })
}

/// Runs `f` on the `len` stored bytes at `offset` of `open`'s file: a mapping of them
/// from [`MAP_MIN_BYTES`](super::mapped::MAP_MIN_BYTES) on (see `mapped`), else the
/// worker's buffer filled by one read (also where the file cannot be mapped). A file
/// that shrinks while its mapping is read is an error (`io`, naming the unit with
/// `what`), whatever `f` returned.
pub(crate) fn with_stored_bytes<T>(
    open: &OpenFile,
    offset: u64,
    len: usize,
    what: &dyn Fn() -> String,
    io: &dyn Fn(std::io::Error) -> Error,
    f: impl FnOnce(&[u8]) -> Result<T>,
) -> Result<T> {
    use super::mapped::{MAP_MIN_BYTES, Mapped};
    if len >= MAP_MIN_BYTES {
        let timed = tracing::enabled!(tracing::Level::DEBUG).then(std::time::Instant::now);
        match Mapped::new(&open.file, offset, len) {
            Ok(m) => {
                if let Some(t) = timed {
                    tracing::debug!(
                        path = %open.path.display(),
                        offset,
                        bytes = len,
                        us = t.elapsed().as_micros() as u64,
                        "map chunk file"
                    );
                }
                return match m.read(f) {
                    Ok(r) => r,
                    Err(_) => Err(io(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!(
                            "{} shrank while it was read: a page of its mapping could \
                             not be read (another process truncated or rewrote it in \
                             place, or the device failed to deliver it); read it again \
                             once it is whole",
                            open.path.display()
                        ),
                    ))),
                };
            }
            Err(e) => {
                tracing::debug!(path = %open.path.display(), error = %e, "chunk file not mapped, read");
            }
        }
    }
    with_stored_buf(len, what, |buf| {
        read_exact_at(open, buf, offset).map_err(io)?;
        f(buf)
    })
}

/// A stored file kept open across units (see
/// [`ZarrSource::open_stored_with`](super::source::ZarrSource::open_stored_with)).
pub(crate) struct OpenFile {
    /// Its path, for errors and events.
    pub path: std::path::PathBuf,
    /// The open file.
    pub file: File,
    /// Its length when it was opened.
    pub len: u64,
}

/// Reads exactly `buf.len()` bytes at `offset` of an open chunk (shard) file (a file
/// that is shorter is an error); a `debug` event per read (path, offset, bytes, time)
/// when a subscriber wants it.
pub(crate) fn read_exact_at(open: &OpenFile, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    let timed = tracing::enabled!(tracing::Level::DEBUG).then(std::time::Instant::now);
    let r = open.file.read_exact_at(buf, offset);
    if let Some(t) = timed {
        tracing::debug!(
            path = %open.path.display(),
            offset,
            bytes = buf.len(),
            us = t.elapsed().as_micros() as u64,
            ok = r.is_ok(),
            "read chunk file"
        );
    }
    r
}
