#!/usr/bin/env bash
# tools/nanochat-convert (docs/nanochat.md): a checkpoint built here with python3-torch in
# nanochat's own layout (state dict under _orig_mod., meta, a tiktoken-shaped tokenizer pickle in
# protocols 4 and 0) converts bit-identically, and its tokenizer tokenizes as the reference; the
# restricted unpickler refuses malicious pickles (os.system, eval, a payload inside the state,
# protocol-0 GLOBAL) naming the import, with nothing run; a malicious state dict and broken
# inputs are clear errors (tests/ref/nanochat_convert_test.py).
set -eu
PY=/usr/bin/python3
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
{ node tests/tok/corpus.js bench 150000; node tests/tok/corpus.js bench-multi 100000; } > "$t/train.txt"
$PY tests/ref/nanochat_tok.py train "$t/train.txt" "$t/tok.json" 4000
mkdir "$t/w"
$PY tests/ref/nanochat_convert_test.py tools/nanochat-convert "$t/tok.json" "$BUILD/lmserve-tokenize" "$t/w"
