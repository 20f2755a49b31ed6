#!/usr/bin/env bash
# Usage: glibc_floor.sh FILE...: fails when a binary asks for a glibc symbol version above the floor below, naming
# the symbols; glibc_floor.sh --print prints the floor (scripts/check-wheel's manylinux tag). What links libstdc++
# statically (libjitbmm_c.so, the wheel's CLI) must load wherever the wheel's manylinux tag promises
# (support/static_runtime_compat.cpp says why the floor is 2.34).
set -uo pipefail
max=2.34
if [ "${1:-}" = "--print" ]; then
  echo "$max"
  exit 0
fi
bad=0
for f in "$@"; do
  if ! symbols=$(readelf --dyn-syms -W "$f" 2>&1); then
    echo "cannot read $f: $symbols"; bad=1; continue
  fi
  while read -r symbol version; do
    if [ "$(printf '%s\n%s\n' "$max" "$version" | sort -V | tail -1)" != "$max" ]; then
      echo "FAIL: $f needs $symbol@GLIBC_$version, above $max"; bad=1
    fi
  done < <(grep -oE '[A-Za-z_0-9]+@GLIBC_[0-9.]+' <<<"$symbols" | sed 's/@GLIBC_/ /' | sort -u)
done
[ "$bad" = 0 ] && echo "none of $# binaries needs a glibc above $max"
exit "$bad"
