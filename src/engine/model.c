/* model — load a GGUF, dispatch by general.architecture, validate batches, KV cache helpers. */
#define _GNU_SOURCE /* memmem */
#include "engine/model_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/cpu.h"
#include "base/log.h"
#include "engine/kv_cache.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/ops.h"
#include "engine/kernels/quant.h"
#include "engine/kernels/threadpool.h"

const struct gguf_tensor *model_tensor(const struct gguf *g, const char *name, int n_dims,
                                       const int64_t *ne, struct err *e)
{
    const struct gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t) {
        err_set(e, ERR_FORMAT, "tensor %s is missing", name);
        return NULL;
    }
    bool ok = true;
    for (int i = 0; i < GGUF_MAX_DIMS; i++) ok = ok && t->ne[i] == (i < n_dims ? ne[i] : 1);
    if (!ok) {
        err_set(e, ERR_FORMAT,
                "tensor %s has shape [%lld,%lld,%lld,%lld], expected [%lld,%lld,%lld]", name,
                (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                (long long)ne[0], (long long)(n_dims > 1 ? ne[1] : 1),
                (long long)(n_dims > 2 ? ne[2] : 1));
        return NULL;
    }
    if (!quant_type_valid(t->type)) {
        err_set(e, ERR_UNSUPPORTED, "tensor %s has type %u, which this engine cannot compute", name,
                t->type);
        return NULL;
    }
    if (quant_row_size((enum ggml_type)t->type, t->ne[0]) == 0) {
        err_set(e, ERR_FORMAT, "tensor %s: row of %lld elements is not a whole number of %s blocks",
                name, (long long)t->ne[0], quant_traits((enum ggml_type)t->type)->name);
        return NULL;
    }
    return t;
}

const float *model_tensor_f32(const struct gguf *g, const char *name, int64_t n, struct err *e)
{
    const struct gguf_tensor *t = model_tensor(g, name, 1, &n, e);
    if (!t) return NULL;
    if (t->type != GGML_TYPE_F32) {
        err_set(e, ERR_UNSUPPORTED, "tensor %s must be F32 (it is %s)", name,
                quant_traits((enum ggml_type)t->type)->name);
        return NULL;
    }
    if (((uintptr_t)t->data & 3) != 0) {
        err_set(e, ERR_FORMAT, "tensor %s is not 4-byte aligned in the file", name);
        return NULL;
    }
    return t->data;
}

#define MODEL_CALIBRATE_MIN_BYTES ((uint64_t)64 << 20)

/* ---- the weights' slab layout (matmul_impl.h, docs/kernels.md "The slab layout") ---- */

/* rows of one repack work unit (a multiple of 16): 1 MB-ish pieces so both threads share the
 * embedding matrix, the largest, too */
#define REPACK_UNIT_ROWS 1024

struct repack_job {
    struct gguf_tensor **ts;
    uint8_t **dst;
    int n;
    int64_t *unit_begin; /* first unit of tensor i; [n] = the total */
    atomic_int_fast64_t next;
    bool drop_source;    /* give the source's pages back as each unit is done (peak memory) */
};

