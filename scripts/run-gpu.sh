#!/usr/bin/env bash
# Runs devbuf's GPU bundle (made by scripts/gpu-bundle.sh) on a machine with an NVIDIA GPU.
#
#   bash .gpu/run.sh [MODE] [ARGS...]
#
#   all                     GPU tests, examples, benchmarks (the default)
#   tests [ARGS]            the GPU tests (ARGS go to the test binary: filters, --skip, ...)
#   repeat N [ARGS]         the GPU tests N times in a row; per run: passed, failed (names)
#   sanitizer [TOOL...] [-- ARGS]
#                           the GPU tests under compute-sanitizer: memcheck, racecheck,
#                           synccheck and initcheck (default: all four), each with its
#                           own error count (see "Sanitizers" below)
#   examples                the examples (ipc_producer + ipc_consumer as two processes)
#   bench                   benchmarks and cupy/torch peers
#   python [PYTEST ARGS]    the Python package's tests (crates/devbuf-python/tests) with the
#                           bundle's wheel and the machine's cupy, torch and numpy (no
#                           network needed)
#   bench-only WHAT...      one benchmark (bench_NAME) or peer section (peers:NAME)
#   parse-tests LOG...      re-summarise logs of test runs (no GPU needed)
#   parse-sanitizer LOG...  re-summarise logs of sanitizer runs (no GPU needed)
#
# Logs go to $OUT (when set, as on the device machine) or ./gpu-logs. The last line is one
# summary, e.g.
#   SUMMARY: tests: 118 passed, 0 failed, 2 skipped (need 2 GPUs), 0 ignored; examples: 5 ok, 0 failed | device: ...
# The exit status is 0 only when every step that ran passed: a failed or crashed test,
# a failed example, a sanitizer error or a timed-out step exits 1.
#
# Skipped tests: a GPU test that cannot run here prints "SKIPPED <test>: <reason>" and
# returns (libtest would count it as passed). The tests run with --show-output so that
# these lines reach the log; each skipped test is subtracted from "passed" and reported
# as skipped: "needs 2 GPUs" as "skipped (need 2 GPUs)", other reasons as "skipped
# (other, see log)". A "SKIPPED" line whose name has spaces skips a part of a test that
# otherwise ran; those are listed in the log only.
#
# Sanitizers: each tool runs the test binary with --test-threads=1 under its own time
# limit (DEVBUF_SANITIZER_TIMEOUT_<TOOL>, seconds) and test selection; racecheck,
# synccheck and initcheck run the selected tests one per process (each at most
# DEVBUF_SANITIZER_TEST_TIMEOUT seconds, 150; DEVBUF_SANITIZER_PER_TEST=0: one process),
# so that a test too slow for the tool is named as timed out and the others still run:
#   memcheck   every test except the one_gib ones and the one that fills
#              the device (the tool needs device memory of its own)      (240 s)
#   racecheck  kernels:: with DEVBUF_TEST_SMALL=1                        (100 s)
#   synccheck  kernels:: with DEVBUF_TEST_SMALL=1                        (100 s)
#   initcheck  kernels:: with DEVBUF_TEST_SMALL=1                        (100 s)
# racecheck and synccheck check shared-memory hazards and barriers inside kernels, so
# tests that launch no kernel have nothing to show them; DEVBUF_TEST_SMALL=1 makes the
# slow kernel tests use small sizes (every access is checked: a 64 MiB kernel takes
# minutes). DEVBUF_SANITIZER_ARGS_<TOOL> replaces a tool's test selection. The one_gib
# tests run once per tool only with DEVBUF_SANITIZER_ONE_GIB=1 (they exercise the same
# kernels and copy paths as the smaller tests, at a size that takes minutes under a
# sanitizer and would not fit the device machine's 10-minute command limit with the
# rest). Tools can be run one per call to stay within that limit:
#   bash .gpu/run.sh sanitizer racecheck initcheck
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
LOGS="${OUT:-$PWD/gpu-logs}"
MODE="${1:-all}"
shift || true
BIN="$HERE/bin"
export DEVBUF_ZARR_FIXTURES="$HERE/fixtures/zarr"
# The S3-compatible server of the object-store tests and bench_object_store, when the
# bundle was built beside one (scripts/gpu-bundle.sh copies it).
[ -x "$HERE/bin/s3s-fs" ] && export DEVBUF_S3S_FS="${DEVBUF_S3S_FS:-$HERE/bin/s3s-fs}"
SUMMARY=()
FAILED=()
SANITIZER_TOOLS=(memcheck racecheck synccheck initcheck)

