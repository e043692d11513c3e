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

. scripts/lib/local_cluster.sh
cluster_setup "pserver cpu-trainer heter-trainer fleetps-datagen"
cluster_data
cluster_start_pservers
heters=""
for ((i = 0; i < HETERS; i++)); do heters+="${heters:+,}127.0.0.1:$((BASE_PORT + 50 + i))"; done

echo "== starting $HETERS heter-trainer(s) on $HETER_DEVICE_TYPE: $heters"
heter_pids=()
for ((i = 0; i < HETERS; i++)); do
  TRAINING_ROLE=HETER_TRAINER PADDLE_PSERVERS_IP_PORT_LIST="$PSERVER_LIST" PADDLE_TRAINERS_NUM="$TRAINERS" \
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
  TRAINING_ROLE=TRAINER PADDLE_PSERVERS_IP_PORT_LIST="$PSERVER_LIST" PADDLE_TRAINERS_NUM="$TRAINERS" \
    PADDLE_TRAINER_ID=$i PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST="$heters" PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST="$heters" \
    STAGE_ID=1 STAGE_NUM=2 PADDLE_STAGE_TRAINERS_NUM="[$TRAINERS, $HETERS]" \
    "$BUILD/trainer/cpu-trainer" --config "$CONFIG" --train-data "$TRAIN_DATA" \
    --test-data "$TEST_DATA" --report "$OUT/trainer$i.json" "${extra[@]}" 2>&1 | tee "$OUT/trainer$i.log" | \
    sed -u "s/^/[trainer $i] /" &
  trainer_pids+=($!)
  pids+=($!)
done

cluster_finish "${trainer_pids[@]}" "${heter_pids[@]}" "${server_pids[@]}"
grep -h "micro-batches trained" "$OUT"/heter*.log | sed 's/^/== /' || true
echo "== done: every process exited 0"
