//! The object-store side of [`Source`]: before the workers start, a read's units become
//! requests (whole chunks; for shards, each needed index once and then byte ranges of
//! the inner chunks, neighbours in one request), fetched ahead of the decoders by the
//! store's [`Prefetch`] stage; the workers then take their unit's bytes from it.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use zarrs::storage::StoreKey;

use super::super::codec::Codecs;
use super::super::plan::Unit;
use super::{Source, Stored};
use crate::error::{Error, Result};
use crate::zarr::object_store::{FetchRequest, Prefetch, Span, UrlStore};

/// Where a unit's stored bytes come from in the fetch stage.
enum Slot {
    /// Not stored (a missing entry of a shard index).
    Missing,
    /// All of request `i`'s bytes.
    Whole(usize),
    /// Bytes `range` of request `i`'s response.
    Part(usize, Range<usize>),
}

struct Started {
    prefetch: Prefetch,
    slots: HashMap<Vec<u64>, Slot>,
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

impl Source<'_> {
    /// Starts fetching the stored bytes of `units` (in the order the workers claim
    /// them) when the array lives in an object store; does nothing otherwise.
    pub(crate) fn prefetch(&self, units: &[Unit]) -> Result<()> {
        let Some(remote) = &self.remote else {
            return Ok(());
        };
        if self.chain().is_none() || units.is_empty() {
            return Ok(()); // zarrs decodes these chunks through the store itself
        }
        if let Codecs::Sharded { .. } = &self.codecs {
            self.load_indexes(remote, units)?;
        }
        let coalesce = remote.store.options().coalesce_bytes;
        let mut requests: Vec<FetchRequest> = Vec::new();
        let mut slots = HashMap::with_capacity(units.len());
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
        let _ = remote.started.set(Started { prefetch, slots });
        Ok(())
    }

    /// Reads the index of every shard `units` touch, all at once, into the cache.
    fn load_indexes(&self, remote: &Remote, units: &[Unit]) -> Result<()> {
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
                if !cached.contains_key(&chunk) && seen.insert(chunk.clone()) {
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
        };
        Some(match (started.prefetch.take(i), part) {
            (Err(e), _) => Err(e),
            (Ok(None), None) => Ok(Stored::Missing),
            (Ok(None), Some(_)) => Err(Error::Io {
                op: "reading a zarr store",
                message: format!(
                    "{}: the shard disappeared after its index was read",
                    self.describe(cell)
                ),
            }),
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

/// At most this many bytes in one coalesced range request.
const MAX_COALESCED: u64 = 16 << 20;
