#!/usr/bin/env bash
# fleetps against its anchor, PaddlePaddle's own CPU parameter server, on the same data, model
# and machine: 2 pservers + N trainers of each, async, one worker thread per trainer, every
# process on this machine. The runs: fleetps with the YAML's CTR accessor and with plain rows;
# Paddle with its defaults and with its trainers pulling the dense parameters after every
# send; then one process of each (the check that the two programs train the same model: the
# same AUC). Where the CPU has bf16 units (AVX512-BF16, AMX), fleetps also runs with
# fleetps.dense.precision bf16.
#   bench/paddle_anchor/run.sh [rows (default 500000)] [trainers (default 2)] [epochs (default 1)]
# Needs a fleetps build (BUILD, default build) and the Python package registry once: it makes a
# virtual environment with PaddlePaddle 2.6.2 (PADDLE_VENV, default $BUILD/paddle_venv). The
# pins: protobuf 4.25 (Paddle 2.6 reads FieldDescriptor.label, which protobuf 5 removed, and its
# strategy printer needs protobuf's upb backend, which 3.20 lacks on Python 3.11) and numpy < 2
# (Paddle 2.6's ABI). Prints a markdown table.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${BUILD:-build}"
ROWS="${1:-500000}"
TRAINERS="${2:-2}"
EPOCHS="${3:-1}"
OUT="$BUILD/paddle_anchor"
VENV="${PADDLE_VENV:-$BUILD/paddle_venv}"
DATA="$(realpath -m "$OUT/data_${ROWS}_${TRAINERS}")"  # absolute: the jobs run elsewhere
HERE=bench/paddle_anchor
mkdir -p "$OUT"
rm -f "$OUT/fleetps_local.json" "$OUT/paddle_local.json"  # a failed run must not report an old figure
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "paddlepaddle==2.6.2" "protobuf==4.25.8" "numpy<2"
fi
if [ ! -f "$DATA/data.yaml" ]; then
  "$BUILD/tools/datagen/fleetps-datagen" --out-dir "$DATA" --rows "$ROWS" --train-files "$TRAINERS" --seed 7 >/dev/null
