#!/usr/bin/env bash
# A command must exit with the given status and print what is expected: an extended regex over its whole output
# (stdout and stderr together), where '.' also matches a newline and ^ and $ anchor at the output's ends, as ctest's
# PASS_REGULAR_EXPRESSION reads it. PASS_REGULAR_EXPRESSION alone ignores the exit status; this does not.
# Usage: expect_output.sh <exit status> <regex> <command...>
set -uo pipefail
want_rc="$1" want="$2"
shift 2
out=$("$@" 2>&1; rc=$?; echo "#$rc") # the '#' line keeps the output's trailing newlines and carries the status
rc="${out##*#}"
out="${out%#*}"
printf '%s' "$out"
[ "$rc" -eq "$want_rc" ] || { printf '\nFAIL: exit status %d, expected %d\n' "$rc" "$want_rc"; exit 1; }
[[ "$out" =~ $want ]] || { printf '\nFAIL: the output does not match the expected regex\n'; exit 1; }
printf '\nok: exit status %d, output matches\n' "$rc"
