//! Stores: a [`Store`] trait and two in-memory stores, on the host ([`MemoryStore`])
//! and on a GPU ([`DeviceMemoryStore`]).
//!
//! The API is synchronous. zarr-python's store methods are `async` because most
//! stores wait on I/O; memory stores never do (a get is a clone or one copy), so an
//! `async` signature would only add an executor dependency. The stores are
//! thread-safe (`Send + Sync`, a read-write lock around the map); an async facade can
//! wrap them with `spawn_blocking` or call them directly.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::buffer::ByteBuffer;
use super::prototype::BufferPrototype;
use crate::cuda::Context;
use crate::error::{Error, Result, check_range};
use crate::memory::{Memory, Place};

/// Which bytes of a value to read (zarr's `RangeByteRequest`, `OffsetByteRequest`,
/// `SuffixByteRequest`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ByteRequest {
    /// Bytes `start..end` (end exclusive). `start > end` or `end` past the value's
    /// length is an error (zarr-python's memory store clips like a Python slice;
    /// devbuf reports the bad range instead).
    Range {
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
    },
    /// Bytes from `offset` to the end; `offset` past the end is an error.
    Offset(u64),
    /// The last `n` bytes (the whole value when it is shorter, as in zarr and HTTP).
    Suffix(u64),
}

impl ByteRequest {
    /// `(start, len)` of this request in a value of `len` bytes.
    pub fn resolve(&self, len: usize) -> Result<(usize, usize)> {
        let big = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        match *self {
            ByteRequest::Range { start, end } => {
                let (s, e) = (big(start), big(end));
                if s > e {
                    return Err(Error::invalid(format!(
                        "byte range {start}..{end} is reversed (start must not exceed end)"
                    )));
                }
                check_range("byte range", s, e - s, len)?;
                Ok((s, e - s))
            }
            ByteRequest::Offset(o) => {
                let o = big(o);
                check_range("byte offset", o, 0, len)?;
                Ok((o, len - o))
            }
            ByteRequest::Suffix(n) => {
                let n = big(n).min(len);
                Ok((len - n, n))
            }
        }
    }
}

/// zarr's store interface (the subset a chunk pipeline needs), synchronous.
///
/// Missing keys are `Ok(None)` / `Ok(false)`, never errors; bad byte ranges and
/// writes to a read-only store are errors.
pub trait Store: Send + Sync {
    /// The value of `key` in `prototype`'s memory (whole, or the bytes `byte_range`
    /// asks for); `None` when the key does not exist.
    fn get(
        &self,
        key: &str,
        prototype: &BufferPrototype,
        byte_range: Option<ByteRequest>,
    ) -> Result<Option<ByteBuffer>>;

    /// Stores `value` under `key` (replacing any value).
    fn set(&self, key: &str, value: &ByteBuffer) -> Result<()>;

    /// Removes `key`; removing a missing key is not an error.
    fn delete(&self, key: &str) -> Result<()>;

    /// Whether `key` exists.
    fn exists(&self, key: &str) -> Result<bool>;

    /// Every key, sorted.
    fn list(&self) -> Result<Vec<String>>;

    /// Every key that starts with `prefix`, sorted.
    fn list_prefix(&self, prefix: &str) -> Result<Vec<String>>;

    /// The names directly under the directory `prefix` (keys and pseudo-directories,
    /// without the prefix), sorted; `""` is the root. A trailing `/` is ignored.
    fn list_dir(&self, prefix: &str) -> Result<Vec<String>>;

    /// Whether writes are refused.
    fn read_only(&self) -> bool;

    /// Stores `value` under `key` only if the key does not exist yet.
    fn set_if_not_exists(&self, key: &str, value: &ByteBuffer) -> Result<()> {
        if !self.exists(key)? {
            self.set(key, value)?;
        }
        Ok(())
    }

    /// Deletes every key under the directory `prefix` (`prefix/...`; `""` deletes all).
    fn delete_dir(&self, prefix: &str) -> Result<()> {
        let p = prefix.trim_end_matches('/');
        let keys = if p.is_empty() {
            self.list()?
        } else {
            self.list_prefix(&format!("{p}/"))?
        };
        for k in keys {
            self.delete(&k)?;
        }
        Ok(())
    }