/* MADV_DONTNEED on the whole pages inside [a, a + n) */
static void drop_pages(const void *a, size_t n)
{
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), b = (uintptr_t)a + n;
    uintptr_t lo = ((uintptr_t)a + pg - 1) / pg * pg, hi = b / pg * pg;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* The rows a load would copy of t, 0 for none: a 2-D matrix's; an MoE expert tensor's (name
 * "…_exps…", 3-D: n_expert matrices one after another, each a whole number of 16-row slabs, so a
 * slab never spans two experts and mdl_op's expert slice starts on a slab) unless experts is false
 * (--experts=borrow: they stay in the mapping, demand-paged). */
static int64_t matrix_rows(const struct gguf_tensor *t, bool experts)
{
    if (t->n_dims == 2) return t->ne[1];
    if (t->n_dims == 3 && experts && t->ne[1] % 16 == 0 &&
        memmem(t->name.p, (size_t)t->name.len, "_exps", 5))
        return t->ne[1] * t->ne[2];
    return 0;
}

static void repack_worker(void *ctx, int ith, int nth)
{
    (void)ith, (void)nth;
    struct repack_job *j = ctx;
    int i = 0;
    for (;;) {
        int64_t u = atomic_fetch_add(&j->next, 1);
        if (u >= j->unit_begin[j->n]) break;
        while (u >= j->unit_begin[i + 1])
            i++;
        const struct gguf_tensor *t = j->ts[i];
        const enum ggml_type ty = (enum ggml_type)t->type;
        const size_t rs = quant_row_size(ty, t->ne[0]);
        /* every row of a copied tensor: ne[1], an expert tensor's ne[1] x ne[2] */
        const int64_t rows = (int64_t)(t->nbytes / rs), r0 = (u - j->unit_begin[i]) * REPACK_UNIT_ROWS,
                      n = rows - r0 < REPACK_UNIT_ROWS ? rows - r0 : REPACK_UNIT_ROWS;
        if (mm_slab_supported(ty))
            mm_slab_repack(ty, (const uint8_t *)t->data + (size_t)r0 * rs, n, t->ne[0],
                           j->dst[i] + (size_t)r0 * rs);
        else
            memcpy(j->dst[i] + (size_t)r0 * rs, (const uint8_t *)t->data + (size_t)r0 * rs, (size_t)n * rs);
        if (j->drop_source) drop_pages((const uint8_t *)t->data + (size_t)r0 * rs, (size_t)n * rs);
    }
}

static double mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The matrices a load copies: matrix_rows of at least 16, of a type a matmul path computes on
 * this CPU. */
static int repack_candidate(const struct gguf_tensor *t, bool experts)
{
    const enum ggml_type ty = (enum ggml_type)t->type;
    return matrix_rows(t, experts) >= 16 && (mm_slab_supported(ty) || mm_gemm_supported(ty));
}

/* Every matrix repack_candidate names is copied into one anonymous arena (huge pages where the
 * kernel gives them: the decode stream reads it faster than the file mapping, docs/gguf.md
 * --no-mmap), reordered into the slab layout where its type has a slab path (slab = 1), as it is
 * otherwise; its tensor points there. The families reach matrices only through mdl_op and
 * mdl_embed_row, which read either layout. The file's pages of the copied tensors are dropped
 * when they are the mapping's (the kernel reads them back if anything still touched them);
 * a --no-mmap copy keeps them (its bytes would not come back). Returns 0, or -1 with e (out of
 * memory: the caller goes on without the copy). */
static int repack_weights(struct model *m, bool drop_source, bool experts, struct err *e)
{
    struct gguf *g = &m->g;
    int n = 0, n_slab = 0;
    size_t total = 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        struct gguf_tensor *t = &g->tensors[i];
        if (!repack_candidate(t, experts)) continue;
        n++;
        n_slab += mm_slab_supported((enum ggml_type)t->type);
        total += ((size_t)t->nbytes + 4095) / 4096 * 4096;
    }
    if (!n) return 0;
    /* the copy is anonymous memory: where it would not fit (the mapping's pages are given back
     * as it goes, but they are page cache, which the kernel could drop anyway), read in place
     * rather than swap or meet the OOM killer */
    long long avail = sys_mem_available();
    if (avail >= 0 && (double)total > 0.8 * (double)avail) {
        log_warn("weights: not copied at load (%.1f MiB would take more than 80 %% of the %.1f MiB "
                 "available): read in place from the file, in its layout",
                 (double)total / 1048576.0, (double)avail / 1048576.0);
        return 0;
    }
    double t0 = mono_ms();
    void *arena = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct gguf_tensor **ts = calloc((size_t)n, sizeof *ts);
    uint8_t **dst = calloc((size_t)n, sizeof *dst);
    int64_t *ub = calloc((size_t)n + 1, sizeof *ub);
    if (arena == MAP_FAILED || !ts || !dst || !ub) {
        if (arena != MAP_FAILED) munmap(arena, total);
        free(ts), free(dst), free(ub);
        return err_set(e, ERR_NOMEM, "cannot allocate %.1f MiB to repack the weights",
                       (double)total / 1048576.0);
    }
#ifdef MADV_HUGEPAGE
    madvise(arena, total, MADV_HUGEPAGE); /* a hint: 2 MB pages cut the stream's TLB misses */
#endif
    size_t off = 0;
    int k = 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        struct gguf_tensor *t = &g->tensors[i];
        if (!repack_candidate(t, experts)) continue;
        ts[k] = t, dst[k] = (uint8_t *)arena + off;
        ub[k + 1] = ub[k] + (matrix_rows(t, experts) + REPACK_UNIT_ROWS - 1) / REPACK_UNIT_ROWS;
        off += ((size_t)t->nbytes + 4095) / 4096 * 4096;
        k++;
    }
    struct repack_job j = {.ts = ts, .dst = dst, .n = n, .unit_begin = ub, .drop_source = drop_source};
    atomic_init(&j.next, 0);
    tp_run(m->pool, repack_worker, &j);
    mprotect(arena, total, PROT_READ);
    for (int i = 0; i < n; i++) {
        if (drop_source) drop_pages(ts[i]->data, ts[i]->nbytes); /* the pages units shared */
        ts[i]->slab = mm_slab_supported((enum ggml_type)ts[i]->type);
        ts[i]->data = dst[i];
    }
    g->repack = arena;
    g->repack_size = total;
    log_info("weights: %d matrices (%.1f MiB) copied into memory at load in %.0f ms, %d of them "
             "repacked into 16-row slabs (--no-repack: read in place from the file)",
             n, (double)total / 1048576.0, mono_ms() - t0, n_slab);
    free(ts), free(dst), free(ub);
    return 0;
}

