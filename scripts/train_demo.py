#!/usr/bin/python3
"""Trains lmserve's demo model: a small Qwen3 (QK-norm, NeoX RoPE, GQA, SwiGLU, tied embeddings)
on the corpus of scripts/demo/corpus.py, tokenized by the engine's own tokenizer
(lmserve-tokenize on the BPE of scripts/demo/bpe.py). Run by `make demo-model`; never by `make test`.

  /usr/bin/python3 scripts/train_demo.py --data DIR --tokenizer TOKDIR --tokenize-bin BIN --out DIR
        [--steps N] [--bench] [--init DIR] [--copy-frac F] [--copy-synth N --copy-batch K] [--seed S]
        [--curriculum N --curriculum-mix K:W,... --copy-seq T --copy-windows K --copy-weight W]
        [--expand-kv] [--lm-seq T] [--minutes M --decay-from F] [--warmup N] [--keep-every N]
        [--first-fit] [--corrupt P] [--first-weight W --first-tokens K] [--piece-weight W] [--new-define]
        [--lead-kinds K,...]

--init continues from an earlier run (or scripts/demo/gguf2st.py's dequantized GGUF); --copy-frac,
--copy-synth and --curriculum are the copy-heavy mixtures of the continuation experiments in
docs/demo-model.md ("The copy test"); --corrupt replaces some of the curriculum replies' input
tokens while keeping the targets (practice in recovering from one's own slips, run G);
--expand-kv gives each query head its own K/V head there;
--minutes schedules the learning rate by wall-clock time (so that a run on a shared machine still
anneals before its deadline; its step count then depends on the machine's load).
OUT/train-log.tsv's copy_acc column is the teacher-forced copy accuracy on held-out chat-repeat
documents, copy200_acc the same on 200-word held-out passages asked exactly as the copy test asks
(passages 5-9 of its word stream; the copy test uses 0-4), copy200_prefix the mean share of such a
reply before its first teacher-forced miss.

Writes OUT/config.json + OUT/model.safetensors (HF Qwen3 names, F32; lmserve-mkmodel --weights
turns them into GGUF), OUT/train-log.tsv (step, tokens, train loss, held-out loss, seconds),
OUT/heldout.json (final held-out loss and perplexity) and OUT/reference.json (held-out token ids,
PyTorch's F32 logits at every position for a fixed set of vocabulary ids plus the whole last row,
and PyTorch's greedy continuation; tests/suites/63-demo-model.sh compares the engine with it).

Deterministic: one thread (torch.set_num_threads(1)), fixed seeds, a fixed number of steps.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import time

# one thread everywhere: OpenBLAS's own pool too (it would otherwise spin a thread per core)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(1)


# ------------------------------------------------------------------ model (HF modeling_qwen3)
class RMSNorm(torch.nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_cos_sin(T, hd, base, offset=0):
    inv = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    t = torch.arange(offset, offset + T, dtype=torch.float64)
    f = torch.outer(t, inv)
    emb = torch.cat([f, f], dim=-1)
    return emb.cos().float(), emb.sin().float()


_masks = {}
KV_HALF = False  # round K (after RoPE) and V to halfs, like lmserve's F16 KV cache


def causal_mask(T):
    if T not in _masks:
        _masks[T] = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    return _masks[T]


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class Layer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        d, hd = c["hidden_size"], c["head_dim"]
        self.nh, self.nkv, self.hd = c["num_attention_heads"], c["num_key_value_heads"], hd
        eps = c["rms_norm_eps"]
        self.input_layernorm = RMSNorm(d, eps)
        self.q_proj = torch.nn.Linear(d, self.nh * hd, bias=False)
        self.k_proj = torch.nn.Linear(d, self.nkv * hd, bias=False)
        self.v_proj = torch.nn.Linear(d, self.nkv * hd, bias=False)
        self.o_proj = torch.nn.Linear(self.nh * hd, d, bias=False)
        self.q_norm = RMSNorm(hd, eps)
        self.k_norm = RMSNorm(hd, eps)
        self.post_attention_layernorm = RMSNorm(d, eps)
        ff = c["intermediate_size"]
        self.gate_proj = torch.nn.Linear(d, ff, bias=False)
        self.up_proj = torch.nn.Linear(d, ff, bias=False)
        self.down_proj = torch.nn.Linear(ff, d, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_norm(self.q_proj(h).view(B, T, self.nh, self.hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(h).view(B, T, self.nkv, self.hd)).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if KV_HALF:  # as the engine's KV cache stores them (export.py's comparison only)
            k, v = k.half().float(), v.half().float()
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.hd))
        att = att.masked_fill(causal_mask(T), float("-inf"))
        a = torch.softmax(att, dim=-1) @ v
        x = x + self.o_proj(a.transpose(1, 2).reshape(B, T, self.nh * self.hd))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Qwen3(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = torch.nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = torch.nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        std = 0.02
        for n, p in self.named_parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, 0.0, std)
                if n.endswith("o_proj.weight") or n.endswith("down_proj.weight"):
                    p.data.mul_(1.0 / math.sqrt(2 * c["num_hidden_layers"]))

    def hidden(self, ids):
        """The final-norm hidden states (B, T, d): the logits are these times the embedding."""
        T = ids.shape[1]
        cos, sin = rope_cos_sin(T, self.c["head_dim"], self.c["rope_theta"])
        x = self.embed_tokens(ids)
        for l in self.layers:
            x = l(x, cos, sin)
        return self.norm(x)

    def forward(self, ids):
        return self.hidden(ids) @ self.embed_tokens.weight.t()  # tied output projection

    def hf_state(self):
        """HF Qwen3 tensor names -> tensors."""
        out = {"model.embed_tokens.weight": self.embed_tokens.weight, "model.norm.weight": self.norm.weight}
        for i, l in enumerate(self.layers):
            p = f"model.layers.{i}."
            out[p + "input_layernorm.weight"] = l.input_layernorm.weight
            out[p + "post_attention_layernorm.weight"] = l.post_attention_layernorm.weight
            for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
                out[p + f"self_attn.{n}.weight"] = getattr(l, n).weight
            out[p + "self_attn.q_norm.weight"] = l.q_norm.weight
            out[p + "self_attn.k_norm.weight"] = l.k_norm.weight
            for n in ("gate_proj", "up_proj", "down_proj"):
                out[p + f"mlp.{n}.weight"] = getattr(l, n).weight
        return out


def save_safetensors(tensors, path):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().float().contiguous()
        b = t.numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def load_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n])
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        out[k] = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]), dtype=torch.float32).reshape(v["shape"])
    return out


# ------------------------------------------------------------------ data
def tokenize(docs, tok_bin, tokdir):
    """Token ids of each document, by the engine's tokenizer (control tokens parsed)."""
    inp = "".join(d.encode("utf-8").hex() + "\n" for d in docs)
    r = subprocess.run([tok_bin, tokdir, "--lines-hex", "--special"], input=inp, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"train: {tok_bin} failed: {r.stderr}")
    out = []
    for line in r.stdout.splitlines():
        ids = line.split("\t")[0]
        out.append([int(x) for x in ids.split(",")] if ids else [])
    if len(out) != len(docs):
        sys.exit(f"train: tokenizer returned {len(out)} lines for {len(docs)} documents")
    return out