fail() { FAILED+=("$1"); }

# ---------------------------------------------------------------------- log parsing

# Prints "<passed> passed, <failed> failed, <k> skipped (need 2 GPUs)[, <m> skipped
# (other, see log)], <ignored> ignored" for a libtest log, or "no result" when the log
# has no "test result:" line (crash, timeout). Returns 1 when the run did not pass.
test_counts() {
    local log="$1" line passed failed ignored two other
    line="$(grep -E '^test result:' "$log" | tail -1)"
    if [ -z "$line" ]; then
        echo "no result (crashed or timed out; see $(basename "$log"))"
        return 1
    fi
    passed="$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"$line")"
    failed="$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<"$line")"
    ignored="$(sed -nE 's/.* ([0-9]+) ignored.*/\1/p' <<<"$line")"
    # Whole tests skipped: "SKIPPED <name>: <reason>", <name> without spaces. A test
    # prints its line to stdout and stderr: count names once.
    two="$(grep -E '^SKIPPED [^ :]+: needs 2 GPUs' "$log" | sed -E 's/^SKIPPED ([^:]+):.*/\1/' | sort -u | wc -l)"
    other="$(grep -E '^SKIPPED [^ :]+: ' "$log" | grep -vE '^SKIPPED [^ :]+: needs 2 GPUs' \
        | sed -E 's/^SKIPPED ([^:]+):.*/\1/' | sort -u | wc -l)"
    local text="$((passed - two - other)) passed, $failed failed, $two skipped (need 2 GPUs)"
    [ "$other" -gt 0 ] && text+=", $other skipped (other, see log)"
    text+=", $ignored ignored"
    echo "$text"
    [ "$failed" -eq 0 ] && grep -qE '^test result: ok\.' <<<"$line"
}

# The failed tests of a libtest log, space-separated.
failed_tests() {
    sed -nE 's/^test (.+) \.\.\. FAILED$/\1/p' "$1" | sort -u | tr '\n' ' ' | sed 's/ $//'
}

# Sum of the "ERROR SUMMARY: N errors" lines of a compute-sanitizer log (one per
# process with --target-processes all); "none" when there is no such line.
sanitizer_errors() {
    local n
    # Not the "N errors were not printed" line that follows a summary past --print-limit.
    n="$(grep -vh 'were not printed' "$@" | sed -nE 's/^========= ERROR SUMMARY: ([0-9]+) error.*/\1/p' | awk '{s += $1} END {if (NR) print s; else print "none"}')"
    echo "$n"
}

# "<tool>: <n> errors (<test counts>)" of sanitizer logs; returns 1 unless the tests
# passed and no errors were reported.
sanitizer_summary() {
    local tool="$1" rc="$2"
    shift 2
    local errs counts ok=0 log
    errs="$(sanitizer_errors "$@")"
    counts=""
    for log in "$@"; do
        local c
        c="$(test_counts "$log")" || ok=1
        counts+="${counts:+; }$c"
    done
    if [ "$errs" = none ]; then
        echo "$tool: no error summary (rc=$rc; crashed or timed out) ($counts)"
        return 1
    fi
    echo "$tool: $errs errors ($counts)"
    [ "$errs" -eq 0 ] && [ "$ok" -eq 0 ] && [ "$rc" -eq 0 ]
}

# ---------------------------------------------------------------------------- steps

