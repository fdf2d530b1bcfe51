//! The host half of a GPU decode claim: the stored bytes of a run of units read into a
//! page-locked slot by a few reader threads, each unit in its own region of the slot,
//! checked there (crc32c, the gzip member's header and size, the zstd frame's declared
//! size and completeness) before nvCOMP sees them. A unit nvCOMP should not be given
//! is decoded on the host by the same reader, into its region, and put in stored byte
//! order (the claim's byte swap on the device covers every unit).

use std::ops::Range;

use super::blosc::{self, BloscUnit};
use super::chunk_file::OpenFile;
use super::codec::{self, Chain, Compression};
use super::plan::Unit;
use super::source::{Stored, ZarrSource};
use devbuf_core::error::{Error, Result};

/// Room for the stored bytes of one unit of `cell_bytes` decoded bytes: what zstd and
/// deflate need at worst for incompressible data, plus headers (and at least the
/// decoded size, since a unit decoded on the host is decoded into its region).
pub(crate) fn stored_room(cell_bytes: usize) -> usize {
    (cell_bytes + cell_bytes / 64 + 4096).next_multiple_of(16)
}

/// What became of one unit of a claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum UnitOutcome {
    /// Not stored: the fill value.
    Missing,
    /// Decoded on the host into the first `cell_bytes` of its region, in stored byte
    /// order (its stored bytes did not fit the region, or are not for nvCOMP, e.g. a
    /// zstd frame without a declared size or with a content checksum).
    Host,
    /// nvCOMP decodes this range of the slot.
    Gpu(Range<usize>),
    /// A blosc container in this range of the slot, whose streams nvCOMP decodes (and
    /// whose verbatim streams are copied) into the unit's shuffled bytes.
    Blosc(Range<usize>, Box<BloscUnit>),
}

/// What nvCOMP is given of one unit's stored bytes (ranges from the start of the
/// bytes checked).
pub(crate) enum Input {
    /// One compressed stream.
    Stream(Range<usize>),
    /// A blosc container (the range holds it all).
    Blosc(Range<usize>, Box<BloscUnit>),
}

impl UnitOutcome {
    /// Bytes of the slot this unit's region uses from `at` on.
    fn end(&self, at: usize, cell_bytes: usize) -> usize {
        match self {
            UnitOutcome::Missing => 0,
            UnitOutcome::Host => at + cell_bytes,
            UnitOutcome::Gpu(r) | UnitOutcome::Blosc(r, _) => r.end,
        }
    }
}

