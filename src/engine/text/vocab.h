/* vocab + tokenizer — token table from GGUF (tokenizer.ggml.*), byte-level BPE encode, decode.
 *
 * Token text in GGUF for gpt2-style BPE is in the byte-to-unicode mapped form; vocab keeps the raw
 * bytes each token decodes to (tok_bytes). Added tokens (CONTROL / USER_DEFINED) decode to their
 * text as written.
 *
 * Encoding pipeline (Hugging Face semantics, see docs/tokenizer.md):
 *   1. added tokens are matched first, leftmost-longest; USER_DEFINED ones everywhere, CONTROL
 *      ones only inside the caller's template spans (or everywhere with parse_all_special);
 *   2. each remaining segment: invalid UTF-8 is replaced by U+FFFD (one per maximal subpart, like
 *      Rust's String::from_utf8_lossy), NFC-normalized for the qwen2 pre-tokenizer, split by the
 *      pre-tokenizer regex (PCRE2, Unicode, JIT), and each piece is BPE-merged by merge rank.
 *
 * Thread safety: a loaded vocab is immutable; tok_encode / tok_decode / tok_stream_* may run on
 * any number of threads at once (per-call scratch only). */
#ifndef LMS_ENGINE_VOCAB_H
#define LMS_ENGINE_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "engine/format/gguf.h"

struct hf_tokenizer;

enum tok_type { TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3, TOK_USER_DEFINED = 4,
                TOK_UNUSED = 5, TOK_BYTE = 6 };

struct vocab;

/* Loads tokenizer.ggml.{model,pre,tokens,token_type,merges,*_token_id,add_bos_token}. Models:
 * "gpt2" (byte-level BPE; pre: qwen2, llama-bpe/llama3, gpt2, missing pre: gpt2 with a warning)
 * and "gemma4" (SentencePiece-style BPE over the merges: ▁ for space, <0xNN> byte fallback, no
 * pre-tokenizer, add_bos forced on; also "llama" when merges are present). Every string, id and
 * merge is validated (ERR_FORMAT / ERR_UNSUPPORTED). docs/tokenizer.md. */
struct vocab *vocab_load(const struct gguf *g, struct err *e);
/* Same from a converted Hugging Face tokenizer (tests, tools). */
struct vocab *vocab_from_hf(const struct hf_tokenizer *t, struct err *e);
/* Loads a nanochat tokenizer file (docs/nanochat.md, "The tokenizer file": tiktoken ranks in base64,
 * nanochat's split pattern, its nine special tokens), tiktoken.c. Every field, rank and id is
 * validated (ERR_FORMAT / ERR_UNSUPPORTED / ERR_IO naming the file and the field). bos = eos =
 * <|bos|>, eot = <|assistant_end|>, add_bos on. */
struct vocab *vocab_load_tiktoken(const char *path, struct err *e);
#define VOCAB_NANOCHAT_N_SPECIALS 9
extern const char *const VOCAB_NANOCHAT_SPECIALS[VOCAB_NANOCHAT_N_SPECIALS]; /* in nanochat order */
void vocab_free(struct vocab *v);
int32_t vocab_size(const struct vocab *v);
/* Raw bytes the token decodes to (NOT NUL-terminated); specials decode to their text. Out of
 * range ids give an empty string. */
const char *tok_bytes(const struct vocab *v, int32_t id, size_t *len);
size_t tok_max_len(const struct vocab *v); /* longest tok_bytes of any token */
enum tok_type tok_type(const struct vocab *v, int32_t id);
bool tok_is_special(const struct vocab *v, int32_t id); /* control / user-defined added tokens */
int32_t tok_eos(const struct vocab *v);  /* -1 if none */
int32_t tok_eot(const struct vocab *v);  /* end of turn (<|im_end|> for qwen3); -1 if none */
int32_t tok_bos(const struct vocab *v);
int32_t tok_pad(const struct vocab *v);
bool tok_add_bos(const struct vocab *v);
/* Any end-of-generation token: eos, eot, and control tokens llama.cpp treats as end of
 * generation (<|endoftext|>, <|im_end|>, <|eot_id|>, <|end_of_text|>, <end_of_turn>, ...). */
bool tok_is_eog(const struct vocab *v, int32_t id);
/* Token whose decoded bytes are exactly text[0..len) (added tokens first); -1 if none. */
int32_t tok_find(const struct vocab *v, const char *text, size_t len);

/* A span of the input in which control tokens may be matched (template structure). */
struct tok_span { size_t off, len; };

/* Tokenizes text[0..len). Control tokens are matched only when they lie wholly inside one of the
 * given spans (sorted by off, non-overlapping; pass NULL/0 to treat all text as plain), or
 * anywhere with parse_all_special. User-defined added tokens (<think>, <tool_call>, ...) are
 * matched everywhere, as Hugging Face does. Appends ids to *out (realloc'd; *n_out and *cap
 * updated; *out may start NULL with *cap 0). On error *out keeps what it held before. */
int tok_encode(const struct vocab *v, const char *text, size_t len, const struct tok_span *spans,
               size_t n_spans, bool parse_all_special, int32_t **out, size_t *n_out, size_t *cap,
               struct err *e);

/* Appends the raw bytes of ids to out (no UTF-8 repair). Ids out of range: ERR_INVALID. */
int tok_decode(const struct vocab *v, const int32_t *ids, size_t n, struct buf *out,
               struct err *e);

/* Streaming detokenizer: feeds token bytes, emits only complete UTF-8 (an incomplete code point
 * carries into the next call). Invalid sequences are emitted as U+FFFD, one per maximal subpart.
 * Zero-initialize (struct tok_stream s = {0}) to start. */
struct tok_stream { unsigned char pend[8]; int n_pend; };
/* Output bound of one feed for a token of n bytes. */
#define TOK_STREAM_OUT_MAX(n) (3 * ((size_t)(n) + 4))
/* Appends the complete UTF-8 of token id to out (room for TOK_STREAM_OUT_MAX(token length),
 * i.e. at most TOK_STREAM_OUT_MAX(tok_max_len(v))); returns the bytes written. */
size_t tok_stream_feed(struct tok_stream *s, const struct vocab *v, int32_t id, char *out);
/* Same for arbitrary bytes (used by the above; handy for callers holding raw bytes). */
size_t tok_stream_feed_bytes(struct tok_stream *s, const char *p, size_t n, char *out);
/* Ends the stream: a pending incomplete sequence becomes one U+FFFD (out: room for 3 bytes). */
size_t tok_stream_flush(struct tok_stream *s, char *out);

/* UTF-8 helpers shared with the emitter: length of the valid sequence at p (1..4), or -k for an
 * invalid maximal subpart of k bytes, or 0 if p[0..n) is a valid but incomplete prefix. */
int tok_utf8_seq(const unsigned char *p, size_t n);
/* Appends s[0..n) to out with invalid sequences replaced by U+FFFD (from_utf8_lossy). */
int tok_utf8_lossy(const char *s, size_t n, struct buf *out);

#endif