struct model *model_load(const char *path, const struct model_opts *opts, struct err *e)
{
    quant_init();
    ops_init();
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) { /* a nanochat checkpoint directory */
        return nanochat_load(path, opts, e); /* its errors name the directory */
    }
    struct gguf g;
    if (gguf_open_ex(&g, path, opts && opts->no_mmap, e)) {
        err_wrap(e, "%s", path);
        return NULL;
    }
    char *arch = gguf_get_str(&g, "general.architecture", e);
    if (!arch) {
        gguf_close(&g);
        err_wrap(e, "%s", path);
        return NULL;
    }
    struct model *m = NULL;
    if (!strcmp(arch, "qwen3") || !strcmp(arch, "qwen3moe")) {
        m = qwen3_load(&g, opts, e);
    } else if (!strcmp(arch, "qwen35") || !strcmp(arch, "qwen35moe")) {
        m = qwen35_load(&g, opts, e);
    } else if (!strcmp(arch, "gemma4")) {
        m = gemma4_load(&g, opts, e);
    } else {
        err_set(e, ERR_UNSUPPORTED, "architecture '%s' is not supported (qwen3, qwen3moe, qwen35, qwen35moe, gemma4)", arch);
    }
    free(arch);
    if (!m) {
        gguf_close(&g);
        err_wrap(e, "%s", path);
        return NULL;
    }
    if (!(opts && opts->no_repack)) {
        struct err re = {0};
        if (repack_weights(m, !(opts && opts->no_mmap), !(opts && opts->experts_borrow), &re)) log_warn("weights stay in the file's layout: %s", re.msg);
    }
    /* once per process: the decode stream's prefetch distance and work-item size, by measurement
     * on this machine (matmul.h); cached, so later loads only log the result */
    /* only when the weights stream from DRAM: a model under 64 MiB stays in the last-level cache,
     * where neither knob matters and the sweep (0.3 s on a loaded machine) would cost every test
     * server start more than it could gain */
    if (m->g.data_size < MODEL_CALIBRATE_MIN_BYTES) {
        log_debug("matmul calibration: skipped (%.1f MiB of weights stream from the cache)",
                  (double)m->g.data_size / 1048576.0);
        return m;
    }
    const struct mm_calib *cal = mm_calibrate(m->pool);
    log_info("matmul calibration (%.0f ms, %d threads): prefetch %d B / %d slabs (slab layout %d), decode "
             "items of %d rows, %.1f GB per CPU s; sweep (GB per CPU s) %s",
             cal->ms, tp_size(m->pool), cal->prefetch, cal->pf_slabs, cal->pf_slabs_slab, cal->item_rows,
             cal->gbs, cal->sweep);
    return m;
}

void model_free(struct model *m)
{
    if (m) m->ops->free(m);
}

const struct model_config *model_config(const struct model *m) { return &m->cfg; }
const struct gguf *model_gguf(const struct model *m) { return &m->g; }
struct threadpool *model_pool(struct model *m) { return m->pool; }

/* Checks every token, sequence and position before anything is computed, then updates the row
 * counts: a token at position p of sequence s needs rows [0, p) of s already filled (by earlier
 * calls or earlier tokens of this batch); writing p drops rows past it (a rewind). */
