"""How zarr-python's batches map onto devbuf's engine (internal, for ``devbuf.zarr``):
chunk keys to chunk coordinates, a batch's chunk selections to one box of the array,
zarr-python's output and value buffers to memory the engine reads into or writes from.
Whatever does not map is ``_Refused``: zarr-python's own pipeline answers instead."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.core.metadata import ArrayV2Metadata

if TYPE_CHECKING:
    from zarr.core.buffer import NDBuffer
    from zarr.core.metadata import ArrayMetadata

class _Refused(Exception):
    """The engine does not take this read: zarr-python's pipeline does."""


def _chunk_shape(metadata: ArrayMetadata) -> tuple[int, ...]:
    if isinstance(metadata, ArrayV2Metadata):
        return tuple(metadata.chunks)
    grid = metadata.chunk_grid
    shape = getattr(grid, "chunk_shape", None)
    if shape is None:
        raise _Refused(f"chunk grid {type(grid).__name__} (devbuf reads regular grids)")
    return tuple(shape)


def _separator(metadata: ArrayMetadata) -> str:
    if isinstance(metadata, ArrayV2Metadata):
        return metadata.dimension_separator
    return getattr(metadata.chunk_key_encoding, "separator", "/")


def _default_keys(metadata: ArrayMetadata) -> bool:
    """Whether chunk keys are v3's default encoding (``c/0/1``) rather than v2's (``0.1``,
    zarr v2 arrays and v3 arrays with the ``v2`` chunk key encoding)."""
    if isinstance(metadata, ArrayV2Metadata):
        return False
    return getattr(metadata.chunk_key_encoding, "name", "default") != "v2"


def _key_splitter(metadata: ArrayMetadata):
    """A function from a chunk's store path to (array path, chunk key, chunk
    coordinates), for the paths of one array (the encoding's parameters read once)."""
    ndim = len(metadata.shape)
    sep = _separator(metadata)
    default = _default_keys(metadata)
    n = max(ndim + (1 if default else 0), 1) if sep == "/" else 1
    checked = []

    def split(path: str) -> tuple[str, str, tuple[int, ...]]:
        parts = path.rsplit("/", n)
        if len(parts) < n:
            raise _Refused(f"chunk key {path!r}")
        if len(parts) > n:
            prefix = parts[0]
            key = path[len(prefix) + 1 :]
        else:
            prefix, key = "", path
        try:
            if default:
                if not key.startswith("c"):
                    raise ValueError
                rest = key[1:].removeprefix(sep)
                coords = tuple(int(x) for x in rest.split(sep)) if rest else ()
            else:
                coords = () if ndim == 0 else tuple(int(x) for x in key.split(sep))
        except ValueError:
            raise _Refused(f"chunk key {path!r}") from None
        if len(coords) != ndim:
            raise _Refused(f"chunk key {path!r} (not the array's chunk key encoding)")
        # zarr-python made every path with the array's own encode_chunk_key: checking the
        # first one proves this parse is its inverse (the rest cost a call per chunk).
        if not checked:
            if metadata.encode_chunk_key(coords) != key:
                raise _Refused(f"chunk key {path!r} (not the array's chunk key encoding)")
            checked.append(True)
        return prefix, key, coords

    return split


def _split_key(metadata: ArrayMetadata, path: str) -> tuple[str, str, tuple[int, ...]]:
    """(array path, chunk key, chunk coordinates) of a chunk's store path."""
    return _key_splitter(metadata)(path)


