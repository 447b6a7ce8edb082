#!/usr/bin/python3
"""Independent numpy reference forward pass for GGUF `gemma4` models (dense and MoE).

Written from the published Gemma 4 model definition as llama.cpp implements it
(src/models/gemma4.cpp: raw RMSNorm weights, sqrt(n_embd) embedding scale, per-head Q/K RMS norm
with weights and an unweighted one on V, V = K's raw projection where attn_v is absent, attention
scale 1, sliding-window layers, NeoX RoPE over the first n_rot dims with rope_freqs on the global
layers, post-attention / post-FFN norms, GELU(tanh)-gated FFN, the MoE block beside the dense FFN,
layer_output_scale, final soft-cap), NOT from lmserve's C code. It reuses only qwen3_ref.py's GGUF
reader and dequantizers (themselves independent of the engine) and computes in float64 over the
whole sequence with explicit masks (no KV cache, no ring).

As in qwen3_ref.py, K (after RoPE) and V are rounded through float16 by default (lmserve's KV
storage format; --kv-f32 turns that off), and --act q8_0|a8 rounds the inputs of Q8_0-weight
matmuls the way the engine does.

Usage:
  gemma4_ref.py MODEL.gguf --tokens 1,2,3            last position's logits, one per line
  gemma4_ref.py MODEL.gguf --tokens 1,2,3 --greedy N  N greedy token ids, comma separated
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen3_ref import GGUF, Qwen3, score, T_F32, T_F16, T_BF16, T_Q8_0  # noqa: E402


class Gemma4:
    def __init__(self, path, kv_f16=True, act=None):
        self.act = act
        g = GGUF(path)
        if g.kv["general.architecture"] != "gemma4":
            raise SystemExit("reference: architecture %s is not gemma4" % g.kv["general.architecture"])
        k = lambda s, d=None: g.kv.get("gemma4." + s, d)
        self.n_layer = int(k("block_count"))
        self.n_embd = int(k("embedding_length"))
        self.n_head = int(k("attention.head_count"))
        hkv = k("attention.head_count_kv")
        self.hkv = hkv if isinstance(hkv, list) else [hkv] * self.n_layer
        self.swa = [bool(x) for x in k("attention.sliding_window_pattern")]
        self.hd_full = int(k("attention.key_length"))
        self.hd_swa = int(k("attention.key_length_swa"))
        self.window = int(k("attention.sliding_window"))
        self.eps = float(k("attention.layer_norm_rms_epsilon"))
        self.base_full = float(k("rope.freq_base", 10000.0))
        self.base_swa = float(k("rope.freq_base_swa", 10000.0))
        self.rot_full = int(k("rope.dimension_count", self.hd_full))
        self.rot_swa = int(k("rope.dimension_count_swa", self.rot_full))
        self.softcap = float(k("final_logit_softcapping", 30.0))
        self.n_expert_used = int(k("expert_used_count", 0))
        self.kv_f16 = kv_f16
        self.embd = g.get("token_embd.weight")
        self.out_w = g.get("output.weight") if g.has("output.weight") else self.embd
        self.out_norm = g.get("output_norm.weight").a
        self.rope_ff = g.get("rope_freqs.weight").a if g.has("rope_freqs.weight") else None
        self.layers = []
        for i in range(self.n_layer):
            p = "blk.%d." % i
            L = {}
            for n in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm",
                      "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm",
                      "layer_output_scale", "ffn_gate_inp", "pre_ffw_norm_2", "post_ffw_norm_1",
                      "post_ffw_norm_2", "ffn_gate_up_exps", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):
                if g.has(p + n + ".weight"):
                    L[n] = g.get(p + n + ".weight")
            for n in ("ffn_gate_inp", "ffn_down_exps"):
                if g.has(p + n + ".scale"):
                    L[n + ".scale"] = g.get(p + n + ".scale").a
            self.layers.append(L)
        self._round = Qwen3.round_act

    def mat(self, x, w):
        if self.act and w.t == T_Q8_0:
            x = self._round(self, x)
        elif self.act and w.t not in (T_F32, T_F16, T_BF16):
            raise SystemExit("reference: --act models only Q8_0 weights")
        return x @ w.a.T

    def rms(self, x, w=None):
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return y if w is None else y * (w.a if hasattr(w, "a") else w)

    @staticmethod
    def gelu(x):
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))

    def rope(self, x, pos, n_rot, base, ff):
        # NeoX over the first n_rot dims of each head: pairs (i, i + n_rot/2), angle pos*base^(-2i/n_rot)/ff_i
        half = n_rot // 2
        inv = base ** (-np.arange(0, half, dtype=np.float64) * 2.0 / n_rot)
        if ff is not None:
            inv = inv / ff[:half]
        ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        y = x.copy()
        a, b = x[..., :half], x[..., half:n_rot]
        y[..., :half] = a * c - b * s
        y[..., half:n_rot] = a * s + b * c
        return y

    def ffn(self, L, x):
        return self.mat(self.gelu(self.mat(x, L["ffn_gate"])) * self.mat(x, L["ffn_up"]), L["ffn_down"])

    def moe(self, L, h):
        r = self.rms(h) / np.sqrt(self.n_embd) * L["ffn_gate_inp.scale"]
        logits = self.mat(r, L["ffn_gate_inp"])
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        x = self.rms(h, L["pre_ffw_norm_2"])
        out = np.zeros_like(x)
        for t in range(x.shape[0]):
            top = np.argsort(-p[t], kind="stable")[:self.n_expert_used]
            w = p[t, top] / max(p[t, top].sum(), 6.103515625e-5)
            for e, we in zip(top, w):
                if "ffn_gate_up_exps" in L:
                    gu = self.mat(x[t], L["ffn_gate_up_exps"][e])
                    n = gu.shape[-1] // 2
                    g, u = gu[:n], gu[n:]
                else:
                    g, u = self.mat(x[t], L["ffn_gate_exps"][e]), self.mat(x[t], L["ffn_up_exps"][e])
                y = self.mat(self.gelu(g) * u, L["ffn_down_exps"][e])
                if "ffn_down_exps.scale" in L:
                    y = y * L["ffn_down_exps.scale"][e]
                out[t] += we * y
        return out

    def forward(self, tokens, last_only=False):
        T = len(tokens)
        H = self.n_head
        pos = np.arange(T)
        h = self.embd.a[np.asarray(tokens)] * np.float64(np.float32(np.sqrt(np.float32(self.n_embd))))
        causal = np.triu(np.full((T, T), -np.inf), 1)
        d = pos[:, None] - pos[None, :]
        swa_mask = np.where(d >= self.window, -np.inf, 0.0) + causal
        for li, L in enumerate(self.layers):
            swa = self.swa[li]
            D, KV = (self.hd_swa if swa else self.hd_full), self.hkv[li]
            n_rot, base = (self.rot_swa, self.base_swa) if swa else (self.rot_full, self.base_full)
            ff = None if swa else self.rope_ff
            x = self.rms(h, L["attn_norm"])
            q = self.mat(x, L["attn_q"]).reshape(T, H, D)
            kr = self.mat(x, L["attn_k"]).reshape(T, KV, D)
            v = self.mat(x, L["attn_v"]).reshape(T, KV, D) if "attn_v" in L else kr
            q = self.rope(self.rms(q, L["attn_q_norm"]), pos, n_rot, base, ff)
            k = self.rope(self.rms(kr, L["attn_k_norm"]), pos, n_rot, base, ff)
            v = self.rms(v)
            if self.kv_f16:
                k = k.astype(np.float16).astype(np.float64)
                v = v.astype(np.float16).astype(np.float64)
            rep = H // KV
            k = np.repeat(k, rep, axis=1)
            v = np.repeat(v, rep, axis=1)
            s = np.einsum("thd,shd->hts", q, k) + (swa_mask if swa else causal)  # scale 1
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            o = np.einsum("hts,shd->thd", s, v).reshape(T, H * D)
            h = h + self.rms(self.mat(o, L["attn_output"]), L["post_attention_norm"])
            f = self.ffn(L, self.rms(h, L["ffn_norm"]))
            if "ffn_gate_inp" in L:
                f = self.rms(f, L["post_ffw_norm_1"]) + self.rms(self.moe(L, h), L["post_ffw_norm_2"])
            h = h + self.rms(f, L["post_ffw_norm"])
            if "layer_output_scale" in L:
                h = h * L["layer_output_scale"].a[0]
        if last_only:
            h = h[-1:]
        z = self.mat(self.rms(h, self.out_norm), self.out_w)
        if self.softcap > 0:
            z = np.tanh(z / self.softcap) * self.softcap
        return z


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--greedy", type=int, default=0)
    ap.add_argument("--act", choices=("q8_0", "a8"))
    ap.add_argument("--kv-f32", action="store_true")
    ap.add_argument("--score", type=int, default=0, help="score the last K tokens (qwen3_ref.score)")
    a = ap.parse_args()
    toks = [int(t) for t in a.tokens.split(",") if t]
    m = Gemma4(a.model, kv_f16=not a.kv_f32, act=a.act)
    if a.score:
        sys.stdout.write(score(m.forward(toks), toks, a.score))
    elif a.greedy:
        out = []
        for _ in range(a.greedy):
            out.append(int(np.argmax(m.forward(toks + out, last_only=True)[-1])))
        print(",".join(str(t) for t in out))
    else:
        sys.stdout.write("".join("%.9g\n" % v for v in m.forward(toks, last_only=True)[-1]))


if __name__ == "__main__":
    main()
