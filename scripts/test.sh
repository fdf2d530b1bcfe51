#!/usr/bin/env bash
# The README's test command: every crate's Rust tests, then the Python package's tests
# (scripts/python-tests.sh: a fresh virtual environment, the wheel, pytest).
#
#   bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
echo "=== Rust: cargo test --workspace --features zarr,object_store,flight"
cargo test --workspace --features zarr,object_store,flight
echo "=== Python: scripts/python-tests.sh"
bash scripts/python-tests.sh