def load_docs(path):
    with open(path) as f:
        return [json.loads(l) for l in f]


def pack(doc_ids, T, eot, rng):
    """Sequences of T+1 tokens, each starting at a document start, documents in rng order."""
    order = list(range(len(doc_ids)))
    rng.shuffle(order)
    seqs, cur = [], []
    for i in order:
        d = doc_ids[i] + [eot]
        if not cur and len(d) > T + 1:
            d = d[:T + 1]
        cur += d
        if len(cur) >= T + 1:
            seqs.append(cur[:T + 1])
            cur = []
    return torch.tensor(seqs, dtype=torch.long)


def evaluate(model, seqs, bs=8):
    model.eval()
    tot, n = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(seqs), bs):
            s = seqs[i:i + bs]
            logits = model(s[:, :-1])
            tot += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), s[:, 1:].reshape(-1), reduction="sum").item()
            n += s[:, 1:].numel()
    model.train()
    return tot / n


COPY_ASKS = ["Repeat the following text exactly:\n\n", "Repeat the following text exactly:\n\n",
             "Repeat the following text exactly:\n\n", "Repeat this paragraph word for word:\n\n",
             "Copy the following passage:\n\n"]


def synth_copies(train_docs, n, seed, tok_bin, tokdir, seq):
    """(ids, reply_start) of n copy exercises rendered in Qwen3's ChatML as scripts/demo/corpus.py
    renders its repeat documents (thinking off: an empty think block)."""
    import random
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo"))
    import corpus as C
    rng = random.Random(seed + 20)
    paras = C.prose_paragraphs([d["text"] for d in train_docs if d["kind"] == "pydoc"])
    paras += [" ".join(d["text"].split()) for d in train_docs if d["kind"] == "fortune"]
    docs, heads = [], []
    for i in range(n):
        target = rng.randint(20, 230)
        words = []
        while len(words) < target:
            words += rng.choice(paras).split()
        words = words[:target]
        if i % 2:
            rng.shuffle(words)
        p = " ".join(words)
        head = f"<|im_start|>user\n{rng.choice(COPY_ASKS)}{p}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
        docs.append(head + p + "<|im_end|>\n")
        heads.append(head)
    ids = tokenize(docs, tok_bin, tokdir)
    hids = tokenize(heads, tok_bin, tokdir)
    return [(x[:seq + 1], len(h)) for x, h in zip(ids, hids) if len(h) < min(len(x), seq + 1) and x[:len(h)] == h]


CURRICULUM = "randtok:0.2,randwords:0.2,shuffled:0.2,real:0.3,define:0.1"


