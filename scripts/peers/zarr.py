#!/usr/bin/env python3
"""zarr read peers: tensorstore, zarr-python (host and GPU; its default pipeline, devbuf's and
zarrs-python's), devbuf's Python binding, kvikio's GDSStore and nvCOMP's own Python decoder
reading the same zarr v3 stores that devbuf's Rust read benchmark reads (issue 30).

    python3 scripts/bench_peers.py zarr list  [--mib 512]
    python3 scripts/bench_peers.py zarr write --dir DIR [--mib 512] [--only NAMES] [--writer W]
                                              [--check-full]
    python3 scripts/bench_peers.py zarr read  --dir DIR [--only NAMES] [--peers NAMES]
                                              [--repeat 5] [--repeat-for PEER=N,...]
                                              [--peer-budget-s S] [--time-limit-s T]
                                              [--json FILE] [--markdown FILE]

NAMES is a comma-separated list of store (or peer) names; shell-style patterns work
(`--only 'f32_c1m_*,u16_*'`). `write` writes with tensorstore (`--writer zarr`: zarr-python;
`auto`, the default, falls back to zarr-python where tensorstore is missing or refuses a
codec) and adds/replaces the stores it wrote in DIR/manifest.json. `read` times every peer
on every store of the manifest (page cache warm: one untimed warm-up, then the median of
`--repeat` runs) in GB/s of decoded bytes (1 GB = 1e9 bytes), prints one table per store,
and writes one JSON object per line per (store, peer) to `--json FILE`. A peer that cannot run
(package missing, no GPU, codec it cannot decode) prints "cannot run: <why>" and the run goes
on. `--repeat-for 'zarr-gpu=2,kvikio-gds=2'` gives some peers (patterns work) another repeat
count, and `--peer-budget-s S` runs a peer fewer times on a store (at least once) where its
warm-up times the repeat count exceeds S seconds (the slow ones: to keep a run short);
`--time-limit-s T` starts no peer after T seconds (those left say "out of time"). At the end `read` prints a summary: GB/s per store
and peer, and the ratios issue 30 sets targets for (zarr-gpu+devbuf / zarr-gpu >= 5,
zarr-gpu+devbuf / devbuf >= 0.8, zarr+devbuf / zarrs-python >= 1; zarr+devbuf / devbuf-host
for information), also written as Markdown to `--markdown FILE`.

Peers (`--peers` picks some):
  tensorstore         ts.open(...).read().result() into numpy (cache pool off)
  tensorstore+cupy    the same, then cupy.asarray(...) and a device synchronize
  zarr                zarr-python 3: arr[...] into numpy
  zarr-gpu            zarr-python 3 under zarr.config.enable_gpu(): arr[...] into cupy,
                      synchronize (zarr 3.1 decodes on the CPU even so: each chunk goes
                      device -> host -> codec -> device)
  zarr+devbuf         zarr: arr[...] into numpy with devbuf's pipeline selected
                      ({"codec_pipeline.path": "devbuf.zarr.CodecPipeline"} while the array
                      is opened); the pipeline's `last_read` after every read must start
                      with "engine" (else the result counts as failed: "fallback")
  zarr-gpu+devbuf     zarr-gpu with devbuf's pipeline: the engine reads into the cupy output
  devbuf              devbuf.open(path).read(device=0) (the engine straight onto GPU 0; the
                      read synchronises the device itself), then a device synchronize
  devbuf-host         devbuf.open(path).read() into host memory, numpy.asarray (no copy)
  zarrs-python        zarr: arr[...] into numpy with zarrs-python's pipeline selected
                      ({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline",
                      "codec_pipeline.strict": True}: whatever it refuses fails instead of
                      quietly running zarr-python's pipeline)
  zarrs-python+cupy   the same, then cupy.asarray(...) and a device synchronize
  kvikio-gds          zarr-gpu on kvikio's kvikio.zarr.GDSStore (a LocalStore whose reads go
                      through cuFile into the GPU buffers enable_gpu asks for; compat mode,
                      POSIX reads + copies, where the GDS driver is missing): zarr-python's
                      default pipeline, decoding on the CPU as zarr-gpu does
  nvcomp-decode       nvidia.nvcomp: the store's compressed chunks (for a sharded store:
                      its inner chunks, found through the shard index) already on the
                      device, one batched Codec.decode into preallocated chunk-contiguous
                      device memory, stream synchronized; zstd and gzip only (blosc frames
                      carry their own block + shuffle container that nvCOMP cannot read)
  nvcomp-read+decode  the same plus the file reads (os.preadv into one page-locked host
                      buffer, 16-byte aligned slots) and one host->device copy, per run
Every peer's output is checked once (the warm-up's) against the manifest's CRC-32 of the
array; the nvCOMP peers' chunks are placed into an array on the host for that check only.
The nvCOMP peers place nothing on the device (a strided device copy, TB/s) and reuse one
DecompressConfig, as a reader that knows the chunk shape from zarr.json would.

manifest.json (written by `write` into DIR; the Rust benchmark reads the same file)
-----------------------------------------------------------------------------------
{"format": "devbuf-zarr-peers/1", "created": ISO-8601 UTC, "mib": N (the --mib of the
 last write), "stores": [STORE, ...]}   stores keep the order of `list`.
STORE (sizes in bytes, shapes in elements, arrays in C order):
  name               id and directory name, e.g. "f32_c1m_zstd1"
  path               the store's directory, relative to the manifest's directory
  shape              array shape (2-d float32 stores; the detector store is 3-d: frames)
  dtype              numpy dtype name, "float32" or "uint16" (also zarr's data_type)
  chunk_shape        the regular chunk grid's chunk shape (for a sharded store: the shard)
  inner_chunk_shape  shape of a shard's inner chunks, or null when not sharded
  codec              short description: "none", "zstd(level=1)", "gzip(level=1)",
                     "blosc(cname=lz4,clevel=5,shuffle=shuffle)",
                     "sharding(inner=zstd(level=1))"
  fill_value         0 (every chunk is written all the same)
  codecs             zarr.json's "codecs" list, verbatim (standard zarr v3 codec names:
                     bytes, zstd, gzip, blosc, sharding_indexed, crc32c)
  chunk_bytes        decoded bytes of one chunk (of one inner chunk when sharded)
  n_chunks           chunks (inner chunks when sharded) covering the array
  n_files            chunk (or shard) files written
  decoded_bytes      prod(shape) * itemsize
  stored_bytes       total size of the chunk / shard files (zarr.json not counted)
  ratio              decoded_bytes / stored_bytes
  crc32              zlib CRC-32 (as crc32fast computes it) of the whole array's bytes,
                     C order, little-endian
  writer             "tensorstore 0.1.x" or "zarr-python 3.x"
  check_failed       present only when `write` read the store back wrong: what differed
  data               what the values are
Chunk keys use the default encoding: chunk (i, j) of a store is the file
`<path>/c/<i>/<j>`; zarr.json sits in `<path>`. fill_value is 0; every chunk is written.

JSON lines written by `read` (one object per store and peer):
  {"store", "peer", "gbps" (decoded bytes / median seconds / 1e9, null if skipped),
   "median_s", "min_s", "times_s" [..], "repeat", "decoded_bytes" (bytes the peer
   produced), "stored_bytes", "ratio", "verified" (true / false / null), "skipped"
   (reason or null), "note", "versions" {...}, "host" {...}, "time" (ISO-8601 UTC)}
  zarr-python peers add "pipeline" (the class that read); zarr+devbuf and zarr-gpu+devbuf
  add "last_read" {value of CodecPipeline.last_read: reads} and "engine_used" (true when
  every read, warm-up included, went through the engine), and "problem" when it did not.
"""
import argparse
import datetime
import fnmatch
import json
import math
import os
import platform
import statistics
import sys
import time
import zlib

