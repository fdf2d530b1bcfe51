"""Zero-copy exports of host arrays: the buffer protocol, __array_interface__ and DLPack
(addresses compared, not only values), and lifetimes (the consumer keeps the memory)."""

import ctypes
import gc
import sys

import numpy as np
import pytest

import devbuf
from conftest import FIXTURES


def read(name="v3_float32.zarr", sel=None):
    return devbuf.open(FIXTURES / name).read(sel)


def address_of(np_array):
    return np_array.__array_interface__["data"][0]


def test_array_attributes():
    arr = read()
    assert isinstance(arr, devbuf.Array)
    assert arr.shape == (10, 7)
    assert arr.dtype == "float32"
    assert np.dtype(arr.dtype) == np.float32
    assert arr.strides == (28, 4)
    assert arr.ndim == 2 and arr.size == 70 and arr.nbytes == 280 and arr.itemsize == 4
    assert arr.device is None
    assert arr.is_c_contiguous
    assert len(arr) == 10
    assert "host" in repr(arr)
    assert arr.__dlpack_device__() == (1, 0)
    assert not hasattr(arr, "__cuda_array_interface__")


def test_buffer_protocol_is_zero_copy():
    arr = read()
    m = memoryview(arr)
    assert m.readonly
    assert m.shape == (10, 7)
    assert m.strides == (28, 4)
    assert m.format == "f"
    assert m.itemsize == 4
    assert m.obj is arr
    # numpy over the buffer protocol: same address.
    via_buffer = np.frombuffer(arr, dtype=np.float32)
    assert address_of(via_buffer) == arr.address
    assert bytes(arr) == np.asarray(arr).tobytes()


def test_array_interface_is_zero_copy():
    arr = read()
    ai = arr.__array_interface__
    assert ai["version"] == 3
    assert ai["typestr"] == "<f4"
    assert ai["data"] == (arr.address, True)
    assert ai["strides"] is None
    n = np.asarray(arr)
    assert address_of(n) == arr.address
    assert not n.flags.writeable
    with pytest.raises(ValueError):
        n[0, 0] = 1


def test_strided_view_exports_its_strides():
    full = np.asarray(read())
    arr = read(sel=(slice(1, None, 3), slice(None, None, 2)))
    assert not arr.is_c_contiguous
    m = memoryview(arr)
    assert m.shape == (3, 4)
    n = np.asarray(arr)
    assert address_of(n) == arr.address
    np.testing.assert_array_equal(n, full[1::3, ::2])
    assert arr.__array_interface__["strides"] == arr.strides
    with pytest.raises(TypeError):
        memoryview(arr).cast("B")  # memoryview casts need C-contiguous data
    with pytest.raises(BufferError):
        np.frombuffer(arr, dtype=np.float32)  # a simple (contiguous) request


def test_writable_request_is_refused():
    import ctypes

    arr = read()
    with pytest.raises((BufferError, TypeError), match="read-only|not writable"):
        (ctypes.c_char * arr.nbytes).from_buffer(arr)  # asks for a writable buffer


@pytest.mark.parametrize(
    "name,fmt",
    [("v3_bool.zarr", "?"), ("v3_int8.zarr", "b"), ("v3_uint64.zarr", "Q"), ("v3_float16.zarr", "e"),
     ("v3_complex64.zarr", "Zf"), ("v3_complex128.zarr", "Zd"), ("v2_float64_bigendian.zarr", "d")],
)
def test_formats(name, fmt):
    arr = read(name)
    assert memoryview(arr).format == fmt
    n = np.asarray(arr)
    assert address_of(n) == arr.address
    assert n.dtype == np.dtype(arr.dtype)


def test_memory_outlives_the_array_object():
    arr = read()
    ref = np.asarray(arr).copy()
    n = np.asarray(arr)
    m = memoryview(arr)
    addr = arr.address
    del arr
    gc.collect()
    # numpy's base and the memoryview keep the devbuf.Array (and its Rust memory) alive.
    junk = [np.ones(70, np.float32) * i for i in range(50)]
    assert address_of(n) == addr
    np.testing.assert_array_equal(n, ref)
    np.testing.assert_array_equal(np.frombuffer(m.tobytes(), np.float32).reshape(10, 7), ref)
    del junk


def test_refcount_returns():
    arr = read()
    before = sys.getrefcount(arr)
    m = memoryview(arr)
    assert sys.getrefcount(arr) == before + 1
    m.release()
    assert sys.getrefcount(arr) == before


@pytest.mark.skipif(not hasattr(np, "from_dlpack"), reason="numpy without from_dlpack")
def test_dlpack_host_is_zero_copy():
    arr = read()
    n = np.from_dlpack(arr)
    assert address_of(n) == arr.address
    expected = np.asarray(arr).copy()
    np.testing.assert_array_equal(n, expected)
    del arr
    gc.collect()
    _junk = [np.ones(70, np.float32) * i for i in range(50)]
    np.testing.assert_array_equal(n, expected)  # the capsule's owner keeps the memory


def test_dlpack_versioned_is_read_only():
    arr = read()
    n = np.from_dlpack(arr)  # numpy >= 2.1 asks for DLPack 1 and honours the flag
    if np.lib.NumpyVersion(np.__version__) >= "2.1.0":
        assert not n.flags.writeable
    # The capsule itself: DLPack 1's flags field has the read-only bit (1 << 0).
    cap = arr.__dlpack__(max_version=(1, 0))
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    managed = get(cap, b"dltensor_versioned")
    # DLManagedTensorVersioned: version (2 x u32), manager_ctx, deleter, flags (u64), ...
    flags = ctypes.c_uint64.from_address(managed + 8 + 8 + 8).value
    assert flags & 1, f"flags {flags:#x}"
    # The legacy capsule (no read-only flag) is refused for host memory.
    with pytest.raises(BufferError, match="read-only"):
        arr.__dlpack__()


def test_dlpack_strided_and_refusals():
    full = np.asarray(read())
    arr = read(sel=(slice(None, None, 3), slice(1, None, 2)))
    n = np.from_dlpack(arr)
    assert address_of(n) == arr.address
    np.testing.assert_array_equal(n, full[::3, 1::2])
    with pytest.raises(ValueError):
        arr.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        arr.__dlpack__(dl_device=(2, 0))


def test_unconsumed_capsule_is_freed():
    arr = read()
    owner = sys.getrefcount(arr)
    caps = [arr.__dlpack__(max_version=(1, 0)) for _ in range(100)]
    del caps
    gc.collect()
    assert sys.getrefcount(arr) == owner


def test_copy_to_host_and_to_numpy_of_host_array():
    arr = read()
    assert arr.copy_to_host() is arr
    n = arr.to_numpy()
    assert address_of(n) == arr.address


def test_public_classes_cannot_be_made_by_hand():
    with pytest.raises(TypeError):
        devbuf.DeviceBuffer()
    with pytest.raises(TypeError):
        devbuf.ZarrArray()
    with pytest.raises(TypeError):
        devbuf.Array(1)
