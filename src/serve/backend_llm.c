#include "serve/backend_llm.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "engine/text/chat.h"
#include "engine/format/mkmodel_gen.h" /* MKMODEL_KEY_RANDOM */
#include "engine/model.h"
#include "engine/sample/sampler.h"
#include "engine/text/vocab.h"
#include "grammar/grammar.h"
#include "serve/emitter.h"
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
    /* worker-only state */
    struct kvslot *slots; /* R-KV-1: the resident pool (docs/kv-cache.md) */
    int n_slots;
    uint64_t clock;       /* last-used stamps */
    struct kvslot *cur;   /* the slot the running request uses */
    struct kvdisk *disk;  /* R-KV-5 or NULL */
    int chunk;            /* --prefill-chunk */
    float *logits;
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
    float *vlogits; /* (spec + 1) x n_vocab: the verify forward's rows */
    /* GET /metrics: the KV state, counted on the worker (plans, spills) and published under
     * kv_mu after each prefill and each job for the connection threads to read */
    uint64_t kv_plans[KVPLAN_KIND_COUNT], kv_spills;
    pthread_mutex_t kv_mu;
    struct metrics_kv kv_pub;
};

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

static int forward(struct llm *L, const int32_t *toks, size_t n, int32_t pos0, struct err *e)
{
    for (size_t i = 0; i < n; i++) {
        L->pos[i] = pos0 + (int32_t)i;
        L->seq[i] = L->cur->kv;
    }
    struct batch bt = {.token = toks, .pos = L->pos, .seq = L->seq, .n = (int64_t)n};
    if (model_forward(L->m, &bt, L->logits, e) < 0) return -1;
    memcpy(L->cur->shadow + pos0, toks, n * sizeof *toks);
    L->cur->n_shadow = (size_t)pos0 + n;
    return 0;
}

/* R-SPEC-1 (serve/spec.h, docs/speculation.md): the next logits after the chosen token tok. A
 * pending verify row that tok confirms is copied into L->logits with no forward; otherwise the rows
 * of unaccepted drafts are dropped (cache and shadow alike), and tok is fed with a new draft (the
 * context's own continuation, filtered through the grammar with rollback) in one forward that
 * yields logits for every position, or alone when nothing matches. left = tokens still wanted. */
static int spec_step(struct llm *L, struct spec *sp, struct matcher *mt, int32_t tok, int left,
                     struct err *e)
{
    size_t nv = (size_t)L->cfg->n_vocab;
    int64_t keep;
    int row = spec_accept(sp, tok, &keep);
    if (row > 0) {
        memcpy(L->logits, L->vlogits + (size_t)row * nv, nv * sizeof *L->logits);
        return 0;
    }
    struct kvslot *s = L->cur;
    if (keep >= 0) {
        kv_truncate(s->kv, (int)keep);
        s->n_shadow = (size_t)keep;
    }
    int32_t pos0 = (int32_t)s->n_shadow;
    int room = kv_capacity(s->kv) - pos0 - 1, cap = left - 1 < room ? left - 1 : room;
    s->shadow[pos0] = tok; /* the context to match includes tok (fed just below either way) */
    int k = spec_draft(sp, s->shadow, (size_t)pos0 + 1, cap, pos0);
    int n = 0;
    while (n < k && !tok_is_eog(L->v, sp->draft[n]) && (!mt || matcher_consume(mt, sp->draft[n]) == 0))
        n++;
    if (mt && n) matcher_rollback(mt, n);
    sp->n_draft = n;
    if (!n) return forward(L, &tok, 1, pos0, e);
    int32_t t[SPEC_MAX_DRAFT + 1];
    t[0] = tok;
    memcpy(t + 1, sp->draft, (size_t)n * sizeof *t);
    if (model_verify(L->m, s->kv, t, n + 1, pos0, L->vlogits, e) < 0) return -1;
    memcpy(s->shadow + pos0, t, (size_t)(n + 1) * sizeof *t);
    s->n_shadow = (size_t)pos0 + (size_t)n + 1;
    memcpy(L->logits, L->vlogits, nv * sizeof *L->logits);
    return 0;
}

/* A reply ended with drafts pending: their rows go, so the slot holds what plain decoding leaves. */
static void spec_end(struct llm *L, struct spec *sp)
{
    int64_t keep = spec_settle(sp);
    if (keep < 0) return;
    kv_truncate(L->cur->kv, (int)keep);
    L->cur->n_shadow = (size_t)keep;
}

