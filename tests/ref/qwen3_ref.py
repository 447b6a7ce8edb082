#!/usr/bin/python3
"""Independent numpy reference forward pass for GGUF `qwen3` and `qwen3moe` models.

Written from the published Qwen3 / Qwen3-MoE model definition (HF transformers modeling_qwen3.py,
modeling_qwen3_moe.py), NOT from lmserve's C code: it has its own minimal GGUF reader and its own
dequantizers, and computes in float64 over the whole sequence with an explicit causal mask (no KV
cache), so it shares no code path with the engine it checks.

The one deliberate imitation of the engine is the KV-cache storage format: lmserve stores K (after
RoPE) and V in IEEE half precision, which is part of its documented numerics, so by default K and V
are rounded through float16 here too (--kv-f32 turns that off).

Usage:
  qwen3_ref.py MODEL.gguf --tokens 1,2,3            last position's logits, one per line
  qwen3_ref.py MODEL.gguf --tokens 1,2,3 --greedy N  N greedy token ids, comma separated
"""
import argparse
import struct
import sys

import numpy as np

# ---------------------------------------------------------------- GGUF reader (minimal, own)

GGUF_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
               11: "<q", 12: "<d"}
T_F32, T_F16, T_Q8_0, T_Q4_K, T_Q6_K, T_BF16 = 0, 1, 8, 12, 14, 30
# type -> (elements per block, bytes per block)
BLOCK = {T_F32: (1, 4), T_F16: (1, 2), T_BF16: (1, 2), T_Q8_0: (32, 34), T_Q4_K: (256, 144),
         T_Q6_K: (256, 210)}


class Reader:
    def __init__(self, buf):
        self.b = buf
        self.o = 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.o)[0]
        self.o += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = bytes(self.b[self.o:self.o + n])
        self.o += n
        return s.decode("utf-8", errors="replace")

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et = self.take("<I")
            n = self.take("<Q")
            return [self.value(et) for _ in range(n)]
        return self.take(GGUF_SCALAR[t])


class GGUF:
    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = memoryview(f.read())
        r = Reader(self.buf)
        if bytes(self.buf[:4]) != b"GGUF":
            raise SystemExit("not a GGUF file")
        r.o = 4
        version = r.take("<I")
        if version not in (2, 3):
            raise SystemExit("unsupported GGUF version %d" % version)
        n_tensors = r.take("<Q")
        n_kv = r.take("<Q")
        self.kv = {}
        for _ in range(n_kv):
            k = r.string()
            t = r.take("<I")
            if k in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
                     "tokenizer.ggml.scores"):
                self.kv[k] = self._skip_array(r, t)
            else:
                self.kv[k] = r.value(t)
        infos = []
        for _ in range(n_tensors):
            name = r.string()
            nd = r.take("<I")
            ne = [r.take("<Q") for _ in range(nd)]
            t = r.take("<I")
            off = r.take("<Q")
            infos.append((name, ne, t, off))
        align = int(self.kv.get("general.alignment", 32))
        data = (r.o + align - 1) // align * align
        self.tensors = {name: (ne, t, data + off) for name, ne, t, off in infos}

    def _skip_array(self, r, t):
        # big tokenizer arrays are not needed for the forward pass: skip them quickly
        assert t == 9
        et = r.take("<I")
        n = r.take("<Q")
        if et == 8:
            for _ in range(n):
                ln = r.take("<Q")
                r.o += ln
        else:
            r.o += n * struct.calcsize(GGUF_SCALAR[et])
        return n

    def has(self, name):
        return name in self.tensors

    def get(self, name):
        """Tensor as float64 ndarray, numpy shape = reversed GGUF ne (rows = ne[1])."""
        ne, t, off = self.tensors[name]
        n = int(np.prod(ne))
        bs, ts = BLOCK[t]
        nbytes = n // bs * ts
        raw = np.frombuffer(self.buf[off:off + nbytes], dtype=np.uint8)
        x = dequant(raw, t, n)
        return W(x.reshape(list(reversed(ne))), t)


