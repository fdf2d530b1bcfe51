//! How a blocking call runs its async form: outside any tokio runtime on the client's
//! own runtime (started when first needed), on a multi-thread runtime on that runtime
//! after handing the thread over (`block_in_place`), and on a current-thread runtime not
//! at all (an error naming the async form: blocking there would stall the runtime, and
//! with it the connections the call waits on).

use std::future::Future;

use tokio::runtime::{Handle, Runtime, RuntimeFlavor};

use super::{Client, ClientOptions};
use devbuf_core::error::{Error, Result};

/// Where a blocking call was made.
pub(super) enum Context {
    /// On no tokio runtime.
    Outside,
    /// On a multi-thread runtime (a worker, its `block_on` or a blocking thread).
    MultiThread(Handle),
    /// On a current-thread runtime (or one of its blocking threads).
    CurrentThread,
}

/// Where the calling thread is.
pub(super) fn context() -> Context {
    match Handle::try_current() {
        Err(_) => Context::Outside,
        Ok(h) if matches!(h.runtime_flavor(), RuntimeFlavor::MultiThread) => {
            Context::MultiThread(h)
        }
        Ok(_) => Context::CurrentThread,
    }
}

/// The error of a blocking call made on a current-thread runtime.
pub(super) fn would_block(async_form: &str) -> Error {
    Error::invalid(format!(
        "a blocking devbuf Flight client call was made on a current-thread tokio runtime, \
         which it would block: await {async_form} instead (or make the call from a thread of \
         its own or on a multi-thread runtime)"
    ))
}

/// An error unless the caller runs on a tokio runtime (an async call polled by another
/// executor).
pub(super) fn need_tokio(what: &str) -> Result<()> {
    Handle::try_current().map(|_| ()).map_err(|_| {
        Error::invalid(format!(
            "{what} was polled outside a tokio runtime: the Flight client's async calls run \
             on the caller's tokio runtime (or use the blocking form)"
        ))
    })
}

/// The client's own runtime.
pub(super) fn build(options: &ClientOptions) -> Result<Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(options.runtime_threads)
        .thread_name("devbuf-flight-client")
        .enable_all()
        .build()
        .map_err(|e| Error::from_io("starting the Flight client's runtime", e.to_string(), e))
}

impl Client {
    /// Runs `f`, the work of a blocking call whose async form is `async_form` (as the
    /// module docs say).
    pub(crate) fn block_on<T>(
        &self,
        async_form: &'static str,
        f: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        match context() {
            Context::Outside => {
                let rt = match self.runtime.get() {
                    Some(rt) => rt,
                    None => {
                        let rt = build(&self.options)?;
                        // Another thread may have set one first: then this one goes.
                        let _ = self.runtime.set(rt);
                        self.runtime.get().ok_or_else(|| {
                            Error::invalid("internal: the Flight client's runtime is missing")
                        })?
                    }
                };
                rt.block_on(f)
            }
            Context::MultiThread(h) => tokio::task::block_in_place(|| h.block_on(f)),
            Context::CurrentThread => Err(would_block(async_form)),
        }
    }
}
