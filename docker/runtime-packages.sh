#!/usr/bin/env bash
# Prints the Debian/Ubuntu packages that provide the shared libraries the given binaries load
# (ldd, each library mapped to its package with dpkg -S), one per line, sorted. Used by the
# Dockerfiles' build stages (to install, or to check, the runtime stage's packages) and by
# scripts/check-deploy. Fails if a library is missing or belongs to no package.
# Usage: docker/runtime-packages.sh BINARY...
set -euo pipefail
[[ $# -gt 0 ]] || { echo "usage: $0 BINARY..." >&2; exit 2; }

owner() {  # owner LIBPATH: the package holding LIBPATH (merged-/usr aware)
  local lib=$1 real cand
  real=$(readlink -f "$lib")
  for cand in "$lib" "$real" "${lib#/usr}" "${real#/usr}" "/usr$lib" "/usr$real"; do
    dpkg-query -S "$cand" 2>/dev/null | head -n1 | cut -d: -f1 && return 0
  done
  return 1
}

libs=()
for bin in "$@"; do
  [[ -x "$bin" ]] || { echo "runtime-packages: $bin is not an executable" >&2; exit 1; }
  out=$(ldd "$bin") || { echo "runtime-packages: ldd $bin failed" >&2; exit 1; }
  if grep -q 'not found' <<<"$out"; then
    echo "runtime-packages: $bin has unresolved libraries:" >&2
    grep 'not found' <<<"$out" >&2
    exit 1
  fi
  while read -r lib; do libs+=("$lib"); done < <(awk '$2 == "=>" && $3 ~ /^\// {print $3}' <<<"$out")
done

for lib in "${libs[@]}"; do
  owner "$lib" || { echo "runtime-packages: no package owns $lib" >&2; exit 1; }
done | sort -u
