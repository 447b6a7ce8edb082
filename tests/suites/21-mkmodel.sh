#!/usr/bin/env bash
# lmserve-mkmodel through its CLI with the real Qwen3 tokenizer: same seed + shape + type gives a
# byte-identical file, another seed another file, bad flags exit non-zero with a reason, and the
# generated files carry the tokenizer and the shape's geometry.
set -eu
mk="$BUILD/lmserve-mkmodel"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$MAKE --no-print-directory BUILD="$BUILD" "$MODELDIR/tiny-q8_0.gguf" >/dev/null 2>&1
"$mk" --shape tiny --type q8_0 --tokenizer "$TOKDIR" --seed 1 -o "$tmp/a.gguf" 2>/dev/null
cmp "$MODELDIR/tiny-q8_0.gguf" "$tmp/a.gguf"
"$mk" --shape tiny --type q8_0 --tokenizer "$TOKDIR" --seed 2 -o "$tmp/b.gguf" 2>/dev/null
if cmp -s "$tmp/a.gguf" "$tmp/b.gguf"; then echo "seed 2 gave the same file as seed 1"; exit 1; fi
"$mk" --shape moe-tiny --type q4_k_m --tokenizer "$TOKDIR" --seed 3 -o "$tmp/m1.gguf" 2>/dev/null
"$mk" --shape moe-tiny --type q4_k_m --tokenizer "$TOKDIR" --seed 3 -o "$tmp/m2.gguf" 2>/dev/null
cmp "$tmp/m1.gguf" "$tmp/m2.gguf"
echo "mkmodel: deterministic (tiny q8_0, moe-tiny q4_k_m), seed-dependent"

fail() { echo "mkmodel: $*"; exit 1; }
expect_error() { # expect_error PATTERN ARGS...
  local pat=$1; shift
  if "$mk" "$@" >"$tmp/out" 2>&1; then fail "accepted: $*"; fi
  grep -q -- "$pat" "$tmp/out" || fail "'$*' said: $(cat "$tmp/out") (expected '$pat')"
}
expect_error "unknown shape" --shape huge --type f32 --tokenizer "$TOKDIR" -o "$tmp/x.gguf"
expect_error "unknown type" --shape tiny --type q3_k --tokenizer "$TOKDIR" -o "$tmp/x.gguf"
expect_error "not an unsigned integer" --shape tiny --type f32 --seed -4 --tokenizer "$TOKDIR" -o "$tmp/x.gguf"
expect_error "required" --shape tiny --type f32 -o "$tmp/x.gguf"
expect_error "unknown flag" --shape tiny --type f32 --frobnicate 1
expect_error "tokenizer" --shape tiny --type f32 --tokenizer "$tmp" -o "$tmp/x.gguf"
[ ! -e "$tmp/x.gguf" ] || fail "a failed run left $tmp/x.gguf"
"$mk" --help | grep -q -- "--shape" || fail "--help does not list --shape"
echo "mkmodel: bad flags rejected"

/usr/bin/python3 - "$MODELDIR/tiny-q8_0.gguf" "$tmp/m1.gguf" <<'PY'
import struct, sys
def header(path):
    b = open(path, "rb").read(16 << 20)
    o = 24
    def take(fmt):
        nonlocal o
        v = struct.unpack_from(fmt, b, o); o += struct.calcsize(fmt); return v[0]
    def s():
        n = take("<Q"); nonlocal o; v = b[o:o + n]; o += n; return v.decode()
    def val(t):
        if t == 8: return s()
        if t == 9:
            et, n = take("<I"), take("<Q"); return [val(et) for _ in range(n)]
        return take({0:"<B",1:"<b",2:"<H",3:"<h",4:"<I",5:"<i",6:"<f",7:"<B",10:"<Q",11:"<q",12:"<d"}[t])
    n_t, n_kv = struct.unpack_from("<QQ", b, 8)
    kv = {}
    for _ in range(n_kv):
        k = s(); kv[k] = val(take("<I"))
    ts = {}
    for _ in range(n_t):
        name = s(); nd = take("<I"); ne = [take("<Q") for _ in range(nd)]; ts[name] = (ne, take("<I")); take("<Q")
    return kv, ts
