/* chat_qwen35 — Qwen3.5's chat_template (tests/chat/qwen35/template.jinja: Qwen/Qwen3.5-4B's, the
 * same text as the 35B-A3B release's) in C, and below it the qwen35 family descriptor.
 *
 * Each branch mirrors one branch of the Jinja template; the comments quote it. Literal template
 * text is emitted with S() (structure: control tokens real), request text with T() (plain).
 * Python semantics reproduced: `| trim` is str.strip() (Python's whitespace, str.isspace());
 * x.split(sep)[-1] is the text after the LAST sep, x.split(sep)[0] the text before the FIRST;
 * lstrip('\n') / rstrip('\n') remove newline characters only; "if s" is true for a non-empty
 * string; `v | string` is str(v) (True, None, 1.5) and `v | tojson` Hugging Face's json.dumps.
 *
 * How it differs from Qwen3's (chat_qwen3.c): every content is trimmed; a system message must be
 * the first (a later one is the template's "System message must be at the beginning." error);
 * a conversation with no user query (only tool responses folded into user turns) is its "No user
 * query found" error; an assistant turn after the last user query always carries a <think> block
 * (empty when there is no reasoning); tools are declared as JSON lines but called in XML
 * (<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>),
 * so a call's arguments must be a JSON object (the template iterates `arguments|items`; lmserve
 * keeps the client's JSON text and parses it here, as servers do before such a template); the
 * generation prompt primes the reasoning: `<think>\n` (thinking on, the template's default) or an
 * empty `<think>\n\n</think>\n\n` (off). A first tool message with nothing before it opens no
 * user turn (`loop.previtem` is undefined there), as the template does.
 *
 * Not reproduced: image / video content parts (the request mapping refuses non-text parts before
 * they get here) and the template's joining of text parts (it concatenates them; the request
 * mapping has already joined them with "\n", docs/qwen35.md). */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "engine/text/chat_internal.h"
#include "engine/text/family.h"

/* Emitters: a failed allocation is recorded in out->failed and checked once at the end. */
static void S(struct chat_prompt *out, const char *s)
{
    chat_emit_struct(out, s);
}
static void T(struct chat_prompt *out, struct chat_sv s)
{
    chat_emit_text(out, s.p, s.n);
}

/* {%- set args_value = args_value | tojson | safe if args_value is mapping or (args_value is
 * sequence and args_value is not string) else args_value | string %}: str() of a scalar as
 * Python has it after json.loads, Hugging Face's tojson of an object or array. */
static int arg_value(const json_t *v, struct buf *b)
{
    switch (json_typeof(v)) {
    case JSON_STRING:
        return buf_append(b, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        return buf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v)) < 0 ? -1 : 0;
    case JSON_REAL:
        return chat_py_float_repr(json_real_value(v), b);
    case JSON_TRUE:
        return buf_puts(b, "True");
    case JSON_FALSE:
        return buf_puts(b, "False");
    case JSON_NULL:
        return buf_puts(b, "None");
    default: /* object, array */
        return chat_tojson(v, b);
    }
}

/* One tool call's parameters: {%- for args_name, args_value in tool_call.arguments|items %}. */
static int render_args(struct chat_prompt *out, const char *args, int i, int j, struct buf *tmp,
                       struct err *e)
{
    json_error_t je;
    json_t *a = json_loads(args, JSON_ALLOW_NUL, &je);
    if (!json_is_object(a)) {
        json_decref(a);
        return err_set_param(e, ERR_INVALID, "messages",
                             "message %d: tool call %d: the arguments must be a JSON object (the "
                             "Qwen3.5 template renders each of its keys as a <parameter=…>)",
                             i, j);
    }
    const char *k;
    json_t *v;
    json_object_foreach(a, k, v)
    {
        S(out, "<parameter=");
        T(out, chat_sv_of(k));
        S(out, ">\n");
        buf_reset(tmp);
        if (arg_value(v, tmp)) out->failed = true;
        T(out, (struct chat_sv){tmp->data ? tmp->data : "", tmp->len});
        S(out, "\n</parameter>\n");
    }
    json_decref(a);
    return 0;
}

