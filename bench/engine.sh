#!/usr/bin/env bash
# Engine throughput (issues 2, 13): lmserve-bench pp512 / tg128 and tg64 at depth on the qwen3-0.6b
# shape, 2 threads, plus the machine's read-bandwidth ceiling and decode's fraction of it.
# (ik_llama.cpp's llama-bench has no -d: its -gp DEPTH,64 is the same measurement, tg64 after a
# DEPTH-token prompt, and is used when -d fails.)
# If LLAMA_BENCH and/or IK_LLAMA_BENCH name peer llama-bench binaries (llama.cpp, ik_llama.cpp,
# built elsewhere: nothing here builds them), they run on the same file in the same run and the
# ratios ours/theirs are printed. A benchmark: it prints figures, it never fails on them.
#   env: BENCH_TYPES (default "q8_0"; also q4_k_m f16), THREADS (2), REPS (5), SHAPE (qwen3_0.6b),
#        DEPTHS (default "4096 8192"; "" skips the depth tests), DREPS (2: repeats at depth),
#        LLAMA_ARGS / IK_LLAMA_ARGS: extra flags for the peers (e.g. IK_LLAMA_ARGS="-rtr 1"),
#        MOE_TYPES (default ""; e.g. "q8_0"): also the moe-bench shape (qwen3moe, 64 experts, top-8)
#        with the experts resident and with --experts borrow: tok/s vs weight bytes read per token
# lmserve-bench prints, after its table, per token: wall ms, CPU user + sys ms (all threads: the
# load-robust figure on a shared machine) and the weight bytes its matmuls read.
# The machine may be shared with other jobs: compare only figures of one run, and read the
# bandwidth lines printed before and after.
set -eu
THREADS=${THREADS:-2}
REPS=${REPS:-5}
DREPS=${DREPS:-2}
TYPES=${BENCH_TYPES:-q8_0}
DEPTHS=${DEPTHS-4096 8192}
# "pp512" / "tg64 @ d4096" -> median t/s from a llama-bench style markdown table on stdin
rate() { awk -F'|' -v t="$1" 'NF >= 4 { x = $(NF-2); gsub(/^ +| +$/, "", x); if (x == t) { split($(NF-1), a, " "); print a[1] } }' | tail -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "n/a" }'; }
bandwidth() { "$BUILD/lmserve-kbench" --bandwidth -t "$THREADS" | awk '/plain loads/ { print $(NF-4) }'; }
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cpus, threads $THREADS, load average $(cut -d' ' -f1-3 /proc/loadavg)"
bw=$(bandwidth)
echo "read bandwidth ceiling (plain loads, $THREADS threads): $bw GB/s"
"$BUILD/lmserve-kbench" --peak -t "$THREADS" # prefill's ceiling (lmserve-bench prints its GFLOP/s)
for ty in $TYPES; do
  f="$MODELDIR/${SHAPE:-qwen3_0.6b}-$ty.gguf" # SHAPE: another generated shape (e.g. qwen35_0.8b)
  $MAKE --no-print-directory BUILD="$BUILD" "$f" >/dev/null
  bytes=$(stat -c %s "$f")
  echo "=== $f ($bytes bytes)"
  tests="pp512 tg128"
  ours=$("$BUILD/lmserve-bench" "$f" -t "$THREADS" -p 512 -n 128 -r "$REPS")
  for d in $DEPTHS; do
    ours="$ours
$("$BUILD/lmserve-bench" "$f" -t "$THREADS" -p 0 -n 64 -d "$d" -r "$DREPS" | grep '@')"
    tests="$tests tg64 @ d$d"
  done
  echo "lmserve:"; echo "$ours"
  otg=$(echo "$ours" | rate tg128)
  awk -v t="$otg" -v b="$bytes" -v bw="$bw" 'BEGIN { if (t > 0 && bw > 0) printf "lmserve decode reads %.2f GB/s of weights = %.0f %% of the %.2f GB/s ceiling\n", t * b / 1e9, 100 * t * b / 1e9 / bw, bw }'
  for peer in LLAMA_BENCH IK_LLAMA_BENCH; do
    bin=${!peer:-}
    [ -n "$bin" ] || continue
    args_var=${peer%_BENCH}_ARGS; args=${!args_var:-}
    out=$("$bin" -m "$f" -t "$THREADS" -p 512 -n 128 -r "$REPS" -o md $args 2>/dev/null) || { echo "$peer failed"; continue; }
    for d in $DEPTHS; do
      out="$out
$("$bin" -m "$f" -t "$THREADS" -p 0 -n 64 -d "$d" -r "$DREPS" -o md $args 2>/dev/null | grep '@' ||
  "$bin" -m "$f" -t "$THREADS" -p 0 -n 0 -gp "$d,64" -r "$DREPS" -o md $args 2>/dev/null | grep '@' | sed "s/tg64@pp$d/tg64 @ d$d/" ||
  echo "| $peer -d $d failed |")"
    done
    echo "$peer ($bin $args):"; echo "$out" | grep '|'
    line="ratio lmserve/$peer:"
    for t in pp512 tg128 $(for d in $DEPTHS; do echo "tg64@d$d"; done); do
      tn=${t/@/ @ }
      line="$line  $tn $(ratio "$(echo "$ours" | rate "$tn")" "$(echo "$out" | rate "$tn")")"
    done
    echo "$line"
    ptg=$(echo "$out" | rate tg128)
    awk -v t="$ptg" -v b="$bytes" -v bw="$bw" -v p="$peer" 'BEGIN { if (t > 0 && bw > 0) printf "%s decode reads %.2f GB/s = %.0f %% of the ceiling\n", p, t * b / 1e9, 100 * t * b / 1e9 / bw }'
  done
done
for ty in ${MOE_TYPES:-}; do
  f="$MODELDIR/moe_bench-$ty.gguf"
  $MAKE --no-print-directory BUILD="$BUILD" "$f" >/dev/null
  echo "=== $f ($(stat -c %s "$f") bytes; MoE: only the routed experts' slices are read)"
  for mode in resident borrow; do
    echo "lmserve, experts $mode:"
    "$BUILD/lmserve-bench" "$f" -t "$THREADS" -p 64 -n 32 -r "$DREPS" --experts "$mode"
  done
  if [ -n "${LLAMA_BENCH:-}" ]; then
    echo "LLAMA_BENCH:"; "$LLAMA_BENCH" -m "$f" -t "$THREADS" -p 64 -n 32 -r "$DREPS" -o md ${LLAMA_ARGS:-} 2>/dev/null | grep '|' || echo "LLAMA_BENCH failed"
  fi
done
echo "read bandwidth after: $(bandwidth) GB/s, load average $(cut -d' ' -f1-3 /proc/loadavg)"
