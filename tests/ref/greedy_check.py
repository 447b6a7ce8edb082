#!/usr/bin/env python3
"""greedy_check.py SCORES [--tol T] [--max-differ N]: judges an engine's greedy continuation by the
reference's scores of it (REF --score K: one "ARGMAX CHOSEN MAX" line per step, each on the
continuation's own prefix). Why not "the two greedy sequences are identical": with activations
rounded to int8 per 32 values, an input within float rounding of a .5 step rounds one way in the
engine (f32) and the other in the reference (f64); on these random models one such flip moves the
logits by up to ~0.25, and where two tokens are that close the two greedy runs part and never meet
again (how often depends on the CPU's kernels: an AVX-512 machine met it at step 6 of gemma4-tiny
Q8_0, AVX2 machines did not). Scored on its own prefix each step is judged alone: the engine's token
must be the reference's argmax, or within TOL of its max logit (a near-tie that a flip can
decide), and at most N steps may be such near-ties. A wrong decode path (a stale KV row, a wrong
position) picks tokens far below the reference's max (logits here span about +-11) and fails."""
import argparse
import sys

ap = argparse.ArgumentParser()
ap.add_argument("scores")
ap.add_argument("--tol", type=float, default=0.3)
ap.add_argument("--max-differ", type=int, default=4)
a = ap.parse_args()
rows = [l.split() for l in open(a.scores) if l.strip()]
differ, worst, bad = 0, 0.0, []
for i, (am, chosen, mx) in enumerate(rows):
    gap = float(mx) - float(chosen)
    worst = max(worst, gap)
    if gap > 0:
        differ += 1
    if gap > a.tol:
        bad.append("step %d: %.3g below the reference's max (its argmax %s)" % (i, gap, am))
ok = not bad and differ <= a.max_differ
print("%d steps, %d not the reference's argmax (at most %d), largest gap %.3g (at most %g) %s"
      % (len(rows), differ, a.max_differ, worst, a.tol, "ok" if ok else "FAIL"))
for b in bad:
    print("  " + b)
sys.exit(0 if ok and rows else 1)
