//! Coroutines: a Rust future as a Python coroutine (`python/devbuf/_aio.py`).
//!
//! `pyo3_async_runtimes::tokio::future_into_py` needs a running event loop when it is
//! called; Python code expects `asyncio.run(obj.read_async())` to work, which makes the
//! coroutine first and runs the loop after. So the `*_async` calls return
//! `devbuf._aio.run(start)`, a real coroutine whose `start()` hands the future to the
//! runtime once awaited. Cancelling the awaiting task cancels the future (dropped).

use std::future::Future;
use std::sync::Mutex;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyCFunction;

/// `fut` as a Python coroutine, started on devbuf's tokio runtime when awaited.
pub fn coroutine<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let cell = Mutex::new(Some(fut));
    let start = PyCFunction::new_closure(
        py,
        None,
        None,
        move |args, _kwargs| -> PyResult<Py<PyAny>> {
            let fut = cell
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .ok_or_else(|| PyRuntimeError::new_err("this coroutine was awaited already"))?;
            Ok(pyo3_async_runtimes::tokio::future_into_py(args.py(), fut)?.unbind())
        },
    )?;
    py.import("devbuf._aio")?.getattr("run")?.call1((start,))
}
