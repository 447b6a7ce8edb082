/* chat_internal — helpers shared by the chat renderers (chat.c, chat_<family>.c); not public. */
#ifndef LMS_ENGINE_CHAT_INTERNAL_H
#define LMS_ENGINE_CHAT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/text/chat.h"

/* Appends template structure (text where control tokens are real specials): extends the last
 * span when contiguous. Returns 0, or -1 on allocation failure, which also sets p->failed (so a
 * renderer may emit unchecked and test p->failed once at the end). */
int chat_emit_struct(struct chat_prompt *p, const char *s);
/* Appends plain text (request content: never parsed for control tokens). Same failure rule. */
int chat_emit_text(struct chat_prompt *p, const char *s, size_t n);

/* Python's repr of a finite double (shortest round trip: 0.1, 1e-05, 1e+16, 100.0). chat.c. */
int chat_py_float_repr(double d, struct buf *out);

/* A view of template or request text (not NUL-terminated), and the Python str methods the
 * renderers' templates use on it (chat_sv.c). */
struct chat_sv {
    const char *p;
    size_t n;
};
struct chat_sv chat_sv_of(const char *s);
/* Python's str.isspace() for one code point (bidi class WS, B or S, or category Zs). */
bool chat_py_space(uint32_t c);
/* The code point at p and its length (request strings are valid UTF-8: checked at parse); an
 * invalid byte counts as one non-space unit (U+FFFD, length 1). */
size_t chat_cp_at(const unsigned char *p, size_t n, uint32_t *cp);
/* str.strip(): Python whitespace off both ends (Jinja's | trim). */
struct chat_sv chat_sv_trim(struct chat_sv s);
/* lstrip('\n') / rstrip('\n'). */
struct chat_sv chat_sv_lstrip_nl(struct chat_sv s);
struct chat_sv chat_sv_rstrip_nl(struct chat_sv s);
/* First / last occurrence of needle, or NULL (the templates' separators have no self-overlap, so
 * the last one is Python's split(sep)[-1] boundary). */
const char *chat_sv_find(struct chat_sv s, const char *needle);
const char *chat_sv_find_last(struct chat_sv s, const char *needle);
bool chat_sv_starts(struct chat_sv s, const char *pre);
bool chat_sv_ends(struct chat_sv s, const char *suf);

int chat_render_qwen3(const struct chat_msg *msgs, int n, const struct chat_prompt_opts *opts,
                      struct chat_prompt *out, struct err *e);
int chat_render_qwen35(const struct chat_msg *msgs, int n, const struct chat_prompt_opts *opts,
                       struct chat_prompt *out, struct err *e);
int chat_render_gemma4(const struct chat_msg *msgs, int n, const struct chat_prompt_opts *opts,
                       struct chat_prompt *out, struct err *e);
int chat_render_nanochat(const struct chat_msg *msgs, int n, const struct chat_prompt_opts *opts,
                         struct chat_prompt *out, struct err *e);

#endif
