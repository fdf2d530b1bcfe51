//! The object-store side of [`ZarrSource`]: before the workers start, a read's units become
//! requests (whole chunks; whole shards when the read needs all their inner chunks;
//! for other shards, each needed index once and then byte ranges of the inner chunks,
//! neighbours in one request), fetched ahead of the decoders by the
//! store's [`Prefetch`] stage; the workers then take their unit's bytes from it.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use zarrs::storage::StoreKey;

use super::super::codec::Codecs;
use super::super::plan::Unit;
use super::{Stored, ZarrSource};
use crate::object_store::{FetchRequest, Prefetch, Span, UrlStore};
use devbuf_core::error::{Error, Result};

/// Where a unit's stored bytes come from in the fetch stage.
enum Slot {
    /// Not stored (a missing entry of a shard index).
    Missing,
    /// All of request `i`'s bytes.
    Whole(usize),
    /// Bytes `range` of request `i`'s response.
    Part(usize, Range<usize>),
    /// Inner chunk `inner` of the whole shard that request `i` fetches (its index is
    /// read from the shard's own bytes when they arrive).
    InShard(usize, u64),
}

struct Started {
    prefetch: Prefetch,
    slots: HashMap<Vec<u64>, Slot>,
    /// The shard (coordinates) each whole-shard request fetches, and its index once
    /// parsed (by the first unit that takes it).
    shards: HashMap<usize, Vec<u64>>,
    parsed: std::sync::Mutex<HashMap<usize, super::Index>>,
}

/// An array's object store and, once started, the read's fetch stage.
pub(crate) struct Remote {
    store: Arc<UrlStore>,
    started: OnceLock<Started>,
}

impl Remote {
    pub(crate) fn new(store: Arc<UrlStore>) -> Remote {
        Remote {
            store,
            started: OnceLock::new(),
        }
    }
}

