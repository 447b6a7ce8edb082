/* chat — renders a conversation into the exact prompt text of the model family's own template.
 *
 * The output is text plus the spans that are template structure (where control tokens such as
 * <|im_start|> are real specials); everything else (message content, reasoning, tool names,
 * tool-call arguments, tool results, tool JSON) is tokenized as plain text, so user text can never
 * forge a role switch.
 *
 * There is no Jinja engine: each family has a C renderer (chat_qwen3.c for qwen3 / qwen3moe), named
 * by its descriptor (engine/text/family.h; what the template supports is there too), that
 * reproduces its template byte for byte, proven against the real template rendered by Jinja2
 * (tests/suites/45-chat.sh, tests/chat/<case>.json, tests/ref/render_jinja.py).
 *
 * Threading: every function here is pure (no globals); any thread may call them. */
#ifndef LMS_ENGINE_CHAT_H
#define LMS_ENGINE_CHAT_H

#include <jansson.h>
#include <stdbool.h>

#include "base/buf.h"
#include "base/err.h"
#include "engine/text/vocab.h"

enum chat_role { CHAT_SYSTEM, CHAT_USER, CHAT_ASSISTANT, CHAT_TOOL, CHAT_ROLE_COUNT };

struct chat_tool_call {
    char *id; /* may be NULL */
    char *name;
    char *arguments; /* JSON text exactly as the client sent it (string form); an object sent by
                        the client is stored as chat_tojson() of it, which renders identically */
};

struct chat_msg {
    enum chat_role role;
    char *content;           /* never NULL ("" when absent) */
    char *reasoning_content; /* assistant; NULL = not given */
    struct chat_tool_call *tool_calls;
    int n_tool_calls;
    char *tool_call_id; /* role tool */
    char *name;         /* role tool: function name, if known */
};

struct chat_prompt_opts {
    bool add_generation_prompt;
    bool enable_thinking; /* false: primed empty think block (qwen3) */
    bool continue_final;  /* the last message is an assistant prefill: render it open (no
                             end-of-turn after it) so the model continues it; no generation
                             prompt is added (vLLM's continue_final_message) */
    json_t *tools; /* array of OpenAI-shaped {"type":"function","function":{...}}; borrowed; NULL =
                      none */
};

struct chat_prompt {
    struct buf text;
    struct tok_span *spans; /* template-structure spans, ascending, non-overlapping, merged */
    size_t n_spans, cap_spans;
    bool failed; /* an allocation failed while rendering (chat_render then returns ERR_NOMEM) */
};

/* Whether tmpl (a model's tokenizer.chat_template) is one the family renderer is known to
 * reproduce byte for byte (fingerprints of the templates it was proven against). False for NULL,
 * an unknown family, or a custom / fine-tuned template: the family renderer is still what
 * chat_render uses, so callers should warn that prompts may differ from the model's template. */
bool chat_template_known(const char *arch, const char *tmpl);

/* Renders msgs with the template of family `arch` (e.g. "qwen3", "qwen3moe"); opts NULL = the
 * generation prompt on, thinking on, no tools. `out` must be
 * zeroed (or previously freed); on success the caller owns it (chat_prompt_free). On failure out
 * is left empty. Errors: ERR_UNSUPPORTED for an unknown family, ERR_INVALID for a conversation
 * the template rejects (no messages, a tool call without name/arguments, tools not an array). */
int chat_render(const char *arch, const struct chat_msg *msgs, int n_msgs,
                const struct chat_prompt_opts *opts, struct chat_prompt *out, struct err *e);
void chat_prompt_free(struct chat_prompt *p);
void chat_msg_free(struct chat_msg *m); /* frees the strings and tool calls of one message */
void chat_msgs_free(struct chat_msg *msgs, int n); /* chat_msg_free on each, then free(msgs) */

/* Converts an OpenAI Chat Completions `messages` array into chat_msg (caller frees with
 * chat_msgs_free). Accepted: role system/developer (-> CHAT_SYSTEM), user, assistant, tool;
 * content as a string, null/absent (-> ""), or an array of {"type":"text","text":...} parts
 * joined with "\n"; assistant reasoning_content (or "reasoning") string; tool_calls
 * [{id,type:"function",function:{name,arguments}}] with arguments a string (kept verbatim) or an
 * object/array (stored as chat_tojson); tool_call_id and name on tool messages.
 * Errors are ERR_INVALID with e->param naming the field (e.g. "messages[2].content"); non-text
 * content parts are ERR_INVALID naming the part type. Strings holding NUL are rejected. */
int chat_msgs_from_openai_json(const json_t *messages, struct chat_msg **out, int *n_out,
                               struct err *e);

/* Appends the JSON text of j exactly as Python's json.dumps(j, ensure_ascii=False) writes it
 * (the `tojson` filter of Hugging Face chat templates): separators ", " and ": ", keys in
 * insertion order, non-ASCII raw, '"' '\\' \n \r \t \b \f escaped, other C0 controls as \u00xx
 * (lowercase hex), '/' and DEL not escaped, floats in Python repr (shortest round-trip digits,
 * "1.0", "1e-05", "1e+16"), integers as decimal. Returns 0, or -1 on allocation failure. */
int chat_tojson(const json_t *j, struct buf *out);

#endif
