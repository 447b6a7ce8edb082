/* models/common — what every model family's file uses the same way: carving one scratch arena,
 * describing a weight matmul for mm_run_ops, reading the family's `<arch>.<key>` metadata.
 * Family conventions stay in the family's own file (docs/families.md). */
#ifndef LMS_ENGINE_MODELS_COMMON_H
#define LMS_ENGINE_MODELS_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "engine/format/gguf.h"
#include "engine/kernels/matmul.h"

/* Lays out one scratch arena in two passes: with base NULL it only adds up the size (*off), then
 * with the allocated base it hands out each piece, 64-byte aligned. */
void *mdl_carve(char *base, size_t *off, size_t bytes);

/* One matmul of weight w (expert `expert` of a 3-D expert tensor, else 0) over n_tok rows of x
 * (stride xs, rows picked by x_idx or in order) into y (stride ys, rows y_idx or in order). */
struct mm_op mdl_op(const struct gguf_tensor *w, int64_t expert, const float *x, int64_t xs,
                    const int32_t *x_idx, int64_t n_tok, float *y, int64_t ys, const int32_t *y_idx);

/* `<arch>.<key>` as a positive count below 2^24 / a positive finite float into *out. A missing
 * key is an error when required, else leaves *out as it was. */
int mdl_get_u32(const struct gguf *g, const char *arch, const char *key, int *out, bool required,
                struct err *e);
int mdl_get_f32(const struct gguf *g, const char *arch, const char *key, float *out, bool required,
                struct err *e);

struct model_config;

/* The attention hyperparameters the GQA families (qwen3, qwen3moe, qwen35, qwen35moe) read the
 * same way: general.architecture into c->arch, then `<arch>.`block_count, embedding_length,
 * head counts, context_length, the RMS epsilon, rope.freq_base (default 10000) and key_length
 * (default n_embd / n_head), with value_length into *vlen (default key_length; the caller
 * decides what it supports) and the GQA group and head size checked against the attention
 * kernel's limits. */
int mdl_attn_hparams(const struct gguf *g, struct model_config *c, int *vlen, struct err *e);

/* The FFN widths: with moe, expert_count / expert_used_count / expert_feed_forward_length
 * (required; used <= count) and feed_forward_length read if valid (MoE files may write 0); else feed_forward_length
 * required. */
int mdl_ffn_hparams(const struct gguf *g, struct model_config *c, bool moe, struct err *e);

/* token_embd.weight [n_embd, n_vocab] (sets c->n_vocab), output.weight of the same shape or the
 * embedding when tied (absent), and output_norm.weight [n_embd]. */
int mdl_embd_output(const struct gguf *g, struct model_config *c, const struct gguf_tensor **tok_embd,
                    const struct gguf_tensor **output, const float **output_norm, struct err *e);

/* Row `tok` of an embedding tensor t (any weight type) as n_embd floats into out. */
void mdl_embed_row(const struct gguf_tensor *t, int32_t tok, float *out);

/* MoE routing of T tokens: each row of probs (T x n_expert, already softmaxed) picks its top k
 * by repeated selection (ties to the lower expert id), weights renormalised over the k (the sum
 * clamped below at min_sum: llama.cpp's clamp where the family has it, else 0) into sel/selw
 * (T x k). Every (token, slot) pair is bucketed by expert: for expert x, ecnt[x] entries in
 * etok[x * cap ...] (the pair index t * k + slot) and etok_t[x * cap ...] (the token t). */
void mdl_route_topk(const float *probs, int64_t T, int n_expert, int k, float min_sum, int64_t cap, int32_t *sel,
                    float *selw, int32_t *ecnt, int32_t *etok, int32_t *etok_t);

/* Page advice for n expert tensors (NULL entries skipped): with borrow, MADV_RANDOM (pages come
 * in as experts are used); else MADV_WILLNEED and every page touched now, so the first requests
 * never stall on disk. Logs the total. docs/engine.md, "MoE experts". */
void mdl_advise_experts(const struct gguf_tensor *const *ts, int n, bool borrow);

#endif
