/* gguf — reader (on mmap) and writer of GGUF v2/v3 files.
 *
 * Byte layout (little endian):
 *   magic "GGUF" u32 | version u32 (2 or 3) | n_tensors u64 | n_kv u64
 *   n_kv × { key: gguf_string | value_type u32 | value }
 *   n_tensors × { name: gguf_string | n_dims u32 | dims u64[n_dims] | type u32 | offset u64 }
 *   padding to general.alignment (default 32) | tensor data (offsets relative to this start)
 *   gguf_string = len u64 | bytes; array value = elem_type u32 | count u64 | elems (nested ok)
 *
 * Invariant after gguf_open succeeds: every key, value, array, tensor info, dimension, type and
 * data range has been validated against the file size with overflow-safe arithmetic, so accessors
 * never read outside the mapping. The file stays mapped until gguf_close; tensor data pointers
 * are read-only views into the mapping (weights are never copied). */
#ifndef LMS_ENGINE_GGUF_H
#define LMS_ENGINE_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5,
    GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10, GGUF_I64 = 11,
    GGUF_F64 = 12, GGUF_VTYPE_COUNT
};

#define GGUF_MAX_DIMS 4

struct gguf_str {
    const char *p; /* points into the mapping: NOT NUL-terminated */
    uint64_t len;
};

struct gguf_kv {
    struct gguf_str key;
    enum gguf_vtype type;
    /* scalar value (type != STRING/ARRAY) */
    union { uint64_t u; int64_t i; double f; bool b; } v;
    struct gguf_str str;       /* type == STRING */
    enum gguf_vtype arr_type;  /* type == ARRAY: element type */
    uint64_t arr_n;            /* type == ARRAY: element count */
    const uint8_t *arr_data;   /* type == ARRAY: first element's bytes in the mapping */
    const struct gguf_str *strs; /* type == ARRAY of STRING: arr_n views (owned by struct gguf) */
};

struct gguf_tensor {
    struct gguf_str name;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] = innermost (row length); unused dims are 1 */
    uint32_t type;             /* enum ggml_type (engine/kernels/quant.h) */
    uint64_t offset;           /* relative to data section */
    uint64_t nbytes;
    const void *data;          /* into the mapping, or into repack (slab set) */
    int slab;                  /* data is the matrix repacked into the matmul slab layout
                                  (mm_slab_repack; models/common mdl_op and mdl_embed_row) */
};

struct gguf {
    uint32_t version;
    int64_t n_kv, n_tensors;
    struct gguf_kv *kv;
    struct gguf_tensor *tensors;
    uint64_t alignment;
    const uint8_t *map;
    size_t map_size;
    const uint8_t *data; /* start of tensor data */
    uint64_t data_size;  /* bytes from data to the end of the mapping */
    int fd;              /* -1 for gguf_open_mem (the buffer is not ours to unmap) */
    void *repack;        /* anonymous memory of the repacked tensors (model.c), or NULL */
    size_t repack_size;
    /* private: open-addressing name indexes (kv keys, tensor names), slots hold index + 1 */
    uint32_t *kv_index, *t_index;
    uint64_t kv_index_cap, t_index_cap;
};

/* Limits that bound what a file may ask of us (named so tests and docs can cite them). */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_ARRAY_DEPTH 8         /* nested arrays deeper than this are refused */
#define GGUF_MAX_ENTRIES (1ull << 31)  /* n_kv, n_tensors and array lengths that need an index */

const char *gguf_vtype_name(enum gguf_vtype t); /* "u32", "string", ...; "?" if unknown */

/* Maps and validates path. 0 on success; on failure e names what is wrong (and where). */
int gguf_open(struct gguf *g, const char *path, struct err *e);
/* Same; copy != 0 reads the whole file into private anonymous memory (read-only once read)
 * instead of mapping it (--no-mmap: more RAM while the page cache still holds the file, but decode
 * measured 10-25 % faster than from the file mapping, docs/gguf.md). */
int gguf_open_ex(struct gguf *g, const char *path, int copy, struct err *e);
/* Same over a caller-owned buffer (used by tests and the fuzz target; no copy, buffer must
 * outlive g). */
