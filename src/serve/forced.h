/* forced — forced tool calls as a grammar (R-TOOL-3).
 *
 * A forced call (tool_choice `required` / a named function on the OpenAI dialects, `any` /
 * `tool` on Anthropic; read from each dialect's JSON in api/tool_choice.c) becomes a lark grammar
 * (llguidance dialect) of exactly one call, in the family's own call shape: the descriptor's
 * forced-call builder (engine/text/family.h) writes it, e.g. qwen3's hermes shape
 *
 *     <tool_call>\n{"name": "<name>", "arguments": <args>}\n</tool_call>
 *
 * with one alternative per candidate tool and <args> a %json sub-grammar: the tool's JSON Schema
 * when it is enforced, else the permissive {"type":"object"}. The grammar ends after one call,
 * so the matcher is done and the turn ends there (the reply is exactly the call; the reply
 * scanner, serve/toolcall.h, turns it into the dialect's call object).
 *
 * Here: the checks every family shares (names, schemas that must compile), the JSON forms the
 * builder takes, and the request's constraint. A forced call excludes response_format /
 * text.format / output_config.format / regex / lark on the same request (400). Pure functions;
 * any thread. */
#ifndef LMS_SERVE_FORCED_H
#define LMS_SERVE_FORCED_H

#include <jansson.h>
#include <stdbool.h>

#include "base/buf.h"
#include "base/err.h"
#include "engine/text/family.h"
#include "serve/request.h"

#define FORCED_MAX_TOOLS 512

/* One candidate: name and, when enforced, its schema (borrowed; NULL = permissive object). */
struct forced_tool {
    const char *name;
    const json_t *schema;
};

/* Builds the lark source over n (>= 1) candidates with family f's builder. Returns a malloc'd
 * NUL-terminated string, or NULL with e set (ERR_INVALID for an empty or non-UTF-8 name, a
 * schema that is not an object or boolean or does not compile, a family without a forced-call
 * builder; ERR_NOMEM). */
char *forced_lark(const struct family *f, const struct forced_tool *tools, int n, struct err *e);
/* The same knowing which of the family's call markers the vocabulary holds as single special
 * tokens: bit i for family_tool_marker_texts()'s entry i (forced_lark: all). Those become
 * special-token terminals, the others text literals (a stand-in tokenizer without the family's
 * tokens still gets a grammar that can be met). */
char *forced_lark_marks(const struct family *f, unsigned specials, const struct forced_tool *tools,
                        int n, struct err *e);
/* Whether family f can force a call: a tool convention and a builder (the family's own, or its
 * style's generic one). */
bool forced_available(const struct family *f);

/* forced_styles.c: the generic builders of the styles other than JSON_REGION (they read the
 * descriptor's tool_call and tool_syntax). forced_style_build appends the lark source of
 * "exactly one call to one of tools[0..n)" to b; -1 with e set (ERR_INVALID naming a schema
 * keyword the style cannot write, ERR_NOMEM). */
bool forced_style_builds(const struct family *f);
int forced_style_build(const struct family *f, unsigned specials, const struct family_tool *tools,
                       int n, struct buf *b, struct err *e);

/* Makes req's constraint the forced call over cands[0..n) (n >= 1): CONSTRAINT_LARK with param
 * "tool_choice", reasoning off. Errors (400, param tool_choice): another constraint already set,
 * the family has no tool-call convention, and forced_lark's. */
int forced_apply(struct request *req, const struct family *f, unsigned specials,
                 const struct forced_tool *cands, int n, struct err *e);

#endif
