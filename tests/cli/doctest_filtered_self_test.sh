#!/usr/bin/env bash
# scripts/doctest-filtered: a filter that selects no test case fails, one that selects a case passes, and a failing
# program's status comes through. Usage: doctest_filtered_self_test.sh <scripts/doctest-filtered> <a doctest program>
set -uo pipefail
run="$1" program="$2"
fails=0
expect() { # <want status> <what> <command...>
  local want="$1" what="$2"
  shift 2
  "$run" "$@" >/dev/null 2>&1
  local got=$?
  [ "$got" = "$want" ] || { echo "FAIL: $what: expected status $want, got $got"; fails=$((fails + 1)); }
}
expect 1 "a -tc filter that selects nothing" "$program" -tc='no case has this name*'
expect 1 "a -ts filter that selects nothing" "$program" -ts='no_such_suite'
expect 0 "a filter that selects a case" "$program" -tc='sweep: the same seed*'
expect 3 "a failing program" bash -c 'echo "[doctest] test cases: 1 | 0 passed | 1 failed"; exit 3'
expect 1 "a program that says skipped (77) and ran no case" bash -c 'echo "[doctest] test cases: 0 | 0 passed"; exit 77'
expect 1 "a program that prints no doctest summary" true
[ "$fails" -eq 0 ] && echo "doctest-filtered judges the filter and the status"
exit $((fails > 0))
