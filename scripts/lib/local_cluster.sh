# Shared by scripts/run_local.sh, run_heter.sh, run_gpubox.sh and bench/gpups_bench/run.sh
# (sourced, not run): the pieces of a job on loopback. The caller sets BUILD, CONFIG,
# TRAINERS, BASE_PORT and OUT, and TRAINER_BIN when the workers are not cpu-trainers
# (run_gpubox.sh: heter-trainer).

# The CUDA devices this machine gives the job, as FLAGS_selected_gpus lists them ("0,1,...";
# nothing without a GPU): as many as CUDA_VISIBLE_DEVICES names when it is set (nvidia-smi
# lists every GPU of the machine, whatever the process may see), else the GPUs nvidia-smi
# lists.
visible_gpus() {
  local n=0
  if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    n=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c . || true)
  elif command -v nvidia-smi >/dev/null 2>&1; then
    n=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c . || true)
  fi
  if [ "$n" -gt 0 ]; then seq -s, 0 $((n - 1)); fi
}

# HETER_DEVICE_TYPE's default: gpu when visible_gpus finds one, else cpu.
default_device_type() {
  if [ -n "$(visible_gpus)" ]; then echo gpu; else echo cpu; fi
}

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
    TRAIN_DATA="$(realpath -m "$dir/train")"
    TEST_DATA="$(realpath -m "$dir/test")"
  fi
}

# cluster_launch LAUNCH_FLAGS... -- TRAINER_FLAGS...: one fleetps-launch command runs the
# job (pservers, heter-trainers, the TRAINER_BIN workers; logs OUT/serverlog.N, heterlog.N,
# workerlog.N; reports OUT/trainerN.json; worker 0's output streamed), then trainer 0's
# report is summarised. Exits non-zero (the launcher printed the failing log's tail) when
# a process failed; the launcher leaves no process behind either way.
cluster_launch() {
  local launch_flags=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do launch_flags+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  mkdir -p "$OUT"
  echo "== fleetps-launch: logs in $OUT"
  if ! FLAGS_START_PORT="$BASE_PORT" "$BUILD/tools/launch/fleetps-launch" "${launch_flags[@]}" --log_dir "$OUT" \
      "${TRAINER_BIN:-$BUILD/trainer/cpu-trainer}" --config "$CONFIG" --train-data "$TRAIN_DATA" \
      --test-data "$TEST_DATA" \
      --report "$OUT/trainer{trainer_id}.json" "$@"; then
    echo "== FAILED: a process exited non-zero; see $OUT/*log.*" >&2
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
