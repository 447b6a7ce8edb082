#!/usr/bin/env bash
# Qwen3.5 chat rendering: lmserve-render --arch qwen35 against Qwen3.5's own chat_template
# (tests/chat/qwen35/template.jinja: source and licence in tests/chat/qwen35/README.md) rendered
# by Jinja2 the way Hugging Face transformers renders it (tests/ref/render_jinja.py, tool-call
# arguments parsed into objects first: the template iterates `arguments|items`), byte for byte, on
# every conversation in tests/chat/qwen35/ (system, multi-turn, reasoning and the primed <think>,
# tools, tool calls and results). Then the conversations the template itself rejects: lmserve
# refuses each with a message, and Jinja2 raises on each.
set -eu
PY=/usr/bin/python3
DIR=tests/chat/qwen35
TPL=$DIR/template.jinja
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

$PY tests/ref/render_jinja.py --args-objects "$TPL" --out "$out/ref" "$DIR"/*.json
n=0; bad=0
for f in "$DIR"/*.json; do
  name=$(basename "$f" .json)
  if ! "$BUILD/lmserve-render" --arch qwen35 < "$f" > "$out/$name.c"; then
    echo "FAIL $name: lmserve-render failed"; bad=$((bad + 1)); continue
  fi
  if ! cmp -s "$out/ref/$name.txt" "$out/$name.c"; then
    echo "FAIL $name: differs from the Jinja2 rendering"
    diff <(od -c "$out/ref/$name.txt") <(od -c "$out/$name.c") | head -20 || true
    bad=$((bad + 1))
  fi
  n=$((n + 1))
done
echo "chat (qwen35): $n conversations rendered, $bad differ from Jinja2"
[ "$n" -ge 20 ] || { echo "FAIL: fewer than 20 conversations"; exit 1; }
[ "$bad" -eq 0 ]
# both reasoning modes, tools and tool calls are among them
grep -l '"enable_thinking": false' "$DIR"/*.json > /dev/null || { echo "FAIL: no case with thinking off"; exit 1; }
grep -l '"tool_calls"' "$DIR"/*.json > /dev/null || { echo "FAIL: no case with tool calls"; exit 1; }
grep -c '<think>$' "$out/ref/01-single-user.txt" > /dev/null || { echo "FAIL: the generation prompt is not primed with <think>"; exit 1; }

# The renderer knows the template it reproduces (chat_template_known's fingerprint).
$PY - "$TPL" <<'PYEOF'
import sys
h = 0xcbf29ce484222325
for b in open(sys.argv[1], "rb").read():
    h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
src = open("src/engine/text/chat_qwen35.c").read()
assert "0x%016xull" % h in src, "template fingerprint 0x%016x not in chat_qwen35.c" % h
PYEOF
echo "chat (qwen35): the template's fingerprint is the descriptor's"

# Rejected by the template (raise_exception / a failing filter) and so by lmserve, with a message.
i=0
for badcase in \
  '{"messages": [{"role": "user", "content": "x"}, {"role": "system", "content": "late"}]}' \
  '{"messages": [{"role": "assistant", "content": "only me"}]}' \
  '{"messages": [{"role": "user", "content": "<tool_response>\nr\n</tool_response>"}]}' \
  '{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "[1, 2]"}}]}]}' \
  '{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "\"text\""}}]}]}' \
  '{"messages": []}'; do
  i=$((i + 1))
  if echo "$badcase" | "$BUILD/lmserve-render" --arch qwen35 2> "$out/err" > /dev/null; then
    echo "FAIL: accepted: $badcase"; exit 1
  fi
  grep -q . "$out/err" || { echo "FAIL: no message for: $badcase"; exit 1; }
  echo "$badcase" > "$out/bad$i.json"
  if $PY tests/ref/render_jinja.py --args-objects "$TPL" "$out/bad$i.json" > /dev/null 2>&1; then
    echo "FAIL: Jinja2 renders what lmserve refuses: $badcase"; exit 1
  fi
done
echo "chat (qwen35): $i conversations the template rejects refused with messages"
