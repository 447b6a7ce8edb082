/* gguf reader/writer: round trip through the writer, every value type from an independently
 * hand-built file, and robustness: every truncation and many corruptions must come back as an
 * error (or a successful open whose accessors stay in bounds — ASan checks that in make test). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "base/buf.h"
#include "engine/format/gguf.h"
#include "engine/kernels/quant.h"

static char *tmp_path(const char *tag)
{
    char *p = malloc(128);
    snprintf(p, 128, "/tmp/lms-gguf-%s-%ld-XXXXXX", tag, (long)getpid());
    int fd = mkstemp(p);
    cr_assert(fd >= 0);
    close(fd);
    return p;
}

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)sz + 1);
    cr_assert_eq(fread(p, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return p;
}

/* ---- a file written by the writer ---- */

struct fill_state {
    int64_t next_row, row_len, calls;
};

static int fill_rows(void *ctx, int64_t row0, int64_t n_rows, void *dst, struct err *e)
{
    struct fill_state *s = ctx;
    if (row0 != s->next_row) return err_set(e, ERR_INTERNAL, "out of order: %ld != %ld", (long)row0, (long)s->next_row);
    float *f = dst;
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t i = 0; i < s->row_len; i++) f[r * s->row_len + i] = (float)((row0 + r) * 3 + i % 7);
    s->next_row += n_rows;
    s->calls++;
    return 0;
}

static int fill_fail(void *ctx, int64_t row0, int64_t n_rows, void *dst, struct err *e)
{
    return err_set(e, ERR_INTERNAL, "generator broke");
}

static float t_f32[5 * 3];
static uint8_t t_q8[34 * 2 * 2];
static uint16_t t_f16[7];
static uint8_t t_q4k[144 * 2];

/* Writes the reference file; returns its path. big adds a streamed 16 MiB tensor. */
static char *write_ref(bool big, struct fill_state *fs)
{
    struct gguf_writer *w = gguf_writer_new(64);
    cr_assert(w);
    for (int i = 0; i < 15; i++) t_f32[i] = (float)i * 0.5f - 3;
    for (size_t i = 0; i < sizeof t_q8; i++) t_q8[i] = (uint8_t)(i * 7 + 1);
    for (int i = 0; i < 7; i++) t_f16[i] = (uint16_t)(0x3c00 + i);
    for (size_t i = 0; i < sizeof t_q4k; i++) t_q4k[i] = (uint8_t)(i ^ 0x5a);
    cr_assert_eq(gguf_w_str(w, "general.architecture", "qwen3"), 0);
    cr_assert_eq(gguf_w_u32(w, "u32", 4000000000u), 0);
    cr_assert_eq(gguf_w_i32(w, "i32", -123456), 0);
    cr_assert_eq(gguf_w_u64(w, "u64", 0x1234567890abcdefull), 0);
    cr_assert_eq(gguf_w_f32(w, "f32", 1e-6f), 0);
    cr_assert_eq(gguf_w_bool(w, "yes", true), 0);
    cr_assert_eq(gguf_w_bool(w, "no", false), 0);
    cr_assert_eq(gguf_w_str(w, "empty", ""), 0);
    const char *strs[] = {"hello", "", "w\xc3\xb6rld", "a b"};
    cr_assert_eq(gguf_w_arr_str(w, "strs", strs, 4), 0);
    int32_t ints[] = {1, -2, 3, 2147483647};
    cr_assert_eq(gguf_w_arr_num(w, "ints", GGUF_I32, ints, 4), 0);
    float fl[] = {0.25f, -8.0f};
    cr_assert_eq(gguf_w_arr_num(w, "floats", GGUF_F32, fl, 2), 0);
    cr_assert_eq(gguf_w_arr_num(w, "none", GGUF_U8, NULL, 0), 0);
    cr_assert_eq(gguf_w_tensor(w, "a.f32", GGML_TYPE_F32, 2, (int64_t[]){5, 3}, t_f32), 0);
    cr_assert_eq(gguf_w_tensor(w, "b.q8", GGML_TYPE_Q8_0, 3, (int64_t[]){64, 1, 2}, t_q8), 0);
    cr_assert_eq(gguf_w_tensor(w, "c.f16", GGML_TYPE_F16, 1, (int64_t[]){7}, t_f16), 0);
    if (big) {
        fs->row_len = 512;
        cr_assert_eq(gguf_w_tensor_fill(w, "big", GGML_TYPE_F32, 2, (int64_t[]){512, 8192}, fill_rows, fs), 0);
    }
    cr_assert_eq(gguf_w_tensor(w, "d.q4k", GGML_TYPE_Q4_K, 4, (int64_t[]){256, 1, 2, 1}, t_q4k), 0);
    char *path = tmp_path("ref");
    struct err e = {0};
    cr_assert_eq(gguf_writer_save(w, path, &e), 0, "%s", e.msg);
    gguf_writer_free(w);
    return path;
}

