#!/usr/bin/python3
"""Averages the weights of checkpoints of one training run (docs/demo-model.md, run G): the mean of
each tensor over CKPT_DIRs (scripts/train_demo.py's --keep-every step-S/ directories), written as
OUT/config.json + OUT/model.safetensors, with OUT/heldout.json: the held-out loss on the trainer's
24 packed held-out windows (the same windows and evaluate() as the trainer's log).

  /usr/bin/python3 scripts/demo/average.py --corpus CORPUS_DIR --tokenizer TOKDIR --out OUT CKPT_DIR...

CORPUS_DIR/tokens.pt is the trainer's tokenization cache (it exists once the trainer has run).
"""
import argparse
import json
import math
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import train_demo as T  # noqa: E402  (the model definition; sets torch to one thread)
import torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    for k in ("--corpus", "--tokenizer", "--out"):
        ap.add_argument(k, required=True)
    ap.add_argument("ckpts", nargs="+")
    a = ap.parse_args()
    cfgs = [json.load(open(os.path.join(d, "config.json"))) for d in a.ckpts]
    if any(c != cfgs[0] for c in cfgs):
        sys.exit("average: the checkpoints' config.json differ")
    sds = [T.load_safetensors(os.path.join(d, "model.safetensors")) for d in a.ckpts]
    if any(set(sd) != set(sds[0]) for sd in sds):
        sys.exit("average: the checkpoints' tensor names differ")
    avg = {k: sum(sd[k] for sd in sds) / len(sds) for k in sds[0]}
    os.makedirs(a.out, exist_ok=True)
    json.dump(cfgs[0], open(os.path.join(a.out, "config.json"), "w"), indent=1)
    T.save_safetensors(avg, os.path.join(a.out, "model.safetensors"))

    model = T.Qwen3(cfgs[0])
    with torch.no_grad():
        for k, t in model.hf_state().items():
            t.copy_(avg[k])
    _, held_ids = torch.load(os.path.join(a.corpus, "tokens.pt"))
    tok = json.load(open(os.path.join(a.tokenizer, "tokenizer.json")))
    eot = next(t["id"] for t in tok["added_tokens"] if t["content"] == "<|endoftext|>")
    held = T.pack(held_ids, 640, eot, random.Random(2))[:24]  # the trainer's held-out windows
    hl = T.evaluate(model, held)
    json.dump({"heldout_loss": hl, "heldout_ppl": math.exp(hl), "heldout_tokens": int(held[:, 1:].numel()),
               "averaged_checkpoints": a.ckpts}, open(os.path.join(a.out, "heldout.json"), "w"), indent=1)
    print(f"average: {len(a.ckpts)} checkpoints -> {a.out}; held-out loss {hl:.4f} (ppl {math.exp(hl):.2f})",
          flush=True)


if __name__ == "__main__":
    main()
