#!/usr/bin/python3
"""Exports the trained demo model to GGUF with lmserve-mkmodel --weights and proves the export:
the engine's logits (lmserve-logits) against PyTorch's on held-out text, F32 and Q8_0.

  scripts/demo/export.py --run RUN_DIR --tokenizer TOKDIR --corpus CORPUS_DIR --build BUILD
        --name NAME --out MODEL_Q8_0.gguf --ref REF.json

RUN_DIR holds config.json + model.safetensors (scripts/train_demo.py). Writes BUILD/demo/NAME-f32.gguf
(not committed), the Q8_0 file, and REF.json: a held-out text, its token ids, PyTorch's F32 logits
of the last position (whole row) and its greedy continuation, plus the agreement measured here —
tests/suites/63-demo-model.sh checks the committed Q8_0 file against it. Fails (exit 1) when the
F32 export disagrees with PyTorch (max |delta logit| >= 1e-3 or a different greedy continuation):
with an F32 K/V cache (--cache-type f32) against plain F32 PyTorch, and with the default F16 cache
against PyTorch with K/V rounded to halfs.
"""
import argparse
import json
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import train_demo  # noqa: E402  (the model definition; sets torch to one thread)
import torch  # noqa: E402

N_PROMPT = 48
N_GREEDY = 32


def load_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        out[k] = torch.frombuffer(bytearray(raw[base + b:base + e]), dtype=torch.float32).reshape(v["shape"])
    return out


def run(cmd, inp=None):
    r = subprocess.run(cmd, input=inp, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"export: {' '.join(cmd)} failed: {r.stderr}")
    return r.stdout


def engine_last_logits(build, model, ids, cache="f16"):
    out = run([f"{build}/lmserve-logits", model, "--tokens", ",".join(map(str, ids)), "--threads", "1",
               "--cache-type", cache])
    return torch.tensor([float(x) for x in out.split()])


def engine_greedy(build, model, ids, n, cache="f16"):
    out = run([f"{build}/lmserve-logits", model, "--tokens", ",".join(map(str, ids)), "--greedy", str(n),
               "--threads", "1", "--cache-type", cache])
    return [int(x) for x in out.strip().split(",") if x]


def forward(model, ids, kv_half):
    train_demo.KV_HALF = kv_half
    try:
        with torch.no_grad():
            return model(torch.tensor([ids]))[0]
    finally:
        train_demo.KV_HALF = False


def compare(build, gguf, model, ids, positions, kv_half, cache="f16"):
    worst = 0.0
    ref = forward(model, ids, kv_half)
    for p in positions:
        got = engine_last_logits(build, gguf, ids[:p + 1], cache)
        if got.shape != ref[p].shape:
            sys.exit(f"export: {gguf}: {got.shape[0]} logits, PyTorch has {ref[p].shape[0]}")
        worst = max(worst, float((got - ref[p]).abs().max()))
    return worst


def torch_greedy(model, ids, n, kv_half):
    ids = list(ids)
    out = []
    for _ in range(n):
        nxt = int(forward(model, ids, kv_half)[-1].argmax())
        out.append(nxt)
        ids.append(nxt)
    return out