kv, ts = header(sys.argv[1])
assert kv["general.architecture"] == "qwen3"
assert kv["lmserve.random_weights"] == 1, "the random-weights marker"
assert kv["general.name"] == "lmserve-mkmodel-tiny-q8_0-seed1", kv["general.name"]
assert kv["tokenizer.ggml.model"] == "gpt2" and len(kv["tokenizer.ggml.tokens"]) == 151936, "tokenizer"
assert kv["tokenizer.ggml.tokens"][9707] == "Hello", kv["tokenizer.ggml.tokens"][9707]
assert kv["qwen3.attention.key_length"] == 32 and kv["qwen3.attention.head_count"] == 8
assert ts["token_embd.weight"] == ([64, 151936], 8) and ts["output.weight"] == ([64, 151936], 8)
assert ts["blk.1.attn_output.weight"] == ([256, 64], 8) and ts["blk.0.attn_q_norm.weight"] == ([32], 0)
kv, ts = header(sys.argv[2])
assert kv["general.architecture"] == "qwen3moe" and kv["qwen3moe.expert_count"] == 8
assert kv["qwen3moe.expert_used_count"] == 2 and kv["qwen3moe.expert_feed_forward_length"] == 64
assert ts["blk.0.ffn_down_exps.weight"] == ([64, 64, 8], 8), ts["blk.0.ffn_down_exps.weight"]
assert ts["blk.0.ffn_gate_inp.weight"] == ([64, 8], 0)
print("mkmodel: keys, tokenizer and tensor layout as expected")
PY

# Qwen3.5 shapes (src/engine/format/mkmodel_qwen35.c): deterministic, llama.cpp's keys and names
"$mk" --shape qwen35-tiny --type q8_0 --tokenizer "$TOKDIR" --seed 1 -o "$tmp/q1.gguf" 2>/dev/null
"$mk" --shape qwen35-tiny --type q8_0 --tokenizer "$TOKDIR" --seed 1 -o "$tmp/q2.gguf" 2>/dev/null
cmp "$tmp/q1.gguf" "$tmp/q2.gguf"
"$mk" --shape qwen35moe-tiny --type f32 --tokenizer "$TOKDIR" --seed 1 -o "$tmp/qm.gguf" 2>/dev/null
/usr/bin/python3 - "$tmp/q1.gguf" "$tmp/qm.gguf" <<'PY'
import struct, sys
def header(path):
    b = open(path, "rb").read(16 << 20)
    o = 24
    def take(fmt):
        nonlocal o
        v = struct.unpack_from(fmt, b, o); o += struct.calcsize(fmt); return v[0]
    def s():
        n = take("<Q"); nonlocal o; v = b[o:o + n]; o += n; return v.decode()
    def val(t):
        if t == 8: return s()
        if t == 9:
            et, n = take("<I"), take("<Q"); return [val(et) for _ in range(n)]
        return take({0:"<B",1:"<b",2:"<H",3:"<h",4:"<I",5:"<i",6:"<f",7:"<B",10:"<Q",11:"<q",12:"<d"}[t])
    n_t, n_kv = struct.unpack_from("<QQ", b, 8)
    kv = {}
    for _ in range(n_kv):
        k = s(); kv[k] = val(take("<I"))
    ts = {}
    for _ in range(n_t):
        name = s(); nd = take("<I"); ne = [take("<Q") for _ in range(nd)]; ts[name] = (ne, take("<I")); take("<Q")
    return kv, ts
kv, ts = header(sys.argv[1])
assert kv["general.architecture"] == "qwen35" and kv["lmserve.random_weights"] == 1
assert kv["qwen35.full_attention_interval"] == 4 and kv["qwen35.rope.dimension_sections"] == [2, 1, 1, 0]
assert kv["qwen35.ssm.state_size"] == 16 and kv["qwen35.ssm.group_count"] == 2 and kv["qwen35.ssm.time_step_rank"] == 4
assert kv["qwen35.ssm.inner_size"] == 64 and kv["qwen35.ssm.conv_kernel"] == 4 and kv["qwen35.rope.dimension_count"] == 8
assert len(kv["tokenizer.ggml.tokens"]) == 151936 and "output.weight" not in ts  # tied
for l in range(3):  # Gated DeltaNet layers
    assert ts[f"blk.{l}.attn_qkv.weight"] == ([64, 128], 8) and ts[f"blk.{l}.ssm_conv1d.weight"] == ([4, 128], 0)
    assert ts[f"blk.{l}.ssm_a"] == ([4], 0) and ts[f"blk.{l}.ssm_dt.bias"] == ([4], 0)
    assert ts[f"blk.{l}.ssm_norm.weight"] == ([16], 0) and ts[f"blk.{l}.ssm_out.weight"] == ([64, 64], 8)
    assert f"blk.{l}.attn_q.weight" not in ts
assert ts["blk.3.attn_q.weight"] == ([64, 256], 8) and "blk.3.attn_qkv.weight" not in ts  # q | gate
assert ts["blk.3.post_attention_norm.weight"] == ([64], 0)
kv, ts = header(sys.argv[2])
assert kv["general.architecture"] == "qwen35moe" and kv["qwen35moe.expert_shared_feed_forward_length"] == 96
assert ts["blk.0.ffn_gate_inp_shexp.weight"] == ([64], 0) and ts["blk.0.ffn_down_exps.weight"] == ([48, 64, 8], 0)
assert ts["output.weight"] == ([64, 151936], 0)
print("mkmodel: qwen35 / qwen35moe keys and tensor layout as expected, deterministic")
PY
