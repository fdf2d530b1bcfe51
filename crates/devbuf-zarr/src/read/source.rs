//! [`ZarrSource`]: an opened array as the read engine sees it — the decode grid (chunks,
//! or inner chunks of shards), the layout of a decoded unit, and how one unit's stored
//! bytes are fetched and decoded (bounded) into the caller's memory.

use crate::storage::DynStorage;
use std::collections::HashMap;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use zarrs::array::{Array, ArrayBytes, ArrayError};
use zarrs::storage::StoreKey;
use zarrs::storage::byte_range::ByteRange;

use super::chunk_file::{OpenFile, read_exact_at, with_stored_bytes};
use super::codec::{self, Chain, Codecs, ShardIndex};
use super::plan::{c_strides, f_strides};
use devbuf_core::error::{Error, Result};
use devbuf_core::zarr::Order;

#[cfg(feature = "object_store")]
mod remote;

/// A shard's index: `(offset, nbytes)` per inner chunk, C order; `None`: a missing shard.
type Index = Option<Arc<Vec<(u64, u64)>>>;

/// What a unit's stored bytes are.
pub(crate) enum Stored {
    /// Not stored: the unit reads as the fill value.
    Missing,
    /// Stored bytes, to decode with the chain.
    Bytes(bytes::Bytes),
}

/// A unit's chunk (or shard) file and, for an inner chunk, its `(offset, nbytes)`.
type FileRange = (PathBuf, Option<(u64, u64)>);

/// An array as the engine reads it.
pub(crate) struct ZarrSource<'a> {
    pub array: &'a Array<DynStorage>,
    pub location: &'a str,
    pub codecs: Codecs,
    /// Bytes per element.
    pub elem: usize,
    /// The fill value's native bytes.
    pub fill: Vec<u8>,
    /// The array's (outer) chunk shape.
    pub chunk_shape: Vec<u64>,
    /// The decode grid's cell: the chunk, or the inner chunk of a shard.
    pub cell_shape: Vec<u64>,
    /// Bytes of one decoded cell.
    pub cell_bytes: usize,
    /// Byte strides of a decoded cell (C, or F for a reversing transpose).
    pub cell_strides: Vec<isize>,
    indexes: Mutex<HashMap<Vec<u64>, Index>>,
    /// The store's directory when it is a filesystem store: chunk files are then read
    /// with one `read` into a reused per-thread buffer (or straight into the caller's
    /// memory for uncompressed chunks) instead of a fresh allocation per chunk.
    root: Option<PathBuf>,
    /// The object store of an array opened by URL, and the read's fetch stage once
    /// [`prefetch`](Self::prefetch) started it.
    #[cfg(feature = "object_store")]
    remote: Option<remote::Remote>,
}

/// Where an array's stored bytes can be reached without `zarrs`' storage traits.
#[derive(Clone, Debug, Default)]
pub(crate) enum Direct {
    /// Only through the storage traits (a devbuf store).
    #[default]
    Store,
    /// Chunk files in this directory (a filesystem store).
    Dir(PathBuf),
    /// An object store: many requests at once, ahead of the decoders.
    #[cfg(feature = "object_store")]
    Url(Arc<crate::object_store::UrlStore>),
}