int gguf_open_mem(struct gguf *g, const void *p, size_t n, struct err *e);
/* Frees what open built; safe on a zero-initialized struct and after a failed open. */
void gguf_close(struct gguf *g);

const struct gguf_kv *gguf_find(const struct gguf *g, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name);
/* Typed getters: return 0 if the key exists and converts losslessly, else fill e. */
int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out, struct err *e);
int gguf_get_i64(const struct gguf *g, const char *key, int64_t *out, struct err *e);
int gguf_get_f32(const struct gguf *g, const char *key, float *out, struct err *e);
int gguf_get_bool(const struct gguf *g, const char *key, bool *out, struct err *e);
/* Returns a malloc'd NUL-terminated copy (caller frees), or NULL + e. */
char *gguf_get_str(const struct gguf *g, const char *key, struct err *e);
/* Array of strings: element i (validated at open). */
struct gguf_str gguf_arr_str(const struct gguf_kv *kv, uint64_t i);
/* Numeric array element i as double / int64 (any numeric element type). */
double gguf_arr_f64(const struct gguf_kv *kv, uint64_t i);
int64_t gguf_arr_i64(const struct gguf_kv *kv, uint64_t i);
bool gguf_str_eq(struct gguf_str s, const char *c);

/* ---- writer ----
 * Keys and tensor infos are collected in memory; gguf_writer_save streams the file to disk
 * (to path.tmp.<pid>, then renamed over path, so a partial file never appears under path).
 * The first failing call (duplicate key/tensor, bad shape/type, allocation) is remembered and
 * reported by gguf_writer_save; every gguf_w_* also returns -1 when it fails.
 * "general.alignment" is written first with the writer's alignment unless set explicitly
 * (an explicit value must equal the writer's alignment). */
struct gguf_writer;
struct gguf_writer *gguf_writer_new(uint32_t alignment);
void gguf_writer_free(struct gguf_writer *w);
int gguf_w_u32(struct gguf_writer *w, const char *key, uint32_t v);
int gguf_w_i32(struct gguf_writer *w, const char *key, int32_t v);
int gguf_w_u64(struct gguf_writer *w, const char *key, uint64_t v);
int gguf_w_f32(struct gguf_writer *w, const char *key, float v);
int gguf_w_bool(struct gguf_writer *w, const char *key, bool v);
int gguf_w_str(struct gguf_writer *w, const char *key, const char *v);
/* Arrays: strs is n NUL-terminated strings; nums is n elements of elem_type (numeric). */
int gguf_w_arr_str(struct gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
int gguf_w_arr_num(struct gguf_writer *w, const char *key, enum gguf_vtype elem_type,
                   const void *nums, uint64_t n);
/* Adds a tensor; data (nbytes, computed from type and dims) is copied. */
int gguf_w_tensor(struct gguf_writer *w, const char *name, uint32_t type, int n_dims,
                  const int64_t *ne, const void *data);
/* Streaming variant: the data is produced at save time, in order, by fill(), which must write
 * n_rows rows (of ne[0] elements, in the tensor's type; rows counted over ne[1]*ne[2]*ne[3])
 * starting at row0 into dst and return 0, or fill e and return nonzero. Rows are requested in
 * increasing order with no gaps, a chunk at a time, so a generator may keep sequential state. */
typedef int (*gguf_fill_fn)(void *ctx, int64_t row0, int64_t n_rows, void *dst, struct err *e);
int gguf_w_tensor_fill(struct gguf_writer *w, const char *name, uint32_t type, int n_dims,
                       const int64_t *ne, gguf_fill_fn fill, void *ctx);
/* Bytes of a tensor of this type and shape into *out; fails (e names why) on an unknown type,
 * n_dims outside 1..GGUF_MAX_DIMS, a negative dimension, ne[0] not a multiple of the type's block
 * size, or overflow. */
int gguf_tensor_nbytes(uint32_t type, int n_dims, const int64_t *ne, uint64_t *out, struct err *e);
int gguf_writer_save(struct gguf_writer *w, const char *path, struct err *e);
/* Same into memory: *out (malloc'd, caller frees) of *n bytes; for metadata-only GGUFs built at
 * load (a nanochat checkpoint's, which gguf_open_mem then reads). */
int gguf_writer_save_mem(struct gguf_writer *w, void **out, size_t *n, struct err *e);

#endif
