/* lmserve-maskbench — MaskBench conformance runner and mask-time benchmark.
 *
 *   lmserve-maskbench MODEL FILE.json... [--max-tests N] [--lark FILE] [--quiet] [--wall] [--trace]
 * [--print] [--pretty]
 *
 * MODEL (a .gguf file, or a directory with tokenizer.json) supplies the vocabulary. Each FILE is
 * a MaskBench case {"schema": ..., "tests": [{"valid": bool, "data": ...}, ...]}: the schema is
 * compiled (GRAMMAR_JSON_SCHEMA); each instance is serialized compact and with Python's default
 * ", " / ": " separators (tidy JSON; --pretty: the schema gets "x-whitespace": "pretty" and the
 * second form is 2-space indented) (key order preserved, shortest round-trip reals: see dump), tokenized with the model's tokenizer
 * and fed token by token: every token must be in the mask (and consumable), and eos must be allowed
 * at the end. A valid instance rejected anywhere is a validation error; an invalid one accepted to
 * the end is an invalidation error. `--lark FILE` compiles that lark grammar for every file instead
 * of the schema (engine tests without the schema compiler). Prints one JSON line per file, then a
 * summary line (with the vocabulary's shared walk cache counters: walks held and dropped, the
 * most walks one mask or compile examined to make room, the time (monotonic clock) of making
 * room and growing its table). Timing: single thread, around matcher_mask / grammar_compile only; thread CPU
 * time unless --wall. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/buf.h"
#include "base/err.h"
#include "engine/format/gguf.h"
#include "engine/text/hf_tokenizer.h"
#include "engine/text/vocab.h"
#include "grammar/grammar.h"
#include "grammar/jsonschema_json.h"

/* Mask and compile times are this thread's CPU time by default (the figure that matters for one
 * decoding thread, and stable on a shared machine); --wall uses the monotonic clock. */
static clockid_t g_clock = CLOCK_THREAD_CPUTIME_ID;
static bool g_trace; /* --trace: where each rejection happened (stderr) */
static bool g_print; /* --print: each serialized instance (stderr) */
/* --pretty: schemas get "x-whitespace": "pretty" and instances are tested compact and 2-space
 * indented; default: compact and with Python's default ", " / ": " separators (tidy JSON) */
