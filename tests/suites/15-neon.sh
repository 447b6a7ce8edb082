#!/usr/bin/env bash
# NEON vec_dot kernels (src/engine/kernels/quant_neon.c) on this x86-64 machine: cross-built for arm64
# (gcc-aarch64-linux-gnu, static) and run under qemu-aarch64 (qemu-user). The program compares
# every NEON dot with the scalar reference and a double-precision dot (tests/neon/test_neon_dots.c).
# Only these kernels run on arm64 here, not the whole engine.
set -eu
$MAKE --no-print-directory BUILD="$BUILD" "$BUILD/neon/test-neon-dots" >/dev/null
command -v qemu-aarch64 >/dev/null || { echo "neon: qemu-aarch64 not found (Debian: qemu-user)"; exit 1; }
# twice: qemu's default CPU ("max", every extension) and a Cortex-A53 (baseline armv8-a, no
# dotprod): an instruction beyond the baseline would die with SIGILL there
qemu-aarch64 "$BUILD/neon/test-neon-dots"
qemu-aarch64 -cpu cortex-a53 "$BUILD/neon/test-neon-dots"
