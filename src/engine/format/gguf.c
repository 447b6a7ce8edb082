/* gguf — reader (validating, on mmap) and streaming writer. See gguf.h for the byte layout.
 *
 * Reader strategy: one pass over the header with a bounds-checked cursor. Nothing read from the
 * file is used as a size, count or offset before it has been compared with what remains of the
 * file, using subtraction (never addition) so the comparison itself cannot overflow. Counts are
 * bounded by "remaining bytes / minimum encoded size of one element" before anything is
 * allocated for them, so a tiny file cannot make us allocate gigabytes. */
#include "engine/format/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/kernels/quant.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c reads little-endian GGUF by memcpy: port it before building on a big-endian host"
#endif

/* ---- element types ----
 * Block size and bytes per block of every GGML type a GGUF may hold. Kept here (and not only in
 * quant.c) so the reader can validate any file, including types the engine cannot compute; the
 * model loader decides what it can run (quant_type_valid). */
struct type_size {
    const char *name;
    int64_t blck;
    uint64_t bytes;
};
static const struct type_size type_sizes[GGML_TYPE_COUNT] = {
    [GGML_TYPE_F32] = {"f32", 1, 4},         [GGML_TYPE_F16] = {"f16", 1, 2},
    [GGML_TYPE_Q4_0] = {"q4_0", 32, 18},     [GGML_TYPE_Q4_1] = {"q4_1", 32, 20},
    [GGML_TYPE_Q5_0] = {"q5_0", 32, 22},     [GGML_TYPE_Q5_1] = {"q5_1", 32, 24},
    [GGML_TYPE_Q8_0] = {"q8_0", 32, 34},     [GGML_TYPE_Q8_1] = {"q8_1", 32, 36},
    [GGML_TYPE_Q2_K] = {"q2_k", 256, 84},    [GGML_TYPE_Q3_K] = {"q3_k", 256, 110},
    [GGML_TYPE_Q4_K] = {"q4_k", 256, 144},   [GGML_TYPE_Q5_K] = {"q5_k", 256, 176},
    [GGML_TYPE_Q6_K] = {"q6_k", 256, 210},   [GGML_TYPE_Q8_K] = {"q8_k", 256, 292},
    [GGML_TYPE_BF16] = {"bf16", 1, 2},
    [GGML_TYPE_TQ1_0] = {"tq1_0", 256, 54},  [GGML_TYPE_TQ2_0] = {"tq2_0", 256, 66},
    [GGML_TYPE_Q1_0] = {"q1_0", 128, 18},    [GGML_TYPE_Q2_0] = {"q2_0", 64, 18},
};

static const struct type_size *type_size_of(uint32_t t)
{
    if (t >= GGML_TYPE_COUNT || !type_sizes[t].name) return NULL;
    return &type_sizes[t];
}

int gguf_tensor_nbytes(uint32_t type, int n_dims, const int64_t *ne, uint64_t *out, struct err *e)
{
    const struct type_size *ts = type_size_of(type);
    if (!ts) return err_set(e, ERR_FORMAT, "unknown tensor type %" PRIu32, type);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return err_set(e, ERR_FORMAT, "n_dims %d outside 1..%d", n_dims, GGUF_MAX_DIMS);
    for (int i = 0; i < n_dims; i++)
        if (ne[i] < 0) return err_set(e, ERR_FORMAT, "dimension %d is negative (%" PRId64 ")", i, ne[i]);
    if (ne[0] % ts->blck)
        return err_set(e, ERR_FORMAT, "row length %" PRId64 " is not a multiple of %s block size %" PRId64,
                       ne[0], ts->name, ts->blck);
    uint64_t n = (uint64_t)(ne[0] / ts->blck); /* blocks per row, then bytes */
    if (n && ts->bytes > UINT64_MAX / n) goto overflow;
    n *= ts->bytes;
    uint64_t nel = (uint64_t)ne[0];
    for (int i = 1; i < n_dims; i++) {
        uint64_t d = (uint64_t)ne[i];
        if (d && n > UINT64_MAX / d) goto overflow;
        if (d && nel > (uint64_t)INT64_MAX / d) goto overflow;
        n *= d;
        nel *= d;
    }
    if (n > (uint64_t)INT64_MAX) goto overflow;
    *out = n;
    return 0;
overflow:
    return err_set(e, ERR_RANGE, "tensor size overflows 64 bits");
}

