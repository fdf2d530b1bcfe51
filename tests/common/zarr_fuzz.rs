//! Helpers of the zarr fuzz harnesses (tests/fuzz_zarr_*.rs): the zarr-python fixtures
//! as in-memory stores, and a read that checks what comes back.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use devbuf::Error;
use devbuf::zarr::ZarrArray;
use devbuf::zarr::{BufferPrototype, ByteBuffer, MemoryStore, Store};

/// Arrays larger than this (decoded) are not read whole, chunks larger than this not
/// read at all: the fuzzers look for wrong answers, not for the largest allocation.
pub const READ_LIMIT: u64 = 16 << 20;

/// One fixture array: its name and its files (store key, bytes).
pub struct Fixture {
    pub name: String,
    pub files: Vec<(String, Vec<u8>)>,
}

impl Fixture {
    /// The metadata document's key (`zarr.json` or `.zarray`) and bytes.
    pub fn metadata(&self) -> (&str, &[u8]) {
        self.files
            .iter()
            .find(|(k, _)| k == "zarr.json" || k == ".zarray")
            .map(|(k, v)| (k.as_str(), v.as_slice()))
            .expect("a fixture has metadata")
    }

    /// The chunk files (every file but the metadata and attributes).
    pub fn chunk_keys(&self) -> Vec<&str> {
        self.files
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !matches!(*k, "zarr.json" | ".zarray" | ".zattrs" | ".zgroup"))
            .collect()
    }

    /// A memory store holding the fixture, with `replace` overriding files by key.
    pub fn store(&self, replace: &[(&str, Vec<u8>)]) -> Arc<MemoryStore> {
        let s = Arc::new(MemoryStore::new());
        for (k, v) in &self.files {
            if replace.iter().all(|(r, _)| r != k) {
                s.set(k, &ByteBuffer::from(v.clone())).unwrap();
            }
        }
        for (k, v) in replace {
            s.set(k, &ByteBuffer::from(v.clone())).unwrap();
        }
        s
    }
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/zarr")
}

fn files_under(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let p = e.path();
        if p.is_dir() {
            files_under(root, &p, out);
        } else {
            let key = p
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            out.push((key, std::fs::read(&p).unwrap()));
        }
    }
}

/// Every zarr-python fixture array (tests/fixtures/zarr/*.zarr), sorted by name.
pub fn fixtures() -> Vec<Fixture> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "zarr"))
        .collect();
    dirs.sort();
    dirs.into_iter()
        .map(|d| {
            let mut files = Vec::new();
            files_under(&d, &d, &mut files);
            Fixture {
                name: d.file_name().unwrap().to_string_lossy().into_owned(),
                files,
            }
        })
        .collect()
}

/// Errors seen that a harness reports rather than fails on (by default): a dependency's
/// panic that devbuf caught, by message, with one input that produced it.
#[derive(Default)]
pub struct Findings(Mutex<BTreeMap<String, (u64, String)>>);

impl Findings {
    pub fn add(&self, what: String, input: impl FnOnce() -> String) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let e = m.entry(what).or_insert_with(|| (0, input()));
        e.0 += 1;
    }

    pub fn is_empty(&self) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }

    /// Prints each finding with its count and an input.
    pub fn print(&self, harness: &str) {
        for (what, (n, input)) in self.0.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            println!("finding of {harness} ({n} inputs): {what}\n  e.g. {input}");
        }
    }
}

/// Checks an error: bounded, non-empty; a panic that devbuf caught is a finding
/// (`Ok("caught zarrs panic")`).
pub fn classify(
    e: &Error,
    findings: &Findings,
    input: impl FnOnce() -> String,
) -> Result<&'static str, String> {
    let m = e.to_string();
    if m.is_empty() || m.len() > 8192 {
        return Err(format!("an error message of {} bytes: {m:.200}", m.len()));
    }
    if m.contains("panicked") {
        // The message names the panic; strip the location-specific part (chunk
        // ranges) so that one bug is one finding.
        let what = m.split("zarrs panicked: ").nth(1).unwrap_or(&m).to_string();
        findings.add(what, input);
        return Ok("caught zarrs panic");
    }
    Ok("error")
}

/// The bytes of a box of `shape` with `elem`-byte elements, if it fits 64 bits.
pub fn bytes_of(shape: &[u64], elem: u64) -> Option<u64> {
    shape.iter().try_fold(elem, |a, &s| a.checked_mul(s))
}

/// Reads chunk 0 (clipped at the array's edge) and, when small, the whole array on the
/// host. An `Ok` of another shape or data type is a failure (`Err`); errors are
/// classified ([`classify`]). Returns what happened.
pub fn read_checked(
    a: &ZarrArray,
    findings: &Findings,
    input: &dyn Fn() -> String,
) -> Result<&'static str, String> {
    let zero = vec![0; a.metadata().shape.len()];
    read_chunk_checked(a, &zero, findings, input)
}

/// The shape of chunk `index` of `a`, clipped at the array's edge.
pub fn clipped_chunk(a: &ZarrArray, index: &[u64]) -> Vec<usize> {
    let m = a.metadata();
    m.chunk_shape
        .iter()
        .zip(&m.shape)
        .zip(index)
        .map(|((&c, &s), &i)| c.min(s.saturating_sub(i.saturating_mul(c))) as usize)
        .collect()
}

/// [`read_checked`] of chunk `index` (which should be in the grid).
pub fn read_chunk_checked(
    a: &ZarrArray,
    index: &[u64],
    findings: &Findings,
    input: &dyn Fn() -> String,
) -> Result<&'static str, String> {
    let m = a.metadata();
    let elem = a.dtype().element().size() as u64;
    let ndim = m.shape.len();
    if m.chunk_shape.len() != ndim || m.grid_shape.len() != ndim || index.len() != ndim {
        return Err(format!("metadata of inconsistent ranks: {m:?}"));
    }
    let mut what = "opened";
    let in_grid = index.iter().zip(&m.grid_shape).all(|(i, g)| i < g);
    if bytes_of(&m.chunk_shape, elem).is_some_and(|b| b <= READ_LIMIT) {
        let want = clipped_chunk(a, index);
        match a
            .read_chunks(&[index])
            .to(&BufferPrototype::Host)
            .map(|mut v| v.remove(0))
        {
            Ok(nd) => {
                if !in_grid {
                    return Err(format!(
                        "read chunk {index:?} outside the grid {:?}: {:?}",
                        m.grid_shape,
                        nd.shape()
                    ));
                }
                if nd.shape() != want.as_slice() || nd.dtype() != a.dtype() {
                    return Err(format!(
                        "read_chunk({index:?}) returned {:?} {}, expected {want:?} {}",
                        nd.shape(),
                        nd.dtype(),
                        a.dtype()
                    ));
                }
                what = "chunk read";
            }
            Err(e) => what = classify(&e, findings, input)?,
        }
    }
    if bytes_of(&m.shape, elem).is_some_and(|b| b <= READ_LIMIT) {
        match a.read(..).to(&BufferPrototype::Host) {
            Ok(nd) => {
                let want: Vec<usize> = m.shape.iter().map(|&s| s as usize).collect();
                if nd.shape() != want.as_slice() || nd.dtype() != a.dtype() {
                    return Err(format!(
                        "read_all returned {:?} {}, expected {want:?} {}",
                        nd.shape(),
                        nd.dtype(),
                        a.dtype()
                    ));
                }
                if what == "chunk read" {
                    what = "read";
                }
            }
            Err(e) => {
                let c = classify(&e, findings, input)?;
                if c != "error" {
                    what = c;
                }
            }
        }
    }
    Ok(what)
}
