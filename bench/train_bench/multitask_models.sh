#!/usr/bin/env bash
# The two-task models of configs/ (mmoe, esmm) on data with a click and a conversion label
# (fleetps-datagen --conversion), against ctr_dnn trained on each label alone: examples/s and
# each label's test AUC, local and async with 2 pservers + 2 trainers (train_bench's setups),
# and each label's Bayes-optimal test AUC. Prints a markdown table for docs/BENCHMARKS.md.
#   bench/train_bench/multitask_models.sh [rows (default 200000)]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${BUILD:-build}"
ROWS="${1:-200000}"
OUT="$BUILD/multitask_models"
mkdir -p "$OUT"
"$BUILD/tools/datagen/fleetps-datagen" --out-dir "$OUT/data" --rows "$ROWS" --train-files 2 --seed 7 --conversion \
  >"$OUT/data.txt"
# ctr_dnn on one label: the data's two labels named, the job's one kept.
for label in click conversion; do
  sed "s/^  data_format: rank_dnn .*/  data_format: rank_dnn\n  label_slot: $label/" configs/ctr_dnn.yaml \
    >"$OUT/ctr_dnn_$label.yaml"
  grep -q "label_slot: $label" "$OUT/ctr_dnn_$label.yaml" || { echo "no data_format line in configs/ctr_dnn.yaml" >&2; exit 1; }
done

JOBS="ctr_dnn_click:$OUT/ctr_dnn_click.yaml ctr_dnn_conversion:$OUT/ctr_dnn_conversion.yaml mmoe:configs/mmoe.yaml esmm:configs/esmm.yaml"
for job in $JOBS; do
  name="${job%%:*}"
  FLEETPS_DATA="$OUT/data" FLEETPS_CONFIG="${job#*:}" FLEETPS_SETUPS="local ps_2trainers" \
    bench/train_bench/run.sh "$ROWS" 1 >"$OUT/$name.txt"
  cp "$BUILD/train_bench/local.0.json" "$OUT/$name.local.json"
  cp "$BUILD/train_bench/ps_2trainers.0.json" "$OUT/$name.ps.json"
done

python3 - "$OUT" "$JOBS" <<'PY'
import json, re, sys
out, jobs = sys.argv[1], sys.argv[2].split()
data = open(f"{out}/data.txt").read()
bayes = {k: re.search(k + r": ([0-9.]+)", data).group(1) for k in ("bayes test auc", "bayes conversion test auc")}
print(f"Bayes-optimal test AUC: click {bayes['bayes test auc']}, conversion {bayes['bayes conversion test auc']}")
print()
print("| job | local examples/s | local AUC click | local AUC conversion | async 2+2 examples/s | async 2+2 AUC click | async 2+2 AUC conversion |")
print("|---|---:|---:|---:|---:|---:|---:|")
for job in jobs:
    name = job.split(":")[0]
    rows = [l for l in open(f"{out}/{name}.txt") if l.startswith("| local") or l.startswith("| PS")]
    rate = [[c.strip() for c in r.strip().strip("|").split("|")][2] for r in rows]
    cells = []
    for setup, r in (("local", rate[0]), ("ps", rate[1])):
        test = json.load(open(f"{out}/{name}.{setup}.json"))["test"]
        auc = {o["label"]: o["auc"] for o in test["outputs"]}
        cells += [r] + [f"{auc[l]:.4f}" if l in auc else "" for l in ("click", "conversion")]
    print(f"| {name} | " + " | ".join(cells) + " |")
PY
