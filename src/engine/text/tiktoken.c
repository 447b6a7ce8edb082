/* tiktoken — the nanochat tokenizer file (docs/nanochat.md, "The tokenizer file"): tiktoken's
 * mergeable ranks, nanochat's split pattern and its special tokens, into the same struct vocab the
 * GGUF loader builds, so tok_encode / tok_decode / tok_stream_* serve it unchanged.
 *
 * tiktoken has no merge list: a piece is merged by repeatedly joining the adjacent pair whose
 * concatenation has the lowest rank (the leftmost of equal ones), after a piece that is itself a
 * token is taken whole. That is bpe.c's heap over (rank, position) when the merge table holds
 * every pair (a, b) of tokens whose concatenation is a token, ranked by the rank of the
 * concatenation (all splits of one token share its rank, so ties fall to position as in
 * tiktoken), and ignore_merges is on. The table is derived here from the ranks. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/vocab_impl.h"

#define TIKTOKEN_FORMAT "lmserve-nanochat-tokenizer"
#define TIKTOKEN_MAX_TOKENS (1 << 24)
#define TIKTOKEN_MAX_TOKEN_BYTES 4096

/* nanochat's SPLIT_PATTERN as nanochat/tokenizer.py writes it (the only one served: bpe.c holds
 * its PCRE2 form with tiktoken's Unicode semantics). */
static const char NANOCHAT_PATTERN[] =
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}{1,2}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|"
    "\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";

const char *const VOCAB_NANOCHAT_SPECIALS[VOCAB_NANOCHAT_N_SPECIALS] = {
    "<|bos|>",          "<|user_start|>",   "<|user_end|>",     "<|assistant_start|>",
    "<|assistant_end|>", "<|python_start|>", "<|python_end|>",   "<|output_start|>",
    "<|output_end|>",
};

/* Standard base64 (RFC 4648, '=' padding required to a multiple of 4) of s[0..n) into out (room
 * for n / 4 * 3). Returns the byte count, or -1 when s is not such base64. */
static long b64_decode(const char *s, size_t n, unsigned char *out)
{
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (n == 0 || n % 4) return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t w = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            char c = s[i + k];
            const char *p = c ? strchr(A, c) : NULL;
            if (c == '=' && i + 4 == n && k >= 2 && (k == 3 || s[i + 3] == '=')) {
                pad++;
                w <<= 6;
                continue;
            }
            if (!p || pad) return -1;
            w = w << 6 | (uint32_t)(p - A);
        }
        out[o++] = (unsigned char)(w >> 16);
        if (pad < 2) out[o++] = (unsigned char)(w >> 8);
        if (pad < 1) out[o++] = (unsigned char)w;
    }
    return (long)o;
}

static int fail(struct err *e, enum err_code code, const char *path, const char *what)
{
    return err_set(e, code, "%s: %s", path, what);
}

