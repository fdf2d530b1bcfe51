//! Device memory as a file: [`DeviceBufferReader`] (`Read + Seek`, plus zero-copy
//! [`read_buffer`](DeviceBufferReader::read_buffer)) and [`DeviceBufferWriter`]
//! (`Write + Seek` through a page-locked staging buffer).
//!
//! Errors of the `std::io` traits are `std::io::Error`s that wrap a [`crate::Error`]
//! (get it back with `get_ref()` and `downcast_ref`).

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::ops::DerefMut;

use super::buffer::DeviceBuffer;
use super::host::HostBuffer;
use crate::error::{Error, Result};

/// The default staging size of a [`DeviceBufferWriter`]: 1 MiB.
pub const DEFAULT_STAGING: usize = 1 << 20;

fn io_err(kind: io::ErrorKind, e: Error) -> io::Error {
    io::Error::new(kind, e)
}

/// The [`Error`] an `io::Error` of this module wraps (any other becomes an error of
/// its kind with the `io::Error` as source, see [`Error::from_io`]).
fn from_io(e: io::Error) -> Error {
    let text = e.to_string();
    Error::from_io("flushing a DeviceBufferWriter", text, e)
}

/// The position a `seek` lands on in a stream of `len` bytes, or an error for a
/// position before the start or (when `allow_past_end` is false) after the end.
fn seek_target(pos: u64, len: u64, to: SeekFrom, allow_past_end: bool) -> io::Result<u64> {
    let (base, delta) = match to {
        SeekFrom::Start(p) => (p as i128, 0i128),
        SeekFrom::End(d) => (len as i128, d as i128),
        SeekFrom::Current(d) => (pos as i128, d as i128),
    };
    let target = base + delta;
    if target < 0 {
        return Err(io_err(
            io::ErrorKind::InvalidInput,
            Error::invalid(format!(
                "seek to {to:?} lands at {target}, before the start of the {len}-byte device buffer"
            )),
        ));
    }
    if !allow_past_end && target > len as i128 {
        return Err(io_err(
            io::ErrorKind::InvalidInput,
            Error::invalid(format!(
                "seek to {to:?} lands at {target}, past the end of the {len}-byte device buffer (valid: 0..={len})"
            )),
        ));
    }
    u64::try_from(target).map_err(|_| {
        io_err(
            io::ErrorKind::InvalidInput,
            Error::invalid(format!("seek to {to:?} overflows")),
        )
    })
}

/// Reads a [`DeviceBuffer`] like a file.
///
/// Each `read` is one device-to-host copy; wrap the reader in a `std::io::BufReader`
/// for many small reads. [`read_buffer`](Self::read_buffer) returns the next bytes as
/// a zero-copy slice of the device buffer instead. Seeking past the end is allowed
/// (reads there return 0 bytes), as for files.
///
/// ```no_run
/// use std::io::{Read, Seek, SeekFrom};
/// use devbuf_core::cuda::{Context, DeviceBuffer, DeviceBufferReader};
/// let ctx = Context::new(0)?;
/// let buf = DeviceBuffer::from_slice(&ctx, b"header:payload")?;
/// let mut r = DeviceBufferReader::new(buf.clone());
/// let mut head = [0u8; 7];
/// r.read_exact(&mut head)?;
/// assert_eq!(&head, b"header:");
/// let payload = r.read_buffer(100)?; // the rest, zero-copy
/// assert_eq!(payload.address(), buf.address() + 7);
/// r.seek(SeekFrom::Start(0))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct DeviceBufferReader {
    buf: DeviceBuffer,
    pos: u64,
}

impl DeviceBufferReader {
    /// A reader at position 0 of `buf`.
    pub fn new(buf: DeviceBuffer) -> Self {
        DeviceBufferReader { buf, pos: 0 }
    }

    /// The current position.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Bytes from the position to the end (0 past the end).
    fn remaining(&self) -> usize {
        (self.buf.len() as u64).saturating_sub(self.pos) as usize
    }

