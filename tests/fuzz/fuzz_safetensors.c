/* libFuzzer target for the safetensors reader: any byte string must either open (and then every
 * tensor's data range must lie inside the input and match its dtype and shape: we read every byte
 * of every tensor and recheck the sizes) or fail with a message.
 * Built by `make fuzz` with clang -fsanitize=fuzzer,address,undefined; run by
 * tests/suites/20-safetensors-fuzz.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/format/safetensors.h"

static volatile unsigned sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct safetensors st;
    struct err e = {0};
    if (st_open_mem(&st, data, size, "fuzz", &e) != 0) {
        if (!e.msg[0] || e.code == ERR_OK) abort(); /* every failure must say why */
        return 0;
    }
    unsigned sum = 0;
    for (int64_t i = 0; i < st.n_tensors; i++) {
        const struct st_tensor *t = &st.tensors[i];
        uint64_t nb = (uint64_t)st_numel(t) * st_dtype_size(t->dtype);
        if (nb != t->end - t->begin) abort();
        if ((const uint8_t *)t->data < data || (const uint8_t *)t->data + nb > data + size) abort();
        for (uint64_t k = 0; k < nb; k++) sum += ((const uint8_t *)t->data)[k];
        if (st_find(&st, t->name) != t) abort(); /* names are unique */
        sum += (unsigned)strlen(st_dtype_name(t->dtype));
    }
    for (int64_t i = 0; i < st.n_meta; i++) {
        const char *v = st_meta(&st, st.meta_key[i]);
        if (!v) abort();
        sum += (unsigned)strlen(v);
    }
    sink = sum;
    st_close(&st);
    return 0;
}
