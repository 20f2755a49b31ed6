#!/usr/bin/env bash
# expect_output.sh must judge both halves: the expected text with the wrong exit status fails, and so does the right
# status without the text; the text is matched across lines and anchored at the output's ends.
set -uo pipefail
check="$(dirname "$0")/expect_output.sh"
fails=0
expect() { # <want: pass|fail> <what> <expect_output.sh arguments...>
  local want="$1" what="$2"
  shift 2
  bash "$check" "$@" >/dev/null 2>&1
  local got=$([ $? -eq 0 ] && echo pass || echo fail)
  [ "$got" = "$want" ] || { echo "FAIL: $what: expected $want, got $got"; fails=$((fails + 1)); }
}
expect fail "the text, then exit 1" 0 "expected text" bash -c 'echo expected text; exit 1'
expect fail "exit 0 without the text" 0 "expected text" bash -c 'echo other text'
expect fail "the wrong nonzero status" 2 "bad flag" bash -c 'echo bad flag >&2; exit 1'
expect pass "the text and exit 0" 0 "expected text" bash -c 'echo expected text'
expect pass "an error with its status" 2 "bad flag" bash -c 'echo bad flag >&2; exit 2'
expect pass "'.' across lines" 0 "first.*second" printf 'first\nsecond\n'
expect pass "anchored at the ends, trailing newline kept" 0 $'^one\n$' printf 'one\n'
expect fail "anchored: more after the text" 0 $'^one\n$' printf 'one\ntwo\n'
[ "$fails" -eq 0 ] || exit 1
echo "expect_output.sh judges the exit status and the output"
