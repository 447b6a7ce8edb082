/* gbnf — llama.cpp GBNF -> lark. Parse into a small AST (per rule), then emit one lark rule per
 * GBNF rule; every sub-expression without rule references becomes one /regex/ terminal. */
#include "grammar/gbnf.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GB_MAX_DEPTH 100
#define GB_MAX_REPEAT 1000000

enum gkind { G_SEQ, G_ALT, G_LIT, G_CLASS, G_ANY, G_REF, G_REP };

struct gnode {
    enum gkind kind;
    int32_t *kids; /* SEQ / ALT children, REP: kids[0] */
    int32_t n_kids, cap_kids;
    uint32_t *cps; /* LIT: code points; CLASS: ranges lo,hi pairs */
    int32_t n_cps;
    bool neg;           /* CLASS */
    int32_t min, max;   /* REP (max -1 = unbounded) */
    int32_t ref;        /* REF: rule index */
    int32_t line;
};

struct grule {
    char *name;
    int32_t body; /* node, -1 until defined */
    int32_t line; /* of the definition or first use */
};

struct gp {
    const char *s;
    size_t n, i;
    int32_t line;
    struct gnode *nodes;
    int32_t n_nodes, cap_nodes;
    struct grule *rules;
    int32_t n_rules, cap_rules;
    int32_t cur_rule; /* for messages */
    int depth;
    struct err *e;
    bool failed;
};

static int gerr(struct gp *P, const char *fmt, const char *arg)
{
    if (P->failed) return -1;
    P->failed = true;
    char what[300];
    snprintf(what, sizeof what, fmt, arg ? arg : "");
    if (P->cur_rule >= 0)
        return err_set(P->e, ERR_INVALID, "gbnf grammar, line %d, rule %s: %s", P->line,
                       P->rules[P->cur_rule].name, what);
    return err_set(P->e, ERR_INVALID, "gbnf grammar, line %d: %s", P->line, what);
}

static int32_t node_new(struct gp *P, enum gkind k)
{
    if (P->n_nodes == P->cap_nodes) {
        int32_t nc = P->cap_nodes ? P->cap_nodes * 2 : 64;
        struct gnode *n = realloc(P->nodes, (size_t)nc * sizeof *n);
        if (!n) {
            err_set(P->e, ERR_NOMEM, "out of memory");
            P->failed = true;
            return -1;
        }
        P->nodes = n;
        P->cap_nodes = nc;
    }
    P->nodes[P->n_nodes] = (struct gnode){.kind = k, .ref = -1, .line = P->line};
    return P->n_nodes++;
}

static int kid_add(struct gp *P, int32_t x, int32_t kid)
{
    struct gnode *g = &P->nodes[x];
    if (g->n_kids == g->cap_kids) {
        int32_t nc = g->cap_kids ? g->cap_kids * 2 : 4;
        int32_t *k = realloc(g->kids, (size_t)nc * sizeof *k);
        if (!k) {
            P->failed = true;
            return err_set(P->e, ERR_NOMEM, "out of memory");
        }
        g->kids = k;
        g->cap_kids = nc;
    }
    g->kids[g->n_kids++] = kid;
    return 0;
}

static int cp_add(struct gp *P, int32_t x, uint32_t cp)
{
    struct gnode *g = &P->nodes[x];
    uint32_t *c = realloc(g->cps, ((size_t)g->n_cps + 1) * sizeof *c);
    if (!c) {
        P->failed = true;
        return err_set(P->e, ERR_NOMEM, "out of memory");
    }
    g->cps = c;
    g->cps[g->n_cps++] = cp;
    return 0;
}

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

/* Spaces, tabs, comments; line breaks too when nl. */
static void skip(struct gp *P, bool nl)
{
    while (P->i < P->n) {
        char c = P->s[P->i];
        if (c == ' ' || c == '\t')
            P->i++;
        else if (c == '#') {
            while (P->i < P->n && P->s[P->i] != '\n')
                P->i++;
        } else if (nl && (c == '\n' || c == '\r')) {
            if (c == '\n') P->line++;
            P->i++;
        } else
            break;
    }
}

