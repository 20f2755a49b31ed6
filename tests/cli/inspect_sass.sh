#!/usr/bin/env bash
# `inspect --emit sass` where nvdisasm exists (on PATH or in /usr/local/cuda/bin, where the CLI looks): the SASS of
# the tiled min_plus kernel, whose term is one FADD and one NaN-propagating FMNMX. Where nvdisasm is absent the CLI
# must fail saying so, and the test exits 77 (CTest: skipped), never passed. Usage: inspect_sass.sh <jitbmm binary>
set -uo pipefail
cli="$1"
out=$("$cli" inspect --semiring min_plus --shape 2x3x4x5 --strategy tiled --emit sass 2>&1)
status=$?
if [ -x "$(command -v nvdisasm 2>/dev/null)" ] || [ -x /usr/local/cuda/bin/nvdisasm ]; then
  [ "$status" -eq 0 ] || { echo "$out"; echo "FAIL: inspect --emit sass exited $status"; exit 1; }
  grep -q "^// SASS of min_plus_f32_tiled[a-z0-9_]* for sm_[0-9]*" <<< "$out" ||
    { echo "$out"; echo "FAIL: no SASS header"; exit 1; }
  grep -qE "\bFMNMX(\.NAN)?\b" <<< "$out" || { echo "$out"; echo "FAIL: no FMNMX in the SASS"; exit 1; }
  grep -qE "\bFADD\b" <<< "$out" || { echo "$out"; echo "FAIL: no FADD in the SASS"; exit 1; }
  echo "SASS of min_plus: $(grep -cE '^\s+/\*[0-9a-f]{4}\*/' <<< "$out") instructions"
  exit 0
fi
[ "$status" -ne 0 ] || { echo "$out"; echo "FAIL: no nvdisasm, and inspect --emit sass exited 0"; exit 1; }
grep -q "nvdisasm not found" <<< "$out" || { echo "$out"; echo "FAIL: no nvdisasm, and the CLI did not say so"; exit 1; }
echo "SKIPPED: nvdisasm is not on PATH or in /usr/local/cuda/bin"
exit 77
