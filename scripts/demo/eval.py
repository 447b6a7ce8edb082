#!/usr/bin/python3
"""What the demo model can do, measured on the exported GGUF by the engine (greedy, thinking off):

  scripts/demo/eval.py --model M.gguf --build BUILD --corpus CORPUS_DIR --out eval.json

- copy: "Repeat the following text exactly" on 200-word passages of held-out prose (never
  trained on); the token-for-token fraction = positions where the reply's token equals the
  passage's, over the passage's token count. Passages --copy-first .. --copy-first + --n-copy - 1
  of the held-out word stream: the copy test is 0-4 (the default); run H chose its checkpoint on
  20-39 (validation) and reports 0-4 and 5-19 (unseen) separately.
- define: "What does X mean?" for WordNet words (from the training corpus); right shape =
  "The word X (part of speech) means: ..." with the asked word (scripts/demo/corpus.py's
  define_answer; the shape taught since run H), and whether the definition is WordNet's; also
  counted: the older shape "X (part of speech) means: ..." (old_shape).
- json: the definition as JSON (parses, has the three keys).
- arith: two-digit additions (exact answer).
- tool: a weather question with a get_weather tool, through the server's /v1/chat/completions
  (a tool call with a city argument comes back as tool_calls).
"""
import argparse
import difflib
import json
import os
import random
import re
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus as C  # noqa: E402