/// The byte ranges of a slot the device needs for units `(j, outcome)` (in order of
/// `j`; unit `j`'s region starts at `j * room`): each unit's stored bytes, or its
/// `cell_bytes` decoded on the host; ranges less than 64 KiB apart are merged (one DMA
/// each).
pub(crate) fn upload_ranges<'a>(
    units: impl IntoIterator<Item = (usize, &'a UnitOutcome)>,
    room: usize,
    cell_bytes: usize,
) -> Vec<Range<usize>> {
    const GAP: usize = 64 << 10;
    let mut out: Vec<Range<usize>> = Vec::new();
    for (j, g) in units {
        let r = match g {
            UnitOutcome::Missing => continue,
            UnitOutcome::Host => j * room..j * room + cell_bytes,
            UnitOutcome::Gpu(r) | UnitOutcome::Blosc(r, _) => r.clone(),
        };
        match out.last_mut() {
            Some(last) if r.start <= last.end + GAP => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// Reads and checks the stored bytes of `units` into `slot` (unit `j` at `j * room`,
/// `room` = [`stored_room`]) with up to `readers` threads. Returns what became of each
/// unit and how many bytes of the slot hold data (what must go to the device). An
/// error names the unit's chunk. `upload`: called by the reading thread with the
/// slot ranges the device needs ([`upload_ranges`]) of each group of units right after
/// the group is read, while its bytes are still in the caches; the slot's bytes it
/// was given are not written again.
pub(crate) fn read_claim(
    src: &ZarrSource<'_>,
    chain: &Chain,
    units: &[Unit],
    slot: &mut [u8],
    readers: usize,
    upload: &(dyn Fn(Range<usize>) -> Result<()> + Sync),
) -> Result<(Vec<UnitOutcome>, usize)> {
    let room = stored_room(src.cell_bytes);
    if slot.len() < units.len() * room {
        return Err(Error::invalid(format!(
            "GPU claim of {} units: a slot of {} bytes holds only {}",
            units.len(),
            slot.len(),
            slot.len() / room
        )));
    }
    let regions: Vec<&mut [u8]> = slot.chunks_mut(room).take(units.len()).collect();
    let mut jobs: Vec<(usize, &Unit, &mut [u8])> = regions
        .into_iter()
        .zip(units)
        .enumerate()
        .map(|(j, (r, u))| (j, u, r))
        .collect();
    let groups = readers.clamp(1, jobs.len().max(1));
    // Four groups per reader, taken by whichever reader is free: a slow file holds
    // up a quarter of a reader's share, not all of it.
    let per = jobs.len().div_ceil(groups * 4).max(1);
    let mut got = vec![UnitOutcome::Missing; units.len()];
    // A file is kept open for the reader's next unit only when units share files.
    let keep_open = src.sharded();
    // Reads one group of units (consecutive units of one file, a shard's inner
    // chunks, open it once), then queues the copies of what the device needs of it.
    let read_group =
        |group: &mut [(usize, &Unit, &mut [u8])]| -> Result<Vec<(usize, UnitOutcome)>> {
            let mut last = None;
            let read = group
                .iter_mut()
                .map(|(j, u, region)| {
                    let g = one_unit(src, chain, u, region, *j * room, &mut last);
                    if !keep_open {
                        last = None;
                    }
                    g.map(|g| (*j, g))
                })
                .collect::<Result<Vec<_>>>()?;
            for r in upload_ranges(read.iter().map(|(j, g)| (*j, g)), room, src.cell_bytes) {
                upload(r)?;
            }
            Ok(read)
        };
    if groups == 1 {
        for group in jobs.chunks_mut(per) {
            for (j, g) in read_group(group)? {
                got[j] = g;
            }
        }
    } else {
        // The groups go to whichever reader is free: the spawned ones and this thread
        // (which reads them all when no thread can be had).
        let queue = std::sync::Mutex::new(jobs.chunks_mut(per));
        let reader = || {
            let mut out = Vec::new();
            loop {
                let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
                let Some(group) = next else {
                    return Ok(out);
                };
                out.extend(read_group(group)?);
            }
        };
        let scope = crate::aio::scope::current();
        let results: Vec<Result<Vec<(usize, UnitOutcome)>>> = std::thread::scope(|sc| {
            let handles: Vec<_> = (1..groups)
                .map_while(|_| {
                    let scope = scope.clone();
                    std::thread::Builder::new()
                        .name("devbuf-gpu-reader".into())
                        .spawn_scoped(sc, move || {
                            let _in = crate::aio::scope::enter(scope);
                            reader()
                        })
                        .ok()
                })
                .collect();
            let mut results = vec![reader()];
            results.extend(handles.into_iter().map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::invalid("a GPU reader thread panicked")))
            }));
            results
        });
        for r in results {
            for (j, g) in r? {
                got[j] = g;
            }
        }
    }
    let used = got
        .iter()
        .enumerate()
        .map(|(j, g)| g.end(j * room, src.cell_bytes))
        .max()
        .unwrap_or(0);
    Ok((got, used))
}

