#!/usr/bin/env bash
# Builds the GPU bundle: release binaries with `--features cuda-tests`, stripped, plus
# run.sh and the peer benchmark scripts, in one folder (default .gpu/) that can be
# carried to any x86-64 Linux machine with an NVIDIA driver. cudarc loads libcuda at run
# time, so no CUDA toolkit is needed to build it.
#
#   scripts/gpu-bundle.sh [OUT_DIR]
#
# Then on the GPU machine:  bash .gpu/run.sh [all|tests|sanitizer|bench|examples]
# (docs/gpu-testing.md explains the workflow).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-.gpu}"
EXAMPLES="$(ls examples/*.rs | xargs -n1 basename | sed 's/\.rs$//' | tr '\n' ' ')"

echo "building the GPU test binary and examples (release, --features cuda-tests)..."
LOG="$(mktemp)"
cargo test --release --features cuda-tests --test gpu --no-run 2>&1 | tee "$LOG" >&2
TEST_BIN="$(grep -oE 'Executable tests/gpu/main.rs \(([^)]+)\)' "$LOG" | sed -E 's/.*\((.*)\)/\1/' | tail -1)"
rm -f "$LOG"
if [ -z "$TEST_BIN" ] || [ ! -x "$TEST_BIN" ]; then
    echo "could not find the GPU test binary" >&2
    exit 1
fi
cargo build --release --features cuda-tests --examples >&2

rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/scripts"
cp "$TEST_BIN" "$OUT/bin/gpu-tests"
for ex in $EXAMPLES; do
    cp "target/release/examples/$ex" "$OUT/bin/$ex"
done
strip "$OUT"/bin/*
cp scripts/run-gpu.sh "$OUT/run.sh"
cp -r scripts/bench_peers.py scripts/peers "$OUT/scripts/"
git rev-parse --short HEAD > "$OUT/COMMIT" 2>/dev/null || echo unknown > "$OUT/COMMIT"
echo "$EXAMPLES" > "$OUT/EXAMPLES"
du -sh "$OUT" >&2
ls -la "$OUT/bin" >&2
echo "bundle ready in $OUT (commit $(cat "$OUT/COMMIT"))"
