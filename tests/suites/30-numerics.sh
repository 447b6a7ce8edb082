#!/usr/bin/env bash
# Numerics (issue 2, R-FAM-2): the C forward pass against an independent numpy reference
# (tests/ref/qwen3_ref.py: own GGUF reader + dequantizers, float64, no KV cache) on the same files.
#   F32 models:  max |Δlogit| < 1e-3 and identical greedy tokens for 32 steps.
#   Q8_0 models: the engine rounds the input of every Q8_0-weight dot product to Q8_0 blocks (as
#                llama.cpp does); the reference models that rounding with --act-q8 (its own
#                quantizer, written from the block format). Against it: max |Δlogit| < 1e-3,
#                cosine > 0.999 and identical greedy tokens for 32 steps. Against the plain
#                reference (exact activations): dense cosine > 0.999 is asserted; for MoE the
#                cosine is printed only, because activation rounding flips the top-k choice of
#                tokens whose 2nd/3rd router probabilities are within ~1% (see docs/engine.md).
#   all models:  prefill of the prompt == feeding it one token per forward (decode path), and the
#                greedy continuation does not collapse into one repeated token.
# The prompt (100 tokens) spans two KV tiles and many attention query blocks.
set -eu
PY=/usr/bin/python3
here=$(cd "$(dirname "$0")/../.." && pwd)
REF="$here/tests/ref/qwen3_ref.py"
CMP="$here/tests/ref/compare_logits.py"
models="tiny-f32 tiny-q8_0 moe_tiny-f32 moe_tiny-q8_0"
for m in $models; do $MAKE --no-print-directory BUILD="$BUILD" "$MODELDIR/$m.gguf" >/dev/null; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
P=$($PY -c 'print(",".join(str((i * 15487 + 11) % 151643) for i in range(100)))')
fail=0
bad() { echo "FAIL: $*"; fail=1; }
for m in $models; do
  f="$MODELDIR/$m.gguf"
  "$BUILD/lmserve-logits" "$f" --tokens "$P" --threads 2 > "$tmp/c"
  case $m in
    *f32) gflag="" ;;
    *)    gflag="--act-q8" ;;
  esac
  echo -n "$m logits vs reference${gflag:+ $gflag}: "
  $PY "$REF" "$f" --tokens "$P" $gflag > "$tmp/r"
  $PY "$CMP" "$tmp/c" "$tmp/r" --max-abs 1e-3 --min-cos 0.999 || bad "$m logits"
  if [ -n "$gflag" ]; then
    $PY "$REF" "$f" --tokens "$P" > "$tmp/rp"
    echo -n "$m logits vs plain reference: "
    case $m in
      moe*) $PY "$CMP" "$tmp/c" "$tmp/rp" || true; echo "  (info only for MoE: router top-k flips)" ;;
      *)    $PY "$CMP" "$tmp/c" "$tmp/rp" --min-cos 0.999 || bad "$m logits vs plain reference" ;;
    esac
  fi
  "$BUILD/lmserve-logits" "$f" --tokens "$P" --threads 2 --one-by-one > "$tmp/c1"
  echo -n "$m prefill vs one-by-one: "
  $PY "$CMP" "$tmp/c" "$tmp/c1" --max-abs 1e-3 || bad "$m prefill vs decode"
  gc=$("$BUILD/lmserve-logits" "$f" --tokens "$P" --threads 2 --greedy 32)
  gr=$($PY "$REF" "$f" --tokens "$P" --greedy 32 $gflag)
  if [ "$gc" = "$gr" ]; then echo "$m greedy 32 identical ${gflag:+($gflag reference)}: $gc"
  else bad "$m greedy differs"; echo "  engine:    $gc"; echo "  reference: $gr"; fi
  distinct=$(echo "$gc" | tr , '\n' | sort -u | wc -l)
  [ "$distinct" -ge 16 ] || bad "$m greedy collapses: only $distinct distinct tokens in 32"
  if [ -n "$gflag" ]; then # informational: how far greedy agrees with the plain reference
    gp=$($PY "$REF" "$f" --tokens "$P" --greedy 32)
    n=$($PY -c "a='$gc'.split(',');b='$gp'.split(',');print(next((i for i in range(32) if a[i]!=b[i]),32))")
    echo "  (info) greedy agrees with the plain reference for $n/32 steps"
  fi
done
[ $fail = 0 ] || exit 1
echo "numerics: all checks passed"
