#!/usr/bin/python3
"""Cross-implementation check of the demo model: lmserve's engine against an existing llama.cpp
build, on the same token ids. Not part of `make test` and nothing here builds llama.cpp: give it
a llama.cpp source tree whose libllama is already built (LLAMA_DIR/include/llama.h,
LLAMA_DIR/build/bin/libllama.so); it compiles scripts/demo/llamacpp_check.c against that into
BUILD/demo/.

  scripts/demo/llamacpp_check.py --llama-cpp LLAMA_DIR --model MODEL.gguf --build BUILD
        --corpus BUILD/demo/corpus --ref models/NAME.ref.json [--out docs/demo-model/llamacpp.json]

Compares (one thread each, F16 KV caches both):
  - the last-position logits of the reference text (REF.json) — llama.cpp vs lmserve, and both
    vs PyTorch's F32 row recorded there;
  - greedy continuations (32 tokens) of the reference text and of the first 64 tokens of held-out
    windows;
  - held-out perplexity on the 24 packed windows of 640 tokens that scripts/train_demo.py
    evaluates (BUILD/demo/corpus/tokens.pt, the engine's tokenization).
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import train_demo  # noqa: E402
import torch  # noqa: E402

N_GREEDY = 32


def run(cmd, inp=None):
    r = subprocess.run(cmd, input=inp, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"llamacpp_check: {' '.join(cmd[:3])} failed: {r.stderr[-2000:]}")
    return r.stdout


def ids_arg(ids):
    return ",".join(map(str, ids))


def main():
    ap = argparse.ArgumentParser()
    for k in ("--llama-cpp", "--model", "--build", "--corpus", "--ref"):
        ap.add_argument(k, required=True)
    ap.add_argument("--out")
    ap.add_argument("--windows", type=int, default=24)
    a = ap.parse_args()
    L = os.path.abspath(a.llama_cpp)
    lib = os.path.join(L, "build", "bin")
    if not os.path.exists(os.path.join(L, "include", "llama.h")) or not os.path.exists(os.path.join(lib, "libllama.so")):
        sys.exit(f"llamacpp_check: {L} has no include/llama.h or build/bin/libllama.so (build llama.cpp first)")
    exe = os.path.join(a.build, "demo", "llamacpp_check")
    os.makedirs(os.path.dirname(exe), exist_ok=True)
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llamacpp_check.c")
    run(["cc", "-O2", "-I" + os.path.join(L, "include"), "-I" + os.path.join(L, "ggml", "include"), src,
         "-L" + lib, "-lllama", "-lggml", "-lggml-base", "-Wl,-rpath," + lib, "-lm", "-o", exe])
    commit = subprocess.run(["git", "-C", L, "log", "-1", "--format=%h"], capture_output=True, text=True).stdout.strip()

    ref = json.load(open(a.ref))
    toks = ref["tokens"]
    eng = [float(x) for x in run([f"{a.build}/lmserve-logits", a.model, "--tokens", ids_arg(toks),
                                  "--threads", "1"]).split()]
    lcp = [float(x) for x in run([exe, a.model], f"logits {ids_arg(toks)}\n").split()]
    pt = ref["last_row"]
    if not (len(eng) == len(lcp) == len(pt)):
        sys.exit(f"llamacpp_check: vocabulary sizes differ: lmserve {len(eng)}, llama.cpp {len(lcp)}, ref {len(pt)}")
    am = lambda v: max(range(len(v)), key=v.__getitem__)  # noqa: E731
    d_el = max(abs(x - y) for x, y in zip(eng, lcp))
    d_lp = max(abs(x - y) for x, y in zip(lcp, pt))
    d_ep = max(abs(x - y) for x, y in zip(eng, pt))

    # greedy continuations: the reference text, then the first 64 tokens of held-out windows
    _, held_ids = torch.load(os.path.join(a.corpus, "tokens.pt"))
    eot = int(run([f"{a.build}/lmserve-tokenize", a.model, "--special"], "<|endoftext|>").strip())
    windows = train_demo.pack(held_ids, 640, eot, random.Random(2))[:a.windows].tolist()
    prompts = [toks] + [w[:64] for w in windows[:8]]
    greedy = []
    for p in prompts:
        ge = [int(x) for x in run([f"{a.build}/lmserve-logits", a.model, "--tokens", ids_arg(p), "--greedy",
                                   str(N_GREEDY), "--threads", "1"]).strip().split(",")]
        gl = [int(x) for x in run([exe, a.model], f"greedy {N_GREEDY} {ids_arg(p)}\n").strip().split(",")]
        first = next((i for i, (x, y) in enumerate(zip(ge, gl)) if x != y), N_GREEDY)
        greedy.append({"prompt_tokens": len(p), "lmserve": ge, "llama_cpp": gl, "identical_prefix": first})

    # held-out perplexity, same windows as the trainer's evaluation
    req = "".join(f"nll {ids_arg(w)}\n" for w in windows)
    l_out = run([exe, a.model], req).split("\n")
    s_l = s_e = 0.0
    n_tok = 0
    for w, lo in zip(windows, l_out):
        sl, nl = lo.split()
        se, ne = run([f"{a.build}/lmserve-logits", a.model, "--tokens", ids_arg(w), "--nll", "--threads", "1"]).split()
        s_l += float(sl)
        s_e += float(se)
        n_tok += int(nl)
    res = {"llama_cpp_commit": commit, "model": os.path.basename(a.model),
           "last_logits": {"tokens": len(toks), "max_abs_delta_lmserve_vs_llama_cpp": d_el,
                           "max_abs_delta_llama_cpp_vs_pytorch_f32": d_lp, "max_abs_delta_lmserve_vs_pytorch_f32": d_ep,
                           "argmax_equal": am(eng) == am(lcp) == am(pt)},
           "greedy": greedy,
           "greedy_identical": sum(1 for g in greedy if g["identical_prefix"] == N_GREEDY),
           "heldout": {"windows": len(windows), "tokens": n_tok, "lmserve_loss": s_e / n_tok,
                       "lmserve_ppl": math.exp(s_e / n_tok), "llama_cpp_loss": s_l / n_tok,
                       "llama_cpp_ppl": math.exp(s_l / n_tok)}}
    if a.out:
        json.dump(res, open(a.out, "w"), indent=1)
    h = res["heldout"]
    print(f"llamacpp_check: {res['model']} with llama.cpp {commit}: last-position logits ({len(toks)}-token held-out "
          f"text, all {len(eng)}): max |lmserve - llama.cpp| {d_el:.2e}, max |llama.cpp - PyTorch F32| {d_lp:.2e}, "
          f"max |lmserve - PyTorch F32| {d_ep:.2e}, argmax {'equal' if res['last_logits']['argmax_equal'] else 'DIFFERENT'}; "
          f"greedy {N_GREEDY} tokens identical for {res['greedy_identical']}/{len(greedy)} prompts "
          f"(first divergence at {[g['identical_prefix'] for g in greedy]}); held-out perplexity over "
          f"{h['windows']} windows, {n_tok} tokens: lmserve {h['lmserve_ppl']:.3f} (loss {h['lmserve_loss']:.5f}), "
          f"llama.cpp {h['llama_cpp_ppl']:.3f} (loss {h['llama_cpp_loss']:.5f})", flush=True)


if __name__ == "__main__":
    main()