    /// The buffer being read.
    pub fn buffer(&self) -> &DeviceBuffer {
        &self.buf
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> DeviceBuffer {
        self.buf
    }

    /// The next `min(n, remaining)` bytes as a zero-copy slice of the buffer (empty at
    /// or past the end), and advances past them.
    pub fn read_buffer(&mut self, n: usize) -> Result<DeviceBuffer> {
        let n = n.min(self.remaining());
        // After a seek past the end the position lies beyond the buffer: read nothing
        // there, as `read` does (the empty slice sits at the end).
        let start = self.pos.min(self.buf.len() as u64) as usize;
        let s = self.buf.slice(start, n)?;
        self.pos += n as u64;
        Ok(s)
    }
}

impl Read for DeviceBufferReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = out.len().min(self.remaining());
        if n == 0 {
            return Ok(0);
        }
        self.buf
            .copy_to_host(self.pos as usize, &mut out[..n])
            .map_err(|e| io_err(io::ErrorKind::Other, e))?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for DeviceBufferReader {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        self.pos = seek_target(self.pos, self.buf.len() as u64, to, true)?;
        Ok(self.pos)
    }
}

/// Where a [`Staged`] writer's bytes go.
trait StagedSink {
    fn len(&self) -> usize;
    fn write_at(&mut self, pos: usize, data: &[u8]) -> Result<()>;
}

impl StagedSink for DeviceBuffer {
    fn len(&self) -> usize {
        DeviceBuffer::len(self)
    }
    fn write_at(&mut self, pos: usize, data: &[u8]) -> Result<()> {
        self.copy_from_host(pos, data)
    }
}

/// The writer logic, generic over where bytes go and the staging memory (so that it is
/// tested on the host too).
struct Staged<T: StagedSink, S: DerefMut<Target = [u8]>> {
    target: T,
    staging: S,
    /// Bytes held in `staging`.
    staged: usize,
    /// Position in the sink of `staging[0]` (when `staged > 0`, `start + staged == pos`).
    start: usize,
    pos: usize,
}

impl<T: StagedSink, S: DerefMut<Target = [u8]>> Staged<T, S> {
    fn new(target: T, staging: S) -> Self {
        Staged {
            target,
            staging,
            staged: 0,
            start: 0,
            pos: 0,
        }
    }

    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let len = self.target.len();
        match self.pos.checked_add(data.len()) {
            Some(end) if end <= len => {}
            _ => {
                return Err(io_err(
                    io::ErrorKind::WriteZero,
                    Error::invalid(format!(
                        "write of {} bytes at position {} would pass the end of the {len}-byte \
                         device buffer (valid: position + length <= {len}); nothing was written",
                        data.len(),
                        self.pos
                    )),
                ));
            }
        }
        if data.is_empty() {
            return Ok(0);
        }
        let cap = self.staging.len();
        if data.len() >= cap {
            self.flush_staging()?;
            self.target
                .write_at(self.pos, data)
                .map_err(|e| io_err(io::ErrorKind::Other, e))?;
        } else {
            if self.staged + data.len() > cap {
                self.flush_staging()?;
            }
            if self.staged == 0 {
                self.start = self.pos;
            }
            self.staging[self.staged..self.staged + data.len()].copy_from_slice(data);
            self.staged += data.len();
        }
        self.pos += data.len();
        Ok(data.len())
    }

    fn flush_staging(&mut self) -> io::Result<()> {
        if self.staged > 0 {
            self.target
                .write_at(self.start, &self.staging[..self.staged])
                .map_err(|e| io_err(io::ErrorKind::Other, e))?;
            self.staged = 0;
        }
        Ok(())
    }

    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = seek_target(self.pos as u64, self.target.len() as u64, to, false)?;
        self.flush_staging()?;
        self.pos = target as usize;
        Ok(target)
    }
}