def main():
    ap = argparse.ArgumentParser()
    for a in ("--run", "--tokenizer", "--corpus", "--build", "--name", "--out", "--ref"):
        ap.add_argument(a, required=True)
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.run, "config.json")))
    model = train_demo.Qwen3(cfg)
    sd = load_safetensors(os.path.join(a.run, "model.safetensors"))
    own = model.hf_state()
    if set(sd) != set(own):
        sys.exit(f"export: tensor names differ from the model definition: {sorted(set(sd) ^ set(own))[:5]}")
    with torch.no_grad():
        for k, t in own.items():
            t.copy_(sd[k])
    model.eval()

    os.makedirs(os.path.join(a.build, "demo"), exist_ok=True)
    f32 = os.path.join(a.build, "demo", a.name + "-f32.gguf")
    mk = f"{a.build}/lmserve-mkmodel"
    run([mk, "--weights", a.run, "--name", a.name, "--type", "f32", "--tokenizer", a.tokenizer, "-o", f32])
    run([mk, "--weights", a.run, "--name", a.name, "--type", "q8_0", "--tokenizer", a.tokenizer, "-o", a.out])

    # a held-out prose document (never trained on), tokenized by the exported file's tokenizer
    text = None
    for line in open(os.path.join(a.corpus, "heldout.jsonl")):
        d = json.loads(line)
        if d["kind"] == "pydoc" and len(d["text"]) > 600:
            text = d["text"][:400]
            break
    ids = [int(x) for x in run([f"{a.build}/lmserve-tokenize", f32], text).strip().split(",")][:N_PROMPT]
    positions = sorted(set(range(0, len(ids), 6)) | {len(ids) - 1})
    # the check: the F32 file with an F32 K/V cache (--cache-type f32) against plain F32
    # PyTorch; then, for information, the default F16 cache against plain F32 PyTorch and against
    # PyTorch with K/V rounded to halfs as that cache stores them
    d_f32kv = compare(a.build, f32, model, ids, positions, False, "f32")
    d_f32 = compare(a.build, f32, model, ids, positions, False)
    d_f32h = compare(a.build, f32, model, ids, positions, True)
    d_q8 = compare(a.build, a.out, model, ids, positions, False)
    g_ref = torch_greedy(model, ids, N_GREEDY, False)
    g_refh = torch_greedy(model, ids, N_GREEDY, True)
    g_f32 = engine_greedy(a.build, f32, ids, N_GREEDY)
    g_f32kv = engine_greedy(a.build, f32, ids, N_GREEDY, "f32")
    g_q8 = engine_greedy(a.build, a.out, ids, N_GREEDY)
    same_q8 = sum(1 for x, y in zip(g_ref, g_q8) if x == y)
    first_diff_q8 = next((i for i, (x, y) in enumerate(zip(g_ref, g_q8)) if x != y), N_GREEDY)
    last = forward(model, ids, False)[-1]
    ref = {"name": a.name, "text": text, "tokens": ids, "last_row": [round(float(x), 6) for x in last],
           "greedy_torch": g_ref, "greedy_q8_0": g_q8,
           "measured": {"f32_cache_f32_max_abs_delta": d_f32kv, "f32_cache_f32_greedy_identical": g_f32kv == g_ref,
                        "f32_max_abs_delta": d_f32, "f32_vs_f16kv_torch_max_abs_delta": d_f32h,
                        "q8_0_max_abs_delta": d_q8, "f32_greedy_identical": g_f32 == g_ref,
                        "f32_greedy_identical_f16kv_torch": g_f32 == g_refh,
                        "q8_0_greedy_prefix_identical": first_diff_q8, "positions_compared": len(positions)}}
    json.dump(ref, open(a.ref, "w"))
    print(f"export: F32 file with --cache-type f32 vs PyTorch F32: max |dlogit| {d_f32kv:.2e}, greedy {N_GREEDY} "
          f"{'identical' if g_f32kv == g_ref else 'DIFFERENT'}; "
          f"with the default F16 cache: {d_f32:.2e} over {len(positions)} positions x {len(last)} "
          f"logits, greedy {N_GREEDY} {'identical' if g_f32 == g_ref else 'DIFFERENT'}; vs PyTorch with K/V rounded "
          f"to halfs (the engine's KV cache): {d_f32h:.2e}, greedy {'identical' if g_f32 == g_refh else 'DIFFERENT'}; "
          f"Q8_0 file vs PyTorch F32: max |dlogit| {d_q8:.3f}, greedy identical for the first {first_diff_q8} of "
          f"{N_GREEDY} ({same_q8} equal)", flush=True)
    if d_f32kv >= 1e-3 or g_f32kv != g_ref or d_f32h >= 1e-3 or g_f32 != g_refh:
        sys.exit("export: the F32 GGUF does not reproduce PyTorch's logits")


if __name__ == "__main__":
    main()
