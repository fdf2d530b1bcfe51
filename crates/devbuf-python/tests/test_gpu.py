"""GPU tests: device reads consumed by cupy and torch without copies (pointers compared),
DeviceBuffer/HostBuffer, IPC with cupy in another process. Skipped, with the reason,
where there is no GPU or no cupy/torch."""

import gc
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import devbuf
from conftest import FIXTURES

GPU_WHY = "" if devbuf.is_available() else f"no GPU: {devbuf.unavailable_reason()}"
gpu = pytest.mark.skipif(bool(GPU_WHY), reason=GPU_WHY or "GPU")

try:
    import cupy as cp
except Exception as e:  # ImportError, or a cupy without a usable CUDA
    cp = None
    CUPY_WHY = f"cupy is not importable ({type(e).__name__}: {e})"
else:
    CUPY_WHY = ""

try:
    import torch
except Exception as e:
    torch = None
    TORCH_WHY = f"torch is not importable ({type(e).__name__}: {e})"
else:
    TORCH_WHY = ""

# The GPU's reason first: without a GPU that is the one that matters.
needs_cupy = pytest.mark.skipif(bool(GPU_WHY) or cp is None, reason=GPU_WHY or CUPY_WHY or "cupy")
needs_torch = pytest.mark.skipif(
    bool(GPU_WHY) or torch is None or not torch.cuda.is_available(),
    reason=GPU_WHY or TORCH_WHY or "torch sees no CUDA device",
)


def host_values(name):
    return np.asarray(devbuf.open(FIXTURES / name).read())


@gpu
def test_device_read_attributes():
    arr, report = devbuf.open(FIXTURES / "v3_float32_sharded.zarr").read(device=0, report=True)
    assert arr.device == 0
    assert report["target"].startswith("device 0")
    cai = arr.__cuda_array_interface__
    assert cai["version"] == 3
    assert cai["data"][0] == arr.address
    assert cai["stream"] is None
    assert arr.__dlpack_device__() == (2, 0)
    assert not hasattr(arr, "__array_interface__")
    with pytest.raises(BufferError):
        memoryview(arr)
    np.testing.assert_array_equal(np.asarray(arr.copy_to_host()), host_values("v3_float32_sharded.zarr"))
    np.testing.assert_array_equal(arr.to_numpy(), host_values("v3_float32_sharded.zarr"))


@gpu
@needs_cupy
@pytest.mark.parametrize("name", ["v3_float32.zarr", "v2_int16_F.zarr", "v3_uint8_sharded.zarr", "v2_complex64_bigendian.zarr", "v3_bool.zarr"])
def test_cupy_asarray_is_zero_copy(name):
    arr = devbuf.open(FIXTURES / name).read(device=0)
    c = cp.asarray(arr)
    assert c.data.ptr == arr.address
    np.testing.assert_array_equal(cp.asnumpy(c), host_values(name))


@gpu
@needs_cupy
def test_cupy_strided_view_and_lifetime():
    full = host_values("v3_float32.zarr")
    arr = devbuf.open(FIXTURES / "v3_float32.zarr").read((slice(None, None, 3), slice(1, None, 2)), device=0)
    c = cp.asarray(arr)
    assert c.data.ptr == arr.address
    del arr
    gc.collect()
    cp.cuda.runtime.deviceSynchronize()
    _junk = [cp.ones(1 << 20) for _ in range(8)]
    np.testing.assert_array_equal(cp.asnumpy(c), full[::3, 1::2])


@gpu
@needs_cupy
def test_cupy_from_dlpack_is_zero_copy():
    arr = devbuf.open(FIXTURES / "v3_float64.zarr").read(device=0)
    c = cp.from_dlpack(arr)
    assert c.data.ptr == arr.address
    del arr
    gc.collect()
    np.testing.assert_array_equal(cp.asnumpy(c), host_values("v3_float64.zarr"))


@gpu
@needs_torch
def test_torch_from_dlpack_is_zero_copy():
    arr = devbuf.open(FIXTURES / "v3_int32.zarr").read(device=0)
    t = torch.from_dlpack(arr)
    assert t.data_ptr() == arr.address
    assert t.device.type == "cuda"
    del arr
    gc.collect()
    np.testing.assert_array_equal(t.cpu().numpy(), host_values("v3_int32.zarr"))


@gpu
@needs_torch
def test_torch_cuda_array_interface_is_zero_copy():
    arr = devbuf.open(FIXTURES / "v3_float32.zarr").read(device=0)
    t = torch.as_tensor(arr, device="cuda")
    assert t.data_ptr() == arr.address


