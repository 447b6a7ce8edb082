#!/usr/bin/env bash
# Numerics (issue 2, R-FAM-2): the C forward pass against an independent numpy reference
# (tests/ref/qwen3_ref.py: own GGUF reader + dequantizers, float64, no KV cache) on the same files.
#   F32 models:  max |Δlogit| < 1e-3 and identical greedy tokens for 32 steps.
#   Q8_0 models: the engine rounds the input of every Q8_0-weight dot product to int8 blocks of 32
#                (as llama.cpp does): with a f32 scale on VNNI CPUs ("a8"), as a Q8_0 block (f16
#                scale) elsewhere; `lmserve-logits --act-format` says which, and the reference
#                models it with --act a8|q8_0 (its own quantizer). Against it: identical greedy
#                tokens for 32 steps on the decode path (prompt fed one token per forward) from a
#                10-token prompt, or where a rounding flip (below) decided a near-tie, each step of
#                the engine's continuation the reference's argmax on the same prefix or within 0.3
#                of its max, at most 4 such steps (tests/ref/greedy_check.py); cosine > 0.999 for 10- and 100-token prompts, prefill and decode
#                paths. max |Δ| is printed, not bounded: it is ~3e-6 until some input lands within
#                float rounding of a .5 quantization boundary and rounds differently in the engine
#                (f32) and the reference (f64); these tiny random models amplify one such flip to
#                ~0.1-0.2 in the logits (docs/engine.md "Numerics").
#                Against the exact-activation reference: dense cosine > 0.999 is
#                asserted; for MoE it is printed only, because activation rounding flips the top-k
#                choice of tokens whose 2nd/3rd router probabilities are within ~1%
#                (docs/engine.md "Numerics").
#   all models:  prefill of the prompt vs feeding it one token per forward (f32: max |Δ| < 1e-3;
#                q8_0: cosine > 0.999 and the same argmax), and the model's greedy continuation (the
#                reference's) does not collapse into one repeated token.
#   tiny-f16 / tiny-q4_k_m: cosine > 0.99999 / 0.999 and the same argmax vs the exact reference.
# The prompt (100 tokens) spans two KV tiles and many attention query blocks.
set -eu
PY=/usr/bin/python3
here=$(cd "$(dirname "$0")/../.." && pwd)
REF="$here/tests/ref/qwen3_ref.py"
CMP="$here/tests/ref/compare_logits.py"
CHK="$here/tests/ref/greedy_check.py"
models="tiny-f32 tiny-q8_0 moe_tiny-f32 moe_tiny-q8_0"
for m in $models; do $MAKE --no-print-directory BUILD="$BUILD" "$MODELDIR/$m.gguf" >/dev/null; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
P=$($PY -c 'print(",".join(str((i * 15487 + 11) % 151643) for i in range(100)))')
PS=9707,11,1879,0,358,1079,264,1273,1614,13
fail=0
bad() { echo "FAIL: $*"; fail=1; }
for m in $models; do
  f="$MODELDIR/$m.gguf"
  case $("$BUILD/lmserve-logits" "$f" --act-format) in
    f32) q="" ;;
    a8) q="--act a8" ;;
    q8_0) q="--act q8_0" ;;
    *) bad "$m: unexpected activation format"; continue ;;
  esac
  "$BUILD/lmserve-logits" "$f" --tokens "$P" --threads 2 > "$tmp/c"
  "$BUILD/lmserve-logits" "$f" --tokens "$P" --threads 2 --one-by-one > "$tmp/c1"
  $PY "$REF" "$f" --tokens "$P" $q > "$tmp/r"
  if [ -z "$q" ]; then
    echo -n "$m logits vs reference: "
    $PY "$CMP" "$tmp/c" "$tmp/r" --max-abs 1e-3 || bad "$m logits"
    echo -n "$m prefill vs one-by-one: "
    $PY "$CMP" "$tmp/c" "$tmp/c1" --max-abs 1e-3 || bad "$m prefill vs decode"
    gc=$("$BUILD/lmserve-logits" "$f" --tokens "$P" --threads 2 --greedy 32)
  else
    "$BUILD/lmserve-logits" "$f" --tokens "$PS" --threads 2 --one-by-one > "$tmp/cs"
    $PY "$REF" "$f" --tokens "$PS" $q > "$tmp/rs"
    echo -n "$m decode-path logits vs reference $q (10 tokens): "
    $PY "$CMP" "$tmp/cs" "$tmp/rs" --min-cos 0.999 || bad "$m decode-path logits"
    echo -n "$m decode-path logits vs reference $q (100 tokens): "
    $PY "$CMP" "$tmp/c1" "$tmp/r" --min-cos 0.999 || bad "$m decode-path logits (100)"
    echo -n "$m prefill logits vs reference $q (100 tokens): "
    $PY "$CMP" "$tmp/c" "$tmp/r" --min-cos 0.999 || bad "$m prefill logits"
    echo -n "$m prefill vs one-by-one: "
    $PY "$CMP" "$tmp/c" "$tmp/c1" --min-cos 0.999 --same-argmax || bad "$m prefill vs decode"
    $PY "$REF" "$f" --tokens "$P" > "$tmp/rp"
    echo -n "$m prefill logits vs exact-activation reference: "
    case $m in
      moe*) $PY "$CMP" "$tmp/c" "$tmp/rp" || true; echo "  (info only for MoE: router top-k flips)" ;;
      *)    $PY "$CMP" "$tmp/c" "$tmp/rp" --min-cos 0.999 || bad "$m logits vs exact reference" ;;
    esac
    gc=$("$BUILD/lmserve-logits" "$f" --tokens "$PS" --threads 2 --greedy 32 --one-by-one)
    gpre=$("$BUILD/lmserve-logits" "$f" --tokens "$PS" --threads 2 --greedy 32)
  fi
  gr=$($PY "$REF" "$f" --tokens "$([ -n "$q" ] && echo "$PS" || echo "$P")" --greedy 32 $q)
  if [ "$gc" = "$gr" ]; then echo "$m greedy 32 identical${q:+ (decode path, 10-token prompt, $q reference)}: $gc"
  elif [ -n "$q" ]; then # parted at a near-tie decided by an activation-rounding flip?
    echo "  $m greedy parts from the $q reference:"; echo "  engine:    $gc"; echo "  reference: $gr"
    $PY "$REF" "$f" --tokens "$PS,$gc" --score 32 $q > "$tmp/score"
    echo -n "  $m engine's greedy 32 scored by the $q reference: "
    $PY "$CHK" "$tmp/score" --tol 0.3 --max-differ 4 || bad "$m greedy differs beyond near-ties"
  else bad "$m greedy differs"; echo "  engine:    $gc"; echo "  reference: $gr"; fi
  # the model itself must not collapse: the reference's greedy (the engine's is judged above)
  distinct=$(echo "$gr" | tr , '\n' | sort -u | wc -l)
  [ "$distinct" -ge 16 ] || bad "$m greedy collapses: only $distinct distinct tokens in 32"
  if [ -n "$q" ]; then # informational: how long other variants agree
    gp=$($PY "$REF" "$f" --tokens "$PS" --greedy 32)
    agree() { $PY -c "import sys;a=sys.argv[1].split(',');b=sys.argv[2].split(',');print(next((i for i in range(32) if a[i]!=b[i]),32))" "$1" "$2"; }
    echo "  (info) greedy agreement: prefill-path engine vs $q reference $(agree "$gpre" "$gr")/32, vs exact-activation reference $(agree "$gc" "$gp")/32"
  fi
