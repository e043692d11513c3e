#!/usr/bin/env bash
# systemd-analyze verify on every fleetps unit, as configured by this build: syntax, known
# directives and values, and executables that exist (the install paths are pointed at the
# build tree's binaries). Any diagnostic fails the test. Then the readiness contract: a
# Type=notify unit runs a program that sends READY=1 and answers the watchdog (pserver,
# heter-trainer, cpu-trainer; systemd_notify_test checks each), so it sets WatchdogSec=.
# Last the stop order of one node's units: cpu-trainers, then heter-trainers, then pservers
# (the reverse of their start order, which the two ordering targets set; verify above has
# built each unit's start transaction, so the order has no cycle).
#   verify_units.sh BUILD_DIR INSTALL_BINDIR
set -euo pipefail
build="$1"
bindir="$2"
if ! command -v systemd-analyze >/dev/null; then
  echo "systemd-analyze is missing: install the systemd package (scripts/install_deps.sh)" >&2
  exit 1
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
units=()
for f in "$build"/packaging/systemd/*; do
  name="$(basename "$f")"
  sed -e "s#$bindir/pserver#$build/server/pserver#" \
      -e "s#$bindir/cpu-trainer#$build/trainer/cpu-trainer#" \
      -e "s#$bindir/heter-trainer#$build/heter_trainer/heter-trainer#" "$f" >"$tmp/$name"
  # A template is verified as an instance (the instance names a port or a trainer id).
  case "$name" in
    *@.service) units+=("$tmp/${name%@.service}@8500.service") ;;
    *) units+=("$tmp/$name") ;;
  esac
done
[ ${#units[@]} -ge 4 ] || { echo "expected at least 4 units under $build/packaging/systemd" >&2; exit 1; }
set +e
out="$(cd "$tmp" && systemd-analyze verify --man=no "${units[@]}" 2>&1)"
rc=$?
set -e
echo "verified: ${units[*]##*/}"
if [ $rc -ne 0 ] || [ -n "$out" ]; then
  echo "systemd-analyze verify (rc $rc):" >&2
  echo "$out" >&2
  exit 1
fi
bad=0
for f in "$build"/packaging/systemd/*.service; do
  name="$(basename "$f")"
  if grep -q '^Type=notify' "$f"; then
    grep -q '^WatchdogSec=' "$f" || { echo "$name: Type=notify without WatchdogSec= (its program pings)" >&2; bad=1; }
  fi
done
[ $bad -eq 0 ] || exit 1
echo "readiness: every Type=notify unit sets WatchdogSec="
has() {  # has UNIT LINE: the unit holds the line
  grep -qxF "$2" "$build/packaging/systemd/$1" || { echo "$1: missing '$2' (the stop order)" >&2; bad=1; }
}
has fleetps-pserver@.service "Before=fleetps-pservers.target"
has fleetps-pserver@.service "Wants=fleetps-pservers.target"
has fleetps-heter-trainer@.service "After=fleetps-pservers.target"
has fleetps-heter-trainer@.service "Before=fleetps-heter-trainers.target"
has fleetps-heter-trainer@.service "Wants=fleetps-heter-trainers.target"
has fleetps-trainer@.service "After=fleetps-pservers.target fleetps-heter-trainers.target"
has fleetps-pservers.target "PartOf=fleetps.target"
has fleetps-heter-trainers.target "PartOf=fleetps.target"
[ $bad -eq 0 ] || exit 1
echo "stop order: cpu-trainers, heter-trainers, pservers"