def generate(a, prompt, n):
    r = subprocess.run([f"{a.build}/lmserve-generate", a.model, "--chat", "-p", prompt, "-n", str(n),
                        "--threads", "1"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"eval: lmserve-generate failed: {r.stderr}")
    return r.stdout


def tokens(a, text):
    out = subprocess.run([f"{a.build}/lmserve-tokenize", a.model], input=text, capture_output=True,
                         text=True).stdout.strip()
    return [int(x) for x in out.split(",")] if out else []


def copy_eval(a):
    paras = []
    for line in open(os.path.join(a.corpus, "heldout.jsonl")):
        d = json.loads(line)
        if d["kind"] in ("pydoc", "fortune"):
            paras += C.prose_paragraphs([d["text"]]) if d["kind"] == "pydoc" else [" ".join(d["text"].split())]
    words = " ".join(paras).split()
    res = []
    for k in range(a.copy_first, a.copy_first + a.n_copy):
        p = " ".join(words[k * 200:(k + 1) * 200])
        want = tokens(a, p)
        got_text = generate(a, "Repeat the following text exactly:\n\n" + p, len(want) + 8)
        got = tokens(a, got_text)
        same = sum(1 for x, y in zip(want, got) if x == y)
        prefix = next((i for i, (x, y) in enumerate(zip(want, got)) if x != y), min(len(want), len(got)))
        # also reported (not the criterion): the tokens in an alignment of the two (difflib's
        # matching blocks), which a slip that changes the token count does not shift away
        aligned = sum(b.size for b in difflib.SequenceMatcher(None, want, got, autojunk=False).get_matching_blocks())
        res.append({"passage_index": k, "passage_tokens": len(want), "token_fraction": same / len(want),
                    "aligned_fraction": aligned / len(want), "exact_prefix_tokens": prefix,
                    "passage": p, "reply": got_text})
    return res


def define_eval(a, wn):
    rng = random.Random(5)
    res = []
    for w, pos, d, _ in rng.sample([x for x in wn if " " not in x[0] and len(x[0]) > 3], a.n_define):
        out = generate(a, f"What does {w} mean?", 80)
        shape = re.match(r"^" + re.escape(C.define_answer(w, "@", "@").split(" (@)")[0]) +
                         r" \((noun|verb|adjective|adverb)\) means: .+", out.strip()) is not None
        old = re.match(r"^" + re.escape(w[0].upper() + w[1:]) + r" \((noun|verb|adjective|adverb)\) means: .+",
                       out.strip()) is not None
        defs = {(x[1], x[2]) for x in wn if x[0] == w}
        exact = any(out.strip().startswith(C.define_answer(w, p, dd)) for p, dd in defs)
        res.append({"word": w, "reply": out, "right_shape": shape, "old_shape": old, "wordnet_definition": exact})
    return res


POSES = ("noun", "verb", "adjective", "adverb")


def json_eval(a, wn):
    rng = random.Random(6)
    res = []
    for w, pos, d, _ in rng.sample([x for x in wn if " " not in x[0]], a.n_define):
        out = generate(a, f"Define {w}. Answer in JSON with the keys word, part_of_speech and definition.", 100)
        try:
            j = json.loads(out)
            ok = isinstance(j, dict) and set(j) == {"word", "part_of_speech", "definition"}
        except ValueError:
            ok = False
        res.append({"word": w, "reply": out, "valid_json_with_keys": ok})
    return res


def arith_eval(a):
    rng = random.Random(7)
    res = []
    for _ in range(a.n_define):
        x, y = rng.randint(10, 99), rng.randint(10, 99)
        out = generate(a, f"What is {x} + {y}?", 24)
        res.append({"q": f"{x} + {y}", "reply": out, "right": out.strip() == f"{x} + {y} = {x + y}."})
    return res


def tool_eval(a):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    srv = subprocess.Popen([f"{a.build}/lmserve", a.model, "--host", "127.0.0.1", "--port", str(port),
                            "--threads", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(url + "/health", timeout=2)
                break
            except OSError:
                time.sleep(0.1)
        res = []
        for city in ("Paris", "Tokyo", "Lima", "Oslo", "Cairo"):
            body = {"messages": [{"role": "system", "content": "You are a helpful assistant."},
                                 {"role": "user", "content": f"What is the weather in {city}?"}],
                    "tools": [C.TOOLS[0]], "temperature": 0, "max_tokens": 60,
                    "chat_template_kwargs": {"enable_thinking": False}}
            req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
            j = json.load(urllib.request.urlopen(req, timeout=120))
            msg = j["choices"][0]["message"]
            calls = msg.get("tool_calls") or []
            ok = len(calls) == 1 and calls[0]["function"]["name"] == "get_weather" and \
                json.loads(calls[0]["function"]["arguments"]).get("city") == city
            res.append({"city": city, "message": msg, "finish_reason": j["choices"][0]["finish_reason"],
                        "right_call": ok})
        return res
    finally:
        srv.terminate()
        srv.wait()


def main():
    ap = argparse.ArgumentParser()
    for k in ("--model", "--build", "--corpus", "--out"):
        ap.add_argument(k, required=True)
    ap.add_argument("--n-copy", type=int, default=5)
    ap.add_argument("--copy-first", type=int, default=0, help="first passage of the held-out word stream")
    ap.add_argument("--n-define", type=int, default=10)
    ap.add_argument("--tasks", default="copy,define,json,arith,tool",
                    help="comma-separated subset (a quick look at a checkpoint: --tasks copy,define)")
    a = ap.parse_args()
    tasks = a.tasks.split(",")
    for t in tasks:
        if t not in ("copy", "define", "json", "arith", "tool"):
            sys.exit(f"eval: --tasks: unknown task {t!r}")
    wn = C.wordnet()
    res, summary = {}, {}
    if "copy" in tasks:
        copy = res["copy"] = copy_eval(a)
        summary["copy_token_fraction_mean"] = sum(r["token_fraction"] for r in copy) / len(copy)
        summary["copy_token_fraction_each"] = [round(r["token_fraction"], 3) for r in copy]
        summary["copy_aligned_fraction_mean"] = sum(r["aligned_fraction"] for r in copy) / len(copy)
        summary["copy_exact_prefix_tokens_each"] = [r["exact_prefix_tokens"] for r in copy]
        # run H's sets: the copy test (passages 0-4), the unseen ones after it (5-19), and the
        # validation set the checkpoint was chosen on (20-39)
        for name, lo, hi in (("test_0_4", 0, 5), ("unseen_5_19", 5, 20), ("validation_20_39", 20, 40)):
            f = [r["token_fraction"] for r in copy if lo <= r["passage_index"] < hi]
            if len(f) == hi - lo:
                summary[f"copy_mean_{name}"] = sum(f) / len(f)
                f = [r["aligned_fraction"] for r in copy if lo <= r["passage_index"] < hi]
                summary[f"copy_aligned_mean_{name}"] = sum(f) / len(f)
    if "define" in tasks:
        define = res["define"] = define_eval(a, wn)
        summary["define_right_shape"] = f"{sum(r['right_shape'] for r in define)}/{len(define)}"
        summary["define_old_shape"] = f"{sum(r['old_shape'] for r in define)}/{len(define)}"
        summary["define_wordnet_definition"] = f"{sum(r['wordnet_definition'] for r in define)}/{len(define)}"
    if "json" in tasks:
        js = res["json"] = json_eval(a, wn)
        summary["json_valid"] = f"{sum(r['valid_json_with_keys'] for r in js)}/{len(js)}"
    if "arith" in tasks:
        ar = res["arith"] = arith_eval(a)
        summary["arith_right"] = f"{sum(r['right'] for r in ar)}/{len(ar)}"
    if "tool" in tasks:
        tool = res["tool"] = tool_eval(a)
        summary["tool_call_right"] = f"{sum(r['right_call'] for r in tool)}/{len(tool)}"
    json.dump(dict(summary=summary, **res), open(a.out, "w"), indent=1, ensure_ascii=False)
    print("eval: " + json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
