#!/usr/bin/env bash
# Gemma 4 chat rendering: lmserve-render --arch gemma4 against Gemma 4's own chat_template
# (tests/chat/gemma4/template.jinja: source and licence in tests/chat/gemma4/README.md) rendered
# by Jinja2 the way Hugging Face transformers renders it (tests/ref/render_jinja.py), byte for
# byte, on every conversation in tests/chat/gemma4/. The template is rendered with bos_token ""
# (lmserve prepends <bos> as a token: the vocabulary's add_bos, forced on for gemma4). Every case
# states enable_thinking (the server always passes it; the template's default is off). Then the
# conversations the renderer refuses. Cases 31-43 carry tools, tool calls (arguments as objects,
# as transformers passes them) and tool results.
set -eu
PY=/usr/bin/python3
DIR=tests/chat/gemma4
TPL=$DIR/template.jinja
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for f in "$DIR"/*.json; do
  grep -q '"enable_thinking"' "$f" || { echo "FAIL $(basename "$f"): states no enable_thinking"; exit 1; }
done
$PY tests/ref/render_jinja.py "$TPL" --out "$out/ref" "$DIR"/*.json
n=0; bad=0
for f in "$DIR"/*.json; do
  name=$(basename "$f" .json)
  if ! "$BUILD/lmserve-render" --arch gemma4 < "$f" > "$out/$name.c"; then
    echo "FAIL $name: lmserve-render failed"; bad=$((bad + 1)); continue
  fi
  if ! cmp -s "$out/ref/$name.txt" "$out/$name.c"; then
    echo "FAIL $name: differs from the Jinja2 rendering"
    diff <(od -c "$out/ref/$name.txt") <(od -c "$out/$name.c") | head -20 || true
    bad=$((bad + 1))
  fi
  n=$((n + 1))
done
echo "chat (gemma4): $n conversations rendered, $bad differ from Jinja2"
[ "$n" -ge 20 ] || { echo "FAIL: fewer than 20 conversations"; exit 1; }
[ "$bad" -eq 0 ]

# The renderer knows the template it reproduces (chat_template_known's fingerprint).
$PY - "$TPL" <<'PYEOF'
import sys
h = 0xcbf29ce484222325
for b in open(sys.argv[1], "rb").read():
    h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
src = open("src/engine/text/chat_gemma4.c").read()
assert "0x%016xull" % h in src, "template fingerprint 0x%016x not in chat_gemma4.c" % h
PYEOF
echo "chat (gemma4): the template's fingerprint is the descriptor's"

# Refused, each with a message: a tool result that answers no call and has no name (Jinja2
# raises on 'response:' + None), no messages.
for badcase in \
  '{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "2", "content": "42"}]}' \
  '{"messages": []}'; do
  if echo "$badcase" | "$BUILD/lmserve-render" --arch gemma4 2> "$out/err" > /dev/null; then
    echo "FAIL: accepted: $badcase"; exit 1
  fi
  grep -q . "$out/err" || { echo "FAIL: no message for: $badcase"; exit 1; }
done
echo "chat (gemma4): a tool result answering no call and an empty conversation refused with messages"

# Arguments sent as a JSON string (what OpenAI clients send) render as the object they encode:
# the same prompt as the case that gives them as an object.
$PY - "$DIR/33-tool-call-and-result.json" > "$out/str.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1], encoding="utf-8"))
for m in c["messages"]:
    for tc in m.get("tool_calls") or []:
        tc["function"]["arguments"] = json.dumps(tc["function"]["arguments"])
json.dump(c, sys.stdout)
PYEOF
"$BUILD/lmserve-render" --arch gemma4 < "$out/str.json" > "$out/str.c"
cmp -s "$out/str.c" "$out/ref/33-tool-call-and-result.txt" || { echo "FAIL: string arguments render differently"; exit 1; }
n_tools=$(grep -l '"tools"' "$DIR"/*.json | wc -l)
echo "chat (gemma4): string arguments render as their object; $n_tools conversations with tools"
[ "$n_tools" -ge 10 ] || { echo "FAIL: fewer than 10 tool conversations"; exit 1; }
