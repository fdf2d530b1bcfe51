//! [`CheckedFilesystemStore`]: a zarr store in a directory that reads and writes regular
//! files only.
//!
//! `zarrs`' `FilesystemStore` opens whatever a key's path names: a chunk that is a FIFO
//! blocks the reader forever (opening a FIFO waits for a writer), a symbolic link to
//! `/dev/zero` or a metadata document that is a directory gives "Could not determine
//! file size", and a byte range past the end of a file allocates the whole range before
//! reading. This store checks the file type first (following symbolic links: a link to a
//! regular file is read, a link to a device is not), opens with `O_NONBLOCK` (so that
//! even a FIFO swapped in after the check cannot block) and checks the opened file
//! again, and checks every byte range against the file's size before allocating. Any
//! other kind of file is an error naming its path and what it is.

use std::collections::HashMap;
use std::fs::{File, FileType, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use zarrs::storage::byte_range::{ByteRange, ByteRangeIterator, InvalidByteRangeError};
use zarrs::storage::{
    Bytes, MaybeBytesIterator, OffsetBytesIterator, ReadableStorageTraits,
    ReadableWritableStorageTraits, StorageError, StoreKey, StorePrefix, WritableStorageTraits,
};

use devbuf_core::error::{Error, Result};

/// The storage [`ZarrArray::open`](super::ZarrArray::open) and
/// [`ZarrArray::create`](super::ZarrArray::create) use for the directory `path`: a
/// [`CheckedFilesystemStore`].
pub(crate) fn checked_filesystem_store(
    path: &Path,
) -> Result<Arc<dyn ReadableWritableStorageTraits>> {
    Ok(Arc::new(CheckedFilesystemStore::new(path)?))
}

/// A zarr store in the directory `base`: key `a/b` is the file `base/a/b`. Only regular
/// files (or symbolic links to them) are read or written; see the module docs.
///
/// Reads and writes of one key exclude each other within the process (as in
/// `FilesystemStore`): a reader never sees a chunk half written by another thread.
#[derive(Debug)]
pub(crate) struct CheckedFilesystemStore {
    base: PathBuf,
    /// One lock per key that has been used.
    files: Mutex<HashMap<StoreKey, Arc<RwLock<()>>>>,
    /// Held for reading by every operation on a key, for writing by `erase_prefix`.
    all: RwLock<()>,
}

/// What a file is, for messages.
fn describe(t: FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// An `io::Error` about `path` as a storage error: the same kind, a message that starts
/// with the path, and the original error as its source (what devbuf's error for it
/// keeps, see `crate::storage::storage_error`).
fn io_at(path: &Path, e: std::io::Error) -> StorageError {
    StorageError::IOError(Arc::new(std::io::Error::new(
        e.kind(),
        AtPath {
            path: path.to_path_buf(),
            source: e,
        },
    )))
}

/// An `io::Error` with the path it happened at.
#[derive(Debug)]
struct AtPath {
    path: PathBuf,
    source: std::io::Error,
}

impl std::fmt::Display for AtPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.source)
    }
}

