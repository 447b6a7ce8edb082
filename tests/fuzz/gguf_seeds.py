#!/usr/bin/python3
"""Seed corpus for fuzz-gguf, made from generated models.

A real model is megabytes (the tokenizer alone is ~5 MB of metadata), far too big for a fuzzer to
mutate usefully. For each MODEL.gguf this writes miniatures that keep its structure — every key
with its type (arrays cut to a few elements), every tensor info with its type and number of
dimensions (dimensions shrunk to one block) and real-looking data — in a few kilobytes, plus
variants (GGUF v2, another alignment, no tensors, only the header).

Usage: gguf_seeds.py OUT_DIR MODEL.gguf [MODEL.gguf ...]
"""
import os
import struct
import sys

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q",
          12: "<d"}
# type -> (block size, bytes per block)
BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
         9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
         15: (256, 292), 30: (1, 2)}
KEEP = 6  # array elements kept


class Reader:
    def __init__(self, b):
        self.b, self.o = b, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.o)[0]
        self.o += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.b[self.o:self.o + n]
        self.o += n
        return s

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("<I"), self.take("<Q")
            vals = [self.value(et) for _ in range(n)]
            return (et, vals[:KEEP])
        return self.take(SCALAR[t])


def read_model(path):
    # only the header is needed: read until the tensor infos are parsed (tokenizer metadata is big)
    with open(path, "rb") as f:
        b = f.read(64 << 20)
    r = Reader(b)
    assert r.take("<I") == 0x46554747, "not GGUF"
    r.take("<I")
    n_t, n_kv = r.take("<Q"), r.take("<Q")
    kvs = []
    for _ in range(n_kv):
        k = r.string()
        t = r.take("<I")
        kvs.append((k, t, r.value(t)))
    tensors = []
    for _ in range(n_t):
        name = r.string()
        nd = r.take("<I")
        ne = [r.take("<Q") for _ in range(nd)]
        t = r.take("<I")
        r.take("<Q")
        tensors.append((name, ne, t))
    return kvs, tensors


def enc_value(t, v):
    if t == 8:
        return struct.pack("<Q", len(v)) + v
    if t == 9:
        et, vals = v
        return struct.pack("<IQ", et, len(vals)) + b"".join(enc_value(et, x) for x in vals)
    return struct.pack(SCALAR[t], v)


def write(path, version, kvs, tensors, alignment, header_only=False):
    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)))
    for k, t, v in kvs:
        out += struct.pack("<Q", len(k)) + k + struct.pack("<I", t) + enc_value(t, v)
    if header_only:
        open(path, "wb").write(out)
        return
    off, infos, datas = 0, bytearray(), []
    for i, (name, ne, t) in enumerate(tensors):
        blk, size = BLOCK[t]
        ne = [blk] + [1] * (len(ne) - 1)
        n = size
        infos += struct.pack("<Q", len(name)) + name + struct.pack("<I", len(ne))
        infos += b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", t, off)
        datas.append((off, bytes((i * 31 + j * 7) & 0xFF for j in range(n))))
        off = (off + n + alignment - 1) // alignment * alignment
    out += infos
    out += b"\0" * (-len(out) % alignment)
    base = len(out)
    for o, d in datas:
        out += b"\0" * (base + o - len(out)) + d
    open(path, "wb").write(out)


def main():
    out_dir, models = sys.argv[1], sys.argv[2:]
    os.makedirs(out_dir, exist_ok=True)
    for m in models:
        tag = os.path.basename(m).rsplit(".", 1)[0]
        kvs, tensors = read_model(m)
        align = 32
        rest = [kv for kv in kvs if kv[0] != b"general.alignment"]
        write(f"{out_dir}/{tag}-v3", 3, kvs, tensors, align)
        write(f"{out_dir}/{tag}-v2", 2, kvs, tensors, align)
        write(f"{out_dir}/{tag}-align64", 3, rest + [(b"general.alignment", 4, 64)], tensors, 64)
        write(f"{out_dir}/{tag}-notensors", 3, kvs, [], align)
        write(f"{out_dir}/{tag}-layer0", 3, kvs, [t for t in tensors if not t[0].startswith(b"blk.1.")][:16], align)
        write(f"{out_dir}/{tag}-header", 3, kvs, [], align, header_only=True)
    # one nested array of strings and numbers, which generated models do not contain
    nested = [(b"nested", 9, (9, [(8, [b"ab", b""]), (4, [1, 2, 3])])), (b"f64", 12, 0.5), (b"i8", 1, -3)]
    write(f"{out_dir}/nested", 3, nested, [(b"w", [32, 2], 8)], 32)


if __name__ == "__main__":
    main()