/* ---- value types ---- */
static const uint8_t vtype_size[GGUF_VTYPE_COUNT] = {
    [GGUF_U8] = 1,  [GGUF_I8] = 1,  [GGUF_U16] = 2, [GGUF_I16] = 2, [GGUF_U32] = 4,
    [GGUF_I32] = 4, [GGUF_F32] = 4, [GGUF_BOOL] = 1, [GGUF_U64] = 8, [GGUF_I64] = 8,
    [GGUF_F64] = 8, /* STRING and ARRAY are variable */
};
static const char *const vtype_names[GGUF_VTYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

const char *gguf_vtype_name(enum gguf_vtype t)
{
    return (unsigned)t < GGUF_VTYPE_COUNT ? vtype_names[t] : "?";
}

static bool vtype_numeric(enum gguf_vtype t)
{
    return (unsigned)t < GGUF_VTYPE_COUNT && vtype_size[t] != 0;
}

/* Decodes one fixed-size scalar at p into kv->v. */
static void scalar_decode(enum gguf_vtype t, const uint8_t *p, struct gguf_kv *kv)
{
    uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
    uint64_t u64; int64_t i64; float f32; double f64;
    switch (t) {
    case GGUF_U8: memcpy(&u8, p, 1); kv->v.u = u8; break;
    case GGUF_I8: memcpy(&i8, p, 1); kv->v.i = i8; break;
    case GGUF_U16: memcpy(&u16, p, 2); kv->v.u = u16; break;
    case GGUF_I16: memcpy(&i16, p, 2); kv->v.i = i16; break;
    case GGUF_U32: memcpy(&u32, p, 4); kv->v.u = u32; break;
    case GGUF_I32: memcpy(&i32, p, 4); kv->v.i = i32; break;
    case GGUF_U64: memcpy(&u64, p, 8); kv->v.u = u64; break;
    case GGUF_I64: memcpy(&i64, p, 8); kv->v.i = i64; break;
    case GGUF_F32: memcpy(&f32, p, 4); kv->v.f = f32; break;
    case GGUF_F64: memcpy(&f64, p, 8); kv->v.f = f64; break;
    case GGUF_BOOL: kv->v.b = p[0] != 0; break;
    default: break;
    }
}

/* ---- bounds-checked cursor ---- */
struct rd {
    const uint8_t *p;
    uint64_t n, off;
    struct err *e;
};

static uint64_t rd_left(const struct rd *r) { return r->n - r->off; }

static int rd_need(struct rd *r, uint64_t k, const char *what)
{
    if (k > rd_left(r))
        return err_set(r->e, ERR_FORMAT,
                       "truncated: %s needs %" PRIu64 " bytes at offset %" PRIu64 ", only %" PRIu64 " left",
                       what, k, r->off, rd_left(r));
    return 0;
}

static int rd_u32(struct rd *r, uint32_t *v, const char *what)
{
    if (rd_need(r, 4, what)) return -1;
    memcpy(v, r->p + r->off, 4);
    r->off += 4;
    return 0;
}

static int rd_u64(struct rd *r, uint64_t *v, const char *what)
{
    if (rd_need(r, 8, what)) return -1;
    memcpy(v, r->p + r->off, 8);
    r->off += 8;
    return 0;
}

static int rd_str(struct rd *r, struct gguf_str *s, const char *what)
{
    uint64_t at = r->off, len;
    if (rd_u64(r, &len, what)) return -1;
    if (len > rd_left(r))
        return err_set(r->e, ERR_FORMAT,
                       "%s at offset %" PRIu64 " has length %" PRIu64 " but only %" PRIu64 " bytes remain",
                       what, at, len, rd_left(r));
    s->p = (const char *)r->p + r->off;
    s->len = len;
    r->off += len;
    return 0;
}

static int rd_vtype(struct rd *r, enum gguf_vtype *t, const char *what)
{
    uint64_t at = r->off;
    uint32_t v;
    if (rd_u32(r, &v, what)) return -1;
    if (v >= GGUF_VTYPE_COUNT)
        return err_set(r->e, ERR_FORMAT, "%s at offset %" PRIu64 " is %" PRIu32 ", not a GGUF value type",
                       what, at, v);
    *t = (enum gguf_vtype)v;
    return 0;
}

static int check_bools(struct rd *r, const uint8_t *p, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (p[i] > 1)
            return err_set(r->e, ERR_FORMAT, "bool at offset %" PRIu64 " is %u, not 0 or 1",
                           (uint64_t)(p + i - r->p), p[i]);
    return 0;
}

/* Reads the array body (elem type, count, elements) at the cursor. At depth 0 (a key's value),
 * fills kv, including the string view table; nested arrays are validated and skipped. */
static int rd_array(struct rd *r, int depth, struct gguf_kv *kv)
{
    uint64_t at = r->off;
    enum gguf_vtype et;
    uint64_t n;
    if (depth >= GGUF_MAX_ARRAY_DEPTH)
        return err_set(r->e, ERR_FORMAT, "array at offset %" PRIu64 " nested deeper than %d", at,
                       GGUF_MAX_ARRAY_DEPTH);
    if (rd_vtype(r, &et, "array element type") || rd_u64(r, &n, "array length")) return -1;
    if (kv) {
        kv->arr_type = et;
        kv->arr_n = n;
        kv->arr_data = r->p + r->off;
    }
    if (vtype_numeric(et)) {
        uint64_t sz = vtype_size[et];
        if (n > rd_left(r) / sz)
            return err_set(r->e, ERR_FORMAT,
                           "array at offset %" PRIu64 " of %" PRIu64 " %s elements runs past the end of the file",
                           at, n, vtype_names[et]);
        if (et == GGUF_BOOL && check_bools(r, r->p + r->off, n)) return -1;
        r->off += n * sz;
        return 0;
    }
    /* variable-size elements: a string is at least 8 bytes, an array at least 12 */
    uint64_t min = et == GGUF_STRING ? 8 : 12;
    if (n > rd_left(r) / min)
        return err_set(r->e, ERR_FORMAT,
                       "array at offset %" PRIu64 " claims %" PRIu64 " %s elements, more than the file can hold",
                       at, n, vtype_names[et]);
    struct gguf_str *strs = NULL;
    if (kv && et == GGUF_STRING) {
        if (n > GGUF_MAX_ENTRIES)
            return err_set(r->e, ERR_FORMAT, "string array at offset %" PRIu64 " too long (%" PRIu64 ")",
                           at, n);
        strs = malloc((n ? n : 1) * sizeof *strs);
        if (!strs) return err_set(r->e, ERR_NOMEM, "out of memory for a %" PRIu64 "-string array", n);
        kv->strs = strs;
    }
    for (uint64_t i = 0; i < n; i++) {
        if (et == GGUF_STRING) {
            struct gguf_str s;
            if (rd_str(r, &s, "array string")) return -1;
            if (strs) strs[i] = s;
        } else if (rd_array(r, depth + 1, NULL)) {
            return -1;
        }
    }
    return 0;
}

/* ---- name index (open addressing, FNV-1a) ---- */
static uint64_t name_hash(const char *p, uint64_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    return h;
}

static bool str_eq_n(struct gguf_str s, const char *p, uint64_t n)
{
    return s.len == n && (n == 0 || memcmp(s.p, p, n) == 0);
}

static uint64_t index_cap_for(int64_t n)
{
    uint64_t cap = 8;
    while (cap < (uint64_t)n * 2) cap *= 2;
    return cap;
}

/* Slot of name in the index, or of the empty slot where it would go. */
static uint64_t index_slot(const uint32_t *idx, uint64_t cap, const void *items, size_t stride,
                           const char *p, uint64_t n)
{
    uint64_t i = name_hash(p, n) & (cap - 1);
    for (;;) {
        uint32_t v = idx[i];
        if (!v) return i;
        const struct gguf_str *s = (const struct gguf_str *)((const char *)items + (size_t)(v - 1) * stride);
        if (str_eq_n(*s, p, n)) return i;
        i = (i + 1) & (cap - 1);
    }
}

/* ---- open ---- */
static void fmt_name(char *out, size_t cap, struct gguf_str s)
{
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.p[i];
        out[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    out[n] = 0;
}

static int parse(struct gguf *g, struct err *e)
{
    struct rd r = {.p = g->map, .n = g->map_size, .off = 0, .e = e};
    uint32_t version;
    uint64_t n_tensors, n_kv;
    char name[80];

    if (rd_need(&r, 4, "magic")) return err_wrap(e, "not a GGUF file");
    if (memcmp(r.p, "GGUF", 4) != 0)
        return err_set(e, ERR_FORMAT, "not a GGUF file: bad magic %02x %02x %02x %02x at offset 0",
                       r.p[0], r.p[1], r.p[2], r.p[3]);
    r.off = 4;
    if (rd_u32(&r, &version, "version")) return -1;
    if (version != 2 && version != 3) {
        if (version == 1) return err_set(e, ERR_UNSUPPORTED, "GGUF version 1 is not supported (offset 4)");
        if ((version & 0xffff) == 0 && (version >> 16))
            return err_set(e, ERR_UNSUPPORTED, "big-endian GGUF is not supported (offset 4)");
        return err_set(e, ERR_FORMAT, "unknown GGUF version %" PRIu32 " at offset 4", version);
    }
    g->version = version;
    if (rd_u64(&r, &n_tensors, "tensor count") || rd_u64(&r, &n_kv, "metadata count")) return -1;
    /* smallest encodings: kv = key len 8 + type 4 + 1-byte value; tensor info = name len 8 +
     * n_dims 4 + one dim 8 + type 4 + offset 8 */
    if (n_kv > rd_left(&r) / 13 || n_kv > GGUF_MAX_ENTRIES)
        return err_set(e, ERR_FORMAT, "metadata count %" PRIu64 " (offset 16) exceeds what the file can hold",
                       n_kv);
    if (n_tensors > (rd_left(&r) - n_kv * 13) / 32 || n_tensors > GGUF_MAX_ENTRIES)
        return err_set(e, ERR_FORMAT, "tensor count %" PRIu64 " (offset 8) exceeds what the file can hold",
                       n_tensors);
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    g->kv_index_cap = index_cap_for((int64_t)n_kv);
    g->t_index_cap = index_cap_for((int64_t)n_tensors);
    g->kv_index = calloc(g->kv_index_cap, sizeof *g->kv_index);
    g->t_index = calloc(g->t_index_cap, sizeof *g->t_index);
    if (!g->kv || !g->tensors || !g->kv_index || !g->t_index)
        return err_set(e, ERR_NOMEM, "out of memory for %" PRIu64 " keys and %" PRIu64 " tensors", n_kv,
                       n_tensors);

    for (uint64_t i = 0; i < n_kv; i++) {
        struct gguf_kv *kv = &g->kv[i];
        uint64_t at = r.off;
        if (rd_str(&r, &kv->key, "key")) return err_wrap(e, "metadata entry %" PRIu64, i);
        fmt_name(name, sizeof name, kv->key);
        uint64_t slot = index_slot(g->kv_index, g->kv_index_cap, g->kv, sizeof *g->kv, kv->key.p, kv->key.len);
        if (g->kv_index[slot])
            return err_set(e, ERR_FORMAT, "duplicate metadata key '%s' at offset %" PRIu64, name, at);
        g->kv_index[slot] = (uint32_t)(i + 1);
        if (rd_vtype(&r, &kv->type, "value type")) return err_wrap(e, "metadata '%s'", name);
        int rc = 0;
        if (kv->type == GGUF_STRING) {
            rc = rd_str(&r, &kv->str, "string value");
        } else if (kv->type == GGUF_ARRAY) {
            rc = rd_array(&r, 0, kv);
        } else {
            rc = rd_need(&r, vtype_size[kv->type], "value");
            if (!rc && kv->type == GGUF_BOOL) rc = check_bools(&r, r.p + r.off, 1);
            if (!rc) {
                scalar_decode(kv->type, r.p + r.off, kv);
                r.off += vtype_size[kv->type];
            }
        }
        if (rc) return err_wrap(e, "metadata '%s' (entry %" PRIu64 " at offset %" PRIu64 ")", name, i, at);
    }

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct gguf_kv *al = gguf_find(g, "general.alignment");
    if (al) {
        if (al->type != GGUF_U32)
            return err_set(e, ERR_FORMAT, "general.alignment has type %s, expected u32", vtype_names[al->type]);
        if (al->v.u == 0 || (al->v.u & (al->v.u - 1)))
            return err_set(e, ERR_FORMAT, "general.alignment %" PRIu64 " is not a power of two", al->v.u);
        g->alignment = al->v.u;
    }

    for (uint64_t i = 0; i < n_tensors; i++) {
        struct gguf_tensor *t = &g->tensors[i];
        uint64_t at = r.off;
        uint32_t nd, type;
        if (rd_str(&r, &t->name, "tensor name")) return err_wrap(e, "tensor info %" PRIu64, i);
        fmt_name(name, sizeof name, t->name);
        uint64_t slot = index_slot(g->t_index, g->t_index_cap, g->tensors, sizeof *g->tensors, t->name.p,
                                   t->name.len);
        if (g->t_index[slot])
            return err_set(e, ERR_FORMAT, "duplicate tensor name '%s' at offset %" PRIu64, name, at);
        g->t_index[slot] = (uint32_t)(i + 1);
        if (rd_u32(&r, &nd, "n_dims")) return err_wrap(e, "tensor '%s'", name);
        if (nd < 1 || nd > GGUF_MAX_DIMS)
            return err_set(e, ERR_FORMAT, "tensor '%s' (offset %" PRIu64 "): n_dims %" PRIu32 " outside 1..%d",
                           name, at, nd, GGUF_MAX_DIMS);
        t->n_dims = (int)nd;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < nd; d++) {
            uint64_t v;
            if (rd_u64(&r, &v, "dimension")) return err_wrap(e, "tensor '%s'", name);
            if (v > (uint64_t)INT64_MAX)
                return err_set(e, ERR_FORMAT, "tensor '%s': dimension %" PRIu32 " = %" PRIu64 " at offset %" PRIu64
                               " is too large", name, d, v, r.off - 8);
            t->ne[d] = (int64_t)v;
        }
        if (rd_u32(&r, &type, "tensor type") || rd_u64(&r, &t->offset, "tensor offset"))
            return err_wrap(e, "tensor '%s'", name);
        t->type = type;
        uint64_t nbytes;
        if (gguf_tensor_nbytes(type, t->n_dims, t->ne, &nbytes, e))
            return err_wrap(e, "tensor '%s' (info at offset %" PRIu64 ")", name, at);
        t->nbytes = nbytes;
        if (t->offset % g->alignment)
            return err_set(e, ERR_FORMAT, "tensor '%s': data offset %" PRIu64 " is not a multiple of alignment %" PRIu64,
                           name, t->offset, g->alignment);
    }

    /* data section: starts at the next multiple of alignment after the tensor infos */
    uint64_t pad = (g->alignment - r.off % g->alignment) % g->alignment;
    uint64_t data_off = r.off + pad;
    if (pad > rd_left(&r)) {
        if (n_tensors)
            return err_set(e, ERR_FORMAT, "truncated: tensor data section at offset %" PRIu64 " is past the end (%" PRIu64 ")",
                           data_off, r.n);
        data_off = r.n;
    }
    g->data = g->map + data_off;
    g->data_size = r.n - data_off;
    for (uint64_t i = 0; i < n_tensors; i++) {
        struct gguf_tensor *t = &g->tensors[i];
        if (t->offset > g->data_size || t->nbytes > g->data_size - t->offset) {
            fmt_name(name, sizeof name, t->name);
            return err_set(e, ERR_FORMAT,
                           "truncated: tensor '%s' data [%" PRIu64 ", +%" PRIu64 ") at file offset %" PRIu64
                           " runs past the end of the file (%" PRIu64 " bytes)",
                           name, t->offset, t->nbytes, data_off + (t->offset < g->data_size ? t->offset : 0), r.n);
        }
        t->data = g->data + t->offset;
    }
    return 0;
}

static void free_tables(struct gguf *g)
{
    if (g->kv)
        for (int64_t i = 0; i < g->n_kv; i++) free((void *)g->kv[i].strs);
    free(g->kv);
    free(g->tensors);
    free(g->kv_index);
    free(g->t_index);
}

int gguf_open_mem(struct gguf *g, const void *p, size_t n, struct err *e)
{
    memset(g, 0, sizeof *g);
    g->fd = -1;
    g->map = p;
    g->map_size = n;
    if (!p && n) return err_set(e, ERR_INVALID, "gguf: NULL buffer");
    if (parse(g, e)) {
        free_tables(g);
        memset(g, 0, sizeof *g);
        g->fd = -1;
        return err_wrap(e, "gguf");
    }
    return 0;
}

/* The file's n bytes read into private anonymous memory, then made read-only (as the mapping). */
static void *read_whole(int fd, size_t n, const char *path, struct err *e)
{
    void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        err_set(e, ERR_NOMEM, "gguf: cannot allocate %zu bytes to read %s into (--no-mmap): %s", n,
                path, strerror(errno));
        return NULL;
    }
    for (size_t off = 0; off < n;) {
        ssize_t k = pread(fd, (char *)m + off, n - off, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            err_set(e, ERR_IO, "gguf: cannot read %s at byte %zu of %zu: %s", path, off, n,
                    k < 0 ? strerror(errno) : "unexpected end of file");
            munmap(m, n);
            return NULL;
        }
        off += (size_t)k;
    }
    mprotect(m, n, PROT_READ);
    return m;
}

