"""Direct reads (devbuf.open(...).read(...)) against zarr-python's reads of the same
fixtures (zarr==3.1.6, which wrote them) and the fixtures' expected bytes."""

import numpy as np
import pytest

import devbuf
from conftest import FIXTURES, manifest

try:
    import zarr
except ImportError:  # pragma: no cover - the script installs it
    zarr = None

FIXTURES_LIST = manifest()
NAMES = [f["name"] for f in FIXTURES_LIST]


def expected(f):
    """The fixture's values from its expected/*.bin (native-endian C-order bytes)."""
    dtype = np.dtype(f["dtype"]).newbyteorder("=")
    raw = (FIXTURES / "expected" / (f["name"] + ".bin")).read_bytes()
    return np.frombuffer(raw, dtype=dtype).reshape(f["shape"])


@pytest.mark.parametrize("f", FIXTURES_LIST, ids=NAMES)
def test_whole_array_matches_expected_bytes(f):
    a = devbuf.open(FIXTURES / f["path"])
    assert a.shape == tuple(f["shape"])
    arr = a.read()
    assert arr.device is None
    got = np.asarray(arr)
    exp = expected(f)
    assert got.dtype == exp.dtype
    np.testing.assert_array_equal(got, exp)


@pytest.mark.skipif(zarr is None, reason="zarr-python is not installed (pip install zarr==3.1.6)")
@pytest.mark.parametrize("f", FIXTURES_LIST, ids=NAMES)
def test_whole_array_matches_zarr_python(f):
    z = zarr.open_array(str(FIXTURES / f["path"]), mode="r")
    ref = z[...]
    got = np.asarray(devbuf.open(FIXTURES / f["path"]).read())
    if ref.dtype.kind in "mM":
        ref = ref.view("int64")
    assert got.dtype == ref.dtype.newbyteorder("=")
    np.testing.assert_array_equal(got, ref)
    a = devbuf.open(FIXTURES / f["path"])
    assert a.chunks == tuple(z.chunks)
    assert np.dtype(a.dtype) == ref.dtype.newbyteorder("=")


SELECTIONS = [
    (),
    Ellipsis,
    (slice(None),),
    0,
    -1,
    (3,),
    (slice(2, 9), slice(1, 6)),
    (slice(None, None, 2),),
    (slice(1, None, 3), slice(None, None, 2)),
    (Ellipsis, 2),
    (4, Ellipsis),
    (slice(-4, None), -2),
    (slice(8, 100),),
    (slice(5, 2),),
    (np.int64(2), slice(0, 7, 4)),
]


@pytest.mark.parametrize("name", ["v3_float32", "v2_int16_F", "v3_float32_sharded", "v2_complex64_bigendian", "v3_bool"])
@pytest.mark.parametrize("sel", SELECTIONS, ids=[repr(s) for s in SELECTIONS])
def test_selections_match_numpy(name, sel):
    f = next(f for f in FIXTURES_LIST if f["name"] == name)
    full = expected(f)
    a = devbuf.open(FIXTURES / f["path"])
    if len(f["shape"]) < 2 and isinstance(sel, tuple) and len(sel) > 1:
        pytest.skip("two-axis selection of a 1-d fixture")
    got = a.read(sel)
    ref = full[sel]
    assert got.shape == ref.shape
    np.testing.assert_array_equal(np.asarray(got), ref)
    # __getitem__ is a host read of the same selection.
    np.testing.assert_array_equal(np.asarray(a[sel]), ref)


def test_selection_of_3d_fixture():
    f = next(f for f in FIXTURES_LIST if len(f["shape"]) == 3)
    full = expected(f)
    a = devbuf.open(FIXTURES / f["path"])
    for sel in [(1, Ellipsis), (Ellipsis, 1), (slice(None), 0, slice(None, None, 2)), (slice(1, 5), slice(0, 5), slice(2, 3))]:
        np.testing.assert_array_equal(np.asarray(a[sel]), full[sel])


def test_zero_d_array():
    a = devbuf.open(FIXTURES / "v3_int32_0d.zarr")
    assert a.shape == ()
    arr = a.read()
    assert arr.shape == ()
    assert np.asarray(arr).shape == ()
    assert np.asarray(a[...]) == np.asarray(a[()])


def test_report():
    a = devbuf.open(FIXTURES / "v3_float32_sharded.zarr")
    assert a.read_report is None
    arr, report = a.read(report=True)
    assert isinstance(arr, devbuf.Array)
    assert report["decoder"] == "cpu"
    assert report["target"] == "host"
    assert report["cpu_chunks"] > 0
    assert "decoder cpu" in report["summary"]
    assert a.read_report == report


def test_metadata():
    a = devbuf.open(str(FIXTURES / "v3_float32_sharded.zarr"))
    assert a.zarr_format == 3
    assert a.shards is not None
    assert len(a.chunks) == a.ndim
    assert "sharding_indexed" in a.codecs
    assert len(a) == a.shape[0]
    assert "v3_float32_sharded" in repr(a)
    b = devbuf.open(FIXTURES / "v2_float32_C.zarr")
    assert b.zarr_format == 2 and b.shards is None


def test_read_releases_the_gil():
    """Reads in threads overlap (the engine runs without the GIL)."""
    import threading

    a = devbuf.open(FIXTURES / "v3_float32.zarr")
    results = []
    threads = [threading.Thread(target=lambda: results.append(np.asarray(a.read()).tobytes())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and len(set(results)) == 1