def _extent(items, chunk_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Per axis, the end of the elements the chunk selections of a read touch (zarr-python
    clips them to the array's current shape)."""
    ends = [0] * len(chunk_shape)
    for coords, cs, _os, _key in items:
        cs = _as_tuple(cs)
        for i, n in enumerate(chunk_shape):
            s = cs[i] if i < len(cs) else slice(None)
            if isinstance(s, slice):
                stop = n if s.stop is None else min(s.stop, n)
                start = 0 if s.start is None else s.start
                end = stop if stop > start else 0
            elif _is_int(s):
                end = int(s) + 1
            else:
                a = np.asarray(s)
                if a.dtype == bool:
                    nz = np.flatnonzero(a)
                    end = int(nz[-1]) + 1 if nz.size else 0
                else:
                    end = int(a.max()) + 1 if a.size else 0
            if end:
                ends[i] = max(ends[i], coords[i] * n + end)
    return tuple(ends)


def _covers(shape, extent: tuple[int, ...]) -> bool:
    return len(shape) == len(extent) and all(e <= s for e, s in zip(extent, shape))


def _step1(s: Any) -> bool:
    return isinstance(s, slice) and (s.step is None or s.step == 1)


def _is_int(s: Any) -> bool:
    return isinstance(s, (int, np.integer)) and not isinstance(s, bool)


def _as_tuple(sel: Any) -> tuple[Any, ...]:
    return sel if isinstance(sel, tuple) else (sel,)


def _one_box(items, chunk_shape, out_shape, drop_axes):
    """The array box the batch covers when it is one box that is exactly the output
    (basic selections, step 1), else None. ``out_shape`` None: any output shape (a
    scalar written everywhere). Runs once per chunk of a read: kept lean."""
    ndim = len(chunk_shape)
    drop = frozenset(drop_axes)
    kept = [i for i in range(ndim) if i not in drop]
    nkept = len(kept)
    lo = [None] * ndim
    hi = [None] * ndim
    offset: list[int | None] = [None] * ndim
    volume = 0
    starts = [0] * ndim
    stops = [0] * ndim
    for coords, cs, os_, _ in items:
        if type(cs) is not tuple:
            cs = (cs,)
        if len(cs) != ndim:
            return None
        v = 1
        for i in range(ndim):
            s = cs[i]
            base = coords[i] * chunk_shape[i]
            if type(s) is slice:
                if i in drop or s.start is None or s.stop is None or s.step not in (None, 1):
                    return None
                a, b = base + s.start, base + s.stop
            elif _is_int(s):
                if i not in drop:
                    return None
                a = base + int(s)
                b = a + 1
            else:
                return None
            starts[i] = a
            stops[i] = b
            v *= b - a
        if out_shape is not None:
            if type(os_) is not tuple:
                os_ = (os_,)
            if len(os_) != nkept:
                return None
            for j in range(nkept):
                i = kept[j]
                o = os_[j]
                if type(o) is not slice or o.start is None or o.stop is None or o.step not in (None, 1):
                    return None
                if o.stop - o.start != stops[i] - starts[i]:
                    return None
                d = starts[i] - o.start
                if offset[i] is None:
                    offset[i] = d
                elif offset[i] != d:
                    return None
        for i in range(ndim):
            a = starts[i]
            if lo[i] is None:
                lo[i] = a
                hi[i] = stops[i]
                continue
            if i in drop and lo[i] != a:
                return None
            if a < lo[i]:
                lo[i] = a
            if stops[i] > hi[i]:
                hi[i] = stops[i]
        volume += v
    if any(x is None for x in lo):
        return None
    box_shape = [h - l for l, h in zip(lo, hi)]
    if int(np.prod(box_shape, dtype=np.int64)) != volume:
        return None
    kept_shape = tuple(box_shape[i] for i in kept)
    if out_shape is not None and kept_shape != tuple(out_shape):
        return None
    if out_shape is not None and any(offset[i] != lo[i] for i in kept):
        return None
    return lo, box_shape


def _device_of(arr, what: str) -> int | None:
    """None for a numpy array, the device ordinal of a cupy one; anything else is
    refused (``what``: "an output", "a value")."""
    if isinstance(arr, np.ndarray):
        return None
    if hasattr(arr, "__cuda_array_interface__"):
        return int(arr.device.id)
    raise _Refused(f"{what} of type {type(arr).__name__}")


def _target(out: NDBuffer, engine_dtype: str):
    """(array-like to fill, device ordinal or None, byte-swapped), the array viewed as the
    engine's data type (datetime64 / timedelta64 read as int64). Byte-swapped: a host
    array of the other byte order (zarr-python's output for a big-endian v2 array), filled
    from the engine's native-endian values by numpy."""
    arr = out.as_ndarray_like()
    device = _device_of(arr, "an output")
    dt = np.dtype(engine_dtype)
    swapped = not arr.dtype.isnative
    if swapped and device is not None:
        raise _Refused(f"data type {arr.dtype} on a device")
    if arr.dtype.kind in "mM":
        if dt != np.dtype("int64"):
            raise _Refused(f"data type {arr.dtype}")
        arr = arr.view(np.dtype("int64").newbyteorder(arr.dtype.byteorder))
    elif arr.dtype.kind not in "biufc":
        raise _Refused(f"data type {arr.dtype}")
    if arr.dtype.newbyteorder("=") != dt:
        raise _Refused(f"data type {arr.dtype} (the engine reads {dt})")
    return arr, device, swapped


def _source(value: NDBuffer, engine_dtype: str):
    """(array-like holding the values to write, device ordinal or None), viewed as the
    engine's data type (datetime64 / timedelta64 written as int64)."""
    arr = value.as_ndarray_like()
    device = _device_of(arr, "a value")
    dt = np.dtype(engine_dtype)
    if arr.dtype.kind in "mM":
        if dt != np.dtype("int64"):
            raise _Refused(f"data type {arr.dtype}")
        arr = arr.view("int64")
    elif arr.dtype.kind not in "biufc":
        raise _Refused(f"data type {arr.dtype}")
    if arr.dtype != dt:
        raise _Refused(f"data type {arr.dtype} (the engine writes {dt})")
    return arr, device
