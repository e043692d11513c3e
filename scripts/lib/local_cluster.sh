# Shared by scripts/run_local.sh and scripts/run_heter.sh (sourced, not run): the pieces of a
# job on loopback. The caller sets BUILD, CONFIG, PSERVERS, TRAINERS, BASE_PORT and OUT.

# Installs and builds TARGETS unless FLEETPS_SKIP_SETUP is set (then $BUILD's binaries are used).
cluster_setup() {
  if [ -z "${FLEETPS_SKIP_SETUP:-}" ]; then
    scripts/install_deps.sh
    FLEETPS_TARGETS="$1" BUILD="$BUILD" scripts/build.sh
  fi
}

# Sets TRAIN_DATA and TEST_DATA: FLEETPS_TRAIN_DATA / FLEETPS_TEST_DATA, else a generated
# data set of FLEETPS_ROWS rows (default 200000) in one file per trainer.
cluster_data() {
  TRAIN_DATA="${FLEETPS_TRAIN_DATA:-}"
  TEST_DATA="${FLEETPS_TEST_DATA:-}"
  if [ -z "$TRAIN_DATA" ]; then
    local rows="${FLEETPS_ROWS:-200000}"
    local dir="$BUILD/local_data_${rows}_${TRAINERS}"
    if [ ! -f "$dir/data.yaml" ]; then
      echo "== generating $rows rows into $dir"
      "$BUILD/tools/datagen/fleetps-datagen" --out-dir "$dir" --rows "$rows" --train-files "$TRAINERS" --seed 7
    fi
    TRAIN_DATA="$PWD/$dir/train"
    TEST_DATA="$PWD/$dir/test"
  fi
}

# Starts the pservers on BASE_PORT.. and sets PSERVER_LIST and server_pids; every process
# the caller adds to pids is stopped when the script exits.
pids=()
cluster_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cluster_cleanup EXIT
cluster_start_pservers() {
  mkdir -p "$OUT"
  PSERVER_LIST=""
  for ((i = 0; i < PSERVERS; i++)); do PSERVER_LIST+="${PSERVER_LIST:+,}127.0.0.1:$((BASE_PORT + i))"; done
  echo "== starting $PSERVERS pservers: $PSERVER_LIST"
  server_pids=()
  for ((i = 0; i < PSERVERS; i++)); do
    TRAINING_ROLE=PSERVER PADDLE_PSERVERS_IP_PORT_LIST="$PSERVER_LIST" POD_IP=127.0.0.1 PADDLE_PORT=$((BASE_PORT + i)) \
      "$BUILD/server/pserver" --config "$CONFIG" >"$OUT/pserver$i.log" 2>&1 &
    pids+=($!)
    server_pids+=($!)
  done
}

# Waits for every pid given, then prints trainer 0's report; exits 1 if any failed.
cluster_finish() {
  local status=0
  for p in "$@"; do wait "$p" || status=1; done
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
}
