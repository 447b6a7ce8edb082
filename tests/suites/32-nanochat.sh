#!/usr/bin/env bash
# nanochat checkpoints (issue 16, docs/nanochat.md): the C forward against an independent numpy
# reference (tests/ref/nanochat_ref.py: own safetensors reader, float64, whole sequence, explicit
# window mask, no KV cache) on random checkpoint directories from lmserve-mkmodel, both
# architecture variants:
#   nanochat-tiny      (current: lambdas, value embeddings, smear, backout, SSSL windows of 16/256,
#                       vocab 500 padded to 512) in F32 and BF16
#   nanochat-tiny-old  (October 2025: none of those, full context, rope base 10000, qk scale 1)
# Each: max |Δlogit| < 1e-3 over a 100-token prompt (prefill and token by token), the same 32
# greedy tokens, prefill bitwise equal to token-by-token and to 1 thread; the 100-token prompt
# crosses the 16-token window, and ignoring the windows must move the logits past the bound.
# Then the same over a 300-token prompt, longer than the 128-row KV rings of the S layers.
set -eu
PY=/usr/bin/python3
here=$(cd "$(dirname "$0")/../.." && pwd)
REF="$here/tests/ref/nanochat_ref.py"
CMP="$here/tests/ref/compare_logits.py"
$MAKE --no-print-directory BUILD="$BUILD" "$BUILD/lmserve-mkmodel" "$BUILD/lmserve-logits" >/dev/null
mkdir -p "$MODELDIR"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
P=$($PY -c 'print(",".join(str((i * 15487 + 11) % 500) for i in range(100)))')
for spec in nanochat-tiny:f32:1 nanochat-tiny:bf16:1 nanochat-tiny-old:f32:2; do
  IFS=: read -r shape type seed <<<"$spec"
  d="$MODELDIR/$shape-$type"
  "$BUILD/lmserve-mkmodel" --shape "$shape" --type "$type" --seed "$seed" -o "$d" 2>/dev/null
  m="$shape $type"
  "$BUILD/lmserve-logits" "$d" --tokens "$P" --threads 2 > "$tmp/c"
  "$BUILD/lmserve-logits" "$d" --tokens "$P" --threads 2 --one-by-one > "$tmp/c1"
  "$BUILD/lmserve-logits" "$d" --tokens "$P" --threads 1 > "$tmp/ct1"
  $PY "$REF" "$d" --tokens "$P" > "$tmp/r"
  echo -n "$m logits vs reference: "
  $PY "$CMP" "$tmp/c" "$tmp/r" --max-abs 1e-3 || bad "$m logits"
  echo -n "$m token-by-token logits vs reference: "
  $PY "$CMP" "$tmp/c1" "$tmp/r" --max-abs 1e-3 || bad "$m token-by-token logits"
  cmp -s "$tmp/c" "$tmp/c1" || bad "$m prefill and token-by-token logits are not bitwise equal"
  cmp -s "$tmp/c" "$tmp/ct1" || bad "$m 2-thread and 1-thread logits are not bitwise equal"
  if [ "$shape" = nanochat-tiny ]; then
    $PY "$REF" "$d" --tokens "$P" --no-windows > "$tmp/rw"
    if $PY "$CMP" "$tmp/c" "$tmp/rw" --max-abs 1e-3 >/dev/null; then bad "$m: the windows make no difference"; fi
  fi
  gc=$("$BUILD/lmserve-logits" "$d" --tokens "$P" --threads 2 --greedy 32)
  gr=$($PY "$REF" "$d" --tokens "$P" --greedy 32)
  if [ "$gc" = "$gr" ]; then echo "$m greedy 32 identical: $gc"
  else bad "$m greedy differs"; echo "  engine:    $gc"; echo "  reference: $gr"; fi
  distinct=$(echo "$gc" | tr , '\n' | sort -u | wc -l)
  [ "$distinct" -ge 12 ] || bad "$m greedy collapses: only $distinct distinct tokens in 32"
