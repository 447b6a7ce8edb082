/* Unit tests: KV reuse across requests (docs/kv-cache.md) — the slot pool's adoption plan
 * (serve/kvpool), the cache's row serialization (engine/kv_cache), the disk tier's sidecars
 * (serve/kvdisk: round trip, containment, LRU, refusal of other-model / truncated / corrupted
 * files and of an unwritable directory) and base/hash's streaming property. */
#include <criterion/criterion.h>
#include <sys/mman.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mem_testlib.h"
#include "base/hash.h"
#include "engine/kv_cache.h"
#include "engine/kernels/ops.h"
#include "serve/kvdisk.h"
#include "serve/kvpool.h"

/* ------------------------------------------------------------------ plan */

static int32_t SYS[40], A[60], B[60];

static void fill(void)
{
    for (int i = 0; i < 40; i++) SYS[i] = 1000 + i;
    for (int i = 0; i < 60; i++) A[i] = i < 40 ? SYS[i] : 2000 + i, B[i] = i < 40 ? SYS[i] : 3000 + i;
}

static struct kvslot slot_of(int32_t *shadow, size_t n, size_t head, uint64_t used)
{
    return (struct kvslot){.shadow = shadow, .n_shadow = n, .head = head, .used = used};
}

Test(kvpool, cold_on_empty_pool_and_below_the_gate)
{
    fill();
    struct kvslot s[2] = {slot_of(A, 0, 0, 0), slot_of(B, 0, 0, 0)};
    struct kvplan p;
    kvpool_plan(s, 2, NULL, 0, A, 60, &p);
    cr_expect(p.kind == KVPLAN_COLD && p.keep == 0 && !p.spill);
    /* 5 common tokens of 60 is below the 0.1 gate: cold, into the LRU slot */
    int32_t C[60];
    memcpy(C, A, sizeof C);
    for (int i = 5; i < 60; i++) C[i] = 9000 + i;
    s[0] = slot_of(A, 60, 50, 2);
    s[1] = slot_of(B, 60, 50, 1);
    kvpool_plan(s, 2, NULL, 0, C, 60, &p);
    cr_expect(p.kind == KVPLAN_COLD && p.keep == 0);
    cr_expect(p.dst == 1, "LRU slot is the target");
    cr_expect(p.spill, "the target keeps nothing of its 60 rows");
}

Test(kvpool, continuation_adopts_in_place)
{
    fill();
    int32_t F[80]; /* A's first 55 tokens (its messages: head 50) then a new turn */
    memcpy(F, A, 55 * sizeof *F);
    for (int i = 55; i < 80; i++) F[i] = 4000 + i;
    struct kvslot s[2] = {slot_of(A, 60, 50, 1), slot_of(B, 60, 50, 2)};
    struct kvplan p;
    kvpool_plan(s, 2, NULL, 0, F, 80, &p);
    cr_expect(p.kind == KVPLAN_ADOPT && p.dst == 0 && p.src == 0 && p.keep == 55);
    cr_expect(!p.spill);
    /* the same prompt again: every token but the last is kept */
    kvpool_plan(s, 2, NULL, 0, A, 60, &p);
    cr_expect(p.kind == KVPLAN_ADOPT && p.dst == 0 && p.keep == 59);
    /* a prompt that is a strict prefix of the slot (the slot holds prompt + reply) */
    kvpool_plan(s, 2, NULL, 0, A, 52, &p);
    cr_expect(p.kind == KVPLAN_ADOPT && p.keep == 51);
}

/* Batching (docs/batching.md): a slot a live stream runs in is never the target; a continuation of
 * it (n > 1 siblings, or the same prompt twice in one batch) copies its prefix instead. */