static bool g_pretty;
static bool g_hash; /* --hash: a hash of every mask of a file (mask_hash), to compare builds */

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(g_clock, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

struct fvec {
    float *v;
    size_t n, cap;
};

static void fv_push(struct fvec *f, float x)
{
    if (f->n == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 1024;
        float *n = realloc(f->v, nc * sizeof *n);
        if (!n) return;
        f->v = n;
        f->cap = nc;
    }
    f->v[f->n++] = x;
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Sorts f in place; returns the q-quantile (0..1). */
static double quantile(struct fvec *f, double q)
{
    if (!f->n) return 0;
    qsort(f->v, f->n, sizeof *f->v, cmp_f);
    size_t i = (size_t)(q * (double)(f->n - 1) + 0.5);
    return f->v[i];
}

static double mean(const struct fvec *f)
{
    double s = 0;
    for (size_t i = 0; i < f->n; i++)
        s += f->v[i];
    return f->n ? s / (double)f->n : 0;
}

struct ctx {
    struct vocab *v;
    struct grammar_vocab_index *vi;
    int32_t eos;
    uint32_t *mask;
    int32_t *ids;
    size_t ids_cap;
    struct fvec all_masks, all_compile;
    long max_tests;
    /* totals */
    long files, compiled, rejected, valid_tested, invalid_tested, verr, ierr, mismatches;
    long budget_errors;          /* masks / consumes that exceeded a grammar budget */
    uint64_t work_max, file_work; /* mask work units (grammar budgets): overall, this file */
    size_t dfa_max, compile_max;  /* bytes of the largest lexer DFA / compiled grammar */
    /* this file's costliest mask: time, work, and the text just before it (JSON-escaped later) */
    double worst_us;
    uint64_t worst_work, worst_trie;
    uint64_t trie_max, file_trie; /* trie steps of a mask: overall, this file */
    char worst_at[96];
    uint64_t mask_hash; /* this file's masks (--hash) */
    /* masks (and compiles, whose first masks are probed) that made room in the shared walk
     * cache (walks examined > 0): how many, the most walks one examined, the slowest mask */
    long room_masks, room_compiles;
    uint64_t room_visits_max;
    double room_us_max;
    uint64_t room_grow_ns_max; /* the most time one mask spent making room or growing */
};

/* Feeds text; returns 1 accepted to the end (eos allowed), 0 rejected somewhere, -1 error.
 * Mask times go to fm. *mismatch set if mask and consume disagree. */
static int feed(struct ctx *c, const struct grammar *g, const char *text, size_t len,
                struct fvec *fm, long *mismatch)
{
    struct err e = {0};
    size_t n = 0;
    if (tok_encode(c->v, text, len, NULL, 0, false, &c->ids, &n, &c->ids_cap, &e)) return -1;
    struct matcher *m = matcher_new(g, &e);
    if (!m) return -1;
    int res = 1;
    for (size_t i = 0; i <= n; i++) {
        struct grammar_walk_cache_stats cs0, cs1;
        grammar_vocab_cache_stats(c->vi, &cs0);
        double t0 = now_us();
        matcher_mask(m, c->mask);
        double dt = now_us() - t0;
        grammar_vocab_cache_stats(c->vi, &cs1);
        if (cs1.room_visits > cs0.room_visits) {
            uint64_t rv = cs1.room_visits - cs0.room_visits;
            c->room_masks++;
            if (rv > c->room_visits_max) c->room_visits_max = rv;
            if (dt > c->room_us_max) c->room_us_max = dt;
        }
        uint64_t rg = cs1.room_ns + cs1.grow_ns - cs0.room_ns - cs0.grow_ns;
        if (rg > c->room_grow_ns_max) c->room_grow_ns_max = rg;
        uint64_t w = matcher_last_work(m);
        if (w > c->file_work) c->file_work = w;
        if (w > c->work_max) c->work_max = w;
        uint64_t ts = matcher_last_trie_steps(m);
        if (ts > c->file_trie) c->file_trie = ts;
        if (ts > c->trie_max) c->trie_max = ts;
        if (matcher_status(m, &e)) {
            c->budget_errors++;
            fprintf(stderr, "budget: %s\n", e.msg);
        }
        fv_push(fm, (float)dt);
        fv_push(&c->all_masks, (float)dt);
        if (g_hash) {
            size_t words = ((size_t)vocab_size(c->v) + 31) / 32;
            uint64_t h = c->mask_hash ^ 0x9e3779b97f4a7c15ull;
            for (size_t k = 0; k < words; k++)
                h = (h ^ c->mask[k]) * 1099511628211ull;
            c->mask_hash = h;
        }
        if (dt > c->worst_us) {
            size_t off = 0, l;
            for (size_t k = 0; k < i; k++) {
                tok_bytes(c->v, c->ids[k], &l);
                off += l;
            }
            size_t from = off > 60 ? off - 60 : 0;
            c->worst_us = dt;
            c->worst_work = w;
            c->worst_trie = ts;
            snprintf(c->worst_at, sizeof c->worst_at, "%.*s", (int)(off - from), text + from);
            for (char *q = c->worst_at; *q; q++) /* a cut UTF-8 sequence is not valid JSON text */
                if ((unsigned char)*q >= 0x80) *q = '?';
        }
        int32_t t = i < n ? c->ids[i] : c->eos;
        bool allowed = (c->mask[t >> 5] >> (t & 31)) & 1;
        if (i == n) {
            if (allowed != matcher_accepting(m)) (*mismatch)++;
            res = allowed ? 1 : 0;
            break;
        }
        int rc = matcher_consume(m, t);
        if (allowed != (rc == 0)) (*mismatch)++;
        if (!allowed || rc) {
            if (g_trace) {
                size_t off = 0, l;
                for (size_t k = 0; k < i; k++) {
                    tok_bytes(c->v, c->ids[k], &l);
                    off += l;
                }
                const char *tb = tok_bytes(c->v, t, &l);
                fprintf(stderr, "  rejected token %d \"%.*s\" after: ...%.*s\n", t, (int)l, tb,
                        (int)(off > 200 ? 200 : off), text + (off > 200 ? off - 200 : 0));
            }
            res = 0;
            break;
        }
    }
    matcher_free(m);
    return res;
}

/* JSON text of v like Python's json.dumps (indent 0: compact, separators "," ":"; -1: the
 * default ", " / ": "; indent > 0: ", " / ": " with newlines), keys in file order. Reals use the shortest form that reads back to the same
 * double (jansson's %.17g would turn 500.23 into 500.23000000000002, which a schema with
 * multipleOf 0.01 rightly rejects); integral reals keep a ".0". */
static int dump(struct buf *b, const json_t *v, int indent, int level)
{
    char tmp[64];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        if (json_object_size(v) == 0) return buf_puts(b, "{}");
        buf_puts(b, "{");
        const char *k;
        json_t *x;
        bool first = true;
        json_object_foreach((json_t *)v, k, x)
        {
            if (!first) buf_puts(b, indent < 0 ? ", " : ",");
            first = false;
            if (indent > 0) buf_printf(b, "\n%*s", indent * (level + 1), "");
            json_t *ks = json_string(k);
            char *kd = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
            buf_puts(b, kd ? kd : "\"\"");
            free(kd);
            json_decref(ks);
            buf_puts(b, indent ? ": " : ":");
            if (dump(b, x, indent, level + 1)) return -1;
        }
        if (indent > 0) buf_printf(b, "\n%*s", indent * level, "");
        return buf_puts(b, "}");
    }
    case JSON_ARRAY: {
        if (json_array_size(v) == 0) return buf_puts(b, "[]");
        buf_puts(b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) buf_puts(b, indent < 0 ? ", " : ",");
            if (indent > 0) buf_printf(b, "\n%*s", indent * (level + 1), "");
            if (dump(b, json_array_get(v, i), indent, level + 1)) return -1;
        }
        if (indent > 0) buf_printf(b, "\n%*s", indent * level, "");
        return buf_puts(b, "]");
    }
    case JSON_REAL: {
        double d = json_real_value(v);
        for (int p = 1; p <= 17; p++) {
            snprintf(tmp, sizeof tmp, "%.*g", p, d);
            if (strtod(tmp, NULL) == d) break;
        }
        /* like Python's repr: positional notation for decimal exponents in [-4, 16) */
        char *ep = strchr(tmp, 'e');
        if (ep) {
            int ex = atoi(ep + 1);
            int digits = 0;
            for (char *q = tmp; q < ep; q++)
                digits += (*q >= '0' && *q <= '9');
            if (ex >= -4 && ex < 16) {
                int frac = digits - 1 - ex;
                snprintf(tmp, sizeof tmp, "%.*f", frac > 0 ? frac : 0, d);
            }
        }
        if (!strpbrk(tmp, ".eEn")) strcat(tmp, ".0");
        return buf_puts(b, tmp);
    }
    default: {
        char *d = json_dumps(v, JSON_ENCODE_ANY);
        if (!d) return -1;
        int rc = buf_puts(b, d);
        free(d);
        return rc;
    }
    }
}

