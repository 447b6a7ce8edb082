#!/usr/bin/env bash
# The demo model and the import path that made it (docs/demo-model.md):
#  1. lmserve-mkmodel --weights on a small random Qwen3 (config.json + F32 safetensors written
#     here with numpy): the engine's F32 logits match a float64 numpy Qwen3 forward (QK-norm, NeoX
#     RoPE, GQA, SwiGLU, tied; K and V rounded to halfs as the engine's KV cache stores them) to 1e-3, the file carries no random-weights marker, and bad inputs
#     (missing / extra / misshapen / non-F32 tensor, bad name) are refused with a reason.
#  2. The committed models/lmserve-demo-*-q8_0.gguf against models/*.ref.json (PyTorch's logits of
#     the trained model, written by scripts/demo/export.py): the engine's tokenization of the
#     held-out text is the training tokenization, the last position's logits are within the Q8_0
#     agreement export measured (x2) with the same argmax, and the greedy continuation is the one
#     export recorded.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3
mk="$BUILD/lmserve-mkmodel"
$MAKE --no-print-directory BUILD="$BUILD" "$mk" "$BUILD/lmserve-logits" "$BUILD/lmserve-tokenize" >/dev/null

# ---- 1. import a small random Qwen3 and check its logits against numpy
$py - "$tmp" "$TOKDIR" <<'PY'
import json, os, struct, sys
import numpy as np
out, tokdir = sys.argv[1], sys.argv[2]
# a byte-level tokenizer with no merges: 256 byte tokens + 3 specials, Qwen3's chat template
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
vocab = {chr(c): i for i, (b, c) in enumerate(sorted(zip(bs, cs)))}
pat = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
       "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
added = [{"id": 256 + i, "content": t, "special": True} for i, t in enumerate(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])]
tok = {"added_tokens": added, "normalizer": {"type": "NFC"},
       "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
           {"type": "Split", "pattern": {"Regex": pat}, "behavior": "Isolated", "invert": False},
           {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
       "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": vocab, "merges": []}}
tpl = json.load(open(os.path.join(tokdir, "tokenizer_config.json")))["chat_template"]
os.makedirs(f"{out}/tok")
json.dump(tok, open(f"{out}/tok/tokenizer.json", "w"))
json.dump({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "chat_template": tpl},
          open(f"{out}/tok/tokenizer_config.json", "w"))
c = {"model_type": "qwen3", "vocab_size": 259, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
     "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "rms_norm_eps": 1e-6,
     "rope_theta": 10000.0, "max_position_embeddings": 512, "tie_word_embeddings": True}
rng = np.random.default_rng(3)
d, hd, nh, nkv, ff = 64, 32, 4, 2, 96
W = {"model.embed_tokens.weight": rng.normal(0, 0.5, (259, d)), "model.norm.weight": 1 + 0.1 * rng.normal(size=d)}
for l in range(2):
    p = f"model.layers.{l}."
    W[p + "input_layernorm.weight"] = 1 + 0.1 * rng.normal(size=d)
    W[p + "post_attention_layernorm.weight"] = 1 + 0.1 * rng.normal(size=d)
    W[p + "self_attn.q_proj.weight"] = rng.normal(0, 0.2, (nh * hd, d))
    W[p + "self_attn.k_proj.weight"] = rng.normal(0, 0.2, (nkv * hd, d))
    W[p + "self_attn.v_proj.weight"] = rng.normal(0, 0.2, (nkv * hd, d))
    W[p + "self_attn.o_proj.weight"] = rng.normal(0, 0.2, (d, nh * hd))
    W[p + "self_attn.q_norm.weight"] = 1 + 0.1 * rng.normal(size=hd)
    W[p + "self_attn.k_norm.weight"] = 1 + 0.1 * rng.normal(size=hd)
    W[p + "mlp.gate_proj.weight"] = rng.normal(0, 0.2, (ff, d))
    W[p + "mlp.up_proj.weight"] = rng.normal(0, 0.2, (ff, d))
    W[p + "mlp.down_proj.weight"] = rng.normal(0, 0.2, (d, ff))
W = {k: v.astype(np.float32) for k, v in W.items()}