int gguf_open(struct gguf *g, const char *path, struct err *e)
{
    return gguf_open_ex(g, path, 0, e);
}

int gguf_open_ex(struct gguf *g, const char *path, int copy, struct err *e)
{
    memset(g, 0, sizeof *g);
    g->fd = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(e, ERR_IO, "gguf: cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        err_set(e, ERR_IO, "gguf: cannot stat %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || st.st_size <= 0) {
        err_set(e, ERR_FORMAT, "gguf: %s: %s", path, S_ISREG(st.st_mode) ? "file is empty" : "not a regular file");
        close(fd);
        return -1;
    }
    size_t n = (size_t)st.st_size;
    void *m;
    if (copy) {
        if (!(m = read_whole(fd, n, path, e))) {
            close(fd);
            return -1;
        }
    } else if ((m = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) {
        err_set(e, ERR_IO, "gguf: cannot map %s (%zu bytes): %s", path, n, strerror(errno));
        close(fd);
        return -1;
    }
    if (gguf_open_mem(g, m, n, e)) {
        err_wrap(e, "%s", path);
        munmap(m, n);
        close(fd);
        return -1;
    }
    g->fd = fd;
    return 0;
}

void gguf_close(struct gguf *g)
{
    if (!g) return;
    free_tables(g);
    /* owned mapping only after gguf_open (fd >= 0 and map set): a zero-initialized struct, a
     * failed open or gguf_open_mem close nothing */
    if (g->fd >= 0 && g->map) {
        munmap((void *)g->map, g->map_size);
        close(g->fd);
    }
    if (g->repack) munmap(g->repack, g->repack_size);
    memset(g, 0, sizeof *g);
    g->fd = -1;
}

/* ---- accessors ---- */
const struct gguf_kv *gguf_find(const struct gguf *g, const char *key)
{
    if (!g->kv_index || !key) return NULL;
    uint64_t s = index_slot(g->kv_index, g->kv_index_cap, g->kv, sizeof *g->kv, key, strlen(key));
    return g->kv_index[s] ? &g->kv[g->kv_index[s] - 1] : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name)
{
    if (!g->t_index || !name) return NULL;
    uint64_t s = index_slot(g->t_index, g->t_index_cap, g->tensors, sizeof *g->tensors, name, strlen(name));
    return g->t_index[s] ? &g->tensors[g->t_index[s] - 1] : NULL;
}

static const struct gguf_kv *find_or_err(const struct gguf *g, const char *key, struct err *e)
{
    const struct gguf_kv *kv = gguf_find(g, key);
    if (!kv) err_set(e, ERR_NOT_FOUND, "gguf: missing key %s", key);
    return kv;
}

static bool is_signed(enum gguf_vtype t)
{
    return t == GGUF_I8 || t == GGUF_I16 || t == GGUF_I32 || t == GGUF_I64;
}
static bool is_unsigned(enum gguf_vtype t)
{
    return t == GGUF_U8 || t == GGUF_U16 || t == GGUF_U32 || t == GGUF_U64;
}

int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out, struct err *e)
{
    const struct gguf_kv *kv = find_or_err(g, key, e);
    if (!kv) return -1;
    if (is_unsigned(kv->type) && kv->v.u <= UINT32_MAX) {
        *out = (uint32_t)kv->v.u;
        return 0;
    }
    if (is_signed(kv->type) && kv->v.i >= 0 && kv->v.i <= (int64_t)UINT32_MAX) {
        *out = (uint32_t)kv->v.i;
        return 0;
    }
    if (is_unsigned(kv->type) || is_signed(kv->type))
        return err_set(e, ERR_RANGE, "gguf: %s does not fit in u32", key);
    return err_set(e, ERR_FORMAT, "gguf: %s has type %s, expected an integer", key, vtype_names[kv->type]);
}