impl std::error::Error for AtPath {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

fn other(path: &Path, what: impl std::fmt::Display) -> StorageError {
    StorageError::Other(format!("{}: {what}", path.display()))
}

/// The error for `path`, which is `t` (after following symbolic links).
fn not_regular(path: &Path, t: FileType) -> StorageError {
    StorageError::Other(not_regular_message(path, t))
}

/// `<path> is a FIFO (named pipe), not a regular file (...)`: what `path` is, for the
/// errors of every reader of store files.
pub(crate) fn not_regular_message(path: &Path, t: FileType) -> String {
    let link = std::fs::read_link(path)
        .map(|target| format!(" (a symbolic link to {})", target.display()))
        .unwrap_or_default();
    format!(
        "{}: is {}{link}, not a regular file (zarr stores read and write only regular files)",
        path.display(),
        describe(t)
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Flags for every open: never wait (a FIFO), never become a controlling terminal.
const OPEN_FLAGS: i32 = libc::O_NONBLOCK | libc::O_NOCTTY;

impl CheckedFilesystemStore {
    /// A store in the directory `base` (which need not exist yet; writes create it).
    pub(crate) fn new(base: &Path) -> Result<CheckedFilesystemStore> {
        if base.as_os_str().is_empty() || base.to_str().is_none() {
            return Err(Error::invalid(format!(
                "{}: not a usable zarr store path (it must be non-empty UTF-8)",
                base.display()
            )));
        }
        Ok(CheckedFilesystemStore {
            base: base.to_path_buf(),
            files: Mutex::new(HashMap::new()),
            all: RwLock::new(()),
        })
    }

    /// The file of `key`; keys that would leave the store (`..`) are refused.
    fn path_of(&self, key: &str) -> std::result::Result<PathBuf, StorageError> {
        let rel = Path::new(key.trim_start_matches('/'));
        if rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(StorageError::Other(format!(
                "store key {key:?} leaves the store directory {}",
                self.base.display()
            )));
        }
        Ok(self.base.join(rel))
    }

    fn key_lock(&self, key: &StoreKey) -> Arc<RwLock<()>> {
        lock(&self.files).entry(key.clone()).or_default().clone()
    }

    /// Opens the regular file at `path` for reading: `None` when there is none.
    fn open_regular(&self, path: &Path) -> std::result::Result<Option<(File, u64)>, StorageError> {
        // Checked before opening: opening a device can have effects of its own.
        match std::fs::metadata(path) {
            Ok(m) if !m.is_file() => return Err(not_regular(path, m.file_type())),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_at(path, e)),
        }
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(OPEN_FLAGS)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_at(path, e)),
        };
        // And again on what was opened (the path may have changed in between).
        let m = file.metadata().map_err(|e| io_at(path, e))?;
        if !m.is_file() {
            return Err(not_regular(path, m.file_type()));
        }
        Ok(Some((file, m.len())))
    }

    /// Opens (creating) the file at `path` for writing; an existing file must be regular.
    fn open_for_write(
        &self,
        path: &Path,
        truncate: bool,
    ) -> std::result::Result<File, StorageError> {
        match std::fs::metadata(path) {
            Ok(m) if !m.is_file() => return Err(not_regular(path, m.file_type())),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| io_at(parent, e))?;
                }
            }
            Err(e) => return Err(io_at(path, e)),
        }
        // Not truncated at open: the opened file is checked first (O_TRUNC on whatever
        // the path names by then would act before the check).
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(OPEN_FLAGS)
            .open(path)
            .map_err(|e| io_at(path, e))?;
        let m = file.metadata().map_err(|e| io_at(path, e))?;
        if !m.is_file() {
            return Err(not_regular(path, m.file_type()));
        }
        if truncate {
            file.set_len(0).map_err(|e| io_at(path, e))?;
        }
        Ok(file)
    }

    /// A new, empty file at `path` for writing a whole value (`set`). An existing
    /// regular file is removed and a new one created, not truncated in place: ext4
    /// (`auto_da_alloc`, on by default) makes the close of a file that was truncated to
    /// zero and rewritten start writing it to the disk, so rewriting an array's chunks
    /// in place ran at the disk's rate (about 1 GB/s from 16 threads on the GPU
    /// machine, against 34 GB/s for new files; `docs/performance.md`). Readers of this
    /// store wait on the key's lock, so none sees the gap. A symbolic link to a regular
    /// file is written through (truncated in place), as the link's owner set it up; a
    /// link to nothing is an error.
    fn open_replacing(&self, path: &Path) -> std::result::Result<File, StorageError> {
        for _ in 0..3 {
            match std::fs::symlink_metadata(path) {
                Ok(m) if m.file_type().is_symlink() => {
                    if let Err(e) = std::fs::metadata(path)
                        && e.kind() == ErrorKind::NotFound
                    {
                        let to = std::fs::read_link(path).unwrap_or_default();
                        return Err(other(
                            path,
                            format_args!(
                                "is a symbolic link to {}, which does not exist (links are \
                                 written through, never created)",
                                to.display()
                            ),
                        ));
                    }
                    return self.open_for_write(path, true);
                }
                Ok(m) if !m.is_file() => return Err(not_regular(path, m.file_type())),
                Ok(_) => match std::fs::remove_file(path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Err(e) => return Err(io_at(path, e)),
                },
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    if let Some(parent) = path.parent() {
                        std::fs::create_dir_all(parent).map_err(|e| io_at(parent, e))?;
                    }
                }
                Err(e) => return Err(io_at(path, e)),
            }
            // `create_new` (O_EXCL) never follows whatever another process put there
            // in between: that is refused and looked at again.
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(OPEN_FLAGS)
                .open(path)
            {
                Ok(f) => return Ok(f),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io_at(path, e)),
            }
        }
        Err(other(
            path,
            "something else keeps creating this file while it is being replaced \
             (gave up after 3 tries)",
        ))
    }
}

