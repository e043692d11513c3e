#!/usr/bin/env bash
# Builds the libFuzzer targets (test/fuzz, docs/FUZZING.md) with clang + ASan + UBSan into
# build-fuzz/ and runs each one for a fixed time, as many at once as there are CPUs
# (FLEETPS_FUZZ_PARALLEL), one libFuzzer process each.
#   scripts/fuzz.sh                       every target, 60 s each
#   scripts/fuzz.sh 20                    every target, 20 s each (scripts/test.sh)
#   scripts/fuzz.sh 180 ps_service_fuzz   one target for 3 minutes
# Environment: FLEETPS_FUZZ_BUILD (build dir, default build-fuzz), FLEETPS_FUZZ_CXX (the
# clang++; default clang++-16, Debian 12's newest, else clang++: fleetps needs clang >= 16
# for C++20 lambda captures of structured bindings), FLEETPS_JOBS (parallel compile jobs,
# default 2), FLEETPS_FUZZ_ARGS (extra libFuzzer flags), FLEETPS_FUZZ_EXTRA_FLAGS (extra
# compile flags, ;-separated, e.g. -fno-sanitize=alignment with FLEETPS_FUZZ_BUILD=build-fuzz-noalign),
# FLEETPS_FUZZ_BUILD_TESTS=ON (also build the unit and integration tests, target fleetps_checks,
# in the same sanitized tree: scripts/test.sh runs them there), FLEETPS_FUZZ_BUILD_ONLY=1 (build,
# do not run), FLEETPS_UNITY_BUILD=ON|OFF (unity build or not, as scripts/build.sh).
# Per target, under build-fuzz/fuzz/<target>/: seeds/ (written by the target itself),
# corpus/ (kept between runs and grown by them), findings/ (crash-*, timeout-*, oom-*
# inputs), last.log. The inputs of fixed findings, test/fuzz/regressions/<target>/, are
# run at the start of every run. Prints the executions of every target; exits 1 when any target found
# something (its input and stack are named), 0 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_EACH="${1:-60}"
shift || true
ALL_TARGETS=(frame_fuzz auth_fuzz config_fuzz data_format_fuzz checkpoint_fuzz ps_service_fuzz heter_service_fuzz
             http_fuzz rendezvous_fuzz)
