#!/usr/bin/env bash
# The Flight part of CI (.ci/run calls it; no GPU needed): an independent client,
# pyarrow.flight installed from PyPI into a virtual environment, against the example
# server, in plain text (with the Basic-auth handshake) and over TLS.
#
#   scripts/flight-ci.sh            (from the repository root; uses $CARGO_TARGET_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${CARGO_TARGET_DIR:-target}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/devbuf-flight-ci.XXXXXX")"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

# The host Flight tests run with the README's test command (.ci/run's tests step).
echo "-- pyarrow.flight against examples/flight_server"
python3 -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install --quiet --disable-pip-version-check pyarrow numpy
"$WORK/venv/bin/python" -c 'import pyarrow, pyarrow.flight; print("pyarrow", pyarrow.__version__)'
cargo build --features zarr,object_store,flight --example flight_server
SERVER="$TARGET/debug/examples/flight_server"

# Starts the example server with the given arguments; prints its URI once it serves.
start() {
    local log="$WORK/server-$#-$RANDOM.log"
    "$SERVER" --addr 127.0.0.1:0 "$@" > "$log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 1 300); do
        if grep -q '^READY ' "$log"; then sed -n 's/^READY //p' "$log"; return 0; fi
        if ! kill -0 "${PIDS[-1]}" 2>/dev/null; then break; fi
        sleep 0.1
    done
    echo "the Flight server did not start:" >&2
    cat "$log" >&2
    return 1
}

ROOT="$WORK/root"
URI="$(start --root "$ROOT" --demo --token-file "$WORK/token" --basic ci:flight-secret)"
"$WORK/venv/bin/python" scripts/flight_check.py --uri "$URI" --token-file "$WORK/token" \
    --basic ci:flight-secret check
TLS_URI="$(start --root "$ROOT" --token-file "$WORK/token" --tls-self-signed "$WORK/tls")"
"$WORK/venv/bin/python" scripts/flight_check.py --uri "${TLS_URI/127.0.0.1/localhost}" \
    --token-file "$WORK/token" --tls-ca "$WORK/tls/cert.pem" check
echo "Flight checks passed"
