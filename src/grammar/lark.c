/* lark — the lark front end (llguidance's dialect): source text -> terminals (regex ASTs compiled
 * into the grammar's NFA) and plain BNF productions (EBNF operators lowered to helper
 * nonterminals). See docs/grammar.md for what is supported. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "grammar/grammar_int.h"
#include "grammar/jsonschema.h"
#include "base/utf8.h"
#include "base/hash.h"

#define LARK_MAX_DEPTH 100
#define LARK_MAX_EXPAND 20000 /* symbols produced by one {m,n} / ~ m..n */

/* ------------------------------------------------------------------------------------------ */
/* Lexer                                                                                       */

enum ltok {
    LT_EOF,
    LT_NL,
    LT_RULE,
    LT_TOKEN,
    LT_STRING,
    LT_REGEX,
    LT_SPECIAL,
    LT_NUMBER,
    LT_DIRECTIVE,
    LT_COLON,
    LT_VBAR,
    LT_LPAR,
    LT_RPAR,
    LT_LBRACK,
    LT_RBRACK,
    LT_LBRACE,
    LT_RBRACE,
    LT_COMMA,
    LT_DOT,
    LT_DOTDOT,
    LT_ARROW,
    LT_TILDE,
    LT_OP,
    LT_JSON
};

struct ltoken {
    enum ltok kind;
    int line;
    size_t off, len; /* source span (name, number, op char, directive name without %) */
    char *val;       /* decoded string / regex text / json text (owned) */
    size_t vlen;
    bool icase;
};

struct lark {
    struct grammar *g;
    const char *src;
    size_t len;
    struct err *e;
    struct ltoken *t;
    int32_t nt, ct, pos;
    /* names of this module */
    struct lname *names;
    int32_t n_names, cap_names;
    int32_t *ntab; /* name hash: index + 1, 0 = empty */
    uint32_t ntab_cap;
    struct rx_ast ast;
    int depth;      /* ( [ nesting while parsing an expression */
    int json_depth; /* %json sub-grammar nesting */
    int json_count;
    int helper_count;
};

enum lname_kind { LN_RULE, LN_TOKEN };
struct lname {
    enum lname_kind kind;
    char *name;
    int32_t def_tok; /* token index of the definition's ':' + 1 (-1: imported regex) */
    int32_t nt;      /* LN_RULE: nonterminal id */
    int32_t term;    /* LN_TOKEN: terminal id once compiled, else -1 */
    int32_t ast;     /* LN_TOKEN: regex AST root once built */
    int state;       /* LN_TOKEN: 0 not built, 1 building, 2 built */
    const char *import_rx;
};

static int lerr(struct lark *L, int line, const char *fmt, const char *arg)
{
    char msg[400];
    snprintf(msg, sizeof msg, fmt, arg);
    return err_set(L->e, ERR_INVALID, "lark grammar, line %d: %s", line, msg);
}

static int push_tok(struct lark *L, struct ltoken t)
{
    if (L->nt == L->ct) {
        int32_t nc = L->ct ? L->ct * 2 : 256;
        struct ltoken *n = realloc(L->t, (size_t)nc * sizeof *n);
        if (!n) {
            free(t.val);
            return err_set(L->e, ERR_NOMEM, "out of memory");
        }
        L->t = n;
        L->ct = nc;
    }
    L->t[L->nt++] = t;
    return 0;
}

static int is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static int put_utf8(struct buf *b, uint32_t cp)
{
    char o[UTF8_MAX];
    return buf_append(b, o, (size_t)utf8_encode(cp, o));
}

static int lex_string(struct lark *L, size_t *i, int line, struct ltoken *t)
{
    const char *s = L->src;
    struct buf b = {0};
    size_t j = *i + 1;
    for (;;) {
        if (j >= L->len || s[j] == '\n') {
            buf_free(&b);
            return lerr(L, line, "%s", "unterminated string literal");
        }
        char c = s[j];
        if (c == '"') break;
        if (c == '\\' && j + 1 < L->len) {
            char d = s[j + 1];
            j += 2;
            uint32_t cp = 0;
            int hex = 0;
            switch (d) {
            case 'n':
                buf_append(&b, "\n", 1);
                continue;
            case 't':
                buf_append(&b, "\t", 1);
                continue;
            case 'r':
                buf_append(&b, "\r", 1);
                continue;
            case 'f':
                buf_append(&b, "\f", 1);
                continue;
            case 'b':
                buf_append(&b, "\b", 1);
                continue;
            case '0':
                buf_append(&b, "", 1);
                continue;
            case 'x':
                hex = 2;
                break;
            case 'u':
                hex = 4;
                break;
            case 'U':
                hex = 8;
                break;
            default:
                buf_append(&b, &d, 1);
                continue;
            }
            for (int k = 0; k < hex; k++, j++) {
                char h = j < L->len ? s[j] : 0;
                int v = (h >= '0' && h <= '9')   ? h - '0'
                        : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                        : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                 : -1;
                if (v < 0) {
                    buf_free(&b);
                    return lerr(L, line, "%s", "bad escape in string literal");
                }
                cp = cp * 16 + (uint32_t)v;
            }
            if (hex == 2) {
                char ch = (char)cp;
                buf_append(&b, &ch, 1);
            } else if (cp > 0x10FFFF || put_utf8(&b, cp)) {
                buf_free(&b);
                return lerr(L, line, "%s", "bad escape in string literal");
            }
            continue;
        }
        buf_append(&b, &c, 1);
        j++;
    }
    j++;
    t->icase = false;
    if (j < L->len && s[j] == 'i' && (j + 1 >= L->len || !is_name_char(s[j + 1]))) {
        t->icase = true;
        j++;
    }
    if (buf_puts(&b, "")) { /* ensure allocated */
        buf_free(&b);
        return err_set(L->e, ERR_NOMEM, "out of memory");
    }
    t->vlen = b.len;
    t->val = buf_steal(&b);
    *i = j;
    return 0;
}

