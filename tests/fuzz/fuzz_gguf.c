/* libFuzzer target for the GGUF reader: any byte string must either open (and then every view the
 * reader hands out must stay inside the input: we read all of them) or fail with a message.
 * Built by `make fuzz` with clang -fsanitize=fuzzer,address,undefined; run by
 * tests/suites/20-gguf-fuzz.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/format/gguf.h"

static volatile unsigned sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gguf g;
    struct err e = {0};
    if (gguf_open_mem(&g, data, size, &e) != 0) {
        if (!e.msg[0] || e.code == ERR_OK) abort(); /* every failure must say why */
        return 0;
    }
    unsigned sum = 0;
    for (int64_t i = 0; i < g.n_kv; i++) {
        const struct gguf_kv *kv = &g.kv[i];
        for (uint64_t k = 0; k < kv->key.len; k++) sum += (uint8_t)kv->key.p[k];
        if (kv->type == GGUF_STRING)
            for (uint64_t k = 0; k < kv->str.len; k++) sum += (uint8_t)kv->str.p[k];
        if (kv->type == GGUF_ARRAY) {
            uint64_t n = kv->arr_n < 4096 ? kv->arr_n : 4096;
            for (uint64_t j = 0; j < n; j++) {
                struct gguf_str s = gguf_arr_str(kv, j);
                for (uint64_t k = 0; k < s.len; k++) sum += (uint8_t)s.p[k];
                sum += (unsigned)gguf_arr_i64(kv, j) + (unsigned)(int64_t)gguf_arr_f64(kv, j);
            }
            if (kv->arr_n) sum += (unsigned)gguf_arr_i64(kv, kv->arr_n - 1) + gguf_arr_str(kv, kv->arr_n - 1).len;
        }
        /* the typed getters on every key, through the name index */
        char key[256];
        if (kv->key.len < sizeof key && !memchr(kv->key.p, 0, kv->key.len)) {
            memcpy(key, kv->key.p, kv->key.len);
            key[kv->key.len] = 0;
            if (gguf_find(&g, key) != kv) abort(); /* keys are unique, the index must find this one */
            uint32_t u;
            int64_t i64;
            float f;
            bool b;
            if (!gguf_get_u32(&g, key, &u, &e)) sum += u;
            if (!gguf_get_i64(&g, key, &i64, &e)) sum += (unsigned)i64;
            if (!gguf_get_f32(&g, key, &f, &e)) sum += (unsigned)(f == f);
            if (!gguf_get_bool(&g, key, &b, &e)) sum += b;
            char *s = gguf_get_str(&g, key, &e);
            if (s) sum += (unsigned)strlen(s);
            free(s);
        }
    }
    for (int64_t i = 0; i < g.n_tensors; i++) {
        const struct gguf_tensor *t = &g.tensors[i];
        if (t->nbytes) sum += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
        if ((const uint8_t *)t->data < g.data || t->nbytes > g.data_size ||
            (uint64_t)((const uint8_t *)t->data - g.data) > g.data_size - t->nbytes)
            abort();
    }
    sink = sum;
    gguf_close(&g);
    return 0;
}