int chat_render_qwen35(const struct chat_msg *m, int n, const struct chat_prompt_opts *o,
                       struct chat_prompt *out, struct err *e)
{
    /* {%- if not messages %} raise_exception('No messages provided.') */
    if (n <= 0 || !m)
        return err_set_param(e, ERR_INVALID, "messages", "the conversation has no messages");
    for (int i = 0; i < n; i++) {
        if ((unsigned)m[i].role >= CHAT_ROLE_COUNT || !m[i].content)
            return err_set_param(e, ERR_INVALID, "messages", "message %d has no role or content",
                                 i);
        if (m[i].role == CHAT_SYSTEM && i > 0)
            return err_set_param(e, ERR_INVALID, "messages",
                                 "message %d: a system message must be the first one (the "
                                 "Qwen3.5 template: 'System message must be at the beginning.')",
                                 i);
        for (int j = 0; j < m[i].n_tool_calls; j++)
            if (!m[i].tool_calls[j].name || !m[i].tool_calls[j].arguments)
                return err_set_param(e, ERR_INVALID, "messages",
                                     "message %d: tool call %d has no name or arguments", i, j);
    }
    /* ns.last_query_index: the last user message that is not a folded tool response
     * (content|trim starting with <tool_response> and ending with </tool_response>). */
    int last_query = -1;
    for (int i = n - 1; i >= 0 && last_query < 0; i--) {
        struct chat_sv c = chat_sv_trim(chat_sv_of(m[i].content));
        if (m[i].role == CHAT_USER &&
            !(chat_sv_starts(c, "<tool_response>") && chat_sv_ends(c, "</tool_response>")))
            last_query = i;
    }
    if (last_query < 0)
        return err_set_param(e, ERR_INVALID, "messages",
                             "the conversation has no user query (the Qwen3.5 template: 'No user "
                             "query found in messages.')");

    struct buf tmp = {0};
    bool tools = o->tools && json_array_size(o->tools) > 0;
    /* {%- if tools and tools is iterable and tools is not mapping %} */
    if (tools) {
        S(out, "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n"
               "<tools>");
        for (size_t k = 0; k < json_array_size(o->tools); k++) {
            S(out, "\n");
            buf_reset(&tmp);
            if (chat_tojson(json_array_get(o->tools, k), &tmp)) out->failed = true;
            T(out, (struct chat_sv){tmp.data ? tmp.data : "", tmp.len});
        }
        S(out, "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format "
               "with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n"
               "<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
               "<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
               "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n"
               "<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an "
               "inner <function=...></function> block must be nested within "
               "<tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You "
               "may provide optional reasoning for your function call in natural language BEFORE "
               "the function call, but NOT after\n- If there is no function call available, "
               "answer the question like normal with your current knowledge and do not tell the "
               "user about function calls\n</IMPORTANT>");
        if (m[0].role == CHAT_SYSTEM) {
            struct chat_sv c = chat_sv_trim(chat_sv_of(m[0].content));
            if (c.n) {
                S(out, "\n\n");
                T(out, c);
            }
        }
        S(out, "<|im_end|>\n");
    } else if (m[0].role == CHAT_SYSTEM) {
        S(out, "<|im_start|>system\n");
        T(out, chat_sv_trim(chat_sv_of(m[0].content)));
        S(out, "<|im_end|>\n");
    }

