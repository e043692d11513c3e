#!/usr/bin/env bash
# The network models of configs/ (xdeepfm, autoint on the plain generated data; din, dien on
# data with a click history) against ctr_dnn on the same data: test AUC and examples/s,
# local and async with 2 pservers + 2 trainers (train_bench's setups), and the data's
# Bayes-optimal test AUC. Prints a markdown table for docs/BENCHMARKS.md.
#   bench/train_bench/network_models.sh [rows (default 200000)]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${BUILD:-build}"
ROWS="${1:-200000}"
OUT="$BUILD/network_models"
mkdir -p "$OUT"
DATAGEN="$BUILD/tools/datagen/fleetps-datagen"
"$DATAGEN" --out-dir "$OUT/plain" --rows "$ROWS" --train-files 2 --seed 7 >"$OUT/plain.txt"
"$DATAGEN" --out-dir "$OUT/history" --rows "$ROWS" --train-files 2 --seed 7 --history-len 10 >"$OUT/history.txt"

run() {
  local model=$1 data=$2
  FLEETPS_DATA="$OUT/$data" FLEETPS_CONFIG="configs/$model.yaml" FLEETPS_SETUPS="local ps_2trainers" \
    bench/train_bench/run.sh "$ROWS" 1 >"$OUT/$model.$data.txt"
}
for pair in ctr_dnn:plain xdeepfm:plain autoint:plain ctr_dnn:history din:history dien:history; do
  run "${pair%%:*}" "${pair##*:}"
done

python3 - "$OUT" <<'PY'
import re, sys
out = sys.argv[1]
bayes = {d: re.search(r"bayes test auc: ([0-9.]+)", open(f"{out}/{d}.txt").read()).group(1) for d in ("plain", "history")}
print("| model | data (Bayes test AUC) | local examples/s | local test AUC | async 2+2 examples/s | async 2+2 test AUC |")
print("|---|---|---:|---:|---:|---:|")
for pair in ["ctr_dnn:plain", "xdeepfm:plain", "autoint:plain", "ctr_dnn:history", "din:history", "dien:history"]:
    model, data = pair.split(":")
    rows = [l for l in open(f"{out}/{model}.{data}.txt") if l.startswith("| local") or l.startswith("| PS")]
    cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
    local, ps = cells[0], cells[1]
    print(f"| {model} | {data} ({bayes[data]}) | {local[2]} | {local[5]} | {ps[2]} | {ps[5]} |")
PY
