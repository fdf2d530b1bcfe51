#!/usr/bin/env python3
"""Plots transfer bandwidth against transfer size, one line per method.

    python3 scripts/plot_transfer.py bench.csv [peers.csv ...] [--out docs/img/transfer.png]
                                     [--pcie 63] [--title "..."]

Input: the CSV files written by `bench_transfer --csv PATH` and
`scripts/bench_peers.py transfer --csv PATH` (columns section,series,size_bytes,gbps,note).
It draws the `curve` rows in two panels (host->device, device->host): colour by library
(devbuf, raw driver, cupy, torch), solid lines for ordinary (pageable) memory, dashed for
page-locked memory, and the PCIe limit as a horizontal line. The `batch` rows for
10,000 x 64 KiB pieces appear as single markers at their total size (devbuf's
`copy_many_*` against one library call per piece). Needs matplotlib.
"""
import argparse
import csv
import os
import sys
from collections import defaultdict

COLORS = {
    "devbuf": "#1b7837",
    "devbuf async": "#5aae61",
    "driver": "#2166ac",
    "driver async": "#92c5de",
    "cupy": "#b2182b",
    "torch": "#e08214",
}
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def size_label(n):
    if n >= GIB:
        return f"{n // GIB} GiB"
    if n >= MIB:
        return f"{n // MIB} MiB"
    return f"{n // KIB} KiB"


def read(paths):
    rows = []
    for p in paths:
        with open(p, newline="") as f:
            for r in csv.DictReader(f):
                try:
                    rows.append((r["section"], r["series"], int(r["size_bytes"]), float(r["gbps"]), r.get("note", "")))
                except (KeyError, ValueError):
                    print(f"{p}: skipping malformed row {r}", file=sys.stderr)
    return rows


def split_series(series):
    """'devbuf async H->D ordinary' -> ('devbuf async', 'H->D', 'ordinary')."""
    for d in ("H->D", "D->H", "D->D"):
        if f" {d}" in series:
            lib, rest = series.split(f" {d}", 1)
            return lib.strip(), d, rest.strip() or "device"
    return series, None, None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--out", default="docs/img/transfer.png")
    ap.add_argument("--pcie", type=float, default=63.0, help="PCIe limit per direction, GB/s (Gen5 x16: 63)")
    ap.add_argument("--title", default=None)
    ap.add_argument("--no-async", action="store_true", help="leave out the async rows")
    args = ap.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read(args.csv)
    curves = defaultdict(list)  # (lib, dir, memory) -> [(size, gbps)]
    batch = []
    for section, series, n, gbps, note in rows:
        if section == "curve":
            lib, d, mem = split_series(series)
            if d in ("H->D", "D->H") and not (args.no_async and lib.endswith("async")):
                curves[(lib, d, mem)].append((n, gbps))
        elif section == "batch" and note.replace(";", "x") in ("10000x65536",):
            batch.append((series, n, gbps))
    if not curves:
        sys.exit("no 'curve' rows in the input: run bench_transfer with the table section and --csv")

    fig, axes = plt.subplots(1, 2, figsize=(14, 5.6), sharey=True)
    ymax = args.pcie * 1.15
    for ax, d, title in ((axes[0], "H->D", "host \u2192 device"), (axes[1], "D->H", "device \u2192 host")):
        for (lib, dd, mem), pts in sorted(curves.items()):
            if dd != d:
                continue
            pts.sort()
            xs = [p[0] for p in pts]
            ys = [p[1] for p in pts]
            ymax = max(ymax, max(ys) * 1.05)
            base = lib.split(" ")[0]
            ax.plot(
                xs,
                ys,
                color=COLORS.get(lib, COLORS.get(base, "gray")),
                linestyle="-" if mem == "ordinary" else "--",
                linewidth=2.6 if base == "devbuf" else 1.4,
                marker="o" if mem == "ordinary" else "s",
                markersize=3.5,
                label=f"{lib}, {mem}",
            )
        for series, n, gbps in batch:
            if d not in series:
                continue
            lib = series.split(" ")[0]
            many = "copy_many" in series
            ax.scatter(
                [n],
                [gbps],
                marker="*" if many else "x",
                s=160 if many else 60,
                color=COLORS.get(lib, "gray") if not many else COLORS["devbuf"],
                zorder=5,
                label=f"10,000 \u00d7 64 KiB: {series.replace(' ' + d, '')}",
            )
        ax.axhline(args.pcie, color="black", linewidth=1, linestyle=":")
        ax.text(4 * KIB, args.pcie + 0.8, f"PCIe limit ({args.pcie:g} GB/s per direction)", fontsize=8)
        ax.set_xscale("log", base=2)
        ticks = [4 * KIB * 4 ** i for i in range(10)]
        ax.set_xticks(ticks)
        ax.set_xticklabels([size_label(t) for t in ticks], fontsize=8)
        ax.set_xlabel("transfer size")
        ax.set_title(title)
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("GB/s")
    axes[0].set_ylim(0, ymax)
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(args.title or "devbuf transfers: bandwidth against transfer size")
    fig.tight_layout(rect=(0, 0.16, 1, 0.96))
    if os.path.dirname(args.out):
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
    fig.savefig(args.out, dpi=130)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