    for (int i = 0; i < n; i++) {
        const struct chat_msg *msg = &m[i];
        struct chat_sv content = chat_sv_trim(chat_sv_of(msg->content));
        if (msg->role == CHAT_USER) {
            S(out, "<|im_start|>user\n");
            T(out, content);
            S(out, "<|im_end|>\n");
        } else if (msg->role == CHAT_ASSISTANT) {
            struct chat_sv reasoning = {"", 0};
            if (msg->reasoning_content) {
                reasoning = chat_sv_of(msg->reasoning_content);
            } else if (chat_sv_find(content, "</think>")) {
                /* reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1]
                 *             .lstrip('\n')
                 * content = content.split('</think>')[-1].lstrip('\n') */
                const char *first = chat_sv_find(content, "</think>");
                const char *last = chat_sv_find_last(content, "</think>");
                struct chat_sv pre = chat_sv_rstrip_nl((struct chat_sv){content.p, (size_t)(first - content.p)});
                const char *th = chat_sv_find_last(pre, "<think>");
                if (th) pre = (struct chat_sv){th + 7, pre.n - (size_t)(th + 7 - pre.p)};
                reasoning = chat_sv_lstrip_nl(pre);
                const char *after = last + 8;
                content = chat_sv_lstrip_nl((struct chat_sv){after, content.n - (size_t)(after - content.p)});
            }
            reasoning = chat_sv_trim(reasoning);
            if (i > last_query) {
                S(out, "<|im_start|>assistant\n<think>\n");
                T(out, reasoning);
                S(out, "\n</think>\n\n");
                T(out, content);
            } else {
                S(out, "<|im_start|>assistant\n");
                T(out, content);
            }
            for (int j = 0; j < msg->n_tool_calls; j++) {
                if (j == 0)
                    S(out, chat_sv_trim(content).n ? "\n\n<tool_call>\n<function=" : "<tool_call>\n<function=");
                else
                    S(out, "\n<tool_call>\n<function=");
                T(out, chat_sv_of(msg->tool_calls[j].name));
                S(out, ">\n");
                if (render_args(out, msg->tool_calls[j].arguments, i, j, &tmp, e)) {
                    buf_free(&tmp);
                    return -1;
                }
                S(out, "</function>\n</tool_call>");
            }
            if (!(o->continue_final && i == n - 1)) S(out, "<|im_end|>\n");
        } else if (msg->role == CHAT_TOOL) {
            /* {%- if loop.previtem and loop.previtem.role != "tool" %} */
            if (i > 0 && m[i - 1].role != CHAT_TOOL) S(out, "<|im_start|>user");
            S(out, "\n<tool_response>\n");
            T(out, content);
            S(out, "\n</tool_response>");
            if (i == n - 1 || m[i + 1].role != CHAT_TOOL) S(out, "<|im_end|>\n");
        }
        /* role system (index 0 only, checked above) was rendered before the loop */
    }

    if (o->add_generation_prompt && !(o->continue_final && m[n - 1].role == CHAT_ASSISTANT)) {
        S(out, "<|im_start|>assistant\n");
        S(out, o->enable_thinking ? "<think>\n" : "<think>\n\n</think>\n\n");
    }
    buf_free(&tmp);
    if (out->failed) return err_set(e, ERR_NOMEM, "out of memory rendering the prompt");
    return 0;
}

/* ---- the family descriptor (engine/text/family.h) ---- */

static const char *const QWEN35_ARCHS[] = {"qwen35", "qwen35moe", NULL};
static const char *const QWEN35_END_OF_TURN[] = {"<|im_end|>", "<|endoftext|>", NULL};

/* Tools: the template's XML calls (<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n
 * </parameter>\n</function>\n</tool_call>) are serve/'s FAMILY_TOOLS_XML_PARAMS style: its reply
 * scanner and its generic forced-call builder (forced_call stays NULL) read the markers below.
 * KV reuse off: the Gated DeltaNet state holds the whole prefix and cannot be cut to a shorter
 * one; the slot pool resumes from state snapshots instead (docs/qwen35.md). */
const struct family family_qwen35 = {
    .name = "qwen35",
    .archs = QWEN35_ARCHS,
    .render = chat_render_qwen35,
    /* FNV-1a 64 of tests/chat/qwen35/template.jinja (7,756 bytes) */
    .templates = {0xf07c510f47fbaca0ull},
    .caps = {.grammar = true, .reasoning = true, .stop = true, .system_role = true,
             .kv_reuse = false},
    .think = {"<think>", "</think>"},
    .think_primed = true,
    .tool_style = FAMILY_TOOLS_XML_PARAMS,
    .tool_call = {"<tool_call>", "</tool_call>"},
    .tool_syntax = {.fn_open = "<function=", .fn_close = "</function>",
                    .param_open = "<parameter=", .param_close = "</parameter>"},
    .end_of_turn = QWEN35_END_OF_TURN,
    /* the model card's settings: thinking (general) 1.0 / top_k 20 / top_p 0.95, instruct
     * (non-thinking, general) 0.7 / 20 / 0.8; its presence_penalty 1.5 is not a descriptor
     * field (the request's own presence_penalty applies) */
    .sampling = {.temperature = 0.7f, .top_k = 20, .top_p = 0.8f, .min_p = 0},
    .sampling_think = {.temperature = 1.0f, .top_k = 20, .top_p = 0.95f, .min_p = 0},
};
