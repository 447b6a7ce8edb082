/* jsonschema — compiles a JSON Schema (draft 2020-12 subset, what llguidance covers) into lark
 * source in llguidance's dialect, which grammar_compile then compiles like any lark grammar.
 *
 * The emitted lark uses only: rules (lowercase), terminals as /regex/ or "literal", sequences,
 * alternation |, grouping ( ), ?, *, +, {m,n}. The start rule is `start`. JSON whitespace between
 * tokens follows llguidance's default (flexible, but none before the first { or after the last }).
 * Unsupported keywords are an error naming the keyword. */
#ifndef LMS_GRAMMAR_JSONSCHEMA_H
#define LMS_GRAMMAR_JSONSCHEMA_H

#include <stddef.h>

#include "base/buf.h"
#include "base/err.h"

/* schema_json: the schema as JSON text. Appends lark text to out. rule_prefix namespaces the
 * emitted rule names (so a %json{...} sub-grammar can be embedded in a larger lark grammar);
 * pass "" for a standalone grammar (then the root rule is `start`, else `<prefix>root`). */
int jsonschema_to_lark(const char *schema_json, size_t len, const char *rule_prefix,
                       struct buf *out, struct err *e);
/* Lark for "any JSON object" (response_format json_object). */
int jsonschema_object_lark(const char *rule_prefix, struct buf *out, struct err *e);

#endif
