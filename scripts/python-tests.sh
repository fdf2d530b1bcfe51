#!/usr/bin/env bash
# The Python package's tests (crates/devbuf-python, docs/python.md), from nothing: a
# fresh virtual environment, maturin, pytest, numpy, pyarrow, zarr-python 3.1.6, and dask,
# distributed and xarray (test_dask_xarray.py: a LocalCluster of worker processes) from PyPI, the
# wheel built (debug unless DEVBUF_PY_RELEASE=1) and installed, then pytest, which lists
# every skipped test with its reason (-rs). GPU tests skip without a GPU, cupy or torch.
#
#   bash scripts/python-tests.sh [PYTEST ARGS...]
#
# PYTHON picks the interpreter (default python3, 3.11 or newer: zarr 3.1.6 and xarray need
# it; the wheel itself is abi3 for 3.10+); DEVBUF_PY_VENV the
# virtual environment's folder (default $TMPDIR/devbuf-py-venv, made anew each run).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${CARGO_TARGET_DIR:-target}"
VENV="${DEVBUF_PY_VENV:-${TMPDIR:-/tmp}/devbuf-py-venv}"
WHEELS="$TARGET/wheels"
PY="${PYTHON:-python3}"

echo "--- python: a fresh virtual environment ($VENV, $("$PY" --version))"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "maturin>=1.9,<2" pytest numpy pyarrow "zarr==3.1.6" \
    "obstore==0.8.2" "dask[array]==2026.8.0" "distributed==2026.8.0" "xarray==2026.9.0"

PROFILE=()
[ "${DEVBUF_PY_RELEASE:-0}" = 1 ] && PROFILE=(--release)
echo "--- python: building the wheel (maturin build ${PROFILE[*]:-(debug)})"
rm -rf "$WHEELS"
start=$(date +%s)
"$VENV/bin/maturin" build "${PROFILE[@]}" -m crates/devbuf-python/Cargo.toml -o "$WHEELS"
WHEEL="$(ls "$WHEELS"/devbuf-*.whl)"
echo "--- python: built $(basename "$WHEEL") ($(du -h "$WHEEL" | cut -f1)) in $(( $(date +%s) - start )) s"

"$VENV/bin/python" -m pip install --quiet "$WHEEL"
echo "--- python: pytest"
# From the workspace root: the installed wheel is imported, not crates/devbuf-python/python.
"$VENV/bin/python" -m pytest crates/devbuf-python/tests -rs -q "$@"
