#!/usr/bin/env python3
"""Generates the zarr fixtures that devbuf's `zarrs` feature must read bit-exactly.

    python3 scripts/make_zarr_fixtures.py [OUT_DIR]    # default tests/fixtures/zarr
    python3 scripts/make_zarr_fixtures.py --codecs [OUT_DIR]    # default tests/fixtures/zarr_codecs

Needs zarr-python 3 and numcodecs (pip install "zarr>=3" numcodecs). Every array is
written by zarr-python into a directory store; beside it, `expected/<name>.bin` holds the
whole array as numpy would return it (C order, little-endian for multi-byte types,
one byte per bool), and `manifest.json` lists each fixture with its shape, numpy dtype,
zarr format, order, fill value, compressor, whether it is sharded and which chunks were
left unwritten. The data is deterministic (seeded), so re-running the script reproduces
the same expected bytes (compressed chunks may differ between library versions).

`--codecs` writes the second set, tests/fixtures/zarr_codecs (issue 28, part 4), and
leaves the first alone: numcodecs' other codecs (bz2, bitround, pcodec, zfpy, fletcher32,
adler32, shuffle) and numpy datetime64 / timedelta64 arrays, which devbuf reads (the
manifest's `time_unit` names the unit of the int64 values), and under `refused` arrays
devbuf refuses as unsupported (lzma, delta, quantize, variable-length strings,
structured types), each with the name its error must contain. Lossy codecs (bitround,
zfpy) record what zarr-python reads back. Written with pinned versions:

    pip install "zarr==3.1.6" "numcodecs==0.16.6" "numpy==2.4.6" "pcodec==1.1.0" "zfpy==1.0.1"
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
          stored_byteorder=None, lossy=False, time_unit=None):
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
        arr[sl] = np.ascontiguousarray(full[sl])
        expected[sl] = full[sl]
    back = arr[...]
    if lossy:
        expected = back
    assert np.array_equal(back, expected, equal_nan=expected.dtype.kind in "fcmM"), name
    if time_unit is not None:
        # datetime64 / timedelta64: the int64 counts of the unit.
        expected = expected.view("<i8")
        full = full.view("<i8")
        fill = int(np.array(arr.fill_value).view("<i8"))
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
        **({"time_unit": time_unit} if time_unit is not None else {}),
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


def main_codecs():
    """The second set (see the module documentation)."""
    import numcodecs
    from zarr.codecs import numcodecs as nc
    global RNG
    RNG = np.random.default_rng(20261126)
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    os.makedirs(os.path.join(OUT, "expected"))
    shape, chunks = (10, 7), (4, 3)
    missing = ((1, 1),)
    f64 = data_for("float64", shape)
    f32 = data_for("float32", shape)
    i32 = data_for("int32", shape)
    i64 = data_for("int64", shape)
    smooth = np.cumsum(RNG.integers(-3, 4, int(np.prod(shape)))).reshape(shape).astype("int64")
    wave = np.sin(np.arange(int(np.prod(shape))) / 5.0).reshape(shape) * 100.0

    def v3(name, full, comp, fill=0, lossy=False, **kw):
        write(name, lambda p: zarr.create_array(
            store=p, shape=shape, chunks=chunks, dtype=full.dtype, fill_value=fill,
            zarr_format=3, **kw), full, 3, fill=fill, compressor=comp, missing=missing, lossy=lossy)

    def v2(name, full, comp, fill=0, lossy=False, **kw):
        write(name, lambda p: zarr.create_array(
            store=p, shape=shape, chunks=chunks, dtype=full.dtype, fill_value=fill,
            zarr_format=2, **kw), full, 2, fill=fill, compressor=comp, missing=missing, lossy=lossy)

    v3("v3_float32_bz2", f32, "numcodecs.bz2", compressors=nc.BZ2(level=5))
    v2("v2_int32_bz2", i32, "numcodecs.bz2", compressors=numcodecs.BZ2(level=5))
    v3("v3_float32_bitround", f32, "bitround", lossy=True,
       filters=nc.BitRound(keepbits=8), compressors=ZstdCodec(level=3))
    v2("v2_float64_bitround", f64, "bitround", lossy=True,
       filters=[numcodecs.BitRound(keepbits=12)], compressors=numcodecs.Zstd(level=3))
    v3("v3_int64_pcodec", smooth, "numcodecs.pcodec", serializer=nc.PCodec(level=8), compressors=None)
    v2("v2_float64_pcodec", wave, "numcodecs.pcodec", compressors=numcodecs.PCodec(level=8))
    v3("v3_float64_zfpy", wave, "numcodecs.zfpy", lossy=True,
       serializer=nc.ZFPY(mode=4, tolerance=1e-3), compressors=None)
    v2("v2_float64_zfpy", wave, "numcodecs.zfpy", lossy=True,
       compressors=numcodecs.ZFPY(mode=4, tolerance=1e-3))
    v3("v3_int32_fletcher32", i32, "numcodecs.fletcher32", compressors=nc.Fletcher32())
    v2("v2_float32_fletcher32", f32, "numcodecs.fletcher32",
       filters=[numcodecs.Fletcher32()], compressors=numcodecs.Zstd(level=3))
    v3("v3_int64_adler32", i64, "numcodecs.adler32", compressors=nc.Adler32())
    v3("v3_float64_shuffle", f64, "numcodecs.shuffle", compressors=[nc.Shuffle(elementsize=8), nc.Zlib(level=5)])
    # numpy datetime64 / timedelta64: read as int64 counts of the unit.
    base = np.datetime64("2026-01-01T00:00:00", "ns")
    for fmt in (3, 2):
        for unit, kind in (("ns", "M"), ("10s", "m"), ("D", "M"), ("ms", "m")):
            dt = np.dtype(f"{kind}8[{unit}]")
            ints = RNG.integers(-(10 ** 12), 10 ** 12, int(np.prod(shape)), dtype="int64").reshape(shape)
            ints[0, 0] = np.iinfo("int64").min  # NaT
            full = ints.view(dt)
            name = f"v{fmt}_{'datetime64' if kind == 'M' else 'timedelta64'}_{unit}"
            write(name, lambda p, d=dt, f=fmt: zarr.create_array(
                store=p, shape=shape, chunks=chunks, dtype=d, fill_value=np.array("NaT", dtype=d)[()],
                compressors=ZstdCodec(level=3) if f == 3 else numcodecs.Zstd(level=3), zarr_format=f),
                full, fmt, compressor="zstd", missing=missing, time_unit=f"{kind}8[{unit}]")
    # Refused: each with the name its error must contain.
    refused = []

    def refuse(name, names, fn):
        fn(os.path.join(OUT, name + ".zarr"))
        refused.append({"name": name, "path": name + ".zarr", "error_names": names})

    refuse("v3_float64_lzma", ["lzma"], lambda p: zarr.create_array(
        store=p, shape=shape, chunks=chunks, dtype="float64", compressors=nc.LZMA(), zarr_format=3))
    refuse("v2_float64_lzma", ["lzma"], lambda p: zarr.create_array(
        store=p, shape=shape, chunks=chunks, dtype="float64", compressors=numcodecs.LZMA(), zarr_format=2))
    refuse("v3_int32_delta", ["delta"], lambda p: zarr.create_array(
        store=p, shape=shape, chunks=chunks, dtype="int32", filters=nc.Delta(dtype="<i4"), zarr_format=3))
    refuse("v2_int32_delta", ["delta"], lambda p: zarr.create_array(
        store=p, shape=shape, chunks=chunks, dtype="int32", filters=[numcodecs.Delta(dtype="<i4")],
        zarr_format=2))
    refuse("v3_float64_quantize", ["quantize"], lambda p: zarr.create_array(
        store=p, shape=shape, chunks=chunks, dtype="float64", filters=nc.Quantize(digits=3, dtype="<f8"),
        zarr_format=3))
    refuse("v2_float64_quantize", ["quantize"], lambda p: zarr.create_array(
        store=p, shape=shape, chunks=chunks, dtype="float64", filters=[numcodecs.Quantize(digits=3, dtype="<f8")],
        zarr_format=2))
    refuse("v3_string_vlen", ["string"], lambda p: zarr.create_array(
        store=p, shape=(4,), chunks=(2,), dtype=str, zarr_format=3))
    refuse("v2_string_vlen", ["vlen-utf8"], lambda p: zarr.create_array(
        store=p, shape=(4,), chunks=(2,), dtype=str, zarr_format=2))
    refuse("v2_structured", ["structured"], lambda p: zarr.create_array(
        store=p, shape=(4,), chunks=(2,), dtype=[("a", "<i4"), ("b", "<f8")], zarr_format=2))
    refuse("v3_structured", ["structured"], lambda p: zarr.create_array(
        store=p, shape=(4,), chunks=(2,), dtype=[("a", "<i4"), ("b", "<f8")], zarr_format=3))
    from importlib.metadata import version
    versions = {m: version(m) for m in ("zarr", "numcodecs", "numpy", "pcodec", "zfpy")}
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump({"generator": ", ".join(f"{k} {v}" for k, v in versions.items()),
                   "fixtures": fixtures, "refused": refused}, f, indent=1)
    print(f"wrote {len(fixtures)} fixtures and {len(refused)} refused arrays to {OUT}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--codecs":
        OUT = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(
            os.path.dirname(__file__), "..", "tests", "fixtures", "zarr_codecs"))
        main_codecs()
    else:
        main()
