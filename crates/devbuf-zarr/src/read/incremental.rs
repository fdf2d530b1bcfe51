//! Streamed decoding of large chunks: the decoder hands out a chunk's bytes in pieces
//! to a [`PieceSink`]. In host reads the pieces, of
//! [`ReadOptions::stream_piece_bytes`](super::ReadOptions::stream_piece_bytes), go straight to their
//! places in the output, instead of decoding the whole chunk into the worker's scratch
//! and copying it from there. A decoded chunk of several MiB does not fit a core's
//! cache, so the scratch copy read it back from memory; a piece does (measured on the
//! GPU machine, host reads into a reused buffer, before: 8.4 GB/s for 4 MiB zstd-1
//! chunks, 5.8-6.4 for 16 MiB ones and 23.4 for 4 MiB uncompressed ones, against 10
//! for 1 MiB zstd-1 chunks, whose scratch stays in the cache; figures with streaming in 512 KiB pieces). In device reads of uncompressed units larger than a slot the pieces are
//! page-locked slots on their way to the device (`pieces`).
//!
//! Host reads stream units of
//! [`ReadOptions::stream_min_bytes`](super::ReadOptions::stream_min_bytes) or more, read from a filesystem
//! store, uncompressed (without crc32c), or zstd, with one placement whose
//! contiguous runs are at least [`MIN_RUN`] bytes. Others (gzip and zlib, which libdeflate decodes whole; blosc; chains zarrs decodes;
//! object stores, units placed more than once, transposed chunks) keep the scratch
//! path.
//! The bounds are those of the whole-chunk decoders: a chunk decodes to exactly its
//! size or is an error naming it. The streaming zstd decoder's buffer is bounded by
//! the chunk (only a first frame that declares the chunk's size streams; frames after
//! it must decode to nothing and are checked without a window), and each worker's
//! decoder keeps that buffer for its next chunk.

use std::cell::RefCell;

use zstd::stream::raw::{DParameter, Decoder as ZstdDecoder, InBuffer, Operation, OutBuffer};

use super::chunk_file::OpenFile;
use super::codec::{self, Compression};
use super::plan::Placement;
use super::source::ZarrSource;
use devbuf_core::error::{Error, Result};

thread_local! {
    /// Each worker's streaming zstd decoder, reused across chunks.
    static ZSTD: RefCell<Option<ZstdDecoder<'static>>> = const { RefCell::new(None) };
}

/// One contiguous copy of a placement: source offset in the unit, destination offset
/// in the output, length (bytes).
pub(crate) type CopyRun = (usize, usize, usize);

/// Whether `src`'s units of this read are streamed, with units from `min` bytes on.
pub(crate) fn streams(src: &ZarrSource<'_>, min: usize) -> bool {
    src.cell_bytes >= min
        && src.has_files()
        && src.chain().is_some_and(|c| match c.compression {
            Compression::None => !c.crc32c,
            Compression::Zstd => true,
            // libdeflate decodes a whole gzip or zlib chunk into the scratch about twice
            // as fast as a streaming inflater decodes it in pieces, which more than pays
            // for the scratch copy.
            Compression::Gzip | Compression::Zlib | Compression::Blosc(_) | Compression::Lz4 => {
                false
            }
        })
}

/// Shortest contiguous run worth streaming: shorter runs (a transposed chunk, a narrow
/// column of a wide one) would make a list longer than the unit itself; such units go
/// through the scratch path.
const MIN_RUN: usize = 256;

/// The runs of placement `p` of a unit into an output of `out_len` bytes, sorted by
/// source offset, into `runs` (cleared first). `false` (and no runs) when the runs are
/// shorter than [`MIN_RUN`]: the unit is not streamed.
pub(crate) fn runs_of(
    src: &ZarrSource<'_>,
    p: &Placement,
    out_len: usize,
    runs: &mut Vec<CopyRun>,
) -> Result<bool> {
    runs.clear();
    let Some(plan) = super::place::unit_plan(src, p, out_len)? else {
        return Ok(true);
    };
    // The run `for_each_run` copies: the innermost axis when it is contiguous on both
    // sides, else one unit.
    let unit = plan.unit as i64;
    let run = match plan.axes().split_last() {
        Some((last, _)) if last.s == unit && last.d == unit => last.n as usize * plan.unit,
        _ => plan.unit,
    };
    if run < MIN_RUN.min(src.cell_bytes) {
        return Ok(false);
    }
    devbuf_core::__private::host_ops::for_each_run(&plan, |s, d, n| runs.push((s, d, n)));
    runs.sort_unstable_by_key(|r| r.0);
    Ok(true)
}

