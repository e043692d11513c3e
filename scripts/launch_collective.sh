#!/usr/bin/env bash
# Starts one process per rank of a collective (data-parallel) job on this machine, as
# `python -m paddle.distributed.launch` does:
#
#   scripts/launch_collective.sh [--nproc N | --gpus 0,1] [--log_dir logs] [--start_port P] \
#       BINARY [ARGS...]
#   e.g. scripts/launch_collective.sh --nproc 2 build/trainer/cpu-trainer --config configs/mlp.yaml
#
# Each rank gets PADDLE_TRAINER_ID, PADDLE_TRAINERS_NUM, PADDLE_TRAINER_ENDPOINTS,
# PADDLE_CURRENT_ENDPOINT (and FLAGS_selected_gpus with --gpus) and writes
# LOG_DIR/workerlog.N; rank 0's output is also streamed here. When a rank fails, the
# others are stopped and the launcher exits non-zero after printing the failing log's
# tail. No rank outlives the launcher.
set -euo pipefail
NPROC=""
GPUS=""
LOG_DIR="log"
START_PORT="${FLAGS_START_PORT:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --nproc) NPROC="$2"; shift 2 ;;
    --nproc=*) NPROC="${1#*=}"; shift ;;
    --gpus) GPUS="$2"; shift 2 ;;
    --gpus=*) GPUS="${1#*=}"; shift ;;
    --log_dir) LOG_DIR="$2"; shift 2 ;;
    --log_dir=*) LOG_DIR="${1#*=}"; shift ;;
    --start_port) START_PORT="$2"; shift 2 ;;
    --start_port=*) START_PORT="${1#*=}"; shift ;;
    --) shift; break ;;
    -*) echo "launch_collective: unknown flag $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "usage: launch_collective.sh [--nproc N | --gpus 0,1] [--log_dir DIR] [--start_port P] BINARY [ARGS...]" >&2
  exit 2
fi
IFS=',' read -r -a gpu_list <<<"$GPUS"
if [ -n "$GPUS" ]; then NPROC=${#gpu_list[@]}; fi
NPROC="${NPROC:-1}"
if ! [[ "$NPROC" =~ ^[1-9][0-9]*$ ]]; then echo "launch_collective: --nproc must be >= 1" >&2; exit 2; fi

# Free ports: FLAGS_START_PORT / --start_port upwards, else whatever the system hands out.
ports=()
if [ -n "$START_PORT" ]; then
  for ((i = 0; i < NPROC; i++)); do ports+=($((START_PORT + i))); done
else
  read -r -a ports <<<"$(python3 -c "
import socket
socks = [socket.socket() for _ in range($NPROC)]
for s in socks: s.bind(('127.0.0.1', 0))
print(' '.join(str(s.getsockname()[1]) for s in socks))")"
fi
endpoints=""
for p in "${ports[@]}"; do endpoints+="${endpoints:+,}127.0.0.1:$p"; done

mkdir -p "$LOG_DIR"
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop_all EXIT INT TERM
for ((i = 0; i < NPROC; i++)); do
  env_vars=(PADDLE_TRAINER_ID=$i PADDLE_TRAINERS_NUM=$NPROC PADDLE_TRAINER_ENDPOINTS="$endpoints"
            PADDLE_CURRENT_ENDPOINT="127.0.0.1:${ports[$i]}" TRAINING_ROLE=TRAINER)
  if [ -n "$GPUS" ]; then env_vars+=(FLAGS_selected_gpus="${gpu_list[$i]}"); fi
  env "${env_vars[@]}" "$@" >"$LOG_DIR/workerlog.$i" 2>&1 &
  pids+=($!)
done
tail -n +1 -f "$LOG_DIR/workerlog.0" --pid "${pids[0]}" &
tailer=$!

# Wait for every rank; the first failure stops the rest.
status=0
live=("${pids[@]}")
while [ ${#live[@]} -gt 0 ]; do
  set +e
  wait -n -p done_pid "${live[@]}"
  rc=$?
  set -e
  rest=()
  for p in "${live[@]}"; do [ "$p" != "$done_pid" ] && rest+=("$p"); done
  live=("${rest[@]}")
  if [ $rc -ne 0 ]; then
    # The others may be failing too (a rank's death breaks theirs): name every rank that
    # has ended with an error, the one reaped first included.
    sleep 0.2
    failures=("$done_pid:$rc")
    for p in "${live[@]}"; do
      # Ended: gone (bash reaped it and keeps its status for `wait`) or a zombie.
      if ! kill -0 "$p" 2>/dev/null || [ "$(ps -o stat= -p "$p" 2>/dev/null | cut -c1)" = Z ]; then
        set +e
        wait "$p"
        prc=$?
        set -e
        if [ $prc -ne 0 ]; then failures+=("$p:$prc"); fi
      fi
    done
    for f in "${failures[@]}"; do
      fpid=${f%%:*}
      frc=${f##*:}
      for ((i = 0; i < NPROC; i++)); do
        if [ "${pids[$i]}" = "$fpid" ]; then
          echo "launch_collective: rank $i exited with code $frc. Tail of $LOG_DIR/workerlog.$i:" >&2
          tail -n 20 "$LOG_DIR/workerlog.$i" >&2 || true
        fi
      done
    done
    echo "launch_collective: stopping the other ranks" >&2
    status=$rc
    break
  fi
done
kill "$tailer" 2>/dev/null || true
exit $status
