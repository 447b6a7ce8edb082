/* hf_tokenizer — tokenizer.json + tokenizer_config.json -> llama.cpp's GGUF tokenizer keys.
 *
 * Choices (documented in docs/tokenizer.md):
 *  - token types follow llama.cpp's convert_hf_to_gguf: an added token is CONTROL when HF marks it
 *    special or when it looks special (<|...|>), otherwise USER_DEFINED; vocab ids are NORMAL; ids
 *    with no token (gaps and padding up to n_vocab_pad) are "[PAD<id>]" UNUSED.
 *  - eos = tokenizer_config's eos_token (Qwen3: <|im_end|>, what HF generation stops on);
 *    eot = <|im_end|> when present, else eos; pad = pad_token; bos = bos_token (Qwen3: none, so
 *    the key is not written and add_bos is false). vocab's end-of-generation test also covers
 *    <|endoftext|>, which llama.cpp's converter writes as eos.
 *  - tokenizer.ggml.pre is derived from the pre_tokenizer's split regex: the Qwen2 pattern gives
 *    "qwen2", Qwen3.5's (marks inside words) "qwen35", Llama 3's "llama-bpe", a plain ByteLevel with use_regex gives "gpt2"; anything else
 *    is refused (a tokenizer we would silently get wrong). */
#include "engine/text/hf_tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/vocab.h"

#define HF_PAT_QWEN2                                                                               \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "                          \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define HF_PAT_QWEN35                                                                              \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "                  \
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define HF_PAT_GPT2                                                                                \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define HF_PAT_LLAMA3                                                                              \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "                     \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static json_t *load_json(const char *dir, const char *name, struct err *e)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        err_set(e, ERR_INVALID, "tokenizer directory path too long");
        return NULL;
    }
    json_error_t je;
    json_t *j = json_load_file(path, JSON_DECODE_ANY, &je);
    if (!j) {
        if (je.line < 1) err_set(e, ERR_IO, "%s", je.text); /* could not open/read */
        else err_set(e, ERR_FORMAT, "%s: line %d: %s", path, je.line, je.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        err_set(e, ERR_FORMAT, "%s: top level is not an object", path);
        return NULL;
    }
    return j;
}

/* A special-token entry in tokenizer_config is either a string or {"content": "..."}. */
static const char *special_text(json_t *cfg, const char *key)
{
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool looks_special(const char *s)
{
    size_t n = strlen(s);
    return n >= 4 && s[0] == '<' && s[1] == '|' && s[n - 2] == '|' && s[n - 1] == '>';
}

static int32_t find_token(const struct hf_tokenizer *t, const char *s)
{
    if (!s) return -1;
    for (int64_t i = t->n_tokens - 1; i >= 0; i--) /* added tokens sit at the end: search there first */
        if (t->tokens[i] && strcmp(t->tokens[i], s) == 0) return (int32_t)i;
    return -1;
}

/* Returns the pre-tokenizer name for the pre_tokenizer object, or NULL. */
static const char *detect_pre(json_t *pre)
{
    const char *type = json_string_value(json_object_get(pre, "type"));
    if (!type) return NULL;
    if (strcmp(type, "ByteLevel") == 0) {
        json_t *ur = json_object_get(pre, "use_regex");
        return (!ur || json_is_true(ur)) ? "gpt2" : NULL;
    }
    if (strcmp(type, "Sequence") != 0) return NULL;
    json_t *list = json_object_get(pre, "pretokenizers");
    const char *regex = NULL;
    bool bytelevel = false;
    size_t i;
    json_t *p;
    json_array_foreach(list, i, p) {
        const char *pt = json_string_value(json_object_get(p, "type"));
        if (!pt) return NULL;
        if (strcmp(pt, "Split") == 0) {
            if (regex) return NULL;
            regex = json_string_value(json_object_get(json_object_get(p, "pattern"), "Regex"));
            const char *beh = json_string_value(json_object_get(p, "behavior"));
            if (!regex || !beh || strcmp(beh, "Isolated") != 0 ||
                json_is_true(json_object_get(p, "invert")))
                return NULL;
        } else if (strcmp(pt, "ByteLevel") == 0) {
            if (json_is_true(json_object_get(p, "use_regex")) ||
                json_is_true(json_object_get(p, "add_prefix_space")))
                return NULL;
            bytelevel = true;
        } else {
            return NULL;
        }
    }
    if (!regex || !bytelevel) return NULL;
    if (strcmp(regex, HF_PAT_QWEN2) == 0) return "qwen2";
    if (strcmp(regex, HF_PAT_QWEN35) == 0) return "qwen35";
    if (strcmp(regex, HF_PAT_LLAMA3) == 0) return "llama-bpe";
    if (strcmp(regex, HF_PAT_GPT2) == 0) return "gpt2";
    return NULL;
}

static bool json_str_is(json_t *o, const char *key, const char *want)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s && strcmp(s, want) == 0;
}