def save(dirname, tensors, cfg=c, dtype="F32"):
    os.makedirs(dirname, exist_ok=True)
    json.dump(cfg, open(f"{dirname}/config.json", "w"))
    hdr, blobs, off = {}, [], 0
    for k in sorted(tensors):
        b = tensors[k].astype(np.float32).tobytes()
        hdr[k] = {"dtype": dtype, "shape": list(tensors[k].shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b); off += len(b)
    h = json.dumps(hdr).encode(); h += b" " * ((8 - len(h) % 8) % 8)
    with open(f"{dirname}/model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h); [f.write(b) for b in blobs]

save(f"{out}/good", W)
bad = dict(W); del bad["model.layers.1.mlp.up_proj.weight"]; save(f"{out}/missing", bad)
bad = dict(W); bad["model.layers.0.mlp.extra.weight"] = W["model.norm.weight"]; save(f"{out}/extra", bad)
bad = dict(W); bad["model.layers.0.self_attn.k_proj.weight"] = W["model.layers.0.self_attn.q_proj.weight"]; save(f"{out}/shape", bad)
save(f"{out}/f16", W, dtype="F16")

# float64 reference forward (HF modeling_qwen3)
ids = [int(x) for x in np.random.default_rng(4).integers(0, 256, 24)]
W64 = {k: v.astype(np.float64) for k, v in W.items()}
def rms(x, w): return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w
T = len(ids)
inv = 1.0 / (10000.0 ** (np.arange(0, hd, 2) / hd))
ang = np.outer(np.arange(T), inv); cos = np.cos(np.concatenate([ang, ang], -1)); sin = np.sin(np.concatenate([ang, ang], -1))
def rope(x):  # (T, heads, hd), NeoX halves
    rot = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1)
    return x * cos[:, None, :] + rot * sin[:, None, :]
x = W64["model.embed_tokens.weight"][ids]
for l in range(2):
    p = f"model.layers.{l}."
    h = rms(x, W64[p + "input_layernorm.weight"])
    q = rope(rms((h @ W64[p + "self_attn.q_proj.weight"].T).reshape(T, nh, hd), W64[p + "self_attn.q_norm.weight"]))
    k = rope(rms((h @ W64[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, hd), W64[p + "self_attn.k_norm.weight"]))
    v = (h @ W64[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, hd)
    # the engine's KV cache holds K (after RoPE) and V as IEEE halfs (docs/engine.md)
    k = k.astype(np.float16).astype(np.float64); v = v.astype(np.float16).astype(np.float64)
    o = np.zeros((T, nh, hd))
    for hh in range(nh):
        kv = hh // (nh // nkv)
        s = q[:, hh] @ k[:, kv].T / np.sqrt(hd)
        s = np.where(np.tril(np.ones((T, T))) > 0, s, -np.inf)
        pr = np.exp(s - s.max(-1, keepdims=True)); pr /= pr.sum(-1, keepdims=True)
        o[:, hh] = pr @ v[:, kv]
    x = x + o.reshape(T, nh * hd) @ W64[p + "self_attn.o_proj.weight"].T
    h = rms(x, W64[p + "post_attention_layernorm.weight"])
    g = h @ W64[p + "mlp.gate_proj.weight"].T
    x = x + ((g / (1 + np.exp(-g))) * (h @ W64[p + "mlp.up_proj.weight"].T)) @ W64[p + "mlp.down_proj.weight"].T
logits = rms(x, W64["model.norm.weight"]) @ W64["model.embed_tokens.weight"].T
json.dump({"ids": ids, "last": logits[-1].tolist()}, open(f"{out}/ref.json", "w"))
PY
"$mk" --weights "$tmp/good" --name import-test --type f32 --tokenizer "$tmp/tok" -o "$tmp/good.gguf" 2>/dev/null
ids=$($py -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['ids'])))" "$tmp/ref.json")
"$BUILD/lmserve-logits" "$tmp/good.gguf" --tokens "$ids" --threads 1 > "$tmp/good.logits"
$py - "$tmp/ref.json" "$tmp/good.logits" "$tmp/good.gguf" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1]))["last"]
got = [float(x) for x in open(sys.argv[2]).read().split()]
assert len(got) == len(ref), (len(got), len(ref))
d = max(abs(a - b) for a, b in zip(got, ref))
# 1e-3: the reference rounds K/V to halfs from float64, the engine from float32, so an element on
# a rounding boundary may land one half-ulp apart
assert d < 1e-3, f"import: F32 logits differ from the numpy Qwen3 by {d}"
assert b"lmserve.random_weights" not in open(sys.argv[3], "rb").read(1 << 16), "an imported model marked random"
print(f"import: F32 logits match a float64 numpy Qwen3 forward (max |delta| {d:.2e} over {len(ref)} logits)")
PY
fail() { echo "import: $*"; exit 1; }
# --nll (held-out perplexity, docs/demo-model.md): the sum of -log softmax of each next token, one
# token per forward, equals the same sum from the last-position logits of every prefix (prefill)
"$BUILD/lmserve-logits" "$tmp/good.gguf" --tokens "$ids" --nll --threads 1 > "$tmp/good.nll"
for i in $(seq 1 23); do
  "$BUILD/lmserve-logits" "$tmp/good.gguf" --tokens "$(echo "$ids" | cut -d, -f1-$i)" --threads 1 > "$tmp/prefix.$i"
done
$py - "$tmp/ref.json" "$tmp/good.nll" "$tmp" <<'PY'
import json, math, sys
ids = json.load(open(sys.argv[1]))["ids"]
got_sum, got_n = open(sys.argv[2]).read().split()
want = 0.0
for i in range(1, len(ids)):
    l = [float(x) for x in open(f"{sys.argv[3]}/prefix.{i}").read().split()]
    m = max(l)
    want += m + math.log(sum(math.exp(x - m) for x in l)) - l[ids[i]]
