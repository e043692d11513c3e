#!/usr/bin/env bash
# heter_bench end to end: the same job and data trained in async PS mode (2 pservers +
# N cpu-trainers, scripts/run_local.sh) and in heter mode (2 pservers + N cpu-trainers +
# H heter-trainers, scripts/run_heter.sh; the device is HETER_DEVICE_TYPE's, default gpu
# when one is visible; once with the dense part through the pservers and once kept as
# replicas averaged among the heter-trainers, fleetps.heter.dense_sync: allreduce), then the
# heter_bench program (dense device step times, heter-trainer capacity), and the host CPU per
# example of each role (what bounds heter mode's speed-up over async PS on the same cores).
# Prints markdown tables.
#   bench/heter_bench/run.sh [rows (default 500000)] [cpu-trainers (default 2)] [epochs (default 1)]
#                            [heter-trainers H (default 1)]
# Every process runs on this machine: on a small machine the roles share its cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${BUILD:-build}"
ROWS="${1:-500000}"
TRAINERS="${2:-2}"
EPOCHS="${3:-1}"
HETERS="${4:-1}"
OUT="$BUILD/heter_bench"
DATA="$(realpath -m "$OUT/data_${ROWS}_${TRAINERS}")"  # absolute: the jobs run elsewhere
mkdir -p "$OUT"
if [ ! -f "$DATA/data.yaml" ]; then
  "$BUILD/tools/datagen/fleetps-datagen" --out-dir "$DATA" --rows "$ROWS" --train-files "$TRAINERS" --seed 7 >/dev/null
fi
common=(FLEETPS_SKIP_SETUP=1 FLEETPS_TRAINERS="$TRAINERS" FLEETPS_EPOCHS="$EPOCHS" FLEETPS_TRAIN_DATA="$DATA/train"
        FLEETPS_TEST_DATA="$DATA/test" FLEETPS_BASE_PORT=19100)
env "${common[@]}" FLEETPS_SYNC_MODE=async FLEETPS_OUT="$OUT/async" scripts/run_local.sh >"$OUT/async.log" 2>&1
env "${common[@]}" FLEETPS_HETER_TRAINERS="$HETERS" FLEETPS_OUT="$OUT/heter" scripts/run_heter.sh >"$OUT/heter.log" 2>&1
# The same job with the heter-trainers' dense part kept as replicas, averaged among them
# (with one heter-trainer: its own replica, no dense traffic to the pservers until the end).
# (model_save_path relative to the copy's folder)
{ sed 's|^\(  model_save_path:\).*|\1 "allreduce_model"|' configs/ctr_dnn.yaml
  echo "  heter: {dense_sync: allreduce, allreduce_port: 19190}"; } >"$OUT/ctr_dnn_allreduce.yaml"
env "${common[@]}" FLEETPS_HETER_TRAINERS="$HETERS" FLEETPS_CONFIG="$OUT/ctr_dnn_allreduce.yaml" \
  FLEETPS_OUT="$OUT/heter_allreduce" scripts/run_heter.sh >"$OUT/heter_allreduce.log" 2>&1
modes="async heter heter_allreduce"
device=$(grep -ho "dense part of model [a-z_]* ([0-9]* parameters) on [^,]*" "$OUT"/heter/heterlog.0 | head -1 | sed 's/.* on //')

python3 - "$OUT" "$TRAINERS" "$ROWS" "$EPOCHS" "$device" "$HETERS" "$modes" <<'PY'
import json, sys
out, trainers, rows, epochs, device, heters, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7].split()
print(f"ctr_dnn, {rows} generated rows, {epochs} epoch(s), 2 pservers + {trainers} cpu-trainers (+ {heters} heter-trainer(s))")
print()
print("| mode | examples/s (all cpu-trainers, last epoch) | test AUC | test log loss |")
print("|---|---|---|---|")
base = None
labels = {"async": "async PS", "heter": f"heter ({device}; dense via the pservers)",
          "heter_allreduce": f"heter ({device}; dense allreduce among heter-trainers)"}
for mode in modes:
    label = labels[mode]
    reports = [json.load(open(f"{out}/{mode}/trainer{i}.json")) for i in range(trainers)]
    rate = sum(r["epochs"][-1]["examples_per_sec"] for r in reports)
    base = base or rate
    t = reports[0]["test"]
    print(f"| {label} | {rate:.0f} ({rate / base:.2f}x) | {t['auc']:.4f} | {t['loss']:.4f} |")

# Host CPU per trained example, by role: the pservers' and heter-trainers' whole-process CPU
# (fleetps-launch's report: start-up and the model save included), the cpu-trainers' CPU
# during their training epochs (the reports' cpu_seconds: evaluation and start-up excluded).
def role_seconds(mode):
    for line in open(f"{out}/{mode}.log"):
        if "CPU seconds by role:" in line:
            parts = line.split("CPU seconds by role:")[1].strip().split(";")
            return {p.strip().rsplit(" ", 1)[0]: float(p.strip().rsplit(" ", 1)[1]) for p in parts if p.strip()}
    sys.exit(f"{out}/{mode}.log has no 'CPU seconds by role' line from fleetps-launch")
print()
print("| mode | pservers us/example | cpu-trainers us/example (training) | heter-trainers us/example | all roles us/example |")
print("|---|---|---|---|---|")
cost = {}
for mode in modes:
    reports = [json.load(open(f"{out}/{mode}/trainer{i}.json")) for i in range(trainers)]
    examples = sum(e["examples"] for r in reports for e in r["epochs"])
    roles = role_seconds(mode)
    server = roles.get("server", 0) / examples * 1e6
    worker = sum(e["cpu_seconds"] for r in reports for e in r["epochs"]) / examples * 1e6
    heter = roles.get("heter worker", 0) / examples * 1e6
    cost[mode] = (server, worker, heter)
    print(f"| {labels[mode]} | {server:.1f} | {worker:.1f} | {heter:.1f} | {server + worker + heter:.1f} |")
a = sum(cost["async"])
print()
for mode in modes[1:]:
    h = cost[mode][0] + cost[mode][1]
    print(f"{labels[mode]}: the host work outside the heter-trainers (pservers + cpu-trainers) costs {h:.1f} us per "
          f"example, async PS {a:.1f}: on the same cores, with a dense device that needed no host CPU, it could train "
          f"at most {a / h:.2f}x async PS's examples/s.")
PY
echo
"$BUILD/bench/heter_bench/heter_bench" --config configs/ctr_dnn.yaml --device "$(echo "$device" | cut -c1-3)"
