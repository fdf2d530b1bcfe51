"""The Arrow PyCapsule interface: devbuf.Array's __arrow_c_array__ /
__arrow_c_device_array__ and ZarrArray.read_chunks' ChunkBatch streams, consumed by
pyarrow without copies (buffer addresses compared) on the host; device capsules checked
field by field through ctypes on a GPU (pyarrow's wheels have no CUDA)."""

import ctypes
import gc

import numpy as np
import pytest

import devbuf
from conftest import FIXTURES

try:
    import pyarrow as pa
except ImportError as e:
    pa = None
    PA_WHY = f"pyarrow is not importable ({e})"
else:
    PA_WHY = ""

GPU_WHY = "" if devbuf.is_available() else f"no GPU: {devbuf.unavailable_reason()}"
gpu = pytest.mark.skipif(bool(GPU_WHY), reason=GPU_WHY or "GPU")
needs_pa = pytest.mark.skipif(pa is None, reason=PA_WHY or "pyarrow")
# The host tests consume with pyarrow; the device tests read the structures through
# ctypes and use pyarrow only where it is there (the GPU machine may lack it).

ARROW_DEVICE_CPU = 1
ARROW_DEVICE_CUDA = 2


# --- the C structures, read through ctypes --------------------------------------------


class ArrowArray(ctypes.Structure):
    pass


ArrowArray._fields_ = [
    ("length", ctypes.c_int64),
    ("null_count", ctypes.c_int64),
    ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("buffers", ctypes.POINTER(ctypes.c_void_p)),
    ("children", ctypes.POINTER(ctypes.POINTER(ArrowArray))),
    ("dictionary", ctypes.POINTER(ArrowArray)),
    ("release", ctypes.c_void_p),
    ("private_data", ctypes.c_void_p),
]


class ArrowDeviceArray(ctypes.Structure):
    _fields_ = [
        ("array", ArrowArray),
        ("device_id", ctypes.c_int64),
        ("device_type", ctypes.c_int32),
        ("sync_event", ctypes.c_void_p),
        ("reserved", ctypes.c_int64 * 3),
    ]


class ArrowDeviceArrayStream(ctypes.Structure):
    pass


GET_NEXT = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ArrowDeviceArrayStream), ctypes.POINTER(ArrowDeviceArray)
)
RELEASE_ARRAY = ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowArray))
ArrowDeviceArrayStream._fields_ = [
    ("device_type", ctypes.c_int32),
    ("get_schema", ctypes.c_void_p),
    ("get_next", GET_NEXT),
    ("get_last_error", ctypes.c_void_p),
    ("release", ctypes.c_void_p),
    ("private_data", ctypes.c_void_p),
]

_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]


def capsule_name(cap):
    return _api.PyCapsule_GetName(cap).decode()


def struct_of(cap, name, ctype):
    assert capsule_name(cap) == name
    return ctypes.cast(_api.PyCapsule_GetPointer(cap, name.encode()), ctypes.POINTER(ctype)).contents


def buffer(a, i):
    return a.buffers[i] or 0


# --- helpers ---------------------------------------------------------------------------


def zarr(name="v3_float32.zarr"):
    return devbuf.open(FIXTURES / name)


def values_address(pa_array):
    """Address of a primitive array's values buffer (buffers()[1])."""
    return pa_array.buffers()[1].address


# --- host arrays -----------------------------------------------------------------------


@needs_pa
def test_flat_array_is_zero_copy():
    arr = zarr().read(np.s_[3])  # a row: 1-d
    assert arr.ndim == 1
    p = pa.array(arr)
    assert p.type == pa.float32()
    assert values_address(p) == arr.address
    np.testing.assert_array_equal(p.to_numpy(), np.asarray(arr))


@needs_pa
@pytest.mark.parametrize("element", ["int8", "uint16", "int64", "float64", "float16"])
def test_flat_types(element):
    arr = zarr(f"v3_{element}.zarr").read(np.s_[0])
    p = pa.array(arr)
    assert p.type == getattr(pa, element)()
    assert values_address(p) == arr.address
    np.testing.assert_array_equal(p.to_numpy(zero_copy_only=False), np.asarray(arr))


@needs_pa
def test_bool_is_bit_packed():
    arr = zarr("v3_bool.zarr").read(np.s_[0])
    p = pa.array(arr)
    assert p.type == pa.bool_()
    assert p.to_pylist() == np.asarray(arr).tolist()


@needs_pa
def test_nd_array_is_tensor_rows_zero_copy():
    arr = zarr().read()
    assert arr.shape == (10, 7)
    p = pa.array(arr)
    assert isinstance(p.type, pa.FixedShapeTensorType)
    assert p.type.shape == [7]
    assert p.type.value_type == pa.float32()
    assert len(p) == 10
    np.testing.assert_array_equal(p.to_numpy_ndarray(), np.asarray(arr))
    assert values_address(p.storage.values) == arr.address


