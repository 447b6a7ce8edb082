#!/usr/bin/python3
"""Reference chat rendering: a model's own chat_template run by Jinja2 the way Hugging Face
transformers runs it (ImmutableSandboxedEnvironment, trim_blocks + lstrip_blocks, loopcontrols,
its own `tojson` = json.dumps(x, ensure_ascii=False) with default separators and no key sorting,
raise_exception), so tests can compare our C renderers with it byte for byte.

  render_jinja.py TOKENIZER_CONFIG.json --out DIR CASE.json...   writes DIR/<case>.txt
  render_jinja.py TOKENIZER_CONFIG.json CASE.json                 prints one rendering
  render_jinja.py TEMPLATE.jinja ...                              the same with a bare template
                                                                  file, bos_token = eos_token = ""
                                                                  (gemma4: lmserve adds <bos> as
                                                                  a token, not as template text)
  render_jinja.py --tojson-cases N SEED                           prints N random JSON values, one
                                                                  per line (ASCII-escaped input)
  render_jinja.py --tojson-expect < values.jsonl                  prints json.dumps(ensure_ascii=False)

  render_jinja.py --args-objects ...                             tool-call arguments given as JSON
                                                                  text are parsed into objects first
                                                                  (a server does that before a
                                                                  template that iterates
                                                                  `arguments|items`: Qwen3.5's)

A case is {"messages": [...], "tools": [...]?, "add_generation_prompt": bool?, "enable_thinking":
bool?}. Before rendering, messages get the same normalization lmserve's request mapping applies
(chat_msgs_from_openai_json), which is not part of the template: null/absent content -> "",
content as a list of text parts -> their texts joined with "\\n", role developer -> system, and
"reasoning" -> "reasoning_content". enable_thinking is passed only when the case sets it (the
template tests `enable_thinking is defined`).
"""
import json
import os
import random
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def compile_template(source):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source)


ARGS_OBJECTS = False


def normalize(msg):
    m = dict(msg)
    if ARGS_OBJECTS and m.get("tool_calls"):
        calls = []
        for tc in m["tool_calls"]:
            tc = dict(tc)
            fn = dict(tc.get("function") or {})
            if isinstance(fn.get("arguments"), str):
                fn["arguments"] = json.loads(fn["arguments"])
            tc["function"] = fn
            calls.append(tc)
        m["tool_calls"] = calls
    if m.get("role") == "developer":
        m["role"] = "system"
    c = m.get("content")
    if c is None:
        m["content"] = ""
    elif isinstance(c, list):
        m["content"] = "\n".join(p["text"] for p in c)
    if m.get("reasoning_content") is None:
        m.pop("reasoning_content", None)
        if m.get("reasoning") is not None:
            m["reasoning_content"] = m["reasoning"]
    return m


def render(tmpl, case, config):
    kwargs = dict(messages=[normalize(m) for m in case["messages"]],
                  tools=case.get("tools") or None,
                  documents=None,
                  add_generation_prompt=case.get("add_generation_prompt", False),
                  bos_token=config.get("bos_token") or "", eos_token=config.get("eos_token") or "")
    if "enable_thinking" in case:
        kwargs["enable_thinking"] = case["enable_thinking"]
    return tmpl.render(**kwargs)


def random_value(rng, depth=0):
    kind = rng.randrange(10 if depth < 3 else 6)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice([0, -1, 1, 7, 2**31, -2**40, 2**63 - 1, -2**63, rng.randrange(-10**12, 10**12)])
    if kind == 2:  # floats across magnitudes: exercises Python's repr rules
        e = rng.randrange(-30, 30)
        x = rng.random() * 10.0 ** e * rng.choice([1, -1])
        return rng.choice([x, round(x, rng.randrange(0, 6)), float(rng.randrange(-10**6, 10**6)),
                           1e16, 1e15, 1e-4, 1e-5, 0.1, -0.0, 0.0, 1.5e300, 5e-324, 2.5, 1/3])
    if kind in (3, 4, 5):
        alphabet = ["a", "Z", " ", "/", "\\", '"', "'", "\n", "\r", "\t", "\b", "\f", "\x00", "\x01",
                    "\x1f", "\x7f", "\x80", "é", "ß", "中", "文", "😀", "👩‍💻", "\u2028", "\u2029",
                    "\ufeff", "<", ">", "&", "{", "}", ":", ","]
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))
    if kind in (6, 7):
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    obj = {}
    for _ in range(rng.randrange(0, 5)):
        obj[random_value(rng, 3) if rng.random() < 0.3 else rng.choice(["type", "name", "b", "a", "é", "k\n"])] = \
            random_value(rng, depth + 1)
    return {str(k).replace("\x00", "0"): v for k, v in obj.items()}  # jansson keys hold no NUL


def main(argv):
    global ARGS_OBJECTS
    if "--args-objects" in argv:
        ARGS_OBJECTS = True
        argv = [a for a in argv if a != "--args-objects"]
    if argv[1:2] == ["--tojson-cases"]:
        n, seed = int(argv[2]), int(argv[3])
        rng = random.Random(seed)
        for _ in range(n):
            print(json.dumps(random_value(rng)))
        return 0
    if argv[1:2] == ["--tojson-expect"]:
        out = []
        for line in sys.stdin.read().split("\n")[:-1]:
            out.append(json.dumps(json.loads(line), ensure_ascii=False) if line else "")
        sys.stdout.buffer.write(("\n".join(out) + "\n").encode("utf-8", "surrogatepass"))
        return 0
    if argv[1].endswith(".jinja"):  # a template file: no bos/eos tokens (see the docstring)
        config = {"chat_template": open(argv[1], encoding="utf-8").read()}
    else:
        config = json.load(open(argv[1], encoding="utf-8"))
    tmpl = compile_template(config["chat_template"])
    if argv[2:3] == ["--out"]:
        outdir = argv[3]
        os.makedirs(outdir, exist_ok=True)
        for path in argv[4:]:
            case = json.load(open(path, encoding="utf-8"))
            name = os.path.splitext(os.path.basename(path))[0]
            with open(os.path.join(outdir, name + ".txt"), "wb") as f:
                f.write(render(tmpl, case, config).encode("utf-8"))
        return 0
    case = json.load(open(argv[2], encoding="utf-8"))
    sys.stdout.buffer.write(render(tmpl, case, config).encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
