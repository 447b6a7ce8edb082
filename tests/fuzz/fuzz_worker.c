/* libFuzzer target for the worker's reply path (issue 10, "fuzz the worker path"): the emitter
 * (think head / reasoning routing, stop strings, UTF-8 holdback) and, when tools are on, the
 * tool-call scanner behind it, driven with arbitrary token-byte sequences — empty replies, a lone
 * end-of-turn, partial UTF-8, markers and stop strings split across tokens.
 *
 * Input: byte 0 = flags (bit 0 think markers, bit 1 tool scanner, bit 2 logprobs, bits 3-4 number
 * of stop strings, bit 5 finish by length, bit 6 a sink that refuses after byte 1 events, bit 7
 * the scanner's call style is not the JSON region: byte 1's bit 0 picks CALL_DICT (gemma4's
 * syntax) or XML_PARAMS (Qwen3.5's)); byte 1 = refusal point; then each stop string as a length byte (& 7) and its bytes; then tokens,
 * each a length byte (& 15) and its bytes. Shorter inputs mean fewer / empty parts.
 *
 * Checked, besides ASan/UBSan: the sink never sees a NULL pointer, nothing after finish, finish
 * exactly once (unless the sink refused), at most one logprob record per token, no text delta
 * containing a stop string, complete UTF-8 deltas when the input is valid UTF-8, valid JSON
 * object arguments in calls — and split invariance: the same bytes fed as one token give the same
 * reply (merged text, reasoning, calls, finish reason and stop string). Built by `make
 * fuzz-worker`; run by tests/suites/63-worker-fuzz.sh (seeds: tests/fuzz/worker-seeds). */
#define _GNU_SOURCE /* memmem */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "serve/emitter.h"
#include "serve/toolcall.h"

/* qwen3's markers (as its descriptor states them; the target links only the reply path) */
static const struct family_markers THINK_MARKERS = {"<think>", "</think>"};
static const struct family_markers TOOL_MARKERS = {"<tool_call>", "</tool_call>"};
/* the other call styles, with the markers their descriptors state (gemma4, qwen35) */
static const struct family DICT_FAMILY = {
    .tool_style = FAMILY_TOOLS_CALL_DICT, .tool_call = {"<|tool_call>", "<tool_call|>"},
    .tool_syntax = {.prefix = "call:", .quote = "<|\"|>"}};
static const struct family XML_FAMILY = {
    .tool_style = FAMILY_TOOLS_XML_PARAMS, .tool_call = {"<tool_call>", "</tool_call>"},
    .tool_syntax = {.fn_open = "<function=", .fn_close = "</function>",
                    .param_open = "<parameter=", .param_close = "</parameter>"}};

#define MAX_TOKS 512

struct rec {
    struct buf log; /* merged: T[..] text, R[..] reasoning, C<name>(<args>), F<why>:<stop> */
    char last;      /* kind of the last logged delta ('T', 'R' or 0) to merge runs */
    int finished, events, refuse_at, n_lp;
    const char *const *stop;
    int n_stop;
    bool utf8_input;
};

static void fail(const char *what)
{
    fprintf(stderr, "fuzz-worker: %s\n", what);
    abort();
}

static bool utf8_valid(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (!k || (k == 2 && c < 0xC2) || i + k > n) return false;
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s[i + j] & 0xC0) != 0x80) return false;
        i += k;
    }
    return true;
}

static int count(struct rec *r)
{
    if (r->finished) fail("event after finish");
    r->events++;
    return r->refuse_at > 0 && r->events >= r->refuse_at ? -1 : 0;
}

static void log_delta(struct rec *r, char kind, const char *s, size_t n)
{
    if (!s) fail("delta with a NULL pointer");
    if (n == 0) return;
    if (r->last == kind) {
        r->log.len--; /* drop the closing ']' and extend the run */
        buf_append(&r->log, s, n);
        buf_puts(&r->log, "]");
    } else {
        buf_printf(&r->log, "%c[", kind);
        buf_append(&r->log, s, n);
        buf_puts(&r->log, "]");
    }
    r->last = kind;
}

static int r_text(void *c, int ch, const char *s, size_t n, const struct token_logprob *lp, int nl)
{
    struct rec *r = c;
    int rc = count(r);
    if (nl < 0 || (nl > 0 && !lp)) fail("bad logprob records");
    r->n_lp += nl;
    if (r->utf8_input && !utf8_valid(s, n)) fail("text delta is not complete UTF-8");
    for (int k = 0; k < r->n_stop; k++) {
        size_t sl = strlen(r->stop[k]);
        if (sl && n >= sl && memmem(s, n, r->stop[k], sl)) fail("a stop string reached the client");
    }
    log_delta(r, 'T', s, n);
    return rc;
}

static int r_reason(void *c, int ch, const char *s, size_t n)
{
    struct rec *r = c;
    int rc = count(r);
    if (r->utf8_input && !utf8_valid(s, n)) fail("reasoning delta is not complete UTF-8");
    log_delta(r, 'R', s, n);
    return rc;
}

