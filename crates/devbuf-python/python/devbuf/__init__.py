"""devbuf: CUDA buffers and zarr reads from devbuf's Rust engine.

Objects (docs/python.md):

* ``Context``, ``DeviceBuffer``, ``HostBuffer``, ``IpcMemHandle``, ``open_ipc_buffer``:
  pyarrow.cuda-style device and page-locked host memory, IPC between processes.
* ``open(path_or_url, **storage_options)`` -> ``ZarrArray`` (``await open_async(...)``);
  ``ZarrArray.read(selection, device=None)`` -> ``Array`` (``await read_async(...)``); ``ZarrArray.read_chunks(indices, device=None)`` ->
  ``ChunkBatch`` (an Arrow record batch of chunks).
* ``Array``: host or device memory exported without copies (buffer protocol,
  ``__array_interface__``, ``__cuda_array_interface__`` v3, ``__dlpack__``, the Arrow
  PyCapsule protocols ``__arrow_c_array__`` / ``__arrow_c_device_array__``).
* ``devbuf.flight``: the Arrow Flight server and client; ``devbuf.zarr``: zarr-python's
  codec pipeline on the engine.
"""

from ._devbuf import (
    Array,
    ArrowError,
    CancelledError,
    ChunkBatch,
    Context,
    CudaError,
    CudaUnavailableError,
    DeviceBuffer,
    HostBuffer,
    InvalidArgumentError,
    IpcMemHandle,
    MalformedError,
    OutOfBoundsError,
    ReadOnlyError,
    UnsupportedError,
    ZarrArray,
    __version__,
    device_count,
    is_available,
    open,
    open_async,
    open_ipc_buffer,
    unavailable_reason,
)

__all__ = [
    "Array",
    "ArrowError",
    "CancelledError",
    "ChunkBatch",
    "Context",
    "CudaError",
    "CudaUnavailableError",
    "DeviceBuffer",
    "HostBuffer",
    "InvalidArgumentError",
    "IpcMemHandle",
    "MalformedError",
    "OutOfBoundsError",
    "ReadOnlyError",
    "UnsupportedError",
    "ZarrArray",
    "__version__",
    "device_count",
    "is_available",
    "open",
    "open_async",
    "open_ipc_buffer",
    "unavailable_reason",
]
