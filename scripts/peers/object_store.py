#!/usr/bin/env python3
"""Object-store read peers for bench_object_store: zarr-python on obstore and tensorstore's
S3 driver reading one zarr v3 array from an S3-compatible server, into host memory and,
with cupy, onto the GPU.

    python3 scripts/peers/object_store.py --endpoint http://127.0.0.1:PORT --bucket B \
        --array NAME [--repeat 5] [--crc32c N]

Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION. Prints one
JSON object per line: {"peer", "gbs" (GB/s of decoded bytes, median of --repeat after a
warm-up, or null), "note"}. A peer that cannot run (package missing, no GPU) says why in
"note". The warm-up's result is checked against --crc32c (CRC-32C of the C-order bytes).
"""
import argparse
import json
import os
import statistics
import sys
import time

# This directory holds zarr.py (the zarr peers): keep it from shadowing the zarr package.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]


def emit(peer, gbs, note=""):
    print(json.dumps({"peer": peer, "gbs": gbs, "note": note}), flush=True)


def timed(fn, repeat, nbytes, check):
    out = fn()
    check(out)
    del out
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t)
        del out
    return nbytes / statistics.median(ts) / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--array", required=True)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--crc32c", type=int, default=None)
    a = ap.parse_args()
    key = os.environ.get("AWS_ACCESS_KEY_ID", "")
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
    region = os.environ.get("AWS_REGION", "us-east-1")
    try:
        import numpy as np
    except ImportError as e:
        for p in ["zarr-obstore", "tensorstore"]:
            emit(p, None, f"numpy missing: {e}")
        return
    try:
        import cupy
    except Exception as e:  # no cupy or no GPU
        cupy = None
        cupy_why = f"cupy unavailable: {e}"

    def check_of(peer):
        def check(out):
            if a.crc32c is None:
                return
            try:
                import google_crc32c
            except ImportError:
                return
            host = cupy.asnumpy(out) if (cupy is not None and isinstance(out, cupy.ndarray)) else out
            got = google_crc32c.value(np.ascontiguousarray(host).tobytes())
            if got != a.crc32c:
                raise RuntimeError(f"{peer}: CRC-32C {got} != {a.crc32c}: wrong data")
        return check

    def run(peer, fn, nbytes):
        try:
            emit(peer, timed(fn, a.repeat, nbytes, check_of(peer)))
        except Exception as e:
            emit(peer, None, f"{type(e).__name__}: {e}"[:300])

    # zarr-python 3 on obstore.
    try:
        import obstore
        import zarr
        from zarr.storage import ObjectStore

        s3 = obstore.store.S3Store(
            a.bucket,
            endpoint=a.endpoint,
            access_key_id=key,
            secret_access_key=secret,
            region=region,
            client_options={"allow_http": True},
        )
        arr = zarr.open_array(ObjectStore(s3, read_only=True), path=a.array, mode="r")
        nbytes = arr.nbytes
        run("zarr-python (obstore)", lambda: arr[...], nbytes)
        if cupy is not None:
            def up():
                d = cupy.asarray(arr[...])
                cupy.cuda.Device().synchronize()
                return d
            run("zarr-python (obstore) + cupy", up, nbytes)
        else:
            emit("zarr-python (obstore) + cupy", None, cupy_why)
    except Exception as e:
        emit("zarr-python (obstore)", None, f"{type(e).__name__}: {e}"[:300])

    # tensorstore's S3 kvstore.
    try:
        import tensorstore as ts

        spec = {
            "driver": "zarr3",
            "kvstore": {
                "driver": "s3",
                "bucket": a.bucket,
                "path": a.array + "/",
                "endpoint": a.endpoint,
                "aws_region": region,
            },
            "context": {"cache_pool": {"total_bytes_limit": 0}},
        }
        t = ts.open(spec, read=True).result()
        nbytes = int(np.prod(t.shape)) * t.dtype.numpy_dtype.itemsize
        run("tensorstore (s3)", lambda: t.read().result(), nbytes)
        if cupy is not None:
            def up():
                d = cupy.asarray(t.read().result())
                cupy.cuda.Device().synchronize()
                return d
            run("tensorstore (s3) + cupy", up, nbytes)
        else:
            emit("tensorstore (s3) + cupy", None, cupy_why)
    except Exception as e:
        emit("tensorstore (s3)", None, f"{type(e).__name__}: {e}"[:300])


if __name__ == "__main__":
    main()