    /// True when no key starts with the directory `prefix`.
    fn is_empty(&self, prefix: &str) -> Result<bool> {
        let p = if prefix.is_empty() || prefix.ends_with('/') {
            prefix.to_string()
        } else {
            format!("{prefix}/")
        };
        Ok(self.list_prefix(&p)?.is_empty())
    }

    /// Removes every key.
    fn clear(&self) -> Result<()> {
        self.delete_dir("")
    }

    /// The length in bytes of the value of `key`; `None` when missing.
    fn getsize(&self, key: &str) -> Result<Option<usize>>;
}

/// The map both memory stores share.
#[derive(Default)]
struct Map {
    values: RwLock<BTreeMap<String, ByteBuffer>>,
}

impl Map {
    fn read(&self) -> RwLockReadGuard<'_, BTreeMap<String, ByteBuffer>> {
        self.values.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, BTreeMap<String, ByteBuffer>> {
        self.values.write().unwrap_or_else(|p| p.into_inner())
    }

    fn get(
        &self,
        key: &str,
        prototype: &BufferPrototype,
        byte_range: Option<ByteRequest>,
    ) -> Result<Option<ByteBuffer>> {
        let Some(value) = self.read().get(key).cloned() else {
            return Ok(None);
        };
        let (start, len) = match byte_range {
            None => (0, value.len()),
            Some(r) => r.resolve(value.len())?,
        };
        let part = ByteBuffer::from(value.as_memory().slice(start, len)?);
        Ok(Some(part.to_prototype(prototype)?))
    }

    fn list_prefix(&self, prefix: &str) -> Vec<String> {
        self.read()
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn list_dir(&self, prefix: &str) -> Vec<String> {
        let p = prefix.trim_end_matches('/');
        let map = self.read();
        let names: BTreeSet<String> = if p.is_empty() {
            map.keys()
                .map(|k| k.split('/').next().unwrap_or_default().to_string())
                .collect()
        } else {
            let dir = format!("{p}/");
            map.keys()
                .filter(|k| k.starts_with(&dir) && k.len() > dir.len())
                .map(|k| {
                    k[dir.len()..]
                        .split('/')
                        .next()
                        .unwrap_or_default()
                        .to_string()
                })
                .collect()
        };
        names.into_iter().collect()
    }
}

/// The [`Store`] methods both memory stores share (everything but `set`): they read
/// and delete through `self.map`, and name the store `$name` in errors.
macro_rules! map_store_methods {
    ($name:literal) => {
        fn get(
            &self,
            key: &str,
            prototype: &BufferPrototype,
            byte_range: Option<ByteRequest>,
        ) -> Result<Option<ByteBuffer>> {
            self.map.get(key, prototype, byte_range)
        }

        fn delete(&self, key: &str) -> Result<()> {
            check_writable(self.read_only, concat!($name, ".delete"))?;
            self.map.write().remove(key);
            Ok(())
        }

        fn exists(&self, key: &str) -> Result<bool> {
            Ok(self.map.read().contains_key(key))
        }

        fn list(&self) -> Result<Vec<String>> {
            Ok(self.map.read().keys().cloned().collect())
        }

        fn list_prefix(&self, prefix: &str) -> Result<Vec<String>> {
            Ok(self.map.list_prefix(prefix))
        }

        fn list_dir(&self, prefix: &str) -> Result<Vec<String>> {
            Ok(self.map.list_dir(prefix))
        }

        fn read_only(&self) -> bool {
            self.read_only
        }

        fn getsize(&self, key: &str) -> Result<Option<usize>> {
            Ok(self.map.read().get(key).map(ByteBuffer::len))
        }
    };
}

fn check_writable(read_only: bool, what: &str) -> Result<()> {
    if read_only {
        Err(Error::ReadOnly(format!(
            "{what}: the store was opened read-only and does not support writing"
        )))
    } else {
        Ok(())
    }
}

/// zarr's `MemoryStore`: values in host memory.
///
/// `set` keeps host values without copying (host bytes are immutable, so the caller
/// cannot change a stored value afterwards) and copies device values to the host.
/// `get` returns a zero-copy slice for a host prototype, and one copy for a device
/// prototype. Clones share the same map; [`with_read_only`](Self::with_read_only) gives
/// a read-only handle to it.
///
/// ```
/// use devbuf_core::zarr::{ByteBuffer, BufferPrototype, ByteRequest, MemoryStore, Store};
/// let store = MemoryStore::new();
/// store.set("a/c/0", &ByteBuffer::from(&b"chunk"[..]))?;
/// let p = BufferPrototype::Host;
/// let got = store.get("a/c/0", &p, Some(ByteRequest::Suffix(3)))?.unwrap();
/// assert_eq!(&got.to_host()?[..], b"unk");
/// assert!(store.get("missing", &p, None)?.is_none());
/// assert!(store.get("a/c/0", &p, Some(ByteRequest::Range { start: 2, end: 9 })).is_err());
/// assert_eq!(store.list_dir("a")?, vec!["c"]);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct MemoryStore {
    map: Arc<Map>,
    read_only: bool,
}

