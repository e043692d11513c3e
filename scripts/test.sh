#!/usr/bin/env bash
# The test command (README, CI): installs missing packages, builds with warnings as
# errors, runs every CTest test, then builds the unit and integration tests with
# ASan + UBSan and runs those too, then runs every libFuzzer target briefly (scripts/fuzz.sh).
#   scripts/test.sh               everything
#   FLEETPS_SKIP_SANITIZE=1 scripts/test.sh    skip the sanitizer pass
#   FLEETPS_SKIP_FUZZ=1 scripts/test.sh        skip the fuzz stage (libFuzzer targets, 20 s each)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh

export FLEETPS_WERROR=ON
echo "== build (build/)"
BUILD=build scripts/build.sh
echo "== tests (build/)"
ctest --test-dir build --output-on-failure --timeout 600 -j 2

if [ "${FLEETPS_SKIP_SANITIZE:-0}" != "1" ]; then
  # Without CUDA: its kernels are not sanitized, and its tests (label gpu) need a GPU.
  echo "== sanitizer build (build-asan/: ASan + UBSan, unit + integration tests)"
  FLEETPS_SANITIZE=ON FLEETPS_BUILD_BENCH=OFF FLEETPS_CMAKE_ARGS="-DFLEETPS_BUILD_E2E=OFF -DFLEETPS_WITH_CUDA=OFF" \
    BUILD=build-asan \
    scripts/build.sh
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure --timeout 900 -j 2 -L "unit|integration"
fi

if [ "${FLEETPS_SKIP_FUZZ:-0}" != "1" ]; then
  # Each target runs from its seeds plus the corpus earlier runs left in build-fuzz/fuzz/;
  # any crash, sanitizer report, hang or broken invariant fails the run (docs/FUZZING.md).
  echo "== fuzz (build-fuzz/: clang + libFuzzer, ${FLEETPS_FUZZ_SECONDS:-20} s per target)"
  scripts/fuzz.sh "${FLEETPS_FUZZ_SECONDS:-20}"
fi
