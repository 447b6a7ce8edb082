/* vocab — token table, lookups, decoding and the streaming detokenizer. Encoding (added-token
 * split, pre-tokenizer, BPE) lives in bpe.c; both share engine/text/vocab_impl.h. */
#include "engine/text/vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/log.h"
#include "engine/text/hf_tokenizer.h"
#include "engine/text/vocab_impl.h"

/* ---- GPT-2 byte <-> unicode mapping ----
 * Bytes that are printable Latin-1 map to themselves; the other 68 map to U+0100.. in order. */
static void byte_unicode_tables(uint16_t b2u[256], int16_t u2b[512])
{
    for (int i = 0; i < 512; i++) u2b[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
        b2u[b] = keep ? (uint16_t)b : (uint16_t)(256 + n++);
        u2b[b2u[b]] = (int16_t)b;
    }
}

uint64_t vocab_hash_bytes(const void *p, size_t n)
{
    return hash64(p, n, 0); /* base/hash.h: word at a time, cheap for token-sized keys */
}

static uint32_t pow2_at_least(uint64_t n)
{
    uint32_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* Token bytes -> id map over NORMAL tokens (BPE symbols and merge results). */
static int tmap_insert(struct vocab *v, int32_t id)
{
    size_t len;
    const char *p = vocab_key(v, id, &len);
    uint64_t h = vocab_hash_bytes(p, len);
    for (uint32_t i = (uint32_t)h & v->tmask;; i = (i + 1) & v->tmask) {
        if (v->tmap[i] < 0) {
            v->tmap[i] = id;
            return 0;
        }
        size_t l2;
        const char *q = vocab_key(v, v->tmap[i], &l2);
        if (l2 == len && memcmp(p, q, len) == 0) return -1; /* duplicate: first wins */
    }
}

int32_t vocab_tmap_find(const struct vocab *v, const char *p, size_t len)
{
    uint64_t h = vocab_hash_bytes(p, len);
    for (uint32_t i = (uint32_t)h & v->tmask;; i = (i + 1) & v->tmask) {
        int32_t id = v->tmap[i];
        if (id < 0) return -1;
        size_t l2;
        const char *q = vocab_key(v, id, &l2);
        if (l2 == len && memcmp(p, q, len) == 0) return id;
    }
}

int32_t vocab_added_find(const struct vocab *v, const char *p, size_t len)
{
    uint64_t h = vocab_hash_bytes(p, len);
    for (uint32_t i = (uint32_t)h & v->amask;; i = (i + 1) & v->amask) {
        int32_t id = v->amap[i];
        if (id < 0) return -1;
        size_t l2;
        const char *q = vocab_key(v, id, &l2);
        if (l2 == len && memcmp(p, q, len) == 0) return id;
    }
}

/* <0xNN> (either hex case): the byte-fallback form of one byte; returns the byte or -1. */
static int byte_token_value(const char *p, size_t n)
{
    if (n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>') return -1;
    int b = 0;
    for (int k = 3; k < 5; k++) {
        char c = p[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        b = b * 16 + d;
    }
    return b;
}

static bool utf8_valid_str(const unsigned char *p, size_t n)
{
    for (size_t k = 0; k < n;) {
        int l = tok_utf8_seq(p + k, n - k);
        if (l <= 0) return false;
        k += (size_t)l;
    }
    return true;
}

int vocab_merge_insert(struct vocab *v, int32_t a, int32_t b, int32_t rank, int32_t res)
{
    uint64_t k = vocab_merge_key(a, b);
    for (uint32_t i = vocab_mix64(k) & v->mmask;; i = (i + 1) & v->mmask) {
        if (v->mkey[i] == UINT64_MAX) {
            v->mkey[i] = k;
            v->mval[i] = ((uint64_t)(uint32_t)rank << 32) | (uint32_t)res;
            return 0;
        }
        if (v->mkey[i] == k) return -1; /* duplicate merge: the first (lower rank) wins */
    }
}

static const char *const eog_texts[] = {
    "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<end_of_turn>",
    "<|end|>", "<|eom_id|>", "<EOT>", "<|return|>", "<|call|>", "</s>",
};

/* The token map and the byte symbols (v->n, type, off, bytes, and for spm the keys, set).
 * Byte-level BPE: merges and symbols are NORMAL tokens, keyed by their bytes. SentencePiece-style:
 * every token of the model's vocabulary (Hugging Face's model.vocab holds the added tokens too),
 * keyed by its stored text; the byte symbols are the <0xNN> fallback tokens. */
int vocab_index_tokens(struct vocab *v, struct err *e)
{
    v->tmask = pow2_at_least((uint64_t)v->n * 2) - 1;
    v->tmap = malloc(((size_t)v->tmask + 1) * sizeof *v->tmap);
    if (!v->tmap) return err_set(e, ERR_NOMEM, "tokenizer: out of memory");
    memset(v->tmap, 0xff, ((size_t)v->tmask + 1) * sizeof *v->tmap);
    for (int32_t i = 0; i < v->n; i++) {
        size_t len;
        vocab_key(v, i, &len);
        if (len > 0 && (v->spm ? v->type[i] != TOK_UNUSED : v->type[i] == TOK_NORMAL))
            tmap_insert(v, i);
    }
    for (int b = 0; b < 256; b++) {
        char c[8];
        if (v->spm) snprintf(c, sizeof c, "<0x%02X>", b);
        else c[0] = (char)b;
        v->byte_tok[b] = vocab_tmap_find(v, c, v->spm ? 6 : 1);
        if (v->byte_tok[b] < 0) {
            if (v->spm)
                return err_set(e, ERR_FORMAT, "tokenizer: the byte-fallback token %s is missing", c);
            return err_set(e, ERR_FORMAT,
                           "tokenizer: byte 0x%02x has no token (not a byte-level BPE vocab)", b);
        }
    }
    return 0;
}

/* The added-token list (longest first), the special ids' range check, the eog set. */
int vocab_index_added(struct vocab *v, struct err *e)
{
    for (int32_t i = 0; i < v->n; i++)
        if (v->type[i] == TOK_CONTROL || v->type[i] == TOK_USER_DEFINED) v->n_added++;
    v->added = malloc(((size_t)v->n_added + 1) * sizeof *v->added);
    if (!v->added) return err_set(e, ERR_NOMEM, "tokenizer: out of memory");
    int32_t na = 0;
    v->amask = pow2_at_least((uint64_t)v->n_added * 2 + 1) - 1;
    v->amap = malloc(((size_t)v->amask + 1) * sizeof *v->amap);
    if (!v->amap) return err_set(e, ERR_NOMEM, "tokenizer: out of memory");
    memset(v->amap, 0xff, ((size_t)v->amask + 1) * sizeof *v->amap);
    for (int32_t i = 0; i < v->n; i++) {
        size_t len;
        const char *key = vocab_key(v, i, &len);
        if ((v->type[i] == TOK_CONTROL || v->type[i] == TOK_USER_DEFINED) && len > 0) {
            int32_t j = na++;
            while (j > 0) { /* insertion sort by length desc, stable by id */
                size_t l2;
                vocab_key(v, v->added[j - 1], &l2);
                if (l2 >= len) break;
                v->added[j] = v->added[j - 1];
                j--;
            }
            v->added[j] = i;
            v->added_first[(unsigned char)key[0]] = 1;
            if (vocab_added_find(v, key, len) < 0) { /* equal keys: the first id wins */
                uint32_t k = (uint32_t)vocab_hash_bytes(key, len) & v->amask;
                while (v->amap[k] >= 0) k = (k + 1) & v->amask;
                v->amap[k] = i;
            }
        }
    }
    v->n_added = na;
    /* The distinct key lengths, longest first (bpe.c probes each at a candidate position); more
     * than fit: none, and bpe.c scans the list. */
    for (int32_t k = 0; k < na && v->n_alens >= 0; k++) {
        size_t len;
        vocab_key(v, v->added[k], &len);
        if (v->n_alens > 0 && v->alens[v->n_alens - 1] == len) continue;
        if (v->n_alens == (int)(sizeof v->alens / sizeof v->alens[0])) v->n_alens = -1;
        else v->alens[v->n_alens++] = (uint32_t)len;
    }
    if (v->n_alens < 0) v->n_alens = 0;

    int32_t ids[] = {v->bos, v->eos, v->eot, v->pad};
    const char *names[] = {"bos", "eos", "eot", "padding"};
    for (int k = 0; k < 4; k++)
        if (ids[k] >= v->n || ids[k] < -1)
            return err_set(e, ERR_FORMAT, "tokenizer: %s_token_id %d out of range (%d tokens)",
                           names[k], ids[k], v->n);
    for (size_t k = 0; k < sizeof eog_texts / sizeof *eog_texts && v->n_eog < VOCAB_MAX_EOG; k++) {
        int32_t id = tok_find(v, eog_texts[k], strlen(eog_texts[k]));
        if (id >= 0 && v->type[id] == TOK_CONTROL) v->eog[v->n_eog++] = id;
    }
    return 0;
}

/* ---- the builder shared by GGUF and HF loading ---- */

struct src {
    int64_t n_tokens, n_merges;
    const void *ctx;
    struct gguf_str (*token)(const void *ctx, int64_t i);
    int32_t (*type)(const void *ctx, int64_t i);
    struct gguf_str (*merge)(const void *ctx, int64_t i);
    const char *pre;
    int32_t bos, eos, eot, pad;
    bool add_bos;
    bool spm; /* SentencePiece-style BPE (gemma4): keys as stored, no byte-to-unicode map */
};

static struct vocab *build(const struct src *s, struct err *e)
{
    if (s->n_tokens <= 0 || s->n_tokens >= (1 << 24)) {
        err_set(e, ERR_FORMAT, "tokenizer: %lld tokens (expected 1..16M)", (long long)s->n_tokens);
        return NULL;
    }
    struct vocab *v = calloc(1, sizeof *v);
    if (!v) goto nomem;
    v->n = (int32_t)s->n_tokens;
    v->bos = s->bos;
    v->eos = s->eos;
    v->eot = s->eot;
    v->pad = s->pad;
    v->add_bos = s->add_bos;
    v->spm = s->spm;
    if (!v->spm && vocab_pre_init(v, s->pre, e)) goto fail;

    uint16_t b2u[256];
    int16_t u2b[512];
    byte_unicode_tables(b2u, u2b);

    /* Pass 1: decoded sizes, types. */
    v->type = malloc((size_t)v->n);
    v->off = malloc(((size_t)v->n + 1) * sizeof *v->off);
    if (!v->type || !v->off) goto nomem;
    size_t total = 0;
    for (int64_t i = 0; i < s->n_tokens; i++) {
        int32_t t = s->type(s->ctx, i);
        if (t < TOK_NORMAL || t > TOK_BYTE) {
            err_set(e, ERR_FORMAT, "tokenizer: token %lld has type %d (expected 1..6)", (long long)i, t);
            goto fail;
        }
        v->type[i] = (uint8_t)t;
        total += s->token(s->ctx, i).len;
    }
    if (total > UINT32_MAX) {
        err_set(e, ERR_FORMAT, "tokenizer: token text too large");
        goto fail;
    }
    v->bytes = malloc(total + 1);
    if (!v->bytes) goto nomem;
    if (v->spm) {
        v->kbytes = malloc(total + 1);
        v->koff = malloc(((size_t)v->n + 1) * sizeof *v->koff);
        if (!v->kbytes || !v->koff) goto nomem;
    }
    /* Pass 2: decode. NORMAL tokens map each code point back to its byte; a code point outside
     * the byte table (not byte-level text) is kept as its own UTF-8. Added tokens stay as text. */
    size_t o = 0, ko = 0;
    for (int32_t i = 0; i < v->n; i++) {
        struct gguf_str t = s->token(s->ctx, i);
        v->off[i] = (uint32_t)o;
        const unsigned char *p = (const unsigned char *)t.p;
        if (v->spm) {
            /* The key is the text as stored; the decoded form is what Hugging Face's decoder
             * (Replace ▁ -> ' ', ByteFallback, Fuse) makes of the token on its own. */
            v->koff[i] = (uint32_t)ko;
            memcpy(v->kbytes + ko, t.p, t.len);
            ko += t.len;
            int b = v->type[i] == TOK_NORMAL || v->type[i] == TOK_BYTE ? byte_token_value(t.p, t.len) : -1;
            if (b >= 0) {
                v->bytes[o++] = (char)b;
            } else if (v->type[i] == TOK_BYTE) {
                err_set(e, ERR_FORMAT, "tokenizer: token %d is of type byte but not <0xNN>", i);
                goto fail;
            } else {
                if (v->type[i] == TOK_NORMAL && !utf8_valid_str(p, t.len)) {
                    err_set(e, ERR_FORMAT, "tokenizer: token %d is not valid UTF-8", i);
                    goto fail;
                }
                for (size_t k = 0; k < t.len; k++) {
                    if (k + 2 < t.len && p[k] == 0xe2 && p[k + 1] == 0x96 && p[k + 2] == 0x81) {
                        v->bytes[o++] = ' ';
                        k += 2;
                    } else {
                        v->bytes[o++] = (char)p[k];
                    }
                }
            }
        } else if (v->type[i] == TOK_NORMAL) {
            size_t k = 0;
            while (k < t.len) {
                int sl = tok_utf8_seq(p + k, t.len - k);
                if (sl <= 0) {
                    err_set(e, ERR_FORMAT, "tokenizer: token %d is not valid UTF-8", i);
                    goto fail;
                }
                uint32_t cp = p[k];
                if (sl == 2) cp = ((p[k] & 0x1fu) << 6) | (p[k + 1] & 0x3fu);
                if (sl <= 2 && cp < 512 && u2b[cp] >= 0) {
                    v->bytes[o++] = (char)u2b[cp];
                } else {
                    memcpy(v->bytes + o, p + k, (size_t)sl);
                    o += (size_t)sl;
                }
                k += (size_t)sl;
            }
        } else {
            memcpy(v->bytes + o, t.p, t.len);
            o += t.len;
        }
        if (o - v->off[i] > v->max_len) v->max_len = o - v->off[i];
    }
    v->off[v->n] = (uint32_t)o;
    if (v->spm) v->koff[v->n] = (uint32_t)ko;

    if (vocab_index_tokens(v, e)) goto fail;

    /* Merges "a b": parts in byte-level text; the result must be a token. */
    if (s->n_merges < 0 || s->n_merges >= (1 << 24)) {
        err_set(e, ERR_FORMAT, "tokenizer: %lld merges", (long long)s->n_merges);
        goto fail;
    }
    v->mmask = pow2_at_least((uint64_t)s->n_merges * 3 + 1) - 1;
    v->mkey = malloc(((size_t)v->mmask + 1) * sizeof *v->mkey);
    v->mval = malloc(((size_t)v->mmask + 1) * sizeof *v->mval);
    if (!v->mkey || !v->mval) goto nomem;
    memset(v->mkey, 0xff, ((size_t)v->mmask + 1) * sizeof *v->mkey);
    char tmp[8192]; /* two merge parts of up to 4 KB each, decoded */
    for (int64_t r = 0; r < s->n_merges; r++) {
        struct gguf_str m = s->merge(s->ctx, r);
        const char *sp = memchr(m.p, ' ', m.len);
        if (!sp || sp == m.p || (size_t)(sp - m.p) + 1 >= m.len) {
            err_set(e, ERR_FORMAT, "tokenizer: merge %lld \"%.*s\" is not \"a b\"", (long long)r,
                    (int)(m.len > 64 ? 64 : m.len), m.p);
            goto fail;
        }
        /* Decode both parts to bytes through the same mapping as tokens. */
        size_t la = 0, lb = 0;
        char *pa = tmp, *pb = tmp + 4096;
        struct gguf_str parts[2] = {{m.p, (uint64_t)(sp - m.p)}, {sp + 1, m.len - (uint64_t)(sp - m.p) - 1}};
        for (int q = 0; q < 2; q++) {
            const unsigned char *p = (const unsigned char *)parts[q].p;
            size_t n = parts[q].len, k = 0, *lo = q ? &lb : &la;
            char *dst = q ? pb : pa;
            while (k < n) {
                int sl = tok_utf8_seq(p + k, n - k);
                if (sl <= 0 || *lo + 4 > 4096) {
                    err_set(e, ERR_FORMAT, "tokenizer: merge %lld is not valid UTF-8 or too long", (long long)r);
                    goto fail;
                }
                uint32_t cp = p[k];
                if (sl == 2) cp = ((p[k] & 0x1fu) << 6) | (p[k + 1] & 0x3fu);
                if (!v->spm && sl <= 2 && cp < 512 && u2b[cp] >= 0) {
                    dst[(*lo)++] = (char)u2b[cp];
                } else {
                    memcpy(dst + *lo, p + k, (size_t)sl);
                    *lo += (size_t)sl;
                }
                k += (size_t)sl;
            }
        }
        int32_t a = vocab_tmap_find(v, pa, la), b = vocab_tmap_find(v, pb, lb);
        memmove(tmp + la, pb, lb);
        int32_t res = vocab_tmap_find(v, tmp, la + lb);
        if (a < 0 || b < 0 || res < 0) {
            err_set(e, ERR_FORMAT, "tokenizer: merge %lld \"%.*s\": %s is not in the vocabulary",
                    (long long)r, (int)(m.len > 64 ? 64 : m.len), m.p,
                    a < 0 ? "left part" : b < 0 ? "right part" : "the merged token");
            goto fail;
        }
        vocab_merge_insert(v, a, b, (int32_t)r, res);
    }

    if (vocab_index_added(v, e)) goto fail;
    return v;
nomem:
    err_set(e, ERR_NOMEM, "tokenizer: out of memory");
fail:
    vocab_free(v);
    return NULL;
}

void vocab_free(struct vocab *v)
{
    if (!v) return;
    vocab_pre_deinit(v);
    free(v->type);
    free(v->off);
    free(v->bytes);
    free(v->tmap);
    free(v->mkey);
    free(v->mval);
    free(v->added);
    free(v->amap);
    free(v->kbytes);
    free(v->koff);
    free(v);
}

/* ---- GGUF source ---- */

struct gguf_src {
    const struct gguf_kv *tokens, *types, *merges;
};

static struct gguf_str g_token(const void *ctx, int64_t i)
{
    return gguf_arr_str(((const struct gguf_src *)ctx)->tokens, (uint64_t)i);
}
static int32_t g_type(const void *ctx, int64_t i)
{
    const struct gguf_src *s = ctx;
    if (!s->types) return TOK_NORMAL;
    int64_t t = gguf_arr_i64(s->types, (uint64_t)i);
    return t < 0 || t > 100 ? 0 : (int32_t)t;
}
static struct gguf_str g_merge(const void *ctx, int64_t i)
{
    return gguf_arr_str(((const struct gguf_src *)ctx)->merges, (uint64_t)i);
}

static int32_t g_id(const struct gguf *g, const char *key, int32_t dflt)
{
    uint32_t u;
    if (!gguf_find(g, key)) return dflt;
    if (gguf_get_u32(g, key, &u, NULL)) return -2; /* caught as out of range */
    return u > INT32_MAX ? -2 : (int32_t)u;
}

struct vocab *vocab_load(const struct gguf *g, struct err *e)
{
    /* a nanochat checkpoint directory's metadata GGUF (engine/models/nanochat.c) names the
     * directory; its tokenizer is DIR/tokenizer.json (docs/nanochat.md) */
    const struct gguf_kv *ncd = gguf_find(g, "nanochat.dir");
    if (ncd && ncd->type == GGUF_STRING) {
        char *dir = gguf_get_str(g, "nanochat.dir", e), path[4096];
        if (!dir) return NULL;
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        free(dir);
        return vocab_load_tiktoken(path, e);
    }
    struct gguf_src gs = {0};
    struct src s = {0};
    char *model = gguf_get_str(g, "tokenizer.ggml.model", e);
    if (!model) return NULL;
    /* gpt2: byte-level BPE. gemma4: SentencePiece-style BPE over tokenizer.ggml.merges (the
     * scores llama.cpp's converter writes beside them are placeholders). llama: SentencePiece;
     * served the same way when the file carries merges, refused when it has only scores. */
    bool spm = strcmp(model, "gemma4") == 0 || strcmp(model, "llama") == 0;
    gs.tokens = gguf_find(g, "tokenizer.ggml.tokens");
    gs.types = gguf_find(g, "tokenizer.ggml.token_type");
    gs.merges = gguf_find(g, "tokenizer.ggml.merges");
    if (!spm && strcmp(model, "gpt2") != 0) {
        err_set(e, ERR_UNSUPPORTED, "tokenizer.ggml.model \"%s\" is not supported (gpt2, gemma4, "
                "llama with merges)", model);
        free(model);
        return NULL;
    }
    if (spm && !gs.merges) {
        err_set(e, ERR_UNSUPPORTED, "tokenizer.ggml.model \"%s\" without tokenizer.ggml.merges: "
                "score-based SentencePiece merging is not supported", model);
        free(model);
        return NULL;
    }
    free(model);
    if (!gs.tokens || gs.tokens->type != GGUF_ARRAY || gs.tokens->arr_type != GGUF_STRING) {
        err_set(e, ERR_FORMAT, "tokenizer.ggml.tokens missing or not a string array");
        return NULL;
    }
    if (gs.types && (gs.types->type != GGUF_ARRAY || gs.types->arr_type == GGUF_STRING ||
                     gs.types->arr_type == GGUF_ARRAY || gs.types->arr_n != gs.tokens->arr_n)) {
        err_set(e, ERR_FORMAT, "tokenizer.ggml.token_type is not a numeric array of %llu",
                (unsigned long long)gs.tokens->arr_n);
        return NULL;
    }
    if (!gs.merges || gs.merges->type != GGUF_ARRAY || gs.merges->arr_type != GGUF_STRING) {
        err_set(e, ERR_FORMAT, "tokenizer.ggml.merges missing or not a string array");
        return NULL;
    }
    char *pre = NULL;
    if (spm) {
        /* no pre-tokenizer: the name, if any, is not read (llama.cpp: always "gemma4") */
    } else if (gguf_find(g, "tokenizer.ggml.pre")) {
        if (!(pre = gguf_get_str(g, "tokenizer.ggml.pre", e))) return NULL;
    } else {
        log_warn("tokenizer.ggml.pre missing: using the gpt2 pre-tokenizer");
    }
    s.n_tokens = (int64_t)gs.tokens->arr_n;
    s.n_merges = (int64_t)gs.merges->arr_n;
    s.ctx = &gs;
    s.token = g_token;
    s.type = g_type;
    s.merge = g_merge;
    s.pre = pre ? pre : "gpt2";
    s.bos = g_id(g, "tokenizer.ggml.bos_token_id", -1);
    s.eos = g_id(g, "tokenizer.ggml.eos_token_id", -1);
    s.eot = g_id(g, "tokenizer.ggml.eot_token_id", -1);
    s.pad = g_id(g, "tokenizer.ggml.padding_token_id", -1);
    bool ab = false;
    if (gguf_find(g, "tokenizer.ggml.add_bos_token") &&
        gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &ab, e)) {
        free(pre);
        return NULL;
    }
    s.add_bos = ab;
    s.spm = spm;
    if (spm && !ab) { /* as llama.cpp does: Gemma's prompts start with <bos> */
        log_warn("tokenizer.ggml.add_bos_token is false: overridden to true for a gemma4 vocabulary");
        s.add_bos = true;
    }
    struct vocab *v = build(&s, e);
    free(pre);
    if (v && v->eot < 0) { /* older files: <|im_end|> ends a turn when it is a control token */
        int32_t id = tok_find(v, "<|im_end|>", 10);
        v->eot = id >= 0 && v->type[id] == TOK_CONTROL ? id : v->eos;
    }
    return v;
}

/* ---- hf_tokenizer source ---- */

static struct gguf_str h_token(const void *ctx, int64_t i)
{
    const char *t = ((const struct hf_tokenizer *)ctx)->tokens[i];
    return (struct gguf_str){t, strlen(t)};
}
static int32_t h_type(const void *ctx, int64_t i) { return ((const struct hf_tokenizer *)ctx)->types[i]; }
static struct gguf_str h_merge(const void *ctx, int64_t i)
{
    const char *t = ((const struct hf_tokenizer *)ctx)->merges[i];
    return (struct gguf_str){t, strlen(t)};
}

struct vocab *vocab_from_hf(const struct hf_tokenizer *t, struct err *e)
{
    struct src s = {.n_tokens = t->n_tokens, .n_merges = t->n_merges, .ctx = t, .token = h_token,
                    .type = h_type, .merge = h_merge, .pre = t->pre ? t->pre : "gpt2",
                    .bos = t->bos, .eos = t->eos, .eot = t->eot, .pad = t->pad,
                    .add_bos = t->add_bos, .spm = t->model && strcmp(t->model, "gemma4") == 0};
    return build(&s, e);
}

/* ---- lookups ---- */

int32_t vocab_size(const struct vocab *v) { return v->n; }
size_t tok_max_len(const struct vocab *v) { return v->max_len; }

const char *tok_bytes(const struct vocab *v, int32_t id, size_t *len)
{
    if (id < 0 || id >= v->n) {
        *len = 0;
        return "";
    }
    *len = v->off[id + 1] - v->off[id];
    return v->bytes + v->off[id];
}

enum tok_type tok_type(const struct vocab *v, int32_t id)
{
    return id < 0 || id >= v->n ? TOK_UNUSED : (enum tok_type)v->type[id];
}

bool tok_is_special(const struct vocab *v, int32_t id)
{
    enum tok_type t = tok_type(v, id);
    return t == TOK_CONTROL || t == TOK_USER_DEFINED;
}

int32_t tok_eos(const struct vocab *v) { return v->eos; }
int32_t tok_eot(const struct vocab *v) { return v->eot; }
int32_t tok_bos(const struct vocab *v) { return v->bos; }
int32_t tok_pad(const struct vocab *v) { return v->pad; }
bool tok_add_bos(const struct vocab *v) { return v->add_bos; }

bool tok_is_eog(const struct vocab *v, int32_t id)
{
    if (id < 0) return false;
    if (id == v->eos || id == v->eot) return true;
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) return true;
    return false;
}

int32_t tok_find(const struct vocab *v, const char *text, size_t len)
{
    if (len == 0) return -1;
    int32_t id = vocab_added_find(v, text, len);
    if (id >= 0 || !v->spm) return id >= 0 ? id : vocab_tmap_find(v, text, len);
    /* spm keys spell ' ' as ▁ */
    struct buf k = {0};
    for (size_t i = 0; i < len; i++)
        if (text[i] == ' ' ? buf_append(&k, "\xe2\x96\x81", 3) : buf_append(&k, text + i, 1)) {
            buf_free(&k);
            return -1;
        }
    id = vocab_tmap_find(v, k.data, k.len);
    buf_free(&k);
    return id >= 0 && v->type[id] != TOK_BYTE ? id : -1;
}

int tok_decode(const struct vocab *v, const int32_t *ids, size_t n, struct buf *out, struct err *e)
{
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= v->n)
            return err_set(e, ERR_INVALID, "token id %d out of range (vocabulary of %d)", ids[i], v->n);
        size_t len;
        const char *p = tok_bytes(v, ids[i], &len);
        if (buf_append(out, p, len)) return err_set(e, ERR_NOMEM, "out of memory decoding tokens");
    }
    return 0;
}

