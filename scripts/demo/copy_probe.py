#!/usr/bin/python3
"""A short probe of the induction phase change (docs/demo-model.md, "The copy test"): does the demo
model, trained on nothing but "random tokens A, then A again", learn to copy, and after how many
steps? Many short exercises a step (--batch of 2 x L tokens, L drawn from --len MIN,MAX for each
step), loss and accuracy on the second copy only (its first token is unpredictable, so it is
left out). Never part of `make test`.

  /usr/bin/python3 scripts/demo/copy_probe.py --init DIR --out DIR [--expand-kv] [--steps N]
        [--batch B] [--len MIN,MAX] [--lr LR] [--lo ID --hi ID] [--minutes M]

--init is a train_demo.py checkpoint (or scripts/demo/gguf2st.py's dequantized GGUF). Writes
OUT/probe-log.tsv (step, tokens, second-copy loss and accuracy (EMA), seconds, tok/s) and the
checkpoint OUT/config.json + OUT/model.safetensors at the end.
"""
import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import train_demo as T  # noqa: E402

torch.set_num_threads(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--expand-kv", action="store_true")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--minutes", type=float, default=0, help="stop after M minutes")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--len", default="8,64")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--lo", type=int, default=256, help="random ids from [lo, hi)")
    ap.add_argument("--hi", type=int, default=0, help="default: the vocabulary size minus the added tokens")
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--seed", type=int, default=11)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(a.seed)
    c = json.load(open(os.path.join(a.init, "config.json")))
    kv0 = c["num_key_value_heads"]
    if a.expand_kv:
        c = dict(c, num_key_value_heads=c["num_attention_heads"])
    model = T.Qwen3(c)
    sd = T.load_safetensors(os.path.join(a.init, "model.safetensors"))
    if a.expand_kv and kv0 < c["num_key_value_heads"]:
        r, hd = c["num_key_value_heads"] // kv0, c["head_dim"]
        for k in list(sd):
            if k.endswith("k_proj.weight") or k.endswith("v_proj.weight"):
                sd[k] = sd[k].view(kv0, hd, -1).repeat_interleave(r, 0).reshape(kv0 * r * hd, -1)
    with torch.no_grad():
        for k, t in model.hf_state().items():
            t.copy_(sd[k])
    hi = a.hi or (c["vocab_size"] - 10)
    lmin, lmax = (int(x) for x in a.len.split(","))
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(a.seed)
    log = open(os.path.join(a.out, "probe-log.tsv"), "w")
    log.write("step\ttokens\tcopy_loss\tcopy_acc\tseconds\ttok_s\n")
    E = model.embed_tokens.weight
    t0, tok, rl, ra = time.time(), 0, None, None
    for step in range(a.steps):
        L = int(torch.randint(lmin, lmax + 1, (1,), generator=g))
        A = torch.randint(a.lo, hi, (a.batch, L), generator=g)
        x = torch.cat([A, A], 1)
        for gr in opt.param_groups:
            gr["lr"] = a.lr * min(1.0, (step + 1) / a.warmup)
        h = model.hidden(x[:, :-1])[:, L:]  # positions L..2L-2 predict the second copy's tokens 1..L-1
        logits = h @ E.t()
        tgt = x[:, L + 1:]
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        acc = (logits.argmax(-1) == tgt).float().mean().item()
        tok += x[:, :-1].numel()
        rl = loss.item() if rl is None else 0.9 * rl + 0.1 * loss.item()
        ra = acc if ra is None else 0.9 * ra + 0.1 * acc
        el = time.time() - t0
        if step % a.log_every == 0:
            log.write(f"{step}\t{tok}\t{rl:.4f}\t{ra:.4f}\t{el:.0f}\t{tok / el:.0f}\n")
            log.flush()
            print(f"step {step} L {L} copy-loss {rl:.3f} acc {ra:.3f} {tok / el:.0f} tok/s {el / 60:.1f} min",
                  flush=True)
        if a.minutes and el / 60 > a.minutes:
            break
    json.dump(c, open(os.path.join(a.out, "config.json"), "w"), indent=1)
    T.save_safetensors(model.hf_state(), os.path.join(a.out, "model.safetensors"))
    print(f"probe: done at step {step}, copy-loss {rl:.3f} acc {ra:.3f} (ln V = {math.log(c['vocab_size']):.2f})")


if __name__ == "__main__":
    main()
