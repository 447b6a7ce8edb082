#include "serve/backend_llm.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/log.h"
#include "engine/text/chat.h"
#include "engine/text/family.h"
#include "engine/format/mkmodel_gen.h" /* MKMODEL_KEY_RANDOM */
#include "engine/model.h"
#include "engine/sample/sampler.h"
#include "engine/text/vocab.h"
#include "grammar/grammar.h"
#include "serve/emitter.h"
#include "serve/forced.h"
#include "serve/inline_tool.h"
#include "serve/kvdisk.h"
#include "serve/kvpool.h"
#include "serve/spec.h"
#include "serve/metrics.h"
#include "serve/toolcall.h"

#define PREFILL_CHUNK 512 /* default --prefill-chunk */

struct llm {
    struct backend base;
    struct model *m;
    struct vocab *v;
    const struct model_config *cfg;
    const struct family *fam; /* the descriptor: markers, end of turn, defaults, caps */
    int32_t eot[8];           /* the family's end-of-turn ids in this vocabulary */
    int n_eot;
    /* worker-only state */
    struct kvslot *slots; /* R-KV-1: the resident pool (docs/kv-cache.md) */
    int n_slots;
    uint64_t clock;       /* last-used stamps */
    struct kvslot *cur;   /* the slot the running request uses */
    struct kvdisk *disk;  /* R-KV-5 or NULL */
    int chunk;            /* --prefill-chunk */
    int batch;            /* --batch: streams decoded together (<= n_slots) */
    float *logits;        /* n_slots x (spec + 1) rows of n_vocab: a step's (verify) rows */
    char *out;      /* detokenizer output, TOK_STREAM_OUT_MAX(tok_max_len) */
    int32_t *pos;
    struct kv_cache **seq;
    /* constraints (R-GRAM-1): vocabulary index + LRU of compiled grammars (thread-safe) */
    const char **g_bytes;
    uint32_t *g_lens;
    bool *g_special;
    struct grammar_vocab_index *gvi;
    struct grammar_cache *gcache;
    uint32_t *mask; /* worker: allowed-token bitset over n_vocab logits */
    size_t mask_words;
    int spec;       /* --spec: max drafts per verify (R-SPEC-1), 0 = off */
    /* GET /metrics: the KV state, counted on the worker (plans, spills) and published under
     * kv_mu after each prefill and each job for the connection threads to read */
    uint64_t kv_plans[KVPLAN_KIND_COUNT], kv_spills;
    pthread_mutex_t kv_mu;
    struct metrics_kv kv_pub;
    /* recurrent families (qwen35): state snapshots, SNAP_MAX per slot (slot i's at i*SNAP_MAX);
     * NULL for a plain causal cache */
    struct kvsnap *snaps;
    size_t snap_floats;
    uint64_t snap_taken, snap_resumed;
};

/* ---- recurrent state snapshots (docs/qwen35.md "Snapshots") ----
 * A recurrent state cannot be cut to a prefix, so the pool keeps copies of it at chosen positions
 * of a slot's shadow: the aligned ends of a prompt's own messages (req->n_head) and of the prompt
 * minus its last token. A request resumes in place from the slot and snapshot with the longest
 * position that prefixes it. Positions are multiples of SNAP_ALIGN (the DeltaNet chunk) and the
 * prefill of a recurrent model is split only at such multiples, so a resumed prefill gives the
 * same bits as a cold one. A snapshot lives while its slot's rows below it stay. */
#define SNAP_MAX 4
#define SNAP_ALIGN 64

struct kvsnap {
    size_t pos; /* 0 = unused */
    uint64_t used;
    float *state;
};

static struct kvsnap *slot_snaps(struct llm *L, const struct kvslot *s)
{
    return L->snaps + (s - L->slots) * SNAP_MAX;
}

/* The slot's rows past keep are about to change: its snapshots past keep go. */
static void snap_drop_after(struct llm *L, const struct kvslot *s, size_t keep)
{
    if (!L->snaps) return;
    struct kvsnap *v = slot_snaps(L, s);
    for (int i = 0; i < SNAP_MAX; i++)
        if (v[i].pos > keep) v[i].pos = 0;
}

/* Copies slot s's state (now at position pos) into a snapshot: the one already at pos, a free
 * one, else the least recently used. */
static void snap_take(struct llm *L, struct kvslot *s, size_t pos)
{
    struct kvsnap *v = slot_snaps(L, s), *w = NULL;
    for (int i = 0; i < SNAP_MAX && !w; i++)
        if (v[i].pos == pos) w = &v[i];
    for (int i = 0; i < SNAP_MAX && !w; i++)
        if (!v[i].pos) w = &v[i];
    if (!w) {
        w = &v[0];
        for (int i = 1; i < SNAP_MAX; i++)
            if (v[i].used < w->used) w = &v[i];
    }
    if (!w->state && !(w->state = malloc(L->snap_floats * sizeof(float)))) {
        log_warn("kv: no memory for a state snapshot (%zu bytes): not taken", L->snap_floats * sizeof(float));
        w->pos = 0;
        return;
    }
    memcpy(w->state, kv_state(s->kv, NULL), L->snap_floats * sizeof(float));
    w->pos = pos;
    w->used = ++L->clock;
    L->snap_taken++;
    log_debug("kv: state snapshot at %zu in slot %d (%zu bytes)", pos, (int)(s - L->slots),
              L->snap_floats * sizeof(float));
}

/* The free slot and snapshot with the longest position that prefixes t[0..n) and leaves the last
 * token to compute; -1 when there is none. */
static int snap_best(struct llm *L, const int32_t *t, size_t n, struct kvsnap **out)
{
    int best = -1;
    size_t bp = 0;
    *out = NULL;
    for (int i = 0; i < L->n_slots; i++) {
        const struct kvslot *sl = &L->slots[i];
        if (sl->busy) continue;
        size_t lcp = kv_lcp(sl->shadow, sl->n_shadow, t, n);
        if (lcp > n - 1) lcp = n - 1;
        struct kvsnap *v = slot_snaps(L, sl);
        for (int k = 0; k < SNAP_MAX; k++)
            if (v[k].pos && v[k].pos <= lcp && (v[k].pos > bp || (v[k].pos == bp && v[k].used > (*out)->used))) {
                best = i;
                bp = v[k].pos;
                *out = &v[k];
            }
    }
    return best;
}

/* Worker: the pool's state into kv_pub (slots, rows, sidecars, the counters). */
static void kv_publish(struct llm *L)
{
    struct metrics_kv k = {.slots = L->n_slots, .disk = L->disk != NULL, .spills = L->kv_spills};
    for (int i = 0; i < L->n_slots; i++) {
        k.slots_in_use += L->slots[i].n_shadow > 0;
        k.rows += (int64_t)L->slots[i].n_shadow;
    }
    k.rows_capacity = (int64_t)L->n_slots * L->base.n_ctx;
    const struct kvcand *c;
    k.sidecars = L->disk ? kvdisk_cands(L->disk, &c) : 0;
    for (int i = 0; i < KVPLAN_KIND_COUNT && i < 4; i++) k.plans[i] = L->kv_plans[i];
    pthread_mutex_lock(&L->kv_mu);
    L->kv_pub = k;
    pthread_mutex_unlock(&L->kv_mu);
}

static void llm_kv_stats(struct backend *b, struct metrics_kv *out)
{
    struct llm *L = (struct llm *)b;
    pthread_mutex_lock(&L->kv_mu);
    *out = L->kv_pub;
    pthread_mutex_unlock(&L->kv_mu);
}

static const char *token_text(void *tctx, int32_t id, size_t *len)
{
    return tok_bytes((const struct vocab *)tctx, id, len);
}

/* req->n_head: the prompt's tokens before its generation prompt (where the request's own messages
 * end), which tells a continuation of a slot from a request that only shares its prefix
 * (docs/kv-cache.md). The generation prompt starts with a template token, so it tokenizes alone
 * exactly as inside the whole prompt. */
static int prompt_head(struct llm *L, struct request *req, const struct chat_prompt *cp,
                       const struct chat_prompt_opts *co, struct err *e)
{
    struct chat_prompt bare = {0};
    struct chat_prompt_opts o = *co;
    o.add_generation_prompt = false;
    int32_t *t = NULL;
    size_t nt = 0, ct = 0;
    int rc = -1;
    req->n_head = req->n_tokens;
    if (chat_render(L->cfg->arch, req->msgs, req->n_msgs, &o, &bare, e) < 0) goto out;
    size_t at = bare.text.len, len = cp->text.len;
    if (at > len || (at && memcmp(bare.text.data, cp->text.data, at))) {
        rc = 0; /* not a prefix: every prompt token counts as the request's own */
        goto out;
    }
    struct tok_span sp[64];
    size_t ns = 0;
    for (size_t i = 0; i < cp->n_spans && ns < 64; i++) { /* spans are merged: clip at `at` */
        size_t o = cp->spans[i].off, end = o + cp->spans[i].len;
        if (end > at) sp[ns++] = (struct tok_span){(o > at ? o : at) - at, end - (o > at ? o : at)};
    }
    if (tok_encode(L->v, cp->text.data + at, len - at, sp, ns, false, &t, &nt, &ct, e) < 0) goto out;
    req->n_head = nt < req->n_tokens ? req->n_tokens - nt : 0;
    rc = 0;
out:
    free(t);
    chat_prompt_free(&bare);
    return rc;
}

