/* lmserve-tokenize — tokenizes stdin with a model's vocabulary.
 *
 *   lmserve-tokenize MODEL [--special]      stdin text -> ids, comma separated, one line
 *   lmserve-tokenize MODEL --lines-hex [--special]
 *       each stdin line is hex-encoded bytes; prints "ids<TAB>hex(decode(ids))" per line
 *       (the test suite's batch mode: one process for thousands of strings)
 *   lmserve-tokenize MODEL --bench N        tokenizes stdin N times, prints MB/s (one thread)
 *   lmserve-tokenize DIR --write-gguf OUT   writes DIR's tokenizer as a GGUF holding only the
 *       tokenizer.* keys (what lmserve-mkmodel embeds; the tokenizer suite's GGUF path)
 *
 * MODEL is a .gguf file, a directory holding tokenizer.json + tokenizer_config.json, or a nanochat
 * tokenizer file (*.json: docs/nanochat.md) or a nanochat checkpoint directory holding one.
 * --special parses control tokens (<|im_start|> ...) anywhere in the text; without it they are
 * plain text, as for request content. */
#include <errno.h>
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

#define NANOCHAT_TOKFILE "tokenizer.json" /* docs/nanochat.md; HF dirs have tokenizer_config.json */

static void usage(FILE *f)
{
    fprintf(f, "usage: lmserve-tokenize MODEL [--special] [--lines-hex | --bench N]\n"
               "       lmserve-tokenize DIR --write-gguf OUT.gguf\n"
               "  MODEL        a .gguf file, a tokenizer directory (tokenizer.json), a nanochat\n"
               "               tokenizer file (*.json) or a nanochat checkpoint directory\n"
               "  --special    match control tokens anywhere in the input (default: plain text)\n"
               "  --lines-hex  batch mode: hex lines in, \"ids<TAB>hex(decoded)\" lines out\n"
               "  --bench N    tokenize stdin N times and print throughput\n");
}