/* One UTF-8 code point at P->i (invalid bytes are an error). */
static int utf8_cp(struct gp *P, uint32_t *out)
{
    const unsigned char *p = (const unsigned char *)P->s + P->i;
    size_t left = P->n - P->i;
    uint32_t c = p[0];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || (size_t)len > left) return gerr(P, "%s", "invalid UTF-8");
    uint32_t v = len == 1 ? c : len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
    for (int k = 1; k < len; k++) {
        if ((p[k] & 0xc0) != 0x80) return gerr(P, "%s", "invalid UTF-8");
        v = v << 6 | (p[k] & 0x3f);
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return gerr(P, "%s", "invalid UTF-8");
    P->i += (size_t)len;
    *out = v;
    return 0;
}

static int hexn(struct gp *P, int n, uint32_t *out)
{
    uint32_t v = 0;
    for (int k = 0; k < n; k++) {
        if (P->i >= P->n) return gerr(P, "%s", "truncated escape");
        char c = P->s[P->i++];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return gerr(P, "%s", "bad hex digit in an escape");
        v = v << 4 | (uint32_t)d;
    }
    if (v > 0x10FFFF) return gerr(P, "%s", "escape beyond U+10FFFF");
    *out = v;
    return 0;
}

/* A character of a literal or class, escapes decoded (llama.cpp's set). */
static int char_at(struct gp *P, uint32_t *out)
{
    if (P->i >= P->n) return gerr(P, "%s", "unterminated literal or class");
    if (P->s[P->i] == '\n') return gerr(P, "%s", "line break inside a literal or class");
    if (P->s[P->i] != '\\') return utf8_cp(P, out);
    P->i++;
    if (P->i >= P->n) return gerr(P, "%s", "truncated escape");
    char c = P->s[P->i++];
    switch (c) {
    case 'n': *out = '\n'; return 0;
    case 'r': *out = '\r'; return 0;
    case 't': *out = '\t'; return 0;
    case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '.':
        *out = (uint32_t)(unsigned char)c;
        return 0;
    case 'x': return hexn(P, 2, out);
    case 'u': return hexn(P, 4, out);
    case 'U': return hexn(P, 8, out);
    default: {
        char s[2] = {c, 0};
        return gerr(P, "unknown escape \\%s", s);
    }
    }
}

static int32_t rule_ref(struct gp *P, const char *name, size_t n)
{
    for (int32_t r = 0; r < P->n_rules; r++)
        if (strlen(P->rules[r].name) == n && !memcmp(P->rules[r].name, name, n)) return r;
    if (P->n_rules == P->cap_rules) {
        int32_t nc = P->cap_rules ? P->cap_rules * 2 : 32;
        struct grule *nr = realloc(P->rules, (size_t)nc * sizeof *nr);
        if (!nr) {
            P->failed = true;
            err_set(P->e, ERR_NOMEM, "out of memory");
            return -1;
        }
        P->rules = nr;
        P->cap_rules = nc;
    }
    char *s = strndup(name, n);
    if (!s) {
        P->failed = true;
        err_set(P->e, ERR_NOMEM, "out of memory");
        return -1;
    }
    P->rules[P->n_rules] = (struct grule){.name = s, .body = -1, .line = P->line};
    return P->n_rules++;
}

static int32_t parse_alts(struct gp *P, bool nested);

static int parse_int(struct gp *P, int32_t *out)
{
    if (P->i >= P->n || P->s[P->i] < '0' || P->s[P->i] > '9') return gerr(P, "%s", "number expected");
    int64_t v = 0;
    while (P->i < P->n && P->s[P->i] >= '0' && P->s[P->i] <= '9') {
        v = v * 10 + (P->s[P->i++] - '0');
        if (v > GB_MAX_REPEAT) return gerr(P, "%s", "repetition count above 1000000");
    }
    *out = (int32_t)v;
    return 0;
}

