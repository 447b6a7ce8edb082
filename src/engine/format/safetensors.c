/* safetensors — reader: every header field checked before a data pointer is handed out
 * (layout and invariants in safetensors.h). */
#include "engine/format/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
    const char *name;
    size_t size;
} st_types[ST_DTYPE_COUNT] = {
    [ST_F64] = {"F64", 8},   [ST_F32] = {"F32", 4},   [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2}, [ST_I64] = {"I64", 8},   [ST_I32] = {"I32", 4},
    [ST_I16] = {"I16", 2},   [ST_I8] = {"I8", 1},     [ST_U8] = {"U8", 1},
    [ST_BOOL] = {"BOOL", 1}, [ST_U16] = {"U16", 2},   [ST_U32] = {"U32", 4},
    [ST_U64] = {"U64", 8},   [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *st_dtype_name(enum st_dtype t)
{
    return (unsigned)t < ST_DTYPE_COUNT ? st_types[t].name : "?";
}

size_t st_dtype_size(enum st_dtype t)
{
    return (unsigned)t < ST_DTYPE_COUNT ? st_types[t].size : 0;
}

int64_t st_numel(const struct st_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->n_dims; i++) n *= t->shape[i];
    return n;
}

void st_close(struct safetensors *st)
{
    if (!st) return;
    for (int64_t i = 0; i < st->n_tensors; i++) free(st->tensors[i].name);
    free(st->tensors);
    for (int64_t i = 0; i < st->n_meta; i++) {
        free(st->meta_key[i]);
        free(st->meta_val[i]);
    }
    free(st->meta_key);
    free(st->meta_val);
    if (st->fd >= 0 && st->map) munmap((void *)st->map, st->map_size);
    if (st->fd >= 0) close(st->fd);
    memset(st, 0, sizeof *st);
    st->fd = -1;
}

const struct st_tensor *st_find(const struct safetensors *st, const char *name)
{
    for (int64_t i = 0; i < st->n_tensors; i++)
        if (!strcmp(st->tensors[i].name, name)) return &st->tensors[i];
    return NULL;
}

const char *st_meta(const struct safetensors *st, const char *key)
{
    for (int64_t i = 0; i < st->n_meta; i++)
        if (!strcmp(st->meta_key[i], key)) return st->meta_val[i];
    return NULL;
}

/* One tensor entry: dtype, shape, data_offsets, and nothing else. */
static int parse_tensor(struct st_tensor *t, const char *name, json_t *v, uint64_t data_size,
                        const char *label, struct err *e)
{
    if (!json_is_object(v))
        return err_set(e, ERR_FORMAT, "%s: tensor '%s': entry is not an object", label, name);
    const char *k;
    json_t *f;
    json_object_foreach(v, k, f)
    {
        if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
            return err_set(e, ERR_FORMAT, "%s: tensor '%s': unknown field '%s'", label, name, k);
    }
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
           *off = json_object_get(v, "data_offsets");
    if (!dt || !json_is_string(dt))
        return err_set(e, ERR_FORMAT, "%s: tensor '%s': field 'dtype' is %s", label, name,
                       dt ? "not a string" : "missing");
    int ty = -1;
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (!strcmp(json_string_value(dt), st_types[i].name)) ty = i;
    if (ty < 0)
        return err_set(e, ERR_FORMAT, "%s: tensor '%s': dtype '%.32s' is not a safetensors dtype",
                       label, name, json_string_value(dt));
    t->dtype = (enum st_dtype)ty;
    if (!sh || !json_is_array(sh))
        return err_set(e, ERR_FORMAT, "%s: tensor '%s': field 'shape' is %s", label, name,
                       sh ? "not an array" : "missing");
    size_t nd = json_array_size(sh);
    if (nd > ST_MAX_DIMS)
        return err_set(e, ERR_FORMAT, "%s: tensor '%s': shape has %zu dimensions (at most %d)",
                       label, name, nd, ST_MAX_DIMS);
    t->n_dims = (int)nd;
    uint64_t bytes = st_types[ty].size;
    bool zero = false;
    for (int i = 0; i < ST_MAX_DIMS; i++) t->shape[i] = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(sh, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return err_set(e, ERR_FORMAT, "%s: tensor '%s': shape[%zu] is not a non-negative integer",
                           label, name, i);
        uint64_t n = (uint64_t)json_integer_value(d);
        t->shape[i] = (int64_t)n;
        if (n == 0) zero = true;
        /* the byte count must fit; a zero later in the shape makes it 0 whatever came before */
        if (!zero && n && bytes > UINT64_MAX / n)
            return err_set(e, ERR_FORMAT, "%s: tensor '%s': shape overflows a 64-bit byte count",
                           label, name);
        if (!zero) bytes *= n;
    }
    if (zero) bytes = 0;
    if (!off || !json_is_array(off) || json_array_size(off) != 2)
        return err_set(e, ERR_FORMAT, "%s: tensor '%s': field 'data_offsets' is %s", label, name,
                       off ? "not an array of two integers" : "missing");
    json_t *b0 = json_array_get(off, 0), *b1 = json_array_get(off, 1);
    if (!json_is_integer(b0) || !json_is_integer(b1) || json_integer_value(b0) < 0 ||
        json_integer_value(b1) < 0)
        return err_set(e, ERR_FORMAT, "%s: tensor '%s': data_offsets are not non-negative integers",
                       label, name);
    t->begin = (uint64_t)json_integer_value(b0);
    t->end = (uint64_t)json_integer_value(b1);
    if (t->begin > t->end)
        return err_set(e, ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin",
                       label, name, (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end > data_size)
        return err_set(e, ERR_FORMAT,
                       "%s: tensor '%s': data_offsets end %llu is past the data section (%llu bytes)",
                       label, name, (unsigned long long)t->end, (unsigned long long)data_size);
    if (t->end - t->begin != bytes)
        return err_set(e, ERR_FORMAT,
                       "%s: tensor '%s': data_offsets span %llu bytes, shape x %s needs %llu", label,
                       name, (unsigned long long)(t->end - t->begin), st_types[ty].name,
                       (unsigned long long)bytes);
    return 0;
}

static int cmp_begin(const void *a, const void *b)
{
    const struct st_tensor *x = *(const struct st_tensor *const *)a, *y = *(const struct st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

static int parse(struct safetensors *st, const uint8_t *p, size_t n, const char *label, struct err *e)
{
    if (n < 8)
        return err_set(e, ERR_FORMAT, "%s: %zu bytes is too short for a safetensors file (8-byte header length)",
                       label, n);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | p[i];
    if (hl > ST_MAX_HEADER)
        return err_set(e, ERR_FORMAT, "%s: header length %llu is above the limit of %llu bytes", label,
                       (unsigned long long)hl, (unsigned long long)ST_MAX_HEADER);
    if (hl > n - 8)
        return err_set(e, ERR_FORMAT, "%s: header length %llu is past the end of the file (%zu bytes)",
                       label, (unsigned long long)hl, n);
    if (hl < 2) return err_set(e, ERR_FORMAT, "%s: header length %llu cannot hold a JSON object", label,
                               (unsigned long long)hl);
    st->map = p;
    st->map_size = n;
    st->header = p + 8;
    st->header_len = hl;
    st->data = p + 8 + hl;
    st->data_size = n - 8 - hl;
    if (p[8] != '{')
        return err_set(e, ERR_FORMAT, "%s: header does not start with '{' (not a JSON object)", label);
    if (memchr(st->header, 0, hl))
        return err_set(e, ERR_FORMAT, "%s: header contains a NUL byte", label);
    json_error_t je;
    json_t *root = json_loadb((const char *)st->header, hl, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return err_set(e, ERR_FORMAT, "%s: header is not valid JSON: %s (at byte %d)", label, je.text,
                       je.position);
    int rc = -1;
    struct st_tensor **order = NULL;
    if (!json_is_object(root)) {
        err_set(e, ERR_FORMAT, "%s: header is not a JSON object", label);
        goto done;
    }
    size_t cap = json_object_size(root);
    st->tensors = calloc(cap ? cap : 1, sizeof *st->tensors);
    if (!st->tensors) {
        err_set(e, ERR_NOMEM, "%s: out of memory for %zu tensors", label, cap);
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(v)) {
                err_set(e, ERR_FORMAT, "%s: __metadata__ is not an object", label);
                goto done;
            }
            size_t nm = json_object_size(v);
            st->meta_key = calloc(nm ? nm : 1, sizeof(char *));
            st->meta_val = calloc(nm ? nm : 1, sizeof(char *));
            if (!st->meta_key || !st->meta_val) {
                err_set(e, ERR_NOMEM, "%s: out of memory", label);
                goto done;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(v, mk, mv)
            {
                if (!json_is_string(mv)) {
                    err_set(e, ERR_FORMAT, "%s: __metadata__ '%.64s' is not a string", label, mk);
                    goto done;
                }
                st->meta_key[st->n_meta] = strdup(mk);
                st->meta_val[st->n_meta] = strdup(json_string_value(mv));
                st->n_meta++;
                if (!st->meta_key[st->n_meta - 1] || !st->meta_val[st->n_meta - 1]) {
                    err_set(e, ERR_NOMEM, "%s: out of memory", label);
                    goto done;
                }
            }
            continue;
        }
        if (!key[0]) {
            err_set(e, ERR_FORMAT, "%s: a tensor has an empty name", label);
            goto done;
        }
        struct st_tensor *t = &st->tensors[st->n_tensors];
        if (!(t->name = strdup(key))) {
            err_set(e, ERR_NOMEM, "%s: out of memory", label);
            goto done;
        }
        st->n_tensors++;
        if (parse_tensor(t, key, v, st->data_size, label, e)) goto done;
        t->data = st->data + t->begin;
    }
    /* non-overlap: sort the non-empty ranges by begin, each must start at or after the last end */
    order = malloc(sizeof *order * (size_t)(st->n_tensors ? st->n_tensors : 1));
    if (!order) {
        err_set(e, ERR_NOMEM, "%s: out of memory", label);
        goto done;
    }
    int64_t no = 0;
    for (int64_t i = 0; i < st->n_tensors; i++)
        if (st->tensors[i].end > st->tensors[i].begin) order[no++] = &st->tensors[i];
    qsort(order, (size_t)no, sizeof *order, cmp_begin);
    for (int64_t i = 1; i < no; i++)
        if (order[i]->begin < order[i - 1]->end) {
            err_set(e, ERR_FORMAT, "%s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap", label,
                    order[i - 1]->name, (unsigned long long)order[i - 1]->begin,
                    (unsigned long long)order[i - 1]->end, order[i]->name,
                    (unsigned long long)order[i]->begin, (unsigned long long)order[i]->end);
            goto done;
        }
    rc = 0;
done:
    free(order);
    json_decref(root);
    return rc;
}

int st_open_mem(struct safetensors *st, const void *p, size_t n, const char *label, struct err *e)
{
    memset(st, 0, sizeof *st);
    st->fd = -1;
    if (parse(st, p, n, label ? label : "(buffer)", e)) {
        st_close(st);
        return -1;
    }
    return 0;
}

int st_open(struct safetensors *st, const char *path, struct err *e)
{
    memset(st, 0, sizeof *st);
    st->fd = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(e, ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return err_set(e, ERR_IO, "%s: not a regular file", path);
    }
    size_t n = (size_t)sb.st_size;
    if (n < 8) {
        close(fd);
        return err_set(e, ERR_FORMAT, "%s: %zu bytes is too short for a safetensors file (8-byte header length)",
                       path, n);
    }
    void *map = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        close(fd);
        return err_set(e, ERR_IO, "%s: cannot map %zu bytes: %s", path, n, strerror(errno));
    }
    if (parse(st, map, n, path, e)) {
        st->fd = fd; /* so st_close unmaps and closes */
        st->map = map;
        st->map_size = n;
        st_close(st);
        return -1;
    }
    st->fd = fd;
    return 0;
}