/// Writes into a [`DeviceBuffer`] like a file, through a page-locked staging buffer.
///
/// Small writes are gathered in page-locked host memory and copied to the device in
/// one transfer when the staging buffer is full, on [`flush`](Write::flush), on
/// [`seek`](Seek::seek), on [`into_inner`](Self::into_inner) and on drop (errors on
/// drop cannot be reported: call `flush` to see them). Writes at least as large as the
/// staging buffer go to the device directly.
///
/// The buffer's size is fixed: a write that would pass its end is an error and writes
/// nothing (no partial write, no truncation); seeking past the end is an error too.
///
/// ```no_run
/// use std::io::{Seek, SeekFrom, Write};
/// use devbuf_core::cuda::{Context, DeviceBufferWriter};
/// let ctx = Context::new(0)?;
/// let buf = ctx.allocate(1 << 20)?;
/// let mut w = DeviceBufferWriter::new(buf.clone())?;
/// for i in 0..4096u32 {
///     w.write_all(&[i as u8; 256])?; // 256-byte writes, staged
/// }
/// w.seek(SeekFrom::Start(0))?; // flushes
/// assert!(w.write_all(&[0u8; 2 << 20]).is_err()); // past the end: nothing written
/// let buf = w.into_inner()?;
/// assert_eq!(buf.slice(256, 1)?.to_host()?[0], 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct DeviceBufferWriter {
    inner: Staged<DeviceBuffer, HostBuffer>,
}

impl DeviceBufferWriter {
    /// A writer at position 0 of `buf`, with a staging buffer of
    /// `DEFAULT_STAGING` (1 MiB) bytes (or the buffer's size, when smaller).
    pub fn new(buf: DeviceBuffer) -> Result<Self> {
        let n = DEFAULT_STAGING.min(buf.len());
        Self::with_capacity(buf, n)
    }

    /// A writer whose staging buffer holds `staging` bytes of page-locked memory; 0
    /// writes every piece to the device directly. `buf` must be writable.
    pub fn with_capacity(buf: DeviceBuffer, staging: usize) -> Result<Self> {
        if !buf.is_mutable() {
            return Err(Error::ReadOnly(format!(
                "DeviceBufferWriter over a read-only device buffer of {} bytes",
                buf.len()
            )));
        }
        let staging = buf.context().allocate_host(staging)?;
        Ok(DeviceBufferWriter {
            inner: Staged::new(buf, staging),
        })
    }

    /// The current position.
    pub fn position(&self) -> u64 {
        self.inner.pos as u64
    }

    /// Bytes written but not yet copied to the device.
    pub fn buffered(&self) -> usize {
        self.inner.staged
    }

    /// The buffer being written (bytes still staged are not in it yet).
    pub fn buffer(&self) -> &DeviceBuffer {
        &self.inner.target
    }

    /// Flushes and gives the buffer back. A failed flush is the error of the copy
    /// that failed (e.g. [`Error::Driver`]).
    pub fn into_inner(mut self) -> Result<DeviceBuffer> {
        self.inner.flush_staging().map_err(from_io)?;
        Ok(self.inner.target.clone())
    }
}

impl Write for DeviceBufferWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.inner.write(data)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush_staging()
    }
}

impl Seek for DeviceBufferWriter {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        self.inner.seek(to)
    }
}

impl Drop for DeviceBufferWriter {
    fn drop(&mut self) {
        let _ = self.inner.flush_staging();
    }
}

