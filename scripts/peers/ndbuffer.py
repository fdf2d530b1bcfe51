#!/usr/bin/env python3
"""cupy doing the ops of examples/bench_kernels.rs on the same shapes, timed the same way.

    python3 scripts/bench_peers.py ndbuffer [runs]     (default 15, at least 10)

A 256 MiB float32 array (8192 x 8192, DEVBUF_BENCH_N changes the edge). Each op is
warmed up, then timed `runs` times with CUDA events on the current stream; the table
shows the median. GB/s counts bytes read plus written (1 GB = 1e9 bytes); "vs D2D" is
the ratio to a device-to-device cudaMemcpy of the array in the same run. all_equal
returns a Python bool (as zarr needs), so its time includes the device->host read, as
devbuf's does.
"""
import os
import statistics
import sys

import cupy as cp


def timed(fn, runs):
    for _ in range(3):
        fn()
    cp.cuda.get_current_stream().synchronize()
    times = []
    for _ in range(runs):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    return statistics.median(times)


def main() -> int:
    runs = max(10, int(sys.argv[1]) if len(sys.argv) > 1 else 15)
    n = int(os.environ.get("DEVBUF_BENCH_N", "8192"))
    nbytes = n * n * 4
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    print(f"device: {name} ({props['multiProcessorCount']} SMs); cupy {cp.__version__}; "
          f"array: {n} x {n} float32 = {nbytes >> 20} MiB; median of {runs} runs")

    a = cp.arange(n * n, dtype=cp.float32).reshape(n, n)
    b = cp.empty_like(a)
    scratch = cp.empty_like(a)
    rows = []

    def d2d():
        cp.cuda.runtime.memcpy(b.data.ptr, a.data.ptr, nbytes,
                               cp.cuda.runtime.memcpyDeviceToDevice)
    rows.append(("D2D copy (cudaMemcpy)", 2 * nbytes, timed(d2d, runs)))

    rows.append(("fill f32", nbytes, timed(lambda: scratch.fill(1.5), runs)))
    assert bool((scratch == cp.float32(1.5)).all())

    rows.append(("astype f32->f64", 3 * nbytes, timed(lambda: a.astype(cp.float64), runs)))

    rows.append(("transpose 2-d", 2 * nbytes,
                 timed(lambda: cp.ascontiguousarray(a.T), runs)))

    sub_bytes = (n // 2) * (n - 2) * 4
    rows.append(("strided get [::2, 1:-1]", 2 * sub_bytes,
                 timed(lambda: cp.ascontiguousarray(a[::2, 1:-1]), runs)))

    scratch.fill(1.5)
    value = cp.float32(1.5)

    def all_equal():
        assert bool((scratch == value).all())
    rows.append(("all_equal (true)", nbytes, timed(all_equal, runs)))

    # cupy has no ndarray.byteswap: an elementwise kernel in place, as a cupy user would.
    swap = cp.ElementwiseKernel("uint32 x", "uint32 y", "y = __byte_perm(x, 0, 0x0123)",
                                "devbuf_peer_bswap")
    words = scratch.view(cp.uint32)
    rows.append(("byteswap 4-byte", 2 * nbytes, timed(lambda: swap(words, words), runs)))

    base = 2 * nbytes / (rows[0][2] * 1e-3) / 1e9
    print()
    print(f"| {'op':<26} | {'MB moved':>10} | {'ms':>9} | {'GB/s':>11} | {'vs D2D':>7} |")
    print(f"|{'-' * 28}|{'-' * 12}|{'-' * 11}|{'-' * 13}|{'-' * 9}|")
    for name, moved, ms in rows:
        g = moved / (ms * 1e-3) / 1e9
        print(f"| {name:<26} | {moved / 1e6:>10.1f} | {ms:>9.3f} | {g:>11.0f} | {g / base:>6.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
