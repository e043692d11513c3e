#!/usr/bin/env bash
# Configures and builds fleetps into build/ (or $FLEETPS_BUILD_DIR).
#   scripts/build.sh                 release-with-debug-info build
#   FLEETPS_SANITIZE=ON BUILD=build-asan scripts/build.sh    ASan + UBSan build
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${FLEETPS_BUILD_DIR:-${BUILD:-build}}"
JOBS="${FLEETPS_JOBS:-$(nproc)}"
cmake -S . -B "$BUILD_DIR" -G Ninja \
  -DFLEETPS_WERROR="${FLEETPS_WERROR:-OFF}" \
  -DFLEETPS_SANITIZE="${FLEETPS_SANITIZE:-OFF}" \
  -DFLEETPS_BUILD_BENCH="${FLEETPS_BUILD_BENCH:-ON}" \
  ${FLEETPS_CMAKE_ARGS:-} >/dev/null
ninja -C "$BUILD_DIR" -j "$JOBS" ${FLEETPS_TARGETS:-}
