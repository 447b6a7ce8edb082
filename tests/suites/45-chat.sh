#!/usr/bin/env bash
# Chat rendering: our C renderer (lmserve-render) against Qwen3's real chat_template rendered by
# Jinja2 the way Hugging Face transformers renders it (tests/ref/render_jinja.py), byte for byte,
# on every conversation in tests/chat/. Then the `tojson` serializer against Python's
# json.dumps(ensure_ascii=False) on 3,000 random JSON values (floats, escapes, unicode).
set -eu
PY=/usr/bin/python3
. tests/suites/lib/chat.sh
CONFIG="$TOKDIR/tokenizer_config.json"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

$PY tests/ref/render_jinja.py "$CONFIG" --out "$out/ref" tests/chat/*.json
render_compare chat 40 "$out" "" tests/chat/*.json

$PY tests/ref/render_jinja.py --tojson-cases 3000 45 > "$out/values.jsonl"
"$BUILD/lmserve-render" --tojson < "$out/values.jsonl" > "$out/tojson.c"
$PY tests/ref/render_jinja.py --tojson-expect < "$out/values.jsonl" > "$out/tojson.py"
if ! cmp "$out/tojson.py" "$out/tojson.c"; then
  diff "$out/tojson.py" "$out/tojson.c" | head -10
  echo "FAIL: chat_tojson differs from json.dumps(ensure_ascii=False)"; exit 1
fi
echo "chat: tojson identical to json.dumps on $(wc -l < "$out/values.jsonl") random values"

# Bad input is an error with a message, never a crash.
for badcase in '[]' '{"messages": [{"role": "wizard", "content": "x"}]}' \
               '{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}' \
               '{"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f"}}]}]}' \
               '{"messages": [{"role": "user", "content": "x"}], "tools": {"a": 1}}' '42'; do
  if echo "$badcase" | "$BUILD/lmserve-render" 2> "$out/err"; then
    echo "FAIL: accepted bad case: $badcase"; exit 1
  fi
  grep -q . "$out/err" || { echo "FAIL: no message for bad case: $badcase"; exit 1; }
done
echo "chat: bad conversations rejected with messages"

# lmserve-generate on a generated test model: greedy == lmserve-logits --greedy on the same prompt
# tokens (plain and chat-rendered prompts); seeded sampling reproducible; top_k 1 == greedy.
$MAKE --no-print-directory BUILD="$BUILD" "$MODELDIR/tiny-q8_0.gguf" > /dev/null
M="$MODELDIR/tiny-q8_0.gguf"
N=16
prompt='The quick brown fox, in 2024, said: "héllo 世界"'
if [ -f src/bin/lmserve-logits.c ]; then
  toks=$(printf '%s' "$prompt" | "$BUILD/lmserve-tokenize" "$M")
  want=$("$BUILD/lmserve-logits" "$M" --tokens "$toks" --greedy $N)
  got=$("$BUILD/lmserve-generate" "$M" -p "$prompt" -n $N --ids --ignore-eos)
  [ "$got" = "$want" ] || { echo "FAIL: generate greedy ids $got != lmserve-logits $want"; exit 1; }
  echo "generate: plain greedy == lmserve-logits --greedy ($N tokens)"

  printf '{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"%s"}],"add_generation_prompt":true,"enable_thinking":false}' \
    "Name three colors." | "$BUILD/lmserve-render" > "$out/chat_prompt.txt"
  ctoks=$("$BUILD/lmserve-tokenize" "$M" --special < "$out/chat_prompt.txt")
  want=$("$BUILD/lmserve-logits" "$M" --tokens "$ctoks" --greedy $N)
  got=$("$BUILD/lmserve-generate" "$M" --chat --system "Be brief." -p "Name three colors." -n $N --ids --ignore-eos)
  [ "$got" = "$want" ] || { echo "FAIL: --chat greedy ids $got != lmserve-logits on the rendered prompt $want"; exit 1; }
  echo "generate: --chat greedy == lmserve-logits --greedy on the rendered prompt"
else
  echo "generate: NOT CHECKED against lmserve-logits (src/bin/lmserve-logits.c not in this tree)"
fi

s1=$("$BUILD/lmserve-generate" "$M" -p "$prompt" -n $N --ids --ignore-eos --temp 0.9 --top-k 40 --top-p 0.95 --min-p 0.01 --seed 7)
s2=$("$BUILD/lmserve-generate" "$M" -p "$prompt" -n $N --ids --ignore-eos --temp 0.9 --top-k 40 --top-p 0.95 --min-p 0.01 --seed 7)
s3=$("$BUILD/lmserve-generate" "$M" -p "$prompt" -n $N --ids --ignore-eos --temp 0.9 --top-k 40 --top-p 0.95 --min-p 0.01 --seed 8)
[ "$s1" = "$s2" ] || { echo "FAIL: same seed, different streams: $s1 / $s2"; exit 1; }
[ "$s1" != "$s3" ] || { echo "FAIL: seeds 7 and 8 gave the same stream $s1"; exit 1; }
g=$("$BUILD/lmserve-generate" "$M" -p "$prompt" -n $N --ids --ignore-eos)
k1=$("$BUILD/lmserve-generate" "$M" -p "$prompt" -n $N --ids --ignore-eos --temp 1.5 --top-k 1 --seed 3)
[ "$k1" = "$g" ] || { echo "FAIL: top_k 1 $k1 != greedy $g"; exit 1; }
echo "generate: seeded sampling reproducible, top_k 1 == greedy"

for bad in "--temp -1" "--top-p 0" "--top-k x" "--bogus"; do
  if "$BUILD/lmserve-generate" "$M" -p hi -n 2 $bad > /dev/null 2> "$out/err"; then
    echo "FAIL: accepted $bad"; exit 1
  fi
  grep -q . "$out/err" || { echo "FAIL: no message for $bad"; exit 1; }
done
echo "generate: bad flags rejected"

"$BUILD/lmserve-generate" "$M" --chat -p hi -n 1 --ids > /dev/null 2> "$out/err"
if grep -q warning "$out/err"; then
  cat "$out/err"; echo "FAIL: the generated model's Qwen3 chat template is not recognized"; exit 1
fi
echo "generate: the model's chat template is the one the renderer reproduces"
