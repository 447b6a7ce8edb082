#!/usr/bin/env bash
# AVX2 port and inner-loop microbenchmark (issue 13, bench/README.md "Prefill on AVX2"): which int8
# GEMM instructions share pipes on this CPU, and cycles per 32 MACs of the engine's q8_0 small-m
# loop vs an 8-row interleaved (repacked) loop. Prints figures only; compiled outside the engine
# build (it needs no library). env: CC (cc), OUT (build dir for the binary, default $BUILD or build).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-${BUILD:-build}}
mkdir -p "$out"
"${CC:-cc}" -O2 -mavx2 -mfma -mf16c -o "$out/avx2-ports" "$here/avx2_ports.c"
grep -m1 'model name' /proc/cpuinfo; echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$out/avx2-ports"
