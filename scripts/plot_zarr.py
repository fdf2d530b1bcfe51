#!/usr/bin/env python3
"""Plots zarr read throughput: devbuf's read engine against the peers, and (optionally)
devbuf's own sweep over chunk sizes and codecs.

    python3 scripts/plot_zarr.py --bench zbench.log --peers zpeers.log [--sweep sweep.log]
                                 [--out docs/img/zarr_reads.png] [--title "..."]

Inputs are the text outputs of one GPU-machine run:
  --bench  `bench_zarrs --manifest DIR/manifest.json` (stores that
           `scripts/bench_peers.py zarr write` made), its table and limit lines;
  --peers  `scripts/bench_peers.py zarr read` on the same stores;
  --sweep  `bench_zarrs` without `--manifest` (its own sweep), for the second panel.
Left panel: per store, devbuf's host read and best device read against tensorstore
(host, and host + cupy upload), zarr-python (host, `enable_gpu`) and nVIDIA's own
Python read + decode, on a log scale, with the run's page-locked PCIe rate and the 16
cores' in-memory zstd-1 decode rate as lines. Right panel: devbuf's best device read
and its host read against chunk size, one colour per codec. Needs matplotlib.
"""
import argparse
import math
import re
import sys

COLUMNS = ["ratio", "host", "into", "cpu", "gpu", "both", "auto"]
PEERS = [
    ("tensorstore", "tensorstore host", "#2166ac"),
    ("tensorstore+cupy", "tensorstore + cupy", "#92c5de"),
    ("zarr", "zarr-python host", "#b2182b"),
    ("zarr-gpu", "zarr-python enable_gpu", "#f4a582"),
    ("nvcomp-read+decode", "nvCOMP Python read + decode", "#7b3294"),
]
LABELS = {
    "f32_c1m_zstd1": "1 MiB\nzstd-1",
    "f32_c4m_zstd1": "4 MiB\nzstd-1",
    "f32_c16m_zstd1": "16 MiB\nzstd-1",
    "f32_s16m_i64k_zstd1": "sharded\n64 KiB zstd-1",
    "f32_c4m_none": "4 MiB\nnone",
    "f32_c1m_blosclz4": "1 MiB\nblosc-lz4",
    "f32_c4m_blosclz4": "4 MiB\nblosc-lz4",
}
SIZES = {"256k": 0.25, "1m": 1, "4m": 4, "16m": 16}


def number(text):
    try:
        v = float(text)
    except ValueError:
        return None
    return None if math.isnan(v) else v


