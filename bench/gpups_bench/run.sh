#!/usr/bin/env bash
# gpups_bench end to end: the same job and data trained in async PS mode (2 pservers + 2
# cpu-trainers, scripts/run_local.sh), heter mode (2 pservers + 2 cpu-trainers + 1
# heter-trainer, scripts/run_heter.sh) and GPU-PS pass mode (2 pservers + 1 heter-trainer
# node over the devices of FLAGS_selected_gpus, scripts/run_gpubox.sh; the host twin with
# two shards unless a GPU is visible), then the gpups_bench program (pass build rate,
# device-table lookup/update rates against memory bandwidth). Prints markdown tables.
#   bench/gpups_bench/run.sh [rows (default 500000)] [epochs (default 1)]
#   GPUPS_WORKERS=k bench/gpups_bench/run.sh ...   GPU-PS with k host worker threads per device
#                                                  (fleetps.gpups.workers_per_device; default 1)
# Every process runs on this machine: on a small machine the roles share its cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${BUILD:-build}"
ROWS="${1:-500000}"
EPOCHS="${2:-1}"
OUT="$BUILD/gpups_bench"
DATA="$(realpath -m "$OUT/data_${ROWS}")"  # absolute: the jobs run elsewhere
mkdir -p "$OUT"
if [ ! -f "$DATA/data.yaml" ]; then
  "$BUILD/tools/datagen/fleetps-datagen" --out-dir "$DATA" --rows "$ROWS" --train-files 2 --seed 7 >/dev/null
fi
. scripts/lib/local_cluster.sh
export HETER_DEVICE_TYPE="${HETER_DEVICE_TYPE:-$(default_device_type)}"
common=(FLEETPS_SKIP_SETUP=1 FLEETPS_EPOCHS="$EPOCHS" FLEETPS_TRAIN_DATA="$DATA/train"
        FLEETPS_TEST_DATA="$DATA/test" FLEETPS_BASE_PORT=19400 FLEETPS_PSERVERS=2)
env "${common[@]}" FLEETPS_TRAINERS=2 FLEETPS_SYNC_MODE=async FLEETPS_OUT="$OUT/async" scripts/run_local.sh \
  >"$OUT/async.log" 2>&1
env "${common[@]}" FLEETPS_TRAINERS=2 FLEETPS_OUT="$OUT/heter" scripts/run_heter.sh >"$OUT/heter.log" 2>&1
gpubox_config=configs/ctr_dnn.yaml
if [ -n "${GPUPS_WORKERS:-}" ]; then
  # (model_save_path relative to the copy's folder)
  gpubox_config="$OUT/ctr_dnn_workers.yaml"
  sed -e "s/passes_per_epoch: 1}/passes_per_epoch: 1, workers_per_device: $GPUPS_WORKERS}/" \
    -e 's|^\(  model_save_path:\).*|\1 "gpubox_model"|' configs/ctr_dnn.yaml >"$gpubox_config"
  grep -q "workers_per_device: $GPUPS_WORKERS" "$gpubox_config"
fi
env "${common[@]}" FLEETPS_TRAINERS=1 FLEETPS_CONFIG="$gpubox_config" FLEETPS_OUT="$OUT/gpubox" scripts/run_gpubox.sh \
  >"$OUT/gpubox.log" 2>&1
devices=$(grep -ho "GPU-PS (gpubox) on [0-9]* [a-z]* device(s)" "$OUT"/gpubox/workerlog.0 | head -1 | sed 's/GPU-PS (gpubox) on //')
devices="$devices, $(grep -ho "[0-9]* worker(s) per device" "$OUT"/gpubox/workerlog.0 | head -1)"

python3 - "$OUT" "$ROWS" "$EPOCHS" "$devices" "$(nproc)" <<'PY'
import json, sys
out, rows, epochs, devices, cores = sys.argv[1:6]
print(f"ctr_dnn, {rows} generated rows, {epochs} epoch(s), 2 pservers, every process on this machine ({cores} cores)")
print()
print("| mode | trainer processes | examples/s (all trainers, last epoch) | test AUC |")
print("|---|---|---|---|")
base = None
for mode, label, procs, n in (("async", "async PS", "2 cpu-trainers", 2),
                              ("heter", "heter", "2 cpu-trainers + 1 heter-trainer", 2),
                              ("gpubox", "GPU-PS (gpubox)", f"1 heter-trainer node, {devices}", 1)):
    reports = [json.load(open(f"{out}/{mode}/trainer{i}.json")) for i in range(n)]
    rate = sum(r["epochs"][-1]["examples_per_sec"] for r in reports)
    base = base or rate
    print(f"| {label} | {procs} | {rate:.0f} ({rate / base:.2f}x) | {reports[0]['test']['auc']:.4f} |")
PY
echo
device=cpu
count=$(echo "${FLAGS_selected_gpus:-0,1}" | tr ',' '\n' | wc -l)
if [ "$HETER_DEVICE_TYPE" = gpu ]; then
  device=gpu
  count=$(echo "${FLAGS_selected_gpus:-$(visible_gpus)}" | tr ',' '\n' | wc -l)
fi
"$BUILD/bench/gpups_bench/gpups_bench" --config configs/ctr_dnn.yaml --device "$device" --devices "$count"
