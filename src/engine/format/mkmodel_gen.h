/* mkmodel_gen — synthetic Qwen3 / Qwen3-MoE GGUF models from seeded random weights (for tests and
 * benchmarks; used by lmserve-mkmodel).
 *
 * Keys and tensor names are llama.cpp's. ne[0] of every matrix is its input dimension. Norm
 * weights and the MoE router are always F32. Weights are produced row by row at save time
 * (gguf_w_tensor_fill), so even the 3 GB f32 qwen3-0.6b is never held in memory. Each row's
 * random stream is seeded from (seed, tensor name, row) only and uses integer/float arithmetic
 * (no transcendental libm calls), so the same seed + shape + type gives a byte-identical file. */
#ifndef LMS_ENGINE_MKMODEL_GEN_H
#define LMS_ENGINE_MKMODEL_GEN_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

struct hf_tokenizer;
struct gguf_writer;

/* GGUF key (bool, true) that mkmodel_write puts in every file it makes: the weights are seeded
 * noise. The server warns at startup and /v1/models says so (docs/gguf.md). Imported weights
 * (mkmodel_import) do not carry it. */
#define MKMODEL_KEY_RANDOM "lmserve.random_weights"

struct mkmodel_shape {
    const char *name; /* "tiny", "qwen3-0.6b", "moe-tiny" */
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim;
    int64_t n_vocab;
    int n_ctx;
    bool tied; /* output.weight omitted: the output projection is token_embd */
    int n_expert, n_expert_used, n_ff_exp; /* 0 = dense (arch qwen3), else arch qwen3moe */
    float rope_base, norm_eps;
    /* another family's writer that reads its tokenizer directory itself (its own file; NULL =
     * the Qwen3 writer of mkmodel_gen.c with hf_tokenizer) */
    int (*write_tokdir)(const struct mkmodel_shape *s, int type, uint64_t seed, const char *tokdir,
                        const char *path, struct err *e);
    /* another family's writer that takes the hf_tokenizer (its own file; NULL = the Qwen3 writer) */
    int (*write)(const struct mkmodel_shape *s, int type, uint64_t seed, const struct hf_tokenizer *tok,
                 const char *path, struct err *e);
};

/* Gemma 4 shapes (mkmodel_gemma4.c): gemma4-tiny, gemma4-moe-tiny, gemma4-small. */
#define MKMODEL_GEMMA4_SHAPES 3
extern const struct mkmodel_shape mkmodel_gemma4_shapes[MKMODEL_GEMMA4_SHAPES];
/* Qwen3.5 shapes (mkmodel_qwen35.c): qwen35-tiny, qwen35moe-tiny, qwen35-0.8b. */
#define MKMODEL_QWEN35_SHAPES 3
extern const struct mkmodel_shape mkmodel_qwen35_shapes[MKMODEL_QWEN35_SHAPES];

/* Weight file type, named like llama.cpp's ftypes. */
/* The low-bit ones (tq1_0, tq2_0, q1_0, q2_0) put that type in every matrix whose rows are a
 * multiple of its block, and Q8_0 in token_embd / output (docs/gguf.md). */
enum mkmodel_type {
    MKMODEL_F32, MKMODEL_F16, MKMODEL_Q8_0, MKMODEL_Q4_K_M,
    MKMODEL_TQ1_0, MKMODEL_TQ2_0, MKMODEL_Q1_0, MKMODEL_Q2_0, MKMODEL_Q5_K_M,
    MKMODEL_TYPE_COUNT
};

/* The built-in shape with this name, or NULL. */
const struct mkmodel_shape *mkmodel_shape_find(const char *name);
/* Comma-separated list of built-in shape names (for --help). */
const char *mkmodel_shape_names(void);
/* Parses "f32" | "f16" | "q8_0" | "q4_k_m" | "tq1_0" | "tq2_0" | "q1_0" | "q2_0"; -1 if unknown. */
int mkmodel_type_parse(const char *s);
const char *mkmodel_type_name(enum mkmodel_type t);
/* llama.cpp's llama_ftype id of file type t (general.file_type) */
uint32_t mkmodel_file_type(enum mkmodel_type t);
/* whether file type t is a quantized one (the file then carries general.quantization_version) */
bool mkmodel_type_quantized(enum mkmodel_type t);

/* The GGML tensor type a weight of this role gets in file type t. role is the llama.cpp tensor
 * name without "blk.N." and ".weight" (e.g. "attn_v", "token_embd", "ffn_down_exps"), n_in is
 * its row length. Falls back to a type whose block size divides n_in (see docs/gguf.md). */
uint32_t mkmodel_tensor_type(enum mkmodel_type t, const char *role, int64_t n_in);

/* Writes the model to path. tok may be NULL (no tokenizer keys: only useful for tests of the
 * weights themselves; lmserve needs a tokenizer). */
int mkmodel_write(const struct mkmodel_shape *s, enum mkmodel_type type, uint64_t seed,
                  const struct hf_tokenizer *tok, const char *path, struct err *e);

/* Writes general.architecture/name/file_type (+ quantization_version) and the arch.* hyper-
 * parameters of shape s into w. */
int mkmodel_write_hparams(struct gguf_writer *w, const struct mkmodel_shape *s, enum mkmodel_type type,
                          const char *general_name);

/* Imports trained Qwen3 weights: dir/config.json (Hugging Face Qwen3 config: hidden_size,
 * intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
 * rms_norm_eps, rope_theta, vocab_size, max_position_embeddings, tie_word_embeddings) and
 * dir/model.safetensors (F32 tensors under HF names, e.g. model.layers.0.self_attn.q_proj.weight)
 * -> a GGUF of file type `type` at path, with tok's tokenizer keys and general.name = name.
 * Every tensor the config implies must be present with its exact shape, and no other. */
int mkmodel_import(const char *dir, enum mkmodel_type type, const struct hf_tokenizer *tok, const char *name,
                   const char *path, struct err *e);

#endif