static int llm_tokenize(struct backend *b, const char *s, size_t n, bool add_special,
                        bool parse_special, int32_t **out, size_t *n_out, size_t *cap,
                        struct err *e)
{
    struct llm *L = (struct llm *)b;
    if (add_special && tok_add_bos(L->v) && tok_bos(L->v) >= 0) {
        int32_t bos = tok_bos(L->v);
        if (*n_out == *cap) {
            size_t nc = *cap ? 2 * *cap : 16;
            int32_t *t = realloc(*out, nc * sizeof *t);
            if (!t) return err_set(e, ERR_NOMEM, "out of memory");
            *out = t;
            *cap = nc;
        }
        (*out)[(*n_out)++] = bos;
    }
    return tok_encode(L->v, s, n, NULL, 0, parse_special, out, n_out, cap, e);
}

static const char *llm_token_bytes(struct backend *b, int32_t id, size_t *len)
{
    struct llm *L = (struct llm *)b;
    if (id < 0 || id >= vocab_size(L->v)) return NULL;
    return tok_bytes(L->v, id, len);
}

/* A raw prompt (/v1/completions): prompt_text tokenized with control-token text parsed, as
 * llama-server does, or token ids given by the client (checked against the vocabulary). */
static int raw_prompt(struct llm *L, struct request *req, struct err *e)
{
    if (req->prompt_text) {
        free(req->tokens);
        req->tokens = NULL;
        req->n_tokens = req->cap_tokens = 0;
        if (llm_tokenize(&L->base, req->prompt_text, strlen(req->prompt_text), true, true,
                         &req->tokens, &req->n_tokens, &req->cap_tokens, e) < 0)
            return -1;
    } else {
        struct buf text = {0};
        for (size_t i = 0; i < req->n_tokens; i++) {
            size_t n = 0;
            const char *s = llm_token_bytes(&L->base, req->tokens[i], &n);
            if (!s) {
                buf_free(&text);
                return err_set_param(e, ERR_INVALID, "prompt",
                                     "prompt token %d is outside the vocabulary (0..%d)",
                                     (int)req->tokens[i], (int)vocab_size(L->v) - 1);
            }
            if (buf_append(&text, s, n) < 0) {
                buf_free(&text);
                return err_set(e, ERR_NOMEM, "out of memory");
            }
        }
        req->prompt_text = text.data ? buf_steal(&text) : strdup("");
        if (!req->prompt_text) return err_set(e, ERR_NOMEM, "out of memory");
    }
    if (req->n_tokens == 0)
        return err_set_param(e, ERR_INVALID, "prompt", "the prompt has no tokens");
    req->n_head = req->n_tokens; /* every prompt token is the request's own */
    return 0;
}

/* Several completions prompts: each through raw_prompt (req's prompt fields lent to it), each
 * fitting the context with one reply token. */
static int raw_prompts(struct llm *L, struct request *req, struct err *e)
{
    for (int p = 0; p < req->n_prompts; p++) {
        struct embd_input *in = &req->prompts[p];
        req->prompt_text = in->text;
        req->tokens = in->tokens;
        req->n_tokens = req->cap_tokens = in->n_tokens;
        in->text = NULL;
        in->tokens = NULL;
        int rc = raw_prompt(L, req, e);
        in->text = req->prompt_text;
        in->tokens = req->tokens;
        in->n_tokens = req->n_tokens;
        req->prompt_text = NULL;
        req->tokens = NULL;
        req->n_tokens = req->cap_tokens = 0;
        if (rc < 0) {
            char m[sizeof e->msg];
            snprintf(m, sizeof m, "prompt %d: %.400s", p, e->msg);
            snprintf(e->msg, sizeof e->msg, "%s", m);
            return -1;
        }
        if (in->n_tokens + 1 > (size_t)L->base.n_ctx)
            return err_set_param(e, ERR_CONTEXT, "prompt",
                                 "prompt %d is %zu tokens, but the context holds %d (prompt + at "
                                 "least one reply token)", p, in->n_tokens, L->base.n_ctx);
    }
    req->n_head = 0;
    return 0;
}

/* Embeddings: every input as ids (text tokenized as /tokenize does), each fitting the context. */
static int embd_validate(struct llm *L, struct request *req, struct err *e)
{
    req->n_tokens = 0;
    for (int i = 0; i < req->n_inputs; i++) {
        struct embd_input *in = &req->inputs[i];
        if (in->text) {
            size_t cap = 0;
            free(in->tokens);
            in->tokens = NULL;
            in->n_tokens = 0;
            if (llm_tokenize(&L->base, in->text, strlen(in->text), true, true, &in->tokens,
                             &in->n_tokens, &cap, e) < 0)
                return -1;
        }
        for (size_t k = 0; k < in->n_tokens; k++)
            if (in->tokens[k] < 0 || in->tokens[k] >= vocab_size(L->v))
                return err_set_param(e, ERR_INVALID, "input",
                                     "input %d: token %d is outside the vocabulary (0..%d)", i,
                                     (int)in->tokens[k], (int)vocab_size(L->v) - 1);
        if (in->n_tokens == 0)
            return err_set_param(e, ERR_INVALID, "input", "input %d has no tokens", i);
        if (in->n_tokens > (size_t)L->base.n_ctx)
            return err_set_param(e, ERR_CONTEXT, "input",
                                 "input %d is %zu tokens, but the context holds %d", i,
                                 in->n_tokens, L->base.n_ctx);
        req->n_tokens += in->n_tokens;
    }
    req->n_embd = L->cfg->n_embd;
    return 0;
}

static int llm_validate(struct backend *b, struct request *req, struct err *e)
{
    struct llm *L = (struct llm *)b;
    if (req->n_inputs > 0) return embd_validate(L, req, e);
    struct chat_prompt cp = {0};
    struct chat_prompt_opts co = {.add_generation_prompt = !req->prefill,
                                  .continue_final = req->prefill,
                                  .enable_thinking = req->reasoning,
                                  .tools = req->tools};
    int rc = 0;
    if (req->raw) { /* /v1/completions: the prompt as given, no template */
        if ((rc = req->n_prompts > 1 ? raw_prompts(L, req, e) : raw_prompt(L, req, e)) < 0) goto out;
        goto check;
    }
    if (chat_render(L->cfg->arch, req->msgs, req->n_msgs, &co, &cp, e) < 0) {
        if (!e->param[0]) snprintf(e->param, sizeof e->param, "messages");
        return -1;
    }
    free(req->tokens);
    req->tokens = NULL;
    req->n_tokens = req->cap_tokens = 0;
    if (tok_add_bos(L->v) && tok_bos(L->v) >= 0) {
        req->tokens = malloc(16 * sizeof *req->tokens);
        if (!req->tokens) {
            rc = err_set(e, ERR_NOMEM, "out of memory");
            goto out;
        }
        req->cap_tokens = 16;
        req->tokens[req->n_tokens++] = tok_bos(L->v);
    }
    if (tok_encode(L->v, cp.text.data ? cp.text.data : "", cp.text.len, cp.spans, cp.n_spans, false,
                   &req->tokens, &req->n_tokens, &req->cap_tokens, e) < 0) {
        rc = -1;
        goto out;
    }
    if (prompt_head(L, req, &cp, &co, e) < 0) {
        rc = -1;
        goto out;
    }
check:
    if (req->n_tokens + 1 > (size_t)b->n_ctx) {
        rc = err_set_param(e, ERR_CONTEXT, req->raw ? "prompt" : "messages",
                           "the prompt is %zu tokens, but the context holds %d (prompt + at least "
                           "one reply token)", req->n_tokens, b->n_ctx);
        goto out;
    }
    for (int i = 0; i < req->n_bias; i++)
        if (req->bias[i].token >= L->cfg->n_vocab) {
            rc = err_set_param(e, ERR_INVALID, "logit_bias",
                               "logit_bias token id %d is outside the vocabulary (0..%d)",
                               (int)req->bias[i].token, (int)L->cfg->n_vocab - 1);
            goto out;
        }
    if (req->constraint != CONSTRAINT_NONE && !req->grammar) {
        static const enum grammar_kind kinds[CONSTRAINT_KIND_COUNT] = {
            [CONSTRAINT_JSON_OBJECT] = GRAMMAR_JSON_OBJECT, [CONSTRAINT_JSON_SCHEMA] = GRAMMAR_JSON_SCHEMA,
            [CONSTRAINT_REGEX] = GRAMMAR_REGEX, [CONSTRAINT_LARK] = GRAMMAR_LARK,
            [CONSTRAINT_GBNF] = GRAMMAR_GBNF};
        const char *src = req->constraint_src ? req->constraint_src : "";
        req->grammar = grammar_cache_get(L->gcache, kinds[req->constraint], src, strlen(src), e);
        if (!req->grammar) {
            snprintf(e->param, sizeof e->param, "%s", req->constraint_param);
            rc = -1;
            goto out;
        }
    }
    if (!req->raw) {
        free(req->prompt_text);
        req->prompt_text = buf_steal(&cp.text);
        if (!req->prompt_text) req->prompt_text = strdup("");
    }
out:
    chat_prompt_free(&cp);
    return rc;
}