static int lex_json(struct lark *L, size_t *i, int line, struct ltoken *t)
{
    const char *s = L->src;
    size_t j = *i;
    while (j < L->len && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r'))
        j++;
    if (j >= L->len || s[j] != '{')
        return lerr(L, line, "%s", "%json must be followed by an inline schema {...}");
    size_t start = j;
    int depth = 0;
    bool in_str = false;
    for (; j < L->len; j++) {
        char c = s[j];
        if (in_str) {
            if (c == '\\')
                j++;
            else if (c == '"')
                in_str = false;
            continue;
        }
        if (c == '"')
            in_str = true;
        else if (c == '{' || c == '[')
            depth++;
        else if (c == '}' || c == ']') {
            if (--depth == 0) break;
        }
    }
    if (j >= L->len) return lerr(L, line, "%s", "unterminated %json {...}");
    t->vlen = j + 1 - start;
    t->val = malloc(t->vlen + 1);
    if (!t->val) return err_set(L->e, ERR_NOMEM, "out of memory");
    memcpy(t->val, s + start, t->vlen);
    t->val[t->vlen] = 0;
    *i = j + 1;
    return 0;
}

static int lex_all(struct lark *L)
{
    const char *s = L->src;
    size_t i = 0;
    int line = 1;
    while (i < L->len) {
        char c = s[i];
        struct ltoken t = {.line = line, .off = i, .len = 1};
        if (c == ' ' || c == '\t' || c == '\r') {
            i++;
            continue;
        }
        if (c == '\n') {
            t.kind = LT_NL;
            line++;
            i++;
            if (push_tok(L, t)) return -1;
            continue;
        }
        if ((c == '/' && i + 1 < L->len && s[i + 1] == '/') || c == '#') {
            while (i < L->len && s[i] != '\n')
                i++;
            continue;
        }
        if (c == '"') {
            t.kind = LT_STRING;
            if (lex_string(L, &i, line, &t)) return -1;
        } else if (c == '/') {
            struct buf b = {0};
            size_t j = i + 1;
            while (j < L->len && s[j] != '/' && s[j] != '\n') {
                if (s[j] == '\\' && j + 1 < L->len && s[j + 1] == '/') {
                    buf_append(&b, "/", 1);
                    j += 2;
                    continue;
                }
                if (s[j] == '\\' && j + 1 < L->len) {
                    buf_append(&b, s + j, 2);
                    j += 2;
                    continue;
                }
                buf_append(&b, s + j, 1);
                j++;
            }
            if (j >= L->len || s[j] != '/') {
                buf_free(&b);
                return lerr(L, line, "%s", "unterminated /regex/");
            }
            j++;
            if (j < L->len && (s[j] >= 'a' && s[j] <= 'z')) {
                buf_free(&b);
                return lerr(L, line, "regex flag '%.1s' is not supported", s + j);
            }
            buf_puts(&b, "");
            t.kind = LT_REGEX;
            t.vlen = b.len;
            t.val = buf_steal(&b);
            if (!t.val) return err_set(L->e, ERR_NOMEM, "out of memory");
            i = j;
        } else if (c == '<' && i + 1 < L->len && s[i + 1] != ' ' && s[i + 1] != '\n') {
            size_t j = i + 1;
            while (j < L->len && s[j] != '>' && s[j] != '\n' && s[j] != ' ')
                j++;
            if (j >= L->len || s[j] != '>')
                return lerr(L, line, "%s", "unterminated <special token>");
            t.kind = LT_SPECIAL;
            t.len = j + 1 - i;
            i = j + 1;
        } else if (c == '%') {
            size_t j = i + 1;
            while (j < L->len && is_name_char(s[j]))
                j++;
            t.kind = LT_DIRECTIVE;
            t.off = i + 1;
            t.len = j - i - 1;
            i = j;
            if (t.len == 4 && !memcmp(s + t.off, "json", 4)) {
                t.kind = LT_JSON;
                if (lex_json(L, &i, line, &t)) return -1;
            }
        } else if (is_name_char(c) && !(c >= '0' && c <= '9')) {
            size_t j = i;
            while (j < L->len && is_name_char(s[j]))
                j++;
            size_t k = i;
            while (k < j && s[k] == '_')
                k++;
            t.kind = (k < j && s[k] >= 'A' && s[k] <= 'Z') ? LT_TOKEN : LT_RULE;
            t.len = j - i;
            i = j;
        } else if (c >= '0' && c <= '9') {
            size_t j = i;
            while (j < L->len && s[j] >= '0' && s[j] <= '9')
                j++;
            t.kind = LT_NUMBER;
            t.len = j - i;
            i = j;
        } else {
            i++;
            switch (c) {
            case ':':
                t.kind = LT_COLON;
                break;
            case '|':
                t.kind = LT_VBAR;
                break;
            case '(':
                t.kind = LT_LPAR;
                break;
            case ')':
                t.kind = LT_RPAR;
                break;
            case '[':
                t.kind = LT_LBRACK;
                break;
            case ']':
                t.kind = LT_RBRACK;
                break;
            case '{':
                t.kind = LT_LBRACE;
                break;
            case '}':
                t.kind = LT_RBRACE;
                break;
            case ',':
                t.kind = LT_COMMA;
                break;
            case '~':
                t.kind = LT_TILDE;
                break;
            case '*':
            case '+':
            case '?':
            case '!':
                t.kind = LT_OP;
                break;
            case '.':
                if (i < L->len && s[i] == '.') {
                    i++;
                    t.kind = LT_DOTDOT;
                    t.len = 2;
                } else {
                    t.kind = LT_DOT;
                }
                break;
            case '-':
                if (i < L->len && s[i] == '>') {
                    i++;
                    t.kind = LT_ARROW;
                    t.len = 2;
                    break;
                }
                /* fallthrough */
            default: {
                char ch[2] = {c, 0};
                return lerr(L, line, "unexpected character '%s'", ch);
            }
            }
        }
        if (push_tok(L, t)) return -1;
    }
    struct ltoken eof = {.kind = LT_EOF, .line = line, .off = L->len};
    return push_tok(L, eof);
}

/* ------------------------------------------------------------------------------------------ */
/* Expression tree                                                                              */

enum ekind { E_SEQ, E_ALT, E_REP, E_STR, E_RANGE, E_REGEX, E_RULE, E_TOKEN, E_SPECIAL, E_JSON };
struct expr {
    enum ekind kind;
    int32_t tok;      /* source token (names, strings, regexes) */
    int32_t tok2;     /* E_RANGE: second string */
    int32_t min, max; /* E_REP */
    struct expr **kids;
    int32_t n, cap;
    int line;
};

static void expr_free(struct expr *x)
{
    if (!x) return;
    for (int32_t i = 0; i < x->n; i++)
        expr_free(x->kids[i]);
    free(x->kids);
    free(x);
}

static struct expr *expr_new(enum ekind k, int line)
{
    struct expr *x = calloc(1, sizeof *x);
    if (x) {
        x->kind = k;
        x->line = line;
        x->tok = x->tok2 = -1;
    }
    return x;
}

static int expr_add(struct expr *x, struct expr *k)
{
    if (x->n == x->cap) {
        int32_t nc = x->cap ? x->cap * 2 : 4;
        struct expr **n = realloc(x->kids, (size_t)nc * sizeof *n);
        if (!n) return -1;
        x->kids = n;
        x->cap = nc;
    }
    x->kids[x->n++] = k;
    return 0;
}

static struct ltoken *cur(struct lark *L)
{
    return &L->t[L->pos];
}

static void skip_nl_in_parens(struct lark *L)
{
    if (L->depth > 0)
        while (cur(L)->kind == LT_NL)
            L->pos++;
}

static struct expr *parse_expansions(struct lark *L);

static int parse_int(struct lark *L, int32_t *v)
{
    struct ltoken *t = cur(L);
    if (t->kind != LT_NUMBER) return lerr(L, t->line, "%s", "expected a number");
    /* the token's own digits: the source is not NUL-terminated (strtol read past a number at its
     * very end: fuzz-grammar, "start: x{2,5} | y~3") */
    long x = 0;
    for (size_t i = 0; i < t->len && x <= 100000; i++)
        if (L->src[t->off + i] >= '0' && L->src[t->off + i] <= '9') x = x * 10 + (L->src[t->off + i] - '0');
    if (x > 100000) x = 100000;
    *v = (int32_t)x;
    L->pos++;
    return 0;
}

/* x repeated min..max times (max -1: unbounded); frees x and returns NULL on no memory. */
static struct expr *wrap_rep(struct lark *L, struct expr *x, int32_t min, int32_t max, int line)
{
    struct expr *r = expr_new(E_REP, line);
    if (!r || expr_add(r, x)) {
        expr_free(r);
        expr_free(x);
        err_set(L->e, ERR_NOMEM, "out of memory");
        return NULL;
    }
    r->min = min;
    r->max = max;
    return r;
}

/* A leaf of kind k for the current token (its text is read from the token later); consumes it. */
static struct expr *parse_leaf(struct lark *L, enum ekind k)
{
    struct expr *x = expr_new(k, cur(L)->line);
    if (x) x->tok = L->pos;
    L->pos++;
    return x;
}

static struct expr *parse_atom(struct lark *L)
{
    skip_nl_in_parens(L);
    struct ltoken *t = cur(L);
    struct expr *x = NULL;
    switch (t->kind) {
    case LT_LPAR:
    case LT_LBRACK: {
        bool opt = t->kind == LT_LBRACK;
        L->pos++;
        if (++L->depth > LARK_MAX_DEPTH) {
            lerr(L, t->line, "%s", "nesting too deep");
            return NULL;
        }
        x = parse_expansions(L);
        L->depth--;
        if (!x) return NULL;
        skip_nl_in_parens(L);
        if (cur(L)->kind != (opt ? LT_RBRACK : LT_RPAR)) {
            lerr(L, cur(L)->line, "expected '%s'", opt ? "]" : ")");
            expr_free(x);
            return NULL;
        }
        L->pos++;
        return opt ? wrap_rep(L, x, 0, 1, t->line) : x;
    }
    case LT_STRING:
        if (L->t[L->pos + 1].kind == LT_DOTDOT && L->t[L->pos + 2].kind == LT_STRING) {
            x = expr_new(E_RANGE, t->line);
            if (x) {
                x->tok = L->pos;
                x->tok2 = L->pos + 2;
            }
            L->pos += 3;
            break;
        }
        x = parse_leaf(L, E_STR);
        break;
    case LT_REGEX:
        x = parse_leaf(L, E_REGEX);
        break;
    case LT_RULE:
        x = parse_leaf(L, E_RULE);
        break;
    case LT_TOKEN:
        x = parse_leaf(L, E_TOKEN);
        break;
    case LT_SPECIAL:
        x = parse_leaf(L, E_SPECIAL);
        break;
    case LT_JSON:
        x = parse_leaf(L, E_JSON);
        break;
    case LT_DIRECTIVE: {
        char nm[64];
        snprintf(nm, sizeof nm, "%%%.*s", (int)(t->len > 60 ? 60 : t->len), L->src + t->off);
        lerr(L, t->line, "%s is not supported inside a rule", nm);
        return NULL;
    }
    default:
        lerr(L, t->line, "%s", "expected a rule, terminal, string, regex or '('");
        return NULL;
    }
    if (!x) err_set(L->e, ERR_NOMEM, "out of memory");
    return x;
}

static struct expr *parse_expr(struct lark *L)
{
    struct expr *x = parse_atom(L);
    while (x) {
        struct ltoken *t = cur(L);
        if (t->kind == LT_OP && L->src[t->off] != '!') {
            char op = L->src[t->off];
            L->pos++;
            x = wrap_rep(L, x, op == '+' ? 1 : 0, op == '?' ? 1 : -1, t->line);
        } else if (t->kind == LT_TILDE) {
            L->pos++;
            int32_t a, b;
            if (parse_int(L, &a)) goto fail;
            b = a;
            if (cur(L)->kind == LT_DOTDOT) {
                L->pos++;
                if (parse_int(L, &b)) goto fail;
            }
            if (b < a) {
                lerr(L, t->line, "%s", "repetition ~ n..m with m < n");
                goto fail;
            }
            x = wrap_rep(L, x, a, b, t->line);
        } else if (t->kind == LT_LBRACE) {
            L->pos++;
            int32_t a = 0, b;
            if (cur(L)->kind == LT_NUMBER && parse_int(L, &a)) goto fail;
            b = a;
            if (cur(L)->kind == LT_COMMA) {
                L->pos++;
                b = -1;
                if (cur(L)->kind == LT_NUMBER && parse_int(L, &b)) goto fail;
            }
            if (cur(L)->kind != LT_RBRACE) {
                lerr(L, t->line, "%s", "expected '}' in {m,n}");
                goto fail;
            }
            L->pos++;
            if (b >= 0 && b < a) {
                lerr(L, t->line, "%s", "repetition {m,n} with n < m");
                goto fail;
            }
            x = wrap_rep(L, x, a, b, t->line);
        } else {
            break;
        }
    }
    return x;
fail:
    expr_free(x);
    return NULL;
}

static bool starts_atom(enum ltok k)
{
    return k == LT_LPAR || k == LT_LBRACK || k == LT_STRING || k == LT_REGEX || k == LT_RULE ||
           k == LT_TOKEN || k == LT_SPECIAL || k == LT_JSON || k == LT_DIRECTIVE;
}

static struct expr *parse_seq(struct lark *L)
{
    struct expr *s = expr_new(E_SEQ, cur(L)->line);
    if (!s) {
        err_set(L->e, ERR_NOMEM, "out of memory");
        return NULL;
    }
    for (;;) {
        skip_nl_in_parens(L);
        if (!starts_atom(cur(L)->kind)) break;
        /* a new definition `name:` on the same logical line is not part of this sequence */
        if ((cur(L)->kind == LT_RULE || cur(L)->kind == LT_TOKEN) &&
            L->t[L->pos + 1].kind == LT_COLON)
            break;
        struct expr *x = parse_expr(L);
        if (!x) {
            expr_free(s);
            return NULL;
        }
        if (expr_add(s, x)) {
            expr_free(x);
            expr_free(s);
            err_set(L->e, ERR_NOMEM, "out of memory");
            return NULL;
        }
    }
    if (cur(L)->kind == LT_ARROW) { /* alias: irrelevant for matching */
        L->pos++;
        if (cur(L)->kind == LT_RULE) L->pos++;
    }
    return s;
}

static struct expr *parse_expansions(struct lark *L)
{
    struct expr *a = expr_new(E_ALT, cur(L)->line);
    if (!a) {
        err_set(L->e, ERR_NOMEM, "out of memory");
        return NULL;
    }
    for (;;) {
        struct expr *s = parse_seq(L);
        if (!s || expr_add(a, s)) {
            if (s) err_set(L->e, ERR_NOMEM, "out of memory");
            expr_free(s);
            expr_free(a);
            return NULL;
        }
        /* continuation lines start with '|' */
        int32_t p = L->pos;
        while (L->t[p].kind == LT_NL)
            p++;
        if (L->t[p].kind != LT_VBAR) break;
        L->pos = p + 1;
    }
    return a;
}

/* ------------------------------------------------------------------------------------------ */
/* Names                                                                                       */

static uint32_t name_hash(const char *s, size_t n)
{
    return (uint32_t)hash_fnv1a64(s, n);
}

static struct lname *find_name(struct lark *L, const char *s, size_t n)
{
    if (!L->ntab_cap) return NULL;
    for (uint32_t j = name_hash(s, n) & (L->ntab_cap - 1); L->ntab[j];
         j = (j + 1) & (L->ntab_cap - 1)) {
        struct lname *x = &L->names[L->ntab[j] - 1];
        if (strlen(x->name) == n && !memcmp(x->name, s, n)) return x;
    }
    return NULL;
}

static int name_index(struct lark *L, int32_t i)
{
    if ((uint32_t)(L->n_names + 1) * 2 > L->ntab_cap) {
        uint32_t nc = L->ntab_cap ? L->ntab_cap * 2 : 64;
        int32_t *nt = calloc(nc, sizeof *nt);
        if (!nt) return -1;
        for (uint32_t k = 0; k < L->ntab_cap; k++) {
            if (!L->ntab[k]) continue;
            const char *nm = L->names[L->ntab[k] - 1].name;
            uint32_t j = name_hash(nm, strlen(nm)) & (nc - 1);
            while (nt[j])
                j = (j + 1) & (nc - 1);
            nt[j] = L->ntab[k];
        }
        free(L->ntab);
        L->ntab = nt;
        L->ntab_cap = nc;
    }
    const char *nm = L->names[i].name;
    uint32_t j = name_hash(nm, strlen(nm)) & (L->ntab_cap - 1);
    while (L->ntab[j])
        j = (j + 1) & (L->ntab_cap - 1);
    L->ntab[j] = i + 1;
    return 0;
}

static struct lname *add_name(struct lark *L, enum lname_kind k, const char *s, size_t n)
{
    if (L->n_names == L->cap_names) {
        int32_t nc = L->cap_names ? L->cap_names * 2 : 32;
        struct lname *nn = realloc(L->names, (size_t)nc * sizeof *nn);
        if (!nn) return NULL;
        L->names = nn;
        L->cap_names = nc;
    }
    struct lname *x = &L->names[L->n_names];
    memset(x, 0, sizeof *x);
    x->kind = k;
    x->name = strndup(s, n);
    if (!x->name) return NULL;
    x->nt = x->term = x->ast = -1;
    x->def_tok = -1;
    if (name_index(L, L->n_names)) {
        free(x->name);
        return NULL;
    }
    L->n_names++;
    return x;
}

/* %import common.X — the subset of lark's common.lark used in practice. */
static const struct {
    const char *name, *rx;
} common_terms[] = {
    {"DIGIT", "[0-9]"},
    {"HEXDIGIT", "[a-fA-F0-9]"},
    {"INT", "[0-9]+"},
    {"SIGNED_INT", "[+-]?[0-9]+"},
    {"DECIMAL", "[0-9]+\\.[0-9]*|\\.[0-9]+"},
    {"FLOAT", "[0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?"},
    {"SIGNED_FLOAT", "[+-]?([0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?)"},
    {"NUMBER", "[0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+"},
    {"SIGNED_NUMBER",
     "[+-]?([0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+)"},
    {"ESCAPED_STRING", "\"(\\\\.|[^\"\\\\\\n])*\""},
    {"LETTER", "[a-zA-Z]"},
    {"LCASE_LETTER", "[a-z]"},
    {"UCASE_LETTER", "[A-Z]"},
    {"WORD", "[a-zA-Z]+"},
    {"CNAME", "[_a-zA-Z][_a-zA-Z0-9]*"},
    {"WS_INLINE", "[ \\t]+"},
    {"WS", "[ \\t\\f\\r\\n]+"},
    {"CR", "\\r"},
    {"LF", "\\n"},
    {"NEWLINE", "(\\r?\\n)+"},
};

static int import_common(struct lark *L, const char *s, size_t n, int line)
{
    for (size_t i = 0; i < sizeof common_terms / sizeof common_terms[0]; i++) {
        if (strlen(common_terms[i].name) == n && !memcmp(common_terms[i].name, s, n)) {
            if (find_name(L, s, n)) return 0;
            struct lname *x = add_name(L, LN_TOKEN, s, n);
            if (!x) return err_set(L->e, ERR_NOMEM, "out of memory");
            x->import_rx = common_terms[i].rx;
            return 0;
        }
    }
    char nm[80];
    snprintf(nm, sizeof nm, "%.*s", (int)(n > 60 ? 60 : n), s);
    return lerr(L, line, "%%import common.%s is not supported", nm);
}

/* ------------------------------------------------------------------------------------------ */
/* Terminals                                                                                   */

static int32_t new_terminal(struct lark *L, const char *name, size_t nlen, int32_t ast_root)
{
    struct grammar *g = L->g;
    int32_t t = grammar_add_term(g, name, nlen);
    if (t < 0) {
        err_set(L->e, ERR_INVALID, "grammar too large (more than %d terminals)", GRAMMAR_MAX_TERMS);
        return -1;
    }
    if ((t & 255) == 0 && grammar_check_time(g, L->e)) return -1;
    int32_t lo = g->nfa.n;
    int32_t st = rx_nfa_add(&g->nfa, &L->ast, ast_root, t, L->e);
    if (st < 0) return -1;
    g->terms[t].nfa_start = st;
    g->terms[t].nfa_lo = lo;
    g->terms[t].nfa_hi = g->nfa.n;
    g->terms[t].nullable = rx_ast_nullable(&L->ast, ast_root);
    return t;
}

static int32_t term_ast(struct lark *L, const struct expr *x);

static int32_t token_ast(struct lark *L, struct lname *nm, int line)
{
    if (nm->state == 2) return nm->ast;
    if (nm->state == 1) return lerr(L, line, "terminal %s refers to itself", nm->name);
    nm->state = 1;
    int32_t r;
    if (nm->import_rx) {
        r = rx_parse(&L->ast, nm->import_rx, strlen(nm->import_rx), L->e);
    } else {
        int32_t save = L->pos;
        L->pos = nm->def_tok;
        struct expr *x = parse_expansions(L);
        L->pos = save;
        if (!x) return -1;
        r = term_ast(L, x);
        expr_free(x);
    }
    if (r < 0) return -1;
    nm->state = 2;
    nm->ast = r;
    return r;
}

static int32_t term_ast(struct lark *L, const struct expr *x)
{
    struct rx_ast *A = &L->ast;
    int32_t r = -1;
    switch (x->kind) {
    case E_SEQ:
        r = rx_literal(A, "", 0, false);
        for (int32_t i = 0; i < x->n && r >= 0; i++) {
            int32_t k = term_ast(L, x->kids[i]);
            if (k < 0) return -1;
            r = rx_cat(A, r, k);
        }
        break;
    case E_ALT:
        for (int32_t i = 0; i < x->n; i++) {
            int32_t k = term_ast(L, x->kids[i]);
            if (k < 0) return -1;
            r = i == 0 ? k : rx_alt(A, r, k);
            if (r < 0) break;
        }
        break;
    case E_REP: {
        int32_t k = term_ast(L, x->kids[0]);
        if (k < 0) return -1;
        r = rx_repeat(A, k, x->min, x->max);
        break;
    }
    case E_STR: {
        const struct ltoken *t = &L->t[x->tok];
        r = rx_literal(A, t->val, t->vlen, t->icase);
        break;
    }
    case E_RANGE: {
        const struct ltoken *a = &L->t[x->tok], *b = &L->t[x->tok2];
        char pat[32];
        if (a->vlen != 1 || b->vlen != 1 || (uint8_t)a->val[0] > (uint8_t)b->val[0] ||
            (uint8_t)a->val[0] >= 0x80 || (uint8_t)b->val[0] >= 0x80)
            return lerr(L, x->line, "%s", "\"a\"..\"z\" ranges need single ASCII characters");
        snprintf(pat, sizeof pat, "[\\x%02x-\\x%02x]", (uint8_t)a->val[0], (uint8_t)b->val[0]);
        r = rx_parse(A, pat, strlen(pat), L->e);
        break;
    }
    case E_REGEX: {
        const struct ltoken *t = &L->t[x->tok];
        r = rx_parse(A, t->val, t->vlen, L->e);
        if (r < 0) err_wrap(L->e, "lark grammar, line %d", t->line);
        return r;
    }
    case E_TOKEN: {
        const struct ltoken *t = &L->t[x->tok];
        struct lname *nm = find_name(L, L->src + t->off, t->len);
        if (!nm || nm->kind != LN_TOKEN) {
            char n[80];
            snprintf(n, sizeof n, "%.*s", (int)(t->len > 60 ? 60 : t->len), L->src + t->off);
            return lerr(L, t->line, "undefined terminal %s", n);
        }
        return token_ast(L, nm, t->line);
    }
    case E_RULE: {
        const struct ltoken *t = &L->t[x->tok];
        char n[80];
        snprintf(n, sizeof n, "%.*s", (int)(t->len > 60 ? 60 : t->len), L->src + t->off);
        return lerr(L, t->line, "a terminal cannot refer to the rule %s", n);
    }
    case E_SPECIAL:
        return lerr(L, x->line, "%s", "special tokens cannot be part of a terminal");
    case E_JSON:
        return lerr(L, x->line, "%s", "%json cannot be part of a terminal");
    }
    if (r < 0 && L->e && L->e->code == ERR_OK) err_set(L->e, ERR_NOMEM, "out of memory");
    return r;
}

/* Returns the grammar symbol for terminal t: t itself, or a helper `t | ε` nonterminal when the
 * terminal matches the empty string (lexemes are never empty). */
static int32_t term_symbol(struct lark *L, int32_t t)
{
    struct grammar *g = L->g;
    if (!g->terms[t].nullable) return t;
    char nm[64];
    snprintf(nm, sizeof nm, "%s?", g->terms[t].name);
    int32_t nt = grammar_add_nt(g, nm, strlen(nm));
    if (nt < 0) return err_set(L->e, ERR_NOMEM, "out of memory");
    if (grammar_add_prod(g, nt, &t, 1) < 0 || grammar_add_prod(g, nt, NULL, 0) < 0)
        return err_set(L->e, ERR_NOMEM, "out of memory");
    return SYM_NT | nt;
}

static int32_t named_terminal(struct lark *L, struct lname *nm, int line)
{
    if (nm->term >= 0) return nm->term;
    /* a terminal defined as exactly one special token is that special token */
    if (!nm->import_rx && L->t[nm->def_tok].kind == LT_SPECIAL) {
        int32_t p = nm->def_tok + 1;
        if (L->t[p].kind == LT_NL || L->t[p].kind == LT_EOF) return -2;
    }
    int32_t r = token_ast(L, nm, line);
    if (r < 0) return -1;
    int32_t t = new_terminal(L, nm->name, strlen(nm->name), r);
    if (t < 0) return -1;
    int32_t sym = term_symbol(L, t);
    if (sym < 0) return -1;
    nm->term = sym;
    return sym;
}

static int32_t special_terminal(struct lark *L, int32_t tok)
{
    struct grammar *g = L->g;
    const struct ltoken *t = &L->t[tok];
    const char *s = L->src + t->off;
    size_t n = t->len;
    int32_t id = -1;
    if (n >= 4 && s[1] == '[' && s[n - 2] == ']') {
        char *end;
        long v = strtol(s + 2, &end, 10);
        if (end != s + n - 2 || v < 0 || v >= grammar_vocab_n_tokens(g->vi)) {
            char nm[80];
            snprintf(nm, sizeof nm, "%.*s", (int)(n > 60 ? 60 : n), s);
            return lerr(L, t->line, "special token %s: not a token id of this vocabulary", nm);
        }
        id = (int32_t)v;
        if (!grammar_vocab_is_special(g->vi, id)) {
            char nm[80];
            snprintf(nm, sizeof nm, "%.*s", (int)(n > 60 ? 60 : n), s);
            return lerr(L, t->line, "%s is not a special token: match its text with a string", nm);
        }
    } else {
        id = grammar_vocab_find_special(g->vi, s, n);
        if (id < 0) {
            char nm[80];
            snprintf(nm, sizeof nm, "%.*s", (int)(n > 60 ? 60 : n), s);
            return lerr(L, t->line, "special token %s is not in the vocabulary", nm);
        }
    }
    for (int32_t i = 0; i < g->n_terms; i++)
        if (g->terms[i].special == id) return i;
    int32_t x = grammar_add_term(g, s, n);
    if (x < 0) return err_set(L->e, ERR_NOMEM, "out of memory");
    g->terms[x].special = id;
    g->terms[x].nfa_start = -1;
    return x;
}

/* ------------------------------------------------------------------------------------------ */
/* Rules -> BNF                                                                                */

struct symbuf {
    int32_t *s;
    int32_t n, cap;
};

static int sb_push(struct symbuf *b, int32_t x)
{
    if (b->n == b->cap) {
        int32_t nc = b->cap ? b->cap * 2 : 16;
        int32_t *n = realloc(b->s, (size_t)nc * sizeof *n);
        if (!n) return -1;
        b->s = n;
        b->cap = nc;
    }
    b->s[b->n++] = x;
    return 0;
}

static int32_t lower_single(struct lark *L, const struct expr *x, const char *ctx);
static int lower_seq(struct lark *L, const struct expr *x, struct symbuf *out, const char *ctx);
static int32_t compile_json(struct lark *L, int32_t tok);

static int32_t helper_nt(struct lark *L, const char *ctx)
{
    char nm[96];
    snprintf(nm, sizeof nm, "%s#%d", ctx, ++L->helper_count);
    int32_t nt = grammar_add_nt(L->g, nm, strlen(nm));
    if (nt < 0) err_set(L->e, ERR_NOMEM, "out of memory");
    return nt;
}

static int add_prod_chk(struct lark *L, int32_t lhs, const int32_t *rhs, int32_t n)
{
    const struct grammar *g = L->g;
    int32_t max = g->budget.max_productions > 0 && g->budget.max_productions < GRAMMAR_MAX_PRODS
                      ? g->budget.max_productions
                      : GRAMMAR_MAX_PRODS;
    if (g->n_prods >= max)
        return err_set(L->e, ERR_INVALID,
                       "grammar too large (more than %d productions, the compile budget)", max);
    if (grammar_add_prod(L->g, lhs, rhs, n) < 0) return err_set(L->e, ERR_NOMEM, "out of memory");
    if ((g->n_prods & 1023) == 0 && grammar_check_time(g, L->e)) return -1;
    return 0;
}

/* Appends the lowering of x to out. */
static int lower_into(struct lark *L, const struct expr *x, struct symbuf *out, const char *ctx)
{
    if (x->kind == E_SEQ) return lower_seq(L, x, out, ctx);
    if (x->kind == E_ALT && x->n == 1) return lower_into(L, x->kids[0], out, ctx);
    if (x->kind == E_REP && x->max >= 0 && x->min == x->max) {
        if (x->min > LARK_MAX_EXPAND) return lerr(L, x->line, "%s", "repetition count too large");
        int32_t s = lower_single(L, x->kids[0], ctx);
        if (s < 0 && s != -3) return -1;
        for (int32_t i = 0; i < x->min; i++)
            if (s != -3 && sb_push(out, s)) return err_set(L->e, ERR_NOMEM, "out of memory");
        return 0;
    }
    int32_t s = lower_single(L, x, ctx);
    if (s == -3) return 0; /* empty */
    if (s < 0) return -1;
    if (sb_push(out, s)) return err_set(L->e, ERR_NOMEM, "out of memory");
    return 0;
}

static int lower_seq(struct lark *L, const struct expr *x, struct symbuf *out, const char *ctx)
{
    for (int32_t i = 0; i < x->n; i++)
        if (lower_into(L, x->kids[i], out, ctx)) return -1;
    return 0;
}

/* Productions of nt from an E_ALT (or any expr as a single alternative). */
static int lower_alts(struct lark *L, int32_t nt, const struct expr *x, const char *ctx)
{
    if (x->kind == E_ALT) {
        for (int32_t i = 0; i < x->n; i++)
            if (lower_alts(L, nt, x->kids[i], ctx)) return -1;
        return 0;
    }
    struct symbuf b = {0};
    int rc = lower_into(L, x, &b, ctx);
    if (!rc) rc = add_prod_chk(L, nt, b.s, b.n);
    free(b.s);
    return rc;
}

/* One symbol for x. Returns a symbol, -3 for "nothing" (empty sequence), -1 on error. */
static int32_t lower_single(struct lark *L, const struct expr *x, const char *ctx)
{
    struct grammar *g = L->g;
    switch (x->kind) {
    case E_SEQ:
        if (x->n == 0) return -3;
        if (x->n == 1) return lower_single(L, x->kids[0], ctx);
        /* fallthrough */
    case E_ALT: {
        if (x->kind == E_ALT && x->n == 1) return lower_single(L, x->kids[0], ctx);
        int32_t nt = helper_nt(L, ctx);
        if (nt < 0) return -1;
        if (lower_alts(L, nt, x, ctx)) return -1;
        return SYM_NT | nt;
    }
    case E_REP: {
        int32_t s = lower_single(L, x->kids[0], ctx);
        if (s == -3) return -3;
        if (s < 0) return -1;
        int32_t min = x->min, max = x->max;
        if (min > LARK_MAX_EXPAND || max > LARK_MAX_EXPAND)
            return lerr(L, x->line, "%s", "repetition count too large");
        struct symbuf b = {0};
        int32_t nt = helper_nt(L, ctx);
        if (nt < 0) return -1;
        int rc = 0;
        for (int32_t i = 0; i < min && !rc; i++)
            rc = sb_push(&b, s);
        if (rc) goto nomem;
        if (max < 0) {
            /* star: S -> S s | ε (left recursive: no stack growth in Earley) */
            int32_t st = helper_nt(L, ctx);
            if (st < 0) goto fail;
            int32_t rhs[2] = {SYM_NT | st, s};
            if (add_prod_chk(L, st, rhs, 2) || add_prod_chk(L, st, NULL, 0)) goto fail;
            if (sb_push(&b, SYM_NT | st)) goto nomem;
        } else if (max > min) {
            /* opt_k -> s opt_{k+1} | ε, nested (max - min) deep */
            int32_t next = -1;
            for (int32_t k = 0; k < max - min; k++) {
                int32_t o = helper_nt(L, ctx);
                if (o < 0) goto fail;
                int32_t rhs[2] = {s, next >= 0 ? (SYM_NT | next) : 0};
                if (add_prod_chk(L, o, rhs, next >= 0 ? 2 : 1) || add_prod_chk(L, o, NULL, 0))
                    goto fail;
                next = o;
            }
            if (sb_push(&b, SYM_NT | next)) goto nomem;
        }
        rc = add_prod_chk(L, nt, b.s, b.n);
        free(b.s);
        return rc ? -1 : (SYM_NT | nt);
    nomem:
        err_set(L->e, ERR_NOMEM, "out of memory");
    fail:
        free(b.s);
        return -1;
    }
    case E_STR:
    case E_RANGE:
    case E_REGEX: {
        const struct ltoken *t = &L->t[x->tok];
        /* dedupe identical anonymous terminals */
        char key[128];
        if (x->kind == E_STR)
            snprintf(key, sizeof key, "\"%.*s\"%s", (int)(t->vlen > 100 ? 100 : t->vlen), t->val,
                     t->icase ? "i" : "");
        else if (x->kind == E_REGEX)
            snprintf(key, sizeof key, "/%.*s/", (int)(t->vlen > 100 ? 100 : t->vlen), t->val);
        else
            snprintf(key, sizeof key, "\"%s\"..\"%s\"", t->val, L->t[x->tok2].val);
        bool exact = (x->kind == E_STR ? t->vlen + 3 : t->vlen + 2) < sizeof key - 1;
        if (exact) {
            struct lname *nm = find_name(L, key, strlen(key));
            if (nm) return nm->term;
        }
        int32_t r = term_ast(L, x);
        if (r < 0) return -1;
        int32_t term = new_terminal(L, key, strlen(key), r);
        if (term < 0) return -1;
        int32_t sym = term_symbol(L, term);
        if (sym < 0) return -1;
        if (exact) {
            struct lname *nm = add_name(L, LN_TOKEN, key, strlen(key));
            if (!nm) return err_set(L->e, ERR_NOMEM, "out of memory");
            nm->term = sym;
            nm->state = 3; /* anonymous: never looked up as a terminal name (has quotes) */
        }
        (void)g;
        return sym;
    }
    case E_TOKEN: {
        const struct ltoken *t = &L->t[x->tok];
        struct lname *nm = find_name(L, L->src + t->off, t->len);
        if (!nm || nm->kind != LN_TOKEN) {
            char n[80];
            snprintf(n, sizeof n, "%.*s", (int)(t->len > 60 ? 60 : t->len), L->src + t->off);
            return lerr(L, t->line, "undefined terminal %s", n);
        }
        int32_t s = named_terminal(L, nm, t->line);
        if (s == -2) {
            s = special_terminal(L, nm->def_tok);
            if (s >= 0) nm->term = s;
        }
        return s;
    }
    case E_RULE: {
        const struct ltoken *t = &L->t[x->tok];
        struct lname *nm = find_name(L, L->src + t->off, t->len);
        if (!nm || nm->kind != LN_RULE) {
            char n[80];
            snprintf(n, sizeof n, "%.*s", (int)(t->len > 60 ? 60 : t->len), L->src + t->off);
            return lerr(L, t->line, "undefined rule %s", n);
        }
        return SYM_NT | nm->nt;
    }
    case E_SPECIAL:
        return special_terminal(L, x->tok);
    case E_JSON:
        return compile_json(L, x->tok);
    }
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Statements                                                                                  */

static int lark_module(struct grammar *g, const char *src, size_t len, const char *root_name,
                       int32_t *root_nt, int depth, int *json_counter, struct err *e);

static int32_t compile_json(struct lark *L, int32_t tok)
{
    const struct ltoken *t = &L->t[tok];
    if (L->json_depth > 20) return lerr(L, t->line, "%s", "%json nested too deeply");
    char prefix[32];
    snprintf(prefix, sizeof prefix, "j%d_", ++*(&L->json_count));
    struct buf out = {0};
    if (jsonschema_to_lark(t->val, t->vlen, prefix, &out, L->e)) {
        buf_free(&out);
        err_wrap(L->e, "lark grammar, line %d: %%json", t->line);
        return -1;
    }
    char root[48];
    snprintf(root, sizeof root, "%sroot", prefix);
    int32_t nt = -1;
    int rc = lark_module(L->g, out.data ? out.data : "", out.len, root, &nt, L->json_depth + 1,
                         &L->json_count, L->e);
    buf_free(&out);
    if (rc) {
        err_wrap(L->e, "lark grammar, line %d: in %%json sub-grammar", t->line);
        return -1;
    }
    return SYM_NT | nt;
}

static int skip_to_eol(struct lark *L)
{
    while (cur(L)->kind != LT_NL && cur(L)->kind != LT_EOF)
        L->pos++;
    return 0;
}

/* Pass 1: find definitions and directives. */
static int collect(struct lark *L)
{
    while (cur(L)->kind != LT_EOF) {
        struct ltoken *t = cur(L);
        if (t->kind == LT_NL) {
            L->pos++;
            continue;
        }
        if (t->kind == LT_OP && (L->src[t->off] == '?' || L->src[t->off] == '!') &&
            L->t[L->pos + 1].kind == LT_RULE) {
            L->pos++;
            t = cur(L);
        }
        if (t->kind == LT_RULE || t->kind == LT_TOKEN) {
            int32_t p = L->pos + 1;
            if (L->t[p].kind == LT_DOT && L->t[p + 1].kind == LT_NUMBER) p += 2; /* priority */
            if (L->t[p].kind == LT_LBRACK)
                return lerr(L, t->line, "%s", "rule parameters [..] are not supported");
            if (L->t[p].kind == LT_LBRACE)
                return lerr(L, t->line, "%s", "rule templates are not supported");
            if (L->t[p].kind != LT_COLON)
                return lerr(L, t->line, "%s", "expected ':' after a rule or terminal name");
            if (find_name(L, L->src + t->off, t->len)) {
                char n[80];
                snprintf(n, sizeof n, "%.*s", (int)(t->len > 60 ? 60 : t->len), L->src + t->off);
                return lerr(L, t->line, "%s is defined twice", n);
            }
            struct lname *nm =
                add_name(L, t->kind == LT_RULE ? LN_RULE : LN_TOKEN, L->src + t->off, t->len);
            if (!nm) return err_set(L->e, ERR_NOMEM, "out of memory");
            nm->def_tok = p + 1;
            if (nm->kind == LN_RULE) {
                nm->nt = grammar_add_nt(L->g, nm->name, strlen(nm->name));
                if (nm->nt < 0) return err_set(L->e, ERR_NOMEM, "out of memory");
            }
            /* skip the body: everything up to the next line that does not continue with '|' */
            L->pos = p + 1;
            int paren = 0;
            for (;;) {
                enum ltok k = cur(L)->kind;
                if (k == LT_EOF) break;
                if (k == LT_LPAR || k == LT_LBRACK) paren++;
                if (k == LT_RPAR || k == LT_RBRACK) paren--;
                if (k == LT_NL && paren <= 0) {
                    int32_t q = L->pos;
                    while (L->t[q].kind == LT_NL)
                        q++;
                    if (L->t[q].kind != LT_VBAR) break;
                    L->pos = q;
                    continue;
                }
                L->pos++;
            }
            continue;
        }
        if (t->kind == LT_DIRECTIVE) {
            const char *d = L->src + t->off;
            size_t n = t->len;
            if (n == 6 && !memcmp(d, "import", 6)) {
                L->pos++;
                struct ltoken *m = cur(L);
                if (m->kind != LT_RULE || m->len != 6 || memcmp(L->src + m->off, "common", 6))
                    return lerr(L, t->line, "%s", "only %import common.NAME is supported");
                L->pos++;
                if (cur(L)->kind == LT_DOT) {
                    L->pos++;
                    if (cur(L)->kind != LT_TOKEN)
                        return lerr(L, t->line, "%s", "%import common.NAME: NAME expected");
                    if (import_common(L, L->src + cur(L)->off, cur(L)->len, t->line)) return -1;
                    L->pos++;
                } else if (cur(L)->kind == LT_LPAR) {
                    L->pos++;
                    while (cur(L)->kind == LT_TOKEN || cur(L)->kind == LT_COMMA) {
                        if (cur(L)->kind == LT_TOKEN &&
                            import_common(L, L->src + cur(L)->off, cur(L)->len, t->line))
                            return -1;
                        L->pos++;
                    }
                    if (cur(L)->kind != LT_RPAR) return lerr(L, t->line, "%s", "expected ')'");
                    L->pos++;
                } else {
                    return lerr(L, t->line, "%s", "bad %import");
                }
                if (cur(L)->kind == LT_ARROW)
                    return lerr(L, t->line, "%s", "%import aliases are not supported");
                continue;
            }
            if (n == 6 && !memcmp(d, "ignore", 6)) {
                skip_to_eol(L); /* compiled in pass 2 */
                continue;
            }
            if (n == 10 && !memcmp(d, "llguidance", 10)) {
                L->pos++;
                if (cur(L)->kind == LT_LBRACE && L->t[L->pos + 1].kind == LT_RBRACE) {
                    L->pos += 2;
                    continue;
                }
                return lerr(L, t->line, "%s", "%llguidance options are not supported (only {})");
            }
            char nm[64];
            snprintf(nm, sizeof nm, "%%%.*s", (int)(n > 50 ? 50 : n), d);
            return lerr(L, t->line, "directive %s is not supported", nm);
        }
        return lerr(L, t->line, "%s", "expected a rule or terminal definition");
    }
    return 0;
}

/* Pass 2: compile %ignore and rule bodies. */
static int compile_all(struct lark *L)
{
    L->pos = 0;
    while (cur(L)->kind != LT_EOF) {
        struct ltoken *t = cur(L);
        if (t->kind == LT_DIRECTIVE && t->len == 6 && !memcmp(L->src + t->off, "ignore", 6)) {
            L->pos++;
            struct expr *x = parse_expansions(L);
            if (!x) return -1;
            int32_t r = term_ast(L, x);
            expr_free(x);
            if (r < 0) return -1;
            int32_t term = new_terminal(L, "%ignore", 7, r);
            if (term < 0) return -1;
            struct grammar *g = L->g;
            g->terms[term].ignore = true;
            int32_t *n = realloc(g->ignore_starts, (size_t)(g->n_ignore + 1) * sizeof *n);
            if (!n) return err_set(L->e, ERR_NOMEM, "out of memory");
            g->ignore_starts = n;
            g->ignore_starts[g->n_ignore++] = g->terms[term].nfa_start;
            continue;
        }
        L->pos++;
    }
    for (int32_t i = 0; i < L->n_names; i++) {
        struct lname *nm = &L->names[i];
        if (nm->kind != LN_RULE) continue;
        L->pos = nm->def_tok;
        struct expr *x = parse_expansions(L);
        if (!x) return -1;
        struct ltoken *end = cur(L);
        if (end->kind != LT_NL && end->kind != LT_EOF) {
            expr_free(x);
            return lerr(L, end->line, "unexpected token in the definition of %s", nm->name);
        }
        int rc = lower_alts(L, nm->nt, x, nm->name);
        expr_free(x);
        if (rc) return -1;
    }
    /* check terminal definitions too (errors even if unused) */
    for (int32_t i = 0; i < L->n_names; i++) {
        struct lname *nm = &L->names[i];
        if (nm->kind == LN_TOKEN && nm->state == 0 && !nm->import_rx &&
            L->t[nm->def_tok].kind != LT_SPECIAL) {
            if (token_ast(L, nm, L->t[nm->def_tok].line) < 0) return -1;
        }
    }
    return 0;
}

static int lark_module(struct grammar *g, const char *src, size_t len, const char *root_name,
                       int32_t *root_nt, int depth, int *json_counter, struct err *e)
{
    struct lark L = {
        .g = g, .src = src, .len = len, .e = e, .json_depth = depth, .json_count = *json_counter};
    int rc = -1;
    if (lex_all(&L)) goto out;
    if (collect(&L)) goto out;
    struct lname *root = find_name(&L, root_name, strlen(root_name));
    if (!root || root->kind != LN_RULE) {
        lerr(&L, 1, "the grammar has no `%s` rule", root_name);
        goto out;
    }
    *root_nt = root->nt;
    if (compile_all(&L)) goto out;
    rc = 0;
out:
    *json_counter = L.json_count;
    for (int32_t i = 0; i < L.nt; i++)
        free(L.t[i].val);
    free(L.t);
    for (int32_t i = 0; i < L.n_names; i++)
        free(L.names[i].name);
    free(L.names);
    free(L.ntab);
    rx_ast_deinit(&L.ast);
    return rc;
}

int lark_build(struct grammar *g, const char *src, size_t len, struct err *e)
{
    int32_t start_nt = grammar_add_nt(g, "start'", 6);
    if (start_nt < 0) return err_set(e, ERR_NOMEM, "out of memory");
    int32_t root = -1;
    int jc = 0;
    if (lark_module(g, src, len, "start", &root, 0, &jc, e)) return -1;
    int32_t rhs = SYM_NT | root;
    g->start_prod = grammar_add_prod(g, start_nt, &rhs, 1);
    if (g->start_prod < 0) return err_set(e, ERR_NOMEM, "out of memory");
    return grammar_finish(g, e);
}
