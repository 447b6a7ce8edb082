/* kvdisk — sidecar files of KV slots (format in docs/kv-cache.md). */
#define _GNU_SOURCE /* asprintf */
#include "serve/kvdisk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/hash.h"
#include "base/log.h"
#include "engine/model.h"
#include "engine/text/vocab.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "kvdisk writes shadows and f16 rows in host order: little-endian hosts only"
#endif

#define IO_BUF (1u << 20)

struct entry {
    char *path;
    int32_t *shadow;
    size_t n, head;
    uint64_t used;
};

struct kvdisk {
    char *dir;
    int max_files;
    struct kvdisk_ident id;
    struct entry *e;
    struct kvcand *cand; /* mirrors e for kvpool_plan */
    int n, cap;
    uint64_t clock;
    unsigned seq; /* temp file names */
};

void kvdisk_ident_of(const struct model *m, const struct vocab *v, const struct kv_cache *probe,
                     struct kvdisk_ident *out)
{
    const struct gguf *g = model_gguf(m);
    out->model_fp = hash64(g->map, (size_t)(g->data - g->map), 1);
    struct hash64 h;
    hash64_init(&h, 2);
    for (int32_t i = 0; i < vocab_size(v); i++) {
        size_t len = 0;
        const char *b = tok_bytes(v, i, &len);
        int32_t meta[3] = {i, (int32_t)tok_type(v, i), (int32_t)len};
        hash64_update(&h, meta, sizeof meta);
        hash64_update(&h, b, len);
    }
    out->tok_hash = hash64_final(&h);
    kv_geometry(probe, out->geom);
}

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* rows bytes of a cache of geometry g holding n rows (kv_rows_nbytes without a cache) */
static uint64_t rows_nbytes(const int g[4], uint64_t n)
{
    uint64_t kt = (n + (uint64_t)g[3] - 1) / (uint64_t)g[3] * (uint64_t)g[3];
    return (kt + n) * (uint64_t)g[2] * (uint64_t)g[0] * (uint64_t)g[1] * 2;
}

static void header_build(uint8_t *hd, const struct kvdisk_ident *id, const int32_t *shadow,
                         size_t n, size_t head)
{
    memset(hd, 0, KVDISK_HEADER);
    memcpy(hd, KVDISK_MAGIC, 8);
    put32(hd + 8, KVDISK_VERSION);
    put32(hd + 12, KVDISK_HEADER);
    put64(hd + 16, id->model_fp);
    put64(hd + 24, id->tok_hash);
    for (int i = 0; i < 4; i++) put32(hd + 32 + 4 * i, (uint32_t)id->geom[i]);
    put32(hd + 48, (uint32_t)n);
    put32(hd + 52, (uint32_t)head);
    put64(hd + 56, rows_nbytes(id->geom, n));
    struct hash64 h;
    hash64_init(&h, 3);
    hash64_update(&h, hd, 64);
    hash64_update(&h, shadow, n * sizeof *shadow);
    put64(hd + 64, hash64_final(&h));
}

/* Reads and checks a sidecar's header and shadow. 0 with *shadow (malloc'd), *n, *head; or -1
 * with why[] saying what is wrong. The stream is left at the rows. */
