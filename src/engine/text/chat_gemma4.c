/* chat_gemma4 — Gemma 4's chat_template (tests/chat/gemma4/template.jinja, the template of
 * google/gemma-4-31B-it as llama.cpp ships it) in C, and below it the gemma4 family descriptor.
 *
 * Each branch mirrors one branch of the Jinja template; the comments quote it. Literal template
 * text is emitted with S() (structure: control tokens real), request text with T() (plain).
 * Python semantics reproduced: `| trim` is str.strip() (Python's whitespace: str.isspace());
 * strip_thinking splits on '<channel|>' and keeps, of each part holding '<|channel>', only the
 * text before its first '<|channel>'.
 *
 * What is rendered: system / developer first (into the system turn, with <|think|> when
 * reasoning is on), user, assistant (as role "model"; an assistant right after an assistant
 * continues the same turn, no new header), later system messages (their own turn), the
 * generation prompt (with the empty thought channel when reasoning is off). What is refused:
 * tools, assistant tool calls and tool results — the template's tool convention (<|tool>
 * declarations, <|tool_call>call:NAME{k:<|"|>v<|"|>}<tool_call|>, <|tool_response>) is not a
 * JSON region, so the descriptor declares no tool convention (tool fields are a 400 on the
 * OpenAI dialects and dropped on /v1/messages before they get here; docs/families.md).
 *
 * bos_token: the template starts with {{ bos_token }}; lmserve adds <bos> as a token (the vocab's
 * add_bos, forced on for gemma4), so the renderer reproduces the template rendered with
 * bos_token = "" (tests/suites/46-chat-gemma4.sh renders Jinja2 that way). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "engine/text/chat_internal.h"
#include "engine/text/family.h"

struct sv {
    const char *p;
    size_t n;
};

static struct sv sv_of(const char *s)
{
    return (struct sv){s, strlen(s)};
}

/* Python's str.isspace() for one code point (bidi class WS, B or S, or category Zs). */
static bool py_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Decodes the code point at p (valid UTF-8: request strings are checked at parse); returns its
 * length. An invalid byte counts as one non-space unit. */
static size_t cp_at(const unsigned char *p, size_t n, uint32_t *cp)
{
    int l = tok_utf8_seq(p, n);
    if (l <= 0) {
        *cp = 0xfffd;
        return 1;
    }
    if (l == 1) *cp = p[0];
    else if (l == 2) *cp = ((p[0] & 0x1fu) << 6) | (p[1] & 0x3fu);
    else if (l == 3) *cp = ((p[0] & 0x0fu) << 12) | ((p[1] & 0x3fu) << 6) | (p[2] & 0x3fu);
    else *cp = ((p[0] & 0x07u) << 18) | ((p[1] & 0x3fu) << 12) | ((p[2] & 0x3fu) << 6) | (p[3] & 0x3fu);
    return (size_t)l;
}

/* str.strip(): Python whitespace off both ends. */
static struct sv sv_trim(struct sv s)
{
    const unsigned char *p = (const unsigned char *)s.p;
    size_t a = 0, b = s.n;
    while (a < b) {
        uint32_t c;
        size_t l = cp_at(p + a, b - a, &c);
        if (!py_space(c)) break;
        a += l;
    }
    while (b > a) { /* step back to the start of the last code point */
        size_t k = b - 1;
        while (k > a && (p[k] & 0xc0) == 0x80 && b - k < 4) k--;
        uint32_t c;
        size_t l = cp_at(p + k, b - k, &c);
        if (k + l != b || !py_space(c)) break;
        b = k;
    }
    return (struct sv){s.p + a, b - a};
}

static const char *sv_find(struct sv s, const char *needle)
{
    size_t m = strlen(needle);
    if (m > s.n) return NULL;
    for (size_t i = 0; i + m <= s.n; i++)
        if (s.p[i] == needle[0] && memcmp(s.p + i, needle, m) == 0) return s.p + i;
    return NULL;
}

static void S(struct chat_prompt *out, const char *s)
{
    chat_emit_struct(out, s);
}
static void T(struct chat_prompt *out, struct sv s)
{
    chat_emit_text(out, s.p, s.n);
}

/* {{- strip_thinking(text) -}}:
 *   for part in text.split('<channel|>'):
 *     result += part.split('<|channel>')[0] if '<|channel>' in part else part
 *   result | trim
 * The kept pieces are collected, then the whole is trimmed. */
static int strip_thinking(struct chat_prompt *out, struct sv text)
{
    struct buf r = {0};
    const char *close = "<channel|>", *open = "<|channel>";
    size_t lc = strlen(close);
    struct sv rest = text;
    for (;;) {
        const char *c = sv_find(rest, close);
        struct sv part = {rest.p, c ? (size_t)(c - rest.p) : rest.n};
        const char *o = sv_find(part, open);
        if (buf_append(&r, part.p, o ? (size_t)(o - part.p) : part.n)) goto nomem;
        if (!c) break;
        rest = (struct sv){c + lc, rest.n - (size_t)(c + lc - rest.p)};
    }
    T(out, sv_trim((struct sv){r.data ? r.data : "", r.len}));
    buf_free(&r);
    return 0;
nomem:
    buf_free(&r);
    out->failed = true;
    return -1;
}

