#!/usr/bin/env bash
# train_bench: cpu-trainer throughput, local vs parameter-server mode (1 and 2 trainers,
# 2 pservers), with the dense compute's share of the worker time. Prints a markdown
# table for docs/BENCHMARKS.md.
#   bench/train_bench/run.sh [rows (default 200000)] [epochs (default 1)]
# FLEETPS_SYNC_MODE (async | sync | geo, default async) and FLEETPS_THREADS (worker
# threads per trainer, default 1) choose the PS mode and the Hogwild workers; FLEETPS_CONFIG
# another job YAML (default configs/ctr_dnn.yaml); FLEETPS_PRECISION (fp32 | bf16, default the
# YAML's) its fleetps.dense.precision, in a copy of it. FLEETPS_SETUPS: the setups to run
# (default "local ps_1trainer ps_2trainers"). FLEETPS_DATA: a fleetps-datagen output directory
# to train on instead of generating one.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${BUILD:-build}"
ROWS="${1:-200000}"
EPOCHS="${2:-1}"
CONFIG="${FLEETPS_CONFIG:-configs/ctr_dnn.yaml}"
OUT="$BUILD/train_bench"
DATA="${FLEETPS_DATA:-$OUT/data_$ROWS}"
BASE_PORT="${FLEETPS_BENCH_PORT:-18800}"
MODE="${FLEETPS_SYNC_MODE:-async}"
THREADS="${FLEETPS_THREADS:-1}"
mkdir -p "$OUT"
if [ -n "${FLEETPS_PRECISION:-}" ]; then
  sed -e '/^  dense: /d' -e "s/^fleetps:\$/fleetps:\n  dense: {precision: $FLEETPS_PRECISION}/" "$CONFIG" \
    >"$OUT/job_$FLEETPS_PRECISION.yaml"
  grep -q "precision: $FLEETPS_PRECISION" "$OUT/job_$FLEETPS_PRECISION.yaml" || { echo "no fleetps: section in $CONFIG" >&2; exit 1; }
  CONFIG="$OUT/job_$FLEETPS_PRECISION.yaml"
fi
if [ ! -f "$DATA/data.yaml" ]; then
  "$BUILD/tools/datagen/fleetps-datagen" --out-dir "$DATA" --rows "$ROWS" --train-files 2 --seed 7 >/dev/null
fi

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# run NAME TRAINERS: local when TRAINERS=0.
run() {
  local name=$1 trainers=$2
  rm -f "$OUT/$name".*.json
  if [ "$trainers" = 0 ]; then
    "$BUILD/trainer/cpu-trainer" --config "$CONFIG" --train-data "$DATA/train" --test-data "$DATA/test" \
      --epochs "$EPOCHS" --threads "$THREADS" --log-level warn --report "$OUT/$name.0.json"
    return
  fi
  local eps="127.0.0.1:$BASE_PORT,127.0.0.1:$((BASE_PORT + 1))"
  pids=()
  for i in 0 1; do
    TRAINING_ROLE=PSERVER PADDLE_PSERVERS_IP_PORT_LIST="$eps" POD_IP=127.0.0.1 PADDLE_PORT=$((BASE_PORT + i)) \
      "$BUILD/server/pserver" --config "$CONFIG" --log-level warn &
    pids+=($!)
  done
  local tp=()
  for ((t = 0; t < trainers; t++)); do
    TRAINING_ROLE=TRAINER PADDLE_PSERVERS_IP_PORT_LIST="$eps" PADDLE_TRAINERS_NUM=$trainers PADDLE_TRAINER_ID=$t \
      "$BUILD/trainer/cpu-trainer" --config "$CONFIG" --train-data "$DATA/train" --test-data "$DATA/test" \
      --epochs "$EPOCHS" --threads "$THREADS" --sync-mode "$MODE" --log-level warn --report "$OUT/$name.$t.json" &
    tp+=($!)
  done
  for p in "${tp[@]}"; do wait "$p"; done
  for p in "${pids[@]}"; do wait "$p"; done
  pids=()
}

SETUPS="${FLEETPS_SETUPS:-local ps_1trainer ps_2trainers}"
for setup in $SETUPS; do
  case "$setup" in
    local) run local 0 ;;
    ps_1trainer) run ps_1trainer 1 ;;
    ps_2trainers) run ps_2trainers 2 ;;
    *) echo "unknown setup '$setup' (use local, ps_1trainer, ps_2trainers)" >&2; exit 2 ;;
  esac
done

python3 - "$OUT" "$ROWS" "$(nproc)" "$MODE" "$THREADS" "$CONFIG" "$SETUPS" <<'PY'
import glob, json, os, sys
out, rows, cores, mode, threads, config, setups = sys.argv[1:8]
print(f"train_bench: {config}, {rows} generated rows, "
      f"batch 512, {threads} worker thread(s) per trainer, {cores} cores, {mode} mode for PS")
print()
print("| setup | trainers | examples/s (all trainers) | examples/s per trainer | dense compute share | test AUC |")
print("|---|---|---|---|---|---|")
for name, label in [("local", "local (in-process tables)"), ("ps_1trainer", "PS, 2 pservers"),
                    ("ps_2trainers", "PS, 2 pservers")]:
    if name not in setups.split():
        continue
    reports = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(out, name + ".*.json")))]
    total = sum(r["epochs"][-1]["examples_per_sec"] for r in reports)
    dense = sum(r["epochs"][-1]["dense_compute_sec"] for r in reports)
    wall = sum(r["epochs"][-1]["seconds"] * r["threads"] for r in reports)
    auc = reports[0]["test"]["auc"] if reports[0]["test"] else float("nan")
    print(f"| {label} | {len(reports)} | {total:.0f} | {total / len(reports):.0f} | {dense / wall:.0%} | {auc:.4f} |")
PY
