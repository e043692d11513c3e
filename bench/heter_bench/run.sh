#!/usr/bin/env bash
# heter_bench end to end: the same job and data trained in async PS mode (2 pservers +
# N cpu-trainers, scripts/run_local.sh) and in heter mode (2 pservers + N cpu-trainers +
# 1 heter-trainer, scripts/run_heter.sh; the device is HETER_DEVICE_TYPE's, default gpu
# when one is visible), then the heter_bench program (dense device step times, heter-trainer
# capacity). Prints markdown tables.
#   bench/heter_bench/run.sh [rows (default 500000)] [cpu-trainers (default 2)] [epochs (default 1)]
# Every process runs on this machine: on a small machine the roles share its cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${BUILD:-build}"
ROWS="${1:-500000}"
TRAINERS="${2:-2}"
EPOCHS="${3:-1}"
OUT="$BUILD/heter_bench"
DATA="$OUT/data_${ROWS}_${TRAINERS}"
mkdir -p "$OUT"
if [ ! -f "$DATA/data.yaml" ]; then
  "$BUILD/tools/datagen/fleetps-datagen" --out-dir "$DATA" --rows "$ROWS" --train-files "$TRAINERS" --seed 7 >/dev/null
fi
common=(FLEETPS_TRAINERS="$TRAINERS" FLEETPS_EPOCHS="$EPOCHS" FLEETPS_TRAIN_DATA="$PWD/$DATA/train"
        FLEETPS_TEST_DATA="$PWD/$DATA/test" FLEETPS_BASE_PORT=19100)
env "${common[@]}" FLEETPS_SYNC_MODE=async FLEETPS_OUT="$OUT/async" scripts/run_local.sh >"$OUT/async.log" 2>&1
env "${common[@]}" FLEETPS_OUT="$OUT/heter" scripts/run_heter.sh >"$OUT/heter.log" 2>&1
device=$(grep -ho "dense part of model [a-z_]* ([0-9]* parameters) on [^,]*" "$OUT"/heter/heterlog.0 | head -1 | sed 's/.* on //')

python3 - "$OUT" "$TRAINERS" "$ROWS" "$EPOCHS" "$device" <<'PY'
import json, sys
out, trainers, rows, epochs, device = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
print(f"ctr_dnn, {rows} generated rows, {epochs} epoch(s), 2 pservers + {trainers} cpu-trainers (+ 1 heter-trainer)")
print()
print("| mode | examples/s (all cpu-trainers, last epoch) | test AUC | test log loss |")
print("|---|---|---|---|")
base = None
for mode, label in (("async", "async PS"), ("heter", f"heter ({device})")):
    reports = [json.load(open(f"{out}/{mode}/trainer{i}.json")) for i in range(trainers)]
    rate = sum(r["epochs"][-1]["examples_per_sec"] for r in reports)
    base = base or rate
    t = reports[0]["test"]
    print(f"| {label} | {rate:.0f} ({rate / base:.2f}x) | {t['auc']:.4f} | {t['loss']:.4f} |")
PY
echo
"$BUILD/bench/heter_bench/heter_bench" --config configs/ctr_dnn.yaml --device "$(echo "$device" | cut -c1-3)"
