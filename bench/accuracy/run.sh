#!/usr/bin/env bash
# Accuracy of distributed training against local training on the same generated data:
# test AUC of local (1 process), async, sync and GEO (2 pservers + 2 trainers each) and
# collective (the hybrid: 2 pservers + 2 ranks, dense by allreduce) and heter (2 pservers +
# 2 cpu-trainers + 1 heter-trainer, scripts/run_heter.sh; the heter
# device is HETER_DEVICE_TYPE's), gpubox (GPU-PS passes: 2 pservers + 1 heter-trainer node
# x 2 devices, scripts/run_gpubox.sh; the host twin unless HETER_DEVICE_TYPE=gpu) and
# gpubox-2nodes (the same with 2 nodes x 2 devices; gpubox-2nodes-average with
# fleetps.gpups.merge: average), next to the generator's Bayes-optimal AUC. Every mode reads
# with the config's runner.reader_type. Prints a markdown table.
#   bench/accuracy/run.sh [rows (default 500000)] [modes (default "local async sync geo")] [epochs]
#   GPUPS_PASSES=N bench/accuracy/run.sh ...   the gpubox modes with an InMemoryDataset and
#                                             fleetps.gpups.passes_per_epoch: N
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${BUILD:-build}"
ROWS="${1:-500000}"
MODES="${2:-local async sync geo}"
EPOCHS="${3:-}"
epoch_flags=()
if [ -n "$EPOCHS" ]; then epoch_flags=(--epochs "$EPOCHS"); fi
OUT="$BUILD/accuracy"
DATA="$(realpath -m "$OUT/data_$ROWS")"  # absolute: the jobs run elsewhere
CONFIG="${FLEETPS_CONFIG:-configs/ctr_dnn.yaml}"
mkdir -p "$OUT"
if [ ! -f "$DATA/datagen.txt" ]; then
  "$BUILD/tools/datagen/fleetps-datagen" --out-dir "$DATA" --rows "$ROWS" --train-files 2 --seed 7 >"$DATA.txt"
  mv "$DATA.txt" "$DATA/datagen.txt"
fi
bayes=$(awk '/bayes auc/ {print $3}' "$DATA/datagen.txt")