device_line() {
    DEVICE="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
    DEVICE="${DEVICE:-no nvidia-smi}"
    NGPU="$(nvidia-smi -L 2>/dev/null | wc -l)"
    echo "devbuf GPU bundle $(cat "$HERE/COMMIT" 2>/dev/null || echo unknown) on: $DEVICE x$NGPU"
}

# Runs the GPU tests once into log $1 (further args to the binary); returns its status.
test_run() {
    local log="$1"
    shift
    # A hung test must not eat the whole lease: the suite takes well under a minute.
    timeout -k 10 "${DEVBUF_TEST_TIMEOUT:-240}" "$BIN/gpu-tests" --test-threads=4 --show-output "$@" > "$log" 2>&1
}

run_tests() {
    echo "== GPU tests"
    local log="$LOGS/gpu-tests.log" rc counts
    test_run "$log" "$@"
    rc=$?
    grep -E '^test |^test result:|^failures:|panicked at' "$log" | grep -v ' \.\.\. ok$'
    grep -h '^SKIPPED' "$log" | sort -u | sed 's/^/  /'
    if counts="$(test_counts "$log")" && [ "$rc" -eq 0 ]; then
        SUMMARY+=("tests: $counts")
    else
        local names
        names="$(failed_tests "$log")"
        SUMMARY+=("tests: $counts (rc=$rc${names:+; failed: $names})")
        fail "tests"
    fi
}

run_repeat() {
    local n="${1:-}"
    if ! [[ "$n" =~ ^[0-9]+$ ]] || [ "$n" -lt 1 ]; then
        echo "repeat needs a count: run.sh repeat N [test args]" >&2
        exit 2
    fi
    shift
    echo "== GPU tests, $n runs"
    local i rc counts good=0 lines=()
    for i in $(seq 1 "$n"); do
        local log="$LOGS/gpu-tests-run$i.log"
        test_run "$log" "$@"
        rc=$?
        if counts="$(test_counts "$log")" && [ "$rc" -eq 0 ]; then
            good=$((good + 1))
            lines+=("run $i: $counts")
        else
            local names
            names="$(failed_tests "$log")"
            lines+=("run $i: $counts (rc=$rc${names:+; failed: $names})")
        fi
        echo "${lines[-1]}"
    done
    local joined
    printf -v joined "%s; " "${lines[@]}"
    SUMMARY+=("repeat: $good of $n runs passed (${joined%; })")
    [ "$good" -eq "$n" ] || fail "repeat"
}

find_sanitizer() {
    command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true
}

# The test selection of a tool (one word per line); DEVBUF_SANITIZER_ARGS_<TOOL> replaces it.
sanitizer_selection() {
    local tool="$1" var
    var="DEVBUF_SANITIZER_ARGS_$(tr '[:lower:]' '[:upper:]' <<<"$tool")"
    if [ -n "${!var:-}" ]; then
        echo "${!var}"
        return
    fi
    case "$tool" in
        memcheck) echo "--skip one_gib --skip faults_device_memory_exhausted_then_freed" ;;
        *) echo "kernels:: --skip one_gib" ;;
    esac
}