done
# prompts longer than the rings (docs/kv-ring.md): the S layers and the row-token layer keep
# 128-row rings, so 300 tokens wrap them twice inside the prefill and again while decoding, and run
# past sequence_len 256 (where the L layer windows too); the 100-token runs above fit the rings
for spec in nanochat-tiny:f32 nanochat-tiny:bf16 nanochat-tiny-old:f32; do
  IFS=: read -r shape type <<<"$spec"
  d="$MODELDIR/$shape-$type"
  for n in 129 300; do # one past the ring, and 2.3 rings
    P2=$($PY -c "print(','.join(str((i * 7919 + 3) % 500) for i in range($n)))")
    m="$shape $type, $n tokens"
    "$BUILD/lmserve-logits" "$d" --tokens "$P2" --threads 2 > "$tmp/c"
    "$BUILD/lmserve-logits" "$d" --tokens "$P2" --threads 2 --one-by-one > "$tmp/c1"
    $PY "$REF" "$d" --tokens "$P2" > "$tmp/r"
    echo -n "$m logits vs reference: "
    $PY "$CMP" "$tmp/c" "$tmp/r" --max-abs 1e-3 || bad "$m logits"
    echo -n "$m token-by-token logits vs reference: "
    $PY "$CMP" "$tmp/c1" "$tmp/r" --max-abs 1e-3 || bad "$m token-by-token logits"
    cmp -s "$tmp/c" "$tmp/c1" || bad "$m prefill and token-by-token logits are not bitwise equal"
  done
  gc=$("$BUILD/lmserve-logits" "$d" --tokens "$P2" --threads 2 --greedy 32)
  gr=$($PY "$REF" "$d" --tokens "$P2" --greedy 32)
  if [ "$gc" = "$gr" ]; then echo "$m greedy 32 identical: $gc"
  else bad "$m greedy differs"; echo "  engine:    $gc"; echo "  reference: $gr"; fi
done
# a config that disagrees with the tensors: an error naming both, exit 1, no crash
d="$MODELDIR/nanochat-tiny-f32"
cp -r "$d" "$tmp/badcfg"
sed -i 's/"n_embd": 64/"n_embd": 96/' "$tmp/badcfg/config.json"
if "$BUILD/lmserve-logits" "$tmp/badcfg" --tokens 1,2 >"$tmp/out" 2>&1; then bad "a config with n_embd 96 loaded"; fi
grep -q "transformer.wte.weight has shape \[512,64\], config.json implies \[512,96\]" "$tmp/out" ||
  bad "config mismatch said: $(cat "$tmp/out")"
# mkmodel: the same seed gives the same bytes, another seed other weights; bad types refused
"$BUILD/lmserve-mkmodel" --shape nanochat-tiny --type f32 --seed 1 -o "$tmp/again" 2>/dev/null
for f in model.safetensors config.json tokenizer.json; do
  cmp -s "$MODELDIR/nanochat-tiny-f32/$f" "$tmp/again/$f" || bad "mkmodel nanochat-tiny seed 1: $f differs between runs"
done
"$BUILD/lmserve-mkmodel" --shape nanochat-tiny --type f32 --seed 9 -o "$tmp/other" 2>/dev/null
cmp -s "$MODELDIR/nanochat-tiny-f32/model.safetensors" "$tmp/other/model.safetensors" && bad "seed 9 gave seed 1's weights"
if "$BUILD/lmserve-mkmodel" --shape nanochat-tiny --type q8_0 -o "$tmp/q" >"$tmp/out" 2>&1; then bad "--type q8_0 accepted"; fi
grep -q "f32, bf16 or f16" "$tmp/out" || bad "--type q8_0 said: $(cat "$tmp/out")"
[ $fail = 0 ] || exit 1
echo "nanochat: all checks passed"