assert int(got_n) == len(ids) - 1, got_n
assert abs(float(got_sum) - want) < 1e-3, f"--nll {got_sum} != {want} from the prefixes' logits"
print(f"import: --nll {float(got_sum):.4f} over {got_n} tokens = the prefixes' logits ({want:.4f})")
PY
if "$BUILD/lmserve-logits" "$tmp/good.gguf" --tokens 5 --nll >"$tmp/out" 2>&1; then fail "--nll accepted one token"; fi
grep -q "at least 2 tokens" "$tmp/out" || fail "--nll with one token said: $(cat "$tmp/out")"
expect_error() { # expect_error PATTERN ARGS...
  local pat=$1; shift
  if "$mk" "$@" >"$tmp/out" 2>&1; then fail "accepted: $*"; fi
  grep -q -- "$pat" "$tmp/out" || fail "'$*' said: $(cat "$tmp/out") (expected '$pat')"
}
for c in "missing:tensors, a qwen3 model" "extra:unexpected tensor model.layers.0.mlp.extra" \
         "shape:k_proj.weight has the wrong shape" "f16:dtype F16"; do
  expect_error "${c#*:}" --weights "$tmp/${c%%:*}" --name x --type q8_0 --tokenizer "$tmp/tok" -o "$tmp/x.gguf"
done
expect_error "without spaces" --weights "$tmp/good" --name "two words" --type f32 --tokenizer "$tmp/tok" -o "$tmp/x.gguf"
expect_error "no --shape" --weights "$tmp/good" --shape tiny --name x --type f32 --tokenizer "$tmp/tok" -o "$tmp/x.gguf"
expect_error "config.json" --weights "$tmp/nonexistent" --name x --type f32 --tokenizer "$tmp/tok" -o "$tmp/x.gguf"
[ ! -e "$tmp/x.gguf" ] || fail "a failed import left $tmp/x.gguf"
echo "import: missing, extra, misshapen and F16 tensors, a bad name and --shape refused"

# ---- 2. the committed demo model against its PyTorch reference
model=$(ls models/lmserve-demo-*-q8_0.gguf)
ref=${model%-q8_0.gguf}.ref.json
[ -f "$ref" ] || fail "$ref missing"
text=$($py -c "import json,sys; sys.stdout.write(json.load(open(sys.argv[1]))['text'])" "$ref")
printf '%s' "$text" | "$BUILD/lmserve-tokenize" "$model" > "$tmp/ids"
ids=$($py -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['tokens'])))" "$ref")
"$BUILD/lmserve-logits" "$model" --tokens "$ids" --threads 1 > "$tmp/demo.logits"
"$BUILD/lmserve-logits" "$model" --tokens "$ids" --threads 2 --greedy 32 > "$tmp/demo.greedy"
$py - "$ref" "$tmp/ids" "$tmp/demo.logits" "$tmp/demo.greedy" "$model" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1]))
ids = [int(x) for x in open(sys.argv[2]).read().strip().split(",")]
assert ids[:len(ref["tokens"])] == ref["tokens"], "the engine tokenizes the held-out text differently from training"
got = [float(x) for x in open(sys.argv[3]).read().split()]
want = ref["last_row"]
assert len(got) == len(want), (len(got), len(want))
d = max(abs(a - b) for a, b in zip(got, want))
tol = 2 * ref["measured"]["q8_0_max_abs_delta"]
assert d <= tol, f"demo model: Q8_0 logits differ from PyTorch's by {d} (export measured {tol / 2})"
assert got.index(max(got)) == want.index(max(want)), "demo model: a different next token than PyTorch"
greedy = [int(x) for x in open(sys.argv[4]).read().strip().split(",")]
assert greedy == ref["greedy_q8_0"], f"demo model: greedy {greedy} != recorded {ref['greedy_q8_0']}"
same = next((i for i, (a, b) in enumerate(zip(greedy, ref["greedy_torch"])) if a != b), len(greedy))
head = open(sys.argv[5], "rb").read(1 << 16)
assert b"lmserve.random_weights" not in head, "the demo model is marked as random weights"
assert ref["name"].encode() in head and " " not in ref["name"]
print(f"demo model: {sys.argv[5]}: tokenizer = training's; Q8_0 last-position logits within {d:.4f} of PyTorch F32 "
      f"(bound {tol:.4f}); greedy 32 as recorded, equal to PyTorch's for the first {same}; "
      f"export measured the F32 file at max |delta| {ref['measured']['f32_max_abs_delta']:.2e} vs PyTorch F32, "
      f"{ref['measured']['f32_vs_f16kv_torch_max_abs_delta']:.2e} vs PyTorch with half K/V")
PY
