"""Transfer bandwidth through cupy and torch: the peer rows of examples/bench_transfer.rs.

    python3 scripts/bench_peers.py transfer [--quick] [--csv PATH]

Host->device and device->host from page-locked and ordinary memory, device->device
(read+write), for the sizes of bench_transfer's `table` section (4 KiB .. 1 GiB; median
of repeated synchronous copies), and 10,000 x 64 KiB pieces of ordinary memory with one
library call per piece (the comparison for devbuf's `copy_many_*`).

--csv writes the rows in bench_transfer's CSV format (section,series,size_bytes,gbps,note)
so that scripts/plot_transfer.py draws them beside devbuf's.
"""
import sys
import time

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
QUICK = "--quick" in sys.argv
SIZES = [4 * KIB, 64 * KIB, MIB, 16 * MIB, 256 * MIB] if QUICK else [
    4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB, GIB]
BATCH = (10_000, 64 * KIB)


def arg(flag):
    if flag in sys.argv:
        i = sys.argv.index(flag)
        if i + 1 < len(sys.argv):
            return sys.argv[i + 1]
    return None


def reps_for(n):
    r = 1000 if n <= 64 * KIB else 100 if n <= 4 * MIB else 20 if n <= 64 * MIB else 8 if n <= 256 * MIB else 5
    return max(r // 5, 3) if QUICK else r


def median_gbps(n, fn, sync, reps):
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
    if n >= GIB and n % GIB == 0:
        return f"{n // GIB} GiB"
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB} MiB"
    return f"{n // KIB} KiB"


def bench_cupy(rows):
    import cupy as cp
    import numpy as np

    sync = cp.cuda.runtime.deviceSynchronize
    top = max(SIZES)
    dev_all = cp.empty(top, dtype=cp.uint8)
    dev2_all = cp.empty(top, dtype=cp.uint8)
    mem = cp.cuda.alloc_pinned_memory(top)
    pinned_all = np.frombuffer(mem, dtype=np.uint8, count=top)
    pinned_all[:] = np.arange(top, dtype=np.uint64).astype(np.uint8)
    ordinary_all = np.arange(top, dtype=np.uint64).astype(np.uint8)
    for n in SIZES:
        reps = reps_for(n)
        dev, dev2 = dev_all[:n], dev2_all[:n]
        pinned, ordinary = pinned_all[:n], ordinary_all[:n]
        rows.append(("curve", "cupy H->D page-locked", n, median_gbps(n, lambda: dev.set(pinned), sync, reps)))
        rows.append(("curve", "cupy D->H page-locked", n, median_gbps(n, lambda: dev.get(out=pinned), sync, reps)))
        rows.append(("curve", "cupy H->D ordinary", n, median_gbps(n, lambda: dev.set(ordinary), sync, reps)))
        rows.append(("curve", "cupy D->H ordinary", n, median_gbps(n, lambda: dev.get(out=ordinary), sync, reps)))
        rows.append(("curve", "cupy D->D", n,
                     2 * median_gbps(n, lambda: dev2.__setitem__(slice(None), dev), sync, reps)))
    del dev_all, dev2_all, pinned_all, mem, ordinary_all
    cp.get_default_memory_pool().free_all_blocks()

    count, piece = BATCH
    host = [np.full(piece, i % 251, dtype=np.uint8) for i in range(count)]
    dev = cp.empty(count * piece, dtype=cp.uint8)
    views = [dev[(count - 1 - i) * piece:(count - i) * piece] for i in range(count)]

    def up():
        for v, h in zip(views, host):
            v.set(h)

    def down():
        for v, h in zip(views, host):
            v.get(out=h)

    total = count * piece
    rows.append(("batch", "cupy per piece H->D", total, median_gbps(total, up, sync, 3)))
    rows.append(("batch", "cupy per piece D->H", total, median_gbps(total, down, sync, 3)))
    del dev, views
    cp.get_default_memory_pool().free_all_blocks()


def bench_torch(rows):
    import torch

    sync = torch.cuda.synchronize
    top = max(SIZES)
    dev_all = torch.empty(top, dtype=torch.uint8, device="cuda")
    dev2_all = torch.empty(top, dtype=torch.uint8, device="cuda")
    pinned_all = torch.arange(top, dtype=torch.int64).to(torch.uint8).pin_memory()
    ordinary_all = torch.arange(top, dtype=torch.int64).to(torch.uint8)
    for n in SIZES:
        reps = reps_for(n)
        dev, dev2 = dev_all[:n], dev2_all[:n]
        pinned, ordinary = pinned_all[:n], ordinary_all[:n]
        rows.append(("curve", "torch H->D page-locked", n, median_gbps(n, lambda: dev.copy_(pinned), sync, reps)))
        rows.append(("curve", "torch D->H page-locked", n, median_gbps(n, lambda: pinned.copy_(dev), sync, reps)))
        rows.append(("curve", "torch H->D ordinary", n, median_gbps(n, lambda: dev.copy_(ordinary), sync, reps)))
        rows.append(("curve", "torch D->H ordinary", n, median_gbps(n, lambda: ordinary.copy_(dev), sync, reps)))
        rows.append(("curve", "torch D->D", n, 2 * median_gbps(n, lambda: dev2.copy_(dev), sync, reps)))
    del dev_all, dev2_all, pinned_all, ordinary_all
    torch.cuda.empty_cache()

    count, piece = BATCH
    host = [torch.full((piece,), i % 251, dtype=torch.uint8) for i in range(count)]
    dev = torch.empty(count * piece, dtype=torch.uint8, device="cuda")
    views = [dev[(count - 1 - i) * piece:(count - i) * piece] for i in range(count)]

    def up():
        for v, h in zip(views, host):
            v.copy_(h)

    def down():
        for v, h in zip(views, host):
            h.copy_(v)

    total = count * piece
    rows.append(("batch", "torch per piece H->D", total, median_gbps(total, up, sync, 3)))
    rows.append(("batch", "torch per piece D->H", total, median_gbps(total, down, sync, 3)))
    del dev, views
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
    for section, series, n, gbps in rows:
        lib, what = series.split(" ", 1)
        size = f"{BATCH[0]} x {label(BATCH[1])}" if section == "batch" else label(n)
        print(f"| {lib} | {what} | {size} | {gbps:.2f} |")
    path = arg("--csv")
    if path:
        with open(path, "w") as f:
            f.write("section,series,size_bytes,gbps,note\n")
            for section, series, n, gbps in rows:
                note = f"{BATCH[0]}x{BATCH[1]}" if section == "batch" else ""
                f.write(f"{section},{series},{n},{gbps:.4f},{note}\n")
        print(f"wrote {len(rows)} rows to {path}")


if __name__ == "__main__":
    main()
