#!/usr/bin/env bash
# Checks that every C++ and CUDA source in git is formatted as .clang-format says
# (clang-format-16: another version formats some constructs differently).
#   scripts/check_format.sh          list the files that are not, and fail
#   scripts/check_format.sh --fix    format them in place
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT="${CLANG_FORMAT:-clang-format-16}"
command -v "$CLANG_FORMAT" >/dev/null || { echo "check_format: $CLANG_FORMAT not found (scripts/install_deps.sh installs it)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.h' '*.cc' '*.cu' '*.cuh')
if [ "${1:-}" = "--fix" ]; then
  "$CLANG_FORMAT" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! "$CLANG_FORMAT" --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  printf 'check_format: not formatted as .clang-format says: %s\n' "${bad[@]}" >&2
  echo "check_format: ${#bad[@]} file(s); run scripts/check_format.sh --fix (or $CLANG_FORMAT -i FILE)" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
