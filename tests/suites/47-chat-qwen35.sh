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
. tests/suites/lib/chat.sh
DIR=tests/chat/qwen35
TPL=$DIR/template.jinja
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

$PY tests/ref/render_jinja.py --args-objects "$TPL" --out "$out/ref" "$DIR"/*.json
render_compare "chat (qwen35)" 20 "$out" "--arch qwen35" "$DIR"/*.json
# both reasoning modes, tools and tool calls are among them
grep -l '"enable_thinking": false' "$DIR"/*.json > /dev/null || { echo "FAIL: no case with thinking off"; exit 1; }
grep -l '"tool_calls"' "$DIR"/*.json > /dev/null || { echo "FAIL: no case with tool calls"; exit 1; }
grep -c '<think>$' "$out/ref/01-single-user.txt" > /dev/null || { echo "FAIL: the generation prompt is not primed with <think>"; exit 1; }

template_fingerprint "chat (qwen35)" "$TPL" src/engine/text/chat_qwen35.c

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
  refused "$out" "--arch qwen35" "$badcase"
  echo "$badcase" > "$out/bad$i.json"
  if $PY tests/ref/render_jinja.py --args-objects "$TPL" "$out/bad$i.json" > /dev/null 2>&1; then
    echo "FAIL: Jinja2 renders what lmserve refuses: $badcase"; exit 1
  fi
done
echo "chat (qwen35): $i conversations the template rejects refused with messages"
