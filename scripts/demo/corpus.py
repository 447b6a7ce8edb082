#!/usr/bin/python3
"""Builds the demo model's corpus from installed Debian packages only (scripts/deps.sh train).

  scripts/demo/corpus.py OUTDIR

Writes OUTDIR/train.jsonl and OUTDIR/heldout.jsonl (one {"kind", "text"} document a line, the
text already rendered: plain prose, or a whole conversation in Qwen3's ChatML), and
OUTDIR/sources.json (the Debian packages and versions read, document counts per kind).

Sources: WordNet 3.0 (wordnet-base: definitions and examples), fortune cookies (fortunes-min,
fortunes), Python's documentation sources (python3-doc). Chat-shaped documents are generated from
them: definitions, arithmetic, repeating a passage (the copy skill prompt-lookup speculation needs),
answering in JSON, hermes <tool_call> tool calls with tool responses; a share carries a think block.

Deterministic: a fixed seed, documents deduplicated by their normalized text, and the held-out
split decided by a hash of each document's text (so it does not move when sources are added).
"""
import glob
import gzip
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import unicodedata

SEED = 1234
HELDOUT_MOD = 50  # 1 in 50 documents is held out

PKGS = ["wordnet-base", "fortunes-min", "fortunes", "python3-doc"]


def pkg_version(p):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", p], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"corpus: Debian package {p} is not installed (run scripts/deps.sh train)")
    return r.stdout.strip()


def clean(s):
    s = unicodedata.normalize("NFC", s)
    s = s.replace("\r\n", "\n").replace("\t", "    ")
    # never let corpus text contain the template's control strings
    for t in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
              "</tool_call>", "<tool_response>", "</tool_response>", "<tools>", "</tools>"):
        s = s.replace(t, "")
    return s


# ---------------------------------------------------------------- sources
POS = {"n": "noun", "v": "verb", "a": "adjective", "s": "adjective", "r": "adverb"}


def wordnet():
    """[(word, pos, definition, [examples])] from WordNet's data.* files."""
    out = []
    for f in ("noun", "verb", "adj", "adv"):
        path = f"/usr/share/wordnet/data.{f}"
        with open(path, encoding="latin-1") as fh:
            for line in fh:
                if line.startswith("  "):
                    continue
                head, _, gloss = line.partition(" | ")
                parts = head.split()
                pos = POS[parts[2]]
                n = int(parts[3], 16)
                words = [parts[4 + 2 * i].replace("_", " ") for i in range(n)]
                words = [re.sub(r"\(.*\)$", "", w) for w in words]
                gloss = gloss.strip()
                exs = re.findall(r'"([^"]+)"', gloss)
                defn = gloss.split('; "')[0].split(';  "')[0].strip().rstrip(";").strip()
                if not defn or len(defn) > 200:
                    continue
                for w in words[:2]:
                    out.append((w, pos, defn, exs))
    return out


def fortunes():
    out = []
    for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if path.endswith(".dat") or os.path.islink(path) or os.path.isdir(path):
            continue
        try:
            text = open(path, encoding="utf-8").read()
        except UnicodeDecodeError:
            text = open(path, encoding="latin-1").read()
        for chunk in text.split("\n%\n"):
            chunk = chunk.strip("%\n ")
            if 40 <= len(chunk) <= 1500:
                out.append(chunk)
    return out


