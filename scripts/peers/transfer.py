"""Transfer bandwidth through cupy and torch: the rows of examples/bench_transfer.rs.

Host->device and device->host from page-locked and ordinary memory, device->device
(read+write), for 4 KiB, 1 MiB, 64 MiB and 1 GiB; median of repeated synchronous copies.
"""
import sys
import time

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
SIZES = [4 * KIB, MIB, 64 * MIB, GIB]


def reps_for(n):
    if n <= 64 * KIB:
        return 2000
    if n <= 4 * MIB:
        return 200
    if n <= 256 * MIB:
        return 20
    return 6


def median_gbps(n, fn, sync, reps):
    for _ in range(3):
        fn()
    sync()
    batch = max(reps // 10, 1)
    times = []
    for _ in range(max(reps // batch, 3)):
        t = time.perf_counter()
        for _ in range(batch):
            fn()
        sync()
        times.append((time.perf_counter() - t) / batch)
    times.sort()
    return n / times[len(times) // 2] / 1e9


def label(n):
    return f"{n // GIB} GiB" if n >= GIB else f"{n // MIB} MiB" if n >= MIB else f"{n // KIB} KiB"


def bench_cupy(rows):
    import cupy as cp
    import numpy as np

    sync = cp.cuda.runtime.deviceSynchronize
    for n in SIZES:
        reps = reps_for(n)
        dev = cp.empty(n, dtype=cp.uint8)
        dev2 = cp.empty(n, dtype=cp.uint8)
        mem = cp.cuda.alloc_pinned_memory(n)
        pinned = np.frombuffer(mem, dtype=np.uint8, count=n)
        pinned[:] = np.arange(n, dtype=np.uint64).astype(np.uint8)
        ordinary = np.arange(n, dtype=np.uint64).astype(np.uint8)
        rows.append(("cupy", "host->device, page-locked", n, median_gbps(n, lambda: dev.set(pinned), sync, reps)))
        rows.append(("cupy", "device->host, page-locked", n, median_gbps(n, lambda: dev.get(out=pinned), sync, reps)))
        rows.append(("cupy", "host->device, ordinary", n, median_gbps(n, lambda: dev.set(ordinary), sync, reps)))
        rows.append(("cupy", "device->host, ordinary", n, median_gbps(n, lambda: dev.get(out=ordinary), sync, reps)))
        rows.append(("cupy", "device->device (read+write)", n, 2 * median_gbps(n, lambda: dev2.__setitem__(slice(None), dev), sync, reps)))
        del dev, dev2, pinned, mem
        cp.get_default_memory_pool().free_all_blocks()


def bench_torch(rows):
    import torch

    sync = torch.cuda.synchronize
    for n in SIZES:
        reps = reps_for(n)
        dev = torch.empty(n, dtype=torch.uint8, device="cuda")
        dev2 = torch.empty(n, dtype=torch.uint8, device="cuda")
        pinned = torch.arange(n, dtype=torch.int64).to(torch.uint8).pin_memory()
        ordinary = torch.arange(n, dtype=torch.int64).to(torch.uint8)
        rows.append(("torch", "host->device, page-locked", n, median_gbps(n, lambda: dev.copy_(pinned), sync, reps)))
        rows.append(("torch", "device->host, page-locked", n, median_gbps(n, lambda: pinned.copy_(dev), sync, reps)))
        rows.append(("torch", "host->device, ordinary", n, median_gbps(n, lambda: dev.copy_(ordinary), sync, reps)))
        rows.append(("torch", "device->host, ordinary", n, median_gbps(n, lambda: ordinary.copy_(dev), sync, reps)))
        rows.append(("torch", "device->device (read+write)", n, 2 * median_gbps(n, lambda: dev2.copy_(dev), sync, reps)))
        del dev, dev2, pinned, ordinary
        torch.cuda.empty_cache()


def main():
    rows = []
    for name, fn in (("cupy", bench_cupy), ("torch", bench_torch)):
        try:
            fn(rows)
        except Exception as e:  # report and go on: one missing library must not hide the other
            print(f"{name}: skipped ({type(e).__name__}: {e})", file=sys.stderr)
    print("| library | transfer | size | GB/s |")
    print("|---|---|---|---|")
    for lib, what, n, gbps in rows:
        print(f"| {lib} | {what} | {label(n)} | {gbps:.2f} |")


if __name__ == "__main__":
    main()