/// Copies the piece of unit bytes starting at `offset` to where `runs` (sorted, from
/// [`runs_of`]) place them, through `put(destination offset, bytes)`. `next`: the first
/// run that may still overlap this piece or a later one (pieces come in order).
pub(crate) fn scatter(
    runs: &[CopyRun],
    next: &mut usize,
    offset: usize,
    piece: &[u8],
    put: &mut dyn FnMut(usize, &[u8]),
) {
    let end = offset + piece.len();
    while let Some(&(s, d, n)) = runs.get(*next) {
        if s >= end {
            return;
        }
        let lo = s.max(offset);
        let hi = (s + n).min(end);
        if lo < hi {
            put(d + (lo - s), &piece[lo - offset..hi - offset]);
        }
        if s + n > end {
            return; // the run goes on in the next piece
        }
        *next += 1;
    }
}

/// Where a streamed unit's pieces go: a host read's piece buffer and its scatter into
/// the output, or a device read's page-locked slots and their DMAs.
pub(crate) trait PieceSink {
    /// The buffer the next piece is decoded into: the same one until [`put`](Self::put)
    /// is called, the next one may be another; never empty, its length a multiple of
    /// 64 bytes (whole elements of every type).
    fn buf(&mut self) -> Result<&mut [u8]>;

    /// The buffer's first `len` bytes are the unit's bytes from `offset` (native
    /// order): take them.
    fn put(&mut self, offset: usize, len: usize) -> Result<()>;
}

/// A [`PieceSink`] over one buffer: `put(offset, bytes)` gets each piece.
pub(crate) struct Scatter<'a, F: FnMut(usize, &[u8])> {
    /// The piece buffer (a multiple of 64 bytes).
    pub piece: &'a mut [u8],
    /// Takes each piece: its offset in the unit and its bytes.
    pub put: F,
}

impl<F: FnMut(usize, &[u8])> PieceSink for Scatter<'_, F> {
    fn buf(&mut self) -> Result<&mut [u8]> {
        Ok(self.piece)
    }

    fn put(&mut self, offset: usize, len: usize) -> Result<()> {
        (self.put)(offset, &self.piece[..len]);
        Ok(())
    }
}

/// Decodes unit `cell` of `src` (see [`streams`]) in pieces: `sink` gets every piece
/// in order, in native order (swapped when the chain says so), all of them together
/// exactly `src.cell_bytes`. `last` is the worker's open file (see
/// `ZarrSource::decode_in`). Returns whether the unit was stored (a missing one is the fill
/// value), or `None`, before any piece went out, for a zstd frame that does not declare
/// its size (a streaming decoder would hold a window as large as the frame asks for;
/// the whole-chunk decoder needs none): decode that unit whole.
pub(crate) fn decode(
    src: &ZarrSource<'_>,
    cell: &[u64],
    last: &mut Option<OpenFile>,
    sink: &mut dyn PieceSink,
) -> Result<Option<bool>> {
    let chain = src
        .chain()
        .ok_or_else(|| Error::invalid("streamed decode of a chain zarrs decodes"))?;
    let n = src.cell_bytes;
    let what = || src.describe(cell);
    let mut out = Pieces {
        filled: 0,
        done: 0,
        n,
        swap: chain.swap,
        sink,
    };
    let Some((offset, len)) = src.open_stored_with(cell, last)? else {
        while out.done < n {
            let buf = out.sink.buf()?;
            let k = (n - out.done).min(buf.len());
            src.fill_into(&mut buf[..k]);
            out.sink.put(out.done, k)?;
            out.done += k;
        }
        return Ok(Some(false));
    };
    let file = last
        .as_ref()
        .ok_or_else(|| Error::invalid("read engine: no open file for a stored unit"))?;
    let io = |e: std::io::Error| src.io_err(&what(), e);
    if chain.compression == Compression::None {
        if len != n as u64 {
            return Err(Error::Malformed(format!(
                "{}: uncompressed chunk of {len} bytes, the chunk holds exactly {n} bytes",
                what()
            )));
        }
        while out.done < n {
            let buf = out.sink.buf()?;
            let k = (n - out.done).min(buf.len());
            super::chunk_file::read_exact_at(file, &mut buf[..k], offset + out.done as u64)
                .map_err(io)?;
            out.filled = k;
            out.emit()?;
        }
        return Ok(Some(true));
    }
    let stored = usize::try_from(len)
        .ok()
        .filter(|&s| s <= isize::MAX as usize)
        .ok_or_else(|| Error::invalid(format!("{}: a {len}-byte chunk file", what())))?;
    super::chunk_file::with_stored_bytes(file, offset, stored, &what, &io, |buf| {
        let body = if chain.crc32c {
            codec::strip_crc32c(buf, &what)?
        } else {
            buf
        };
        match chain.compression {
            Compression::Zstd => {
                if codec::zstd_declared_size(body, n, &what)?.is_none() {
                    return Ok(None);
                }
                zstd_pieces(body, &mut out, &what)?;
            }
            _ => {
                return Err(Error::invalid(
                    "streamed decode of a codec that does not stream",
                ));
            }
        }
        Ok(Some(true))
    })
}