Test(kvpool, busy_slots_are_never_targets)
{
    fill();
    struct kvslot s[3] = {slot_of(A, 60, 50, 3), slot_of(B, 60, 50, 1), slot_of(SYS, 0, 0, 0)};
    struct kvplan p;
    s[0].busy = true;
    kvpool_plan(s, 3, NULL, 0, A, 60, &p);
    cr_expect(p.kind == KVPLAN_COPY && p.src == 0 && p.dst == 2 && p.keep == 59,
              "kind %d src %d dst %d keep %zu", p.kind, p.src, p.dst, p.keep);
    s[2] = slot_of(SYS, 40, 40, 2); /* no empty slot: the LRU one that is not busy */
    s[1].busy = true;
    kvpool_plan(s, 3, NULL, 0, A, 60, &p);
    cr_expect(p.kind == KVPLAN_COPY && p.src == 0 && p.dst == 2, "dst %d", p.dst);
    int32_t C[60]; /* cold: still never a busy slot, even the least recently used one */
    for (int i = 0; i < 60; i++) C[i] = 9000 + i;
    kvpool_plan(s, 3, NULL, 0, C, 60, &p);
    cr_expect(p.kind == KVPLAN_COLD && p.dst == 2, "dst %d", p.dst);
}

Test(kvpool, shared_prefix_copies_and_leaves_the_donor)
{
    fill();
    /* B2: the system prompt, then its own dialogue: diverges at 40 < A's head 50 */
    struct kvslot s[2] = {slot_of(A, 60, 50, 5), slot_of(NULL, 0, 0, 0)};
    struct kvplan p;
    kvpool_plan(s, 2, NULL, 0, B, 60, &p);
    cr_expect(p.kind == KVPLAN_COPY && p.src == 0 && p.dst == 1 && p.keep == 40);
    cr_expect(!p.spill, "an empty target has nothing to spill");
    /* both slots busy: the LRU one that is not the donor */
    int32_t X[60];
    for (int i = 0; i < 60; i++) X[i] = 7000 + i;
    s[1] = slot_of(X, 60, 50, 9);
    kvpool_plan(s, 2, NULL, 0, B, 60, &p);
    cr_expect(p.kind == KVPLAN_COPY && p.src == 0 && p.dst == 1, "the donor is never the target");
    cr_expect(p.spill && p.dst_kept == 0);
    /* one slot: the copy degenerates to a truncation of the only slot */
    kvpool_plan(s, 1, NULL, 0, B, 60, &p);
    cr_expect(p.kind == KVPLAN_COPY && p.src == 0 && p.dst == 0 && p.keep == 40);
    cr_expect(!p.spill, "keeps 40 of 60 rows");
}

Test(kvpool, best_match_wins_ties_go_to_the_most_recent)
{
    fill();
    struct kvslot s[3] = {slot_of(A, 60, 50, 1), slot_of(A, 60, 50, 3), slot_of(B, 60, 50, 2)};
    struct kvplan p;
    kvpool_plan(s, 3, NULL, 0, A, 60, &p);
    cr_expect(p.kind == KVPLAN_ADOPT && p.dst == 1);
}

Test(kvpool, restore_only_when_a_sidecar_beats_every_slot)
{
    fill();
    struct kvslot s[1] = {slot_of(B, 60, 50, 1)};
    struct kvcand d[2] = {{A, 60, 1}, {SYS, 40, 2}};
    struct kvplan p;
    kvpool_plan(s, 1, d, 2, A, 60, &p);
    cr_expect(p.kind == KVPLAN_RESTORE && p.disk == 0 && p.dst == 0 && p.keep == 59);
    cr_expect(!p.spill, "B keeps its 40 system-prompt rows of 60");
    /* the resident slot matches as well as the best sidecar: no restore */
    kvpool_plan(s, 1, d + 1, 1, B, 60, &p);
    cr_expect(p.kind == KVPLAN_ADOPT && p.keep == 59);
}

/* ------------------------------------------------------------------ rows and sidecars */

