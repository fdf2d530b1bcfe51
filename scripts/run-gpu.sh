#!/usr/bin/env bash
# Runs devbuf's GPU bundle (made by scripts/gpu-bundle.sh) on a machine with an NVIDIA GPU.
#
#   bash .gpu/run.sh [all|tests|sanitizer|bench|examples] [extra args for the test binary]
#
# Logs go to $OUT (when set, as on the device machine) or ./gpu-logs. The last line is one
# summary: tests passed/failed/ignored, examples, sanitizer errors, device.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
LOGS="${OUT:-$PWD/gpu-logs}"
mkdir -p "$LOGS"
MODE="${1:-all}"
shift || true
BIN="$HERE/bin"
export DEVBUF_ZARR_FIXTURES="$HERE/fixtures/zarr"
SUMMARY=()
DEVICE="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || echo 'no nvidia-smi')"
NGPU="$(nvidia-smi -L 2>/dev/null | wc -l)"
echo "devbuf GPU bundle $(cat "$HERE/COMMIT") on: $DEVICE x$NGPU"

run_tests() {
    echo "== GPU tests"
    # A hung test must not eat the whole lease: the suite takes well under a minute.
    timeout -k 10 "${DEVBUF_TEST_TIMEOUT:-240}" "$BIN/gpu-tests" --test-threads=4 "$@" 2>&1 | tee "$LOGS/gpu-tests.log"
    local line
    line="$(grep -E '^test result:' "$LOGS/gpu-tests.log" | tail -1)"
    SUMMARY+=("tests: ${line#test result: }")
    grep -h '^SKIPPED' "$LOGS/gpu-tests.log" | sort -u | sed 's/^/  /'
}

run_sanitizer() {
    echo "== compute-sanitizer --tool memcheck (GPU tests)"
    local cs
    cs="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)"
    if [ -z "$cs" ]; then
        SUMMARY+=("sanitizer: compute-sanitizer not found")
        return
    fi
    timeout -k 10 "${DEVBUF_SANITIZER_TIMEOUT:-300}" "$cs" --tool memcheck --leak-check no --report-api-errors no --error-exitcode 99 --target-processes all \
        "$BIN/gpu-tests" --test-threads=1 --skip one_gib "$@" > "$LOGS/sanitizer.log" 2>&1
    local rc=$?
    tail -5 "$LOGS/sanitizer.log"
    local errs
    errs="$(grep -E '^========= ERROR SUMMARY' "$LOGS/sanitizer.log" | tail -1)"
    local line
    line="$(grep -E '^test result:' "$LOGS/sanitizer.log" | tail -1)"
    SUMMARY+=("sanitizer: rc=$rc, ${errs#========= } (${line#test result: })")
}

run_examples() {
    echo "== examples"
    local ok=0 fail=0
    for ex in $(cat "$HERE/EXAMPLES"); do
        case "$ex" in bench_*|ipc_producer|ipc_consumer) continue ;; esac
        echo "-- $ex"
        if timeout 300 "$BIN/$ex" 2>&1 | tee "$LOGS/example-$ex.log"; then ok=$((ok + 1)); else fail=$((fail + 1)); fi
    done
    if [ -x "$BIN/ipc_producer" ] && [ -x "$BIN/ipc_consumer" ]; then
        echo "-- ipc_producer + ipc_consumer (two processes)"
        local h="$LOGS/batch.handle"
        rm -f "$h"
        timeout 120 "$BIN/ipc_producer" "$h" > "$LOGS/example-ipc_producer.log" 2>&1 &
        local pid=$!
        for _ in $(seq 1 200); do [ -s "$h" ] && break; sleep 0.1; done
        if timeout 120 "$BIN/ipc_consumer" "$h" 2>&1 | tee "$LOGS/example-ipc_consumer.log" && wait "$pid"; then
            ok=$((ok + 1))
        else
            fail=$((fail + 1))
        fi
        cat "$LOGS/example-ipc_producer.log"
    fi
    SUMMARY+=("examples: $ok ok, $fail failed")
}

run_bench() {
    echo "== benchmarks"
    for ex in $(cat "$HERE/EXAMPLES"); do
        case "$ex" in bench_*) ;; *) continue ;; esac
        echo "-- $ex"
        local extra=()
        [ "$ex" = bench_transfer ] && extra=(--csv "$LOGS/bench_transfer.csv")
        timeout 400 "$BIN/$ex" "${extra[@]}" 2>&1 | tee "$LOGS/$ex.log"
    done
    if command -v python3 >/dev/null; then
        for section in $(ls "$HERE/scripts/peers" | sed -n 's/\.py$//p'); do
            echo "-- peers: $section"
            local pextra=()
            [ "$section" = transfer ] && pextra=(--csv "$LOGS/peers_transfer.csv")
            PYTHONUNBUFFERED=1 timeout 400 python3 "$HERE/scripts/bench_peers.py" "$section" "${pextra[@]}" 2>&1 | tee "$LOGS/peers-$section.log"
        done
    fi
    SUMMARY+=("bench: done")
}

case "$MODE" in
    all) run_tests "$@"; run_examples; run_bench ;;
    bench-only)
        # One benchmark (bench_NAME) or one peer section (peers:NAME), for splitting long runs.
        for what in "$@"; do
            case "$what" in
                peers:*) sec="${what#peers:}"; pextra=(); [ "$sec" = transfer ] && pextra=(--csv "$LOGS/peers_transfer.csv")
                    PYTHONUNBUFFERED=1 timeout 400 python3 "$HERE/scripts/bench_peers.py" "$sec" "${pextra[@]}" 2>&1 | tee "$LOGS/peers-$sec.log" ;;
                *) extra=(); [ "$what" = bench_transfer ] && extra=(--csv "$LOGS/bench_transfer.csv")
                    timeout 400 "$BIN/$what" "${extra[@]}" 2>&1 | tee "$LOGS/$what.log" ;;
            esac
        done
        SUMMARY+=("bench: $*") ;;
    tests) run_tests "$@" ;;
    sanitizer) run_sanitizer "$@" ;;
    bench) run_bench ;;
    examples) run_examples ;;
    *) echo "unknown mode $MODE (all|tests|sanitizer|bench|examples)"; exit 2 ;;
esac
printf -v JOINED "%s; " "${SUMMARY[@]}"
echo "SUMMARY: ${JOINED%; } | device: $DEVICE x$NGPU"