impl ZarrSource<'_> {
    /// Starts fetching the stored bytes of `units` (in the order the workers claim
    /// them) when the array lives in an object store; does nothing otherwise.
    pub(crate) fn prefetch(&self, units: &[Unit]) -> Result<()> {
        let Some(remote) = &self.remote else {
            return Ok(());
        };
        if self.chain().is_none() || units.is_empty() {
            return Ok(()); // zarrs decodes these chunks through the store itself
        }
        let mut requests: Vec<FetchRequest> = Vec::new();
        let mut slots = HashMap::with_capacity(units.len());
        let mut shards = HashMap::new();
        // Shards whose every inner chunk the read needs: one GET of the whole object
        // each (index and data together). The others: their indexes first, then byte
        // ranges of the inner chunks needed.
        let whole = self.whole_shards(units);
        if let Codecs::Sharded { .. } = &self.codecs {
            self.load_indexes(remote, units, &whole)?;
        }
        let coalesce = remote.store.options().coalesce_bytes;
        // The request the previous unit's bytes went to, with its shard and span.
        let mut open: Option<(Vec<u64>, usize, Range<u64>)> = None;
        for u in units {
            let (chunk, inner) = self.key_of(&u.cell);
            let key = self.array.chunk_key(&chunk);
            let Some(inner) = inner else {
                requests.push(FetchRequest {
                    key: key.as_str().to_string(),
                    span: Span::Whole,
                    expect: self.cell_bytes as u64,
                    users: 1,
                });
                slots.insert(u.cell.clone(), Slot::Whole(requests.len() - 1));
                continue;
            };
            if whole.contains(&chunk) {
                let i = match open.as_ref() {
                    Some((shard, i, span)) if *shard == chunk && span.is_empty() => *i,
                    _ => {
                        requests.push(FetchRequest {
                            key: key.as_str().to_string(),
                            span: Span::Whole,
                            expect: self.shard_bytes(),
                            users: 0,
                        });
                        let i = requests.len() - 1;
                        shards.insert(i, chunk.clone());
                        open = Some((chunk.clone(), i, 0..0));
                        i
                    }
                };
                requests[i].users += 1;
                slots.insert(u.cell.clone(), Slot::InShard(i, inner));
                continue;
            }
            let Some((offset, nbytes)) = self.entry(&chunk, &key, inner, &u.cell)? else {
                slots.insert(u.cell.clone(), Slot::Missing);
                continue;
            };
            let end = offset + nbytes; // checked by `entry`
            // Joins the open request when it is the same shard and close enough after.
            // Only units next to each other in claim order share a request (the units
            // come shard by shard, see `order_units`): a request's bytes are then all
            // taken soon after it arrives, and the read-ahead budget cannot fill with
            // requests whose last users wait behind a request it holds back.
            if let Some((shard, i, span)) = open.as_mut()
                && *shard == chunk
                && !span.is_empty()
                && offset >= span.start
                && offset.saturating_sub(span.end) <= coalesce
                && end.max(span.end) - span.start <= MAX_COALESCED
            {
                span.end = span.end.max(end);
                let r = &mut requests[*i];
                r.span = Span::Bytes(span.clone());
                r.expect = span.end - span.start;
                r.users += 1;
                let at = (offset - span.start) as usize;
                slots.insert(u.cell.clone(), Slot::Part(*i, at..at + nbytes as usize));
                continue;
            }
            requests.push(FetchRequest {
                key: key.as_str().to_string(),
                span: Span::Bytes(offset..end),
                expect: nbytes,
                users: 1,
            });
            let i = requests.len() - 1;
            slots.insert(u.cell.clone(), Slot::Part(i, 0..nbytes as usize));
            open = Some((chunk, i, offset..end));
        }
        let prefetch = Prefetch::start(remote.store.clone(), requests)?;
        let _ = remote.started.set(Started {
            prefetch,
            slots,
            shards,
            parsed: std::sync::Mutex::new(HashMap::new()),
        });
        Ok(())
    }

    /// The shards all of whose inner chunks `units` hold (and whose index is not
    /// cached yet).
    fn whole_shards(&self, units: &[Unit]) -> std::collections::HashSet<Vec<u64>> {
        let Codecs::Sharded { inner_shape, .. } = &self.codecs else {
            return Default::default();
        };
        let per: u64 = inner_shape
            .iter()
            .zip(&self.chunk_shape)
            .map(|(&i, &c)| c / i)
            .product();
        let mut count: HashMap<Vec<u64>, u64> = HashMap::new();
        for u in units {
            *count.entry(self.key_of(&u.cell).0).or_insert(0) += 1;
        }
        let cached = self.indexes.lock().unwrap_or_else(|p| p.into_inner());
        count
            .into_iter()
            .filter(|(s, n)| *n == per && !cached.contains_key(s))
            .map(|(s, _)| s)
            .collect()
    }

    /// Decoded bytes of a whole shard (the read-ahead budget's estimate of its size).
    fn shard_bytes(&self) -> u64 {
        let cells: u64 = self
            .chunk_shape
            .iter()
            .zip(&self.cell_shape)
            .map(|(&c, &i)| c / i.max(1))
            .product();
        cells.saturating_mul(self.cell_bytes as u64)
    }

    /// Reads the index of every shard `units` touch, all at once, into the cache.
    fn load_indexes(
        &self,
        remote: &Remote,
        units: &[Unit],
        whole: &std::collections::HashSet<Vec<u64>>,
    ) -> Result<()> {
        let Codecs::Sharded {
            inner_shape, index, ..
        } = &self.codecs
        else {
            return Ok(());
        };
        let n: u64 = inner_shape
            .iter()
            .zip(&self.chunk_shape)
            .map(|(&i, &c)| c / i)
            .product();
        let len = super::index_len(index, n, &|| format!("shard index of {}", self.location))?;
        let mut shards: Vec<Vec<u64>> = Vec::new();
        {
            let cached = self.indexes.lock().unwrap_or_else(|p| p.into_inner());
            let mut seen = std::collections::HashSet::new();
            for u in units {
                let (chunk, _) = self.key_of(&u.cell);
                if !cached.contains_key(&chunk)
                    && !whole.contains(&chunk)
                    && seen.insert(chunk.clone())
                {
                    shards.push(chunk);
                }
            }
        }
        if shards.is_empty() {
            return Ok(());
        }
        let keys: Vec<StoreKey> = shards.iter().map(|c| self.array.chunk_key(c)).collect();
        let requests = keys
            .iter()
            .map(|k| FetchRequest {
                key: k.as_str().to_string(),
                span: if index.at_end {
                    Span::Last(len)
                } else {
                    Span::Bytes(0..len)
                },
                expect: len,
                users: 1,
            })
            .collect();
        let fetched = Prefetch::start(remote.store.clone(), requests)?;
        for (i, (chunk, key)) in shards.iter().zip(&keys).enumerate() {
            let parsed = match fetched.take(i)? {
                None => None,
                Some(bytes) => self.parse_index(&bytes, chunk, key, n, index)?,
            };
            self.indexes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(chunk.clone(), parsed);
        }
        Ok(())
    }

    /// `cell`'s stored bytes from the fetch stage, when it is running and knows the
    /// unit.
    pub(crate) fn fetched(&self, cell: &[u64]) -> Option<Result<Stored>> {
        let started = self.remote.as_ref()?.started.get()?;
        let slot = started.slots.get(cell)?;
        let (i, part) = match slot {
            Slot::Missing => return Some(Ok(Stored::Missing)),
            Slot::Whole(i) => (*i, None),
            Slot::Part(i, r) => (*i, Some(r.clone())),
            Slot::InShard(i, inner) => return Some(self.in_shard(started, *i, *inner, cell)),
        };
        Some(match (started.prefetch.take(i), part) {
            (Err(e), _) => Err(e),
            (Ok(None), None) => Ok(Stored::Missing),
            (Ok(None), Some(_)) => Err(Error::not_found(format!(
                "reading a zarr store: {}: the shard disappeared after its index was read",
                self.describe(cell)
            ))),
            (Ok(Some(b)), None) => Ok(Stored::Bytes(b)),
            (Ok(Some(b)), Some(r)) if r.end <= b.len() => Ok(Stored::Bytes(b.slice(r))),
            (Ok(Some(b)), Some(r)) => Err(Error::Malformed(format!(
                "{}: bytes {}..{} of a {}-byte response",
                self.describe(cell),
                r.start,
                r.end,
                b.len()
            ))),
        })
    }
}

