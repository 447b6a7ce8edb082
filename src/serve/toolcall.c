#define _GNU_SOURCE /* memmem */
#include "serve/toolcall.h"

#include <assert.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static bool is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* ---- region body parsing ---- */

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && is_ws(s[i]))
        i++;
    return i;
}

/* s[i] is '"': index just past the closing quote (the text is valid JSON). */
static size_t skip_string(const char *s, size_t n, size_t i)
{
    for (i++; i < n; i++) {
        if (s[i] == '\\')
            i++;
        else if (s[i] == '"')
            return i + 1;
    }
    return n;
}

/* Index just past the JSON value starting at s[i] (the text is valid JSON). */
static size_t skip_value(const char *s, size_t n, size_t i)
{
    if (i >= n) return n;
    if (s[i] == '"') return skip_string(s, n, i);
    if (s[i] == '{' || s[i] == '[') {
        int depth = 0;
        while (i < n) {
            char c = s[i];
            if (c == '"') {
                i = skip_string(s, n, i);
                continue;
            }
            if (c == '{' || c == '[')
                depth++;
            else if (c == '}' || c == ']') {
                if (--depth == 0) return i + 1;
            }
            i++;
        }
        return n;
    }
    while (i < n && !is_ws(s[i]) && s[i] != ',' && s[i] != '}' && s[i] != ']')
        i++;
    return i;
}

/* Span of the value of the top-level key spelled exactly `key` (no escapes) in the valid JSON
 * object s[0..n). Returns 0 and the span, or -1 if no such raw key. */
static int value_span(const char *s, size_t n, const char *key, size_t *off, size_t *len)
{
    size_t kl = strlen(key);
    size_t i = skip_ws(s, n, 0);
    if (i >= n || s[i] != '{') return -1;
    i = skip_ws(s, n, i + 1);
    while (i < n && s[i] == '"') {
        size_t k0 = i + 1, k1 = skip_string(s, n, i);
        i = skip_ws(s, n, k1);
        if (i >= n || s[i] != ':') return -1;
        i = skip_ws(s, n, i + 1);
        size_t v0 = i, v1 = skip_value(s, n, i);
        if (k1 - 1 - k0 == kl && memcmp(s + k0, key, kl) == 0) {
            *off = v0;
            *len = v1 - v0;
            return 0;
        }
        i = skip_ws(s, n, v1);
        if (i < n && s[i] == ',') i = skip_ws(s, n, i + 1);
    }
    return -1;
}

