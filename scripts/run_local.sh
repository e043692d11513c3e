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
BUILD="${BUILD:-build}"
CONFIG="${FLEETPS_CONFIG:-configs/ctr_dnn.yaml}"
PSERVERS="${FLEETPS_PSERVERS:-2}"
TRAINERS="${FLEETPS_TRAINERS:-2}"
BASE_PORT="${FLEETPS_BASE_PORT:-18500}"
OUT="${FLEETPS_OUT:-$BUILD/local_run}"

. scripts/lib/local_cluster.sh
cluster_setup "pserver cpu-trainer fleetps-datagen"
cluster_data
cluster_start_pservers

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
  TRAINING_ROLE=TRAINER PADDLE_PSERVERS_IP_PORT_LIST="$PSERVER_LIST" PADDLE_TRAINERS_NUM="$TRAINERS" \
    PADDLE_TRAINER_ID=$i PADDLE_TRAINER_ENDPOINTS="$trainer_endpoints" "$BUILD/trainer/cpu-trainer" --config "$CONFIG" --train-data "$TRAIN_DATA" \
    --test-data "$TEST_DATA" --report "$OUT/trainer$i.json" "${extra[@]}" 2>&1 | tee "$OUT/trainer$i.log" | \
    sed -u "s/^/[trainer $i] /" &
  trainer_pids+=($!)
  pids+=($!)
done

cluster_finish "${trainer_pids[@]}" "${server_pids[@]}"
echo "== done: every process exited 0"
