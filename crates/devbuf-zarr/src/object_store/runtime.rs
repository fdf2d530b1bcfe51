//! The tokio runtime object stores run on: one per process, started on first use, with
//! a few I/O threads (requests are I/O-bound; decoding runs on the read engine's own
//! workers, never here).

use std::future::Future;
use std::sync::{Arc, OnceLock};

use devbuf_core::error::{Error, Result};

static RUNTIME: OnceLock<std::result::Result<tokio::runtime::Runtime, Arc<std::io::Error>>> =
    OnceLock::new();

/// The process's object-store runtime.
pub(crate) fn runtime() -> Result<&'static tokio::runtime::Runtime> {
    RUNTIME
        .get_or_init(|| {
            let threads = std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .clamp(2, 8);
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .thread_name("devbuf-io")
                .enable_all()
                .build()
                .map_err(Arc::new)
        })
        .as_ref()
        .map_err(|e| Error::from_io("starting the object-store runtime", e, e.clone()))
}

/// Runs `fut` to completion from synchronous code.
///
/// Called from a thread of a multi-threaded tokio runtime (a caller's async code), the
/// thread is first handed over with `block_in_place`; from a current-thread runtime,
/// where blocking would deadlock it, it is an error saying what to do instead.
///
/// Called from a thread of an async call (its [`Scope`](crate::aio::scope::Scope) has the
/// caller's runtime), `fut` runs on the caller's runtime instead, and returns early
/// when the call's future is dropped; devbuf's runtime is not started.
pub(crate) fn block_on<F: Future>(fut: F) -> Result<F::Output> {
    if let Some(crate::aio::scope::Scope { handle, stop }) = crate::aio::scope::current() {
        // An async call polled outside tokio: devbuf's runtime, still stoppable.
        let h = match handle {
            Some(h) => h,
            None => runtime()?.handle().clone(),
        };
        return crate::aio::scope::block_on_caller(&h, &stop, fut);
    }
    match tokio::runtime::Handle::try_current() {
        Err(_) => Ok(runtime()?.block_on(fut)),
        Ok(h) => match h.runtime_flavor() {
            tokio::runtime::RuntimeFlavor::MultiThread => {
                let rt = runtime()?;
                Ok(tokio::task::block_in_place(|| rt.handle().block_on(fut)))
            }
            _ => Err(Error::invalid(
                "a blocking devbuf object-store call was made from a current-thread tokio \
                 runtime, which it would block; use its async form (e.g. \
                 ZarrArray::open_async, read(..).to_async, AsyncStore::get_async), or call \
                 it from a thread of its own or a multi-threaded runtime",
            )),
        },
    }
}
