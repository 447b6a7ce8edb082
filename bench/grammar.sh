#!/usr/bin/env bash
# Grammar engine benchmark + conformance on all of MaskBench (../shared/data/maskbench, relative
# to the repo root) with the Qwen3 vocabulary (151,669 tokens), one thread.
# Prints mask time per token (avg/p50/p99/max, thread CPU time) and compile time (p50/p99), then
# per split: files, compiled, rejected with a message, validation / invalidation errors, and the
# schemas llguidance compiles (maskbench-llguidance-expected.json) that we reject, by reason.
#   GRAMMAR_BENCH_EVERY=N   run every Nth file only (default 1 = all)
#   GRAMMAR_BENCH_OUT=FILE  keep the per-file JSON lines
#   MASKBENCH_DIR, MASKBENCH_EXPECTED  other locations of the data (a worktree elsewhere)
set -eu
DATA=${MASKBENCH_DIR:-../shared/data/maskbench}
EXPECTED=${MASKBENCH_EXPECTED:-../shared/data/maskbench-llguidance-expected.json}
every=${GRAMMAR_BENCH_EVERY:-1}
$MAKE --no-print-directory BUILD="$BUILD" "$BUILD/lmserve-maskbench" "$MODELDIR/tiny-q8_0.gguf" >/dev/null
out=${GRAMMAR_BENCH_OUT:-$(mktemp)}
ls "$DATA"/*.json | LC_ALL=C sort | awk -v n="$every" '(NR - 1) % n == 0' > "$out.files"
echo "grammar bench: $(wc -l < "$out.files") MaskBench files, vocabulary of $MODELDIR/tiny-q8_0.gguf (Qwen3)"
xargs -a "$out.files" "$BUILD/lmserve-maskbench" "$MODELDIR/tiny-q8_0.gguf" --quiet > "$out"
rm -f "$out.files"
/usr/bin/python3 - "$out" "$EXPECTED" <<'PY'
import json, re, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
# xargs may split the file list over several runs: one summary per run
files = [r for r in rows if 'summary' not in r]
summs = [r for r in rows if 'summary' in r]
exp = json.load(open(sys.argv[2]))
def split(f):
    m = re.match(r'^(.*?)(---|_\d+\.json$)', f)
    return m.group(1) if m else 'other'
masks = sum(s['masks'] for s in summs)
avg = sum(s['mask_us_avg'] * s['masks'] for s in summs) / max(masks, 1)
print(f"masks: {masks}  avg {avg:.1f} us  p50 {max(s['mask_us_p50'] for s in summs):.1f} us  "
      f"p99 {max(s['mask_us_p99'] for s in summs):.1f} us  max {max(s['mask_us_max'] for s in summs):.1f} us"
      + ("  (p50/p99: worst of %d runs)" % len(summs) if len(summs) > 1 else ""))
cus = sorted(r['compile_us'] for r in files if r['compiled'])
if cus:
    print(f"compile: p50 {cus[len(cus)//2]/1000:.2f} ms  p99 {cus[int(len(cus)*0.99)]/1000:.2f} ms  "
          f"max {cus[-1]/1000:.2f} ms")
by = collections.defaultdict(list)
for r in files: by[split(r['file'])].append(r)
print(f"{'split':16} {'files':>6} {'compiled':>8} {'rejected':>8} {'valid':>6} {'invalid':>7} "
      f"{'val.err':>7} {'inval.err':>9} {'mask avg us':>11}")
tot = collections.Counter()
for s in sorted(by):
    rs = by[s]
    c = collections.Counter()
    m_us = m_n = 0
    for r in rs:
        c['files'] += 1; c['compiled'] += r['compiled']; c['rejected'] += (not r['compiled'])
        c['valid'] += r['valid_tested']; c['invalid'] += r['invalid_tested']
        c['verr'] += r['validation_errors']; c['ierr'] += r['invalidation_errors']
        m_us += r['mask_us_avg'] * r['masks']; m_n += r['masks']
    tot.update(c)
    print(f"{s:16} {c['files']:6} {c['compiled']:8} {c['rejected']:8} {c['valid']:6} {c['invalid']:7} "
          f"{c['verr']:7} {c['ierr']:9} {m_us/max(m_n,1):11.1f}")
print(f"{'total':16} {tot['files']:6} {tot['compiled']:8} {tot['rejected']:8} {tot['valid']:6} "
      f"{tot['invalid']:7} {tot['verr']:7} {tot['ierr']:9}")
# compile outcomes against llguidance
ll_ok = {f for f, v in exp.items() if 'json_error' not in v}
ours = {r['file']: r for r in files}
we_reject = [f for f in ours if f in ll_ok and not ours[f]['compiled']]
we_accept = [f for f in ours if f in exp and 'json_error' in exp[f] and ours[f]['compiled']]
print(f"llguidance compiles {len([f for f in ours if f in ll_ok])} of these, rejects "
      f"{len([f for f in ours if f in exp and 'json_error' in exp[f]])}; we compile "
      f"{len(we_accept)} that llguidance rejects; we reject {len(we_reject)} that llguidance compiles:")
reasons = collections.Counter()
ex = {}
for f in we_reject:
    msg = ours[f]['error'] or ''
    key = re.sub(r'"[^"]*"', '"…"', re.sub(r'\d+', 'N', msg))[:110]
    reasons[key] += 1; ex.setdefault(key, f)
for k, n in reasons.most_common():
    print(f"  {n:4}  {k}   (e.g. {ex[k]})")
verr = [r['file'] for r in files if r['validation_errors']]
if verr: print("validation errors in:", " ".join(verr))
ierr = [r['file'] for r in files if r['invalidation_errors']]
if ierr: print("INVALIDATION errors in:", " ".join(ierr))
PY
[ -n "${GRAMMAR_BENCH_OUT:-}" ] || rm -f "$out"