/* A cache with kv_new's layout (kv_cache.h) without a model. */
static struct kv_cache *fake_kv(int n_layer, int n_head_kv, int hd, int n_ctx)
{
    struct kv_cache *kv = calloc(1, sizeof *kv);
    kv->n_layer = n_layer, kv->n_head_kv = n_head_kv, kv->head_dim = hd, kv->n_ctx = n_ctx;
    kv->esize = 2; /* F16 */
    kv->cap = (n_ctx + OPS_ATTN_KT - 1) / OPS_ATTN_KT * OPS_ATTN_KT;
    kv->head_stride = (int64_t)kv->cap * hd;
    kv->layer_stride = kv->head_stride * n_head_kv;
    size_t halfs = (size_t)kv->layer_stride * (size_t)n_layer;
    kv->bytes = 2 * halfs * 2;
    kv->k = calloc(2 * halfs, 2);
    kv->v = kv->k + halfs;
    return kv;
}

static void fill_rows(struct kv_cache *kv, int n, int salt)
{
    int w = kv->n_head_kv * kv->head_dim;
    float *k = malloc(sizeof(float) * (size_t)w), *v = malloc(sizeof(float) * (size_t)w);
    for (int l = 0; l < kv->n_layer; l++)
        for (int p = 0; p < n; p++) {
            for (int i = 0; i < w; i++)
                k[i] = (float)((l * 7 + p * 3 + i + salt) % 29) - 14.0f,
                v[i] = (float)((l * 5 + p * 11 + i * 2 + salt) % 31) * 0.25f;
            kv_store(kv, l, p, k, v);
        }
    kv_set_rows(kv, n);
    free(k);
    free(v);
}

static bool same_rows(const struct kv_cache *a, const struct kv_cache *b, int n)
{
    int w = a->n_head_kv * a->head_dim;
    float ka[512], va[512], kb[512], vb[512];
    for (int l = 0; l < a->n_layer; l++)
        for (int p = 0; p < n; p++) {
            kv_load(a, l, p, ka, va);
            kv_load(b, l, p, kb, vb);
            if (memcmp(ka, kb, sizeof(float) * (size_t)w) || memcmp(va, vb, sizeof(float) * (size_t)w))
                return false;
        }
    return true;
}

struct membuf {
    uint8_t *p;
    size_t n, at;
};

static int mem_w(void *ctx, void *p, size_t n)
{
    struct membuf *m = ctx;
    m->p = realloc(m->p, m->n + n);
    memcpy(m->p + m->n, p, n);
    m->n += n;
    return 0;
}

static int mem_r(void *ctx, void *p, size_t n)
{
    struct membuf *m = ctx;
    if (m->at + n > m->n) return -1;
    memcpy(p, m->p + m->at, n);
    m->at += n;
    return 0;
}

Test(kv_rows, write_read_round_trip_and_canonical_bytes)
{
    struct kv_cache *a = fake_kv(2, 2, 32, 200), *b = fake_kv(2, 2, 32, 200), *c = fake_kv(2, 2, 32, 200);
    fill_rows(a, 100, 0);
    fill_rows(c, 150, 0); /* same first 100 rows, different stale rows past them */
    kv_truncate(c, 100);
    struct membuf m = {0}, mc = {0};
    cr_assert(kv_write_rows(a, 70, mem_w, &m) == 0);
    cr_expect(m.n == kv_rows_nbytes(a, 70), "%zu vs %zu", m.n, kv_rows_nbytes(a, 70));
    cr_assert(kv_write_rows(c, 70, mem_w, &mc) == 0);
    cr_expect(m.n == mc.n && !memcmp(m.p, mc.p, m.n), "the bytes depend only on the valid rows");
    cr_expect(kv_write_rows(a, 101, mem_w, &m) != 0, "more rows than the cache holds");
    m.n = kv_rows_nbytes(a, 70);
    cr_assert(kv_read_rows(b, 70, mem_r, &m) == 0);
    cr_expect(kv_rows(b) == 70);
    cr_expect(same_rows(a, b, 70));
    /* a short stream: the cache is left with 0 rows, never half */
    struct membuf s = {m.p, m.n / 2, 0};
    cr_expect(kv_read_rows(b, 70, mem_r, &s) != 0);
    cr_expect(kv_rows(b) == 0);
    free(m.p);
    free(mc.p);
    kv_free(a);
    kv_free(b);
    kv_free(c);
}

