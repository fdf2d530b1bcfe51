#!/usr/bin/env bash
# zarr-python's own test suite (the tests/ of its 3.1.6 source distribution), run twice:
# once plain (zarr's BatchedCodecPipeline) and once with devbuf's pipeline selected for
# every test (ZARR_CODEC_PIPELINE__PATH=devbuf.zarr.CodecPipeline: zarr's conftest resets
# the config before each test, and the reset re-reads the environment). Prints a summary
# line per run, the tests that fail only with the pipeline, the reads the engine did
# (devbuf.zarr.read_counts() of every worker) and the slowest test modules.
#
#   bash scripts/zarr-suite.sh [--subset] [--gpu] [--tests DIR] [--no-install] [-- PYTEST ARGS]
#   bash scripts/zarr-suite.sh --prepare DIR     # for a machine without network (below)
#
# Default: the virtual environment of scripts/python-tests.sh (DEVBUF_PY_VENV, default
# $TMPDIR/devbuf-py-venv, with the devbuf wheel and zarr 3.1.6; run that script first, or
# set DEVBUF_WHEEL=path/to/devbuf-*.whl to make one here) gets zarr's test dependencies
# from PyPI (its `test` dependency group, less coverage, codspeed and uv; no remote-store
# services), the sdist is fetched (pip download) and its tests/ run with pytest-xdist.
#
#   --subset       a representative part (the CI step): test_api.py, test_array.py,
#                  test_indexing.py, test_v2.py, test_codecs/, test_store/test_local.py,
#                  test_store/test_memory.py
#   --gpu          only zarr's GPU tests (marked `gpu`, or run by its `xp` fixture with
#                  cupy), with and without the pipeline; they need cupy and a GPU
#   --tests DIR    a folder holding zarr's tests/ and pyproject.toml (from --prepare)
#   --no-install   no pip: PYTHON (default python3) must have devbuf, zarr 3.1.6 and the
#                  test dependencies
#   --runs LIST    which runs, of plain,pipeline (default both; a run's earlier results
#                  in $TMPDIR/devbuf-zarr-suite/results[-subset|-gpu] are kept for the
#                  summary)
#   --prepare DIR  unpack the sdist's tests/ and pyproject.toml into DIR and download into
#                  DIR/wheels the pure-Python test dependencies the GPU image lacks
#
# On the GPU machine (no network; Python 3.12 with cupy; the devbuf wheel installed, e.g.
# by the GPU bundle's run.sh python), with DIR from --prepare and zarr's wheels in
# .gpu-py/ (zarr 3.1.6, numcodecs, donfig, google_crc32c, ...):
#   python3 -m pip install --no-index --find-links .gpu-py --find-links DIR/wheels \
#       zarr==3.1.6 pytest-asyncio
#   bash scripts/zarr-suite.sh --gpu --tests DIR --no-install
#
# Environment: DEVBUF_ZARR_SUITE_TIMEOUT (seconds per run, default 3600),
# DEVBUF_ZARR_SUITE_WORKERS (pytest-xdist processes, default 2; 0: no xdist),
# HYPOTHESIS_PROFILE (default "ci", zarr's own: derandomized, so both runs see the same
# examples).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
ZARR_VERSION=3.1.6
# zarr's `test` dependency group (pyproject.toml of the sdist), pinned, without coverage,
# pytest-cov, pytest-codspeed and uv (only its examples' tests use uv, and they need the
# network), plus pytest-timeout, obstore and typer (zarr's `remote` and `cli` extras that
# need no services) and universal-pathlib (its `optional` extra).
TEST_DEPS=(pytest "pytest-asyncio==1.5.0" "hypothesis==6.170.17" "pytest-xdist==3.8.0"
    "pytest-benchmark==5.3.1" "pytest-accept==0.3.0" "numpydoc==1.11.0" "tomlkit==0.15.2"
    "pytest-timeout==2.4.0" "fsspec" "obstore==0.12.1" "typer==0.29.2" "universal-pathlib==0.3.10")
# What the GPU image (/work/.library/device/KINDS.md: hypothesis, pytest-xdist,
# pytest-benchmark and pytest-timeout are there) lacks for --gpu, as wheels; pytest 9 in
# case the image's is older than pytest-asyncio's 8.4.
GPU_WHEELS=("pytest-asyncio==1.5.0" "pytest==9.2.0" "pluggy==1.7.0" "iniconfig==2.3.1")
# zarr's test modules that hold its GPU tests (--gpu collects only these: the others
# import numpydoc, tomlkit, ... which the GPU machine lacks).
GPU_MODULES=(tests/test_api.py tests/test_buffer.py tests/test_config.py tests/test_store/test_memory.py)