/* One of the family's end-of-turn tokens (the vocabulary's own eos/eot are tok_is_eog's). */
static bool is_eot(const struct llm *L, int32_t id)
{
    for (int i = 0; i < L->n_eot; i++)
        if (L->eot[i] == id) return true;
    return false;
}

/* The one token the grammar allows in mt's state, or -1 (several, or none). mask: scratch. */
static int32_t forced_token(struct matcher *mt, uint32_t *mask, size_t words)
{
    matcher_mask(mt, mask);
    int32_t tok = -1;
    for (size_t w = 0; w < words; w++) {
        if (!mask[w]) continue;
        if (tok >= 0 || (mask[w] & (mask[w] - 1))) return -1;
        tok = (int32_t)(w * 32 + (size_t)__builtin_ctz(mask[w]));
    }
    return tok;
}

/* The bytes the grammar forces from mt's state (every allowed token starts with the same byte,
 * none is special), at most max, into out; mt is left as it was. Found one byte at a time: mask,
 * check the first bytes, consume that byte's own one-byte token, then roll all of them back.
 * mask: scratch. Returns the count. */
static size_t forced_bytes(const struct llm *L, struct matcher *mt, uint32_t *mask, char *out,
                           size_t max)
{
    size_t nf = 0;
    int consumed = 0;
    while (nf < max) {
        matcher_mask(mt, mask);
        int c = -1;
        int32_t one = -1; /* an allowed token that is exactly the byte c */
        bool stop = false;
        for (size_t w = 0; w < L->mask_words && !stop; w++)
            for (uint32_t bits = mask[w]; bits && !stop; bits &= bits - 1) {
                int32_t t = (int32_t)(w * 32 + (size_t)__builtin_ctz(bits));
                if (L->g_special[t] || !L->g_lens[t]) { stop = true; break; }
                int b = (unsigned char)L->g_bytes[t][0];
                if (c >= 0 && b != c) { stop = true; break; }
                c = b;
                if (L->g_lens[t] == 1) one = t;
            }
        if (stop || c < 0 || one < 0 || matcher_consume(mt, one) != 0) break;
        consumed++;
        out[nf++] = (char)c;
    }
    if (consumed) matcher_rollback(mt, consumed);
    return nf;
}

/* Drafts what the grammar forces after sp's draft so far (mt already past it), up to cap drafts in
 * all. First the tokens that are certain: while the mask allows exactly one token, that token (the
 * target's masked choice can be nothing else). Then, while this reply's grammar drafts are mostly
 * accepted (a weak model spells keys its own way, and rejected rows are wasted work), the forced
 * bytes as the tokenizer spells them, each kept while the grammar allows it, the last one dropped:
 * the model's own token there usually runs on past the forced bytes (`"` is forced before a key,
 * the model writes `"name`). Returns how many tokens it consumed in mt (the caller rolls back). */
static int grammar_draft(struct llm *L, struct matcher *mt, struct spec *sp, int cap, int64_t pos0)
{
    enum { MAX_FORCED = 64, TRIAL = 8 };
    int n = 0;
    int32_t f;
    while (sp->n_draft < cap && sp->n_draft < sp->max_draft &&
           (f = forced_token(mt, L->mask, L->mask_words)) >= 0 && !L->g_special[f] &&
           matcher_consume(mt, f) == 0) {
        spec_force(sp, f, pos0);
        n++;
    }
    if (sp->n_draft >= cap || sp->n_draft >= sp->max_draft ||
        (sp->n_forced_total >= TRIAL && 2 * sp->n_forced_accepted < sp->n_forced_total))
        return n;
    char fb[MAX_FORCED];
    size_t nb = forced_bytes(L, mt, L->mask, fb, sizeof fb);
    if (!nb) return n;
    int32_t *toks = NULL;
    size_t nt = 0, tcap = 0;
    struct err e = {0};
    if (tok_encode(L->v, fb, nb, NULL, 0, false, &toks, &nt, &tcap, &e) == 0)
        for (size_t i = 0; i + 1 < nt && sp->n_draft < cap && sp->n_draft < sp->max_draft; i++) {
            if (matcher_consume(mt, toks[i]) != 0) break;
            n++;
            spec_force(sp, toks[i], pos0);
        }
    free(toks);
    return n;
}

/* R-SPEC-1 (serve/spec.h, docs/speculation.md): what slot s feeds this step after the chosen
 * token tok. A pending verify row that tok confirms is copied into out: returns 0, no forward.
 * Otherwise the rows of unaccepted drafts are dropped (cache and shadow alike), and tok goes into
 * t[0] with a new draft after it: the context's own continuation, cut where the grammar refuses
 * (consume, then rollback), then the tokens the grammar forces (the only one it allows, up to the
 * cap). Returns the count written to t (1 = no draft); the step's one forward runs them at
 * positions n_shadow.. with logits for every one — beside the other streams' tokens, in the
 * batch's single weight pass (docs/batching.md). left = tokens the reply may still produce. */
static int spec_plan(struct llm *L, struct kvslot *s, struct spec *sp, const float *vlogits,
                     struct matcher *mt, int32_t tok, int left, float *out, int32_t *t)
{
    size_t nv = (size_t)L->cfg->n_vocab;
    int64_t keep;
    int row = spec_accept(sp, tok, &keep);
    if (row > 0) {
        memcpy(out, vlogits + (size_t)row * nv, nv * sizeof *out);
        return 0;
    }
    if (keep >= 0) {
        kv_truncate(s->kv, (int)keep);
        s->n_shadow = (size_t)keep;
    }
    int32_t pos0 = (int32_t)s->n_shadow;
    int room = kv_capacity(s->kv) - pos0 - 1, cap = left - 1 < room ? left - 1 : room;
    s->shadow[pos0] = tok; /* the context to match includes tok (fed either way) */
    int k = spec_draft(sp, s->shadow, (size_t)pos0 + 1, cap, pos0);
    int n = 0;
    while (n < k && !tok_is_eog(L->v, sp->draft[n]) && (!mt || matcher_consume(mt, sp->draft[n]) == 0))
        n++;
    sp->n_draft = n;
    if (mt && n == k) n += grammar_draft(L, mt, sp, cap, pos0); /* JSON keys, punctuation */
    if (mt && n) matcher_rollback(mt, n);
    t[0] = tok;
    memcpy(t + 1, sp->draft, (size_t)n * sizeof *t);
    return n + 1;
}

/* A reply ended with drafts pending: their rows go, so the slot holds what plain decoding leaves. */
static void spec_end(struct kvslot *s, struct spec *sp)
{
    int64_t keep = spec_settle(sp);
    if (keep < 0) return;
    kv_truncate(s->kv, (int)keep);
    s->n_shadow = (size_t)keep;
}

static int cancelled(struct job *job, struct err *e)
{
    (void)job;
    return err_set(e, ERR_CANCELLED, "the client went away");
}

/* Embeddings (worker): each input run through the model in prefill-sized chunks on the current
 * slot's cache (whose cached prefix is then forgotten), the final hidden states mean-pooled and
 * L2-normalized into req->embd; then sink->done with the prompt-token usage. */
static int llm_embed(struct llm *L, struct job *job, struct err *e)
{
    struct request *req = &job->req;
    const int E = L->cfg->n_embd;
    size_t ch = (size_t)L->chunk;
    float *hid = malloc(ch * (size_t)E * sizeof *hid);
    double *acc = malloc((size_t)E * sizeof *acc);
    req->embd = calloc((size_t)req->n_inputs * (size_t)E, sizeof *req->embd);
    int rc = -1;
    if (!hid || !acc || !req->embd) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto out;
    }
    struct kv_cache *kv = L->cur->kv;
    L->cur->n_shadow = 0; /* its rows are about to be overwritten */
    snap_drop_after(L, L->cur, 0);
    L->cur->head = 0;
    for (int i = 0; i < req->n_inputs; i++) {
        const struct embd_input *in = &req->inputs[i];
        kv_truncate(kv, 0);
        memset(acc, 0, (size_t)E * sizeof *acc);
        for (size_t at = 0; at < in->n_tokens; at += ch) {
            if (pipe_cancelled(job->pipe)) {
                err_set(e, ERR_CANCELLED, "the client went away");
                goto out;
            }
            size_t k = in->n_tokens - at < ch ? in->n_tokens - at : ch;
            for (size_t t = 0; t < k; t++) {
                L->pos[t] = (int32_t)(at + t);
                L->seq[t] = kv;
            }
            struct batch bt = {.token = in->tokens + at, .pos = L->pos, .seq = L->seq,
                               .n = (int64_t)k, .hidden = hid};
            if (model_forward(L->m, &bt, NULL, e) < 0) goto out;
            for (size_t t = 0; t < k; t++)
                for (int d = 0; d < E; d++) acc[d] += hid[t * (size_t)E + d];
        }
        double norm = 0;
        for (int d = 0; d < E; d++) norm += acc[d] * acc[d]; /* mean then L2 = sum then L2 */
        norm = norm > 0 ? 1.0 / sqrt(norm) : 0;
        for (int d = 0; d < E; d++) req->embd[(size_t)i * E + d] = (float)(acc[d] * norm);
    }
    kv_truncate(kv, 0);
    struct usage u = {.prompt_tokens = (int64_t)req->n_tokens};
    job->usage = u;
    job->t_end = mono_seconds();
    if (job->sink.done(job->sink.ctx, &u) < 0) {
        err_set(e, ERR_CANCELLED, "the client went away");
        goto out;
    }
    rc = 0;