/// `len` bytes of `file` from `offset`, allocated fallibly.
fn read_range(
    file: &File,
    path: &Path,
    offset: u64,
    len: u64,
) -> std::result::Result<Bytes, StorageError> {
    let n = usize::try_from(len).map_err(|_| {
        other(
            path,
            format_args!("a read of {len} bytes does not fit in memory"),
        )
    })?;
    let mut buf = Vec::new();
    buf.try_reserve_exact(n)
        .map_err(|_| other(path, format_args!("cannot allocate {n} bytes to read")))?;
    buf.resize(n, 0);
    file.read_exact_at(&mut buf, offset).map_err(|e| {
        if e.kind() == ErrorKind::UnexpectedEof {
            other(
                path,
                format_args!(
                    "the file ended before byte {} (it shrank while read)",
                    offset + len
                ),
            )
        } else {
            io_at(path, e)
        }
    })?;
    Ok(Bytes::from(buf))
}

impl ReadableStorageTraits for CheckedFilesystemStore {
    fn get_partial_many<'a>(
        &'a self,
        key: &StoreKey,
        byte_ranges: ByteRangeIterator<'a>,
    ) -> std::result::Result<MaybeBytesIterator<'a>, StorageError> {
        let path = self.path_of(key.as_str())?;
        let _all = self.all.read().unwrap_or_else(|p| p.into_inner());
        let key_lock = self.key_lock(key);
        let _reading = key_lock.read().unwrap_or_else(|p| p.into_inner());
        let Some((file, size)) = self.open_regular(&path)? else {
            return Ok(None);
        };
        let out: Vec<std::result::Result<Bytes, StorageError>> = byte_ranges
            .map(|r| {
                let (offset, len) = match r {
                    ByteRange::FromStart(o, None) if o <= size => (o, size - o),
                    ByteRange::FromStart(o, Some(n))
                        if o.checked_add(n).is_some_and(|e| e <= size) =>
                    {
                        (o, n)
                    }
                    ByteRange::Suffix(n) if n <= size => (size - n, n),
                    _ => return Err(InvalidByteRangeError::new(r, size).into()),
                };
                read_range(&file, &path, offset, len)
            })
            .collect();
        Ok(Some(Box::new(out.into_iter())))
    }

    fn size_key(&self, key: &StoreKey) -> std::result::Result<Option<u64>, StorageError> {
        let path = self.path_of(key.as_str())?;
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => Ok(Some(m.len())),
            Ok(m) => Err(not_regular(&path, m.file_type())),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_at(&path, e)),
        }
    }

    fn supports_get_partial(&self) -> bool {
        true
    }
}

impl WritableStorageTraits for CheckedFilesystemStore {
    fn set(&self, key: &StoreKey, value: Bytes) -> std::result::Result<(), StorageError> {
        let path = self.path_of(key.as_str())?;
        let _all = self.all.read().unwrap_or_else(|p| p.into_inner());
        let key_lock = self.key_lock(key);
        let _writing = key_lock.write().unwrap_or_else(|p| p.into_inner());
        let mut file = self.open_replacing(&path)?;
        file.write_all(&value).map_err(|e| io_at(&path, e))
    }

