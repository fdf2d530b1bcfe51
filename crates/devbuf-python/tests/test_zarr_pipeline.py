"""devbuf.zarr.CodecPipeline: arrays written by zarr-python, read with the pipeline
selected, equal zarr-python's own reads (its default pipeline) of the same arrays."""

import numpy as np
import pytest

import devbuf

zarr = pytest.importorskip("zarr", reason="zarr-python is not installed (pip install zarr==3.1.6)")

from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec  # noqa: E402
from zarr.storage import LocalStore, MemoryStore  # noqa: E402

from conftest import FIXTURES, cupy_gpu_reason, manifest  # noqa: E402

PIPELINE = "devbuf.zarr.CodecPipeline"


def with_pipeline():
    return zarr.config.set({"codec_pipeline.path": PIPELINE})


def reopen(store, path="a"):
    """The array opened anew with the pipeline selected (the pipeline is chosen when an
    array is opened)."""
    return zarr.open_array(store, path=path, mode="r")


SELECTIONS = [
    (slice(None), slice(None)),
    (slice(3, 17), slice(2, 9)),
    (5, slice(None)),
    (slice(None), 7),
    (4, 6),
    (slice(1, 20, 3), slice(None, None, 2)),
    (Ellipsis,),
    (slice(19, 22), slice(8, 11)),
]
FANCY = [
    ("oindex", ([0, 3, 4, 17], [1, 2, 10])),
    ("vindex", (np.array([0, 5, 21]), np.array([1, 8, 10]))),
    ("mask", None),
]


def make(store, kind, zarr_format=3):
    data = (np.arange(22 * 11, dtype="float32").reshape(22, 11) * 1.5) - 40
    kw = {}
    if zarr_format == 3:
        if kind == "zstd":
            kw["compressors"] = ZstdCodec(level=3)
        elif kind == "gzip":
            kw["compressors"] = GzipCodec(level=5)
        elif kind == "blosc":
            kw["compressors"] = BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")
        elif kind == "sharded":
            kw["compressors"] = ZstdCodec(level=1)
            kw["shards"] = (10, 6)
        elif kind == "none":
            kw["compressors"] = None
    else:
        import numcodecs

        kw["compressors"] = {
            "zstd": numcodecs.Zstd(level=3),
            "gzip": numcodecs.GZip(level=5),
            "blosc": numcodecs.Blosc(cname="zstd", clevel=3),
            "none": None,
        }[kind]
    a = zarr.create_array(
        store,
        name="a",
        shape=data.shape,
        chunks=(5, 3),
        dtype=data.dtype,
        fill_value=-7.0,
        zarr_format=zarr_format,
        **kw,
    )
    a[:18] = data[:18]  # rows 18.. stay unwritten: the fill value
    a[20, 4] = 99.0
    return a


CASES = [
    ("zstd", 3),
    ("gzip", 3),
    ("blosc", 3),
    ("sharded", 3),
    ("none", 3),
    ("zstd", 2),
    ("gzip", 2),
    ("blosc", 2),
    ("none", 2),
]
CASE_IDS = [f"{k}-v{f}" for k, f in CASES]