static int read_all(FILE *f, struct buf *b)
{
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
        if (buf_append(b, tmp, n)) return -1;
    return ferror(f) ? -1 : 0;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static void print_ids(const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
}

int main(int argc, char **argv)
{
    const char *model = NULL;
    bool special = false, lines_hex = false;
    long bench = 0;
    const char *write_gguf = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--special") == 0) special = true;
        else if (strcmp(argv[i], "--write-gguf") == 0 && i + 1 < argc) write_gguf = argv[++i];
        else if (strcmp(argv[i], "--lines-hex") == 0) lines_hex = true;
        else if (strcmp(argv[i], "--bench") == 0 && i + 1 < argc) {
            char *end;
            bench = strtol(argv[++i], &end, 10);
            if (*end || bench <= 0) {
                fprintf(stderr, "lmserve-tokenize: --bench wants a positive count\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' || model) {
            fprintf(stderr, "lmserve-tokenize: unexpected argument %s\n", argv[i]);
            usage(stderr);
            return 2;
        } else {
            model = argv[i];
        }
    }
    if (!model) {
        usage(stderr);
        return 2;
    }

    struct err e = {0};
    struct vocab *v = NULL;
    struct gguf g = {0};
    bool g_open = false;
    struct stat st;
    if (write_gguf) {
        struct hf_tokenizer t;
        if (stat(model, &st) != 0 || !S_ISDIR(st.st_mode)) {
            fprintf(stderr, "lmserve-tokenize: --write-gguf wants a tokenizer directory\n");
            return 2;
        }
        if (hf_tokenizer_load(model, 0, &t, &e)) {
            fprintf(stderr, "lmserve-tokenize: %s: %s\n", model, e.msg);
            return 1;
        }
        struct gguf_writer *w = gguf_writer_new(32);
        int wrc = !w ? err_set(&e, ERR_NOMEM, "out of memory")
                     : hf_tokenizer_write_gguf(&t, w, &e) ? -1 : gguf_writer_save(w, write_gguf, &e);
        gguf_writer_free(w);
        hf_tokenizer_free(&t);
        if (wrc) fprintf(stderr, "lmserve-tokenize: %s: %s\n", write_gguf, e.msg);
        return wrc ? 1 : 0;
    }
    size_t ml = strlen(model);
    char nano[4096];
    char hfcfg[4096];
    snprintf(nano, sizeof nano, "%s/" NANOCHAT_TOKFILE, model);
    snprintf(hfcfg, sizeof hfcfg, "%s/tokenizer_config.json", model);
    if (ml > 5 && strcmp(model + ml - 5, ".json") == 0) {
        v = vocab_load_tiktoken(model, &e);
    } else if (stat(model, &st) == 0 && S_ISDIR(st.st_mode) && stat(hfcfg, &st) != 0 &&
               stat(nano, &st) == 0) {
        v = vocab_load_tiktoken(nano, &e);
    } else if (stat(model, &st) == 0 && S_ISDIR(st.st_mode)) {
        struct hf_tokenizer t;
        if (hf_tokenizer_load(model, 0, &t, &e) == 0) {
            v = vocab_from_hf(&t, &e);
            hf_tokenizer_free(&t);
        }
    } else if (gguf_open(&g, model, &e) == 0) {
        g_open = true;
        v = vocab_load(&g, &e);
    }
    if (!v) {
        fprintf(stderr, "lmserve-tokenize: %s: %s\n", model, e.msg);
        if (g_open) gguf_close(&g);
        return 1;
    }

    int rc = 0;
    struct buf in = {0}, dec = {0};
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    if (read_all(stdin, &in)) {
        fprintf(stderr, "lmserve-tokenize: reading stdin: %s\n", strerror(errno));
        rc = 1;
        goto out;
    }
    if (bench) {
        struct timespec t0, t1, c0, c1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
        size_t total_ids = 0;
        for (long r = 0; r < bench; r++) {
            n = 0;
            if (tok_encode(v, in.data, in.len, NULL, 0, special, &ids, &n, &cap, &e)) break;
            total_ids += n;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        double cs = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
        if (e.code) {
            fprintf(stderr, "lmserve-tokenize: %s\n", e.msg);
            rc = 1;
            goto out;
        }
        /* Wall time depends on what else runs on the machine; CPU time of this thread is the
         * one-core figure. */
        printf("bytes %zu  tokens %zu  runs %ld  wall %.3f s (%.2f MB/s)  cpu %.3f s (%.2f MB/s, "
               "%.0f tokens/s)\n",
               in.len, n, bench, s, (double)in.len * (double)bench / s / 1e6, cs,
               (double)in.len * (double)bench / cs / 1e6, (double)total_ids / cs);
        goto out;
    }
    if (!lines_hex) {
        if (tok_encode(v, in.data, in.len, NULL, 0, special, &ids, &n, &cap, &e)) {
            fprintf(stderr, "lmserve-tokenize: %s\n", e.msg);
            rc = 1;
            goto out;
        }
        print_ids(ids, n);
        printf("\n");
        goto out;
    }
    /* --lines-hex */
    struct buf line = {0};
    size_t pos = 0, lineno = 0;
    while (pos < in.len) {
        char *nl = memchr(in.data + pos, '\n', in.len - pos);
        size_t end = nl ? (size_t)(nl - in.data) : in.len;
        lineno++;
        buf_reset(&line);
        size_t hl = end - pos;
        if (hl % 2) {
            fprintf(stderr, "lmserve-tokenize: line %zu: odd hex length\n", lineno);
            rc = 1;
            break;
        }
        for (size_t k = 0; k < hl; k += 2) {
            int hi = hexval(in.data[pos + k]), lo = hexval(in.data[pos + k + 1]);
            if (hi < 0 || lo < 0) {
                fprintf(stderr, "lmserve-tokenize: line %zu: bad hex\n", lineno);
                rc = 1;
                goto hexdone;
            }
            char c = (char)(hi * 16 + lo);
            buf_append(&line, &c, 1);
        }
        n = 0;
        if (tok_encode(v, line.data ? line.data : "", line.len, NULL, 0, special, &ids, &n, &cap,
                       &e)) {
            fprintf(stderr, "lmserve-tokenize: line %zu: %s\n", lineno, e.msg);
            rc = 1;
            break;
        }
        print_ids(ids, n);
        putchar('\t');
        buf_reset(&dec);
        if (tok_decode(v, ids, n, &dec, &e)) {
            fprintf(stderr, "lmserve-tokenize: line %zu: %s\n", lineno, e.msg);
            rc = 1;
            break;
        }
        for (size_t k = 0; k < dec.len; k++) printf("%02x", (unsigned char)dec.data[k]);
        putchar('\n');
        pos = end + 1;
    }
hexdone:
    buf_free(&line);
out:
    free(ids);
    buf_free(&in);
    buf_free(&dec);
    vocab_free(v);
    if (g_open) gguf_close(&g);
    if (fflush(stdout) != 0) rc = 1;
    return rc;
}
