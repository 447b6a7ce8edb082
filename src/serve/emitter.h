/* emitter — turns one choice's stream of decoded bytes into reply events (docs/server.md).
 *
 * States: HEAD (the family has think markers, engine/text/family.h: is the reply opening with the
 * open marker — qwen3's <think> — or a stray close marker?) → REASONING (until the close marker)
 * → TEXT (stop strings held back, never leaked) → STOPPED. The markers come from the family's
 * descriptor; the emitter knows no family.
 * Every delta handed to the sink is complete UTF-8. Worker thread only; no allocation failures
 * are hidden: they surface as -1 from feed/finish. */
#ifndef LMS_SERVE_EMITTER_H
#define LMS_SERVE_EMITTER_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "base/utf8.h" /* utf8_incomplete_tail */
#include "engine/text/family.h" /* struct family_markers */
#include "serve/request.h"

enum emitter_mode { EM_HEAD, EM_REASONING, EM_TEXT, EM_STOPPED, EM_MODE_COUNT };

struct emitter {
    struct reply_sink *sink;
    int choice;
    enum emitter_mode mode;
    bool strip_ws; /* drop leading whitespace of the next section */
    bool strip_nl; /* drop leading newlines (reasoning start) */
    const char *const *stop;
    int n_stop;
    struct buf pend;          /* bytes not yet handed to the sink */
    struct token_logprob *lp; /* logprobs of tokens whose text is (partly) pending */
    int n_lp, cap_lp;
    const char *think_open, *think_close; /* NULL: no reasoning section */
    size_t n_open, n_close;
    int fired;                  /* index of the stop string that fired, -1 none */
    size_t n_text, n_reasoning; /* bytes emitted so far */
};

/* think: the family's think markers (family_think(): NULL = the reply has no reasoning section;
 * borrowed, must outlive the emitter): the reply may open with think->open … think->close. */
void emitter_init(struct emitter *em, struct reply_sink *sink, int choice,
                  const struct family_markers *think, const char *const *stop, int n_stop);
/* Before the first feed: the prompt already opened the reasoning section (the family's
 * think_primed with reasoning on), so the reply starts inside it, up to the close marker. A no-op
 * for an emitter without think markers. */
void emitter_start_in_reasoning(struct emitter *em);
void emitter_deinit(struct emitter *em);
/* Feeds one token's bytes (lp: its logprob record, or NULL). Returns 0 to go on, 1 when a stop
 * string fired (the choice is finished: do not call emitter_finish), -1 when the sink refused
 * (client gone) or on OOM. */
int emitter_feed(struct emitter *em, const char *s, size_t n, const struct token_logprob *lp);
/* Flushes held-back bytes and reports the finish reason. Returns 0 or -1 as above. */
int emitter_finish(struct emitter *em, enum finish_reason why);
/* True when the emitter is still inside a reasoning section. */
bool emitter_in_reasoning(const struct emitter *em);

#endif