static void json_str(FILE *f, const char *s)
{
    json_t *j = json_string(s ? s : "");
    char *d = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    fputs(d ? d : "\"\"", f);
    free(d);
    json_decref(j);
}

static void run_file(struct ctx *c, const char *path, const char *lark, bool quiet)
{
    json_error_t je;
    struct err e = {0};
    /* integers beyond 64 bits and NUL in keys (test instances) kept as markers, restored in
     * the texts below (jsonschema_json.h) */
    bool marked = false;
    json_t *root =
        jsonschema_json_load_file(path, JSON_ALLOW_NUL, JSONSCHEMA_LOAD_NUL_KEYS, &marked, &je);
    struct fvec fm = {0};
    long vt = 0, it = 0, ve = 0, ie = 0, mm = 0;
    double compile_us = 0;
    bool compiled = false;
    char errmsg[600] = "";
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    c->files++;
    struct grammar *g = NULL;
    struct grammar_stats gs = {0};
    c->file_work = 0;
    c->worst_us = 0;
    c->worst_work = 0;
    c->worst_trie = 0;
    c->file_trie = 0;
    c->mask_hash = 0;
    c->worst_at[0] = 0;
    if (!root) {
        snprintf(errmsg, sizeof errmsg, "cannot read: %s", je.text);
        goto out;
    }
    json_t *schema = json_object_get(root, "schema");
    if (g_pretty && json_is_object(schema) && !json_object_get(schema, "x-whitespace"))
        json_object_set_new(schema, "x-whitespace", json_string("pretty"));
    char *src =
        schema ? json_dumps(schema, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY) : NULL;
    if (src) {
        struct buf sb = {0};
        if (buf_puts(&sb, src) || (marked && jsonschema_json_unmark(&sb))) {
            buf_free(&sb);
            free(src);
            src = NULL;
        } else {
            free(src);
            src = buf_steal(&sb);
        }
    }
    if (!src) {
        snprintf(errmsg, sizeof errmsg, "no schema");
        goto out;
    }
    struct grammar_walk_cache_stats cs0, cs1;
    grammar_vocab_cache_stats(c->vi, &cs0);
    double t0 = now_us();
    g = lark ? grammar_compile(c->vi, GRAMMAR_LARK, lark, strlen(lark), &e)
             : grammar_compile(c->vi, GRAMMAR_JSON_SCHEMA, src, strlen(src), &e);
    compile_us = now_us() - t0;
    grammar_vocab_cache_stats(c->vi, &cs1);
    if (cs1.room_visits > cs0.room_visits) { /* the compile's first masks made room */
        uint64_t rv = cs1.room_visits - cs0.room_visits;
        c->room_compiles++;
        if (rv > c->room_visits_max) c->room_visits_max = rv;
    }
    free(src);
    if (!g) {
        snprintf(errmsg, sizeof errmsg, "%s", e.msg);
        c->rejected++;
        goto out;
    }
    compiled = true;
    c->compiled++;
    fv_push(&c->all_compile, (float)compile_us);
    json_t *tests = json_object_get(root, "tests");
    size_t i;
    json_t *tc;
    long done = 0;
    json_array_foreach(tests, i, tc)
    {
        if (c->max_tests >= 0 && done >= c->max_tests) break;
        done++;
        json_t *data = json_object_get(tc, "data");
        bool valid = json_is_true(json_object_get(tc, "valid"));
        if (!data) continue;
        for (int style = 0; style < 2; style++) {
            struct buf tb = {0};
            if (dump(&tb, data, style == 0 ? 0 : g_pretty ? 2 : -1, 0) || buf_puts(&tb, "") ||
                (marked && jsonschema_json_unmark(&tb))) {
                buf_free(&tb);
                continue;
            }
            char *text = buf_steal(&tb);
            if (g_print) fprintf(stderr, "%s\n", text);
            int r = feed(c, g, text, strlen(text), &fm, &mm);
            if (r < 0) {
                free(text);
                continue;
            }
            if (valid) {
                vt++;
                if (r == 0) {
                    ve++;
                    if (!quiet)
                        fprintf(stderr, "%s: valid instance rejected: %.300s\n", base, text);
                }
            } else {
                it++;
                if (r == 1) {
                    ie++;
                    if (!quiet)
                        fprintf(stderr, "%s: invalid instance accepted: %.300s\n", base, text);
                }
            }
            free(text);
        }
    }
out:
    if (g) {
        grammar_stats(g, &gs);
        if (gs.dfa_bytes > c->dfa_max) c->dfa_max = gs.dfa_bytes;
        if (gs.compile_bytes > c->compile_max) c->compile_max = gs.compile_bytes;
    }
    c->valid_tested += vt;
    c->invalid_tested += it;
    c->verr += ve;
    c->ierr += ie;
    c->mismatches += mm;
    double avg = mean(&fm);
    double p99 = quantile(&fm, 0.99);
    double mx = fm.n ? fm.v[fm.n - 1] : 0;
    printf("{\"file\":");
    json_str(stdout, base);
    printf(",\"compiled\":%s,\"error\":", compiled ? "true" : "false");
    if (errmsg[0])
        json_str(stdout, errmsg);
    else
        printf("null");
    printf(",\"valid_tested\":%ld,\"invalid_tested\":%ld,\"validation_errors\":%ld,"
           "\"invalidation_errors\":%ld,\"masks\":%zu,\"mask_us_avg\":%.2f,\"mask_us_p99\":%.2f,"
           "\"mask_us_max\":%.2f,\"compile_us\":%.1f,\"mismatches\":%ld,\"mask_work_max\":%llu,"
           "\"dfa_kb\":%zu,\"compiled_kb\":%zu,\"relaxed_masks\":%llu,\"relaxed_walks\":%llu,"
           "\"interval_masks\":%llu,\"interval_walks\":%llu,"
           "\"worst_mask_work\":%llu,\"worst_mask_trie\":%llu,\"mask_trie_max\":%llu,"
           "\"whole_taken\":%llu,\"trie_skipped\":%llu,\"mask_hash\":\"%016llx\","
           "\"worst_mask_after\":",
           vt, it, ve, ie, fm.n, avg, p99, mx, compile_us, mm, (unsigned long long)c->file_work,
           gs.dfa_bytes >> 10, gs.compile_bytes >> 10, (unsigned long long)gs.relax_served,
           (unsigned long long)gs.relax_walks, (unsigned long long)gs.iv_served,
           (unsigned long long)gs.iv_walks, (unsigned long long)c->worst_work,
           (unsigned long long)c->worst_trie, (unsigned long long)c->file_trie,
           (unsigned long long)gs.whole_taken, (unsigned long long)gs.trie_skipped,
           (unsigned long long)c->mask_hash);
    json_str(stdout, c->worst_at);
    printf("}\n");
    fflush(stdout);
    free(fm.v);
    grammar_free(g);
    json_decref(root);
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    struct buf b = {0};
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
        buf_append(&b, tmp, n);
    fclose(f);
    buf_puts(&b, "");
    return buf_steal(&b);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: lmserve-maskbench MODEL FILE.json... [--max-tests N] "
                        "[--lark FILE] [--quiet] [--wall] [--trace] [--print] [--hash]\n");
        return 2;
    }
    const char *model = argv[1];
    struct ctx c = {.max_tests = -1};
    const char *lark_path = NULL;
    bool quiet = false;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--max-tests") && i + 1 < argc)
            c.max_tests = atol(argv[++i]);
        else if (!strcmp(argv[i], "--lark") && i + 1 < argc)
            lark_path = argv[++i];
        else if (!strcmp(argv[i], "--quiet"))
            quiet = true;
        else if (!strcmp(argv[i], "--wall"))
            g_clock = CLOCK_MONOTONIC;
        else if (!strcmp(argv[i], "--trace"))
            g_trace = true;
        else if (!strcmp(argv[i], "--print"))
            g_print = true;
        else if (!strcmp(argv[i], "--pretty"))
            g_pretty = true;
        else if (!strcmp(argv[i], "--hash"))
            g_hash = true;
    }
    char *lark = NULL;
    if (lark_path && !(lark = read_file(lark_path))) {
        fprintf(stderr, "lmserve-maskbench: cannot read %s\n", lark_path);
        return 1;
    }
    struct err e = {0};
    struct gguf gg = {0};
    bool g_open = false;
    struct stat st;
    if (stat(model, &st) == 0 && S_ISDIR(st.st_mode)) {
        struct hf_tokenizer t;
        if (hf_tokenizer_load(model, 0, &t, &e) == 0) {
            c.v = vocab_from_hf(&t, &e);
            hf_tokenizer_free(&t);
        }
    } else if (gguf_open(&gg, model, &e) == 0) {
        g_open = true;
        c.v = vocab_load(&gg, &e);
    }
    if (!c.v) {
        fprintf(stderr, "lmserve-maskbench: %s: %s\n", model, e.msg);
        if (g_open) gguf_close(&gg);
        free(lark);
        return 1;
    }
    int32_t n = vocab_size(c.v);
    const char **bytes = malloc((size_t)n * sizeof *bytes);
    uint32_t *lens = malloc((size_t)n * sizeof *lens);
    bool *sp = malloc((size_t)n * sizeof *sp);
    c.mask = malloc(((size_t)n + 31) / 32 * sizeof *c.mask);
    if (!bytes || !lens || !sp || !c.mask) return 1;
    for (int32_t i = 0; i < n; i++) {
        size_t l;
        bytes[i] = tok_bytes(c.v, i, &l);
        lens[i] = tok_type(c.v, i) == TOK_UNUSED ? 0 : (uint32_t)l; /* padding: never allowed */
        sp[i] = tok_is_special(c.v, i);
    }
    c.eos = tok_eot(c.v) >= 0 ? tok_eot(c.v) : tok_eos(c.v);
    struct grammar_vocab gv = {n, bytes, lens, sp, c.eos};
    double t0 = now_us();
    c.vi = grammar_vocab_index_new(&gv, &e);
    double index_ms = (now_us() - t0) / 1000;
    if (!c.vi) {
        fprintf(stderr, "lmserve-maskbench: %s\n", e.msg);
        return 1;
    }
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--max-tests") || !strcmp(argv[i], "--lark")) {
            i++;
            continue;
        }
        if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "--wall") ||
            !strcmp(argv[i], "--trace") || !strcmp(argv[i], "--print") || !strcmp(argv[i], "--pretty") ||
            !strcmp(argv[i], "--hash"))
            continue;
        run_file(&c, argv[i], lark, quiet);
    }
    double mavg = mean(&c.all_masks);
    double m50 = quantile(&c.all_masks, 0.5), m99 = quantile(&c.all_masks, 0.99);
    double mmax = c.all_masks.n ? c.all_masks.v[c.all_masks.n - 1] : 0;
    double c50 = quantile(&c.all_compile, 0.5), c99 = quantile(&c.all_compile, 0.99);
    struct grammar_walk_cache_stats cs;
    grammar_vocab_cache_stats(c.vi, &cs);
    printf("{\"summary\":true,\"files\":%ld,\"compiled\":%ld,\"rejected\":%ld,\"valid_tested\":%ld,"
           "\"invalid_tested\":%ld,\"validation_errors\":%ld,\"invalidation_errors\":%ld,"
           "\"mismatches\":%ld,\"masks\":%zu,\"mask_us_avg\":%.2f,\"mask_us_p50\":%.2f,"
           "\"mask_us_p99\":%.2f,\"mask_us_max\":%.2f,\"compile_us_p50\":%.1f,"
           "\"compile_us_p99\":%.1f,\"vocab\":%d,\"vocab_index_ms\":%.1f,"
           "\"budget_errors\":%ld,\"mask_work_max\":%llu,\"mask_trie_max\":%llu,"
           "\"dfa_kb_max\":%zu,\"compiled_kb_max\":%zu,\"cache_walks\":%llu,"
           "\"cache_relaxed\":%llu,\"cache_mb\":%.1f,\"cache_slots\":%llu,\"cache_drops\":%llu,"
           "\"room_masks\":%ld,\"room_visits_max\":%llu,\"room_mask_us_max\":%.2f,"
           "\"grow_slots_max\":%llu,\"cache_refused\":%llu,\"room_compiles\":%ld,"
           "\"room_ms\":%.2f,\"room_us_max\":%.1f,\"grow_us_max\":%.1f,"
           "\"mask_room_grow_us_max\":%.1f,\"cache_relaxed_drops\":%llu}\n",
           c.files, c.compiled, c.rejected, c.valid_tested, c.invalid_tested, c.verr, c.ierr,
           c.mismatches, c.all_masks.n, mavg, m50, m99, mmax, c50, c99, n, index_ms,
           c.budget_errors, (unsigned long long)c.work_max, (unsigned long long)c.trie_max,
           c.dfa_max >> 10, c.compile_max >> 10, (unsigned long long)cs.walks,
           (unsigned long long)cs.relaxed, (double)cs.bytes / (1 << 20),
           (unsigned long long)cs.slots, (unsigned long long)cs.drops, c.room_masks,
           (unsigned long long)c.room_visits_max, c.room_us_max, (unsigned long long)cs.grow_max,
           (unsigned long long)cs.refused, c.room_compiles, cs.room_ns / 1e6,
           cs.room_ns_max / 1e3, cs.grow_ns_max / 1e3, c.room_grow_ns_max / 1e3,
           (unsigned long long)cs.relaxed_drops);
    grammar_vocab_index_free(c.vi);
    vocab_free(c.v);
    if (g_open) gguf_close(&gg);
    free(bytes);
    free(lens);
    free(sp);
    free(c.mask);
    free(c.ids);
    free(c.all_masks.v);
    free(c.all_compile.v);
    free(lark);
    return 0;
}