static int header_read(FILE *f, const char *path, const struct kvdisk_ident *id, int32_t **shadow,
                       size_t *n, size_t *head, struct hash64 *whole, char *why, size_t why_n)
{
    *shadow = NULL;
    struct stat st;
    uint8_t hd[KVDISK_HEADER];
    if (fstat(fileno(f), &st) < 0) {
        snprintf(why, why_n, "cannot stat: %s", strerror(errno));
        return -1;
    }
    if (fread(hd, 1, sizeof hd, f) != sizeof hd) {
        snprintf(why, why_n, "truncated header (%lld bytes)", (long long)st.st_size);
        return -1;
    }
    if (memcmp(hd, KVDISK_MAGIC, 8)) {
        snprintf(why, why_n, "not a sidecar (bad magic)");
        return -1;
    }
    if (get32(hd + 8) != KVDISK_VERSION || get32(hd + 12) != KVDISK_HEADER) {
        snprintf(why, why_n, "version %u (this server reads %d)", get32(hd + 8), KVDISK_VERSION);
        return -1;
    }
    if (get64(hd + 16) != id->model_fp) {
        snprintf(why, why_n, "written for another model (fingerprint %016llx, this model %016llx)",
                 (unsigned long long)get64(hd + 16), (unsigned long long)id->model_fp);
        return -1;
    }
    if (get64(hd + 24) != id->tok_hash) {
        snprintf(why, why_n, "written with another tokenizer");
        return -1;
    }
    for (int i = 0; i < 4; i++)
        if ((int)get32(hd + 32 + 4 * i) != id->geom[i]) {
            snprintf(why, why_n, "cache geometry differs (field %d: %u, this model %d)", i,
                     get32(hd + 32 + 4 * i), id->geom[i]);
            return -1;
        }
    uint64_t nr = get32(hd + 48), rb = get64(hd + 56), hdn = get32(hd + 52);
    if (nr == 0 || nr > (1u << 24) || hdn > nr || rb != rows_nbytes(id->geom, nr)) {
        snprintf(why, why_n, "inconsistent header (rows %llu, head %llu, rows bytes %llu)",
                 (unsigned long long)nr, (unsigned long long)hdn, (unsigned long long)rb);
        return -1;
    }
    uint64_t want = KVDISK_HEADER + 4 * nr + rb + 8;
    if ((uint64_t)st.st_size != want) {
        snprintf(why, why_n, "%s: %lld bytes, the header implies %llu",
                 (uint64_t)st.st_size < want ? "truncated" : "trailing bytes", (long long)st.st_size,
                 (unsigned long long)want);
        return -1;
    }
    int32_t *s = malloc(nr * sizeof *s);
    if (!s) {
        snprintf(why, why_n, "out of memory for %llu shadow tokens", (unsigned long long)nr);
        return -1;
    }
    if (fread(s, sizeof *s, nr, f) != nr) {
        free(s);
        snprintf(why, why_n, "read error in the shadow");
        return -1;
    }
    struct hash64 h;
    hash64_init(&h, 3);
    hash64_update(&h, hd, 64);
    hash64_update(&h, s, nr * sizeof *s);
    if (hash64_final(&h) != get64(hd + 64)) {
        free(s);
        snprintf(why, why_n, "header checksum mismatch (corrupted)");
        return -1;
    }
    if (whole) {
        hash64_init(whole, 4);
        hash64_update(whole, hd, sizeof hd);
        hash64_update(whole, s, nr * sizeof *s);
    }
    *shadow = s;
    *n = (size_t)nr;
    *head = (size_t)hdn;
    return 0;
}

static int add_entry(struct kvdisk *d, char *path, int32_t *shadow, size_t n, size_t head,
                     uint64_t used)
{
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 16;
        struct entry *e = realloc(d->e, (size_t)cap * sizeof *e);
        if (!e) return -1;
        d->e = e;
        struct kvcand *c = realloc(d->cand, (size_t)cap * sizeof *c);
        if (!c) return -1;
        d->cand = c;
        d->cap = cap;
    }
    d->e[d->n] = (struct entry){path, shadow, n, head, used};
    d->cand[d->n] = (struct kvcand){shadow, n, used};
    d->n++;
    return 0;
}

/* Drops entry i from the index; unlinks its file when del. */
static void drop(struct kvdisk *d, int i, bool del)
{
    if (del && unlink(d->e[i].path) < 0 && errno != ENOENT)
        log_warn("kv disk: cannot delete %s: %s", d->e[i].path, strerror(errno));
    free(d->e[i].path);
    free(d->e[i].shadow);
    d->n--;
    d->e[i] = d->e[d->n];
    d->cand[i] = d->cand[d->n];
}

static bool has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static int cmp_used(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    return x->used < y->used ? -1 : x->used > y->used;
}