@gpu
def test_device_buffer_round_trip():
    ctx = devbuf.Context(0)
    assert ctx.device_number == 0
    assert ctx.total_memory > 0
    buf = ctx.allocate(1024)
    assert buf.size == 1024 and buf.device == 0
    data = np.arange(256, dtype=np.uint32)
    assert buf.copy_from_host(data) == 1024
    assert buf.to_bytes() == data.tobytes()
    h = buf.copy_to_host()
    assert isinstance(h, devbuf.HostBuffer)
    assert np.frombuffer(h, np.uint32).tolist() == data.tolist()
    # Slices: zero-copy, same allocation.
    tail = buf.slice(1000)
    assert tail.address == buf.address + 1000 and tail.size == 24
    assert buf.slice(4, 8).to_bytes() == data[1:3].tobytes()
    part = buf.copy_to_host(position=8, nbytes=8)
    assert bytes(part) == data[2:4].tobytes()
    buf.copy_from_host(b"\x00" * 4, position=0)
    assert np.frombuffer(buf.copy_to_host(), np.uint32)[0] == 0
    other = ctx.allocate(1024)
    assert other.copy_from_device(buf) == 1024
    assert other.to_bytes() == buf.to_bytes()
    with pytest.raises(devbuf.OutOfBoundsError):
        buf.slice(1000, 100)
    with pytest.raises(devbuf.OutOfBoundsError):
        buf.copy_from_host(b"x" * 10, position=1020)


@gpu
def test_host_buffer_buffer_protocol_is_zero_copy_and_writable():
    ctx = devbuf.Context(0)
    h = ctx.allocate_host(4096)
    m = memoryview(h)
    assert not m.readonly and m.nbytes == 4096
    n = np.frombuffer(h, dtype=np.uint8)
    assert n.__array_interface__["data"][0] == h.address
    n[:] = 7  # writes the page-locked memory itself
    assert h.to_bytes() == b"\x07" * 4096
    buf = ctx.allocate(4096)
    buf.copy_from_host(h)
    assert buf.to_bytes() == b"\x07" * 4096
    del h
    gc.collect()
    assert n.sum() == 7 * 4096  # numpy's base keeps the host buffer alive


@gpu
@needs_cupy
def test_device_buffer_cuda_array_interface_and_foreign_buffer():
    ctx = devbuf.Context(0)
    buf = ctx.allocate(64)
    buf.copy_from_host(bytes(range(64)))
    c = cp.asarray(buf)
    assert c.data.ptr == buf.address
    assert cp.asnumpy(c).tobytes() == bytes(range(64))
    src = cp.arange(16, dtype=cp.uint8)
    view = ctx.foreign_buffer(src.data.ptr, 16, src)
    assert view.address == src.data.ptr
    assert view.to_bytes() == bytes(range(16))


CONSUMER = textwrap.dedent(
    """
    import sys, cupy as cp, numpy as np
    raw, offset, size = bytes.fromhex(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    base = cp.cuda.runtime.ipcOpenMemHandle(raw)
    mem = cp.cuda.UnownedMemory(base + offset, size, None)
    a = cp.ndarray((size,), cp.uint8, cp.cuda.MemoryPointer(mem, 0))
    sys.stdout.write(cp.asnumpy(a).tobytes().hex())
    cp.cuda.runtime.ipcCloseMemHandle(base)
    """
)

PRODUCER = textwrap.dedent(
    """
    import sys, cupy as cp
    a = cp.arange(256, dtype=cp.uint8)
    raw = cp.cuda.runtime.ipcGetMemHandle(a.data.ptr)
    sys.stdout.write(bytes(raw).hex() + "\\n")
    sys.stdout.flush()
    sys.stdin.readline()  # keep the allocation alive until the parent is done
    """
)


@gpu
@needs_cupy
def test_ipc_devbuf_export_opened_by_cupy_in_another_process():
    ctx = devbuf.Context(0)
    buf = ctx.allocate(1024)
    buf.copy_from_host(bytes(range(256)) * 4)
    part = buf.slice(256, 100)  # a slice: the raw handle maps the allocation's start
    h = part.export_for_ipc()
    assert h.offset == 256 and h.size == 100 and len(h.raw_cuda()) == 64
    out = subprocess.run(
        [sys.executable, "-c", CONSUMER, h.raw_cuda().hex(), str(h.offset), str(h.size)],
        check=True, capture_output=True, text=True,
    ).stdout
    assert bytes.fromhex(out) == (bytes(range(256)) * 4)[256:356]
    # devbuf's own bytes, opened in this process: a view of the same memory.
    again = devbuf.open_ipc_buffer(h.to_bytes())
    assert again.address == part.address
    assert devbuf.IpcMemHandle.from_bytes(h.to_bytes()).offset == 256


@gpu
@needs_cupy
def test_ipc_cupy_export_opened_by_devbuf():
    p = subprocess.Popen([sys.executable, "-c", PRODUCER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        raw = bytes.fromhex(p.stdout.readline().strip())
        h = devbuf.IpcMemHandle.from_raw_cuda(raw, 16, 32)
        buf = devbuf.Context(0).open_ipc_buffer(h)
        assert buf.to_bytes() == bytes(range(16, 48))
        del buf
        gc.collect()
    finally:
        p.stdin.write("done\n")
        p.stdin.close()
        p.wait(timeout=60)