int gguf_get_i64(const struct gguf *g, const char *key, int64_t *out, struct err *e)
{
    const struct gguf_kv *kv = find_or_err(g, key, e);
    if (!kv) return -1;
    if (is_signed(kv->type)) {
        *out = kv->v.i;
        return 0;
    }
    if (is_unsigned(kv->type)) {
        if (kv->v.u > (uint64_t)INT64_MAX) return err_set(e, ERR_RANGE, "gguf: %s does not fit in i64", key);
        *out = (int64_t)kv->v.u;
        return 0;
    }
    return err_set(e, ERR_FORMAT, "gguf: %s has type %s, expected an integer", key, vtype_names[kv->type]);
}

int gguf_get_f32(const struct gguf *g, const char *key, float *out, struct err *e)
{
    const struct gguf_kv *kv = find_or_err(g, key, e);
    if (!kv) return -1;
    /* F64 is rounded to the nearest float (writers store e.g. 1e-6 as f64 and mean that). */
    if (kv->type == GGUF_F32 || kv->type == GGUF_F64) {
        *out = (float)kv->v.f;
        return 0;
    }
    /* integers only when exactly representable */
    if (is_signed(kv->type) && kv->v.i >= -(1 << 24) && kv->v.i <= (1 << 24)) {
        *out = (float)kv->v.i;
        return 0;
    }
    if (is_unsigned(kv->type) && kv->v.u <= (1u << 24)) {
        *out = (float)kv->v.u;
        return 0;
    }
    return err_set(e, ERR_FORMAT, "gguf: %s has type %s, expected a float", key, vtype_names[kv->type]);
}

