//! Helpers shared by the zarr store tests (host: tests/zarrs_*.rs; GPU:
//! tests/gpu/zarrs.rs): temporary directories, chunk grids, boxes of C-order arrays.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh, empty directory named after `tag`, the process and a counter.
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "devbuf-zarrs-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every chunk index of a grid, C order.
pub fn grid_indices(grid: &[u64]) -> Vec<Vec<u64>> {
    let n: u64 = grid.iter().product();
    (0..n)
        .map(|mut lin| {
            let mut idx = vec![0u64; grid.len()];
            for a in (0..grid.len()).rev() {
                idx[a] = lin % grid[a];
                lin /= grid[a];
            }
            idx
        })
        .collect()
}

/// Calls `f` with the byte offset of every element of the box `start`/`shape` of a
/// C-order array of shape `full` (`elem`-byte elements), in C order.
pub fn for_each_box(
    full: &[u64],
    elem: usize,
    start: &[u64],
    shape: &[u64],
    mut f: impl FnMut(usize),
) {
    let nd = shape.len();
    let mut strides = vec![elem as u64; nd];
    for a in (0..nd.saturating_sub(1)).rev() {
        strides[a] = strides[a + 1] * full[a + 1];
    }
    let n: u64 = shape.iter().product();
    for lin in 0..n {
        let mut rem = lin;
        let mut off = 0;
        for a in (0..nd).rev() {
            off += (start[a] + rem % shape[a]) * strides[a];
            rem /= shape[a];
        }
        f(off as usize);
    }
}

/// The C-order bytes of a box of a C-order array.
pub fn sub_box(all: &[u8], full: &[u64], elem: usize, start: &[u64], shape: &[u64]) -> Vec<u8> {
    let mut out = Vec::new();
    for_each_box(full, elem, start, shape, |off| {
        out.extend_from_slice(&all[off..off + elem])
    });
    out
}

/// Writes `v` (C-order bytes of the box) into the box of a C-order array.
pub fn put_box(all: &mut [u8], full: &[u64], elem: usize, start: &[u64], shape: &[u64], v: &[u8]) {
    let mut i = 0;
    for_each_box(full, elem, start, shape, |off| {
        all[off..off + elem].copy_from_slice(&v[i..i + elem]);
        i += elem;
    });
}

/// Every file under `dir`, sorted, as `(key relative to dir with '/' separators, path)`.
pub fn files_under(dir: &std::path::Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p
                    .strip_prefix(dir)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                out.push((rel, p));
            }
        }
    }
    out.sort();
    out
}
