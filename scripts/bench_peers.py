#!/usr/bin/env python3
"""Peer benchmarks: the same operations as devbuf's benchmarks, through cupy and torch.

    python3 scripts/bench_peers.py <section>     # e.g. transfer, ndbuffer

Each section lives in scripts/peers/<section>.py and prints a markdown table. Run on the
GPU machine in the same call as the devbuf benchmark, so the ratios compare like with like.
"""
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    sections = sorted(f[:-3] for f in os.listdir(os.path.join(HERE, "peers")) if f.endswith(".py"))
    if len(sys.argv) < 2 or sys.argv[1] not in sections:
        print(f"usage: bench_peers.py <section>; sections: {', '.join(sections)}")
        sys.exit(2)
    sys.argv = [sys.argv[1]] + sys.argv[2:]
    runpy.run_path(os.path.join(HERE, "peers", sys.argv[0] + ".py"), run_name="__main__")


if __name__ == "__main__":
    main()
