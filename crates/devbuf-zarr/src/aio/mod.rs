//! The async API's machinery: the caller's context carried to the engine's threads
//! (`scope`) and blocking work as a future that cancels on drop (`task`).

pub(crate) mod scope;
#[cfg(feature = "object_store")]
pub(crate) mod scoped_store;
pub(crate) mod task;

pub(crate) use task::{Worker, spawn};
