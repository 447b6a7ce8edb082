#!/usr/bin/env bash
# Grammar engine on a fixed sample of MaskBench (every 25th file, 4 instances each, compact and
# indented), vocabulary from the generated Qwen3-tokenizer model. Fails on any invalidation error
# (an invalid instance accepted), any mask/consume disagreement, or a validation error outside
# tests/grammar/maskbench-known-validation.txt (cases where JSON property order forces it).
# The full run with timings is bench/grammar.sh.
set -eu
DATA=../shared/data/maskbench
if [ ! -d "$DATA" ]; then echo "50-grammar: $DATA missing, skipped"; exit 0; fi
$MAKE --no-print-directory BUILD="$BUILD" "$BUILD/lmserve-maskbench" "$MODELDIR/tiny-q8_0.gguf" >/dev/null
out=$(mktemp)
trap 'rm -f "$out"' EXIT
ls "$DATA"/*.json | LC_ALL=C sort | awk 'NR % 25 == 1' > "$out.files"
"$BUILD/lmserve-maskbench" "$MODELDIR/tiny-q8_0.gguf" $(cat "$out.files") --max-tests 4 --quiet > "$out"
rm -f "$out.files"
/usr/bin/python3 - "$out" tests/grammar/maskbench-known-validation.txt <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
known = {l.split()[0] for l in open(sys.argv[2]) if l.strip() and not l.startswith('#')}
summ = rows[-1]; files = rows[:-1]
bad = []
for r in files:
    if r['invalidation_errors']: bad.append(f"{r['file']}: {r['invalidation_errors']} invalid instance(s) accepted")
    if r['mismatches']: bad.append(f"{r['file']}: mask and consume disagree {r['mismatches']} time(s)")
    if r['validation_errors'] and r['file'] not in known:
        bad.append(f"{r['file']}: {r['validation_errors']} valid instance(s) rejected")
    if not r['compiled'] and not r['error']: bad.append(f"{r['file']}: rejected without a message")
print(f"50-grammar: {summ['files']} files, {summ['compiled']} compiled, {summ['rejected']} rejected, "
      f"{summ['valid_tested']} valid / {summ['invalid_tested']} invalid instances, "
      f"{summ['validation_errors']} validation errors (known: property order), "
      f"{summ['invalidation_errors']} invalidation errors, {summ['masks']} masks")
if summ['valid_tested'] < 100 or summ['invalid_tested'] < 50: bad.append("too few instances tested")
for b in bad: print("FAIL", b)
sys.exit(1 if bad else 0)
PY
