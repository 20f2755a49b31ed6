#!/usr/bin/env bash
# JITBMM_DUMP_DIR receives the generated .cu and its PTX; JITBMM_OVERRIDE_DIR replaces the source, and says so.
# Usage: dump_and_override.sh <jitbmm binary>
set -euo pipefail
cli="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args=(inspect --semiring max_plus --dtype f32 --shape 2x3x4x5 --emit resources)
JITBMM_DUMP_DIR="$work/dump" "$cli" "${args[@]}" > /dev/null
cu=$(ls "$work"/dump/*.cu)
name=$(basename "$cu" .cu)
[ -s "$work/dump/$name.ptx" ] || { echo "no PTX dumped"; exit 1; }
grep -q ".entry $name" "$work/dump/$name.ptx" || { echo "PTX lacks the entry point"; exit 1; }
mkdir -m 0700 "$work/override"
{ cat "$cu"; echo "// hand-edited marker 1234"; } > "$work/override/$name.cu"
out=$(JITBMM_OVERRIDE_DIR="$work/override" "$cli" inspect --semiring max_plus --dtype f32 --shape 2x3x4x5 --emit cuda 2>&1)
grep -q "hand-edited marker 1234" <<< "$out" || { echo "override not used"; exit 1; }
grep -q "JITBMM_OVERRIDE_DIR is active: kernel $name" <<< "$out" || { echo "override not announced"; exit 1; }
echo "dump and override work"
