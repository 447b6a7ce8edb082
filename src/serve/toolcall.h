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
};

/* Sets up a scanner for the call regions between markers m (family_tool_markers(); non-empty,
 * no whitespace, borrowed) forwarding to out; toolcall_sink(sc) is what the emitter writes to. */
void toolcall_init(struct toolcall_scanner *sc, struct reply_sink *out,
                   const struct family_markers *m);
void toolcall_deinit(struct toolcall_scanner *sc);
struct reply_sink *toolcall_sink(struct toolcall_scanner *sc);

/* Parses one region body (the bytes between the markers). Returns 0 and sets *name (malloc'd,
 * NUL-terminated) and the arguments' byte span inside body (*args_off, *args_len; an absent or
 * null "arguments" gives the static text "{}" via *args_static), or -1 when the body is not a
 * well-formed call. Exposed for the unit tests. */
int toolcall_parse(const char *body, size_t n, char **name, size_t *args_off, size_t *args_len,
                   const char **args_static);

#endif