def pydocs():
    """Python documentation sources (reST), split into sections of a few paragraphs."""
    out = []
    # python3-doc's directories are symlinks to one tree: read each real file once
    files = sorted({os.path.realpath(f) for f in
                    glob.glob("/usr/share/doc/python3*/html/_sources/**/*.txt", recursive=True)})
    for path in files:
        try:
            text = open(path, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        paras = [p.strip("\n") for p in re.split(r"\n\s*\n", text) if p.strip()]
        cur = []
        size = 0
        for p in paras:
            cur.append(p)
            size += len(p)
            if size > 1200:
                out.append("\n\n".join(cur))
                cur, size = [], 0
        if cur:
            out.append("\n\n".join(cur))
    return out


def prose_paragraphs(pydoc_chunks):
    """Plain prose paragraphs (no markup-heavy lines) for the copy task."""
    out = []
    for c in pydoc_chunks:
        for p in c.split("\n\n"):
            p = " ".join(p.split())
            if len(p) < 120 or any(ch in p for ch in "`*|=<>{}_\\") or p.startswith(".."):
                continue
            out.append(p)
    return out


# ---------------------------------------------------------------- Qwen3 ChatML rendering
# Reproduces the Qwen3 template for the shapes generated here; main() checks samples of every
# kind against lmserve-render (the engine's renderer) when --check BIN is given.
def tools_block(tools):
    s = ("\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
         "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
    for t in tools:
        s += "\n" + json.dumps(t, ensure_ascii=False)
    s += ("\n</tools>\n\nFor each function call, return a json object with function name and "
          "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
          "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>")
    return s


def render(msgs, tools=None):
    out = ""
    first_sys = msgs and msgs[0]["role"] == "system"
    if tools:
        out += "<|im_start|>system\n" + (msgs[0]["content"] if first_sys else "") + tools_block(tools)
        out += "<|im_end|>\n"
    elif first_sys:
        out += "<|im_start|>system\n" + msgs[0]["content"] + "<|im_end|>\n"
    last_query = max(i for i, m in enumerate(msgs) if m["role"] == "user" and
                     not m["content"].startswith("<tool_response>"))
    n = len(msgs)
    for i, m in enumerate(msgs):
        if m["role"] == "system" and i == 0:
            continue
        if m["role"] == "user":
            out += "<|im_start|>user\n" + m["content"] + "<|im_end|>\n"
        elif m["role"] == "assistant":
            content = m.get("content") or ""
            rc = m.get("reasoning_content", "")
            if i > last_query and (i == n - 1 or rc):
                out += "<|im_start|>assistant\n<think>\n" + rc.strip("\n") + "\n</think>\n\n" + content.lstrip("\n")
            else:
                out += "<|im_start|>assistant\n" + content
            for k, tc in enumerate(m.get("tool_calls", [])):
                if (k == 0 and content) or k > 0:
                    out += "\n"
                out += ('<tool_call>\n{"name": "' + tc["name"] + '", "arguments": ' +
                        json.dumps(tc["arguments"], ensure_ascii=False) + "}\n</tool_call>")
            out += "<|im_end|>\n"
        elif m["role"] == "tool":
            prev_tool = i > 0 and msgs[i - 1]["role"] == "tool"
            next_tool = i + 1 < n and msgs[i + 1]["role"] == "tool"
            if not prev_tool:
                out += "<|im_start|>user"
            out += "\n<tool_response>\n" + m["content"] + "\n</tool_response>"
            if not next_tool:
                out += "<|im_end|>\n"
    return out


def openai_msgs(msgs):
    """The same conversation as OpenAI-style messages (for lmserve-render)."""
    res = []
    for m in msgs:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{"type": "function", "function": {"name": t["name"], "arguments": t["arguments"]}}
                               for t in m["tool_calls"]]
        res.append(m)
    return res


# ---------------------------------------------------------------- chat tasks
SYSTEMS = ["You are a helpful assistant.", "You are a concise assistant. Answer briefly.",
           "You are lmserve's demo model, a small assistant."]

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "define_word", "description": "Look up the definition of a word",
                                      "parameters": {"type": "object", "properties": {"word": {"type": "string"}},
                                                     "required": ["word"]}}},
    {"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic expression",
                                      "parameters": {"type": "object",
                                                     "properties": {"expression": {"type": "string"}},
                                                     "required": ["expression"]}}},
]
CITIES = ["Paris", "London", "Berlin", "Tokyo", "Madrid", "Rome", "Oslo", "Lisbon", "Cairo", "Lima", "Dublin",
          "Vienna", "Prague", "Athens", "Seoul", "Delhi", "Sydney", "Toronto", "Nairobi", "Quito"]
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "snowy", "foggy", "clear"]


def maybe_system(rng, msgs):
    r = rng.random()
    if r < 0.5:
        return [{"role": "system", "content": rng.choice(SYSTEMS)}] + msgs
    return msgs


def article(pos):
    return "an" if pos[0] in "aeiou" else "a"


def define_answer(w, pos, d):
    """The definition reply the demo model is taught from stage 4 (run H) on, and that
    scripts/demo/eval.py checks: "The word dog (noun) means: ...". The asked word keeps its own
    token (" dog" in "What does dog mean?" is " dog" here too), so the model's copy circuit can
    carry it over; the corpus's older shape "Dog (noun) means: ..." needs the word copied across a
    change of case (" mask" -> "M" + "ask": different tokens for every word), which the 3 M model
    never learned (0-1/10 through runs F and G; docs/demo-model.md, "Run H")."""
    return f"The word {w} ({pos}) means: {d}."


