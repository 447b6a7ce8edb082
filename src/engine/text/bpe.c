/* bpe — tok_encode: added-token split, UTF-8 repair, NFC, pre-tokenizer regex, byte-level BPE.
 *
 * Speed: the pre-tokenizer regex is JIT-compiled once per vocab; BPE over a piece of n bytes is
 * O(n log n) (a heap of merge candidates keyed by (rank, position) over a linked list of
 * symbols, stale candidates skipped on pop, as Hugging Face's word.rs does), so a 100 KB piece
 * with no spaces costs no more per byte than a short one. Short pieces are memoized per call in a
 * small hash table (most words repeat). */
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include "engine/text/vocab_impl.h"

/* Unicode White_Space, which is what \s means in Hugging Face's regex engine (Oniguruma / Rust
 * regex). PCRE2's \s with UCP is Z + a few controls and leaves out NEL (U+0085), so the class is
 * spelled out; JavaScript's \s also counts U+FEFF, which White_Space does not. */
#define WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* \p{L} / \p{N} written as classes that also list the ASCII letters / digits: the same sets, but
 * PCRE2's JIT can answer ASCII from the class bitmap before the Unicode table lookup (a few %
 * fewer instructions on English text under callgrind). */
#define L "[A-Za-z\\p{L}]"
#define N "[0-9\\p{N}]"
#define LN "A-Za-z0-9\\p{L}\\p{N}"

static const char *const pre_patterns[VOCAB_PRE_COUNT] = {
    [VOCAB_PRE_GPT2] = "'s|'t|'re|'ve|'m|'ll|'d| ?" L "+| ?" N "+| ?[^" WS LN "]+|[" WS "]+(?![^" WS
                       "])|[" WS "]+",
    [VOCAB_PRE_LLAMA3] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n" LN "]?" L "+|" N "{1,3}| ?[^" WS LN
                         "]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+",
    [VOCAB_PRE_QWEN2] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n" LN "]?" L "+|" N "| ?[^" WS LN
                        "]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+",
    /* Qwen3.5's: Qwen2's with combining marks (\p{M}) inside words: a letter run takes the marks
     * that follow it (Devanagari vowel signs, Hebrew points, U+FE0F), and punctuation runs stop
     * at them. A mark may still open a word as its one optional leading non-letter. */
    [VOCAB_PRE_QWEN35] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n" LN "]?[A-Za-z\\p{L}\\p{M}]+|" N
                         "| ?[^" WS LN "\\p{M}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS
                         "])|[" WS "]+",
    /* nanochat's SPLIT_PATTERN (GPT-4's with \p{N}{1,2}, possessive ?+ and ++, one newline) */
    [VOCAB_PRE_NANOCHAT] = "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n" LN "]?+" L "+|" N "{1,2}| ?[^" WS LN
                           "]++[\\r\\n]*|[" WS "]*[\\r\\n]|[" WS "]+(?![^" WS "])|[" WS "]+",
};
#undef L
#undef N
#undef LN

int vocab_pre_init(struct vocab *v, const char *pre, struct err *e)
{
    if (strcmp(pre, "qwen2") == 0) v->pre = VOCAB_PRE_QWEN2, v->nfc = true;
    else if (strcmp(pre, "qwen35") == 0) v->pre = VOCAB_PRE_QWEN35, v->nfc = true;
    else if (strcmp(pre, "llama-bpe") == 0 || strcmp(pre, "llama3") == 0)
        v->pre = VOCAB_PRE_LLAMA3, v->ignore_merges = true; /* Llama 3's tokenizer.json says so */
    else if (strcmp(pre, "gpt2") == 0 || strcmp(pre, "gpt-2") == 0) v->pre = VOCAB_PRE_GPT2;
    else if (strcmp(pre, "nanochat") == 0) /* tiktoken: a piece that is a token is taken whole */
        v->pre = VOCAB_PRE_NANOCHAT, v->ignore_merges = true;
    else
        return err_set(e, ERR_UNSUPPORTED,
                       "tokenizer.ggml.pre \"%s\" is not supported (qwen2, qwen35, llama-bpe, gpt2, nanochat)", pre);
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pre_patterns[v->pre], PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return err_set(e, ERR_INTERNAL, "pre-tokenizer regex: %s at %zu", (char *)msg, (size_t)eo);
    }
    v->re = re;
    v->re_jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

