#!/usr/bin/python3
"""Compare two logit files (one value per line): prints max |diff|, max |ref|, cosine; exits 1 if
a given bound fails.  compare_logits.py ENGINE REF [--max-abs X] [--min-cos C] [--same-argmax]"""
import argparse
import sys

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("engine")
ap.add_argument("ref")
ap.add_argument("--max-abs", type=float)
ap.add_argument("--min-cos", type=float)
ap.add_argument("--same-argmax", action="store_true")
a = ap.parse_args()
x = np.loadtxt(a.engine, dtype=np.float64, ndmin=1)
y = np.loadtxt(a.ref, dtype=np.float64, ndmin=1)
if x.shape != y.shape or x.size == 0:
    print("shape mismatch: %s vs %s" % (x.shape, y.shape))
    sys.exit(1)
d = float(np.abs(x - y).max())
cos = float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))
ok = (a.max_abs is None or d < a.max_abs) and (a.min_cos is None or cos > a.min_cos) and \
    (not a.same_argmax or int(np.argmax(x)) == int(np.argmax(y)))
print("n=%d max|d|=%.3g max|ref|=%.3g cos=%.9f argmax %d/%d %s" %
      (x.size, d, np.abs(y).max(), cos, int(np.argmax(x)), int(np.argmax(y)), "ok" if ok else "FAIL"))
sys.exit(0 if ok else 1)
