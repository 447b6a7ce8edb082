/* mkmodel_nanochat — random nanochat checkpoint directories (see mkmodel_nanochat.h).
 *
 * Weights are uniform with nanochat's standard deviations where those keep a random model's
 * logits spread out (embeddings 0.8, matrices 1/sqrt(fan_in)); the places nanochat initializes
 * to zero or near zero (lm_head, the output projections, smear_lambda, the gates) get non-zero
 * values instead so every path of the forward changes the logits a test compares. */
#include "engine/format/mkmodel_nanochat.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/hash.h"
#include "engine/kernels/quant.h"

struct nc_shape {
    const char *name;
    int n_layer, n_embd, n_head, n_kv, seq_len, vocab, short_window;
    const char *pattern;
    bool current; /* lambdas, value embeddings, smear, backout, vocab padded to 64 */
};

static const struct nc_shape shapes[] = {
    /* windows of 16 (S) and 256 (L) so a 100-token test crosses the short one */
    {"nanochat-tiny", 4, 64, 4, 2, 256, 500, 16, "SSSL", true},
    /* the October 2025 architecture: none of the above, vocab as is, full context */
    {"nanochat-tiny-old", 3, 64, 4, 4, 256, 500, 0, NULL, false},
    /* nanochat's d20 speedrun geometry (vocab 65536, 2048 context, SSSL) for benchmarks */
    {"nanochat-d20", 20, 1280, 10, 10, 2048, 65536, 0, "SSSL", true},
};

static const char *const specials[9] = {"<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>",
                                        "<|assistant_end|>", "<|python_start|>", "<|python_end|>",
                                        "<|output_start|>", "<|output_end|>"};
static const char split_pattern[] =
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}{1,2}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";

bool mkmodel_nanochat_shape(const char *name)
{
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        if (!strcmp(shapes[i].name, name)) return true;
    return false;
}

const char *mkmodel_nanochat_shape_names(void) { return "nanochat-tiny, nanochat-tiny-old, nanochat-d20"; }

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [-a, a) from 24 random bits (exact in float: no libm, the same bytes everywhere) */
static float unif(uint64_t *s, float a) { return ((float)(splitmix(s) >> 40) / 8388608.0f - 1.0f) * a; }

struct tdef {
    char name[96];
    int n_dims;
    int64_t shape[2];
    bool f32;           /* scalars and gates: always F32 */
    float lo, hi;       /* uniform range, or a fixed ramp when ramp */
    int ramp;           /* 1 resid_lambdas, 2 x0_lambdas */
    uint64_t off, bytes;
};

static int add(struct tdef *t, int *n, const char *name, int nd, int64_t d0, int64_t d1, bool f32, float lo,
               float hi)
{
    struct tdef *d = &t[(*n)++];
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    d->n_dims = nd;
    d->shape[0] = d0;
    d->shape[1] = nd > 1 ? d1 : 1;
    d->f32 = f32;
    d->lo = lo;
    d->hi = hi;
    return 0;
}

