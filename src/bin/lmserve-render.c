/* lmserve-render — prints the prompt a family's chat template makes of a conversation.
 *
 *   lmserve-render [--arch qwen3] [--spans | --ids TOKENIZER.json] < case.json
 *   lmserve-render --tojson < values.jsonl
 *
 * Input: an OpenAI-style messages array, or a case object {"messages": [...], "tools": [...],
 * "add_generation_prompt": bool (default false), "enable_thinking": bool (default true),
 * "continue_final": bool (default false)}.
 * Output: the prompt bytes exactly (no trailing newline added). With --spans, a JSON object
 * {"text": ..., "spans": [[off, len], ...]} instead (spans = template structure). With --ids, the
 * token ids of the prompt (comma separated) in a nanochat tokenizer file's vocabulary, control
 * tokens parsed only in the spans, the vocabulary's BOS first when it adds one: as the server
 * tokenizes it (tests/suites/46-nanochat-chat.sh).
 * --tojson: each input line is one JSON value; prints chat_tojson of it, one per line (the
 * Python json.dumps(ensure_ascii=False) compatibility check of tests/suites/45-chat.sh). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "engine/text/chat.h"
#include "engine/text/vocab.h"

static int usage(void)
{
    fprintf(stderr, "usage: lmserve-render [--arch NAME] [--spans | --ids TOKENIZER.json] < case.json\n"
                    "       lmserve-render --tojson < values.jsonl\n");
    return 2;
}

static int read_all(FILE *f, struct buf *b)
{
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
        if (buf_append(b, tmp, n)) return -1;
    if (!b->data && buf_reserve(b, 1)) return -1;
    return ferror(f) ? -1 : 0;
}

static int run_tojson(const struct buf *in)
{
    struct buf out = {0};
    const char *p = in->data, *end = in->data + in->len;
    int line = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        line++;
        if (n) {
            json_error_t je;
            json_t *j = json_loadb(p, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
            if (!j) {
                fprintf(stderr, "lmserve-render: line %d: %s\n", line, je.text);
                buf_free(&out);
                return 1;
            }
            buf_reset(&out);
            if (chat_tojson(j, &out)) {
                json_decref(j);
                buf_free(&out);
                fprintf(stderr, "lmserve-render: out of memory\n");
                return 1;
            }
            json_decref(j);
            fwrite(out.data, 1, out.len, stdout);
        }
        fputc('\n', stdout);
        p += n + (nl ? 1 : 0);
    }
    buf_free(&out);
    return 0;
}

int main(int argc, char **argv)
{
    const char *arch = "qwen3";
    int spans = 0, tojson = 0;
    const char *ids = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--arch") && i + 1 < argc)
            arch = argv[++i];
        else if (!strcmp(argv[i], "--spans"))
            spans = 1;
        else if (!strcmp(argv[i], "--ids") && i + 1 < argc)
            ids = argv[++i];
        else if (!strcmp(argv[i], "--tojson"))
            tojson = 1;
        else
            return usage();
    }
    struct buf in = {0};
    if (read_all(stdin, &in)) {
        fprintf(stderr, "lmserve-render: cannot read stdin\n");
        return 1;
    }
    if (tojson) {
        int rc = run_tojson(&in);
        buf_free(&in);
        return rc;
    }
    json_error_t je;
    json_t *root = json_loadb(in.data, in.len, 0, &je);
    buf_free(&in);
    if (!root) {
        fprintf(stderr, "lmserve-render: input is not JSON: %s (line %d)\n", je.text, je.line);
        return 1;
    }
    struct chat_prompt_opts opts = {.add_generation_prompt = false, .enable_thinking = true};
    const json_t *messages = root;
    if (json_is_object(root)) {
        messages = json_object_get(root, "messages");
        json_t *v = json_object_get(root, "tools");
        if (v && !json_is_null(v)) opts.tools = v;
        if ((v = json_object_get(root, "add_generation_prompt")))
            opts.add_generation_prompt = json_is_true(v);
        if ((v = json_object_get(root, "enable_thinking"))) opts.enable_thinking = json_is_true(v);
        if ((v = json_object_get(root, "continue_final"))) opts.continue_final = json_is_true(v);
    }
    struct err e = {0};
    struct chat_msg *msgs = NULL;
    int n = 0;
    struct chat_prompt p = {0};
    struct vocab *v = NULL;
    int32_t *t = NULL;
    size_t nt = 0, ct = 0;
    int rc = 1;
    if (ids && !(v = vocab_load_tiktoken(ids, &e))) {
        fprintf(stderr, "lmserve-render: %s\n", e.msg);
        goto done;
    }
    if (chat_msgs_from_openai_json(messages, &msgs, &n, &e) ||
        chat_render(arch, msgs, n, &opts, &p, &e)) {
        fprintf(stderr, "lmserve-render: %s%s%s%s: %s\n", err_code_name(e.code),
                e.param[0] ? " (" : "", e.param, e.param[0] ? ")" : "", e.msg);
        goto done;
    }
    if (v) {
        if (tok_add_bos(v) && tok_bos(v) >= 0) { /* as the server does (serve/backend_llm.c) */
            if (!(t = malloc(16 * sizeof *t))) goto done;
            ct = 16;
            t[nt++] = tok_bos(v);
        }
        if (tok_encode(v, p.text.data, p.text.len, p.spans, p.n_spans, false, &t, &nt, &ct, &e)) {
            fprintf(stderr, "lmserve-render: %s\n", e.msg);
            goto done;
        }
        for (size_t i = 0; i < nt; i++) printf(i ? ",%d" : "%d", t[i]);
        putchar('\n');
    } else if (spans) {
        json_t *o = json_object(), *sa = json_array();
        json_object_set_new(o, "text", json_stringn(p.text.data, p.text.len));
        for (size_t i = 0; i < p.n_spans; i++)
            json_array_append_new(
                sa, json_pack("[II]", (json_int_t)p.spans[i].off, (json_int_t)p.spans[i].len));
        json_object_set_new(o, "spans", sa);
        char *s = json_dumps(o, JSON_COMPACT);
        if (s) puts(s);
        free(s);
        json_decref(o);
    } else {
        fwrite(p.text.data, 1, p.text.len, stdout);
    }
    rc = 0;
done:
    free(t);
    vocab_free(v);
    chat_prompt_free(&p);
    chat_msgs_free(msgs, n);
    json_decref(root);
    return rc;
}
