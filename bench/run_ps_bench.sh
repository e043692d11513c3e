#!/usr/bin/env bash
# Runs bench/ps_bench against 1 and then 2 local pservers, after measuring the loopback
# TCP bandwidth with iperf3 in the same run; prints markdown tables for
# docs/BENCHMARKS.md. Also runs the in-process table benchmark.
#   bench/run_ps_bench.sh [extra ps_bench flags, e.g. --seconds 1]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
PSERVER="$BUILD/server/pserver"
BENCH="$BUILD/bench/ps_bench/ps_bench"
CONFIG=bench/ps_bench/pserver_bench.yaml
BASE_PORT="${FLEETPS_BENCH_PORT:-18600}"

echo "== machine: $(nproc) cores, $(uname -r)"
wire_mbps=0
if command -v iperf3 >/dev/null; then
  iperf3 -s -1 -p $((BASE_PORT + 50)) >/dev/null 2>&1 &
  sleep 0.5
  bps=$(iperf3 -c 127.0.0.1 -p $((BASE_PORT + 50)) -t 3 -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"])')
  wire_mbps=$(python3 -c "print(round($bps / 8 / 1e6, 1))")
  echo "== loopback TCP (iperf3, 1 stream, 3 s): ${wire_mbps} MB/s"
fi

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

for n in 1 2; do
  eps=""
  for ((i = 0; i < n; i++)); do eps+="${eps:+,}127.0.0.1:$((BASE_PORT + i))"; done
  pids=()
  for ((i = 0; i < n; i++)); do
    "$PSERVER" --config "$CONFIG" --endpoints "$eps" --index "$i" --log-level warn &
    pids+=($!)
  done
  echo "== ps_bench, $n server(s): $eps"
  "$BENCH" --servers "$eps" --wire-mbps "$wire_mbps" --label "$n server(s)" "$@"
  cleanup
done

if [ -x "$BUILD/bench/table_bench/table_bench" ]; then
  echo "== in-process table benchmark"
  "$BUILD/bench/table_bench/table_bench"
fi