/// Reads one unit into `region` (at slot offset `at`) and checks it; decodes it on
/// the host into the region when nvCOMP should not have it. `last`: the file the
/// previous unit of this reader came from, kept open.
fn one_unit(
    src: &ZarrSource<'_>,
    chain: &Chain,
    u: &Unit,
    region: &mut [u8],
    at: usize,
    last: &mut Option<OpenFile>,
) -> Result<UnitOutcome> {
    // A store without files: the unit's bytes, taken once (an object store's fetch
    // stage hands each unit's bytes out once) and kept for a host decode.
    let mut held = None;
    let len = if src.has_files() {
        match src.open_stored_with(&u.cell, last)? {
            None => return Ok(UnitOutcome::Missing),
            Some((offset, len)) => match (usize::try_from(len), last.as_ref()) {
                (Ok(n), Some(open)) if n <= region.len() => {
                    super::chunk_file::read_exact_at(open, &mut region[..n], offset)
                        .map_err(|e| src.io_err(&src.describe(&u.cell), e))?;
                    Some(n)
                }
                _ => None,
            },
        }
    } else {
        match src.fetch(&u.cell)? {
            Stored::Missing => return Ok(UnitOutcome::Missing),
            Stored::Bytes(b) => {
                let n = b.len();
                let fits = n <= region.len();
                if fits {
                    region[..n].copy_from_slice(&b);
                }
                held = Some(b);
                fits.then_some(n)
            }
        }
    };
    let what = || src.describe(&u.cell);
    let input = match len {
        Some(n) => gpu_input(src, chain, region, 0..n, &what)?,
        None => None,
    };
    match input {
        Some(Input::Stream(r)) => Ok(UnitOutcome::Gpu(at + r.start..at + r.end)),
        Some(Input::Blosc(r, b)) => Ok(UnitOutcome::Blosc(at + r.start..at + r.end, b)),
        None => {
            // Valid input nvCOMP should not be given, or too large for the region: the
            // host decoder (bounded) decides, from the bytes already taken, or reading
            // the unit's file again.
            let dst = &mut region[..src.cell_bytes];
            match &held {
                Some(b) => codec::decode_into(chain, b, dst, &what)?,
                None => {
                    src.decode(&u.cell, dst)?;
                }
            }
            // In stored order, like nvCOMP's output: the claim's byte swap covers every
            // unit.
            if let Some(w) = chain.swap {
                devbuf_core::__private::host_ops::swap_in_place(dst, w);
            }
            Ok(UnitOutcome::Host)
        }
    }
}

/// The byte range nvCOMP decodes of one unit's stored bytes `slot[r]`, after the
/// host-side checks: crc32c, the gzip member's header and size, the zlib stream's
/// header, the LZ4 chunk's size prefix and block structure, the zstd frame's
/// declared size and completeness, blosc's container taken apart ([`blosc`]). `None`:
/// decode this unit on the CPU instead (a valid encoding nvCOMP should not be given,
/// e.g. several zstd frames, or blosc that its parser leaves to c-blosc).
pub(crate) fn gpu_input(
    src: &ZarrSource<'_>,
    chain: &Chain,
    slot: &[u8],
    r: Range<usize>,
    what: &dyn Fn() -> String,
) -> Result<Option<Input>> {
    let mut body = r.clone();
    if chain.crc32c {
        let inner = codec::strip_crc32c(&slot[body.clone()], what)?;
        body = r.start..r.start + inner.len();
    }
    match chain.compression {
        Compression::Gzip => {
            let g = codec::gzip_deflate_range(&slot[body.clone()], src.cell_bytes, what)?;
            Ok(Some(Input::Stream(
                body.start + g.start..body.start + g.end,
            )))
        }
        Compression::Zlib => {
            let z = codec::zlib_deflate_range(&slot[body.clone()], what)?;
            // zlib records no size, so the host cannot tell a truncated stream (gzip's
            // size field can), and nvCOMP's deflate decoder has faulted the device on
            // truncated streams (docs/nvcomp.md): only a stream whose crc32c the host
            // verified above goes to nvCOMP; the others are decoded here.
            if !chain.crc32c {
                return Ok(None);
            }
            Ok(Some(Input::Stream(
                body.start + z.start..body.start + z.end,
            )))
        }
        Compression::Lz4 => {
            // The prefix must declare the chunk's size, and the block's structure must
            // hold together (nvCOMP reports success on truncated LZ4 blocks); nvCOMP's
            // actual size is checked after the decode.
            let n = crate::lz4::declared_size(&slot[body.clone()])
                .map_err(|e| Error::Malformed(format!("{}: {e}", what())))?;
            if n != src.cell_bytes {
                return Err(Error::Malformed(format!(
                    "{}: lz4 chunk declares {n} bytes, the chunk holds exactly {} bytes",
                    what(),
                    src.cell_bytes
                )));
            }
            let p = crate::lz4::PREFIX;
            // With a crc32c verified above the bytes are the writer's; without one a
            // truncated or damaged block must not reach nvCOMP (one pass over it).
            if !chain.crc32c {
                crate::lz4::check_block(&slot[body.start + p..body.end], n)
                    .map_err(|e| Error::Malformed(format!("{}: {e}", what())))?;
            }
            Ok(Some(Input::Stream(body.start + p..body.end)))
        }
        Compression::Zstd => {
            let frame = &slot[body.clone()];
            // No declared size: the CPU decoder bounds it.
            if codec::zstd_declared_size(frame, src.cell_bytes, what)?.is_none() {
                return Ok(None);
            }
            // A frame with a content checksum: nvCOMP would not verify it; the CPU does.
            if frame.len() > 4 && frame[4] & 0x04 != 0 {
                return Ok(None);
            }
            match zstd::zstd_safe::find_frame_compressed_size(frame) {
                Ok(n) if n == frame.len() => Ok(Some(Input::Stream(body))),
                // Several frames: valid zstd, decoded on the CPU.
                Ok(_) => Ok(None),
                Err(_) => Err(Error::Malformed(format!(
                    "{}: truncated or corrupt zstd frame ({} bytes)",
                    what(),
                    frame.len()
                ))),
            }
        }
        Compression::Blosc(inner) => Ok(blosc::parse(&slot[body.clone()], src.cell_bytes, inner)?
            .map(|b| Input::Blosc(body, Box::new(b)))),
        Compression::None => Err(Error::invalid("not a chain for nvCOMP")),
    }
}

