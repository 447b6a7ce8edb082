/* safetensors — reader (on mmap) of the safetensors format (Hugging Face).
 *
 * Byte layout:
 *   N: u64 little endian | N bytes: JSON header (UTF-8, one object) | data section
 *   header = { "<tensor name>": {"dtype": "BF16", "shape": [d0, d1, ...],
 *                                "data_offsets": [begin, end]}, ...,
 *              "__metadata__": {"<key>": "<string>", ...} (optional) }
 *   offsets are bytes relative to the data section's start; shape is row-major (d0 outermost).
 *
 * Invariant after st_open succeeds: the header is one JSON object (trailing spaces only, as
 * writers pad it), every tensor's dtype is known, its shape has at most ST_MAX_DIMS non-negative
 * dimensions, begin <= end <= data size, end - begin == product(shape) * dtype size (overflow
 * checked), no two non-empty tensors' byte ranges overlap, and metadata values are strings. So
 * data pointers never leave the mapping. Gaps between tensors are allowed. Errors name the file
 * (or the label given to st_open_mem), the tensor and the field. docs/nanochat.md. */
#ifndef LMS_ENGINE_SAFETENSORS_H
#define LMS_ENGINE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

enum st_dtype {
    ST_F64, ST_F32, ST_F16, ST_BF16, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL,
    ST_U16, ST_U32, ST_U64, ST_F8_E4M3, ST_F8_E5M2, ST_DTYPE_COUNT
};

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER ((uint64_t)100 << 20) /* safetensors' own limit on the JSON header */

struct st_tensor {
    char *name;               /* NUL-terminated copy (owned by struct safetensors) */
    enum st_dtype dtype;
    int n_dims;
    int64_t shape[ST_MAX_DIMS]; /* shape[0] outermost; unused entries 1 */
    uint64_t begin, end;      /* byte range in the data section */
    const void *data;         /* into the mapping (alignment as the file has it) */
};

struct safetensors {
    int64_t n_tensors;
    struct st_tensor *tensors; /* in header order */
    int64_t n_meta;
    char **meta_key, **meta_val; /* __metadata__ pairs (owned) */
    const uint8_t *map;
    size_t map_size;
    const uint8_t *header;    /* the JSON text */
    uint64_t header_len;
    const uint8_t *data;      /* start of the data section */
    uint64_t data_size;
    int fd;                   /* -1 for st_open_mem */
};

const char *st_dtype_name(enum st_dtype t);
size_t st_dtype_size(enum st_dtype t);

/* Maps and validates path. 0 on success; on failure e names the file and what is wrong. */
int st_open(struct safetensors *st, const char *path, struct err *e);
/* Same over a caller-owned buffer (tests, the fuzz target); label names it in errors. */
int st_open_mem(struct safetensors *st, const void *p, size_t n, const char *label, struct err *e);
/* Frees what open built; safe on a zero-initialized struct and after a failed open. */
void st_close(struct safetensors *st);

const struct st_tensor *st_find(const struct safetensors *st, const char *name);
/* The __metadata__ value of key, or NULL. */
const char *st_meta(const struct safetensors *st, const char *key);
/* Elements of a tensor (product of its shape). */
int64_t st_numel(const struct st_tensor *t);

#endif
