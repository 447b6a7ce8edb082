/* safetensors reader: a hand-built valid file (names, dtypes, shapes, data pointers, metadata),
 * one broken file per header field with the error it must name, and every truncation of a valid
 * file (each must fail with a message or open inside its bounds; ASan checks in make test). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/format/safetensors.h"

/* header JSON + data bytes -> file bytes (u64 length prefix) */
static uint8_t *mk(const char *json, size_t data_n, size_t *n)
{
    size_t hl = strlen(json);
    *n = 8 + hl + data_n;
    uint8_t *p = malloc(*n);
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(p + 8, json, hl);
    for (size_t i = 0; i < data_n; i++) p[8 + hl + i] = (uint8_t)i;
    return p;
}

static void expect_err(const char *json, size_t data_n, const char *needle)
{
    size_t n;
    uint8_t *p = mk(json, data_n, &n);
    struct safetensors st;
    struct err e = {0};
    int rc = st_open_mem(&st, p, n, "t.safetensors", &e);
    cr_expect_neq(rc, 0, "opened: %s", json);
    cr_expect(strstr(e.msg, needle) != NULL, "error '%s' lacks '%s'", e.msg, needle);
    cr_expect(strstr(e.msg, "t.safetensors") != NULL, "error '%s' does not name the file", e.msg);
    free(p);
}

Test(safetensors, valid_file_views)
{
    const char *j = "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[16,28]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                    "\"e\":{\"dtype\":\"I64\",\"shape\":[0,5],\"data_offsets\":[28,28]},"
                    "\"s\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[30,31]}}      ";
    size_t n;
    uint8_t *p = mk(j, 31, &n);
    struct safetensors st;
    struct err e = {0};
    cr_assert_eq(st_open_mem(&st, p, n, "t", &e), 0, "%s", e.msg);
    cr_assert_eq(st.n_tensors, 4);
    const struct st_tensor *a = st_find(&st, "a"), *b = st_find(&st, "b"), *z = st_find(&st, "e"),
                           *s = st_find(&st, "s");
    cr_assert(a && b && z && s);
    cr_expect_eq(a->dtype, ST_F32);
    cr_expect_eq(a->n_dims, 1);
    cr_expect_eq(a->shape[0], 4);
    cr_expect_eq((const uint8_t *)a->data, p + 8 + strlen(j));
    cr_expect_eq(b->dtype, ST_BF16);
    cr_expect_eq(b->n_dims, 2);
    cr_expect_eq(b->shape[0], 2);
    cr_expect_eq(b->shape[1], 3);
    cr_expect_eq(st_numel(b), 6);
    cr_expect_eq(((const uint8_t *)b->data)[0], 16); /* data byte i holds i */
    cr_expect_eq(st_numel(z), 0);
    cr_expect_eq(s->n_dims, 0);
    cr_expect_eq(st_numel(s), 1);
    cr_expect_eq(((const uint8_t *)s->data)[0], 30);
    cr_expect_str_eq(st_meta(&st, "format"), "pt");
    cr_expect_null(st_meta(&st, "nope"));
    cr_expect_null(st_find(&st, "c"));
    cr_expect_str_eq(st_dtype_name(ST_BF16), "BF16");
    cr_expect_eq(st_dtype_size(ST_F64), 8);
    st_close(&st);
    free(p);
}

Test(safetensors, every_field_checked)
{
    expect_err("{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype 'F33'");
    expect_err("{\"a\":{\"dtype\":1,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "'dtype' is not a string");
    expect_err("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "'dtype' is missing");
    expect_err("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "'shape' is missing");
    expect_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape[0]");
    expect_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "shape[0]");
    expect_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
               "9 dimensions");
    expect_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
               "overflows");
    expect_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8, "needs 8");
    expect_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", 4, "past the data section");
    expect_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "end before they begin");
    expect_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "'data_offsets'");
    expect_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,-4]}}", 4, "non-negative");
    expect_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4, "unknown field 'x'");
    expect_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "overlap");
    expect_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "not valid JSON");
    expect_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", 4, "not valid JSON");
    expect_err("[1,2]", 0, "'{'");
    expect_err("{\"a\":[]}", 0, "not an object");
    expect_err("{\"__metadata__\":{\"k\":1}}", 0, "'k' is not a string");
    expect_err("{\"__metadata__\":[]}", 0, "__metadata__ is not an object");
    expect_err("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "empty name");
    /* the length prefix itself */
    uint8_t big[16] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}'};
    struct safetensors st;
    struct err e = {0};
    cr_expect_neq(st_open_mem(&st, big, sizeof big, "t.safetensors", &e), 0);
    cr_expect(strstr(e.msg, "above the limit"), "%s", e.msg);
    uint8_t past[10] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    cr_expect_neq(st_open_mem(&st, past, sizeof past, "t.safetensors", &e), 0);
    cr_expect(strstr(e.msg, "past the end"), "%s", e.msg);
    cr_expect_neq(st_open_mem(&st, past, 5, "t.safetensors", &e), 0);
    cr_expect(strstr(e.msg, "too short"), "%s", e.msg);
}

Test(safetensors, every_truncation_fails_cleanly)
{
    const char *j = "{\"x\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]},"
                    "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}";
    size_t n;
    uint8_t *p = mk(j, 12, &n);
    for (size_t k = 0; k < n; k++) {
        uint8_t *q = malloc(k ? k : 1); /* exact size: ASan sees any read past it */
        memcpy(q, p, k);
        struct safetensors st;
        struct err e = {0};
        cr_expect_neq(st_open_mem(&st, q, k, "t", &e), 0, "truncation at %zu opened", k);
        cr_expect(e.msg[0]);
        free(q);
    }
    struct safetensors st;
    struct err e = {0};
    cr_expect_eq(st_open_mem(&st, p, n, "t", &e), 0, "%s", e.msg); /* gap [6,8) allowed */
    st_close(&st);
    free(p);
}

Test(safetensors, file_errors_name_the_path)
{
    struct safetensors st;
    struct err e = {0};
    cr_expect_neq(st_open(&st, "/nonexistent/model.safetensors", &e), 0);
    cr_expect(strstr(e.msg, "/nonexistent/model.safetensors"), "%s", e.msg);
    char path[] = "/tmp/lms-st-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    size_t n;
    uint8_t *p = mk("{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, &n);
    cr_assert_eq(write(fd, p, n), (ssize_t)n);
    close(fd);
    cr_assert_eq(st_open(&st, path, &e), 0, "%s", e.msg);
    cr_expect_eq(st_find(&st, "a")->dtype, ST_BF16);
    st_close(&st);
    st_close(&st); /* idempotent */
    unlink(path);
    free(p);
}
