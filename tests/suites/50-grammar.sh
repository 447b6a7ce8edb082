#!/usr/bin/env bash
# Grammar engine on a fixed sample of MaskBench (every 25th file of the visible splits, 4 instances each, compact and
# indented), vocabulary from the generated Qwen3-tokenizer model (151,936 tokens).
#  1. The generic JSON grammar (tests/grammar/json.lark) must accept every valid instance: any
#     rejection is an engine bug.
#  2. With the compiled schemas: no invalidation error (an invalid instance accepted), no
#     mask/consume disagreement, every rejected schema has a message; validation errors outside
#     tests/grammar/maskbench-known-validation.txt (mostly property order) are listed and fail
#     the suite above 1% of the valid instances (they belong to the schema compiler, which
#     evolves; its own suite tracks them).
# The full run with timings is bench/grammar.sh.
set -eu
# The sample is committed (tests/data/README.md: source and licence); a missing one fails.
SAMPLE=tests/data/maskbench-sample.tar.xz
tmpd=$(mktemp -d)
out=$(mktemp)
trap 'rm -rf "$out" "$out.files" "$out.lark" "$tmpd"' EXIT
tar -C "$tmpd" -xJf "$SAMPLE"
DATA=$tmpd/maskbench-sample/grammar
$MAKE --no-print-directory BUILD="$BUILD" "$BUILD/lmserve-maskbench" "$MODELDIR/tiny-q8_0.gguf" >/dev/null
ls "$DATA"/*.json | LC_ALL=C sort > "$out.files"
"$BUILD/lmserve-maskbench" "$MODELDIR/tiny-q8_0.gguf" $(cat "$out.files") --max-tests 4 --quiet \
    --lark tests/grammar/json.lark > "$out.lark"
"$BUILD/lmserve-maskbench" "$MODELDIR/tiny-q8_0.gguf" $(cat "$out.files") --max-tests 4 --quiet > "$out"
/usr/bin/python3 - "$out" "$out.lark" tests/grammar/maskbench-known-validation.txt <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
lark = [json.loads(l) for l in open(sys.argv[2])]
known = {l.split()[0] for l in open(sys.argv[3]) if l.strip() and not l.startswith('#')}
bad, warn = [], []
ls = lark[-1]
for r in lark[:-1]:
    if r['validation_errors']: bad.append(f"{r['file']}: generic JSON grammar rejects {r['validation_errors']} valid instance(s)")
    if r['mismatches']: bad.append(f"{r['file']}: generic JSON grammar: mask and consume disagree")
summ = rows[-1]
for r in rows[:-1]:
    if r['invalidation_errors']: bad.append(f"{r['file']}: {r['invalidation_errors']} invalid instance(s) accepted")
    if r['mismatches']: bad.append(f"{r['file']}: mask and consume disagree {r['mismatches']} time(s)")
    if not r['compiled'] and not r['error']: bad.append(f"{r['file']}: rejected without a message")
    if r['validation_errors'] and r['file'] not in known:
        warn.append((r['file'], r['validation_errors']))
print(f"50-grammar: generic JSON grammar: {ls['valid_tested']} valid instances, {ls['validation_errors']} rejected, "
      f"{ls['masks']} masks, avg {ls['mask_us_avg']} us")
print(f"50-grammar: schemas: {summ['files']} files, {summ['compiled']} compiled, {summ['rejected']} rejected, "
      f"{summ['valid_tested']} valid / {summ['invalid_tested']} invalid instances, "
      f"{summ['validation_errors']} validation errors, {summ['invalidation_errors']} invalidation errors, "
      f"{summ['masks']} masks, avg {summ['mask_us_avg']} us")
for f, n in warn: print(f"  note: {f}: {n} valid instance(s) rejected (not in the known list)")
if sum(n for _, n in warn) > 0.01 * max(summ['valid_tested'], 1):
    bad.append("unexplained validation errors above 1% of valid instances")
if summ['valid_tested'] < 100 or summ['invalid_tested'] < 50 or ls['valid_tested'] < 100:
    bad.append("too few instances tested")
for b in bad: print("FAIL", b)
sys.exit(1 if bad else 0)
PY
