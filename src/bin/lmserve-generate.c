/* lmserve-generate — generate text from a GGUF model on the command line, streaming to stdout.
 *
 *   lmserve-generate MODEL -p PROMPT [--chat] [--system TEXT] [--think] [-n N]
 *                    [--temp T] [--top-k K] [--top-p P] [--min-p M] [--seed S]
 *                    [--repeat-penalty R] [--repeat-last-n N] [--presence-penalty X]
 *                    [--frequency-penalty X] [--threads N] [--ctx N] [--special]
 *                    [--ignore-eos] [--ids] [--stats]
 *
 * Without --chat the prompt is tokenized as plain text (control tokens only with --special).
 * With --chat it is one user message (after an optional system message) rendered by the model
 * family's chat template with the generation prompt (thinking off unless --think).
 * Default sampling is greedy (--temp 0); generation stops at an end-of-generation token (unless
 * --ignore-eos) or after N tokens. --ids prints the generated token ids (comma separated)
 * instead of text; --stats prints token counts and speeds to stderr. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/log.h"
#include "engine/text/chat.h"
#include "engine/format/gguf.h"
#include "engine/model.h"
#include "engine/sample/sampler.h"
#include "engine/text/vocab.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: lmserve-generate MODEL -p PROMPT [options]\n"
            "  -p, --prompt TEXT         prompt text (-f FILE reads it from a file)\n"
            "  --chat                    render PROMPT as a user message with the chat template\n"
            "  --system TEXT             system message (with --chat)\n"
            "  --think                   with --chat: let the model think (default: thinking off)\n"
            "  -n, --n-predict N         tokens to generate (default 128)\n"
            "  --temp T                  temperature, 0 = greedy (default 0)\n"
            "  --top-k K                 (default 0 = off)\n"
            "  --top-p P                 (default 1 = off)\n"
            "  --min-p M                 (default 0 = off)\n"
            "  --seed S                  sampling seed (default 0)\n"
            "  --repeat-penalty R        (default 1 = off)\n"
            "  --repeat-last-n N         penalty window (default 64, -1 = all)\n"
            "  --presence-penalty X      (default 0)\n"
            "  --frequency-penalty X     (default 0)\n"
            "  --threads N               (default: physical cores)\n"
            "  --ctx N                   context size (default: prompt + N)\n"
            "  --special                 parse control tokens in a plain prompt\n"
            "  --ignore-eos              do not stop at end-of-generation tokens\n"
            "  --ids                     print generated token ids instead of text\n"
            "  --stats                   print counts and speeds to stderr\n");
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_float(const char *s, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') return -1;
    *out = v;
    return 0;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    struct buf b = {0};
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
        if (buf_append(&b, tmp, n)) break;
    int bad = ferror(f) || buf_reserve(&b, 1);
    fclose(f);
    if (bad) {
        buf_free(&b);
        return NULL;
    }
    b.data[b.len] = 0;
    return buf_steal(&b);
}

int main(int argc, char **argv)
{
    const char *path = NULL, *prompt = NULL, *system = NULL, *prompt_file = NULL;
    int chat = 0, think = 0, special = 0, ignore_eos = 0, ids_only = 0, stats = 0;
    long n_predict = 128, threads = 0, ctx = 0;
    struct sampler_params sp;
    sampler_params_init(&sp);
    sp.temperature = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long lv;
        int has = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--chat"))
            chat = 1;
        else if (!strcmp(a, "--think"))
            think = 1;
        else if (!strcmp(a, "--special"))
            special = 1;
        else if (!strcmp(a, "--ignore-eos"))
            ignore_eos = 1;
        else if (!strcmp(a, "--ids"))
            ids_only = 1;
        else if (!strcmp(a, "--stats"))
            stats = 1;
        else if (has && (!strcmp(a, "-p") || !strcmp(a, "--prompt")))
            prompt = argv[++i];
        else if (has && !strcmp(a, "-f"))
            prompt_file = argv[++i];
        else if (has && !strcmp(a, "--system"))
            system = argv[++i];
        else if (has && (!strcmp(a, "-n") || !strcmp(a, "--n-predict"))) {
            if (parse_long(argv[++i], 0, 1 << 24, &n_predict)) goto bad;
        } else if (has && !strcmp(a, "--temp")) {
            if (parse_float(argv[++i], &sp.temperature)) goto bad;
        } else if (has && !strcmp(a, "--top-k")) {
            if (parse_long(argv[++i], 0, 1 << 30, &lv)) goto bad;
            sp.top_k = (int)lv;
        } else if (has && !strcmp(a, "--top-p")) {
            if (parse_float(argv[++i], &sp.top_p)) goto bad;
        } else if (has && !strcmp(a, "--min-p")) {
            if (parse_float(argv[++i], &sp.min_p)) goto bad;
        } else if (has && !strcmp(a, "--seed")) {
            if (parse_u64(argv[++i], &sp.seed)) goto bad;
        } else if (has && !strcmp(a, "--repeat-penalty")) {
            if (parse_float(argv[++i], &sp.repeat_penalty)) goto bad;
        } else if (has && !strcmp(a, "--repeat-last-n")) {
            if (parse_long(argv[++i], -1, 1 << 24, &lv)) goto bad;
            sp.repeat_last_n = (int)lv;
        } else if (has && !strcmp(a, "--presence-penalty")) {
            if (parse_float(argv[++i], &sp.presence_penalty)) goto bad;
        } else if (has && !strcmp(a, "--frequency-penalty")) {
            if (parse_float(argv[++i], &sp.frequency_penalty)) goto bad;
        } else if (has && (!strcmp(a, "--threads") || !strcmp(a, "-t"))) {
            if (parse_long(argv[++i], 1, 1024, &threads)) goto bad;
        } else if (has && !strcmp(a, "--ctx")) {
            if (parse_long(argv[++i], 1, 1 << 24, &ctx)) goto bad;
        } else if (a[0] != '-' && !path) {
            path = a;
        } else {
            fprintf(stderr, "lmserve-generate: unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
        continue;
    bad:
        fprintf(stderr, "lmserve-generate: bad value '%s' for %s\n", argv[i], a);
        return 2;
    }
    if (!path || (!prompt && !prompt_file) || (prompt && prompt_file)) {
        usage(stderr);
        return 2;
    }
    if (system && !chat) {
        fprintf(stderr, "lmserve-generate: --system needs --chat\n");
        return 2;
    }
    char *prompt_buf = NULL;
    if (prompt_file && !(prompt = prompt_buf = read_file(prompt_file))) {
        fprintf(stderr, "lmserve-generate: cannot read %s: %s\n", prompt_file, strerror(errno));
        return 1;
    }

    log_set_level(LOG_WARN);
    struct err e = {0};
    int rc = 1;
    struct model *m = NULL;
    struct vocab *v = NULL;
    struct sampler *smp = NULL;
    struct kv_cache *kv = NULL;
    struct chat_prompt cp = {0};
    int32_t *toks = NULL, *pos = NULL;
    struct kv_cache **seq = NULL;
    float *logits = NULL;
    char *out = NULL;
    size_t n_tok = 0, cap_tok = 0;

    struct model_opts mo = {.n_threads = (int)threads};
    double t_load = now();
    if (!(m = model_load(path, &mo, &e))) goto fail;
    const struct model_config *cfg = model_config(m);
    if (!(v = vocab_load(model_gguf(m), &e))) goto fail;
    t_load = now() - t_load;
    if (vocab_size(v) > cfg->n_vocab) {
        err_set(&e, ERR_FORMAT, "vocabulary has %d tokens but the model only %d logits",
                vocab_size(v), cfg->n_vocab);
        goto fail;
    }

    /* prompt -> tokens */
    if (tok_add_bos(v) && tok_bos(v) >= 0) {
        int32_t bos = tok_bos(v);
        if (!(toks = malloc(sizeof *toks * 16))) goto nomem;
        cap_tok = 16;
        toks[n_tok++] = bos;
    }
    if (chat) {
        struct err te = {0};
        char *tmpl = gguf_get_str(model_gguf(m), "tokenizer.chat_template", &te);
        if (!chat_template_known(cfg->arch, tmpl))
            fprintf(stderr,
                    "lmserve-generate: warning: %s; rendering with the built-in %s template\n",
                    tmpl ? "the model's chat template is not one the renderer was proven against"
                         : "the model has no chat template",
                    cfg->arch);
        free(tmpl);
        struct chat_msg msgs[2] = {0};
        int n = 0;
        if (system) msgs[n++] = (struct chat_msg){.role = CHAT_SYSTEM, .content = (char *)system};
        msgs[n++] = (struct chat_msg){.role = CHAT_USER, .content = (char *)prompt};
        struct chat_prompt_opts co = {.add_generation_prompt = true, .enable_thinking = think};
        if (chat_render(cfg->arch, msgs, n, &co, &cp, &e)) goto fail;
        if (tok_encode(v, cp.text.data, cp.text.len, cp.spans, cp.n_spans, false, &toks, &n_tok,
                       &cap_tok, &e))
            goto fail;
    } else if (tok_encode(v, prompt, strlen(prompt), NULL, 0, special, &toks, &n_tok, &cap_tok,
                          &e)) {
        goto fail;
    }
    if (n_tok == 0) {
        err_set(&e, ERR_INVALID, "the prompt is empty (no tokens)");
        goto fail;
    }
    int n_ctx = ctx ? (int)ctx : (int)(n_tok + (size_t)n_predict);
    if ((long)n_tok + n_predict > n_ctx) {
        err_set(&e, ERR_CONTEXT, "prompt (%zu tokens) + %ld to generate exceed the context (%d)",
                n_tok, n_predict, n_ctx);
        goto fail;
    }

    if (!(smp = sampler_new(&sp, cfg->n_vocab, &e))) goto fail;
    if (!(kv = kv_new(m, n_ctx, &e))) goto fail;
    logits = malloc(sizeof *logits * (size_t)cfg->n_vocab);
    pos = malloc(sizeof *pos * n_tok);
    seq = malloc(sizeof *seq * n_tok);
    out = malloc(TOK_STREAM_OUT_MAX(tok_max_len(v)) + 8);
    if (!logits || !pos || !seq || !out) goto nomem;
    for (size_t i = 0; i < n_tok; i++) {
        pos[i] = (int32_t)i;
        seq[i] = kv;
    }
    /* Penalties see the prompt too (llama.cpp feeds the prompt to the sampler as well). */
    for (size_t i = 0; i < n_tok; i++)
        sampler_accept(smp, toks[i]);

    double t0 = now();
    struct batch b = {.token = toks, .pos = pos, .seq = seq, .n = (int64_t)n_tok};
    if (model_forward(m, &b, logits, &e)) goto fail;
    double t_prefill = now() - t0, t_sample = 0;
    t0 = now();
    struct tok_stream ts = {0};
    long n_gen = 0;
    const char *stop = "length";
    while (n_gen < n_predict) {
        struct sampler_choice ch;
        double ts0 = now();
        if (sampler_sample(smp, logits, NULL, &ch)) {
            err_set(&e, ERR_INTERNAL, "no token can be sampled (all logits -inf or NaN)");
            goto fail;
        }
        t_sample += now() - ts0;
        int32_t t = ch.token;
        if (!ignore_eos && tok_is_eog(v, t)) {
            stop = "eog";
            break;
        }
        sampler_accept(smp, t);
        if (ids_only) {
            printf("%s%d", n_gen ? "," : "", t);
        } else {
            size_t k = tok_stream_feed(&ts, v, t, out);
            fwrite(out, 1, k, stdout);
        }
        fflush(stdout);
        if (++n_gen == n_predict) break;
        int32_t p = (int32_t)(n_tok + (size_t)n_gen - 1);
        struct batch d = {.token = &t, .pos = &p, .seq = &kv, .n = 1};
        if (model_forward(m, &d, logits, &e)) goto fail;
    }
    double t_decode = now() - t0;
    if (ids_only) {
        fputc('\n', stdout);
    } else {
        size_t k = tok_stream_flush(&ts, out);
        fwrite(out, 1, k, stdout);
    }
    fflush(stdout);
    if (stats)
        fprintf(stderr,
                "\n[lmserve-generate] load %.2f s | prompt %zu tokens, %.1f tok/s | generated %ld "
                "tokens "
                "(stop: %s), %.2f tok/s | sampler %.3f ms/token\n",
                t_load, n_tok, (double)n_tok / t_prefill, n_gen, stop,
                n_gen ? (double)n_gen / t_decode : 0.0,
                n_gen ? t_sample * 1e3 / (double)n_gen : 0.0);
    rc = 0;
    goto out;
nomem:
    err_set(&e, ERR_NOMEM, "out of memory");
fail:
    fflush(stdout);
    fprintf(stderr, "lmserve-generate: %s\n", e.msg);
out:
    free(out);
    free(logits);
    free(pos);
    free(seq);
    free(toks);
    chat_prompt_free(&cp);
    kv_free(kv);
    sampler_free(smp);
    vocab_free(v);
    model_free(m);
    free(prompt_buf);
    return rc;
}
