#!/usr/bin/env bash
# The GPU checks, on a GPU machine that has CUDA but none of our Debian libraries (the
# device tool's machine). Build here, pack with scripts/device_bundle.sh, carry the bundle:
#   run(command="scripts/device_check.sh", carry=["build/device_bundle.tar.xz"], timeout_s=540)
# It unpacks the bundle, then runs each step with a time limit. $OUT (the folder the device
# tool brings back, at most 8 files; default ./device_out) gets two: summary.txt, a line per
# step, and logs.tar.gz, every step's STEP.log and its job's logs and reports, packed again
# after each step so that a run cut short still brings back what it did. The steps, the most
# wanted first:
#   libs                  every shared library the binaries load is found (a library that
#                         /usr/local/cuda lacks is looked for under /opt and /usr)
#   gpu                   nvidia-smi
#   heter_cuda_test       the CUDA dense device against the CPU twin (label gpu)
#   gpups_cuda_test       the CUDA pass table against the host twin (label gpu)
#   collective_nccl       one rank with backend nccl: the Gloo run's parameter checksums
#   heter_bench           dense step times per micro-batch against the GEMMs' roofline (one
#                         lane, on the device alone, 2 and 4 lanes at once) and the
#                         heter-trainer's capacity with 2 lanes
#   heter_capacity_lanes4 the capacity again with 4 lanes
#   gpups_bench           pass build, device-table lookup and update rates
#   gpups_bench_callers8  the rates with 8 threads calling the one device's table at once (as
#                         8 workers per device: lookups run at once, updates one at a time)
#   heter_nccl            a heter job (run_heter.sh, 100k rows) whose heter-trainer averages
#                         its dense replica over NCCL (dense_sync allreduce, backend nccl;
#                         world size 1); its workerlog says "(nccl: backend: nccl on GPU 0)"
#   gpubox_gpu            a GPU-PS job (run_gpubox.sh, 100k rows) on GPU 0: the CUDA pass
#                         table and lanes (one node: its workers sum in memory; NCCL joins
#                         nodes only, one rank each, which one GPU cannot host)
#   heter_cuda_sanitizer  heter_cuda_test's dense-device cases under compute-sanitizer (when
#                         installed)
#   gpups_cuda_sanitizer  gpups_cuda_test under compute-sanitizer
# FULL=1 adds the end-to-end benchmarks on this machine's cores (async PS vs heter vs
# GPU-PS): bench/heter_bench/run.sh ROWS TRAINERS 1 and bench/gpups_bench/run.sh ROWS 1, the
# latter again with GPUPS_WORKERS host workers on GPU 0 (ROWS default 1000000, TRAINERS
# default 8, GPUPS_WORKERS default 8); FULL=only runs just those, for a second call on the
# warm machine (one call may run 10 minutes at most). Every step runs even when one fails;
# SKIP="NAME ..." leaves steps out (those a cut-short call already ran, say); ONLY="NAME ..."
# runs just those (with FULL=1 for the end-to-end ones). gpups_sweep (FULL): the GPU-PS job
# alone on GPU 0 once per GPUPS_SWEEP entry (default "1 1-serial 8 16": workers per device;
# -serial: without the workers' prefetch helpers, fleetps.gpups.prefetch: false; :WAIT, as in
# 16:block, sets fleetps.gpups.cuda_wait: auto | spin | yield | block; default yield), with each run's
# breakdown of the workers' time and its steady state (the median and best examples/s of the
# progress lines, the pass left out). heter_wait (FULL): heter mode with TRAINERS cpu-trainers
# once per HETER_WAITS entry (default "auto yield", fleetps.heter.cuda_wait).
#   scripts/device_check.sh [BUNDLE (default build/device_bundle.tar.xz)]
set -uo pipefail
cd "$(dirname "$0")/.."
BUNDLE="${1:-build/device_bundle.tar.xz}"
OUT="${OUT:-$PWD/device_out}"
mkdir -p "$OUT"
B="$(mktemp -d)/build"
mkdir -p "$B"
tar -C "$B" -xJf "$BUNDLE" || { echo "device_check: cannot unpack $BUNDLE" >&2; exit 1; }
cuda=/usr/local/cuda
export LD_LIBRARY_PATH="$B/lib:$cuda/lib64:$cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$cuda/bin:$PATH"
export FLEETPS_TEST_BINARY_DIR="$B" FLEETPS_SKIP_SETUP=1
summary="$OUT/summary.txt"
: >"$summary"
LOGS="$(mktemp -d)/device_logs"
mkdir -p "$LOGS"
# Packs $LOGS (logs and reports: files under 4 MB, so no saved model) into $OUT/logs.tar.gz.
pack() {
  (cd "$LOGS" && find . -type f -size -4M -print0 | tar --null -czf "$OUT/logs.tar.gz.part" -T - &&
    mv "$OUT/logs.tar.gz.part" "$OUT/logs.tar.gz")
}
# step NAME LIMIT_S COMMAND...: output in $LOGS/NAME.log, exit code and seconds in the summary.
step() {
  local name=$1 limit=$2 start rc
  shift 2
  case " ${SKIP:-} " in *" $name "*) echo "$name: skipped (SKIP)" | tee -a "$summary"; return ;; esac
  if [ -n "${ONLY:-}" ]; then
    case " $ONLY " in *" $name "*) ;; *) return ;; esac
  fi
  start=$(date +%s)
  timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  echo "$name: exit $rc in $(($(date +%s) - start)) s" | tee -a "$summary"
  tail -n 4 "$LOGS/$name.log"
  pack
}
# The bundle leaves CUDA's libraries (and NCCL's, which live beside them here) to the
# machine. Where its /usr/local/cuda lacks one (NCCL may come only as a Python wheel there),
# take the first copy found under /opt or /usr.
missing_libs() {
  for b in "$B/heter_trainer/heter-trainer" "$B/test/heter_trainer/heter_cuda_test"; do ldd "$b"; done |
    awk '/not found/ {print $1}' | sort -u
}
for lib in $(missing_libs); do
  found="$(find /opt /usr -name "$lib" -print -quit 2>/dev/null)"
  [ -n "$found" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$found")"
done
ldd "$B/heter_trainer/heter-trainer" >"$LOGS/libs.log" 2>&1
m="$(missing_libs)"
echo "libs: ${m:+missing $m}${m:-all found} (LD_LIBRARY_PATH=$LD_LIBRARY_PATH)" | tee -a "$summary"
if [ "${FULL:-0}" != only ]; then
  step gpu 20 nvidia-smi
  step heter_cuda_test 120 "$B/test/heter_trainer/heter_cuda_test"
  step gpups_cuda_test 120 "$B/test/heter_trainer/gpups_cuda_test"
  step collective_nccl 120 "$B/test/e2e/collective_e2e_test" "One rank with backend nccl*"
  # The gpu tests pass with "skipped" where no device is usable (a driver older than the CUDA
  # runtime, say): here that is a failure, not a pass.
  for name in heter_cuda_test gpups_cuda_test collective_nccl; do
    if [ -f "$LOGS/$name.log" ] && grep -qE "skipped: no CUDA|NCCL run skipped" "$LOGS/$name.log"; then
      echo "$name: SKIPPED, no usable CUDA device (see gpu.log and $name.log)" | tee -a "$summary"
    fi
  done
  step heter_bench 180 "$B/bench/heter_bench/heter_bench" --config configs/ctr_dnn.yaml --device gpu
  # The heter-trainer's capacity again with 4 lanes.
  step heter_capacity_lanes4 60 "$B/bench/heter_bench/heter_bench" --config configs/ctr_dnn.yaml --device gpu \
    --skip-dense --lanes 4
  step gpups_bench 180 "$B/bench/gpups_bench/gpups_bench" --config configs/ctr_dnn.yaml --device gpu --devices 1
  step gpups_bench_callers8 120 "$B/bench/gpups_bench/gpups_bench" --config configs/ctr_dnn.yaml --device gpu \
    --devices 1 --callers 8 --keys 1000000
  # The NCCL paths of the heter dense allreduce and of GPU-PS, on small jobs.
  nccl_config="$(mktemp -d)/ctr_dnn_nccl.yaml"
  { cat configs/ctr_dnn.yaml; echo "  collective: {backend: nccl}"
    echo "  heter: {dense_sync: allreduce, allreduce_port: 19190}"; } >"$nccl_config"
  step heter_nccl 180 env BUILD="$B" FLEETPS_CONFIG="$nccl_config" FLEETPS_ROWS=100000 FLEETPS_EPOCHS=1 \
    FLEETPS_HETER_TRAINERS=1 HETER_DEVICE_TYPE=gpu FLAGS_selected_gpus=0 FLEETPS_OUT="$LOGS/heter_nccl" \
    scripts/run_heter.sh
  step gpubox_gpu 180 env BUILD="$B" FLEETPS_CONFIG="$nccl_config" FLEETPS_ROWS=100000 FLEETPS_EPOCHS=1 \
    HETER_DEVICE_TYPE=gpu FLAGS_selected_gpus=0 FLEETPS_OUT="$LOGS/gpubox_gpu" scripts/run_gpubox.sh
  # Last of the checks: the slowest, and a second look at what the gpu tests ran (the dense
  # device's cases, without NCCL's, and the pass table's kernels).
  if command -v compute-sanitizer >/dev/null; then
    step heter_cuda_sanitizer 240 compute-sanitizer --error-exitcode 1 "$B/test/heter_trainer/heter_cuda_test" "[cuda]"
    step gpups_cuda_sanitizer 180 compute-sanitizer --error-exitcode 1 "$B/test/heter_trainer/gpups_cuda_test"
  fi
fi
# keep_jobs STEP DIR: the jobs' logs and reports of a benchmark (DIR/MODE/*log*, *.json) into
# $LOGS/STEP, for where the time went.
keep_jobs() {
  local dest="$LOGS/$1" dir
  for dir in "$2"/*/; do
    mkdir -p "$dest/$(basename "$dir")"
    cp "$dir"/*log* "$dir"/*.json "$dest/$(basename "$dir")/" 2>/dev/null
  done
  pack
}
# The GPU-PS job alone (2 pservers, one node on GPU 0) with 1, 8, ... host workers per device.
gpups_sweep() {
  local data="$B/sweep_data" dir="$LOGS/gpups_sweep" entry w wait config prefetch
  mkdir -p "$dir"
  [ -f "$data/data.yaml" ] ||
    "$B/tools/datagen/fleetps-datagen" --out-dir "$data" --rows "${ROWS:-1000000}" --train-files 2 --seed 7 >/dev/null
  for entry in ${GPUPS_SWEEP:-1 1-serial 8 16}; do
    w="${entry/:/-}"
    wait=
    [ "${entry#*:}" = "$entry" ] || wait=", cuda_wait: ${entry#*:}"
    entry="${entry%%:*}"
    config="$dir/ctr_dnn_w$w.yaml"
    prefetch=true
    [ "${entry%-serial}" = "$entry" ] || prefetch=false
    sed -e "s/passes_per_epoch: 1}/passes_per_epoch: 1, workers_per_device: ${entry%-serial}, prefetch: $prefetch$wait}/" \
      -e "s|^\(  model_save_path:\).*|\1 \"$B/sweep_model\"|" configs/ctr_dnn.yaml >"$config"
    env BUILD="$B" FLEETPS_EPOCHS=1 FLEETPS_TRAIN_DATA="$data/train" FLEETPS_TEST_DATA="$data/test" \
      FLEETPS_PSERVERS=2 FLEETPS_TRAINERS=1 FLEETPS_BASE_PORT=19600 FLEETPS_CONFIG="$config" HETER_DEVICE_TYPE="${SWEEP_DEVICE:-gpu}" \
      FLAGS_selected_gpus=0 FLEETPS_OUT="$dir/w$w" scripts/run_gpubox.sh >"$dir/w$w.log" 2>&1
    echo "workers $w: exit $?: $(grep -h "epoch 1 done" "$dir/w$w"/workerlog.* | sed 's/.*this trainer: //')"
    # The pass around the training: begin_pass's key collection, PullRows and build; end_pass.
    grep -h "begin_pass: \|end_pass: " "$dir/w$w"/workerlog.* | sed "s/.*pass 1: /workers $w: /"
    # Training alone: the progress lines' examples/s (each over print_interval steps), their
    # median and best, the pass's begin and end left out.
    grep -h " step [0-9]*: .* examples/s)" "$dir/w$w"/workerlog.* | sed 's/.* examples, \([0-9]*\) examples\/s).*/\1/' |
      sort -n | awk -v w="$w" '{v[NR] = $1} END {if (NR) printf "workers %s: steady state %d progress lines, median %d, best %d examples/s\n", w, NR, v[int((NR + 1) / 2)], v[NR]}'

  done
}
# Heter mode (2 pservers, TRAINERS cpu-trainers, one heter-trainer on GPU 0) once per
# HETER_WAITS entry (default "auto yield"): fleetps.heter.cuda_wait, how the heter-trainer's
# lanes wait for the GPU while the cpu-trainers share the cores. Prints the examples/s
# summed over the cpu-trainers and the test AUC.
heter_wait() {
  local data="$B/heter_wait_data" dir="$LOGS/heter_wait" wait config
  mkdir -p "$dir"
  [ -f "$data/data.yaml" ] || "$B/tools/datagen/fleetps-datagen" --out-dir "$data" --rows "${ROWS:-1000000}" \
    --train-files "${TRAINERS:-8}" --seed 7 >/dev/null
  for wait in ${HETER_WAITS:-auto yield}; do
    config="$dir/ctr_dnn_$wait.yaml"
    { sed "s|^\(  model_save_path:\).*|\1 \"$B/heter_wait_model\"|" configs/ctr_dnn.yaml
      echo "  heter: {cuda_wait: $wait}"; } >"$config"
    env BUILD="$B" FLEETPS_EPOCHS=1 FLEETPS_TRAIN_DATA="$data/train" FLEETPS_TEST_DATA="$data/test" \
      FLEETPS_TRAINERS="${TRAINERS:-8}" FLEETPS_HETER_TRAINERS=1 FLEETPS_BASE_PORT=19700 FLEETPS_CONFIG="$config" \
      HETER_DEVICE_TYPE="${SWEEP_DEVICE:-gpu}" FLAGS_selected_gpus=0 FLEETPS_OUT="$dir/$wait" scripts/run_heter.sh >"$dir/$wait.log" 2>&1
    echo "cuda_wait $wait: exit $?: $(grep -h "epoch 1 done" "$dir/$wait"/workerlog.* |
      sed 's/.* = \([0-9]*\) examples\/s.*/\1/' | awk '{s += $1} END {printf "%d examples/s over %d cpu-trainers", s, NR}'),\
 test $(grep -h "test: auc" "$dir/$wait"/workerlog.0 | sed 's/.*test: \(auc [0-9.]*\).*/\1/')"
  done
}
export B LOGS
export -f gpups_sweep heter_wait
if [ "${FULL:-0}" != 0 ]; then
  step gpups_sweep 280 bash -c gpups_sweep
  step heter_wait 280 bash -c heter_wait
  step heter_run 280 env BUILD="$B" bench/heter_bench/run.sh "${ROWS:-1000000}" "${TRAINERS:-8}" 1
  keep_jobs heter_run "$B/heter_bench"
  step gpups_run 280 env BUILD="$B" bench/gpups_bench/run.sh "${ROWS:-1000000}" 1
  keep_jobs gpups_run "$B/gpups_bench"
  # The GPU fed by several host workers (fleetps.gpups.workers_per_device).
  step gpups_run_workers 280 env BUILD="$B" GPUPS_WORKERS="${GPUPS_WORKERS:-8}" FLAGS_selected_gpus=0 \
    bench/gpups_bench/run.sh "${ROWS:-1000000}" 1
  keep_jobs gpups_run_workers "$B/gpups_bench"
fi
pack
echo "device_check: $summary and $OUT/logs.tar.gz"
