#!/usr/bin/env bash
# Request decoder/encoder fuzzing (libFuzzer + ASan + UBSan) for a short budget, seeded with one
# rich body per dialect (tests/fuzz/request_seeds.py). Longer on demand: API_FUZZ_SECONDS=600.
# A crash leaves its input in $BUILD/fuzz/ (crash-*, leak-*, timeout-*) and fails the suite.
set -eu
secs=${API_FUZZ_SECONDS:-20}
. tests/fuzz/lib.sh
fuzz_prepare fuzz-request
/usr/bin/python3 tests/fuzz/request_seeds.py "$seeds"
fuzz_run fuzz-request "$secs" 16384 "$corpus" "$seeds"
echo "fuzz-request: clean"
