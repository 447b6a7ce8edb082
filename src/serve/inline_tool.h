/* inline_tool — a tool the server runs inside a reply, as the family descriptor defines it
 * (engine/text/family.h struct family_inline_tool; nanochat's calculator, docs/nanochat.md).
 *
 * Per reply: every chosen token (sampled or forced) goes through inline_tool_seen. The family's
 * call.open token starts a call (again: a new one), the tokens after it are its text, call.close
 * ends it: the text (decoded bytes) goes to the family's run; an answer queues result.open, the
 * answer tokenized as plain text and result.close, which inline_tool_next then hands out one per
 * step in place of sampling. Forced tokens are part of the reply like sampled ones (streamed as
 * text, counted, fed to the model); they are not offered to a grammar (the constraint governs
 * what the model samples). No answer (the family's run declined): nothing is forced.
 * Worker thread only; no allocation until a call happens. */
#ifndef LMS_SERVE_INLINE_TOOL_H
#define LMS_SERVE_INLINE_TOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "engine/text/family.h"
#include "engine/text/vocab.h"

#define INLINE_TOOL_MAX_CALL 65536 /* bytes of one call kept; a longer one gets no answer */

struct inline_tool {
    const struct family_inline_tool *t; /* NULL: off */
    const struct vocab *v;
    int32_t call_open, call_close, res_open, res_close;
    bool in_call, too_long;
    struct buf call;
    int32_t *forced;
    size_t n_forced, at, cap;
};

/* Off (t NULL, or one of its four markers is not a special token of v) or ready. */
void inline_tool_init(struct inline_tool *it, const struct family_inline_tool *t,
                      const struct vocab *v);
void inline_tool_deinit(struct inline_tool *it);
/* True with *tok the next forced token (taken from the queue). */
bool inline_tool_next(struct inline_tool *it, int32_t *tok);
bool inline_tool_pending(const struct inline_tool *it);
/* Token tok was chosen. 0, or -1 with e set (out of memory, a tokenizer failure). */
int inline_tool_seen(struct inline_tool *it, int32_t tok, struct err *e);

#endif
