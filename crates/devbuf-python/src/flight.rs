//! Arrow Flight from Python (`devbuf.flight`, docs/python.md): `Server` serves the zarr
//! arrays under a directory, `Client` reads them into host memory or onto a GPU, each
//! call blocking (the GIL released) or as a coroutine.
//!
//! Both run on the tokio runtime of `pyo3-async-runtimes` (one per process, started on
//! first use), so a client made by either constructor serves both kinds of call, and a
//! server started from Python keeps serving while Python runs.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use devbuf::cuda::Context;
use devbuf::flight::{Client, ClientOptions, Flight, Server, ServerConfig, Target};
use devbuf::zarr::{AxisSel, BufferPrototype, NDBuffer};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::array::new_array;
use crate::errors::IntoPy;
use crate::zarr::selection;

fn runtime() -> &'static tokio::runtime::Runtime {
    pyo3_async_runtimes::tokio::get_runtime()
}

fn prototype(device: Option<usize>) -> BufferPrototype {
    match device {
        None => BufferPrototype::Host,
        Some(d) => BufferPrototype::Device(d),
    }
}

/// A devbuf Flight server on this machine, serving the zarr arrays under `root`
/// (read-only) until `shutdown()` or the end of a `with` block.
#[pyclass(frozen, module = "devbuf.flight", name = "Server")]
pub struct PyServer {
    server: Mutex<Option<Server>>,
    uri: String,
    token: String,
}

#[pymethods]
impl PyServer {
    /// Starts serving `root` on `host:port` (port 0: any free port; read `uri`).
    /// `tokens`: the bearer tokens clients may present; None: one random token of 64
    /// hex digits, read from `token` (the server never runs without authentication).
    #[new]
    #[pyo3(signature = (root, *, host = "127.0.0.1", port = 0, tokens = None))]
    fn new(
        py: Python<'_>,
        root: PathBuf,
        host: &str,
        port: u16,
        tokens: Option<Vec<String>>,
    ) -> PyResult<Self> {
        let mut config = ServerConfig::default();
        config.root = Some(root);
        config.tokens = match tokens {
            Some(t) if t.is_empty() => {
                return Err(PyValueError::new_err(
                    "tokens must name at least one token (None: a random one)",
                ));
            }
            Some(t) => t,
            None => vec![devbuf::flight::generate_token().py()?],
        };
        let token = config.tokens[0].clone();
        let listen = format!("{host}:{port}");
        let server = py
            .detach(|| runtime().block_on(Server::start_async(config, listen)))
            .py()?;
        let uri = server.uri();
        Ok(PyServer {
            server: Mutex::new(Some(server)),
            uri,
            token,
        })
    }

    /// The URI clients connect to (`grpc://host:port`).
    #[getter]
    fn uri(&self) -> String {
        self.uri.clone()
    }

    /// The first of the server's tokens (`Client(server.uri, token=server.token)`).
    #[getter]
    fn token(&self) -> String {
        self.token.clone()
    }

    /// Stops serving: new calls are refused, running ones end. Idempotent.
    fn shutdown(&self, py: Python<'_>) -> PyResult<()> {
        let server = self.server.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(s) = server {
            py.detach(|| runtime().block_on(s.shutdown_async())).py()?;
        }
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.shutdown(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if self
            .server
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
        {
            "serving"
        } else {
            "stopped"
        };
        format!("<devbuf.flight.Server {} {state}>", self.uri)
    }
}

/// A client of a devbuf Flight server (`grpc://` or `grpc+tls://`).
#[pyclass(frozen, module = "devbuf.flight", name = "Client")]
pub struct PyClient {
    client: Arc<Client>,
    uri: String,
}

fn client_options(
    token: Option<String>,
    tls_ca: Option<Vec<u8>>,
    tls_domain: Option<String>,
    concurrency: Option<usize>,
    connect_timeout: Option<f64>,
) -> PyResult<ClientOptions> {
    let mut o = ClientOptions::default();
    o.token = token;
    o.tls_ca = tls_ca;
    o.tls_domain = tls_domain;
    if let Some(c) = concurrency {
        if c == 0 {
            return Err(PyValueError::new_err(
                "concurrency must be at least 1 (endpoints fetched at once)",
            ));
        }
        o.concurrency = c;
    }
    if let Some(t) = connect_timeout {
        if !(t.is_finite() && t > 0.0) {
            return Err(PyValueError::new_err(format!(
                "connect_timeout must be a positive number of seconds (got {t})"
            )));
        }
        o.connect_timeout = Duration::from_secs_f64(t);
    }
    Ok(o)
}

fn flight_dict<'py>(py: Python<'py>, f: &Flight) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    match &f.target {
        Some(Target::Array(p)) => {
            d.set_item("kind", "array")?;
            d.set_item("path", p)?;
        }
        Some(Target::Batch(n)) => {
            d.set_item("kind", "batch")?;
            d.set_item("path", n)?;
        }
        None => {
            d.set_item("kind", py.None())?;
            d.set_item("path", py.None())?;
        }
    }
    d.set_item("endpoints", f.endpoints.len())?;
    d.set_item("total_records", f.total_records)?;
    d.set_item("total_bytes", f.total_bytes)?;
    let meta = PyDict::new(py);
    for (k, v) in f.schema.metadata() {
        meta.set_item(k, v)?;
    }
    d.set_item("metadata", meta)?;
    Ok(d)
}

