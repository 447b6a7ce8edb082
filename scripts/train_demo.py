#!/usr/bin/python3
"""Trains lmserve's demo model: a small Qwen3 (QK-norm, NeoX RoPE, GQA, SwiGLU, tied embeddings)
on the corpus of scripts/demo/corpus.py, tokenized by the engine's own tokenizer
(lmserve-tokenize on the BPE of scripts/demo/bpe.py). Run by `make demo-model`; never by `make test`.

  /usr/bin/python3 scripts/train_demo.py --data DIR --tokenizer TOKDIR --tokenize-bin BIN --out DIR
        [--steps N] [--bench] [--init DIR] [--copy-frac F] [--copy-synth N --copy-batch K] [--seed S]

--init continues from an earlier run (or scripts/demo/gguf2st.py's dequantized GGUF); --copy-frac
and --copy-synth are the copy-heavy mixtures of the continuation experiments in docs/demo-model.md
("The copy test"). OUT/train-log.tsv's copy_acc column is the teacher-forced copy accuracy.

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

    def forward(self, ids):
        T = ids.shape[1]
        cos, sin = rope_cos_sin(T, self.c["head_dim"], self.c["rope_theta"])
        x = self.embed_tokens(ids)
        for l in self.layers:
            x = l(x, cos, sin)
        return self.norm(x) @ self.embed_tokens.weight.t()  # tied output projection

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
    a = ap.parse_args()
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
    print(f"train: {len(train_docs)} documents, {n_train_tok} tokens, {len(train_seqs)} sequences of {a.seq}; "
          f"held-out {len(held_seqs)} sequences; tokenized in {time.time() - t0:.0f} s", flush=True)

    model = Qwen3(c)
    if a.init:
        sd = load_safetensors(os.path.join(a.init, "model.safetensors"))
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
    warm = max(1, a.steps // 20)

    def lr_at(s):
        if s < warm:
            return a.lr * (s + 1) / warm
        return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, a.steps - warm))))

    log = open(os.path.join(a.out, "train-log.tsv"), "w")
    log.write("step\ttokens\ttrain_loss\theldout_loss\tseconds\tcopy_acc\n")
    if a.init:
        hl0, ca0 = evaluate(model, held_seqs), copy_accuracy(model, held_copy, im_start)
        log.write(f"-1\t0\t\t{hl0:.4f}\t0\t{ca0:.4f}\n")
        print(f"start: held-out {hl0:.3f} (ppl {math.exp(hl0):.1f}) copy accuracy (teacher-forced) {ca0:.3f}",
              flush=True)
    t_start = time.time()
    perm = torch.randperm(len(train_seqs), generator=torch.Generator().manual_seed(3))
    pos = 0
    cperm = torch.randperm(len(copy_seqs), generator=torch.Generator().manual_seed(4)) if n_copy else None
    cpos = 0
    run = None
    steps = 3 if a.bench else a.steps
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
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        logits = model(s[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), s[:, 1:].reshape(-1))
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
            print(f"bench: step {step} loss {loss.item():.3f} {(step + 1) * a.batch * a.seq / el:.0f} tok/s",
                  flush=True)
            continue
        last = step == steps - 1
        if step % a.eval_every == 0 or last:
            hl = evaluate(model, held_seqs)
            ca = copy_accuracy(model, held_copy, im_start)
            el = time.time() - t_start
            tok = (step + 1) * a.batch * a.seq
            log.write(f"{step}\t{tok}\t{run:.4f}\t{hl:.4f}\t{el:.0f}\t{ca:.4f}\n")
            log.flush()
            print(f"step {step}/{steps} tokens {tok} train {run:.3f} held-out {hl:.3f} (ppl {math.exp(hl):.1f}) "
                  f"copy {ca:.3f} {tok / el:.0f} tok/s {el / 60:.1f} min", flush=True)
            # a checkpoint at every evaluation: an interrupted run still leaves a model to export
            json.dump(c, open(os.path.join(a.out, "config.json"), "w"), indent=1)
            save_safetensors(model.hf_state(), os.path.join(a.out, "model.safetensors"))
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
               "train_tokens_seen": steps * a.batch * a.seq, "corpus_train_tokens": n_train_tok,
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
