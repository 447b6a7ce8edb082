#!/usr/bin/env bash
# Chat rendering: our C renderer (lmserve-render) against Qwen3's real chat_template rendered by
# Jinja2 the way Hugging Face transformers renders it (tests/ref/render_jinja.py), byte for byte,
# on every conversation in tests/chat/. Then the `tojson` serializer against Python's
# json.dumps(ensure_ascii=False) on 3,000 random JSON values (floats, escapes, unicode).
set -eu
PY=/usr/bin/python3
CONFIG="$TOKDIR/tokenizer_config.json"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

$PY tests/ref/render_jinja.py "$CONFIG" --out "$out/ref" tests/chat/*.json
n=0; bad=0
for f in tests/chat/*.json; do
  name=$(basename "$f" .json)
  if ! "$BUILD/lmserve-render" < "$f" > "$out/$name.c"; then
    echo "FAIL $name: lmserve-render failed"; bad=$((bad + 1)); continue
  fi
  if ! cmp -s "$out/ref/$name.txt" "$out/$name.c"; then
    echo "FAIL $name: differs from the Jinja2 rendering"
    diff <(od -c "$out/ref/$name.txt") <(od -c "$out/$name.c") | head -20 || true
    bad=$((bad + 1))
  fi
  n=$((n + 1))
done
echo "chat: $n conversations rendered, $bad differ from Jinja2"
[ "$n" -ge 40 ] || { echo "FAIL: fewer than 40 conversations"; exit 1; }
[ "$bad" -eq 0 ]

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