int gguf_get_bool(const struct gguf *g, const char *key, bool *out, struct err *e)
{
    const struct gguf_kv *kv = find_or_err(g, key, e);
    if (!kv) return -1;
    if (kv->type != GGUF_BOOL)
        return err_set(e, ERR_FORMAT, "gguf: %s has type %s, expected bool", key, vtype_names[kv->type]);
    *out = kv->v.b;
    return 0;
}

char *gguf_get_str(const struct gguf *g, const char *key, struct err *e)
{
    const struct gguf_kv *kv = find_or_err(g, key, e);
    if (!kv) return NULL;
    if (kv->type != GGUF_STRING) {
        err_set(e, ERR_FORMAT, "gguf: %s has type %s, expected string", key, vtype_names[kv->type]);
        return NULL;
    }
    if (kv->str.len >= SIZE_MAX) {
        err_set(e, ERR_RANGE, "gguf: %s is too long", key);
        return NULL;
    }
    char *s = malloc((size_t)kv->str.len + 1);
    if (!s) {
        err_set(e, ERR_NOMEM, "gguf: out of memory copying %s", key);
        return NULL;
    }
    if (kv->str.len) memcpy(s, kv->str.p, (size_t)kv->str.len);
    s[kv->str.len] = 0;
    return s;
}