out:
    free(hid);
    free(acc);
    return rc;
}

/* ------------------------------------------------------------- the batch (docs/batching.md)
 *
 * The worker runs every live stream (one per choice of each admitted request) through one forward
 * per step: one token of each decoding stream plus a bounded chunk of each prefilling one, each
 * token at its own position in its own KV slot. A step is: admit queued requests (up to --batch
 * streams), end streams whose client left, give waiting streams a slot, build and run the
 * forward, then sample every stream that got logits. Streams end alone; a request ends when its
 * last stream did. */

enum sstate {
    SS_FREE,     /* unused entry */
    SS_SHARE,    /* choice c > 0: waits for choice 0's prefill to copy its rows and logits */
    SS_WAIT,     /* needs a slot (and room in the batch) to start */
    SS_PREFILL,  /* has a slot; prompt rows [at, n_tokens) still to compute */
    SS_DECODE,   /* next: feed tok, then sample from its logits */
};

struct bjob {
    struct job *job;
    bool taken;  /* from queue_take (queue_done when it ends); else run()'s own job */
    int n_live;  /* streams not yet ended */
    bool failed; /* one stream hit an error: every stream of the request ends, error reply */
    struct err e;
    struct usage u;
};

struct stream {
    enum sstate st;
    uint64_t order; /* admission order: waiting streams start first-come */
    struct bjob *bj;
    int choice;
    struct kvslot *slot;
    size_t at;    /* SS_PREFILL: next prompt token to compute */
    int32_t tok;  /* SS_DECODE: the token to feed this step */
    int k, budget;
    int row;      /* logits row of this step, -1 = none */
    int n_rows;   /* rows from row on: 1, or a --spec verify's token + drafts */
    float *own;   /* a shared prefill's logits (SS_SHARE -> SS_DECODE), n_vocab floats */
    bool have_own;
    struct sampler *smp;
    struct matcher *mt;
    struct emitter em;
    bool em_live;
    struct toolcall_scanner tc;
    struct tok_stream ts;
    struct inline_tool it; /* the family's in-reply tool (nanochat's calculator) */
    struct spec sps; /* --spec: this stream's drafts */
    size_t snap_at[2]; /* recurrent families: prompt positions to snapshot the state at (0 = none) */
    float *vlog;     /* --spec: its verify rows, (spec + 1) x n_vocab */
};

struct sched {
    struct llm *L;
    struct stream *s; /* n_s entries (never moved: emitters point into them) */
    struct bjob *j;   /* n_s entries */
    int n_s;
    uint64_t order;
    /* the step's batch */
    int32_t *tok, *pos;
    struct kv_cache **seq;
    bool *want;
    int n_max;
    int width; /* streams in the last step (the debug log line says when it changes) */
    int64_t shared_verifies; /* --spec verifies that ran in a step with other streams' tokens */
    bool anchor_failed; /* run()'s own job failed: generate returns its error (anchor_e) */
    struct err anchor_e;
};

/* Jobs that can join a batch: not embeddings, not several completions prompts (run_prompts). */
static bool gen_job(const struct job *j) { return j->req.n_inputs == 0 && j->req.n_prompts <= 1; }

static int live_streams(const struct sched *S, bool started_only)
{
    int n = 0;
    for (int i = 0; i < S->n_s; i++)
        n += S->s[i].st != SS_FREE &&
             (!started_only || S->s[i].st == SS_PREFILL || S->s[i].st == SS_DECODE);
    return n;
}

static bool free_slot(const struct llm *L)
{
    for (int i = 0; i < L->n_slots; i++)
        if (!L->slots[i].busy) return true;
    return false;
}

/* Sampler, matcher, emitter and tool-call scanner of one choice. */
static int stream_open(struct llm *L, struct stream *s, struct err *e)
{
    struct request *req = &s->bj->job->req;
    struct reply_sink *sink = &s->bj->job->sink;
    struct sampler_params sp = req->sp;
    sp.seed = req->sp.seed + (uint64_t)s->choice;
    sp.no_logprob = !req->logprobs; /* only the logprobs encoders read them */
    if (!(s->smp = sampler_new(&sp, L->cfg->n_vocab, e))) return -1;
    if (req->grammar && !(s->mt = matcher_new(req->grammar, e))) {
        snprintf(e->param, sizeof e->param, "%s", req->constraint_param);
        return -1;
    }
    for (size_t i = 0; i < req->n_tokens; i++) sampler_accept(s->smp, req->tokens[i]);
    struct reply_sink *esink = sink;
    if (req->tools && L->base.caps.tools) {
        toolcall_init_family(&s->tc, sink, L->fam, req->tools);
        esink = toolcall_sink(&s->tc);
    }
    emitter_init(&s->em, esink, req->choice_base + s->choice,
                 L->base.caps.think && !req->raw ? family_think(L->fam) : NULL,
                 (const char *const *)req->stop, req->n_stop);
    if (L->fam->think_primed && req->reasoning && !req->prefill && !req->raw)
        emitter_start_in_reasoning(&s->em); /* the generation prompt ends with the open marker */
    s->em_live = true;
    int room = L->base.n_ctx - (int)req->n_tokens;
    s->budget = req->max_tokens < room ? req->max_tokens : room;
    spec_init(&s->sps, L->spec);
    inline_tool_init(&s->it, L->fam->inline_tool, L->v);
    return 0;
}

/* The end of a request: its reply's ending (done, or the error), then the queue's. */
static void bjob_end(struct sched *S, struct bjob *bj)
{
    struct job *job = bj->job;
    job->usage = bj->u;
    job->t_end = mono_seconds();
    if (!bj->taken) { /* run()'s own: its caller reports the error (run_prompts goes on or not) */
        S->anchor_failed = bj->failed;
        S->anchor_e = bj->e;
        if (!bj->failed && job->sink.done(job->sink.ctx, &bj->u) < 0) {
            S->anchor_failed = true;
            if (pipe_cancelled(job->pipe)) cancelled(job, &S->anchor_e);
            else err_set(&S->anchor_e, ERR_NOMEM, "out of memory while streaming");
        }
    } else if (!bj->failed) {
        if (job->sink.done(job->sink.ctx, &bj->u) < 0 && !pipe_cancelled(job->pipe)) {
            struct err e;
            err_set(&e, ERR_NOMEM, "out of memory while streaming");
            log_warn("generate failed: %s", e.msg);
            if (job->sink.error) job->sink.error(job->sink.ctx, &e);
        }
    } else if (!pipe_cancelled(job->pipe)) {
        log_warn("generate failed: %s", bj->e.msg);
        if (job->sink.error) job->sink.error(job->sink.ctx, &bj->e);
    }
    if (bj->taken) queue_done(job->queue, job);
    bj->job = NULL;
}

/* Ends one stream: why >= 0 finishes its choice normally (flush + finish reason), why < 0 drops it
 * (failure or cancellation). Frees its slot for the others. */
static void stream_end(struct sched *S, struct stream *s, int why, bool stopped)
{
    struct llm *L = S->L;
    struct bjob *bj = s->bj;
    if (why >= 0 && !bj->failed && !stopped) {
        size_t nb = tok_stream_flush(&s->ts, L->out);
        if ((nb && emitter_feed(&s->em, L->out, nb, NULL) < 0) ||
            emitter_finish(&s->em, (enum finish_reason)why) < 0) {
            if (!pipe_cancelled(bj->job->pipe)) {
                bj->failed = true;
                err_set(&bj->e, ERR_NOMEM, "out of memory while streaming");
            }
        }
    }
    if (s->slot) spec_end(s->slot, &s->sps);
    if (L->spec && (s->sps.n_verify || s->sps.n_forced_total))
        log_debug("spec: %lld verifies, %lld of %lld drafts accepted, %lld of %lld grammar drafts",
                  (long long)s->sps.n_verify, (long long)s->sps.n_accepted,
                  (long long)s->sps.n_proposed, (long long)s->sps.n_forced_accepted,
                  (long long)s->sps.n_forced_total);
    if (s->em_live) emitter_deinit(&s->em);
    toolcall_deinit(&s->tc);
    inline_tool_deinit(&s->it);
    free(s->vlog);
    sampler_free(s->smp);
    matcher_free(s->mt);
    free(s->own);
    if (s->slot) {
        s->slot->busy = false;
        s->slot->used = ++L->clock;
    }
    *s = (struct stream){.st = SS_FREE, .row = -1};
    if (--bj->n_live == 0) bjob_end(S, bj);
}

/* Fails the request of s (error e, unless its client left): every one of its streams ends. */
static void bjob_fail(struct sched *S, struct bjob *bj, const struct err *e)
{
    if (!bj->failed) {
        bj->failed = true;
        bj->e = *e;
    }
    for (int i = 0; i < S->n_s && bj->job; i++)
        if (S->s[i].st != SS_FREE && S->s[i].bj == bj) stream_end(S, &S->s[i], -1, false);
}

