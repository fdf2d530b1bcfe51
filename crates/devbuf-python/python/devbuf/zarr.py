"""zarr-python's codec pipeline on devbuf's read engine (docs/python.md).

Select it with::

    zarr.config.set({"codec_pipeline.path": "devbuf.zarr.CodecPipeline"})

Reads decode with devbuf's engine into zarr-python's output buffer (numpy on the host,
cupy under ``zarr.config.enable_gpu()``). Arrays in a ``LocalStore`` are read by the
engine from their directory; for other stores the chunk bytes are fetched through the
store and decoded by the engine; zarr-python's ``ObjectStore`` on obstore's S3, GCS,
Azure and HTTP stores is read by the engine's own fetches (its URL and configuration).
Writes encode with the engine too: into the ``LocalStore``'s directory or the object
store, or into memory and then through the store. Whatever the
engine refuses (a codec or data type it does not read, an output it cannot fill, a
selection that is not one box, ``write_empty_chunks=True``) is read or written by
zarr-python's own ``BatchedCodecPipeline`` for that call.

Options, from zarr's config:

* ``codec_pipeline.decoder``: ``"auto"`` (default), ``"cpu"``, ``"gpu"`` or ``"both"``.
* ``codec_pipeline.threads``: the engine's worker threads (default: one per core).
* ``codec_pipeline.staging``: bytes of one staging slot of a device read (the engine's
  ``ReadOptions.slot_bytes``; 1 byte to 1 GiB).
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
from ._zarr_batches import (
    _as_tuple,
    _chunk_shape,
    _covers,
    _extent,
    _is_int,
    _key_splitter,
    _one_box,
    _Refused,
    _source,
    _split_key,
    _target,
)
from ._zarr_stores import _local_root, _obstore_local_root, _url_of

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from zarr.abc.codec import Codec
    from zarr.abc.store import ByteGetter, ByteSetter, Store
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import NDBuffer
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


def _codecs_of(metadata: ArrayMetadata) -> list[Codec]:
    if isinstance(metadata, ArrayV3Metadata):
        return list(metadata.codecs)
    if isinstance(metadata, ArrayV2Metadata):
        return [V2Codec(filters=metadata.filters, compressor=metadata.compressor)]
    raise TypeError(f"unknown zarr metadata {type(metadata).__name__}")


def _custom_codec(codecs) -> str | None:
    """The first codec (a sharding codec's inner ones included) whose implementation is
    not zarr-python's or numcodecs' own, named: zarr's ``codecs.*`` config can swap in a
    user's class, which must run (the engine would encode and decode without it)."""
    for codec in codecs:
        cls = type(codec)
        module = cls.__module__
        if not (module.startswith("zarr.") or module.startswith("numcodecs.")):
            return f"codec {getattr(codec, 'codec_name', cls.__name__)!s} is implemented by {module}.{cls.__qualname__}"
        for inner in ("codecs", "index_codecs"):
            nested = getattr(codec, inner, None)
            if isinstance(nested, (tuple, list)):
                why = _custom_codec(nested)
                if why:
                    return why
    return None


def _options() -> dict[str, Any]:
    threads = config.get("codec_pipeline.threads", None)
    staging = config.get("codec_pipeline.staging", None)
    return {
        "decoder": config.get("codec_pipeline.decoder", None),
        "threads": None if threads is None else int(threads),
        "staging": None if staging is None else int(staging),
    }


async def _engine_or_why(run) -> str:
    """How the engine did a read or write (``run``, a coroutine), or ``"fallback: <why>"``
    when it refused or failed (zarr-python's pipeline then answers), logged; with
    ``codec_pipeline.strict`` the engine's error, or NotImplementedError naming why."""
    strict = config.get("codec_pipeline.strict", False)
    try:
        return await run
    except _Refused as e:
        how = f"fallback: {e}"
    except Exception as e:  # noqa: BLE001 - zarr-python's pipeline answers instead
        if strict:
            raise
        how = f"fallback: {type(e).__name__}: {e}"
    if strict:
        raise NotImplementedError(f"devbuf.zarr.CodecPipeline (strict): {how}")
    _log.debug("devbuf.zarr.CodecPipeline: %s", how)
    return how


@dataclass
class CodecPipeline(_CodecPipelineABC):
    """zarr-python's ``CodecPipeline`` on devbuf's engine (reads and writes) and
    zarr-python's ``BatchedCodecPipeline`` (what the engine refuses)."""

    metadata: ArrayMetadata
    store: Store | None
    fallback: BatchedCodecPipeline
    #: how the last read ran: ``"engine"`` (the array's directory), ``"engine-bytes"``
    #: (bytes fetched through the store), ``"fallback: <why>"``, or None before any read.
    last_read: str | None = field(default=None, compare=False)
    #: how the last write ran, in the same words as ``last_read``.
    last_write: str | None = field(default=None, compare=False)
    #: the engine's read report (decoder, chunks, workers, times) of the last read that
    #: went straight into the output (``"engine"`` / ``"engine-url"`` / ``"engine-bytes"``
    #: without ``(chunks)``), else None.
    last_report: str | None = field(default=None, compare=False)
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
        self.last_write = None
        self.last_report = None
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
        batch = list(batch_info)
        if not batch:
            return
        how = await _engine_or_why(self._write_engine(batch, value, drop_axes))
        if how.startswith("fallback"):
            # Whole-selection writes are idempotent: whatever the engine stored before
            # it failed is overwritten with the same values.
            self.last_write = how  # also when zarr-python's pipeline raises
            await self.fallback.write(batch, value, drop_axes)
        self.last_write = how

    def _items(self, batch, what: str):
        """(the array's path in the store, [(chunk coordinates, chunk selection, output
        selection, chunk key)]) of a read's or write's batch; refused when a codec has a
        user's implementation (zarr's ``codecs.*`` config: zarr-python must run it) or
        the chunks are not of one array."""
        md = self.metadata
        custom = _custom_codec(_codecs_of(md))
        if custom:
            raise _Refused(f"{custom} (zarr-python runs it)")
        items = []
        prefix = None
        split = _key_splitter(md)
        for byte_getter_or_setter, _spec, cs, os_, _complete in batch:
            path = getattr(byte_getter_or_setter, "path", None)
            if not isinstance(path, str):
                raise _Refused(f"a {what}'s store path of type {type(byte_getter_or_setter).__name__}")
            p, key, coords = split(path)
            if prefix is None:
                prefix = p
            elif prefix != p:
                raise _Refused(f"chunks of several arrays in one {what}")
            items.append((coords, cs, os_, key))
        return prefix, items

    async def _write_engine(self, batch, value, drop_axes) -> str:
        md = self.metadata
        if getattr(self.store, "read_only", False):
            # zarr-python's own pipeline raises the store's error (the engine would write
            # the directory or bucket underneath a read-only store).
            raise _Refused("the store is read-only")
        if any(getattr(spec.config, "write_empty_chunks", False) for _, spec, *_ in batch):
            raise _Refused(
                "write_empty_chunks=True (the engine never stores chunks equal to the fill value)"
            )
        prefix, items = self._items(batch, "write")
        chunk_shape = _chunk_shape(md)
        # What the engine refuses is decided before any store is touched, so that
        # zarr-python's pipeline, answering instead, makes the only requests.
        value_shape = tuple(value.as_ndarray_like().shape)
        scalar = len(value_shape) == 0
        if not drop_axes:
            # zarr-python passes no drop_axes to writes: an integer index leaves its axis
            # out of the value.
            first = _as_tuple(items[0][1])
            ints = tuple(i for i, sel in enumerate(first) if _is_int(sel))
            if ints and (scalar or len(value_shape) == len(chunk_shape) - len(ints)):
                drop_axes = ints
        box = _one_box(items, chunk_shape, None if scalar else value_shape, drop_axes)
        if box is None:
            raise _Refused("a write that is not one box of the array (fancy or strided selection)")
        starts, shape = box
        opts = _options()
        extent = tuple(a + n for a, n in zip(starts, shape))
        engine, how = await self._direct_engine(prefix, opts, extent)
        if engine is None:
            engine = await self._engine_for_write(batch, items, opts, chunk_shape)
            how = "engine-bytes"
        arr, device = _source(value, engine.dtype)
        xp = np
        if device is not None:
            import cupy as xp  # the value is cupy's
        if scalar:
            data = xp.full(tuple(shape), arr, dtype=arr.dtype)
        else:
            data = xp.ascontiguousarray(arr).reshape(tuple(shape))
        if device is None:
            address = data.__array_interface__["data"][0]
        else:
            address = data.__cuda_array_interface__["data"][0]
        await asyncio.to_thread(engine.write_box, starts, shape, address, data.nbytes, device)
        if how == "engine-bytes":
            await self._store_written(engine, batch, items)
        return how

    async def _direct_engine(self, prefix, opts, extent=None):
        """(the engine's array at ``prefix`` opened from the store's own location, how
        it reads: ``"engine"`` for a ``LocalStore`` directory, ``"engine-url"`` for an
        object store the engine fetches from itself), or (None, None).

        zarr-python resizes an array by replacing its AsyncArray's metadata in place (and
        writing it): the pipeline keeps the old metadata, and an engine opened before a
        resize that grew the array has the old shape. One that does not cover ``extent``
        (the box a read or write reaches) is opened anew, from the store's new metadata."""
        # Keyed by where the array is now, not by its path in the store: a LocalStore
        # can move (LocalStore.move), and the engine must follow it.
        root = _local_root(self.store)
        if root is None:
            root = _obstore_local_root(self.store)
        if root is not None:
            where = ("path", os.path.join(root, prefix) if prefix else root)
        else:
            url = _url_of(self.store, prefix)
            if url is None:
                return None, None
            where = ("url", url[0], repr(sorted(url[1].items())))
        cached = self._engines.get(where)
        if cached is not None and (extent is None or _covers(tuple(cached[0].shape), extent)):
            return cached
        if where[0] == "path":
            engine = await asyncio.to_thread(_devbuf._PipelineArray.open_path, where[1], **opts)
            how = "engine"
        else:
            engine = await asyncio.to_thread(_devbuf._PipelineArray.open_url, url[0], url[1], **opts)
            how = "engine-url"
        self._engines[where] = (engine, how)
        return engine, how

    async def _engine_for_write(self, batch, items, opts, chunk_shape):
        """An engine array over a memory store holding the metadata and the stored
        chunks the write covers partly (the engine reads, updates and rewrites them)."""
        md = self.metadata
        extent = _extent(items, chunk_shape)
        if not _covers(tuple(md.shape), extent):
            # Grown since this pipeline was made (see _engine_from_bytes).
            md = md.update_shape(tuple(max(n, e) for n, e in zip(md.shape, extent)))
        docs = md.to_buffer_dict(_cpu_prototype)
        meta_key = "zarr.json" if isinstance(md, ArrayV3Metadata) else ".zarray"
        meta = docs[meta_key].to_bytes()
        partial = [(bg, bg.path) for bg, _s, _c, _o, complete in batch if not complete]

        async def fetch(byte_getter, _path):
            return await byte_getter.get(prototype=_cpu_prototype)

        values = await concurrent_map(partial, fetch, config.get("async.concurrency"))
        chunks = {}
        for (_bg, path), v in zip(partial, values):
            if v is not None:
                chunks[_split_key(md, path)[1]] = v.to_bytes()
        return await asyncio.to_thread(
            _devbuf._PipelineArray.from_bytes, meta_key, meta, chunks, **opts
        )

    async def _store_written(self, engine, batch, items) -> None:
        """Stores what the engine wrote into its memory store through zarr-python's
        byte setters (deleting chunks the engine did not store: equal to the fill
        value)."""
        stored = await asyncio.to_thread(engine.stored, [key for *_, key in items])

        async def put(byte_setter, data):
            if data is None:
                await byte_setter.delete()
            else:
                await byte_setter.set(_cpu_prototype.buffer.from_bytes(data))

        await concurrent_map(
            [(bs, data) for (bs, *_), data in zip(batch, stored)],
            put,
            config.get("async.concurrency"),
        )

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
        self.last_report = None
        how = await _engine_or_why(self._read_engine(batch, out, drop_axes))
        if how.startswith("fallback"):
            self.last_read = how  # also when zarr-python's pipeline raises
            _count_read(how)
            await self.fallback.read(batch, out, drop_axes)
            return
        self.last_read = how
        _count_read(how)

    async def _read_engine(self, batch, out, drop_axes) -> str:
        md = self.metadata
        prefix, items = self._items(batch, "read")
        chunk_shape = _chunk_shape(md)
        opts = _options()
        # One box (the usual case) gives the read's extent for free; else every chunk's.
        box = _one_box(items, chunk_shape, out.shape, drop_axes)
        if box is not None:
            extent = tuple(a + n for a, n in zip(*box))
        else:
            extent = _extent(items, chunk_shape)
        engine, how = await self._direct_engine(prefix, opts, extent)
        if engine is None:
            engine = await self._engine_from_bytes(batch, items, opts, chunk_shape)
            how = "engine-bytes"
        arr, device, swapped = _target(out, engine.dtype)
        if box is not None and swapped and arr.flags.writeable:
            # The engine reads native-endian values; numpy swaps them into the output.
            starts, shape = box
            native = np.empty(arr.shape, dtype=np.dtype(engine.dtype))
            address = native.__array_interface__["data"][0]
            self.last_report = await asyncio.to_thread(
                engine.read_into, starts, shape, address, native.nbytes, None
            )
            arr[...] = native
            return how
        if box is not None and arr.flags.c_contiguous and (device is not None or arr.flags.writeable):
            starts, shape = box
            if device is None:
                address = arr.__array_interface__["data"][0]
            else:
                address = arr.__cuda_array_interface__["data"][0]
            self.last_report = await asyncio.to_thread(
                engine.read_into, starts, shape, address, arr.nbytes, device
            )
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