struct gguf_str gguf_arr_str(const struct gguf_kv *kv, uint64_t i)
{
    struct gguf_str none = {"", 0};
    if (!kv || kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING || !kv->strs || i >= kv->arr_n)
        return none;
    return kv->strs[i];
}

double gguf_arr_f64(const struct gguf_kv *kv, uint64_t i)
{
    if (!kv || kv->type != GGUF_ARRAY || !vtype_numeric(kv->arr_type) || i >= kv->arr_n) return 0;
    struct gguf_kv tmp = {0};
    scalar_decode(kv->arr_type, kv->arr_data + i * vtype_size[kv->arr_type], &tmp);
    if (kv->arr_type == GGUF_F32 || kv->arr_type == GGUF_F64) return tmp.v.f;
    if (kv->arr_type == GGUF_BOOL) return tmp.v.b;
    return is_signed(kv->arr_type) ? (double)tmp.v.i : (double)tmp.v.u;
}

int64_t gguf_arr_i64(const struct gguf_kv *kv, uint64_t i)
{
    if (!kv || kv->type != GGUF_ARRAY || !vtype_numeric(kv->arr_type) || i >= kv->arr_n) return 0;
    struct gguf_kv tmp = {0};
    scalar_decode(kv->arr_type, kv->arr_data + i * vtype_size[kv->arr_type], &tmp);
    if (kv->arr_type == GGUF_F32 || kv->arr_type == GGUF_F64) {
        double f = tmp.v.f;
        if (!(f >= -9.2e18 && f <= 9.2e18)) return 0; /* NaN or out of range */
        return (int64_t)f;
    }
    if (kv->arr_type == GGUF_BOOL) return tmp.v.b;
    if (is_signed(kv->arr_type)) return tmp.v.i;
    return tmp.v.u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)tmp.v.u;
}

bool gguf_str_eq(struct gguf_str s, const char *c)
{
    return c && str_eq_n(s, c, strlen(c));
}

/* ================================ writer ================================ */

struct wkv {
    char *key;
    enum gguf_vtype type;
    uint8_t *val; /* encoded value (after the type field) */
    size_t val_len;
};

struct wtensor {
    char *name;
    uint32_t type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes, offset;
    void *data; /* owned copy, or NULL when fill is set */
    gguf_fill_fn fill;
    void *ctx;
};

struct gguf_writer {
    uint64_t alignment;
    struct wkv *kv;
    int64_t n_kv, cap_kv;
    struct wtensor *t;
    int64_t n_t, cap_t;
    bool failed;
    struct err err;
};

struct gguf_writer *gguf_writer_new(uint32_t alignment)
{
    if (alignment == 0) alignment = GGUF_DEFAULT_ALIGNMENT;
    if (alignment & (alignment - 1)) return NULL;
    struct gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->alignment = alignment;
    return w;
}

void gguf_writer_free(struct gguf_writer *w)
{
    if (!w) return;
    for (int64_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    for (int64_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->kv);
    free(w->t);
    free(w);
}

__attribute__((format(printf, 3, 4))) static int w_fail(struct gguf_writer *w, enum err_code c, const char *fmt, ...)
{
    if (!w->failed) {
        va_list ap;
        va_start(ap, fmt);
        w->err.code = c;
        w->err.param[0] = 0;
        vsnprintf(w->err.msg, sizeof w->err.msg, fmt, ap);
        va_end(ap);
        w->failed = true;
    }
    return -1;
}

/* Adds key with an encoded value buffer (ownership of val passes to w, also on failure). */
static int w_add(struct gguf_writer *w, const char *key, enum gguf_vtype type, uint8_t *val, size_t len)
{
    if (!key) {
        free(val);
        return w_fail(w, ERR_INVALID, "gguf writer: NULL key");
    }
    for (int64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) {
            free(val);
            return w_fail(w, ERR_INVALID, "gguf writer: duplicate key %s", key);
        }
    if (w->n_kv == w->cap_kv) {
        int64_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        struct wkv *p = realloc(w->kv, (size_t)cap * sizeof *p);
        if (!p) {
            free(val);
            return w_fail(w, ERR_NOMEM, "gguf writer: out of memory");
        }
        w->kv = p;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(val);
        return w_fail(w, ERR_NOMEM, "gguf writer: out of memory");
    }
    w->kv[w->n_kv++] = (struct wkv){.key = k, .type = type, .val = val, .val_len = len};
    return 0;
}

static int w_scalar(struct gguf_writer *w, const char *key, enum gguf_vtype t, const void *v)
{
    uint8_t *val = malloc(vtype_size[t]);
    if (!val) return w_fail(w, ERR_NOMEM, "gguf writer: out of memory");
    memcpy(val, v, vtype_size[t]);
    return w_add(w, key, t, val, vtype_size[t]);
}

int gguf_w_u32(struct gguf_writer *w, const char *key, uint32_t v) { return w_scalar(w, key, GGUF_U32, &v); }
int gguf_w_i32(struct gguf_writer *w, const char *key, int32_t v) { return w_scalar(w, key, GGUF_I32, &v); }
int gguf_w_u64(struct gguf_writer *w, const char *key, uint64_t v) { return w_scalar(w, key, GGUF_U64, &v); }
int gguf_w_f32(struct gguf_writer *w, const char *key, float v) { return w_scalar(w, key, GGUF_F32, &v); }
int gguf_w_bool(struct gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v ? 1 : 0;
    return w_scalar(w, key, GGUF_BOOL, &b);
}

int gguf_w_str(struct gguf_writer *w, const char *key, const char *v)
{
    if (!v) return w_fail(w, ERR_INVALID, "gguf writer: NULL string for %s", key ? key : "(null)");
    uint64_t n = strlen(v);
    uint8_t *val = malloc(8 + n);
    if (!val) return w_fail(w, ERR_NOMEM, "gguf writer: out of memory");
    memcpy(val, &n, 8);
    memcpy(val + 8, v, n);
    return w_add(w, key, GGUF_STRING, val, 8 + n);
}

int gguf_w_arr_str(struct gguf_writer *w, const char *key, const char *const *strs, uint64_t n)
{
    uint64_t len = 12;
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i]) return w_fail(w, ERR_INVALID, "gguf writer: NULL string %" PRIu64 " in %s", i, key ? key : "");
        len += 8 + strlen(strs[i]);
    }
    uint8_t *val = malloc(len), *p = val;
    if (!val) return w_fail(w, ERR_NOMEM, "gguf writer: out of memory");
    uint32_t et = GGUF_STRING;
    memcpy(p, &et, 4);
    memcpy(p + 4, &n, 8);
    p += 12;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t sl = strlen(strs[i]);
        memcpy(p, &sl, 8);
        memcpy(p + 8, strs[i], sl);
        p += 8 + sl;
    }
    return w_add(w, key, GGUF_ARRAY, val, len);
}