static int write_tokenizer(const struct nc_shape *sh, uint64_t seed, const char *dir, struct err *e)
{
    int n_tok = sh->vocab - 9;
    /* token bytes: 256 single bytes, then random merges of two earlier tokens (valid BPE ranks:
     * every merge's parts rank below it), unique, at most 16 bytes */
    char **tok = calloc((size_t)n_tok, sizeof *tok);
    int *len = calloc((size_t)n_tok, sizeof *len);
    size_t cap = 1;
    while (cap < (size_t)n_tok * 2) cap <<= 1;
    uint64_t *set = calloc(cap, sizeof *set);
    json_t *root = json_object(), *ranks = json_array(), *sp = json_object();
    int rc = -1;
    if (!tok || !len || !set || !root || !ranks || !sp) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto done;
    }
    uint64_t s = seed ^ 0x746f6b656e697a65ull;
    for (int i = 0; i < n_tok; i++) {
        char buf[16];
        int n;
        uint64_t hsh;
        for (;;) {
            if (i < 256) {
                buf[0] = (char)i;
                n = 1;
            } else {
                /* a mostly printable first part keeps the merges looking like text */
                int a = (int)(splitmix(&s) % (uint64_t)i), b = (int)(splitmix(&s) % (uint64_t)i);
                if (len[a] + len[b] > 16) continue;
                memcpy(buf, tok[a], (size_t)len[a]);
                memcpy(buf + len[a], tok[b], (size_t)len[b]);
                n = len[a] + len[b];
            }
            hsh = hash64(buf, (size_t)n, 3) | 1;
            size_t k = hsh & (cap - 1);
            bool dup = false;
            while (set[k]) {
                if (set[k] == hsh) dup = true;
                k = (k + 1) & (cap - 1);
            }
            if (dup) continue; /* hash-equal: treated as a duplicate (cannot make the file wrong) */
            set[k] = hsh;
            break;
        }
        tok[i] = malloc((size_t)n);
        if (!tok[i]) {
            err_set(e, ERR_NOMEM, "out of memory");
            goto done;
        }
        memcpy(tok[i], buf, (size_t)n);
        len[i] = n;
        /* base64 */
        static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        char out[32];
        int o = 0;
        for (int j = 0; j < n; j += 3) {
            uint32_t v = (uint32_t)(uint8_t)buf[j] << 16 | (j + 1 < n ? (uint32_t)(uint8_t)buf[j + 1] << 8 : 0) |
                         (j + 2 < n ? (uint8_t)buf[j + 2] : 0);
            out[o++] = b64[v >> 18 & 63];
            out[o++] = b64[v >> 12 & 63];
            out[o++] = j + 1 < n ? b64[v >> 6 & 63] : '=';
            out[o++] = j + 2 < n ? b64[v & 63] : '=';
        }
        out[o] = 0;
        json_array_append_new(ranks, json_string(out));
    }
    for (int i = 0; i < 9; i++) json_object_set_new(sp, specials[i], json_integer(n_tok + i));
    json_object_set_new(root, "format", json_string("lmserve-nanochat-tokenizer"));
    json_object_set_new(root, "format_version", json_integer(1));
    json_object_set_new(root, "pattern", json_string(split_pattern));
    json_object_set_new(root, "mergeable_ranks", ranks);
    json_object_set_new(root, "special_tokens", sp);
    ranks = sp = NULL;
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (json_dump_file(root, tmp, JSON_COMPACT | JSON_PRESERVE_ORDER) || rename(tmp, path)) {
        unlink(tmp);
        err_set(e, ERR_IO, "cannot write %s: %s", path, strerror(errno));
        goto done;
    }
    rc = 0;
done:
    if (tok)
        for (int i = 0; i < n_tok; i++) free(tok[i]);
    free(tok);
    free(len);
    free(set);
    json_decref(ranks);
    json_decref(sp);
    json_decref(root);
    return rc;
}

static int write_config(const struct nc_shape *sh, const char *dir, struct err *e)
{
    json_t *root = json_object(), *mc = json_object(), *ar = json_object();
    json_object_set_new(root, "format", json_string("lmserve-nanochat"));
    json_object_set_new(root, "format_version", json_integer(1));
    json_object_set_new(root, "name", json_string(sh->name));
    json_object_set_new(root, "random_weights", json_true());
    json_object_set_new(mc, "sequence_len", json_integer(sh->seq_len));
    json_object_set_new(mc, "vocab_size", json_integer(sh->vocab));
    json_object_set_new(mc, "n_layer", json_integer(sh->n_layer));
    json_object_set_new(mc, "n_head", json_integer(sh->n_head));
    json_object_set_new(mc, "n_kv_head", json_integer(sh->n_kv));
    json_object_set_new(mc, "n_embd", json_integer(sh->n_embd));
    if (sh->pattern) json_object_set_new(mc, "window_pattern", json_string(sh->pattern));
    json_object_set_new(root, "model_config", mc);
    /* every knob written out, so a reader needs no variant defaults for these files */
    json_object_set_new(ar, "rope_base", json_real(sh->current ? 100000.0 : 10000.0));
    json_object_set_new(ar, "qk_scale", json_real(sh->current ? 1.2 : 1.0));
    json_object_set_new(ar, "softcap", json_real(15.0));
    json_object_set_new(ar, "norm_eps", json_real(0.0078125));
    if (sh->current) json_object_set_new(ar, "ve_gate_scale", json_real(3.0));
    if (sh->short_window) json_object_set_new(ar, "short_window", json_integer(sh->short_window));
    json_object_set_new(root, "architecture", ar);
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int rc = 0;
    if (json_dump_file(root, tmp, JSON_INDENT(2) | JSON_PRESERVE_ORDER) || rename(tmp, path)) {
        unlink(tmp);
        rc = err_set(e, ERR_IO, "cannot write %s: %s", path, strerror(errno));
    }
    json_decref(root);
    return rc;
}

