#!/usr/bin/env bash
# Grammar compiler fuzzing (regex, lark, JSON Schema; libFuzzer + ASan + UBSan) under small
# budgets for a short time, seeded by tests/fuzz/grammar_seeds.py. Longer: `make fuzz` (600 s) or
# GRAMMAR_FUZZ_SECONDS=N with this script. The corpus persists in $BUILD/fuzz/grammar-corpus; a
# crash, leak, timeout or OOM leaves its input in $BUILD/fuzz/ and fails the suite (then add it
# to tests/fuzz/grammar-regressions/, which every run replays first).
set -eu
secs=${GRAMMAR_FUZZ_SECONDS:-20}
. tests/fuzz/lib.sh
fuzz_prepare fuzz-grammar
/usr/bin/python3 tests/fuzz/grammar_seeds.py "$seeds"
# every saved regression input first, each must run clean
if ls tests/fuzz/grammar-regressions/* >/dev/null 2>&1; then
  if ! "$BUILD/fuzz-grammar" -timeout=10 -rss_limit_mb=2048 tests/fuzz/grammar-regressions/* >"$log" 2>&1; then
    tail -n 60 "$log"; echo "fuzz-grammar: a regression input fails"; exit 1
  fi
fi
fuzz_run fuzz-grammar "$secs" 4096 "$corpus" "$seeds"
echo "fuzz-grammar: clean"