def copy_curriculum(train_docs, n, seed, tok_bin, tokdir, tokcfg, mix, common=None, tok_len=(5, 320),
                    new_define=False):
    """[(ids, reply_start, kind)] of n exercises rendered in Qwen3's ChatML (thinking off, as
    lmserve-generate --chat and the copy test ask), drawn by the weights of mix:
      randtok   a random sequence of BPE tokens (tok_len, 5-320), repeated id for id: nothing but
                copying predicts it, the cleanest signal for an induction circuit to form
      randcommon  the same from the corpus's most frequent tokens only (common: their ids), whose
                embeddings are well trained already
      randwords 5-230 words drawn uniformly from the training prose's distinct words
      shuffled  5-230 consecutive words of training prose, shuffled
      real      5-230 consecutive words of training prose (the copy test's kind of passage)
      define    a corpus-style "What does X mean?" exchange (scripts/demo/corpus.py's t_define):
                the word to copy from the question into "X (pos) means: ..."
      define1   the same asked exactly as the definition test asks ("What does X mean?", no system
                message, thinking off)
      stream    120-260 consecutive words of the copy test's own word stream (pydoc prose paragraphs
                and fortunes in file order, as scripts/demo/eval.py builds it from the held-out split),
                from the training split: the test's kind and length of passage
      code      40-220 words of code-ish text: pydoc paragraphs with code in them, fortunes with code,
                and C-like statements with hex constants (hex_code())
    new_define: the define kinds answer in scripts/demo/corpus.py's define_answer() shape ("The word
    dog (noun) means: ...", run H) instead of the corpus's "Dog (noun) means: ...".
    Loss goes on the reply only (the caller masks), so the passage in the prompt costs no gradient."""
    import random
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo"))
    import corpus as C
    rng = random.Random(seed + 30)
    kinds = []
    for part in mix.split(","):
        k, w = part.split(":")
        if k not in ("randtok", "randcommon", "randwords", "shuffled", "real", "define", "stream", "code",
                     "define1"):
            sys.exit(f"train: --curriculum: unknown kind {k!r}")
        kinds.append((k, float(w)))
    tot = sum(w for _, w in kinds)
    paras = C.prose_paragraphs([d["text"] for d in train_docs if d["kind"] == "pydoc"])
    paras += [" ".join(d["text"].split()) for d in train_docs if d["kind"] == "fortune"]
    vocab_words = sorted({w for p in paras for w in p.split()})
    # the copy test's own kind of passage: its word stream (pydoc prose paragraphs and fortunes in
    # file order, scripts/demo/eval.py's copy_eval), here of the training split
    stream = []
    for d in train_docs:
        if d["kind"] == "pydoc":
            stream += C.prose_paragraphs([d["text"]])
        elif d["kind"] == "fortune":
            stream.append(" ".join(d["text"].split()))
    stream = " ".join(stream).split()
    # code-ish text: the pydoc paragraphs prose_paragraphs() leaves out for their markup, and fortunes
    # with code in them (like the copy test's bit-reversal passage with its hex constants)
    codeish = []
    for d in train_docs:
        if d["kind"] == "pydoc":
            codeish += [" ".join(q.split()) for q in d["text"].split("\n\n")
                        if len(q) >= 60 and any(ch in q for ch in "=(){}[];<>&|")]
        elif d["kind"] == "fortune" and (any(ch in d["text"] for ch in "=;{}&|") or "0x" in d["text"]):
            codeish.append(" ".join(d["text"].split()))
    wn = C.wordnet()
    first_added = min(t["id"] for t in tokcfg["added_tokens"])
    asks = COPY_ASKS + ["Please repeat after me:\n\n"]
    above = ["Repeat the text above exactly.", "Say that again, word for word."]
    gen = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    docs, heads, kind_of, tok_rows = [], [], [], []
    for i in range(n):
        r, acc = rng.random() * tot, 0.0
        for k, w in kinds:
            acc += w
            if r < acc:
                break
        system = ("<|im_start|>system\n" + rng.choice(C.SYSTEMS) + "<|im_end|>\n") if rng.random() < 0.3 else ""
        if k in ("define", "define1"):
            if k == "define1":  # exactly as the definition test asks: no system, thinking off
                w, pos, d, exs = rng.choice(wn)
                a = C.define_answer(w, pos, d) if new_define else f"{w[0].upper() + w[1:]} ({pos}) means: {d}."
                if exs and rng.random() < 0.6:
                    a += f" For example: \"{exs[0]}\"."
                msgs = [{"role": "user", "content": f"What does {w} mean?"},
                        {"role": "assistant", "content": a, "reasoning_content": ""}]
            else:
                msgs, _ = C.t_define(rng, wn, new_define)
            text = C.render(msgs)
            cut = text.rindex("<|im_start|>assistant\n") + len("<|im_start|>assistant\n")
            docs.append(text)
            heads.append(text[:cut])
            kind_of.append(k)
            continue
        if k in ("randtok", "randcommon"):
            L = rng.randint(*tok_len)
            body = [rng.randrange(256, first_added) for _ in range(L)] if k == "randtok" else \
                [rng.choice(common) for _ in range(L)]
            tok_rows.append((len(docs), system + "<|im_start|>user\n" + rng.choice(asks), body))
            docs.append("")
            heads.append("")
            kind_of.append(k)
            continue
        target = rng.randint(5, 230)
        if k == "stream":  # 120-260 consecutive words of the stream, from anywhere in it
            target = rng.randint(120, 260)
            at = rng.randrange(len(stream) - target)
            words = stream[at:at + target]
            system = system if rng.random() < 0.3 else ""
        elif k == "code":
            target = rng.randint(40, 220)
            words = []
            while len(words) < target:
                words += (rng.choice(codeish) if rng.random() < 0.7 else hex_code(rng)).split()
            words = words[:target]
        elif k == "randwords":
            words = [rng.choice(vocab_words) for _ in range(target)]
        else:
            words = C.passage(rng, paras, paras, target, target).split()
            if k == "shuffled":
                rng.shuffle(words)
        p = " ".join(words)
        if rng.random() < 0.85:
            head = system + "<|im_start|>user\n" + rng.choice(asks) + p + gen
        else:
            head = system + "<|im_start|>user\n" + p + "\n\n" + rng.choice(above) + gen
        docs.append(head + p + "<|im_end|>\n")
        heads.append(head)
        kind_of.append(k)
    ids = tokenize(docs, tok_bin, tokdir)
    hids = tokenize(heads, tok_bin, tokdir)
    # the random-token exercises, assembled in id space
    pieces = tokenize([h for _, h, _ in tok_rows] + ["\n\n", gen, "<|im_end|>\n"], tok_bin, tokdir)
    nl2, g_ids, end_ids = pieces[len(tok_rows)], pieces[len(tok_rows) + 1], pieces[len(tok_rows) + 2]
    for (j, _, body), h in zip(tok_rows, pieces[:len(tok_rows)]):
        head = h + nl2 + body + g_ids
        ids[j], hids[j] = head + body + end_ids, head
    out = [(x, len(h), k) for x, h, k in zip(ids, hids, kind_of) if 0 < len(h) < len(x) and x[:len(h)] == h]
    return out