void vocab_pre_deinit(struct vocab *v)
{
    if (v->re) pcre2_code_free(v->re);
    v->re = NULL;
}

/* ---- per-call encoder state ---- */

/* Word cache: sized by the input (a chat prompt needs little, a 1 MB document more), reset when
 * half full so memory stays bounded. */
#define CACHE_MIN_SLOTS 1024
#define CACHE_MAX_SLOTS 65536
#define CACHE_MAX_WORD 64

struct cache_ent { /* 16 bytes: four per cache line */
    uint32_t h; /* 0 = empty */
    uint32_t koff, ioff;
    uint8_t klen, nid;
};

/* Hash of a short piece (most are under 16 bytes): two overlapping loads, no loop. */
static inline uint32_t word_hash(const unsigned char *w, size_t n)
{
    uint64_t a, b;
    if (n >= 8) {
        if (n > 16) return (uint32_t)vocab_hash_bytes(w, n) | 1;
        memcpy(&a, w, 8);
        memcpy(&b, w + n - 8, 8);
    } else if (n >= 4) {
        uint32_t x, y;
        memcpy(&x, w, 4);
        memcpy(&y, w + n - 4, 4);
        a = x;
        b = y;
    } else {
        a = (uint64_t)w[0] | (uint64_t)w[n / 2] << 8 | (uint64_t)w[n - 1] << 16;
        b = 0;
    }
    uint64_t h = (a ^ (n * 0x9e3779b97f4a7c15ull)) * 0xbf58476d1ce4e5b9ull;
    h ^= (b + (h >> 31)) * 0x94d049bb133111ebull;
    return (uint32_t)(h >> 32) | 1;
}

struct enc {
    const struct vocab *v;
    int32_t **out;
    size_t *n_out, *cap;
    pcre2_match_data *md;
    struct buf lossy, nfc;
    /* BPE scratch */
    int32_t *sym, *prev, *next;
    uint64_t *heap;
    size_t scap;
    /* word cache */
    struct cache_ent *ce;
    uint32_t n_ce, ce_mask;
    struct buf keys;
    int32_t *cids;
    size_t n_cids, cap_cids;
};

static int push_ids(struct enc *c, const int32_t *ids, size_t n)
{
    if (*c->n_out + n > *c->cap) {
        size_t nc = *c->cap ? *c->cap : 256;
        while (nc < *c->n_out + n) nc *= 2;
        int32_t *p = realloc(*c->out, nc * sizeof *p);
        if (!p) return -1;
        *c->out = p;
        *c->cap = nc;
    }
    memcpy(*c->out + *c->n_out, ids, n * sizeof *ids);
    *c->n_out += n;
    return 0;
}

static inline bool merge_find(const struct vocab *v, int32_t a, int32_t b, uint32_t *rank,
                              int32_t *res)
{
    uint64_t k = vocab_merge_key(a, b);
    for (uint32_t i = vocab_mix64(k) & v->mmask;; i = (i + 1) & v->mmask) {
        uint64_t kk = v->mkey[i];
        if (kk == k) {
            *rank = (uint32_t)(v->mval[i] >> 32);
            *res = (int32_t)(uint32_t)v->mval[i];
            return true;
        }
        if (kk == UINT64_MAX) return false;
    }
}

static void heap_push(uint64_t *h, size_t *n, uint64_t x)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= x) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static uint64_t heap_pop(uint64_t *h, size_t *n)
{
    uint64_t top = h[0], x = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= m) break;
        if (l + 1 < m && h[l + 1] < h[l]) l++;
        if (x <= h[l]) break;
        h[i] = h[l];
        i = l;
    }
    h[i] = x;
    return top;
}