# One tool over the selected tests one at a time (a process each, small sizes), so that
# a test too slow for the tool is named and the others are still checked: each test gets
# at most DEVBUF_SANITIZER_TEST_TIMEOUT seconds (150) and the whole tool $3 seconds.
# Args: compute-sanitizer, tool, limit, test selection..., --, tool options...
# Prints "<tool>: <n> errors (<p> passed, <f> failed, <t> timed out: names)"; returns 1
# unless every test ran to its end, passed, and the tool reported no error. Output is
# not captured (--nocapture): a test stopped by its limit leaves what it printed.
sanitizer_per_test() {
    local cs="$1" tool="$2" limit="$3"
    shift 3
    local sel=() opts=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do sel+=("$1"); shift; done
    shift
    opts=("$@")
    local dir="$LOGS/sanitizer-$tool" names=() t start left per r
    mkdir -p "$dir"
    mapfile -t names < <(DEVBUF_TEST_SMALL=1 "$BIN/gpu-tests" --list --format terse "${sel[@]}" 2>/dev/null | sed -n 's/: test$//p')
    local passed=0 failed=() slow=() logs=()
    start=$(date +%s)
    for t in "${names[@]}"; do
        left=$(( limit - ($(date +%s) - start) ))
        if [ "$left" -lt 15 ]; then
            slow+=("$t (not started)")
            continue
        fi
        per="${DEVBUF_SANITIZER_TEST_TIMEOUT:-150}"
        [ "$left" -lt "$per" ] && per="$left"
        local log="$dir/${t//::/__}.log"
        logs+=("$log")
        DEVBUF_TEST_SMALL=1 timeout -k 5 "$per" "$cs" "${opts[@]}" \
            "$BIN/gpu-tests" --test-threads=1 --nocapture --exact "$t" > "$log" 2>&1
        r=$?
        if [ "$r" -eq 124 ] || [ "$r" -eq 137 ]; then
            slow+=("$t (${per} s)")
        elif [ "$r" -ne 0 ] || ! grep -qE '^test result: ok\. 1 passed' "$log"; then
            failed+=("$t")
        else
            passed=$((passed + 1))
        fi
    done
    local errs text
    errs="$(sanitizer_errors "${logs[@]}" /dev/null)"
    text="$passed passed, ${#failed[@]} failed${failed:+ (${failed[*]})}, ${#slow[@]} timed out"
    [ ${#slow[@]} -gt 0 ] && text+=": ${slow[*]}"
    echo "$tool: ${errs/none/0} errors, tests one at a time ($text)"
    [ "$errs" != none ] && [ "$errs" -eq 0 ] && [ ${#failed[@]} -eq 0 ] && [ ${#slow[@]} -eq 0 ]
}

run_sanitizer() {
    local tools=() extra=()
    while [ $# -gt 0 ]; do
        case "$1" in
            memcheck|racecheck|synccheck|initcheck) tools+=("$1"); shift ;;
            --) shift; extra=("$@"); break ;;
            *) extra=("$@"); break ;;
        esac
    done
    [ ${#tools[@]} -eq 0 ] && tools=("${SANITIZER_TOOLS[@]}")
    local cs
    cs="$(find_sanitizer)"
    if [ -z "$cs" ]; then
        SUMMARY+=("sanitizer: compute-sanitizer not found")
        fail "sanitizer"
        return
    fi
    local tool parts=()
    for tool in "${tools[@]}"; do
        echo "== compute-sanitizer --tool $tool (GPU tests)"
        local up var limit small=1 sel logs=() rc=0 r
        up="$(tr '[:lower:]' '[:upper:]' <<<"$tool")"
        var="DEVBUF_SANITIZER_TIMEOUT_$up"
        case "$tool" in memcheck) limit="${!var:-240}"; small=0 ;; *) limit="${!var:-100}" ;; esac
        read -r -a sel <<<"$(sanitizer_selection "$tool")"
        local opts=(--tool "$tool" --report-api-errors no --error-exitcode 99 --target-processes all)
        [ "$tool" = memcheck ] && opts+=(--leak-check no)
        local runs=("main")
        [ "${DEVBUF_SANITIZER_ONE_GIB:-0}" = 1 ] && runs+=("one_gib")
        if [ "$small" = 1 ] && [ "${DEVBUF_SANITIZER_PER_TEST:-1}" = 1 ]; then
            local line
            if line="$(sanitizer_per_test "$cs" "$tool" "$limit" "${sel[@]}" "${extra[@]}" -- "${opts[@]}")"; then
                parts+=("$line")
            else
                parts+=("$line")
                fail "sanitizer $tool"
            fi
            echo "$line"
            continue
        fi
        for which in "${runs[@]}"; do
            local log="$LOGS/sanitizer-$tool.log" args=("${sel[@]}" "${extra[@]}")
            if [ "$which" = one_gib ]; then
                log="$LOGS/sanitizer-$tool-one_gib.log"
                args=(one_gib)
            fi
            if [ "$small" = 1 ]; then
                DEVBUF_TEST_SMALL=1 timeout -k 10 "$limit" "$cs" "${opts[@]}" \
                    "$BIN/gpu-tests" --test-threads=1 --show-output "${args[@]}" > "$log" 2>&1
            else
                timeout -k 10 "$limit" "$cs" "${opts[@]}" \
                    "$BIN/gpu-tests" --test-threads=1 --show-output "${args[@]}" > "$log" 2>&1
            fi
            r=$?
            [ "$r" -ne 0 ] && rc=$r
            logs+=("$log")
            grep -E '^========= (ERROR|RACECHECK) SUMMARY|^test result:' "$log"
        done
        local line
        if line="$(sanitizer_summary "$tool" "$rc" "${logs[@]}")"; then
            parts+=("$line")
        else
            parts+=("$line")
            fail "sanitizer $tool"
        fi
    done
    local joined
    printf -v joined "%s, " "${parts[@]}"
    SUMMARY+=("sanitizer: ${joined%, }")
}

run_examples() {
    echo "== examples"
    local ok=0 failed=()
    for ex in $(cat "$HERE/EXAMPLES"); do
        case "$ex" in bench_*|ipc_producer|ipc_consumer|flight_server|flight_client) continue ;; esac
        echo "-- $ex"
        if timeout 300 "$BIN/$ex" 2>&1 | tee "$LOGS/example-$ex.log"; then ok=$((ok + 1)); else failed+=("$ex"); fi
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
            failed+=("ipc_producer+ipc_consumer")
        fi
        cat "$LOGS/example-ipc_producer.log"
    fi
    if [ -x "$BIN/flight_server" ] && [ -x "$BIN/flight_client" ]; then
        echo "-- flight_server + flight_client (two processes; the client reads into GPU 0)"
        local root="$LOGS/flight-root" token="$LOGS/flight.token" out="$LOGS/example-flight_server.log"
        rm -rf "$root" "$token"
        timeout 300 "$BIN/flight_server" --root "$root" --demo --token-file "$token" \
            --addr 127.0.0.1:0 > "$out" 2>&1 &
        local spid=$! uri=""
        for _ in $(seq 1 200); do
            uri="$(sed -n 's/^READY //p' "$out")"
            [ -n "$uri" ] && break
            sleep 0.1
        done
        if [ -n "$uri" ] && timeout 120 "$BIN/flight_client" --uri "$uri" --token-file "$token" \
            --device 0 demo 2>&1 | tee "$LOGS/example-flight_client.log"; then
            ok=$((ok + 1))
        else
            failed+=("flight_server+flight_client")
        fi
        kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
        cat "$out"
    fi
    if [ ${#failed[@]} -eq 0 ]; then
        SUMMARY+=("examples: $ok ok, 0 failed")
    else
        SUMMARY+=("examples: $ok ok, ${#failed[@]} failed (${failed[*]})")
        fail "examples"
    fi
}

# Extra arguments of one benchmark (bench_NAME) or peer section (peers:NAME), one per
# line. Add a case here to pass a benchmark its arguments.
bench_args() {
    case "$1" in
        bench_transfer) printf '%s\n' --csv "$LOGS/bench_transfer.csv" ;;
        bench_flight) printf '%s\n' --pyarrow-script "$HERE/scripts/flight_check.py" ;;
        peers:transfer) printf '%s\n' --csv "$LOGS/peers_transfer.csv" ;;
    esac
}

