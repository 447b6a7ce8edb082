#!/usr/bin/env bash
# Gemma 4 engine throughput (issue 14 step 2): lmserve-bench pp512 / tg128 on the gemma4-small
# shape (12 layers, 5 SWA : 1 global, window 512, n_embd 1024, ff 4096, vocab 262,145 tied; random
# weights, so only speed means anything), with the read-bandwidth ceiling before and after and
# decode's fraction of it. If LLAMA_BENCH names a llama-bench binary (built elsewhere; nothing here
# builds it), it runs on the same file in the same run and the ratios are printed. A benchmark: it
# prints figures, it never fails on them.   env: BENCH_TYPES (q8_0), THREADS (2), REPS (3)
set -eu
THREADS=${THREADS:-2}
REPS=${REPS:-3}
TYPES=${BENCH_TYPES:-q8_0}
. "$(dirname "$0")/lib.sh"
machine_line
bw=$(bandwidth)
echo "read bandwidth ceiling (plain loads, $THREADS threads): $bw GB/s"
for ty in $TYPES; do
  f="$MODELDIR/gemma4_small-$ty.gguf"
  pp_tg "$f" "$bw"
done
echo "read bandwidth after: $(bandwidth) GB/s, load average $(cut -d' ' -f1-3 /proc/loadavg)"