impl ZarrSource<'_> {
    /// Inner chunk `inner` (of `cell`) of the whole shard that request `i` fetched.
    fn in_shard(&self, started: &Started, i: usize, inner: u64, cell: &[u64]) -> Result<Stored> {
        let Some(bytes) = started.prefetch.take(i)? else {
            return Ok(Stored::Missing); // no shard: every inner chunk is the fill value
        };
        let index = {
            let mut parsed = started.parsed.lock().unwrap_or_else(|p| p.into_inner());
            match parsed.get(&i) {
                Some(ix) => ix.clone(),
                None => {
                    let ix = self.index_in_shard(&started.shards[&i], &bytes)?;
                    parsed.insert(i, ix.clone());
                    ix
                }
            }
        };
        let Some(index) = index else {
            return Ok(Stored::Missing);
        };
        let Some((offset, nbytes)) = self.lookup(&index, inner, cell)? else {
            return Ok(Stored::Missing);
        };
        match offset.checked_add(nbytes) {
            Some(end) if end <= bytes.len() as u64 => {
                Ok(Stored::Bytes(bytes.slice(offset as usize..end as usize)))
            }
            _ => Err(Error::Malformed(format!(
                "{}: the shard index names bytes {offset}..{} of a {}-byte shard",
                self.describe(cell),
                offset.saturating_add(nbytes),
                bytes.len()
            ))),
        }
    }

    /// The index of shard `chunk`, read from the shard's bytes.
    fn index_in_shard(&self, chunk: &[u64], bytes: &[u8]) -> Result<super::Index> {
        let Codecs::Sharded {
            inner_shape, index, ..
        } = &self.codecs
        else {
            return Err(Error::invalid("not a sharded array"));
        };
        let n: u64 = inner_shape
            .iter()
            .zip(&self.chunk_shape)
            .map(|(&i, &c)| c / i)
            .product();
        let key = self.array.chunk_key(chunk);
        let len = super::index_len(index, n, &|| {
            format!("index of shard {chunk:?} of {}", self.location)
        })?;
        if (bytes.len() as u64) < len {
            return Err(Error::Malformed(format!(
                "shard {chunk:?} (key {key}) of {}: {} bytes, shorter than its {len}-byte index",
                self.location,
                bytes.len()
            )));
        }
        let at = if index.at_end {
            bytes.len() - len as usize
        } else {
            0
        };
        self.parse_index(&bytes[at..at + len as usize], chunk, &key, n, index)
    }
}

/// At most this many bytes in one coalesced range request.
const MAX_COALESCED: u64 = 16 << 20;
