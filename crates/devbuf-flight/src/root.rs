//! The directory a server serves zarr arrays from: resolving a client's path inside it
//! (symbolic links may not lead out of it) and listing the arrays it holds.

use std::path::{Path, PathBuf};

use super::ticket::{MAX_PATH_COMPONENTS, array_path};
use devbuf_core::error::{Error, Result};

/// Most arrays `ListFlights` reports (and most directories it walks: a root of millions
/// of entries cannot make a listing unbounded).
pub(crate) const MAX_LISTED: usize = 10_000;
const MAX_WALKED: usize = 100_000;

/// Why a path could not be served (mapped to gRPC statuses by the service).
#[derive(Debug)]
pub(crate) enum Refusal {
    /// The path is malformed (`InvalidArgument`).
    Invalid(Error),
    /// Nothing there (`NotFound`).
    Missing(String),
    /// It leads outside the root (`PermissionDenied`).
    Escapes(String),
    /// The file system failed (`Internal`).
    Io(String),
}

/// A served root directory (canonical: symbolic links resolved).
#[derive(Clone, Debug)]
pub(crate) struct Root {
    dir: PathBuf,
}

impl Root {
    /// The root `dir`, which must be an existing directory.
    pub(crate) fn new(dir: &Path) -> Result<Root> {
        let canon = std::fs::canonicalize(dir).map_err(|e| {
            Error::from_io(
                "opening the Flight server's root",
                format!("{}: {e}", dir.display()),
                e,
            )
        })?;
        if !canon.is_dir() {
            return Err(Error::invalid(format!(
                "the Flight server's root {} is not a directory",
                dir.display()
            )));
        }
        Ok(Root { dir: canon })
    }

    /// The canonical root directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory of the array at `path` (relative, checked again here): it must
    /// exist, be a directory, lie inside the root once every symbolic link is resolved,
    /// and hold zarr metadata.
    pub(crate) fn resolve(&self, path: &str) -> Result<PathBuf, Refusal> {
        let path = array_path(path).map_err(Refusal::Invalid)?;
        let joined = self.dir.join(&path);
        let canon = match std::fs::canonicalize(&joined) {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Refusal::Missing(format!(
                    "no array at {path:?} under the root"
                )));
            }
            Err(e) => return Err(Refusal::Io(format!("{path:?}: {e}"))),
        };
        if !canon.starts_with(&self.dir) {
            return Err(Refusal::Escapes(format!(
                "{path:?} leads outside the server's root (through a symbolic link)"
            )));
        }
        if !canon.is_dir() {
            return Err(Refusal::Missing(format!(
                "{path:?} under the root is not a directory (a zarr array is a directory)"
            )));
        }
        if !is_array_dir(&canon) {
            return Err(Refusal::Missing(format!(
                "{path:?} under the root holds no zarr array (no zarr.json or .zarray)"
            )));
        }
        Ok(canon)
    }

    /// The arrays under the root whose path starts with `prefix`, in sorted order: at
    /// most [`MAX_LISTED`]. Symbolic links are not followed (what they lead to is served
    /// when asked for by name, if it lies inside the root).
    pub(crate) fn list(&self, prefix: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut walked = 0usize;
        let mut stack: Vec<(PathBuf, Vec<String>)> = vec![(self.dir.clone(), Vec::new())];
        while let Some((dir, rel)) = stack.pop() {
            if rel.len() > MAX_PATH_COMPONENTS {
                continue;
            }
            if !rel.is_empty() && is_array_dir(&dir) {
                let p = rel.join("/");
                if p.starts_with(prefix) && array_path(&p).is_ok() {
                    out.push(p);
                    if out.len() >= MAX_LISTED {
                        break;
                    }
                }
                continue;
            }
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut children = Vec::new();
            for e in entries.flatten() {
                walked += 1;
                if walked > MAX_WALKED {
                    break;
                }
                let Ok(t) = e.file_type() else { continue };
                if !t.is_dir() {
                    continue;
                }
                let Ok(name) = e.file_name().into_string() else {
                    continue;
                };
                children.push(name);
            }
            children.sort();
            for name in children.into_iter().rev() {
                let mut r = rel.clone();
                r.push(name.clone());
                stack.push((dir.join(name), r));
            }
        }
        out.sort();
        out
    }
}

/// Whether `dir` holds an array's metadata (`zarr.json` of `node_type` `array`, or a v2
/// `.zarray`).
fn is_array_dir(dir: &Path) -> bool {
    if dir.join(".zarray").is_file() {
        return true;
    }
    let meta = dir.join("zarr.json");
    let Ok(f) = std::fs::File::open(&meta) else {
        return false;
    };
    // Bounded read: a metadata document larger than this is not listed (the server
    // refuses to open it anyway).
    use std::io::Read;
    let mut text = String::new();
    let limit = devbuf_zarr::MAX_METADATA_BYTES;
    if f.take(limit + 1).read_to_string(&mut text).is_err() || text.len() as u64 > limit {
        return false;
    }
    serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| {
            v.get("node_type")
                .and_then(|t| t.as_str().map(|s| s == "array"))
        })
        .unwrap_or(false)
}
