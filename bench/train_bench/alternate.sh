#!/usr/bin/env bash
# Two builds of cpu-trainer, run one after the other in rounds on the same data (local mode),
# to compare a change against what it replaces on a noisy machine:
#   bench/train_bench/alternate.sh BEFORE_BUILD AFTER_BUILD [config (configs/ctr_dnn.yaml)] [rounds (3)] [rows (200000)]
# Prints examples/s per round and the median ratio after / before.
set -euo pipefail
cd "$(dirname "$0")/../.."
BEFORE="$1"
AFTER="$2"
CONFIG="${3:-configs/ctr_dnn.yaml}"
ROUNDS="${4:-3}"
ROWS="${5:-200000}"
results=()
for ((r = 1; r <= ROUNDS; r++)); do
  for build in "$BEFORE" "$AFTER"; do
    BUILD="$build" FLEETPS_CONFIG="$CONFIG" FLEETPS_SETUPS=local bench/train_bench/run.sh "$ROWS" 1 >/dev/null
    eps=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['epochs'][-1]['examples_per_sec'])" \
      "$build/train_bench/local.0.json")
    echo "round $r $build: $eps examples/s"
    results+=("$eps")
  done
done
python3 - "${results[@]}" <<'PY'
import statistics, sys
v = [float(x) for x in sys.argv[1:]]
before, after = v[0::2], v[1::2]
ratios = [a / b for a, b in zip(after, before)]
print(f"median before {statistics.median(before):.0f}, after {statistics.median(after):.0f}, "
      f"after/before per round {', '.join(f'{r:.3f}' for r in ratios)}, median {statistics.median(ratios):.3f}")
PY
