#!/usr/bin/env bash
# safetensors reader fuzzing (libFuzzer + ASan + UBSan) for a short budget, seeded with small
# nanochat-shaped files and broken variants (tests/fuzz/safetensors_seeds.py). Longer on demand:
#   SAFETENSORS_FUZZ_SECONDS=3600 make test     (or run this script with BUILD/MAKE set)
# The working corpus persists in $BUILD/fuzz/safetensors-corpus; a crash leaves its input in
# $BUILD/fuzz/ (crash-*, timeout-*, oom-*) and fails the suite.
set -eu
secs=${SAFETENSORS_FUZZ_SECONDS:-15}
. tests/fuzz/lib.sh
fuzz_prepare fuzz-safetensors
/usr/bin/python3 tests/fuzz/safetensors_seeds.py "$seeds"
echo "fuzz-safetensors: $(ls "$seeds" | wc -l) seeds, $(ls "$corpus" | wc -l) corpus entries, ${secs}s"
fuzz_run fuzz-safetensors "$secs" 16384 "$corpus" "$seeds"
echo "fuzz-safetensors: clean"