def t_define(rng, wn, new_shape=False):
    """A definition exchange. The corpus's documents keep the original reply shape
    ("Dog (noun) means: ...": the BPE and stage 1 were trained on them, so changing them would
    change the tokenizer); new_shape=True gives define_answer()'s, which the run H curriculum teaches."""
    w, pos, d, exs = rng.choice(wn)
    q = rng.choice([f"What does {w} mean?", f"What does \"{w}\" mean?", f"Define {w}.",
                    f"What is the meaning of the word {w}?", f"What is the definition of {w}?"])
    a = define_answer(w, pos, d) if new_shape else f"{w[0].upper() + w[1:]} ({pos}) means: {d}."
    if exs and rng.random() < 0.6:
        a += f" For example: \"{exs[0]}\"."
    think = f"The user asks what the {pos} \"{w}\" means. It means {d}." if rng.random() < 0.3 else ""
    return maybe_system(rng, [{"role": "user", "content": q},
                              {"role": "assistant", "content": a, "reasoning_content": think}]), None


def t_arith(rng, wn):
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    op = rng.choice("+-*")
    if op == "*":
        a, b = rng.randint(0, 12), rng.randint(0, 12)
    r = a + b if op == "+" else a - b if op == "-" else a * b
    sym = {"+": "+", "-": "-", "*": "*"}[op]
    q = rng.choice([f"What is {a} {sym} {b}?", f"Compute {a} {sym} {b}.", f"{a} {sym} {b} = ?"])
    think = ""
    if rng.random() < 0.4:
        if op == "+":
            think = f"I add {a} and {b}: {a} + {b} = {r}."
        elif op == "-":
            think = f"I subtract {b} from {a}: {a} - {b} = {r}."
        else:
            think = f"I multiply {a} by {b}: {a} * {b} = {r}."
    return maybe_system(rng, [{"role": "user", "content": q},
                              {"role": "assistant", "content": f"{a} {sym} {b} = {r}.",
                               "reasoning_content": think}]), None


def passage(rng, paras, fort, lo, hi):
    """A passage of lo..hi words made of consecutive-ish source paragraphs."""
    target = rng.randint(lo, hi)
    words = []
    while len(words) < target:
        src = rng.choice(paras) if rng.random() < 0.7 else " ".join(rng.choice(fort).split())
        words += src.split()
    return " ".join(words[:target])


def t_repeat(rng, paras, fort):
    lo, hi = rng.choice([(5, 40), (30, 120), (100, 230)])
    p = passage(rng, paras, fort, lo, hi)
    kind = rng.random()
    if kind < 0.75:
        q = rng.choice(["Repeat the following text exactly:\n\n", "Repeat this paragraph word for word:\n\n",
                        "Copy the following passage:\n\n", "Please repeat after me:\n\n"]) + p
        a = p
    elif kind < 0.9:
        q = p + "\n\n" + rng.choice(["Repeat the text above exactly.", "Say that again, word for word."])
        a = p
    else:
        sents = re.split(r"(?<=[.!?]) ", p)
        q = "What is the first sentence of this text?\n\n" + p
        a = sents[0]
    return maybe_system(rng, [{"role": "user", "content": q},
                              {"role": "assistant", "content": a, "reasoning_content": ""}]), None


def t_json(rng, wn):
    w, pos, d, exs = rng.choice(wn)
    q = rng.choice([f"Define {w}. Answer in JSON with the keys word, part_of_speech and definition.",
                    f"Give me the definition of \"{w}\" as a JSON object.",
                    f"Return JSON only: the word {w}, its part of speech and its definition."])
    a = json.dumps({"word": w, "part_of_speech": pos, "definition": d}, ensure_ascii=False)
    return maybe_system(rng, [{"role": "user", "content": q},
                              {"role": "assistant", "content": a, "reasoning_content": ""}]), None


