//! [`Scoped`]: a store whose calls run in an async call's scope, for the threads that
//! reach a store without the engine (zarrs' own rayon workers, which write host values
//! and decode what the engine leaves to zarrs): their object-store requests then run
//! on the caller's runtime and stop with the call, as the engine's do.

use std::sync::Arc;

use super::scope::{Scope, enter};
use devbuf_core::error::Result;
use devbuf_core::zarr::{BufferPrototype, ByteBuffer, ByteRequest, Store};

/// `inner`, each call made in `scope`.
pub(crate) struct Scoped {
    pub inner: Arc<dyn Store>,
    pub scope: Scope,
}

impl Scoped {
    fn run<T>(&self, f: impl FnOnce(&dyn Store) -> T) -> T {
        let _in = enter(Some(self.scope.clone()));
        f(self.inner.as_ref())
    }
}

impl Store for Scoped {
    fn get(
        &self,
        key: &str,
        prototype: &BufferPrototype,
        byte_range: Option<ByteRequest>,
    ) -> Result<Option<ByteBuffer>> {
        self.run(|s| s.get(key, prototype, byte_range))
    }

    fn set(&self, key: &str, value: &ByteBuffer) -> Result<()> {
        self.run(|s| s.set(key, value))
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.run(|s| s.delete(key))
    }

    fn exists(&self, key: &str) -> Result<bool> {
        self.run(|s| s.exists(key))
    }

    fn list(&self) -> Result<Vec<String>> {
        self.run(|s| s.list())
    }

    fn list_prefix(&self, prefix: &str) -> Result<Vec<String>> {
        self.run(|s| s.list_prefix(prefix))
    }

    fn list_dir(&self, prefix: &str) -> Result<Vec<String>> {
        self.run(|s| s.list_dir(prefix))
    }

    fn read_only(&self) -> bool {
        self.inner.read_only()
    }

    fn getsize(&self, key: &str) -> Result<Option<usize>> {
        self.run(|s| s.getsize(key))
    }
}