# This file is called zarr.py: drop its own folder from the import path, or `import zarr`
# would import this script instead of zarr-python.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import numpy as np  # noqa: E402

KIB, MIB = 1 << 10, 1 << 20
FORMAT = "devbuf-zarr-peers/1"
FILL = 0

# --------------------------------------------------------------------------- the store plan

BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
CODECS = {
    "none": ("none", []),
    "zstd1": ("zstd(level=1)", [{"name": "zstd", "configuration": {"level": 1, "checksum": False}}]),
    "zstd3": ("zstd(level=3)", [{"name": "zstd", "configuration": {"level": 3, "checksum": False}}]),
    "gzip1": ("gzip(level=1)", [{"name": "gzip", "configuration": {"level": 1}}]),
    "blosclz4": ("blosc(cname=lz4,clevel=5,shuffle=shuffle)",
                 [{"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle",
                                                      "typesize": 4, "blocksize": 0}}]),
}
F32_CHUNKS = [("256k", 256), ("1m", 512), ("4m", 1024), ("16m", 2048)]  # square float32 chunks
F32_DATA = ("float32: a smooth field (280 + gradient + 6 separable sines of 0.5-8 periods per "
            "2048 px, ~234-324) plus N(0, 0.05) noise, quantised to 1/1024 (seed 20261124)")
U16_DATA = ("uint16 detector frames 2048 x 2048: diffuse scatter + 3 powder rings + 300 Bragg "
            "spots per frame, Poisson-like noise (Gaussian approximation), mean ~12 counts "
            "(seed 20261125)")