class W:
    """A weight: dequantized values + the GGUF type they came from."""

    def __init__(self, a, t):
        self.a = a
        self.t = t

    def __getitem__(self, i):  # expert slice of a 3-D tensor
        return W(self.a[i], self.t)


def f16(raw_u8):
    return raw_u8.view(np.float16).astype(np.float64)


def dequant(raw, t, n):
    if t == T_F32:
        return raw.view(np.float32).astype(np.float64)
    if t == T_F16:
        return f16(raw)
    if t == T_BF16:
        u = raw.view(np.uint16).astype(np.uint32) << 16
        return u.view(np.float32).astype(np.float64)
    if t == T_Q8_0:
        # block: f16 d, int8 q[32]; x = d * q
        b = raw.reshape(-1, 34)
        d = f16(np.ascontiguousarray(b[:, :2]).reshape(-1))
        q = b[:, 2:].view(np.int8).astype(np.float64)
        return (d[:, None] * q).reshape(-1)
    if t == T_Q4_K:
        return dequant_q4_k(raw.reshape(-1, 144))
    if t == T_Q6_K:
        return dequant_q6_k(raw.reshape(-1, 210))
    raise SystemExit("reference: tensor type %d not supported" % t)


def k_scale_min(sc12):
    """6-bit scales and mins of the 8 sub-blocks of a Q4_K/Q5_K super-block (12 bytes)."""
    s = sc12.astype(np.int64)
    scales = np.zeros((s.shape[0], 8), np.int64)
    mins = np.zeros((s.shape[0], 8), np.int64)
    for j in range(8):
        if j < 4:
            scales[:, j] = s[:, j] & 63
            mins[:, j] = s[:, j + 4] & 63
        else:
            scales[:, j] = (s[:, j + 4] & 0xF) | ((s[:, j - 4] >> 6) << 4)
            mins[:, j] = (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)
    return scales, mins


def dequant_q4_k(b):
    # block: f16 d, f16 dmin, u8 scales[12], u8 qs[128]; 8 sub-blocks of 32
    d = f16(np.ascontiguousarray(b[:, 0:2]).reshape(-1))
    dmin = f16(np.ascontiguousarray(b[:, 2:4]).reshape(-1))
    sc, mn = k_scale_min(b[:, 4:16])
    qs = b[:, 16:144].astype(np.int64)
    out = np.zeros((b.shape[0], 256))
    for j in range(4):  # each 32 bytes of qs hold sub-blocks 2j (low nibble) and 2j+1 (high)
        chunk = qs[:, 32 * j:32 * j + 32]
        for h, sub in ((0, 2 * j), (1, 2 * j + 1)):
            q = (chunk >> (4 * h)) & 0xF
            out[:, 32 * sub:32 * sub + 32] = (d * sc[:, sub])[:, None] * q - (dmin * mn[:, sub])[:, None]
    return out.reshape(-1)