Test(hash, streaming_equals_one_shot)
{
    uint8_t buf[1000];
    for (int i = 0; i < 1000; i++) buf[i] = (uint8_t)(i * 37 + 11);
    uint64_t one = hash64(buf, sizeof buf, 9);
    for (size_t cut = 0; cut < 40; cut += 3) {
        struct hash64 h;
        hash64_init(&h, 9);
        hash64_update(&h, buf, cut);
        hash64_update(&h, buf + cut, 7);
        hash64_update(&h, buf + cut + 7, sizeof buf - cut - 7);
        cr_expect(hash64_final(&h) == one, "split at %zu", cut);
    }
    buf[500] ^= 1;
    cr_expect(hash64(buf, sizeof buf, 9) != one, "a flipped bit changes the hash");
    cr_expect(hash64(buf, 999, 9) != hash64(buf, 1000, 9));
}

static char dir_tpl[64];
static const struct kvdisk_ident ID = {.model_fp = 0x1234, .tok_hash = 0x5678, .geom = {2, 2, 32, OPS_ATTN_KT}};

static const char *mkdir_tmp(void)
{
    snprintf(dir_tpl, sizeof dir_tpl, "/tmp/lmserve-kvdisk-XXXXXX");
    cr_assert(mkdtemp(dir_tpl));
    return dir_tpl;
}

static void rm_tree(const char *d)
{
    DIR *dh = opendir(d);
    struct dirent *de;
    char p[300];
    while (dh && (de = readdir(dh)))
        if (de->d_name[0] != '.' || strstr(de->d_name, ".lmkv")) {
            snprintf(p, sizeof p, "%s/%s", d, de->d_name);
            unlink(p);
        }
    if (dh) closedir(dh);
    rmdir(d);
}

static int count_files(const char *d, const char *suffix)
{
    DIR *dh = opendir(d);
    struct dirent *de;
    int n = 0;
    while (dh && (de = readdir(dh))) {
        size_t a = strlen(de->d_name), b = strlen(suffix);
        if (a >= b && !strcmp(de->d_name + a - b, suffix)) n++;
    }
    if (dh) closedir(dh);
    return n;
}

Test(kvdisk, spill_restore_and_index_after_a_restart)
{
    fill();
    const char *dir = mkdir_tmp();
    struct err e = {0};
    struct kvdisk *d = kvdisk_open(dir, 4, &ID, &e);
    cr_assert(d, "%s", e.msg);
    struct kv_cache *a = fake_kv(2, 2, 32, 200), *b = fake_kv(2, 2, 32, 200);
    fill_rows(a, 60, 1);
    cr_assert(kvdisk_spill(d, a, A, 60, 50) == 0);
    cr_expect(kvdisk_contains(d, A, 60) && kvdisk_contains(d, A, 30) && !kvdisk_contains(d, B, 60));
    kvdisk_free(d);
    /* a new process: the sidecar is found, indexed, restored whole */
    d = kvdisk_open(dir, 4, &ID, &e);
    cr_assert(d, "%s", e.msg);
    const struct kvcand *c;
    cr_assert(kvdisk_cands(d, &c) == 1);
    cr_expect(c[0].n == 60 && !memcmp(c[0].shadow, A, sizeof A));
    int32_t sh[200];
    size_t n = 0, head = 0;
    cr_assert(kvdisk_restore(d, 0, b, sh, &n, &head) == 0);
    cr_expect(n == 60 && head == 50 && !memcmp(sh, A, sizeof A) && kv_rows(b) == 60);
    cr_expect(same_rows(a, b, 60));
    kvdisk_free(d);
    kv_free(a);
    kv_free(b);
    rm_tree(dir);
}