/* Brings a slot to hold the prompt (R-KV-1/2/5: the plan of serve/kvpool, executed here), then
 * prefills the tokens past what it kept; logits of the last prompt token end up in L->logits.
 * Returns the reused row count via *cached. */
static int prefill(struct llm *L, struct job *job, int64_t *cached, struct err *e)
{
    const struct request *req = &job->req;
    size_t n = req->n_tokens;
    const struct kvcand *dc = NULL;
    int nd = kvdisk_cands(L->disk, &dc);
    struct kvplan p;
    kvpool_plan(L->slots, L->n_slots, dc, nd, req->tokens, n, &p);
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
    if (lcp > (size_t)kv_rows(dst->kv)) lcp = (size_t)kv_rows(dst->kv);
    kv_truncate(dst->kv, (int)lcp);
    dst->n_shadow = lcp;
    dst->head = req->n_head;
    dst->used = ++L->clock;
    L->cur = dst;
    *cached = (int64_t)lcp;
    L->kv_plans[done]++;
    /* debug: the request's own log line already carries cached= (one info line per request) */
    log_debug("kv: %s -> slot %d%s, cached %zu of %zu (head %zu)", KVPLAN_NAMES[p.kind], p.dst,
                 p.kind == KVPLAN_COPY && p.src != p.dst ? " (copied)" : "", lcp, n, req->n_head);
    /* In chunks of at most L->chunk: bounded scratch in the forward pass, and a cancel
     * point between chunks. The chunks are of equal size (513 tokens: 257 + 256, not 512 + 1),
     * since a pass over all the weights costs about as much for 1 token as for 200. */
    size_t todo = n - lcp, n_chunks = (todo + (size_t)L->chunk - 1) / (size_t)L->chunk;
    for (size_t c = 0, at = lcp; c < n_chunks; c++) {
        if (pipe_cancelled(job->pipe)) return err_set(e, ERR_CANCELLED, "the client went away");
        size_t k = (todo - (at - lcp)) / (n_chunks - c);
        if (forward(L, req->tokens + at, k, (int32_t)at, e) < 0) return -1;
        at += k;
    }
    kv_publish(L); /* before the reply: a client that saw it sees the plan and the prompt rows */
    return 0;
}

