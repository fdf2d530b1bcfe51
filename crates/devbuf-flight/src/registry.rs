//! Record batches a server serves by name: registered by the program
//! ([`Server::register`](super::Server::register), host or device memory) or uploaded by
//! clients (DoPut, kept in host memory), under one bound on the bytes they hold.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use arrow_schema::SchemaRef;

use super::encode::{Batch, memory_bytes};
use devbuf_core::error::{Error, Result};

/// One registered name: a schema and its batches.
#[derive(Debug)]
pub(crate) struct Entry {
    pub schema: SchemaRef,
    pub batches: Vec<Batch>,
    pub rows: u64,
    pub bytes: u64,
}

impl Entry {
    /// An entry of `batches` (all of `schema`).
    pub(crate) fn new(schema: SchemaRef, batches: Vec<Batch>) -> Result<Entry> {
        for (i, b) in batches.iter().enumerate() {
            if b.schema().fields() != schema.fields() {
                return Err(Error::invalid(format!(
                    "batch {i} has the schema {}, the first has {schema}",
                    b.schema()
                )));
            }
        }
        Ok(Entry {
            rows: batches.iter().map(|b| b.num_rows() as u64).sum(),
            bytes: batches.iter().map(memory_bytes).sum(),
            schema,
            batches,
        })
    }
}

/// Why an insertion was refused.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The name is taken.
    Exists,
    /// The bound would be passed: (bytes held, bytes asked, bound).
    Full(u64, u64, u64),
}

/// The named batches and the bytes they hold.
pub(crate) struct BatchRegistry {
    inner: Mutex<(BTreeMap<String, Arc<Entry>>, u64)>,
    limit: u64,
}

impl BatchRegistry {
    pub(crate) fn new(limit: u64) -> BatchRegistry {
        BatchRegistry {
            inner: Mutex::new((BTreeMap::new(), 0)),
            limit,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (BTreeMap<String, Arc<Entry>>, u64)> {
        // A panic while holding the lock leaves the map consistent (every update is one
        // insert or remove), so a poisoned lock is used as is.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `entry` under `name`; `replace` lets it take the place of an existing one.
    pub(crate) fn insert(
        &self,
        name: &str,
        entry: Entry,
        replace: bool,
    ) -> std::result::Result<(), Refused> {
        let mut g = self.lock();
        let old = g.0.get(name).map(|e| e.bytes);
        if old.is_some() && !replace {
            return Err(Refused::Exists);
        }
        let held = g.1 - old.unwrap_or(0);
        if held.saturating_add(entry.bytes) > self.limit {
            return Err(Refused::Full(held, entry.bytes, self.limit));
        }
        g.1 = held + entry.bytes;
        g.0.insert(name.to_string(), Arc::new(entry));
        Ok(())
    }

    /// The entry under `name`.
    pub(crate) fn get(&self, name: &str) -> Option<Arc<Entry>> {
        self.lock().0.get(name).cloned()
    }

    /// Removes `name`; whether it was there.
    pub(crate) fn remove(&self, name: &str) -> bool {
        let mut g = self.lock();
        match g.0.remove(name) {
            Some(e) => {
                g.1 -= e.bytes;
                true
            }
            None => false,
        }
    }

    /// Every name, sorted.
    pub(crate) fn names(&self) -> Vec<String> {
        self.lock().0.keys().cloned().collect()
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> u64 {
        self.lock().1
    }
}
