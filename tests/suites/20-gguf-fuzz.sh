#!/usr/bin/env bash
# GGUF reader fuzzing (libFuzzer + ASan + UBSan) for a short budget, seeded with miniatures of
# generated models (tests/fuzz/gguf_seeds.py). Longer on demand:
#   GGUF_FUZZ_SECONDS=3600 make test     (or run this script with BUILD/MODELDIR/MAKE set)
# The working corpus persists in $BUILD/fuzz/gguf-corpus; a crash leaves its input in
# $BUILD/fuzz/ (crash-*, timeout-*, oom-*) and fails the suite.
set -eu
secs=${GGUF_FUZZ_SECONDS:-20}
$MAKE --no-print-directory BUILD="$BUILD" "$BUILD/fuzz-gguf" >/dev/null
$MAKE --no-print-directory BUILD="$BUILD" "$MODELDIR/tiny-q4_k_m.gguf" "$MODELDIR/moe_tiny-q8_0.gguf" >/dev/null
work="$BUILD/fuzz"
seeds="$work/gguf-seeds"
corpus="$work/gguf-corpus"
rm -rf "$seeds"
mkdir -p "$seeds" "$corpus"
/usr/bin/python3 tests/fuzz/gguf_seeds.py "$seeds" "$MODELDIR/tiny-q4_k_m.gguf" "$MODELDIR/moe_tiny-q8_0.gguf"
echo "fuzz-gguf: $(ls "$seeds" | wc -l) seeds, $(ls "$corpus" | wc -l) corpus entries, ${secs}s"
log="$work/fuzz-gguf.log"
if ! "$BUILD/fuzz-gguf" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
     -print_final_stats=1 -artifact_prefix="$work/" "$corpus" "$seeds" >"$log" 2>&1; then
  tail -n 60 "$log"
  echo "fuzz-gguf: FAILED (input saved under $work/)"
  exit 1
fi
grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' "$log" | tr '\n' ' '
echo
echo "fuzz-gguf: clean"