static int r_call(void *c, int ch, const char *name, const char *args, size_t n)
{
    struct rec *r = c;
    int rc = count(r);
    if (!name || !name[0] || !args) fail("call without a name or arguments");
    json_error_t je;
    json_t *j = json_loadb(args, n, 0, &je);
    if (!json_is_object(j)) fail("call arguments are not a JSON object");
    json_decref(j);
    buf_printf(&r->log, "C%s(", name);
    buf_append(&r->log, args, n);
    buf_puts(&r->log, ")");
    r->last = 0;
    return rc;
}

static int r_finish(void *c, int ch, enum finish_reason why, const char *stop)
{
    struct rec *r = c;
    if (r->finished) fail("finish twice");
    r->finished = 1;
    buf_printf(&r->log, "F%d:%s", (int)why, stop ? stop : "");
    r->last = 0;
    return 0;
}

/* Runs one reply; returns 0, or -1 when the sink refused (then nothing is compared). */
static int run(bool think, bool tools, const struct family *style, bool logprobs, enum finish_reason why,
               const char *const *stop, int n_stop, const char *const *tok, const size_t *len,
               int n_tok, struct rec *r)
{
    struct reply_sink out = {.ctx = r, .reasoning = r_reason, .text = r_text, .finish = r_finish,
                             .tool_call = r_call};
    struct toolcall_scanner sc;
    struct reply_sink *sink = &out;
    if (tools) {
        if (style) toolcall_init_family(&sc, &out, style, NULL);
        else toolcall_init(&sc, &out, &TOOL_MARKERS);
        sink = toolcall_sink(&sc);
    }
    struct emitter em;
    emitter_init(&em, sink, 0, think ? &THINK_MARKERS : NULL, stop, n_stop);
    int rc = 0;
    bool stopped = false;
    for (int i = 0; i < n_tok && rc == 0; i++) {
        struct token_logprob lp = {.token = i, .logprob = -1.0f};
        rc = emitter_feed(&em, tok[i], len[i], logprobs ? &lp : NULL);
        if (rc == 1) stopped = true;
    }
    if (rc == 0) rc = emitter_finish(&em, why);
    if (stopped) {
        rc = 0;
        if (emitter_feed(&em, "x", 1, NULL) != 1) fail("feed after a stop string did not say stopped");
        if (emitter_finish(&em, why) != 0) fail("finish after a stop string is not a no-op");
    }
    emitter_deinit(&em);
    if (tools) toolcall_deinit(&sc);
    if (rc < 0) {
        if (r->refuse_at <= 0) fail("emitter failed without a refusal (OOM?)");
        return -1;
    }
    if (!r->finished) fail("reply ended without finish");
    if (r->n_lp > n_tok) fail("more logprob records than tokens");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    uint8_t flags = data[0];
    bool think = flags & 1, tools = flags & 2, logprobs = flags & 4;
    int n_stop = (flags >> 3) & 3;
    enum finish_reason why = flags & 32 ? FINISH_LENGTH : FINISH_STOP;
    int refuse_at = flags & 64 ? (size > 1 ? data[1] % 16 + 1 : 1) : 0;
    size_t at = size > 1 ? 2 : 1;
    const struct family *style =
        !(flags & 128) ? NULL : size > 1 && (data[1] & 1) ? &XML_FAMILY : &DICT_FAMILY;

    char stop_buf[4][8];
    const char *stop[4];
    for (int k = 0; k < n_stop; k++) {
        size_t l = at < size ? data[at++] & 7 : 0;
        if (at + l > size) l = size - at;
        memcpy(stop_buf[k], data + at, l);
        stop_buf[k][l] = 0;
        l = strlen(stop_buf[k]); /* a stop string is a C string */
        at += l;
        stop[k] = stop_buf[k];
    }
    const char *tok[MAX_TOKS];
    size_t len[MAX_TOKS];
    int n_tok = 0;
    struct buf all = {0};
    while (at < size && n_tok < MAX_TOKS) {
        size_t l = data[at++] & 15;
        if (at + l > size) l = size - at;
        tok[n_tok] = (const char *)data + at;
        len[n_tok++] = l;
        buf_append(&all, data + at, l);
        at += l;
    }
    bool utf8 = utf8_valid(all.data ? all.data : "", all.len);
    for (int k = 0; k < n_stop; k++)
        utf8 = utf8 && utf8_valid(stop[k], strlen(stop[k]));

    struct rec a = {.refuse_at = refuse_at, .stop = stop, .n_stop = n_stop, .utf8_input = utf8};
    int ra = run(think, tools, style, logprobs, why, stop, n_stop, tok, len, n_tok, &a);
    if (ra == 0 && refuse_at == 0) {
        /* the same bytes as one token: the same reply */
        const char *one[1] = {all.data ? all.data : ""};
        size_t one_len[1] = {all.len};
        struct rec b = {.stop = stop, .n_stop = n_stop, .utf8_input = utf8};
        if (run(think, tools, style, logprobs, why, stop, n_stop, one, one_len, 1, &b) != 0)
            fail("one-token run failed");
        const char *la = a.log.data ? a.log.data : "", *lb = b.log.data ? b.log.data : "";
        if (a.log.len != b.log.len || memcmp(la, lb, a.log.len) != 0) {
            fprintf(stderr, "split:   %.*s\none-shot: %.*s\n", (int)a.log.len, la, (int)b.log.len, lb);
            fail("the reply depends on how its bytes were split into tokens");
        }
        buf_free(&b.log);
    }
    buf_free(&a.log);
    buf_free(&all);
    return 0;
}