/* ---- UTF-8 ---- */

int tok_utf8_seq(const unsigned char *p, size_t n)
{
    if (n == 0) return 0;
    unsigned c = p[0];
    if (c < 0x80) return 1;
    int need;
    unsigned lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) need = 1;
    else if (c == 0xe0) need = 2, lo = 0xa0;
    else if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef) need = 2;
    else if (c == 0xed) need = 2, hi = 0x9f;
    else if (c == 0xf0) need = 3, lo = 0x90;
    else if (c >= 0xf1 && c <= 0xf3) need = 3;
    else if (c == 0xf4) need = 3, hi = 0x8f;
    else return -1;
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n) return 0; /* valid so far, incomplete */
        unsigned b = p[k];
        unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xbf;
        if (b < l || b > h) return -k;
    }
    return need + 1;
}

int tok_utf8_lossy(const char *s, size_t n, struct buf *out)
{
    if (n == 0) return 0;
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, start = 0;
    while (i < n) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        int l = tok_utf8_seq(p + i, n - i);
        if (l > 0) {
            i += (size_t)l;
            continue;
        }
        size_t bad = l < 0 ? (size_t)-l : n - i; /* truncated at the end: one subpart */
        if (buf_append(out, s + start, i - start) || buf_append(out, "\xef\xbf\xbd", 3)) return -1;
        i += bad;
        start = i;
    }
    return buf_append(out, s + start, n - start);
}

