"""zarr-python's codec pipeline on devbuf's read engine (docs/python.md).

Select it with::

    zarr.config.set({"codec_pipeline.path": "devbuf.zarr.CodecPipeline"})

Reads decode with devbuf's engine into zarr-python's output buffer (numpy on the host,
cupy under ``zarr.config.enable_gpu()``). Arrays in a ``LocalStore`` are read by the
engine from their directory; for other stores the chunk bytes are fetched through the
store and decoded by the engine. Whatever the engine refuses (a codec or data type it
does not read, an output it cannot fill) is read by zarr-python's own
``BatchedCodecPipeline`` for that call; writes always are.

Options, from zarr's config:

* ``codec_pipeline.decoder``: ``"auto"`` (default), ``"cpu"``, ``"gpu"`` or ``"both"``.
* ``codec_pipeline.threads``: the engine's worker threads (default: one per core).
* ``codec_pipeline.strict``: raise instead of falling back (default False).

``read_counts()`` says how the reads of this process ran (all pipelines together).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.abc.codec import CodecPipeline as _CodecPipelineABC
from zarr.codecs._v2 import V2Codec
from zarr.core.buffer.cpu import buffer_prototype as _cpu_prototype
from zarr.core.codec_pipeline import BatchedCodecPipeline
from zarr.core.common import concurrent_map
from zarr.core.config import config
from zarr.core.metadata import ArrayV2Metadata, ArrayV3Metadata

from . import _devbuf

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from zarr.abc.codec import Codec
    from zarr.abc.store import ByteGetter, ByteSetter, Store
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer
    from zarr.core.metadata import ArrayMetadata

__all__ = ["CodecPipeline", "read_counts"]

_log = logging.getLogger("devbuf.zarr")

# How the reads of this process ran, over all pipelines (read_counts()).
_READ_COUNTS: collections.Counter[str] = collections.Counter()
_READ_COUNTS_LOCK = threading.Lock()


def read_counts(reset: bool = False) -> dict[str, int]:
    """How the reads of all ``CodecPipeline`` objects of this process ran: the number of
    ``read`` calls by kind, the kinds of ``CodecPipeline.last_read`` (``"engine"``,
    ``"engine (chunks)"``, ``"engine-bytes"``, ``"engine-bytes (chunks)"``) and
    ``"fallback"`` for every read zarr-python's own pipeline answered, whatever the reason.

    Per process: in a Dask worker, ask it there (``client.run(devbuf.zarr.read_counts)``).
    ``reset=True`` zeroes the counts after reading them.
    """
    with _READ_COUNTS_LOCK:
        counts = dict(_READ_COUNTS)
        if reset:
            _READ_COUNTS.clear()
    return counts


def _count_read(how: str) -> None:
    with _READ_COUNTS_LOCK:
        _READ_COUNTS["fallback" if how.startswith("fallback") else how] += 1


# General path: chunks decoded per engine call (bytes of decoded chunks).
_CHUNK_BATCH_BYTES = 256 << 20


class _Refused(Exception):
    """The engine does not take this read: zarr-python's pipeline does."""


def _codecs_of(metadata: ArrayMetadata) -> list[Codec]:
    if isinstance(metadata, ArrayV3Metadata):
        return list(metadata.codecs)
    if isinstance(metadata, ArrayV2Metadata):
        return [V2Codec(filters=metadata.filters, compressor=metadata.compressor)]
    raise TypeError(f"unknown zarr metadata {type(metadata).__name__}")


def _options() -> dict[str, Any]:
    threads = config.get("codec_pipeline.threads", None)
    return {
        "decoder": config.get("codec_pipeline.decoder", None),
        "threads": None if threads is None else int(threads),
    }


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


def _split_key(metadata: ArrayMetadata, path: str) -> tuple[str, str, tuple[int, ...]]:
    """(array path, chunk key, chunk coordinates) of a chunk's store path."""
    ndim = len(metadata.shape)
    sep = _separator(metadata)
    default = _default_keys(metadata)
    parts = path.split("/")
    if sep == "/":
        n = ndim + (1 if default else 0)
        n = max(n, 1)
    else:
        n = 1
    if len(parts) < n:
        raise _Refused(f"chunk key {path!r}")
    key = "/".join(parts[-n:])
    prefix = "/".join(parts[:-n])
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
    if len(coords) != ndim or metadata.encode_chunk_key(coords) != key:
        raise _Refused(f"chunk key {path!r} (not the array's chunk key encoding)")
    return prefix, key, coords


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


