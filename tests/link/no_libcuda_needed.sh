#!/usr/bin/env bash
# Usage: no_libcuda_needed.sh REGEX FILE...: fails when any binary given has a NEEDED entry matching REGEX. jitbmm
# dlopens the driver and NVRTC (runtime/driver_api.cpp, runtime/nvrtc_api.cpp), so every library, the CLI and every
# test must start on a machine without either, whatever the linker's --as-needed default; what ships (the libraries
# and the CLI) needs no libcrypto either (support/sha256.cpp).
set -uo pipefail
pattern="$1"
shift
bad=0
for f in "$@"; do
  if ! needed=$(readelf -d "$f" 2>&1); then
    echo "cannot read $f: $needed"; bad=1; continue
  fi
  if grep -E "NEEDED.*\[($pattern)" <<<"$needed"; then
    echo "FAIL: $f needs a library matching $pattern"; bad=1
  fi
done
[ "$bad" = 0 ] && echo "none of $# binaries needs $pattern"
exit "$bad"