/* Admits one request: a stream per choice, choice 0 waiting for a slot, the others for its
 * prefill. */
static int admit(struct sched *S, struct job *job, bool taken)
{
    int bi = 0;
    while (bi < S->n_s && S->j[bi].job) bi++;
    int free_s = 0;
    for (int i = 0; i < S->n_s; i++) free_s += S->s[i].st == SS_FREE;
    if (bi == S->n_s || free_s < job->req.n) return -1; /* cannot happen: sized for it */
    struct bjob *bj = &S->j[bi];
    *bj = (struct bjob){.job = job, .taken = taken, .n_live = job->req.n,
                        .u = {.prompt_tokens = (int64_t)job->req.n_tokens}};
    job->sink.token_text = token_text;
    job->sink.tctx = S->L->v;
    for (int c = 0, i = 0; c < job->req.n; i++) {
        if (S->s[i].st != SS_FREE) continue;
        S->s[i] = (struct stream){.st = c ? SS_SHARE : SS_WAIT, .order = ++S->order, .bj = bj,
                                  .choice = c, .row = -1};
        c++;
    }
    return 0;
}

/* Brings a free slot to hold the prompt of s (R-KV-1/2/5: the plan of serve/kvpool); s then
 * prefills what the slot does not hold. Choice 0 reports the reused rows as cached_tokens. */
static int stream_start(struct sched *S, struct stream *s, struct err *e)
{
    struct llm *L = S->L;
    const struct request *req = &s->bj->job->req;
    size_t n = req->n_tokens;
    const struct kvcand *dc = NULL;
    int nd = kvdisk_cands(L->disk, &dc);
    struct kvplan p;
    kvpool_plan(L->slots, L->n_slots, dc, nd, req->tokens, n, &p);
    struct kvsnap *sn = NULL;
    if (!L->fam->caps.kv_reuse) { /* family.h: no prefix reuse, except from a state snapshot */
        p.kind = KVPLAN_COLD, p.keep = 0;
        int si = L->snaps ? snap_best(L, req->tokens, n, &sn) : -1;
        if (si >= 0) {
            p = (struct kvplan){.kind = KVPLAN_ADOPT, .dst = si, .src = si, .disk = -1, .keep = sn->pos};
        }
    }
    struct kvslot *dst = &L->slots[p.dst];
    if (p.spill && L->disk && !kvdisk_contains(L->disk, dst->shadow, dst->n_shadow) &&
        kvdisk_spill(L->disk, dst->kv, dst->shadow, dst->n_shadow, dst->head) == 0)
        L->kv_spills++;
    size_t lcp = p.keep;
    enum kvplan_kind done = p.kind;
    if (p.kind == KVPLAN_RESTORE) {
        size_t nn = 0, hh = 0;
        if (kvdisk_restore(L->disk, p.disk, dst->kv, dst->shadow, &nn, &hh) == 0) dst->n_shadow = nn;
        else { /* refused (logged): this request runs cold */
            lcp = 0;
            done = KVPLAN_COLD;
        }
    } else if (p.kind == KVPLAN_COPY && p.src != p.dst) {
        const struct kvslot *src = &L->slots[p.src];
        if (kv_copy_rows(dst->kv, src->kv, (int)lcp) < 0)
            return err_set(e, ERR_INTERNAL, "kv: copying %zu rows from slot %d failed", lcp, p.src);
        memcpy(dst->shadow, src->shadow, lcp * sizeof *src->shadow);
    }
    if (sn) {
        if (kv_state_restore(dst->kv, (int)sn->pos, sn->state) == 0) {
            sn->used = ++L->clock;
            L->snap_resumed++;
        } else { /* cannot happen: a snapshot lies within its slot's rows */
            log_warn("kv: state snapshot at %zu of slot %d not restorable: cold", sn->pos, p.dst);
            lcp = 0;
            done = KVPLAN_COLD;
        }
    }
    kv_truncate(dst->kv, (int)lcp);
    lcp = (size_t)kv_rows(dst->kv); /* <= asked: a sliding-window ring may no longer hold it (kv-ring.md) */
    snap_drop_after(L, dst, lcp);
    dst->n_shadow = lcp;
    dst->head = req->n_head;
    dst->used = ++L->clock;
    dst->busy = true;
    L->cur = dst;
    L->kv_plans[done]++;
    s->slot = dst;
    s->at = lcp;
    s->st = SS_PREFILL;
    s->snap_at[0] = s->snap_at[1] = 0;
    if (L->snaps) { /* the aligned ends of the request's own messages and of the prompt but one */
        size_t a = req->n_head / SNAP_ALIGN * SNAP_ALIGN, b = (n - 1) / SNAP_ALIGN * SNAP_ALIGN;
        s->snap_at[0] = a > lcp ? a : 0;
        s->snap_at[1] = b > lcp && b != a ? b : 0;
    }
    if (s->choice == 0) {
        s->bj->u.cached_tokens = (int64_t)lcp;
        s->bj->job->usage = s->bj->u; /* the prompt side, known before the first event */
    }
    /* debug: the request's own log line already carries cached= (one info line per request) */
    log_debug("kv: %s -> slot %d%s, cached %zu of %zu (head %zu)", KVPLAN_NAMES[p.kind], p.dst,
              p.kind == KVPLAN_COPY && p.src != p.dst ? " (copied)" : "", lcp, n, req->n_head);
    return stream_open(L, s, e);
}

/* n > 1: choice 0's prefill just ended (its rows [0, n_tokens) and the logits of the last prompt
 * token are final): each waiting sibling that finds a free slot copies both instead of prefilling;
 * the others start later through the pool like any request (finding the prompt there). */
static void share_prefill(struct sched *S, struct stream *s0, const float *logits, int *active)
{
    struct llm *L = S->L;
    const struct request *req = &s0->bj->job->req;
    size_t n = req->n_tokens;
    for (int i = 0; i < S->n_s; i++) {
        struct stream *s = &S->s[i];
        if (s->st != SS_SHARE || s->bj != s0->bj) continue;
        s->st = SS_WAIT;
        if (*active >= L->batch || !free_slot(L)) continue;
        struct err e = {0};
        struct kvplan p;
        kvpool_plan(L->slots, L->n_slots, NULL, 0, req->tokens, n, &p);
        struct kvslot *dst = &L->slots[p.dst];
        if (p.spill && L->disk && !kvdisk_contains(L->disk, dst->shadow, dst->n_shadow) &&
            kvdisk_spill(L->disk, dst->kv, dst->shadow, dst->n_shadow, dst->head) == 0)
            L->kv_spills++;
        if (!(s->own = malloc((size_t)L->cfg->n_vocab * sizeof *s->own)) ||
            kv_copy_rows(dst->kv, s0->slot->kv, (int)n) < 0) {
            free(s->own);
            s->own = NULL;
            continue; /* starts later the ordinary way */
        }
        memcpy(s->own, logits, (size_t)L->cfg->n_vocab * sizeof *s->own);
        snap_drop_after(L, dst, 0);
        log_debug("batch: choice %d shares the prefill of choice 0 (%zu rows copied)", s->choice, n);
        memcpy(dst->shadow, s0->slot->shadow, n * sizeof *dst->shadow);
        dst->n_shadow = n;
        dst->head = req->n_head;
        dst->used = ++L->clock;
        dst->busy = true;
        s->slot = dst;
        s->at = n;
        s->have_own = true;
        s->st = SS_DECODE;
        L->kv_plans[KVPLAN_COPY]++;
        (*active)++;
        if (stream_open(L, s, &e) < 0) {
            bjob_fail(S, s->bj, &e);
            return;
        }
    }
}

/* Samples the next token of s from logits (modified in place: bias, mask) and streams it.
 * Returns 0 to go on (s->tok is the next input), 1 when the choice ended (stream_end done), -1
 * on an error in e (the caller fails the request). */
