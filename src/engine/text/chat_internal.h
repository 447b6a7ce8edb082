/* chat_internal — helpers shared by the chat renderers (chat.c, chat_<family>.c); not public. */
#ifndef LMS_ENGINE_CHAT_INTERNAL_H
#define LMS_ENGINE_CHAT_INTERNAL_H

#include <stddef.h>

#include "engine/text/chat.h"

/* Appends template structure (text where control tokens are real specials): extends the last
 * span when contiguous. Returns 0, or -1 on allocation failure, which also sets p->failed (so a
 * renderer may emit unchecked and test p->failed once at the end). */
int chat_emit_struct(struct chat_prompt *p, const char *s);
/* Appends plain text (request content: never parsed for control tokens). Same failure rule. */
int chat_emit_text(struct chat_prompt *p, const char *s, size_t n);

/* Python's repr of a finite double (shortest round trip: 0.1, 1e-05, 1e+16, 100.0). chat.c. */
int chat_py_float_repr(double d, struct buf *out);

int chat_render_qwen3(const struct chat_msg *msgs, int n, const struct chat_prompt_opts *opts,
                      struct chat_prompt *out, struct err *e);
int chat_render_qwen35(const struct chat_msg *msgs, int n, const struct chat_prompt_opts *opts,
                       struct chat_prompt *out, struct err *e);
int chat_render_gemma4(const struct chat_msg *msgs, int n, const struct chat_prompt_opts *opts,
                       struct chat_prompt *out, struct err *e);
int chat_render_nanochat(const struct chat_msg *msgs, int n, const struct chat_prompt_opts *opts,
                         struct chat_prompt *out, struct err *e);

#endif