def f32_shape(mib):
    """A 2-d float32 shape of about `mib` MiB: power-of-two columns >= rows."""
    elems = max(1, int(mib * MIB) // 4)
    cols = 1 << math.ceil(math.log2(math.sqrt(elems)))
    return [max(1, -(-elems // cols)), cols]


def plan(mib):
    """Every store `write` can make, in manifest order."""
    shape = f32_shape(mib)
    stores = []
    for clabel, side in F32_CHUNKS:
        for key, (desc, comp) in CODECS.items():
            stores.append({
                "name": f"f32_c{clabel}_{key}", "shape": shape, "dtype": "float32",
                "chunk_shape": [side, side], "inner_chunk_shape": None, "codec": desc,
                "codecs": [BYTES] + comp, "data": F32_DATA})
    zstd1 = CODECS["zstd1"][1]
    for slabel, side in [("4m", 1024), ("16m", 2048)]:
        stores.append({
            "name": f"f32_s{slabel}_i64k_zstd1", "shape": shape, "dtype": "float32",
            "chunk_shape": [side, side], "inner_chunk_shape": [128, 128],
            "codec": "sharding(inner=zstd(level=1))",
            "codecs": [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": [128, 128], "codecs": [BYTES] + zstd1,
                "index_codecs": [BYTES, {"name": "crc32c"}], "index_location": "end"}}],
            "data": F32_DATA})
    frames = max(1, round(mib / 8))
    stores.append({
        "name": "u16_det_c512_zstd3", "shape": [frames, 2048, 2048], "dtype": "uint16",
        "chunk_shape": [1, 512, 512], "inner_chunk_shape": None, "codec": "zstd(level=3)",
        "codecs": [BYTES] + CODECS["zstd3"][1], "data": U16_DATA})
    for s in stores:
        s["path"] = s["name"]
        s["fill_value"] = FILL
        inner = s["inner_chunk_shape"] or s["chunk_shape"]
        s["chunk_bytes"] = int(np.prod(inner)) * np.dtype(s["dtype"]).itemsize
        s["n_chunks"] = int(np.prod([-(-n // c) for n, c in zip(s["shape"], inner)]))
        s["decoded_bytes"] = int(np.prod(s["shape"])) * np.dtype(s["dtype"]).itemsize
    return stores


def pick(items, only, key=lambda x: x):
    if not only:
        return list(items)
    pats = [p.strip() for p in only.split(",") if p.strip()]
    return [i for i in items if any(fnmatch.fnmatchcase(key(i), p) for p in pats)]


def zarr_json(s):
    return {"zarr_format": 3, "node_type": "array", "shape": s["shape"], "data_type": s["dtype"],
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": s["chunk_shape"]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": FILL, "codecs": s["codecs"], "attributes": {}}


# --------------------------------------------------------------------------- data

def f32_data(shape, seed=20261124):
    """Smooth field + noise, quantised to 1/1024: zstd-1 ratio ~1.4 on 1 MiB chunks."""
    rows, cols = shape
    rng = np.random.default_rng(seed)
    # Coordinates in units of 2048 pixels, whatever the array's size, so that a chunk sees
    # the same local variation (and compresses the same) in a 16 MiB and a 512 MiB array.
    y = np.arange(rows, dtype=np.float64) / 2048
    x = np.arange(cols, dtype=np.float64) / 2048
    f = np.empty((rows, cols), np.float32)
    f[:] = (275.0 + 2.5 * y).astype(np.float32)[:, None]
    tmp = np.empty_like(f)
    for i in range(6):
        fx, fy = rng.uniform(0.5, 8, 2)
        px, py = rng.uniform(0, 2 * np.pi, 2)
        a = 20.0 / (i + 1)
        sy = (a * np.sin(2 * np.pi * fy * y + py)).astype(np.float32)
        sx = np.sin(2 * np.pi * fx * x + px).astype(np.float32)
        np.multiply(sy[:, None], sx[None, :], out=tmp)
        f += tmp
    rng.standard_normal(out=tmp, dtype=np.float32)
    tmp *= np.float32(0.05)
    f += tmp
    del tmp
    f *= np.float32(1024.0)
    np.rint(f, out=f)
    f *= np.float32(1.0 / 1024.0)
    return f


def u16_data(shape, seed=20261125):
    """Detector frames: background + rings + Bragg spots, Poisson-like noise."""
    frames, side = shape[0], shape[1]
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float32)
    r = np.hypot(yy - (side / 2 + 13), xx - (side / 2 - 7))
    bg = (40.0 * np.exp(-r / (side / 5)) + 3.0).astype(np.float32)
    for rad, w, h in [(0.15, 4, 60), (0.25, 5, 35), (0.37, 6, 20)]:
        bg += (h * np.exp(-0.5 * ((r - rad * side) / w) ** 2)).astype(np.float32)
    del r
    out = np.empty(shape, np.uint16)
    noise = np.empty((side, side), np.float32)
    for k in range(frames):
        lam = bg.copy()
        py, px = rng.uniform(0, side, 300), rng.uniform(0, side, 300)
        amp = rng.lognormal(6, 1.2, 300)
        for y0, x0, a in zip(py, px, amp):
            y1, y2 = int(max(y0 - 6, 0)), int(min(y0 + 7, side))
            x1, x2 = int(max(x0 - 6, 0)), int(min(x0 + 7, side))
            d2 = (yy[y1:y2, x1:x2] - y0) ** 2 + (xx[y1:y2, x1:x2] - x0) ** 2
            lam[y1:y2, x1:x2] += (a * np.exp(-0.5 * d2 / 1.5 ** 2)).astype(np.float32)
        rng.standard_normal(out=noise, dtype=np.float32)
        noise *= np.sqrt(lam)
        lam += noise
        np.rint(lam, out=lam)
        np.clip(lam, 0, 65535, out=lam)
        out[k] = lam
    return out


def crc32(a):
    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return zlib.crc32(memoryview(a).cast("B")) & 0xFFFFFFFF


# --------------------------------------------------------------------------- write

def version(dist):
    try:
        from importlib.metadata import version as v
        return v(dist)
    except Exception:
        return None


def write_tensorstore(path, s, data):
    import tensorstore as ts
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": path},
            "metadata": {k: v for k, v in zarr_json(s).items() if k not in ("zarr_format", "node_type")},
            "create": True, "delete_existing": True,
            "context": {"cache_pool": {"total_bytes_limit": 0}}}
    arr = ts.open(spec).result()
    arr.write(data).result()
    return f"tensorstore {version('tensorstore')}"


def write_zarr(path, s, data):
    import shutil
    import zarr
    if os.path.exists(path):
        shutil.rmtree(path)
    os.makedirs(path)
    with open(os.path.join(path, "zarr.json"), "w") as f:
        json.dump(zarr_json(s), f, indent=2)
    arr = zarr.open_array(path, mode="r+")
    arr[...] = data
    return f"zarr-python {zarr.__version__}"


def store_files(path):
    """(relative path, size) of every chunk / shard file of a store (zarr.json excluded)."""
    out = []
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            rel = os.path.relpath(full, path)
            if rel != "zarr.json":
                out.append((rel, os.path.getsize(full)))
    return out


def check_with(reader, path, s, data, full):
    """Reads a corner region (or everything) back with `reader` and compares."""
    if reader == "zarr":
        import zarr
        arr = zarr.open_array(path, mode="r")
        get = lambda sel: arr[sel]  # noqa: E731
    else:
        import tensorstore as ts
        arr = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": path}},
                      read=True).result()
        get = lambda sel: arr[sel].read().result()  # noqa: E731
    if full:
        got = get(tuple(slice(None) for _ in s["shape"]))
        return crc32(got) == s["crc32"], "whole array (crc32)"
    c = s["inner_chunk_shape"] or s["chunk_shape"]
    first = tuple(slice(0, min(n, k + 3)) for n, k in zip(s["shape"], c))
    last = tuple(slice(max(0, n - k - 3), n) for n, k in zip(s["shape"], c))
    ok = all(np.array_equal(get(sel), data[sel]) for sel in (first, last))
    return ok, "first and last chunk regions"


def cmd_write(args):
    stores = pick(plan(args.mib), args.only, key=lambda s: s["name"])
    if not stores:
        print(f"no store matches --only {args.only}; `list` shows the names", file=sys.stderr)
        return 2
    os.makedirs(args.dir, exist_ok=True)
    man_path = os.path.join(args.dir, "manifest.json")
    manifest = {"format": FORMAT, "stores": []}
    if os.path.exists(man_path):
        with open(man_path) as f:
            old = json.load(f)
        if old.get("format") == FORMAT:
            manifest = old
    have_ts = version("tensorstore") is not None
    have_zarr = version("zarr") is not None
    data_cache = {}
    written = []
    print(f"writing {len(stores)} stores of ~{args.mib} MiB into {os.path.abspath(args.dir)}")
    print(f"{'store':<26} {'shape':>16} {'chunk':>12} {'codec':<40} {'MiB':>7} {'stored':>7} "
          f"{'ratio':>6} {'s':>6}  checks")
    for s in stores:
        key = (s["dtype"], tuple(s["shape"]))
        if key not in data_cache:
            t = time.perf_counter()
            data_cache.clear()
            data = f32_data(s["shape"]) if s["dtype"] == "float32" else u16_data(s["shape"])
            data_cache[key] = (data, crc32(data))
            print(f"  (generated {s['dtype']} {s['shape']} in {time.perf_counter() - t:.1f} s)")
        data, crc = data_cache[key]
        s = dict(s, crc32=crc)
        path = os.path.join(args.dir, s["path"])
        t = time.perf_counter()
        writer = None
        errors = []
        order = {"tensorstore": ["tensorstore"], "zarr": ["zarr"],
                 "auto": ["tensorstore", "zarr"]}[args.writer]
        for w in order:
            if (w == "tensorstore" and not have_ts) or (w == "zarr" and not have_zarr):
                errors.append(f"{w}: not installed")
                continue
            try:
                writer = (write_tensorstore if w == "tensorstore" else write_zarr)(path, s, data)
                break
            except Exception as e:  # a codec the writer refuses: try the next one
                errors.append(f"{w}: {type(e).__name__}: {e}")
        if writer is None:
            print(f"{s['name']:<26} NOT WRITTEN: {'; '.join(errors)}")
            continue
        dt = time.perf_counter() - t
        files = store_files(path)
        with open(os.path.join(path, "zarr.json")) as f:
            s["codecs"] = json.load(f)["codecs"]  # as the writer normalised them
        s["writer"] = writer
        s["n_files"] = len(files)
        s["stored_bytes"] = sum(n for _, n in files)
        s["ratio"] = round(s["decoded_bytes"] / s["stored_bytes"], 4) if s["stored_bytes"] else None
        checks = []
        for reader, present in (("zarr", have_zarr), ("tensorstore", have_ts)):
            if not present:
                checks.append(f"{reader}: not installed")
                continue
            try:
                ok, what = check_with(reader, path, s, data, args.check_full and reader == "zarr")
                checks.append(f"{reader} {'ok' if ok else 'MISMATCH'}")
                if not ok:
                    s["check_failed"] = f"{reader}: {what} differ"
            except Exception as e:
                checks.append(f"{reader} FAILED ({type(e).__name__}: {e})")
                s["check_failed"] = f"{reader}: {type(e).__name__}: {e}"
        shape = "x".join(map(str, s["shape"]))
        chunk = "x".join(map(str, s["chunk_shape"]))
        if s["inner_chunk_shape"]:
            chunk += "/" + "x".join(map(str, s["inner_chunk_shape"]))
        print(f"{s['name']:<26} {shape:>16} {chunk:>12} {s['codec']:<40} "
              f"{s['decoded_bytes'] / MIB:>7.1f} {s['stored_bytes'] / MIB:>7.1f} "
              f"{s['ratio'] or 0:>6.3f} {dt:>6.1f}  {', '.join(checks)}"
              + (f"  [{errors[0]}]" if errors else ""))
        written.append(s)
        by_name = {x["name"]: x for x in manifest["stores"]}
        by_name[s["name"]] = s
        order_names = [p["name"] for p in plan(args.mib)]
        manifest["stores"] = sorted(by_name.values(),
                                    key=lambda x: order_names.index(x["name"])
                                    if x["name"] in order_names else len(order_names))
        manifest["created"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        manifest["mib"] = int(args.mib) if float(args.mib).is_integer() else args.mib
        with open(man_path + ".tmp", "w") as f:
            json.dump(manifest, f, indent=1)
        os.replace(man_path + ".tmp", man_path)
    sizes = {tuple(x["shape"]) for x in manifest["stores"]}
    if len(sizes) > 2:
        print(f"note: the manifest now holds stores of different sizes: {sorted(sizes)}")
    bad = [s["name"] for s in written if "check_failed" in s]
    print(f"wrote {len(written)}/{len(stores)} stores; manifest: {man_path}"
          + (f"; CHECK FAILED: {', '.join(bad)}" if bad else ""))
    return 0 if len(written) == len(stores) and not bad else 1


# --------------------------------------------------------------------------- read

class Skip(Exception):
    """A peer that cannot run on this store: the message says why."""


class Peer:
    """What a peer function returns: `run()` reads once (its result is what `to_host` checks),
    `sync()` waits for the device; `note` (a string or a callable) goes into the table's notes
    and the JSON; `decoded_bytes` replaces the store's when the peer decodes something else;
    `after_run()` runs after every (warm-up or timed) read, untimed; `info()` returns extra
    JSON fields, where a "problem" key (a string) counts the result as failed."""

    def __init__(self, run, sync, to_host, note=None, decoded_bytes=None, after_run=None,
                 info=None):
        self.run, self.sync, self.to_host, self.note = run, sync, to_host, note
        self.decoded_bytes, self.after_run, self.info = decoded_bytes, after_run, info


_GPU = {}


def gpu_or_skip():
    """Raises Skip("no GPU (...)") unless the CUDA driver loads and sees a device."""
    if "why" not in _GPU:
        import ctypes
        why = None
        try:
            cuda = ctypes.CDLL("libcuda.so.1")
            n = ctypes.c_int(0)
            rc = cuda.cuInit(0)
            if rc != 0:
                why = f"cuInit returned {rc}"
            elif cuda.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value < 1:
                why = "the CUDA driver sees no device"
        except OSError as e:
            why = f"no CUDA driver: {e}"
        _GPU["why"] = why
    if _GPU["why"]:
        raise Skip(f"no GPU ({_GPU['why']})")


def cupy_or_skip():
    gpu_or_skip()
    try:
        import cupy as cp
    except Exception as e:
        raise Skip(f"cupy not importable ({type(e).__name__}: {e})")
    try:
        n = cp.cuda.runtime.getDeviceCount()
    except Exception as e:
        raise Skip(f"no CUDA device ({type(e).__name__}: {e})")
    if n < 1:
        raise Skip("no CUDA device")
    return cp


def warm_page_cache(path):
    buf = bytearray(4 * MIB)
    for rel, _ in store_files(path):
        with open(os.path.join(path, rel), "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def peer_tensorstore(path, s, upload):
    try:
        import tensorstore as ts
    except Exception as e:
        raise Skip(f"tensorstore not importable ({type(e).__name__}: {e})")
    cp = cupy_or_skip() if upload else None
    arr = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": path},
                   "context": {"cache_pool": {"total_bytes_limit": 0}}}, read=True).result()
    if not upload:
        return Peer(lambda: arr.read().result(), lambda: None, lambda out: out)
    dev = cp.cuda.Device()
    return Peer(lambda: cp.asarray(arr.read().result()), dev.synchronize, cp.asnumpy)


DEFAULT_PIPELINE = "zarr.core.codec_pipeline.BatchedCodecPipeline"
PIPELINES = {
    # name: (zarr config set while the array is opened, module that must import first)
    None: ({"codec_pipeline.path": DEFAULT_PIPELINE}, None),
    "devbuf": ({"codec_pipeline.path": "devbuf.zarr.CodecPipeline"}, "devbuf.zarr"),
    # strict: an array or read zarrs-python cannot do raises instead of quietly running
    # zarr-python's own pipeline (the peer then says why it could not run)
    "zarrs": ({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline", "codec_pipeline.strict": True},
              "zarrs"),
}


def kvikio_mode(kvikio):
    """kvikio's compat mode setting and whether it falls back to POSIX reads (no GDS)."""
    out = []
    try:
        import kvikio.defaults  # noqa: F401  (a submodule `import kvikio` leaves out)
    except Exception as e:
        return f"kvikio.defaults not importable ({type(e).__name__}: {e})"
    for what, get in (("compat_mode", lambda: kvikio.defaults.get("compat_mode")),
                      ("compat_mode_preferred", kvikio.defaults.is_compat_mode_preferred)):
        try:
            v = get()
            out.append(f"{what}={getattr(v, 'name', v)}")
        except Exception as e:
            out.append(f"{what}=? ({type(e).__name__}: {e})")
    return ", ".join(out)


def peer_zarr(path, s, gpu, pipeline=None, upload=False, store=None):
    """zarr-python reading the whole array: on the host (`gpu` False; `upload`: then
    cupy.asarray), or under zarr.config.enable_gpu() into cupy (`gpu` True). `pipeline`
    picks the codec pipeline (PIPELINES), `store` "gds" opens kvikio's GDSStore."""
    cp = cupy_or_skip() if gpu or upload else None
    try:
        import zarr
    except Exception as e:
        raise Skip(f"zarr-python not importable ({type(e).__name__}: {e})")
    conf, module = PIPELINES[pipeline]
    if module:
        import importlib
        try:
            importlib.import_module(module)  # devbuf.zarr registers its pipeline on import too
        except Exception as e:
            raise Skip(f"{module} not importable ({type(e).__name__}: {e})")
    if gpu:
        if not hasattr(zarr.config, "enable_gpu"):
            raise Skip(f"zarr {zarr.__version__} has no config.enable_gpu()")
        try:
            import zarr.core.buffer.gpu  # noqa: F401  (needs cupy)
        except Exception as e:
            raise Skip(f"zarr's GPU buffers unavailable ({type(e).__name__}: {e})")
    target = path
    extra = ""
    if store == "gds":
        try:
            import kvikio
            import kvikio.zarr
        except Exception as e:
            raise Skip(f"kvikio.zarr not importable ({type(e).__name__}: {e}); "
                       f"kvikio-cu13 {version('kvikio-cu13')}, zarr {zarr.__version__}")
        target = kvikio.zarr.GDSStore(path, read_only=True)
        extra = f", kvikio {kvikio.__version__} GDSStore, {kvikio_mode(kvikio)}"
    with zarr.config.set(conf):
        arr = zarr.open_array(target, mode="r")
    pipe = arr.async_array.codec_pipeline
    cls = f"{type(pipe).__module__}.{type(pipe).__qualname__}"
    want = conf["codec_pipeline.path"]
    if cls != want and not (pipeline is None and type(pipe).__name__ == "BatchedCodecPipeline"):
        raise Skip(f"the array's codec pipeline is {cls}, not {want}")
    if pipeline == "zarrs" and getattr(pipe, "impl", True) is None:
        raise Skip("zarrs-python refused the array (its pipeline has no Rust implementation)")
    note = (f"pipeline {cls}{extra}; async.concurrency={zarr.config.get('async.concurrency')}, "
            f"threading.max_workers={zarr.config.get('threading.max_workers')}")
    reads = {}
    # devbuf's pipeline: where a read's time goes (seconds per run): inside the
    # pipeline's read (`pipeline`), of which the engine's calls (`engine`); the rest of
    # the run is zarr-python's own work before and after it calls the pipeline (the
    # selection's chunks, their store paths and chunk specs, the output's allocation).
    reports = []  # the engine's read reports (devbuf's pipeline)
    split = {"total": [], "pipeline": [], "engine": []}
    cur = {"total": 0.0, "pipeline": 0.0, "engine": 0.0}

    def timed(run):
        def go():
            t = time.perf_counter()
            try:
                return run()
            finally:
                cur["total"] += time.perf_counter() - t
        return go
    if pipeline == "devbuf":
        import asyncio
        import types

        import devbuf.zarr as dz

        orig_read = pipe.read

        async def timed_read(*a, **k):
            t = time.perf_counter()
            try:
                return await orig_read(*a, **k)
            finally:
                cur["pipeline"] += time.perf_counter() - t

        async def timed_to_thread(f, *a, **k):
            t = time.perf_counter()
            try:
                return await asyncio.to_thread(f, *a, **k)
            finally:
                cur["engine"] += time.perf_counter() - t

        object.__setattr__(pipe, "read", timed_read)
        dz.asyncio = types.SimpleNamespace(to_thread=timed_to_thread)

    def after_run():
        how = getattr(pipe, "last_read", None)
        reads[how] = reads.get(how, 0) + 1
        if pipeline == "devbuf":
            if getattr(pipe, "last_report", None):
                reports.append(pipe.last_report)
            pipe.last_read = None  # so that a read that never reaches the pipeline shows
            for k in split:
                split[k].append(cur[k])
                cur[k] = 0.0

    def info():
        out = {"pipeline": cls}
        if pipeline == "devbuf":
            out["last_read"] = {str(k): v for k, v in reads.items()}
            used = bool(reads) and all(isinstance(k, str) and k.startswith("engine") for k in reads)
            out["engine_used"] = used
            if not used:
                out["problem"] = f"devbuf's pipeline did not read through the engine: {reads}"
            if split["pipeline"]:
                med = lambda v: sorted(v)[len(v) // 2] * 1e3  # noqa: E731
                t, p, e = split["total"], split["pipeline"], split["engine"]
                out["read_ms"] = round(med(t), 2)
                out["outside_pipeline_ms"] = round(med([a - b for a, b in zip(t, p)]), 2)
                out["pipeline_python_ms"] = round(med([a - b for a, b in zip(p, e)]), 2)
                out["engine_ms"] = round(med(e), 2)
            if reports:
                out["engine_report"] = reports[-1]
        return out

    if not gpu:
        if upload:
            dev = cp.cuda.Device()
            return Peer(lambda: cp.asarray(arr[...]), dev.synchronize, cp.asnumpy, note,
                        after_run=after_run, info=info)
        return Peer(timed(lambda: arr[...]), lambda: None, lambda out: out, note,
                    after_run=after_run, info=info)
    dev = cp.cuda.Device()

    def read():
        with zarr.config.enable_gpu():
            out = arr[...]
        if not isinstance(out, cp.ndarray):
            raise RuntimeError(f"enable_gpu() read returned {type(out).__name__}, not cupy")
        return out
    return Peer(timed(read), dev.synchronize, cp.asnumpy, note, after_run=after_run, info=info)


def peer_devbuf(path, s, device):
    """devbuf's Python binding reading the whole array: `devbuf.open(path).read(device=...)`,
    onto GPU 0 or (device None) into host memory that numpy takes without a copy."""
    if device is not None:
        gpu_or_skip()
    try:
        import devbuf
    except Exception as e:
        raise Skip(f"devbuf not importable ({type(e).__name__}: {e})")
    if device is not None and not devbuf.is_available():
        raise Skip(f"no GPU (devbuf: {devbuf.unavailable_reason()})")
    a = devbuf.open(path)
    _, report = a.read(device=device, report=True)
    del _
    note = f"devbuf.open(path).read(device={device}): {report.get('summary', report)}"
    if device is None:
        return Peer(lambda: np.asarray(a.read()), lambda: None, lambda out: out, note)
    try:
        import cupy as cp
        dev = cp.cuda.Device(device)
        sync, via = dev.synchronize, "cupy"
    except Exception:
        ctx = devbuf.Context(device)
        sync, via = ctx.synchronize, "devbuf.Context"
    note += f"; then a device synchronize ({via})"
    return Peer(lambda: a.read(device=device), sync,
                lambda out: np.asarray(out.copy_to_host()), note)


NVCOMP_ALGO = {"zstd": "Zstd", "gzip": "Gzip"}


def chunk_pieces(path, meta):
    """The compressed pieces to decode, as (file, offset, length, origin, shape) tuples, plus
    the name of the one bytes->bytes codec after `bytes`. Raises Skip where nvCOMP can't."""
    codecs = meta["codecs"]
    shape = meta["shape"]
    grid = meta["chunk_grid"]["configuration"]["chunk_shape"]
    sep = meta.get("chunk_key_encoding", {}).get("configuration", {}).get("separator", "/")
    if meta.get("chunk_key_encoding", {}).get("name", "default") != "default":
        raise Skip("chunk key encoding is not 'default'")
    sharded = codecs[0]["name"] == "sharding_indexed"
    if sharded:
        if len(codecs) != 1:
            raise Skip("codecs after sharding_indexed")
        conf = codecs[0]["configuration"]
        inner_codecs = conf["codecs"]
        inner = conf["chunk_shape"]
        index_codecs = [c["name"] for c in conf.get("index_codecs", [BYTES, {"name": "crc32c"}])]
        if index_codecs not in (["bytes"], ["bytes", "crc32c"]):
            raise Skip(f"shard index codecs {index_codecs} not understood")
        at_end = conf.get("index_location", "end") == "end"
    else:
        inner_codecs, inner = codecs, grid
    names = [c["name"] for c in inner_codecs]
    if names[0] != "bytes" or inner_codecs[0].get("configuration", {}).get("endian", "little") != "little":
        raise Skip(f"codecs {names}: needs little-endian `bytes` first")
    if len(names) == 1:
        raise Skip("uncompressed: nothing to decode")
    if len(names) != 2 or names[1] not in NVCOMP_ALGO:
        why = ("blosc frames hold their own block + shuffle container: nvCOMP's Python API decodes "
               "whole chunks only (devbuf takes the containers apart itself)"
               if "blosc" in names else "nvCOMP peer handles one zstd or gzip codec after `bytes`")
        raise Skip(f"codecs {names}: {why}")
    pieces = []
    counts = [-(-n // c) for n, c in zip(shape, grid)]
    for idx in np.ndindex(*counts):
        fname = os.path.join(path, "c" + "".join(sep + str(i) for i in idx))
        origin = [i * c for i, c in zip(idx, grid)]
        if not os.path.exists(fname):
            pieces.append((None, 0, 0, origin, inner if not sharded else grid))
            continue
        if not sharded:
            pieces.append((fname, 0, os.path.getsize(fname), origin, inner))
            continue
        per = [g // c for g, c in zip(grid, inner)]
        n_inner = int(np.prod(per))
        isize = 16 * n_inner + (4 if len(index_codecs) == 2 else 0)
        size = os.path.getsize(fname)
        with open(fname, "rb") as f:
            f.seek(size - isize if at_end else 0)
            index = np.frombuffer(f.read(16 * n_inner), dtype="<u8").reshape(n_inner, 2)
        for k, sub in enumerate(np.ndindex(*per)):
            off, nb = int(index[k, 0]), int(index[k, 1])
            o = [a + b * c for a, b, c in zip(origin, sub, inner)]
            if any(x >= n for x, n in zip(o, shape)):
                continue
            if off == 2 ** 64 - 1:
                pieces.append((None, 0, 0, o, inner))
            else:
                pieces.append((fname, off, nb, o, inner))
    return pieces, names[1], inner


def peer_nvcomp(path, s, with_read):
    cp = cupy_or_skip()
    try:
        import nvidia.nvcomp as nvc
    except Exception as e:
        raise Skip(f"nvidia.nvcomp not importable ({type(e).__name__}: {e})")
    with open(os.path.join(path, "zarr.json")) as f:
        meta = json.load(f)
    pieces, codec_name, inner = chunk_pieces(path, meta)
    missing = sum(1 for p in pieces if p[0] is None)
    if missing:
        raise Skip(f"{missing} chunks missing (fill value): the peer decodes stored chunks only")
    dtype = np.dtype(meta["data_type"])
    chunk_bytes = int(np.prod(inner)) * dtype.itemsize
    stream = cp.cuda.Stream(non_blocking=True)
    codec = nvc.Codec(algorithm=NVCOMP_ALGO[codec_name], bitstream_kind=nvc.BitstreamKind.RAW,
                      cuda_stream=stream.ptr)
    align = 16
    try:
        align = max(align, int(codec.get_required_decompression_alignment()))
    except Exception:
        pass
    offsets, sizes, pos = [], [], 0
    for _, _, nb, _, _ in pieces:
        offsets.append(pos)
        sizes.append(nb)
        pos += -(-nb // align) * align
    total_in = max(pos, align)
    pinned = cp.cuda.alloc_pinned_memory(total_in)
    host = np.frombuffer(pinned, np.uint8, total_in)
    hostmv = memoryview(host)
    by_file = {}
    for (fname, off, nb, _, _), slot in zip(pieces, offsets):
        by_file.setdefault(fname, []).append((off, nb, slot))

    def read_files():
        for fname, parts in by_file.items():
            fd = os.open(fname, os.O_RDONLY)
            try:
                for off, nb, slot in parts:
                    got = os.preadv(fd, [hostmv[slot:slot + nb]], off)
                    if got != nb:
                        raise IOError(f"{fname}: short read {got} of {nb} at {off}")
            finally:
                os.close(fd)

    read_files()
    dev_in = cp.empty(total_in, dtype=cp.uint8)
    dev_in.set(host, stream=stream)
    n = len(pieces)
    dev_out = cp.empty(n * chunk_bytes, dtype=cp.uint8)
    src = nvc.as_arrays(dev_in, offsets, sizes, cuda_stream=stream.ptr)
    out = nvc.as_arrays(dev_out, [i * chunk_bytes for i in range(n)], [chunk_bytes] * n,
                        cuda_stream=stream.ptr)
    stream.synchronize()
    cfg = codec.decompression_config(src)
    stream.synchronize()
    mode = {"call": None}

    def decode():
        if mode["call"] is None:  # first call: find which form of decode this nvcomp takes
            try:
                codec.decode(src, out=out, decompression_config=cfg)
                mode["call"] = "out+config"
            except (TypeError, ValueError) as e:
                mode["error"] = f"{type(e).__name__}: {e}"
                mode["call"] = "plain"
                mode["result"] = codec.decode(src)
            return
        if mode["call"] == "out+config":
            codec.decode(src, out=out, decompression_config=cfg)
        else:
            mode["result"] = codec.decode(src)

    def run():
        if with_read:
            read_files()
            dev_in.set(host, stream=stream)
        decode()

    def to_host(_):
        stream.synchronize()
        if mode["call"] == "plain":
            res = mode["result"]
            flat = np.concatenate([np.asarray(cp.asarray(res[i]).get()).view(np.uint8).ravel()
                                   for i in range(len(res))])
        else:
            flat = cp.asnumpy(dev_out)
        arr = np.full(s["shape"], FILL, dtype=dtype)
        for i, (_, _, _, origin, cshape) in enumerate(pieces):
            block = flat[i * chunk_bytes:(i + 1) * chunk_bytes].view(dtype).reshape(cshape)
            dst = tuple(slice(o, min(o + c, n_)) for o, c, n_ in zip(origin, cshape, s["shape"]))
            arr[dst] = block[tuple(slice(0, d.stop - d.start) for d in dst)]
        return arr

    note = (f"{len(pieces)} x {chunk_bytes // KIB} KiB chunks in one batch, "
            f"{NVCOMP_ALGO[codec_name]} RAW, compressed {total_in / MIB:.1f} MiB")
    note += "; per run: preadv into page-locked memory + one upload + decode" if with_read \
        else "; compressed chunks already on the device"

    def note_fn():
        extra = f"; decode(out=, decompression_config=) refused ({mode['error']}), plain decode" \
            if mode.get("call") == "plain" else ""
        return note + extra
    return Peer(run, stream.synchronize, to_host, note_fn, n * chunk_bytes)


PEERS = {
    "tensorstore": lambda p, s: peer_tensorstore(p, s, upload=False),
    "tensorstore+cupy": lambda p, s: peer_tensorstore(p, s, upload=True),
    "zarr": lambda p, s: peer_zarr(p, s, gpu=False),
    "zarr-gpu": lambda p, s: peer_zarr(p, s, gpu=True),
    "zarr+devbuf": lambda p, s: peer_zarr(p, s, gpu=False, pipeline="devbuf"),
    "zarr-gpu+devbuf": lambda p, s: peer_zarr(p, s, gpu=True, pipeline="devbuf"),
    "devbuf": lambda p, s: peer_devbuf(p, s, device=0),
    "devbuf-host": lambda p, s: peer_devbuf(p, s, device=None),
    "zarrs-python": lambda p, s: peer_zarr(p, s, gpu=False, pipeline="zarrs"),
    "zarrs-python+cupy": lambda p, s: peer_zarr(p, s, gpu=False, pipeline="zarrs", upload=True),
    "kvikio-gds": lambda p, s: peer_zarr(p, s, gpu=True, store="gds"),
    "nvcomp-decode": lambda p, s: peer_nvcomp(p, s, with_read=False),
    "nvcomp-read+decode": lambda p, s: peer_nvcomp(p, s, with_read=True),
}

# The summary's ratios: (name, numerator peer, denominator peer, target or None). Issue 30:
# with devbuf's pipeline, zarr-python enable_gpu >= 5x its default pipeline and within 20%
# of devbuf's own reads; host reads at least as fast as zarrs-python's pipeline.
RATIOS = [
    ("zarr-gpu+devbuf / zarr-gpu", "zarr-gpu+devbuf", "zarr-gpu", 5.0),
    ("zarr-gpu+devbuf / devbuf", "zarr-gpu+devbuf", "devbuf", 0.8),
    ("zarr+devbuf / zarrs-python", "zarr+devbuf", "zarrs-python", 1.0),
    ("zarr+devbuf / devbuf-host", "zarr+devbuf", "devbuf-host", None),
]


def environment():
    versions = {d: version(d) for d in (
        "numpy", "tensorstore", "zarr", "numcodecs", "devbuf", "zarrs", "kvikio-cu13",
        "libkvikio-cu13", "cupy-cuda13x", "cupy-cuda12x", "nvidia-nvcomp-cu13",
        "nvidia-libnvcomp-cu13")}
    host = {"python": platform.python_version(), "cpus": os.cpu_count(), "node": platform.node()}
    try:
        gpu_or_skip()
        import cupy as cp
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        name = props["name"]
        host["gpu"] = name.decode() if isinstance(name, bytes) else name
    except Skip as e:
        host["gpu"] = None
        host["gpu_error"] = str(e)
    except Exception as e:
        host["gpu"] = None
        host["gpu_error"] = f"{type(e).__name__}: {e}"
    return {k: v for k, v in versions.items() if v}, host


def run_peer(name, path, s, repeat, budget_s=None):
    """Returns a result record (without store/env fields). With `budget_s`, a peer whose
    warm-up took longer than budget_s / repeat runs fewer times (at least once)."""
    rec = {"peer": name, "gbps": None, "median_s": None, "min_s": None, "times_s": [],
           "repeat": repeat, "decoded_bytes": s["decoded_bytes"], "verified": None,
           "skipped": None, "note": None}
    try:
        peer = PEERS[name](path, s)
        after = peer.after_run or (lambda: None)
        if peer.decoded_bytes is not None:
            rec["decoded_bytes"] = peer.decoded_bytes
        t = time.perf_counter()
        out = peer.run()  # warm-up, checked
        peer.sync()
        warm = time.perf_counter() - t
        after()
        if budget_s and warm * repeat > budget_s:
            cut = max(1, int(budget_s // warm))
            if cut < repeat:
                rec["note"] = (f"repeat cut from {repeat} to {cut} (warm-up {warm:.1f} s, "
                               f"--peer-budget-s {budget_s:g})")
                repeat = rec["repeat"] = cut
        try:
            rec["verified"] = crc32(peer.to_host(out)) == s.get("crc32")
        except Exception as e:
            rec["verified"] = False
            rec["note"] = "; ".join(x for x in (rec["note"], f"check failed: {type(e).__name__}: {e}") if x)
        del out
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            r = peer.run()
            peer.sync()
            times.append(time.perf_counter() - t)
            del r
            after()
        med = statistics.median(times)
        rec.update(times_s=[round(t, 6) for t in times], median_s=round(med, 6),
                   min_s=round(min(times), 6), gbps=round(rec["decoded_bytes"] / med / 1e9, 4))
        n = peer.note() if callable(peer.note) else peer.note
        rec["note"] = "; ".join(x for x in (rec["note"], n) if x) or None
        if peer.info:
            rec.update(peer.info())
    except Skip as e:
        rec["skipped"] = str(e)
    except Exception as e:  # a peer that breaks is reported, the run goes on
        rec["skipped"] = f"failed: {type(e).__name__}: {e}"
    return rec


def repeats_for(spec, default):
    """--repeat-for 'zarr-gpu=2,kvikio-*=2' -> function peer -> repeat count."""
    rules = []
    for item in (spec or "").split(","):
        if item.strip():
            pat, _, n = item.partition("=")
            rules.append((pat.strip(), int(n)))
    return lambda peer: next((n for pat, n in rules if fnmatch.fnmatchcase(peer, pat)), default)


def summary(stores, results, peers, repeat):
    """The end-of-run tables, as Markdown lines: GB/s per store and peer, then the ratios the
    issue names (with their targets)."""
    ran = [p for p in peers if any(results.get((s["name"], p), {}).get("gbps") for s in stores)]
    lines = ["GB/s of decoded bytes (1e9), median; `-`: the peer could not run (the log says why); "
             "`(wrong)`: output differs from the manifest's CRC; `(fallback)`: devbuf's pipeline "
             f"did not read through the engine; `(n=N)`: median of N runs, not {repeat}", ""]
    lines.append("| store (ratio) | " + " | ".join(ran) + " |")
    lines.append("|---|" + "---|" * len(ran))
    for s in stores:
        cells = []
        for p in ran:
            r = results.get((s["name"], p), {})
            if not r.get("gbps"):
                cells.append("-")
                continue
            c = f"{r['gbps']:.3f}" if r["gbps"] < 10 else f"{r['gbps']:.2f}"
            if r.get("verified") is False:
                c += " (wrong)"
            if r.get("engine_used") is False:
                c += " (fallback)"
            if r.get("repeat") != repeat:
                c += f" (n={r.get('repeat')})"
            cells.append(c)
        lines.append(f"| {s['name']} ({s.get('ratio')}) | " + " | ".join(cells) + " |")
    lines += ["", "Ratios (target in the header; `MISS`: below it):", ""]
    lines.append("| store | " + " | ".join(
        name + (f" (>= {t:g})" if t else "") for name, _, _, t in RATIOS) + " |")
    lines.append("|---|" + "---|" * len(RATIOS))
    met = {name: [0, 0] for name, *_ in RATIOS}
    for s in stores:
        cells = []
        for name, a, b, target in RATIOS:
            ra, rb = results.get((s["name"], a), {}), results.get((s["name"], b), {})
            if not ra.get("gbps") or not rb.get("gbps"):
                cells.append("-")
                continue
            x = ra["gbps"] / rb["gbps"]
            bad = ra.get("verified") is False or ra.get("engine_used") is False
            c = f"{x:.2f}"
            if target:
                ok = x >= target and not bad
                met[name][0] += ok
                met[name][1] += 1
                if not ok:
                    c += " MISS"
            cells.append(c)
        lines.append(f"| {s['name']} | " + " | ".join(cells) + " |")
    lines.append("| targets met | " + " | ".join(
        (f"{met[name][0]}/{met[name][1]}" if t else "") for name, _, _, t in RATIOS) + " |")
    return lines


def cmd_read(args):
    man_path = os.path.join(args.dir, "manifest.json")
    try:
        with open(man_path) as f:
            manifest = json.load(f)
    except OSError as e:
        print(f"cannot read {man_path}: {e}; run `write` first", file=sys.stderr)
        return 2
    stores = pick(manifest["stores"], args.only, key=lambda s: s["name"])
    peers = pick(list(PEERS), args.peers)
    if not stores or not peers:
        print(f"nothing to do: {len(stores)} stores, {len(peers)} peers selected", file=sys.stderr)
        return 2
    repeat_of = repeats_for(args.repeat_for, args.repeat)
    versions, host = environment()
    print(f"python {host['python']}, {host['cpus']} CPUs, GPU: {host.get('gpu') or 'none'}; "
          + ", ".join(f"{k} {v}" for k, v in versions.items()))
    special = {p: repeat_of(p) for p in peers if repeat_of(p) != args.repeat}
    print(f"{len(stores)} stores x {len(peers)} peers; page cache warm, 1 warm-up + median of "
          f"{args.repeat}" + (" (" + ", ".join(f"{p}: {n}" for p, n in special.items()) + ")"
                              if special else "")
          + (f", fewer where a peer's warm-up x repeats > {args.peer_budget_s:g} s"
             if args.peer_budget_s else "") + "; GB/s of decoded bytes (1e9)")
    jf = open(args.json, "w") if args.json else None
    failures = 0
    results = {}
    t0 = time.perf_counter()
    try:
        for s in stores:
            path = os.path.join(args.dir, s["path"])
            chunk = "x".join(map(str, s["chunk_shape"]))
            if s.get("inner_chunk_shape"):
                chunk += " (inner " + "x".join(map(str, s["inner_chunk_shape"])) + ")"
            print(f"\n== {s['name']}: {'x'.join(map(str, s['shape']))} {s['dtype']}, chunks {chunk} "
                  f"({s['chunk_bytes'] // KIB} KiB), {s['codec']}; {s['decoded_bytes'] / MIB:.0f} MiB "
                  f"-> {s['stored_bytes'] / MIB:.1f} MiB stored (ratio {s['ratio']})", flush=True)
            warm_page_cache(path)
            rows = []
            for p in peers:
                if args.time_limit_s and time.perf_counter() - t0 > args.time_limit_s:
                    rec = {"peer": p, "gbps": None, "median_s": None, "min_s": None, "times_s": [],
                           "repeat": 0, "decoded_bytes": s["decoded_bytes"], "verified": None,
                           "skipped": f"out of time (--time-limit-s {args.time_limit_s:g} passed)",
                           "note": None}
                else:
                    rec = run_peer(p, path, s, repeat_of(p), args.peer_budget_s)
                rec = {"store": s["name"], **rec, "stored_bytes": s["stored_bytes"], "ratio": s["ratio"],
                       "versions": versions, "host": host,
                       "time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
                results[(s["name"], p)] = rec
                if rec["skipped"]:
                    print(f"  {p}: cannot run: {rec['skipped']}", flush=True)
                else:
                    rows.append(rec)
                    if rec["verified"] is False or rec.get("problem"):
                        failures += 1
                if jf:
                    jf.write(json.dumps(rec) + "\n")
                    jf.flush()
            if rows:
                print(f"  | {'peer':<20} | {'GB/s':>8} | {'median ms':>10} | {'min ms':>9} | {'ok':>4} |")
                print(f"  |{'-' * 22}|{'-' * 10}|{'-' * 12}|{'-' * 11}|{'-' * 6}|")
                for r in rows:
                    ok = {True: "yes", False: "NO", None: "?"}[r["verified"]]
                    print(f"  | {r['peer']:<20} | {r['gbps']:>8.3f} | {r['median_s'] * 1e3:>10.1f} | "
                          f"{r['min_s'] * 1e3:>9.1f} | {ok:>4} |")
                for r in rows:
                    if r["note"]:
                        print(f"    {r['peer']}: {r['note']}")
                    if "last_read" in r:
                        print(f"    {r['peer']}: pipeline.last_read {r['last_read']}"
                              + ("" if r.get("engine_used") else "  <-- NOT THE ENGINE"))
                    if r.get("read_ms") is not None:
                        print(f"    {r['peer']}: a read (arr[...]) of {r['read_ms']:.1f} ms: zarr-python "
                              f"outside the pipeline {r['outside_pipeline_ms']:.1f} ms, the "
                              f"pipeline's Python {r['pipeline_python_ms']:.1f} ms, the engine's "
                              f"calls {r['engine_ms']:.1f} ms (medians over the runs)")
                    if r.get("engine_report"):
                        print(f"    {r['peer']}: the engine's last read: {r['engine_report'][:400]}")
                    if r.get("problem"):
                        print(f"    {r['peer']}: PROBLEM: {r['problem']}")
            sys.stdout.flush()
    finally:
        if jf:
            jf.close()
    lines = summary(stores, results, peers, args.repeat)
    print(f"\n== summary ({len(stores)} stores, {time.perf_counter() - t0:.0f} s)")
    print("\n".join(lines))
    if args.markdown:
        head = (f"zarr read peers: python {host['python']}, {host['cpus']} CPUs, GPU: "
                f"{host.get('gpu') or 'none'}; " + ", ".join(f"{k} {v}" for k, v in versions.items())
                + f"; 1 warm-up + median of {args.repeat}"
                + (f" (at most ~{args.peer_budget_s:g} s of timed runs per peer and store)"
                   if args.peer_budget_s else "")
                + (" (" + ", ".join(f"{p}: {n}" for p, n in special.items()) + ")" if special else "")
                + f"; stores from {os.path.abspath(man_path)} (mib {manifest.get('mib')})")
        with open(args.markdown, "w") as f:
            f.write(head + "\n\n" + "\n".join(lines) + "\n")
    if failures:
        print(f"\n{failures} peer results did NOT match the manifest's crc32 or did not read "
              f"through devbuf's engine")
    return 1 if failures else 0


def cmd_list(args):
    for s in plan(args.mib):
        chunk = "x".join(map(str, s["chunk_shape"]))
        if s["inner_chunk_shape"]:
            chunk += "/" + "x".join(map(str, s["inner_chunk_shape"]))
        print(f"{s['name']:<26} {'x'.join(map(str, s['shape'])):>16} {s['dtype']:<8} {chunk:>12} "
              f"{s['chunk_bytes'] // KIB:>6} KiB  {s['codec']}")
    return 0


def main():
    if len(sys.argv) < 2:  # scripts/run-gpu.sh runs every section with no arguments
        print("zarr peers need stores: `bench_peers.py zarr write --dir DIR` then "
              "`bench_peers.py zarr read --dir DIR --json FILE` (docs/performance.md); "
              "nothing run", file=sys.stderr)
        return 0
    ap = argparse.ArgumentParser(prog="bench_peers.py zarr", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("list", help="print the stores `write` makes")
    p.add_argument("--mib", type=float, default=512)
    p = sub.add_parser("write", help="write the stores and manifest.json")
    p.add_argument("--dir", required=True)
    p.add_argument("--mib", type=float, default=512, help="decoded MiB per store (default 512)")
    p.add_argument("--only", help="comma-separated store names or patterns")
    p.add_argument("--writer", choices=["auto", "tensorstore", "zarr"], default="auto")
    p.add_argument("--check-full", action="store_true",
                   help="read every store back whole with zarr-python (default: corner regions)")
    p = sub.add_parser("read", help="time the peers on the stores of manifest.json")
    p.add_argument("--dir", required=True)
    p.add_argument("--only", help="comma-separated store names or patterns")
    p.add_argument("--peers", help=f"comma-separated peers (default all: {', '.join(PEERS)})")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--repeat-for", help="other repeat counts for some peers: 'PEER=N,...' "
                   "(patterns work: 'zarr-gpu=2,kvikio-*=2')")
    p.add_argument("--peer-budget-s", type=float,
                   help="a peer whose warm-up times the repeat count exceeds this many seconds "
                   "runs fewer times on that store (at least once; the JSON's repeat says)")
    p.add_argument("--time-limit-s", type=float,
                   help="start no peer after this many seconds of `read` (the ones left say "
                   "'out of time'; the summary is still written)")
    p.add_argument("--json", help="write one JSON object per (store, peer) to this file")
    p.add_argument("--markdown", help="write the end-of-run summary tables (Markdown) to this file")
    args = ap.parse_args()
    return {"list": cmd_list, "write": cmd_write, "read": cmd_read}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
