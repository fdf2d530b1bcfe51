"""The codec pipeline on zarr-python's `ObjectStore` (obstore) against a real
S3-compatible server process (s3s-fs, as the Rust object-store tests use): reads and
writes go through the engine's own fetches ("engine-url"), compared with zarr-python's
own pipeline on the same store; obstore's LocalStore is read from its directory."""

import os
import queue
import shutil
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")
obstore_store = pytest.importorskip("obstore.store", reason="obstore is not installed")
from zarr.storage import ObjectStore  # noqa: E402

PIPELINE = {"codec_pipeline.path": "devbuf.zarr.CodecPipeline"}
ACCESS_KEY = "AKIADEVBUFTEST"
SECRET_KEY = "devbuf-test-secret-9f8e7d6c"
BUCKET = "bkt"


def _s3s_fs():
    p = os.environ.get("DEVBUF_S3S_FS")
    if p:
        return p
    found = shutil.which("s3s-fs")
    if found:
        return found
    home = os.path.expanduser("~/.cargo/bin/s3s-fs")
    return home if os.path.exists(home) else None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """An s3s-fs process serving a temporary directory with bucket `bkt`; its endpoint."""
    binary = _s3s_fs()
    if binary is None:
        reason = "no s3s-fs (cargo install s3s-fs@0.14.1 --locked --features binary, or set DEVBUF_S3S_FS)"
        if os.environ.get("DEVBUF_REQUIRE_SERVERS") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("s3")
    (root / BUCKET).mkdir()
    for _attempt in range(5):
        port = _free_port()
        proc = subprocess.Popen(
            [binary, "--host", "127.0.0.1", "--port", str(port), "--access-key", ACCESS_KEY,
             "--secret-key", SECRET_KEY, str(root)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": "s3s_fs=info", "NO_COLOR": "1"}, text=True,
        )
        # Its output, line by line, from a thread that keeps draining it (the server must
        # never block on a full pipe); the wait for the start line is bounded.
        lines: queue.Queue = queue.Queue()

        def drain(out=proc.stdout, q=lines):
            for line in out:
                q.put(line)
            q.put(None)  # exited

        threading.Thread(target=drain, daemon=True).start()
        deadline = time.monotonic() + 30
        started = False
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:  # exited: the port was taken meanwhile
                break
            if "server is running at" in line:
                started = True
                break
        if started:
            try:
                yield f"http://127.0.0.1:{port}"
            finally:
                proc.kill()
                proc.wait()
            return
        proc.kill()
        proc.wait()
    pytest.fail("s3s-fs did not start")


def s3_store(endpoint, prefix):
    inner = obstore_store.S3Store(
        BUCKET, prefix=prefix, endpoint=endpoint, region="us-east-1",
        access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY,
        client_options={"allow_http": True},
    )
    return ObjectStore(inner)


def make(store, name, kind):
    rng = np.random.default_rng(hash(name) % 2**32)
    data = rng.standard_normal((64, 48)).astype("float32")
    kw = {"compressors": zarr.codecs.ZstdCodec(level=1)}
    if kind == "sharded":
        kw["shards"] = (32, 24)
    a = zarr.create_array(store, name=name, shape=data.shape, chunks=(16, 12), dtype="float32",
                          fill_value=0.5, **kw)
    a[:50] = data[:50]
    return a


SELS = [(slice(None),), (slice(5, 60), slice(3, 41)), (7, slice(None)), (slice(0, 64, 5), 3)]


@pytest.mark.parametrize("kind", ["zstd", "sharded"])
def test_reads_use_the_engines_fetches(s3, kind):
    store = s3_store(s3, f"reads-{kind}")
    ref = make(store, "a", kind)
    with zarr.config.set(PIPELINE):
        a = zarr.open_array(store, path="a", mode="r")
        for sel in SELS:
            np.testing.assert_array_equal(a[sel], ref[sel])
            assert a.async_array.codec_pipeline.last_read.startswith("engine-url"), sel


@pytest.mark.parametrize("kind", ["zstd", "sharded"])
def test_writes_use_the_engines_fetches(s3, kind):
    ours = s3_store(s3, f"writes-ours-{kind}")
    theirs = s3_store(s3, f"writes-theirs-{kind}")
    ref = make(theirs, "a", kind)
    with zarr.config.set(PIPELINE):
        a = make(ours, "a", kind)
        assert a.async_array.codec_pipeline.last_write == "engine-url"
        value = np.full((10, 48), 0.5, "float32")  # the fill value: chunks erased
        a[16:26] = value
        ref[16:26] = value
        a[40:64, 10:20] = np.float32(-2.0)
        ref[40:64, 10:20] = np.float32(-2.0)
        assert a.async_array.codec_pipeline.last_write == "engine-url"
    np.testing.assert_array_equal(zarr.open_array(ours, path="a", mode="r")[:], ref[:])

    import asyncio

    async def keys(store):
        return sorted([k async for k in store.list_prefix("a/") if "/c" in k])

    assert asyncio.run(keys(ours)) == asyncio.run(keys(theirs))


def test_credentials_from_a_python_callback_go_through_the_store(s3):
    """Credentials a Python callback provides cannot reach the engine's own fetches: the
    pipeline fetches the bytes through the store and the engine decodes them."""
    good = s3_store(s3, "creds")
    ref = make(good, "a", "zstd")

    def provider():
        return {"access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY, "token": None,
                "expires_at": None}

    via_callback = ObjectStore(obstore_store.S3Store(
        BUCKET, prefix="creds", endpoint=s3, region="us-east-1", credential_provider=provider,
        client_options={"allow_http": True},
    ))
    with zarr.config.set(PIPELINE):
        a = zarr.open_array(via_callback, path="a", mode="r")
        np.testing.assert_array_equal(a[3:60], ref[3:60])
        assert a.async_array.codec_pipeline.last_read == "engine-bytes"


def test_obstore_local_store_is_read_from_its_directory(tmp_path):
    store = ObjectStore(obstore_store.LocalStore(str(tmp_path)))
    ref = make(store, "a", "zstd")
    with zarr.config.set(PIPELINE):
        a = zarr.open_array(store, path="a", mode="r")
        np.testing.assert_array_equal(a[:], ref[:])
        assert a.async_array.codec_pipeline.last_read == "engine"
