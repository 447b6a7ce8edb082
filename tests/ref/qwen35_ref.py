#!/usr/bin/python3
"""Independent numpy reference forward pass for GGUF `qwen35` and `qwen35moe` models.

Written from the Qwen3.5 model definition (HF transformers Qwen3_5 / Qwen3Next: Gated DeltaNet
linear attention, gated full attention, (1 + w) RMSNorms) as it reaches the GGUF through
llama.cpp's converter (norm weights with the +1 added, except the DeltaNet output norm;
ssm_a = -exp(A_log); v heads in tiled order, so v head h reads q/k head h % groups), NOT from
lmserve's C code. It computes in float64 over the whole sequence with no cache: the delta rule as
its plain token recurrence (the engine prefills with the chunked form), the causal conv as an
explicit sum over a zero-padded window, attention with an explicit causal mask. The GGUF reader
and dequantizers are qwen3_ref.py's (same directory). As there, K and V are rounded through
float16 (the engine's KV cache format) unless --kv-f32.

Usage:
  qwen35_ref.py MODEL.gguf --tokens 1,2,3            last position's logits, one per line
  qwen35_ref.py MODEL.gguf --tokens 1,2,3 --greedy N  N greedy token ids, comma separated
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen3_ref import GGUF  # noqa: E402


def silu(x):
    return x / (1 + np.exp(-x))


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


class Qwen35:
    def __init__(self, path, kv_f16=True):
        g = GGUF(path)
        arch = g.kv["general.architecture"]
        if arch not in ("qwen35", "qwen35moe"):
            raise SystemExit("reference: architecture %s not supported" % arch)
        self.moe = arch == "qwen35moe"
        k = lambda s, d=None: g.kv.get("%s.%s" % (arch, s), d)  # noqa: E731
        self.n_layer = int(k("block_count"))
        self.n_head = int(k("attention.head_count"))
        self.n_head_kv = int(k("attention.head_count_kv"))
        self.n_embd = int(k("embedding_length"))
        self.head_dim = int(k("attention.key_length", self.n_embd // self.n_head))
        self.n_rot = int(k("rope.dimension_count", self.head_dim))
        self.sections = [int(v) for v in k("rope.dimension_sections")] + [0] * 4
        self.eps = float(k("attention.layer_norm_rms_epsilon"))
        self.theta = float(k("rope.freq_base", 10000.0))
        self.d_conv = int(k("ssm.conv_kernel"))
        self.d = int(k("ssm.state_size"))
        self.n_qk = int(k("ssm.group_count"))
        self.n_v = int(k("ssm.time_step_rank"))
        rec = k("attention.recurrent_layers")
        if rec is not None:
            self.recr = [bool(v) for v in rec[:self.n_layer]]
        else:
            iv = int(k("full_attention_interval", 4))
            self.recr = [(i + 1) % iv != 0 for i in range(self.n_layer)]
        if self.moe:
            self.n_expert_used = int(k("expert_used_count"))
        self.kv_f16 = kv_f16
        self.embd = g.get("token_embd.weight").a
        self.out_w = (g.get("output.weight") if g.has("output.weight") else g.get("token_embd.weight")).a
        self.out_norm = g.get("output_norm.weight").a
        self.layers = []
        for i in range(self.n_layer):
            p = "blk.%d." % i
            w = lambda n: g.get(p + n).a  # noqa: E731
            L = {"attn_norm": w("attn_norm.weight"), "post_norm": w("post_attention_norm.weight")}
            if self.recr[i]:
                for n in ("attn_qkv", "attn_gate", "ssm_beta", "ssm_alpha", "ssm_out", "ssm_norm", "ssm_conv1d"):
                    L[n] = w(n + ".weight")
                L["ssm_a"] = w("ssm_a")
                L["dt_bias"] = w("ssm_dt.bias")
            else:
                for n in ("attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm"):
                    L[n] = w(n + ".weight")
            if self.moe:
                for n in ("ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):
                    L[n] = w(n + ".weight")
                if g.has(p + "ffn_up_shexp.weight"):
                    for n in ("ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp", "ffn_gate_inp_shexp"):
                        L[n] = w(n + ".weight")
            else:
                for n in ("ffn_gate", "ffn_up", "ffn_down"):
                    L[n] = w(n + ".weight")
            self.layers.append(L)

    def rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):
        """Interleaved M-RoPE on the first n_rot dims, NeoX pairing (i, i + n_rot/2). Text tokens
        have position pos in the t, h and w sections and 0 in the fourth; pair i belongs to
        section t if i % 3 == 0 (and i < 3*s_t), h if 1 (i < 3*s_h), w if 2 (i < 3*s_w),
        else the fourth — i taken modulo the sections' sum."""
        R = self.n_rot
        s = self.sections
        tot = sum(s[:4])
        ids = np.arange(R // 2) % tot
        text = ((ids % 3 == 1) & (ids < 3 * s[1])) | ((ids % 3 == 2) & (ids < 3 * s[2])) | \
               ((ids % 3 == 0) & (ids < 3 * s[0]))
        inv = self.theta ** (-2.0 * np.arange(R // 2) / R)
        ang = np.asarray(pos, np.float64)[:, None] * inv[None, :] * text[None, :]
        c, sn = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = x[..., :R // 2], x[..., R // 2:R]
        return np.concatenate([a * c - b * sn, a * sn + b * c, x[..., R:]], -1)

    def ffn(self, L, x):
        if not self.moe:
            return (silu(x @ L["ffn_gate"].T) * (x @ L["ffn_up"].T)) @ L["ffn_down"].T
        logits = x @ L["ffn_gate_inp"].T
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out = np.zeros_like(x)
        for t in range(x.shape[0]):
            top = np.argsort(-p[t], kind="stable")[:self.n_expert_used]
            w = p[t, top] / p[t, top].sum()
            for e, we in zip(top, w):
                hdn = silu(x[t] @ L["ffn_gate_exps"][e].T) * (x[t] @ L["ffn_up_exps"][e].T)
                out[t] += we * (hdn @ L["ffn_down_exps"][e].T)
        if "ffn_up_shexp" in L:  # the shared expert, gated by sigmoid(w . x)
            sh = (silu(x @ L["ffn_gate_shexp"].T) * (x @ L["ffn_up_shexp"].T)) @ L["ffn_down_shexp"].T
            out += sigmoid(x @ L["ffn_gate_inp_shexp"])[:, None] * sh
        return out

    def attention(self, L, x):
        T = x.shape[0]
        H, KV, D = self.n_head, self.n_head_kv, self.head_dim
        qg = (x @ L["attn_q"].T).reshape(T, H, 2 * D)
        q, gate = qg[..., :D], qg[..., D:].reshape(T, H * D)
        k = (x @ L["attn_k"].T).reshape(T, KV, D)
        v = (x @ L["attn_v"].T).reshape(T, KV, D)
        pos = np.arange(T)
        q = self.rope(self.rms(q, L["attn_q_norm"]), pos)
        k = self.rope(self.rms(k, L["attn_k_norm"]), pos)
        if self.kv_f16:
            k = k.astype(np.float16).astype(np.float64)
            v = v.astype(np.float16).astype(np.float64)
        rep = H // KV
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(D) + np.triu(np.full((T, T), -np.inf), 1)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", s, v).reshape(T, H * D)
        return (o * sigmoid(gate)) @ L["attn_output"].T

    def delta_net(self, L, x):
        T = x.shape[0]
        d, nqk, nv, K = self.d, self.n_qk, self.n_v, self.d_conv
        mixed = x @ L["attn_qkv"].T  # (T, channels): q | k | v
        w = L["ssm_conv1d"]           # (channels, K), tap 0 = oldest
        pad = np.concatenate([np.zeros((K - 1, mixed.shape[1])), mixed], 0)
        conv = np.stack([(pad[t:t + K] * w.T).sum(0) for t in range(T)])
        conv = silu(conv)
        q = conv[:, :nqk * d].reshape(T, nqk, d)
        k = conv[:, nqk * d:2 * nqk * d].reshape(T, nqk, d)
        v = conv[:, 2 * nqk * d:].reshape(T, nv, d)
        l2 = lambda a: a / np.maximum(np.sqrt((a * a).sum(-1, keepdims=True)), self.eps)  # noqa: E731
        q, k = l2(q) / np.sqrt(d), l2(k)
        beta = sigmoid(x @ L["ssm_beta"].T)                           # (T, nv)
        g = softplus(x @ L["ssm_alpha"].T + L["dt_bias"]) * L["ssm_a"]  # (T, nv), <= 0
        z = (x @ L["attn_gate"].T).reshape(T, nv, d)
        o = np.zeros((T, nv, d))
        for h in range(nv):
            kh = h % nqk
            S = np.zeros((d, d))  # S[i][j]: i over k dims, j over v dims
            for t in range(T):
                S = S * np.exp(g[t, h])
                delta = (v[t, h] - S.T @ k[t, kh]) * beta[t, h]
                S = S + np.outer(k[t, kh], delta)
                o[t, h] = S.T @ q[t, kh]
        o = self.rms(o, L["ssm_norm"]) * silu(z)
        return o.reshape(T, nv * d) @ L["ssm_out"].T

    def forward(self, tokens, last_only=False):
        h = self.embd[np.asarray(tokens)]
        for i, L in enumerate(self.layers):
            x = self.rms(h, L["attn_norm"])
            h = h + (self.delta_net(L, x) if self.recr[i] else self.attention(L, x))
            h = h + self.ffn(L, self.rms(h, L["post_norm"]))
        if last_only:
            h = h[-1:]
        return self.rms(h, self.out_norm) @ self.out_w.T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--greedy", type=int, default=0)
    ap.add_argument("--kv-f32", action="store_true", help="do not round K/V through float16")
    a = ap.parse_args()
    toks = [int(t) for t in a.tokens.split(",") if t]
    m = Qwen35(a.model, kv_f16=not a.kv_f32)
    if a.greedy:
        out = []
        for _ in range(a.greedy):
            out.append(int(np.argmax(m.forward(toks + out, last_only=True)[-1])))
        print(",".join(str(t) for t in out))
    else:
        sys.stdout.write("".join("%.9g\n" % v for v in m.forward(toks, last_only=True)[-1]))


if __name__ == "__main__":
    main()