/// A unit's decoded bytes on their way to the sink: `piece[..filled]` not handed out
/// yet, `done` bytes handed out, `n` in all.
struct Pieces<'a> {
    filled: usize,
    done: usize,
    n: usize,
    swap: Option<usize>,
    sink: &'a mut dyn PieceSink,
}

impl Pieces<'_> {
    /// The sink's buffer from the first byte not filled yet, at most up to the unit's
    /// end (empty when the buffer is full).
    fn room(&mut self) -> Result<&mut [u8]> {
        let left = self.n - self.done - self.filled;
        let buf = self.sink.buf()?;
        if buf.is_empty() {
            // Nothing could ever be decoded into it (and nothing emitted from it).
            return Err(Error::invalid("streamed decode: an empty piece buffer"));
        }
        let start = self.filled.min(buf.len());
        let end = buf.len().min(start + left);
        Ok(&mut buf[start..end])
    }

    /// Hands out the filled part of the buffer (whole elements: the buffer is full, or
    /// the unit's last).
    fn emit(&mut self) -> Result<()> {
        if self.filled == 0 {
            return Ok(());
        }
        if let Some(w) = self.swap {
            let buf = self.sink.buf()?;
            devbuf_core::__private::host_ops::swap_in_place(&mut buf[..self.filled], w);
        }
        self.sink.put(self.done, self.filled)?;
        self.done += self.filled;
        self.filled = 0;
        Ok(())
    }

    fn too_long(&self, codec: &str, what: &dyn Fn() -> String) -> Error {
        Error::Malformed(format!(
            "{}: {codec} chunk decodes to more than {} bytes, the chunk holds exactly {} bytes",
            what(),
            self.n,
            self.n
        ))
    }

    fn too_short(&self, codec: &str, what: &dyn Fn() -> String) -> Error {
        Error::Malformed(format!(
            "{}: {codec} chunk decodes to {} bytes, the chunk holds exactly {} bytes",
            what(),
            self.done + self.filled,
            self.n
        ))
    }
}

/// zstd frame(s) `body`, the first declaring exactly `out.n` bytes -> pieces, exactly
/// `out.n` bytes.
fn zstd_pieces(body: &[u8], out: &mut Pieces<'_>, what: &dyn Fn() -> String) -> Result<()> {
    let n = out.n;
    let err = |e: std::io::Error| codec::zstd_error(what, n, e);
    codec::with_zstd(&ZSTD, ZstdDecoder::new, |d| {
        d.reinit().map_err(err)?;
        // Any window the format allows: the frame declares its size, and the decoder's
        // buffer is the smaller of the window and that size (the chunk's).
        d.set_parameter(DParameter::WindowLogMax(31)).map_err(err)?;
        // The first frame streams (it declares the chunk's size, so the decoder's buffer
        // is at most that); whatever follows it must decode to nothing, checked by the
        // whole-chunk decoder, which holds no window (a later frame may ask for one of
        // up to 2 GiB).
        let first = zstd::zstd_safe::find_frame_compressed_size(body)
            .map_err(|c| err(std::io::Error::other(zstd::zstd_safe::get_error_name(c))))?
            .min(body.len());
        let (frame, rest) = body.split_at(first);
        let mut input = InBuffer::around(frame);
        let mut hint = 1;
        while input.pos() < frame.len() || hint != 0 {
            if out.done + out.filled == out.n {
                // Everything expected is out: the rest of the input must decode to
                // nothing (the end of the frame, empty or skippable frames).
                let mut spare = [0u8; 1];
                let mut o = OutBuffer::around(&mut spare[..]);
                let before = input.pos();
                hint = d.run(&mut input, &mut o).map_err(err)?;
                if o.pos() > 0 {
                    return Err(out.too_long("zstd", what));
                }
                if input.pos() == before && hint != 0 {
                    return Err(out.too_short("zstd", what)); // truncated frame
                }
                continue;
            }
            let before = input.pos();
            let room = out.room()?;
            if room.is_empty() {
                out.emit()?;
                continue;
            }
            let mut o = OutBuffer::around(room);
            hint = d.run(&mut input, &mut o).map_err(err)?;
            let got = o.pos();
            out.filled += got;
            if got == 0 && input.pos() == before && hint != 0 {
                // No progress with input left or a frame unfinished: truncated.
                return Err(out.too_short("zstd", what));
            }
        }
        out.emit()?;
        if out.done != out.n {
            return Err(out.too_short("zstd", what));
        }
        if !rest.is_empty() {
            match zstd::bulk::decompress_to_buffer(rest, &mut [0u8; 0][..]) {
                Ok(0) => {}
                Ok(_) | Err(_) => return Err(out.too_long("zstd", what)),
            }
        }
        Ok(())
    })
}
