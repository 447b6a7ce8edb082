#!/usr/bin/env bash
# Worker reply path fuzzing (libFuzzer + ASan + UBSan): the emitter, think routing, stop strings
# and the tool-call scanner over arbitrary token-byte sequences, with split invariance checked
# (tests/fuzz/fuzz_worker.c). Seeds: the committed tests/fuzz/worker-seeds (every past finding is
# one of them, and a unit test). Short here; `make fuzz` runs it for WORKER_FUZZ_SECONDS (600).
# A failure leaves its input in $BUILD/fuzz/ and fails the suite.
set -eu
secs=${WORKER_FUZZ_SECONDS:-15}
$MAKE --no-print-directory BUILD="$BUILD" "$BUILD/fuzz-worker" >/dev/null
work="$BUILD/fuzz"
corpus="$work/worker-corpus"
mkdir -p "$corpus"
log="$work/fuzz-worker.log"
# every committed seed first, one by one (regressions), then the timed run
"$BUILD/fuzz-worker" -runs=0 tests/fuzz/worker-seeds >"$log" 2>&1 || { tail -n 40 "$log"; echo "fuzz-worker: a seed FAILED"; exit 1; }
if ! "$BUILD/fuzz-worker" -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
     -print_final_stats=1 -artifact_prefix="$work/" "$corpus" tests/fuzz/worker-seeds >"$log" 2>&1; then
  tail -n 60 "$log"
  echo "fuzz-worker: FAILED (input saved under $work/)"
  exit 1
fi
grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' "$log" | tr '\n' ' '
echo
echo "fuzz-worker: clean ($(ls tests/fuzz/worker-seeds | wc -l) seeds)"