int model_forward(struct model *m, const struct batch *b, float *logits_out, struct err *e)
{
    if (b->n <= 0) return err_set(e, ERR_INVALID, "forward: empty batch");
    enum { MAX_SEQ = 256 };
    struct kv_cache *seqs[MAX_SEQ];
    int rows[MAX_SEQ];
    bool seen_first[MAX_SEQ];
    int n_seq = 0;
    for (int64_t i = 0; i < b->n; i++) {
        if (b->token[i] < 0 || b->token[i] >= m->cfg.n_vocab)
            return err_set(e, ERR_INVALID, "forward: token %d at batch index %lld is outside the "
                           "vocabulary (0..%d)", b->token[i], (long long)i, m->cfg.n_vocab - 1);
        struct kv_cache *kv = b->seq[i];
        if (!kv) return err_set(e, ERR_INVALID, "forward: batch index %lld has no cache", (long long)i);
        if (kv->n_layer != (m->cfg.n_layer_kv ? m->cfg.n_layer_kv : m->cfg.n_layer) + (m->cfg.kv_row_tokens ? 1 : 0) ||
            kv->n_head_kv != m->cfg.n_head_kv || kv->head_dim != m->cfg.head_dim ||
            kv->state_floats != m->cfg.state_floats || kv->layout != (const void *)m->kv_layers ||
            kv->esize != (m->cfg.kv_f32 ? 4 : 2))
            return err_set(e, ERR_INVALID, "forward: cache geometry does not match the model");
        int s = 0;
        while (s < n_seq && seqs[s] != kv) s++;
        if (s == n_seq) {
            if (n_seq == MAX_SEQ)
                return err_set(e, ERR_RANGE, "forward: more than %d sequences in one batch", MAX_SEQ);
            seqs[n_seq] = kv;
            seen_first[n_seq] = false;
            rows[n_seq++] = kv->n_rows;
        }
        int32_t p = b->pos[i];
        if (seen_first[s] && p != rows[s])
            return err_set(e, ERR_INVALID, "forward: position %d at batch index %lld does not follow "
                           "the previous token of its sequence (%d)", p, (long long)i, rows[s] - 1);
        /* a recurrent state is at its last position: it goes on from there or restarts at 0 */
        if (!seen_first[s] && kv->state && p != rows[s] && p != 0)
            return err_set(e, ERR_INVALID, "forward: position %d at batch index %lld would rewind a "
                           "recurrent state (sequence at %d; only %d or 0 can follow)", p,
                           (long long)i, rows[s], rows[s]);
        seen_first[s] = true;
        if (p < 0 || p > rows[s])
            return err_set(e, ERR_INVALID, "forward: position %d at batch index %lld leaves a gap "
                           "(sequence has %d rows)", p, (long long)i, rows[s]);
        if (p < kv->n_rows && !kv_prefix_ok(kv, p))
            return err_set(e, ERR_INVALID, "forward: position %d at batch index %lld rewinds past what "
                           "the sliding-window cache still holds", p, (long long)i);
        if (p >= kv->n_ctx)
            return err_set(e, ERR_CONTEXT, "forward: position %d does not fit the context (%d)", p,
                           kv->n_ctx);
        rows[s] = p + 1;
    }
    for (int s = 0; s < n_seq; s++) kv_reserve(seqs[s], rows[s]);
    if (m->ops->forward(m, b, logits_out, e)) return -1;
    for (int s = 0; s < n_seq; s++) kv_set_rows(seqs[s], rows[s]);
    return 0;
}

int model_verify(struct model *m, struct kv_cache *kv, const int32_t *tokens, int n, int32_t pos0,
                 float *logits_out, struct err *e)
{
    enum { MAX_VERIFY = 64 }; /* a verify is a draft plus one: small by construction */
    if (n <= 0 || n > MAX_VERIFY)
        return err_set(e, ERR_INVALID, "verify: %d tokens (1..%d)", n, MAX_VERIFY);
    int32_t pos[MAX_VERIFY];
    struct kv_cache *seq[MAX_VERIFY];
    bool want[MAX_VERIFY];
    for (int i = 0; i < n; i++) pos[i] = pos0 + i, seq[i] = kv, want[i] = true;
    struct batch b = {.token = tokens, .pos = pos, .seq = seq, .want_logits = want, .n = n};
    return model_forward(m, &b, logits_out, e);
}