Test(kvdisk, containment_dedupe_and_lru)
{
    fill();
    const char *dir = mkdir_tmp();
    struct err e = {0};
    struct kvdisk *d = kvdisk_open(dir, 2, &ID, &e);
    cr_assert(d, "%s", e.msg);
    struct kv_cache *a = fake_kv(2, 2, 32, 200);
    fill_rows(a, 60, 2);
    const struct kvcand *c;
    cr_assert(kvdisk_spill(d, a, A, 40, 30) == 0); /* a prefix of A */
    cr_assert(kvdisk_spill(d, a, A, 60, 50) == 0); /* contains it: the prefix file goes */
    cr_expect(kvdisk_cands(d, &c) == 1 && c[0].n == 60);
    cr_expect(count_files(dir, ".lmkv") == 1);
    cr_assert(kvdisk_spill(d, a, A, 50, 40) == 0, "contained: nothing written, not an error");
    cr_expect(kvdisk_cands(d, &c) == 1 && count_files(dir, ".lmkv") == 1);
    int32_t X[60], Y[60];
    for (int i = 0; i < 60; i++) X[i] = 7000 + i, Y[i] = 8000 + i;
    fill_rows(a, 60, 3);
    cr_assert(kvdisk_spill(d, a, X, 60, 50) == 0);
    cr_assert(kvdisk_spill(d, a, Y, 60, 50) == 0); /* at most 2: A (least recently used) goes */
    cr_expect(kvdisk_cands(d, &c) == 2 && count_files(dir, ".lmkv") == 2);
    cr_expect(!kvdisk_contains(d, A, 60) && kvdisk_contains(d, X, 60) && kvdisk_contains(d, Y, 60));
    kvdisk_free(d);
    kv_free(a);
    rm_tree(dir);
}

static void flip_byte(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    cr_assert(f);
    if (off < 0) fseek(f, off, SEEK_END);
    else fseek(f, off, SEEK_SET);
    long at = ftell(f);
    int ch = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(ch ^ 0x10, f);
    fclose(f);
}

Test(kvdisk, refuses_other_model_truncated_and_corrupted_files)
{
    fill();
    const char *dir = mkdir_tmp();
    struct err e = {0};
    struct kvdisk *d = kvdisk_open(dir, 8, &ID, &e);
    cr_assert(d, "%s", e.msg);
    struct kv_cache *a = fake_kv(2, 2, 32, 200), *b = fake_kv(2, 2, 32, 200);
    fill_rows(a, 60, 4);
    cr_assert(kvdisk_spill(d, a, A, 60, 50) == 0);
    char path[300];
    snprintf(path, sizeof path, "%s", kvdisk_path(d, 0));
    kvdisk_free(d);
    /* another model's server indexes nothing */
    struct kvdisk_ident other = ID;
    other.model_fp ^= 1;
    d = kvdisk_open(dir, 8, &other, &e);
    const struct kvcand *c;
    cr_assert(d);
    cr_expect(kvdisk_cands(d, &c) == 0, "another model's sidecar must be refused");
    kvdisk_free(d);
    other = ID;
    other.geom[2] = 64;
    d = kvdisk_open(dir, 8, &other, &e);
    cr_expect(kvdisk_cands(d, &c) == 0, "other geometry must be refused");
    kvdisk_free(d);
    /* a flipped bit in the rows: indexed (the header is sound), refused at restore, never loaded */
    flip_byte(path, -100);
    d = kvdisk_open(dir, 8, &ID, &e);
    cr_assert(kvdisk_cands(d, &c) == 1);
    int32_t sh[200];
    size_t n = 0, head = 0;
    fill_rows(b, 10, 0);
    cr_expect(kvdisk_restore(d, 0, b, sh, &n, &head) != 0);
    cr_expect(kv_rows(b) == 0, "a refused restore leaves an empty cache");
    cr_expect(kvdisk_cands(d, &c) == 0, "and drops the entry");
    kvdisk_free(d);
    /* a flipped bit in the shadow: refused at indexing (header checksum) */
    flip_byte(path, -100);
    flip_byte(path, KVDISK_HEADER + 8);
    d = kvdisk_open(dir, 8, &ID, &e);
    cr_expect(kvdisk_cands(d, &c) == 0, "a corrupted shadow must be refused");
    kvdisk_free(d);
    flip_byte(path, KVDISK_HEADER + 8);
    d = kvdisk_open(dir, 8, &ID, &e);
    cr_expect(kvdisk_cands(d, &c) == 1, "restored bytes: accepted again");
    kvdisk_free(d);
    /* truncated */
    struct stat st;
    stat(path, &st);
    cr_assert(truncate(path, st.st_size - 1) == 0);
    d = kvdisk_open(dir, 8, &ID, &e);
    cr_expect(kvdisk_cands(d, &c) == 0, "a truncated sidecar must be refused");
    kvdisk_free(d);
    /* a stale temp file of an interrupted write is deleted, never indexed */
    char tmp[320];
    snprintf(tmp, sizeof tmp, "%s/kv-0.lmkv.tmp.1.0", dir);
    FILE *f = fopen(tmp, "wb");
    fputs("partial", f);
    fclose(f);
    d = kvdisk_open(dir, 8, &ID, &e);
    cr_expect(access(tmp, F_OK) != 0);
    kvdisk_free(d);
    kv_free(a);
    kv_free(b);
    rm_tree(dir);
}