@needs_pa
def test_strided_array_is_copied_into_c_order():
    # a stepped selection is a strided view: exported as one copy into C order
    arr = zarr().read(np.s_[::2, 1:6:2])
    assert not arr.is_c_contiguous
    p = pa.array(arr)
    np.testing.assert_array_equal(p.to_numpy_ndarray(), np.asarray(arr))


@needs_pa
def test_record_batch_of_arrays():
    a = zarr()
    row = a.read(np.s_[0])
    rb = pa.record_batch([pa.array(row)], names=["x"])
    assert values_address(rb.column(0)) == row.address


@needs_pa
def test_consumer_keeps_memory_alive():
    arr = zarr().read()
    expected = np.asarray(arr).copy()
    address = arr.address
    p = pa.array(arr)
    del arr
    gc.collect()
    assert values_address(p.storage.values) == address
    np.testing.assert_array_equal(p.to_numpy_ndarray(), expected)


@needs_pa
def test_host_device_array_capsules():
    arr = zarr().read(np.s_[2])
    schema, device_array = arr.__arrow_c_device_array__()
    assert capsule_name(schema) == "arrow_schema"
    d = struct_of(device_array, "arrow_device_array", ArrowDeviceArray)
    assert d.device_type == ARROW_DEVICE_CPU
    assert d.sync_event is None
    assert d.array.length == 7 and d.array.n_buffers == 2
    assert buffer(d.array, 1) == arr.address
    # pyarrow imports the device capsules of CPU arrays too.
    p = pa.Array._import_from_c_device_capsule(schema, device_array)
    assert values_address(p) == arr.address
    np.testing.assert_array_equal(p.to_numpy(), np.asarray(arr))


@needs_pa
def test_plain_capsules():
    arr = zarr().read(np.s_[2])
    schema, array = arr.__arrow_c_array__()
    assert capsule_name(schema) == "arrow_schema"
    a = struct_of(array, "arrow_array", ArrowArray)
    assert a.length == 7 and buffer(a, 1) == arr.address
    assert pa.DataType._import_from_c_capsule(schema) == pa.float32()


@needs_pa
def test_unconsumed_capsules_release_their_structures():
    arr = zarr().read()
    for _ in range(50):
        arr.__arrow_c_array__()
        arr.__arrow_c_device_array__()
        arr.__arrow_c_device_array__(None, future_keyword=None)
    gc.collect()
    # the array is intact and still exportable
    np.testing.assert_array_equal(pa.array(arr).to_numpy_ndarray(), np.asarray(arr))


@needs_pa
def test_keywords_and_requested_schema():
    arr = zarr().read(np.s_[0])
    with pytest.raises(NotImplementedError, match="future_keyword"):
        arr.__arrow_c_device_array__(future_keyword=1)
    with pytest.raises(TypeError):
        arr.__arrow_c_array__(requested_schema=5)
    # a requested schema is accepted (best effort: devbuf has one form)
    p = pa.array(arr, type=pa.float32())
    assert values_address(p) == arr.address


# --- chunk batches ---------------------------------------------------------------------


def check_chunk(got, full, coords, chunk_shape):
    """The part of the chunk inside the array equals numpy's; the rest is padding, one
    value (the fill value)."""
    sl = tuple(slice(c * n, min((c + 1) * n, s)) for c, n, s in zip(coords, chunk_shape, full.shape))
    part = full[sl]
    inside = tuple(slice(0, k) for k in part.shape)
    np.testing.assert_array_equal(got[inside], part)
    mask = np.ones(chunk_shape, dtype=bool)
    mask[inside] = False
    assert len(np.unique(got[mask])) <= 1


@needs_pa
def test_read_chunks_stream():
    a = zarr()  # 10 x 7, chunks 4 x 3
    full = np.asarray(a.read())
    coords = [(0, 0), (2, 2), (1, 0)]
    batch = a.read_chunks(coords)
    assert isinstance(batch, devbuf.ChunkBatch)
    assert batch.num_rows == len(batch) == 3
    assert batch.device is None
    assert batch.chunk_shape == (4, 3) and batch.array_shape == (10, 7)
    assert batch.coords(1) == (2, 2)
    reader = pa.RecordBatchReader.from_stream(batch)
    table = reader.read_all()
    assert table.num_rows == 3
    assert table.column_names == ["coord_0", "coord_1", "chunk"]
    assert table.column("coord_0").to_pylist() == [0, 2, 1]
    assert table.column("coord_1").to_pylist() == [0, 2, 0]
    chunk = table.column("chunk").combine_chunks()
    assert isinstance(chunk.type, pa.FixedShapeTensorType)
    assert chunk.type.shape == [4, 3]
    got = chunk.to_numpy_ndarray()
    for i, c in enumerate(coords):
        check_chunk(got[i], full, c, (4, 3))
    assert b"devbuf.chunk_grid" in table.schema.metadata


