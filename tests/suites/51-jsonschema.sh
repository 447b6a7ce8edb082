#!/usr/bin/env bash
# JSON Schema -> lark on a MaskBench sample (every 4th file of the visible splits), checked at the language level:
# lmserve-jsonschema --check translates each emitted grammar to PCRE2 and matches every test
# instance (compact and 2-space indented). Fails on any invalid instance accepted, or a valid one
# rejected outside tests/schema/known-validation.txt. The engine-level run is 50-grammar.
set -eu
# The sample is committed (tests/data/README.md: source and licence); a missing one fails.
SAMPLE=tests/data/maskbench-sample.tar.xz
tmpd=$(mktemp -d)
out=$(mktemp)
trap 'rm -rf "$out" "$tmpd"' EXIT
tar -C "$tmpd" -xJf "$SAMPLE"
DATA=$tmpd/maskbench-sample/jsonschema
$MAKE --no-print-directory BUILD="$BUILD" "$BUILD/lmserve-jsonschema" >/dev/null
"$BUILD/lmserve-jsonschema" --check $(ls "$DATA"/*.json | LC_ALL=C sort) > "$out"
/usr/bin/python3 - "$out" tests/schema/known-validation.txt <<'PY'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
known = {l.split()[0] for l in open(sys.argv[2]) if l.strip() and not l.startswith('#')}
s = rows[-1]
bad = []
for r in rows[:-1]:
    f = os.path.basename(r.get('file', ''))
    if r.get('invalidation_error'): bad.append(f"{f} test {r['test']}: invalid instance accepted")
    if r.get('validation_error') and f not in known: bad.append(f"{f} test {r['test']}: valid instance rejected")
print(f"51-jsonschema: {s['files']} files, {s['compiled']} compiled, {s['pcre_fail']} too large for the "
      f"PCRE2 checker, {s['valid_tested']} valid / {s['invalid_tested']} invalid instances, "
      f"{s['validation_errors']} validation errors (known), {s['invalidation_errors']} invalidation errors")
if s['valid_tested'] < 1000 or s['invalid_tested'] < 1000: bad.append("too few instances tested")
for b in bad: print("FAIL", b)
sys.exit(1 if bad else 0)
PY
