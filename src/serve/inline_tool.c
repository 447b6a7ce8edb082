/* inline_tool — the state machine of inline_tool.h. */
#include "serve/inline_tool.h"

#include <stdlib.h>
#include <string.h>

static int32_t special(const struct vocab *v, const char *s)
{
    int32_t id = s ? tok_find(v, s, strlen(s)) : -1;
    return id >= 0 && tok_is_special(v, id) ? id : -1;
}

void inline_tool_init(struct inline_tool *it, const struct family_inline_tool *t,
                      const struct vocab *v)
{
    *it = (struct inline_tool){0};
    if (!t || !t->run || !v) return;
    it->call_open = special(v, t->call.open);
    it->call_close = special(v, t->call.close);
    it->res_open = special(v, t->result.open);
    it->res_close = special(v, t->result.close);
    if (it->call_open < 0 || it->call_close < 0 || it->res_open < 0 || it->res_close < 0) return;
    it->t = t;
    it->v = v;
}

void inline_tool_deinit(struct inline_tool *it)
{
    buf_free(&it->call);
    free(it->forced);
    *it = (struct inline_tool){0};
}

bool inline_tool_pending(const struct inline_tool *it) { return it->at < it->n_forced; }

bool inline_tool_next(struct inline_tool *it, int32_t *tok)
{
    if (it->at >= it->n_forced) return false;
    *tok = it->forced[it->at++];
    if (it->at == it->n_forced) it->at = it->n_forced = 0;
    return true;
}

/* Queues result.open, the answer's tokens, result.close. */
static int force(struct inline_tool *it, const struct buf *answer, struct err *e)
{
    size_t n = it->n_forced;
    int32_t open = it->res_open;
    if (n + 1 > it->cap) {
        size_t nc = it->cap ? 2 * it->cap : 64;
        int32_t *p = realloc(it->forced, nc * sizeof *p);
        if (!p) return err_set(e, ERR_NOMEM, "out of memory");
        it->forced = p;
        it->cap = nc;
    }
    it->forced[n++] = open;
    if (tok_encode(it->v, answer->data ? answer->data : "", answer->len, NULL, 0, false,
                   &it->forced, &n, &it->cap, e) < 0)
        return -1;
    if (n + 1 > it->cap) {
        int32_t *p = realloc(it->forced, (n + 1) * sizeof *p);
        if (!p) return err_set(e, ERR_NOMEM, "out of memory");
        it->forced = p;
        it->cap = n + 1;
    }
    it->forced[n++] = it->res_close;
    it->n_forced = n;
    return 0;
}

int inline_tool_seen(struct inline_tool *it, int32_t tok, struct err *e)
{
    if (!it->t) return 0;
    if (tok == it->call_open) {
        it->in_call = true;
        it->too_long = false;
        buf_reset(&it->call);
        return 0;
    }
    if (!it->in_call) return 0;
    if (tok == it->call_close) {
        it->in_call = false;
        if (it->call.len == 0 || it->too_long) return 0; /* an empty call gets no answer */
        struct buf answer = {0};
        int r = it->t->run(it->call.data, it->call.len, &answer);
        int rc = r < 0 ? err_set(e, ERR_NOMEM, "out of memory") : r > 0 ? force(it, &answer, e) : 0;
        buf_free(&answer);
        buf_reset(&it->call);
        return rc;
    }
    size_t len;
    const char *p = tok_bytes(it->v, tok, &len);
    if (it->call.len + len > INLINE_TOOL_MAX_CALL) it->too_long = true;
    else if (buf_append(&it->call, p, len) < 0) return err_set(e, ERR_NOMEM, "out of memory");
    return 0;
}
