# Sourced by the fuzz suites (tests/suites/20-gguf-fuzz.sh, 52-grammar-fuzz.sh, 61-api-fuzz.sh,
# 63-worker-fuzz.sh): the libFuzzer + ASan + UBSan run they all make. Needs BUILD and MAKE.

# fuzz_prepare NAME: builds $BUILD/NAME; work dir $BUILD/fuzz with a persistent corpus
# ($BUILD/fuzz/<short>-corpus, short = NAME without "fuzz-") and, emptied, <short>-seeds for the
# suite's seed generator. Sets work, corpus, seeds, log.
fuzz_prepare() {
  local short=${1#fuzz-}
  $MAKE --no-print-directory BUILD="$BUILD" "$BUILD/$1" >/dev/null
  work="$BUILD/fuzz"
  corpus="$work/$short-corpus"
  seeds="$work/$short-seeds"
  log="$work/$1.log"
  rm -rf "$seeds"
  mkdir -p "$seeds" "$corpus"
}

# fuzz_run NAME SECONDS MAX_LEN DIR...: the timed run over the corpus directories; a crash, leak,
# timeout or OOM prints the log's tail, leaves its input under $work/ and fails the suite; else
# the run's statistics are printed on one line.
fuzz_run() {
  local name=$1 secs=$2 max_len=$3
  shift 3
  if ! "$BUILD/$name" -max_total_time="$secs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$work/" "$@" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "$name: FAILED (input saved under $work/)"
    exit 1
  fi
  grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' "$log" | tr '\n' ' '
  echo
}