struct vocab *vocab_load_tiktoken(const char *path, struct err *e)
{
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    struct vocab *v = NULL;
    if (!root) {
        if (je.line < 0 || je.position == 0)
            err_set(e, ERR_IO, "%s: cannot read the tokenizer file: %s", path, je.text);
        else
            err_set(e, ERR_FORMAT, "%s: not JSON (line %d, column %d): %s", path, je.line,
                    je.column, je.text);
        return NULL;
    }
    const char *fmt = json_string_value(json_object_get(root, "format"));
    json_t *ver = json_object_get(root, "format_version");
    const char *pat = json_string_value(json_object_get(root, "pattern"));
    json_t *ranks = json_object_get(root, "mergeable_ranks");
    json_t *specials = json_object_get(root, "special_tokens");
    if (!json_is_object(root) || !fmt || strcmp(fmt, TIKTOKEN_FORMAT)) {
        fail(e, ERR_FORMAT, path, "field \"format\" is not \"" TIKTOKEN_FORMAT "\"");
        goto out;
    }
    if (!json_is_integer(ver) || json_integer_value(ver) != 1) {
        fail(e, ERR_UNSUPPORTED, path, "field \"format_version\" is not 1 (the only version there is)");
        goto out;
    }
    if (!pat) {
        fail(e, ERR_FORMAT, path, "field \"pattern\" is missing or not a string");
        goto out;
    }
    if (strcmp(pat, NANOCHAT_PATTERN)) {
        fail(e, ERR_UNSUPPORTED, path,
             "field \"pattern\" is not nanochat's split pattern (the only one supported)");
        goto out;
    }
    size_t n_ranks = json_array_size(ranks);
    if (!json_is_array(ranks) || n_ranks < 256 || n_ranks >= TIKTOKEN_MAX_TOKENS) {
        err_set(e, ERR_FORMAT,
                "%s: field \"mergeable_ranks\" must be an array of 256..%d base64 strings",
                path, TIKTOKEN_MAX_TOKENS - 1);
        goto out;
    }
    if (!json_is_object(specials)) {
        fail(e, ERR_FORMAT, path, "field \"special_tokens\" is missing or not an object");
        goto out;
    }
    /* The vocabulary: ranks, then the special ids (gaps, if any, are unused ids). */
    int64_t n = (int64_t)n_ranks;
    const char *key;
    json_t *val;
    size_t sp_bytes = 0;
    json_object_foreach(specials, key, val) {
        json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
        if (id < (json_int_t)n_ranks || id >= TIKTOKEN_MAX_TOKENS) {
            err_set(e, ERR_FORMAT, "%s: special_tokens[\"%.64s\"] must be an id after the %zu "
                    "ranks (below %d)", path, key, n_ranks, TIKTOKEN_MAX_TOKENS);
            goto out;
        }
        size_t kl = strlen(key);
        if (kl == 0 || kl > TIKTOKEN_MAX_TOKEN_BYTES) { /* jansson checked the UTF-8 */
            err_set(e, ERR_FORMAT, "%s: special token \"%.64s\" is empty or too long", path, key);
            goto out;
        }
        if (id + 1 > n) n = id + 1;
        sp_bytes += kl;
    }
    size_t tok_bytes_max = 0;
    for (size_t i = 0; i < n_ranks; i++) {
        const char *h = json_string_value(json_array_get(ranks, i));
        size_t hl = h ? json_string_length(json_array_get(ranks, i)) : 0;
        if (!h || hl == 0 || hl / 4 * 3 > TIKTOKEN_MAX_TOKEN_BYTES + 2) {
            err_set(e, ERR_FORMAT, "%s: mergeable_ranks[%zu] is not a base64 string of 1..%d "
                    "bytes", path, i, TIKTOKEN_MAX_TOKEN_BYTES);
            goto out;
        }
        tok_bytes_max += hl / 4 * 3;
    }
    if (!(v = calloc(1, sizeof *v))) goto nomem;
    v->n = (int32_t)n;
    v->bos = v->eos = v->eot = v->pad = -1;
    v->type = malloc((size_t)n);
    v->off = malloc(((size_t)n + 1) * sizeof *v->off);
    v->bytes = malloc(tok_bytes_max + sp_bytes + 1);
    if (!v->type || !v->off || !v->bytes) goto nomem;
    memset(v->type, TOK_UNUSED, (size_t)n);
    /* Token bytes: ranks in order, then each special id's text (unused ids: empty). */
    size_t o = 0;
    for (size_t i = 0; i < n_ranks; i++) {
        json_t *s = json_array_get(ranks, i);
        const char *h = json_string_value(s);
        size_t hl = json_string_length(s);
        v->off[i] = (uint32_t)o;
        v->type[i] = TOK_NORMAL;
        long bl = b64_decode(h, hl, (unsigned char *)v->bytes + o);
        if (bl <= 0 || bl > TIKTOKEN_MAX_TOKEN_BYTES) {
            err_set(e, ERR_FORMAT, "%s: mergeable_ranks[%zu] \"%.32s\" is not base64 of 1..%d "
                    "bytes", path, i, h, TIKTOKEN_MAX_TOKEN_BYTES);
            goto fail;
        }
        o += (size_t)bl;
        if (o - v->off[i] > v->max_len) v->max_len = o - v->off[i];
    }
    for (int64_t id = (int64_t)n_ranks; id < n; id++) {
        v->off[id] = (uint32_t)o;
        json_object_foreach(specials, key, val) {
            if (json_integer_value(val) != id) continue;
            if (v->type[id] == TOK_CONTROL) {
                err_set(e, ERR_FORMAT, "%s: special_tokens: two tokens have id %lld", path,
                        (long long)id);
                goto fail;
            }
            size_t kl = strlen(key);
            memcpy(v->bytes + o, key, kl);
            o += kl;
            v->type[id] = TOK_CONTROL;
            if (kl > v->max_len) v->max_len = kl;
        }
    }
    v->off[n] = (uint32_t)o;
    if (vocab_index_tokens(v, e)) goto fail;
    for (int32_t i = 0; i < (int32_t)n_ranks; i++) { /* a rank's bytes twice: tiktoken refuses */
        size_t len;
        const char *p = tok_bytes(v, i, &len);
        if (vocab_tmap_find(v, p, len) != i) {
            err_set(e, ERR_FORMAT, "%s: mergeable_ranks[%d] repeats the bytes of mergeable_ranks[%d]", path, i,
                    vocab_tmap_find(v, p, len));
            goto fail;
        }
    }
    /* The merge table: every split of every token into two tokens, at the token's rank. */
    size_t n_merges = 0, cap = 0;
    int32_t(*mg)[3] = NULL;
    for (int32_t i = 0; i < (int32_t)n_ranks; i++) {
        size_t len;
        const char *p = tok_bytes(v, i, &len);
        for (size_t k = 1; k < len; k++) {
            int32_t a = vocab_tmap_find(v, p, k), b = vocab_tmap_find(v, p + k, len - k);
            if (a < 0 || b < 0) continue;
            if (n_merges == cap) {
                size_t nc = cap ? 2 * cap : 4096;
                int32_t(*t)[3] = realloc(mg, nc * sizeof *mg);
                if (!t) {
                    free(mg);
                    goto nomem;
                }
                mg = t;
                cap = nc;
            }
            mg[n_merges][0] = a, mg[n_merges][1] = b, mg[n_merges][2] = i;
            n_merges++;
        }
    }
    v->mmask = 15;
    while (v->mmask + 1 < n_merges * 3 + 1) v->mmask = v->mmask * 2 + 1;
    v->mkey = malloc(((size_t)v->mmask + 1) * sizeof *v->mkey);
    v->mval = malloc(((size_t)v->mmask + 1) * sizeof *v->mval);
    if (!v->mkey || !v->mval) {
        free(mg);
        goto nomem;
    }
    memset(v->mkey, 0xff, ((size_t)v->mmask + 1) * sizeof *v->mkey);
    for (size_t k = 0; k < n_merges; k++) vocab_merge_insert(v, mg[k][0], mg[k][1], mg[k][2], mg[k][2]);
    free(mg);
    /* nanochat's specials: all nine, control tokens; <|bos|> starts a document and, generated,
     * ends one (eos); <|assistant_end|> ends a turn. */
    for (int k = 0; k < VOCAB_NANOCHAT_N_SPECIALS; k++) {
        json_t *id = json_object_get(specials, VOCAB_NANOCHAT_SPECIALS[k]);
        if (!id) {
            err_set(e, ERR_FORMAT, "%s: special_tokens lacks nanochat's \"%s\"", path,
                    VOCAB_NANOCHAT_SPECIALS[k]);
            goto fail;
        }
    }
    v->bos = v->eos = (int32_t)json_integer_value(json_object_get(specials, "<|bos|>"));
    v->eot = (int32_t)json_integer_value(json_object_get(specials, "<|assistant_end|>"));
    v->add_bos = true;
    if (vocab_index_added(v, e)) goto fail;
    if (vocab_pre_init(v, "nanochat", e)) goto fail;
    json_decref(root);
    return v;
nomem:
    err_set(e, ERR_NOMEM, "%s: out of memory loading the tokenizer", path);
fail:
    vocab_free(v);
    v = NULL;
out:
    json_decref(root);
    return v;
}
