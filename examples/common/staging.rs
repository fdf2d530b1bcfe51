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
    offsets_aligned(files, 256)
}

/// [`offsets`] with every place and every file's room a multiple of `align` bytes.
pub fn offsets_aligned(files: &[(PathBuf, usize)], align: usize) -> (Vec<usize>, usize) {
    let mut at = 0usize;
    let offsets = files
        .iter()
        .map(|f| {
            let o = at;
            at += f.1.next_multiple_of(align);
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
    read_into_each(dst, files, offsets, threads, 0, &|_, _, _| Ok(()))
}

/// What [`read_into_each`] calls after each group of files: `(first, last, bytes)`.
pub type AfterGroup<'a> = dyn Fn(usize, usize, &[u8]) -> std::io::Result<()> + Sync + 'a;

/// [`read_into`] in groups of consecutive files of at least `group_bytes` stored bytes
/// (a file alone when larger), each group read by one thread, which then calls
/// `then(first, last, bytes)` for files `first..last` (their span of `dst`, padding
/// included) right after reading them, while their bytes are still in the caches.
pub fn read_into_each(
    dst: &mut [u8],
    files: &[(PathBuf, usize)],
    offsets: &[usize],
    threads: usize,
    group_bytes: usize,
    then: &AfterGroup<'_>,
) -> std::io::Result<()> {
    // One disjoint span of `dst` per group of files, in order.
    let mut groups = Vec::new();
    let mut rest = dst;
    let mut at = 0usize;
    let mut first = 0usize;
    while first < files.len() {
        let mut last = first + 1;
        let mut n = files[first].1;
        while last < files.len() && n < group_bytes {
            n += files[last].1;
            last += 1;
        }
        let end = offsets[last - 1] + files[last - 1].1;
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(offsets[first] - at);
        let (span, tail) = tail.split_at_mut(end - offsets[first]);
        groups.push((first, last, span));
        rest = tail;
        at = end;
        first = last;
    }
    let jobs = Mutex::new(groups.into_iter());
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads.max(1))
            .map(|_| {
                s.spawn(|| -> std::io::Result<()> {
                    loop {
                        let next = jobs.lock().unwrap_or_else(|p| p.into_inner()).next();
                        let Some((first, last, span)) = next else {
                            return Ok(());
                        };
                        let base = offsets[first];
                        for i in first..last {
                            let at = offsets[i] - base;
                            std::fs::File::open(&files[i].0)?
                                .read_exact(&mut span[at..at + files[i].1])?;
                        }
                        then(first, last, span)?;
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
