//! Where nvCOMP's library is looked for, in order (see the module docs).

use std::path::{Path, PathBuf};

/// The file name nvCOMP 6 installs (its soname).
pub(crate) const SONAME: &str = "libnvcomp.so.6";

/// The environment variable that names the library (a file or a directory holding it).
pub(crate) const ENV_VAR: &str = "DEVBUF_NVCOMP_LIB";

/// One place to try: a path to open, and how it was found (for messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// A file path, or the bare soname (resolved by the dynamic linker).
    pub path: PathBuf,
    /// Where the candidate came from, e.g. `DEVBUF_NVCOMP_LIB` or `pip wheel`.
    pub source: &'static str,
}

/// The places to try, in order.
///
/// `env` is the value of [`ENV_VAR`] (when set and not empty it is the only source: a
/// wrong setting is reported instead of silently loading another copy). Otherwise:
/// the soname through the dynamic linker, then the pip wheel's layout
/// (`nvidia/libnvcomp/lib64/`) under every Python package directory found cheaply, and
/// a conda environment's `lib/`.
pub(crate) fn candidates(env: Option<&str>) -> Vec<Candidate> {
    if let Some(v) = env.filter(|v| !v.trim().is_empty()) {
        let p = PathBuf::from(v.trim());
        if p.is_dir() {
            return [
                p.join(SONAME),
                p.join("lib64").join(SONAME),
                p.join("lib").join(SONAME),
                p.join("nvidia/libnvcomp/lib64").join(SONAME),
            ]
            .into_iter()
            .map(|path| Candidate {
                path,
                source: ENV_VAR,
            })
            .collect();
        }
        return vec![Candidate {
            path: p,
            source: ENV_VAR,
        }];
    }
    let mut out = vec![Candidate {
        path: PathBuf::from(SONAME),
        source: "the dynamic linker (LD_LIBRARY_PATH, ld.so.cache)",
    }];
    let mut push = |path: PathBuf, source: &'static str| {
        if !out.iter().any(|c| c.path == path) {
            out.push(Candidate { path, source });
        }
    };
    for site in site_dirs() {
        for sub in ["nvidia/libnvcomp/lib64", "nvidia/libnvcomp/lib"] {
            push(site.join(sub).join(SONAME), "pip wheel nvidia-libnvcomp");
        }
    }
    if let Some(conda) = var("CONDA_PREFIX") {
        push(
            Path::new(&conda).join("lib").join(SONAME),
            "conda environment",
        );
    }
    out
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Python package directories: `$VIRTUAL_ENV`'s and `$CONDA_PREFIX`'s
/// `lib/python3*/site-packages`, every `$PYTHONPATH` entry, the user's
/// `~/.local/lib/python3*/site-packages`, and the system's `dist-packages` /
/// `site-packages` under `/usr/local/lib` and `/usr/lib`. Only directories that exist.
fn site_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for prefix in [var("VIRTUAL_ENV"), var("CONDA_PREFIX")]
        .into_iter()
        .flatten()
    {
        dirs.extend(python_dirs(
            &Path::new(&prefix).join("lib"),
            "site-packages",
        ));
    }
    if let Some(pp) = var("PYTHONPATH") {
        dirs.extend(std::env::split_paths(&pp).filter(|p| !p.as_os_str().is_empty()));
    }
    if let Some(home) = var("HOME") {
        dirs.extend(python_dirs(
            &Path::new(&home).join(".local/lib"),
            "site-packages",
        ));
    }
    for (lib, sub) in [
        ("/usr/local/lib", "dist-packages"),
        ("/usr/local/lib", "site-packages"),
        ("/usr/lib", "dist-packages"),
        ("/usr/lib", "site-packages"),
    ] {
        dirs.extend(python_dirs(Path::new(lib), sub));
    }
    let mut seen = Vec::new();
    dirs.retain(|d| {
        let keep = d.is_dir() && !seen.contains(d);
        if keep {
            seen.push(d.clone());
        }
        keep
    });
    dirs
}

/// `lib/python3*/<sub>` for every `python3*` directory in `lib` (sorted).
fn python_dirs(lib: &Path, sub: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(lib) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .map(|e| e.path().join(sub))
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_is_the_only_source_when_set() {
        let c = candidates(Some("/nonexistent/libnvcomp.so.6"));
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].path, Path::new("/nonexistent/libnvcomp.so.6"));
        assert_eq!(c[0].source, ENV_VAR);
        // A directory: the soname inside it and the usual sub-folders.
        let d = std::env::temp_dir();
        let c = candidates(Some(d.to_str().unwrap()));
        assert_eq!(c[0].path, d.join(SONAME));
        assert!(c.iter().all(|c| c.source == ENV_VAR));
    }

    #[test]
    fn without_the_variable_the_linker_comes_first() {
        for env in [None, Some(""), Some("  ")] {
            let c = candidates(env);
            assert_eq!(c[0].path, Path::new(SONAME));
            assert!(c[1..].iter().all(|c| c.path.ends_with(SONAME)));
        }
    }
}
