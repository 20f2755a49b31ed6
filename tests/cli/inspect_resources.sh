#!/usr/bin/env bash
# `inspect --emit resources`: ptxas's report, read from NVRTC's log, with a real register count. NVRTC serves
# binaries from the CUDA compute cache without running ptxas (and so without its report) unless the cache is off:
# CUDA_CACHE_DISABLE=1 here makes every compile report, so a missing report is a failure.
# Usage: inspect_resources.sh <jitbmm binary>
set -uo pipefail
cli="$1"
out=$(CUDA_CACHE_DISABLE=1 "$cli" inspect --semiring log --dtype f64 --shape 1x1x1x1 --arch sm_80 --emit resources 2>&1)
status=$?
echo "$out" | head -n 12
[ "$status" -eq 0 ] || { echo "FAIL: inspect --emit resources exited $status"; exit 1; }
fail() { echo "FAIL: $1"; echo "$out"; exit 1; }
grep -qE "^cubin bytes: +[1-9][0-9]*$" <<< "$out" || fail "no cubin size"
grep -qE "^registers: +[1-9][0-9]*$" <<< "$out" || fail "no register count from ptxas (registers must be >= 1)"
grep -qE "^spill bytes: 0 stored, 0 loaded$" <<< "$out" || fail "spills, or none reported"
grep -q "NVRTC returned no ptxas report" <<< "$out" && fail "the CLI says NVRTC returned no ptxas report"
grep -qE "^occupancy: +(\(no GPU here\)|\(this GPU is sm_[0-9]+, not sm_80\)|[0-9]+ blocks)" <<< "$out" ||
  fail "no occupancy line"
echo "resources reported"
