#!/usr/bin/env bash
# Builds the GPU bundle: release binaries with `--features cuda-tests,zarr,object_store,flight`, stripped, plus
# run.sh and the peer benchmark scripts, in one folder (default .gpu/) that can be
# carried to any x86-64 Linux machine with an NVIDIA driver. cudarc loads libcuda at run
# time, so no CUDA toolkit is needed to build it.
#
#   scripts/gpu-bundle.sh [OUT_DIR]
#
# Then on the GPU machine:  bash .gpu/run.sh [all|tests|repeat N|sanitizer [TOOL...]|bench|examples|python]
# (docs/gpu-testing.md explains the workflow).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-.gpu}"
EXAMPLES="$(ls examples/*.rs | xargs -n1 basename | sed 's/\.rs$//' | tr '\n' ' ')"

echo "building the GPU test binary and examples (release, --features cuda-tests)..."
LOG="$(mktemp)"
cargo test --release --features cuda-tests,zarr,object_store,flight --test gpu --no-run 2>&1 | tee "$LOG" >&2
TEST_BIN="$(grep -oE 'Executable tests/gpu/main.rs \(([^)]+)\)' "$LOG" | sed -E 's/.*\((.*)\)/\1/' | tail -1)"
rm -f "$LOG"
if [ -z "$TEST_BIN" ] || [ ! -x "$TEST_BIN" ]; then
    echo "could not find the GPU test binary" >&2
    exit 1
fi
cargo build --release --features cuda-tests,zarr,object_store,flight --examples >&2

rm -rf "$OUT"
FINAL="$OUT"
OUT="$(mktemp -d)/bundle"
mkdir -p "$OUT/bin" "$OUT/scripts"
cp "$TEST_BIN" "$OUT/bin/gpu-tests"
for ex in $EXAMPLES; do
    cp "${CARGO_TARGET_DIR:-target}/release/examples/$ex" "$OUT/bin/$ex"
done
# The S3-compatible server of the object-store tests (s3s-fs: $DEVBUF_S3S_FS or PATH),
# when there is one here; without it those tests print SKIPPED on the GPU machine.
S3S="${DEVBUF_S3S_FS:-$(command -v s3s-fs || true)}"
if [ -n "$S3S" ] && [ -x "$S3S" ]; then cp "$S3S" "$OUT/bin/s3s-fs"; else echo "(no s3s-fs: the bundle's object-store tests will skip)" >&2; fi
strip "$OUT"/bin/*
cp scripts/run-gpu.sh "$OUT/run.sh"
# The Python package (crates/devbuf-python, docs/python.md): its wheel (release), pytest's
# wheels (the GPU machine reaches no index) and its tests beside the files they read, for
# run.sh's `python` mode. maturin comes from PyPI into a throwaway virtual environment.
PYV="$(mktemp -d)"
python3 -m venv "$PYV/venv"
"$PYV/venv/bin/python" -m pip install --quiet "maturin>=1.9,<2"
"$PYV/venv/bin/maturin" build --release -m crates/devbuf-python/Cargo.toml -o "$OUT/python/wheels" >&2
"$PYV/venv/bin/python" -m pip download --quiet --only-binary=:all: --python-version 3.10 -d "$OUT/python/wheels" pytest >&2
# pytest's back-ports for 3.10 (pip leaves out what the running Python does not need).
"$PYV/venv/bin/python" -m pip download --quiet --only-binary=:all: --python-version 3.10 --no-deps -d "$OUT/python/wheels" exceptiongroup tomli >&2
rm -rf "$PYV"
mkdir -p "$OUT/python/root/docs" "$OUT/python/root/tests/fixtures" "$OUT/python/root/crates/devbuf-python"
cp docs/python.md "$OUT/python/root/docs/"
cp -r tests/fixtures/zarr "$OUT/python/root/tests/fixtures/zarr"
cp -r crates/devbuf-python/tests "$OUT/python/root/crates/devbuf-python/tests"
ls -la "$OUT/python/wheels" >&2
cp -r scripts/bench_peers.py scripts/peers scripts/flight_check.py "$OUT/scripts/"
mkdir -p "$OUT/fixtures"
cp -r tests/fixtures/zarr "$OUT/fixtures/zarr"
{ git rev-parse --short HEAD; git diff --quiet HEAD || echo "-dirty-$(date +%s)"; } | tr -d "\n" > "$OUT/COMMIT" 2>/dev/null || echo unknown > "$OUT/COMMIT"
echo "$EXAMPLES" > "$OUT/EXAMPLES"
ls -la "$OUT/bin" >&2
# The binaries embed the kernels' PTX and compress well: carry one archive (the device
# tool carries at most 64 MiB) and a launcher that unpacks it once per commit. The
# binaries share most of their code: one xz stream with a 64 MiB dictionary (-9e, one
# thread: threads would cut the stream into blocks) stores each shared part once:
# 22 MB instead of 49 with -6 (about 4 minutes on 2 cores; enough room left for nvCOMP's
# library, 22 MB as xz, beside it).
mkdir -p "$FINAL"
tar -C "$OUT" -cf - . | xz -T1 -9e > "$FINAL/bundle.tar.xz"
cp "$OUT/COMMIT" "$FINAL/COMMIT"
cat > "$FINAL/run.sh" <<'LAUNCH'
#!/usr/bin/env bash
# Unpacks the bundle (once per commit) and runs its run.sh with the same arguments.
HERE="$(cd "$(dirname "$0")" && pwd)"
DEST="${DEVBUF_BUNDLE_DIR:-/tmp/devbuf-bundle}"
if [ "$(cat "$DEST/COMMIT" 2>/dev/null)" != "$(cat "$HERE/COMMIT")" ]; then
    rm -rf "$DEST" && mkdir -p "$DEST" && xz -dc "$HERE/bundle.tar.xz" | tar -C "$DEST" -xf - || exit 1
fi
exec bash "$DEST/run.sh" "$@"
LAUNCH
chmod +x "$FINAL/run.sh"
rm -rf "$(dirname "$OUT")"
du -sh "$FINAL" >&2
echo "bundle ready in $FINAL (commit $(cat "$FINAL/COMMIT")); run: bash $FINAL/run.sh [all|tests|repeat N|sanitizer [TOOL...]|bench|examples|python]"
