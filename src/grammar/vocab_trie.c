/* vocab_trie — the vocabulary index of grammar/: token bytes, special tokens, and the byte trie of
 * the non-special tokens in DFS order that mask computation walks (docs/grammar.md "Masks"). */
#define _GNU_SOURCE /* qsort_r */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"

/* ------------------------------------------------------------------------------------------ */
/* Vocabulary index                                                                            */

static int cmp_tok_bytes(const void *x, const void *y, void *ctx)
{
    const struct grammar_vocab_index *vi = ctx;
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    uint32_t la = vi->len[a], lb = vi->len[b];
    int c = memcmp(vi->blob + vi->off[a], vi->blob + vi->off[b], la < lb ? la : lb);
    if (c) return c;
    if (la != lb) return la < lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

void grammar_vocab_index_free(struct grammar_vocab_index *vi)
{
    if (!vi) return;
    free(vi->is_special);
    free(vi->blob);
    free(vi->off);
    free(vi->len);
    free(vi->tbyte);
    free(vi->ttok);
    free(vi->tend);
    free(vi->tok_next);
    free(vi->tn);
    free(vi->rep);
    free(vi->vtok);
    free(vi->vstart);
    free(vi->bix);
    free(vi->ubytes);
    for (uint32_t i = 0; i < vi->sh_cap; i++)
        if (vi->sh) wcache_payload_free(vi->sh[i].x); /* NULL slots: a no-op */
    free(vi->sh);
    for (uint32_t i = 0; i < vi->grave_n; i++)
        wcache_payload_free(vi->grave[i]);
    free(vi->grave);
    for (uint32_t i = 0; i < vi->rsh_cap; i++) /* no grammar left: the cache holds the last ref */
        wcache_rdata_free(vi->rsh[i].x);
    free(vi->rsh);
    if (vi->sh_cap) pthread_mutex_destroy(&vi->mu);
    free(vi->specials);
    free(vi);
}

/* Whole subtrees (mask.c): each node's state in the UTF-8 reference automaton (u8_next), the
 * tokens valid there in DFS order (vtok, vstart), and for the nodes at a character boundary with
 * at least TN_BIG_MIN nodes below, TN_BIG and the set of bytes below them (ubytes). stack:
 * scratch of n_nodes + 1 entries. -1: no memory. */
static int whole_subtrees_index(struct grammar_vocab_index *vi, int32_t *stack)
{
    int32_t nn = vi->n_nodes;
    int8_t *us = malloc((size_t)nn);
    int32_t *parent = malloc((size_t)nn * sizeof *parent);
    uint64_t(*ub)[4] = calloc((size_t)nn, sizeof *ub);
    size_t nv = 0;
    int rc = -1;
    vi->vstart = malloc(((size_t)nn + 1) * sizeof *vi->vstart);
    vi->bix = malloc((size_t)nn * sizeof *vi->bix);
    if (!us || !parent || !ub || !vi->vstart || !vi->bix) goto out;
    us[0] = 0;
    parent[0] = -1;
    int32_t sp = 0;
    stack[0] = 0;
    for (int32_t i = 1; i < nn; i++) {
        while ((uint32_t)i >= vi->tn[stack[sp]].end)
            sp--;
        int32_t p = stack[sp];
        parent[i] = p;
        us[i] = (int8_t)(us[p] < 0 ? -1 : u8_next(us[p], vi->tn[i].byte));
        if (us[i] >= 0)
            for (int32_t t = vi->tn[i].tok; t >= 0; t = vi->tok_next[t])
                nv++;
        stack[++sp] = i;
    }
    vi->vtok = malloc((nv + 1) * sizeof *vi->vtok);
    if (!vi->vtok) goto out;
    nv = 0;
    for (int32_t i = 0; i < nn; i++) {
        vi->vstart[i] = (uint32_t)nv;
        if (us[i] >= 0)
            for (int32_t t = vi->tn[i].tok; t >= 0; t = vi->tok_next[t])
                vi->vtok[nv++] = t;
    }
    vi->vstart[nn] = (uint32_t)nv;
    for (int32_t i = nn - 1; i >= 1; i--) { /* children follow their parents */
        uint8_t b = vi->tn[i].byte;
        uint64_t *u = ub[parent[i]];
        for (int w = 0; w < 4; w++)
            u[w] |= ub[i][w];
        u[b >> 6] |= 1ull << (b & 63);
    }
    uint32_t nb = 0;
    for (int32_t i = 0; i < nn; i++)
        if (us[i] == 0 && vi->tn[i].end - (uint32_t)i - 1 >= TN_BIG_MIN) nb++;
    vi->ubytes = malloc(((size_t)nb + 1) * sizeof *vi->ubytes);
    if (!vi->ubytes) goto out;
    for (int32_t i = 0; i < nn; i++) {
        vi->bix[i] = UINT32_MAX;
        if (us[i] != 0 || vi->tn[i].end - (uint32_t)i - 1 < TN_BIG_MIN) continue;
        vi->bix[i] = vi->n_big;
        memcpy(vi->ubytes[vi->n_big++], ub[i], sizeof *ub);
        vi->tn[i].dup |= TN_BIG;
    }
    rc = 0;
out:
    free(us);
    free(parent);
    free(ub);
    return rc;
}

struct grammar_vocab_index *grammar_vocab_index_new(const struct grammar_vocab *v, struct err *e)
{
    if (!v || v->n_tokens <= 0 || !v->bytes || !v->len) {
        err_set(e, ERR_INVALID, "grammar vocabulary is empty");
        return NULL;
    }
    struct grammar_vocab_index *vi = calloc(1, sizeof *vi);
    int32_t *order = NULL;
    int32_t *stack = NULL;
    if (!vi) goto nomem;
    int32_t n = v->n_tokens;
    vi->n_tokens = n;
    vi->eos = v->eos;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++)
        total += v->len[i];
    vi->is_special = calloc((size_t)n, sizeof *vi->is_special);
    vi->blob = malloc(total + 1);
    vi->off = malloc((size_t)n * sizeof *vi->off);
    vi->len = malloc((size_t)n * sizeof *vi->len);
    vi->tok_next = malloc((size_t)n * sizeof *vi->tok_next);
    order = malloc((size_t)n * sizeof *order);
    vi->specials = malloc((size_t)n * sizeof *vi->specials);
    /* at most one node per byte of all tokens, plus the root */
    vi->tbyte = malloc(total + 1);
    vi->ttok = malloc((total + 1) * sizeof *vi->ttok);
    vi->tend = malloc((total + 1) * sizeof *vi->tend);
    stack = malloc((size_t)(total + 2) * sizeof *stack);
    if (!vi->is_special || !vi->blob || !vi->off || !vi->len || !vi->tok_next || !order ||
        !vi->specials || !vi->tbyte || !vi->ttok || !vi->tend || !stack)
        goto nomem;
    uint64_t o = 0;
    int32_t n_plain = 0;
    uint32_t maxlen = 0;
    for (int32_t i = 0; i < n; i++) {
        vi->off[i] = o;
        vi->len[i] = v->len[i];
        if (v->len[i]) memcpy(vi->blob + o, v->bytes[i], v->len[i]);
        o += v->len[i];
        vi->is_special[i] = v->is_special ? v->is_special[i] : false;
        vi->tok_next[i] = -1;
        if (v->len[i] > maxlen) maxlen = v->len[i];
        if (vi->is_special[i])
            vi->specials[vi->n_specials++] = i;
        else if (v->len[i] > 0)
            order[n_plain++] = i;
    }
    qsort_r(order, (size_t)n_plain, sizeof *order, cmp_tok_bytes, vi);
    /* DFS-order trie from the sorted list */
    vi->tbyte[0] = 0;
    vi->ttok[0] = -1;
    vi->n_nodes = 1;
    int32_t depth = 0;
    stack[0] = 0;
    int32_t prev = -1;
    for (int32_t k = 0; k < n_plain; k++) {
        int32_t t = order[k];
        const uint8_t *b = (const uint8_t *)vi->blob + vi->off[t];
        uint32_t l = vi->len[t];
        uint32_t lcp = 0;
        if (prev >= 0) {
            const uint8_t *pb = (const uint8_t *)vi->blob + vi->off[prev];
            uint32_t pl = vi->len[prev];
            while (lcp < l && lcp < pl && pb[lcp] == b[lcp])
                lcp++;
            if (lcp == l && l == pl) {
                /* identical bytes: chain */
                int32_t node = stack[depth];
                int32_t x = vi->ttok[node];
                while (vi->tok_next[x] >= 0)
                    x = vi->tok_next[x];
                vi->tok_next[x] = t;
                prev = t;
                continue;
            }
        }
        while ((uint32_t)depth > lcp) {
            vi->tend[stack[depth]] = (uint32_t)vi->n_nodes;
            depth--;
        }
        for (uint32_t j = lcp; j < l; j++) {
            int32_t nd = vi->n_nodes++;
            vi->tbyte[nd] = b[j];
            vi->ttok[nd] = -1;
            stack[++depth] = nd;
        }
        vi->ttok[stack[depth]] = t;
        prev = t;
    }
    while (depth >= 0) {
        vi->tend[stack[depth]] = (uint32_t)vi->n_nodes;
        depth--;
    }
    vi->tn = malloc((size_t)vi->n_nodes * sizeof *vi->tn);
    if (!vi->tn) goto nomem;
    {
        /* depths: a node's depth is its parent's + 1; parents precede children in DFS order */
        vi->tn[0] = (struct tnode){.tok = -1, .end = vi->tend[0], .depth = 0};
        int32_t sp = 0;
        stack[0] = 0;
        for (int32_t i = 1; i < vi->n_nodes; i++) {
            while ((uint32_t)i >= vi->tend[stack[sp]])
                sp--;
            int32_t tk = vi->ttok[i];
            vi->tn[i] = (struct tnode){.tok = tk,
                                       .end = vi->tend[i],
                                       .depth = (uint16_t)(sp + 1),
                                       .byte = vi->tbyte[i],
                                       .dup = (uint8_t)(tk >= 0 && vi->tok_next[tk] >= 0
                                                            ? TN_DUP
                                                            : 0)};
            if ((uint32_t)(sp + 1) > vi->max_depth) vi->max_depth = (uint32_t)(sp + 1);
            stack[++sp] = i;
        }
    }
    /* representative tokens: the first token in each node's subtree (every leaf has one) */
    vi->rep = malloc((size_t)vi->n_nodes * sizeof *vi->rep);
    if (!vi->rep) goto nomem;
    vi->rep[0] = -1;
    for (int32_t i = vi->n_nodes - 1; i >= 1; i--) {
        if (vi->ttok[i] >= 0)
            vi->rep[i] = vi->ttok[i];
        else
            vi->rep[i] = vi->rep[i + 1]; /* first child (an internal node has one) */
    }
    if (whole_subtrees_index(vi, stack)) goto nomem;
    vi->sh_max_bytes = SHARED_CACHE_MAX_BYTES;
    vi->grave_step = 8;
    vi->sh_sweep = WCACHE_SWEEP_WALKS;
    if (wcache_table_new(vi)) goto nomem;
    pthread_mutex_init(&vi->mu, NULL);
    free(order);
    free(stack);
    return vi;
nomem:
    free(order);
    free(stack);
    grammar_vocab_index_free(vi);
    err_set(e, ERR_NOMEM, "out of memory indexing the vocabulary");
    return NULL;
}

int32_t grammar_vocab_find_special(const struct grammar_vocab_index *vi, const char *s, size_t n)
{
    for (int32_t i = 0; i < vi->n_specials; i++) {
        int32_t id = vi->specials[i];
        if (vi->len[id] == n && !memcmp(vi->blob + vi->off[id], s, n)) return id;
    }
    return -1;
}
int32_t grammar_vocab_n_tokens(const struct grammar_vocab_index *vi)
{
    return vi->n_tokens;
}
bool grammar_vocab_is_special(const struct grammar_vocab_index *vi, int32_t id)
{
    return id >= 0 && id < vi->n_tokens && vi->is_special[id];
}
