#!/usr/bin/python3
"""An independent writer of small gemma4 GGUFs, for scripts/gemma4/llamacpp_check.sh's EXTRA files.

It shares nothing with lmserve-mkmodel: the file is written by llama.cpp's own Python GGUF writer
(gguf-py, from a llama.cpp checkout given on the command line: used as a library at run time, not
part of this repository), the weights are numpy's seeded normal draws, and the geometry differs
from mkmodel's shapes (n_embd 96, 3 heads, 4 layers SWA/global alternating, SWA head 32 with the
full rotary width and a window of 16, global head 48 with 1 kv head, proportional RoPE on half of
its pairs, no attn_v on the first global layer; --moe adds 4 experts, top 2, with *separate*
ffn_gate_exps / ffn_up_exps, the layout mkmodel does not write). The vocabulary is a synthetic
300-token Gemma-style one (specials, 256 byte tokens, a few pieces), enough for both loaders.

  gguf_py_writer.py LLAMA_DIR OUT.gguf [--moe] [--seed N]
"""
import argparse
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("llama_dir")
    ap.add_argument("out")
    ap.add_argument("--moe", action="store_true")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    sys.path.insert(0, a.llama_dir + "/gguf-py")
    import gguf  # llama.cpp's writer

    rng = np.random.default_rng(a.seed)
    E, H, L, FF, W = 96, 3, 4, 192, 16
    HD_SWA, HD_FULL, KV_SWA, KV_FULL = 32, 48, 3, 1
    swa = [True, False, True, False]
    NE, K, FE = 4, 2, 64
    toks = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
    types = [3, 3, 3, 3, 3, 3]
    toks += ["<0x%02X>" % i for i in range(256)]
    types += [6] * 256
    pieces = ["▁", "a", "b", "c", "▁a", "▁b", "ab", "▁ab", "bc", "▁c"]
    while len(toks) + len(pieces) < 300:
        pieces.append("x%d" % len(pieces))
    toks += pieces
    types += [1] * len(pieces)
    merges = ["▁ a", "▁ b", "a b", "▁a b", "b c", "▁ c"]
    V = len(toks)

    w = gguf.GGUFWriter(a.out, "gemma4")
    w.add_name("gguf-py-gemma4-%s" % ("moe" if a.moe else "dense"))
    w.add_block_count(L)
    w.add_context_length(8192)
    w.add_embedding_length(E)
    w.add_feed_forward_length(FF)
    w.add_head_count(H)
    w.add_head_count_kv([KV_SWA if s else KV_FULL for s in swa])
    w.add_key_length(HD_FULL)
    w.add_value_length(HD_FULL)
    w.add_key_length_swa(HD_SWA)
    w.add_value_length_swa(HD_SWA)
    w.add_sliding_window(W)
    w.add_sliding_window_pattern(swa)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    w.add_rope_freq_base_swa(1e4)
    w.add_rope_dimension_count(HD_FULL)
    w.add_rope_dimension_count_swa(HD_SWA)
    w.add_final_logit_softcapping(20.0)
    w.add_shared_kv_layers(0)
    w.add_embedding_length_per_layer_input(0)
    if a.moe:
        w.add_expert_count(NE)
        w.add_expert_used_count(K)
        w.add_expert_feed_forward_length(FE)
    w.add_tokenizer_model("gemma4")
    w.add_token_list(toks)
    w.add_token_scores([-1000.0] * V)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_add_bos_token(True)

    def t(name, *shape, std=1.0, mean=0.0):
        # numpy shape is the reverse of GGUF's ne: (rows, cols) for ne = [cols, rows]
        w.add_tensor(name, (mean + std * rng.standard_normal(shape)).astype(np.float32))

    def mat(name, n_in, n_out, gain=1.5):
        t(name, n_out, n_in, std=gain / np.sqrt(n_in))

    def norm(name, n, mean=1.0):
        t(name, n, std=0.05 * mean, mean=mean)

    t("token_embd.weight", V, E, std=0.5 / np.sqrt(E))
    norm("output_norm.weight", E, mean=6.0)
    half = HD_FULL // 2
    w.add_tensor("rope_freqs.weight", np.array([1.0] * (half // 2) + [1e30] * (half - half // 2), dtype=np.float32))
    for l in range(L):
        hd, kv = (HD_SWA, KV_SWA) if swa[l] else (HD_FULL, KV_FULL)
        p = "blk.%d." % l
        norm(p + "attn_norm.weight", E)
        mat(p + "attn_q.weight", E, H * hd)
        mat(p + "attn_k.weight", E, kv * hd)
        if l != 1:  # the first global layer takes V from the raw K projection
            mat(p + "attn_v.weight", E, kv * hd)
        mat(p + "attn_output.weight", H * hd, E)
        norm(p + "attn_q_norm.weight", hd, mean=0.6)
        norm(p + "attn_k_norm.weight", hd, mean=0.6)
        norm(p + "post_attention_norm.weight", E)
        norm(p + "ffn_norm.weight", E)
        mat(p + "ffn_gate.weight", E, FF)
        mat(p + "ffn_up.weight", E, FF)
        mat(p + "ffn_down.weight", FF, E)
        norm(p + "post_ffw_norm.weight", E)
        w.add_tensor(p + "layer_output_scale.weight", np.array([0.8 + 0.1 * l], dtype=np.float32))
        if a.moe:
            mat(p + "ffn_gate_inp.weight", E, NE, gain=2.0)
            norm(p + "ffn_gate_inp.scale", E)
            norm(p + "pre_ffw_norm_2.weight", E)
            norm(p + "post_ffw_norm_1.weight", E)
            norm(p + "post_ffw_norm_2.weight", E)
            t(p + "ffn_gate_exps.weight", NE, FE, E, std=1.5 / np.sqrt(E))
            t(p + "ffn_up_exps.weight", NE, FE, E, std=1.5 / np.sqrt(E))
            t(p + "ffn_down_exps.weight", NE, E, FE, std=1.5 / np.sqrt(FE))
            norm(p + "ffn_down_exps.scale", NE)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
