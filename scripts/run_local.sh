#!/usr/bin/env bash
# The main job on one machine: installs what is missing, builds, generates a CTR data set
# (unless one is given), starts 2 pservers and 2 cpu-trainers on loopback, trains ctr_dnn,
# evaluates on the held-out split, saves the model, and exits with every process stopped.
#
#   scripts/run_local.sh
#   FLEETPS_CONFIG=my_job.yaml FLEETPS_TRAIN_DATA=/data/train FLEETPS_TEST_DATA=/data/test \
#     scripts/run_local.sh                      # your own YAML and data
# Variables: FLEETPS_CONFIG (default configs/ctr_dnn.yaml), FLEETPS_TRAIN_DATA /
# FLEETPS_TEST_DATA (default: generated into build/local_data), FLEETPS_ROWS (generated
# rows, default 200000), FLEETPS_PSERVERS / FLEETPS_TRAINERS (default 2 / 2),
# FLEETPS_SYNC_MODE (async|sync|geo|collective; default: the YAML's; collective = the hybrid:
# sparse on the pservers, dense replicas kept equal by allreduce among the trainers), FLEETPS_EPOCHS (default: the YAML's),
# FLEETPS_BASE_PORT (default 18500),
# FLEETPS_OUT (logs and reports, default build/local_run), FLEETPS_SKIP_SETUP (set: no
# install or build step).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD="${BUILD:-build}"
CONFIG="${FLEETPS_CONFIG:-configs/ctr_dnn.yaml}"
PSERVERS="${FLEETPS_PSERVERS:-2}"
TRAINERS="${FLEETPS_TRAINERS:-2}"
BASE_PORT="${FLEETPS_BASE_PORT:-18500}"
OUT="${FLEETPS_OUT:-$BUILD/local_run}"

if [ -z "${FLEETPS_SKIP_SETUP:-}" ]; then  # set: use the binaries already built in $BUILD
  scripts/install_deps.sh
  FLEETPS_TARGETS="pserver cpu-trainer fleetps-datagen" BUILD="$BUILD" scripts/build.sh
fi

TRAIN_DATA="${FLEETPS_TRAIN_DATA:-}"
TEST_DATA="${FLEETPS_TEST_DATA:-}"
if [ -z "$TRAIN_DATA" ]; then
  DATA_DIR="$BUILD/local_data_${FLEETPS_ROWS:-200000}_${TRAINERS}"
  if [ ! -f "$DATA_DIR/data.yaml" ]; then
    echo "== generating ${FLEETPS_ROWS:-200000} rows into $DATA_DIR"
    "$BUILD/tools/datagen/fleetps-datagen" --out-dir "$DATA_DIR" --rows "${FLEETPS_ROWS:-200000}" \
      --train-files "$TRAINERS" --seed 7
  fi
  TRAIN_DATA="$ROOT/$DATA_DIR/train"
  TEST_DATA="$ROOT/$DATA_DIR/test"
fi

mkdir -p "$OUT"
endpoints=""
for ((i = 0; i < PSERVERS; i++)); do endpoints+="${endpoints:+,}127.0.0.1:$((BASE_PORT + i))"; done
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

echo "== starting $PSERVERS pservers: $endpoints"
for ((i = 0; i < PSERVERS; i++)); do
  TRAINING_ROLE=PSERVER PADDLE_PSERVERS_IP_PORT_LIST="$endpoints" POD_IP=127.0.0.1 PADDLE_PORT=$((BASE_PORT + i)) \
    "$BUILD/server/pserver" --config "$CONFIG" >"$OUT/pserver$i.log" 2>&1 &
  pids+=($!)
done
server_pids=("${pids[@]}")

echo "== starting $TRAINERS cpu-trainers (logs in $OUT)"
trainer_pids=()
extra=()
if [ -n "${FLEETPS_SYNC_MODE:-}" ]; then extra+=(--sync-mode "$FLEETPS_SYNC_MODE"); fi
if [ -n "${FLEETPS_EPOCHS:-}" ]; then extra+=(--epochs "$FLEETPS_EPOCHS"); fi
trainer_endpoints=""
if [ "${FLEETPS_SYNC_MODE:-}" = collective ]; then
  for ((i = 0; i < TRAINERS; i++)); do trainer_endpoints+="${trainer_endpoints:+,}127.0.0.1:$((BASE_PORT + 100 + i))"; done
fi
for ((i = 0; i < TRAINERS; i++)); do
  TRAINING_ROLE=TRAINER PADDLE_PSERVERS_IP_PORT_LIST="$endpoints" PADDLE_TRAINERS_NUM="$TRAINERS" \
    PADDLE_TRAINER_ID=$i PADDLE_TRAINER_ENDPOINTS="$trainer_endpoints" "$BUILD/trainer/cpu-trainer" --config "$CONFIG" --train-data "$TRAIN_DATA" \
    --test-data "$TEST_DATA" --report "$OUT/trainer$i.json" "${extra[@]}" 2>&1 | tee "$OUT/trainer$i.log" | \
    sed -u "s/^/[trainer $i] /" &
  trainer_pids+=($!)
  pids+=($!)
done

status=0
for p in "${trainer_pids[@]}"; do wait "$p" || status=1; done
for p in "${server_pids[@]}"; do wait "$p" || status=1; done
pids=()
if [ $status -ne 0 ]; then
  echo "== FAILED: a process exited non-zero; see $OUT/*.log" >&2
  exit 1
fi
python3 - "$OUT/trainer0.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for e in r["epochs"]:
    print(f"epoch {e['epoch']}: train auc {e['auc']:.4f} loss {e['loss']:.4f}, "
          f"trainer 0 {e['examples_per_sec']:.0f} examples/s")
if r["test"]:
    print(f"test: auc {r['test']['auc']:.4f} loss {r['test']['loss']:.4f} ({r['test']['examples']} examples on trainer 0)")
PY
echo "== done: every process exited 0"
