#!/usr/bin/env bash
# inspect --emit sass runs nvdisasm without a shell: a PATH directory whose name holds quotes, a ';' and a '$(...)'
# leads to a fake nvdisasm that records its argv. It must be run as itself, with "-c" and the cubin's path as two
# whole argv elements (the path naming a private file holding an ELF cubin), its stdout passed on, nothing else run.
# Needs NVRTC (the cubin), not the real nvdisasm. Usage: sass_without_shell.sh <jitbmm binary>
set -euo pipefail
cli=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Under the old std::system("'<nvdisasm>' -c '<cubin>'") this name ran `touch pwned` in the working directory.
dir="$work/it's; touch pwned; echo 'x \$(touch pwned2) \"q\""
mkdir -p "$dir"
cat > "$dir/nvdisasm" <<'FAKE'
#!/usr/bin/env bash
here=$(dirname "$0")
printf '%s\n' "$#" "$@" > "$here/argv"
stat -c '%a' "$2" > "$here/mode"
cp "$2" "$here/cubin"
echo "FAKE SASS LINE"
FAKE
chmod +x "$dir/nvdisasm"
rc=0
out=$(cd "$work" && PATH="$dir:$PATH" "$cli" inspect --semiring min_plus --shape 2x3x4x5 --emit sass 2>&1) || rc=$?
fail() { printf '%s\nexit status %d, output:\n%s\n' "$1" "$rc" "$out"; exit 1; }
[ "$rc" = 0 ] || fail "inspect --emit sass failed"
[ -f "$dir/argv" ] || fail "the fake nvdisasm in the quoted PATH directory was not run"
mapfile -t argv < "$dir/argv"
[ "${argv[0]}" = 2 ] || fail "nvdisasm got ${argv[0]} arguments, expected 2: ${argv[*]}"
[ "${argv[1]}" = -c ] || fail "first argument '${argv[1]}', expected -c"
case "${argv[2]}" in /*jitbmm-sass-*) ;; *) fail "second argument '${argv[2]}' is not the cubin's temp path" ;; esac
[ "$(cat "$dir/mode")" = 600 ] || fail "the cubin file was mode $(cat "$dir/mode"), expected 600"
[ "$(head -c 4 "$dir/cubin" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] || fail "the file passed is not an ELF cubin"
[ ! -e "${argv[2]}" ] || fail "the temporary cubin ${argv[2]} was left behind"
for f in pwned pwned2; do
  [ ! -e "$work/$f" ] && [ ! -e "$dir/$f" ] || fail "a shell interpreted the path ($f was created)"
done
grep -q "SASS of min_plus_f32_.* for sm_90" <<< "$out" || fail "no SASS header"
grep -q "FAKE SASS LINE" <<< "$out" || fail "nvdisasm's stdout was not passed on"
echo "sass runs nvdisasm without a shell"