impl<'a> ZarrSource<'a> {
    /// The engine's view of `array` (chunks of `chunk_shape`, elements of `elem`
    /// bytes, swapped in `swap_width` units, fill value `fill`).
    pub(crate) fn new(
        array: &'a Array<DynStorage>,
        location: &'a str,
        chunk_shape: &[u64],
        elem: usize,
        swap_width: usize,
        fill: Vec<u8>,
        direct: &Direct,
    ) -> Result<ZarrSource<'a>> {
        let codecs = Codecs::of(array, swap_width);
        let (cell_shape, order) = match &codecs {
            Codecs::Plain(c) => (chunk_shape.to_vec(), c.order),
            Codecs::Sharded {
                inner_shape, chain, ..
            } => {
                let divides = inner_shape
                    .iter()
                    .zip(chunk_shape)
                    .all(|(&i, &c)| i > 0 && c % i == 0);
                if !divides {
                    return Err(Error::Malformed(format!(
                        "zarr array at {location}: inner chunk shape {inner_shape:?} does not \
                         divide the shard shape {chunk_shape:?}"
                    )));
                }
                (inner_shape.clone(), chain.order)
            }
            Codecs::Zarrs(_) => (chunk_shape.to_vec(), Order::C),
        };
        let cell_bytes = super::plan::checked_bytes(&cell_shape, elem).map_err(|_| {
            Error::invalid(format!(
                "zarr array at {location}: a chunk of shape {cell_shape:?} with {elem}-byte \
                 elements is too large to decode in memory"
            ))
        })?;
        let cell_strides = match order {
            Order::C => c_strides(&cell_shape, elem),
            Order::F => f_strides(&cell_shape, elem),
        };
        Ok(ZarrSource {
            array,
            location,
            codecs,
            elem,
            fill,
            chunk_shape: chunk_shape.to_vec(),
            cell_shape,
            cell_bytes,
            cell_strides,
            indexes: Mutex::new(HashMap::new()),
            root: match direct {
                Direct::Dir(d) => Some(d.clone()),
                _ => None,
            },
            #[cfg(feature = "object_store")]
            remote: match direct {
                Direct::Url(u) => Some(remote::Remote::new(u.clone())),
                _ => None,
            },
        })
    }

    /// Starts the fetch stage of an object store (only with the `object_store` feature).
    #[cfg(not(feature = "object_store"))]
    pub(crate) fn prefetch(&self, _units: &[super::plan::Unit]) -> Result<()> {
        Ok(())
    }

    /// Orders a read's units for fetching: the inner chunks of one shard next to each
    /// other, in index order (so that they are read together: one file region, or one
    /// coalesced range request); chunks of unsharded arrays stay in C order.
    pub(crate) fn order_units(&self, units: &mut [super::plan::Unit]) {
        let Codecs::Sharded { inner_shape, .. } = &self.codecs else {
            return;
        };
        // Two numbers per unit, no allocation (a sharded read has thousands of units);
        // the same order as `key_of`'s, which a grid too large for them falls back to.
        let per: Vec<u64> = self
            .chunk_shape
            .iter()
            .zip(inner_shape)
            .map(|(&c, &i)| (c / i.max(1)).max(1))
            .collect();
        let grid: Vec<u64> = self
            .array
            .shape()
            .iter()
            .zip(&self.chunk_shape)
            .map(|(&n, &c)| n.div_ceil(c.max(1)))
            .collect();
        if units
            .iter()
            .all(|u| shard_order(&u.cell, &per, &grid).is_some())
        {
            units.sort_by_cached_key(|u| shard_order(&u.cell, &per, &grid));
        } else {
            units.sort_by_cached_key(|u| self.key_of(&u.cell));
        }
    }

    /// The chain the engine decodes a unit's stored bytes with (`None`: zarrs decodes).
    pub(crate) fn chain(&self) -> Option<&Chain> {
        match &self.codecs {
            Codecs::Plain(c) | Codecs::Sharded { chain: c, .. } => Some(c),
            Codecs::Zarrs(_) => None,
        }
    }

    /// The store key of the chunk (shard) holding `cell`, and for a shard the inner
    /// chunk's position in its index.
    fn key_of(&self, cell: &[u64]) -> (Vec<u64>, Option<u64>) {
        match &self.codecs {
            Codecs::Sharded { inner_shape, .. } => {
                let mut shard = Vec::with_capacity(cell.len());
                let mut lin = 0u64;
                for k in 0..cell.len() {
                    let per = self.chunk_shape[k] / inner_shape[k];
                    shard.push(cell[k] / per);
                    lin = lin * per + cell[k] % per;
                }
                (shard, Some(lin))
            }
            _ => (cell.to_vec(), None),
        }
    }

    /// Names a unit in errors: `chunk [i, j] (key c/i/j) of <location>`.
    pub(crate) fn describe(&self, cell: &[u64]) -> String {
        let (chunk, inner) = self.key_of(cell);
        let key = self.array.chunk_key(&chunk);
        match inner {
            Some(i) => format!(
                "inner chunk {i} of shard {chunk:?} (key {key}) of {}",
                self.location
            ),
            None => format!("chunk {chunk:?} (key {key}) of {}", self.location),
        }
    }

    /// A storage error of reading `what`, with its kind and cause
    /// ([`crate::storage::storage_error`]).
    pub(crate) fn storage_err(&self, what: &str, e: zarrs::storage::StorageError) -> Error {
        crate::storage::storage_error("reading a zarr store", what, e)
    }

    /// An `io::Error` of reading `what` from an open file ([`Error::from_io`]).
    pub(crate) fn io_err(&self, what: &str, e: std::io::Error) -> Error {
        Error::from_io("reading a zarr store", format!("{what}: {e}"), e)
    }

    /// The stored bytes of `cell` (engine-decoded chains only). An object store's fetch
    /// stage hands each unit's bytes out once: a caller that needs them twice keeps them.
    pub(crate) fn fetch(&self, cell: &[u64]) -> Result<Stored> {
        #[cfg(feature = "object_store")]
        if let Some(got) = self.fetched(cell) {
            return got;
        }
        let (chunk, inner) = self.key_of(cell);
        let key: StoreKey = self.array.chunk_key(&chunk);
        let storage = self.array.storage();
        let Some(inner) = inner else {
            return match storage.get(&key) {
                Ok(Some(b)) => Ok(Stored::Bytes(b)),
                Ok(None) => Ok(Stored::Missing),
                Err(e) => Err(self.storage_err(&self.describe(cell), e)),
            };
        };
        let Some((offset, nbytes)) = self.entry(&chunk, &key, inner, cell)? else {
            return Ok(Stored::Missing);
        };
        match storage.get_partial(&key, ByteRange::FromStart(offset, Some(nbytes))) {
            Ok(Some(b)) if b.len() as u64 == nbytes => Ok(Stored::Bytes(b)),
            Ok(Some(b)) => Err(Error::Malformed(format!(
                "{}: the shard holds {} of the {nbytes} bytes its index names at offset {offset}",
                self.describe(cell),
                b.len()
            ))),
            Ok(None) => Ok(Stored::Missing),
            Err(e) => Err(self.storage_err(&self.describe(cell), e)),
        }
    }

    /// The index entry `(offset, nbytes)` of inner chunk `inner` of shard `chunk`
    /// (holding `cell`), or `None` when it is not stored; an entry past the index or
    /// whose range overflows is an error.
    fn entry(
        &self,
        chunk: &[u64],
        key: &StoreKey,
        inner: u64,
        cell: &[u64],
    ) -> Result<Option<(u64, u64)>> {
        let Some(index) = self.index(chunk, key)? else {
            return Ok(None);
        };
        let Some((offset, nbytes)) = self.lookup(&index, inner, cell)? else {
            return Ok(None);
        };
        if offset.checked_add(nbytes).is_none() || usize::try_from(nbytes).is_err() {
            return Err(Error::Malformed(format!(
                "{}: shard index entry (offset {offset}, {nbytes} bytes) overflows",
                self.describe(cell)
            )));
        }
        Ok(Some((offset, nbytes)))
    }

    /// Entry `inner` of a shard index (of the shard holding `cell`): `None` for the
    /// "not stored" marker; an entry past the index is an error.
    fn lookup(&self, index: &[(u64, u64)], inner: u64, cell: &[u64]) -> Result<Option<(u64, u64)>> {
        let &(offset, nbytes) = index.get(inner as usize).ok_or_else(|| {
            Error::Malformed(format!(
                "{}: the shard index has {} entries",
                self.describe(cell),
                index.len()
            ))
        })?;
        Ok((offset != u64::MAX || nbytes != u64::MAX).then_some((offset, nbytes)))
    }

    /// The index of shard `chunk` (read once, then cached for this read).
    fn index(&self, chunk: &[u64], key: &StoreKey) -> Result<Index> {
        if let Some(i) = self
            .indexes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(chunk)
        {
            return Ok(i.clone());
        }
        let Codecs::Sharded {
            inner_shape, index, ..
        } = &self.codecs
        else {
            return Ok(None);
        };
        let n: u64 = inner_shape
            .iter()
            .zip(&self.chunk_shape)
            .map(|(&i, &c)| c / i)
            .product();
        let got = self.read_index(chunk, key, n, index)?;
        self.indexes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(chunk.to_vec(), got.clone());
        Ok(got)
    }

    fn read_index(
        &self,
        chunk: &[u64],
        key: &StoreKey,
        n: u64,
        spec: &ShardIndex,
    ) -> Result<Index> {
        let what = || format!("index of shard {chunk:?} (key {key}) of {}", self.location);
        let len = index_len(spec, n, &what)?;
        let range = if spec.at_end {
            ByteRange::Suffix(len)
        } else {
            ByteRange::FromStart(0, Some(len))
        };
        let bytes = match self.array.storage().get_partial(key, range) {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(None),
            Err(e) => return Err(self.storage_err(&what(), e)),
        };
        self.parse_index(&bytes, chunk, key, n, spec)
    }

    /// The index of `n` inner chunks in `bytes` (exactly the index's stored bytes).
    fn parse_index(
        &self,
        bytes: &[u8],
        chunk: &[u64],
        key: &StoreKey,
        n: u64,
        spec: &ShardIndex,
    ) -> Result<Index> {
        let what = || format!("index of shard {chunk:?} (key {key}) of {}", self.location);
        let len = index_len(spec, n, &what)?;
        if bytes.len() as u64 != len {
            return Err(Error::Malformed(format!(
                "{}: {} bytes, expected {len} ({n} inner chunks)",
                what(),
                bytes.len()
            )));
        }
        let body = if spec.crc32c {
            codec::strip_crc32c(bytes, &what)?
        } else {
            bytes
        };
        let mut entries = Vec::new();
        entries
            .try_reserve_exact(n as usize)
            .map_err(|_| Error::invalid(format!("{}: cannot hold {n} index entries", what())))?;
        for e in body.chunks_exact(16) {
            let off = u64::from_le_bytes(e[..8].try_into().unwrap_or([0; 8]));
            let len = u64::from_le_bytes(e[8..].try_into().unwrap_or([0; 8]));
            entries.push((off, len));
        }
        Ok(Some(Arc::new(entries)))
    }

    /// Decodes unit `cell` into `dst` (exactly [`cell_bytes`](Self::cell_bytes) long,
    /// laid out with [`cell_strides`](Self::cell_strides)). Returns whether it was
    /// stored (a missing unit is the fill value).
    pub(crate) fn decode(&self, cell: &[u64], dst: &mut [u8]) -> Result<bool> {
        self.decode_in(cell, dst, &mut None)
    }

    /// [`decode`](Self::decode) keeping the stored file open in `last` for the next
    /// unit of the same file (a worker's inner chunks of one shard, in order, open the
    /// shard file once instead of once each). `last` must not outlive the read: a
    /// file replaced in the store meanwhile would still be read through it.
    pub(crate) fn decode_in(
        &self,
        cell: &[u64],
        dst: &mut [u8],
        last: &mut Option<OpenFile>,
    ) -> Result<bool> {
        let mut given = Some(dst);
        let stored = self.decode_stored(
            cell,
            || {
                given
                    .take()
                    .ok_or_else(|| Error::invalid("read engine: a unit decoded twice"))
            },
            last,
        )?;
        if !stored && let Some(dst) = given {
            self.check_len(cell, dst.len())?;
            self.fill_into(dst);
        }
        Ok(stored)
    }

    /// Decodes unit `cell` if it is stored, into the buffer `dst` gives (asked for only
    /// then, [`cell_bytes`](Self::cell_bytes) long); returns whether it was. A unit that
    /// is not stored asks for nothing: the caller places the fill value where the read
    /// needs it, so that a chunk that is not stored never costs memory of its size (a
    /// chunk shape far past the array's, `[2^31]` for an array of `[6]`, would
    /// otherwise fill gigabytes for a read of a few bytes).
    pub(crate) fn decode_stored<'d>(
        &self,
        cell: &[u64],
        dst: impl FnOnce() -> Result<&'d mut [u8]>,
        last: &mut Option<OpenFile>,
    ) -> Result<bool> {
        let Some(chain) = self.chain() else {
            let key = self.array.chunk_key(cell);
            match self.array.storage().size_key(&key) {
                Ok(Some(_)) => {}
                Ok(None) => return Ok(false),
                Err(e) => return Err(self.storage_err(&self.describe(cell), e)),
            }
            let dst = dst()?;
            self.check_len(cell, dst.len())?;
            return self.decode_with_zarrs(cell, dst);
        };
        if self.root.is_some() {
            let Some((offset, len)) = self.open_stored_with(cell, last)? else {
                return Ok(false);
            };
            let dst = dst()?;
            self.check_len(cell, dst.len())?;
            return self.decode_from_file(chain, cell, (offset, len), dst, last);
        }
        match self.fetch(cell)? {
            Stored::Missing => Ok(false),
            Stored::Bytes(b) => {
                let dst = dst()?;
                self.check_len(cell, dst.len())?;
                codec::decode_into(chain, &b, dst, &|| self.describe(cell))?;
                Ok(true)
            }
        }
    }

    /// Checks that a buffer of `len` bytes holds exactly one decoded unit.
    fn check_len(&self, cell: &[u64], len: usize) -> Result<()> {
        if len != self.cell_bytes {
            return Err(Error::invalid(format!(
                "decode of {}: {len} bytes given for a {}-byte chunk",
                self.describe(cell),
                self.cell_bytes
            )));
        }
        Ok(())
    }

    /// The byte range of `cell` in its file (`None`: the whole file), or `Err(None)`
    /// when the unit is not stored.
    fn file_range(&self, cell: &[u64]) -> Result<Option<FileRange>> {
        let (chunk, inner) = self.key_of(cell);
        let key: StoreKey = self.array.chunk_key(&chunk);
        let root = self
            .root
            .as_ref()
            .ok_or_else(|| Error::invalid("no store directory"))?;
        let path = root.join(key.as_str());
        let Some(inner) = inner else {
            return Ok(Some((path, None)));
        };
        Ok(self
            .entry(&chunk, &key, inner, cell)?
            .map(|range| (path, Some(range))))
    }

    /// Reads `cell`'s stored bytes (`offset`, `len` in the file `last` holds: see
    /// [`open_stored_with`](Self::open_stored_with)) and decodes them into `dst`: an
    /// uncompressed unit straight into `dst`, others from a mapping of the file (large
    /// ones) or the thread's buffer ([`with_stored_bytes`]).
    fn decode_from_file(
        &self,
        chain: &codec::Chain,
        cell: &[u64],
        (offset, len): (u64, u64),
        dst: &mut [u8],
        last: &mut Option<OpenFile>,
    ) -> Result<bool> {
        let file = last
            .as_ref()
            .ok_or_else(|| Error::invalid("read engine: no open file for a stored unit"))?;
        let what = || self.describe(cell);
        let io = |e: std::io::Error| self.io_err(&what(), e);
        let plain = chain.compression == codec::Compression::None && !chain.crc32c;
        if plain {
            if len != dst.len() as u64 {
                return Err(Error::Malformed(format!(
                    "{}: uncompressed chunk of {len} bytes, the chunk holds exactly {} bytes",
                    what(),
                    dst.len()
                )));
            }
            read_exact_at(file, dst, offset).map_err(io)?;
            if let Some(w) = chain.swap {
                devbuf_core::__private::host_ops::swap_in_place(dst, w);
            }
            return Ok(true);
        }
        // Stored bytes of a compressed chunk are bounded by what can be held, not by
        // the decoded size (incompressible data grows a little).
        let n = usize::try_from(len)
            .ok()
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or_else(|| Error::invalid(format!("{}: a {len}-byte chunk file", what())))?;
        with_stored_bytes(file, offset, n, &what, &io, |bytes| {
            codec::decode_into(chain, bytes, dst, &what)
        })?;
        Ok(true)
    }

    /// Whether units are inner chunks of shards (many units to a stored file).
    pub(crate) fn sharded(&self) -> bool {
        matches!(self.codecs, Codecs::Sharded { .. })
    }

    /// Whether chunk files are read directly (a filesystem store).
    pub(crate) fn has_files(&self) -> bool {
        self.root.is_some()
    }

    /// Opens the file holding `cell`'s stored bytes into `last`, unless `last` already
    /// holds it (the inner chunks of a shard, read one after another by one reader or
    /// worker, open their shard file once): returns the offset and length of `cell`'s
    /// bytes in `last`'s file, or `None` when the unit is not stored.
    pub(crate) fn open_stored_with(
        &self,
        cell: &[u64],
        last: &mut Option<OpenFile>,
    ) -> Result<Option<(u64, u64)>> {
        let Some((path, range)) = self.file_range(cell)? else {
            return Ok(None);
        };
        let what = || self.describe(cell);
        let io = |e: std::io::Error| self.io_err(&format!("{} ({})", what(), path.display()), e);
        if last.as_ref().is_none_or(|l| l.path != path) {
            *last = None;
            // Non-blocking open: a FIFO in place of a chunk file must not hang the read.
            let file = match std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
                .open(&path)
            {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(io(e)),
            };
            let meta = file.metadata().map_err(io)?;
            if !meta.is_file() {
                return Err(Error::invalid(format!(
                    "{}: {}",
                    what(),
                    super::super::fs_store::not_regular_message(&path, meta.file_type())
                )));
            }
            *last = Some(OpenFile {
                len: meta.len(),
                path,
                file,
            });
        }
        let len = last.as_ref().map_or(0, |l| l.len);
        match range {
            None => Ok(Some((0, len))),
            Some((o, n)) => {
                if o.checked_add(n).is_none_or(|end| end > len) {
                    return Err(Error::Malformed(format!(
                        "{}: the shard index names bytes {o}..{} of a {len}-byte shard file",
                        what(),
                        o.saturating_add(n),
                    )));
                }
                Ok(Some((o, n)))
            }
        }
    }

    /// Fills `dst` with the fill value.
    pub(crate) fn fill_into(&self, dst: &mut [u8]) {
        if self.fill.iter().all(|&b| b == 0) {
            dst.fill(0);
        } else {
            for e in dst.chunks_exact_mut(self.elem) {
                e.copy_from_slice(&self.fill);
            }
        }
    }

    /// A chain the engine does not decode itself: `zarrs` decodes the whole chunk, and
    /// its size is checked.
    /// Called for a stored chunk only ([`decode_stored`](Self::decode_stored)): zarrs
    /// would allocate and fill a whole chunk for one that is not stored.
    fn decode_with_zarrs(&self, cell: &[u64], dst: &mut [u8]) -> Result<bool> {
        let what = self.describe(cell);
        let bytes = super::super::guard(&format!("decoding {what}"), || {
            self.array
                .retrieve_chunk::<ArrayBytes<'static>>(cell)
                .map_err(|e| match e {
                    ArrayError::StorageError(s) => self.storage_err(&what, s),
                    e => Error::Malformed(format!("{what}: {e}")),
                })
        })?;
        let raw = bytes
            .into_fixed()
            .map_err(|e| Error::Malformed(format!("{what}: {e}")))?;
        if raw.len() != dst.len() {
            return Err(Error::Malformed(format!(
                "{what}: decodes to {} bytes, the chunk holds exactly {}",
                raw.len(),
                dst.len()
            )));
        }
        dst.copy_from_slice(&raw);
        Ok(true)
    }
}