def _local_root(store: Store) -> str | None:
    try:
        from zarr.storage import LocalStore
    except ImportError:  # pragma: no cover
        return None
    if isinstance(store, LocalStore):
        return os.fspath(store.root)
    return None


def _step1(s: Any) -> bool:
    return isinstance(s, slice) and (s.step is None or s.step == 1)


def _is_int(s: Any) -> bool:
    return isinstance(s, (int, np.integer)) and not isinstance(s, bool)


def _as_tuple(sel: Any) -> tuple[Any, ...]:
    return sel if isinstance(sel, tuple) else (sel,)


def _one_box(items, chunk_shape, out_shape, drop_axes):
    """The array box the batch covers when it is one box that is exactly the output
    (basic selections, step 1), else None."""
    ndim = len(chunk_shape)
    lo = [None] * ndim
    hi = [None] * ndim
    offset: list[int | None] = [None] * ndim
    volume = 0
    for coords, cs, os_, _ in items:
        cs = _as_tuple(cs)
        os_ = _as_tuple(os_)
        if len(cs) != ndim:
            return None
        kept = [i for i in range(ndim) if i not in drop_axes]
        if len(os_) != len(kept):
            return None
        v = 1
        starts = []
        stops = []
        for i, s in enumerate(cs):
            base = coords[i] * chunk_shape[i]
            if _is_int(s):
                if i not in drop_axes:
                    return None
                a, b = base + int(s), base + int(s) + 1
            elif _step1(s) and s.start is not None and s.stop is not None:
                if i in drop_axes:
                    return None
                a, b = base + s.start, base + s.stop
            else:
                return None
            starts.append(a)
            stops.append(b)
            v *= b - a
        for j, i in enumerate(kept):
            o = os_[j]
            if not (_step1(o) and o.start is not None and o.stop is not None):
                return None
            if o.stop - o.start != stops[i] - starts[i]:
                return None
            d = starts[i] - o.start
            if offset[i] is None:
                offset[i] = d
            elif offset[i] != d:
                return None
        for i in range(ndim):
            if i in drop_axes:
                if lo[i] is not None and lo[i] != starts[i]:
                    return None
            lo[i] = starts[i] if lo[i] is None else min(lo[i], starts[i])
            hi[i] = stops[i] if hi[i] is None else max(hi[i], stops[i])
        volume += v
    if any(x is None for x in lo):
        return None
    box_shape = [h - l for l, h in zip(lo, hi)]
    if int(np.prod(box_shape, dtype=np.int64)) != volume:
        return None
    kept_shape = tuple(box_shape[i] for i in range(ndim) if i not in drop_axes)
    if kept_shape != tuple(out_shape):
        return None
    if any(offset[i] != lo[i] for i in range(ndim) if i not in drop_axes):
        return None
    return lo, box_shape


def _target(out: NDBuffer, engine_dtype: str):
    """(array-like to fill, device ordinal or None, byte-swapped), the array viewed as the
    engine's data type (datetime64 / timedelta64 read as int64). Byte-swapped: a host
    array of the other byte order (zarr-python's output for a big-endian v2 array), filled
    from the engine's native-endian values by numpy."""
    arr = out.as_ndarray_like()
    if isinstance(arr, np.ndarray):
        device = None
    elif hasattr(arr, "__cuda_array_interface__"):
        device = int(arr.device.id)
    else:
        raise _Refused(f"an output of type {type(arr).__name__}")
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


