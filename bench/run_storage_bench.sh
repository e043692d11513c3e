#!/usr/bin/env bash
# Storage benchmark: one pserver, one dim-8 Adam table of KEYS rows (default 10M), first
# with every row in RAM, then under a 200 MB memory budget (about 90% of the rows on
# RocksDB). For each: fill time, pull/push throughput (uniform random keys), save and load
# speed, and the pserver's resident memory (VmRSS now, VmHWM peak) after each phase.
#   [KEYS=10000000] [CELL_SECONDS=5] [BATCHES=1000,100000] [BUILD=build] bench/run_storage_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
KEYS="${KEYS:-10000000}"
CELL_SECONDS="${CELL_SECONDS:-5}"
BATCHES="${BATCHES:-1000,100000}"
PORT="${FLEETPS_BENCH_PORT:-18700}"
WORK="${WORK:-$(mktemp -d /tmp/fleetps-storage-bench.XXXXXX)}"
PSERVER="$BUILD/server/pserver"
BENCH="$BUILD/bench/ps_bench/ps_bench"

pid=""
cleanup() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi; }
trap 'cleanup; rm -rf "$WORK"' EXIT
rss() { grep -E '^(VmRSS|VmHWM)' "/proc/$pid/status" | awk '{printf "%s %.0f MiB  ", $1, $2/1024}'; echo; }

echo "== machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, keys: $KEYS, work dir: $WORK"
for mode in memory tiered; do
  config=bench/ps_bench/pserver_storage.yaml
  extra=()
  if [ "$mode" = tiered ]; then
    config=bench/ps_bench/pserver_storage_tiered.yaml
    extra=(--data-dir "$WORK/data")
  fi
  "$PSERVER" --config "$config" --endpoints "127.0.0.1:$PORT" --index 0 --log-level warn \
    --checkpoint-root "$WORK" "${extra[@]}" &
  pid=$!
  sleep 0.5
  echo "== $mode: pserver pid $pid, $(rss)"
  "$BENCH" --servers "127.0.0.1:$PORT" --dims 8 --keys "$KEYS" --fill-only --label "$mode"
  echo "== $mode: after fill: $(rss)"
  "$BENCH" --servers "127.0.0.1:$PORT" --dims 8 --keys "$KEYS" --batches "$BATCHES" --inflight 8 \
    --seconds "$CELL_SECONDS" --label "$mode" --save-dir "$WORK/ckpt-$mode" --skip-fill --fresh-keys
  echo "== $mode: after pulls, pushes, save and load: $(rss)"
  du -sh "$WORK/ckpt-$mode" | sed 's/^/== checkpoint size: /'
  [ "$mode" = tiered ] && du -sh "$WORK/data" | sed 's/^/== RocksDB tier size: /'
  cleanup
  pid=""
  rm -rf "$WORK/ckpt-$mode" "$WORK/data"
done