/// Stored bytes of a shard index of `n` entries (`what` names it in the error).
pub(crate) fn index_len(spec: &ShardIndex, n: u64, what: &dyn Fn() -> String) -> Result<u64> {
    spec.len(n)
        .filter(|&l| l <= isize::MAX as u64)
        .ok_or_else(|| Error::Malformed(format!("{}: {n} inner chunks", what())))
}

/// Where inner-chunk cell `cell` comes in a read of a sharded array: its shard's
/// position in C order of a grid of `grid` shards, then its own in C order of its
/// shard (`per` inner chunks per axis). `None` when that does not fit 128 bits or the
/// cell lies outside the grid.
fn shard_order(cell: &[u64], per: &[u64], grid: &[u64]) -> Option<(u128, u128)> {
    if cell.len() != per.len() || cell.len() != grid.len() {
        return None;
    }
    let (mut shard, mut inner) = (0u128, 0u128);
    for k in 0..cell.len() {
        let s = cell[k] / per[k].max(1);
        if s >= grid[k] {
            return None;
        }
        shard = shard
            .checked_mul(u128::from(grid[k]))?
            .checked_add(u128::from(s))?;
        inner = inner
            .checked_mul(u128::from(per[k]))?
            .checked_add(u128::from(cell[k] % per[k].max(1)))?;
    }
    Some((shard, inner))
}

