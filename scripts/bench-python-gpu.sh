#!/usr/bin/env bash
# Issue 30's Python benchmark on a GPU machine without network: zarr-python (its default
# pipeline, devbuf's and zarrs-python's), devbuf direct, tensorstore (+ cupy upload) and
# kvikio's GDSStore reading the same zarr stores in one run (scripts/peers/zarr.py).
#
#   bash scripts/bench-python-gpu.sh DEVBUF_WHEEL WHEEL_DIR [WHEEL_DIR...]
#
# DEVBUF_WHEEL is the devbuf wheel (devbuf-*-cp310-abi3-manylinux_*.whl, with devbuf/zarr.py
# and the zarr.codec_pipeline entry point). Every *.whl directly in each WHEEL_DIR is
# installed too (devbuf-*.whl there are left out): zarr 3.1.6, numcodecs, donfig,
# google_crc32c, typing_extensions, packaging, pyyaml (the folder .gpu-py), and zarrs,
# kvikio-cu13, libkvikio-cu13, rapids-logger (the folder .gpu-bench-whl). Everything goes
# into /tmp/site with `pip install --no-index --no-deps --target` and PYTHONPATH points
# there; numpy, cupy-cuda13x, tensorstore, cuda-pathfinder and nvidia-cufile are the
# machine's own (cupy 14.2 and the cuFile wheel satisfy kvikio's requirements; nvCOMP's
# Python package is not there, so its peers are left out).
#
# nvCOMP (devbuf's GPU decoders; the machine has none): DEVBUF_NVCOMP_LIB when set, else
# NVCOMP (a libnvcomp.so.6 or .so.6.xz; default .gpu-nvcomp/libnvcomp.so.6.xz under the
# repository root, as the other GPU calls carry it) unpacked into /tmp/nv. Without it devbuf
# still runs (the CPU decodes, then one upload) and env.txt says so.
#
# The device machine, from the repository root of the checkout the device call copies (the
# folders are git-ignored, so they must be carried, and must exist in that checkout):
#   mkdir -p .gpu-bench-whl/devbuf && cp target/wheels/devbuf-*.whl .gpu-bench-whl/devbuf/
#   (a wheel built with devbuf/zarr.py and the entry point: `unzip -l` lists devbuf/zarr.py)
#   run: bash scripts/bench-python-gpu.sh .gpu-bench-whl/devbuf/devbuf-0.1.0-cp310-abi3-manylinux_2_34_x86_64.whl .gpu-py .gpu-bench-whl
#        carry [".gpu-bench-whl", ".gpu-py", ".gpu-nvcomp"]   (24 + 2.8 + 21.7 MB)
#
# Stores: the six of issue 28's table (`bench_peers.py zarr list` names them), written with
# tensorstore (`zarr write --dir /tmp/peers --mib 512`, as the earlier peer runs did) unless
# /tmp/peers/manifest.json already holds them. Peers: see PEERS below; `read --repeat 5`,
# with zarr-python's default pipeline under enable_gpu and kvikio-gds (both ~0.1 GB/s: about
# 4.5 s per 512 MiB read) at 2 runs after the warm-up, and no peer spending more than
# ~12 s of timed runs on one store (--peer-budget-s: fewer runs, at least one; the summary
# marks them "(n=N)"). Estimate on one H100 (16 cores): install ~10 s, write ~60 s, read
# ~5-6 min. The whole is held to TOTAL_S (450 s, under 8 minutes): the write has its own
# timeout, and `read` starts no peer once TOTAL_S - 25 s have passed since this script
# began (--time-limit-s: the peers left say "out of time", the summary is still written),
# with `timeout` as a backstop.
#
# Environment: DEVBUF_PY_OVERLAY (a python/devbuf folder), MIB (512), STORES, PEERS, REPEAT (5), REPEAT_FOR, PEER_BUDGET_S (12),
# PEERS_DIR (/tmp/peers), SITE (/tmp/site), TOTAL_S (450), WRITE_TIMEOUT (150).
# Output ($OUT, or ./gpu-logs): install.log, peers-write.log, peers-python.log (the whole
# read: per-store tables, notes, "cannot run" reasons, the summary), peers-python.jsonl
# (one JSON object per store and peer), peers-python.md (the summary tables, Markdown),
# env.txt. Exit status: that of `read` (1 when a result was wrong or devbuf's pipeline fell
# back), 2 for a setup failure.
set -uo pipefail
if [ $# -lt 2 ]; then
    sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WHEEL="$1"; shift
LOGS="${OUT:-$PWD/gpu-logs}"
mkdir -p "$LOGS"
SITE="${SITE:-/tmp/site}"
PEERS_DIR="${PEERS_DIR:-/tmp/peers}"
MIB="${MIB:-512}"
STORES="${STORES:-f32_c256k_zstd1,f32_c1m_zstd1,f32_c4m_zstd1,f32_s4m_i64k_zstd1,u16_det_c512_zstd3,f32_c1m_gzip1}"
PEERS="${PEERS:-tensorstore,tensorstore+cupy,zarr,zarr-gpu,zarr+devbuf,zarr-gpu+devbuf,devbuf,devbuf-host,zarrs-python,zarrs-python+cupy,kvikio-gds}"
REPEAT="${REPEAT:-5}"
REPEAT_FOR="${REPEAT_FOR:-zarr-gpu=2,kvikio-gds=2}"
PEER_BUDGET_S="${PEER_BUDGET_S:-12}"
PY="${PYTHON:-python3}"
START=$(date +%s)
stamp() { echo "[$(( $(date +%s) - START )) s] $*"; }

[ -f "$WHEEL" ] || { echo "no devbuf wheel at $WHEEL" >&2; exit 2; }
WHEELS=("$WHEEL")
for d in "$@"; do
    [ -d "$d" ] || { echo "no wheel folder $d" >&2; exit 2; }
    for w in "$d"/*.whl; do
        [ -e "$w" ] || continue
        case "$(basename "$w")" in devbuf-*) continue ;; esac
        WHEELS+=("$w")
    done
done

stamp "installing ${#WHEELS[@]} wheels into $SITE"
rm -rf "$SITE"
if ! "$PY" -m pip install --no-index --no-deps --target "$SITE" "${WHEELS[@]}" > "$LOGS/install.log" 2>&1; then
    tail -20 "$LOGS/install.log"
    echo "pip install failed (log: $LOGS/install.log)" >&2
    exit 2
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
if [ -n "${DEVBUF_PY_OVERLAY:-}" ]; then
    # The package's pure-Python files of a working tree over the wheel's (a wheel built
    # before a Python-only change).
    cp "$DEVBUF_PY_OVERLAY"/*.py "$SITE/devbuf/" && stamp "devbuf's Python files from $DEVBUF_PY_OVERLAY"
fi
if [ -z "${DEVBUF_NVCOMP_LIB:-}" ]; then
    NV="${NVCOMP:-$ROOT/.gpu-nvcomp/libnvcomp.so.6.xz}"
    mkdir -p /tmp/nv
    case "$NV" in
        *.xz) [ -f "$NV" ] && { [ -s /tmp/nv/libnvcomp.so.6 ] || xz -dc "$NV" > /tmp/nv/libnvcomp.so.6; } ;;
        *) [ -f "$NV" ] && cp "$NV" /tmp/nv/libnvcomp.so.6 ;;
    esac
    if [ -s /tmp/nv/libnvcomp.so.6 ]; then
        export DEVBUF_NVCOMP_LIB=/tmp/nv
    else
        echo "no nvCOMP ($NV): devbuf decodes on the CPU" >&2
    fi
fi
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
    echo "nproc $(nproc); $("$PY" --version 2>&1) at $(command -v "$PY"); DEVBUF_NVCOMP_LIB=${DEVBUF_NVCOMP_LIB:-}"
    for w in "${WHEELS[@]}"; do echo "wheel $(basename "$w") $(stat -c %s "$w")"; done
    "$PY" - <<'EOF' 2>&1
import importlib
for m in ("numpy", "cupy", "tensorstore", "zarr", "numcodecs", "devbuf", "devbuf.zarr", "zarrs",
          "kvikio", "kvikio.zarr"):
    try:
        mod = importlib.import_module(m)
        print(f"{m}: {getattr(mod, '__version__', '')} {getattr(mod, '__file__', '')}")
    except Exception as e:
        print(f"{m}: NOT IMPORTABLE: {type(e).__name__}: {e}")
try:
    import devbuf
    print(f"devbuf CUDA available: {devbuf.is_available()} ({devbuf.unavailable_reason() or 'ok'})")
except Exception as e:
    print(f"devbuf: {type(e).__name__}: {e}")
try:
    import kvikio.defaults
    print("kvikio:", kvikio.defaults.get("compat_mode"), "compat mode preferred:",
          kvikio.defaults.is_compat_mode_preferred())
except Exception as e:
    print(f"kvikio compat_mode: {type(e).__name__}: {e}")
EOF
} > "$LOGS/env.txt"
cat "$LOGS/env.txt"

stamp "writing stores ($MIB MiB) into $PEERS_DIR"
mkdir -p "$PEERS_DIR"
have=$("$PY" - "$PEERS_DIR/manifest.json" "$STORES" "$MIB" <<'EOF' 2>/dev/null
import json, sys
try:
    m = json.load(open(sys.argv[1]))
except Exception:
    print("no"); sys.exit()
names = {s["name"] for s in m.get("stores", []) if "check_failed" not in s}
want = set(sys.argv[2].split(","))
print("yes" if want <= names and float(m.get("mib", 0)) == float(sys.argv[3]) else "no")
EOF
)
if [ "$have" = yes ]; then
    stamp "stores already written ($PEERS_DIR/manifest.json)"
else
    timeout "${WRITE_TIMEOUT:-150}" "$PY" "$ROOT/scripts/bench_peers.py" zarr write --dir "$PEERS_DIR" \
        --mib "$MIB" --only "$STORES" --writer tensorstore > "$LOGS/peers-write.log" 2>&1
    rc=$?
    cat "$LOGS/peers-write.log"
    if [ $rc -ne 0 ]; then
        echo "write failed (rc $rc)" >&2
        exit 2
    fi
fi

LEFT=$(( ${TOTAL_S:-450} - ( $(date +%s) - START ) ))
LIMIT=$(( LEFT - 25 ))
[ $LIMIT -lt 30 ] && LIMIT=30
stamp "reading: $PEERS (no peer starts after $LIMIT s)"
timeout $(( LIMIT + 60 )) "$PY" "$ROOT/scripts/bench_peers.py" zarr read --dir "$PEERS_DIR" \
    --only "$STORES" --peers "$PEERS" --repeat "$REPEAT" --repeat-for "$REPEAT_FOR" \
    --peer-budget-s "$PEER_BUDGET_S" --time-limit-s "$LIMIT" --json "$LOGS/peers-python.jsonl" \
    --markdown "$LOGS/peers-python.md" > "$LOGS/peers-python.log" 2>&1
rc=$?
[ $rc -eq 124 ] && echo "read TIMED OUT after $(( LIMIT + 60 )) s: the JSON lines hold what finished" >> "$LOGS/peers-python.log"
grep -E "^==|cannot run|PROBLEM|NOT THE ENGINE|TIMED OUT|did NOT|last_read|devbuf: devbuf.open" "$LOGS/peers-python.log" | grep -v "^== summary" | cut -c1-300
sed -n '/^== summary/,$p' "$LOGS/peers-python.log"
stamp "done (read rc $rc)"
exit $rc