int gguf_w_arr_num(struct gguf_writer *w, const char *key, enum gguf_vtype elem_type, const void *nums,
                   uint64_t n)
{
    if (!vtype_numeric(elem_type))
        return w_fail(w, ERR_INVALID, "gguf writer: %s: element type %s is not numeric", key ? key : "",
                      gguf_vtype_name(elem_type));
    uint64_t sz = vtype_size[elem_type];
    if (n > (SIZE_MAX - 12) / sz) return w_fail(w, ERR_RANGE, "gguf writer: array %s too long", key ? key : "");
    uint8_t *val = malloc(12 + n * sz);
    if (!val) return w_fail(w, ERR_NOMEM, "gguf writer: out of memory");
    uint32_t et = elem_type;
    memcpy(val, &et, 4);
    memcpy(val + 4, &n, 8);
    if (n) memcpy(val + 12, nums, n * sz);
    return w_add(w, key, GGUF_ARRAY, val, 12 + n * sz);
}

static int w_tensor_add(struct gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne,
                        const void *data, gguf_fill_fn fill, void *ctx)
{
    struct err e;
    uint64_t nbytes;
    if (!name) return w_fail(w, ERR_INVALID, "gguf writer: NULL tensor name");
    if (gguf_tensor_nbytes(type, n_dims, ne, &nbytes, &e))
        return w_fail(w, e.code, "gguf writer: tensor %s: %s", name, e.msg);
    if (nbytes > SIZE_MAX) return w_fail(w, ERR_RANGE, "gguf writer: tensor %s too large", name);
    for (int64_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) return w_fail(w, ERR_INVALID, "gguf writer: duplicate tensor %s", name);
    if (w->n_t == w->cap_t) {
        int64_t cap = w->cap_t ? w->cap_t * 2 : 64;
        struct wtensor *p = realloc(w->t, (size_t)cap * sizeof *p);
        if (!p) return w_fail(w, ERR_NOMEM, "gguf writer: out of memory");
        w->t = p;
        w->cap_t = cap;
    }
    struct wtensor t = {.type = type, .n_dims = n_dims, .nbytes = nbytes, .fill = fill, .ctx = ctx};
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t.ne[d] = d < n_dims ? ne[d] : 1;
    t.name = strdup(name);
    if (!t.name) return w_fail(w, ERR_NOMEM, "gguf writer: out of memory");
    if (!fill) {
        t.data = malloc(nbytes ? (size_t)nbytes : 1);
        if (!t.data) {
            free(t.name);
            return w_fail(w, ERR_NOMEM, "gguf writer: out of memory for tensor %s (%" PRIu64 " bytes)", name, nbytes);
        }
        if (nbytes) memcpy(t.data, data, (size_t)nbytes);
    }
    w->t[w->n_t++] = t;
    return 0;
}

int gguf_w_tensor(struct gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne,
                  const void *data)
{
    return w_tensor_add(w, name, type, n_dims, ne, data, NULL, NULL);
}

int gguf_w_tensor_fill(struct gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne,
                       gguf_fill_fn fill, void *ctx)
{
    if (!fill) return w_fail(w, ERR_INVALID, "gguf writer: tensor %s: NULL fill function", name ? name : "");
    return w_tensor_add(w, name, type, n_dims, ne, NULL, fill, ctx);
}

/* ---- save ---- */
#define GGUF_WRITE_CHUNK (8u << 20) /* bytes of tensor data produced per fill() call (at least a row) */

struct wout {
    FILE *f;
    uint64_t pos;
    bool bad;
};

static void out_put(struct wout *o, const void *p, size_t n)
{
    if (o->bad || !n) return;
    if (fwrite(p, 1, n, o->f) != n) o->bad = true;
    o->pos += n;
}

static void out_pad(struct wout *o, uint64_t to)
{
    static const uint8_t zeros[256];
    while (o->pos < to) {
        uint64_t k = to - o->pos < sizeof zeros ? to - o->pos : sizeof zeros;
        out_put(o, zeros, (size_t)k);
        if (o->bad) return;
    }
}

