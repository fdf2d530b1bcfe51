#!/usr/bin/env python3
"""Checks that each workspace crate's `rust-version` is truthful as far as its dependencies
go: every package it builds with (normal and build dependencies, transitively, with all
features, on every platform; dev-dependencies of the crate itself too, since
`rust-version` covers its tests and examples) declares a `rust-version` no newer than the
crate's. Fails naming each dependency that needs more.

It reads `cargo metadata` of the locked graph (Cargo.lock), so it needs no network and no
build. It does not compile anything with the declared toolchain: CI cannot install one
(docs/architecture.md, "Publishing"); clippy's `incompatible_msrv` (on by default, it
reads `rust-version`) covers the standard library APIs the crates' own code calls.

    python3 scripts/check-msrv.py            # the whole workspace
"""

import json
import subprocess
import sys


def version(text):
    """`"1.88.0"` -> (1, 88, 0); missing components are 0."""
    parts = [int(p) for p in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def main():
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--all-features", "--locked"],
        check=True,
        stdout=subprocess.PIPE,
    ).stdout
    meta = json.loads(out)
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    failures = []
    for member in meta["workspace_members"]:
        pkg = packages[member]
        own = pkg.get("rust_version")
        if not own:
            failures.append(f"{pkg['name']}: no rust-version")
            continue
        # Everything the crate builds with: its own dependencies of every kind, then
        # their normal and build dependencies (their dev-dependencies are not built).
        seen, stack = set(), [member]
        while stack:
            current = stack.pop()
            for dep in nodes[current]["deps"]:
                kinds = {k["kind"] for k in dep["dep_kinds"]}
                if current != member and kinds == {"dev"}:
                    continue
                if dep["pkg"] not in seen:
                    seen.add(dep["pkg"])
                    stack.append(dep["pkg"])
        newest = max(
            ((version(packages[d]["rust_version"]), packages[d]) for d in seen if packages[d].get("rust_version")),
            default=None,
            key=lambda t: (t[0], t[1]["name"]),
        )
        too_new = sorted(
            (packages[d]["name"], packages[d]["version"], packages[d]["rust_version"])
            for d in seen
            if packages[d].get("rust_version") and version(packages[d]["rust_version"]) > version(own)
        )
        for name, ver, rv in too_new:
            failures.append(f"{pkg['name']} (rust-version {own}): {name} {ver} needs Rust {rv}")
        floor = f"; newest dependency's: {newest[1]['name']} {newest[1]['rust_version']}" if newest else ""
        print(f"{pkg['name']}: rust-version {own}, {len(seen)} dependencies{floor}")
    if failures:
        print("\nrust-version is older than a dependency's:", file=sys.stderr)
        for f in failures:
            print(f"  {f}", file=sys.stderr)
        sys.exit(1)
    print("every dependency's rust-version <= its dependent crate's")


if __name__ == "__main__":
    main()