static bool is_byte_token(const char *s)
{
    static const char hex[] = "0123456789ABCDEFabcdef";
    return strlen(s) == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && strchr(hex, s[3]) &&
           strchr(hex, s[4]);
}

#define SPM_SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's space */

/* NULL when tj is Gemma's tokenizer: BPE with byte_fallback and fuse_unk, no subword affixes
 * or dropout, merges not ignored; normalizer Replace ' ' -> ▁; pre-tokenizer none or Split on
 * ' ' (a no-op once the normalizer has replaced every space); decoder Replace ▁ -> ' ',
 * ByteFallback, Fuse. Else what differs. */
static const char *gemma_shape(json_t *tj)
{
    json_t *m = json_object_get(tj, "model");
    if (!json_is_true(json_object_get(m, "fuse_unk")) ||
        json_is_true(json_object_get(m, "ignore_merges")))
        return "fuse_unk is off or ignore_merges on";
    const char *aff[] = {"continuing_subword_prefix", "end_of_word_suffix", "dropout"};
    for (int i = 0; i < 3; i++) {
        json_t *x = json_object_get(m, aff[i]);
        if (x && !json_is_null(x)) return "it sets a subword prefix/suffix or dropout";
    }
    json_t *n = json_object_get(tj, "normalizer");
    if (!json_str_is(n, "type", "Replace") ||
        !json_str_is(json_object_get(n, "pattern"), "String", " ") ||
        !json_str_is(n, "content", SPM_SPACE))
        return "the normalizer is not Replace ' ' -> U+2581";
    json_t *p = json_object_get(tj, "pre_tokenizer");
    if (p && !json_is_null(p) &&
        !(json_str_is(p, "type", "Split") &&
          json_str_is(json_object_get(p, "pattern"), "String", " ") &&
          !json_is_true(json_object_get(p, "invert"))))
        return "the pre-tokenizer is neither none nor Split on ' '";
    json_t *d = json_object_get(tj, "decoder");
    json_t *ds = json_object_get(d, "decoders");
    if (!json_str_is(d, "type", "Sequence") || json_array_size(ds) != 3 ||
        !json_str_is(json_array_get(ds, 0), "type", "Replace") ||
        !json_str_is(json_object_get(json_array_get(ds, 0), "pattern"), "String", SPM_SPACE) ||
        !json_str_is(json_array_get(ds, 0), "content", " ") ||
        !json_str_is(json_array_get(ds, 1), "type", "ByteFallback") ||
        !json_str_is(json_array_get(ds, 2), "type", "Fuse"))
        return "the decoder is not Replace U+2581 -> ' ', ByteFallback, Fuse";
    return NULL;
}

/* Newer Hugging Face repos (transformers 5, e.g. Qwen3.5's) keep the template beside the config
 * as chat_template.jinja instead of inside it. *out stays NULL when there is no such file. */
static int read_template_file(const char *dir, char **out, struct err *e)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/chat_template.jinja", dir) >= (int)sizeof path)
        return err_set(e, ERR_INVALID, "tokenizer directory path too long");
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    struct buf b = {0};
    char chunk[4096];
    size_t n;
    int rc = 0;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (buf_append(&b, chunk, n)) {
            rc = err_set(e, ERR_NOMEM, "out of memory reading %s", path);
            break;
        }
    if (!rc && ferror(f)) rc = err_set(e, ERR_IO, "%s: read error", path);
    for (size_t i = 0; !rc && i < b.len;) {
        int k = b.data[i] ? tok_utf8_seq((const unsigned char *)b.data + i, b.len - i) : -1;
        if (k <= 0) rc = err_set(e, ERR_FORMAT, "%s: not UTF-8 text (byte %zu)", path, i);
        i += k > 0 ? (size_t)k : 0;
    }
    fclose(f);
    if (!rc && buf_reserve(&b, 1)) rc = err_set(e, ERR_NOMEM, "out of memory reading %s", path);
    if (rc) {
        buf_free(&b);
        return rc;
    }
    b.data[b.len] = 0;
    *out = buf_steal(&b);
    return 0;
}

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

int hf_tokenizer_load(const char *dir, int64_t n_vocab_pad, struct hf_tokenizer *out,
                      struct err *e)
{
    memset(out, 0, sizeof *out);
    out->bos = out->eos = out->eot = out->pad = out->unk = -1;
    json_t *tj = NULL, *cj = NULL;
    int rc = -1;