static void check_ref(const struct gguf *g, bool big)
{
    struct err e;
    cr_assert_eq(g->version, 3);
    cr_assert_eq(g->alignment, 64);
    cr_assert_eq(g->n_kv, 13); /* 12 + general.alignment added by the writer */
    cr_assert_eq(g->n_tensors, big ? 5 : 4);
    uint32_t u;
    cr_assert_eq(gguf_get_u32(g, "general.alignment", &u, &e), 0);
    cr_assert_eq(u, 64);
    cr_assert_str_eq(gguf_vtype_name(gguf_find(g, "general.alignment")->type), "u32");
    char *s = gguf_get_str(g, "general.architecture", &e);
    cr_assert_str_eq(s, "qwen3");
    free(s);
    cr_assert_eq(gguf_get_u32(g, "u32", &u, &e), 0);
    cr_assert_eq(u, 4000000000u);
    int64_t i64;
    cr_assert_eq(gguf_get_i64(g, "i32", &i64, &e), 0);
    cr_assert_eq(i64, -123456);
    cr_assert_neq(gguf_get_u32(g, "i32", &u, &e), 0); /* negative does not fit u32 */
    cr_assert_eq(e.code, ERR_RANGE);
    cr_assert_eq(gguf_get_i64(g, "u64", &i64, &e), 0);
    cr_assert_eq(i64, 0x1234567890abcdefll);
    cr_assert_neq(gguf_get_u32(g, "u64", &u, &e), 0);
    float f;
    cr_assert_eq(gguf_get_f32(g, "f32", &f, &e), 0);
    cr_assert_eq(f, 1e-6f);
    cr_assert_eq(gguf_get_f32(g, "u32", &f, &e), -1); /* 4e9 is not exact in f32 */
    bool b = false;
    cr_assert_eq(gguf_get_bool(g, "yes", &b, &e), 0);
    cr_assert(b);
    cr_assert_eq(gguf_get_bool(g, "no", &b, &e), 0);
    cr_assert(!b);
    cr_assert_neq(gguf_get_bool(g, "u32", &b, &e), 0);
    cr_assert(strstr(e.msg, "u32") && strstr(e.msg, "bool"), "%s", e.msg);
    s = gguf_get_str(g, "empty", &e);
    cr_assert_str_eq(s, "");
    free(s);
    cr_assert_null(gguf_get_str(g, "u32", &e));
    cr_assert_null(gguf_get_str(g, "missing", &e));
    cr_assert_eq(e.code, ERR_NOT_FOUND);
    cr_assert(strstr(e.msg, "missing"));
    cr_assert_null(gguf_find(g, "strs.x"));

    const struct gguf_kv *kv = gguf_find(g, "strs");
    cr_assert(kv && kv->type == GGUF_ARRAY && kv->arr_type == GGUF_STRING && kv->arr_n == 4);
    cr_assert(gguf_str_eq(gguf_arr_str(kv, 0), "hello"));
    cr_assert(gguf_str_eq(gguf_arr_str(kv, 1), ""));
    cr_assert(gguf_str_eq(gguf_arr_str(kv, 2), "w\xc3\xb6rld"));
    cr_assert(gguf_str_eq(gguf_arr_str(kv, 3), "a b"));
    cr_assert(!gguf_str_eq(gguf_arr_str(kv, 3), "a b "));
    cr_assert_eq(gguf_arr_str(kv, 4).len, 0); /* out of range: empty */
    kv = gguf_find(g, "ints");
    cr_assert(kv && kv->arr_type == GGUF_I32 && kv->arr_n == 4);
    cr_assert_eq(gguf_arr_i64(kv, 1), -2);
    cr_assert_eq(gguf_arr_i64(kv, 3), 2147483647);
    cr_assert_eq(gguf_arr_f64(kv, 2), 3.0);
    kv = gguf_find(g, "floats");
    cr_assert_eq(gguf_arr_f64(kv, 0), 0.25);
    cr_assert_eq(gguf_arr_i64(kv, 1), -8);
    kv = gguf_find(g, "none");
    cr_assert(kv && kv->arr_type == GGUF_U8 && kv->arr_n == 0);

    const struct gguf_tensor *t = gguf_find_tensor(g, "a.f32");
    cr_assert(t && t->type == GGML_TYPE_F32 && t->n_dims == 2);
    cr_assert(t->ne[0] == 5 && t->ne[1] == 3 && t->ne[2] == 1 && t->ne[3] == 1);
    cr_assert_eq(t->nbytes, sizeof t_f32);
    cr_assert_eq(memcmp(t->data, t_f32, sizeof t_f32), 0);
    cr_assert_eq(t->offset % 64, 0);
    cr_assert_eq((size_t)((const uint8_t *)t->data - g->map) % 64, 0);
    t = gguf_find_tensor(g, "b.q8");
    cr_assert(t && t->type == GGML_TYPE_Q8_0 && t->n_dims == 3 && t->ne[2] == 2 && t->nbytes == sizeof t_q8);
    cr_assert_eq(memcmp(t->data, t_q8, sizeof t_q8), 0);
    t = gguf_find_tensor(g, "c.f16");
    cr_assert(t && t->nbytes == 14 && memcmp(t->data, t_f16, 14) == 0);
    t = gguf_find_tensor(g, "d.q4k");
    cr_assert(t && t->n_dims == 4 && t->nbytes == sizeof t_q4k && memcmp(t->data, t_q4k, sizeof t_q4k) == 0);
    cr_assert_null(gguf_find_tensor(g, "a.f3"));
    if (big) {
        t = gguf_find_tensor(g, "big");
        cr_assert(t && t->nbytes == 512ull * 8192 * 4);
        const float *d = t->data;
        for (int64_t r = 0; r < 8192; r += 97)
            for (int64_t i = 0; i < 512; i += 13) cr_assert_eq(d[r * 512 + i], (float)(r * 3 + i % 7));
        cr_assert_eq(d[8191 * 512 + 511], (float)(8191 * 3 + 511 % 7));
    }
}