int chat_render_gemma4(const struct chat_msg *m, int n, const struct chat_prompt_opts *o,
                       struct chat_prompt *out, struct err *e)
{
    if (n <= 0 || !m)
        return err_set_param(e, ERR_INVALID, "messages", "the conversation has no messages");
    if (o->tools && json_array_size(o->tools) > 0)
        return err_set_param(e, ERR_UNSUPPORTED, "tools",
                             "the gemma4 family has no tool-call convention in lmserve");
    for (int i = 0; i < n; i++) {
        if ((unsigned)m[i].role >= CHAT_ROLE_COUNT || !m[i].content)
            return err_set_param(e, ERR_INVALID, "messages", "message %d has no role or content", i);
        if (m[i].role == CHAT_TOOL || m[i].n_tool_calls > 0)
            return err_set_param(e, ERR_UNSUPPORTED, "messages",
                                 "message %d: tool calls and tool results are not supported by "
                                 "the gemma4 family in lmserve", i);
    }

    /* {%- if (enable_thinking is defined and enable_thinking) or tools or
     *        messages[0]['role'] in ['system', 'developer'] -%} */
    int first = 0;
    if (o->enable_thinking || m[0].role == CHAT_SYSTEM) {
        S(out, "<|turn>system\n");
        if (o->enable_thinking) S(out, "<|think|>\n");
        if (m[0].role == CHAT_SYSTEM) {
            T(out, sv_trim(sv_of(m[0].content)));
            first = 1; /* loop_messages = messages[1:] */
        }
        S(out, "<turn|>\n");
    }

    /* Every message of loop_messages is now system, user or assistant (tool ones refused), so
     * prev_nt.role is the previous message's role. */
    for (int i = first; i < n; i++) {
        const struct chat_msg *msg = &m[i];
        bool model = msg->role == CHAT_ASSISTANT;
        /* continue_same_model_turn = (role == 'model' and prev_nt.role == 'assistant') */
        if (!(model && i > first && m[i - 1].role == CHAT_ASSISTANT)) {
            S(out, "<|turn>");
            S(out, model ? "model" : msg->role == CHAT_SYSTEM ? "system" : "user");
            S(out, "\n");
        }
        /* reasoning is rendered only beside tool calls (refused above) */
        if (model) {
            if (strip_thinking(out, sv_of(msg->content))) break;
        } else {
            T(out, sv_trim(sv_of(msg->content)));
        }
        /* {{- '<turn|>\n' -}}; a prefill (continue_final) stays open */
        if (!(o->continue_final && i == n - 1 && model)) S(out, "<turn|>\n");
    }

    /* {%- if add_generation_prompt -%} {{- '<|turn>model\n' -}}
     *   {%- if not enable_thinking | default(false) -%} {{- '<|channel>thought\n<channel|>' -}} */
    if (o->add_generation_prompt && !(o->continue_final && m[n - 1].role == CHAT_ASSISTANT)) {
        S(out, "<|turn>model\n");
        if (!o->enable_thinking) S(out, "<|channel>thought\n<channel|>");
    }
    if (out->failed) return err_set(e, ERR_NOMEM, "out of memory rendering the prompt");
    return 0;
}

/* ---- the family descriptor (engine/text/family.h) ---- */

static const char *const GEMMA4_ARCHS[] = {"gemma4", NULL};
/* <turn|> ends a model turn; <eos> ends generation (llama.cpp's gemma4 end-of-generation set
 * also holds <|tool_response>, which only follows a tool call: no convention here). */
static const char *const GEMMA4_END_OF_TURN[] = {"<turn|>", "<eos>", NULL};

const struct family family_gemma4 = {
    .name = "gemma4",
    .archs = GEMMA4_ARCHS,
    .render = chat_render_gemma4,
    /* FNV-1a 64 of tests/chat/gemma4/template.jinja (16,448 bytes) */
    .templates = {0xe5340ed712edbd88ull},
    .caps = {.grammar = true, .reasoning = true, .stop = true, .system_role = true,
             .kv_reuse = true},
    /* <|think|> in the system turn switches thinking on; the model then opens its reply with
     * <|channel>thought\n … <channel|> (the prompt primes an empty one when it is off) */
    .think = {"<|channel>thought", "<channel|>"},
    .tool_style = FAMILY_TOOLS_NONE,
    .tool_call = {NULL, NULL},
    .forced_call = NULL,
    .end_of_turn = GEMMA4_END_OF_TURN,
    /* Gemma 4's generation_config / model card: temperature 1.0, top_k 64, top_p 0.95 */
    .sampling = {.temperature = 1.0f, .top_k = 64, .top_p = 0.95f, .min_p = 0},
    .sampling_think = {.temperature = 1.0f, .top_k = 64, .top_p = 0.95f, .min_p = 0},
};