Test(kvdisk, unwritable_directory_is_an_error_not_a_crash)
{
    struct err e = {0};
    struct kvdisk *d = kvdisk_open("/proc/lmserve-no-such-dir", 8, &ID, &e);
    cr_expect(d == NULL);
    cr_expect(strstr(e.msg, "/proc/lmserve-no-such-dir") != NULL, "%s", e.msg);
    /* a directory path under a regular file */
    d = kvdisk_open("/dev/null/kv", 8, &ID, &e);
    cr_expect(d == NULL && strstr(e.msg, "/dev/null/kv"), "%s", e.msg);
}

/* A full disk: writes fail past a file size limit (RLIMIT_FSIZE, SIGXFSZ ignored, as a full
 * filesystem fails them with ENOSPC). The spill fails cleanly: no temp file, no entry; a smaller
 * one still succeeds. */
Test(kvdisk, a_failed_write_leaves_nothing_behind)
{
    fill();
    const char *dir = mkdir_tmp();
    struct err e = {0};
    struct kvdisk *d = kvdisk_open(dir, 8, &ID, &e);
    cr_assert(d, "%s", e.msg);
    struct kv_cache *a = fake_kv(2, 2, 32, 2000);
    fill_rows(a, 1500, 5);
    int32_t *big = malloc(1500 * sizeof *big);
    for (int i = 0; i < 1500; i++) big[i] = 5000 + i;
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {.rlim_cur = 200000, .rlim_max = RLIM_INFINITY};
    cr_assert(setrlimit(RLIMIT_FSIZE, &rl) == 0);
    cr_expect(kv_rows_nbytes(a, 1500) > 200000, "the big slot does not fit the limit");
    cr_expect(kvdisk_spill(d, a, big, 1500, 1000) != 0, "a failed write is an error");
    const struct kvcand *c;
    cr_expect(kvdisk_cands(d, &c) == 0);
    cr_expect(count_files(dir, ".lmkv") == 0 && count_files(dir, ".tmp.0") == 0 && count_files(dir, ".tmp.1") == 0,
              "no partial file is left");
    cr_expect(kvdisk_spill(d, a, A, 60, 50) == 0, "a slot that fits is still written");
    cr_expect(kvdisk_cands(d, &c) == 1);
    rl.rlim_cur = RLIM_INFINITY;
    setrlimit(RLIMIT_FSIZE, &rl);
    kvdisk_free(d);
    kv_free(a);
    free(big);
    rm_tree(dir);
}

/* fsync, wrapped for the unit-test binary (-Wl,--wrap=fsync in the Makefile): counts the calls on
 * regular files and on directories, and fails the n-th file sync with EIO when armed. */
int __real_fsync(int fd);
static int fsync_files, fsync_dirs, fsync_fail_at;
int __wrap_fsync(int fd)
{
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        fsync_dirs++;
    } else {
        fsync_files++;
        if (fsync_fail_at && fsync_files == fsync_fail_at) {
            errno = EIO;
            return -1;
        }
    }
    return __real_fsync(fd);
}

/* Issue 11: a sidecar is fsync'd before its rename and its directory after, so a power loss
 * leaves the whole file or none under the sidecar's name. An fsync that fails (EIO) fails the
 * spill like a failed write: logged, no file, no entry; the next spill still works. */
