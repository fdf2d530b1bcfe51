//! The host read's stages on a store of whole zstd chunk files, each timed alone at a
//! given number of threads, so that a benchmark can show which stage stops scaling
//! with the cores: decoding the frames already in memory into their places (the
//! `host/own` limit), reading each file (`pread` from the page cache) and decoding it
//! into its place, and reading, decoding into a scratch buffer and copying the
//! scratch into its place (what the engine does with a chunk that is not one
//! contiguous run of the result); and, for comparison, decoding straight from a mapping
//! of the file instead of reading it. `bench_zarrs --host-stages` prints them beside the
//! engine's host read at the same thread counts.
//!
//! Included with `#[path = "common/host_stages.rs"] mod host_stages;`.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Mutex;

/// How a stage handles one chunk file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The file read (one `pread` into the thread's buffer), nothing decoded.
    Read,
    /// The frame already in memory, decoded straight into its place.
    Decode,
    /// The file read (one `pread` into the thread's buffer), then decoded into its place.
    ReadDecode,
    /// The file read, decoded into the thread's scratch, the scratch copied into place.
    ReadDecodeCopy,
    /// The file mapped (`mmap` of the page cache, no copy, pages mapped as the decoder
    /// first reads them), decoded into its place, unmapped.
    MapDecode,
    /// The same with every page mapped when the file is (`MAP_POPULATE`).
    MapPopulatedDecode,
}

impl Stage {
    /// Every stage, in the order above.
    pub const ALL: [Stage; 6] = [
        Stage::Read,
        Stage::Decode,
        Stage::ReadDecode,
        Stage::ReadDecodeCopy,
        Stage::MapDecode,
        Stage::MapPopulatedDecode,
    ];

    /// A short label for a table.
    pub fn label(self) -> &'static str {
        match self {
            Stage::Read => "read",
            Stage::Decode => "decode in memory",
            Stage::ReadDecode => "read + decode",
            Stage::ReadDecodeCopy => "read + decode + copy",
            Stage::MapDecode => "map + decode",
            Stage::MapPopulatedDecode => "map populated + decode",
        }
    }
}

/// A store's chunk files (`files`: path and size, each `chunk_bytes` decoded), their
/// frames in memory, and one output buffer of all of them, touched once.
pub struct Store {
    files: Vec<(PathBuf, usize)>,
    frames: Vec<Vec<u8>>,
    chunk_bytes: usize,
    out: Vec<u8>,
}

impl Store {
    /// Loads the frames of `files` (every one a zstd frame of `chunk_bytes` decoded
    /// bytes) and allocates the output.
    pub fn new(files: Vec<(PathBuf, usize)>, chunk_bytes: usize) -> std::io::Result<Store> {
        let frames = files
            .iter()
            .map(|(p, _)| std::fs::read(p))
            .collect::<std::io::Result<Vec<_>>>()?;
        let out = vec![1u8; files.len() * chunk_bytes];
        Ok(Store {
            files,
            frames,
            chunk_bytes,
            out,
        })
    }

    /// Decoded bytes of the whole store.
    pub fn decoded(&self) -> usize {
        self.out.len()
    }

    /// Runs `stage` over every chunk once with `threads` threads, each taking the next
    /// chunk when done with one.
    pub fn run(&mut self, stage: Stage, threads: usize) -> std::io::Result<()> {
        let (files, frames, chunk) = (&self.files, &self.frames, self.chunk_bytes);
        let most = files.iter().map(|f| f.1).max().unwrap_or(0);
        // Each chunk's place, handed out once.
        let jobs = Mutex::new(self.out.chunks_mut(chunk).enumerate());
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads.max(1))
                .map(|_| {
                    s.spawn(|| -> std::io::Result<()> {
                        let mut d = zstd::bulk::Decompressor::new()?;
                        let mut stored = vec![0u8; most];
                        let mut scratch = match stage {
                            Stage::ReadDecodeCopy => vec![0u8; chunk],
                            _ => Vec::new(),
                        };
                        loop {
                            let next = jobs.lock().unwrap_or_else(|p| p.into_inner()).next();
                            let Some((i, dst)) = next else {
                                return Ok(());
                            };
                            let map;
                            let frame: &[u8] = match stage {
                                Stage::Decode => &frames[i],
                                Stage::MapDecode | Stage::MapPopulatedDecode => {
                                    let (path, len) = &files[i];
                                    let file = std::fs::File::open(path)?;
                                    let all = stage == Stage::MapPopulatedDecode;
                                    map = Map::new(&file, *len, all)?;
                                    map.bytes()
                                }
                                _ => {
                                    let (path, len) = &files[i];
                                    std::fs::File::open(path)?
                                        .read_exact_at(&mut stored[..*len], 0)?;
                                    &stored[..*len]
                                }
                            };
                            let n = match stage {
                                Stage::Read => {
                                    std::hint::black_box(frame);
                                    chunk
                                }
                                Stage::ReadDecodeCopy => {
                                    let n = d.decompress_to_buffer(frame, &mut scratch[..])?;
                                    dst.copy_from_slice(&scratch);
                                    n
                                }
                                _ => d.decompress_to_buffer(frame, dst)?,
                            };
                            if n != chunk {
                                return Err(std::io::Error::other(format!(
                                    "chunk file {i} decoded to {n} bytes, not {chunk}"
                                )));
                            }
                        }
                    })
                })
                .collect();
            hs.into_iter().try_for_each(|h| {
                h.join()
                    .map_err(|_| std::io::Error::other("a stage thread panicked"))?
            })
        })
    }
}

/// A read-only private mapping of a whole file, unmapped on drop.
struct Map {
    at: *mut libc::c_void,
    len: usize,
}

impl Map {
    /// Maps the first `len` bytes of `file` (`len` > 0), every page at once when
    /// `populate`.
    fn new(file: &std::fs::File, len: usize, populate: bool) -> std::io::Result<Map> {
        use std::os::fd::AsRawFd;
        // Safety: a fresh mapping of an open file, read only; the bench's files are not
        // changed while it runs, so no page of it goes past the file's end.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | if populate { libc::MAP_POPULATE } else { 0 },
                file.as_raw_fd(),
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Map { at, len })
    }

    fn bytes(&self) -> &[u8] {
        // Safety: `len` readable bytes at `at`, mapped until `self` drops.
        unsafe { std::slice::from_raw_parts(self.at.cast::<u8>(), self.len) }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // Safety: the mapping made in `new`, no slice of it outlives `self`.
        unsafe { libc::munmap(self.at, self.len) };
    }
}
