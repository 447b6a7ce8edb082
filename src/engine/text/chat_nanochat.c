/* chat_nanochat — nanochat's conversation rendering (its tokenizer's render_conversation /
 * render_for_completion, docs/nanochat.md "Chat") and the nanochat family descriptor.
 *
 *   <|bos|><|user_start|>U<|user_end|><|assistant_start|>A<|assistant_end|>…<|assistant_start|>
 *
 * A first system message is merged into the first user message as nanochat does it
 * (system + "\n\n" + user); after that the roles must alternate user, assistant, … (nanochat
 * asserts it; here it is a 400 naming the message). Inside an assistant message the calculator's
 * markers, as a reply streamed them (<|python_start|>expr<|python_end|>,
 * <|output_start|>result<|output_end|>), are rendered as those special tokens: they are
 * render_conversation's "python" and "python_output" parts. Everything else is plain text.
 * The leading <|bos|> is not in the text: the server prepends the vocabulary's BOS to every
 * prompt (add_bos, as for gemma4's <bos>), so the ids are render_conversation's.
 * Tools are never rendered (the family has none: the api layer refuses or drops tool fields,
 * R-MAP-3 / R-ANT-1); a message carrying tool calls is refused. */
#include <string.h>

#include <stdio.h>

#include "engine/text/calc.h"
#include "engine/text/chat_internal.h"
#include "engine/text/family.h"

#define S(p, s) chat_emit_struct(p, s)

/* An assistant message's text with its calculator parts as structure. */
static void emit_assistant(struct chat_prompt *out, const char *s)
{
    static const struct { const char *open, *close; } P[] = {
        {"<|python_start|>", "<|python_end|>"},
        {"<|output_start|>", "<|output_end|>"},
    };
    size_t n = strlen(s), at = 0, i = 0;
    while (i < n) {
        int hit = -1;
        const char *end = NULL;
        for (int k = 0; k < 2 && hit < 0; k++) {
            size_t ol = strlen(P[k].open);
            if (n - i >= ol && !memcmp(s + i, P[k].open, ol) &&
                (end = strstr(s + i + ol, P[k].close)))
                hit = k;
        }
        if (hit < 0) {
            i++;
            continue;
        }
        chat_emit_text(out, s + at, i - at);
        S(out, P[hit].open);
        size_t ol = strlen(P[hit].open);
        chat_emit_text(out, s + i + ol, (size_t)(end - (s + i + ol)));
        S(out, P[hit].close);
        i = at = (size_t)(end - s) + strlen(P[hit].close);
    }
    chat_emit_text(out, s + at, n - at);
}

int chat_render_nanochat(const struct chat_msg *m, int n, const struct chat_prompt_opts *o,
                         struct chat_prompt *out, struct err *e)
{
    if (n <= 0) return err_set_param(e, ERR_INVALID, "messages", "messages must not be empty");
    int first = 0;
    if (m[0].role == CHAT_SYSTEM) {
        if (n < 2 || m[1].role != CHAT_USER)
            return err_set_param(e, ERR_INVALID, n < 2 ? "messages" : "messages[1].role",
                                 "nanochat: a system message must be followed by a user message "
                                 "(it is merged into it)");
        first = 1;
    }
    for (int i = first; i < n; i++) {
        enum chat_role want = (i - first) % 2 == 0 ? CHAT_USER : CHAT_ASSISTANT;
        char param[64];
        snprintf(param, sizeof param, "messages[%d].role", i);
        if (m[i].role != want)
            return err_set_param(e, ERR_INVALID, param,
                                 "nanochat: message %d must be from the %s (a system message only "
                                 "first, then user and assistant alternating, user first)",
                                 i, want == CHAT_USER ? "user" : "assistant");
        if (m[i].n_tool_calls > 0) {
            snprintf(param, sizeof param, "messages[%d].tool_calls", i);
            return err_set_param(e, ERR_UNSUPPORTED, param, "nanochat has no tool-call convention");
        }
    }
    bool prefill = o->continue_final && m[n - 1].role == CHAT_ASSISTANT;
    for (int i = first; i < n; i++) {
        if (m[i].role == CHAT_USER) {
            S(out, "<|user_start|>");
            if (i == 1 && first) { /* nanochat: system + "\n\n" + user, one text */
                chat_emit_text(out, m[0].content, strlen(m[0].content));
                chat_emit_text(out, "\n\n", 2);
            }
            chat_emit_text(out, m[i].content, strlen(m[i].content));
            S(out, "<|user_end|>");
        } else {
            S(out, "<|assistant_start|>");
            emit_assistant(out, m[i].content);
            if (!(prefill && i == n - 1)) S(out, "<|assistant_end|>");
        }
    }
    if (o->add_generation_prompt && !prefill) S(out, "<|assistant_start|>");
    if (out->failed) return err_set(e, ERR_NOMEM, "out of memory rendering the prompt");
    return 0;
}

/* ---- the family descriptor (engine/text/family.h) ---- */

static const char *const NANOCHAT_ARCHS[] = {"nanochat", NULL};
static const char *const NANOCHAT_END_OF_TURN[] = {"<|assistant_end|>", "<|bos|>", NULL};

/* nanochat's engine: <|python_start|>expr<|python_end|> -> <|output_start|>value<|output_end|>
 * (engine/text/calc.c evaluates as its use_calculator does). */
static const struct family_inline_tool NANOCHAT_CALCULATOR = {
    .call = {"<|python_start|>", "<|python_end|>"},
    .result = {"<|output_start|>", "<|output_end|>"},
    .run = calc_eval,
};

const struct family family_nanochat = {
    .name = "nanochat",
    .archs = NANOCHAT_ARCHS,
    .render = chat_render_nanochat,
    .templates = {0}, /* nanochat has no Jinja template: the renderer is its tokenizer's code */
    .caps = {.grammar = true, .reasoning = false, .stop = true, .system_role = true,
             .kv_reuse = true},
    .think = {NULL, NULL},
    .tool_style = FAMILY_TOOLS_NONE,
    .tool_call = {NULL, NULL},
    .forced_call = NULL,
    .end_of_turn = NANOCHAT_END_OF_TURN,
    /* R-MAP-2: nanochat's scripts/chat_cli.py defaults (temperature 0.6, top_k 50) */
    .sampling = {.temperature = 0.6f, .top_k = 50, .top_p = 1.0f, .min_p = 0},
    .sampling_think = {.temperature = 0.6f, .top_k = 50, .top_p = 1.0f, .min_p = 0},
    .inline_tool = &NANOCHAT_CALCULATOR,
};