static int32_t parse_atom(struct gp *P, bool nested)
{
    char c = P->s[P->i];
    if (c == '"') {
        P->i++;
        int32_t x = node_new(P, G_LIT);
        if (x < 0) return -1;
        while (P->i < P->n && P->s[P->i] != '"') {
            uint32_t cp;
            if (char_at(P, &cp) || cp_add(P, x, cp)) return -1;
        }
        if (P->i >= P->n) return gerr(P, "%s", "unterminated literal"), -1;
        P->i++;
        return x;
    }
    if (c == '[') {
        P->i++;
        int32_t x = node_new(P, G_CLASS);
        if (x < 0) return -1;
        if (P->i < P->n && P->s[P->i] == '^') {
            P->nodes[x].neg = true;
            P->i++;
        }
        while (P->i < P->n && P->s[P->i] != ']') {
            uint32_t lo, hi;
            if (char_at(P, &lo)) return -1;
            hi = lo;
            if (P->i + 1 < P->n && P->s[P->i] == '-' && P->s[P->i + 1] != ']') {
                P->i++;
                if (char_at(P, &hi)) return -1;
                if (hi < lo) return gerr(P, "%s", "class range out of order"), -1;
            }
            if (cp_add(P, x, lo) || cp_add(P, x, hi)) return -1;
        }
        if (P->i >= P->n) return gerr(P, "%s", "unterminated character class"), -1;
        P->i++;
        if (!P->nodes[x].n_cps && !P->nodes[x].neg)
            return gerr(P, "%s", "empty character class matches nothing"), -1;
        return x;
    }
    if (c == '.') {
        P->i++;
        return node_new(P, G_ANY);
    }
    if (c == '(') {
        P->i++;
        if (++P->depth > GB_MAX_DEPTH) return gerr(P, "%s", "groups nested too deeply"), -1;
        skip(P, true);
        int32_t x = parse_alts(P, true);
        if (x < 0) return -1;
        skip(P, true);
        if (P->i >= P->n || P->s[P->i] != ')') return gerr(P, "%s", "')' expected"), -1;
        P->i++;
        P->depth--;
        return x;
    }
    if (c == '<' || c == '!')
        return gerr(P, "%s", "token references (<...>, !<...>) are not supported"), -1;
    if (name_char(c)) {
        size_t st = P->i;
        while (P->i < P->n && name_char(P->s[P->i]))
            P->i++;
        int32_t r = rule_ref(P, P->s + st, P->i - st);
        if (r < 0) return -1;
        int32_t x = node_new(P, G_REF);
        if (x < 0) return -1;
        P->nodes[x].ref = r;
        return x;
    }
    char s[2] = {c, 0};
    (void)nested;
    return gerr(P, "unexpected '%s'", s), -1;
}

static int32_t parse_item(struct gp *P, bool nested)
{
    int32_t x = parse_atom(P, nested);
    while (x >= 0 && P->i < P->n) {
        char c = P->s[P->i];
        int32_t mn, mx;
        if (c == '*' || c == '+' || c == '?') {
            P->i++;
            mn = c == '+' ? 1 : 0;
            mx = c == '?' ? 1 : -1;
        } else if (c == '{') {
            P->i++;
            skip(P, false);
            mn = 0;
            if (P->i < P->n && P->s[P->i] != ',' && parse_int(P, &mn)) return -1;
            skip(P, false);
            mx = mn;
            if (P->i < P->n && P->s[P->i] == ',') {
                P->i++;
                skip(P, false);
                mx = -1;
                if (P->i < P->n && P->s[P->i] != '}' && parse_int(P, &mx)) return -1;
                skip(P, false);
            }
            if (P->i >= P->n || P->s[P->i] != '}') return gerr(P, "%s", "'}' expected"), -1;
            P->i++;
            if (mx >= 0 && mx < mn) return gerr(P, "%s", "repetition {m,n} with n < m"), -1;
        } else {
            break;
        }
        int32_t r = node_new(P, G_REP);
        if (r < 0 || kid_add(P, r, x)) return -1;
        P->nodes[r].min = mn;
        P->nodes[r].max = mx;
        x = r;
    }
    return x;
}

static int32_t parse_seq(struct gp *P, bool nested)
{
    int32_t x = node_new(P, G_SEQ);
    if (x < 0) return -1;
    for (;;) {
        skip(P, nested);
        if (P->i >= P->n) break;
        char c = P->s[P->i];
        if (c == '|' || c == ')' || c == '\n' || c == '\r') break;
        /* the next rule's `name ::=` ends this one (only reachable inside groups) */
        int32_t it = parse_item(P, nested);
        if (it < 0 || kid_add(P, x, it)) return -1;
    }
    return x;
}

static int32_t parse_alts(struct gp *P, bool nested)
{
    int32_t x = node_new(P, G_ALT);
    if (x < 0) return -1;
    for (;;) {
        int32_t s = parse_seq(P, nested);
        if (s < 0 || kid_add(P, x, s)) return -1;
        skip(P, nested);
        if (P->i < P->n && P->s[P->i] == '|') {
            P->i++;
            skip(P, true);
            continue;
        }
        return x;
    }
}

