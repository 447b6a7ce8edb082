#!/usr/bin/python3
"""Independent numpy reference forward pass for nanochat checkpoint directories (docs/nanochat.md).

Written from nanochat's model definition (github karpathy/nanochat, nanochat/gpt.py: GPT.forward,
Block, CausalSelfAttention, MLP, norm, apply_rotary_emb, _compute_window_sizes, has_ve), NOT from
lmserve's C code: its own safetensors reader (json + numpy) and BF16/F16 decoding, float64 over
the whole sequence at once with an explicit causal + sliding-window mask (no KV cache, the smear
as nanochat's training path computes it: one shifted slice), so it shares no code path with the
engine it checks. Architecture knobs come from config.json with the defaults the doc gives for
the variant the tensors show.

Usage:
  nanochat_ref.py DIR --tokens 1,2,3             last position's logits, one per line
  nanochat_ref.py DIR --tokens 1,2,3 --greedy N  N greedy token ids, comma separated
  --no-windows                                    full causal attention in every layer (the suite's
                                                  negative control: windows must change the result)
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np


def load_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack_from("<Q", buf, 0)
    hdr = json.loads(buf[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in hdr.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = buf[base + b:base + e]
        dt = info["dtype"]
        if dt == "F32":
            a = np.frombuffer(raw, dtype="<f4").astype(np.float64)
        elif dt == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float64)
        elif dt == "BF16":
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            a = u.view(np.float32).astype(np.float64)
        else:
            raise SystemExit(f"{path}: tensor {name}: dtype {dt} not handled by the reference")
        out[name] = a.reshape(info["shape"])
    return out


class Model:
    def __init__(self, d, no_windows=False):
        cfg = json.load(open(os.path.join(d, "config.json")))
        mc = cfg["model_config"]
        ar = cfg.get("architecture", {})
        self.T = load_safetensors(os.path.join(d, "model.safetensors"))
        T = self.T
        self.L = mc["n_layer"]
        self.E = mc["n_embd"]
        self.H = mc["n_head"]
        self.Hkv = mc["n_kv_head"]
        self.hd = self.E // self.H
        self.V = mc["vocab_size"]
        self.seq = mc["sequence_len"]
        current = "smear_gate.weight" in T
        self.rope_base = ar.get("rope_base", 100000.0 if current else 10000.0)
        self.qk_scale = ar.get("qk_scale", 1.2 if current else 1.0)
        self.softcap = ar.get("softcap", 15.0)
        self.ve_scale = ar.get("ve_gate_scale", 3.0 if current else 2.0)
        self.eps = ar.get("norm_eps", 2.0 ** -7)
        pattern = mc.get("window_pattern", "L").upper()
        short = ar.get("short_window", -(-self.seq // 4 // 128) * 128)
        # gpt.py _compute_window_sizes: pattern tiled over layers, last layer always long
        self.window = [short if pattern[i % len(pattern)] == "S" else self.seq for i in range(self.L)]
        self.window[-1] = self.seq
        if no_windows:  # negative control for the test suite: every layer sees its whole past
            self.window = [1 << 30] * self.L

    def norm(self, x):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps)

    def rope(self, x, pos):
        # (n, heads, hd); nanochat rotates the two halves by -theta
        d = self.hd // 2
        inv = 1.0 / (self.rope_base ** (np.arange(0, self.hd, 2, dtype=np.float64) / self.hd))
        ang = np.outer(pos.astype(np.float64), inv)[:, None, :]
        cos, sin = np.cos(ang), np.sin(ang)
        x1, x2 = x[..., :d], x[..., d:]
        return np.concatenate([x1 * cos + x2 * sin, x1 * (-sin) + x2 * cos], axis=-1)

    def forward(self, ids):
        T, n = self.T, len(ids)
        ids = np.asarray(ids)
        pos = np.arange(n)
        x = self.norm(T["transformer.wte.weight"][ids])
        if "smear_gate.weight" in T:
            gate = T["smear_lambda"][0] / (1.0 + np.exp(-(x[1:, :24] @ T["smear_gate.weight"][0])))
            x = np.concatenate([x[:1], x[1:] + gate[:, None] * x[:-1]], axis=0)
        x0 = x
        rl = T.get("resid_lambdas", np.ones(self.L))
        xl = T.get("x0_lambdas", np.zeros(self.L))
        xb = None
        for i in range(self.L):
            p = f"transformer.h.{i}."
            x = rl[i] * x + xl[i] * x0
            h = self.norm(x)
            q = (h @ T[p + "attn.c_q.weight"].T).reshape(n, self.H, self.hd)
            k = (h @ T[p + "attn.c_k.weight"].T).reshape(n, self.Hkv, self.hd)
            v = (h @ T[p + "attn.c_v.weight"].T).reshape(n, self.Hkv, self.hd)
            if f"value_embeds.{i}.weight" in T:
                ve = T[f"value_embeds.{i}.weight"][ids].reshape(n, self.Hkv, self.hd)
                g = T[p + "attn.ve_gate.weight"]
                gate = self.ve_scale / (1.0 + np.exp(-(h[:, :g.shape[1]] @ g.T)))
                v = v + gate[:, :, None] * ve
            q, k = self.rope(q, pos), self.rope(k, pos)
            q, k = self.norm(q) * self.qk_scale, self.norm(k) * self.qk_scale
            rep = self.H // self.Hkv
            k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
            s = np.einsum("ihd,jhd->hij", q, k) / math.sqrt(self.hd)
            # causal, and a query at i sees keys j with i - j <= window (flash-attn's left window)
            dist = pos[:, None] - pos[None, :]
            mask = (dist >= 0) & (dist <= self.window[i])
            s = np.where(mask[None], s, -np.inf)
            s = s - s.max(axis=-1, keepdims=True)
            w = np.exp(s)
            w /= w.sum(axis=-1, keepdims=True)
            a = np.einsum("hij,jhd->ihd", w, v).reshape(n, self.E)
            x = x + a @ T[p + "attn.c_proj.weight"].T
            f = np.maximum(self.norm(x) @ T[p + "mlp.c_fc.weight"].T, 0.0) ** 2
            x = x + f @ T[p + "mlp.c_proj.weight"].T
            if i == self.L // 2:
                xb = x
        if "backout_lambda" in T:
            x = x - T["backout_lambda"][0] * xb
        logits = self.norm(x) @ T["lm_head.weight"][:self.V].T
        return self.softcap * np.tanh(logits / self.softcap)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--greedy", type=int, default=0)
    ap.add_argument("--no-windows", action="store_true", help="ignore sliding windows (negative control)")
    a = ap.parse_args()
    m = Model(a.dir, a.no_windows)
    ids = [int(t) for t in a.tokens.split(",")]
    if a.greedy:
        out = []
        for _ in range(a.greedy):
            t = int(np.argmax(m.forward(ids)[-1]))
            out.append(t)
            ids.append(t)
        print(",".join(map(str, out)))
        return
    for v in m.forward(ids)[-1]:
        print(f"{v:.9g}")


if __name__ == "__main__":
    sys.exit(main())
