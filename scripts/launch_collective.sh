#!/usr/bin/env bash
# Starts one process per rank of a collective (data-parallel) job on this machine, as
# `python -m paddle.distributed.launch` does — a thin caller of fleetps-launch
# (--run_mode collective):
#
#   scripts/launch_collective.sh [--nproc N | --gpus 0,1] [--log_dir logs] [--start_port P] \
#       BINARY [ARGS...]
#   e.g. scripts/launch_collective.sh --nproc 2 build/trainer/cpu-trainer --config configs/mlp.yaml
#
# Each rank gets PADDLE_TRAINER_ID, PADDLE_TRAINERS_NUM, PADDLE_TRAINER_ENDPOINTS,
# PADDLE_CURRENT_ENDPOINT (and FLAGS_selected_gpus with --gpus) and writes
# LOG_DIR/workerlog.N; rank 0's output is also streamed here. When a rank fails, the
# others are stopped and the launcher exits non-zero after printing the failing log's
# tail. No rank outlives the launcher. PADDLE_PSERVERS_IP_PORT_LIST, when set, is passed
# on (the hybrid). FLEETPS_LAUNCH: the fleetps-launch to use (default: the build tree's).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
LAUNCH="${FLEETPS_LAUNCH:-$here/${BUILD:-build}/tools/launch/fleetps-launch}"
args=(--run_mode collective)
while [ $# -gt 0 ]; do
  case "$1" in
    --nproc) args+=(--nproc_per_node "$2"); shift 2 ;;
    --nproc=*) args+=(--nproc_per_node "${1#*=}"); shift ;;
    --gpus | --log_dir | --start_port) args+=("$1" "$2"); shift 2 ;;
    --gpus=* | --log_dir=* | --start_port=*) args+=("$1"); shift ;;
    --) shift; break ;;
    -*) echo "launch_collective: unknown flag $1 (--nproc, --gpus, --log_dir, --start_port)" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "usage: launch_collective.sh [--nproc N | --gpus 0,1] [--log_dir DIR] [--start_port P] BINARY [ARGS...]" >&2
  exit 2
fi
if [ ! -x "$LAUNCH" ]; then
  echo "launch_collective: $LAUNCH is missing: build it (scripts/build.sh) or set FLEETPS_LAUNCH" >&2
  exit 2
fi
exec "$LAUNCH" "${args[@]}" "$@"
