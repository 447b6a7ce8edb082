#!/usr/bin/env bash
# nanochat chat rendering and calculator (docs/nanochat.md "Chat", "The calculator"):
#  - token ids of lmserve-render --arch nanochat --ids against render_conversation's rule with the
#    Python reference tokenizer (tests/ref/nanochat_chat.py): system merge, alternation,
#    generation prompt, assistant prefill, calculator parts; the conversations nanochat refuses
#    fail naming the message;
#  - lmserve-calc (engine/text/calc.c) against Python's eval behind nanochat's gate on 4,000+
#    seeded expressions (tests/ref/nanochat_calc.py), with its listed divergences.
set -eu
PY=/usr/bin/python3
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
{ node tests/tok/corpus.js bench 150000; node tests/tok/corpus.js bench-multi 100000; } > "$t/train.txt"
$PY tests/ref/nanochat_tok.py train "$t/train.txt" "$t/tok.json" 4000
$PY tests/ref/nanochat_chat.py "$BUILD/lmserve-render" "$t/tok.json"
$PY tests/ref/nanochat_calc.py "$BUILD/lmserve-calc" 4000