SUBSET=(tests/test_api.py tests/test_array.py tests/test_indexing.py tests/test_v2.py
    tests/test_codecs tests/test_store/test_local.py tests/test_store/test_memory.py)
GPU=0 SUB=0 INSTALL=1 TESTS="" PREPARE="" RUNS=plain,pipeline
while [ $# -gt 0 ]; do
    case "$1" in
        --gpu) GPU=1 ;;
        --subset) SUB=1 ;;
        --no-install) INSTALL=0 ;;
        --tests) TESTS="$2"; shift ;;
        --prepare) PREPARE="$2"; shift ;;
        --runs) RUNS="$2"; shift ;;
        --) shift; break ;;
        *) echo "unknown argument $1 (see the head of $0)" >&2; exit 2 ;;
    esac
    shift
done
EXTRA=("$@")
WORK="${TMPDIR:-/tmp}/devbuf-zarr-suite"

unpack() { # unpack DIR: zarr's tests/ and pyproject.toml into DIR
    local dir="$1" py="${2:-python3}" dl
    dl="$(mktemp -d)"
    "$py" -m pip download --quiet --no-binary :all: --no-deps "zarr==$ZARR_VERSION" -d "$dl"
    mkdir -p "$dir"
    rm -rf "$dir/tests"
    tar -xzf "$dl/zarr-$ZARR_VERSION.tar.gz" -C "$dir" --strip-components=1 \
        "zarr-$ZARR_VERSION/tests" "zarr-$ZARR_VERSION/pyproject.toml"
    rm -rf "$dl"
}

if [ -n "$PREPARE" ]; then
    echo "--- zarr-suite: zarr $ZARR_VERSION's tests into $PREPARE, GPU wheels into $PREPARE/wheels"
    unpack "$PREPARE"
    mkdir -p "$PREPARE/wheels"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$PREPARE/wheels" "${GPU_WHEELS[@]}"
    ls "$PREPARE/wheels"
    exit 0
fi

if [ "$INSTALL" = 1 ]; then
    VENV="${DEVBUF_PY_VENV:-${TMPDIR:-/tmp}/devbuf-py-venv}"
    if [ -n "${DEVBUF_WHEEL:-}" ] && [ ! -x "$VENV/bin/python" ]; then
        "${PYTHON:-python3}" -m venv "$VENV"
        "$VENV/bin/python" -m pip install --quiet --upgrade pip
    fi
    [ -x "$VENV/bin/python" ] || { echo "no virtual environment at $VENV: run scripts/python-tests.sh first, or set DEVBUF_WHEEL" >&2; exit 2; }
    PY="$VENV/bin/python"
    if [ -n "${DEVBUF_WHEEL:-}" ]; then
        "$PY" -m pip install --quiet "$DEVBUF_WHEEL" "zarr==$ZARR_VERSION" numpy
    fi
    echo "--- zarr-suite: test dependencies into $VENV"
    "$PY" -m pip install --quiet "${TEST_DEPS[@]}"
else
    PY="${PYTHON:-python3}"
fi
"$PY" -c "import devbuf.zarr, zarr; assert zarr.__version__ == '$ZARR_VERSION', zarr.__version__" \
    || { echo "$PY lacks devbuf or zarr $ZARR_VERSION" >&2; exit 2; }

if [ -z "$TESTS" ]; then
    TESTS="$WORK/src"
    echo "--- zarr-suite: zarr $ZARR_VERSION's sdist (pip download) into $TESTS"
    unpack "$TESTS" "$PY"
fi
TESTS="$(cd "$TESTS" && pwd)"
[ -d "$TESTS/tests" ] && [ -f "$TESTS/pyproject.toml" ] || { echo "$TESTS has no tests/ and pyproject.toml" >&2; exit 2; }

# tests/test_examples.py runs zarr's examples/ (not in the sdist's tests/) with `uv run`,
# which fetches packages: no place here.
SEL=(tests --ignore=tests/test_examples.py)
[ "$SUB" = 1 ] && SEL=("${SUBSET[@]}")
[ "$GPU" = 1 ] && SEL=("${GPU_MODULES[@]}")
XDIST=()
WORKERS="${DEVBUF_ZARR_SUITE_WORKERS:-2}"
[ "$GPU" = 1 ] && WORKERS="${DEVBUF_ZARR_SUITE_WORKERS:-0}"   # a few dozen tests, one GPU
[ "$WORKERS" != 0 ] && XDIST=(-n "$WORKERS")
OUT="$WORK/results"
[ "$SUB" = 1 ] && OUT="$WORK/results-subset"
[ "$GPU" = 1 ] && OUT="$WORK/results-gpu"
mkdir -p "$OUT"
GPU_ENV=()
[ "$GPU" = 1 ] && GPU_ENV=(DEVBUF_SUITE_GPU_ONLY=1)