impl MemoryStore {
    /// An empty, writable store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// A handle to the same values with another read-only setting.
    pub fn with_read_only(&self, read_only: bool) -> MemoryStore {
        MemoryStore {
            map: self.map.clone(),
            read_only,
        }
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemoryStore('memory://{:p}')", Arc::as_ptr(&self.map))
    }
}

impl Store for MemoryStore {
    map_store_methods!("MemoryStore");

    fn set(&self, key: &str, value: &ByteBuffer) -> Result<()> {
        check_writable(self.read_only, "MemoryStore.set")?;
        let v = value.to_prototype(&BufferPrototype::Host)?;
        self.map.write().insert(key.to_string(), v);
        Ok(())
    }
}

/// zarr's `GpuMemoryStore`: every value lives in device memory of one device.
///
/// `set` copies the value into a new device allocation (host values are uploaded;
/// device values are copied device-to-device), so the store never aliases memory the
/// caller can still write. `get` returns memory of the prototype asked for: a
/// zero-copy slice of the stored allocation for this device's prototype (a later write
/// through it copies first: buffers are copy-on-write), one download for the host
/// prototype, one peer copy for another device.
///
/// ```no_run
/// use devbuf_core::cuda::Context;
/// use devbuf_core::zarr::{ByteBuffer, BufferPrototype, DeviceMemoryStore, Store};
/// let store = DeviceMemoryStore::new(&Context::new(0)?);
/// store.set("c/0", &ByteBuffer::from(&b"on the gpu"[..]))?;
/// let on_gpu = store.get("c/0", &BufferPrototype::Device(0), None)?.unwrap(); // zero-copy
/// let on_host = store.get("c/0", &BufferPrototype::Host, None)?.unwrap();     // one copy
/// assert_eq!(&on_host.to_host()?[..], b"on the gpu");
/// assert!(on_gpu.prototype().is_device());
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone)]
pub struct DeviceMemoryStore {
    map: Arc<Map>,
    ctx: Context,
    read_only: bool,
}

impl DeviceMemoryStore {
    /// An empty, writable store in `ctx`; on device `ordinal`'s primary context:
    /// `DeviceMemoryStore::new(&Context::new(ordinal)?)`.
    pub fn new(ctx: &Context) -> DeviceMemoryStore {
        DeviceMemoryStore {
            map: Arc::default(),
            ctx: ctx.clone(),
            read_only: false,
        }
    }

    /// The context the values live in.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// A handle to the same values with another read-only setting.
    pub fn with_read_only(&self, read_only: bool) -> DeviceMemoryStore {
        DeviceMemoryStore {
            read_only,
            ..self.clone()
        }
    }
}

impl std::fmt::Debug for DeviceMemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceMemoryStore('gpumemory://{:p}', device={})",
            Arc::as_ptr(&self.map),
            self.ctx.ordinal()
        )
    }
}

impl Store for DeviceMemoryStore {
    map_store_methods!("DeviceMemoryStore");

    fn set(&self, key: &str, value: &ByteBuffer) -> Result<()> {
        check_writable(self.read_only, "DeviceMemoryStore.set")?;
        let place = Place::Device(self.ctx.clone());
        let mem = match value.as_memory() {
            Memory::Device(d) => {
                let out = self.ctx.allocate(d.len())?;
                out.copy_from_device(0, d)?;
                Memory::Device(out)
            }
            host => place.bring(host, 0, host.len())?,
        };
        self.map
            .write()
            .insert(key.to_string(), ByteBuffer::from(mem));
        Ok(())
    }
}
