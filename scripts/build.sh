#!/usr/bin/env bash
# Configures and builds fleetps into build/ (or $FLEETPS_BUILD_DIR).
#   scripts/build.sh                 release-with-debug-info build
#   FLEETPS_SANITIZE=ON BUILD=build-asan scripts/build.sh    ASan + UBSan build
#   FLEETPS_UNITY_BUILD=ON scripts/build.sh   unity build: each target's sources compiled in
#       batches of 16 as one unit (a fresh tree builds faster: scripts/test.sh's choice for
#       one; per-file, a new tree's default, rebuilds less after an edit). Unset: the tree
#       keeps what it was configured with.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${FLEETPS_BUILD_DIR:-${BUILD:-build}}"
JOBS="${FLEETPS_JOBS:-$(nproc)}"
cmake -S . -B "$BUILD_DIR" -G Ninja \
  -DFLEETPS_WERROR="${FLEETPS_WERROR:-OFF}" \
  -DFLEETPS_SANITIZE="${FLEETPS_SANITIZE:-OFF}" \
  -DFLEETPS_BUILD_BENCH="${FLEETPS_BUILD_BENCH:-ON}" \
  ${FLEETPS_UNITY_BUILD:+-DCMAKE_UNITY_BUILD="$FLEETPS_UNITY_BUILD"} \
  ${FLEETPS_CMAKE_ARGS:-} >/dev/null
ninja -C "$BUILD_DIR" -j "$JOBS" ${FLEETPS_TARGETS:-}
