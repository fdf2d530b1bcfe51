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

/// A zarr v3 array's `zarr.json`: `shape` and `chunk_shape` in a regular grid, default
/// `/` chunk keys, `fill_value` and `codecs` as JSON text.
pub fn v3_metadata(
    shape: &[u64],
    data_type: &str,
    chunk_shape: &[u64],
    fill_value: &str,
    codecs: &str,
) -> String {
    format!(
        r#"{{"zarr_format": 3, "node_type": "array", "shape": {shape:?}, "data_type": "{data_type}",
        "chunk_grid": {{"name": "regular", "configuration": {{"chunk_shape": {chunk_shape:?}}}}},
        "chunk_key_encoding": {{"name": "default", "configuration": {{"separator": "/"}}}},
        "fill_value": {fill_value}, "codecs": {codecs}, "attributes": {{}}}}"#
    )
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

/// A zstd-compressed int32 array of 512 x 384 in 64 x 96 chunks in host memory, for
/// load tests (host: tests/load_host.rs; GPU: tests/gpu/faults/load.rs): random values,
/// rows 64..128 never written (chunks of the fill value, 0). Reads compare against
/// [`LoadArray::bytes`].
pub struct LoadArray {
    /// The array (read with 4 worker threads).
    pub array: devbuf::zarr::ZarrArray,
    /// Its C-order bytes.
    pub bytes: Vec<u8>,
}

impl LoadArray {
    /// The array's shape.
    pub const SHAPE: [u64; 2] = [512, 384];
    /// Its chunk shape.
    pub const CHUNK: [u64; 2] = [64, 96];

    /// Makes the array from `seed`.
    pub fn new(seed: u64) -> LoadArray {
        use devbuf::zarr::{ArraySpec, Compressor, ReadOptions, ZarrArray};
        use devbuf::zarr::{Dtype, MemoryStore, NDBuffer, Order};
        use rand::{RngCore, SeedableRng};
        let [rows, cols] = Self::SHAPE.map(|n| n as usize);
        let spec = ArraySpec::new(&Self::SHAPE, &Self::CHUNK, Dtype::INT32)
            .with_compressor(Compressor::Zstd { level: 1 });
        let store = std::sync::Arc::new(MemoryStore::new());
        let mut array = ZarrArray::create((store, "load"), &spec).unwrap();
        let options = ReadOptions {
            threads: Some(4),
            ..ReadOptions::default()
        };
        array.set_read_options(options).unwrap();
        let mut bytes = vec![0u8; 4 * rows * cols];
        rand::rngs::SmallRng::seed_from_u64(seed).fill_bytes(&mut bytes);
        bytes[4 * 64 * cols..4 * 128 * cols].fill(0);
        for (start, n) in [(0usize, 64usize), (128, rows - 128)] {
            let part = bytes[4 * start * cols..4 * (start + n) * cols].to_vec();
            let nd = NDBuffer::from_memory(part, &[n, cols], Dtype::INT32, Order::C).unwrap();
            array.write_subset(&[start as u64, 0], &nd).unwrap();
        }
        LoadArray { array, bytes }
    }

    /// Reads a random box, or a few random whole chunks, into `prototype`'s memory and
    /// compares it with [`bytes`](Self::bytes).
    pub fn read(
        &self,
        r: &mut rand::rngs::SmallRng,
        prototype: &devbuf::zarr::BufferPrototype,
    ) -> Result<(), String> {
        use rand::Rng;
        let [s0, s1] = Self::SHAPE;
        let to_host = |nd: &devbuf::zarr::NDBuffer| {
            nd.to_buffer()
                .and_then(|b| b.to_host())
                .map_err(|e| format!("to host: {e}"))
        };
        if r.random_range(0..3) == 0 {
            let all = grid_indices(&[s0 / Self::CHUNK[0], s1 / Self::CHUNK[1]]);
            let pick: Vec<Vec<u64>> = (0..r.random_range(1..7))
                .map(|_| all[r.random_range(0..all.len())].clone())
                .collect();
            let got = self
                .array
                .read_chunks(&pick)
                .to(prototype)
                .map_err(|e| format!("read_chunks {pick:?}: {e}"))?;
            for (idx, nd) in pick.iter().zip(&got) {
                let start = [idx[0] * Self::CHUNK[0], idx[1] * Self::CHUNK[1]];
                let want = sub_box(&self.bytes, &Self::SHAPE, 4, &start, &Self::CHUNK);
                if nd.prototype() != *prototype || to_host(nd)? != want {
                    return Err(format!("chunk {idx:?}: wrong bytes or memory"));
                }
            }
            return Ok(());
        }
        let a0 = r.random_range(0..s0);
        let a1 = r.random_range(0..s1);
        let b0 = r.random_range(a0 + 1..=s0);
        let b1 = r.random_range(a1 + 1..=s1);
        let nd = self
            .array
            .read(&[a0..b0, a1..b1])
            .to(prototype)
            .map_err(|e| format!("read_subset [{a0}..{b0}, {a1}..{b1}]: {e}"))?;
        let want = sub_box(&self.bytes, &Self::SHAPE, 4, &[a0, a1], &[b0 - a0, b1 - a1]);
        if nd.prototype() != *prototype || to_host(&nd)? != want {
            return Err(format!(
                "box [{a0}..{b0}, {a1}..{b1}]: wrong bytes or memory"
            ));
        }
        Ok(())
    }
}

/// Takes chunk `idx` of `a` out of the store (writing the fill value over it, which must
/// be 0, drops its file) and zeroes its box in `all`, the whole array's C-order native
/// bytes, as a read must then see it.
pub fn unstore_chunk(a: &devbuf::zarr::ZarrArray, idx: &[u64], all: &mut [u8]) {
    use devbuf::zarr::{BufferPrototype, NDBuffer, Order};
    let r = a.chunk_ranges(idx).unwrap();
    let (start, sub): (Vec<u64>, Vec<u64>) = r.iter().map(|r| (r.start, r.end - r.start)).unzip();
    let dims: Vec<usize> = sub.iter().map(|&n| n as usize).collect();
    let zero = NDBuffer::create(&BufferPrototype::Host, &dims, a.dtype(), Order::C, None).unwrap();
    a.write_chunks(&[idx], std::slice::from_ref(&zero)).unwrap();
    assert!(
        !a.chunk_is_stored(idx).unwrap(),
        "chunk {idx:?} is still stored"
    );
    let elem = a.dtype().element().size();
    let n = sub.iter().product::<u64>() as usize * elem;
    put_box(all, a.shape(), elem, &start, &sub, &vec![0u8; n]);
}