def dequant_q6_k(b):
    # block: u8 ql[128], u8 qh[64], i8 scales[16], f16 d; 16 sub-blocks of 16
    ql = b[:, 0:128].astype(np.int64)
    qh = b[:, 128:192].astype(np.int64)
    sc = b[:, 192:208].view(np.int8).astype(np.float64)
    d = f16(np.ascontiguousarray(b[:, 208:210]).reshape(-1))
    out = np.zeros((b.shape[0], 256))
    for half in range(2):
        l = ql[:, 64 * half:64 * half + 64]
        h = qh[:, 32 * half:32 * half + 32]
        base = 128 * half
        for i in range(32):
            q1 = ((l[:, i] & 0xF) | (((h[:, i] >> 0) & 3) << 4)) - 32
            q2 = ((l[:, i + 32] & 0xF) | (((h[:, i] >> 2) & 3) << 4)) - 32
            q3 = ((l[:, i] >> 4) | (((h[:, i] >> 4) & 3) << 4)) - 32
            q4 = ((l[:, i + 32] >> 4) | (((h[:, i] >> 6) & 3) << 4)) - 32
            for k, q in enumerate((q1, q2, q3, q4)):
                pos = base + i + 32 * k
                out[:, pos] = d * sc[:, 8 * half + pos % 128 // 16] * q
    return out.reshape(-1)


# ---------------------------------------------------------------- the model (HF Qwen3 definition)

class Qwen3:
    def __init__(self, path, kv_f16=True, act=None):
        self.act = act
        g = GGUF(path)
        self.g = g
        arch = g.kv["general.architecture"]
        if arch not in ("qwen3", "qwen3moe"):
            raise SystemExit("reference: architecture %s not supported" % arch)
        self.moe = arch == "qwen3moe"
        k = lambda s, d=None: g.kv.get("%s.%s" % (arch, s), d)
        self.n_layer = int(k("block_count"))
        self.n_head = int(k("attention.head_count"))
        self.n_head_kv = int(k("attention.head_count_kv"))
        self.n_embd = int(k("embedding_length"))
        self.head_dim = int(k("attention.key_length", self.n_embd // self.n_head))
        self.eps = float(k("attention.layer_norm_rms_epsilon"))
        self.theta = float(k("rope.freq_base", 10000.0))
        if self.moe:
            self.n_expert_used = int(k("expert_used_count"))
        self.kv_f16 = kv_f16
        self.embd = g.get("token_embd.weight")  # (vocab, n_embd)
        self.out_w = g.get("output.weight") if g.has("output.weight") else self.embd
        self.out_norm = g.get("output_norm.weight")
        self.layers = []
        for i in range(self.n_layer):
            p = "blk.%d." % i
            L = {n: g.get(p + n + ".weight") for n in
                 ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm",
                  "attn_k_norm", "ffn_norm")}
            names = ("ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps") if self.moe \
                else ("ffn_gate", "ffn_up", "ffn_down")
            for n in names:
                L[n] = g.get(p + n + ".weight")
            self.layers.append(L)

    def mat(self, x, w):
        """x @ W.T for a weight (rows = outputs). With act set, x is first rounded the way the
        engine (like llama.cpp) rounds the input of a Q8_0-weight dot product: blocks of 32,
        d = max|x|/127, q = round(x/d), x' = q*d with d stored as f16 ("q8_0", a Q8_0 block) or
        kept in f32 ("a8", the int8 panel of the VNNI kernels). Float weights take float inputs."""
        if self.act and w.t == T_Q8_0:
            x = self.round_act(x)
        elif self.act and w.t not in (T_F32, T_F16, T_BF16):
            raise SystemExit("reference: --act models only Q8_0 weights")
        return x @ w.a.T

    def round_act(self, x):
        sh = x.shape
        b = x.reshape(-1, 32).astype(np.float32)
        d = (np.abs(b).max(-1, keepdims=True) / np.float32(127)).astype(np.float32)
        inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
        q = np.round(b * inv)
        ds = d.astype(np.float16) if self.act == "q8_0" else d
        return (q * ds.astype(np.float64)).reshape(sh)

    def rms(self, x, w):
        # Qwen3RMSNorm: x / sqrt(mean(x^2) + eps) * weight, over the last axis
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w.a

    def rope(self, x, pos):
        # rotate_half (NeoX) RoPE: x (T, H, D); inv_freq_i = theta^(-2i/D)
        D = x.shape[-1]
        inv = self.theta ** (-np.arange(0, D, 2, dtype=np.float64) / D)
        ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]  # (T, D/2)
        cos = np.concatenate([np.cos(ang), np.cos(ang)], -1)[:, None, :]
        sin = np.concatenate([np.sin(ang), np.sin(ang)], -1)[:, None, :]
        rot = np.concatenate([-x[..., D // 2:], x[..., :D // 2]], -1)
        return x * cos + rot * sin

    def mlp(self, L, x):
        if not self.moe:
            g = self.mat(x, L["ffn_gate"])
            u = self.mat(x, L["ffn_up"])
            return self.mat(g / (1 + np.exp(-g)) * u, L["ffn_down"])
        # Qwen3MoeSparseMoeBlock: softmax router over all experts, top-k, renormalize (norm_topk_prob)
        logits = self.mat(x, L["ffn_gate_inp"])  # (T, E)
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out = np.zeros_like(x)
        k = self.n_expert_used
        for t in range(x.shape[0]):
            top = np.argsort(-p[t], kind="stable")[:k]
            w = p[t, top] / p[t, top].sum()
            for e, we in zip(top, w):
                g = self.mat(x[t], L["ffn_gate_exps"][e])
                u = self.mat(x[t], L["ffn_up_exps"][e])
                out[t] += we * self.mat(g / (1 + np.exp(-g)) * u, L["ffn_down_exps"][e])
        return out

    def forward(self, tokens, last_only=False):
        """Logits (T, vocab) for every position of tokens (positions 0..T-1), or (1, vocab) for
        the last one."""
        T = len(tokens)
        H, KV, D = self.n_head, self.n_head_kv, self.head_dim
        pos = np.arange(T)
        h = self.embd.a[np.asarray(tokens)]
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for L in self.layers:
            x = self.rms(h, L["attn_norm"])
            q = self.mat(x, L["attn_q"]).reshape(T, H, D)
            k = self.mat(x, L["attn_k"]).reshape(T, KV, D)
            v = self.mat(x, L["attn_v"]).reshape(T, KV, D)
            q = self.rope(self.rms(q, L["attn_q_norm"]), pos)
            k = self.rope(self.rms(k, L["attn_k_norm"]), pos)
            if self.kv_f16:
                k = k.astype(np.float16).astype(np.float64)
                v = v.astype(np.float16).astype(np.float64)
            rep = H // KV  # GQA: query head j reads kv head j // rep
            k = np.repeat(k, rep, axis=1)
            v = np.repeat(v, rep, axis=1)
            s = np.einsum("thd,shd->hts", q, k) / np.sqrt(D) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            o = np.einsum("hts,shd->thd", s, v).reshape(T, H * D)
            h = h + self.mat(o, L["attn_output"])
            h = h + self.mlp(L, self.rms(h, L["ffn_norm"]))
        if last_only:
            h = h[-1:]
        return self.mat(self.rms(h, self.out_norm), self.out_w)


def score(z, toks, k):
    """--score K: the last K of toks are a continuation (an engine's greedy tokens). For each, one
    line "ARGMAX CHOSEN_LOGIT MAX_LOGIT" of the reference's logits at the position before it: a
    greedy decoder that computes this model picks ARGMAX, and MAX - CHOSEN says how far from the
    reference's choice the continuation's token is (0 when it is the same). One forward of the
    whole sequence scores every step on the continuation's own prefix."""
    n = len(toks)
    out = []
    for i in range(n - k, n):
        row = z[i - 1]
        out.append("%d %.9g %.9g\n" % (int(np.argmax(row)), row[toks[i]], row.max()))
    return "".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--greedy", type=int, default=0)
    ap.add_argument("--act", choices=("q8_0", "a8"),
                    help="round the inputs of Q8_0-weight matmuls like the engine (see Qwen3.mat)")
    ap.add_argument("--kv-f32", action="store_true", help="do not round K/V through float16")
    ap.add_argument("--score", type=int, default=0, help="score the last K tokens (see score())")
    a = ap.parse_args()
    toks = [int(t) for t in a.tokens.split(",") if t]
    m = Qwen3(a.model, kv_f16=not a.kv_f32, act=a.act)
    if a.score:
        sys.stdout.write(score(m.forward(toks), toks, a.score))
    elif a.greedy:
        out = []
        for _ in range(a.greedy):
            t = int(np.argmax(m.forward(toks + out, last_only=True)[-1]))
            out.append(t)
        print(",".join(str(t) for t in out))
    else:
        sys.stdout.write("".join("%.9g\n" % v for v in m.forward(toks, last_only=True)[-1]))


if __name__ == "__main__":
    main()