#[cfg(test)]
mod order_tests {
    use super::shard_order;

    #[test]
    fn shard_order_groups_units_by_shard_in_c_order() {
        // A 3 x 5 grid of shards of 2 x 3 inner chunks: every cell's key sorts like
        // (shard index vector, inner index in C order).
        let (per, grid) = ([2u64, 3], [3u64, 5]);
        let mut cells = Vec::new();
        for i in 0..6u64 {
            for j in 0..15u64 {
                cells.push(vec![i, j]);
            }
        }
        let by_vec = |c: &Vec<u64>| (vec![c[0] / 2, c[1] / 3], (c[0] % 2) * 3 + c[1] % 3);
        let mut a = cells.clone();
        a.sort_by_key(by_vec);
        let mut b = cells.clone();
        b.sort_by_key(|c| shard_order(c, &per, &grid).unwrap());
        assert_eq!(a, b);
        // Outside the grid, or too large for 128 bits: no key.
        assert_eq!(shard_order(&[6, 0], &per, &grid), None);
        assert_eq!(shard_order(&[1, 1, 1, 1], &[1; 4], &[u64::MAX; 4]), None);
        assert_eq!(
            shard_order(&[0, 0, 0, 1], &[1; 4], &[u64::MAX; 4]),
            Some((1, 0))
        );
    }
}
