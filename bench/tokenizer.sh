#!/usr/bin/env bash
# Tokenizer throughput, one thread: lmserve-tokenize --bench on 1 MB of English prose + code (the
# figure of record) and 1 MB of multilingual text (CJK and other scripts, emoji), both generated
# deterministically by tests/tok/corpus.js, with the Qwen3 vocabulary of the mkmodel GGUF.
# Prints wall-clock and thread-CPU throughput (on a shared machine, CPU time is the one-core figure).
#   TOK_BENCH_RUNS=N  encodes per corpus (default 10)
set -eu
MODEL="$MODELDIR/tiny-f32.gguf"
$MAKE --no-print-directory BUILD="$BUILD" "$BUILD/lmserve-tokenize" "$MODEL" >/dev/null
runs=${TOK_BENCH_RUNS:-10}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
node tests/tok/corpus.js bench 1048576 > "$tmp/en"
node tests/tok/corpus.js bench-multi 1048576 > "$tmp/multi"
echo "tokenizer bench: $runs runs per corpus, one thread, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf 'english+code  '; "$BUILD/lmserve-tokenize" "$MODEL" --bench "$runs" < "$tmp/en"
printf 'multilingual  '; "$BUILD/lmserve-tokenize" "$MODEL" --bench "$runs" < "$tmp/multi"