static int stream_sample(struct sched *S, struct stream *s, float *logits, struct err *e)
{
    struct llm *L = S->L;
    struct bjob *bj = s->bj;
    struct job *job = bj->job;
    const struct request *req = &job->req;
    struct sampler_choice ch = {0};
    /* the family's in-reply tool (serve/inline_tool.h): its forced tokens replace sampling */
    bool forced = inline_tool_next(&s->it, &ch.token);
    for (int i = 0; i < req->n_bias && !forced; i++) /* OpenAI logit_bias: before sampling */
        logits[req->bias[i].token] += req->bias[i].bias;
    if (s->mt && !forced) matcher_mask(s->mt, L->mask);
    if (s->mt && !forced && matcher_status(s->mt, e)) { /* a grammar budget (docs/grammar.md) */
        snprintf(e->param, sizeof e->param, "%s", req->constraint_param);
        return -1;
    }
    if (!forced && sampler_sample(s->smp, logits, s->mt ? L->mask : NULL, &ch) < 0) {
        if (s->mt) { /* the grammar allows nothing here: end the reply where it is */
            stream_end(S, s, FINISH_STOP, false);
            return 1;
        }
        return err_set(e, ERR_INTERNAL, "no token can be sampled (all logits -inf or NaN)");
    }
    if (s->mt && !forced && matcher_consume(s->mt, ch.token) < 0) {
        if (matcher_status(s->mt, e))
            snprintf(e->param, sizeof e->param, "%s", req->constraint_param);
        else
            err_set(e, ERR_INTERNAL, "the sampled token %d was not allowed by the grammar", ch.token);
        return -1;
    }
    if (!job->t_first) job->t_first = mono_seconds();
    if (!forced && (tok_is_eog(L->v, ch.token) || is_eot(L, ch.token))) {
        stream_end(S, s, FINISH_STOP, false);
        return 1;
    }
    if (inline_tool_seen(&s->it, ch.token, e) < 0) return -1;
    sampler_accept(s->smp, ch.token);
    bj->u.completion_tokens++;
    if (emitter_in_reasoning(&s->em)) bj->u.reasoning_tokens++;
    struct token_logprob lp = {.token = ch.token, .logprob = ch.logprob,
                               .n_top = ch.n_top < REQ_MAX_TOP_LOGPROBS ? ch.n_top
                                                                        : REQ_MAX_TOP_LOGPROBS};
    memcpy(lp.top_token, ch.top_token, (size_t)lp.n_top * sizeof lp.top_token[0]);
    memcpy(lp.top_logprob, ch.top_logprob, (size_t)lp.n_top * sizeof lp.top_logprob[0]);
    size_t nb = tok_stream_feed(&s->ts, L->v, ch.token, L->out);
    int er = emitter_feed(&s->em, L->out, nb, req->logprobs ? &lp : NULL);
    if (er < 0) {
        if (pipe_cancelled(job->pipe)) return err_set(e, ERR_CANCELLED, "the client went away");
        return err_set(e, ERR_NOMEM, "out of memory while streaming");
    }
    if (er == 1) { /* a stop string fired: the emitter finished the choice */
        stream_end(S, s, FINISH_STOP, true);
        return 1;
    }
    if (s->mt && matcher_done(s->mt) && !inline_tool_pending(&s->it)) { /* only end-of-turn */
        stream_end(S, s, FINISH_STOP, false);
        return 1;
    }
    if (++s->k == s->budget) { /* no forward needed for a token we will not sample */
        stream_end(S, s, FINISH_LENGTH, false);
        return 1;
    }
    s->tok = ch.token;
    return 0;
}

/* Prefill tokens one step may carry: --prefill-chunk when nothing decodes, else BATCH_CHUNK so
 * the decoding streams keep flowing (chunk boundaries do not change logits: batch invariance). */
#define BATCH_CHUNK 64

/* One step: the forward over every started stream, then the sampling. Returns -1 only when the
 * forward itself failed (e: every started stream's request fails). */
static int step(struct sched *S, struct err *e)
{
    struct llm *L = S->L;
    int64_t n = 0;
    int rows = 0, n_dec = 0, n_pre = 0;
    for (int i = 0; i < S->n_s && L->spec; i++) { /* speculating streams: their verify rows */
        struct stream *s = &S->s[i];
        if (s->st != SS_DECODE) continue;
        size_t nv = (size_t)L->cfg->n_vocab;
        if (!s->own) s->own = malloc(nv * sizeof *s->own);
        if (!s->vlog) s->vlog = malloc((size_t)(L->spec + 1) * nv * sizeof *s->vlog);
        if (!s->own || !s->vlog) {
            struct err se = {0};
            err_set(&se, ERR_NOMEM, "out of memory");
            bjob_fail(S, s->bj, &se);
        }
    }
    for (int i = 0; i < S->n_s; i++) { /* decoding streams: their token (+ drafts with --spec) */
        struct stream *s = &S->s[i];
        s->row = -1;
        s->n_rows = 1;
        if (s->st != SS_DECODE || s->have_own) continue;
        int32_t t[SPEC_MAX_DRAFT + 1] = {s->tok};
        int nt = 1;
        if (L->spec) {
            nt = spec_plan(L, s->slot, &s->sps, s->vlog, s->mt, s->tok, s->budget - s->k, s->own, t);
            if (nt == 0) { /* a verify row confirmed: no forward */
                s->have_own = true;
                continue;
            }
        }
        for (int j = 0; j < nt; j++) {
            S->tok[n] = t[j];
            S->pos[n] = (int32_t)s->slot->n_shadow + j;
            S->seq[n] = s->slot->kv;
            S->want[n++] = true;
        }
        s->row = rows;
        s->n_rows = nt;
        rows += nt;
        n_dec++;
    }
    size_t cap = n_dec ? (BATCH_CHUNK < L->chunk ? BATCH_CHUNK : (size_t)L->chunk) : (size_t)L->chunk;
    while (cap > 0) { /* prefilling streams, first-come */
        struct stream *s = NULL;
        for (int i = 0; i < S->n_s; i++) {
            struct stream *c = &S->s[i];
            if (c->st == SS_PREFILL && c->row == -1 && c->at < c->bj->job->req.n_tokens &&
                (!s || c->order < s->order))
                s = c;
        }
        if (!s) break;
        const struct request *req = &s->bj->job->req;
        /* equal chunks (513 = 257 + 256, not 512 + 1): a weight pass costs about as much for
         * 1 token as for 200 */
        size_t todo = req->n_tokens - s->at, nc = (todo + cap - 1) / cap, k = todo / nc;
        if (L->snaps) { /* recurrent: forwards end at multiples of SNAP_ALIGN and at snapshots */
            size_t end = s->at + (todo < cap ? todo : cap);
            for (int j = 0; j < 2; j++)
                if (s->snap_at[j] > s->at && s->snap_at[j] < end) end = s->snap_at[j];
            if (end < req->n_tokens && end / SNAP_ALIGN * SNAP_ALIGN > s->at)
                end = end / SNAP_ALIGN * SNAP_ALIGN;
            k = end - s->at;
        }
        for (size_t t = 0; t < k; t++) {
            S->tok[n] = req->tokens[s->at + t];
            S->pos[n] = (int32_t)(s->at + t);
            S->seq[n] = s->slot->kv;
            S->want[n++] = s->at + t + 1 == req->n_tokens;
        }
        s->row = s->at + k == req->n_tokens ? rows++ : -2; /* -2: in the batch, no logits */
        n_pre++;
        s->at += k;
        cap -= k;
    }
    int width = n_dec + n_pre;
    for (int i = 0; i < S->n_s && width > 1; i++)
        S->shared_verifies += S->s[i].row >= 0 && S->s[i].n_rows > 1;
    if (width != S->width) /* e2e tests read this to see that streams really shared steps */
        log_debug("batch: %d streams in a step (%d decoding, %lld tokens)", width, n_dec,
                  (long long)n);
    S->width = width;
    if (n > 0) {
        struct batch bt = {.token = S->tok, .pos = S->pos, .seq = S->seq, .want_logits = S->want,
                           .n = n};
        if (model_forward(L->m, &bt, L->logits, e) < 0) return -1;
        for (int64_t t = 0; t < n; t++) { /* the shadows follow the rows */
            struct kvslot *sl = NULL;
            for (int i = 0; i < L->n_slots && !sl; i++)
                if (L->slots[i].kv == S->seq[t]) sl = &L->slots[i];
            sl->shadow[S->pos[t]] = S->tok[t];
            sl->n_shadow = (size_t)S->pos[t] + 1;
        }
    }
    for (int i = 0; i < S->n_s && L->snaps && n > 0; i++) { /* prefills that reached a snapshot */
        struct stream *s = &S->s[i];
        if (s->st == SS_PREFILL && s->slot && s->at && (s->at == s->snap_at[0] || s->at == s->snap_at[1]))
            snap_take(L, s->slot, s->at);
    }
    int active = live_streams(S, true);
    for (int i = 0; i < S->n_s; i++) {
        struct stream *s = &S->s[i];
        float *lg;
        if (s->st != SS_PREFILL && s->st != SS_DECODE) continue;
        if (s->st == SS_DECODE && s->have_own) {
            lg = s->own;
            s->have_own = false;
        } else if (s->row >= 0) {
            size_t nv = (size_t)L->cfg->n_vocab;
            lg = L->logits + (size_t)s->row * nv;
            if (s->n_rows > 1) /* a verify: its rows wait for the choices that confirm drafts */
                memcpy(s->vlog, lg, (size_t)s->n_rows * nv * sizeof *s->vlog);
        } else {
            continue;
        }
        s->row = -1;
        if (s->st == SS_PREFILL) {
            s->st = SS_DECODE;
            kv_publish(L); /* before the reply: a client that saw it sees the plan and the rows */
            if (s->choice == 0 && s->bj->job->req.n > 1) share_prefill(S, s, lg, &active);
            if (s->st != SS_DECODE) continue; /* its request failed while sharing */
        }
        struct err se = {0};
        if (stream_sample(S, s, lg, &se) < 0) bjob_fail(S, s->bj, &se);
    }
    return 0;
}

