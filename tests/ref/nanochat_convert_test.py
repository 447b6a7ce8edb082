#!/usr/bin/python3
"""tools/nanochat-convert round trip and refusals (tests/suites/47-nanochat-convert.sh).

  nanochat_convert_test.py CONVERTER TOK.json LMSERVE_TOKENIZE WORKDIR

Builds with python3-torch a checkpoint in nanochat's own layout: model_000120.pt, the state dict
of the current architecture (transformer.wte, transformer.h.{i}.attn.c_q/c_k/c_v/c_proj,
ve_gate on the value-embedding layers, mlp.c_fc/c_proj, lm_head, value_embeds.{i},
resid_lambdas, x0_lambdas, smear_gate, smear_lambda, backout_lambda; BF16 matrices, F32
scalars) under torch.compile's "_orig_mod." prefix, saved by torch.save; meta_000120.json as
base_train writes it; tokenizer.pkl a pickle of an object of class tiktoken.core.Encoding with
tiktoken's __getstate__ shape (a stand-in class registered as that module, so the pickle's
opcodes are the real thing's: protocol 4 and protocol 0). Then: every tensor bit-identical in
model.safetensors under its stripped name, config.json and tokenizer.json right, lmserve-tokenize
on the converted directory equal to the reference tokenizer. Then malicious and broken inputs,
each refused with the culprit named and nothing executed."""
import base64
import json
import os
import pickle
import struct
import subprocess
import sys
import types

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nanochat_tok  # noqa: E402

conv, tokfile, tokenize, work = sys.argv[1:5]
fails = 0


def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("FAIL " + what)


# a stand-in tiktoken.core.Encoding: pickles exactly as tiktoken's (NEWOBJ/BUILD of the dict)
mod = types.ModuleType("tiktoken.core")
pkg = types.ModuleType("tiktoken")
pkg.core = mod


class Encoding:
    def __init__(self, name, pat_str, mergeable_ranks, special_tokens):
        self.name, self._pat_str = name, pat_str
        self._mergeable_ranks, self._special_tokens = mergeable_ranks, special_tokens

    def __getstate__(self):
        return {"name": self.name, "pat_str": self._pat_str,
                "mergeable_ranks": self._mergeable_ranks, "special_tokens": self._special_tokens}


Encoding.__module__ = "tiktoken.core"
mod.Encoding = Encoding
sys.modules["tiktoken"], sys.modules["tiktoken.core"] = pkg, mod

with open(tokfile, encoding="utf-8") as f:
    tdoc = json.load(f)
ranks = {base64.b64decode(h): i for i, h in enumerate(tdoc["mergeable_ranks"])}
specials = tdoc["special_tokens"]
vocab = len(ranks) + len(specials)
enc = Encoding("rustbpe", nanochat_tok.PATTERN, ranks, specials)

# the checkpoint (nanochat's layout; small shapes)
torch.manual_seed(0)
L, E, H, KV = 4, 64, 4, 2
hd = E // H
Vp = (vocab + 63) // 64 * 64
sd = {}
bf = lambda *s: (torch.randn(*s) * 0.02).to(torch.bfloat16)
sd["transformer.wte.weight"] = bf(Vp, E)
sd["lm_head.weight"] = bf(Vp, E)
for i in range(L):
    p = "transformer.h.%d." % i
    sd[p + "attn.c_q.weight"] = bf(H * hd, E)
    sd[p + "attn.c_k.weight"] = bf(KV * hd, E)
    sd[p + "attn.c_v.weight"] = bf(KV * hd, E)
    sd[p + "attn.c_proj.weight"] = bf(E, H * hd)
    sd[p + "mlp.c_fc.weight"] = bf(4 * E, E)
    sd[p + "mlp.c_proj.weight"] = bf(E, 4 * E)
    if i % 2 == (L - 1) % 2:
        sd[p + "attn.ve_gate.weight"] = bf(KV, 12)
        sd["value_embeds.%d.weight" % i] = bf(Vp, KV * hd)
