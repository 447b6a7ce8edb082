#!/usr/bin/python3
"""Turns a qwen3 GGUF (F32 / F16 / Q8_0 tensors) back into what scripts/train_demo.py reads and
writes: OUT/config.json + OUT/model.safetensors (HF Qwen3 names, F32, dequantized). The demo
model's continuation stage starts from the Q8_0 file of the first stage this way
(scripts/demo/build.sh), so that a retrain follows the committed model's own path.

  scripts/demo/gguf2st.py MODEL.gguf OUT_DIR
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

GGUF_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class Reader:
    def __init__(self, raw):
        self.raw, self.off = raw, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.raw, self.off)[0]
        self.off += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.raw[self.off:self.off + n].decode("utf-8")
        self.off += n
        return s

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("<I"), self.take("<Q")
            return [self.value(et) for _ in range(n)]
        if t not in GGUF_SCALAR:
            sys.exit(f"gguf2st: unknown GGUF value type {t}")
        return self.take(GGUF_SCALAR[t])


def read_gguf(path):
    raw = open(path, "rb").read()
    r = Reader(raw)
    if raw[:4] != b"GGUF":
        sys.exit(f"gguf2st: {path}: not a GGUF file")
    r.off = 4
    version, n_t, n_kv = r.take("<I"), r.take("<Q"), r.take("<Q")
    if version != 3:
        sys.exit(f"gguf2st: {path}: GGUF version {version}, only 3 is read")
    kv = {}
    for _ in range(n_kv):
        k = r.string()
        kv[k] = r.value(r.take("<I"))
    infos = []
    for _ in range(n_t):
        name = r.string()
        nd = r.take("<I")
        dims = [r.take("<Q") for _ in range(nd)]
        infos.append((name, dims, r.take("<I"), r.take("<Q")))
    align = kv.get("general.alignment", 32)
    base = (r.off + align - 1) // align * align
    tensors = {}
    for name, dims, t, off in infos:
        n = int(np.prod(dims))
        at = base + off
        if t == 0:
            a = np.frombuffer(raw, np.float32, n, at)
        elif t == 1:
            a = np.frombuffer(raw, np.float16, n, at).astype(np.float32)
        elif t == 8:  # Q8_0: blocks of 32 (f16 scale, 32 int8)
            blk = np.frombuffer(raw, np.dtype([("d", "<f2"), ("q", "i1", 32)]), n // 32, at)
            a = (blk["q"].astype(np.float32) * blk["d"].astype(np.float32)[:, None]).reshape(-1)
        else:
            sys.exit(f"gguf2st: {name}: tensor type {t} not handled (F32, F16, Q8_0 only)")
        tensors[name] = a.reshape(list(reversed(dims))).copy()
    return kv, tensors


def hf_name(g):
    if g == "token_embd.weight":
        return "model.embed_tokens.weight"
    if g == "output_norm.weight":
        return "model.norm.weight"
    if g == "output.weight":
        return "lm_head.weight"
    m = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
         "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
         "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm", "ffn_gate": "mlp.gate_proj",
         "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    p = g.split(".")
    if len(p) == 4 and p[0] == "blk" and p[2] in m and p[3] == "weight":
        return f"model.layers.{p[1]}.{m[p[2]]}.weight"
    sys.exit(f"gguf2st: tensor {g} has no HF Qwen3 name")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gguf2st.py MODEL.gguf OUT_DIR")
    kv, ts = read_gguf(sys.argv[1])
    if kv.get("general.architecture") != "qwen3":
        sys.exit(f"gguf2st: {sys.argv[1]}: architecture {kv.get('general.architecture')!r}, not qwen3")
    emb = ts["token_embd.weight"]
    c = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": int(emb.shape[0]),
         "hidden_size": int(kv["qwen3.embedding_length"]), "intermediate_size": int(kv["qwen3.feed_forward_length"]),
         "num_hidden_layers": int(kv["qwen3.block_count"]), "num_attention_heads": int(kv["qwen3.attention.head_count"]),
         "num_key_value_heads": int(kv["qwen3.attention.head_count_kv"]),
         "head_dim": int(kv["qwen3.attention.key_length"]),
         "rms_norm_eps": float("%.6g" % kv["qwen3.attention.layer_norm_rms_epsilon"]),
         "rope_theta": float(kv["qwen3.rope.freq_base"]), "max_position_embeddings": int(kv["qwen3.context_length"]),
         "tie_word_embeddings": "output.weight" not in ts, "torch_dtype": "float32"}
    import torch  # after numpy; train_demo sets one thread
    import train_demo
    os.makedirs(sys.argv[2], exist_ok=True)
    json.dump(c, open(os.path.join(sys.argv[2], "config.json"), "w"), indent=1)
    train_demo.save_safetensors({hf_name(k): torch.from_numpy(v) for k, v in ts.items()},
                                os.path.join(sys.argv[2], "model.safetensors"))
    print(f"gguf2st: {len(ts)} tensors -> {sys.argv[2]} ({json.dumps(c)})")


if __name__ == "__main__":
    main()
