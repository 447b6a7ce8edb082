/* forced — forced tool calls as a grammar (R-TOOL-3).
 *
 * tool_choice `required` / a named function (OpenAI dialects) and `any` / `tool` (Anthropic)
 * become a lark grammar (llguidance dialect) over Qwen3's hermes call shape, exactly the bytes
 * the chat template teaches the model:
 *
 *     <tool_call>\n{"name": "<name>", "arguments": <args>}\n</tool_call>
 *
 * with `<tool_call>` / `</tool_call>` as the special-token terminals (the real model emits them
 * as single tokens), one alternative per candidate tool, and <args> a %json sub-grammar: the
 * tool's JSON Schema when it is enforced, else the permissive {"type":"object"}. Enforced:
 * Anthropic input_schema always; OpenAI parameters only with strict: true (chat:
 * function.strict, responses: the tool's strict). The grammar ends after one call, so the
 * matcher is done and the turn ends there (the reply is exactly the call; the reply scanner,
 * serve/toolcall.h, turns it into the dialect's call object).
 *
 * A forced call excludes response_format / text.format / output_config.format / regex / lark on
 * the same request (400). Pure functions; any thread. */
#ifndef LMS_SERVE_FORCED_H
#define LMS_SERVE_FORCED_H

#include <jansson.h>
#include <stdbool.h>

#include "base/err.h"
#include "serve/request.h"

/* One candidate: name and, when enforced, its schema (borrowed; NULL = permissive object). */
struct forced_tool {
    const char *name;
    const json_t *schema;
};

/* Builds the lark source over n (>= 1) candidates. Returns a malloc'd NUL-terminated string, or
 * NULL with e set (ERR_INVALID for an empty or NUL-holding name or a schema that is not an object
 * or boolean, ERR_NOMEM). */
char *forced_lark(const struct forced_tool *tools, int n, struct err *e);

/* Applies a forced tool_choice to req from the dialect's raw `tools` array (as the client sent
 * it): name = the forced tool (NULL = any declared function tool). The request's constraint
 * becomes CONSTRAINT_LARK with param "tool_choice", reasoning off. Errors (400, param
 * tool_choice): another constraint already set, no candidate tool, an unknown name. */
int forced_apply(struct request *req, enum dialect d, const json_t *tools, const char *name,
                 struct err *e);

/* Reads the dialect's tool_choice from the request body root and, when it forces a call
 * (chat/responses: "required", {"type":"function",…name…}; messages: {"type":"any"},
 * {"type":"tool","name":…}), applies it with forced_apply. Call after every other constraint
 * field was read. grammar / tools: the backend's capabilities (no grammar: 400 unsupported; no tool
 * convention: 400). Returns 0 (forced or not) or -1 with e naming tool_choice. */
int forced_read(enum dialect d, const json_t *root, bool grammar, bool tools, struct request *req,
                struct err *e);

#endif
