/* mkmodel_nanochat — random nanochat checkpoint directories (docs/nanochat.md) for tests and
 * benchmarks: model.safetensors (seeded random weights under nanochat's names), config.json and a
 * minimal tokenizer.json (256 byte tokens, seeded random merges, the nine special tokens).
 * Same shape + type + seed gives byte-identical files. */
#ifndef LMS_ENGINE_MKMODEL_NANOCHAT_H
#define LMS_ENGINE_MKMODEL_NANOCHAT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

/* Whether name is one of the nanochat shapes (nanochat-tiny, nanochat-tiny-old, nanochat-d20). */
bool mkmodel_nanochat_shape(const char *name);
const char *mkmodel_nanochat_shape_names(void);
/* Writes the directory dir (created if missing; files replaced atomically). type: "f32", "bf16"
 * or "f16" (matrices and embeddings; the scalars are always F32). */
int mkmodel_nanochat_write(const char *shape, const char *type, uint64_t seed, const char *dir, struct err *e);

#endif