# Runs one benchmark (bench_NAME) or peer section (peers:NAME); returns its status.
bench_one() {
    local what="$1" args=()
    mapfile -t args < <(bench_args "$what")
    echo "-- $what"
    case "$what" in
        peers:*)
            PYTHONUNBUFFERED=1 timeout 400 python3 "$HERE/scripts/bench_peers.py" "${what#peers:}" "${args[@]}" 2>&1 \
                | tee "$LOGS/peers-${what#peers:}.log" ;;
        *) timeout 400 "$BIN/$what" "${args[@]}" 2>&1 | tee "$LOGS/$what.log" ;;
    esac
}

# Every benchmark, then the peer sections when python3 is there.
bench_list() {
    for ex in $(cat "$HERE/EXAMPLES"); do
        case "$ex" in bench_*) echo "$ex" ;; esac
    done
    if command -v python3 >/dev/null; then
        ls "$HERE/scripts/peers" | sed -n 's/\.py$//p' | sed 's/^/peers:/'
    fi
}

run_bench() {
    echo "== benchmarks"
    local what failed=()
    for what in "$@"; do
        bench_one "$what" || failed+=("$what")
    done
    # Benchmarks report; they do not fail the run (a missing peer library is not a
    # devbuf failure), but the summary names those that exited non-zero.
    if [ ${#failed[@]} -eq 0 ]; then
        SUMMARY+=("bench: ${BENCH_LABEL:-done}")
    else
        SUMMARY+=("bench: ${BENCH_LABEL:-done}, ${#failed[@]} exited non-zero (${failed[*]})")
    fi
}

run_python() {
    echo "== python (the bundle's wheel; pytest crates/devbuf-python/tests)"
    local pk="${TMPDIR:-/tmp}/devbuf-gpu-python" log="$LOGS/python.log" rc=0
    if [ ! -d "$HERE/python/wheels" ]; then
        SUMMARY+=("python: no wheel in the bundle")
        fail python
        return
    fi
    rm -rf "$pk"
    # Installed into a folder on PYTHONPATH, beside the machine's own cupy, torch and
    # numpy (a venv would hide those where they are user-site packages); the bundle
    # brings devbuf's wheel and pytest's, no index is reached.
    python3 -m pip install --quiet --no-index --find-links "$HERE/python/wheels" --target "$pk" devbuf pytest || rc=$?
    if [ "$rc" = 0 ]; then
        (cd "$HERE/python/root" && PYTHONPATH="$pk${PYTHONPATH:+:$PYTHONPATH}" timeout 900 python3 -m pytest crates/devbuf-python/tests -rs -q -p no:cacheprovider "$@") 2>&1 | tee "$log"
        rc=${PIPESTATUS[0]}
    fi
    local last
    last="$(grep -E '(passed|failed|error|skipped)' "$log" 2>/dev/null | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')"
    SUMMARY+=("python: ${last:-no result} (rc=$rc)")
    [ "$rc" = 0 ] || fail python
}

finish() {
    local joined
    printf -v joined "%s; " "${SUMMARY[@]}"
    echo "SUMMARY: ${joined%; } | device: ${DEVICE:-none} x${NGPU:-0}"
    if [ ${#FAILED[@]} -gt 0 ]; then
        echo "FAILED: ${FAILED[*]}"
        exit 1
    fi
    exit 0
}

case "$MODE" in
    parse-tests)
        for log in "$@"; do
            c="$(test_counts "$log")" || fail "$log"
            SUMMARY+=("$(basename "$log"): $c")
        done
        finish ;;
    parse-sanitizer)
        for log in "$@"; do
            c="$(sanitizer_summary "$(basename "$log" .log)" 0 "$log")" || fail "$log"
            SUMMARY+=("$c")
        done
        finish ;;
esac

mkdir -p "$LOGS"
device_line
case "$MODE" in
    all) run_tests "$@"; run_examples; run_python; mapfile -t B < <(bench_list); run_bench "${B[@]}" ;;
    tests) run_tests "$@" ;;
    repeat) run_repeat "$@" ;;
    sanitizer) run_sanitizer "$@" ;;
    examples) run_examples ;;
    python) run_python "$@" ;;
    bench) mapfile -t B < <(bench_list); run_bench "${B[@]}" ;;
    bench-only) BENCH_LABEL="$*" run_bench "$@" ;;
    *) echo "unknown mode $MODE (all|tests|repeat N|sanitizer [TOOL...]|examples|python|bench|bench-only WHAT...|parse-tests LOG...|parse-sanitizer LOG...)"; exit 2 ;;
esac
finish
