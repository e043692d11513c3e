#!/usr/bin/env bash
# ThreadSanitizer check (by hand, not a CI stage: a third compile of the tree would take CI
# past its time budget). Builds the named test targets with -fsanitize=thread (gcc, no CUDA)
# into build-tsan/ and runs each; prints every report and exits 1 when there was one.
#   scripts/tsan.sh                              the default targets below
#   scripts/tsan.sh gpups_test collective_test   those test targets
# The default targets are the ones whose threads share fleetps's own state (the pass tables'
# locks, the local group, the collective sync, the GPU-PS Trainer's prefetch helpers); all run
# clean but for one case of collective_test ("With the cluster's TLS files..."), whose 3 reports
# are spdlog's registry set up by two io threads at once inside libspdlog, not built with TSan.
# Elsewhere too, reports inside RocksDB's, spdlog's or oneDNN's own code come from those
# libraries being built without TSan (README, Tests); anything in fleetps's frames is a bug.
# The dense backend runs each product on its caller's thread (no OpenMP team). After editing a header while this
# builds, delete the stale objects: a compile that read the old header can finish after the
# edit and look current to ninja (wrong vtables then crash the tests).
# Environment: FLEETPS_TSAN_BUILD (build dir, default build-tsan), FLEETPS_JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

DEFAULT_TARGETS=(gpups_test gpups_sync_test collective_test runtime_test)
if [ $# -gt 0 ]; then TARGETS=("$@"); else TARGETS=("${DEFAULT_TARGETS[@]}"); fi
BUILD_DIR="${FLEETPS_TSAN_BUILD:-build-tsan}"

if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DFLEETPS_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS="-fsanitize=thread -g" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" >/dev/null
fi
ninja -C "$BUILD_DIR" -j "${FLEETPS_JOBS:-2}" "${TARGETS[@]}"

failed=0
for target in "${TARGETS[@]}"; do
  binary="$(find "$BUILD_DIR/test" -type f -name "$target" -perm -u+x | head -1)"
  if [ -z "$binary" ]; then
    echo "tsan: no test binary named $target under $BUILD_DIR/test" >&2
    exit 2
  fi
  log="$BUILD_DIR/tsan-$target.log"
  rc=0
  TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1" "$binary" >"$log" 2>&1 || rc=$?
  reports=$(grep -c "WARNING: ThreadSanitizer" "$log" || true)
  echo "tsan: $target: exit $rc, $reports report(s) ($log)"
  if [ "$rc" != 0 ] || [ "$reports" != 0 ]; then
    failed=1
    grep -A 12 "WARNING: ThreadSanitizer" "$log" | head -60 || true
  fi
done
exit "$failed"
