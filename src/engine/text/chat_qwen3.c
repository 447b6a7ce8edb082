/* chat_qwen3 — Qwen3's chat_template (tokenizer_config.json of Qwen3 / Qwen3-MoE) in C.
 *
 * Each branch below mirrors one branch of the Jinja template; the comments quote the template.
 * Literal template text is emitted with S() (structure: control tokens real), anything that comes
 * from the request with T() (plain text). Python string semantics are reproduced exactly:
 * x.split(sep)[-1] is the text after the LAST sep, x.split(sep)[0] the text before the FIRST,
 * strip('\n') / lstrip('\n') / rstrip('\n') remove only newline characters, and "if s" is true
 * for a non-empty string. */
#include <stdbool.h>
#include <string.h>

#include "engine/text/chat_internal.h"
#include "engine/text/family.h"

static bool starts_with(const char *s, const char *pre)
{
    return strncmp(s, pre, strlen(pre)) == 0;
}

static bool ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && memcmp(s + n - m, suf, m) == 0;
}

static const char *role_name(enum chat_role r)
{
    switch (r) {
    case CHAT_SYSTEM:
        return "system";
    case CHAT_USER:
        return "user";
    case CHAT_ASSISTANT:
        return "assistant";
    case CHAT_TOOL:
        return "tool";
    default:
        return "?";
    }
}

/* Emitters: a failed allocation is recorded in out->failed and checked once at the end. */
static void S(struct chat_prompt *out, const char *s)
{
    chat_emit_struct(out, s);
}
static void T(struct chat_prompt *out, struct chat_sv s)
{
    chat_emit_text(out, s.p, s.n);
}

int chat_render_qwen3(const struct chat_msg *m, int n, const struct chat_prompt_opts *o,
                      struct chat_prompt *out, struct err *e)
{
    if (n <= 0 || !m)
        return err_set_param(e, ERR_INVALID, "messages", "the conversation has no messages");
    for (int i = 0; i < n; i++) {
        if ((unsigned)m[i].role >= CHAT_ROLE_COUNT || !m[i].content)
            return err_set_param(e, ERR_INVALID, "messages", "message %d has no role or content",
                                 i);
        for (int j = 0; j < m[i].n_tool_calls; j++)
            if (!m[i].tool_calls[j].name || !m[i].tool_calls[j].arguments)
                return err_set_param(e, ERR_INVALID, "messages",
                                     "message %d: tool call %d has no name or arguments", i, j);
    }
    struct buf tj = {0};

    /* {%- if tools %} ... {%- else %} ... */
    if (o->tools && json_array_size(o->tools) > 0) {
        S(out, "<|im_start|>system\n");
        if (m[0].role == CHAT_SYSTEM) {
            T(out, chat_sv_of(m[0].content));
            S(out, "\n\n");
        }
        S(out,
          "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
          "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
        for (size_t k = 0; k < json_array_size(o->tools); k++) {
            S(out, "\n");
            buf_reset(&tj);
            if (chat_tojson(json_array_get(o->tools, k), &tj)) out->failed = true;
            T(out, ((struct chat_sv){tj.data, tj.len}));
        }
        S(out, "\n</tools>\n\nFor each function call, return a json object with function name and "
               "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
               "{\"name\": <function-name>, \"arguments\": "
               "<args-json-object>}\n</tool_call><|im_end|>\n");
    } else if (m[0].role == CHAT_SYSTEM) {
        S(out, "<|im_start|>system\n");
        T(out, chat_sv_of(m[0].content));
        S(out, "<|im_end|>\n");
    }

    /* ns.last_query_index: the last user message that is not a folded tool response. */
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--) {
        if (m[i].role == CHAT_USER && !(starts_with(m[i].content, "<tool_response>") &&
                                        ends_with(m[i].content, "</tool_response>"))) {
            last_query = i;
            break;
        }
    }