for mode in $MODES; do
  start=$(date +%s.%N)
  if [ "$mode" = local ]; then
    "$BUILD/trainer/cpu-trainer" --config "$CONFIG" --train-data "$DATA/train" --test-data "$DATA/test" \
      --log-level warn --report "$OUT/$mode.json" "${epoch_flags[@]}" || echo "{\"failed\": true}" >"$OUT/$mode.json"
  elif [ "$mode" = gpubox ] || [ "$mode" = gpubox-2nodes ] || [ "$mode" = gpubox-2nodes-average ]; then
    nodes=1
    merge=add
    if [ "$mode" != gpubox ]; then nodes=2; fi
    if [ "$mode" = gpubox-2nodes-average ]; then merge=average; fi
    gpubox_config="$CONFIG"
    # The config's reader, as the other modes read: run_gpubox.sh's own default is
    # InMemoryDataset, whose reshuffle before each epoch changes the test AUC from the second
    # epoch on (docs/BENCHMARKS.md, "The reader's order at two epochs").
    reader=$(awk '/^  reader_type:/ {gsub(/"/, "", $2); print $2}' "$CONFIG")
    if [ -n "${GPUPS_PASSES:-}" ]; then
      reader=InMemoryDataset
      gpubox_config="$OUT/gpubox_passes.yaml"
      sed -e 's/reader_type: QueueDataset/reader_type: InMemoryDataset/' \
        -e "s/passes_per_epoch: 1/passes_per_epoch: $GPUPS_PASSES/" "$CONFIG" >"$gpubox_config"
      grep -q "passes_per_epoch: $GPUPS_PASSES" "$gpubox_config"
    fi
    if FLEETPS_CONFIG="$gpubox_config" FLEETPS_EPOCHS="$EPOCHS" FLEETPS_TRAIN_DATA="$DATA/train" FLEETPS_TEST_DATA="$DATA/test" \
        FLEETPS_OUT="$OUT/$mode" FLEETPS_BASE_PORT=18900 FLEETPS_PSERVERS=2 FLEETPS_TRAINERS=$nodes FLEETPS_GPUPS_MERGE=$merge \
        HETER_DEVICE_TYPE="${HETER_DEVICE_TYPE:-cpu}" FLAGS_selected_gpus="${FLAGS_selected_gpus:-0,1}" \
        FLEETPS_READER_TYPE="${reader:-QueueDataset}" scripts/run_gpubox.sh >"$OUT/$mode.log" 2>&1; then
      cp "$OUT/$mode/trainer0.json" "$OUT/$mode.json"
    else
      echo "{\"failed\": true}" >"$OUT/$mode.json"
    fi
  elif [ "$mode" = heter ]; then
    if FLEETPS_EPOCHS="$EPOCHS" FLEETPS_TRAIN_DATA="$DATA/train" FLEETPS_TEST_DATA="$DATA/test" \
        FLEETPS_OUT="$OUT/$mode" FLEETPS_BASE_PORT=18900 scripts/run_heter.sh >"$OUT/$mode.log" 2>&1; then
      cp "$OUT/$mode/trainer0.json" "$OUT/$mode.json"
    else
      echo "{\"failed\": true}" >"$OUT/$mode.json"
    fi
  else
    if FLEETPS_SYNC_MODE=$mode FLEETPS_EPOCHS="$EPOCHS" FLEETPS_TRAIN_DATA="$DATA/train" FLEETPS_TEST_DATA="$DATA/test" \
        FLEETPS_OUT="$OUT/$mode" FLEETPS_BASE_PORT=18900 scripts/run_local.sh >"$OUT/$mode.log" 2>&1; then
      cp "$OUT/$mode/trainer0.json" "$OUT/$mode.json"
    else
      echo "{\"failed\": true}" >"$OUT/$mode.json"
    fi
  fi
  python3 -c "print($(date +%s.%N) - $start)" >"$OUT/$mode.seconds"
done

python3 - "$OUT" "$ROWS" "$bayes" "$MODES" "${EPOCHS:-yaml}" <<'PY'
import json, sys
out, rows, bayes, modes, epochs = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4].split(), sys.argv[5]
res = {m: json.load(open(f"{out}/{m}.json")) for m in modes}
local = res.get("local", {}).get("test", {}) or {}
print(f"accuracy: ctr_dnn on {rows} generated rows (90% train / 10% test), epochs: {epochs}, "
      f"Bayes-optimal test AUC {bayes:.4f}")
print()
print("| mode | processes | test AUC | vs local | test log loss | last-epoch train AUC | wall s |")
print("|---|---|---|---|---|---|---|")
for m in modes:
    r = res[m]
    secs = float(open(f"{out}/{m}.seconds").read())
    if r.get("failed"):
        print(f"| {m} | - | failed | - | - | - | {secs:.0f} |")
        continue
    t = r["test"]
    diff = t["auc"] - local["auc"] if local else float("nan")
    procs = {"local": "1 trainer", "heter": "2 pservers + 2 trainers + 1 heter"}.get(m, "2 pservers + 2 trainers")
    if m == "collective": procs = "2 pservers + 2 ranks (hybrid)"
    if m == "gpubox": procs = "2 pservers + 1 node x 2 devices"
    if m == "gpubox-2nodes": procs = "2 pservers + 2 nodes x 2 devices"
    if m == "gpubox-2nodes-average": procs = "2 pservers + 2 nodes x 2 devices, merge: average"
    print(f"| {m} | {procs} | {t['auc']:.4f} | {diff:+.4f} | {t['loss']:.4f} | {r['epochs'][-1]['auc']:.4f} | {secs:.0f} |")
PY