Test(gguf, writer_round_trip)
{
    char *path = write_ref(false, NULL);
    struct gguf g;
    struct err e = {0};
    cr_assert_eq(gguf_open(&g, path, &e), 0, "%s", e.msg);
    check_ref(&g, false);
    gguf_close(&g);
    /* the same bytes through gguf_open_mem */
    size_t n;
    uint8_t *buf = slurp(path, &n);
    cr_assert_eq(gguf_open_mem(&g, buf, n, &e), 0, "%s", e.msg);
    check_ref(&g, false);
    gguf_close(&g);
    free(buf);
    unlink(path);
    free(path);
}

Test(gguf, writer_streams_fill_in_order)
{
    struct fill_state fs = {0};
    char *path = write_ref(true, &fs);
    cr_assert_eq(fs.next_row, 8192);
    cr_assert_gt(fs.calls, 1); /* 16 MiB arrives in several chunks */
    struct gguf g;
    struct err e = {0};
    cr_assert_eq(gguf_open(&g, path, &e), 0, "%s", e.msg);
    check_ref(&g, true);
    gguf_close(&g);
    unlink(path);
    free(path);
}

Test(gguf, writer_is_deterministic)
{
    char *a = write_ref(false, NULL), *b = write_ref(false, NULL);
    size_t na, nb;
    uint8_t *pa = slurp(a, &na), *pb = slurp(b, &nb);
    cr_assert_eq(na, nb);
    cr_assert_eq(memcmp(pa, pb, na), 0);
    free(pa);
    free(pb);
    unlink(a);
    unlink(b);
    free(a);
    free(b);
}

