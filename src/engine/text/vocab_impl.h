/* vocab_impl — the vocab struct shared by vocab.c (tables, decode) and bpe.c (encode).
 * Private to the tokenizer: nothing outside src/engine/{vocab,bpe}.c includes this. */
#ifndef LMS_ENGINE_VOCAB_IMPL_H
#define LMS_ENGINE_VOCAB_IMPL_H

#include <stdint.h>

#include "engine/text/vocab.h"

#define VOCAB_MAX_EOG 16

enum vocab_pre {
    VOCAB_PRE_GPT2,
    VOCAB_PRE_LLAMA3,
    VOCAB_PRE_QWEN2,
    VOCAB_PRE_NANOCHAT,
    VOCAB_PRE_QWEN35,
    VOCAB_PRE_COUNT
};

struct vocab {
    int32_t n;                /* tokens */
    uint8_t *type;            /* (n) enum tok_type */
    uint32_t *off;            /* (n+1) token i decodes to bytes[off[i] .. off[i+1]) */
    char *bytes;
    size_t max_len;
    int32_t bos, eos, eot, pad;
    bool add_bos;
    int32_t eog[VOCAB_MAX_EOG];
    int n_eog;

    int32_t *tmap; /* (tmask+1) open addressing over NORMAL tokens' bytes, -1 = empty */
    uint32_t tmask;
    int32_t byte_tok[256];  /* the token of each single byte (BPE start symbols) */
    uint64_t *mkey, *mval;  /* merges: key (left<<32|right), val (rank<<32|result); key ~0 empty */
    uint32_t mmask;

    int32_t *added;          /* CONTROL and USER_DEFINED tokens, longest first */
    int32_t n_added;
    uint8_t added_first[256]; /* 1 if some added token starts with this byte */
    int32_t *amap;           /* (amask+1) added tokens by the hash of their key, -1 = empty */
    uint32_t amask;
    uint32_t alens[64];      /* distinct key lengths of added tokens, longest first */
    int n_alens;             /* > 64 lengths: 0, and bpe.c scans `added` linearly */

    /* SentencePiece-style BPE (tokenizer.ggml.model "gemma4"): the text is split only at added
     * tokens, ' ' becomes U+2581 ("▁"), BPE starts from UTF-8 characters (a character that is
     * no token falls back to its <0xNN> byte tokens, kept in byte_tok) and merges by rank over
     * the whole segment. Token keys (what matching and merges compare) are then the token text
     * as stored, with ▁ and <0xNN>; tok_bytes is the decoded form (▁ -> ' ', <0xNN> -> byte). */
    bool spm;
    char *kbytes;   /* spm: keys; NULL otherwise (keys are the decoded bytes) */
    uint32_t *koff; /* spm: (n+1) */

    enum vocab_pre pre;
    bool nfc;        /* normalize segments to NFC before splitting (qwen2, qwen35, as HF does) */
    bool ignore_merges; /* a piece that is a token is not merged (llama3, as HF / llama.cpp) */
    void *re;        /* pcre2_code_8 * */
    bool re_jit;
};

uint64_t vocab_hash_bytes(const void *p, size_t n);
/* The form of token id that matching compares: the stored text for spm, else tok_bytes. */
static inline const char *vocab_key(const struct vocab *v, int32_t id, size_t *len)
{
    if (!v->kbytes) return tok_bytes(v, id, len);
    *len = v->koff[id + 1] - v->koff[id];
    return v->kbytes + v->koff[id];
}
/* The added token whose key is exactly p[0..len), or -1 (the first by id among equal keys). */
int32_t vocab_added_find(const struct vocab *v, const char *p, size_t len);
static inline uint64_t vocab_merge_key(int32_t a, int32_t b)
{
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}
static inline uint32_t vocab_mix64(uint64_t k)
{
    k ^= k >> 31;
    k *= 0x9e3779b97f4a7c15ull;
    return (uint32_t)(k >> 29);
}
int32_t vocab_tmap_find(const struct vocab *v, const char *p, size_t len);
/* vocab.c, shared with tiktoken.c: the NORMAL-token map and byte symbols (n, type, off, bytes
 * set); one merge (a, b) -> res at rank (a duplicate pair keeps the first); the added-token list,
 * the special ids' range check and the eog set. */
int vocab_index_tokens(struct vocab *v, struct err *e);
int vocab_merge_insert(struct vocab *v, int32_t a, int32_t b, int32_t rank, int32_t res);
int vocab_index_added(struct vocab *v, struct err *e);
/* bpe.c: true when NFC can change nothing in the valid UTF-8 s[0..n) (exposed for its test). */
bool vocab_nfc_inert_run(const unsigned char *s, size_t n);
/* bpe.c: pre-tokenizer setup from the tokenizer.ggml.pre name / teardown ("gemma4": none). */
int vocab_pre_init(struct vocab *v, const char *pre, struct err *e);
void vocab_pre_deinit(struct vocab *v);

#endif