static void out_str(struct wout *o, const char *s)
{
    uint64_t n = strlen(s);
    out_put(o, &n, 8);
    out_put(o, s, (size_t)n);
}

static int write_all(struct gguf_writer *w, struct wout *o, struct err *e)
{
    const struct wkv *al = NULL;
    for (int64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, "general.alignment") == 0) al = &w->kv[i];
    if (al) {
        uint32_t v = 0;
        if (al->type == GGUF_U32) memcpy(&v, al->val, 4);
        if (al->type != GGUF_U32 || v != w->alignment)
            return err_set(e, ERR_INVALID, "gguf writer: general.alignment must be u32 %" PRIu64, w->alignment);
    }
    /* tensor data offsets */
    uint64_t off = 0;
    for (int64_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        uint64_t end = off + w->t[i].nbytes;
        off = (end + w->alignment - 1) / w->alignment * w->alignment;
    }

    uint32_t version = 3;
    uint64_t n_t = (uint64_t)w->n_t, n_kv = (uint64_t)w->n_kv + (al ? 0 : 1);
    out_put(o, "GGUF", 4);
    out_put(o, &version, 4);
    out_put(o, &n_t, 8);
    out_put(o, &n_kv, 8);
    if (!al) {
        uint32_t t = GGUF_U32, v = (uint32_t)w->alignment;
        out_str(o, "general.alignment");
        out_put(o, &t, 4);
        out_put(o, &v, 4);
    }
    for (int64_t i = 0; i < w->n_kv; i++) {
        uint32_t t = w->kv[i].type;
        out_str(o, w->kv[i].key);
        out_put(o, &t, 4);
        out_put(o, w->kv[i].val, w->kv[i].val_len);
    }
    for (int64_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        uint32_t nd = (uint32_t)t->n_dims;
        out_str(o, t->name);
        out_put(o, &nd, 4);
        for (int d = 0; d < t->n_dims; d++) {
            uint64_t v = (uint64_t)t->ne[d];
            out_put(o, &v, 8);
        }
        out_put(o, &t->type, 4);
        out_put(o, &t->offset, 8);
    }
    out_pad(o, (o->pos + w->alignment - 1) / w->alignment * w->alignment);
    uint64_t data_start = o->pos;

    void *chunk = NULL;
    size_t chunk_cap = 0;
    int rc = 0;
    for (int64_t i = 0; i < w->n_t && !o->bad; i++) {
        const struct wtensor *t = &w->t[i];
        out_pad(o, data_start + t->offset);
        if (!t->fill) {
            out_put(o, t->data, (size_t)t->nbytes);
            continue;
        }
        int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        if (!rows || !t->nbytes) continue;
        size_t row_bytes = (size_t)(t->nbytes / (uint64_t)rows);
        int64_t per = row_bytes >= GGUF_WRITE_CHUNK ? 1 : (int64_t)(GGUF_WRITE_CHUNK / row_bytes);
        if (per > rows) per = rows;
        size_t need = (size_t)per * row_bytes;
        if (need > chunk_cap) {
            free(chunk);
            chunk = malloc(need);
            chunk_cap = chunk ? need : 0;
            if (!chunk) {
                rc = err_set(e, ERR_NOMEM, "gguf writer: out of memory (%zu bytes) writing %s", need, t->name);
                break;
            }
        }
        for (int64_t r0 = 0; r0 < rows && !o->bad; r0 += per) {
            int64_t n = rows - r0 < per ? rows - r0 : per;
            if (t->fill(t->ctx, r0, n, chunk, e)) {
                rc = err_wrap(e, "gguf writer: tensor %s", t->name);
                break;
            }
            out_put(o, chunk, (size_t)n * row_bytes);
        }
        if (rc) break;
    }
    free(chunk);
    return rc;
}

int gguf_writer_save(struct gguf_writer *w, const char *path, struct err *e)
{
    if (!w) return err_set(e, ERR_NOMEM, "gguf writer: out of memory");
    if (w->failed) {
        if (e) *e = w->err;
        return -1;
    }
    size_t tl = strlen(path) + 32;
    char *tmp = malloc(tl);
    if (!tmp) return err_set(e, ERR_NOMEM, "gguf writer: out of memory");
    snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    struct wout o = {.f = fopen(tmp, "wb")};
    if (!o.f) {
        err_set(e, ERR_IO, "gguf writer: cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    setvbuf(o.f, NULL, _IOFBF, 1 << 20);
    int rc = write_all(w, &o, e);
    if (fflush(o.f) != 0) o.bad = true;
    if (fclose(o.f) != 0) o.bad = true;
    if (!rc && o.bad) rc = err_set(e, ERR_IO, "gguf writer: write to %s failed: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path) != 0)
        rc = err_set(e, ERR_IO, "gguf writer: cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (rc) unlink(tmp);
    free(tmp);
    return rc;
}

int gguf_writer_save_mem(struct gguf_writer *w, void **out, size_t *n, struct err *e)
{
    *out = NULL;
    *n = 0;
    if (!w) return err_set(e, ERR_NOMEM, "gguf writer: out of memory");
    if (w->failed) {
        if (e) *e = w->err;
        return -1;
    }
    char *buf = NULL;
    size_t len = 0;
    struct wout o = {.f = open_memstream(&buf, &len)};
    if (!o.f) return err_set(e, ERR_NOMEM, "gguf writer: cannot open a memory stream");
    int rc = write_all(w, &o, e);
    if (fclose(o.f) != 0) o.bad = true;
    if (!rc && o.bad) rc = err_set(e, ERR_NOMEM, "gguf writer: writing to memory failed");
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    *n = len;
    return 0;
}