Test(gguf, writer_reports_errors)
{
    struct err e = {0};
    char *path = tmp_path("werr");
    unlink(path);

    struct gguf_writer *w = gguf_writer_new(32);
    cr_assert_eq(gguf_w_u32(w, "k", 1), 0);
    cr_assert_eq(gguf_w_u32(w, "k", 2), -1);
    cr_assert_neq(gguf_writer_save(w, path, &e), 0);
    cr_assert(strstr(e.msg, "duplicate key k"), "%s", e.msg);
    cr_assert_neq(access(path, F_OK), 0); /* nothing written */
    gguf_writer_free(w);

    w = gguf_writer_new(32);
    float x[40] = {0};
    cr_assert_eq(gguf_w_tensor(w, "t", GGML_TYPE_Q8_0, 1, (int64_t[]){40}, x), -1);
    cr_assert_neq(gguf_writer_save(w, path, &e), 0);
    cr_assert(strstr(e.msg, "block size"), "%s", e.msg);
    gguf_writer_free(w);

    w = gguf_writer_new(32);
    cr_assert_eq(gguf_w_tensor(w, "t", 4 /* removed Q4_2 */, 1, (int64_t[]){32}, x), -1);
    cr_assert_eq(gguf_w_tensor(w, "u", GGML_TYPE_F32, 5, (int64_t[]){1, 1, 1, 1, 1}, x), -1);
    cr_assert_neq(gguf_writer_save(w, path, &e), 0);
    cr_assert(strstr(e.msg, "unknown tensor type 4"), "%s", e.msg); /* the first error wins */
    gguf_writer_free(w);

    w = gguf_writer_new(32);
    cr_assert_eq(gguf_w_tensor_fill(w, "t", GGML_TYPE_F32, 1, (int64_t[]){8}, fill_fail, NULL), 0);
    cr_assert_neq(gguf_writer_save(w, path, &e), 0);
    cr_assert(strstr(e.msg, "generator broke") && strstr(e.msg, "tensor t"), "%s", e.msg);
    cr_assert_neq(access(path, F_OK), 0);
    gguf_writer_free(w);

    w = gguf_writer_new(32);
    cr_assert_eq(gguf_w_u32(w, "general.alignment", 64), 0);
    cr_assert_neq(gguf_writer_save(w, path, &e), 0);
    cr_assert(strstr(e.msg, "alignment"), "%s", e.msg);
    gguf_writer_free(w);

    cr_assert_null(gguf_writer_new(48)); /* not a power of two */
    free(path);
}

Test(gguf, open_reports_io_errors)
{
    struct gguf g;
    struct err e = {0};
    cr_assert_neq(gguf_open(&g, "/nonexistent/x.gguf", &e), 0);
    cr_assert(strstr(e.msg, "/nonexistent/x.gguf"), "%s", e.msg);
    char *path = tmp_path("empty");
    cr_assert_neq(gguf_open(&g, path, &e), 0);
    cr_assert(strstr(e.msg, "empty"), "%s", e.msg);
    gguf_close(&g); /* tolerated after a failed open */
    struct gguf z = {0};
    bool fd0_open = fcntl(0, F_GETFD) != -1;
    gguf_close(&z); /* and on a zero-initialized struct: must not close fd 0 */
    cr_assert_eq(fcntl(0, F_GETFD) != -1, fd0_open);
    unlink(path);
    free(path);
}

/* ---- an independently hand-built file with every value type and nested arrays ---- */