@dataclass
class CodecPipeline(_CodecPipelineABC):
    """zarr-python's ``CodecPipeline`` on devbuf's read engine (reads) and zarr-python's
    ``BatchedCodecPipeline`` (writes, and reads the engine refuses)."""

    metadata: ArrayMetadata
    store: Store | None
    fallback: BatchedCodecPipeline
    #: how the last read ran: ``"engine"`` (the array's directory), ``"engine-bytes"``
    #: (bytes fetched through the store), ``"fallback: <why>"``, or None before any read.
    last_read: str | None = field(default=None, compare=False)
    _engines: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # --- construction -------------------------------------------------------------------

    @classmethod
    def from_codecs(cls, codecs: Iterable[Codec]) -> BatchedCodecPipeline:  # type: ignore[override]
        # Without the array's metadata and store (zarr-python's sharding codec asks for
        # its inner pipeline this way) the engine has nothing to open.
        return BatchedCodecPipeline.from_codecs(codecs)

    @classmethod
    def from_array_metadata_and_store(cls, array_metadata: ArrayMetadata, store: Store) -> CodecPipeline:
        return cls(
            metadata=array_metadata,
            store=store,
            fallback=BatchedCodecPipeline.from_codecs(_codecs_of(array_metadata)),
        )

    def __getstate__(self) -> dict[str, Any]:
        return {"metadata": self.metadata, "store": self.store, "fallback": self.fallback}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.metadata = state["metadata"]
        self.store = state["store"]
        self.fallback = state["fallback"]
        self.last_read = None
        self._engines = {}

    def evolve_from_array_spec(self, array_spec: ArraySpec) -> CodecPipeline:
        return type(self)(
            metadata=self.metadata,
            store=self.store,
            fallback=self.fallback.evolve_from_array_spec(array_spec),
        )

    # --- what zarr-python asks of every pipeline: the fallback's answers --------------------

    @property
    def supports_partial_decode(self) -> bool:
        return False

    @property
    def supports_partial_encode(self) -> bool:
        return False

    def __iter__(self) -> Iterator[Codec]:
        return iter(self.fallback)

    def validate(self, *, shape, dtype, chunk_grid) -> None:
        self.fallback.validate(shape=shape, dtype=dtype, chunk_grid=chunk_grid)

    def compute_encoded_size(self, byte_length: int, array_spec: ArraySpec) -> int:
        return self.fallback.compute_encoded_size(byte_length, array_spec)

    async def decode(self, chunk_bytes_and_specs):
        return await self.fallback.decode(chunk_bytes_and_specs)

    async def encode(self, chunk_arrays_and_specs):
        return await self.fallback.encode(chunk_arrays_and_specs)

    async def write(
        self,
        batch_info: Iterable[tuple[ByteSetter, ArraySpec, Any, Any, bool]],
        value: NDBuffer,
        drop_axes: tuple[int, ...] = (),
    ) -> None:
        # Writes are zarr-python's (devbuf's writers are not wired here yet); the engine's
        # cached arrays read the chunks anew on every read, and are reopened when a read
        # reaches past their shape (a resize), so nothing goes stale.
        await self.fallback.write(batch_info, value, drop_axes)

    # --- reads ------------------------------------------------------------------------------

    async def read(
        self,
        batch_info: Iterable[tuple[ByteGetter, ArraySpec, Any, Any, bool]],
        out: NDBuffer,
        drop_axes: tuple[int, ...] = (),
    ) -> None:
        batch = list(batch_info)
        if not batch:
            return
        try:
            how = await self._read_engine(batch, out, drop_axes)
        except _Refused as e:
            how = f"fallback: {e}"
        except Exception as e:  # noqa: BLE001 - zarr-python's pipeline answers instead
            if config.get("codec_pipeline.strict", False):
                raise
            how = f"fallback: {type(e).__name__}: {e}"
        if how.startswith("fallback"):
            if config.get("codec_pipeline.strict", False):
                raise NotImplementedError(f"devbuf.zarr.CodecPipeline (strict): {how}")
            _log.debug("devbuf.zarr.CodecPipeline: %s", how)
            await self.fallback.read(batch, out, drop_axes)
        self.last_read = how
        _count_read(how)

    async def _read_engine(self, batch, out, drop_axes) -> str:
        md = self.metadata
        items = []
        prefix = None
        for byte_getter, _spec, cs, os_, _complete in batch:
            path = getattr(byte_getter, "path", None)
            if not isinstance(path, str):
                raise _Refused(f"a byte getter of type {type(byte_getter).__name__}")
            p, key, coords = _split_key(md, path)
            if prefix is None:
                prefix = p
            elif prefix != p:
                raise _Refused("chunks of several arrays in one read")
            items.append((coords, cs, os_, key))
        chunk_shape = _chunk_shape(md)
        root = _local_root(self.store)
        opts = _options()
        if root is not None:
            engine = self._engines.get(prefix)
            # zarr-python resizes an array by replacing its AsyncArray's metadata in place
            # (and writing it): the pipeline keeps the old metadata, and an engine opened
            # before a resize that grew the array has the old shape. Reopened, it reads
            # the directory's new metadata.
            if engine is None or not _covers(tuple(engine.shape), _extent(items, chunk_shape)):
                path = os.path.join(root, prefix) if prefix else root
                engine = await asyncio.to_thread(_devbuf._PipelineArray.open_path, path, **opts)
                self._engines[prefix] = engine
            how = "engine"
        else:
            engine = await self._engine_from_bytes(batch, items, opts, chunk_shape)
            how = "engine-bytes"
        arr, device, swapped = _target(out, engine.dtype)
        box = _one_box(items, chunk_shape, arr.shape, drop_axes)
        if box is not None and swapped and arr.flags.writeable:
            # The engine reads native-endian values; numpy swaps them into the output.
            starts, shape = box
            native = np.empty(arr.shape, dtype=np.dtype(engine.dtype))
            address = native.__array_interface__["data"][0]
            await asyncio.to_thread(engine.read_into, starts, shape, address, native.nbytes, None)
            arr[...] = native
            return how
        if box is not None and arr.flags.c_contiguous and (device is not None or arr.flags.writeable):
            starts, shape = box
            if device is None:
                address = arr.__array_interface__["data"][0]
            else:
                address = arr.__cuda_array_interface__["data"][0]
            await asyncio.to_thread(engine.read_into, starts, shape, address, arr.nbytes, device)
            return how
        await self._read_chunks(engine, items, arr, device, drop_axes, chunk_shape)
        return how + " (chunks)"

    async def _engine_from_bytes(self, batch, items, opts, chunk_shape):
        md = self.metadata
        extent = _extent(items, chunk_shape)
        if not _covers(tuple(md.shape), extent):
            # The array grew since this pipeline was made (zarr-python's resize updates
            # the array's metadata, not its pipeline's): a shape that holds what is read
            # (a chunk's encoding does not depend on the array's shape).
            md = md.update_shape(tuple(max(n, e) for n, e in zip(md.shape, extent)))
        docs = md.to_buffer_dict(_cpu_prototype)
        meta_key = "zarr.json" if isinstance(md, ArrayV3Metadata) else ".zarray"
        meta = docs[meta_key].to_bytes()

        async def fetch(byte_getter):
            return await byte_getter.get(prototype=_cpu_prototype)

        values = await concurrent_map(
            [(bg,) for bg, *_ in batch], fetch, config.get("async.concurrency")
        )
        chunks = {}
        for (coords, _cs, _os, key), v in zip(items, values):
            if v is not None:
                chunks[key] = v.to_bytes()
        return await asyncio.to_thread(
            _devbuf._PipelineArray.from_bytes, meta_key, meta, chunks, **opts
        )

    async def _read_chunks(self, engine, items, arr, device, drop_axes, chunk_shape) -> None:
        itemsize = arr.dtype.itemsize
        per_chunk = max(1, int(np.prod(chunk_shape, dtype=np.int64)) * itemsize)
        step = max(1, _CHUNK_BATCH_BYTES // per_chunk)
        if device is not None:
            import cupy as xp  # the output is cupy's
        else:
            xp = np
        for i in range(0, len(items), step):
            part = items[i : i + step]
            coords = [list(c) for c, *_ in part]
            decoded = await asyncio.to_thread(engine.read_chunks, coords, device)
            for chunk, (_c, cs, os_, _k) in zip(decoded, part):
                values = xp.asarray(chunk)[cs]
                if drop_axes:
                    values = values.squeeze(axis=drop_axes)
                arr[os_] = values


def _register() -> None:
    # The entry point registers the class when zarr-python looks pipelines up; registering
    # on import too makes `codec_pipeline.path` work from a source tree without one.
    from zarr.registry import register_pipeline

    register_pipeline(CodecPipeline)


_register()