@pytest.fixture(params=["local", "memory"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalStore(tmp_path / "s.zarr")
    return MemoryStore()


@pytest.mark.parametrize(("kind", "fmt"), CASES, ids=CASE_IDS)
def test_selections_equal_zarr_python(store, kind, fmt):
    make(store, kind, fmt)
    ref = reopen(store)
    with with_pipeline():
        got = reopen(store)
        pipe = got.async_array.codec_pipeline
        assert type(pipe).__name__ == "CodecPipeline"
        assert type(pipe).__module__ == "devbuf.zarr"
        for sel in SELECTIONS:
            expected = ref[sel]
            actual = got[sel]
            np.testing.assert_array_equal(actual, expected, err_msg=f"{sel}")
            how = pipe.last_read
            assert how is not None and not how.startswith("fallback"), (sel, how)
            want = "engine" if isinstance(store, LocalStore) else "engine-bytes"
            assert how.split(" ")[0] == want, (sel, how)
        for kind_, sel in FANCY:
            if kind_ == "oindex":
                np.testing.assert_array_equal(got.oindex[sel], ref.oindex[sel])
            elif kind_ == "vindex":
                np.testing.assert_array_equal(got.vindex[sel], ref.vindex[sel])
            else:
                mask = np.zeros(ref.shape, dtype=bool)
                mask[::3, 1::4] = True
                np.testing.assert_array_equal(got.vindex[mask], ref.vindex[mask])
            assert not pipe.last_read.startswith("fallback"), (kind_, pipe.last_read)


def test_whole_reads_go_straight_into_the_output(tmp_path):
    store = LocalStore(tmp_path / "s.zarr")
    make(store, "zstd")
    with with_pipeline():
        got = reopen(store)
        got[:]
        assert got.async_array.codec_pipeline.last_read == "engine"
        got[2:13, 1:10]
        assert got.async_array.codec_pipeline.last_read == "engine"
        got[::2]
        assert got.async_array.codec_pipeline.last_read == "engine (chunks)"


def test_unsupported_codec_falls_back(tmp_path):
    numcodecs = pytest.importorskip("numcodecs")
    store = LocalStore(tmp_path / "s.zarr")
    data = np.arange(100, dtype="int32").reshape(10, 10)
    a = zarr.create_array(
        store,
        name="a",
        shape=data.shape,
        chunks=(4, 4),
        dtype=data.dtype,
        zarr_format=2,
        filters=[numcodecs.Delta(dtype="int32")],  # devbuf refuses Delta
        compressors=numcodecs.Zlib(level=1),
    )
    a[:] = data
    with with_pipeline():
        got = reopen(store)
        np.testing.assert_array_equal(got[:], data)
        assert got.async_array.codec_pipeline.last_read.startswith("fallback")
        with zarr.config.set({"codec_pipeline.strict": True}):
            with pytest.raises(Exception):
                reopen(store)[:]


def test_string_data_falls_back():
    store = MemoryStore()
    a = zarr.create_array(store, name="a", shape=(4,), chunks=(2,), dtype=str)
    a[:] = np.array(["a", "bb", "ccc", "dddd"])
    with with_pipeline():
        got = reopen(store)
        np.testing.assert_array_equal(got[:], np.array(["a", "bb", "ccc", "dddd"]))
        assert got.async_array.codec_pipeline.last_read.startswith("fallback")


def test_writes_through_the_pipeline(tmp_path):
    store = LocalStore(tmp_path / "s.zarr")
    with with_pipeline():
        a = zarr.create_array(store, name="a", shape=(9, 9), chunks=(4, 4), dtype="uint16")
        a[1:8, 2:9] = np.arange(49, dtype="uint16").reshape(7, 7)
        assert a.async_array.codec_pipeline.last_write == "engine"
        b = reopen(store)
        np.testing.assert_array_equal(b[:], a[:])
        assert b[1, 2] == 0 and b[0, 0] == 0
    ref = reopen(store)
    np.testing.assert_array_equal(ref[1:8, 2:9], np.arange(49, dtype="uint16").reshape(7, 7))


def _stored_chunks(store, path="a"):
    """The chunk keys stored for array `path` (metadata documents left out)."""
    import asyncio

    async def keys():
        return sorted(
            [
                k
                async for k in store.list_prefix(path + "/")
                if not k.endswith(("zarr.json", ".zarray", ".zattrs", ".zgroup"))
            ]
        )

    return asyncio.run(keys())


# Writes: (selection, value maker) applied in order to a fresh array, by the pipeline and
# by zarr-python's own pipeline; the arrays read back (by zarr-python) and the stored
# chunk keys must agree. The value maker gets the selection's shape.
WRITES = [
    ((slice(None), slice(None)), lambda shp, rng: rng.standard_normal(shp).astype("float32")),
    ((slice(3, 17), slice(2, 9)), lambda shp, rng: rng.standard_normal(shp).astype("float32")),
    ((5, slice(None)), lambda shp, rng: np.full(shp, 3.25, "float32")),
    ((slice(None), 7), lambda shp, rng: np.arange(shp[0], dtype="float32")),
    ((4, 6), lambda shp, rng: np.float32(11.5)),
    ((slice(0, 10), slice(0, 6)), lambda shp, rng: np.float32(-7.0)),  # the fill value: chunks erased
    ((slice(None), slice(None)), lambda shp, rng: np.float32(2.0)),  # a scalar everywhere
    ((slice(19, 22), slice(8, 11)), lambda shp, rng: rng.standard_normal(shp).astype("float32")),
]


def _sel_shape(sel, shape):
    return np.empty(shape, dtype="int8")[sel].shape


@pytest.mark.parametrize(("kind", "fmt"), CASES, ids=CASE_IDS)
def test_writes_equal_zarr_python(store, tmp_path, kind, fmt):
    other = LocalStore(tmp_path / "ref.zarr") if isinstance(store, LocalStore) else MemoryStore()
    ref = make(other, kind, fmt)
    with with_pipeline():
        ours = make(store, kind, fmt)
    rng = np.random.default_rng(7)
    for sel, value_of in WRITES:
        value = value_of(_sel_shape(sel, ref.shape), rng)
        ref[sel] = value
        with with_pipeline():
            a = zarr.open_array(store, path="a", mode="r+")
            a[sel] = value
            how = a.async_array.codec_pipeline.last_write
            assert how is not None and not how.startswith("fallback"), (sel, how)
        np.testing.assert_array_equal(reopen(store)[:], ref[:], err_msg=str(sel))
        assert _stored_chunks(store) == _stored_chunks(other), sel


def test_fancy_writes_fall_back(tmp_path):
    store = LocalStore(tmp_path / "s.zarr")
    ref = make(MemoryStore(), "zstd")
    with with_pipeline():
        a = make(store, "zstd")
        a.oindex[[0, 3, 17], [1, 10]] = np.float32(5.0)
        ref.oindex[[0, 3, 17], [1, 10]] = np.float32(5.0)
        assert a.async_array.codec_pipeline.last_write.startswith("fallback")
        a[1:20:3, ::2] = np.float32(6.0)
        ref[1:20:3, ::2] = np.float32(6.0)
        assert a.async_array.codec_pipeline.last_write.startswith("fallback")
    np.testing.assert_array_equal(reopen(store)[:], ref[:])


def test_write_empty_chunks_falls_back(tmp_path):
    store = LocalStore(tmp_path / "s.zarr")
    with with_pipeline(), zarr.config.set({"array.write_empty_chunks": True}):
        a = zarr.create_array(store, name="a", shape=(8,), chunks=(4,), dtype="int32", fill_value=0)
        a[:] = 0
        assert a.async_array.codec_pipeline.last_write.startswith("fallback: write_empty_chunks")
    # zarr-python stored both chunks although they equal the fill value.
    assert _stored_chunks(store) == ["a/c/0", "a/c/1"]


def test_strict_writes_raise(tmp_path):
    store = LocalStore(tmp_path / "s.zarr")
    with with_pipeline():
        a = make(store, "zstd")
    with with_pipeline(), zarr.config.set({"codec_pipeline.strict": True}):
        a = zarr.open_array(store, path="a", mode="r+")
        with pytest.raises(NotImplementedError, match="not one box"):
            a.oindex[[0, 3], [1, 2]] = np.float32(1.0)


@pytest.mark.parametrize(
    "dtype", ["bool", "int8", "uint16", "int64", "float16", "float64", "complex64", ">i4"]
)
def test_data_types(store, dtype):
    data = (np.arange(30) % 7).astype(dtype).reshape(5, 6)
    a = zarr.create_array(store, name="a", shape=data.shape, chunks=(2, 4), dtype=data.dtype)
    a[:] = data
    with with_pipeline():
        got = reopen(store)
        np.testing.assert_array_equal(got[:], data)
        np.testing.assert_array_equal(got[1:4, ::3], data[1:4, ::3])
        assert not got.async_array.codec_pipeline.last_read.startswith("fallback")


def test_datetime64(store):
    data = np.array(["2024-01-01", "NaT", "1969-12-31", "2000-02-29"], dtype="datetime64[D]")
    a = zarr.create_array(store, name="a", shape=data.shape, chunks=(3,), dtype=data.dtype)
    a[:] = data
    with with_pipeline():
        got = reopen(store)[:]
    np.testing.assert_array_equal(got, data)
    assert got.dtype == data.dtype


def test_zero_d_and_f_order(tmp_path):
    store = LocalStore(tmp_path / "s.zarr")
    z = zarr.create_array(store, name="z", shape=(), dtype="int32", fill_value=5)
    z[()] = 42
    f = zarr.create_array(
        store, name="f", shape=(7, 5), chunks=(3, 2), dtype="float64", zarr_format=2, order="F"
    )
    data = np.random.default_rng(0).random((7, 5))
    f[:] = data
    with with_pipeline():
        assert reopen(store, "z")[()] == 42
        got = reopen(store, "f")
        np.testing.assert_array_equal(got[:], data)
        np.testing.assert_array_equal(got[2:6, 1], data[2:6, 1])


@pytest.mark.parametrize("fx", manifest(), ids=[f["name"] for f in manifest()])
def test_workspace_fixtures(fx):
    path = FIXTURES / fx["path"]
    try:
        ref = zarr.open_array(LocalStore(path, read_only=True), mode="r")
        expected = ref[...]
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"zarr-python 3.1.6 does not read this fixture: {e}")
    with with_pipeline():
        got = zarr.open_array(LocalStore(path, read_only=True), mode="r")
        actual = got[...]
    np.testing.assert_array_equal(actual, expected)


def test_config_options(tmp_path):
    store = LocalStore(tmp_path / "s.zarr")
    make(store, "zstd")
    ref = reopen(store)[:]
    with zarr.config.set(
        {"codec_pipeline.path": PIPELINE, "codec_pipeline.decoder": "cpu", "codec_pipeline.threads": 1}
    ):
        got = reopen(store)
        np.testing.assert_array_equal(got[:], ref)
        assert got.async_array.codec_pipeline.last_read == "engine"
    with zarr.config.set(
        {"codec_pipeline.path": PIPELINE, "codec_pipeline.decoder": "fast", "codec_pipeline.strict": True}
    ):
        with pytest.raises(ValueError, match="codec_pipeline.decoder"):
            reopen(store)[:]
    # The staging slot's size: taken when valid, refused with the engine's range.
    with zarr.config.set({"codec_pipeline.path": PIPELINE, "codec_pipeline.staging": 1 << 20}):
        got = reopen(store)
        np.testing.assert_array_equal(got[:], ref)
        assert got.async_array.codec_pipeline.last_read == "engine"
    with zarr.config.set(
        {"codec_pipeline.path": PIPELINE, "codec_pipeline.staging": 0, "codec_pipeline.strict": True}
    ):
        with pytest.raises(devbuf.InvalidArgumentError, match="slot_bytes"):
            reopen(store)[:]


def test_pickles(tmp_path):
    import pickle

    store = LocalStore(tmp_path / "s.zarr")
    make(store, "gzip")
    with with_pipeline():
        a = reopen(store)
        a[:]
        b = pickle.loads(pickle.dumps(a))
        np.testing.assert_array_equal(b[:], a[:])


@pytest.mark.skipif(cupy_gpu_reason() is not None, reason=str(cupy_gpu_reason()))
@pytest.mark.parametrize("kind", ["zstd", "sharded", "blosc"])
def test_gpu_reads_into_cupy(tmp_path, kind):
    import cupy as cp

    store = LocalStore(tmp_path / "s.zarr")
    make(store, kind)
    ref = reopen(store)
    # zarr-python's own reads on the host, before enable_gpu (inside it they are cupy too).
    want = [ref[sel] for sel in SELECTIONS]
    with zarr.config.enable_gpu(), with_pipeline():
        got = reopen(store)
        for sel, expected in zip(SELECTIONS, want):
            actual = got[sel]
            assert isinstance(actual, cp.ndarray)
            np.testing.assert_array_equal(cp.asnumpy(actual), expected)
            assert not got.async_array.codec_pipeline.last_read.startswith("fallback")


@pytest.mark.skipif(cupy_gpu_reason() is not None, reason=str(cupy_gpu_reason()))
@pytest.mark.parametrize("kind", ["zstd", "sharded", "none"])
@pytest.mark.parametrize("where", ["local", "memory"])
def test_gpu_writes_from_cupy(tmp_path, kind, where):
    import cupy as cp

    store = LocalStore(tmp_path / "s.zarr") if where == "local" else MemoryStore()
    ref = make(MemoryStore(), kind)
    with with_pipeline():
        make(store, kind)
    rng = np.random.default_rng(11)
    for sel, value_of in WRITES:
        value = value_of(_sel_shape(sel, ref.shape), rng)
        ref[sel] = value
        with zarr.config.enable_gpu(), with_pipeline():
            a = zarr.open_array(store, path="a", mode="r+")
            a[sel] = cp.asarray(value)
            how = a.async_array.codec_pipeline.last_write
            assert how is not None and not how.startswith("fallback"), (sel, how)
    np.testing.assert_array_equal(reopen(store)[:], ref[:])


def test_read_counts(tmp_path):
    from devbuf.zarr import read_counts

    numcodecs = pytest.importorskip("numcodecs")
    store = LocalStore(tmp_path / "s.zarr")
    make(store, "zstd")
    memory = MemoryStore()
    make(memory, "zstd")
    delta = zarr.create_array(
        store,
        name="d",
        shape=(6,),
        chunks=(3,),
        dtype="int32",
        filters=[numcodecs.Delta(dtype="int32")],
        compressors=None,
        zarr_format=2,
    )
    delta[:] = np.arange(6, dtype="int32")
    read_counts(reset=True)
    with with_pipeline():
        a = reopen(store)
        a[:]  # one box: "engine"
        a[::2, 1]  # a step: "engine (chunks)"
        zarr.open_array(store, path="d", mode="r")[:]  # delta: zarr-python's pipeline
        reopen(memory)[:]  # a MemoryStore: "engine-bytes"
    assert read_counts(reset=True) == {"engine": 1, "engine (chunks)": 1, "fallback": 1, "engine-bytes": 1}
    assert read_counts() == {}


@pytest.mark.parametrize("separator", [".", "/"])
@pytest.mark.parametrize("shape", [(22, 11), ()], ids=["2d", "0d"])
def test_v3_with_v2_chunk_keys(store, separator, shape):
    # zarr v3 arrays with the "v2" chunk key encoding (chunks at "0.1", not "c/0/1"), as
    # zarr-python's test_indexing.py makes them: read by the engine, not the fallback.
    data = np.arange(int(np.prod(shape)), dtype="int32").reshape(shape) - 100
    a = zarr.create_array(
        store,
        name="a",
        shape=shape,
        chunks=(5, 3) if shape else "auto",
        dtype="int32",
        fill_value=-1,
        chunk_key_encoding={"name": "v2", "separator": separator},
        compressors=ZstdCodec(level=1),
    )
    a[...] = data
    with with_pipeline():
        got = reopen(store)
        for sel in [Ellipsis] + ([(slice(3, 17), slice(2, 9)), (slice(None, None, 3), 4)] if shape else []):
            np.testing.assert_array_equal(got[sel], data[sel])
            how = got.async_array.codec_pipeline.last_read
            want = "engine" if isinstance(store, LocalStore) else "engine-bytes"
            assert how.split(" ")[0] == want, how


@pytest.mark.parametrize("fmt", [2, 3])
def test_reads_after_resize(store, fmt):
    # zarr-python's resize replaces the array's metadata in place and keeps its pipeline
    # (made with the old shape): reads after a resize that grew the array are the
    # engine's, not the fallback's (zarr-python's test_resize_*, test_append_*).
    with with_pipeline():
        a = zarr.create_array(
            store, name="a", shape=(105, 7), chunks=(10, 3), dtype="int32", fill_value=0, zarr_format=fmt
        )
        want = np.arange(105 * 7, dtype="int32").reshape(105, 7)
        a[:] = want
        np.testing.assert_array_equal(a[:], want)  # the engine opens with 105 rows
        pipe = a.async_array.codec_pipeline
        kind = "engine" if isinstance(store, LocalStore) else "engine-bytes"
        for rows in (108, 230, 50, 120):  # inside the last chunk, new chunks, shrink, grow
            a.resize((rows, 7))
            if rows > want.shape[0]:
                new = -np.arange((rows - want.shape[0]) * 7, dtype="int32").reshape(-1, 7)
                a[want.shape[0] :] = new
                want = np.concatenate([want, new])
            else:
                want = want[:rows]
            np.testing.assert_array_equal(a[:], want)
            assert pipe.last_read == kind, (rows, pipe.last_read)
            np.testing.assert_array_equal(a[rows - 9 : rows, 1:6], want[rows - 9 : rows, 1:6])
            assert pipe.last_read == kind, (rows, pipe.last_read)
            idx = [0, rows - 1]
            np.testing.assert_array_equal(a.oindex[idx, [1, 6]], want[idx][:, [1, 6]])
            assert pipe.last_read == kind + " (chunks)", (rows, pipe.last_read)


@pytest.mark.parametrize("dtype", [">i2", ">f8", ">c8", ">M8[s]", ">m8[ms]"])
def test_big_endian_v2_outputs(store, dtype):
    # zarr-python reads a big-endian v2 array into a big-endian output: the engine's
    # native-endian values are swapped into it (they fell back, and datetime64 /
    # timedelta64, viewed as native int64, were read byte-swapped).
    data = np.arange(20 * 7).reshape(20, 7)
    data = (data * 3 - 50).astype(dtype) if dtype[1] not in "Mm" else data.astype(dtype)
    a = zarr.create_array(store, name="a", shape=data.shape, chunks=(6, 3), dtype=dtype, zarr_format=2, fill_value=0)
    a[:15] = data[:15]
    ref = reopen(store)
    sels = [Ellipsis, (slice(2, 9), slice(1, 5)), (slice(None, None, 3), 2), (4, slice(None))]
    want = [ref[s] for s in sels] + [ref.oindex[[1, 17], [0, 6]]]
    assert want[0].dtype == np.dtype(dtype)
    with with_pipeline():
        got = reopen(store)
        for s, w in zip(sels + ["oindex"], want):
            g = got.oindex[[1, 17], [0, 6]] if s == "oindex" else got[s]
            assert g.dtype == w.dtype and g.tobytes() == w.tobytes(), s
            how = got.async_array.codec_pipeline.last_read
            assert not how.startswith("fallback"), (s, how)


def test_writes_to_a_read_only_store_are_refused(tmp_path):
    """The engine never writes underneath a read-only store: zarr-python's pipeline
    answers, with the store's error (as zarr's test_open_with_mode_r does it)."""
    with with_pipeline():
        zarr.ones(store=str(tmp_path), shape=(3, 3))
        ro = zarr.open(store=str(tmp_path), mode="r")
        with pytest.raises(ValueError):
            ro[:] = 3
        assert ro.async_array.codec_pipeline.last_write == "fallback: the store is read-only"
        np.testing.assert_array_equal(ro[:], np.ones((3, 3)))


def test_a_moved_local_store_is_read_where_it_is_now(tmp_path):
    """The engine's arrays are cached by where the array is: after LocalStore.move, reads
    follow the store (the old directory is gone)."""
    import asyncio

    store = LocalStore(tmp_path / "origin")
    with with_pipeline():
        a = make(store, "sharded")
        want = a[:]
        asyncio.run(store.move(tmp_path / "moved"))
        np.testing.assert_array_equal(a[:], want)
        assert a.async_array.codec_pipeline.last_read == "engine"


def test_refused_writes_touch_the_store_once(tmp_path):
    """A write the engine refuses (a strided selection) reads nothing itself: zarr-python's
    pipeline, answering instead, makes the only requests."""
    from collections import Counter

    class Counting(MemoryStore):
        gets: Counter

        async def get(self, key, prototype, byte_range=None):
            self.gets[key] += 1
            return await super().get(key, prototype, byte_range)

    store = Counting()
    store.gets = Counter()
    with with_pipeline():
        a = make(store, "zstd")
        store.gets.clear()
        a[1:20:3, ::2] = np.float32(6.0)
        assert a.async_array.codec_pipeline.last_write.startswith("fallback")
    assert store.gets and max(store.gets.values()) == 1, store.gets


def test_a_custom_codec_implementation_runs(tmp_path):
    """zarr's `codecs.*` config swaps in a user's codec class: the pipeline leaves such
    arrays to zarr-python, so that class encodes and decodes them."""
    from zarr.codecs import BloscCodec as _Blosc
    from zarr.registry import register_codec

    calls = {"encode": 0, "decode": 0}

    class CountingBlosc(_Blosc):
        async def _encode_single(self, chunk_bytes, chunk_spec):
            calls["encode"] += 1
            return await super()._encode_single(chunk_bytes, chunk_spec)

        async def _decode_single(self, chunk_bytes, chunk_spec):
            calls["decode"] += 1
            return await super()._decode_single(chunk_bytes, chunk_spec)

    name = f"{CountingBlosc.__module__}.{CountingBlosc.__qualname__}"
    register_codec("blosc", CountingBlosc)
    try:
        with with_pipeline(), zarr.config.set({"codecs.blosc": name}):
            a = zarr.create_array(
                LocalStore(tmp_path / "s.zarr"), shape=(100,), chunks=(10,), dtype="i4",
                compressors=[{"name": "blosc", "configuration": {}}],
            )
            a[:] = np.arange(100, dtype="i4")
            assert a.async_array.codec_pipeline.last_write.startswith("fallback: codec")
            np.testing.assert_array_equal(a[:], np.arange(100, dtype="i4"))
            assert a.async_array.codec_pipeline.last_read.startswith("fallback: codec")
    finally:
        zarr.config.set({"codecs.blosc": zarr.config.defaults[0]["codecs"]["blosc"]})
    assert calls["encode"] == 10 and calls["decode"] == 10, calls
