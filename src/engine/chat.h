/* chat — renders a conversation into the exact prompt text of the model family's own template.
 *
 * The output is text plus the spans that are template structure (where control tokens such as
 * <|im_start|> are real specials); everything else (message content, tool results, tool JSON) is
 * tokenized as plain text, so user text can never forge a role switch. */
#ifndef LMS_ENGINE_CHAT_H
#define LMS_ENGINE_CHAT_H

#include <jansson.h>
#include <stdbool.h>

#include "base/buf.h"
#include "base/err.h"
#include "engine/vocab.h"

enum chat_role { CHAT_SYSTEM, CHAT_USER, CHAT_ASSISTANT, CHAT_TOOL, CHAT_ROLE_COUNT };

struct chat_tool_call {
    char *id;        /* may be NULL */
    char *name;
    char *arguments; /* JSON text exactly as the client sent it (string form) */
};

struct chat_msg {
    enum chat_role role;
    char *content;           /* never NULL ("" when absent) */
    char *reasoning_content; /* assistant; NULL = not given */
    struct chat_tool_call *tool_calls;
    int n_tool_calls;
    char *tool_call_id;      /* role tool */
    char *name;              /* role tool: function name, if known */
};

struct chat_prompt_opts {
    bool add_generation_prompt;
    bool enable_thinking;  /* false: primed empty think block (qwen3) */
    json_t *tools;         /* array of OpenAI-shaped {"type":"function","function":{...}}; borrowed; NULL = none */
};

struct chat_prompt {
    struct buf text;
    struct tok_span *spans; /* template-structure spans */
    size_t n_spans, cap_spans;
};

/* Renders msgs with the template of family `arch` (e.g. "qwen3", "qwen3moe"). */
int chat_render(const char *arch, const struct chat_msg *msgs, int n_msgs,
                const struct chat_prompt_opts *opts, struct chat_prompt *out, struct err *e);
void chat_prompt_free(struct chat_prompt *p);
void chat_msg_free(struct chat_msg *m); /* frees the strings and tool calls of one message */

#endif