done
# --cache-type f32: K and V kept unrounded. Against the reference that does not round them either
# (--kv-f32) the F32 models agree to 1e-4 (measured 4.8e-6 on tiny-f32), where the default F16
# cache is ~4e-3 away from it; prefill vs one token per forward stays at 1e-4 too.
for m in tiny-f32 moe_tiny-f32; do
  f="$MODELDIR/$m.gguf"
  "$BUILD/lmserve-logits" "$f" --tokens "$P" --threads 2 --cache-type f32 > "$tmp/c32"
  "$BUILD/lmserve-logits" "$f" --tokens "$P" --threads 3 --cache-type f32 --one-by-one > "$tmp/c32o"
  "$BUILD/lmserve-logits" "$f" --tokens "$P" --threads 2 > "$tmp/c16"
  $PY "$REF" "$f" --tokens "$P" --kv-f32 > "$tmp/r32"
  echo -n "$m --cache-type f32 vs the unrounded-K/V reference: "
  $PY "$CMP" "$tmp/c32" "$tmp/r32" --max-abs 1e-4 || bad "$m f32 cache logits"
  echo -n "$m --cache-type f32 prefill vs one-by-one (3 threads): "
  $PY "$CMP" "$tmp/c32" "$tmp/c32o" --max-abs 1e-4 || bad "$m f32 cache prefill vs decode"
  echo -n "  (control) $m f16 cache vs the unrounded-K/V reference, expected over 1e-4: "
  if $PY "$CMP" "$tmp/c16" "$tmp/r32" --max-abs 1e-4 > "$tmp/ctl"; then bad "$m: --cache-type f32 changes nothing"; fi
  cat "$tmp/ctl"
done
"$BUILD/lmserve-logits" "$MODELDIR/tiny-f32.gguf" --tokens 1,2 --cache-type f8 > /dev/null 2>&1 && bad "--cache-type f8 accepted"
# Other weight types, exact-activation reference (its own F16 and Q4_K/Q6_K decoders): the
# engine rounds activations to f16 (F16 weights) or int8 (Q4_K_M), so cosine bounds.
for m in tiny-f16 tiny-q4_k_m; do
  f="$MODELDIR/$m.gguf"
  $MAKE --no-print-directory BUILD="$BUILD" "$f" >/dev/null
  "$BUILD/lmserve-logits" "$f" --tokens "$PS" --threads 2 > "$tmp/c"
  $PY "$REF" "$f" --tokens "$PS" > "$tmp/r"
  case $m in *f16) cb=0.99999 ;; *) cb=0.999 ;; esac
  echo -n "$m logits vs exact-activation reference (10 tokens): "
  $PY "$CMP" "$tmp/c" "$tmp/r" --min-cos $cb --same-argmax || bad "$m logits"
done
[ $fail = 0 ] || exit 1
echo "numerics: all checks passed"
