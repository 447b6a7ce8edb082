#!/usr/bin/python3
"""Trains the demo model's byte-level BPE and writes it as a Hugging Face tokenizer directory
(tokenizer.json + tokenizer_config.json) that lmserve-mkmodel converts into GGUF tokenizer keys.

  scripts/demo/bpe.py CORPUS_DIR OUT_DIR --merges N --template QWEN3_TOKENIZER_CONFIG_JSON

Same shape as Qwen3's tokenizer: NFC normalizer, the qwen2 pre-tokenizer regex (Split, Isolated)
then ByteLevel, ByteLevel decoder; ids 0..255 are the bytes (in the GPT-2 byte-to-unicode order),
then one id per merge, then the added tokens <|endoftext|> <|im_start|> <|im_end|> (special) and
<think> </think> <tool_call> </tool_call> <tool_response> </tool_response> (not special, as in
Qwen3). The training text is train.jsonl with the template's control strings split out first.
Ties between equally frequent pairs go to the lexicographically smallest pair (deterministic).
"""
import collections
import heapq
import json
import os
import sys
import unicodedata

import regex

PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
       r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


B2U = bytes_to_unicode()
SPLIT_RE = regex.compile("(" + "|".join(regex.escape(t) for t in SPECIAL + ADDED) + ")")
PRE_RE = regex.compile(PAT)


def word_counts(texts):
    cnt = collections.Counter()
    for t in texts:
        t = unicodedata.normalize("NFC", t)
        for piece in SPLIT_RE.split(t):
            if not piece or piece in SPECIAL or piece in ADDED:
                continue
            for w in PRE_RE.findall(piece):
                cnt[w] += 1
    return cnt


def train(cnt, n_merges):
    sym_id = {}  # unicode-string symbol -> id
    id_sym = []
    for b in range(256):
        sym_id[B2U[b]] = b
        id_sym.append(B2U[b])
    words = []
    freqs = []
    for w, c in cnt.items():
        words.append([sym_id[B2U[b]] for b in w.encode("utf-8")])
        freqs.append(c)
    pair_cnt = collections.Counter()
    where = collections.defaultdict(set)
    for wi, (syms, f) in enumerate(zip(words, freqs)):
        for a, b in zip(syms, syms[1:]):
            pair_cnt[(a, b)] += f
            where[(a, b)].add(wi)
    heap = [(-c, id_sym[p[0]], id_sym[p[1]], p) for p, c in pair_cnt.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < n_merges and heap:
        negc, _, _, p = heapq.heappop(heap)
        if pair_cnt.get(p, 0) != -negc or -negc <= 0:
            continue  # stale entry
        a, b = p
        new = len(id_sym)
        id_sym.append(id_sym[a] + id_sym[b])
        sym_id[id_sym[new]] = new
        merges.append((id_sym[a], id_sym[b]))
        changed = set()
        for wi in list(where[p]):
            syms, f = words[wi], freqs[wi]
            i = 0
            out = []
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            if out == syms:
                continue
            for x, y in zip(syms, syms[1:]):
                pair_cnt[(x, y)] -= f
                changed.add((x, y))
                where[(x, y)].discard(wi)
            for x, y in zip(out, out[1:]):
                pair_cnt[(x, y)] += f
                changed.add((x, y))
                where[(x, y)].add(wi)
            words[wi] = out
        del pair_cnt[p]
        where.pop(p, None)
        for q in changed:
            c = pair_cnt.get(q, 0)
            if c > 0:
                heapq.heappush(heap, (-c, id_sym[q[0]], id_sym[q[1]], q))
            elif q in pair_cnt:
                del pair_cnt[q]
    return id_sym, merges


def main():
    corpus, out = sys.argv[1], sys.argv[2]
    n_merges = int(sys.argv[sys.argv.index("--merges") + 1])
    # the chat template: Qwen3's, taken from its tokenizer_config.json (the engine's renderer
    # reproduces exactly that text, recognized by its fingerprint)
    template = json.load(open(sys.argv[sys.argv.index("--template") + 1]))["chat_template"]
    max_bytes = int(os.environ.get("DEMO_BPE_BYTES", "6000000"))
    with open(os.path.join(corpus, "train.jsonl")) as f:
        docs = [json.loads(line)["text"] for line in f]
    # an evenly spaced sample of the documents (train.jsonl is grouped by source)
    step = max(1, sum(len(d) for d in docs) // max_bytes)
    texts = docs[::step]
    size = sum(len(t) for t in texts)
    cnt = word_counts(texts)
    id_sym, merges = train(cnt, n_merges)
    if len(merges) < n_merges:
        sys.exit(f"bpe: only {len(merges)} merges possible on this text (asked {n_merges})")
    vocab = {s: i for i, s in enumerate(id_sym)}
    added = []
    for k, t in enumerate(SPECIAL + ADDED):
        added.append({"id": len(id_sym) + k, "content": t, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": t in SPECIAL})
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": PAT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                           "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [a + " " + b for a, b in merges]},
    }
    cfg = {"add_bos_token": False, "add_prefix_space": False, "bos_token": None, "eos_token": "<|im_end|>",
           "pad_token": "<|endoftext|>", "errors": "replace", "model_max_length": 4096,
           "tokenizer_class": "Qwen2Tokenizer", "unk_token": None, "chat_template": template}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)
    print(f"bpe: {len(merges)} merges, {len(id_sym) + len(added)} tokens, from {size / 1e6:.1f} MB "
          f"({len(cnt)} distinct words) -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
