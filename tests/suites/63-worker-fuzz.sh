#!/usr/bin/env bash
# Worker reply path fuzzing (libFuzzer + ASan + UBSan): the emitter, think routing, stop strings
# and the tool-call scanner over arbitrary token-byte sequences, with split invariance checked
# (tests/fuzz/fuzz_worker.c). Seeds: the committed tests/fuzz/worker-seeds (every past finding is
# one of them, and a unit test). Short here; `make fuzz` runs it for WORKER_FUZZ_SECONDS (600).
# A failure leaves its input in $BUILD/fuzz/ and fails the suite.
set -eu
secs=${WORKER_FUZZ_SECONDS:-15}
. tests/fuzz/lib.sh
fuzz_prepare fuzz-worker # (its seeds are committed: tests/fuzz/worker-seeds)
# every committed seed first, one by one (regressions), then the timed run
"$BUILD/fuzz-worker" -runs=0 tests/fuzz/worker-seeds >"$log" 2>&1 || { tail -n 40 "$log"; echo "fuzz-worker: a seed FAILED"; exit 1; }
fuzz_run fuzz-worker "$secs" 4096 "$corpus" tests/fuzz/worker-seeds
echo "fuzz-worker: clean ($(ls tests/fuzz/worker-seeds | wc -l) seeds)"
