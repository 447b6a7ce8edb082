#!/usr/bin/env bash
# End-to-end: the real lmserve binary on a generated tiny qwen3 model, driven by the official
# openai and @anthropic-ai/sdk packages and raw HTTP under node --test (tests/e2e/*.test.mjs).
set -eu
$MAKE --no-print-directory BUILD="$BUILD" "$MODELDIR/tiny-q8_0.gguf" "$MODELDIR/small-q8_0.gguf" "$MODELDIR/qwen35_tiny-q8_0.gguf" "$MODELDIR/gemma4_tiny-q8_0.gguf" >/dev/null
export LMSERVE_BIN="$BUILD/lmserve" LMSERVE_MODEL="$MODELDIR/tiny-q8_0.gguf" LMSERVE_MODEL_SMALL="$MODELDIR/small-q8_0.gguf"
export LMSERVE_MODEL_QWEN35="$MODELDIR/qwen35_tiny-q8_0.gguf" # tests/e2e/qwen35.test.mjs
export LMSERVE_MODEL_GEMMA4="$MODELDIR/gemma4_tiny-q8_0.gguf" # tests/e2e/gemma4.test.mjs
# one file at a time: the machine has 2 cores and the concurrency tests count on the worker
node --test --test-concurrency=1 tests/e2e/
# The request-safety cases (and every empty-reply path) again against an ASan + UBSan build of the server (a crash, a leak at
# exit or UB fails the exit-code checks of the tests).
$MAKE --no-print-directory BUILD="$ASAN_BUILD" OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" "$ASAN_BUILD/lmserve" >/dev/null
LMSERVE_BIN="$ASAN_BUILD/lmserve" ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  node --test --test-concurrency=1 tests/e2e/errors.test.mjs tests/e2e/connections.test.mjs tests/e2e/shutdown.test.mjs tests/e2e/empty-reply.test.mjs