struct kvdisk *kvdisk_open(const char *dir, int max_files, const struct kvdisk_ident *id,
                           struct err *e)
{
    struct kvdisk *d = calloc(1, sizeof *d);
    DIR *dh = NULL;
    char *probe = NULL;
    if (!d || !(d->dir = strdup(dir))) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail;
    }
    d->max_files = max_files > 0 ? max_files : 1;
    d->id = *id;
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        err_set(e, ERR_IO, "cannot create %s: %s", dir, strerror(errno));
        goto fail;
    }
    if (asprintf(&probe, "%s/.probe.lmkv.tmp.%d", dir, (int)getpid()) < 0) {
        probe = NULL;
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail;
    }
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, "x", 1) != 1) {
        err_set(e, ERR_IO, "%s is not writable: %s", dir, strerror(errno));
        if (fd >= 0) close(fd);
        unlink(probe);
        goto fail;
    }
    close(fd);
    unlink(probe);
    if (!(dh = opendir(dir))) {
        err_set(e, ERR_IO, "cannot list %s: %s", dir, strerror(errno));
        goto fail;
    }
    struct dirent *de;
    while ((de = readdir(dh))) {
        bool tmp = strstr(de->d_name, ".lmkv.tmp") != NULL, side = has_suffix(de->d_name, ".lmkv");
        if (!tmp && !side) continue;
        char *path = NULL;
        if (asprintf(&path, "%s/%s", dir, de->d_name) < 0) continue;
        if (tmp) { /* a write that never finished (crash, full disk): never a sidecar */
            unlink(path);
            free(path);
            continue;
        }
        FILE *f = fopen(path, "rb");
        int32_t *shadow = NULL;
        size_t n = 0, head = 0;
        char why[200] = "cannot open";
        struct stat st = {0};
        if (!f || fstat(fileno(f), &st) < 0 ||
            header_read(f, path, id, &shadow, &n, &head, NULL, why, sizeof why) < 0) {
            if (!f) snprintf(why, sizeof why, "cannot open: %s", strerror(errno));
            log_warn("kv disk: refused %s: %s", path, why);
            if (f) fclose(f);
            free(path);
            continue;
        }
        fclose(f);
        uint64_t used = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
        if (add_entry(d, path, shadow, n, head, used) < 0) {
            free(path);
            free(shadow);
        }
    }
    closedir(dh);
    dh = NULL;
    /* LRU order by mtime; past max_files the oldest are left alone (not deleted) */
    if (d->n) qsort(d->e, (size_t)d->n, sizeof *d->e, cmp_used);
    while (d->n > d->max_files) {
        log_warn("kv disk: %s ignored: more than --kv-disk-slots %d sidecars", d->e[0].path,
                 d->max_files);
        free(d->e[0].path);
        free(d->e[0].shadow);
        memmove(d->e, d->e + 1, (size_t)--d->n * sizeof *d->e);
    }
    for (int i = 0; i < d->n; i++) {
        d->e[i].used = (uint64_t)i + 1;
        d->cand[i] = (struct kvcand){d->e[i].shadow, d->e[i].n, d->e[i].used};
    }
    d->clock = (uint64_t)d->n + 1;
    free(probe);
    return d;
fail:
    if (dh) closedir(dh);
    free(probe);
    kvdisk_free(d);
    return NULL;
}

void kvdisk_free(struct kvdisk *d)
{
    if (!d) return;
    while (d->n) drop(d, d->n - 1, false);
    free(d->e);
    free(d->cand);
    free(d->dir);
    free(d);
}

int kvdisk_cands(const struct kvdisk *d, const struct kvcand **out)
{
    *out = d ? d->cand : NULL;
    return d ? d->n : 0;
}

const char *kvdisk_path(const struct kvdisk *d, int i) { return d->e[i].path; }

bool kvdisk_contains(const struct kvdisk *d, const int32_t *shadow, size_t n)
{
    for (int i = 0; d && i < d->n; i++)
        if (d->e[i].n >= n && kv_lcp(d->e[i].shadow, d->e[i].n, shadow, n) == n) return true;
    return false;
}

struct wctx {
    FILE *f;
    struct hash64 h;
};

static int w_fn(void *ctx, void *p, size_t n)
{
    struct wctx *w = ctx;
    hash64_update(&w->h, p, n);
    return fwrite(p, 1, n, w->f) == n ? 0 : -1;
}

