/* hf_tokenizer_gguf — writes a loaded hf_tokenizer as llama.cpp's tokenizer.* GGUF keys. Kept
 * apart from hf_tokenizer.c so that loading/inspecting a tokenizer does not pull in the writer. */
#include "engine/text/hf_tokenizer.h"

#include <string.h>

int hf_tokenizer_write_gguf(const struct hf_tokenizer *t, struct gguf_writer *w, struct err *e)
{
    int r = 0;
    bool spm = t->model && strcmp(t->model, "gemma4") == 0;
    r |= gguf_w_str(w, "tokenizer.ggml.model", spm ? "gemma4" : "gpt2");
    if (!spm) r |= gguf_w_str(w, "tokenizer.ggml.pre", t->pre ? t->pre : "qwen2");
    r |= gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)t->tokens,
                        (uint64_t)t->n_tokens);
    r |= gguf_w_arr_num(w, "tokenizer.ggml.token_type", GGUF_I32, t->types, (uint64_t)t->n_tokens);
    r |= gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char *const *)t->merges,
                        (uint64_t)t->n_merges);
    if (t->bos >= 0) r |= gguf_w_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)t->bos);
    if (t->eos >= 0) r |= gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)t->eos);
    if (t->eot >= 0) r |= gguf_w_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)t->eot);
    if (t->pad >= 0) r |= gguf_w_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)t->pad);
    if (t->unk >= 0) r |= gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)t->unk);
    r |= gguf_w_bool(w, "tokenizer.ggml.add_bos_token", t->add_bos);
    if (t->chat_template) r |= gguf_w_str(w, "tokenizer.chat_template", t->chat_template);
    if (r) return err_set(e, ERR_NOMEM, "writing tokenizer keys to GGUF failed");
    return 0;
}
