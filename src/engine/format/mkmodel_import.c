/* mkmodel_import — trained Qwen3 weights (HF config.json + F32 model.safetensors) -> GGUF.
 *
 * safetensors: u64 little-endian header length, a JSON header {name: {"dtype", "shape",
 * "data_offsets": [begin, end]}} (offsets relative to the end of the header), then the data.
 * HF stores a Linear weight as [out, in] row-major, which is GGUF's ne = [in, out] with the same
 * bytes, so rows are copied (or quantized) as they are. Qwen3 uses NeoX RoPE, so unlike llama's
 * converter nothing is permuted. The file is mmapped and each tensor streamed row by row at save
 * time (gguf_w_tensor_fill), converting with the type's reference quantizer. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/format/gguf.h"
#include "engine/text/hf_tokenizer.h"
#include "engine/format/mkmodel_gen.h"
#include "engine/kernels/quant.h"

#define IMP_MAX_TENSORS 1024

struct imp_tensor {
    char gguf_name[64];
    const float *data; /* F32 rows in the mmapped file */
    int64_t ne0;
    uint32_t type;
};

static int imp_fill(void *ctx, int64_t row0, int64_t n_rows, void *dst, struct err *e)
{
    const struct imp_tensor *t = ctx;
    const float *src = t->data + row0 * t->ne0;
    if (t->type == GGML_TYPE_F32) {
        memcpy(dst, src, (size_t)n_rows * (size_t)t->ne0 * sizeof(float));
        return 0;
    }
    const struct quant_traits *qt = quant_traits(t->type);
    if (!qt || !qt->from_float_ref)
        return err_set(e, ERR_UNSUPPORTED, "no quantizer for %s (type %" PRIu32 ")", t->gguf_name, t->type);
    size_t rb = quant_row_size(t->type, t->ne0);
    for (int64_t r = 0; r < n_rows; r++) qt->from_float_ref(src + r * t->ne0, (uint8_t *)dst + (size_t)r * rb, t->ne0);
    return 0;
}

static int cfg_int(json_t *cfg, const char *key, int *out, struct err *e)
{
    json_t *v = json_object_get(cfg, key);
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 30))
        return err_set(e, ERR_FORMAT, "config.json: %s must be a positive integer", key);
    *out = (int)json_integer_value(v);
    return 0;
}

static int cfg_f32(json_t *cfg, const char *key, float *out, struct err *e)
{
    json_t *v = json_object_get(cfg, key);
    if (!json_is_number(v) || json_number_value(v) <= 0)
        return err_set(e, ERR_FORMAT, "config.json: %s must be a positive number", key);
    *out = (float)json_number_value(v);
    return 0;
}

/* HF name -> (GGUF name, role, expected ne0, ne1 (0 = 1-D)); 0 when the name is not ours. */
static int map_name(const char *hf, const struct mkmodel_shape *s, char *out, size_t n, const char **role,
                    int64_t *ne0, int64_t *ne1)
{
    const int64_t d = s->n_embd, qd = (int64_t)s->n_head * s->head_dim, kvd = (int64_t)s->n_head_kv * s->head_dim;
    if (!strcmp(hf, "model.embed_tokens.weight")) {
        snprintf(out, n, "token_embd.weight"), *role = "token_embd", *ne0 = d, *ne1 = s->n_vocab;
        return 1;
    }
    if (!strcmp(hf, "model.norm.weight")) {
        snprintf(out, n, "output_norm.weight"), *role = "norm", *ne0 = d, *ne1 = 0;
        return 1;
    }
    if (!strcmp(hf, "lm_head.weight") && !s->tied) {
        snprintf(out, n, "output.weight"), *role = "output", *ne0 = d, *ne1 = s->n_vocab;
        return 1;
    }
    int l, used = 0;
    char rest[96];
    if (sscanf(hf, "model.layers.%d.%95s%n", &l, rest, &used) != 2 || l < 0 || l >= s->n_layer ||
        hf[used] != '\0')
        return 0;
    static const struct {
        const char *hf, *gguf;
        int in, out; /* 0 embd, 1 q, 2 kv, 3 ff, 4 head_dim, -1 none */
    } map[] = {
        {"input_layernorm.weight", "attn_norm", 0, -1},
        {"post_attention_layernorm.weight", "ffn_norm", 0, -1},
        {"self_attn.q_proj.weight", "attn_q", 0, 1},
        {"self_attn.k_proj.weight", "attn_k", 0, 2},
        {"self_attn.v_proj.weight", "attn_v", 0, 2},
        {"self_attn.o_proj.weight", "attn_output", 1, 0},
        {"self_attn.q_norm.weight", "attn_q_norm", 4, -1},
        {"self_attn.k_norm.weight", "attn_k_norm", 4, -1},
        {"mlp.gate_proj.weight", "ffn_gate", 0, 3},
        {"mlp.up_proj.weight", "ffn_up", 0, 3},
        {"mlp.down_proj.weight", "ffn_down", 3, 0},
    };
    const int64_t dim[5] = {d, qd, kvd, s->n_ff, s->head_dim};
    for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
        if (strcmp(rest, map[i].hf)) continue;
        snprintf(out, n, "blk.%d.%s.weight", l, map[i].gguf);
        *role = map[i].out < 0 ? "norm" : map[i].gguf;
        *ne0 = dim[map[i].in];
        *ne1 = map[i].out < 0 ? 0 : dim[map[i].out];
        return 1;
    }
    return 0;
}