run() { # run NAME [ENV...]: one pytest run over the selection
    local name="$1" start rc
    shift
    rm -rf "$OUT/$name"* && mkdir -p "$OUT/$name-counts"
    echo "--- zarr-suite: $name run ($(date -u +%H:%M:%S))"
    start=$(date +%s)
    # zarr's test_docstring_consistent_parameters has ids=str of functions ("<function
    # create at 0x7f...>"), different in each process: pytest-xdist refuses a run whose
    # workers collect different ids, so with xdist it runs in a second pytest, without.
    local alone=test_docstring_consistent_parameters
    local -a k=() k2=()
    if [ "${#XDIST[@]}" -gt 0 ]; then
        k=(-k "not $alone")
        k2=(-k "$alone")
    fi
    set +e
    (cd "$TESTS" && env "$@" "${GPU_ENV[@]}" PYTHONPATH="$ROOT/scripts${PYTHONPATH:+:$PYTHONPATH}" \
        HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}" DEVBUF_SUITE_COUNTS_DIR="$OUT/$name-counts" \
        timeout --kill-after=30 "${DEVBUF_ZARR_SUITE_TIMEOUT:-3600}" \
        "$PY" -m pytest -p zarr_suite_plugin -p no:cacheprovider -q -rfE --timeout 600 \
        "${XDIST[@]}" "${k[@]}" --junitxml="$OUT/$name.xml" "${SEL[@]}" "${EXTRA[@]}") > "$OUT/$name.log" 2>&1
    rc=$?
    tail -n 1 "$OUT/$name.log"
    if [ "${#k2[@]}" -gt 0 ] && [ "$SUB" = 0 ] && [ "$GPU" = 0 ]; then
        (cd "$TESTS" && env "$@" PYTHONPATH="$ROOT/scripts${PYTHONPATH:+:$PYTHONPATH}" \
            "$PY" -m pytest -p zarr_suite_plugin -p no:cacheprovider -q -rfE --timeout 600 \
            "${k2[@]}" --junitxml="$OUT/$name-alone.xml" tests/test_api) > "$OUT/$name-alone.log" 2>&1
        echo "and $alone, without xdist: $(tail -n 1 "$OUT/$name-alone.log")"
    fi
    set -e
    echo "$(( $(date +%s) - start ))" > "$OUT/$name.secs"
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "TIMED OUT after ${DEVBUF_ZARR_SUITE_TIMEOUT:-3600} s ($OUT/$name.log)"
    [ "$rc" -le 1 ] || [ "$rc" = 5 ] || echo "pytest exited with $rc ($OUT/$name.log)"
    return 0
}
case ",$RUNS," in *,plain,*) run plain -u ZARR_CODEC_PIPELINE__PATH ;; esac
case ",$RUNS," in *,pipeline,*) run pipeline ZARR_CODEC_PIPELINE__PATH=devbuf.zarr.CodecPipeline ;; esac

set +e
"$PY" - "$OUT" "$RUNS" <<'PY'
import collections, json, os, sys
import xml.etree.ElementTree as ET

out, wanted = sys.argv[1], sys.argv[2].split(",")
# Tests that fail only with the pipeline, for a reason that is not a fault of it (the
# closing note of issue 30 explains each): prefix of the test id -> why.
EXPLAINED = {
    # Sets the key codec_pipeline.*name* (not .path) and asserts that the pipeline class
    # is then BatchedCodecPipeline: true only while .path has zarr's default.
    "tests.test_config::test_config_codec_pipeline_class": "asserts zarr's default pipeline class",
    # zarr's gpu tests (cupy) that expect the warning of zarr's own slow path ("Creating a
    # zarr.buffer.gpu.Buffer with an array that does not support the
    # __cuda_array_interface__ ..., falling back to slow copy based path") around a write
    # and a read; the engine writes and reads without that copy, so nothing warns. The
    # same writes and reads by hand (scripts/zarr_gpu_warning_check.py, H100): cupy results equal
    # to the values written, through the engine ("engine-bytes").
    # Asserts one store get per shard when an array is created with data, which the test
    # itself says is not needed ("this is the current behavior"): the engine writes whole
    # shards without reading them, so the store sees only the metadata's get.
    "tests.test_array::test_create_array_with_data_num_gets": "asserts zarr's own pipeline's needless get per shard",
    "tests.test_buffer::test_codecs_use_of_gpu_prototype": "expects the warning of zarr's slow host-copy path",
    "tests.test_buffer::test_sharding_use_of_gpu_prototype": "expects the warning of zarr's slow host-copy path",
}

