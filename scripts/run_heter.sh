#!/usr/bin/env bash
# The heterogeneous main job on one machine: installs what is missing, builds, generates a
# CTR data set (unless one is given), starts 2 pservers, 1 heter-trainer (on the GPU when
# one is visible, else on the CPU) and 2 cpu-trainers on loopback with Paddle's heter-PS
# environment, trains ctr_dnn (the cpu-trainers read data, pull and pool embeddings; the
# heter-trainer runs the dense part), evaluates on the held-out split, saves the model,
# and exits with every process stopped.
#
#   scripts/run_heter.sh
#   HETER_DEVICE_TYPE=cpu scripts/run_heter.sh         # force the CPU device
# Variables: as scripts/run_local.sh (FLEETPS_CONFIG, FLEETPS_TRAIN_DATA, FLEETPS_TEST_DATA,
# FLEETPS_ROWS, FLEETPS_PSERVERS, FLEETPS_TRAINERS, FLEETPS_EPOCHS, FLEETPS_BASE_PORT,
# FLEETPS_OUT, FLEETPS_SKIP_SETUP), plus FLEETPS_HETER_TRAINERS (default 1), HETER_DEVICE_TYPE (gpu|cpu;
# default: gpu when nvidia-smi sees one), FLAGS_selected_gpus (default 0).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD="${BUILD:-build}"
CONFIG="${FLEETPS_CONFIG:-configs/ctr_dnn.yaml}"
PSERVERS="${FLEETPS_PSERVERS:-2}"
TRAINERS="${FLEETPS_TRAINERS:-2}"
HETERS="${FLEETPS_HETER_TRAINERS:-1}"
BASE_PORT="${FLEETPS_BASE_PORT:-18600}"
OUT="${FLEETPS_OUT:-$BUILD/heter_run}"
if [ -z "${HETER_DEVICE_TYPE:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
    HETER_DEVICE_TYPE=gpu
  else
    HETER_DEVICE_TYPE=cpu
  fi
fi

if [ -z "${FLEETPS_SKIP_SETUP:-}" ]; then
  scripts/install_deps.sh
  FLEETPS_TARGETS="pserver cpu-trainer heter-trainer fleetps-datagen" BUILD="$BUILD" scripts/build.sh
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
pservers=""
for ((i = 0; i < PSERVERS; i++)); do pservers+="${pservers:+,}127.0.0.1:$((BASE_PORT + i))"; done
heters=""
for ((i = 0; i < HETERS; i++)); do heters+="${heters:+,}127.0.0.1:$((BASE_PORT + 50 + i))"; done
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

echo "== starting $PSERVERS pservers: $pservers"
for ((i = 0; i < PSERVERS; i++)); do
  TRAINING_ROLE=PSERVER PADDLE_PSERVERS_IP_PORT_LIST="$pservers" POD_IP=127.0.0.1 PADDLE_PORT=$((BASE_PORT + i)) \
    "$BUILD/server/pserver" --config "$CONFIG" >"$OUT/pserver$i.log" 2>&1 &
  pids+=($!)
done
server_pids=("${pids[@]}")

echo "== starting $HETERS heter-trainer(s) on $HETER_DEVICE_TYPE: $heters"
heter_pids=()
for ((i = 0; i < HETERS; i++)); do
  TRAINING_ROLE=HETER_TRAINER PADDLE_PSERVERS_IP_PORT_LIST="$pservers" PADDLE_TRAINERS_NUM="$TRAINERS" \
    PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST="$heters" POD_IP=127.0.0.1 PADDLE_PORT=$((BASE_PORT + 50 + i)) \
    STAGE_ID=2 STAGE_NUM=2 PADDLE_STAGE_TRAINERS_NUM="[$TRAINERS, $HETERS]" HETER_DEVICE_TYPE="$HETER_DEVICE_TYPE" \
    FLAGS_selected_gpus="${FLAGS_selected_gpus:-0}" \
    "$BUILD/heter_trainer/heter-trainer" --config "$CONFIG" >"$OUT/heter$i.log" 2>&1 &
  heter_pids+=($!)
  pids+=($!)
done

echo "== starting $TRAINERS cpu-trainers (logs in $OUT)"
trainer_pids=()
extra=()
if [ -n "${FLEETPS_EPOCHS:-}" ]; then extra+=(--epochs "$FLEETPS_EPOCHS"); fi
for ((i = 0; i < TRAINERS; i++)); do
  TRAINING_ROLE=TRAINER PADDLE_PSERVERS_IP_PORT_LIST="$pservers" PADDLE_TRAINERS_NUM="$TRAINERS" \
    PADDLE_TRAINER_ID=$i PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST="$heters" PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST="$heters" \
    STAGE_ID=1 STAGE_NUM=2 PADDLE_STAGE_TRAINERS_NUM="[$TRAINERS, $HETERS]" \
    "$BUILD/trainer/cpu-trainer" --config "$CONFIG" --train-data "$TRAIN_DATA" \
    --test-data "$TEST_DATA" --report "$OUT/trainer$i.json" "${extra[@]}" 2>&1 | tee "$OUT/trainer$i.log" | \
    sed -u "s/^/[trainer $i] /" &
  trainer_pids+=($!)
  pids+=($!)
done

status=0
for p in "${trainer_pids[@]}"; do wait "$p" || status=1; done
for p in "${heter_pids[@]}" "${server_pids[@]}"; do wait "$p" || status=1; done
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
grep -h "micro-batches trained" "$OUT"/heter*.log | sed 's/^/== /' || true
echo "== done: every process exited 0"
