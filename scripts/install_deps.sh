#!/usr/bin/env bash
# Installs the Debian packages fleetps builds against. Idempotent: packages that
# are already installed are skipped, so it is cheap to call before every build.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libboost-dev libboost-system-dev
  libflatbuffers-dev flatbuffers-compiler
  librocksdb-dev
  libspdlog-dev libfmt-dev
  libcli11-dev
  catch2
  libyaml-cpp-dev
  libssl-dev openssl
  libgloo-dev
  libopenblas-dev libdnnl-dev
  libsystemd-dev systemd
  prometheus-cpp-dev
  zlib1g-dev
  iperf3
  procps
  python3
  clang-16 libclang-rt-16-dev clang-format-16
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