/* Room for n symbols in the BPE scratch. */
static int bpe_grow(struct enc *c, size_t n)
{
    if (n > c->scap) {
        size_t nc = c->scap ? c->scap : 64;
        while (nc < n) nc *= 2;
        int32_t *s = realloc(c->sym, nc * sizeof *s);
        if (s) c->sym = s;
        int32_t *p = realloc(c->prev, nc * sizeof *p);
        if (p) c->prev = p;
        int32_t *x = realloc(c->next, nc * sizeof *x);
        if (x) c->next = x;
        uint64_t *h = realloc(c->heap, 3 * nc * sizeof *h);
        if (h) c->heap = h;
        if (!s || !p || !x || !h) return -1;
        c->scap = nc;
    }
    return 0;
}

/* Merges the symbols sym[0..n) (n >= 1) by rank; leaves the result as the linked list sym/next
 * from 0. */
static void bpe_run(struct enc *c, size_t n)
{
    const struct vocab *v = c->v;
    int32_t *sym = c->sym, *prev = c->prev, *next = c->next;
    uint64_t *heap = c->heap;
    size_t nh = 0;
    for (size_t i = 0; i < n; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    uint32_t rank;
    int32_t res;
    for (size_t i = 0; i + 1 < n; i++)
        if (merge_find(v, sym[i], sym[i + 1], &rank, &res))
            heap_push(heap, &nh, ((uint64_t)rank << 32) | i);
    while (nh > 0) {
        uint64_t top = heap_pop(heap, &nh);
        int32_t pos = (int32_t)(uint32_t)top, nx;
        if (sym[pos] < 0 || (nx = next[pos]) < 0) continue;
        if (!merge_find(v, sym[pos], sym[nx], &rank, &res) || rank != (uint32_t)(top >> 32))
            continue; /* stale: this pair changed since it was queued */
        sym[pos] = res;
        sym[nx] = -1;
        next[pos] = next[nx];
        if (next[pos] >= 0) prev[next[pos]] = pos;
        if (prev[pos] >= 0 && merge_find(v, sym[prev[pos]], sym[pos], &rank, &res))
            heap_push(heap, &nh, ((uint64_t)rank << 32) | (uint32_t)prev[pos]);
        if (next[pos] >= 0 && merge_find(v, sym[pos], sym[next[pos]], &rank, &res))
            heap_push(heap, &nh, ((uint64_t)rank << 32) | (uint32_t)pos);
    }
}

/* Merges the bytes of one piece (byte-level BPE: each byte is a start symbol). */
static int bpe_merge(struct enc *c, const unsigned char *w, size_t n)
{
    if (bpe_grow(c, n)) return -1;
    for (size_t i = 0; i < n; i++) c->sym[i] = c->v->byte_tok[w[i]];
    bpe_run(c, n);
    return 0;
}

static int bpe_piece(struct enc *c, const unsigned char *w, size_t n)
{
    const struct vocab *v = c->v;
    if (n == 1) return push_ids(c, &v->byte_tok[w[0]], 1);
    if (v->ignore_merges) { /* a piece that is a whole token is taken as is (HF ignore_merges) */
        int32_t id = vocab_tmap_find(v, (const char *)w, n);
        if (id >= 0) return push_ids(c, &id, 1);
    }
    uint32_t h = 0, slot = 0;
    bool cacheable = n <= CACHE_MAX_WORD;
    if (cacheable) {
        if (!c->ce && !(c->ce = calloc((size_t)c->ce_mask + 1, sizeof *c->ce))) return -1;
        h = word_hash(w, n);
        for (slot = h & c->ce_mask;; slot = (slot + 1) & c->ce_mask) {
            struct cache_ent *ce = &c->ce[slot];
            if (ce->h == 0) break;
            if (ce->h == h && ce->klen == n && memcmp(c->keys.data + ce->koff, w, n) == 0)
                return push_ids(c, c->cids + ce->ioff, ce->nid);
        }
    }
    if (bpe_merge(c, w, n)) return -1;
    size_t start = *c->n_out;
    for (int32_t i = 0; i >= 0; i = c->next[i])
        if (push_ids(c, &c->sym[i], 1)) return -1;
    if (!cacheable) return 0;
    size_t nid = *c->n_out - start;
    if (c->n_ce >= (c->ce_mask + 1) / 2) { /* half full: start over */
        memset(c->ce, 0, ((size_t)c->ce_mask + 1) * sizeof *c->ce);
        c->n_ce = 0;
        c->keys.len = 0;
        c->n_cids = 0;
        slot = h & c->ce_mask;
    }
    if (c->n_cids + nid > c->cap_cids) {
        size_t nc = c->cap_cids ? c->cap_cids * 2 : 4096;
        while (nc < c->n_cids + nid) nc *= 2;
        int32_t *p = realloc(c->cids, nc * sizeof *p);
        if (!p) return 0; /* caching is optional */
        c->cids = p;
        c->cap_cids = nc;
    }
    size_t koff = c->keys.len;
    if (buf_append(&c->keys, w, n)) return 0;
    memcpy(c->cids + c->n_cids, *c->out + start, nid * sizeof(int32_t));
    c->ce[slot] = (struct cache_ent){.h = h, .koff = (uint32_t)koff, .ioff = (uint32_t)c->n_cids,
                                     .klen = (uint8_t)n, .nid = (uint8_t)nid};
    c->n_cids += nid;
    c->n_ce++;
    return 0;
}

static bool utf8_valid(const unsigned char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        /* 8 ASCII bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        int l = tok_utf8_seq(p + i, n - i);
        if (l <= 0) return false;
        i += (size_t)l;
    }
    return true;
}

/* True when no code point of the valid UTF-8 s[0..n) can be changed by NFC or change its
 * neighbours: each is a starter (combining class 0) without a canonical decomposition that is
 * never the second element of a primary composite (utf8proc's comb_index marks seconds with
 * 0x8000), and not a Hangul jamo (composed algorithmically). Then NFD leaves the run alone and
 * canonical composition has nothing to combine. Checked exhaustively against utf8proc's NFC for
 * every such code point by tests/unit/test_vocab.c; U+0FB5/U+0FB7 are seconds only of
 * composition exclusions. */
bool vocab_nfc_inert_run(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        int32_t cp;
        utf8proc_ssize_t l = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (l <= 0) return false;
        i += (size_t)l;
        if (cp < 0x300) continue;
        if (cp >= 0x1100 && cp <= 0x11ff) return false;
        const utf8proc_property_t *p = utf8proc_get_property(cp);
        if (p->combining_class != 0) return false;
        if (p->decomp_type == 0 && p->decomp_seqindex != UINT16_MAX) return false;
        if (p->comb_index != UINT16_MAX && p->comb_index >= 0x8000) return false;
    }
    return true;
}

/* NFC of s[0..n) into out when it differs from s (*changed), else out untouched.
 *
 * Only the stretches that can change are normalized: a chunk runs from an ASCII character to the
 * next one. NFC of a string is the concatenation of the NFC of such chunks because an ASCII
 * character is a starter (canonical reordering never crosses it) that has no decomposition and
 * is never the second element of a composition (nothing before it can absorb it). A chunk whose
 * bytes are all below 0xCC (code points below U+0300, all NFC-stable) is skipped. */
static int nfc_segment(const unsigned char *s, size_t n, struct buf *out, bool *changed,
                       struct err *e)
{
    size_t i = 0, copied = 0, done = 0;
    *changed = false;
    while (i < n) {
        if (s[i] < 0xcc) {
            i++;
            continue;
        }
        size_t k = i, j = i;
        while (k > done && s[k - 1] >= 0x80) k--;
        if (k > done) k--; /* the ASCII character that starts the chunk */
        while (j < n && s[j] >= 0x80) j++;
        if (vocab_nfc_inert_run(s + i, j - i)) { /* e.g. CJK, emoji, most punctuation */
            done = i = j;
            continue;
        }
        utf8proc_uint8_t *norm = NULL;
        utf8proc_ssize_t r = utf8proc_map(s + k, (utf8proc_ssize_t)(j - k), &norm,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (r < 0) return err_set(e, ERR_INTERNAL, "NFC: %s", utf8proc_errmsg(r));
        if ((size_t)r != j - k || memcmp(norm, s + k, j - k) != 0) {
            if (!*changed) out->len = 0;
            if (buf_append(out, s + copied, k - copied) || buf_append(out, norm, (size_t)r)) {
                free(norm);
                return err_set(e, ERR_NOMEM, "out of memory");
            }
            copied = j;
            *changed = true;
        }
        free(norm);
        done = i = j;
    }
    if (*changed && buf_append(out, s + copied, n - copied))
        return err_set(e, ERR_NOMEM, "out of memory");
    return 0;
}

/* SentencePiece-style plain text (vocab_impl.h, spm), as Hugging Face's BPE model with
 * byte_fallback runs it: repair, ' ' -> ▁, one word of UTF-8 characters (a character that is
 * no token becomes its <0xNN> byte tokens), merge by rank over the whole segment. */
static int encode_spm(struct enc *c, const char *text, size_t len, struct err *e)
{
    const struct vocab *v = c->v;
    const unsigned char *s = (const unsigned char *)text;
    size_t n = len;
    if (!utf8_valid(s, n)) {
        c->lossy.len = 0;
        if (tok_utf8_lossy(text, len, &c->lossy)) goto nomem;
        s = (const unsigned char *)c->lossy.data;
        n = c->lossy.len;
    }
    if (memchr(s, ' ', n)) { /* the normalizer: Replace ' ' -> U+2581 */
        c->nfc.len = 0;
        for (size_t i = 0; i < n;) {
            const unsigned char *sp = memchr(s + i, ' ', n - i);
            size_t j = sp ? (size_t)(sp - s) : n;
            if (buf_append(&c->nfc, s + i, j - i)) goto nomem;
            if (sp && buf_append(&c->nfc, "\xe2\x96\x81", 3)) goto nomem;
            i = j + (sp ? 1 : 0);
        }
        s = (const unsigned char *)c->nfc.data;
        n = c->nfc.len;
    }
    if (bpe_grow(c, n)) goto nomem; /* at most one symbol per byte */
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        int l = tok_utf8_seq(s + i, n - i); /* valid: repaired above */
        if (l <= 0) l = 1;
        int32_t id = vocab_tmap_find(v, (const char *)s + i, (size_t)l);
        if (id >= 0) {
            c->sym[k++] = id;
        } else {
            for (int b = 0; b < l; b++) c->sym[k++] = v->byte_tok[s[i + (size_t)b]];
        }
        i += (size_t)l;
    }
    bpe_run(c, k);
    for (int32_t i = 0; i >= 0; i = c->next[i])
        if (push_ids(c, &c->sym[i], 1)) goto nomem;
    return 0;
nomem:
    return err_set(e, ERR_NOMEM, "out of memory tokenizing");
}

/* Plain text (no added tokens): repair, normalize, split, merge. */
static int encode_plain(struct enc *c, const char *text, size_t len, struct err *e)
{
    const struct vocab *v = c->v;
    if (len == 0) return 0;
    if (v->spm) return encode_spm(c, text, len, e);
    const unsigned char *s = (const unsigned char *)text;
    size_t n = len;
    if (!utf8_valid(s, n)) {
        c->lossy.len = 0;
        if (tok_utf8_lossy(text, len, &c->lossy)) return err_set(e, ERR_NOMEM, "out of memory");
        s = (const unsigned char *)c->lossy.data;
        n = c->lossy.len;
    }
    if (v->nfc) {
        bool changed;
        if (nfc_segment(s, n, &c->nfc, &changed, e)) return -1;
        if (changed) {
            s = (const unsigned char *)c->nfc.data;
            n = c->nfc.len;
        }
    }
    int rc = 0;
    size_t pos = 0;
    while (pos < n) {
        int m = v->re_jit ? pcre2_jit_match(v->re, s, n, pos, 0, c->md, NULL)
                          : pcre2_match(v->re, s, n, pos, PCRE2_NO_UTF_CHECK, c->md, NULL);
        size_t ms = n, me = n;
        if (m >= 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
            ms = ov[0];
            me = ov[1];
        } else if (m != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(m, msg, sizeof msg);
            rc = err_set(e, ERR_INTERNAL, "pre-tokenizer regex failed: %s", (char *)msg);
            break;
        }
        /* Text the regex skipped is a piece of its own (HF's Isolated split keeps it). */
        if (ms > pos && bpe_piece(c, s + pos, ms - pos)) goto nomem;
        if (me == ms) { /* cannot happen with our patterns; never loop forever */
            if (ms >= n) break;
            int l = tok_utf8_seq(s + ms, n - ms);
            me = ms + (size_t)(l > 0 ? l : 1);
        }
        if (bpe_piece(c, s + ms, me - ms)) goto nomem;
        pos = me;
    }
    return rc;
nomem:
    return err_set(e, ERR_NOMEM, "out of memory tokenizing");
}

static bool in_spans(const struct tok_span *sp, size_t n, size_t off, size_t len)
{
    size_t lo = 0, hi = n; /* last span with sp.off <= off */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (sp[mid].off <= off) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return false;
    const struct tok_span *s = &sp[lo - 1];
    return off + len <= s->off + s->len;
}

int tok_encode(const struct vocab *v, const char *text, size_t len, const struct tok_span *spans,
               size_t n_spans, bool parse_all_special, int32_t **out, size_t *n_out, size_t *cap,
               struct err *e)
{
    for (size_t i = 0; i < n_spans; i++) {
        if (spans[i].off > len || spans[i].len > len - spans[i].off ||
            (i > 0 && spans[i].off < spans[i - 1].off + spans[i - 1].len))
            return err_set(e, ERR_INVALID, "tokenizer: span %zu (%zu+%zu) is out of order or "
                           "outside the text (%zu bytes)", i, spans[i].off, spans[i].len, len);
    }
    size_t start_n = *n_out;
    struct enc c = {.v = v, .out = out, .n_out = n_out, .cap = cap};
    size_t slots = CACHE_MIN_SLOTS;
    while (slots < CACHE_MAX_SLOTS && slots < len / 8) slots *= 2;
    c.ce_mask = (uint32_t)slots - 1;
    int rc = -1;
    c.md = v->re ? pcre2_match_data_create_from_pattern(v->re, NULL) : NULL;
    if (v->re && !c.md) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto done;
    }
    const unsigned char *p = (const unsigned char *)text;
    size_t seg = 0, i = 0;
    while (i < len) {
        if (!v->added_first[p[i]]) {
            i++;
            continue;
        }
        /* leftmost-longest: the longest eligible added token starting here */
        int32_t hit = -1;
        size_t hl = 0;
        int32_t n_try = v->n_alens > 0 ? v->n_alens : v->n_added;
        for (int32_t k = 0; k < n_try; k++) {
            int32_t id;
            size_t tl;
            if (v->n_alens > 0) { /* by length, then the hash of the text of that length */
                tl = v->alens[k];
                if (tl > len - i || (id = vocab_added_find(v, text + i, tl)) < 0) continue;
            } else {
                id = v->added[k];
                const char *t = vocab_key(v, id, &tl);
                if (tl > len - i || (unsigned char)t[0] != p[i] || memcmp(t, text + i, tl) != 0)
                    continue;
            }
            if (v->type[id] == TOK_CONTROL && !parse_all_special &&
                !in_spans(spans, n_spans, i, tl))
                continue;
            hit = id;
            hl = tl;
            break;
        }
        if (hit < 0) {
            i++;
            continue;
        }
        if (encode_plain(&c, text + seg, i - seg, e)) goto done;
        if (push_ids(&c, &hit, 1)) goto nomem;
        i += hl;
        seg = i;
    }
    if (encode_plain(&c, text + seg, len - seg, e)) goto done;
    rc = 0;
    goto done;
nomem:
    err_set(e, ERR_NOMEM, "out of memory tokenizing");
done:
    if (rc) *n_out = start_n;
    pcre2_match_data_free(c.md);
    buf_free(&c.lossy);
    buf_free(&c.nfc);
    buf_free(&c.keys);
    free(c.sym);
    free(c.prev);
    free(c.next);
    free(c.heap);
    free(c.ce);
    free(c.cids);
    return rc;
}