/// The CRC-32 of each gzip unit that nvCOMP decodes (the member's trailer, right after
/// its deflate stream in the slot), in the order of the call's chunks, for the device to
/// check ([`DecompressBatch::expect_crc32`](devbuf_core::cuda::nvcomp::DecompressBatch::expect_crc32)):
/// nvCOMP itself does not. `None` for other compressors.
pub(crate) fn gzip_crc32s(chain: &Chain, got: &[UnitOutcome], slot: &[u8]) -> Option<Vec<u32>> {
    if chain.compression != Compression::Gzip {
        return None;
    }
    let trailer = |r: &Range<usize>| {
        slot.get(r.end..r.end + 4)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u32::from_le_bytes)
    };
    Some(
        got.iter()
            .filter_map(|g| match g {
                UnitOutcome::Gpu(r) => Some(trailer(r)),
                _ => None,
            })
            .collect(),
    )
}

/// nvCOMP names the failing chunk by its index in the call: name it by its key.
/// `owners[i]` is the index in `units` of the call's chunk `i`.
pub(crate) fn name_chunk(
    e: Error,
    src: &ZarrSource<'_>,
    units: &[Unit],
    owners: &[usize],
) -> Error {
    let msg = e.to_string();
    let named: Vec<String> = owners
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            msg.contains(&format!("chunk {i} ")) || msg.contains(&format!("chunk {i}:"))
        })
        .filter_map(|(_, &j)| units.get(j))
        .map(|u| src.describe(&u.cell))
        .collect();
    let which = if named.is_empty() {
        units
            .iter()
            .map(|u| src.describe(&u.cell))
            .take(3)
            .collect::<Vec<_>>()
            .join(", ")
            + if units.len() > 3 { ", ..." } else { "" }
    } else {
        named.join(", ")
    };
    Error::Malformed(format!("GPU decode of {which}: {msg}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CRC-32s the device checks are the trailers' of the gzip units nvCOMP gets,
    /// in call order, wherever a unit lies in the slot; none for other compressors.
    #[test]
    fn gzip_crc32s_are_the_trailers_of_the_units_for_nvcomp() {
        use std::io::Write;
        let chain = |compression| Chain {
            order: devbuf_core::zarr::Order::C,
            swap: None,
            compression,
            crc32c: false,
        };
        let (mut slot, mut got, mut want) = (vec![0u8; 7], Vec::new(), Vec::new());
        for n in [1usize, 5000, 20_000] {
            let data: Vec<u8> = (0..n).map(|i| (i * 31 % 251) as u8).collect();
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(1));
            enc.write_all(&data).unwrap();
            let member = enc.finish().unwrap();
            let at = slot.len();
            slot.extend_from_slice(&member);
            let r = codec::gzip_deflate_range(&member, n, &|| "c/0".to_string()).unwrap();
            got.push(UnitOutcome::Gpu(at + r.start..at + r.end));
            got.push(UnitOutcome::Missing);
            let mut h = flate2::Crc::new();
            h.update(&data);
            want.push(h.sum());
        }
        got.insert(1, UnitOutcome::Host);
        assert_eq!(
            gzip_crc32s(&chain(Compression::Gzip), &got, &slot),
            Some(want)
        );
        assert_eq!(gzip_crc32s(&chain(Compression::Zstd), &got, &slot), None);
    }

    #[test]
    fn room_holds_the_decoded_unit_and_a_worst_case_frame() {
        for n in [1usize, 100, 4096, 1 << 20, 16 << 20] {
            let r = stored_room(n);
            assert!(r >= n && r.is_multiple_of(16));
            // zstd's bound: n + n/256 + small.
            assert!(r >= n + n / 256 + 64, "{n}");
        }
    }

    /// A claim read by one reader and by several (each taking groups of units from one
    /// queue) gives the same regions, the same verdict per unit and the same bytes, on
    /// every compressed fixture (zstd, gzip, blosc; plain and sharded; missing chunks).
    #[test]
    fn every_reader_count_reads_the_same_claim() {
        use super::super::codec::Compression;
        use super::super::plan::{ReadBox, plan};
        use crate::fixtures;
        let (mut checked, mut stored, mut sharded) = (0, 0, 0);
        for name in fixtures::names() {
            let Ok(a) = crate::ZarrArray::open(fixtures::path(&name)) else {
                continue;
            };
            let src = a.source().unwrap();
            let Some(&chain) = src.chain() else {
                continue;
            };
            if chain.compression == Compression::None {
                continue;
            }
            let shape = a.metadata().shape.clone();
            let whole = ReadBox {
                start: vec![0; shape.len()],
                shape: shape.clone(),
                offset: 0,
            };
            let units = plan(&[whole], &shape, &src.cell_shape, src.elem, usize::MAX).unwrap();
            let room = stored_room(src.cell_bytes);
            let read = |readers: usize| {
                let mut slot = vec![0u8; units.len() * room];
                let copies = std::sync::Mutex::new(Vec::new());
                let upload = |r: Range<usize>| {
                    copies.lock().unwrap().push(r);
                    Ok(())
                };
                let (got, used) =
                    read_claim(&src, &chain, &units, &mut slot, readers, &upload).unwrap();
                // The readers' copies: disjoint, inside the used bytes, and covering
                // every byte the device reads of every unit.
                let mut copies = copies.into_inner().unwrap();
                copies.sort_by_key(|r| r.start);
                assert!(
                    copies.windows(2).all(|w| w[0].end <= w[1].start),
                    "{name}: {copies:?}"
                );
                assert!(
                    copies.iter().all(|r| r.end <= used),
                    "{name}: {copies:?} {used}"
                );
                for (j, g) in got.iter().enumerate() {
                    for need in upload_ranges([(j, g)], room, src.cell_bytes) {
                        assert!(
                            copies
                                .iter()
                                .any(|c| c.start <= need.start && need.end <= c.end),
                            "{name}, {readers} readers: unit {j}'s bytes {need:?} not copied"
                        );
                    }
                }
                slot.truncate(used);
                (got, used, slot)
            };
            let one = read(1);
            for readers in [2, 3, 16] {
                assert!(read(readers) == one, "{name}: {readers} readers");
            }
            stored += one
                .0
                .iter()
                .filter(|g| !matches!(g, UnitOutcome::Missing))
                .count();
            sharded += usize::from(src.sharded());
            checked += 1;
        }
        assert!(
            checked >= 5 && sharded > 0 && stored > 20,
            "{checked} {sharded} {stored}"
        );
    }

    #[test]
    fn used_bytes_end_at_the_last_region_with_data() {
        assert_eq!(UnitOutcome::Missing.end(100, 10), 0);
        assert_eq!(UnitOutcome::Host.end(100, 10), 110);
        assert_eq!(UnitOutcome::Gpu(100..150).end(100, 10), 150);
    }
}
