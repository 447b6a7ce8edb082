/* llamacpp_check — runs a GGUF through an existing llama.cpp build (libllama) for the demo model's
 * cross-implementation check (scripts/demo/llamacpp_check.py compiles this against a llama.cpp
 * build directory given on its command line; nothing here builds llama.cpp, and it is never part
 * of `make test`).
 *
 *   llamacpp_check MODEL.gguf < REQUESTS
 *
 * One request a line, token ids comma separated (fed as ids, so both engines see the same input
 * whatever their tokenizers do); the context is cleared before each:
 *   logits ID,...      -> the last position's logits, space separated (%.9g)
 *   greedy N ID,...    -> N greedy (argmax) token ids, comma separated
 *   nll ID,...         -> "SUM COUNT": summed negative log-likelihood (nats) of tokens 2..n
 *   decode ID,...      -> like logits, the prompt fed one token per llama_decode
 *   greedyp N ID,...   -> like greedy, each step one fresh prefill of the whole sequence
 * One thread, F16 KV cache (llama.cpp's default, like lmserve's).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *ud)
{
    (void)ud;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static int parse_ids(char *s, llama_token *out, int cap)
{
    int n = 0;
    for (char *t = strtok(s, ",\n"); t; t = strtok(NULL, ",\n")) {
        if (n == cap) return -1;
        out[n++] = (llama_token)atoi(t);
    }
    return n;
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* decodes tok[0..n) at positions p0.. ; logits for every position when all, else the last */
static int decode(struct llama_context *ctx, struct llama_batch *b, const llama_token *tok, int n, int p0, int all)
{
    b->n_tokens = n;
    for (int i = 0; i < n; i++) {
        b->token[i] = tok[i];
        b->pos[i] = p0 + i;
        b->n_seq_id[i] = 1;
        b->seq_id[i][0] = 0;
        b->logits[i] = all || i == n - 1;
    }
    return llama_decode(ctx, *b);
}

int main(int argc, char **argv)
{
    enum { CAP = 4096 };
    if (argc != 2) {
        fprintf(stderr, "usage: llamacpp_check MODEL.gguf < REQUESTS\n");
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "llamacpp_check: llama.cpp could not load %s\n", argv[1]);
        return 1;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = CAP;
    cp.n_batch = CAP;
    cp.n_ubatch = CAP;
    cp.n_threads = 1;
    cp.n_threads_batch = 1;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "llamacpp_check: no context\n");
        return 1;
    }
    const int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
    struct llama_batch b = llama_batch_init(CAP, 0, 1);
    static llama_token tok[CAP];
    static char line[1 << 16];
    while (fgets(line, sizeof line, stdin)) {
        char *rest = strchr(line, ' ');
        if (!rest) continue;
        *rest++ = '\0';
        int greedy = 0, fresh = !strcmp(line, "greedyp");
        if (!strcmp(line, "greedy") || fresh) {
            greedy = atoi(rest);
            rest = strchr(rest, ' ');
            if (!rest || greedy <= 0) return fprintf(stderr, "llamacpp_check: bad greedy request\n"), 2;
            rest++;
        }
        int n = parse_ids(rest, tok, CAP);
        if (n <= 0 || n + greedy > CAP) return fprintf(stderr, "llamacpp_check: bad token list\n"), 2;
        llama_memory_clear(llama_get_memory(ctx), true);
        int all = !strcmp(line, "nll"), one = !strcmp(line, "decode");
        for (int i = 0; i < (one ? n : 1); i++)
            if (one ? decode(ctx, &b, tok + i, 1, i, 0) : decode(ctx, &b, tok, n, 0, all))
                return fprintf(stderr, "llamacpp_check: decode failed\n"), 1;
        if (!strcmp(line, "logits") || one) {
            const float *l = llama_get_logits_ith(ctx, -1);
            for (int j = 0; j < nv; j++) printf("%s%.9g", j ? " " : "", (double)l[j]);
            printf("\n");
        } else if (all) {
            double sum = 0;
            for (int i = 0; i + 1 < n; i++) {
                const float *l = llama_get_logits_ith(ctx, i);
                double mx = l[argmax(l, nv)], z = 0;
                for (int j = 0; j < nv; j++) z += exp((double)l[j] - mx);
                sum += mx + log(z) - (double)l[tok[i + 1]];
            }
            printf("%.9g %d\n", sum, n - 1);
        } else if (greedy) {
            for (int g = 0; g < greedy; g++) {
                llama_token t = argmax(llama_get_logits_ith(ctx, -1), nv);
                printf("%s%d", g ? "," : "", t);
                if (g + 1 == greedy) break;
                if (fresh) { /* the sequence so far, prefilled from scratch */
                    tok[n + g] = t;
                    llama_memory_clear(llama_get_memory(ctx), true);
                    if (decode(ctx, &b, tok, n + g + 1, 0, 0)) return fprintf(stderr, "llamacpp_check: decode failed\n"), 1;
                } else if (decode(ctx, &b, &t, 1, n + g, 0)) {
                    return fprintf(stderr, "llamacpp_check: decode failed\n"), 1;
                }
            }
            printf("\n");
        } else {
            return fprintf(stderr, "llamacpp_check: unknown request '%s'\n", line), 2;
        }
        fflush(stdout);
    }
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
