/* jsonschema_json — loading JSON that jansson refuses as it is (jsonschema_json.c): integers
 * beyond 64 bits become big-integer marker strings (read back exactly by the schema compiler),
 * and with JSONSCHEMA_LOAD_NUL_KEYS a NUL in an object key a placeholder; jsonschema_json_unmark
 * restores both in a serialization (json_dumps output). */
#ifndef LMS_GRAMMAR_JSONSCHEMA_JSON_H
#define LMS_GRAMMAR_JSONSCHEMA_JSON_H

#include <jansson.h>
#include <stdbool.h>

#include "base/buf.h"

#define JSONSCHEMA_LOAD_NUL_KEYS 1u
/* json_loadb / json_load_file, retried on a rewritten text when jansson refuses an integer beyond
 * 64 bits (or, with the option, a NUL in a key); NULL with je as jansson's otherwise. flags must
 * include JSON_ALLOW_NUL for markers to load. *marked (may be NULL): whether markers were made
 * (only then is a marker-shaped string one; otherwise it is the document's own string). */
json_t *jsonschema_json_loadb(const char *text, size_t len, size_t flags, unsigned opts,
                              bool *marked, json_error_t *je);
json_t *jsonschema_json_load_file(const char *path, size_t flags, unsigned opts, bool *marked,
                                  json_error_t *je);
/* The digits (with a leading '-' when negative) of a big-integer marker, or NULL. */
const char *jsonschema_bigint(const json_t *v);
/* Markers in JSON text (as json_dumps writes them) back into numbers / NUL escapes; only for
 * documents loaded with *marked set. */
int jsonschema_json_unmark(struct buf *text);

#endif
