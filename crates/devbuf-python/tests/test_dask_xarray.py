"""xarray.open_zarr and dask.array.from_zarr computed on a distributed LocalCluster of
worker processes, reading through devbuf.zarr.CodecPipeline (docs/python.md, "xarray
and Dask"): values bit-exact with zarr-python's default pipeline, and the reads counted
in the worker processes (devbuf.zarr.read_counts, collected with client.run) to show
that devbuf's engine, not the fallback, did them.

Where zarr-python chooses the pipeline matters: when the array is *opened* (zarr's
AsyncArray holds its pipeline object, and that object is what pickles into Dask's task
graph). So the process that opens the array (here the client, inside
zarr.config.set) selects the pipeline; the workers get the pipeline object, whose engine
reopens the array there. The workers are also started with the pipeline selected in
their environment (ZARR_CODEC_PIPELINE__PATH), for arrays opened in a task. What a read
returns (numpy, or cupy under zarr.config.enable_gpu()) is the reading process's config:
for the GPU variant the workers' environment enables zarr's GPU buffers.
"""

import os

import numpy as np
import pytest

zarr = pytest.importorskip("zarr", reason="zarr-python is not installed (pip install zarr==3.1.6)")
da = pytest.importorskip("dask.array", reason="dask is not installed (pip install 'dask[array]' distributed)")
distributed = pytest.importorskip("distributed", reason="dask's distributed is not installed (pip install distributed)")

import dask  # noqa: E402
from zarr.codecs import BloscCodec, ZstdCodec  # noqa: E402

import devbuf  # noqa: E402
from devbuf.zarr import read_counts  # noqa: E402

PIPELINE = "devbuf.zarr.CodecPipeline"
ENGINE_KINDS = {"engine", "engine (chunks)", "engine-bytes", "engine-bytes (chunks)"}
# Bounds: the cluster's start (its workers are new Python processes) and each compute.
START_S = 120
COMPUTE_S = 120


def _gpu_reason():
    # The GPU's reason first: without a GPU that is the one that matters.
    if not devbuf.is_available():
        return f"no GPU: {devbuf.unavailable_reason()}"
    try:
        import cupy  # noqa: F401
    except ImportError:
        return "cupy is not installed"
    return None


GPU_WHY = _gpu_reason()


# --------------------------------------------------------------------------- stores


