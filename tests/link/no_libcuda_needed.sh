#!/usr/bin/env bash
# Fails when any binary given names libcuda as a NEEDED entry: jitbmm dlopens the driver (runtime/driver_api.cpp), so
# every library, the CLI and every test must start on a machine without one, whatever the linker's --as-needed default.
set -uo pipefail
bad=0
for f in "$@"; do
  if ! needed=$(readelf -d "$f" 2>&1); then
    echo "cannot read $f: $needed"; bad=1; continue
  fi
  if grep -E 'NEEDED.*\[libcuda\.so' <<<"$needed"; then
    echo "FAIL: $f needs libcuda"; bad=1
  fi
done
[ "$bad" = 0 ] && echo "none of $# binaries needs libcuda"
exit "$bad"
