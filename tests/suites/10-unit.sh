#!/usr/bin/env bash
# C unit tests (Criterion), release build and under ASan + UBSan.
set -eu
"$BUILD/unit-tests" --jobs 2
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 "$ASAN_BUILD/unit-tests" --jobs 2