def bench_rows(path):
    """{store: {column: GB/s}} from a bench_zarrs log, and its limits."""
    rows, limits = {}, {}
    with open(path) as f:
        for line in f:
            m = re.search(r"page-locked host->device ([0-9.]+) GB/s", line)
            if m:
                limits["pcie"] = float(m.group(1))
            m = re.search(r"reused 512 MiB buffer ([0-9.]+)", line)
            if m:
                limits["cores"] = float(m.group(1))
            if not line.startswith("| ") or line.startswith("| store"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 1 + len(COLUMNS):
                continue
            name = cells[0].rstrip("/").split("/")[-1]
            rows[name] = {k: number(v) for k, v in zip(COLUMNS, cells[1:])}
    return rows, limits


def peer_rows(path):
    """{store: {peer: GB/s}} from a bench_peers.py zarr read log."""
    out, store = {}, None
    with open(path) as f:
        for line in f:
            m = re.match(r"== (\S+):", line)
            if m:
                store = m.group(1)
                out[store] = {}
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if store and len(cells) >= 2 and line.lstrip().startswith("|"):
                v = number(cells[1])
                if v is not None:
                    out[store][cells[0]] = v
    return out


def best_device(r):
    vals = [r[k] for k in ("cpu", "gpu", "both", "auto") if r.get(k) is not None]
    return max(vals) if vals else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", required=True)
    ap.add_argument("--peers", required=True)
    ap.add_argument("--sweep")
    ap.add_argument("--out", default="docs/img/zarr_reads.png")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        sys.exit("plot_zarr.py needs matplotlib (pip install matplotlib)")
    bench, limits = bench_rows(a.bench)
    peers = peer_rows(a.peers)
    stores = [s for s in LABELS if s in bench] + [s for s in bench if s not in LABELS]
    if not stores:
        sys.exit(f"no store rows in {a.bench}")
    panels = 2 if a.sweep else 1
    fig, axes = plt.subplots(
        1, panels, figsize=(15 if panels == 2 else 10, 6.2), squeeze=False,
        gridspec_kw={"width_ratios": [3, 2][:panels]},
    )
    ax = axes[0][0]
    series = [
        ("devbuf device (best decoder)", lambda s: best_device(bench[s]), "#1b7837"),
        ("devbuf host", lambda s: bench[s].get("host"), "#a6dba0"),
    ] + [(label, (lambda s, k=key: peers.get(s, {}).get(k)), c) for key, label, c in PEERS]
    width = 0.8 / len(series)
    for i, (label, get, colour) in enumerate(series):
        xs, ys = [], []
        for j, s in enumerate(stores):
            v = get(s)
            if v is not None and v > 0:
                xs.append(j - 0.4 + (i + 0.5) * width)
                ys.append(v)
        ax.bar(xs, ys, width, label=label, color=colour)
    if "pcie" in limits:
        ax.axhline(limits["pcie"], color="black", ls="--", lw=1)
        ax.text(len(stores) - 0.5, limits["pcie"], f"page-locked PCIe {limits['pcie']:.0f}",
                ha="right", va="bottom", fontsize=8)
    if "cores" in limits:
        ax.axhline(limits["cores"], color="grey", ls=":", lw=1)
        ax.text(-0.45, limits["cores"],
                f"16 cores' zstd-1 decode into memory {limits['cores']:.1f}",
                ha="left", va="bottom", fontsize=7, color="dimgrey",
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(plain)
    ax.set_xticks(range(len(stores)))
    ax.set_xticklabels([LABELS.get(s, s) for s in stores], fontsize=8)
    ax.set_ylabel("GB/s of decoded bytes (log scale)")
    ax.set_title("512 MiB float32 stores written by tensorstore, page cache warm")
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=4)
    if a.sweep:
        sweep, _ = bench_rows(a.sweep)
        ax2 = axes[0][1]
        colours = {"none": "#000000", "zstd1": "#1b7837", "zstd3": "#5aae61",
                   "gzip1": "#b2182b", "blosclz4": "#2166ac"}
        for codec, colour in colours.items():
            pts = [(SIZES[s], sweep[f"{codec}-{s}"]) for s in SIZES if f"{codec}-{s}" in sweep]
            if not pts:
                continue
            xs = [p[0] for p in pts]
            ax2.plot(xs, [best_device(p[1]) for p in pts], "o-", color=colour,
                     label=f"{codec} device")
            ax2.plot(xs, [p[1].get("host") for p in pts], "x--", color=colour, alpha=0.6,
                     label=f"{codec} host")
        ax2.set_xscale("log", base=2)
        ax2.set_yscale("log")
        ax2.yaxis.set_major_formatter(plain)
        ax2.yaxis.set_minor_formatter(plain)
        ax2.tick_params(axis="y", which="minor", labelsize=7)
        ax2.set_xticks(list(SIZES.values()))
        ax2.set_xticklabels(["256 KiB", "1 MiB", "4 MiB", "16 MiB"])
        ax2.set_xlabel("chunk size")
        ax2.set_ylabel("GB/s (log scale)")
        ax2.set_title("devbuf's own sweep: best device read (solid), host read (dashed)")
        ax2.grid(which="both", alpha=0.3)
        ax2.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.13))
    if a.title:
        fig.suptitle(a.title)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