def hex_code(rng):
    """A C-like statement with hex constants (the copy test's passage 4 is one: repeated digit
    patterns such as 0x0f0f0f0f are where copying by the previous token alone is ambiguous)."""
    def const():
        n = rng.choice([2, 4, 8])
        if rng.random() < 0.5:
            unit = "".join(rng.choice("0123456789abcdef") for _ in range(rng.choice([1, 2, 4])))
            return "0x" + (unit * 8)[:n]
        return "0x" + "".join(rng.choice("0123456789abcdef") for _ in range(n))
    v = rng.choice("nxyabcmkw")
    s = rng.choice([1, 2, 4, 8, 16])
    forms = [f"{v} = (({v} >> {s}) & {const()}) | (({v} << {s}) & {const()});",
             f"{v} ^= {const()};", f"if ({v} & {const()}) {v} |= {const()};",
             f"#define MASK_{rng.randint(0, 99)} {const()}", f"{v} = {v} * {const()} + {const()};"]
    return " ".join(rng.choice(forms) for _ in range(rng.randint(1, 4)))


def pack_exercises(ex, T, eot, seed, first_fit=False, lead=()):
    """Windows of T+1 tokens packed with whole exercises (an <|endoftext|> after each, the rest of
    a window padded with it), the mask of the positions whose next token is a reply token, and
    that token's index in its reply (0 for the first reply token; -1 elsewhere).
    lead (with first_fit): kinds whose exercises always open a new window, so that they start at
    position 0 as every request to the engine does (windows have no attention mask between
    exercises: one packed after others sees their tokens, run H found "The word" learned there
    and not at position 0)."""
    import random
    order = list(range(len(ex)))
    random.Random(seed + 40).shuffle(order)
    xs, ms, os_, cur, flag, off, dropped = [], [], [], [], [], [], 0

    def flush():
        nonlocal cur, flag, off
        if cur:
            pad = T + 1 - len(cur)
            xs.append(cur + [eot] * pad)
            ms.append((flag + [False] * pad)[1:])
            os_.append((off + [-1] * pad)[1:])
        cur, flag, off = [], [], []

    if first_fit:  # each exercise into the first of the last 32 open windows with room (less padding)
        open_w = []
        for i in order:
            ids, h, _ = ex[i]
            if len(ids) + 1 > T + 1:
                dropped += 1
                continue
            w = None if ex[i][2] in lead else next((w for w in open_w if len(w[0]) + len(ids) + 1 <= T + 1), None)
            if w is None:
                if len(open_w) == 32:
                    cur, flag, off = open_w.pop(0)
                    flush()
                w = ([], [], [])
                open_w.append(w)
            w[0].extend(ids + [eot])
            w[1].extend([False] * h + [True] * (len(ids) - h) + [False])
            w[2].extend([-1] * h + list(range(len(ids) - h)) + [-1])
        for cur, flag, off in open_w:
            flush()
        return (torch.tensor(xs, dtype=torch.long), torch.tensor(ms, dtype=torch.bool),
                torch.tensor(os_, dtype=torch.int16), dropped)
    for i in order:
        ids, h, _ = ex[i]
        if len(ids) + 1 > T + 1:
            dropped += 1
            continue
        if len(cur) + len(ids) + 1 > T + 1:
            flush()
        cur += ids + [eot]
        flag += [False] * h + [True] * (len(ids) - h) + [False]
        off += [-1] * h + list(range(len(ids) - h)) + [-1]
    flush()
    return (torch.tensor(xs, dtype=torch.long), torch.tensor(ms, dtype=torch.bool),
            torch.tensor(os_, dtype=torch.int16), dropped)