    for (int i = 0; i < n; i++) {
        const struct chat_msg *msg = &m[i];
        if (msg->role == CHAT_USER || (msg->role == CHAT_SYSTEM && i > 0)) {
            S(out, "<|im_start|>");
            S(out, role_name(msg->role));
            S(out, "\n");
            T(out, chat_sv_of(msg->content));
            S(out, "<|im_end|>\n");
        } else if (msg->role == CHAT_ASSISTANT) {
            struct chat_sv content = chat_sv_of(msg->content), reasoning = {"", 0};
            if (msg->reasoning_content) {
                reasoning = chat_sv_of(msg->reasoning_content);
            } else if (chat_sv_find(content, "</think>")) {
                /* content = content.split('</think>')[-1].lstrip('\n')
                 * reasoning =
                 * content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
                const char *last = chat_sv_find_last(content, "</think>");
                const char *first = chat_sv_find(content, "</think>");
                struct chat_sv pre = chat_sv_rstrip_nl((struct chat_sv){content.p, (size_t)(first - content.p)});
                const char *th = chat_sv_find_last(pre, "<think>");
                if (th) pre = (struct chat_sv){th + 7, pre.n - (size_t)(th + 7 - pre.p)};
                reasoning = chat_sv_lstrip_nl(pre);
                const char *after = last + 8;
                content = chat_sv_lstrip_nl((struct chat_sv){after, content.n - (size_t)(after - content.p)});
            }
            if (i > last_query && (i == n - 1 || reasoning.n > 0)) {
                S(out, "<|im_start|>assistant\n<think>\n");
                T(out, chat_sv_rstrip_nl(chat_sv_lstrip_nl(reasoning)));
                S(out, "\n</think>\n\n");
                T(out, chat_sv_lstrip_nl(content));
            } else {
                S(out, "<|im_start|>assistant\n");
                T(out, content);
            }
            for (int j = 0; j < msg->n_tool_calls; j++) {
                if ((j == 0 && content.n > 0) || j > 0) S(out, "\n");
                S(out, "<tool_call>\n{\"name\": \"");
                T(out, chat_sv_of(msg->tool_calls[j].name));
                S(out, "\", \"arguments\": ");
                T(out, chat_sv_of(msg->tool_calls[j].arguments));
                S(out, "}\n</tool_call>");
            }
            if (!(o->continue_final && i == n - 1)) S(out, "<|im_end|>\n");
        } else if (msg->role == CHAT_TOOL) {
            if (i == 0 || m[i - 1].role != CHAT_TOOL) S(out, "<|im_start|>user");
            S(out, "\n<tool_response>\n");
            T(out, chat_sv_of(msg->content));
            S(out, "\n</tool_response>");
            if (i == n - 1 || m[i + 1].role != CHAT_TOOL) S(out, "<|im_end|>\n");
        }
        /* role system at index 0 was rendered above */
    }

    if (o->add_generation_prompt && !(o->continue_final && m[n - 1].role == CHAT_ASSISTANT)) {
        S(out, "<|im_start|>assistant\n");
        if (!o->enable_thinking) S(out, "<think>\n\n</think>\n\n");
    }
    buf_free(&tj);
    if (out->failed) return err_set(e, ERR_NOMEM, "out of memory rendering the prompt");
    return 0;
}

/* ---- the family descriptor (engine/text/family.h) ---- */

/* The forced call in the hermes shape the template teaches (see the tool_calls branch above):
 *     <tool_call>\n{"name": <name>, "arguments": <args>}\n</tool_call>
 * with <tool_call> / </tool_call> as special-token terminals (the real model emits each as one
 * token), one alternative per candidate, <args> a %json sub-grammar of the tool's schema. */
static int qwen3_forced_call(const struct family_tool *tools, int n, struct buf *b)
{
    if (buf_puts(b, "start: ") < 0) return -1;
    for (int i = 0; i < n; i++)
        if (buf_printf(b, "%scall_%d", i ? " | " : "", i) < 0) return -1;
    if (buf_puts(b, "\n") < 0) return -1;
    for (int i = 0; i < n; i++) {
        const char *jn = tools[i].json_name;
        if (buf_printf(b, "call_%d: <tool_call> \"\\n{\\\"name\\\": ", i) < 0 ||
            family_lark_str(b, jn, strlen(jn)) < 0 ||
            buf_printf(b, ", \\\"arguments\\\": \" args_%d \"}\\n\" </tool_call>\n", i) < 0 ||
            buf_printf(b, "args_%d: %%json%s\n", i, tools[i].schema) < 0)
            return -1;
    }
    return 0;
}

static const char *const QWEN3_ARCHS[] = {"qwen3", "qwen3moe", NULL};
static const char *const QWEN3_END_OF_TURN[] = {"<|im_end|>", "<|endoftext|>", NULL};

const struct family family_qwen3 = {
    .name = "qwen3",
    .archs = QWEN3_ARCHS,
    .render = chat_render_qwen3,
    /* FNV-1a 64 of the Qwen3 release tokenizer_config.json chat_template (4116 bytes) */
    .templates = {0x2bfdb7aa9754484eull},
    .caps = {.grammar = true, .reasoning = true, .stop = true, .system_role = true,
             .kv_reuse = true},
    .think = {"<think>", "</think>"},
    .tool_style = FAMILY_TOOLS_JSON_REGION,
    .tool_call = {"<tool_call>", "</tool_call>"},
    .forced_call = qwen3_forced_call,
    .end_of_turn = QWEN3_END_OF_TURN,
    /* R-MAP-2: the model card's settings (no-think 0.7/20/0.8; think 0.6/20/0.95) */
    .sampling = {.temperature = 0.7f, .top_k = 20, .top_p = 0.8f, .min_p = 0},
    .sampling_think = {.temperature = 0.6f, .top_k = 20, .top_p = 0.95f, .min_p = 0},
};