static int parse_grammar(struct gp *P)
{
    for (;;) {
        P->cur_rule = -1;
        skip(P, true);
        if (P->i >= P->n) return 0;
        size_t st = P->i;
        while (P->i < P->n && name_char(P->s[P->i]))
            P->i++;
        if (P->i == st) {
            char s[2] = {P->s[P->i], 0};
            return gerr(P, "a rule name expected, found '%s'", s);
        }
        int32_t r = rule_ref(P, P->s + st, P->i - st);
        if (r < 0) return -1;
        P->cur_rule = r;
        if (P->rules[r].body >= 0) return gerr(P, "%s", "rule defined twice");
        skip(P, false);
        if (P->n - P->i < 3 || memcmp(P->s + P->i, "::=", 3)) return gerr(P, "%s", "'::=' expected");
        P->i += 3;
        P->rules[r].line = P->line;
        skip(P, true);
        int32_t b = parse_alts(P, false);
        if (b < 0) return -1;
        P->rules[r].body = b;
        if (P->i < P->n && P->s[P->i] == ')') return gerr(P, "%s", "unbalanced ')'");
    }
}

/* ---- emission ---- */

/* Whether node x contains no rule reference (it is then one regex terminal). */
static bool term_only(const struct gp *P, int32_t x)
{
    const struct gnode *g = &P->nodes[x];
    if (g->kind == G_REF) return false;
    for (int32_t k = 0; k < g->n_kids; k++)
        if (!term_only(P, g->kids[k])) return false;
    return true;
}

static void rx_cp(struct buf *b, uint32_t cp)
{
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') ||
        cp == ' ' || cp == '_')
        buf_printf(b, "%c", (char)cp);
    else
        buf_printf(b, "\\x{%X}", cp);
}

/* The repetition suffix of a G_REP node; regex and lark spell it alike. */
static void emit_suffix(const struct gnode *g, struct buf *b)
{
    if (g->min == 0 && g->max < 0)
        buf_puts(b, "*");
    else if (g->min == 1 && g->max < 0)
        buf_puts(b, "+");
    else if (g->min == 0 && g->max == 1)
        buf_puts(b, "?");
    else if (g->max < 0)
        buf_printf(b, "{%d,}", g->min);
    else
        buf_printf(b, "{%d,%d}", g->min, g->max);
}

static void emit_rx(const struct gp *P, int32_t x, struct buf *b)
{
    const struct gnode *g = &P->nodes[x];
    switch (g->kind) {
    case G_LIT:
        for (int32_t k = 0; k < g->n_cps; k++)
            rx_cp(b, g->cps[k]);
        break;
    case G_CLASS:
        buf_puts(b, g->neg ? "[^" : "[");
        for (int32_t k = 0; k < g->n_cps; k += 2) {
            rx_cp(b, g->cps[k]);
            if (g->cps[k + 1] != g->cps[k]) {
                buf_puts(b, "-");
                rx_cp(b, g->cps[k + 1]);
            }
        }
        buf_puts(b, "]");
        break;
    case G_ANY:
        buf_puts(b, "[\\x{0}-\\x{10FFFF}]");
        break;
    case G_SEQ:
        for (int32_t k = 0; k < g->n_kids; k++) {
            bool alt = P->nodes[g->kids[k]].kind == G_ALT && P->nodes[g->kids[k]].n_kids > 1;
            if (alt) buf_puts(b, "(?:");
            emit_rx(P, g->kids[k], b);
            if (alt) buf_puts(b, ")");
        }
        break;
    case G_ALT:
        for (int32_t k = 0; k < g->n_kids; k++) {
            if (k) buf_puts(b, "|");
            emit_rx(P, g->kids[k], b);
        }
        break;
    case G_REP:
        buf_puts(b, "(?:");
        emit_rx(P, g->kids[0], b);
        buf_puts(b, ")");
        emit_suffix(g, b);
        break;
    case G_REF:
        break;
    }
}

/* Whether x matches only the empty string (an empty sequence, literal, or repeat of one). */
static bool empty_only(const struct gp *P, int32_t x)
{
    const struct gnode *g = &P->nodes[x];
    switch (g->kind) {
    case G_LIT: return g->n_cps == 0;
    case G_SEQ:
    case G_ALT:
        for (int32_t k = 0; k < g->n_kids; k++)
            if (!empty_only(P, g->kids[k])) return false;
        return true;
    case G_REP: return g->max == 0 || empty_only(P, g->kids[0]);
    default: return false;
    }
}

