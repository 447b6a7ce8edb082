#!/usr/bin/env bash
# Grammar compiler fuzzing (regex, lark, JSON Schema; libFuzzer + ASan + UBSan) under small
# budgets for a short time, seeded by tests/fuzz/grammar_seeds.py. Longer: `make fuzz` (600 s) or
# GRAMMAR_FUZZ_SECONDS=N with this script. The corpus persists in $BUILD/fuzz/grammar-corpus; a
# crash, leak, timeout or OOM leaves its input in $BUILD/fuzz/ and fails the suite (then add it
# to tests/fuzz/grammar-regressions/, which every run replays first).
set -eu
secs=${GRAMMAR_FUZZ_SECONDS:-20}
$MAKE --no-print-directory BUILD="$BUILD" "$BUILD/fuzz-grammar" >/dev/null
work="$BUILD/fuzz"
seeds="$work/grammar-seeds"
corpus="$work/grammar-corpus"
rm -rf "$seeds"
mkdir -p "$seeds" "$corpus"
/usr/bin/python3 tests/fuzz/grammar_seeds.py "$seeds"
log="$work/fuzz-grammar.log"
# every saved regression input first, each must run clean
if ls tests/fuzz/grammar-regressions/* >/dev/null 2>&1; then
  if ! "$BUILD/fuzz-grammar" -timeout=10 -rss_limit_mb=2048 tests/fuzz/grammar-regressions/* >"$log" 2>&1; then
    tail -n 60 "$log"; echo "fuzz-grammar: a regression input fails"; exit 1
  fi
fi
if ! "$BUILD/fuzz-grammar" -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
     -print_final_stats=1 -artifact_prefix="$work/" "$corpus" "$seeds" >"$log" 2>&1; then
  tail -n 60 "$log"
  echo "fuzz-grammar: FAILED (input saved under $work/)"
  exit 1
fi
grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' "$log" | tr '\n' ' '
echo
echo "fuzz-grammar: clean"