static int cancelled(struct job *job, struct err *e)
{
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

static int llm_generate(struct backend *b, struct job *job, struct err *e)
{
    if (job->req.n_inputs > 0) return llm_embed((struct llm *)b, job, e);
    struct llm *L = (struct llm *)b;
    struct request *req = &job->req;
    struct reply_sink *sink = &job->sink;
    sink->token_text = token_text;
    sink->tctx = L->v;
    struct usage u = {.prompt_tokens = (int64_t)req->n_tokens};
    int rc = -1;
    struct sampler *smp = NULL;
    struct matcher *mt = NULL;
    struct emitter em;
    struct toolcall_scanner tc = {0}; /* R-TOOL-2: between the emitter and the encoder */
    bool em_live = false;
    int budget = req->max_tokens;
    int room = b->n_ctx - (int)req->n_tokens;
    if (budget > room) budget = room;
    for (int c = 0; c < req->n; c++) {
        struct sampler_params sp = req->sp;
        sp.seed = req->sp.seed + (uint64_t)c;
        sp.no_logprob = !req->logprobs; /* only the logprobs encoders read them */
        if (!(smp = sampler_new(&sp, L->cfg->n_vocab, e))) goto out;
        if (req->grammar && !(mt = matcher_new(req->grammar, e))) {
            snprintf(e->param, sizeof e->param, "%s", req->constraint_param);
            goto out;
        }
        int64_t cached = 0;
        if (prefill(L, job, &cached, e) < 0) goto out;
        if (c == 0) {
            u.cached_tokens = cached;
            job->usage = u; /* the prompt side, known before the first event (message_start) */
        }
        for (size_t i = 0; i < req->n_tokens; i++) sampler_accept(smp, req->tokens[i]);
        struct reply_sink *esink = sink;
        if (req->tools && b->caps.tools) {
            toolcall_init(&tc, sink);
            esink = toolcall_sink(&tc);
        }
        emitter_init(&em, esink, req->choice_base + c, b->caps.think && !req->raw,
                     (const char *const *)req->stop,
                     req->n_stop);
        em_live = true;
        struct tok_stream ts = {0};
        struct spec sps;
        spec_init(&sps, L->spec);
        enum finish_reason why = FINISH_LENGTH;
        bool stopped = false;
        for (int k = 0; k < budget; k++) {
            if (pipe_cancelled(job->pipe)) {
                cancelled(job, e);
                goto out;
            }
            struct sampler_choice ch;
            for (int i = 0; i < req->n_bias; i++) /* OpenAI logit_bias: before sampling */
                L->logits[req->bias[i].token] += req->bias[i].bias;
            if (mt) matcher_mask(mt, L->mask);
            if (mt && matcher_status(mt, e)) { /* a grammar budget (docs/grammar.md) */
                snprintf(e->param, sizeof e->param, "%s", req->constraint_param);
                goto out;
            }
            if (sampler_sample(smp, L->logits, mt ? L->mask : NULL, &ch) < 0) {
                if (mt) { /* the grammar allows nothing here: end the reply where it is */
                    why = FINISH_STOP;
                    break;
                }
                err_set(e, ERR_INTERNAL, "no token can be sampled (all logits -inf or NaN)");
                goto out;
            }
            if (mt && matcher_consume(mt, ch.token) < 0) {
                if (matcher_status(mt, e))
                    snprintf(e->param, sizeof e->param, "%s", req->constraint_param);
                else
                    err_set(e, ERR_INTERNAL, "the sampled token %d was not allowed by the grammar",
                            ch.token);
                goto out;
            }
            if (!job->t_first) job->t_first = mono_seconds();
            if (tok_is_eog(L->v, ch.token)) {
                why = FINISH_STOP;
                break;
            }
            sampler_accept(smp, ch.token);
            u.completion_tokens++;
            if (emitter_in_reasoning(&em)) u.reasoning_tokens++;
            struct token_logprob lp = {.token = ch.token, .logprob = ch.logprob,
                                       .n_top = ch.n_top < REQ_MAX_TOP_LOGPROBS ? ch.n_top
                                                                                : REQ_MAX_TOP_LOGPROBS};
            memcpy(lp.top_token, ch.top_token, (size_t)lp.n_top * sizeof lp.top_token[0]);
            memcpy(lp.top_logprob, ch.top_logprob, (size_t)lp.n_top * sizeof lp.top_logprob[0]);
            size_t nb = tok_stream_feed(&ts, L->v, ch.token, L->out);
            int er = emitter_feed(&em, L->out, nb, req->logprobs ? &lp : NULL);
            if (er < 0) {
                if (pipe_cancelled(job->pipe)) cancelled(job, e);
                else err_set(e, ERR_NOMEM, "out of memory while streaming");
                goto out;
            }
            if (er == 1) {
                stopped = true;
                break;
            }
            if (mt && matcher_done(mt)) { /* only end-of-turn can follow: end here */
                why = FINISH_STOP;
                break;
            }
            if (k + 1 == budget) break; /* no forward needed for a token we will not sample */
            if ((L->spec ? spec_step(L, &sps, mt, ch.token, budget - k - 1, e)
                         : forward(L, &ch.token, 1, (int32_t)L->cur->n_shadow, e)) < 0)
                goto out;
        }
        spec_end(L, &sps);
        if (L->spec && sps.n_verify)
            log_debug("spec: %lld verifies, %lld of %lld drafts accepted", (long long)sps.n_verify,
                      (long long)sps.n_accepted, (long long)sps.n_proposed);
        if (!stopped) {
            size_t nb = tok_stream_flush(&ts, L->out);
            if ((nb && emitter_feed(&em, L->out, nb, NULL) < 0) || emitter_finish(&em, why) < 0) {
                if (pipe_cancelled(job->pipe)) cancelled(job, e);
                else err_set(e, ERR_NOMEM, "out of memory while streaming");
                goto out;
            }
        }
        emitter_deinit(&em);
        toolcall_deinit(&tc);
        em_live = false;
        sampler_free(smp);
        smp = NULL;
        matcher_free(mt);
        mt = NULL;
    }
    job->usage = u;
    job->t_end = mono_seconds();
    if (sink->done(sink->ctx, &u) < 0) {
        if (pipe_cancelled(job->pipe)) cancelled(job, e);
        else err_set(e, ERR_NOMEM, "out of memory while streaming");
        goto out;
    }
    rc = 0;
out:
    job->usage = u;
    if (em_live) emitter_deinit(&em);
    toolcall_deinit(&tc);
    sampler_free(smp);
    matcher_free(mt);
    return rc;
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
    for (int i = 0; L->slots && i < L->n_slots; i++) {
        kv_free(L->slots[i].kv);
        free(L->slots[i].shadow);
    }
    free(L->slots);
    kvdisk_free(L->disk);
    free(L->logits);
    free(L->vlogits);
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
    int n = o->kv_slots > 0 ? o->kv_slots : 1;
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
    for (int i = 0; i < n; i++) {
        struct kvslot *s = &L->slots[i];
        s->kv = i == 0 ? probe : kv_new(L->m, n_ctx, e);
        if (!s->kv) return -1;
        if (!(s->shadow = malloc((size_t)n_ctx * sizeof *s->shadow)))
            return err_set(e, ERR_NOMEM, "out of memory for %d KV slots", n);
    }
    L->cur = &L->slots[0];
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
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

struct backend *backend_llm_new(const char *path, const struct backend_llm_opts *o, struct err *e)
{
    struct llm *L = calloc(1, sizeof *L);
    if (!L) {
        err_set(e, ERR_NOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&L->kv_mu, NULL);
    struct model_opts mo = {.n_threads = o->n_threads};
    if (!(L->m = model_load(path, &mo, e))) goto fail;
    L->cfg = model_config(L->m);
    if (!(L->v = vocab_load(model_gguf(L->m), e))) goto fail;
    if (vocab_size(L->v) > L->cfg->n_vocab) {
        err_set(e, ERR_FORMAT, "the vocabulary has %d tokens but the model only %d logits",
                vocab_size(L->v), L->cfg->n_vocab);
        goto fail;
    }
    struct chat_caps cc;
    if (chat_family_caps(L->cfg->arch, &cc, e) < 0) goto fail;
    struct backend *b = &L->base;
    b->ops = &LLM_OPS;
    b->caps = (struct backend_caps){.think = cc.thinking, .tools = cc.tools, .grammar = false,
                                    .stop = true, .system_role = cc.system};
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
    /* R-MAP-2: qwen3 recommended settings (no-think 0.7/20/0.8; think 0.6/20/0.95) */
    sampler_params_init(&b->defaults);
    b->defaults.temperature = 0.7f;
    b->defaults.top_k = 20;
    b->defaults.top_p = 0.8f;
    b->defaults_think = b->defaults;
    b->defaults_think.temperature = 0.6f;
    b->defaults_think.top_p = 0.95f;
    b->max_tokens_cap = o->max_tokens > 0 ? o->max_tokens : 1024;
    L->chunk = o->prefill_chunk > 0 ? o->prefill_chunk : PREFILL_CHUNK;

    int n_ctx = o->n_ctx > 0 ? o->n_ctx : L->cfg->n_ctx_train;
    if (n_ctx <= 0) n_ctx = 4096;
    size_t row = kv_bytes_per_row(L->m);
    long long avail = mem_available();
    if (avail > 0 && row > 0) {
        long long need = (long long)row * n_ctx;
        if (need > avail / 2) {
            int fit = (int)(avail / 2 / (long long)row);
            if (o->n_ctx > 0)
                log_warn("KV cache: %d positions x %zu B = %.1f MiB exceeds half of available "
                         "memory (%.1f MiB)", n_ctx, row, need / 1048576.0, avail / 1048576.0);
            else {
                log_warn("KV cache: %d positions x %zu B = %.1f MiB > half of available memory "
                         "(%.1f MiB): context capped at %d", n_ctx, row, need / 1048576.0,
                         avail / 1048576.0, fit);
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
    L->logits = malloc((size_t)L->cfg->n_vocab * sizeof *L->logits);
    L->out = malloc(TOK_STREAM_OUT_MAX(tok_max_len(L->v)) + 8);
    L->pos = malloc((size_t)n_ctx * sizeof *L->pos);
    L->seq = malloc((size_t)n_ctx * sizeof *L->seq);
    L->spec = o->spec > SPEC_MAX_DRAFT ? SPEC_MAX_DRAFT : o->spec;
    if (L->spec)
        L->vlogits = malloc((size_t)(L->spec + 1) * (size_t)L->cfg->n_vocab * sizeof *L->vlogits);
    if (!L->logits || !L->out || !L->pos || !L->seq || (L->spec && !L->vlogits)) {
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
    b->caps.grammar = true;
    b->caps.gbnf = true; /* GRAMMAR_GBNF */
    log_info("grammar vocabulary index: %d tokens in %.0f ms", nv, (mono_seconds() - t0) * 1e3);
    log_info("model %s: arch %s, %d layers, vocab %d, context %d (KV %.1f MiB)", b->model_id,
             L->cfg->arch, L->cfg->n_layer, L->cfg->n_vocab, n_ctx,
             (double)row * n_ctx / 1048576.0);
    return b;
fail:
    llm_free(&L->base);
    return NULL;
}