/* Lark text of x (never empty: callers drop empty-only parts first). */
static void emit_lark(const struct gp *P, int32_t x, struct buf *b)
{
    const struct gnode *g = &P->nodes[x];
    if (term_only(P, x)) {
        buf_puts(b, "/");
        emit_rx(P, x, b);
        buf_puts(b, "/");
        return;
    }
    switch (g->kind) {
    case G_REF:
        buf_printf(b, "g%d", g->ref);
        break;
    case G_SEQ: {
        bool first = true;
        for (int32_t k = 0; k < g->n_kids;) {
            int32_t c = g->kids[k];
            if (empty_only(P, c)) {
                k++;
                continue;
            }
            if (!first) buf_puts(b, " ");
            first = false;
            if (term_only(P, c)) { /* merge the run of reference-free items into one regex */
                buf_puts(b, "/");
                for (; k < g->n_kids && term_only(P, g->kids[k]); k++) {
                    int32_t d = g->kids[k];
                    bool alt = P->nodes[d].kind == G_ALT && P->nodes[d].n_kids > 1;
                    if (alt) buf_puts(b, "(?:");
                    emit_rx(P, d, b);
                    if (alt) buf_puts(b, ")");
                }
                buf_puts(b, "/");
                continue;
            }
            bool alt = P->nodes[c].kind == G_ALT && P->nodes[c].n_kids > 1;
            if (alt) buf_puts(b, "(");
            emit_lark(P, c, b);
            if (alt) buf_puts(b, ")");
            k++;
        }
        break;
    }
    case G_ALT: {
        bool opt = false;
        int n = 0;
        struct buf alts = {0};
        for (int32_t k = 0; k < g->n_kids; k++) {
            if (empty_only(P, g->kids[k])) {
                opt = true;
                continue;
            }
            if (n++) buf_puts(&alts, " | ");
            emit_lark(P, g->kids[k], &alts);
        }
        if (opt)
            buf_printf(b, "(%s)?", alts.data ? alts.data : "");
        else
            buf_append(b, alts.data ? alts.data : "", alts.len);
        buf_free(&alts);
        break;
    }
    case G_REP:
        buf_puts(b, "(");
        emit_lark(P, g->kids[0], b);
        buf_puts(b, ")");
        emit_suffix(g, b);
        break;
    default:
        break;
    }
}

int gbnf_to_lark(const char *src, size_t len, struct buf *out, struct err *e)
{
    struct gp P = {.s = src, .n = len, .line = 1, .cur_rule = -1, .e = e};
    int rc = -1;
    struct buf b = {0};
    if (memchr(src, 0, len)) {
        err_set(e, ERR_INVALID, "gbnf grammar: NUL byte in the grammar");
        goto out;
    }
    if (parse_grammar(&P)) goto out;
    int32_t root = -1;
    for (int32_t r = 0; r < P.n_rules; r++) {
        if (P.rules[r].body < 0) {
            P.line = P.rules[r].line;
            P.cur_rule = -1;
            gerr(&P, "undefined rule %s", P.rules[r].name);
            goto out;
        }
        if (!strcmp(P.rules[r].name, "root")) root = r;
    }
    if (root < 0) {
        err_set(e, ERR_INVALID, "gbnf grammar: no rule named root");
        goto out;
    }
    buf_printf(&b, "start: g%d\n", root);
    for (int32_t r = 0; r < P.n_rules; r++) {
        int32_t body = P.rules[r].body;
        buf_printf(&b, "g%d: ", r);
        if (empty_only(&P, body))
            buf_puts(&b, "/(?:)/"); /* a rule matching only the empty string */
        else
            emit_lark(&P, body, &b);
        buf_puts(&b, "\n");
    }
    if (buf_append(out, b.data, b.len)) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto out;
    }
    rc = 0;
out:
    buf_free(&b);
    for (int32_t i = 0; i < P.n_nodes; i++) {
        free(P.nodes[i].kids);
        free(P.nodes[i].cps);
    }
    free(P.nodes);
    for (int32_t r = 0; r < P.n_rules; r++)
        free(P.rules[r].name);
    free(P.rules);
    return rc;
}