static int llm_generate(struct backend *b, struct job *job, struct err *e)
{
    if (job->req.n_inputs > 0) return llm_embed((struct llm *)b, job, e);
    struct llm *L = (struct llm *)b;
    struct sched S = {.L = L, .n_s = L->batch + REQ_MAX_N};
    /* a step: every stream's token and drafts, plus one prefill chunk */
    S.n_max = L->n_slots * (L->spec + 1) + (L->chunk > BATCH_CHUNK ? L->chunk : BATCH_CHUNK);
    S.s = calloc((size_t)S.n_s, sizeof *S.s);
    S.j = calloc((size_t)S.n_s, sizeof *S.j);
    S.tok = malloc((size_t)S.n_max * sizeof *S.tok);
    S.pos = malloc((size_t)S.n_max * sizeof *S.pos);
    S.seq = malloc((size_t)S.n_max * sizeof *S.seq);
    S.want = malloc((size_t)S.n_max * sizeof *S.want);
    if (!S.s || !S.j || !S.tok || !S.pos || !S.seq || !S.want) {
        free(S.s), free(S.j), free(S.tok), free(S.pos), free(S.seq), free(S.want);
        return err_set(e, ERR_NOMEM, "out of memory");
    }
    admit(&S, job, false);
    for (;;) {
        /* requests already queued join now, later arrivals at the next step */
        while (live_streams(&S, false) < L->batch && job->queue) {
            struct job *j = queue_take(job->queue, gen_job);
            if (!j) break;
            if (pipe_cancelled(j->pipe)) {
                queue_done(j->queue, j);
                continue;
            }
            admit(&S, j, true);
        }
        for (int i = 0; i < S.n_s; i++) /* a client gone ends its streams alone */
            if (S.s[i].st != SS_FREE && pipe_cancelled(S.s[i].bj->job->pipe)) {
                struct err ce;
                err_set(&ce, ERR_CANCELLED, "the client went away");
                bjob_fail(&S, S.s[i].bj, &ce);
            }
        for (;;) { /* waiting streams start, first-come, while slots and room last */
            int active = live_streams(&S, true);
            struct stream *w = NULL;
            for (int i = 0; i < S.n_s; i++)
                if (S.s[i].st == SS_WAIT && (!w || S.s[i].order < w->order)) w = &S.s[i];
            if (!w || active >= L->batch || !free_slot(L)) break;
            struct err se = {0};
            if (stream_start(&S, w, &se) < 0) bjob_fail(&S, w->bj, &se);
        }
        if (live_streams(&S, false) == 0) break;
        struct err fe = {0};
        if (step(&S, &fe) < 0)
            for (int i = 0; i < S.n_s; i++)
                if (S.s[i].st == SS_PREFILL || S.s[i].st == SS_DECODE) bjob_fail(&S, S.s[i].bj, &fe);
    }
    free(S.s), free(S.j), free(S.tok), free(S.pos), free(S.seq), free(S.want);
    if (S.shared_verifies) /* e2e tests read this: verifies rode the batch's weight pass */
        log_debug("batch: %lld verifies shared a step with other streams", (long long)S.shared_verifies);
    if (!S.anchor_failed) return 0;
    *e = S.anchor_e;
    return -1;
}

static int no_done(void *ctx, const struct usage *u)
{
    (void)ctx;
    (void)u;
    return 0;
}

/* Several completions prompts (docs/server.md): one generation per prompt, in order, through the
 * same sink (prompt p's choices at index p * n + i), its `done` held back until the last one,
 * then sent once with the usage summed, as OpenAI reports it. */
static int run_prompts(struct backend *b, struct job *job, struct err *e)
{
    struct request *req = &job->req;
    int (*done)(void *, const struct usage *) = job->sink.done;
    struct usage sum = {0};
    int rc = 0;
    job->sink.done = no_done;
    for (int p = 0; p < req->n_prompts && rc == 0; p++) {
        struct embd_input *in = &req->prompts[p];
        req->tokens = in->tokens; /* lent for this prompt, taken back below */
        req->n_tokens = req->cap_tokens = in->n_tokens;
        req->n_head = in->n_tokens;
        req->choice_base = p * req->n;
        rc = llm_generate(b, job, e);
        req->tokens = NULL;
        req->n_tokens = req->cap_tokens = 0;
        sum.prompt_tokens += job->usage.prompt_tokens;
        sum.completion_tokens += job->usage.completion_tokens;
        sum.cached_tokens += job->usage.cached_tokens;
        sum.reasoning_tokens += job->usage.reasoning_tokens;
        job->usage = sum;
    }
    job->sink.done = done;
    if (rc == 0 && done(job->sink.ctx, &sum) < 0)
        rc = pipe_cancelled(job->pipe) ? cancelled(job, e)
                                       : err_set(e, ERR_NOMEM, "out of memory while streaming");
    return rc;
}

/* The queue's generate: one job, then the KV state published for GET /metrics (the rows its
 * reply added). */
static int llm_run(struct backend *b, struct job *job, struct err *e)
{
    int rc = job->req.n_prompts > 1 && job->req.n_inputs == 0 ? run_prompts(b, job, e)
                                                              : llm_generate(b, job, e);
    kv_publish((struct llm *)b);
    return rc;
}

static void llm_free(struct backend *b)
{
    struct llm *L = (struct llm *)b;
    if (!L) return;
    pthread_mutex_destroy(&L->kv_mu);
    grammar_cache_free(L->gcache);
    grammar_vocab_index_free(L->gvi);
    free(L->g_bytes);
    free(L->g_lens);
    free(L->g_special);
    free(L->mask);
    for (int i = 0; L->snaps && i < L->n_slots * SNAP_MAX; i++) free(L->snaps[i].state);
    free(L->snaps);
    for (int i = 0; L->slots && i < L->n_slots; i++) {
        kv_free(L->slots[i].kv);
        free(L->slots[i].shadow);
    }
    free(L->slots);
    kvdisk_free(L->disk);
    free(L->logits);
    free(L->out);
    free(L->pos);
    free(L->seq);
    vocab_free(L->v);
    model_free(L->m);
    free(L);
}

static const struct backend_ops LLM_OPS = {
    .validate = llm_validate,
    .generate = llm_run,
    .free = llm_free,
    .tokenize = llm_tokenize,
    .token_bytes = llm_token_bytes,
    .kv_stats = llm_kv_stats,
};

/* R-KV-4: the pool's RAM guard, then the slots (pages commit lazily: an overcommit would only
 * surface later, as the kernel evicting the mapped weights), then the disk tier. */
static int kv_slots_new(struct llm *L, const struct backend_llm_opts *o, int n_ctx, long long avail,
                        struct err *e)
{
    int want_b = o->batch > 0 ? o->batch : BATCH_DEFAULT;
    int n = o->kv_slots > 0 ? o->kv_slots : 1;
    if (n < want_b) n = want_b; /* every stream of a batch has its own slot */
    struct kv_cache *probe = kv_new(L->m, n_ctx, e);
    if (!probe) return -1;
    double per = (double)kv_bytes(probe), mib = 1048576.0;
    if (avail > 0) {
        double need = per * n;
        log_info("KV slots: %d x %.1f MiB = %.1f MiB, MemAvailable %.1f MiB", n, per / mib,
                 need / mib, avail / mib);
        if (need > (double)avail && !o->kv_slots_force) {
            long long fit = (long long)((double)avail / 2 / per);
            int k = fit < 1 ? 1 : fit < n ? (int)fit : n;
            log_warn("KV slots: %d x %.1f MiB = %.1f MiB exceeds MemAvailable %.1f MiB: clamped to "
                     "%d slots (%.1f MiB, half of available; --kv-slots-force keeps %d)", n,
                     per / mib, need / mib, avail / mib, k, k * per / mib, n);
            n = k;
        } else if (need > (double)avail / 2) {
            log_warn("KV slots: %d x %.1f MiB = %.1f MiB is more than half of MemAvailable %.1f "
                     "MiB%s", n, per / mib, need / mib, avail / mib,
                     need > (double)avail ? " (kept: --kv-slots-force)" : "");
        }
    } else {
        log_warn("KV slots: MemAvailable unknown; %d x %.1f MiB not checked", n, per / mib);
    }
    if (!(L->slots = calloc((size_t)n, sizeof *L->slots))) {
        kv_free(probe);
        return err_set(e, ERR_NOMEM, "out of memory");
    }
    L->n_slots = n;
    L->batch = want_b < n ? want_b : n;
    if (L->batch < want_b)
        log_warn("--batch %d: only %d KV slots fit, so at most %d streams decode together (a "
                 "smaller --ctx makes room for more)", want_b, n, L->batch);
    for (int i = 0; i < n; i++) {
        struct kvslot *s = &L->slots[i];
        s->kv = i == 0 ? probe : kv_new(L->m, n_ctx, e);
        if (!s->kv) return -1;
        if (!(s->shadow = malloc((size_t)n_ctx * sizeof *s->shadow)))
            return err_set(e, ERR_NOMEM, "out of memory for %d KV slots", n);
    }
    L->cur = &L->slots[0];
    size_t nf = 0;
    if (kv_state(probe, &nf) && nf) {
        if (!(L->snaps = calloc((size_t)n * SNAP_MAX, sizeof *L->snaps)))
            return err_set(e, ERR_NOMEM, "out of memory");
        L->snap_floats = nf;
        log_info("recurrent state: %zu bytes per sequence; up to %d snapshots per slot (%.1f MiB per slot "
                 "at most, allocated as taken; not priced by the RAM guard)", nf * sizeof(float), SNAP_MAX,
                 (double)nf * sizeof(float) * SNAP_MAX / 1048576.0);
    }
    if (o->kv_cache_dir) {
        struct kvdisk_ident id;
        struct err de = {0};
        kvdisk_ident_of(L->m, L->v, probe, &id);
        if (!(L->disk = kvdisk_open(o->kv_cache_dir, o->kv_disk_slots > 0 ? o->kv_disk_slots : 8,
                                    &id, &de)))
            log_warn("kv disk tier off: %s", de.msg);
        else {
            const struct kvcand *c;
            log_info("kv disk: %s, %d sidecars indexed (at most %d)", o->kv_cache_dir,
                     kvdisk_cands(L->disk, &c), o->kv_disk_slots > 0 ? o->kv_disk_slots : 8);
        }
    }
    return 0;
}