if [ $# -gt 0 ]; then TARGETS=("$@"); else TARGETS=("${ALL_TARGETS[@]}"); fi
BUILD_DIR="${FLEETPS_FUZZ_BUILD:-build-fuzz}"
JOBS="${FLEETPS_JOBS:-2}"

CXX_FUZZ="${FLEETPS_FUZZ_CXX:-}"
if [ -z "$CXX_FUZZ" ]; then
  if command -v clang++-16 >/dev/null; then CXX_FUZZ=clang++-16; else CXX_FUZZ=clang++; fi
fi
if ! command -v "$CXX_FUZZ" >/dev/null; then
  echo "fuzz: $CXX_FUZZ not found (scripts/install_deps.sh installs clang-16 and libFuzzer)" >&2
  exit 1
fi
CC_FUZZ="${CXX_FUZZ/clang++/clang}"

echo "== fuzz build ($BUILD_DIR/: $CXX_FUZZ, libFuzzer, ASan + UBSan)"
cmake -S . -B "$BUILD_DIR" -G Ninja \
  -DCMAKE_C_COMPILER="$CC_FUZZ" -DCMAKE_CXX_COMPILER="$CXX_FUZZ" \
  -DFLEETPS_BUILD_FUZZ=ON -DFLEETPS_SANITIZE=ON -DFLEETPS_WITH_CUDA=OFF \
  -DFLEETPS_BUILD_TESTS="${FLEETPS_FUZZ_BUILD_TESTS:-OFF}" -DFLEETPS_BUILD_BENCH=OFF -DFLEETPS_BUILD_E2E=OFF \
  -DFLEETPS_FUZZ_EXTRA_FLAGS="${FLEETPS_FUZZ_EXTRA_FLAGS:-}" ${FLEETPS_UNITY_BUILD:+-DCMAKE_UNITY_BUILD="$FLEETPS_UNITY_BUILD"} >/dev/null
if [ "${FLEETPS_FUZZ_BUILD_TESTS:-OFF}" = "ON" ]; then
  ninja -C "$BUILD_DIR" -j "$JOBS" fleetps_checks "${TARGETS[@]}"
else
  ninja -C "$BUILD_DIR" -j "$JOBS" "${TARGETS[@]}"
fi
if [ "${FLEETPS_FUZZ_BUILD_ONLY:-0}" = "1" ]; then exit 0; fi

# Stacks name functions and lines: llvm-symbolizer when installed, else binutils' addr2line.
for s in llvm-symbolizer-16 llvm-symbolizer addr2line; do
  if command -v "$s" >/dev/null; then export ASAN_SYMBOLIZER_PATH="$(command -v "$s")"; break; fi
done
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:handle_abort=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# One target's run; its outcome goes to $dir/result (one summary line) and, on a finding,
# $dir/report (what to print). Targets run FLEETPS_FUZZ_PARALLEL at a time (default: the
# number of CPUs), each a single libFuzzer process.
run_target() {
  local t="$1" bin="$BUILD_DIR/test/fuzz/$1" dir="$BUILD_DIR/fuzz/$1" rc=0
  rm -rf "$dir/seeds" "$dir/result" "$dir/report"
  mkdir -p "$dir/corpus" "$dir/findings"
  if ! FLEETPS_FUZZ_SEEDS="$dir/seeds" "$bin" >/dev/null 2>"$dir/seeds.log"; then
    { cat "$dir/seeds.log"; echo "fuzz: $t could not write its seeds"; } >"$dir/report"
    printf '%-18s %12s execs  cov %6s  %s\n' "$t" "?" "?" "SEEDS FAILED" >"$dir/result"
    return
  fi
  echo "== $t: ${SECONDS_EACH} s ($(ls "$dir/seeds" | wc -l) seeds, $(ls "$dir/corpus" | wc -l) corpus inputs)"
  # Inputs of fixed findings (test/fuzz/regressions/<target>/) run at the start of every run.
  local inputs=("$dir/corpus" "$dir/seeds")
  if [ -d "test/fuzz/regressions/$t" ]; then inputs+=("test/fuzz/regressions/$t"); fi
  # The outer timeout only catches a run that does not stop by itself (a hang that
  # libFuzzer's -timeout cannot interrupt).
  timeout --kill-after=10 $((SECONDS_EACH + 180)) \
    "$bin" "${inputs[@]}" -max_total_time="$SECONDS_EACH" -timeout=60 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$dir/findings/" ${FLEETPS_FUZZ_ARGS:-} >"$dir/last.log" 2>&1 || rc=$?
  local execs cov
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/last.log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$dir/last.log" | tail -1 | cut -d' ' -f2)
  printf '%-18s %12s execs  cov %6s  %s\n' "$t" "${execs:-?}" "${cov:-?}" \
    "$([ "$rc" -eq 0 ] && echo ok || echo "FINDING (exit $rc)")" >"$dir/result"
  if [ "$rc" -ne 0 ]; then
    {
      echo "fuzz: $t FOUND A PROBLEM (exit $rc); log $dir/last.log, input(s):"
      ls -1 "$dir/findings" || true
      grep -E "ERROR: |FLEETPS FUZZ FINDING|runtime error|SUMMARY|^    #[0-9]+ " "$dir/last.log" | head -60 || true
      echo "reproduce: $bin $dir/findings/<file>"
    } >"$dir/report"
  fi
}

PARALLEL="${FLEETPS_FUZZ_PARALLEL:-$(nproc)}"
for t in "${TARGETS[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do wait -n || true; done
  run_target "$t" &
done
wait

failed=()
summary=()
for t in "${TARGETS[@]}"; do
  dir="$BUILD_DIR/fuzz/$t"
  summary+=("$(cat "$dir/result" 2>/dev/null || echo "$t: no result")")
  if [ -f "$dir/report" ] || [ ! -f "$dir/result" ]; then
    failed+=("$t")
    cat "$dir/report" >&2 2>/dev/null || true
  fi
done

echo "== fuzz summary (${SECONDS_EACH} s per target)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in: ${failed[*]}" >&2
  exit 1
fi