@needs_pa
def test_read_chunks_record_batch_and_device_stream_on_host():
    a = zarr()
    batch = a.read_chunks([(0, 1)])
    rb = pa.record_batch(batch)
    assert rb.num_rows == 1 and rb.schema.metadata[b"devbuf.chunk_grid"]
    rb2 = pa.RecordBatch._import_from_c_device_capsule(*batch.__arrow_c_device_array__())
    assert rb2.equals(rb)
    # the device stream of a host batch is CPU
    cap = batch.__arrow_c_device_stream__()
    s = struct_of(cap, "arrow_device_array_stream", ArrowDeviceArrayStream)
    assert s.device_type == ARROW_DEVICE_CPU
    # zero-copy between batch exports: the same allocation each time
    rb3 = pa.record_batch(batch)
    assert rb3.column(2).storage.values.buffers()[1].address == rb.column(2).storage.values.buffers()[1].address


def test_read_chunks_errors():
    a = zarr()
    with pytest.raises(ValueError, match="one index per axis"):
        a.read_chunks([(0,)])
    with pytest.raises(Exception):
        a.read_chunks([(99, 0)])
    with pytest.raises(TypeError):
        devbuf.ChunkBatch()


# --- device capsules (GPU) -------------------------------------------------------------


@gpu
def test_device_array_capsule_fields():
    arr = zarr().read(np.s_[4], device=0)
    schema, device_array = arr.__arrow_c_device_array__()
    assert capsule_name(schema) == "arrow_schema"
    if pa is not None:
        assert pa.DataType._import_from_c_capsule(schema) == pa.float32()
    d = struct_of(device_array, "arrow_device_array", ArrowDeviceArray)
    assert d.device_type == ARROW_DEVICE_CUDA
    assert d.device_id == 0
    assert d.sync_event  # a CUevent* recorded on the legacy default stream
    assert d.array.length == 7 and d.array.n_buffers == 2
    assert buffer(d.array, 1) == arr.address
    with pytest.raises(ValueError, match="device memory"):
        arr.__arrow_c_array__()


@gpu
def test_device_tensor_capsule_fields():
    arr = zarr().read(device=0)
    schema, device_array = arr.__arrow_c_device_array__()
    if pa is not None:
        t = pa.DataType._import_from_c_capsule(schema)
        assert isinstance(t, pa.FixedShapeTensorType) and t.shape == [7]
    d = struct_of(device_array, "arrow_device_array", ArrowDeviceArray)
    assert d.device_type == ARROW_DEVICE_CUDA and d.device_id == 0
    assert d.array.length == 10 and d.array.n_children == 1
    child = d.array.children[0].contents
    assert buffer(child, 1) == arr.address


@gpu
def test_device_chunk_stream_fields():
    a = zarr()
    batch = a.read_chunks([(0, 0), (2, 2)], device=0)
    assert batch.device == 0
    cap = batch.__arrow_c_device_stream__()
    s = struct_of(cap, "arrow_device_array_stream", ArrowDeviceArrayStream)
    assert s.device_type == ARROW_DEVICE_CUDA
    out = ArrowDeviceArray()
    assert s.get_next(ctypes.byref(s), ctypes.byref(out)) == 0
    assert out.device_type == ARROW_DEVICE_CUDA and out.device_id == 0
    assert out.array.length == 2 and out.array.n_children == 3
    RELEASE_ARRAY(out.array.release)(ctypes.byref(out.array))
    end = ArrowDeviceArray()
    assert s.get_next(ctypes.byref(s), ctypes.byref(end)) == 0
    assert not end.array.release  # end of stream
    with pytest.raises(ValueError, match="device memory"):
        batch.__arrow_c_stream__()
    # the batch's chunks equal a host read's
    host = a.read_chunks([(0, 0), (2, 2)])
    assert host.num_rows == batch.num_rows and host.chunk_shape == batch.chunk_shape


@gpu
@needs_pa
def test_pyarrow_imports_device_capsules_where_it_can():
    try:
        import pyarrow.cuda  # noqa: F401
    except ImportError as e:
        pytest.skip(f"pyarrow has no CUDA support ({e}): the capsule fields are checked via ctypes")
    arr = zarr().read(np.s_[4], device=0)
    p = pa.Array._import_from_c_device_capsule(*arr.__arrow_c_device_array__())
    assert p.buffers()[1].address == arr.address
