#!/usr/bin/env bash
# Interleaved rounds (issue 13): on a machine whose read bandwidth swings within minutes, one
# long run per engine compares different moments. This runs, per type and round, lmserve-bench
# pp512 + tg128, then each peer's llama-bench on the same file, then the read ceiling — so the
# engines of one round ran within about a minute of each other. A benchmark: it prints figures,
# it never fails on them; nothing here builds the peers.
#   env: BUILD (build), MODELDIR (build/models), MAKE (make), BENCH_TYPES ("q8_0 q4_k_m f16"),
#        ROUNDS (2), REPS (3), THREADS (2), LLAMA_BENCH / IK_LLAMA_BENCH (peer llama-bench
#        binaries; optional), IK_LLAMA_ARGS (default "-rtr 1")
set -eu
BUILD=${BUILD:-build}; MODELDIR=${MODELDIR:-build/models}; MAKE=${MAKE:-make}
THREADS=${THREADS:-2}; REPS=${REPS:-3}; ROUNDS=${ROUNDS:-2}
IK_LLAMA_ARGS=${IK_LLAMA_ARGS--rtr 1}
rates() { grep -E '\| *(pp512|tg128) ' | awk -F'|' '{ printf "%s %s  ", $(NF-2), $(NF-1) }'; echo; }
ceiling() { "$BUILD/lmserve-kbench" --bandwidth -t "$THREADS" | awk '/plain loads/ { print $(NF-4) }'; }
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), threads $THREADS, ceiling $(ceiling) GB/s"
"$BUILD/lmserve-kbench" --peak -t "$THREADS" # prefill's ceiling: f32 FMA (float types), int8 dots (quants)
for ty in ${BENCH_TYPES:-q8_0 q4_k_m f16}; do
  f="$MODELDIR/qwen3_0.6b-$ty.gguf"
  $MAKE --no-print-directory BUILD="$BUILD" "$f" >/dev/null
  for r in $(seq "$ROUNDS"); do
    echo "== $ty round $r"
    echo -n "lmserve:    "; "$BUILD/lmserve-bench" "$f" -t "$THREADS" -p 512 -n 128 -r "$REPS" 2>/dev/null | rates
    if [ -n "${LLAMA_BENCH:-}" ]; then
      echo -n "llama.cpp:  "; "$LLAMA_BENCH" -m "$f" -t "$THREADS" -p 512 -n 128 -r "$REPS" -o md 2>/dev/null | rates
    fi
    if [ -n "${IK_LLAMA_BENCH:-}" ]; then
      echo -n "ik ($IK_LLAMA_ARGS): "; "$IK_LLAMA_BENCH" -m "$f" -t "$THREADS" -p 512 -n 128 -r "$REPS" -o md $IK_LLAMA_ARGS 2>/dev/null | rates
    fi
    echo "ceiling after the round: $(ceiling) GB/s"
  done
done
