"""Coroutines (`open_async`, `read_async`) and Arrow Flight from Python (devbuf.flight),
compared with zarr-python's reads of the same arrays."""

import asyncio

import numpy as np
import pytest

import devbuf
from conftest import cupy_gpu_reason
from devbuf.flight import Client, Server

zarr = pytest.importorskip("zarr")


GPU = cupy_gpu_reason()


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A directory of two arrays written by zarr-python: random float32 in zstd chunks
    (v3) and int16 in a sharded array."""
    d = tmp_path_factory.mktemp("flight")
    rng = np.random.default_rng(20261127)
    a = zarr.create_array(
        str(d / "f32.zarr"), shape=(300, 200), chunks=(64, 50), dtype="float32",
        compressors=zarr.codecs.ZstdCodec(level=1),
    )
    a[:] = rng.standard_normal((300, 200)).astype("float32")
    b = zarr.create_array(
        str(d / "grp" / "i16.zarr"), shape=(40, 30, 20), chunks=(5, 5, 5), shards=(10, 10, 20),
        dtype="int16", fill_value=-3,
    )
    b[:, :20] = rng.integers(-1000, 1000, (40, 20, 20), dtype="int16")
    return d


def expected(root, name, sel=Ellipsis):
    return zarr.open_array(str(root / name), mode="r")[sel]


SELS = [
    None,
    (slice(10, 250), slice(3, 190)),
    (7,),
    (slice(None), -1),
    (slice(0, 300, 7), slice(1, 200, 3)),
    (slice(-40, None),),
]


# ------------------------------------------------------------------ coroutines


@pytest.mark.parametrize("sel", SELS, ids=str)
def test_read_async_equals_read(root, sel):
    async def main():
        a = await devbuf.open_async(root / "f32.zarr")
        got, report = await a.read_async(sel, report=True)
        return a, np.asarray(got), report

    a, got, report = asyncio.run(main())
    np.testing.assert_array_equal(got, expected(root, "f32.zarr", Ellipsis if sel is None else sel))
    np.testing.assert_array_equal(got, np.asarray(a.read(sel)))
    assert report["decoded_bytes"] > 0 and a.read_report is not None


def test_concurrent_reads_in_one_loop(root):
    sels = [(slice(i * 30, i * 30 + 30),) for i in range(10)]

    async def main():
        a = await devbuf.open_async(str(root / "grp" / "i16.zarr"))
        return await asyncio.gather(*(a.read_async(s) for s in sels))

    parts = asyncio.run(main())
    np.testing.assert_array_equal(
        np.concatenate([np.asarray(p) for p in parts]), expected(root, "grp/i16.zarr")[:300]
    )


def test_cancelled_read_raises_and_the_array_stays_usable(tmp_path):
    big = zarr.create_array(
        str(tmp_path / "big.zarr"), shape=(4096, 4096), chunks=(256, 256), dtype="float32",
        compressors=zarr.codecs.ZstdCodec(level=1),
    )
    big[:] = np.arange(4096 * 4096, dtype="float32").reshape(4096, 4096)

    async def main():
        a = await devbuf.open_async(tmp_path / "big.zarr")
        # Cancelled before it starts, and once it runs (the task has reached the Rust
        # future after one pass of the loop: `sleep(0)` yields exactly once).
        for passes in (0, 1):
            task = asyncio.ensure_future(a.read_async())
            for _ in range(passes):
                await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        return np.asarray(await a.read_async((slice(100, 101),)))

    row = asyncio.run(main())
    np.testing.assert_array_equal(row[0], np.arange(100 * 4096, 101 * 4096, dtype="float32"))


def test_open_async_errors_are_python_exceptions(tmp_path):
    # A coroutine made outside a running loop, as asyncio.run takes it.
    with pytest.raises(FileNotFoundError):
        asyncio.run(devbuf.open_async(tmp_path / "missing.zarr"))
    coro = devbuf.open_async(tmp_path / "missing.zarr")
    assert asyncio.iscoroutine(coro)
    coro.close()


# ------------------------------------------------------------------ Flight


@pytest.fixture(scope="module")
def server(root):
    with Server(root) as s:
        yield s


def test_server_uri_and_repr(server):
    assert server.uri.startswith("grpc://127.0.0.1:")
    assert "serving" in repr(server)
    assert len(server.token) == 64
    with pytest.raises(PermissionError):
        Client(server.uri).list()
    with pytest.raises(ValueError, match="at least one token"):
        Server(server.uri, tokens=[])


def test_list(server):
    listed = Client(server.uri, token=server.token).list()
    paths = sorted(f["path"] for f in listed if f["kind"] == "array")
    assert paths == ["f32.zarr", "grp/i16.zarr"]
    assert all(f["endpoints"] >= 1 for f in listed)


@pytest.mark.parametrize("sel", [s for s in SELS if s != (slice(-40, None),)] + [(slice(5, 9), Ellipsis)], ids=str)
def test_flight_reads_equal_zarr_python(server, root, sel):
    c = Client(server.uri, token=server.token)
    got = np.asarray(c.read("f32.zarr", sel))
    np.testing.assert_array_equal(got, expected(root, "f32.zarr", Ellipsis if sel is None else sel))


def test_flight_sharded_read(server, root):
    got = np.asarray(Client(server.uri, token=server.token).read("grp/i16.zarr", (slice(3, 37), 25)))
    np.testing.assert_array_equal(got, expected(root, "grp/i16.zarr", (slice(3, 37), 25)))


def test_flight_async(server, root):
    async def main():
        c = await Client.connect_async(server.uri, token=server.token)
        listed = await c.list_async()
        parts = await asyncio.gather(
            c.read_async("f32.zarr", (slice(0, 150),)), c.read_async("f32.zarr", (slice(150, 300),))
        )
        return listed, parts

    listed, parts = asyncio.run(main())
    assert len(listed) == 2
    np.testing.assert_array_equal(
        np.concatenate([np.asarray(p) for p in parts]), expected(root, "f32.zarr")
    )


def test_flight_errors(server):
    c = Client(server.uri, token=server.token)
    with pytest.raises(FileNotFoundError):
        c.read("nothing.zarr")
    with pytest.raises(IndexError, match="may only end"):
        c.read("f32.zarr", (Ellipsis, 3))
    with pytest.raises(devbuf.InvalidArgumentError):
        c.read("f32.zarr", (400,))
    with pytest.raises(ValueError, match="connect_timeout"):
        Client(server.uri, connect_timeout=-1)


def test_flight_tokens(root):
    with Server(root, tokens=["s3cret", "other"]) as s:
        assert s.token == "s3cret"
        with pytest.raises(PermissionError):
            Client(s.uri).list()
        with pytest.raises(PermissionError):
            Client(s.uri, token="wrong").list()
        assert len(Client(s.uri, token="other").list()) == 2
        got = np.asarray(Client(s.uri, token="s3cret").read("f32.zarr", (2,)))
        np.testing.assert_array_equal(got, expected(root, "f32.zarr", (2,)))
    assert "stopped" in repr(s)
    with pytest.raises(OSError):
        Client(s.uri, connect_timeout=2).list()


@pytest.mark.skipif(GPU is not None, reason=str(GPU))
def test_flight_read_onto_the_gpu(server, root):
    import cupy as cp

    got = Client(server.uri, token=server.token).read("f32.zarr", (slice(20, 280), slice(7, 170)), device=0)
    dev = cp.asarray(got)
    assert dev.data.ptr == got.__cuda_array_interface__["data"][0]
    np.testing.assert_array_equal(cp.asnumpy(dev), expected(root, "f32.zarr", (slice(20, 280), slice(7, 170))))


@pytest.mark.skipif(GPU is not None, reason=str(GPU))
def test_read_async_onto_the_gpu(root):
    import cupy as cp

    async def main():
        a = await devbuf.open_async(root / "grp" / "i16.zarr")
        return await a.read_async((slice(1, 39), slice(2, 29)), device=0)

    got = asyncio.run(main())
    np.testing.assert_array_equal(
        cp.asnumpy(cp.asarray(got)), expected(root, "grp/i16.zarr", (slice(1, 39), slice(2, 29)))
    )
