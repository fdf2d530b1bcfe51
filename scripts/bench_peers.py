#!/usr/bin/env python3
"""Runs a peer benchmark: `scripts/bench_peers.py <section> [args...]` runs
`scripts/peers/<section>.py` with the same Python and arguments.

Sections are the files in scripts/peers/ (e.g. `ndbuffer`: cupy doing what
examples/bench_kernels.rs does, for comparison on the same GPU; `zarr`: tensorstore,
zarr-python (its own pipeline, devbuf's and zarrs-python's), devbuf's Python binding,
kvikio and nvCOMP reading the zarr stores of the read benchmark, with its own
subcommands `list`, `write` and `read`).
"""
import os
import subprocess
import sys


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    peers = os.path.join(here, "peers")
    sections = sorted(f[:-3] for f in os.listdir(peers) if f.endswith(".py"))
    if len(sys.argv) < 2 or sys.argv[1] not in sections:
        print(f"usage: {sys.argv[0]} <section> [args...]; sections: {', '.join(sections)}",
              file=sys.stderr)
        return 2
    script = os.path.join(peers, sys.argv[1] + ".py")
    return subprocess.call([sys.executable, script, *sys.argv[2:]])


if __name__ == "__main__":
    sys.exit(main())
