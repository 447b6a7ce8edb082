/* vocab + tokenizer — token table from GGUF (tokenizer.ggml.*), byte-level BPE encode, decode.
 *
 * Token text in GGUF for gpt2-style BPE is in the byte-to-unicode mapped form; vocab keeps both
 * that and the raw bytes each token decodes to (tok_bytes). */
#ifndef LMS_ENGINE_VOCAB_H
#define LMS_ENGINE_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "engine/gguf.h"

enum tok_type { TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3, TOK_USER_DEFINED = 4,
                TOK_UNUSED = 5, TOK_BYTE = 6 };

struct vocab;

struct vocab *vocab_load(const struct gguf *g, struct err *e);
void vocab_free(struct vocab *v);
int32_t vocab_size(const struct vocab *v);
/* Raw bytes the token decodes to (NOT NUL-terminated); specials decode to their text. */
const char *tok_bytes(const struct vocab *v, int32_t id, size_t *len);
bool tok_is_special(const struct vocab *v, int32_t id); /* control / user-defined added tokens */
int32_t tok_eos(const struct vocab *v);  /* -1 if none */
int32_t tok_eot(const struct vocab *v);  /* end of turn (<|im_end|> for qwen3); -1 if none */
int32_t tok_bos(const struct vocab *v);
bool tok_is_eog(const struct vocab *v, int32_t id); /* any end-of-generation token */
int32_t tok_find(const struct vocab *v, const char *text, size_t len); /* exact token text */

/* A span of the input in which control tokens may be matched (template structure). */
struct tok_span { size_t off, len; };

/* Tokenizes text[0..len). Control/added tokens are matched only inside the given spans (pass
 * NULL/0 to treat all text as plain, or parse_all_special to match them anywhere). Appends ids
 * to *out (realloc'd; *n_out updated). */
int tok_encode(const struct vocab *v, const char *text, size_t len, const struct tok_span *spans,
               size_t n_spans, bool parse_all_special, int32_t **out, size_t *n_out, size_t *cap,
               struct err *e);

/* Streaming detokenizer: feeds token bytes, emits only complete UTF-8 (an incomplete code point
 * carries into the next call). Invalid sequences are emitted as U+FFFD. */
struct tok_stream { unsigned char pend[8]; int n_pend; };
/* Appends the complete UTF-8 of token id to out (size >= 64 + token length); returns bytes. */
size_t tok_stream_feed(struct tok_stream *s, const struct vocab *v, int32_t id, char *out);
size_t tok_stream_flush(struct tok_stream *s, char *out);

#endif
