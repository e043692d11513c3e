#!/usr/bin/env bash
# GPU-PS (PaddleRec "gpubox") job on one machine, as PaddleRec's tools/run_gpubox.sh, with
# one fleetps-launch command: the pservers (TRAINING_ROLE=PSERVER, PADDLE_PORT each) and one
# trainer process per node (TRAINING_ROLE=TRAINER, PADDLE_TRAINER_ID), a heter-trainer in
# GPU-PS pass mode driving the devices of FLAGS_selected_gpus. Every epoch is a pass: the
# pass's rows are pulled into a table sharded over the devices (begin_pass), trained there,
# and written back (end_pass). Then it evaluates on the held-out split, saves the model and
# stops every process. Logs: OUT/serverlog.N, OUT/workerlog.N; reports OUT/trainerN.json.
#
#   scripts/run_gpubox.sh                                   # GPUs when some are visible
#   HETER_DEVICE_TYPE=cpu FLAGS_selected_gpus=0,1 scripts/run_gpubox.sh   # host twin, 2 shards
# Variables: as scripts/run_local.sh (FLEETPS_CONFIG, FLEETPS_TRAIN_DATA, FLEETPS_TEST_DATA,
# FLEETPS_ROWS, FLEETPS_PSERVERS (default 1, as PaddleRec's), FLEETPS_TRAINERS (nodes,
# default 1), FLEETPS_EPOCHS, FLEETPS_BASE_PORT, FLEETPS_OUT, FLEETPS_SKIP_SETUP), plus
# HETER_DEVICE_TYPE (gpu|cpu; default gpu when a GPU is visible) and FLAGS_selected_gpus
# (default: every visible GPU, or 0,1 on the host twin), FLEETPS_GPUPS_MERGE (add|average:
# how end_pass combines rows several nodes trained; default the YAML's fleetps.gpups.merge),
# FLEETPS_READER_TYPE (default InMemoryDataset, as PaddleRec's gpubox configs: the data is
# parsed once, then each pass collects its keys and trains from memory; QueueDataset parses
# the files twice per pass).
# The job YAML's runner.sync_mode may say anything: the trainers run it as gpubox.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
CONFIG="${FLEETPS_CONFIG:-configs/ctr_dnn.yaml}"
PSERVERS="${FLEETPS_PSERVERS:-1}"
TRAINERS="${FLEETPS_TRAINERS:-1}"
BASE_PORT="${FLEETPS_BASE_PORT:-18700}"
OUT="${FLEETPS_OUT:-$BUILD/gpubox_run}"

. scripts/lib/local_cluster.sh
HETER_DEVICE_TYPE="${HETER_DEVICE_TYPE:-$(default_device_type)}"
if [ -z "${FLAGS_selected_gpus:-}" ]; then
  if [ "$HETER_DEVICE_TYPE" = gpu ]; then
    FLAGS_selected_gpus=$(visible_gpus)
  else
    FLAGS_selected_gpus=0,1
  fi
fi
cluster_setup "pserver heter-trainer fleetps-datagen fleetps-launch"
cluster_data

# The workers are heter-trainers in pass mode. Several nodes all-reduce their dense replicas
# over the workers' endpoints, one Gloo or NCCL rank per node.
workers=(--worker_num 1)
if [ "$TRAINERS" -gt 1 ]; then
  list=""
  for ((i = 0; i < TRAINERS; i++)); do list+="${list:+,}127.0.0.1:$((BASE_PORT + 100 + i))"; done
  workers=(--workers "$list")
fi
extra=()
if [ -n "${FLEETPS_EPOCHS:-}" ]; then extra+=(--epochs "$FLEETPS_EPOCHS"); fi
if [ -n "${FLEETPS_GPUPS_MERGE:-}" ]; then extra+=(--merge "$FLEETPS_GPUPS_MERGE"); fi
# The pass's data in memory, parsed once (PaddleRec's gpubox configs: InmemoryDataset).
extra+=(--reader-type "${FLEETPS_READER_TYPE:-InMemoryDataset}")
echo "== $TRAINERS GPU-PS trainer(s) on $HETER_DEVICE_TYPE devices $FLAGS_selected_gpus"
TRAINER_BIN="$BUILD/heter_trainer/heter-trainer"
cluster_launch --server_num "$PSERVERS" "${workers[@]}" -- --sync-mode gpubox --device "$HETER_DEVICE_TYPE" \
  --gpus "$FLAGS_selected_gpus" "${extra[@]}"
grep -h "end_pass" "$OUT"/workerlog.* | sed 's/^/== /' || true
echo "== done: every process exited 0"
