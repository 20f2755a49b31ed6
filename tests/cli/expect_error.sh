#!/usr/bin/env bash
# A command must fail with the given exit status and say what is wrong (a regex over stdout and stderr together).
# Usage: expect_error.sh <exit status> <regex> <command...>
set -uo pipefail
want_rc="$1" want="$2"
shift 2
out=$("$@" 2>&1)
rc=$?
[ "$rc" -eq "$want_rc" ] || { printf 'exit status %d, expected %d; output:\n%s\n' "$rc" "$want_rc" "$out"; exit 1; }
grep -Eq -- "$want" <<< "$out" || { printf 'output lacks /%s/:\n%s\n' "$want" "$out"; exit 1; }
echo "ok: exit status $rc, output matches"
