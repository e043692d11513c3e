#!/usr/bin/env bash
# What TLS costs: bench/ps_bench against one local pserver, first plain, then with
# server.tls (a throw-away CA and certificate made here with openssl), in one run; prints
# both markdown tables for docs/BENCHMARKS.md.
#   bench/run_tls_bench.sh [extra ps_bench flags, e.g. --seconds 1]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
PSERVER="$BUILD/server/pserver"
BENCH="$BUILD/bench/ps_bench/ps_bench"
CONFIG=bench/ps_bench/pserver_bench.yaml
PORT="${FLEETPS_BENCH_PORT:-18700}"
CERTS="$(mktemp -d)"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$CERTS"; }
trap cleanup EXIT

ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
(
  cd "$CERTS"
  openssl req -x509 $ec -keyout ca.key -out ca.pem -days 1 -subj /CN=bench-ca
  openssl req $ec -keyout server.key -out server.csr -subj /CN=bench
  echo "subjectAltName=IP:127.0.0.1" > san.ext
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 1 -extfile san.ext
) >/dev/null 2>&1

echo "== machine: $(nproc) cores, $(openssl version)"
for mode in plain tls; do
  if [ "$mode" = tls ]; then
    FLEETPS_TLS_CERT_FILE="$CERTS/server.pem" FLEETPS_TLS_KEY_FILE="$CERTS/server.key" \
      "$PSERVER" --config "$CONFIG" --endpoints "127.0.0.1:$PORT" --index 0 --log-level warn &
    extra=(--tls-ca "$CERTS/ca.pem")
  else
    "$PSERVER" --config "$CONFIG" --endpoints "127.0.0.1:$PORT" --index 0 --log-level warn &
    extra=()
  fi
  pid=$!
  echo "== ps_bench, 1 server, $mode"
  "$BENCH" --servers "127.0.0.1:$PORT" --label "$mode" --dims 8,64 --batches 1000 --inflight 8 "${extra[@]}" "$@"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=""
done