def _data(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return (rng.standard_normal(shape) * 1000).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


# name: (zarr_format, shape, chunks, shards, dtype, compressors); a few MiB each.
STORES = {
    "v3-zstd": (3, (1024, 768), (128, 96), None, "float32", lambda: ZstdCodec(level=3)),
    "v2-blosc": (2, (700, 900), (100, 128), None, "int16", None),
    "v2-zstd": (2, (512, 640), (64, 80), None, "float64", None),
    "v3-sharded": (3, (1000, 600), (50, 60), (200, 300), "uint32", lambda: ZstdCodec(level=1)),
}


def _make(root, name, seed):
    import numcodecs

    fmt, shape, chunks, shards, dtype, comp = STORES[name]
    if fmt == 2:
        compressors = {
            "v2-blosc": numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
            "v2-zstd": numcodecs.Zstd(level=3),
        }[name]
    else:
        compressors = comp()
    data = _data(shape, dtype, seed)
    path = os.path.join(root, f"{name}.zarr")
    z = zarr.create_array(
        path,
        shape=shape,
        chunks=chunks,
        shards=shards,
        dtype=dtype,
        zarr_format=fmt,
        compressors=compressors,
        fill_value=0,
    )
    z[:] = data
    return path


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("dask-stores")
    return {name: _make(str(root), name, seed) for seed, name in enumerate(STORES)}


def _reference(path):
    """The array read by zarr-python's default pipeline, in this process."""
    with zarr.config.set({"codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline"}):
        z = zarr.open_array(path, mode="r")
        assert type(z.async_array.codec_pipeline).__module__ != "devbuf.zarr"
        return z[...]


def _bit_exact(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.tobytes() == want.tobytes()


# --------------------------------------------------------------------------- clusters


def _cluster(env):
    """A LocalCluster of two single-threaded worker processes with `env`, and its
    client; start-up bounded by START_S (connect timeouts, death_timeout,
    wait_for_workers)."""
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.comm.timeouts.connect": f"{START_S}s"}):
        cluster = LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            env=env,
            death_timeout=START_S,
        )
    try:
        client = Client(cluster, timeout=f"{START_S}s")
        try:
            client.wait_for_workers(2, timeout=START_S)
        except BaseException:
            client.close(timeout=30)
            raise
    except BaseException:
        cluster.close(timeout=30)
        raise
    return cluster, client


def _close(cluster, client):
    try:
        client.close(timeout=30)
    finally:
        cluster.close(timeout=30)


@pytest.fixture(scope="module")
def client():
    cluster, c = _cluster({"ZARR_CODEC_PIPELINE__PATH": PIPELINE})
    try:
        yield c
    finally:
        _close(cluster, c)


def _worker_counts(c):
    """read_counts of each worker process (reset there), and their sum."""
    per = c.run(read_counts, True)
    total = {}
    for counts in per.values():
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
    return per, total


def _compute(c, x):
    return c.compute(x).result(timeout=COMPUTE_S)


# --------------------------------------------------------------------------- dask


def test_workers_select_the_pipeline(client, stores):
    # The workers' environment selects the pipeline: an array opened in a task reads
    # through devbuf's engine there.
    path = stores["v3-zstd"]
    _worker_counts(client)

    def open_and_read(p):
        import zarr as z

        a = z.open_array(p, mode="r")
        return type(a.async_array.codec_pipeline).__module__, a[100:300, 5:700]

    module, got = client.submit(open_and_read, path, pure=False).result(timeout=COMPUTE_S)
    assert module == "devbuf.zarr"
    _bit_exact(got, _reference(path)[100:300, 5:700])
    _, total = _worker_counts(client)
    assert total == {"engine": 1}


@pytest.mark.parametrize("opened", ["path", "array"])
@pytest.mark.parametrize("name", list(STORES))
def test_from_zarr_on_the_cluster(client, stores, name, opened):
    path = stores[name]
    want = _reference(path)
    _worker_counts(client)
    read_counts(reset=True)
    with zarr.config.set({"codec_pipeline.path": PIPELINE}):
        if opened == "path":
            # dask opens a path through fsspec (FsspecStore, also for local paths): the
            # engine decodes the bytes fsspec fetched.
            x = da.from_zarr(path)
            kind = "engine-bytes"
        else:
            # A LocalStore array: the engine reads the chunk files itself.
            x = da.from_zarr(zarr.open_array(path, mode="r"))
            kind = "engine"
    got = _compute(client, x)
    _bit_exact(got, want)
    per, total = _worker_counts(client)
    # One pipeline read per Dask block (a block is a chunk, or a shard's worth of the
    # sharded array), all by the engine, all in the workers.
    assert total == {kind: x.npartitions}, (total, x.npartitions)
    assert read_counts(reset=True) == {}, "the client process read"
    # A selection that is not whole blocks: strided, so the engine decodes chunks.
    sel = (slice(3, None, 5), slice(7, 500))
    _bit_exact(_compute(client, x[sel]), want[sel])
    _, total = _worker_counts(client)
    assert total == {kind + " (chunks)": x[sel].npartitions}, total


def test_pipeline_is_chosen_where_the_array_is_opened(client, stores):
    # Opened in the client with zarr's default pipeline, the array carries that pipeline
    # into the graph: the workers' setting does not apply to it (zarr-python's design).
    path = stores["v2-zstd"]
    _worker_counts(client)
    x = da.from_zarr(path)
    _bit_exact(_compute(client, x), _reference(path))
    _, total = _worker_counts(client)
    assert total == {}


# --------------------------------------------------------------------------- xarray


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    xr = pytest.importorskip("xarray", reason="xarray is not installed (pip install xarray)")
    pd = pytest.importorskip("pandas", reason="pandas is not installed (xarray needs it)")
    rng = np.random.default_rng(42)
    nt, ny, nx = 12, 180, 240
    ds = xr.Dataset(
        {
            "temperature": (("time", "y", "x"), rng.standard_normal((nt, ny, nx)).astype("float32")),
            "counts": (("time", "y", "x"), rng.integers(0, 60000, (nt, ny, nx), dtype="uint16")),
        },
        coords={
            "time": pd.date_range("2024-01-01", periods=nt, freq="D"),
            "y": np.linspace(-60.0, 60.0, ny),
            "x": np.arange(nx, dtype="int32") * 3,
            "lat2d": (("y", "x"), rng.standard_normal((ny, nx))),
        },
        attrs={"title": "devbuf test"},
    )
    path = str(tmp_path_factory.mktemp("xarray") / "ds.zarr")
    encoding = {
        "temperature": {"chunks": (3, 60, 80), "compressors": [ZstdCodec(level=3)]},
        "counts": {"chunks": (4, 90, 120), "compressors": [BloscCodec(cname="zstd", clevel=3)]},
        "lat2d": {"chunks": (90, 120)},
    }
    ds.to_zarr(path, encoding=encoding, zarr_format=3, consolidated=False)
    return path, ds


def test_xarray_open_zarr_on_the_cluster(client, dataset_path):
    import xarray as xr

    path, original = dataset_path
    with zarr.config.set({"codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline"}):
        ref = xr.open_zarr(path, consolidated=False).compute(scheduler="synchronous")
    _worker_counts(client)
    read_counts(reset=True)
    with zarr.config.set({"codec_pipeline.path": PIPELINE}):
        ds = xr.open_zarr(path, consolidated=False)  # dask chunks: the zarr chunks
    assert ds["temperature"].chunks == ((3,) * 4, (60,) * 3, (80,) * 3)
    # The index coordinates are read when the dataset opens, in this process.
    opened_here = read_counts(reset=True)
    assert opened_here and set(opened_here) <= ENGINE_KINDS, opened_here
    got = ds.compute()  # the client is Dask's default scheduler: the cluster computes
    xr.testing.assert_identical(got, ref)
    xr.testing.assert_identical(got, original)
    for name in ("temperature", "counts", "lat2d"):
        _bit_exact(got[name].values, original[name].values)
    for name in ("time", "y", "x"):
        np.testing.assert_array_equal(got[name].values, original[name].values)
    _, total = _worker_counts(client)
    blocks = sum(ds[v].data.npartitions for v in ("temperature", "counts", "lat2d"))
    assert set(total) <= ENGINE_KINDS, total
    assert sum(total.values()) == blocks, (total, blocks)
    assert read_counts(reset=True) == {}, "the client process read data"
    # A label selection and a reduction, on the cluster.
    part = ds["temperature"].sel(time="2024-01-05", y=slice(-10, 30)).mean("x").compute()
    np.testing.assert_allclose(
        part.values, original["temperature"].sel(time="2024-01-05", y=slice(-10, 30)).mean("x").values, rtol=1e-5
    )
    _, total = _worker_counts(client)
    assert total and set(total) <= ENGINE_KINDS, total


# --------------------------------------------------------------------------- GPU


@pytest.fixture(scope="module")
def gpu_client():
    if GPU_WHY:
        pytest.skip(GPU_WHY)
    cluster, c = _cluster(
        {
            "ZARR_CODEC_PIPELINE__PATH": PIPELINE,
            # zarr.config.enable_gpu() in the workers: reads return cupy arrays.
            "ZARR_BUFFER": "zarr.buffer.gpu.Buffer",
            "ZARR_NDBUFFER": "zarr.buffer.gpu.NDBuffer",
        }
    )
    try:
        yield c
    finally:
        _close(cluster, c)


@pytest.mark.skipif(GPU_WHY is not None, reason=str(GPU_WHY))
@pytest.mark.parametrize("name", ["v3-zstd", "v2-blosc", "v3-sharded"])
def test_from_zarr_cupy_on_gpu_workers(gpu_client, stores, name):
    import cupy as cp

    path = stores[name]
    want = _reference(path)
    _worker_counts(gpu_client)
    with zarr.config.set({"codec_pipeline.path": PIPELINE}):
        z = zarr.open_array(path, mode="r")
        x = da.from_zarr(z)
    # Dask's meta says cupy (from_array with meta= is what from_zarr does, plus meta).
    xc = da.from_array(z, chunks=z.chunks, meta=cp.empty((0,) * z.ndim, dtype=z.dtype))
    assert isinstance(xc._meta, cp.ndarray)
    kinds = gpu_client.submit(lambda: zarr.config.get("ndbuffer"), pure=False).result(timeout=COMPUTE_S)
    assert kinds == "zarr.buffer.gpu.NDBuffer"
    block = _compute(gpu_client, x.blocks[0, 0])
    assert isinstance(block, cp.ndarray)
    got = _compute(gpu_client, xc)
    assert isinstance(got, cp.ndarray)
    _bit_exact(cp.asnumpy(got), want)
    _, total = _worker_counts(gpu_client)
    assert set(total) <= ENGINE_KINDS, total
    assert sum(total.values()) == 1 + xc.npartitions, total
    sel = (slice(3, None, 5), slice(7, 500))
    _bit_exact(cp.asnumpy(_compute(gpu_client, xc[sel])), want[sel])


@pytest.mark.skipif(GPU_WHY is not None, reason=str(GPU_WHY))
def test_xarray_cupy_on_gpu_workers(gpu_client, dataset_path):
    import cupy as cp
    import xarray as xr

    path, original = dataset_path
    _worker_counts(gpu_client)
    with zarr.config.set({"codec_pipeline.path": PIPELINE}):
        ds = xr.open_zarr(path, consolidated=False)
    t = ds["temperature"].data  # the dask array; its blocks are read on the workers
    got = _compute(gpu_client, t)
    # xarray's zarr backend (2026.9) hands dask numpy blocks: its lazy indexing adapters
    # convert what zarr-python returns (cupy under the workers' GPU buffers; measured on
    # an H100). The reads themselves are the engine's, in the workers (counted below).
    if isinstance(got, cp.ndarray):
        got = cp.asnumpy(got)
    _bit_exact(np.asarray(got), original["temperature"].values)
    _, total = _worker_counts(gpu_client)
    assert set(total) <= ENGINE_KINDS and sum(total.values()) == t.npartitions, total
