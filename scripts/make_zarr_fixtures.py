#!/usr/bin/env python3
"""Generates the zarr fixtures that devbuf's `zarrs` feature must read bit-exactly.

    python3 scripts/make_zarr_fixtures.py [OUT_DIR]    # default tests/fixtures/zarr

Needs zarr-python 3 and numcodecs (pip install "zarr>=3" numcodecs). Every array is
written by zarr-python into a directory store; beside it, `expected/<name>.bin` holds the
whole array as numpy would return it (C order, little-endian for multi-byte types,
one byte per bool), and `manifest.json` lists each fixture with its shape, numpy dtype,
zarr format, order, fill value, compressor, whether it is sharded and which chunks were
left unwritten. The data is deterministic (seeded), so re-running the script reproduces
the same expected bytes (compressed chunks may differ between library versions).
"""
import json
import os
import shutil
import sys

import numpy as np
import zarr
from zarr.codecs import BloscCodec, BytesCodec, GzipCodec, ShardingCodec, ZstdCodec

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "zarr")
OUT = os.path.abspath(OUT)
RNG = np.random.default_rng(20261121)

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]


def data_for(dtype, shape):
    dt = np.dtype(dtype)
    n = int(np.prod(shape))
    if dt.kind == "b":
        a = RNG.integers(0, 2, n).astype(bool)
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        a = RNG.integers(info.min, info.max, n, dtype=dt, endpoint=True)
    elif dt.kind == "f":
        a = (RNG.standard_normal(n) * 1000).astype(dt)
        a[:: max(n // 7, 1)] = np.array([-0.0], dtype=dt)[0]
        if n > 3:
            a[1] = np.inf
            a[2] = np.nan
    else:
        a = (RNG.standard_normal(n) + 1j * RNG.standard_normal(n)).astype(dt)
    return a.reshape(shape)


def fill_for(dtype):
    dt = np.dtype(dtype)
    return {"b": True, "i": -7, "u": 42, "f": 1.5, "c": complex(2.0, -1.0)}[dt.kind]


def json_fill(v):
    if isinstance(v, complex):
        return [v.real, v.imag]
    if isinstance(v, float) and np.isnan(v):
        return "NaN"
    return v


fixtures = []


def write(name, arr_fn, full, fmt, order="C", fill=None, compressor="none", sharded=False, missing=(),
          stored_byteorder=None):
    path = os.path.join(OUT, name + ".zarr")
    arr = arr_fn(path)
    # Write every chunk except the missing ones, chunk by chunk.
    chunks = arr.chunks
    grid = [-(-s // c) for s, c in zip(full.shape, chunks)]
    expected = np.full(full.shape, arr.fill_value if arr.fill_value is not None else 0, dtype=full.dtype)
    for idx in np.ndindex(*grid):
        if tuple(idx) in missing:
            continue
        sl = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(idx, chunks, full.shape))
        arr[sl] = full[sl]
        expected[sl] = full[sl]
    back = arr[...]
    assert np.array_equal(back, expected, equal_nan=expected.dtype.kind in "fc"), name
    le = expected.astype(expected.dtype.newbyteorder("<")) if expected.dtype.itemsize > 1 else expected
    with open(os.path.join(OUT, "expected", name + ".bin"), "wb") as f:
        f.write(np.ascontiguousarray(le).tobytes(order="C"))
    fixtures.append({
        "name": name,
        "path": name + ".zarr",
        "zarr_format": fmt,
        "shape": list(full.shape),
        "chunks": list(chunks),
        "dtype": str(np.dtype(full.dtype).newbyteorder("=")) if full.dtype.kind != "b" else "bool",
        "stored_byteorder": stored_byteorder or ("big" if full.dtype.byteorder == ">" else "little"),
        "order": order,
        "fill_value": json_fill(fill),
        "compressor": compressor,
        "sharded": sharded,
        # With sharding, `chunks` are the inner chunks and `shards` the stored chunks.
        "shards": list(arr.shards) if sharded else None,
        "missing_chunks": [list(m) for m in missing],
    })


def compressors_v3(kind):
    return {
        "none": None,
        "zstd": ZstdCodec(level=3),
        "gzip": GzipCodec(level=5),
        "blosc": BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),
    }[kind]


def compressor_v2(kind):
    import numcodecs
    return {
        "none": None,
        "zstd": numcodecs.Zstd(level=3),
        "gzip": numcodecs.GZip(level=5),
        "blosc": numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
    }[kind]


def main():
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    os.makedirs(os.path.join(OUT, "expected"))
    shape, chunks = (10, 7), (4, 3)
    missing = ((1, 1), (2, 2))
    for dtype in DTYPES:
        full = data_for(dtype, shape)
        fill = fill_for(dtype)
        # zarr v3, zstd, with two chunks never written (they read as the fill value).
        write(f"v3_{dtype}", lambda p, d=dtype, f=fill: zarr.create_array(
            store=p, shape=shape, chunks=chunks, dtype=d, fill_value=f,
            compressors=compressors_v3("zstd"), zarr_format=3),
            full, 3, fill=fill, compressor="zstd", missing=missing)
        # zarr v2, C and F order, blosc.
        for order in ("C", "F"):
            write(f"v2_{dtype}_{order}", lambda p, d=dtype, f=fill, o=order: zarr.create_array(
                store=p, shape=shape, chunks=chunks, dtype=d, fill_value=f, order=o,
                compressors=compressor_v2("blosc"), zarr_format=2),
                full, 2, order=order, fill=fill, compressor="blosc", missing=missing)
    # Every compressor on both formats, float32 and int16, 3-d.
    shape3, chunks3 = (6, 5, 4), (3, 2, 4)
    for comp in ("none", "zstd", "gzip", "blosc"):
        for dtype in ("float32", "int16"):
            full = data_for(dtype, shape3)
            write(f"v3_{dtype}_{comp}", lambda p, d=dtype, c=comp: zarr.create_array(
                store=p, shape=shape3, chunks=chunks3, dtype=d, fill_value=0,
                compressors=compressors_v3(c), zarr_format=3),
                full, 3, fill=0, compressor=comp)
            write(f"v2_{dtype}_{comp}", lambda p, d=dtype, c=comp: zarr.create_array(
                store=p, shape=shape3, chunks=chunks3, dtype=d, fill_value=0,
                compressors=compressor_v2(c), zarr_format=2),
                full, 2, fill=0, compressor=comp)
    # Big-endian storage: v2 dtype '>i4' / '>f8', v3 bytes codec endian=big.
    for dtype in ("int32", "float64", "complex64", "uint16"):
        full = data_for(dtype, shape)
        be = np.dtype(dtype).newbyteorder(">")
        write(f"v2_{dtype}_bigendian", lambda p, d=be: zarr.create_array(
            store=p, shape=shape, chunks=chunks, dtype=d, fill_value=0,
            compressors=None, zarr_format=2),
            full.astype(be), 2, fill=0, compressor="none")
        write(f"v3_{dtype}_bigendian", lambda p, d=dtype: zarr.create_array(
            store=p, shape=shape, chunks=chunks, dtype=d, fill_value=0,
            serializer=BytesCodec(endian="big"), compressors=None, zarr_format=3),
            full, 3, fill=0, compressor="none", stored_byteorder="big")
    # Sharding (v3): 2 x 2 shards of 8 x 8 holding 4 x 4 inner chunks, zstd inside, one
    # inner chunk (index (1, 0) of the inner chunk grid) never written.
    for dtype in ("float32", "uint8", "float64"):
        full = data_for(dtype, (16, 16))
        write(f"v3_{dtype}_sharded", lambda p, d=dtype: zarr.create_array(
            store=p, shape=(16, 16), chunks=(4, 4), shards=(8, 8), dtype=d, fill_value=3,
            compressors=compressors_v3("zstd"), zarr_format=3),
            full, 3, fill=3, compressor="zstd", sharded=True, missing=((1, 0),))
    # NaN fill value, edge chunks, 1-d and 0-d arrays.
    full = data_for("float64", (11,))
    write("v3_float64_nanfill_1d", lambda p: zarr.create_array(
        store=p, shape=(11,), chunks=(4,), dtype="float64", fill_value=float("nan"),
        compressors=compressors_v3("gzip"), zarr_format=3),
        full, 3, fill=float("nan"), compressor="gzip", missing=((1,),))
    full = data_for("int32", ())
    write("v3_int32_0d", lambda p: zarr.create_array(
        store=p, shape=(), chunks=(), dtype="int32", fill_value=0,
        compressors=None, zarr_format=3),
        full, 3, fill=0, compressor="none")
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump({"generator": f"zarr-python {zarr.__version__}, numcodecs {__import__('numcodecs').__version__}, numpy {np.__version__}",
                   "fixtures": fixtures}, f, indent=1)
    print(f"wrote {len(fixtures)} fixtures to {OUT}")


if __name__ == "__main__":
    main()
