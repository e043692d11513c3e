#!/usr/bin/env bash
# Packs what the GPU checks need into one file that the device tool can carry to a GPU
# machine without our Debian libraries: the binaries below (stripped, in the build tree's
# layout, so BUILD=<unpacked dir> works for the scripts and benchmarks) and every shared
# library they load except glibc's and CUDA's own (the GPU machine has CUDA at
# /usr/local/cuda). scripts/device_check.sh unpacks it there and runs the checks.
#   scripts/device_bundle.sh [OUT (default build/device_bundle.tar.xz)]
# Needs a build with CUDA (nvcc found): BUILD (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
OUT="${1:-$BUILD/device_bundle.tar.xz}"
BINARIES=(
  server/pserver trainer/cpu-trainer heter_trainer/heter-trainer tools/datagen/fleetps-datagen
  tools/launch/fleetps-launch
  test/heter_trainer/heter_cuda_test test/heter_trainer/gpups_cuda_test test/e2e/collective_e2e_test
  bench/heter_bench/heter_bench bench/gpups_bench/gpups_bench
)
[ -x "$BUILD/test/heter_trainer/heter_cuda_test" ] || { echo "device_bundle: no $BUILD/test/heter_trainer/heter_cuda_test (build with nvcc on PATH first)" >&2; exit 1; }
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib"
for b in "${BINARIES[@]}"; do
  [ -x "$BUILD/$b" ] || { echo "device_bundle: $BUILD/$b is missing" >&2; exit 1; }
  mkdir -p "$stage/$(dirname "$b")"
  strip -o "$stage/$b" "$BUILD/$b"
  # Shared libraries, except the C library's (the loader must match it) and CUDA's.
  ldd "$BUILD/$b" | awk '$3 ~ /^\// {print $3}' |
    grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so|/usr/local/cuda|/libcuda\.so|/libnvidia' |
    while read -r lib; do
      [ -f "$stage/lib/$(basename "$lib")" ] || cp -L "$lib" "$stage/lib/"
    done
done
strip --strip-unneeded "$stage"/lib/*.so* 2>/dev/null || true
tar -C "$stage" -cJf "$OUT" .
echo "device_bundle: $OUT ($(du -h "$OUT" | cut -f1)): ${#BINARIES[@]} binaries, $(ls "$stage/lib" | wc -l) libraries"
