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
. tests/suites/lib/chat.sh
DIR=tests/chat/gemma4
TPL=$DIR/template.jinja
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for f in "$DIR"/*.json; do
  grep -q '"enable_thinking"' "$f" || { echo "FAIL $(basename "$f"): states no enable_thinking"; exit 1; }
done
$PY tests/ref/render_jinja.py "$TPL" --out "$out/ref" "$DIR"/*.json
render_compare "chat (gemma4)" 20 "$out" "--arch gemma4" "$DIR"/*.json

template_fingerprint "chat (gemma4)" "$TPL" src/engine/text/chat_gemma4.c

# Refused, each with a message: a tool result that answers no call and has no name (Jinja2
# raises on 'response:' + None), no messages.
for badcase in \
  '{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "2", "content": "42"}]}' \
  '{"messages": []}'; do
  refused "$out" "--arch gemma4" "$badcase"
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