int mkmodel_import(const char *dir, enum mkmodel_type type, const struct hf_tokenizer *tok, const char *name,
                   const char *path, struct err *e)
{
    char p[4096];
    json_t *cfg = NULL, *hdr = NULL;
    struct gguf_writer *w = NULL;
    struct imp_tensor *ts = NULL;
    void *map = MAP_FAILED;
    size_t map_len = 0;
    int fd = -1, rc = -1;

    if ((unsigned)type >= MKMODEL_TYPE_COUNT) return err_set(e, ERR_INVALID, "import: unknown weight type");
    if (snprintf(p, sizeof p, "%s/config.json", dir) >= (int)sizeof p)
        return err_set(e, ERR_INVALID, "import: directory path too long");
    json_error_t je;
    if (!(cfg = json_load_file(p, 0, &je)) || !json_is_object(cfg)) {
        err_set(e, ERR_FORMAT, "import: %s: %s", p, cfg ? "not an object" : je.text);
        goto out;
    }
    const char *mt = json_string_value(json_object_get(cfg, "model_type"));
    if (!mt || strcmp(mt, "qwen3") != 0) {
        err_set(e, ERR_UNSUPPORTED, "import: config.json model_type is %s, only qwen3 is supported", mt ? mt : "absent");
        goto out;
    }
    struct mkmodel_shape s = {.name = "import", .tied = json_is_true(json_object_get(cfg, "tie_word_embeddings"))};
    int vocab = 0;
    if (cfg_int(cfg, "num_hidden_layers", &s.n_layer, e) || cfg_int(cfg, "hidden_size", &s.n_embd, e) ||
        cfg_int(cfg, "intermediate_size", &s.n_ff, e) || cfg_int(cfg, "num_attention_heads", &s.n_head, e) ||
        cfg_int(cfg, "num_key_value_heads", &s.n_head_kv, e) || cfg_int(cfg, "head_dim", &s.head_dim, e) ||
        cfg_int(cfg, "vocab_size", &vocab, e) || cfg_int(cfg, "max_position_embeddings", &s.n_ctx, e) ||
        cfg_f32(cfg, "rope_theta", &s.rope_base, e) || cfg_f32(cfg, "rms_norm_eps", &s.norm_eps, e))
        goto out;
    s.n_vocab = vocab;
    if (s.n_head % s.n_head_kv) {
        err_set(e, ERR_FORMAT, "import: num_attention_heads %d is not a multiple of num_key_value_heads %d", s.n_head,
                s.n_head_kv);
        goto out;
    }
    if (tok && tok->n_tokens != s.n_vocab) {
        err_set(e, ERR_INVALID, "import: tokenizer has %" PRId64 " tokens, config.json vocab_size is %d", tok->n_tokens,
                vocab);
        goto out;
    }

    /* safetensors */
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    struct stat st;
    if ((fd = open(p, O_RDONLY)) < 0 || fstat(fd, &st)) {
        err_set(e, ERR_IO, "import: %s: %s", p, strerror(errno));
        goto out;
    }
    map_len = (size_t)st.st_size;
    if (map_len < 8 || (map = mmap(NULL, map_len, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) {
        err_set(e, map_len < 8 ? ERR_FORMAT : ERR_IO, "import: %s: %s", p, map_len < 8 ? "too short" : strerror(errno));
        goto out;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | ((const uint8_t *)map)[i];
    if (hlen > map_len - 8 || hlen % 4) { /* HF pads the header to 8: the F32 data is then aligned */
        err_set(e, ERR_FORMAT, "import: %s: header length %" PRIu64 " exceeds the file", p, hlen);
        goto out;
    }
    if (!(hdr = json_loadb((const char *)map + 8, hlen, 0, &je)) || !json_is_object(hdr)) {
        err_set(e, ERR_FORMAT, "import: %s: header: %s", p, hdr ? "not an object" : je.text);
        goto out;
    }
    const uint8_t *data = (const uint8_t *)map + 8 + hlen;
    const uint64_t data_len = map_len - 8 - hlen;
    const int expected = 2 + !s.tied + 11 * s.n_layer;
    ts = calloc(IMP_MAX_TENSORS, sizeof *ts);
    w = gguf_writer_new(GGUF_DEFAULT_ALIGNMENT);
    if (!ts || !w) {
        err_set(e, ERR_NOMEM, "import: out of memory");
        goto out;
    }
    if (mkmodel_write_hparams(w, &s, type, name) || (tok && hf_tokenizer_write_gguf(tok, w, e))) {
        if (!e || !e->msg[0]) err_set(e, ERR_INTERNAL, "import: cannot write the metadata");
        goto out;
    }
    /* tensors in GGUF order (llama.cpp's: embeddings, output norm, output, then per layer) are not
     * required; the header's key order is kept (jansson preserves insertion order). */
    int n = 0;
    const char *key;
    json_t *v;
    json_object_foreach(hdr, key, v) {
        if (!strcmp(key, "__metadata__")) continue;
        const char *role;
        int64_t ne0, ne1;
        if (n == IMP_MAX_TENSORS) {
            err_set(e, ERR_FORMAT, "import: more than %d tensors", IMP_MAX_TENSORS);
            goto out;
        }
        struct imp_tensor *t = &ts[n];
        if (!map_name(key, &s, t->gguf_name, sizeof t->gguf_name, &role, &ne0, &ne1)) {
            err_set(e, ERR_FORMAT, "import: unexpected tensor %s (not part of a qwen3 model of this config)", key);
            goto out;
        }
        const char *dt = json_string_value(json_object_get(v, "dtype"));
        json_t *shape = json_object_get(v, "shape"), *offs = json_object_get(v, "data_offsets");
        if (!dt || strcmp(dt, "F32") != 0) {
            err_set(e, ERR_UNSUPPORTED, "import: %s has dtype %s (only F32 is read)", key, dt ? dt : "?");
            goto out;
        }
        size_t nd = json_array_size(shape);
        int64_t want[2] = {ne1 ? ne1 : ne0, ne0}; /* HF order: [out, in] */
        bool ok = nd == (ne1 ? 2u : 1u) && json_array_size(offs) == 2;
        for (size_t i = 0; ok && i < nd; i++)
            ok = json_integer_value(json_array_get(shape, i)) == (ne1 ? want[i] : ne0);
        if (!ok) {
            err_set(e, ERR_FORMAT, "import: %s has the wrong shape for this config.json", key);
            goto out;
        }
        uint64_t b = (uint64_t)json_integer_value(json_array_get(offs, 0)),
                 en = (uint64_t)json_integer_value(json_array_get(offs, 1));
        uint64_t nbytes = (uint64_t)ne0 * (uint64_t)(ne1 ? ne1 : 1) * 4u;
        if (en < b || en > data_len || en - b != nbytes || b % 4) {
            err_set(e, ERR_FORMAT, "import: %s: data_offsets [%" PRIu64 ", %" PRIu64 "] do not hold %" PRIu64 " bytes",
                    key, b, en, nbytes);
            goto out;
        }
        t->data = (const float *)(data + b);
        t->ne0 = ne0;
        t->type = mkmodel_tensor_type(type, role, ne0);
        int64_t ne[2] = {ne0, ne1};
        if (gguf_w_tensor_fill(w, t->gguf_name, t->type, ne1 ? 2 : 1, ne, imp_fill, t)) {
            err_set(e, ERR_FORMAT, "import: cannot add tensor %s (duplicate?)", t->gguf_name);
            goto out;
        }
        n++;
    }
    if (n != expected) {
        err_set(e, ERR_FORMAT, "import: %d tensors, a qwen3 model of this config.json has %d", n, expected);
        goto out;
    }
    if (gguf_writer_save(w, path, e)) {
        err_wrap(e, "import");
        goto out;
    }
    rc = 0;
out:
    gguf_writer_free(w);
    free(ts);
    json_decref(hdr);
    json_decref(cfg);
    if (map != MAP_FAILED) munmap(map, map_len);
    if (fd >= 0) close(fd);
    return rc;
}