sd["resid_lambdas"] = torch.ones(L)
sd["x0_lambdas"] = torch.rand(L)
sd["smear_gate.weight"] = bf(1, 24)
sd["smear_lambda"] = torch.rand(1)
sd["backout_lambda"] = torch.rand(1)
ck = os.path.join(work, "base_checkpoints", "d4")
os.makedirs(ck)
torch.save({"_orig_mod." + k: v for k, v in sd.items()}, os.path.join(ck, "model_000120.pt"))
torch.save({"_orig_mod." + k: v for k, v in sd.items()}, os.path.join(ck, "model_000060.pt"))
meta = {"step": 120, "val_bpb": 1.234,
        "model_config": {"sequence_len": 256, "vocab_size": vocab, "n_layer": L, "n_head": H,
                         "n_kv_head": KV, "n_embd": E, "window_pattern": "SSSL"},
        "user_config": {"depth": L}, "device_batch_size": 4}
for s in (60, 120):
    with open(os.path.join(ck, "meta_%06d.json" % s), "w") as f:
        json.dump(meta, f)
tk = os.path.join(work, "tokenizer")
os.makedirs(tk)
pkl = os.path.join(tk, "tokenizer.pkl")
with open(pkl, "wb") as f:
    pickle.dump(enc, f)
pkl0 = os.path.join(tk, "tokenizer-p0.pkl")
with open(pkl0, "wb") as f:
    pickle.dump(enc, f, protocol=0)


def run(*args):
    r = subprocess.run([conv] + list(args), capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    hdr = json.loads(data[8:8 + n])
    return hdr, data[8 + n:]


for label, pk in (("protocol 4", pkl), ("protocol 0", pkl0)):
    out = os.path.join(work, "out-" + label.replace(" ", ""))
    rc, msg = run(ck, pk, out, "--architecture", '{"rope_base": 100000}')
    check(rc == 0, "%s: converter failed: %s" % (label, msg))
    if rc:
        continue
    check("step 120" in msg, "%s: not the highest step: %s" % (label, msg))
    hdr, blob = read_safetensors(os.path.join(out, "model.safetensors"))
    check(sorted(hdr) == sorted(sd), "%s: tensor names %s" % (label, sorted(set(hdr) ^ set(sd))))
    for k, t in sd.items():
        h = hdr.get(k)
        if not h:
            continue
        a, b = h["data_offsets"]
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        want = {torch.bfloat16: "BF16", torch.float32: "F32"}[t.dtype]
        check(h["dtype"] == want and h["shape"] == list(t.shape) and blob[a:b] == raw,
              "%s: tensor %s not bit-identical (%s %s)" % (label, k, h["dtype"], h["shape"]))
    cfg = json.load(open(os.path.join(out, "config.json")))
    check(cfg["format"] == "lmserve-nanochat" and cfg["format_version"] == 1, "%s: config format" % label)
    check(cfg["model_config"] == meta["model_config"], "%s: model_config" % label)
    check(cfg["architecture"] == {"rope_base": 100000}, "%s: architecture" % label)
    check(cfg["meta"]["val_bpb"] == 1.234 and "model_config" not in cfg["meta"], "%s: meta" % label)
    tj = json.load(open(os.path.join(out, "tokenizer.json")))
    check(tj == tdoc, "%s: tokenizer.json differs from the ranks pickled" % label)
    text = "Hello world, it's 2026! <|bos|> naïve 東京 12345"
    r = subprocess.run([tokenize, out], input=text.encode(), capture_output=True)
    want = ",".join(map(str, nanochat_tok.encode_ordinary(ranks, text)))
    check(r.returncode == 0 and r.stdout.decode().strip() == want,
          "%s: lmserve-tokenize on the directory: %s %s" % (label, r.stdout[:80], r.stderr[:200]))
    print("nanochat-convert: %s pickle: %d tensors bit-identical, config and tokenizer round-trip" % (label, len(hdr)))

rc, msg = run(ck, pkl, os.path.join(work, "out-step"), "--step", "60")
check(rc == 0 and "step 60" in msg, "--step 60: %s" % msg)

# refusals: each names the culprit; nothing runs
marker = os.path.join(work, "PWNED")


class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + marker,))


class EvilEval:
    def __reduce__(self):
        return (eval, ("__import__('os').system('touch %s')" % marker,))


def write(name, obj=None, raw=None):
    p = os.path.join(work, name)
    with open(p, "wb") as f:
        f.write(raw if raw is not None else pickle.dumps(obj))
    return p


