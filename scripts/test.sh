#!/usr/bin/env bash
# The test command (README, CI): installs missing packages, checks the formatting
# (scripts/check_format.sh), the include graph's layers and the functions' lengths
# (scripts/check_layers.py, check_function_length.py), builds with warnings as errors, runs
# every CTest test, then builds the libraries, the unit and integration tests and the
# libFuzzer targets with clang + ASan + UBSan, runs those tests there, then every fuzz
# target briefly (scripts/fuzz.sh).
#   scripts/test.sh               everything
#   FLEETPS_SKIP_SANITIZE=1 scripts/test.sh    skip the sanitizer pass
#   FLEETPS_SKIP_FUZZ=1 scripts/test.sh        skip the fuzz stage (libFuzzer targets, 20 s each)
#   FLEETPS_UNITY_BUILD=ON|OFF scripts/test.sh  unity builds or not (default: a new tree is a
#                                              unity build, an existing one keeps its setting)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh

echo "== formatting (scripts/check_format.sh)"
scripts/check_format.sh
echo "== include graph and function lengths (scripts/check_layers.py, scripts/check_function_length.py)"
python3 scripts/check_layers.py
python3 scripts/check_function_length.py

export FLEETPS_WERROR=ON
# A new tree (CI's clean clone) is a unity build: from nothing it compiles fastest
# (scripts/build.sh). An existing tree keeps its setting: switching rebuilds everything.
unity_for() {
  if [ -n "${FLEETPS_UNITY_BUILD:-}" ]; then echo "$FLEETPS_UNITY_BUILD"
  elif [ ! -f "$1/CMakeCache.txt" ]; then echo ON
  fi
}
echo "== build (build/)"
FLEETPS_UNITY_BUILD="$(unity_for build)" BUILD=build scripts/build.sh
echo "== tests (build/)"
ctest --test-dir build --output-on-failure --timeout 600 -j 2

# One clang tree (build-fuzz/) serves both remaining stages: every library is compiled
# once with ASan + UBSan (+ libFuzzer coverage); the unit and integration tests run
# from it, then every fuzz target (docs/FUZZING.md).
export FLEETPS_FUZZ_BUILD_TESTS=ON
if [ "${FLEETPS_SKIP_SANITIZE:-0}" != "1" ]; then
  echo "== sanitizer build (build-fuzz/: clang, ASan + UBSan, unit + integration tests)"
  FLEETPS_UNITY_BUILD="$(unity_for build-fuzz)" FLEETPS_FUZZ_BUILD_ONLY=1 scripts/fuzz.sh
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-fuzz --output-on-failure --timeout 900 -j 2 -L "unit|integration"
fi

if [ "${FLEETPS_SKIP_FUZZ:-0}" != "1" ]; then
  # Each target runs from its seeds plus the corpus earlier runs left in build-fuzz/fuzz/;
  # any crash, sanitizer report, hang or broken invariant fails the run (docs/FUZZING.md).
  echo "== fuzz (build-fuzz/: clang + libFuzzer, ${FLEETPS_FUZZ_SECONDS:-20} s per target)"
  FLEETPS_UNITY_BUILD="$(unity_for build-fuzz)" scripts/fuzz.sh "${FLEETPS_FUZZ_SECONDS:-20}"
fi