static long long mem_available(void)
{
    return sys_mem_available();
}

struct backend *backend_llm_new(const char *path, const struct backend_llm_opts *o, struct err *e)
{
    struct llm *L = calloc(1, sizeof *L);
    if (!L) {
        err_set(e, ERR_NOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&L->kv_mu, NULL);
    struct model_opts mo = {.n_threads = o->n_threads, .kv_f32 = o->kv_f32, .no_mmap = o->no_mmap,
                         .no_repack = o->no_repack};
    if (!(L->m = model_load(path, &mo, e))) goto fail;
    L->cfg = model_config(L->m);
    if (!(L->v = vocab_load(model_gguf(L->m), e))) goto fail;
    if (vocab_size(L->v) > L->cfg->n_vocab) {
        err_set(e, ERR_FORMAT, "the vocabulary has %d tokens but the model only %d logits",
                vocab_size(L->v), L->cfg->n_vocab);
        goto fail;
    }
    if (!(L->fam = family_find(L->cfg->arch))) {
        err_set(e, ERR_UNSUPPORTED, "no chat template for architecture '%s'", L->cfg->arch);
        goto fail;
    }
    for (const char *const *t = L->fam->end_of_turn; t && *t && L->n_eot < 8; t++) {
        int32_t id = tok_find(L->v, *t, strlen(*t));
        if (id >= 0 && tok_is_special(L->v, id)) L->eot[L->n_eot++] = id;
    }
    struct backend *b = &L->base;
    b->ops = &LLM_OPS;
    b->family = L->fam;
    b->caps = (struct backend_caps){.think = family_think(L->fam) != NULL,
                                    .tools = forced_available(L->fam),
                                    .grammar = false, /* until the vocabulary index is built */
                                    .stop = L->fam->caps.stop,
                                    .system_role = L->fam->caps.system_role};
    {   /* which call markers are single special tokens here (forced-call grammars) */
        const char *mk[FAMILY_TOOL_MARKS];
        int nm = family_tool_marker_texts(L->fam, mk);
        for (int i = 0; i < nm; i++) {
            int32_t id = mk[i] ? tok_find(L->v, mk[i], strlen(mk[i])) : -1;
            if (id >= 0 && tok_is_special(L->v, id)) b->tool_specials |= 1u << i;
        }
    }
    /* model id: --alias, else general.name, else the file name; whitespace becomes '-' (an id
     * is a single word in clients' model fields and URLs: /v1/models/ID) */
    char *name = gguf_get_str(model_gguf(L->m), "general.name", NULL);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(b->model_id, sizeof b->model_id, "%s",
             o->alias && o->alias[0] ? o->alias : name && name[0] ? name : base);
    free(name);
    for (char *c = b->model_id; *c; c++)
        if (*c == ' ' || *c == '\t' || *c == '\n' || *c == '\r') *c = '-';
    bool rnd = false;
    b->random_weights = gguf_find(model_gguf(L->m), MKMODEL_KEY_RANDOM) &&
                        gguf_get_bool(model_gguf(L->m), MKMODEL_KEY_RANDOM, &rnd, NULL) == 0 && rnd;
    if (b->random_weights)
        log_warn("model %s has RANDOM weights (made by lmserve-mkmodel for tests): its replies are noise; "
                 "serve a trained GGUF instead (README: \"Serving a real model\")", b->model_id);
    /* R-MAP-2: the family's recommended settings, then the file's own general.sampling.* */
    family_sampling_params(&L->fam->sampling, model_gguf(L->m), &b->defaults);
    family_sampling_params(&L->fam->sampling_think, model_gguf(L->m), &b->defaults_think);
    b->max_tokens_cap = o->max_tokens > 0 ? o->max_tokens : 1024;
    L->chunk = o->prefill_chunk > 0 ? o->prefill_chunk : PREFILL_CHUNK;

    int n_ctx = o->n_ctx > 0 ? o->n_ctx : L->cfg->n_ctx_train;
    if (n_ctx <= 0) n_ctx = 4096;
    size_t row = kv_bytes_per_row(L->m);
    long long avail = mem_available();
    /* the default context is priced for every slot a batch needs (as llama-server's -np shares
     * its context); a given --ctx stands, and kv_slots_new clamps the slots instead */
    int price = o->n_ctx > 0 ? 1 : o->batch > 0 ? o->batch : BATCH_DEFAULT;
    if (o->n_ctx <= 0 && o->kv_slots > price) price = o->kv_slots;
    if (avail > 0 && row > 0) {
        long long need = (long long)row * n_ctx * price;
        if (need > avail / 2) {
            int fit = (int)(avail / 2 / (long long)row / price);
            if (o->n_ctx > 0)
                log_warn("KV cache: %d positions x %zu B = %.1f MiB exceeds half of available "
                         "memory (%.1f MiB)", n_ctx, row, need / 1048576.0, avail / 1048576.0);
            else {
                log_warn("KV cache: %d slots x %d positions x %zu B = %.1f MiB > half of available "
                         "memory (%.1f MiB): context capped at %d", price, n_ctx, row,
                         need / 1048576.0, avail / 1048576.0, fit);
                n_ctx = fit;
            }
        }
    }
    if (n_ctx < 16) {
        err_set(e, ERR_NOMEM, "not enough memory for a useful KV cache (%d positions)", n_ctx);
        goto fail;
    }
    b->n_ctx = n_ctx;
    b->n_vocab = L->cfg->n_vocab;
    if (kv_slots_new(L, o, n_ctx, avail, e) < 0) goto fail;
    kv_publish(L);
    L->spec = o->spec > SPEC_MAX_DRAFT ? SPEC_MAX_DRAFT : o->spec;
    if (L->spec && L->cfg->state_floats) { /* a rejected draft would need the state before it */
        log_warn("--spec %d: off for %s (a recurrent state cannot be rewound to an accepted prefix)",
                 L->spec, L->cfg->arch);
        L->spec = 0;
    }
    L->logits = malloc((size_t)L->n_slots * (size_t)(L->spec + 1) * (size_t)L->cfg->n_vocab *
                       sizeof *L->logits);
    L->out = malloc(TOK_STREAM_OUT_MAX(tok_max_len(L->v)) + 8);
    L->pos = malloc((size_t)n_ctx * sizeof *L->pos);
    L->seq = malloc((size_t)n_ctx * sizeof *L->seq);
    if (!L->logits || !L->out || !L->pos || !L->seq) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail;
    }
    /* constraints: the vocabulary as the grammar engine sees it (kept alive for the index) */
    int32_t nv = vocab_size(L->v);
    L->g_bytes = malloc((size_t)nv * sizeof *L->g_bytes);
    L->g_lens = malloc((size_t)nv * sizeof *L->g_lens);
    L->g_special = malloc((size_t)nv * sizeof *L->g_special);
    L->mask_words = ((size_t)L->cfg->n_vocab + 31) / 32;
    L->mask = calloc(L->mask_words, sizeof *L->mask); /* words past the vocabulary stay 0 */
    if (!L->g_bytes || !L->g_lens || !L->g_special || !L->mask) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < nv; i++) {
        size_t l = 0;
        L->g_bytes[i] = tok_bytes(L->v, i, &l);
        /* padding ids ([PAD…], unused) are never allowed: the grammar skips len-0 tokens */
        L->g_lens[i] = tok_type(L->v, i) == TOK_UNUSED ? 0 : (uint32_t)l;
        L->g_special[i] = tok_is_special(L->v, i);
    }
    struct grammar_vocab gv = {nv, L->g_bytes, L->g_lens, L->g_special,
                               tok_eot(L->v) >= 0 ? tok_eot(L->v) : tok_eos(L->v)};
    double t0 = mono_seconds();
    if (!(L->gvi = grammar_vocab_index_new(&gv, e))) goto fail;
    if (!(L->gcache = grammar_cache_new(L->gvi, 64))) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail;
    }
    b->caps.grammar = L->fam->caps.grammar;
    b->caps.gbnf = L->fam->caps.grammar; /* GRAMMAR_GBNF */
    log_info("grammar vocabulary index: %d tokens in %.0f ms", nv, (mono_seconds() - t0) * 1e3);
    log_info("model %s: arch %s, %d layers, vocab %d, context %d (KV %.1f MiB)", b->model_id,
             L->cfg->arch, L->cfg->n_layer, L->cfg->n_vocab, n_ctx,
             (double)row * n_ctx / 1048576.0);
    return b;
fail:
    llm_free(&L->base);
    return NULL;
}
