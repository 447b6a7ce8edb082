/* grammar — token-level constraints compiled from lark (llguidance dialect), JSON Schema,
 * json_object or a regex. Depends only on base/ and a grammar_vocab (token id -> bytes).
 *
 * Compile once (grammar_compile, shareable, immutable, thread-safe to read), then one matcher per
 * request (matcher_new): mask -> sample -> consume. */
#ifndef LMS_GRAMMAR_GRAMMAR_H
#define LMS_GRAMMAR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

enum grammar_kind { GRAMMAR_LARK, GRAMMAR_JSON_SCHEMA, GRAMMAR_JSON_OBJECT, GRAMMAR_REGEX,
                    GRAMMAR_KIND_COUNT };

/* The vocabulary as the grammar sees it: bytes of each token; special tokens are matched only by
 * explicit special-token terminals (<|im_end|>, <[151657]>). eos = the token that ends the turn. */
struct grammar_vocab {
    int32_t n_tokens;
    const char *const *bytes;  /* bytes[i], len[i] */
    const uint32_t *len;
    const bool *is_special;
    int32_t eos;
};

struct grammar_vocab_index; /* token trie etc., built once per vocabulary */
struct grammar_vocab_index *grammar_vocab_index_new(const struct grammar_vocab *v, struct err *e);
void grammar_vocab_index_free(struct grammar_vocab_index *vi);

struct grammar;
struct grammar *grammar_compile(const struct grammar_vocab_index *vi, enum grammar_kind kind,
                                const char *src, size_t len, struct err *e);
void grammar_free(struct grammar *g);

struct matcher;
struct matcher *matcher_new(const struct grammar *g, struct err *e);
void matcher_free(struct matcher *m);
/* Writes the allowed-token bitset ((n_tokens+31)/32 words). */
void matcher_mask(struct matcher *m, uint32_t *bitset_out);
/* 0 if token is allowed and consumed; -1 (state unchanged) otherwise. */
int matcher_consume(struct matcher *m, int32_t token);
bool matcher_accepting(const struct matcher *m);  /* the grammar accepts here (eos allowed) */
bool matcher_done(const struct matcher *m);       /* nothing but eos can follow */
int matcher_rollback(struct matcher *m, int n_tokens);

#endif
