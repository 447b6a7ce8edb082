/* jsonschema — compiles a JSON Schema (draft 2020-12 subset, what llguidance covers) into lark
 * source in llguidance's dialect, which grammar_compile then compiles like any lark grammar.
 *
 * The emitted lark uses only: rules (lowercase), terminals as /regex/ or "literal", sequences,
 * alternation |, grouping ( ), ?, *, +, {m,n}. The start rule is `start`. Between JSON tokens one
 * optional whitespace gap (spaces/tabs, at most one line break, bounded length: compact and
 * indented JSON both match); none before the first token or after the last. Each JSON string is
 * one terminal. Unsupported keywords are an error naming the keyword (docs/jsonschema.md).
 * Pure functions of their inputs: safe to call from any thread. */
#ifndef LMS_GRAMMAR_JSONSCHEMA_H
#define LMS_GRAMMAR_JSONSCHEMA_H

#include <stddef.h>

#include "base/buf.h"
#include "base/err.h"

/* schema_json: the schema as JSON text. Appends lark text to out (nothing on failure). rule_prefix
 * namespaces the emitted rule names (every rule is `<prefix>r<N>`, so a %json{...} sub-grammar can
 * be embedded in a larger lark grammar); pass "" for a standalone grammar (then the root rule is
 * `start`, else `<prefix>root`). Returns 0, or -1 with e filled (ERR_INVALID: malformed schema,
 * unsatisfiable, or over a size limit (a 400, not a 413: the body may be small); ERR_UNSUPPORTED:
 * a keyword/construct we cannot compile exactly). */
int jsonschema_to_lark(const char *schema_json, size_t len, const char *rule_prefix,
                       struct buf *out, struct err *e);
/* Lark for "any JSON object" (response_format json_object). */
int jsonschema_object_lark(const char *rule_prefix, struct buf *out, struct err *e);

#endif
