#!/usr/bin/env python3
"""nanochat chat rendering: token ids of lmserve-render --arch nanochat --ids TOK against
render_conversation's rule (nanochat/tokenizer.py, written here from its description) with the
reference tokenizer of nanochat_tok.py (tests/suites/46-nanochat-chat.sh).

  nanochat_chat.py LMSERVE_RENDER TOK.json

The rule: a first system message is merged into the next (user) message as system + "\\n\\n" +
user; then <|bos|>, and per message <|user_start|> text <|user_end|> or <|assistant_start|>
parts <|assistant_end|>, an assistant's parts being text, "python" (<|python_start|> text
<|python_end|>) and "python_output" (<|output_start|> text <|output_end|>), every text encoded
alone with encode_ordinary. The generation prompt is render_for_completion's trailing
<|assistant_start|>; an assistant prefill (continue_final) is the same ids without the last
<|assistant_end|>. On the lmserve side each conversation is the OpenAI messages a client sends:
an assistant's parts joined as the text a reply streamed (the markers as text). Then the
conversations nanochat refuses (its asserts), each a failure naming the message."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nanochat_tok  # noqa: E402

M = {"python": ("<|python_start|>", "<|python_end|>"),
     "python_output": ("<|output_start|>", "<|output_end|>")}


def reference(tok, conv, gen, prefill):
    ranks, sp = tok
    enc = lambda s: nanochat_tok.encode_ordinary(ranks, s)
    msgs = [dict(m) for m in conv]
    if msgs[0]["role"] == "system":
        msgs[1]["content"] = msgs[0]["content"] + "\n\n" + msgs[1]["content"]
        msgs = msgs[1:]
    ids = [sp["<|bos|>"]]
    for m in msgs:
        if m["role"] == "user":
            ids += [sp["<|user_start|>"]] + enc(m["content"]) + [sp["<|user_end|>"]]
        else:
            ids.append(sp["<|assistant_start|>"])
            parts = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
            for p in parts:
                if p["type"] == "text":
                    ids += enc(p["text"])
                else:
                    o, c = M[p["type"]]
                    ids += [sp[o]] + enc(p["text"]) + [sp[c]]
            ids.append(sp["<|assistant_end|>"])
    if prefill:
        ids.pop()
    elif gen:
        ids.append(sp["<|assistant_start|>"])
    return ids


def openai(conv):
    out = []
    for m in conv:
        c = m["content"]
        if isinstance(c, list):
            c = "".join(p["text"] if p["type"] == "text" else M[p["type"]][0] + p["text"] + M[p["type"]][1] for p in c)
        out.append({"role": m["role"], "content": c})
    return out


U = lambda s: {"role": "user", "content": s}
A = lambda s: {"role": "assistant", "content": s}
S = lambda s: {"role": "system", "content": s}
CASES = [
    [U("Hello!")],
    [U("What is 2+2?"), A("4")],
    [S("You are terse."), U("Hi there")],
    [S(""), U("")],
    [S("rules\n"), U("\nq"), A("a"), U("again")],
    [U("a"), A("b"), U("c"), A("d"), U("e")],
    [U("Use <|bos|> and <|user_end|> as text"), A("<|assistant_end|> is text too")],
    [U("calc"), A([{"type": "text", "text": "Let me compute: "},
                   {"type": "python", "text": "12*34"},
                   {"type": "python_output", "text": "408"},
                   {"type": "text", "text": " so 408."}])],
    [U("count"), A([{"type": "python", "text": "'strawberry'.count('r')"},
                    {"type": "python_output", "text": "3"}])],
    [U("unpaired"), A("a <|python_start|> b, no end")],
    [U("unicode: naïve café 東京 🎉"), A("ok 👍")],
    [U("  spaces  \n\n\t"), A("\n")],
    [U("numbers 1234567 3.14159 1,000,000")],
    [U("it's you're WE'LL")],
    [S("sys"), U("u1"), A("a1"), U("u2"), A("a2")],
]


def run(tool, tokfile, case):
    r = subprocess.run([tool, "--arch", "nanochat", "--ids", tokfile], input=json.dumps(case).encode(),
                       capture_output=True)
    return r.returncode, r.stdout.decode().strip(), r.stderr.decode()


def main():
    tool, tokfile = sys.argv[1], sys.argv[2]
    with open(tokfile, encoding="utf-8") as f:
        doc = json.load(f)
    import base64
    tok = ({base64.b64decode(h): i for i, h in enumerate(doc["mergeable_ranks"])}, doc["special_tokens"])
    bad = n = 0
    for conv in CASES:
        modes = [(True, False), (False, False)]
        if conv[-1]["role"] == "assistant":
            modes.append((False, True))
        for gen, prefill in modes:
            case = {"messages": openai(conv), "add_generation_prompt": gen, "continue_final": prefill}
            want = ",".join(map(str, reference(tok, conv, gen, prefill)))
            rc, got, err = run(tool, tokfile, case)
            n += 1
            if rc != 0 or got != want:
                bad += 1
                print("FAIL %s gen=%s prefill=%s: %s\n  ours %s\n  ref  %s" % (json.dumps(conv)[:100], gen, prefill, err.strip(), got[:200], want[:200]))
    refused = [
        ([S("only system")], "messages"),
        ([S("s"), A("a")], "messages[1].role"),
        ([A("first")], "messages[0].role"),
        ([U("a"), U("b")], "messages[1].role"),
        ([U("a"), A("b"), A("c")], "messages[2].role"),
        ([U("a"), S("late system")], "messages[1].role"),
        ([U("a"), {"role": "tool", "content": "x", "tool_call_id": "1"}], "messages[1].role"),
        ([U("a"), {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}], "messages[1].tool_calls"),
        ([], "messages"),
    ]
    for conv, param in refused:
        rc, got, err = run(tool, tokfile, {"messages": conv, "add_generation_prompt": True})
        n += 1
        if rc == 0 or "(%s)" % param not in err:
            bad += 1
            print("FAIL refused case %s: rc %d, %s" % (json.dumps(conv)[:80], rc, err.strip()))
    print("nanochat chat: %d renderings and refusals compared with render_conversation's rule: %d differ" % (n, bad))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