int mkmodel_nanochat_write(const char *shape, const char *type, uint64_t seed, const char *dir, struct err *e)
{
    const struct nc_shape *sh = NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        if (!strcmp(shapes[i].name, shape)) sh = &shapes[i];
    if (!sh) return err_set(e, ERR_INVALID, "unknown nanochat shape '%s' (%s)", shape, mkmodel_nanochat_shape_names());
    enum ggml_type wt;
    const char *st_name;
    if (!strcmp(type, "f32")) wt = GGML_TYPE_F32, st_name = "F32";
    else if (!strcmp(type, "bf16")) wt = GGML_TYPE_BF16, st_name = "BF16";
    else if (!strcmp(type, "f16")) wt = GGML_TYPE_F16, st_name = "F16";
    else return err_set(e, ERR_INVALID, "nanochat checkpoints are f32, bf16 or f16, not '%s'", type);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return err_set(e, ERR_IO, "cannot create %s: %s", dir, strerror(errno));

    const int L = sh->n_layer, E = sh->n_embd, HD = E / sh->n_head, KVD = sh->n_kv * HD;
    const int64_t Vp = sh->current ? ((int64_t)sh->vocab + 63) / 64 * 64 : sh->vocab;
    const float se = 0.8f * 1.7320508f, sm = 1.7320508f / sqrtf((float)E), s4 = 1.7320508f / sqrtf(4.0f * E);
    int max_t = 16 + 9 * L, n = 0;
    struct tdef *t = calloc((size_t)max_t, sizeof *t);
    if (!t) return err_set(e, ERR_NOMEM, "out of memory");
    add(t, &n, "transformer.wte.weight", 2, Vp, E, false, -se, se);
    add(t, &n, "lm_head.weight", 2, Vp, E, false, -sm, sm);
    if (sh->current) {
        add(t, &n, "resid_lambdas", 1, L, 0, true, 0, 0);
        t[n - 1].ramp = 1;
        add(t, &n, "x0_lambdas", 1, L, 0, true, 0, 0);
        t[n - 1].ramp = 2;
        add(t, &n, "smear_gate.weight", 2, 1, 24, true, -0.5f, 0.5f);
        add(t, &n, "smear_lambda", 1, 1, 0, true, 0.4f, 0.6f);
        add(t, &n, "backout_lambda", 1, 1, 0, true, 0.15f, 0.25f);
    }
    char nm[96];
    for (int l = 0; l < L; l++) {
#define M(suffix, r, c, a)                                                                                   \
    snprintf(nm, sizeof nm, "transformer.h.%d.%s", l, suffix);                                              \
    add(t, &n, nm, 2, r, c, false, -(a), a)
        M("attn.c_q.weight", E, E, sm);
        M("attn.c_k.weight", KVD, E, sm);
        M("attn.c_v.weight", KVD, E, sm);
        M("attn.c_proj.weight", E, E, sm);
        M("mlp.c_fc.weight", 4 * E, E, sm);
        M("mlp.c_proj.weight", E, 4 * E, s4);
#undef M
        if (sh->current && l % 2 == (L - 1) % 2) {
            snprintf(nm, sizeof nm, "value_embeds.%d.weight", l);
            add(t, &n, nm, 2, Vp, KVD, false, -sm * 8, sm * 8);
            snprintf(nm, sizeof nm, "transformer.h.%d.attn.ve_gate.weight", l);
            add(t, &n, nm, 2, sh->n_kv, 12, true, -0.5f, 0.5f);
        }
    }
    /* header: names sorted as safetensors writers do, offsets in that order */
    uint64_t off = 0;
    json_t *hdr = json_object();
    for (int i = 0; i < n; i++) {
        size_t es = t[i].f32 ? 4 : quant_traits(wt)->type_size;
        t[i].bytes = (uint64_t)t[i].shape[0] * (uint64_t)t[i].shape[1] * es;
    }
    /* insertion order = file order; jansson keeps it with JSON_PRESERVE_ORDER */
    for (int i = 0; i < n; i++) {
        t[i].off = off;
        off += t[i].bytes;
        json_t *o = json_object(), *shp = json_array(), *dof = json_array();
        for (int d = 0; d < t[i].n_dims; d++) json_array_append_new(shp, json_integer(t[i].shape[d]));
        json_array_append_new(dof, json_integer((json_int_t)t[i].off));
        json_array_append_new(dof, json_integer((json_int_t)(t[i].off + t[i].bytes)));
        json_object_set_new(o, "dtype", json_string(t[i].f32 ? "F32" : st_name));
        json_object_set_new(o, "shape", shp);
        json_object_set_new(o, "data_offsets", dof);
        json_object_set_new(hdr, t[i].name, o);
    }
    json_t *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(hdr, "__metadata__", meta);
    char *htxt = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(hdr);
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = htxt ? fopen(tmp, "wb") : NULL;
    float *buf = NULL;
    void *cvt = NULL;
    int rc = -1;
    if (!f) {
        err_set(e, htxt ? ERR_IO : ERR_NOMEM, "cannot create %s: %s", tmp, strerror(errno));
        goto done;
    }
    size_t hl = strlen(htxt), pad = (8 - hl % 8) % 8;
    uint8_t lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (uint8_t)((uint64_t)(hl + pad) >> (8 * i));
    fwrite(lenb, 1, 8, f);
    fwrite(htxt, 1, hl, f);
    for (size_t i = 0; i < pad; i++) fputc(' ', f);
    enum { CHUNK = 1 << 18 };
    buf = malloc(sizeof(float) * CHUNK);
    cvt = malloc(sizeof(float) * CHUNK);
    if (!buf || !cvt) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        uint64_t s = seed * 0x2545F4914F6CDD1Dull ^ hash64(t[i].name, strlen(t[i].name), 5);
        int64_t total = t[i].shape[0] * t[i].shape[1];
        for (int64_t k0 = 0; k0 < total; k0 += CHUNK) {
            int64_t k1 = k0 + CHUNK < total ? k0 + CHUNK : total;
            for (int64_t k = k0; k < k1; k++) {
                if (t[i].ramp == 1) buf[k - k0] = 1.15f - 0.10f * (float)k / (float)(L > 1 ? L - 1 : 1);
                else if (t[i].ramp == 2) buf[k - k0] = 0.20f - 0.15f * (float)k / (float)(L > 1 ? L - 1 : 1);
                else buf[k - k0] = t[i].lo + (unif(&s, 1.0f) + 1.0f) * 0.5f * (t[i].hi - t[i].lo);
            }
            if (t[i].f32 || wt == GGML_TYPE_F32) {
                fwrite(buf, sizeof(float), (size_t)(k1 - k0), f);
            } else {
                quant_traits(wt)->from_float(buf, cvt, k1 - k0);
                fwrite(cvt, 2, (size_t)(k1 - k0), f);
            }
        }
    }
    if (fflush(f) || ferror(f)) {
        err_set(e, ERR_IO, "write to %s failed: %s", tmp, strerror(errno));
        goto done;
    }
    if (fclose(f)) {
        f = NULL;
        err_set(e, ERR_IO, "write to %s failed: %s", tmp, strerror(errno));
        goto done;
    }
    f = NULL;
    if (rename(tmp, path)) {
        err_set(e, ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        goto done;
    }
    if (write_config(sh, dir, e) || write_tokenizer(sh, seed, dir, e)) goto done;
    rc = 0;
done:
    if (f) fclose(f);
    if (rc) unlink(tmp);
    free(buf);
    free(cvt);
    free(htxt);
    free(t);
    return rc;
}