size_t tok_stream_feed_bytes(struct tok_stream *s, const char *src, size_t n, char *out)
{
    size_t o = 0;
    /* Complete the pending (valid, incomplete) sequence one byte at a time. Since the pending
     * prefix was valid, a failure is always at the byte just added: that byte was not part of the
     * maximal subpart, so it is put back and examined as a fresh start. */
    while (s->n_pend > 0 && n > 0) {
        s->pend[s->n_pend++] = (unsigned char)*src;
        int l = tok_utf8_seq(s->pend, (size_t)s->n_pend);
        if (l < 0) {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            s->n_pend = 0;
            break;
        }
        src++;
        n--;
        if (l > 0) {
            memcpy(out + o, s->pend, (size_t)l);
            o += (size_t)l;
            s->n_pend = 0;
        }
    }
    const unsigned char *p = (const unsigned char *)src;
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) {
            out[o++] = (char)p[i++];
            continue;
        }
        int l = tok_utf8_seq(p + i, n - i);
        if (l > 0) {
            memcpy(out + o, p + i, (size_t)l);
            o += (size_t)l;
            i += (size_t)l;
        } else if (l == 0) {
            memcpy(s->pend, p + i, n - i);
            s->n_pend = (int)(n - i);
            i = n;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i += (size_t)-l;
        }
    }
    return o;
}

size_t tok_stream_feed(struct tok_stream *s, const struct vocab *v, int32_t id, char *out)
{
    size_t len;
    const char *p = tok_bytes(v, id, &len);
    return tok_stream_feed_bytes(s, p, len, out);
}

size_t tok_stream_flush(struct tok_stream *s, char *out)
{
    if (s->n_pend == 0) return 0;
    s->n_pend = 0;
    memcpy(out, "\xef\xbf\xbd", 3);
    return 3;
}