    fn set_partial_many(
        &self,
        key: &StoreKey,
        offset_values: OffsetBytesIterator,
    ) -> std::result::Result<(), StorageError> {
        let path = self.path_of(key.as_str())?;
        let _all = self.all.read().unwrap_or_else(|p| p.into_inner());
        let key_lock = self.key_lock(key);
        let _writing = key_lock.write().unwrap_or_else(|p| p.into_inner());
        let file = self.open_for_write(&path, false)?;
        for (offset, value) in offset_values {
            if offset.checked_add(value.len() as u64).is_none() {
                return Err(other(
                    &path,
                    format_args!("a write at offset {offset} overflows"),
                ));
            }
            file.write_all_at(&value, offset)
                .map_err(|e| io_at(&path, e))?;
        }
        Ok(())
    }

    fn erase(&self, key: &StoreKey) -> std::result::Result<(), StorageError> {
        let path = self.path_of(key.as_str())?;
        let _all = self.all.read().unwrap_or_else(|p| p.into_inner());
        let key_lock = self.key_lock(key);
        let _writing = key_lock.write().unwrap_or_else(|p| p.into_inner());
        // Removing a name never opens what it names.
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_at(&path, e)),
        }
    }

    fn erase_prefix(&self, prefix: &StorePrefix) -> std::result::Result<(), StorageError> {
        let path = self.path_of(prefix.as_str())?;
        let _all = self.all.write().unwrap_or_else(|p| p.into_inner());
        match std::fs::remove_dir_all(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_at(&path, e)),
        }
    }

    fn supports_set_partial(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;
    use std::time::Duration;

    use super::*;

    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn dir(tag: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("devbuf-fs-store-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }

    fn key(k: &str) -> StoreKey {
        StoreKey::new(k).unwrap()
    }

    fn mkfifo(p: &Path) {
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // Safety: a NUL-terminated path and a mode.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    /// Runs `f` on another thread and fails if it does not return within 10 s.
    fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the store blocked")
    }

    #[test]
    fn regular_files_and_links_to_them_are_read() {
        let d = dir("regular");
        let s = CheckedFilesystemStore::new(&d.0).unwrap();
        s.set(&key("a/b"), Bytes::from_static(b"hello")).unwrap();
        assert_eq!(s.get(&key("a/b")).unwrap().unwrap().as_ref(), b"hello");
        symlink(d.0.join("a/b"), d.0.join("link")).unwrap();
        assert_eq!(s.get(&key("link")).unwrap().unwrap().as_ref(), b"hello");
        assert_eq!(s.size_key(&key("link")).unwrap(), Some(5));
        assert_eq!(s.get(&key("missing")).unwrap(), None);
        assert_eq!(s.size_key(&key("missing")).unwrap(), None);
        let r = s
            .get_partial(&key("a/b"), ByteRange::Suffix(3))
            .unwrap()
            .unwrap();
        assert_eq!(r.as_ref(), b"llo");
        // Ranges past the end are errors, not huge allocations.
        for r in [
            ByteRange::FromStart(2, Some(u64::MAX)),
            ByteRange::FromStart(6, None),
            ByteRange::Suffix(1 << 60),
        ] {
            let e = s.get_partial(&key("a/b"), r).unwrap_err();
            assert!(matches!(e, StorageError::InvalidByteRangeError(_)), "{e}");
        }
        s.set_partial(&key("a/b"), 1, Bytes::from_static(b"EL"))
            .unwrap();
        assert_eq!(s.get(&key("a/b")).unwrap().unwrap().as_ref(), b"hELlo");
        s.set(&key("a/b"), Bytes::from_static(b"x")).unwrap();
        assert_eq!(s.get(&key("a/b")).unwrap().unwrap().as_ref(), b"x");
        s.erase(&key("a/b")).unwrap();
        s.erase(&key("a/b")).unwrap();
        assert_eq!(s.get(&key("a/b")).unwrap(), None);
        s.erase_prefix(&StorePrefix::new("a/").unwrap()).unwrap();
        assert!(!d.0.join("a").exists());
    }

    #[test]
    fn a_rewritten_file_is_replaced_and_a_link_is_written_through() {
        use std::os::unix::fs::MetadataExt;
        let d = dir("replace");
        let s = CheckedFilesystemStore::new(&d.0).unwrap();
        s.set(&key("c/0"), Bytes::from_static(b"a long first value"))
            .unwrap();
        let first = std::fs::metadata(d.0.join("c/0")).unwrap().ino();
        // Kept open across the rewrite: it still reads the old bytes (a new file, not
        // the old one truncated).
        let held = File::open(d.0.join("c/0")).unwrap();
        s.set(&key("c/0"), Bytes::from_static(b"short")).unwrap();
        assert_eq!(s.get(&key("c/0")).unwrap().unwrap().as_ref(), b"short");
        assert_ne!(std::fs::metadata(d.0.join("c/0")).unwrap().ino(), first);
        let mut old = String::new();
        std::io::Read::read_to_string(&mut &held, &mut old).unwrap();
        assert_eq!(old, "a long first value");
        // A link to a regular file stays a link; its target gets the bytes.
        std::fs::write(d.0.join("target"), b"old target bytes").unwrap();
        symlink(d.0.join("target"), d.0.join("c/1")).unwrap();
        s.set(&key("c/1"), Bytes::from_static(b"new")).unwrap();
        assert!(
            std::fs::symlink_metadata(d.0.join("c/1"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read(d.0.join("target")).unwrap(), b"new");
        // A dangling link is not followed (that would create a file wherever it
        // points): an error naming the path.
        symlink(d.0.join("nowhere"), d.0.join("c/2")).unwrap();
        let e = s.set(&key("c/2"), Bytes::from_static(b"x")).unwrap_err();
        assert!(
            e.to_string().contains("c/2") && e.to_string().contains("does not exist"),
            "{e}"
        );
        assert!(!d.0.join("nowhere").exists());
    }

    #[test]
    fn fifos_devices_and_directories_are_errors_naming_the_path() {
        let d = dir("odd");
        mkfifo(&d.0.join("fifo"));
        symlink("/dev/zero", d.0.join("zero")).unwrap();
        std::fs::create_dir_all(d.0.join("zarr.json")).unwrap();
        let base = d.0.clone();
        let results = within_10s(move || {
            let s = CheckedFilesystemStore::new(&base).unwrap();
            ["fifo", "zero", "zarr.json"].map(|k| {
                (
                    s.get(&key(k)).unwrap_err(),
                    s.size_key(&key(k)).unwrap_err(),
                    s.set(&key(k), Bytes::from_static(b"x")).unwrap_err(),
                )
            })
        });
        let wants = [
            "a FIFO",
            "a character device (a symbolic link to /dev/zero)",
            "a directory",
        ];
        for ((get, size, set), (name, want)) in results
            .iter()
            .zip(["fifo", "zero", "zarr.json"].iter().zip(wants))
        {
            for e in [get, size, set] {
                let m = e.to_string();
                assert!(m.contains(&d.0.join(name).display().to_string()), "{m}");
                assert!(m.contains(want) && m.contains("not a regular file"), "{m}");
            }
        }
        // Nothing was written through the FIFO or the link.
        assert!(d.0.join("zarr.json").is_dir());
    }

    #[test]
    fn keys_cannot_leave_the_store() {
        let d = dir("escape");
        let s = CheckedFilesystemStore::new(&d.0).unwrap();
        let e = s.get(&key("a/../../etc/passwd")).unwrap_err();
        assert!(e.to_string().contains("leaves the store directory"), "{e}");
        assert!(CheckedFilesystemStore::new(Path::new("")).is_err());
    }
}
