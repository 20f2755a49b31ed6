#!/usr/bin/env bash
# JITBMM_DEVICE is a whole integer in [0, INT_MAX]: 4294967296 (device 0 once cast to int) and "1x" are errors
# naming the variable. Read only where a device is opened, so this needs a GPU (exit 77: skipped without one).
# Usage: device_env.sh <jitbmm binary>
set -uo pipefail
cli="$1"
if "$cli" info 2>&1 | grep -q "^no GPU"; then echo "no GPU: skipped"; exit 77; fi
for value in 4294967296 -1 1x " 0"; do
  out=$(JITBMM_DEVICE="$value" "$cli" info 2>&1)
  rc=$?
  [ "$rc" = 2 ] || { printf 'JITBMM_DEVICE=%s: exit status %d, expected 2:\n%s\n' "$value" "$rc" "$out"; exit 1; }
  grep -qF "JITBMM_DEVICE: expected an integer in [0, 2147483647], got '$value'" <<< "$out" ||
    { printf 'JITBMM_DEVICE=%s: unexpected message:\n%s\n' "$value" "$out"; exit 1; }
done
JITBMM_DEVICE=0 "$cli" info > /dev/null || { echo "JITBMM_DEVICE=0 failed"; exit 1; }
echo "JITBMM_DEVICE is parsed strictly"
