//! A store's chunk files as the GPU workers' readers stage them: every file at its own
//! place in one buffer, read by many threads at once. The benchmarks' limit lines
//! (`bench_zarrs`' per-store limits, `bench_spread`'s host stage) measure it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The store's files under `root` (its chunk and shard files: `zarr.json` and `.z*`
/// metadata left out) with their sizes, sorted by path. Unreadable entries are skipped.
pub fn store_files(root: &Path) -> Vec<(PathBuf, usize)> {
    let mut files = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                dirs.push(p);
            } else if !name.starts_with("zarr.json")
                && !name.starts_with(".z")
                && let Ok(m) = e.metadata()
            {
                files.push((p, m.len() as usize));
            }
        }
    }
    files.sort();
    files
}

/// Where each of `files` starts in a staging buffer (256-byte aligned, as the readers'
/// slots are), and the buffer's length.
pub fn offsets(files: &[(PathBuf, usize)]) -> (Vec<usize>, usize) {
    let mut at = 0usize;
    let offsets = files
        .iter()
        .map(|f| {
            let o = at;
            at += f.1.next_multiple_of(256);
            o
        })
        .collect();
    (offsets, at)
}

/// Reads every file of `files` into `dst` at its offset (from [`offsets`]) with
/// `threads` threads, each taking the next file when it is done with one.
pub fn read_into(
    dst: &mut [u8],
    files: &[(PathBuf, usize)],
    offsets: &[usize],
    threads: usize,
) -> std::io::Result<()> {
    // One disjoint piece of `dst` per file, in order.
    let mut jobs = Vec::with_capacity(files.len());
    let mut rest = dst;
    let mut at = 0usize;
    for ((path, n), &o) in files.iter().zip(offsets) {
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(o - at);
        let (piece, tail) = tail.split_at_mut(*n);
        jobs.push((path, piece));
        rest = tail;
        at = o + n;
    }
    let jobs = Mutex::new(jobs.into_iter());
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads.max(1))
            .map(|_| {
                s.spawn(|| -> std::io::Result<()> {
                    loop {
                        let next = jobs.lock().unwrap_or_else(|p| p.into_inner()).next();
                        let Some((path, piece)) = next else {
                            return Ok(());
                        };
                        std::fs::File::open(path)?.read_exact(piece)?;
                    }
                })
            })
            .collect();
        hs.into_iter().try_for_each(|h| {
            h.join()
                .map_err(|_| std::io::Error::other("a reader thread panicked"))?
        })
    })
}