def cases(name):
    for suffix in ("", "-alone"):
        path = os.path.join(out, name + suffix + ".xml")
        if os.path.exists(path):
            yield from ET.parse(path).iter("testcase")


def results(name):
    res = {}
    for tc in cases(name):
        tid = tc.get("classname", "") + "::" + tc.get("name", "")
        kinds = {c.tag for c in tc}
        # A test that fails and then errors at teardown has both: error wins.
        res[tid] = ("error" if "error" in kinds else "failed" if "failure" in kinds
                    else "skipped" if "skipped" in kinds else "passed")
    return res

runs = {}
for name in ("plain", "pipeline"):
    res = results(name)
    runs[name] = res
    c = collections.Counter(res.values())
    secs = os.path.join(out, name + ".secs")
    wall = open(secs).read().strip() if os.path.exists(secs) else "?"
    broken = sorted(t for t, r in res.items() if t.startswith("::") and r == "error")  # collection
    if broken:
        print(f"{name}: the run broke ({', '.join(broken)}): see {out}/{name}.log")
    print(f"SUMMARY {name:8s}: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped, "
          f"{c['error']} errors ({len(res)} tests, {wall} s)")
why_skipped = collections.Counter()
for tc in cases("pipeline"):
    for c in tc:
        if c.tag == "skipped":
            why_skipped[(c.get("message") or "")[:120]] += 1
print("why tests skipped with the pipeline (most frequent):")
for w, n in why_skipped.most_common(5):
    print(f"  {n:6d}  {w}")
bad = ("failed", "error")
only = sorted(t for t, r in runs["pipeline"].items() if r in bad and runs["plain"].get(t) not in bad)
fixed = sorted(t for t, r in runs["plain"].items() if r in bad and runs["pipeline"].get(t) not in bad)
print(f"failing only with the pipeline ({len(only)}):")
unexplained = []
for t in only:
    why = next((w for p, w in EXPLAINED.items() if t.startswith(p)), None)
    print("  " + t + (f"  [explained: {why}]" if why else ""))
    if why is None:
        unexplained.append(t)
if fixed:
    print(f"failing only without the pipeline ({len(fixed)}):")
    for t in fixed:
        print("  " + t)
counts, why = collections.Counter(), collections.Counter()
d = os.path.join(out, "pipeline-counts")
for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
    got = json.load(open(os.path.join(d, f)))
    counts.update(got["counts"])
    why.update(got["fallbacks"])
print("reads of the pipeline run (devbuf.zarr.read_counts(), all workers):", dict(sorted(counts.items())))
print("why reads fell back (most frequent; numbers and quoted parts elided):")
for w, n in why.most_common(12):
    print(f"  {n:6d}  {w}")
# The slowest test modules (sum of their tests' times, both runs together).
mods = collections.Counter()
for name in ("plain", "pipeline"):
    for tc in cases(name):
        cls = tc.get("classname", "").split(".")
        mod = "/".join(p for p in cls if p == "tests" or p.startswith("test_"))
        mods[mod] += float(tc.get("time", 0))
print("slowest modules (s, both runs):", ", ".join(f"{m} {s:.0f}" for m, s in mods.most_common(6)))
bad_runs = [n for n in ("plain", "pipeline") if n in wanted
            and (not runs[n] or any(t.startswith("::") and r == "error" for t, r in runs[n].items()))]
engine = sum(v for k, v in counts.items() if k != "fallback")
if bad_runs:
    print(f"FAILED: the {' and '.join(bad_runs)} run did not run the tests")
    sys.exit(1)
ran = collections.Counter(runs.get("pipeline", {}).values())["passed"]
if "pipeline" in wanted and engine == 0:
    if ran >= 10:
        print("FAILED: the pipeline run did no read with devbuf's engine")
        sys.exit(1)
    print(f"(only {ran} test(s) passed with the pipeline: nothing to check the engine's reads by)")
if "plain" in wanted and "pipeline" in wanted and unexplained:
    print(f"FAILED: {len(unexplained)} test(s) fail only with the pipeline, unexplained")
    sys.exit(1)
PY
rc=$?
set -e
echo "--- zarr-suite: logs and junit files in $OUT"
exit "$rc"
