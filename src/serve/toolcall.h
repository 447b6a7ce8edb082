/* toolcall — the reply scanner for JSON tool-call regions (R-TOOL-2, R-STREAM-4): the
 * FAMILY_TOOLS_JSON_REGION convention of engine/text/family.h (qwen3's hermes calls, between the
 * markers `<tool_call>` and `</tool_call>`; the markers come from the family's descriptor).
 *
 * A filter between the emitter and the dialect encoder: it is itself a reply_sink (the emitter
 * feeds its text into it) and forwards to the encoder's sink. Text outside
 * `open…close` passes through; a completed region whose body is a JSON object
 * {"name": string, "arguments": object (optional)} becomes one tool_call event (name, and the
 * arguments exactly as the model wrote them); any other region (bad JSON, no name, arguments not
 * an object, or a region the reply never closes) passes through as text, markers intact.
 * Markers and JSON may arrive split across any number of deltas; several calls per reply.
 *
 * Invariants: no byte of a possible open marker reaches the encoder before the scanner
 * knows whether it is one (a proper prefix of the marker at the end of the pending text is held
 * back); whitespace adjacent to a call (between calls, before the first, after the last) is not
 * content and is dropped; everything else is emitted byte for byte, in order.
 * A choice that produced at least one call and ended on end-of-turn finishes FINISH_TOOL_CALLS.
 *
 * Worker thread only. One scanner per choice (toolcall_init again for the next choice). */
#ifndef LMS_SERVE_TOOLCALL_H
#define LMS_SERVE_TOOLCALL_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "base/buf.h"
#include "engine/text/family.h" /* struct family_markers */
#include "serve/request.h"

enum toolcall_mode { TC_TEXT, TC_CALL, TC_MODE_COUNT };

struct toolcall_scanner {
    struct reply_sink *out; /* the encoder's sink (borrowed) */
    struct reply_sink sink; /* feed this to the emitter */
    enum toolcall_mode mode;
    struct buf pend; /* TEXT: held-back tail; CALL: the region's body so far */
    struct buf lead; /* whitespace dropped before the open marker (restored if malformed) */
    struct token_logprob *lp; /* logprobs of tokens whose text is held back */
    int n_lp, cap_lp;
    const char *open, *close; /* the region markers (borrowed from the descriptor) */
    size_t n_open, n_close;
    int n_calls;     /* completed calls so far */
    bool after_call; /* nothing but whitespace since the last call */
    /* appended: the region body's style (JSON_REGION for toolcall_init) and, for the others,
     * the syntax and the request's declared tools (borrowed) */
    enum family_tool_style style;
    const struct family_tool_syntax *syn;
    const json_t *tools;
    struct buf args; /* converted arguments of the call being emitted */
};

/* Sets up a scanner for the call regions between markers m (family_tool_markers(); non-empty,
 * no whitespace, borrowed) forwarding to out; toolcall_sink(sc) is what the emitter writes to. */
void toolcall_init(struct toolcall_scanner *sc, struct reply_sink *out,
                   const struct family_markers *m);
/* The same for family f's call style (f has a tool convention: family_tool_markers(f) non-NULL):
 * JSON regions as above, or the CALL_DICT / XML_PARAMS bodies converted to JSON arguments
 * (toolcall_styles.c). tools: the request's OpenAI-shaped tools (borrowed; the XML style reads a
 * parameter's declared type from it; may be NULL). */
void toolcall_init_family(struct toolcall_scanner *sc, struct reply_sink *out,
                          const struct family *f, const json_t *tools);
void toolcall_deinit(struct toolcall_scanner *sc);
struct reply_sink *toolcall_sink(struct toolcall_scanner *sc);

/* Parses one region body (the bytes between the markers). Returns 0 and sets *name (malloc'd,
 * NUL-terminated) and the arguments' byte span inside body (*args_off, *args_len; an absent or
 * null "arguments" gives the static text "{}" via *args_static), or -1 when the body is not a
 * well-formed call. Exposed for the unit tests. */
int toolcall_parse(const char *body, size_t n, char **name, size_t *args_off, size_t *args_len,
                   const char **args_static);

/* A CALL_DICT body (PREFIX NAME{…}) or an XML_PARAMS body (FN_OPEN NAME>…FN_CLOSE): 0 with
 * *name (malloc'd) and the arguments as one JSON object text in *args, or -1 when the body is
 * not a well-formed call (*name NULL, args empty). Exposed for the unit tests. */
int toolcall_parse_dict(const char *body, size_t n, const struct family_tool_syntax *syn,
                        char **name, struct buf *args);
int toolcall_parse_xml(const char *body, size_t n, const struct family_tool_syntax *syn,
                       const json_t *tools, char **name, struct buf *args);

#endif
