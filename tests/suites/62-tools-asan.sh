#!/usr/bin/env bash
# Function calling under ASan + UBSan: the tool e2e cases (reply scanner, the three encoders'
# call output, forced tool_choice grammars, tool history decoding) against a sanitized server; a
# crash, UB or a leak at exit fails the tests' exit-code checks. The 20k-token prompt case runs
# only in 60-e2e (release build). Unit tests of the scanner run under ASan in 10-unit.
set -eu
$MAKE --no-print-directory BUILD="$BUILD" "$MODELDIR/tiny-q8_0.gguf" >/dev/null
$MAKE --no-print-directory BUILD="$ASAN_BUILD" OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" "$ASAN_BUILD/lmserve" >/dev/null
LMSERVE_BIN="$ASAN_BUILD/lmserve" LMSERVE_MODEL="$MODELDIR/tiny-q8_0.gguf" TOKDIR="$TOKDIR" \
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  node --test --test-concurrency=1 \
    --test-name-pattern '^(chat|responses|messages): (tool|two|malformed|forced)|^reasoning then|^text around' \
    tests/e2e/tools.test.mjs
