#!/usr/bin/env bash
# Low-bit types (issue 15 item 3): lmserve-bench pp512 / tg128 on the qwen3-0.6b shape written with
# `lmserve-mkmodel --type tq1_0|tq2_0|q1_0|q2_0` (every projection in that type, the tied embedding
# / output Q8_0; random weights, so only speed means anything), with the read-bandwidth ceiling
# before and after and decode's fraction of it. If LLAMA_BENCH names a llama-bench binary (built
# elsewhere; nothing here builds it), it runs on the same file in the same run and the ratios are
# printed. A benchmark: it prints figures, it never fails on them.
#   env: BENCH_TYPES (tq2_0 tq1_0 q2_0 q1_0), THREADS (2), REPS (3), SHAPE (qwen3_0.6b)
set -eu
THREADS=${THREADS:-2}
REPS=${REPS:-3}
TYPES=${BENCH_TYPES:-tq2_0 tq1_0 q2_0 q1_0}
SHAPE=${SHAPE:-qwen3_0.6b}
. "$(dirname "$0")/lib.sh"
machine_line
bw=$(bandwidth)
echo "read bandwidth ceiling (plain loads, $THREADS threads): $bw GB/s"
for ty in $TYPES; do
  f="$MODELDIR/$SHAPE-$ty.gguf"
  pp_tg "$f" "$bw"
done
echo "read bandwidth after: $(bandwidth) GB/s, load average $(cut -d' ' -f1-3 /proc/loadavg)"
