#!/usr/bin/env bash
# `inspect --emit sass` where nvdisasm cannot be found (a PATH without it) must fail (exit 1, as for any missing
# tool), print nothing on stdout and say how to get nvdisasm; `--emit all` still prints the rest and says SASS is
# missing. The CLI also looks in /usr/local/cuda/bin, which a test cannot hide: where nvdisasm is there, the test
# exits 77 (CTest: skipped). Usage: sass_without_nvdisasm.sh <jitbmm binary>
set -uo pipefail
cli=$(realpath "$1")
[ -x /usr/local/cuda/bin/nvdisasm ] && { echo "SKIPPED: /usr/local/cuda/bin/nvdisasm exists"; exit 77; }
empty=$(mktemp -d)
trap 'rm -rf "$empty"' EXIT
fail() { printf '%s\n%s\n' "$1" "$2"; exit 1; }
stdout=$(PATH="$empty" "$cli" inspect --semiring min_plus --shape 2x3x4x5 --emit sass 2>"$empty/stderr")
rc=$?
err=$(cat "$empty/stderr")
[ "$rc" -eq 1 ] || fail "inspect --emit sass without nvdisasm exited $rc, expected 1" "$stdout$err"
[ -z "$stdout" ] || fail "inspect --emit sass without nvdisasm printed on stdout" "$stdout"
grep -q "error: --emit sass: nvdisasm not found on PATH or in /usr/local/cuda/bin: it ships with the CUDA toolkit" \
  <<< "$err" || fail "the error does not say how to get nvdisasm" "$err"
all=$(PATH="$empty" "$cli" inspect --semiring min_plus --shape 2x3x4x5 --emit all 2>&1) ||
  fail "inspect --emit all without nvdisasm failed" "$all"
grep -q "^// SASS unavailable: nvdisasm not found" <<< "$all" || fail "--emit all did not say SASS is missing" "$all"
grep -q "\.entry min_plus_f32_" <<< "$all" || fail "--emit all did not print the PTX" "$all"
echo "sass without nvdisasm fails and says how to get it"