Test(kvdisk, a_spill_is_synced_before_rename_and_a_failed_sync_leaves_nothing)
{
    fill();
    const char *dir = mkdir_tmp();
    struct err e = {0};
    struct kvdisk *d = kvdisk_open(dir, 8, &ID, &e);
    cr_assert(d, "%s", e.msg);
    struct kv_cache *a = fake_kv(2, 2, 32, 100);
    fill_rows(a, 60, 5);
    fsync_files = fsync_dirs = 0;
    fsync_fail_at = 1;
    cr_expect(kvdisk_spill(d, a, A, 60, 50) != 0, "a failed fsync fails the spill");
    const struct kvcand *c;
    cr_expect(kvdisk_cands(d, &c) == 0);
    cr_expect(count_files(dir, "") == 2, "no file is left behind (only . and ..)");
    fsync_fail_at = 0;
    fsync_files = fsync_dirs = 0;
    cr_expect(kvdisk_spill(d, a, A, 60, 50) == 0);
    cr_expect(fsync_files == 1, "the sidecar's data is synced once (%d)", fsync_files);
    cr_expect(fsync_dirs == 1, "the directory is synced after the rename (%d)", fsync_dirs);
    cr_expect(kvdisk_cands(d, &c) == 1 && count_files(dir, ".lmkv") == 1);
    kvdisk_free(d);
    kv_free(a);
    rm_tree(dir);
}

/* Pages of K and V in [lo, hi) rows of every layer and head that are resident. */
static size_t resident_rows(const struct kv_cache *kv, int lo, int hi, size_t *pages)
{
    size_t res = 0, row = (size_t)kv->head_dim * 2;
    *pages = 0;
    for (int l = 0; l < kv->n_layer; l++)
        for (int h = 0; h < kv->n_head_kv; h++)
            for (int kvv = 0; kvv < 2; kvv++) {
                const uint16_t *base = (kvv ? kv->v : kv->k) + l * kv->layer_stride + h * kv->head_stride;
                size_t np;
                res += resident_pages((const char *)base + (size_t)lo * row, (size_t)(hi - lo) * row, &np);
                *pages += np;
            }
    return res;
}

/* kv_reserve populates the rows a forward is about to write, a chunk at a time, instead of a
 * page fault per 16 rows of every layer, head, K and V (~10 us each on a paravirtualized VM:
 * 6.2 -> 5.8 s for a fresh server's first 2,218-token prompt): the rows up to the next chunk
 * boundary become resident, rows further on do not, contents stay zero. */
Test(kv_rows, reserve_populates_the_next_rows_only)
{
    struct kv_cache *kv = fake_kv(2, 2, 128, 8192); /* 8 MB: a mapping of its own */
    size_t pages, res = resident_rows(kv, 0, 4096, &pages);
    cr_assert_lt(res, pages / 4, "%zu of %zu pages resident before any reserve", res, pages);
    kv_reserve(kv, 100);
    cr_assert_eq(kv->pop, 256);
    res = resident_rows(kv, 0, 256, &pages);
    cr_assert_eq(res, pages, "%zu of %zu pages of rows 0-255 resident", res, pages);
    res = resident_rows(kv, 1024, 4096, &pages);
    cr_assert_lt(res, pages / 4, "%zu of %zu pages past the chunk resident", res, pages);
    kv_reserve(kv, 300);
    cr_assert_eq(kv->pop, 512);
    res = resident_rows(kv, 256, 512, &pages);
    cr_assert_eq(res, pages, "%zu of %zu pages of rows 256-511 resident", res, pages);
    kv_reserve(kv, 200); /* behind the populated rows: nothing to do */
    cr_assert_eq(kv->pop, 512);
    const uint16_t *p = kv->k;
    for (size_t i = 0; i < (size_t)kv->layer_stride * 2 * 2; i++)
        cr_assert_eq(p[i], 0, "half %zu changed", i);
    free(kv->k);
    free(kv);
}
