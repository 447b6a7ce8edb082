#!/usr/bin/env bash
# Request decoder/encoder fuzzing (libFuzzer + ASan + UBSan) for a short budget, seeded with one
# rich body per dialect (tests/fuzz/request_seeds.py). Longer on demand: API_FUZZ_SECONDS=600.
# A crash leaves its input in $BUILD/fuzz/ (crash-*, leak-*, timeout-*) and fails the suite.
set -eu
secs=${API_FUZZ_SECONDS:-20}
$MAKE --no-print-directory BUILD="$BUILD" "$BUILD/fuzz-request" >/dev/null
work="$BUILD/fuzz"
seeds="$work/request-seeds"
corpus="$work/request-corpus"
rm -rf "$seeds"
mkdir -p "$seeds" "$corpus"
/usr/bin/python3 tests/fuzz/request_seeds.py "$seeds"
log="$work/fuzz-request.log"
if ! "$BUILD/fuzz-request" -max_total_time="$secs" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
     -print_final_stats=1 -artifact_prefix="$work/" "$corpus" "$seeds" >"$log" 2>&1; then
  tail -n 60 "$log"
  echo "fuzz-request: FAILED (input saved under $work/)"
  exit 1
fi
grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' "$log" | tr '\n' ' '
echo
echo "fuzz-request: clean"
