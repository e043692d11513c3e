#!/usr/bin/env bash
# The packages, installed and run from the installed files only:
#  1. cpack builds the .deb and the .tar.gz;
#  2. the .deb is installed with `dpkg --root` into an empty directory tree (its own dpkg
#     database; maintainer scripts run chrootless with DPKG_ROOT);
#  3. no installed binary carries an RPATH/RUNPATH, or resolves a library, inside the build
#     or source tree (readelf, ldd); the units' ExecStart= names the installed pserver;
#  4. pserver --version, then a 1 pserver + 1 cpu-trainer job started by the installed
#     fleetps-launch on data from the installed fleetps-datagen, with the installed example
#     config, in a directory outside both trees; every process it started is an installed one.
#   install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"
src="$(cd "$2" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "install_test: $*" >&2; exit 1; }

echo "== cpack (DEB, TGZ)"
(cd "$build" && cpack -G "DEB;TGZ" -B "$work/pkg" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; fail "cpack failed"; }
deb="$(ls "$work"/pkg/fleetps_*.deb)"
tgz="$(ls "$work"/pkg/fleetps-*-Linux.tar.gz)"
dpkg-deb --info "$deb" | sed -n '/Package:/,/Description:/p'
# (Listings are captured first: with pipefail, `producer | grep -q` fails when grep stops early.)
listing="$(tar tzf "$tgz")"
grep -q "/usr/bin/pserver$" <<<"$listing" || fail "$tgz has no usr/bin/pserver"
grep -q "/usr/lib/systemd/system/fleetps-pserver@.service$" <<<"$listing" || fail "$tgz has no pserver unit"

echo "== dpkg --root $work/root -i $(basename "$deb")"
root="$work/root"
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/etc"
touch "$root/var/lib/dpkg/status"
# Dependencies are the host's libraries (checked by ldd below), not in this root's database.
dpkg --root="$root" --log=/dev/null --force-depends --force-script-chrootless -i "$deb" >"$work/dpkg.log" 2>&1 ||
  { cat "$work/dpkg.log"; fail "dpkg -i failed"; }
installed="$(dpkg --root="$root" -l fleetps)"
grep -q '^ii  fleetps' <<<"$installed" || fail "fleetps is not installed in $root"
bin="$root/usr/bin"
for p in pserver cpu-trainer heter-trainer fleetps-launch fleetps-ctl fleetps-plot fleetps-datagen pserver_tool; do
  [ -x "$bin/$p" ] || fail "$bin/$p is missing"
  if readelf -d "$bin/$p" | grep -E "RPATH|RUNPATH"; then fail "$p has an RPATH/RUNPATH"; fi
  libs="$(ldd "$bin/$p")"
  if grep -q "not found" <<<"$libs"; then echo "$libs"; fail "$p: a shared library is missing"; fi
  if grep -qE "$build|$src" <<<"$libs"; then echo "$libs"; fail "$p resolves a library in the build tree"; fi
  text="$(strings "$bin/$p")"
  if grep -qF "$build/" <<<"$text"; then fail "$p embeds a build-tree path"; fi
done
grep -q "^ExecStart=/usr/bin/pserver " "$root/usr/lib/systemd/system/fleetps-pserver@.service" ||
  fail "the installed pserver unit does not run /usr/bin/pserver"
for target in fleetps.target fleetps-pservers.target fleetps-heter-trainers.target; do
  [ -f "$root/usr/lib/systemd/system/$target" ] || fail "$target is not installed (the units name it)"
done
[ -f "$root/usr/share/doc/fleetps/OPERATIONS.md" ] || fail "docs are not installed"

echo "== installed pserver --version"
"$bin/pserver" --version >"$work/version.txt"
cat "$work/version.txt"
grep -q "^pserver (fleetps) " "$work/version.txt" || fail "pserver --version"

echo "== 1 pserver + 1 cpu-trainer from the installed files"
job="$work/job"
mkdir -p "$job"
cd "$job"
env -i PATH=/usr/bin:/bin HOME="$job" "$bin/fleetps-datagen" --out-dir data --rows 5000 --train-files 1 --seed 3 >datagen.log
cp "$root/usr/share/fleetps/configs/ctr_dnn.yaml" job.yaml
# The model goes next to the job (the example config names a path relative to itself).
sed -i 's#^\(\s*model_save_path:\).*#\1 "model"#' job.yaml
set +e
env -i PATH=/usr/bin:/bin HOME="$job" "$bin/fleetps-launch" --server_num 1 --worker_num 1 --log_dir log \
  "$bin/cpu-trainer" --config job.yaml --train-data data/train --test-data data/test --epochs 1 \
  --report report.json >launch.log 2>&1
rc=$?
set -e
grep -v " step " launch.log | tail -15 || true
[ $rc -eq 0 ] || { tail -30 log/serverlog.0; fail "the job exited $rc"; }
grep -q "started server 0 (pid [0-9]*) $bin/pserver " launch.log || fail "the launcher did not run the installed pserver"
grep -q "started worker 0 (pid [0-9]*) $bin/cpu-trainer " launch.log || fail "the launcher did not run the installed trainer"
grep -q '"test": {' report.json || fail "no test metrics in the report"
echo "install_test: OK"
