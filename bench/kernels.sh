#!/usr/bin/env bash
# Kernel microbenchmark: the matmuls of a Qwen3-0.6B forward pass (decode GB/s, prefill GOPS).
# Figures only, nothing asserted. Env: BUILD (default build), THREADS (default: physical cores),
# KBENCH_TYPES (default "q8_0 q4_K f16"), KBENCH_PP (default 512).
set -eu
BUILD=${BUILD:-build}
BIN="$BUILD/lmserve-kbench"
[ -x "$BIN" ] || { echo "missing $BIN (run make)"; exit 1; }
ARGS=()
[ -n "${THREADS:-}" ] && ARGS+=(-t "$THREADS")
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs, load: $(cut -d' ' -f1-3 /proc/loadavg)"
for t in ${KBENCH_TYPES:-q8_0 q4_K f16}; do
  "$BIN" "${ARGS[@]}" --type "$t" --pp "${KBENCH_PP:-512}" --reps 3
done
# single-matrix kernel rates (L2-resident GEMV, DRAM GEMV, 1024x1024 GEMM), one thread
for t in ${KBENCH_TYPES:-q8_0 q4_K f16} q6_K; do
  "$BIN" -t 1 --type "$t" --kernels --reps 3
done
"$BIN" -t 1 --type q8_0 --kernels --reps 3 --no-amx