def word_piece_masks(tokcfg, n_vocab):
    """(head, tail): boolean tensors over the vocabulary, whether a token's text starts (head) /
    ends (tail) with a letter or digit — a target t after an input p continues a word when
    head[t] & tail[p] (byte-level BPE: a token that begins a word begins with its space)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    u2b = {chr(c): b for b, c in zip(bs, cs)}
    head = torch.zeros(n_vocab, dtype=torch.bool)
    tail = torch.zeros(n_vocab, dtype=torch.bool)
    for s, i in tokcfg["model"]["vocab"].items():
        b = bytes(u2b.get(ch, 0) for ch in s)
        if b:
            head[i] = chr(b[0]).isalnum() and b[0] < 128
            tail[i] = chr(b[-1]).isalnum() and b[-1] < 128
    return head, tail


def copy200_docs(held_docs, tok_bin, tokdir, first, count):
    """Teacher-forcing probes shaped exactly like scripts/demo/eval.py's copy test (a 200-word
    held-out passage after "Repeat the following text exactly:", thinking off), from passages
    first..first+count-1 of the same held-out word stream (the copy test itself uses 0..4)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo"))
    import corpus as C
    paras = []
    for d in held_docs:
        if d["kind"] in ("pydoc", "fortune"):
            paras += C.prose_paragraphs([d["text"]]) if d["kind"] == "pydoc" else [" ".join(d["text"].split())]
    words = " ".join(paras).split()
    heads, docs = [], []
    for k in range(first, first + count):
        p = " ".join(words[k * 200:(k + 1) * 200])
        h = ("<|im_start|>user\nRepeat the following text exactly:\n\n" + p +
             "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
        heads.append(h)
        docs.append(h + p + "<|im_end|>")
    ids, hids = tokenize(docs, tok_bin, tokdir), tokenize(heads, tok_bin, tokdir)
    return [(x, len(h)) for x, h in zip(ids, hids)]


def copy200_accuracy(model, probes):
    """Teacher-forced top-1 accuracy over the probes' reply tokens, and the mean length of the
    reply prefix that greedy decoding would reproduce as long as every earlier token was right."""
    model.eval()
    hit, n, pre = 0, 0, 0
    with torch.no_grad():
        for ids, h in probes:
            pred = model(torch.tensor([ids[:-1]]))[0].argmax(-1)
            ok = (pred[h - 1:] == torch.tensor(ids[h:])).tolist()
            hit += sum(ok)
            n += len(ok)
            pre += next((i for i, v in enumerate(ok) if not v), len(ok)) / len(ok)
    model.train()
    return hit / max(1, n), pre / max(1, len(probes))


def copy_accuracy(model, docs, im_start):
    """Teacher-forced top-1 accuracy on the assistant turns of held-out chat-repeat documents: how
    often the next token of a copy is the model's first choice (a cheap monitor of the copy skill;
    scripts/demo/eval.py measures the real, free-running copy)."""
    model.eval()
    hit, n = 0, 0
    with torch.no_grad():
        for d in docs:
            starts = [i for i, t in enumerate(d) if t == im_start]
            if len(starts) < 2:
                continue
            a0 = starts[-1] + 6  # past "<|im_start|>assistant\n<think>\n\n</think>\n\n"
            x = torch.tensor([d[:-1]])
            pred = model(x)[0].argmax(-1)
            tgt = torch.tensor(d[1:])
            hit += int((pred[a0:] == tgt[a0:]).sum())
            n += len(d) - 1 - a0
    model.train()
    return hit / max(1, n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--tokenize-bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=480)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=640)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=192)
    ap.add_argument("--heads", type=int, default=3)
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--ff", type=int, default=512)
    ap.add_argument("--eval-every", type=int, default=40)
    ap.add_argument("--bench", action="store_true", help="time 3 steps and exit")
    ap.add_argument("--max-minutes", type=float, default=0,
                    help="safety cap: stop (and say so in the log) if the steps take longer than this")
    ap.add_argument("--init", help="continue from DIR/config.json + DIR/model.safetensors (the architecture "
                    "options are then taken from there; scripts/demo/gguf2st.py writes them from a GGUF)")
    ap.add_argument("--copy-frac", type=float, default=0,
                    help="share of each batch drawn from windows of chat-repeat documents only (the copy mixture)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--copy-synth", type=int, default=0,
                    help="N synthetic copy exercises (\"Repeat the following text exactly:\" + 20-230 words of "
                    "training prose, half of them with the words shuffled so that only copying predicts them), "
                    "loss on the reply only; --copy-batch of them join every step")
    ap.add_argument("--copy-batch", type=int, default=0)
    ap.add_argument("--curriculum", type=int, default=0,
                    help="N exercises of the copy curriculum (copy_curriculum(): random tokens, random words, "
                    "shuffled and plain prose, definitions; loss on the replies), packed into windows of "
                    "--copy-seq tokens; --copy-windows of them join every step")
    ap.add_argument("--curriculum-mix", default=CURRICULUM)
    ap.add_argument("--common", type=int, default=2000, help="randcommon: the N most frequent token ids")
    ap.add_argument("--tok-len", default="5,320", help="randtok/randcommon lengths: MIN,MAX tokens")
    ap.add_argument("--copy-seq", type=int, default=768)
    ap.add_argument("--first-fit", action="store_true",
                    help="pack each curriculum exercise into the first of the last 32 open windows with room "
                    "(less padding than filling one window at a time)")
    ap.add_argument("--corrupt", type=float, default=0,
                    help="mean share of the curriculum replies' input tokens replaced (by a frequent token or "
                    "one from up to 8 places away; each window's rate uniform in 0..2x this), the targets kept: "
                    "practice in going on with the source after a slip")
    ap.add_argument("--lm-seq", type=int, default=0,
                    help="train on the first N tokens of each corpus window only (more steps per token; the "
                    "held-out windows stay --seq long)")
    ap.add_argument("--copy-windows", type=int, default=2)
    ap.add_argument("--first-weight", type=float, default=1.0,
                    help="weight of the first --first-tokens reply tokens of each curriculum exercise (run H)")
    ap.add_argument("--first-tokens", type=int, default=8)
    ap.add_argument("--piece-weight", type=float, default=1.0,
                    help="weight of curriculum reply tokens that continue a word (a later piece: the token "
                    "starts with a letter or digit and the one before it ends with one; run I)")
    ap.add_argument("--lead-kinds", default="",
                    help="with --first-fit: curriculum kinds that always start a window (position 0; run H)")
    ap.add_argument("--new-define", action="store_true",
                    help="define exercises answer \"The word X (pos) means: ...\" (corpus.py define_answer, run H)")
    ap.add_argument("--copy-weight", type=float, default=0.5,
                    help="loss = (1 - w) * corpus loss + w * curriculum reply loss")
    ap.add_argument("--expand-kv", action="store_true",
                    help="with --init: give every query head its own K/V head (copies of the shared one, so "
                    "the function is unchanged at the start)")
    ap.add_argument("--minutes", type=float, default=0,
                    help="schedule by wall-clock time instead of --steps: warm-up, the peak LR until "
                    "--decay-from of the time, then cosine to 10 %% at --minutes, where the run stops")
    ap.add_argument("--decay-from", type=float, default=0.7)
    ap.add_argument("--warmup", type=int, default=0, help="warm-up steps (default: 5 %% of --steps)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--keep-every", type=int, default=0,
                    help="also keep the checkpoint of every Nth evaluation in OUT/step-S/")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(a.seed)
    import random
    rng = random.Random(a.seed)

    tokcfg = json.load(open(os.path.join(a.tokenizer, "tokenizer.json")))
    n_vocab = max([t["id"] for t in tokcfg["added_tokens"]] + list(tokcfg["model"]["vocab"].values())) + 1
    eot = next(t["id"] for t in tokcfg["added_tokens"] if t["content"] == "<|endoftext|>")
    c = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": n_vocab,
         "hidden_size": a.embd, "intermediate_size": a.ff, "num_hidden_layers": a.layers,
         "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads, "head_dim": a.head_dim,
         "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 4096,
         "tie_word_embeddings": True, "torch_dtype": "float32"}
    if a.init:
        c = json.load(open(os.path.join(a.init, "config.json")))
        if c["vocab_size"] != n_vocab:
            sys.exit(f"train: --init {a.init}: vocabulary {c['vocab_size']}, the tokenizer has {n_vocab}")
        kv0 = c["num_key_value_heads"]
        if a.expand_kv:
            c = dict(c, num_key_value_heads=c["num_attention_heads"])

    t0 = time.time()
    train_docs = load_docs(os.path.join(a.data, "train.jsonl"))
    held_docs = load_docs(os.path.join(a.data, "heldout.jsonl"))
    cache = os.path.join(a.data, "tokens.pt")  # the engine's tokenization of both splits
    if os.path.exists(cache):
        train_ids, held_ids = torch.load(cache)
    else:
        train_ids = tokenize([d["text"] for d in train_docs], a.tokenize_bin, a.tokenizer)
        held_ids = tokenize([d["text"] for d in held_docs], a.tokenize_bin, a.tokenizer)
        torch.save((train_ids, held_ids), cache)
    n_train_tok = sum(len(x) for x in train_ids)
    train_seqs = pack(train_ids, a.seq, eot, rng)
    if a.lm_seq:
        train_seqs = train_seqs[:, :a.lm_seq + 1]
    copy_seqs = pack([x for x, d in zip(train_ids, train_docs) if d["kind"] == "chat-repeat"], a.seq, eot,
                     random.Random(a.seed + 10)) if a.copy_frac > 0 else None
    n_copy = int(round(a.batch * a.copy_frac))
    synth = synth_copies(train_docs, a.copy_synth, a.seed, a.tokenize_bin, a.tokenizer, a.seq) if a.copy_synth else []
    if synth:
        print(f"train: {len(synth)} synthetic copy exercises, {sum(len(x[0]) for x in synth)} tokens "
              f"({sum(len(x[0]) - x[1] for x in synth)} of them reply), {a.copy_batch} a step", flush=True)
    held_seqs = pack(held_ids, a.seq, eot, random.Random(2))[:24]
    im_start = next(t["id"] for t in tokcfg["added_tokens"] if t["content"] == "<|im_start|>")
    held_copy = [x[:a.seq] for x, d in zip(held_ids, held_docs) if d["kind"] == "chat-repeat"][:24]
    probes = copy200_docs(held_docs, a.tokenize_bin, a.tokenizer, 5, 5)
    cur_x = cur_m = None
    if a.curriculum:
        cnt = torch.bincount(torch.tensor([t for x in train_ids for t in x]), minlength=n_vocab)
        specials = {t["id"] for t in tokcfg["added_tokens"]}
        common = [int(t) for t in cnt.argsort(descending=True).tolist() if int(t) not in specials][:a.common]
        ex = copy_curriculum(train_docs, a.curriculum, a.seed, a.tokenize_bin, a.tokenizer, tokcfg, a.curriculum_mix,
                             common, tuple(int(x) for x in a.tok_len.split(",")), a.new_define)
        cur_x, cur_m, cur_o, dropped = pack_exercises(ex, a.copy_seq, eot, a.seed, a.first_fit,
                                                      tuple(a.lead_kinds.split(",")) if a.lead_kinds else ())
        common_t = torch.tensor(common, dtype=torch.long)
        by = {}
        for ids, h, k in ex:
            by.setdefault(k, [0, 0])
            by[k][0] += 1
            by[k][1] += len(ids) - h
        print(f"train: curriculum {len(ex)} exercises ({dropped} longer than {a.copy_seq} dropped) in "
              f"{len(cur_x)} windows of {a.copy_seq}, {int(cur_m.sum())} reply tokens; "
              + ", ".join(f"{k} {v[0]} ({v[1]} reply tokens)" for k, v in sorted(by.items())), flush=True)
    print(f"train: {len(train_docs)} documents, {n_train_tok} tokens, {len(train_seqs)} sequences of {a.seq}; "
          f"held-out {len(held_seqs)} sequences; tokenized in {time.time() - t0:.0f} s", flush=True)

    model = Qwen3(c)
    if a.init:
        sd = load_safetensors(os.path.join(a.init, "model.safetensors"))
        if a.expand_kv and kv0 < c["num_key_value_heads"]:
            r, hd = c["num_key_value_heads"] // kv0, c["head_dim"]
            for k in list(sd):
                if k.endswith("k_proj.weight") or k.endswith("v_proj.weight"):
                    w = sd[k]
                    sd[k] = w.view(kv0, hd, -1).repeat_interleave(r, 0).reshape(kv0 * r * hd, -1)
            print(f"train: K/V heads {kv0} -> {c['num_key_value_heads']} a layer (copies)", flush=True)
        own = model.hf_state()
        if set(sd) != set(own):
            sys.exit(f"train: --init {a.init}: tensor names differ: {sorted(set(sd) ^ set(own))[:5]}")
        with torch.no_grad():
            for k, t in own.items():
                t.copy_(sd[k])
        print(f"train: continuing from {a.init}; {n_copy} of every {a.batch} sequences from chat-repeat "
              f"documents ({len(copy_seqs) if copy_seqs is not None else 0} windows)", flush=True)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"train: {n_params / 1e6:.2f} M parameters, config {json.dumps(c)}", flush=True)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    warm = a.warmup or max(1, a.steps // 20)

    def lr_at(s):
        if s < warm:
            return a.lr * (s + 1) / warm
        if a.minutes:  # wall-clock schedule: peak, then cosine from --decay-from of the time
            f = (time.time() - t_start) / 60 / a.minutes
            if f < a.decay_from:
                return a.lr
            f = min(1.0, (f - a.decay_from) / (1 - a.decay_from))
            return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * f)))
        return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, a.steps - warm))))

    log = open(os.path.join(a.out, "train-log.tsv"), "w")
    log.write("step\ttokens\ttrain_loss\theldout_loss\tseconds\tcopy_acc\tcopy200_acc\tcopy200_prefix\tlr"
              "\tcopy_loss\n")
    if a.init:
        hl0, ca0 = evaluate(model, held_seqs), copy_accuracy(model, held_copy, im_start)
        c2, p2 = copy200_accuracy(model, probes)
        log.write(f"-1\t0\t\t{hl0:.4f}\t0\t{ca0:.4f}\t{c2:.4f}\t{p2:.4f}\t\t\n")
        print(f"start: held-out {hl0:.3f} (ppl {math.exp(hl0):.1f}) copy accuracy (teacher-forced) {ca0:.3f}, "
              f"200-word probes {c2:.3f} (greedy-safe prefix {p2:.3f})", flush=True)
    t_start = time.time()
    perm = torch.randperm(len(train_seqs), generator=torch.Generator().manual_seed(3))
    pos = 0
    cperm = torch.randperm(len(copy_seqs), generator=torch.Generator().manual_seed(4)) if n_copy else None
    cpos = 0
    run = None
    steps = 3 if a.bench else a.steps
    if a.minutes and not a.bench:
        steps = 10 ** 9  # until --minutes
    cpos_w, crun, tok, n_corrupt = 0, None, 0, 0
    first_added = min(t["id"] for t in tokcfg["added_tokens"])
    E = model.embed_tokens.weight
    piece_head, piece_tail = word_piece_masks(tokcfg, n_vocab)
    for step in range(steps):
        idx, cidx = [], []
        for _ in range(a.batch - n_copy):
            if pos == len(perm):
                perm = torch.randperm(len(train_seqs), generator=torch.Generator().manual_seed(3 + step))
                pos = 0
            idx.append(perm[pos])
            pos += 1
        for _ in range(n_copy):
            if cpos == len(cperm):
                cperm = torch.randperm(len(copy_seqs), generator=torch.Generator().manual_seed(4 + step))
                cpos = 0
            cidx.append(cperm[cpos])
            cpos += 1
        parts = ([train_seqs[torch.stack(idx)]] if idx else []) + ([copy_seqs[torch.stack(cidx)]] if cidx else [])
        s = torch.cat(parts)
        lr_now = lr_at(step)
        for g in opt.param_groups:
            g["lr"] = lr_now
        logits = model(s[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), s[:, 1:].reshape(-1))
        tok += s[:, 1:].numel()
        if cur_x is not None:
            # curriculum windows: logits only where the next token is a reply token
            j = [(cpos_w + i) % len(cur_x) for i in range(a.copy_windows)]
            cpos_w += a.copy_windows
            cx, cm, co = cur_x[j], cur_m[j], cur_o[j]
            inp = cx[:, :-1]
            if a.corrupt > 0:
                # exposure to its own slips: replace some reply tokens of the input (never the
                # passage in the prompt, never the targets) by a frequent token or a token from a
                # few places away, so that the next target is still the source's next token
                g = torch.Generator().manual_seed(a.seed * 100003 + step)
                rep = torch.zeros_like(cm)
                rep[:, 1:] = cm[:, :-1]  # the input token at i is a reply token
                rate = torch.rand(len(j), 1, generator=g) * 2 * a.corrupt
                hit = rep & (torch.rand(rep.shape, generator=g) < rate) & (inp < first_added)
                n_hit = int(hit.sum())
                if n_hit:
                    inp = inp.clone()
                    bi, ti = hit.nonzero(as_tuple=True)
                    off = torch.randint(1, 9, (n_hit,), generator=g) * (torch.randint(0, 2, (n_hit,), generator=g) * 2 - 1)
                    near = inp[bi, (ti + off).clamp(0, inp.shape[1] - 1)]
                    freq = common_t[torch.randint(0, len(common_t), (n_hit,), generator=g)]
                    pick = torch.rand(n_hit, generator=g) < 0.5
                    new = torch.where(pick, near, freq)
                    inp[bi, ti] = torch.where(new < first_added, new, freq)
                    n_corrupt += n_hit
            hdn = model.hidden(inp)[cm]
            if a.first_weight != 1.0 or a.piece_weight != 1.0:
                # the first --first-tokens reply tokens weigh --first-weight times the others (run
                # H: most free-running misses were a reply's first token, where the lookup key
                # "\n\n" also follows <think>); a word's later pieces (the target starts with a
                # letter or digit and the token before it, in the source, ends with one) weigh
                # --piece-weight (run I: most slips that remained were there, "Mo|vie" -> "Mo| Mc")
                wt = 1.0 + (a.first_weight - 1.0) * (co[cm] < a.first_tokens).float()
                if a.piece_weight != 1.0:
                    tg, pv = cx[:, 1:][cm], cx[:, :-1][cm]
                    wt = wt + (a.piece_weight - 1.0) * (piece_head[tg] & piece_tail[pv]).float()
                closs = (F.cross_entropy(hdn @ E.t(), cx[:, 1:][cm], reduction="none") * wt).sum() / wt.sum()
            else:
                closs = F.cross_entropy(hdn @ E.t(), cx[:, 1:][cm])
            loss = (1 - a.copy_weight) * loss + a.copy_weight * closs
            crun = closs.item() if crun is None else 0.9 * crun + 0.1 * closs.item()
            tok += cx[:, 1:].numel()
        if synth and a.copy_batch:
            # the copy exercises: one a row, right-padded, loss on the reply tokens only
            rows = [synth[(step * a.copy_batch + j) % len(synth)] for j in range(a.copy_batch)]
            T = max(len(r[0]) for r in rows)
            x = torch.full((len(rows), T), eot, dtype=torch.long)
            m = torch.zeros((len(rows), T - 1), dtype=torch.bool)
            for j, (ids, h) in enumerate(rows):
                x[j, :len(ids)] = torch.tensor(ids)
                m[j, h - 1:len(ids) - 1] = True
            cl = model(x[:, :-1])
            closs = F.cross_entropy(cl[m], x[:, 1:][m])
            loss = 0.5 * (loss + closs)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        run = loss.item() if run is None else 0.9 * run + 0.1 * loss.item()
        if a.bench:
            el = time.time() - t_start
            print(f"bench: step {step} loss {loss.item():.3f} {tok / el:.0f} tok/s ({el / (step + 1):.2f} s a step)",
                  flush=True)
            continue
        over = a.minutes and (time.time() - t_start) / 60 > a.minutes
        last = step == steps - 1 or over
        if step % a.eval_every == 0 or last:
            hl = evaluate(model, held_seqs)
            ca = copy_accuracy(model, held_copy, im_start)
            c2, p2 = copy200_accuracy(model, probes)
            el = time.time() - t_start
            log.write(f"{step}\t{tok}\t{run:.4f}\t{hl:.4f}\t{el:.0f}\t{ca:.4f}\t{c2:.4f}\t{p2:.4f}\t{lr_now:.2e}"
                      f"\t{'' if crun is None else f'{crun:.4f}'}\n")
            log.flush()
            print(f"step {step}/{steps if not a.minutes else '-'} tokens {tok} train {run:.3f} "
                  f"{'' if crun is None else f'copy-loss {crun:.3f} '}held-out {hl:.3f} (ppl {math.exp(hl):.1f}) "
                  f"copy {ca:.3f} copy200 {c2:.3f} prefix {p2:.3f} lr {lr_now:.2e} {tok / el:.0f} tok/s "
                  f"{el / 60:.1f} min{f' corrupted {n_corrupt}' if a.corrupt else ''}", flush=True)
            # a checkpoint at every evaluation: an interrupted run still leaves a model to export
            json.dump(c, open(os.path.join(a.out, "config.json"), "w"), indent=1)
            save_safetensors(model.hf_state(), os.path.join(a.out, "model.safetensors"))
            if a.keep_every and (step // a.eval_every) % a.keep_every == 0:
                kd = os.path.join(a.out, f"step-{step}")
                os.makedirs(kd, exist_ok=True)
                json.dump(c, open(os.path.join(kd, "config.json"), "w"), indent=1)
                save_safetensors(model.hf_state(), os.path.join(kd, "model.safetensors"))
        if over:
            print(f"train: --minutes {a.minutes} reached at step {step}", flush=True)
            log.write(f"# --minutes {a.minutes} reached at step {step}\n")
            steps = step + 1
            break
        if a.max_minutes and (time.time() - t_start) / 60 > a.max_minutes and not last:
            print(f"train: stopped at step {step} of {steps}: over --max-minutes {a.max_minutes}", flush=True)
            log.write(f"# stopped at step {step} of {steps}: over --max-minutes {a.max_minutes}\n")
            steps = step + 1
            break
    if a.bench:
        return
    model.eval()
    json.dump(c, open(os.path.join(a.out, "config.json"), "w"), indent=1)
    save_safetensors(model.hf_state(), os.path.join(a.out, "model.safetensors"))
    hl = evaluate(model, held_seqs)
    json.dump({"heldout_loss": hl, "heldout_ppl": math.exp(hl), "heldout_tokens": int(held_seqs[:, 1:].numel()),
               "train_tokens_seen": tok, "corpus_train_tokens": n_train_tok,
               "parameters": n_params, "steps": steps, "minutes": (time.time() - t_start) / 60},
              open(os.path.join(a.out, "heldout.json"), "w"), indent=1)

    # reference logits for the engine comparison: a held-out document's first 48 tokens
    with torch.no_grad():
        ref_doc = next(d for d, doc in zip(held_ids, held_docs) if doc["kind"] == "pydoc" and len(d) >= 48)[:48]
        lg = model(torch.tensor([ref_doc]))[0]
        g = torch.Generator().manual_seed(7)
        cols = sorted(set(torch.randperm(n_vocab, generator=g)[:240].tolist()) |
                      set(lg[-1].topk(16).indices.tolist()))
        ids = list(ref_doc)
        greedy = []
        for _ in range(32):
            nxt = int(model(torch.tensor([ids]))[0, -1].argmax())
            greedy.append(nxt)
            ids.append(nxt)
    ref = {"tokens": ref_doc, "text": None, "cols": cols,
           "logits": [[round(float(lg[t, j]), 6) for j in cols] for t in range(len(ref_doc))],
           "last_row": [round(float(x), 6) for x in lg[-1]], "greedy": greedy}
    json.dump(ref, open(os.path.join(a.out, "reference.json"), "w"))
    print(f"train: done, held-out loss {hl:.4f} (ppl {math.exp(hl):.2f}) -> {a.out}", flush=True)


if __name__ == "__main__":
    main()