    if (!(tj = load_json(dir, "tokenizer.json", e))) goto fail;
    if (!(cj = load_json(dir, "tokenizer_config.json", e))) goto fail;

    json_t *model = json_object_get(tj, "model");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    if (!mtype || strcmp(mtype, "BPE") != 0) {
        err_set(e, ERR_UNSUPPORTED, "tokenizer.json: model.type %s is not BPE", mtype ? mtype : "?");
        goto fail;
    }
    bool gemma = json_is_true(json_object_get(model, "byte_fallback"));
    if (gemma) {
        const char *why = gemma_shape(tj);
        if (why) {
            err_set(e, ERR_UNSUPPORTED, "tokenizer.json: a byte-fallback BPE, but %s (only "
                    "Gemma's SentencePiece-style shape is supported)", why);
            goto fail;
        }
        if (!(out->model = xstrdup("gemma4"))) goto nomem;
        goto tables;
    }
    if (!(out->model = xstrdup("gpt2"))) goto nomem;
    json_t *dec = json_object_get(tj, "decoder");
    const char *dtype = json_string_value(json_object_get(dec, "type"));
    if (!dtype || strcmp(dtype, "ByteLevel") != 0) {
        err_set(e, ERR_UNSUPPORTED, "tokenizer.json: decoder is not ByteLevel (not a byte-level BPE)");
        goto fail;
    }
    const char *pre = detect_pre(json_object_get(tj, "pre_tokenizer"));
    if (!pre) {
        err_set(e, ERR_UNSUPPORTED,
                "tokenizer.json: pre_tokenizer is not one we know (qwen2, qwen35, llama3 or gpt2 "
                "regex)");
        goto fail;
    }
    /* GGUF records no normalizer: the pre-tokenizer name implies it (qwen2 and qwen35 = NFC, the
     * others none), so a tokenizer that pairs them differently cannot be converted faithfully. */
    json_t *norm = json_object_get(tj, "normalizer");
    const char *nt = json_is_null(norm) || !norm ? "none" : json_string_value(json_object_get(norm, "type"));
    const char *want = strcmp(pre, "qwen2") == 0 || strcmp(pre, "qwen35") == 0 ? "NFC" : "none";
    if (!nt || strcmp(nt, want) != 0) {
        err_set(e, ERR_UNSUPPORTED, "tokenizer.json: normalizer %s with the %s pre-tokenizer "
                "(GGUF implies %s)", nt ? nt : "?", pre, want);
        goto fail;
    }
    if (!(out->pre = xstrdup(pre))) goto nomem;

tables:;
    json_t *vocab = json_object_get(model, "vocab");
    json_t *added = json_object_get(tj, "added_tokens");
    if (!json_is_object(vocab) || (added && !json_is_array(added))) {
        err_set(e, ERR_FORMAT, "tokenizer.json: model.vocab must be an object, added_tokens an array");
        goto fail;
    }
    /* The id space: max id over vocab and added tokens, then padding. */
    int64_t max_id = -1;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) >= (1 << 24)) {
            err_set(e, ERR_FORMAT, "tokenizer.json: vocab entry \"%s\" has a bad id", key);
            goto fail;
        }
        if (json_integer_value(val) > max_id) max_id = json_integer_value(val);
    }
    size_t ai;
    json_t *at;
    json_array_foreach(added, ai, at) {
        json_t *id = json_object_get(at, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= (1 << 24) ||
            !json_is_string(json_object_get(at, "content"))) {
            err_set(e, ERR_FORMAT, "tokenizer.json: added_tokens[%zu] lacks a valid id/content", ai);
            goto fail;
        }
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    int64_t n = max_id + 1;
    if (n_vocab_pad > n) n = n_vocab_pad;
    if (n <= 0) {
        err_set(e, ERR_FORMAT, "tokenizer.json: empty vocabulary");
        goto fail;
    }
    out->tokens = calloc((size_t)n, sizeof *out->tokens);
    out->types = calloc((size_t)n, sizeof *out->types);
    if (!out->tokens || !out->types) goto nomem;
    out->n_tokens = n;
    json_object_foreach(vocab, key, val) {
        int64_t id = json_integer_value(val);
        if (out->tokens[id]) {
            err_set(e, ERR_FORMAT, "tokenizer.json: id %lld used twice in vocab", (long long)id);
            goto fail;
        }
        if (!(out->tokens[id] = xstrdup(key))) goto nomem;
        out->types[id] = gemma && is_byte_token(key) ? TOK_BYTE : TOK_NORMAL;
    }
    json_array_foreach(added, ai, at) {
        int64_t id = json_integer_value(json_object_get(at, "id"));
        const char *content = json_string_value(json_object_get(at, "content"));
        if (out->tokens[id] && strcmp(out->tokens[id], content) != 0) {
            err_set(e, ERR_FORMAT, "tokenizer.json: added token %lld \"%s\" clashes with \"%s\"",
                    (long long)id, content, out->tokens[id]);
            goto fail;
        }
        if (!out->tokens[id] && !(out->tokens[id] = xstrdup(content))) goto nomem;
        bool special = json_is_true(json_object_get(at, "special"));
        out->types[id] = (special || looks_special(content)) ? TOK_CONTROL : TOK_USER_DEFINED;
    }
    for (int64_t i = 0; i < n; i++) {
        if (out->tokens[i]) continue;
        char tmp[32];
        snprintf(tmp, sizeof tmp, "[PAD%lld]", (long long)i);
        if (!(out->tokens[i] = xstrdup(tmp))) goto nomem;
        out->types[i] = TOK_UNUSED;
    }

    /* Merges: "a b" strings (older files) or ["a", "b"] pairs (tokenizers >= 0.20). */
    json_t *merges = json_object_get(model, "merges");
    if (!json_is_array(merges)) {
        err_set(e, ERR_FORMAT, "tokenizer.json: model.merges is not an array");
        goto fail;
    }
    out->merges = calloc(json_array_size(merges) + 1, sizeof *out->merges);
    if (!out->merges) goto nomem;
    json_t *m;
    size_t mi;
    json_array_foreach(merges, mi, m) {
        char *s = NULL;
        if (json_is_string(m)) {
            s = xstrdup(json_string_value(m));
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            const char *a = json_string_value(json_array_get(m, 0));
            const char *b = json_string_value(json_array_get(m, 1));
            if (strchr(a, ' ') || strchr(b, ' ')) {
                err_set(e, ERR_UNSUPPORTED, "tokenizer.json: merges[%zu] has a space in a part "
                        "(cannot be written as a GGUF \"a b\" merge)", mi);
                goto fail;
            }
            size_t la = strlen(a), lb = strlen(b);
            if ((s = malloc(la + lb + 2))) {
                memcpy(s, a, la);
                s[la] = ' ';
                memcpy(s + la + 1, b, lb + 1);
            }
        } else {
            err_set(e, ERR_FORMAT, "tokenizer.json: merges[%zu] is neither \"a b\" nor [a, b]", mi);
            goto fail;
        }
        if (!s) goto nomem;
        out->merges[out->n_merges++] = s;
    }

    out->eos = find_token(out, special_text(cj, "eos_token"));
    out->pad = find_token(out, special_text(cj, "pad_token"));
    out->bos = find_token(out, special_text(cj, "bos_token"));
    out->eot = find_token(out, "<|im_end|>");
    if (out->eot < 0) out->eot = find_token(out, "<|eot_id|>");
    if (out->eot < 0) out->eot = out->eos;
    out->unk = gemma ? find_token(out, special_text(cj, "unk_token")) : -1;
    out->add_bos = json_is_true(json_object_get(cj, "add_bos_token"));
    json_t *tpl = json_object_get(cj, "chat_template");
    if (json_is_array(tpl)) { /* [{name, template}]: take "default" */
        size_t k;
        json_t *it, *found = NULL;
        json_array_foreach(tpl, k, it) {
            const char *nm = json_string_value(json_object_get(it, "name"));
            if (nm && strcmp(nm, "default") == 0) found = json_object_get(it, "template");
        }
        tpl = found;
    }
    if (json_is_string(tpl) && !(out->chat_template = xstrdup(json_string_value(tpl)))) goto nomem;
    if (!out->chat_template && read_template_file(dir, &out->chat_template, e)) goto fail;
    rc = 0;
    goto done;
nomem:
    err_set(e, ERR_NOMEM, "out of memory reading tokenizer");
fail:
    hf_tokenizer_free(out);
done:
    json_decref(tj);
    json_decref(cj);
    return rc;
}

void hf_tokenizer_free(struct hf_tokenizer *t)
{
    if (!t) return;
    if (t->tokens)
        for (int64_t i = 0; i < t->n_tokens; i++) free(t->tokens[i]);
    if (t->merges)
        for (int64_t i = 0; i < t->n_merges; i++) free(t->merges[i]);
    free(t->tokens);
    free(t->types);
    free(t->merges);
    free(t->pre);
    free(t->chat_template);
    free(t->model);
    memset(t, 0, sizeof *t);
    t->bos = t->eos = t->eot = t->pad = t->unk = -1;
}
