#!/usr/bin/env bash
# Runs the GPU test binary (tests/gpu, --features cuda-tests) on the CPU emulator:
#   scripts/emu/run.sh [TEST FILTER AND LIBTEST ARGS...]     e.g. scripts/emu/run.sh kernels::
# Logic only: kernels run one block at a time on one core, so keep filters to what you
# need; it says nothing about performance. See scripts/emu/build.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
out="$target/emu"
"$here/build.sh" "$out" >/dev/null
cd "$root"
bin="$(cargo test --features cuda-tests --test gpu --no-run --message-format=json 2>/dev/null \
    | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)"
if [ -z "$bin" ]; then echo "could not build the GPU test binary" >&2; exit 1; fi
preload=""
if [ "${EMU_ASAN:-1}" = 1 ]; then preload="$(g++ -print-file-name=libasan.so)"; fi
LD_PRELOAD="$preload" ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}" LD_LIBRARY_PATH="$out" \
    "$bin" --test-threads="${EMU_THREADS:-4}" "$@"