fi
parts=("$DATA"/train/*)
[ "${#parts[@]}" -eq "$TRAINERS" ] || { echo "paddle_anchor: $DATA/train has ${#parts[@]} files, not $TRAINERS" >&2; exit 1; }
for i in "${!parts[@]}"; do
  [ -f "$DATA/multislot.$i" ] || python3 "$HERE/to_multislot.py" "${parts[$i]}" "$DATA/multislot.$i"
done
[ -f "$DATA/multislot.all" ] || cat "$DATA"/multislot.[0-9]* >"$DATA/multislot.all"

# fleetps: async PS with the YAML's CTR accessor, and with plain rows as Paddle's SparseAccessor keeps them.
sed '/^    accessor:/d; /^    # Paddle.s CtrCommonAccessor/,/^    # has been shown/d' configs/ctr_dnn.yaml |
  sed 's|^  model_save_path:.*|  model_save_path: "plain_model"|' >"$OUT/ctr_dnn_plain.yaml"
common=(FLEETPS_SKIP_SETUP=1 FLEETPS_TRAINERS="$TRAINERS" FLEETPS_EPOCHS="$EPOCHS" FLEETPS_TRAIN_DATA="$DATA/train"
        FLEETPS_TEST_DATA="$DATA/test" FLEETPS_BASE_PORT=19400 FLEETPS_SYNC_MODE=async)
env "${common[@]}" FLEETPS_OUT="$OUT/fleetps" scripts/run_local.sh >"$OUT/fleetps.log" 2>&1
env "${common[@]}" FLEETPS_CONFIG="$OUT/ctr_dnn_plain.yaml" FLEETPS_OUT="$OUT/fleetps_plain" scripts/run_local.sh \
  >"$OUT/fleetps_plain.log" 2>&1
# fleetps with bf16 dense products (fleetps.dense.precision), where the CPU has bf16 units.
BF16=0
if grep -qw -e avx512_bf16 -e amx_bf16 /proc/cpuinfo; then
  BF16=1
  sed 's/^  dense: {precision: fp32}/  dense: {precision: bf16}/' configs/ctr_dnn.yaml >"$OUT/ctr_dnn_bf16.yaml"
  grep -q "precision: bf16" "$OUT/ctr_dnn_bf16.yaml"
  env "${common[@]}" FLEETPS_CONFIG="$OUT/ctr_dnn_bf16.yaml" FLEETPS_OUT="$OUT/fleetps_bf16" scripts/run_local.sh \
    >"$OUT/fleetps_bf16.log" 2>&1
fi

# fleetps in one process, as Paddle's --local run below (model saved beside the plain YAML).
env -u TRAINING_ROLE -u PADDLE_PSERVERS_IP_PORT_LIST "$BUILD/trainer/cpu-trainer" --config "$OUT/ctr_dnn_plain.yaml" \
  --train-data "$DATA/train" --test-data "$DATA/test" --epochs "$EPOCHS" --report "$OUT/fleetps_local.json" \
  >"$OUT/fleetps_local.log" 2>&1

# Paddle: its environment contract, 2 pservers + N trainers. Each process runs in the run's
# folder, where Paddle writes its *_train_desc.prototxt files.
PY="$(cd "$VENV" && pwd)/bin/python"
PROGRAM="$PWD/$HERE/ctr_dnn_ps.py"
# run_paddle DIR [VAR=VALUE...]: one run, its logs and reports in $OUT/DIR, the variables
# exported to every process.
run_paddle() {
  local dir="$OUT/$1" servers=() trainers=() i pid port
  shift
  rm -rf "$dir" && mkdir -p "$dir"
  [ $# -eq 0 ] || export "$@"
  # Pservers left from an interrupted run would serve these trainers their trained tables.
  for port in 19480 19481; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "paddle_anchor: port $port is in use (a pserver of an interrupted run? pkill -f ctr_dnn_ps.py)" >&2
      exit 1
    fi
  done
  local endpoints="127.0.0.1:19480,127.0.0.1:19481"
  export PADDLE_PSERVERS_IP_PORT_LIST="$endpoints" PADDLE_TRAINERS_NUM="$TRAINERS" POD_IP=127.0.0.1 \
    OMP_NUM_THREADS=1 CPU_NUM=1 GLOG_v=0
  for i in 0 1; do
    (cd "$dir" && TRAINING_ROLE=PSERVER PADDLE_PORT=$((19480 + i)) exec "$PY" "$PROGRAM" --train-file - \
      --report "pserver$i.json" >"serverlog.$i" 2>&1) &
    servers+=($!)
  done
  for ((i = 0; i < TRAINERS; i++)); do
    (cd "$dir" && TRAINING_ROLE=TRAINER PADDLE_TRAINER_ID=$i PADDLE_PORT=$((19490 + i)) exec "$PY" "$PROGRAM" \
      --train-file "$DATA/multislot.$i" --epochs "$EPOCHS" --report "trainer$i.json" >"workerlog.$i" 2>&1) &
    trainers+=($!)
  done
  for pid in "${trainers[@]}"; do wait "$pid" || true; done
  # Paddle's pservers serve until killed: their CPU time (utime + stime, clock ticks) first.
  : >"$dir/server_cpu"
  for pid in "${servers[@]}"; do
    echo "$(cut -d' ' -f14,15 "/proc/$pid/stat")" >>"$dir/server_cpu" || true
    kill "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
}
# Paddle's defaults; then its trainers pulling the dense parameters after every send, as
# fleetps's do (dense_pull_interval: 1): by default Paddle's receive thread refreshes them
# on its own schedule, and the trainers learn from stale dense layers.
run_paddle paddle
(run_paddle paddle_dense_recv FLAGS_communicator_independent_recv_thread=0 \
  FLAGS_communicator_min_send_grad_num_before_recv=1)
(cd "$OUT" && OMP_NUM_THREADS=1 CPU_NUM=1 GLOG_v=0 exec "$PY" "$PROGRAM" --local --train-file "$DATA/multislot.all" \
  --epochs "$EPOCHS" --report paddle_local.json >paddle_local.log 2>&1)

python3 - "$OUT" "$TRAINERS" "$ROWS" "$EPOCHS" "$(getconf CLK_TCK)" "$BF16" <<'PY'
import json, os, sys
out, trainers, rows, epochs, tck = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
bf16 = sys.argv[6] == "1"

def load(path):
    if not os.path.exists(path):
        sys.exit(f"{path} is missing: see the logs beside it")
    return json.load(open(path))

def fleetps_server_seconds(log):
    for line in open(log):
        if "CPU seconds by role:" in line:
            parts = line.split("CPU seconds by role:")[1].strip().split(";")
            return dict((p.strip().rsplit(" ", 1)[0], float(p.strip().rsplit(" ", 1)[1])) for p in parts if p.strip())["server"]
    sys.exit(f"{log} has no 'CPU seconds by role' line")

print(f"ctr_dnn, {rows} generated rows, {epochs} epoch(s), 2 pservers + {trainers} trainers, async, 1 worker thread each")
print()
print("| system | examples/s (all trainers, last epoch) | train AUC (progressive, last epoch) | pservers us/example | trainers us/example | all us/example |")
print("|---|---|---|---|---|---|")
rowsout = []
fleetps_runs = [("fleetps (CTR accessor, embedx_threshold 10)", "fleetps"), ("fleetps (plain rows)", "fleetps_plain")]
if bf16:
    fleetps_runs.append(("fleetps (CTR accessor), bf16 dense products", "fleetps_bf16"))
for label, d in fleetps_runs:
    reports = [load(f"{out}/{d}/trainer{i}.json") for i in range(trainers)]
    last = [r["epochs"][-1] for r in reports]
    examples = sum(e["examples"] for r in reports for e in r["epochs"])
    server = fleetps_server_seconds(f"{out}/{d}.log") / examples * 1e6
    worker = sum(e["cpu_seconds"] for r in reports for e in r["epochs"]) / examples * 1e6
    rowsout.append((label, sum(e["examples_per_sec"] for e in last), last[0]["auc"], server, worker))
for label, d in (("PaddlePaddle 2.6.2 Fleet PS (SparseAccessor), defaults", "paddle"),
                 ("PaddlePaddle 2.6.2 Fleet PS, dense pulled after every send", "paddle_dense_recv")):
    reports = [load(f"{out}/{d}/trainer{i}.json") for i in range(trainers)]
    last = [r["epochs"][-1] for r in reports]
    examples = sum(e["examples"] for r in reports for e in r["epochs"])
    ticks = sum(sum(int(x) for x in line.split()) for line in open(f"{out}/{d}/server_cpu") if line.strip())
    server = ticks / tck / examples * 1e6
    worker = sum(e["cpu_seconds"] for r in reports for e in r["epochs"]) / examples * 1e6
    auc = " / ".join(f"{e['auc']:.4f}" for e in last)
    rowsout.append((label, sum(e["examples_per_sec"] for e in last), auc, server, worker))
base = rowsout[-2][1]  # Paddle's defaults
for label, rate, auc, server, worker in rowsout:
    auc = auc if isinstance(auc, str) else f"{auc:.4f}"
    print(f"| {label} | {rate:.0f} ({rate / base:.2f}x) | {auc} | {server:.1f} | {worker:.1f} | {server + worker:.1f} |")
print()
print("One process, both training files, the same model (fleetps: plain rows; Paddle: a local table, lazy Adam):")
print()
print("| system | examples/s | train AUC (progressive) | CPU us/example |")
print("|---|---|---|---|")
for label, path in (("fleetps", "fleetps_local.json"), ("PaddlePaddle 2.6.2", "paddle_local.json")):
    e = load(f"{out}/{path}")["epochs"][-1]
    print(f"| {label} | {e['examples_per_sec']:.0f} | {e['auc']:.4f} | {e['cpu_seconds'] / e['examples'] * 1e6:.1f} |")
print()
print("fleetps's AUC is over all trainers' predictions; Paddle's per trainer (its auc op's statistics are local).")
PY