def by_name():  # tiktoken pickles its registered encodings (cl100k_base, ...) by name
    g = Encoding.__getstate__
    Encoding.__getstate__ = lambda self: self.name
    try:
        return pickle.dumps(Encoding("cl100k_base", "", {}, {}))
    finally:
        Encoding.__getstate__ = g


bad_pk = [
    ("os.system", write("evil1.pkl", Evil()), "posix.system"),
    ("eval", write("evil2.pkl", EvilEval()), "builtins.eval"),
    ("smuggled in the state", write("evil3.pkl", Encoding("x", nanochat_tok.PATTERN, {b"a": Evil()}, specials)), "posix.system"),
    ("protocol-0 GLOBAL", write("evil4.pkl", raw=b"cos\nsystem\n(S'touch " + marker.encode() + b"'\ntR."), "os.system"),
    ("registered by name", write("byname.pkl", raw=by_name()), "registered"),
    ("truncated", write("trunc.pkl", raw=pickle.dumps(enc)[:200]), "not a readable pickle"),
    ("other pattern", write("pat.pkl", Encoding("x", nanochat_tok.PATTERN.replace("{1,2}", "{1,3}"), ranks, specials)), "pat_str is not nanochat's"),
    ("a missing special", write("nosp.pkl", Encoding("x", nanochat_tok.PATTERN, ranks, {k: v for k, v in specials.items() if k != "<|output_end|>"})), "<|output_end|>"),
    ("sparse ranks", write("gap.pkl", Encoding("x", nanochat_tok.PATTERN, {k: (v if v < 300 else v + 1) for k, v in ranks.items()}, specials)), "rank 300 missing"),
    ("a list", write("list.pkl", [1, 2]), "not a tiktoken Encoding"),
]
for what, p, needle in bad_pk:
    out = os.path.join(work, "out-bad")
    rc, msg = run(ck, p, out)
    check(rc != 0 and needle in msg and p in msg, "pickle %s: rc %d, %r" % (what, rc, msg.strip()[-300:]))
    check(not os.path.exists(os.path.join(out, "model.safetensors")), "pickle %s: wrote output" % what)
check(not os.path.exists(marker), "a malicious pickle ran code")

# a state dict that is itself a malicious pickle: torch.load(weights_only=True) refuses it
ck2 = os.path.join(work, "evil_ckpt")
os.makedirs(ck2)
with open(os.path.join(ck2, "model_000001.pt"), "wb") as f:
    f.write(pickle.dumps(Evil()))
with open(os.path.join(ck2, "meta_000001.json"), "w") as f:
    json.dump(meta, f)
rc, msg = run(ck2, pkl, os.path.join(work, "out-evil2"))
check(rc != 0 and "model_000001.pt" in msg and "not a loadable state dict" in msg, "evil .pt: %r" % msg[-300:])
check(not os.path.exists(marker), "a malicious state dict ran code")

# other bad inputs
ck3 = os.path.join(work, "nometa")
os.makedirs(ck3)
os.link(os.path.join(ck, "model_000120.pt"), os.path.join(ck3, "model_000120.pt"))
rc, msg = run(ck3, pkl, os.path.join(work, "o3"))
check(rc != 0 and "meta_000120.json" in msg, "missing meta: %r" % msg[-200:])
with open(os.path.join(ck3, "meta_000120.json"), "w") as f:
    json.dump(dict(meta, model_config=dict(meta["model_config"], vocab_size=vocab + 1)), f)
rc, msg = run(ck3, pkl, os.path.join(work, "o3"))
check(rc != 0 and "vocab_size" in msg, "vocab mismatch: %r" % msg[-200:])
rc, msg = run(os.path.join(work, "empty-none"), pkl, os.path.join(work, "o4"))
check(rc != 0 and "empty-none" in msg, "missing checkpoint dir: %r" % msg[-200:])
rc, msg = run(ck, os.path.join(work, "no.pkl"), os.path.join(work, "o5"))
check(rc != 0 and "no.pkl" in msg, "missing pickle: %r" % msg[-200:])
print("nanochat-convert: %d malicious or broken pickles, a malicious state dict and 4 broken inputs refused, nothing ran" % len(bad_pk))
sys.exit(1 if fails else 0)