int toolcall_parse(const char *body, size_t n, char **name, size_t *args_off, size_t *args_len,
                   const char **args_static)
{
    *name = NULL;
    *args_static = NULL;
    *args_off = *args_len = 0;
    json_error_t je;
    json_t *root = json_loadb(body, n, JSON_REJECT_DUPLICATES, &je);
    if (!root) return -1;
    int rc = -1;
    json_t *jn = json_is_object(root) ? json_object_get(root, "name") : NULL;
    json_t *ja = json_is_object(root) ? json_object_get(root, "arguments") : NULL;
    if (!json_is_string(jn) || json_string_length(jn) == 0) goto out;
    if (strlen(json_string_value(jn)) != json_string_length(jn)) goto out; /* embedded NUL */
    if (ja && !json_is_null(ja) && !json_is_object(ja)) goto out;
    if (!ja || json_is_null(ja)) {
        *args_static = "{}";
    } else if (value_span(body, n, "arguments", args_off, args_len) < 0) {
        goto out; /* the key was spelled with escapes: not the hermes shape */
    }
    if (!(*name = strdup(json_string_value(jn)))) goto out;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

/* ---- the scanner ---- */

/* The invariants of toolcall.h, asserted after every delta (every build; not after a refusal):
 * buffers NUL-terminated once allocated, the logprob list inside its allocation, `lead` only
 * whitespace, and in TEXT at most a proper prefix of the open marker is held after non-blank
 * text (whitespace before it is held too, so only that tail is bounded). */
static void tc_check(const struct toolcall_scanner *sc)
{
    assert(sc->mode >= TC_TEXT && sc->mode < TC_MODE_COUNT);
    assert(!sc->pend.data || (sc->pend.len < sc->pend.cap && sc->pend.data[sc->pend.len] == 0));
    assert(!sc->pend.data ? sc->pend.len == 0 : true);
    assert(sc->n_lp >= 0 && sc->n_lp <= sc->cap_lp && sc->n_calls >= 0);
#ifndef NDEBUG
    for (size_t i = 0; i < sc->lead.len; i++)
        assert(is_ws(sc->lead.data[i]));
    if (sc->mode == TC_TEXT) {
        size_t n = sc->pend.len, i = 0;
        while (i < n && is_ws(sc->pend.data[i]))
            i++;
        /* non-blank held text: at most the marker prefix (< n_open) after its whitespace */
        if (i < n) {
            size_t j = n;
            while (j > 0 && !is_ws(sc->pend.data[j - 1]))
                j--;
            assert(n - j < sc->n_open);
        }
    }
#endif
    (void)sc;
}

static int s_text(void *ctx, int choice, const char *s, size_t n, const struct token_logprob *lp,
                  int n_lp);
static int s_reasoning(void *ctx, int choice, const char *s, size_t n);
static int s_finish(void *ctx, int choice, enum finish_reason why, const char *stop_seq);
static int s_start(void *ctx);
static int s_done(void *ctx, const struct usage *u);
static void s_error(void *ctx, const struct err *e);

void toolcall_init(struct toolcall_scanner *sc, struct reply_sink *out,
                   const struct family_markers *m)
{
    memset(sc, 0, sizeof *sc);
    assert(m && m->open && m->close && m->open[0] && m->close[0]);
    sc->open = m->open;
    sc->close = m->close;
    sc->n_open = strlen(m->open);
    sc->n_close = strlen(m->close);
    sc->out = out;
    sc->mode = TC_TEXT;
    sc->style = FAMILY_TOOLS_JSON_REGION;
    sc->sink = (struct reply_sink){.ctx = sc,
                                   .start = s_start,
                                   .reasoning = s_reasoning,
                                   .text = s_text,
                                   .finish = s_finish,
                                   .done = s_done,
                                   .error = s_error,
                                   .token_text = out->token_text,
                                   .tctx = out->tctx};
}

void toolcall_init_family(struct toolcall_scanner *sc, struct reply_sink *out,
                          const struct family *f, const json_t *tools)
{
    toolcall_init(sc, out, &f->tool_call); /* the caller checked family_tool_markers(f) */
    sc->style = f->tool_style;
    sc->syn = &f->tool_syntax;
    sc->tools = tools;
}

void toolcall_deinit(struct toolcall_scanner *sc)
{
    buf_free(&sc->args);
    buf_free(&sc->pend);
    buf_free(&sc->lead);
    free(sc->lp);
    sc->lp = NULL;
    sc->n_lp = sc->cap_lp = 0;
}

struct reply_sink *toolcall_sink(struct toolcall_scanner *sc)
{
    return &sc->sink;
}

static int s_start(void *ctx)
{
    struct toolcall_scanner *sc = ctx;
    return sc->out->start ? sc->out->start(sc->out->ctx) : 0;
}

static int s_done(void *ctx, const struct usage *u)
{
    struct toolcall_scanner *sc = ctx;
    return sc->out->done(sc->out->ctx, u);
}

static void s_error(void *ctx, const struct err *e)
{
    struct toolcall_scanner *sc = ctx;
    sc->out->error(sc->out->ctx, e);
}

static int s_reasoning(void *ctx, int choice, const char *s, size_t n)
{
    struct toolcall_scanner *sc = ctx;
    return sc->out->reasoning(sc->out->ctx, choice, s, n);
}

static void drop_front(struct buf *b, size_t n)
{
    if (!b->data) return; /* never fed: len and n are 0 */
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    if (b->data) b->data[b->len] = 0;
}

/* Hands s[0..n) to the encoder as text, with every held logprob record. */
static int out_text(struct toolcall_scanner *sc, int choice, const char *s, size_t n)
{
    if (n == 0 && sc->n_lp == 0) return 0;
    int rc = sc->out->text(sc->out->ctx, choice, s, n, sc->lp, sc->n_lp);
    sc->n_lp = 0;
    if (n > 0) sc->after_call = false;
    return rc;
}

/* A region that is not a call: the original bytes, markers intact. */
static int out_region_as_text(struct toolcall_scanner *sc, int choice, const char *body, size_t n,
                              bool closed)
{
    struct buf t = {0};
    if (buf_append(&t, sc->lead.data ? sc->lead.data : "", sc->lead.len) < 0 ||
        buf_append(&t, sc->open, sc->n_open) < 0 || buf_append(&t, body ? body : "", n) < 0 ||
        (closed && buf_append(&t, sc->close, sc->n_close) < 0)) {
        buf_free(&t);
        return -1;
    }
    int rc = out_text(sc, choice, t.data, t.len);
    buf_free(&t);
    buf_reset(&sc->lead);
    return rc;
}

/* Longest suffix of s[0..n) that is a proper prefix of pat. */
static size_t partial_suffix(const char *s, size_t n, const char *pat, size_t plen)
{
    size_t best = 0;
    for (size_t k = 1; k < plen && k <= n; k++)
        if (memcmp(s + n - k, pat, k) == 0) best = k;
    return best;
}

static int step_text(struct toolcall_scanner *sc, int choice, bool *progress)
{
    char *s = sc->pend.data;
    size_t n = sc->pend.len;
    char *hit = n ? memmem(s, n, sc->open, sc->n_open) : NULL;
    if (hit) {
        size_t pos = (size_t)(hit - s), end = pos;
        while (end > 0 && is_ws(s[end - 1]))
            end--;
        buf_reset(&sc->lead);
        if (buf_append(&sc->lead, s + end, pos - end) < 0) return -1;
        if (end > 0) {
            if (out_text(sc, choice, s, end) < 0) return -1;
        } else {
            sc->n_lp = 0; /* only marker / whitespace tokens: not content */
        }
        drop_front(&sc->pend, pos + sc->n_open);
        sc->mode = TC_CALL;
        *progress = true;
        return 0;
    }
    /* hold back a possible marker start and the whitespace before it */
    size_t hold = partial_suffix(s, n, sc->open, sc->n_open);
    while (hold < n && is_ws(s[n - hold - 1]))
        hold++;
    size_t out = n - hold;
    if (out == 0) return 0;
    if (out_text(sc, choice, s, out) < 0) return -1;
    drop_front(&sc->pend, out);
    return 0;
}

static int step_call(struct toolcall_scanner *sc, int choice, bool *progress)
{
    char *s = sc->pend.data;
    size_t n = sc->pend.len;
    char *hit = n ? memmem(s, n, sc->close, sc->n_close) : NULL;
    if (!hit) return 0;
    size_t pos = (size_t)(hit - s);
    char *name = NULL;
    size_t ao = 0, al = 0;
    const char *as = NULL;
    int rc = 0, parsed = -1;
    if (sc->out->tool_call) {
        if (sc->style == FAMILY_TOOLS_CALL_DICT)
            parsed = toolcall_parse_dict(s, pos, sc->syn, &name, &sc->args);
        else if (sc->style == FAMILY_TOOLS_XML_PARAMS)
            parsed = toolcall_parse_xml(s, pos, sc->syn, sc->tools, &name, &sc->args);
        else
            parsed = toolcall_parse(s, pos, &name, &ao, &al, &as);
        if (parsed == 0 && sc->style != FAMILY_TOOLS_JSON_REGION) {
            ao = 0;
            al = sc->args.len;
            s = sc->args.data; /* the converted arguments; the body stays in pend */
        }
    }
    if (parsed == 0) {
        sc->n_lp = 0; /* call tokens carry no content logprobs */
        rc = sc->out->tool_call(sc->out->ctx, choice, name, as ? as : s + ao, as ? strlen(as) : al);
        free(name);
        sc->n_calls++;
        sc->after_call = true;
        buf_reset(&sc->lead);
    } else {
        rc = out_region_as_text(sc, choice, s, pos, true);
    }
    if (rc < 0) return -1;
    drop_front(&sc->pend, pos + sc->n_close);
    sc->mode = TC_TEXT;
    *progress = true;
    return 0;
}

static int push_lp(struct toolcall_scanner *sc, const struct token_logprob *lp, int n_lp)
{
    if (sc->n_lp + n_lp > sc->cap_lp) {
        int cap = sc->cap_lp ? sc->cap_lp : 8;
        while (cap < sc->n_lp + n_lp)
            cap *= 2;
        struct token_logprob *p = realloc(sc->lp, (size_t)cap * sizeof *p);
        if (!p) return -1;
        sc->lp = p;
        sc->cap_lp = cap;
    }
    memcpy(sc->lp + sc->n_lp, lp, (size_t)n_lp * sizeof *lp);
    sc->n_lp += n_lp;
    return 0;
}

static int s_text(void *ctx, int choice, const char *s, size_t n, const struct token_logprob *lp,
                  int n_lp)
{
    struct toolcall_scanner *sc = ctx;
    if (buf_append(&sc->pend, s, n) < 0) return -1;
    if (lp && n_lp > 0 && push_lp(sc, lp, n_lp) < 0) return -1;
    for (;;) {
        bool progress = false;
        int rc = sc->mode == TC_TEXT ? step_text(sc, choice, &progress)
                                     : step_call(sc, choice, &progress);
        if (rc < 0) return -1;
        if (!progress) break;
    }
    tc_check(sc);
    /* logprob records of tokens that produced no content yet wait for the next text */
    if (n == 0 && sc->n_lp > 0 && sc->mode == TC_TEXT && sc->pend.len == 0)
        return out_text(sc, choice, "", 0);
    return 0;
}

static int s_finish(void *ctx, int choice, enum finish_reason why, const char *stop_seq)
{
    struct toolcall_scanner *sc = ctx;
    int rc = 0;
    if (sc->mode == TC_CALL) { /* a region the reply never closed is text */
        rc = out_region_as_text(sc, choice, sc->pend.data, sc->pend.len, false);
    } else {
        size_t n = sc->pend.len, i = 0;
        while (i < n && is_ws(sc->pend.data[i]))
            i++;
        if (!(i == n && sc->after_call)) rc = out_text(sc, choice, sc->pend.data ? sc->pend.data : "", n);
    }
    buf_reset(&sc->pend);
    sc->mode = TC_TEXT;
    if (rc < 0) return -1;
    if (sc->n_calls > 0 && why == FINISH_STOP && !stop_seq) why = FINISH_TOOL_CALLS;
    return sc->out->finish(sc->out->ctx, choice, why, stop_seq);
}
