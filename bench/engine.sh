#!/usr/bin/env bash
# Engine throughput (issue 2): lmserve-bench pp512 / tg128 on the qwen3-0.6b shape, 2 threads.
# If LLAMA_BENCH and/or IK_LLAMA_BENCH name peer llama-bench binaries (llama.cpp, ik_llama.cpp,
# built elsewhere: nothing here builds them), they run on the same file in the same run and the
# ratios ours/theirs are printed. A benchmark: it prints figures, it never fails on them.
#   env: BENCH_TYPES (default "q8_0"; also q4_k_m f16), THREADS (2), REPS (5),
#        LLAMA_ARGS / IK_LLAMA_ARGS: extra flags for the peers (e.g. IK_LLAMA_ARGS="-rtr 1")
set -eu
THREADS=${THREADS:-2}
REPS=${REPS:-5}
TYPES=${BENCH_TYPES:-q8_0}
# "pp512" -> median t/s from a llama-bench style markdown table on stdin
rate() { awk -F'|' -v t="$1" '$0 ~ "\\| *"t" *\\|" { split($(NF-1), a, " "); print a[1] }' | tail -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "n/a" }'; }
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cpus, threads $THREADS"
for ty in $TYPES; do
  f="$MODELDIR/qwen3_0.6b-$ty.gguf"
  $MAKE --no-print-directory BUILD="$BUILD" "$f" >/dev/null
  echo "=== $f"
  ours=$("$BUILD/lmserve-bench" "$f" -t "$THREADS" -p 512 -n 128 -r "$REPS")
  echo "lmserve:"; echo "$ours"
  opp=$(echo "$ours" | rate pp512); otg=$(echo "$ours" | rate tg128)
  for peer in LLAMA_BENCH IK_LLAMA_BENCH; do
    bin=${!peer:-}
    [ -n "$bin" ] || continue
    args_var=${peer%_BENCH}_ARGS; args=${!args_var:-}
    out=$("$bin" -m "$f" -t "$THREADS" -p 512 -n 128 -r "$REPS" -o md $args 2>/dev/null) || { echo "$peer failed"; continue; }
    echo "$peer ($bin $args):"; echo "$out" | grep '|'
    ppp=$(echo "$out" | rate pp512); ptg=$(echo "$out" | rate tg128)
    echo "ratio lmserve/$peer: pp512 $(ratio "$opp" "$ppp")  tg128 $(ratio "$otg" "$ptg")"
  done
done
