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
rate() { awk -F'|' -v t="$1" 'NF >= 4 { x = $(NF-2); gsub(/^ +| +$/, "", x); if (x == t) { split($(NF-1), a, " "); print a[1] } }' | tail -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "n/a" }'; }
bandwidth() { "$BUILD/lmserve-kbench" --bandwidth -t "$THREADS" | awk '/plain loads/ { print $(NF-4) }'; }
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cpus, threads $THREADS, load average $(cut -d' ' -f1-3 /proc/loadavg)"
bw=$(bandwidth)
echo "read bandwidth ceiling (plain loads, $THREADS threads): $bw GB/s"
for ty in $TYPES; do
  f="$MODELDIR/$SHAPE-$ty.gguf"
  $MAKE --no-print-directory BUILD="$BUILD" "$f" >/dev/null
  bytes=$(stat -c %s "$f")
  echo "=== $f ($bytes bytes)"
  ours=$("$BUILD/lmserve-bench" "$f" -t "$THREADS" -p 512 -n 128 -r "$REPS")
  echo "lmserve:"; echo "$ours"
  # decode reads every weight byte (the tied output projection reads the whole embedding table)
  otg=$(echo "$ours" | rate tg128)
  awk -v t="$otg" -v b="$bytes" -v bw="$bw" 'BEGIN { if (t > 0 && bw > 0) printf "lmserve decode reads %.2f GB/s of weights = %.0f %% of the %.2f GB/s ceiling\n", t * b / 1e9, 100 * t * b / 1e9 / bw, bw }'
  if [ -n "${LLAMA_BENCH:-}" ]; then
    out=$("$LLAMA_BENCH" -m "$f" -t "$THREADS" -p 512 -n 128 -r "$REPS" -o md 2>/dev/null) || out="| llama-bench failed |"
    echo "llama.cpp ($LLAMA_BENCH):"; echo "$out" | grep '|'
    ptg=$(echo "$out" | rate tg128)
    echo "ratio lmserve/llama.cpp:  pp512 $(ratio "$(echo "$ours" | rate pp512)" "$(echo "$out" | rate pp512)")  tg128 $(ratio "$otg" "$ptg")"
    awk -v t="$ptg" -v b="$bytes" -v bw="$bw" 'BEGIN { if (t > 0 && bw > 0) printf "llama.cpp decode reads %.2f GB/s = %.0f %% of the ceiling\n", t * b / 1e9, 100 * t * b / 1e9 / bw }'
  fi
done
echo "read bandwidth after: $(bandwidth) GB/s, load average $(cut -d' ' -f1-3 /proc/loadavg)"
