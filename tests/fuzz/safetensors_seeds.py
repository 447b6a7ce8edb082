#!/usr/bin/python3
"""Seed corpus for fuzz-safetensors: small safetensors files written here, independently of the
engine (header JSON by json.dumps, padding to 8 with spaces as the safetensors writers do).

Shapes and names follow a nanochat checkpoint (docs/nanochat.md) in miniature, in every dtype the
format has, plus variants: metadata, an empty tensor, a gap between tensors, no tensors, unsorted
offsets, and a few broken ones (overlap, short data, bad dtype) so the error paths start covered.

Usage: safetensors_seeds.py OUT_DIR
"""
import json
import os
import struct
import sys

SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
         "BOOL": 1, "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1}


def build(tensors, meta=None, gap=0, pad=True, order=None):
    """tensors: list of (name, dtype, shape). Returns the file bytes."""
    hdr, blobs, off = {}, [], 0
    for i, (name, dt, shape) in enumerate(tensors):
        n = SIZES.get(dt, 1)
        for d in shape:
            n *= d
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        blobs.append(bytes((i * 7 + k) & 0xFF for k in range(n)) + b"\0" * gap)
        off += n + gap
    if meta is not None:
        hdr["__metadata__"] = meta
    if order:
        hdr = {k: hdr[k] for k in order(list(hdr))}
    h = json.dumps(hdr, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    E, V, L = 8, 16, 2
    nano = [("transformer.wte.weight", "BF16", [V, E]), ("lm_head.weight", "BF16", [V, E]),
            ("resid_lambdas", "F32", [L]), ("x0_lambdas", "F32", [L]),
            ("smear_gate.weight", "F32", [1, 24]), ("smear_lambda", "F32", [1])]
    for i in range(L):
        nano += [(f"transformer.h.{i}.attn.c_q.weight", "BF16", [E, E]),
                 (f"transformer.h.{i}.mlp.c_fc.weight", "F32", [4 * E, E])]
    seeds = {
        "nanochat": build(nano, meta={"format": "pt"}),
        "nanochat-gap": build(nano, gap=3),
        "reversed": build(nano, order=lambda k: k[::-1]),
        "all-dtypes": build([(f"t_{dt}", dt, [2, 3]) for dt in SIZES]),
        "empty-tensor": build([("a", "F32", [0, 4]), ("b", "F16", [3])]),
        "scalar": build([("s", "F32", [])]),
        "no-tensors": build([]),
        "meta-only": build([], meta={"a": "b", "c": ""}),
        "unpadded": build([("x", "U8", [5])], pad=False),
        "8-dims": build([("x", "I8", [1, 2, 1, 2, 1, 2, 1, 2])]),
    }
    good = build([("x", "F32", [2, 2]), ("y", "F32", [2])])
    seeds["overlap"] = good.replace(b'"data_offsets":[16,24]', b'"data_offsets":[12,20]')
    seeds["short-data"] = good[:-3]
    seeds["bad-dtype"] = good.replace(b'"F32"', b'"F33"', 1)
    for name, b in seeds.items():
        with open(os.path.join(out, name + ".safetensors"), "wb") as f:
            f.write(b)


if __name__ == "__main__":
    main()
