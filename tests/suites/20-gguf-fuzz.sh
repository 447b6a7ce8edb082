#!/usr/bin/env bash
# GGUF reader fuzzing (libFuzzer + ASan + UBSan) for a short budget, seeded with miniatures of
# generated models (tests/fuzz/gguf_seeds.py). Longer on demand:
#   GGUF_FUZZ_SECONDS=3600 make test     (or run this script with BUILD/MODELDIR/MAKE set)
# The working corpus persists in $BUILD/fuzz/gguf-corpus; a crash leaves its input in
# $BUILD/fuzz/ (crash-*, timeout-*, oom-*) and fails the suite.
set -eu
secs=${GGUF_FUZZ_SECONDS:-20}
$MAKE --no-print-directory BUILD="$BUILD" "$MODELDIR/tiny-q4_k_m.gguf" "$MODELDIR/moe_tiny-q8_0.gguf" >/dev/null
. tests/fuzz/lib.sh
fuzz_prepare fuzz-gguf
/usr/bin/python3 tests/fuzz/gguf_seeds.py "$seeds" "$MODELDIR/tiny-q4_k_m.gguf" "$MODELDIR/moe_tiny-q8_0.gguf"
echo "fuzz-gguf: $(ls "$seeds" | wc -l) seeds, $(ls "$corpus" | wc -l) corpus entries, ${secs}s"
fuzz_run fuzz-gguf "$secs" 65536 "$corpus" "$seeds"
echo "fuzz-gguf: clean"