static void put(struct buf *b, const void *p, size_t n) { cr_assert_eq(buf_append(b, p, n), 0); }
static void put_u32(struct buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(struct buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(struct buf *b, const char *s)
{
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void put_key(struct buf *b, const char *k, enum gguf_vtype t)
{
    put_str(b, k);
    put_u32(b, t);
}

/* Header + kvs of every type; tensors: one f32 [4] named "t" (alignment 32, default). */
static void build_all_types(struct buf *b)
{
    put(b, "GGUF", 4);
    put_u32(b, 2); /* v2 */
    put_u64(b, 1);
    put_u64(b, 17);
    uint8_t u8 = 200; int8_t i8 = -100; uint16_t u16 = 60000; int16_t i16 = -30000;
    uint32_t u32 = 7; int32_t i32 = -7; float f32 = 2.5f; uint8_t bl = 1;
    uint64_t u64 = 1ull << 40; int64_t i64 = -(1ll << 40); double f64 = 1e-6;
    put_key(b, "u8", GGUF_U8); put(b, &u8, 1);
    put_key(b, "i8", GGUF_I8); put(b, &i8, 1);
    put_key(b, "u16", GGUF_U16); put(b, &u16, 2);
    put_key(b, "i16", GGUF_I16); put(b, &i16, 2);
    put_key(b, "u32", GGUF_U32); put(b, &u32, 4);
    put_key(b, "i32", GGUF_I32); put(b, &i32, 4);
    put_key(b, "f32", GGUF_F32); put(b, &f32, 4);
    put_key(b, "bool", GGUF_BOOL); put(b, &bl, 1);
    put_key(b, "str", GGUF_STRING); put_str(b, "x");
    put_key(b, "u64", GGUF_U64); put(b, &u64, 8);
    put_key(b, "i64", GGUF_I64); put(b, &i64, 8);
    put_key(b, "f64", GGUF_F64); put(b, &f64, 8);
    /* array of arrays of u16: [[1,2],[3]] */
    put_key(b, "nested", GGUF_ARRAY);
    put_u32(b, GGUF_ARRAY); put_u64(b, 2);
    put_u32(b, GGUF_U16); put_u64(b, 2); put(b, (uint16_t[]){1, 2}, 4);
    put_u32(b, GGUF_U16); put_u64(b, 1); put(b, (uint16_t[]){3}, 2);
    /* array of arrays of strings: [["ab"]] */
    put_key(b, "nested_str", GGUF_ARRAY);
    put_u32(b, GGUF_ARRAY); put_u64(b, 1);
    put_u32(b, GGUF_STRING); put_u64(b, 1); put_str(b, "ab");
    put_key(b, "bools", GGUF_ARRAY);
    put_u32(b, GGUF_BOOL); put_u64(b, 3); put(b, (uint8_t[]){1, 0, 1}, 3);
    put_key(b, "f64s", GGUF_ARRAY);
    put_u32(b, GGUF_F64); put_u64(b, 2); put(b, (double[]){-0.5, 1e300}, 16);
    put_key(b, "i16s", GGUF_ARRAY);
    put_u32(b, GGUF_I16); put_u64(b, 2); put(b, (int16_t[]){-5, 5}, 4);
    /* tensor info */
    put_str(b, "t");
    put_u32(b, 1);
    put_u64(b, 4);
    put_u32(b, GGML_TYPE_F32);
    put_u64(b, 0);
    while (b->len % 32) put(b, "", 1);
    put(b, (float[]){1, 2, 3, 4}, 16);
}

Test(gguf, every_value_type_and_nested_arrays)
{
    struct buf b = {0};
    build_all_types(&b);
    struct gguf g;
    struct err e = {0};
    cr_assert_eq(gguf_open_mem(&g, b.data, b.len, &e), 0, "%s", e.msg);
    cr_assert_eq(g.version, 2);
    cr_assert_eq(g.alignment, 32);
    uint32_t u;
    int64_t i;
    float f;
    cr_assert_eq(gguf_get_u32(&g, "u8", &u, &e), 0); cr_assert_eq(u, 200);
    cr_assert_eq(gguf_get_i64(&g, "i8", &i, &e), 0); cr_assert_eq(i, -100);
    cr_assert_eq(gguf_get_u32(&g, "u16", &u, &e), 0); cr_assert_eq(u, 60000);
    cr_assert_eq(gguf_get_i64(&g, "i16", &i, &e), 0); cr_assert_eq(i, -30000);
    cr_assert_eq(gguf_get_u32(&g, "u32", &u, &e), 0); cr_assert_eq(u, 7);
    cr_assert_eq(gguf_get_i64(&g, "i32", &i, &e), 0); cr_assert_eq(i, -7);
    cr_assert_eq(gguf_get_f32(&g, "f32", &f, &e), 0); cr_assert_eq(f, 2.5f);
    cr_assert_eq(gguf_get_f32(&g, "i32", &f, &e), 0); cr_assert_eq(f, -7.0f);
    cr_assert_eq(gguf_find(&g, "bool")->v.b, true);
    const struct gguf_kv *kv = gguf_find(&g, "str");
    cr_assert(kv->type == GGUF_STRING && gguf_str_eq(kv->str, "x"));
    cr_assert_eq(gguf_get_i64(&g, "u64", &i, &e), 0); cr_assert_eq(i, 1ll << 40);
    cr_assert_neq(gguf_get_u32(&g, "u64", &u, &e), 0);
    cr_assert_eq(gguf_get_i64(&g, "i64", &i, &e), 0); cr_assert_eq(i, -(1ll << 40));
    cr_assert_eq(gguf_get_f32(&g, "f64", &f, &e), 0); cr_assert_eq(f, 1e-6f);
    cr_assert_eq(gguf_find(&g, "f64")->v.f, 1e-6);
    kv = gguf_find(&g, "nested");
    cr_assert(kv && kv->type == GGUF_ARRAY && kv->arr_type == GGUF_ARRAY && kv->arr_n == 2);
    cr_assert_eq(gguf_arr_i64(kv, 0), 0); /* not numeric: 0 */
    kv = gguf_find(&g, "nested_str");
    cr_assert(kv && kv->arr_type == GGUF_ARRAY && kv->arr_n == 1 && !kv->strs);
    kv = gguf_find(&g, "bools");
    cr_assert(gguf_arr_i64(kv, 0) == 1 && gguf_arr_i64(kv, 1) == 0 && gguf_arr_f64(kv, 2) == 1.0);
    kv = gguf_find(&g, "f64s");
    cr_assert(gguf_arr_f64(kv, 0) == -0.5 && gguf_arr_f64(kv, 1) == 1e300);
    cr_assert_eq(gguf_arr_i64(kv, 1), 0); /* out of int64 range */
    kv = gguf_find(&g, "i16s");
    cr_assert(gguf_arr_i64(kv, 0) == -5 && gguf_arr_f64(kv, 1) == 5.0);
    const struct gguf_tensor *t = gguf_find_tensor(&g, "t");
    cr_assert(t && t->nbytes == 16 && ((const float *)t->data)[3] == 4.0f);
    gguf_close(&g);
    buf_free(&b);
}

/* Opens a mutated copy of b (or a prefix of it) in an exact-size allocation, so any read past the
 * end is an ASan error, and touches everything a successful open exposes. Returns open's rc. */
static int open_and_touch(const uint8_t *src, size_t n, struct err *e)
{
    uint8_t *p = malloc(n ? n : 1);
    memcpy(p, src, n);
    struct gguf g;
    int rc = gguf_open_mem(&g, p, n, e);
    if (rc == 0) {
        unsigned sum = 0;
        for (int64_t i = 0; i < g.n_kv; i++) {
            const struct gguf_kv *kv = &g.kv[i];
            for (uint64_t k = 0; k < kv->key.len; k++) sum += (uint8_t)kv->key.p[k];
            if (kv->type == GGUF_STRING)
                for (uint64_t k = 0; k < kv->str.len; k++) sum += (uint8_t)kv->str.p[k];
            if (kv->type == GGUF_ARRAY)
                for (uint64_t j = 0; j < kv->arr_n; j++) {
                    struct gguf_str s = gguf_arr_str(kv, j);
                    for (uint64_t k = 0; k < s.len; k++) sum += (uint8_t)s.p[k];
                    sum += (unsigned)gguf_arr_i64(kv, j) + (unsigned)gguf_arr_f64(kv, j);
                }
        }
        for (int64_t i = 0; i < g.n_tensors; i++) {
            const struct gguf_tensor *t = &g.tensors[i];
            for (uint64_t k = 0; k < t->nbytes; k++) sum += ((const uint8_t *)t->data)[k];
            cr_assert(t->nbytes <= g.data_size);
        }
        (void)sum;
    } else {
        cr_assert_neq(e->msg[0], 0);
        cr_assert_neq(e->code, ERR_OK);
    }
    gguf_close(&g);
    free(p);
    return rc;
}

Test(gguf, every_truncation_fails_cleanly)
{
    struct buf hb = {0};
    build_all_types(&hb);
    char *path = write_ref(false, NULL);
    size_t wn;
    uint8_t *wb = slurp(path, &wn);
    const uint8_t *files[2] = {(const uint8_t *)hb.data, wb};
    size_t sizes[2] = {hb.len, wn};
    for (int f = 0; f < 2; f++) {
        for (size_t n = 0; n < sizes[f]; n++) {
            struct err e = {0};
            int rc = open_and_touch(files[f], n, &e);
            cr_assert_neq(rc, 0, "file %d truncated to %zu bytes opened", f, n);
            /* truncated header fields name where they are */
            if (n > 24 && n < 100) cr_assert(strstr(e.msg, "offset"), "%zu: %s", n, e.msg);
        }
        struct err e = {0};
        cr_assert_eq(open_and_touch(files[f], sizes[f], &e), 0, "%s", e.msg);
    }
    free(wb);
    buf_free(&hb);
    unlink(path);
    free(path);
}

Test(gguf, corrupted_bytes_never_read_out_of_bounds)
{
    struct buf hb = {0};
    build_all_types(&hb);
    char *path = write_ref(false, NULL);
    size_t wn;
    uint8_t *wb = slurp(path, &wn);
    const uint8_t *files[2] = {(const uint8_t *)hb.data, wb};
    size_t sizes[2] = {hb.len, wn};
    static const uint8_t flips[] = {0x01, 0x02, 0x10, 0x80, 0xff};
    int failed = 0, ok = 0;
    for (int f = 0; f < 2; f++) {
        uint8_t *m = malloc(sizes[f]);
        for (size_t at = 0; at < sizes[f]; at++) {
            for (size_t k = 0; k < sizeof flips; k++) {
                memcpy(m, files[f], sizes[f]);
                m[at] ^= flips[k];
                struct err e = {0};
                if (open_and_touch(m, sizes[f], &e)) failed++;
                else ok++;
            }
            /* huge values in 8-byte fields (counts, lengths, dims, offsets) */
            if (at + 8 <= sizes[f]) {
                static const uint64_t bigs[] = {UINT64_MAX, 1ull << 63, 1ull << 32, 0x7fffffffffffffe0ull};
                for (size_t k = 0; k < 4; k++) {
                    memcpy(m, files[f], sizes[f]);
                    memcpy(m + at, &bigs[k], 8);
                    struct err e = {0};
                    if (open_and_touch(m, sizes[f], &e)) failed++;
                    else ok++;
                }
            }
        }
        free(m);
    }
    /* header corruption mostly fails, tensor-data corruption is harmless */
    cr_assert_gt(failed, 1000);
    cr_assert_gt(ok, 100);
    free(wb);
    buf_free(&hb);
    unlink(path);
    free(path);
}

static void expect_error(const struct buf *b, const char *needle)
{
    struct err e = {0};
    cr_assert_neq(open_and_touch((const uint8_t *)b->data, b->len, &e), 0, "expected '%s'", needle);
    cr_assert(strstr(e.msg, needle), "expected '%s' in: %s", needle, e.msg);
}

static void header(struct buf *b, uint32_t version, uint64_t n_t, uint64_t n_kv)
{
    buf_reset(b);
    put(b, "GGUF", 4);
    put_u32(b, version);
    put_u64(b, n_t);
    put_u64(b, n_kv);
}

Test(gguf, specific_errors_are_named)
{
    struct buf b = {0};
    put(&b, "GGML", 4);
    put_u32(&b, 3);
    put_u64(&b, 0);
    put_u64(&b, 0);
    expect_error(&b, "magic");

    header(&b, 1, 0, 0);
    expect_error(&b, "version 1");
    header(&b, 0x03000000, 0, 0);
    expect_error(&b, "big-endian");
    header(&b, 7, 0, 0);
    expect_error(&b, "version 7");
    header(&b, 3, 0, 1ull << 40);
    expect_error(&b, "metadata count");
    header(&b, 3, 1ull << 40, 0);
    expect_error(&b, "tensor count");

    header(&b, 3, 0, 1);
    put_key(&b, "general.alignment", GGUF_U32);
    put_u32(&b, 48);
    expect_error(&b, "power of two");
    header(&b, 3, 0, 1);
    put_key(&b, "general.alignment", GGUF_U64);
    put_u64(&b, 64);
    expect_error(&b, "expected u32");

    header(&b, 3, 0, 2);
    put_key(&b, "a", GGUF_U32);
    put_u32(&b, 1);
    put_key(&b, "a", GGUF_U32);
    put_u32(&b, 1);
    expect_error(&b, "duplicate metadata key 'a' at offset 41");

    header(&b, 3, 0, 1);
    put_key(&b, "k", 13);
    put_u32(&b, 1);
    expect_error(&b, "not a GGUF value type");
    header(&b, 3, 0, 1);
    put_key(&b, "k", GGUF_BOOL);
    put(&b, "\x02", 1);
    expect_error(&b, "not 0 or 1");
    header(&b, 3, 0, 1);
    put_key(&b, "k", GGUF_STRING);
    put_u64(&b, 1000);
    put(&b, "abc", 3);
    expect_error(&b, "has length 1000");

    /* arrays nested past the depth limit */
    header(&b, 3, 0, 1);
    put_key(&b, "deep", GGUF_ARRAY);
    for (int d = 0; d < GGUF_MAX_ARRAY_DEPTH + 1; d++) {
        put_u32(&b, GGUF_ARRAY);
        put_u64(&b, 1);
    }
    put_u32(&b, GGUF_U8);
    put_u64(&b, 0);
    expect_error(&b, "nested deeper");
    header(&b, 3, 0, 1);
    put_key(&b, "arr", GGUF_ARRAY);
    put_u32(&b, GGUF_U32);
    put_u64(&b, UINT64_MAX / 2);
    put_u32(&b, 0);
    expect_error(&b, "runs past the end");

    /* tensor infos */
    header(&b, 3, 1, 0);
    put_str(&b, "w");
    put_u32(&b, 2);
    put_u64(&b, 64);
    put_u64(&b, 1);
    put_u32(&b, 4);
    put_u64(&b, 0);
    expect_error(&b, "unknown tensor type 4");
    header(&b, 3, 1, 0);
    put_str(&b, "w");
    put_u32(&b, 5);
    for (int d = 0; d < 5; d++) put_u64(&b, 1);
    put_u32(&b, 0);
    put_u64(&b, 0);
    expect_error(&b, "n_dims 5");
    header(&b, 3, 1, 0);
    put_str(&b, "w");
    put_u32(&b, 1);
    put_u64(&b, 33);
    put_u32(&b, GGML_TYPE_Q8_0);
    put_u64(&b, 0);
    expect_error(&b, "not a multiple of q8_0 block size 32");
    header(&b, 3, 1, 0);
    put_str(&b, "w");
    put_u32(&b, 4);
    put_u64(&b, 1ull << 32);
    put_u64(&b, 1ull << 32);
    put_u64(&b, 1ull << 32);
    put_u64(&b, 1);
    put_u32(&b, GGML_TYPE_F32);
    put_u64(&b, 0);
    expect_error(&b, "overflow");
    header(&b, 3, 1, 0);
    put_str(&b, "w");
    put_u32(&b, 1);
    put_u64(&b, 4);
    put_u32(&b, GGML_TYPE_F32);
    put_u64(&b, 8);
    while (b.len % 32) put(&b, "", 1);
    put(&b, (float[]){1, 2, 3, 4, 5, 6}, 24);
    expect_error(&b, "not a multiple of alignment");
    header(&b, 3, 1, 0);
    put_str(&b, "w");
    put_u32(&b, 1);
    put_u64(&b, 4);
    put_u32(&b, GGML_TYPE_F32);
    put_u64(&b, 32);
    while (b.len % 32) put(&b, "", 1);
    put(&b, (float[]){1, 2, 3, 4, 5, 6}, 24);
    expect_error(&b, "tensor 'w' data [32, +16)");
    header(&b, 3, 2, 0);
    for (int k = 0; k < 2; k++) {
        put_str(&b, "w");
        put_u32(&b, 1);
        put_u64(&b, 4);
        put_u32(&b, GGML_TYPE_F32);
        put_u64(&b, 0);
    }
    while (b.len % 32) put(&b, "", 1);
    put(&b, (float[]){1, 2, 3, 4}, 16);
    expect_error(&b, "duplicate tensor name 'w'");

    /* a file with no tensors may end right after the metadata */
    header(&b, 3, 0, 1);
    put_key(&b, "k", GGUF_U8);
    put(&b, "\x05", 1);
    struct err e = {0};
    cr_assert_eq(open_and_touch((const uint8_t *)b.data, b.len, &e), 0, "%s", e.msg);
    buf_free(&b);
}

Test(gguf, tensor_nbytes)
{
    uint64_t n;
    struct err e;
    cr_assert_eq(gguf_tensor_nbytes(GGML_TYPE_Q4_K, 2, (int64_t[]){512, 3}, &n, &e), 0);
    cr_assert_eq(n, 2 * 144 * 3);
    cr_assert_eq(gguf_tensor_nbytes(GGML_TYPE_Q6_K, 1, (int64_t[]){256}, &n, &e), 0);
    cr_assert_eq(n, 210);
    cr_assert_eq(gguf_tensor_nbytes(GGML_TYPE_BF16, 3, (int64_t[]){3, 0, 5}, &n, &e), 0);
    cr_assert_eq(n, 0);
    cr_assert_neq(gguf_tensor_nbytes(GGML_TYPE_F32, 2, (int64_t[]){4, -1}, &n, &e), 0);
    cr_assert(strstr(e.msg, "negative"), "%s", e.msg);
}
