"""zarr-python's two gpu tests (tests/test_buffer.py) that fail only with devbuf's pipeline,
run by hand: the same writes and reads without their `pytest.warns` (they expect zarr's
slow host-copy warning), values compared, and how the pipeline ran them. Needs cupy and
a GPU: `python3 scripts/zarr_gpu_warning_check.py`."""
import asyncio, warnings
import cupy as cp
import zarr
from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, TransposeCodec, ZstdCodec
from zarr.core.buffer import gpu
from zarr.storage import MemoryStore, StorePath

zarr.config.set({"codec_pipeline.path": "devbuf.zarr.CodecPipeline"})

async def case(sharded):
    expect = cp.zeros((10, 10), dtype="uint16", order="F")
    kw = dict(shards=(10, 10)) if sharded else dict(compressors=[BloscCodec(), Crc32cCodec(), GzipCodec(), ZstdCodec()], filters=[TransposeCodec(order=(1, 0))])
    a = await zarr.api.asynchronous.create_array(StorePath(MemoryStore()) / "t", shape=expect.shape, chunks=(5, 5), dtype=expect.dtype, fill_value=0, **kw)
    expect[:] = cp.arange(100).reshape(10, 10)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        await a.setitem(selection=(slice(0, 10), slice(0, 10)), value=expect[:], prototype=gpu.buffer_prototype)
        got = await a.getitem(selection=(slice(0, 10), slice(0, 10)), prototype=gpu.buffer_prototype)
    p = a.codec_pipeline
    print(f"sharded={sharded}: cupy={isinstance(got, cp.ndarray)} equal={bool(cp.array_equal(expect, got))} "
          f"last_write={p.last_write!r} last_read={p.last_read!r} warnings={[str(x.message)[:60] for x in w]}")

for sharded in (False, True):
    with zarr.config.enable_gpu() if sharded else zarr.config.set({}):
        asyncio.run(case(sharded))