def t_tool(rng, wn):
    kind = rng.randrange(3)
    sys_msg = {"role": "system", "content": rng.choice(SYSTEMS)}
    if kind == 0:
        city = rng.choice(CITIES)
        temp, cond = rng.randint(-10, 35), rng.choice(CONDITIONS)
        q = rng.choice([f"What is the weather in {city}?", f"How is the weather in {city} today?",
                        f"Is it warm in {city} right now?"])
        call = {"name": "get_weather", "arguments": {"city": city}}
        resp = json.dumps({"city": city, "temperature_c": temp, "condition": cond})
        final = f"It is {temp} °C and {cond} in {city}."
    elif kind == 1:
        w, pos, d, exs = rng.choice(wn)
        q = rng.choice([f"Look up the word {w}.", f"Use the dictionary: what does {w} mean?"])
        call = {"name": "define_word", "arguments": {"word": w}}
        resp = json.dumps({"word": w, "part_of_speech": pos, "definition": d})
        final = f"{w[0].upper() + w[1:]} ({pos}) means: {d}."
    else:
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        q = rng.choice([f"Use the calculator to add {a} and {b}.", f"What is {a} + {b}? Use a tool."])
        call = {"name": "calculator", "arguments": {"expression": f"{a} + {b}"}}
        resp = json.dumps({"result": a + b})
        final = f"{a} + {b} = {a + b}."
    think = f"I should call {call['name']} to answer this." if rng.random() < 0.3 else ""
    msgs = [sys_msg, {"role": "user", "content": q},
            {"role": "assistant", "content": "", "reasoning_content": think, "tool_calls": [call]},
            {"role": "tool", "content": resp},
            {"role": "assistant", "content": final, "reasoning_content": ""}]
    # a share ends at the call: the model must learn to stop after </tool_call>
    if rng.random() < 0.4:
        msgs = msgs[:3]
    return msgs, TOOLS


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "build/demo"
    check_bin = None
    if "--check" in sys.argv:
        check_bin = sys.argv[sys.argv.index("--check") + 1]
    n_chat = int(os.environ.get("DEMO_N_CHAT", "60000"))
    os.makedirs(out, exist_ok=True)
    rng = random.Random(SEED)
    versions = {p: pkg_version(p) for p in PKGS}

    wn = wordnet()
    fort = fortunes()
    pyd = pydocs()
    paras = prose_paragraphs(pyd)
    docs = []  # (kind, text)
    for w, pos, d, exs in wn[::2]:
        t = f"{w} ({pos}): {d}."
        if exs:
            t += " Example: \"" + exs[0] + "\"."
        docs.append(("wordnet", t))
    # wordnet entries are short: group them 8 to a document
    wn_docs = [d[1] for d in docs]
    docs = [("wordnet", "\n".join(wn_docs[i:i + 8])) for i in range(0, len(wn_docs), 8)]
    docs += [("fortune", f) for f in fort]
    docs += [("pydoc", p) for p in pyd]

    tasks = [("define", 0.25, t_define), ("arith", 0.12, t_arith), ("repeat", 0.38, None),
             ("json", 0.13, t_json), ("tool", 0.12, t_tool)]
    checked = {}
    for _ in range(n_chat):
        r = rng.random()
        acc = 0.0
        for name, w, fn in tasks:
            acc += w
            if r < acc:
                break
        msgs, tools = (t_repeat(rng, paras, fort) if name == "repeat" else fn(rng, wn))
        text = render(msgs, tools)
        docs.append(("chat-" + name, text))
        if check_bin and checked.get(name, 0) < 3:
            checked[name] = checked.get(name, 0) + 1
            case = {"messages": openai_msgs(msgs)}
            if tools:
                case["tools"] = tools
            ref = subprocess.run([check_bin], input=json.dumps(case), capture_output=True, text=True)
            if ref.returncode != 0 or ref.stdout != text:
                sys.exit(f"corpus: the {name} rendering differs from lmserve-render:\n--- ours\n{text}\n"
                         f"--- lmserve-render (rc {ref.returncode})\n{ref.stdout}{ref.stderr}")

    seen = set()
    train, held = [], []
    counts = {}
    for kind, text in docs:
        text = clean(text).strip("\n") if not kind.startswith("chat") else text
        key = hashlib.sha1(" ".join(text.lower().split()).encode()).digest()
        if key in seen or not text:
            continue
        seen.add(key)
        h = int.from_bytes(hashlib.sha1(text.encode()).digest()[:8], "little")
        dst = held if h % HELDOUT_MOD == 0 else train
        dst.append({"kind": kind, "text": text})
        c = counts.setdefault(kind, [0, 0, 0])
        c[0 if dst is train else 1] += 1
        c[2] += len(text.encode())
    for name, lst in (("train.jsonl", train), ("heldout.jsonl", held)):
        with open(os.path.join(out, name), "w") as f:
            for d in lst:
                f.write(json.dumps(d, ensure_ascii=False) + "\n")
    info = {"packages": versions, "seed": SEED, "heldout": f"sha1(text) % {HELDOUT_MOD} == 0",
            "kinds": {k: {"train_docs": v[0], "heldout_docs": v[1], "bytes": v[2]} for k, v in counts.items()},
            "render_checked_against_lmserve_render": bool(check_bin)}
    with open(os.path.join(out, "sources.json"), "w") as f:
        json.dump(info, f, indent=1)
    total = sum(v[2] for v in counts.values())
    print(f"corpus: {len(train)} train + {len(held)} held-out documents, {total / 1e6:.1f} MB -> {out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
