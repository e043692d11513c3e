#!/usr/bin/env bash
# The main job on one machine: installs what is missing, builds, generates a CTR data set
# (unless one is given), and runs 2 pservers and 2 cpu-trainers on loopback with one
# fleetps-launch command: trains ctr_dnn, evaluates on the held-out split, saves the
# model, and exits with every process stopped.
#
#   scripts/run_local.sh
#   FLEETPS_CONFIG=my_job.yaml FLEETPS_TRAIN_DATA=/data/train FLEETPS_TEST_DATA=/data/test \
#     scripts/run_local.sh                      # your own YAML and data
# Variables: FLEETPS_CONFIG (default configs/ctr_dnn.yaml), FLEETPS_TRAIN_DATA /
# FLEETPS_TEST_DATA (default: generated into build/local_data), FLEETPS_ROWS (generated
# rows, default 200000), FLEETPS_PSERVERS / FLEETPS_TRAINERS (default 2 / 2),
# FLEETPS_SYNC_MODE (async|sync|geo|collective; default: the YAML's; collective = the hybrid:
# sparse on the pservers, dense replicas kept equal by allreduce among the trainers), FLEETPS_EPOCHS (default: the YAML's),
# FLEETPS_BASE_PORT (first port, default 18500),
# FLEETPS_OUT (logs and reports, default build/local_run: serverlog.N, workerlog.N,
# trainerN.json), FLEETPS_SKIP_SETUP (set: no install or build step).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
CONFIG="${FLEETPS_CONFIG:-configs/ctr_dnn.yaml}"
PSERVERS="${FLEETPS_PSERVERS:-2}"
TRAINERS="${FLEETPS_TRAINERS:-2}"
BASE_PORT="${FLEETPS_BASE_PORT:-18500}"
OUT="${FLEETPS_OUT:-$BUILD/local_run}"

. scripts/lib/local_cluster.sh
cluster_setup "pserver cpu-trainer fleetps-datagen fleetps-launch"
cluster_data

extra=()
if [ -n "${FLEETPS_SYNC_MODE:-}" ]; then extra+=(--sync-mode "$FLEETPS_SYNC_MODE"); fi
if [ -n "${FLEETPS_EPOCHS:-}" ]; then extra+=(--epochs "$FLEETPS_EPOCHS"); fi
cluster_launch --server_num "$PSERVERS" --worker_num "$TRAINERS" -- "${extra[@]}"
echo "== done: every process exited 0"
