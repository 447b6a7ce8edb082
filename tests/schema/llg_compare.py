#!/usr/bin/python3
"""Compare compile outcomes of `lmserve-jsonschema --stats` (JSON lines on stdin) with
maskbench-llguidance-expected.json (argv[1]); prints a markdown summary for docs/jsonschema.md."""
import collections, json, os, sys

exp = json.load(open(sys.argv[1]))
rows, we_only, tot = [], [], collections.Counter()
for line in sys.stdin:
    d = json.loads(line)
    if 'summary' in d:
        continue
    f = os.path.basename(d['file'])
    e = exp.get(f, {})
    lok = 'json_error' not in e
    tot['all'] += 1
    tot['we'] += d['compiled']
    tot['llg'] += lok
    if lok and not d['compiled']:
        rows.append((f, d['error']))
    if d['compiled'] and not lok:
        we_only.append((f, e['json_error']))
esc = lambda s, n: s.replace('|', '\\|').replace('\n', ' ')[:n]
print(f"Compiled {tot['we']} of {tot['all']} schemas (llguidance: {tot['llg']}). "
      f"llguidance compiles and we reject: {len(rows)}; we compile and llguidance rejects: {len(we_only)}.\n")
reasons = collections.Counter(esc(e, 60) for _, e in rows)
print("Reasons (first 60 characters of our message), most frequent first:\n")
print("| count | reason |\n|---|---|")
for r, n in reasons.most_common():
    print(f"| {n} | {r} |")
print("\nEvery schema llguidance compiles that we reject:\n")
print("| file | our error |\n|---|---|")
for f, e in sorted(rows):
    print(f"| {f} | {esc(e, 200)} |")
print("\nSchemas we compile that llguidance rejects (its message):\n")
print("| file | llguidance error |\n|---|---|")
for f, e in sorted(we_only):
    print(f"| {f} | {esc(e, 150)} |")