/// Waits for the device after a read onto it (the exports promise ready data).
async fn synchronized(nd: NDBuffer, device: Option<usize>) -> PyResult<NDBuffer> {
    if let Some(d) = device {
        tokio::task::spawn_blocking(move || Context::new(d)?.synchronize())
            .await
            .map_err(|e| {
                PyRuntimeError::new_err(format!("the device synchronisation task failed: {e}"))
            })?
            .py()?;
    }
    Ok(nd)
}

async fn read(
    client: Arc<Client>,
    path: String,
    sel: Option<Vec<AxisSel>>,
    device: Option<usize>,
) -> PyResult<NDBuffer> {
    let proto = prototype(device);
    let nd = match &sel {
        None => client.read_async(&path, .., &proto).await,
        Some(s) => client.read_async(&path, s.as_slice(), &proto).await,
    }
    .py()?;
    synchronized(nd, device).await
}

#[pymethods]
impl PyClient {
    /// Connects to `uri`. `token`: a bearer token; `tls_ca` / `tls_domain`: the PEM
    /// certificate authority and the name to verify (`grpc+tls://`); `concurrency`:
    /// endpoints fetched at once; `connect_timeout` in seconds.
    #[new]
    #[pyo3(signature = (uri, *, token = None, tls_ca = None, tls_domain = None, concurrency = None, connect_timeout = None))]
    fn new(
        py: Python<'_>,
        uri: String,
        token: Option<String>,
        tls_ca: Option<Vec<u8>>,
        tls_domain: Option<String>,
        concurrency: Option<usize>,
        connect_timeout: Option<f64>,
    ) -> PyResult<Self> {
        let o = client_options(token, tls_ca, tls_domain, concurrency, connect_timeout)?;
        let client = py
            .detach(|| runtime().block_on(Client::connect_async(&uri, &o)))
            .py()?;
        Ok(PyClient {
            client: Arc::new(client),
            uri,
        })
    }

    /// The constructor as a coroutine: `await Client.connect_async(uri, ...)`.
    #[staticmethod]
    #[pyo3(signature = (uri, *, token = None, tls_ca = None, tls_domain = None, concurrency = None, connect_timeout = None))]
    fn connect_async(
        py: Python<'_>,
        uri: String,
        token: Option<String>,
        tls_ca: Option<Vec<u8>>,
        tls_domain: Option<String>,
        concurrency: Option<usize>,
        connect_timeout: Option<f64>,
    ) -> PyResult<Bound<'_, PyAny>> {
        let o = client_options(token, tls_ca, tls_domain, concurrency, connect_timeout)?;
        crate::aio::coroutine(py, async move {
            let client = Client::connect_async(&uri, &o).await.py()?;
            Ok(PyClient {
                client: Arc::new(client),
                uri,
            })
        })
    }

    /// What the server offers under `prefix`: a list of dicts (`kind` "array" or
    /// "batch", `path`, `endpoints`, `total_records`, `total_bytes`, the schema's
    /// `metadata`).
    #[pyo3(signature = (prefix = ""))]
    fn list<'py>(&self, py: Python<'py>, prefix: &str) -> PyResult<Bound<'py, PyList>> {
        let client = self.client.clone();
        let prefix = prefix.to_string();
        let flights = py
            .detach(|| runtime().block_on(client.list_async(&prefix)))
            .py()?;
        let items = flights
            .iter()
            .map(|f| flight_dict(py, f))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// `list` as a coroutine.
    #[pyo3(signature = (prefix = ""))]
    fn list_async<'py>(&self, py: Python<'py>, prefix: &str) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client.clone();
        let prefix = prefix.to_string();
        crate::aio::coroutine(py, async move {
            let flights = client.list_async(&prefix).await.py()?;
            Python::attach(|py| -> PyResult<Py<PyList>> {
                let items = flights
                    .iter()
                    .map(|f| flight_dict(py, f))
                    .collect::<PyResult<Vec<_>>>()?;
                Ok(PyList::new(py, items)?.unbind())
            })
        })
    }

    /// Reads a selection of the array at `path` (under the server's root) into host
    /// memory (`device=None`) or onto GPU `device`, as a `devbuf.Array`: numpy's basic
    /// indexing (ints, slices with positive steps, a trailing `...`; None = all),
    /// checked by the server. Never a partial result: an error when any endpoint fails.
    #[pyo3(signature = (path, selection = None, *, device = None))]
    fn read(
        &self,
        py: Python<'_>,
        path: String,
        selection: Option<&Bound<'_, PyAny>>,
        device: Option<usize>,
    ) -> PyResult<Py<PyAny>> {
        let sel = self::selection(selection, None)?;
        let client = self.client.clone();
        let nd = py.detach(|| runtime().block_on(read(client, path, sel, device)))?;
        new_array(py, nd)
    }

    /// `read` as a coroutine. Cancelling the awaiting task cancels the read: every
    /// endpoint's stream is dropped and the memory being assembled is freed.
    #[pyo3(signature = (path, selection = None, *, device = None))]
    fn read_async<'py>(
        &self,
        py: Python<'py>,
        path: String,
        selection: Option<&Bound<'py, PyAny>>,
        device: Option<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let sel = self::selection(selection, None)?;
        let client = self.client.clone();
        crate::aio::coroutine(py, async move {
            let nd = read(client, path, sel, device).await?;
            Python::attach(|py| new_array(py, nd))
        })
    }

    fn __repr__(&self) -> String {
        format!("<devbuf.flight.Client {}>", self.uri)
    }
}
