#!/usr/bin/env python3
"""Reference for lmserve's nanochat tokenizer (tests/suites/41-nanochat-tok.sh), written from
tiktoken's documented semantics, not from its code:

  train TEXT OUT.json N   trains a byte-level BPE of N merges on the file TEXT (split by
                          nanochat's pattern, the most frequent adjacent pair merged first, ties
                          to the smallest pair of byte strings) and writes the tokenizer file
                          (docs/nanochat.md) with nanochat's nine special tokens after the ranks
  encode TOK.json         stdin: "mode<TAB>hex" lines (mode plain or special); stdout per line:
                          "ids<TAB>hex(lossy UTF-8 of the input)"

Encoding, as tiktoken's Encoding.encode_ordinary (plain) / encode(allowed_special="all")
(special): the text is split at special tokens (special mode only), each other stretch by the
split pattern; a piece that is a token is that token, else its bytes are merged by repeatedly
joining the adjacent pair whose concatenation has the lowest rank (the leftmost of equal ones).
Bytes that are not UTF-8 are decoded first with one U+FFFD per maximal subpart (Python's
"replace" handler), as a Python str (what tiktoken takes) would hold them.

The split pattern runs in the `regex` module (Debian python3-regex) with \\s spelled as Unicode
White_Space, which is what tiktoken's Rust regex means by \\s."""
import base64
import json
import sys

import regex

PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|"""
           r"""\s*[\r\n]|\s+(?!\S)|\s+""")
SPECIALS = ["<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>",
            "<|assistant_end|>", "<|python_start|>", "<|python_end|>", "<|output_start|>",
            "<|output_end|>"]
WS = r"\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


def rust_semantics(p):
    return p.replace(r"[^\s", "[^" + WS).replace(r"\s", "[" + WS + "]").replace(r"\S", "[^" + WS + "]")


SPLIT = regex.compile(rust_semantics(PATTERN))


def train(text, n_merges):
    words = {}
    for m in SPLIT.finditer(text):
        b = m.group().encode("utf-8")
        words[b] = words.get(b, 0) + 1
    vocab = [bytes([i]) for i in range(256)]
    seqs = [[bytes([c]) for c in w] for w in words]
    freq = list(words.values())
    pairs, where = {}, {}
    for wi, s in enumerate(seqs):
        for a, b in zip(s, s[1:]):
            pairs[(a, b)] = pairs.get((a, b), 0) + freq[wi]
            where.setdefault((a, b), set()).add(wi)
    for _ in range(n_merges):
        live = [(c, p) for p, c in pairs.items() if c > 0]
        if not live:
            break
        best_c = max(c for c, _ in live)
        best = min(p for c, p in live if c == best_c)
        new = best[0] + best[1]
        vocab.append(new)
        for wi in sorted(where.pop(best, ())):
            s, f = seqs[wi], freq[wi]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] -= f
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == best[0] and s[i + 1] == best[1]:
                    out.append(new)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[wi] = out
            for a, b in zip(out, out[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + f
                where.setdefault((a, b), set()).add(wi)
        pairs.pop(best, None)
    return vocab


def bpe(ranks, piece):
    if piece in ranks:
        return [ranks[piece]]
    parts = [piece[i:i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best, at = None, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and (best is None or r < best):
                best, at = r, i
        if best is None:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    return [ranks[p] for p in parts]


def encode_ordinary(ranks, text):
    ids = []
    for m in SPLIT.finditer(text):
        ids += bpe(ranks, m.group().encode("utf-8"))
    return ids


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "train":
        with open(sys.argv[2], encoding="utf-8") as f:
            text = f.read()
        vocab = train(text, int(sys.argv[4]))
        doc = {"format": "lmserve-nanochat-tokenizer", "format_version": 1, "pattern": PATTERN,
               "mergeable_ranks": [base64.b64encode(t).decode() for t in vocab],
               "special_tokens": {s: len(vocab) + i for i, s in enumerate(SPECIALS)}}
        with open(sys.argv[3], "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False)
        return
    if len(sys.argv) == 3 and sys.argv[1] == "encode":
        with open(sys.argv[2], encoding="utf-8") as f:
            doc = json.load(f)
        ranks = {base64.b64decode(h, validate=True): i for i, h in enumerate(doc["mergeable_ranks"])}
        specials = doc["special_tokens"]
        sre = regex.compile("|".join(regex.escape(s) for s in specials))
        out = []
        for line in sys.stdin.read().split("\n"):
            if not line:
                continue
            mode, hx = line.split("\t")
            text = bytes.fromhex(hx).decode("utf-8", errors="replace")
            ids, at = [], 0
            if mode == "special":
                for m in sre.finditer(text):
                    ids += encode_ordinary(ranks, text[at:m.start()])
                    ids.append(specials[m.group()])
                    at = m.end()
            ids += encode_ordinary(ranks, text[at:])
            out.append(",".join(map(str, ids)) + "\t" + text.encode("utf-8").hex())
        sys.stdout.write("\n".join(out) + "\n")
        return
    sys.exit(__doc__)


if __name__ == "__main__":
    main()
