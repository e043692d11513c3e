#!/usr/bin/env bash
# The heterogeneous main job on one machine: installs what is missing, builds, generates a
# CTR data set (unless one is given), starts 2 pservers, 1 heter-trainer (on the GPU when
# one is visible, else on the CPU) and 2 cpu-trainers on loopback with Paddle's heter-PS
# environment, trains ctr_dnn (the cpu-trainers read data, pull and pool embeddings; the
# heter-trainer runs the dense part), evaluates on the held-out split, saves the model,
# and exits with every process stopped (one fleetps-launch command).
#
#   scripts/run_heter.sh
#   HETER_DEVICE_TYPE=cpu scripts/run_heter.sh         # force the CPU device
# Variables: as scripts/run_local.sh (FLEETPS_CONFIG, FLEETPS_TRAIN_DATA, FLEETPS_TEST_DATA,
# FLEETPS_ROWS, FLEETPS_PSERVERS, FLEETPS_TRAINERS, FLEETPS_EPOCHS, FLEETPS_BASE_PORT,
# FLEETPS_OUT, FLEETPS_SKIP_SETUP), plus FLEETPS_HETER_TRAINERS (default 1), HETER_DEVICE_TYPE (gpu|cpu;
# default: gpu when a GPU is visible), FLAGS_selected_gpus (default 0), FLEETPS_HETER_MAX_RESTARTS
# (default 0: fleetps-launch --heter_max_restarts; with fleetps.heter.failover in the YAML).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
CONFIG="${FLEETPS_CONFIG:-configs/ctr_dnn.yaml}"
PSERVERS="${FLEETPS_PSERVERS:-2}"
TRAINERS="${FLEETPS_TRAINERS:-2}"
HETERS="${FLEETPS_HETER_TRAINERS:-1}"
BASE_PORT="${FLEETPS_BASE_PORT:-18600}"
OUT="${FLEETPS_OUT:-$BUILD/heter_run}"

. scripts/lib/local_cluster.sh
HETER_DEVICE_TYPE="${HETER_DEVICE_TYPE:-$(default_device_type)}"
cluster_setup "pserver cpu-trainer heter-trainer fleetps-datagen fleetps-launch"
cluster_data

echo "== $HETERS heter-trainer(s) on $HETER_DEVICE_TYPE"
extra=()
if [ -n "${FLEETPS_EPOCHS:-}" ]; then extra+=(--epochs "$FLEETPS_EPOCHS"); fi
gpus=()
if [ "$HETER_DEVICE_TYPE" = gpu ]; then gpus=(--gpus "${FLAGS_selected_gpus:-0}"); fi
cluster_launch --server_num "$PSERVERS" --worker_num "$TRAINERS" --heter_worker_num "$HETERS" \
  --heter_devices "$HETER_DEVICE_TYPE" --heter_max_restarts "${FLEETPS_HETER_MAX_RESTARTS:-0}" "${gpus[@]}" \
  -- "${extra[@]}"
grep -h "micro-batches trained" "$OUT"/heterlog.* | sed 's/^/== /' || true
echo "== done: every process exited 0"