impl std::fmt::Debug for DeviceBufferWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBufferWriter")
            .field("buffer", &self.inner.target)
            .field("position", &self.inner.pos)
            .field("capacity", &self.inner.staging.len())
            .field("buffered", &self.inner.staged)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host target that records every transfer.
    struct VecTarget {
        data: Vec<u8>,
        transfers: Vec<(usize, usize)>,
    }

    impl StagedSink for VecTarget {
        fn len(&self) -> usize {
            self.data.len()
        }
        fn write_at(&mut self, pos: usize, d: &[u8]) -> Result<()> {
            self.data[pos..pos + d.len()].copy_from_slice(d);
            self.transfers.push((pos, d.len()));
            Ok(())
        }
    }

    fn writer(len: usize, cap: usize) -> Staged<VecTarget, Vec<u8>> {
        Staged::new(
            VecTarget {
                data: vec![0; len],
                transfers: vec![],
            },
            vec![0; cap],
        )
    }

    #[test]
    fn small_writes_are_gathered_into_few_transfers() {
        let mut w = writer(4096, 1024);
        let mut expect = vec![0u8; 4096];
        for i in 0..16usize {
            let piece = vec![i as u8 + 1; 256];
            assert_eq!(w.write(&piece).unwrap(), 256);
            expect[i * 256..(i + 1) * 256].copy_from_slice(&piece);
        }
        w.flush_staging().unwrap();
        assert_eq!(w.target.data, expect);
        assert_eq!(
            w.target.transfers,
            vec![(0, 1024), (1024, 1024), (2048, 1024), (3072, 1024)]
        );
    }

    #[test]
    fn big_writes_go_direct_after_flushing() {
        let mut w = writer(5000, 100);
        w.write(&[1; 10]).unwrap();
        w.write(&[2; 300]).unwrap();
        w.write(&[3; 5]).unwrap();
        w.flush_staging().unwrap();
        assert_eq!(w.target.transfers, vec![(0, 10), (10, 300), (310, 5)]);
        assert_eq!(
            &w.target.data[..316],
            &[&[1u8; 10][..], &[2; 300], &[3; 5], &[0]].concat()[..]
        );
    }

    #[test]
    fn unbuffered_when_capacity_is_zero() {
        let mut w = writer(10, 0);
        w.write(&[1, 2]).unwrap();
        w.write(&[3]).unwrap();
        assert_eq!(w.target.transfers, vec![(0, 2), (2, 1)]);
    }

    #[test]
    fn past_the_end_writes_nothing() {
        let mut w = writer(10, 4);
        w.write(&[9; 8]).unwrap();
        let e = w.write(&[7; 3]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WriteZero);
        let msg = e.to_string();
        assert!(
            msg.contains("3 bytes at position 8") && msg.contains("10-byte"),
            "{msg}"
        );
        assert_eq!(w.pos, 8);
        w.flush_staging().unwrap();
        assert_eq!(&w.target.data[8..], &[0, 0]);
        // Exactly to the end is fine; then even one byte is too much.
        w.write(&[5; 2]).unwrap();
        assert!(w.write(&[1]).is_err());
        assert_eq!(w.write(&[]).unwrap(), 0);
    }

    #[test]
    fn seek_flushes_and_rewrites() {
        let mut w = writer(16, 8);
        w.write(&[1; 4]).unwrap();
        assert_eq!(w.seek(SeekFrom::Start(2)).unwrap(), 2);
        assert_eq!(w.target.transfers, vec![(0, 4)]);
        w.write(&[2; 4]).unwrap();
        assert_eq!(w.seek(SeekFrom::Current(-1)).unwrap(), 5);
        w.write(&[3]).unwrap();
        assert_eq!(w.seek(SeekFrom::End(0)).unwrap(), 16);
        assert!(w.seek(SeekFrom::End(1)).is_err());
        assert!(w.seek(SeekFrom::Current(-17)).is_err());
        assert!(w.seek(SeekFrom::Start(u64::MAX)).is_err());
        w.flush_staging().unwrap();
        assert_eq!(&w.target.data[..7], &[1, 1, 2, 2, 2, 3, 0]);
    }

    #[test]
    fn io_errors_give_back_the_devbuf_error() {
        let e = Error::out_of_bounds("x", 1, 2, 3);
        assert_eq!(from_io(io_err(io::ErrorKind::Other, e.clone())), e);
        let other = from_io(io::Error::other("disk on fire"));
        assert!(matches!(&other, Error::Io { message, .. } if message == "disk on fire"));
        let src = std::error::Error::source(&other).expect("the io::Error is the source");
        assert!(src.downcast_ref::<io::Error>().is_some());
    }

    #[test]
    fn seek_targets() {
        assert_eq!(seek_target(5, 10, SeekFrom::Current(3), false).unwrap(), 8);
        assert_eq!(seek_target(5, 10, SeekFrom::End(5), true).unwrap(), 15);
        assert!(seek_target(5, 10, SeekFrom::End(5), false).is_err());
        assert!(seek_target(0, 10, SeekFrom::Current(i64::MIN), true).is_err());
        assert_eq!(
            seek_target(u64::MAX, u64::MAX, SeekFrom::Current(0), true).unwrap(),
            u64::MAX
        );
    }
}