int kvdisk_spill(struct kvdisk *d, const struct kv_cache *kv, const int32_t *shadow, size_t n,
                 size_t head)
{
    if (!d || n == 0 || kvdisk_contains(d, shadow, n)) return 0;
    char *path = NULL, *tmp = NULL;
    int rc = -1;
    struct wctx w = {0};
    uint64_t sh = hash64(shadow, n * sizeof *shadow, 5);
    if (asprintf(&path, "%s/kv-%016llx.lmkv", d->dir, (unsigned long long)sh) < 0) path = NULL;
    if (!path || asprintf(&tmp, "%s.tmp.%d.%u", path, (int)getpid(), d->seq++) < 0) {
        tmp = NULL;
        log_warn("kv disk: out of memory, slot of %zu tokens not spilled", n);
        goto out;
    }
    /* room first: the least recently used sidecar goes when the tier is full */
    while (d->n >= d->max_files) {
        int lru = 0;
        for (int i = 1; i < d->n; i++)
            if (d->e[i].used < d->e[lru].used) lru = i;
        drop(d, lru, true);
    }
    if (!(w.f = fopen(tmp, "wb"))) {
        log_warn("kv disk: cannot write %s: %s (slot of %zu tokens not spilled)", tmp,
                 strerror(errno), n);
        goto out;
    }
    setvbuf(w.f, NULL, _IOFBF, IO_BUF);
    uint8_t hd[KVDISK_HEADER];
    header_build(hd, &d->id, shadow, n, head);
    hash64_init(&w.h, 4);
    uint64_t sum;
    if (w_fn(&w, hd, sizeof hd) < 0 || w_fn(&w, (void *)shadow, n * sizeof *shadow) < 0 ||
        kv_write_rows(kv, (int)n, w_fn, &w) < 0 || (sum = hash64_final(&w.h),
                                                    fwrite(&sum, 1, 8, w.f) != 8)) {
        log_warn("kv disk: writing %s failed: %s (slot of %zu tokens not spilled)", tmp,
                 strerror(errno), n);
        goto out;
    }
    /* durable before it gets the sidecar's name: the data reaches the disk (fsync) before the
     * rename, so after a power loss the name holds the whole file or nothing */
    if (fflush(w.f) != 0 || fsync(fileno(w.f)) != 0) {
        log_warn("kv disk: writing %s failed: %s (slot of %zu tokens not spilled)", tmp,
                 strerror(errno), n);
        goto out;
    }
    int cr = fclose(w.f);
    w.f = NULL;
    if (cr != 0 || rename(tmp, path) < 0) {
        log_warn("kv disk: writing %s failed: %s (slot of %zu tokens not spilled)", path,
                 strerror(errno), n);
        goto out;
    }
    free(tmp);
    tmp = NULL;
    /* and the rename itself: the directory entry (a failure here leaves a valid file whose name
     * may not survive a power loss: logged, the sidecar is kept) */
    int dfd = open(d->dir, O_RDONLY | O_DIRECTORY);
    if (dfd < 0 || fsync(dfd) != 0)
        log_warn("kv disk: syncing the directory %s failed: %s (%s may not survive a power loss)",
                 d->dir, strerror(errno), path);
    if (dfd >= 0) close(dfd);
    /* containment: the sidecars that are prefixes of this one are redundant now */
    for (int i = d->n - 1; i >= 0; i--)
        if (d->e[i].n <= n && kv_lcp(d->e[i].shadow, d->e[i].n, shadow, n) == d->e[i].n)
            drop(d, i, strcmp(d->e[i].path, path) != 0);
    int32_t *copy = malloc(n * sizeof *copy);
    if (!copy) goto out;
    memcpy(copy, shadow, n * sizeof *copy);
    if (add_entry(d, path, copy, n, head, d->clock++) < 0) {
        free(copy);
        goto out;
    }
    path = NULL;
    log_info("kv disk: spilled %zu tokens to %s", n, d->e[d->n - 1].path);
    rc = 0;
out:
    if (w.f) fclose(w.f);
    if (tmp) unlink(tmp);
    free(tmp);
    free(path);
    return rc;
}

struct rctx {
    FILE *f;
    struct hash64 h;
};

static int r_fn(void *ctx, void *p, size_t n)
{
    struct rctx *r = ctx;
    if (fread(p, 1, n, r->f) != n) return -1;
    hash64_update(&r->h, p, n);
    return 0;
}

int kvdisk_restore(struct kvdisk *d, int i, struct kv_cache *kv, int32_t *shadow_out,
                   size_t *n_out, size_t *head_out)
{
    struct entry *en = &d->e[i];
    char why[200] = "";
    struct rctx r = {0};
    int32_t *shadow = NULL;
    size_t n = 0, head = 0;
    kv_truncate(kv, 0);
    if (!(r.f = fopen(en->path, "rb"))) {
        snprintf(why, sizeof why, "cannot open: %s", strerror(errno));
        goto fail;
    }
    setvbuf(r.f, NULL, _IOFBF, IO_BUF);
    if (header_read(r.f, en->path, &d->id, &shadow, &n, &head, &r.h, why, sizeof why) < 0)
        goto fail;
    if (n != en->n || memcmp(shadow, en->shadow, n * sizeof *shadow)) {
        snprintf(why, sizeof why, "changed since it was indexed");
        goto fail;
    }
    if ((int)n > kv_capacity(kv)) {
        snprintf(why, sizeof why, "%zu rows do not fit the context (%d)", n, kv_capacity(kv));
        goto fail;
    }
    uint64_t sum = 0;
    if (kv_read_rows(kv, (int)n, r_fn, &r) < 0 || fread(&sum, 1, 8, r.f) != 8) {
        snprintf(why, sizeof why, "truncated rows");
        goto fail;
    }
    if (sum != hash64_final(&r.h)) {
        snprintf(why, sizeof why, "checksum mismatch (corrupted rows)");
        goto fail;
    }
    fclose(r.f);
    memcpy(shadow_out, shadow, n * sizeof *shadow);
    free(shadow);
    *n_out = n;
    *head_out = head;
    en->used = d->clock++;
    d->cand[i].used = en->used;
    utimensat(AT_FDCWD, en->path, NULL, 0); /* LRU order for the next start */
    return 0;
fail:
    log_warn("kv disk: refused %s: %s", en->path, why);
    if (r.f) fclose(r.f);
    free(shadow);
    kv_truncate(kv, 0);
    drop(d, i, false);
    return -1;
}
