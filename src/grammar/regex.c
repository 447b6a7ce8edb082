/* regex — parser, UTF-8 NFA construction and lazy DFA. See regex.h for the syntax and invariants.
 */
#define _GNU_SOURCE /* mremap */
#include "grammar/regex.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "base/mem.h"
#include "base/utf8.h"

/* ------------------------------------------------------------------------------------------ */
/* AST                                                                                         */

void rx_ast_deinit(struct rx_ast *a)
{
    for (int32_t i = 0; i < a->n; i++)
        free(a->nodes[i].ranges);
    free(a->nodes);
    memset(a, 0, sizeof *a);
}

static int32_t node_new(struct rx_ast *a, enum rx_kind k)
{
    if (a->n == a->cap) {
        int32_t nc = a->cap ? a->cap * 2 : 64;
        struct rx_node *nn = realloc(a->nodes, (size_t)nc * sizeof *nn);
        if (!nn) return -1;
        a->nodes = nn;
        a->cap = nc;
    }
    struct rx_node *n = &a->nodes[a->n];
    memset(n, 0, sizeof *n);
    n->kind = k;
    n->a = n->b = -1;
    return a->n++;
}

int32_t rx_cat(struct rx_ast *a, int32_t x, int32_t y)
{
    if (x < 0 || y < 0) return -1;
    if (a->nodes[x].kind == RX_EMPTY) return y;
    if (a->nodes[y].kind == RX_EMPTY) return x;
    int32_t n = node_new(a, RX_CAT);
    if (n < 0) return -1;
    a->nodes[n].a = x;
    a->nodes[n].b = y;
    return n;
}

int32_t rx_alt(struct rx_ast *a, int32_t x, int32_t y)
{
    if (x < 0 || y < 0) return -1;
    int32_t n = node_new(a, RX_ALT);
    if (n < 0) return -1;
    a->nodes[n].a = x;
    a->nodes[n].b = y;
    return n;
}

int32_t rx_repeat(struct rx_ast *a, int32_t x, int32_t min, int32_t max)
{
    if (x < 0) return -1;
    int32_t n = node_new(a, RX_REPEAT);
    if (n < 0) return -1;
    a->nodes[n].a = x;
    a->nodes[n].min = min;
    a->nodes[n].max = max;
    return n;
}

static int32_t bytes_node(struct rx_ast *a, uint8_t lo, uint8_t hi)
{
    int32_t n = node_new(a, RX_BYTES);
    if (n < 0) return -1;
    a->nodes[n].min = lo;
    a->nodes[n].max = hi;
    return n;
}

/* A growable list of code point ranges. */
struct ranges {
    uint32_t *r;
    int32_t n, cap; /* n = number of uint32 (2 per range) */
};

static int ranges_add(struct ranges *rs, uint32_t lo, uint32_t hi)
{
    if (rs->n + 2 > rs->cap) {
        int32_t nc = rs->cap ? rs->cap * 2 : 16;
        uint32_t *nr = realloc(rs->r, (size_t)nc * sizeof *nr);
        if (!nr) return -1;
        rs->r = nr;
        rs->cap = nc;
    }
    rs->r[rs->n++] = lo;
    rs->r[rs->n++] = hi;
    return 0;
}

static int cmp_range(const void *x, const void *y)
{
    const uint32_t *a = x, *b = y;
    return a[0] < b[0] ? -1 : a[0] > b[0];
}

static void ranges_normalize(struct ranges *rs)
{
    if (rs->n == 0) return;
    qsort(rs->r, (size_t)rs->n / 2, 2 * sizeof(uint32_t), cmp_range);
    int32_t w = 0;
    for (int32_t i = 0; i < rs->n; i += 2) {
        uint32_t lo = rs->r[i], hi = rs->r[i + 1];
        if (w > 0 && lo <= rs->r[w - 1] + 1) {
            if (hi > rs->r[w - 1]) rs->r[w - 1] = hi;
        } else {
            rs->r[w++] = lo;
            rs->r[w++] = hi;
        }
    }
    rs->n = w;
}

#define CP_MAX 0x10FFFFu

static int ranges_negate(struct ranges *rs)
{
    ranges_normalize(rs);
    struct ranges out = {0};
    uint32_t next = 0;
    for (int32_t i = 0; i < rs->n; i += 2) {
        if (rs->r[i] > next && ranges_add(&out, next, rs->r[i] - 1)) goto fail;
        next = rs->r[i + 1] + 1;
    }
    if (next <= CP_MAX && ranges_add(&out, next, CP_MAX)) goto fail;
    free(rs->r);
    *rs = out;
    return 0;
fail:
    free(out.r);
    return -1;
}

static int32_t class_node(struct rx_ast *a, struct ranges *rs)
{
    ranges_normalize(rs);
    int32_t n = node_new(a, RX_CLASS);
    if (n < 0) {
        free(rs->r);
        return -1;
    }
    a->nodes[n].ranges = rs->r;
    a->nodes[n].n_ranges = rs->n / 2;
    rs->r = NULL;
    rs->n = rs->cap = 0;
    return n;
}

static int32_t cp_node(struct rx_ast *a, uint32_t cp)
{
    struct ranges rs = {0};
    if (ranges_add(&rs, cp, cp)) return -1;
    return class_node(a, &rs);
}


static uint32_t simple_fold(uint32_t c, bool up)
{
    if (up && c >= 'a' && c <= 'z') return c - 32;
    if (!up && c >= 'A' && c <= 'Z') return c + 32;
    return c;
}

int32_t rx_literal(struct rx_ast *a, const char *s, size_t len, bool icase)
{
    int32_t r = node_new(a, RX_EMPTY);
    for (size_t i = 0; i < len && r >= 0; i++) {
        uint8_t c = (uint8_t)s[i];
        int32_t x;
        if (icase && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
            struct ranges rs = {0};
            if (ranges_add(&rs, simple_fold(c, true), simple_fold(c, true)) ||
                ranges_add(&rs, simple_fold(c, false), simple_fold(c, false))) {
                free(rs.r);
                return -1;
            }
            x = class_node(a, &rs);
        } else {
            x = bytes_node(a, c, c);
        }
        r = rx_cat(a, r, x);
    }
    return r;
}

int32_t rx_copy(struct rx_ast *dst, const struct rx_ast *src, int32_t root)
{
    const struct rx_node *s = &src->nodes[root];
    int32_t a = -1, b = -1;
    if (s->kind == RX_CAT || s->kind == RX_ALT || s->kind == RX_REPEAT || s->kind == RX_LEN) {
        a = rx_copy(dst, src, s->a);
        if (a < 0) return -1;
    }
    if (s->kind == RX_CAT || s->kind == RX_ALT) {
        b = rx_copy(dst, src, s->b);
        if (b < 0) return -1;
    }
    int32_t n = node_new(dst, s->kind);
    if (n < 0) return -1;
    struct rx_node *d = &dst->nodes[n];
    *d = *s;
    d->a = a;
    d->b = b;
    if (s->kind == RX_CLASS) {
        d->ranges = malloc((size_t)(s->n_ranges * 2 + 1) * sizeof(uint32_t));
        if (!d->ranges) return -1;
        memcpy(d->ranges, s->ranges, (size_t)s->n_ranges * 2 * sizeof(uint32_t));
    }
    return n;
}

/* ------------------------------------------------------------------------------------------ */
/* Parser (recursive descent)                                                                   */

struct rparse {
    struct rx_ast *a;
    const char *p;
    size_t len, i;
    struct err *e;
    int depth;
    bool in_len; /* inside (?L...): (?T) allowed, no nested region */
};

static int32_t perr(struct rparse *P, const char *what)
{
    err_set(P->e, ERR_INVALID, "regex /%.*s/: %s at offset %zu", (int)(P->len > 80 ? 80 : P->len),
            P->p, what, P->i);
    return -1;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes one UTF-8 code point of the pattern (invalid bytes are taken as themselves). */
static uint32_t read_cp(struct rparse *P)
{
    const uint8_t *s = (const uint8_t *)P->p + P->i;
    size_t left = P->len - P->i;
    uint8_t c = s[0];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || (size_t)n > left) {
        P->i++;
        return c;
    }
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 31u) : n == 3 ? (c & 15u) : (c & 7u);
    for (int k = 1; k < n; k++) {
        if ((s[k] & 0xC0) != 0x80) {
            P->i++;
            return c;
        }
        cp = (cp << 6) | (s[k] & 63u);
    }
    P->i += (size_t)n;
    return cp;
}

/* Hex digits: fixed count n, or braced {H..} when n == 0. Returns code point or -1. */
static int64_t read_hex(struct rparse *P, int n)
{
    int64_t v = 0;
    if (n == 0) {
        if (P->i >= P->len || P->p[P->i] != '{') return -1;
        P->i++;
        int k = 0;
        while (P->i < P->len && P->p[P->i] != '}') {
            int h = hexval(P->p[P->i]);
            if (h < 0 || ++k > 8) return -1;
            v = v * 16 + h;
            P->i++;
        }
        if (P->i >= P->len || k == 0) return -1;
        P->i++;
    } else {
        for (int k = 0; k < n; k++) {
            if (P->i >= P->len) return -1;
            int h = hexval(P->p[P->i]);
            if (h < 0) return -1;
            v = v * 16 + h;
            P->i++;
        }
    }
    return v > CP_MAX ? -1 : v;
}

static int add_perl_class(struct ranges *rs, char c)
{
    switch (c) {
    case 'd':
        return ranges_add(rs, '0', '9');
    case 'w':
        return ranges_add(rs, '0', '9') | ranges_add(rs, 'A', 'Z') | ranges_add(rs, 'a', 'z') |
               ranges_add(rs, '_', '_');
    case 's':
        return ranges_add(rs, '\t', '\r') | ranges_add(rs, ' ', ' ');
    }
    return -1;
}

/* Parses an escape after '\'. Sets *cp for a single code point (returns 0), or fills rs with
 * a class (returns 1). Returns -1 on error. */
static int parse_escape(struct rparse *P, uint32_t *cp, struct ranges *rs)
{
    if (P->i >= P->len) return perr(P, "trailing backslash");
    char c = P->p[P->i++];
    int64_t v;
    switch (c) {
    case 'n':
        *cp = '\n';
        return 0;
    case 'r':
        *cp = '\r';
        return 0;
    case 't':
        *cp = '\t';
        return 0;
    case 'f':
        *cp = '\f';
        return 0;
    case 'v':
        *cp = '\v';
        return 0;
    case 'a':
        *cp = 7;
        return 0;
    case 'e':
        *cp = 27;
        return 0;
    case '0':
        *cp = 0;
        return 0;
    case 'x':
        v = (P->i < P->len && P->p[P->i] == '{') ? read_hex(P, 0) : read_hex(P, 2);
        if (v < 0) return perr(P, "bad \\x escape");
        *cp = (uint32_t)v;
        return 0;
    case 'u':
        v = (P->i < P->len && P->p[P->i] == '{') ? read_hex(P, 0) : read_hex(P, 4);
        if (v < 0) return perr(P, "bad \\u escape");
        /* A UTF-16 surrogate pair written as two \u escapes (JSON-Schema patterns do this). */
        if (v >= 0xD800 && v <= 0xDBFF && P->i + 6 <= P->len && P->p[P->i] == '\\' &&
            P->p[P->i + 1] == 'u') {
            size_t save = P->i;
            P->i += 2;
            int64_t lo = read_hex(P, 4);
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
                v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            } else {
                P->i = save;
            }
        }
        *cp = (uint32_t)v;
        return 0;
    case 'd':
    case 'w':
    case 's':
        if (add_perl_class(rs, c)) return perr(P, "out of memory");
        return 1;
    case 'D':
    case 'W':
    case 'S': {
        /* negate only this class, then merge into rs (which may hold earlier class items) */
        struct ranges neg = {0};
        int bad = add_perl_class(&neg, (char)(c + 32)) || ranges_negate(&neg);
        for (int32_t i = 0; !bad && i < neg.n; i += 2)
            bad = ranges_add(rs, neg.r[i], neg.r[i + 1]);
        free(neg.r);
        if (bad) return perr(P, "out of memory");
        return 1;
    }
    case 'b':
    case 'B':
        return perr(P, "word boundary \\b / \\B is not supported");
    case 'p':
    case 'P':
        return perr(P, "Unicode property classes \\p{..} are not supported");
    case 'A':
    case 'z':
    case 'Z':
    case 'G':
        return perr(P, "anchor escapes are not supported");
    case 'k':
        return perr(P, "named backreferences are not supported");
    default:
        if (c >= '1' && c <= '9') return perr(P, "backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return perr(P, "unknown escape");
        P->i--;
        *cp = read_cp(P);
        return 0;
    }
}

static int32_t parse_class(struct rparse *P)
{
    struct ranges rs = {0};
    bool neg = false;
    if (P->i < P->len && P->p[P->i] == '^') {
        neg = true;
        P->i++;
    }
    bool first = true;
    for (;;) {
        if (P->i >= P->len) {
            free(rs.r);
            return perr(P, "unterminated character class");
        }
        char c = P->p[P->i];
        if (c == ']' && !first) {
            P->i++;
            break;
        }
        first = false;
        if (c == '[' && P->i + 1 < P->len && P->p[P->i + 1] == ':') {
            free(rs.r);
            return perr(P, "POSIX classes [:name:] are not supported");
        }
        uint32_t lo;
        if (c == '\\') {
            P->i++;
            int k = parse_escape(P, &lo, &rs);
            if (k < 0) {
                free(rs.r);
                return -1;
            }
            if (k == 1) continue;
        } else {
            lo = read_cp(P);
        }
        uint32_t hi = lo;
        if (P->i + 1 < P->len && P->p[P->i] == '-' && P->p[P->i + 1] != ']') {
            P->i++;
            if (P->p[P->i] == '\\') {
                P->i++;
                struct ranges tmp = {0};
                int k = parse_escape(P, &hi, &tmp);
                free(tmp.r);
                if (k < 0) {
                    free(rs.r);
                    return -1;
                }
                if (k == 1) {
                    free(rs.r);
                    return perr(P, "class escape used as a range bound");
                }
            } else {
                hi = read_cp(P);
            }
            if (hi < lo) {
                free(rs.r);
                return perr(P, "range out of order in character class");
            }
        }
        if (ranges_add(&rs, lo, hi)) {
            free(rs.r);
            return perr(P, "out of memory");
        }
    }
    if (neg && ranges_negate(&rs)) {
        free(rs.r);
        return perr(P, "out of memory");
    }
    return class_node(P->a, &rs);
}

static int32_t parse_alt(struct rparse *P);

/* `(?L<m>,<n>:x)` after "(?" (n may be empty: unbounded), counts up to 1,000,000,000. */
static int32_t parse_len(struct rparse *P)
{
    P->i++; /* 'L' */
    int64_t v[2] = {-1, -1};
    for (int k = 0; k < 2; k++) {
        while (P->i < P->len && P->p[P->i] >= '0' && P->p[P->i] <= '9') {
            v[k] = (v[k] < 0 ? 0 : v[k]) * 10 + (P->p[P->i++] - '0');
            if (v[k] > 1000000000) return perr(P, "length region bound above 1000000000");
        }
        if (P->i >= P->len || P->p[P->i] != (k ? ':' : ',') || v[0] < 0)
            return perr(P, "bad length region (?L<m>,<n>:...)");
        P->i++;
    }
    if (v[1] >= 0 && v[1] < v[0]) return perr(P, "length region (?L<m>,<n>:...) with n < m");
    if (P->in_len) return perr(P, "nested length regions");
    if (++P->depth > 200) return perr(P, "groups nested too deeply");
    P->in_len = true;
    int32_t r = parse_alt(P);
    P->in_len = false;
    P->depth--;
    if (r < 0) return -1;
    if (P->i >= P->len || P->p[P->i] != ')') return perr(P, "missing )");
    P->i++;
    int32_t x = node_new(P->a, RX_LEN);
    if (x < 0) return perr(P, "out of memory");
    P->a->nodes[x].a = r;
    P->a->nodes[x].min = (int32_t)v[0];
    P->a->nodes[x].max = (int32_t)v[1];
    return x;
}

static int32_t parse_atom(struct rparse *P)
{
    char c = P->p[P->i];
    switch (c) {
    case '(': {
        P->i++;
        if (P->i < P->len && P->p[P->i] == '?') {
            P->i++;
            if (P->i < P->len && P->p[P->i] == ':') {
                P->i++;
            } else if (P->i < P->len && (P->p[P->i] == 'P' || P->p[P->i] == '<')) {
                if (P->p[P->i] == 'P') P->i++;
                if (P->i >= P->len || P->p[P->i] != '<') return perr(P, "bad group syntax");
                if (P->i + 1 < P->len && (P->p[P->i + 1] == '=' || P->p[P->i + 1] == '!'))
                    return perr(P, "lookbehind is not supported");
                while (P->i < P->len && P->p[P->i] != '>')
                    P->i++;
                if (P->i >= P->len) return perr(P, "unterminated group name");
                P->i++;
            } else if (P->i < P->len && (P->p[P->i] == '=' || P->p[P->i] == '!')) {
                return perr(P, "lookahead is not supported");
            } else if (P->i + 1 < P->len && P->p[P->i] == 'T' && P->p[P->i + 1] == ')') {
                P->i += 2;
                if (!P->in_len) return perr(P, "(?T) outside a length region (?L...)");
                int32_t t = node_new(P->a, RX_TICK);
                return t < 0 ? perr(P, "out of memory") : t;
            } else if (P->i < P->len && P->p[P->i] == 'L') {
                return parse_len(P);
            } else {
                return perr(P, "inline flags / special groups (?...) are not supported");
            }
        }
        if (++P->depth > 200) return perr(P, "groups nested too deeply");
        int32_t r = parse_alt(P);
        P->depth--;
        if (r < 0) return -1;
        if (P->i >= P->len || P->p[P->i] != ')') return perr(P, "missing )");
        P->i++;
        return r;
    }
    case '[':
        P->i++;
        return parse_class(P);
    case '.': {
        P->i++;
        struct ranges rs = {0};
        if (ranges_add(&rs, '\n', '\n') || ranges_negate(&rs)) {
            free(rs.r);
            return perr(P, "out of memory");
        }
        return class_node(P->a, &rs);
    }
    case '^':
        P->i++;
        return node_new(P->a, RX_BOL);
    case '$':
        P->i++;
        return node_new(P->a, RX_EOL);
    case '\\': {
        P->i++;
        uint32_t cp;
        struct ranges rs = {0};
        int k = parse_escape(P, &cp, &rs);
        if (k < 0) return -1;
        if (k == 1) return class_node(P->a, &rs);
        return cp_node(P->a, cp);
    }
    case '*':
    case '+':
    case '?':
        return perr(P, "quantifier without operand");
    default:
        return cp_node(P->a, read_cp(P));
    }
}

/* Parses {n}, {n,}, {n,m}, {,m} at P->i ('{'). Returns 1 if it was a quantifier, 0 if the '{' is
 * a literal (ECMA / PCRE leniency), -1 on error. */
static int parse_braces(struct rparse *P, int32_t *min, int32_t *max)
{
    size_t j = P->i + 1;
    int64_t a = -1, b = -1;
    bool comma = false;
    while (j < P->len && P->p[j] >= '0' && P->p[j] <= '9') {
        a = (a < 0 ? 0 : a) * 10 + (P->p[j] - '0');
        if (a > 10000000) a = 10000000;
        j++;
    }
    if (j < P->len && P->p[j] == ',') {
        comma = true;
        j++;
        while (j < P->len && P->p[j] >= '0' && P->p[j] <= '9') {
            b = (b < 0 ? 0 : b) * 10 + (P->p[j] - '0');
            if (b > 10000000) b = 10000000;
            j++;
        }
    }
    if (j >= P->len || P->p[j] != '}' || (a < 0 && b < 0)) return 0;
    if (a < 0) a = 0;
    if (!comma) b = a;
    if (b >= 0 && b < a) {
        perr(P, "repetition {n,m} with m < n");
        return -1;
    }
    if (a > 1000000 || b > 1000000) {
        perr(P, "repetition count above 1000000");
        return -1;
    }
    *min = (int32_t)a;
    *max = (int32_t)b;
    P->i = j + 1;
    return 1;
}

static int32_t parse_seq(struct rparse *P)
{
    int32_t r = node_new(P->a, RX_EMPTY);
    while (r >= 0 && P->i < P->len && P->p[P->i] != '|' && P->p[P->i] != ')') {
        int32_t x = parse_atom(P);
        if (x < 0) return -1;
        for (;;) {
            if (P->i >= P->len) break;
            char q = P->p[P->i];
            int32_t min, max;
            if (q == '*') {
                min = 0;
                max = -1;
                P->i++;
            } else if (q == '+') {
                min = 1;
                max = -1;
                P->i++;
            } else if (q == '?') {
                min = 0;
                max = 1;
                P->i++;
            } else if (q == '{') {
                int k = parse_braces(P, &min, &max);
                if (k < 0) return -1;
                if (k == 0) break;
            } else
                break;
            if (P->i < P->len && P->p[P->i] == '?')
                P->i++; /* lazy: same language */
            else if (P->i < P->len && P->p[P->i] == '+')
                return perr(P, "possessive quantifiers are not supported");
            enum rx_kind k = P->a->nodes[x].kind;
            if (k == RX_BOL || k == RX_EOL) return perr(P, "quantified anchor");
            if (k == RX_TICK || k == RX_LEN) return perr(P, "quantified (?T) or (?L...)");
            x = rx_repeat(P->a, x, min, max);
            if (x < 0) return perr(P, "out of memory");
        }
        r = rx_cat(P->a, r, x);
    }
    if (r < 0) return perr(P, "out of memory");
    return r;
}

static int32_t parse_alt(struct rparse *P)
{
    int32_t r = parse_seq(P);
    while (r >= 0 && P->i < P->len && P->p[P->i] == '|') {
        P->i++;
        int32_t y = parse_seq(P);
        if (y < 0) return -1;
        r = rx_alt(P->a, r, y);
        if (r < 0) return perr(P, "out of memory");
    }
    return r;
}

int32_t rx_parse(struct rx_ast *a, const char *pattern, size_t len, struct err *e)
{
    /* a local err: the node / range allocators fail with -1 and no message, so a failure that
     * left it unset was an allocation failure (found by the faultsim walk, docs/faultsim.md) */
    struct err le = {0};
    struct rparse P = {.a = a, .p = pattern, .len = len, .e = &le};
    int32_t r = parse_alt(&P);
    if (r >= 0 && P.i < len) r = perr(&P, "unmatched )");
    if (r >= 0) return r;
    if (le.code == ERR_OK) err_set(&le, ERR_NOMEM, "out of memory parsing regex");
    if (e) *e = le;
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* NFA                                                                                         */

void rx_nfa_deinit(struct rx_nfa *n)
{
    for (int32_t i = 0; i < n->n_loops; i++) {
        free(n->loops[i].tmin);
        free(n->loops[i].tmax);
        free(n->loops[i].itmin);
        free(n->loops[i].itmax);
    }
    free(n->s);
    free(n->loops);
    memset(n, 0, sizeof *n);
}

struct nbuild {
    struct rx_nfa *n;
    const struct rx_ast *a;
    struct err *e;
    int32_t region;     /* loop id of the length region being emitted, -1 outside */
    int32_t region_max; /* its max ticks (-1 unbounded) */
    int32_t inner;      /* loop id of the inner loop being emitted, -1 outside */
};

static int32_t ns_new(struct nbuild *B, uint8_t kind, uint8_t lo, uint8_t hi, int32_t out,
                      int32_t out2)
{
    struct rx_nfa *n = B->n;
    int32_t max = n->max_states > 0 ? n->max_states : RX_MAX_NFA_STATES;
    if (n->n >= max) {
        err_set(B->e, ERR_INVALID,
                "regex too large (more than %d automaton states, the compile budget; reduce "
                "{m,n} repetition counts or alternatives)",
                max);
        return -1;
    }
    if (n->n == n->cap) {
        int32_t nc = n->cap ? n->cap * 2 : 256;
        struct rx_nstate *ns = realloc(n->s, (size_t)nc * sizeof *ns);
        if (!ns) {
            err_set(B->e, ERR_NOMEM, "out of memory building regex automaton");
            return -1;
        }
        n->s = ns;
        n->cap = nc;
    }
    n->s[n->n] =
        (struct rx_nstate){.kind = kind, .lo = lo, .hi = hi, .out = out, .out2 = out2, .loop = -1};
    return n->n++;
}

static int32_t alt2(struct nbuild *B, int32_t x, int32_t y)
{
    if (x < 0) return y;
    return ns_new(B, NS_SPLIT, 0, 0, x, y);
}

/* The UTF-8 byte-range sequences of a class, in code point order. */
struct useq {
    uint8_t l[UTF8_MAX], h[UTF8_MAX];
    int n;
};
struct useqs {
    struct useq *v;
    int32_t n, cap;
    bool oom;
};

/* Appends the byte-range sequences for code points [lo,hi] (split so that each is a product of
 * byte ranges of one UTF-8 length). */
static void seq_collect(struct useqs *q, uint32_t lo, uint32_t hi)
{
    static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF};
    for (int k = 0; k < 3; k++) {
        if (lo <= bounds[k] && hi > bounds[k]) {
            seq_collect(q, lo, bounds[k]);
            seq_collect(q, bounds[k] + 1, hi);
            return;
        }
    }
    int len = hi < 0x80 ? 1 : hi < 0x800 ? 2 : hi < 0x10000 ? 3 : 4;
    for (int i = 1; i < len; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                seq_collect(q, lo, lo | m);
                seq_collect(q, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                seq_collect(q, lo, (hi & ~m) - 1);
                seq_collect(q, hi & ~m, hi);
                return;
            }
        }
    }
    if (q->n == q->cap) {
        int32_t nc = q->cap ? q->cap * 2 : 32;
        struct useq *nv = realloc(q->v, (size_t)nc * sizeof *nv);
        if (!nv) {
            q->oom = true;
            return;
        }
        q->v = nv;
        q->cap = nc;
    }
    struct useq *u = &q->v[q->n++];
    u->n = len;
    if (len == 1) {
        u->l[0] = (uint8_t)lo;
        u->h[0] = (uint8_t)hi;
    } else {
        utf8_encode(lo, (char *)u->l);
        utf8_encode(hi, (char *)u->h);
    }
}

/* Emits sequences v[0..n) (sharing their first `depth` ranges) as a trie: consecutive sequences
 * with the same byte range at `depth` share one NFA state, so a lexer state at a character
 * boundary holds one thread per distinct first-byte range of a class, not one per sequence
 * (a class such as "not whitespace" has dozens of sequences). Returns the entry state. */
static int32_t emit_trie(struct nbuild *B, const struct useq *v, int32_t n, int depth,
                         int32_t next)
{
    int32_t acc = -1;
    for (int32_t i = 0; i < n;) {
        int32_t j = i + 1;
        while (j < n && v[j].n == v[i].n && v[j].l[depth] == v[i].l[depth] &&
               v[j].h[depth] == v[i].h[depth])
            j++;
        int32_t tail = v[i].n == depth + 1 ? next : emit_trie(B, v + i, j - i, depth + 1, next);
        if (tail < 0) return -1;
        int32_t st = ns_new(B, NS_BYTE, v[i].l[depth], v[i].h[depth], tail, -1);
        if (st < 0) return -1;
        acc = alt2(B, acc, st);
        if (acc < 0) return -1;
        i = j;
    }
    return acc;
}

bool rx_ast_nullable(const struct rx_ast *a, int32_t x)
{
    const struct rx_node *nd = &a->nodes[x];
    switch (nd->kind) {
    case RX_EMPTY:
    case RX_BOL:
    case RX_EOL:
        return true;
    case RX_CLASS:
    case RX_BYTES:
        return false;
    case RX_CAT:
        return rx_ast_nullable(a, nd->a) && rx_ast_nullable(a, nd->b);
    case RX_ALT:
        return rx_ast_nullable(a, nd->a) || rx_ast_nullable(a, nd->b);
    case RX_REPEAT:
        return nd->min == 0 || rx_ast_nullable(a, nd->a);
    case RX_TICK:
        return true;
    case RX_LEN: /* ticks follow characters: the empty string makes no tick */
        return nd->min == 0 && rx_ast_nullable(a, nd->a);
    }
    return false;
}

static bool big_repeat(const struct rx_node *nd)
{
    return nd->kind == RX_REPEAT && (nd->min > RX_NATIVE_COUNT || nd->max > RX_NATIVE_COUNT);
}

static bool has_big_repeat(const struct rx_ast *a, int32_t x)
{
    const struct rx_node *nd = &a->nodes[x];
    if (big_repeat(nd)) return true;
    if (nd->kind == RX_CAT || nd->kind == RX_ALT)
        return has_big_repeat(a, nd->a) || has_big_repeat(a, nd->b);
    if (nd->kind == RX_REPEAT || nd->kind == RX_LEN) return has_big_repeat(a, nd->a) || nd->kind == RX_LEN;
    return false;
}

/* Whether subtree x has a repetition (a loop or copies) inside. */
static bool has_repeat(const struct rx_ast *a, int32_t x)
{
    const struct rx_node *nd = &a->nodes[x];
    if (nd->kind == RX_REPEAT || nd->kind == RX_LEN) return true;
    if (nd->kind == RX_CAT || nd->kind == RX_ALT) return has_repeat(a, nd->a) || has_repeat(a, nd->b);
    return false;
}

static int32_t emit(struct nbuild *B, int32_t x, int32_t next);

/* x{m,n} with a counter: CNT_ENTER -> body -> CNT_END -> (body | continuation). */
/* Successors of a region body state and the ticks each step makes. */
static int succ_of(const struct rx_nstate *st, int32_t out[2], int *w)
{
    *w = st->kind == NS_CNT_TICK;
    out[0] = st->out;
    if (st->kind == NS_SPLIT) {
        out[1] = st->out2;
        return 2;
    }
    return st->kind == NS_ACCEPT || st->kind == NS_CNT_END || st->kind == NS_CNT_ENTER ? 0 : 1;
}

static int64_t tick_add(int64_t a, int64_t b)
{
    return a >= RX_TICKS_INF || b >= RX_TICKS_INF || a + b >= RX_TICKS_INF ? RX_TICKS_INF : a + b;
}

void rx_inner_ticks(const struct rx_loop *il, int32_t s, int64_t w, int64_t *tmin, int64_t *tmax,
                    int32_t cap)
{
    int64_t a = il->itmin[s - il->lo], b = il->itmax[s - il->lo];
    int64_t need = w < il->min ? il->min - w : 0, more = il->max - w;
    /* fewest: this iteration, the iterations min still asks for, the continuation */
    int64_t mn = a;
    if (need > 0) mn = il->btmin >= RX_TICKS_INF ? RX_TICKS_INF : tick_add(mn, need * il->btmin);
    *tmin = tick_add(mn, il->ctmin);
    /* most: this iteration, as many more as max allows, the continuation (capped) */
    int64_t mx = -1;
    if (b >= 0 && il->ctmax >= 0 && more >= 0) {
        if (il->btmax < 0)
            mx = need == 0 ? b + il->ctmax : -1;
        else
            mx = b + more * il->btmax + il->ctmax;
    }
    *tmax = mx > cap ? cap : mx;
}

/* Fewest / most ticks from each state in [lo, hi) to state `end` (0 there) into tmin / tmax
 * (indexed s - lo; tmax capped at cap), by relaxation; states are built continuation-first, so
 * in index order most successors are already final and few rounds are needed. Past 4096
 * rounds, the bounds give up (tmin 0, tmax = cap: no pruning). The inner loops of region R
 * (R->n_inner of them after loop id rid; NULL: none) are taken whole: their bodies are skipped
 * and their CNT_ENTER counts min .. max iterations of btmin / btmax ticks. */
static void ticks_relax(const struct rx_nfa *n, int32_t lo, int32_t hi, int32_t end, int32_t cap,
                        int32_t *tmin, int32_t *tmax, const struct rx_loop *R, int32_t rid)
{
    int32_t nb = hi - lo;
    for (int32_t i = 0; i < nb; i++) {
        tmin[i] = RX_TICKS_INF;
        tmax[i] = -1;
    }
#define TMIN(s) ((s) == end ? 0 : (s) >= lo && (s) < hi ? tmin[(s)-lo] : RX_TICKS_INF)
#define TMAX(s) ((s) == end ? 0 : (s) >= lo && (s) < hi ? tmax[(s)-lo] : -1)
    bool changed = true;
    for (int round = 0; changed; round++) {
        if (round == 4096) {
            for (int32_t i = 0; i < nb; i++) {
                tmin[i] = 0;
                tmax[i] = cap;
            }
            break;
        }
        changed = false;
        int32_t ii = 0; /* the next inner loop of R (inner loops are in state order) */
        for (int32_t s = lo; s < hi; s++) {
            const struct rx_loop *il = NULL;
            if (R) {
                while (ii < R->n_inner && n->loops[rid + 1 + ii].hi < s)
                    ii++;
                if (ii < R->n_inner && s >= n->loops[rid + 1 + ii].lo) {
                    il = &n->loops[rid + 1 + ii];
                    if (s < il->hi) continue; /* its body: rx_inner_ticks */
                }
            }
            int32_t mn = tmin[s - lo], mx = tmax[s - lo];
            if (il && n->s[s].kind == NS_CNT_ENTER && n->s[s].loop == rid + 1 + ii) {
                int64_t cmn = TMIN(il->cont), cmx = TMAX(il->cont);
                int64_t a = il->min > 0 ? (il->btmin >= RX_TICKS_INF ? RX_TICKS_INF
                                                                      : il->min * (int64_t)il->btmin)
                                        : 0;
                int64_t v = tick_add(a, cmn);
                int64_t b = -1;
                if (cmx >= 0) {
                    if (il->btmax >= 0)
                        b = il->max * (int64_t)il->btmax + cmx;
                    else if (il->min == 0)
                        b = cmx;
                }
                if (b > cap) b = cap;
                if (v < mn) mn = (int32_t)v;
                if (b > mx) mx = (int32_t)b;
                if (mn != tmin[s - lo] || mx != tmax[s - lo]) {
                    tmin[s - lo] = mn;
                    tmax[s - lo] = mx;
                    changed = true;
                }
                continue;
            }
            int32_t o[2];
            int w;
            int k = succ_of(&n->s[s], o, &w);
            for (int j = 0; j < k; j++) {
                int32_t a = TMIN(o[j]), b = TMAX(o[j]);
                if (a < RX_TICKS_INF && a + w < mn) mn = a + w;
                if (b >= 0) {
                    int32_t v = b + w > cap ? cap : b + w;
                    if (v > mx) mx = v;
                }
            }
            if (mn != tmin[s - lo] || mx != tmax[s - lo]) {
                tmin[s - lo] = mn;
                tmax[s - lo] = mx;
                changed = true;
            }
        }
    }
#undef TMIN
#undef TMAX
}

/* tmin / tmax of a length region (see struct rx_loop); its inner loops' continuation ticks.
 * A state in an inner loop's body gets the values of its first iteration (w = 1: the fewest
 * ticks are largest there, the most too). tmin_max / tmax_fin bound those of every
 * iteration. */
static int region_ticks(struct rx_nfa *n, int32_t rid, int32_t end)
{
    struct rx_loop *L = &n->loops[rid];
    int32_t lo = L->lo, hi = L->hi, nb = hi - lo;
    L->tmin = malloc((size_t)(nb > 0 ? nb : 1) * sizeof *L->tmin);
    L->tmax = malloc((size_t)(nb > 0 ? nb : 1) * sizeof *L->tmax);
    if (!L->tmin || !L->tmax) return -1;
    int32_t cap = L->min;
    ticks_relax(n, lo, hi, end, cap, L->tmin, L->tmax, L->n_inner ? L : NULL, rid);
    L->tmin_max = 0;
    L->tmax_fin = 0;
    for (int32_t j = 0; j < L->n_inner; j++) {
        struct rx_loop *il = &n->loops[rid + 1 + j];
        int32_t c = il->cont;
        il->ctmin = c == end ? 0 : c >= lo && c < hi ? L->tmin[c - lo] : RX_TICKS_INF;
        il->ctmax = c == end ? 0 : c >= lo && c < hi ? L->tmax[c - lo] : -1;
        /* the loop's CNT_END (no byte state, never a thread's place): its CNT_ENTER's values,
         * so that the region's table holds no unreachable state */
        if (il->lo - 1 >= lo && il->hi < hi) {
            L->tmin[il->lo - 1 - lo] = L->tmin[il->hi - lo];
            L->tmax[il->lo - 1 - lo] = L->tmax[il->hi - lo];
        }
        for (int32_t s = il->lo; s < il->hi; s++) {
            int64_t mn, mx;
            rx_inner_ticks(il, s, 1, &mn, &mx, cap);
            L->tmin[s - lo] = (int32_t)mn;
            L->tmax[s - lo] = (int32_t)mx;
            /* the largest most-ticks below cap over the iterations w = 1 .. max (most ticks
             * fall with w: itmax + (max - w) * btmax + ctmax) */
            int64_t b = il->itmax[s - il->lo];
            if (b < 0 || il->ctmax < 0) continue;
            int64_t top = -1;
            if (il->btmax <= 0) {
                top = b + il->ctmax;
            } else {
                int64_t room = cap - 1 - b - il->ctmax;
                if (room >= 0) {
                    int64_t k = room / il->btmax;
                    if (k > il->max - 1) k = il->max - 1;
                    if (k < 0) k = 0;
                    top = b + k * il->btmax + il->ctmax;
                }
            }
            if (top >= 0 && top < cap && top > L->tmax_fin) L->tmax_fin = (int32_t)top;
        }
    }
    for (int32_t i = 0; i < nb; i++) {
        if (L->tmin[i] < RX_TICKS_INF && L->tmin[i] > L->tmin_max) L->tmin_max = L->tmin[i];
        if (L->tmax[i] < cap && L->tmax[i] > L->tmax_fin) L->tmax_fin = L->tmax[i];
    }
    return 0;
}

/* Minimum number of ticks on any path through x (0 if a path has none). */
static int64_t min_ticks(const struct rx_ast *a, int32_t x)
{
    const struct rx_node *nd = &a->nodes[x];
    switch (nd->kind) {
    case RX_TICK: return 1;
    case RX_CAT: return min_ticks(a, nd->a) + min_ticks(a, nd->b);
    case RX_ALT: {
        int64_t l = min_ticks(a, nd->a), r = min_ticks(a, nd->b);
        return l < r ? l : r;
    }
    case RX_REPEAT: return nd->min ? nd->min * min_ticks(a, nd->a) : 0;
    default: return 0;
    }
}

/* x{min,max} with a counter (nd: a RX_REPEAT or RX_LEN node): CNT_ENTER -> body -> CNT_END ->
 * (body | continuation). Inside a length region (B->region >= 0) the loop is an inner loop
 * whose count is the threads' second counter. */
static int32_t emit_counted(struct nbuild *B, const struct rx_node *nd, int32_t min, int32_t max,
                            int32_t next)
{
    struct rx_nfa *n = B->n;
    if (n->n_loops == n->cap_loops) {
        int32_t nc = n->cap_loops ? n->cap_loops * 2 : 8;
        struct rx_loop *nl = realloc(n->loops, (size_t)nc * sizeof *nl);
        if (!nl) {
            err_set(B->e, ERR_NOMEM, "out of memory building regex automaton");
            return -1;
        }
        n->loops = nl;
        n->cap_loops = nc;
    }
    int32_t id = n->n_loops++;
    int32_t child = nd->a;
    bool len = nd->kind == RX_LEN;
    int32_t parent = len ? -1 : B->region;
    n->loops[id] = (struct rx_loop){.min = min, .max = max, .len = len, .parent = parent};
    int32_t end = ns_new(B, NS_CNT_END, 0, 0, -1, -1);
    if (end < 0) return -1;
    n->s[end].loop = id;
    if (len) {
        B->region = id;
        B->region_max = max;
    }
    if (parent >= 0) B->inner = id;
    int32_t body = emit(B, child, end);
    if (len) B->region = -1;
    if (parent >= 0) B->inner = -1;
    if (body < 0) return -1;
    int32_t enter = ns_new(B, NS_CNT_ENTER, 0, 0, body, next);
    if (enter < 0) return -1;
    n->s[enter].loop = id;
    n->loops[id] = (struct rx_loop){.min = min,
                                    .max = max,
                                    .body = body,
                                    .cont = next,
                                    .lo = end + 1,
                                    .hi = enter,
                                    .len = len,
                                    .parent = parent,
                                    .n_inner = len ? n->n_loops - id - 1 : 0};
    if (parent >= 0) { /* an inner loop: ticks within one iteration */
        struct rx_loop *il = &n->loops[id];
        int32_t nb = il->hi - il->lo;
        il->itmin = malloc((size_t)(nb > 0 ? nb : 1) * sizeof *il->itmin);
        il->itmax = malloc((size_t)(nb > 0 ? nb : 1) * sizeof *il->itmax);
        if (!il->itmin || !il->itmax) {
            err_set(B->e, ERR_NOMEM, "out of memory building regex automaton");
            return -1;
        }
        ticks_relax(n, il->lo, il->hi, end, n->loops[parent].min, il->itmin, il->itmax, NULL, -1);
        il->btmin = il->itmin[body - il->lo];
        il->btmax = il->itmax[body - il->lo];
    }
    if (len && region_ticks(n, id, end)) {
        err_set(B->e, ERR_NOMEM, "out of memory building regex automaton");
        return -1;
    }
    return enter;
}

int32_t rx_nfa_loop_of(const struct rx_nfa *n, int32_t s)
{
    int32_t lo = 0, hi = n->n_loops;
    while (lo < hi) { /* top-level loops are in increasing, disjoint state ranges; an inner
                       * loop follows its region and stands for it here */
        int32_t mid = (lo + hi) / 2;
        int32_t top = n->loops[mid].parent >= 0 ? n->loops[mid].parent : mid;
        if (s < n->loops[top].lo)
            hi = mid;
        else if (s >= n->loops[top].hi)
            lo = mid + 1;
        else
            return top;
    }
    return -1;
}

int32_t rx_nfa_inner_of(const struct rx_nfa *n, int32_t s)
{
    int32_t r = rx_nfa_loop_of(n, s);
    if (r < 0) return -1;
    for (int32_t j = r + 1; j <= r + n->loops[r].n_inner; j++)
        if (s >= n->loops[j].lo && s < n->loops[j].hi) return j;
    return -1;
}

/* Emits node `x` so that it continues to state `next`; returns its entry state. Built
 * continuation-first, so no patch lists are needed. */
static int32_t emit(struct nbuild *B, int32_t x, int32_t next)
{
    const struct rx_node *nd = &B->a->nodes[x];
    switch (nd->kind) {
    case RX_EMPTY:
        return next;
    case RX_BYTES:
        return ns_new(B, NS_BYTE, (uint8_t)nd->min, (uint8_t)nd->max, next, -1);
    case RX_CLASS: {
        struct useqs q = {0};
        for (int32_t i = 0; i < nd->n_ranges; i++) {
            uint32_t lo = nd->ranges[2 * i], hi = nd->ranges[2 * i + 1];
            /* surrogates are not encodable in UTF-8 */
            if (lo <= 0xDFFF && hi >= 0xD800) {
                if (lo < 0xD800) seq_collect(&q, lo, 0xD7FF);
                if (hi > 0xDFFF) seq_collect(&q, 0xE000, hi);
                continue;
            }
            seq_collect(&q, lo, hi);
        }
        if (q.oom) {
            free(q.v);
            err_set(B->e, ERR_NOMEM, "out of memory building regex automaton");
            return -1;
        }
        if (q.n == 0) {
            free(q.v);
            err_set(B->e, ERR_INVALID, "regex: empty character class matches nothing");
            return -1;
        }
        int32_t acc = emit_trie(B, q.v, q.n, 0, next);
        free(q.v);
        return acc;
    }
    case RX_CAT: {
        int32_t b = emit(B, nd->b, next);
        return b < 0 ? -1 : emit(B, nd->a, b);
    }
    case RX_ALT: {
        int32_t a = emit(B, nd->a, next);
        if (a < 0) return -1;
        int32_t b = emit(B, nd->b, next);
        if (b < 0) return -1;
        return ns_new(B, NS_SPLIT, 0, 0, a, b);
    }
    case RX_BOL:
        return ns_new(B, NS_BOL, 0, 0, next, -1);
    case RX_EOL:
        return ns_new(B, NS_EOL, 0, 0, next, -1);
    case RX_LEN:
        if (B->region >= 0) {
            err_set(B->e, ERR_INVALID, "regex: nested length regions");
            return -1;
        }
        return emit_counted(B, nd, nd->min, nd->max, next);
    case RX_TICK: {
        if (B->region < 0) {
            err_set(B->e, ERR_INVALID, "regex: (?T) outside a length region");
            return -1;
        }
        int32_t t = ns_new(B, NS_CNT_TICK, 0, 0, next, -1);
        if (t >= 0) B->n->s[t].loop = B->region;
        return t;
    }
    case RX_REPEAT: {
        int32_t s = next;
        int32_t min = nd->min, max = nd->max;
        if (B->region >= 0) {
            /* inside a length region: no counter of its own (x{m,n} is expanded; x* stays a
             * loop, the ticks bound it); each iteration ticks at least once, so more than the
             * region's max iterations can never pass */
            int64_t mt = min_ticks(B->a, nd->a);
            int32_t lim0 = has_repeat(B->a, nd->a) ? RX_NATIVE_COUNT : RX_REGION_COUNT;
            if (mt > 0 && B->region_max >= 0 && (max >= 0 || min > lim0)) {
                int64_t cap = B->region_max / mt + 1;
                if (max < 0 || max > cap) max = (int32_t)cap;
                if (min > max) min = max;
            }
            /* copies multiply the lexer states a count can meet: past the counted-loop
             * threshold the masks would outgrow their budget, so refuse at compile time. A
             * body without repetitions of its own (one character, a fixed string: a hostname
             * label's {0,61}) may have up to RX_REGION_COUNT copies; composite bodies (a word
             * count such as (?:\S+\s+){0,49}) make a state per (copy, count) pair and each
             * copy's inner loops more: RX_NATIVE_COUNT */
            int32_t lim = lim0;
            /* an inner counted loop: the threads' second counter (regex.h), for a composite
             * body above RX_INNER_FROM (a word count) and any body above the copies a region
             * holds. One level: inside an inner loop's body, or with a body that can be empty,
             * copies up to the limit, then refused */
            bool inner_ok = B->inner < 0 && max >= 0 && max <= RX_MAX_INNER &&
                            !rx_ast_nullable(B->a, nd->a);
            if (inner_ok && lim0 == RX_NATIVE_COUNT && (min > RX_INNER_FROM || max > RX_INNER_FROM))
                return emit_counted(B, nd, min, max, next);
            if (min > lim || max > lim) {
                if (inner_ok) return emit_counted(B, nd, min, max, next);
                err_set(B->e, ERR_UNSUPPORTED,
                        "regex: a repetition count above %d inside a length region "
                        "(pattern or format with minLength/maxLength) is not supported %s",
                        lim,
                        B->inner >= 0 ? "inside another counted repetition"
                        : max < 0     ? "without a bound"
                        : max > RX_MAX_INNER ? "above 4094"
                                             : "for a body that can be empty");
                return -1;
            }
        } else if (big_repeat(nd) && !rx_ast_nullable(B->a, nd->a) &&
                   !has_big_repeat(B->a, nd->a))
            return emit_counted(B, nd, nd->min, nd->max, next);
        if (max < 0) {
            /* loop: L = split(child -> L, next) */
            int32_t loop = ns_new(B, NS_SPLIT, 0, 0, -1, s);
            if (loop < 0) return -1;
            int32_t body = emit(B, nd->a, loop);
            if (body < 0) return -1;
            B->n->s[loop].out = body;
            s = loop;
        } else {
            /* optional copies: x(x(x)?)? built from the inside out */
            for (int32_t k = 0; k < max - min; k++) {
                int32_t body = emit(B, nd->a, s);
                if (body < 0) return -1;
                s = ns_new(B, NS_SPLIT, 0, 0, body, next);
                if (s < 0) return -1;
            }
        }
        for (int32_t k = 0; k < min; k++) {
            s = emit(B, nd->a, s);
            if (s < 0) return -1;
        }
        return s;
    }
    }
    return -1;
}

int32_t rx_nfa_add(struct rx_nfa *n, const struct rx_ast *a, int32_t root, int32_t term,
                   struct err *e)
{
    struct nbuild B = {.n = n, .a = a, .e = e, .region = -1, .region_max = -1, .inner = -1};
    int32_t acc = ns_new(&B, NS_ACCEPT, 0, 0, term, -1);
    if (acc < 0) return -1;
    return emit(&B, root, acc);
}

bool rx_nfa_nullable(const struct rx_nfa *n, int32_t start)
{
    /* DFS over epsilon edges from the start (BOL allowed, EOL allowed: empty string is both). */
    int32_t *stack = malloc((size_t)n->n * sizeof *stack);
    uint8_t *seen = calloc((size_t)n->n, 1);
    bool found = false;
    if (!stack || !seen) goto out;
    int32_t sp = 0;
    stack[sp++] = start;
    seen[start] = 1;
    while (sp && !found) {
        int32_t s = stack[--sp];
        const struct rx_nstate *st = &n->s[s];
        int32_t outs[2] = {-1, -1};
        switch (st->kind) {
        case NS_ACCEPT:
            found = true;
            break;
        case NS_BYTE:
            break;
        case NS_CNT_END: /* bodies of counted loops are never nullable */
            if (n->loops[st->loop].len && n->loops[st->loop].min == 0)
                outs[0] = n->loops[st->loop].cont;
            break;
        case NS_CNT_ENTER:
            if (n->loops[st->loop].len)
                outs[0] = n->loops[st->loop].body;
            else if (n->loops[st->loop].min == 0)
                outs[0] = st->out2;
            break;
        case NS_CNT_TICK:
            break; /* an empty path makes no tick (ticks follow characters) */
        case NS_SPLIT:
            outs[0] = st->out;
            outs[1] = st->out2;
            break;
        default:
            outs[0] = st->out;
            break;
        }
        for (int k = 0; k < 2; k++)
            if (outs[k] >= 0 && !seen[outs[k]]) {
                seen[outs[k]] = 1;
                stack[sp++] = outs[k];
            }
    }
out:
    free(stack);
    free(seen);
    return found;
}

/* ------------------------------------------------------------------------------------------ */
/* DFA                                                                                         */

/* The byte classes of d's NFA: the coarsest partition of 0..255 in which every NS_BYTE range
 * is a union of classes (refined once per distinct range), numbered by first byte. A transition
 * is a function of the source state's threads whose range holds the byte (rx_dfa_compute:
 * nothing else looks at the byte), so it is the same for every byte of a class. -1: no memory
 * (then every byte is its own class). */
static int byte_classes(struct rx_dfa *d)
{
    uint64_t *seen = calloc(256 * 4, sizeof *seen); /* distinct ranges: bit hi of row lo */
    uint16_t cl[256], size[512], cnt[512], nid[512];
    int32_t n = 1;
    for (int b = 0; b < 256; b++)
        cl[b] = 0;
    size[0] = 256;
    for (int32_t i = 0; seen && i < d->nfa->n; i++) {
        const struct rx_nstate *st = &d->nfa->s[i];
        if (st->kind != NS_BYTE || st->lo > st->hi) continue;
        uint64_t *row = seen + (size_t)st->lo * 4;
        if (row[st->hi >> 6] >> (st->hi & 63) & 1) continue;
        row[st->hi >> 6] |= 1ull << (st->hi & 63);
        for (int b = st->lo; b <= st->hi; b++)
            cnt[cl[b]] = 0;
        for (int b = st->lo; b <= st->hi; b++)
            cnt[cl[b]]++;
        for (int b = st->lo; b <= st->hi; b++) {
            uint16_t c = cl[b];
            if (cnt[c] == size[c]) continue; /* the whole class lies in the range */
            if (cnt[c] != 0xffff) {          /* first byte of c met: the part inside splits off */
                size[c] = (uint16_t)(size[c] - cnt[c]);
                nid[c] = (uint16_t)n;
                size[n] = cnt[c];
                n++;
                cnt[c] = 0xffff;
            }
            cl[b] = nid[c];
        }
    }
    bool ok = seen != NULL;
    free(seen);
    if (!ok) { /* no memory: one class per byte (always right, no sharing) */
        for (int b = 0; b < 256; b++)
            cl[b] = (uint16_t)b;
        n = 256;
    }
    /* renumber by first byte; list the bytes of each class in order */
    int16_t ren[512];
    for (int32_t k = 0; k < n; k++)
        ren[k] = -1;
    int32_t m = 0;
    for (int b = 0; b < 256; b++) {
        if (ren[cl[b]] < 0) ren[cl[b]] = (int16_t)m++;
        d->cls[b] = (uint8_t)ren[cl[b]];
    }
    d->n_cls = m;
    for (int k = 0; k <= 256; k++)
        d->cls_off[k] = 0;
    for (int b = 0; b < 256; b++)
        d->cls_off[d->cls[b] + 1]++;
    for (int k = 0; k < m; k++)
        d->cls_off[k + 1] = (uint16_t)(d->cls_off[k + 1] + d->cls_off[k]);
    uint16_t pos[256];
    for (int k = 0; k < m; k++)
        pos[k] = d->cls_off[k];
    for (int b = 0; b < 256; b++)
        d->cls_bytes[pos[d->cls[b]]++] = (uint8_t)b;
    return ok ? 0 : -1;
}

/* Stores transition t of state s on byte b for b's whole class. */
static void trans_store(struct rx_dfa *d, uint32_t s, uint8_t b, uint32_t t)
{
    uint32_t *row = d->trans + (size_t)s * 256;
    if (d->no_classes) {
        row[b] = t;
        return;
    }
    unsigned c = d->cls[b];
    for (unsigned k = d->cls_off[c]; k < d->cls_off[c + 1]; k++)
        row[d->cls_bytes[k]] = t;
}

/* The transition table ([cap][256], 1 KB a state) is a mapping of its own: growing it moves
 * page tables (mremap), not bytes. With malloc + realloc every doubling copied the whole table
 * (8 MB at 8,192 states) into memory faulted in for the copy, inside whatever mask happened to
 * create the state: 10–40 ms masks of a few thousand work steps (docs/grammar.md "Byte
 * classes"). */
static uint32_t *trans_map(size_t cap)
{
    void *p = mmap(NULL, cap * 256 * sizeof(uint32_t), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static uint32_t *trans_remap(uint32_t *t, size_t cap, size_t nc)
{
    void *p = mremap(t, cap * 256 * sizeof *t, nc * 256 * sizeof *t, MREMAP_MAYMOVE);
    return p == MAP_FAILED ? NULL : p;
}

/* Populates the pages of the rows from d->trans_pop on, TRANS_POP_ROWS at a time, before state
 * n's row is first written: a page fault per 4 new states cost ~10 us each on a paravirtualized
 * VM (a lexer automaton of 12.7 MB took ~3,100 of them, inside the masks that made its states);
 * one madvise per 256 rows does the same work without the traps (mem_populate; where it cannot,
 * the pages fault in as before). */
#define TRANS_POP_ROWS 256
static void trans_populate(struct rx_dfa *d, int32_t n)
{
    if (n < d->trans_pop || d->trans_pop < 0) return;
    int32_t to = d->trans_pop + TRANS_POP_ROWS;
    if (to > d->cap) to = d->cap;
    if (to <= n) to = n + 1;
    if (mem_populate(d->trans + (size_t)d->trans_pop * 256,
                     (size_t)(to - d->trans_pop) * 256 * sizeof *d->trans)) {
        d->trans_pop = -1; /* not supported: fault in as before */
        return;
    }
    d->trans_pop = to;
}

int rx_dfa_init(struct rx_dfa *d, const struct rx_nfa *nfa, struct err *e)
{
    memset(d, 0, sizeof *d);
    d->nfa = nfa;
    /* rule 1 per transition costs a pair lookup per thread and candidate on every new state
     * (object key states: dozens of threads): the masks apply it to their keys instead */
    d->prune_rules = RX_PRUNE_COUNTS;
    size_t nn = (size_t)(nfa->n > 0 ? nfa->n : 1);
    d->mark = calloc(nn, sizeof *d->mark);
    d->mark_end = calloc(nn, sizeof *d->mark_end);
    d->stack_cap = (int32_t)(2 * nn + 4);
    d->stack = malloc((size_t)d->stack_cap * sizeof *d->stack);
    d->kbuf_cap = (int32_t)(nn + 4);
    d->kbuf = malloc((size_t)d->kbuf_cap * sizeof *d->kbuf);
    d->abuf = malloc((nn + 1) * sizeof *d->abuf); /* + the relaxed accept entry */
    d->hcap = 1024;
    d->htab = calloc(d->hcap, sizeof *d->htab);
    d->cap = 64;
    d->st = calloc((size_t)d->cap, sizeof *d->st);
    if (!d->mark || !d->mark_end || !d->stack || !d->kbuf || !d->abuf || !d->htab || !d->st) {
        rx_dfa_deinit(d);
        return err_set(e, ERR_NOMEM, "out of memory creating lexer automaton");
    }
    /* state 0: dead, all transitions to itself */
    d->trans = trans_map((size_t)d->cap);
    if (!d->trans) {
        rx_dfa_deinit(d);
        return err_set(e, ERR_NOMEM, "out of memory creating lexer automaton");
    }
    for (int b = 0; b < 256; b++)
        d->trans[b] = RX_DEAD;
    d->n = 1;
    (void)byte_classes(d); /* without memory every byte is its own class */
    return 0;
}

void rx_dfa_deinit(struct rx_dfa *d)
{
    for (int32_t i = 0; i < d->n; i++) {
        free(d->st[i].kernel);
        free(d->st[i].accept);
    }
    for (uint32_t i = 0; i < d->sh_cap; i++) {
        free(d->sh[i].src);
        free(d->sh[i].res);
        free(d->sh[i].acc);
    }
    free(d->sh);
    rx_prune_deinit(d);
    free(d->st);
    if (d->trans) munmap(d->trans, (size_t)d->cap * 256 * sizeof *d->trans);
    free(d->htab);
    free(d->mark);
    free(d->mark_end);
    free(d->rkeep);
    free(d->vis_key);
    free(d->vis_gen);
    free(d->stack);
    free(d->kbuf);
    free(d->abuf);
    memset(d, 0, sizeof *d);
}

static uint64_t hash_sets(const uint64_t *k, int32_t nk, const int32_t *a, int32_t na)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)nk;
    for (int32_t i = 0; i < nk; i++)
        h = (h ^ k[i]) * 1099511628211ull;
    h = (h ^ 0x9e3779b9u) * 1099511628211ull;
    for (int32_t i = 0; i < na; i++)
        h = (h ^ (uint32_t)a[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static int cmp_i32(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return a < b ? -1 : a > b;
}

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static int dfa_rehash(struct rx_dfa *d)
{
    uint32_t nc = d->hcap * 2;
    uint32_t *nt = calloc(nc, sizeof *nt);
    if (!nt) return -1;
    for (int32_t i = 1; i < d->n; i++) {
        const struct rx_dstate *s = &d->st[i];
        uint64_t h = hash_sets(s->kernel, s->n_kernel, s->accept, s->n_accept);
        uint32_t j = (uint32_t)h & (nc - 1);
        while (nt[j])
            j = (j + 1) & (nc - 1);
        nt[j] = (uint32_t)i + 1;
    }
    free(d->htab);
    d->htab = nt;
    d->hcap = nc;
    return 0;
}

/* Interns (kbuf[0..nk), abuf[0..na)) (both sorted) as a state id. */
static uint32_t dfa_intern(struct rx_dfa *d, int32_t nk, int32_t na)
{
    if (nk == 0 && na == 0) return RX_DEAD;
    uint64_t h = hash_sets(d->kbuf, nk, d->abuf, na);
    uint32_t j = (uint32_t)h & (d->hcap - 1);
    while (d->htab[j]) {
        const struct rx_dstate *s = &d->st[d->htab[j] - 1];
        if (s->n_kernel == nk && s->n_accept == na &&
            !memcmp(s->kernel, d->kbuf, (size_t)nk * sizeof(uint64_t)) &&
            !memcmp(s->accept, d->abuf, (size_t)na * sizeof(int32_t)))
            return d->htab[j] - 1;
        j = (j + 1) & (d->hcap - 1);
    }
    if (d->n >= RX_MAX_DFA_STATES) {
        d->over_bytes = true;
        goto fail;
    }
    size_t cost = 256 * sizeof *d->trans + sizeof *d->st + (size_t)(nk + 1) * sizeof(uint64_t) +
                  (size_t)(na + 1) * sizeof(int32_t);
    if (d->max_bytes && d->bytes + cost > d->max_bytes) {
        d->over_bytes = true;
        goto fail;
    }
    d->bytes += cost;
    if (d->n == d->cap) {
        int32_t nc = d->cap * 2;
        struct rx_dstate *ns = realloc(d->st, (size_t)nc * sizeof *ns);
        if (!ns) goto fail;
        d->st = ns;
        uint32_t *nt = trans_remap(d->trans, (size_t)d->cap, (size_t)nc);
        if (!nt) goto fail;
        d->trans = nt;
        d->cap = nc;
        d->trans_remaps++;
    }
    struct rx_dstate *s = &d->st[d->n];
    memset(s, 0, sizeof *s);
    s->kernel = malloc((size_t)(nk + 1) * sizeof(uint64_t));
    s->accept = malloc((size_t)(na + 1) * sizeof(int32_t));
    if (!s->kernel || !s->accept) {
        free(s->kernel);
        free(s->accept);
        goto fail;
    }
    memcpy(s->kernel, d->kbuf, (size_t)nk * sizeof(uint64_t));
    memcpy(s->accept, d->abuf, (size_t)na * sizeof(int32_t));
    s->n_kernel = nk;
    s->n_accept = na;
    s->sloop = -1;
    for (int32_t i = 0; i < nk; i++) { /* counted entries sort last (counter in the high bits) */
        uint32_t c1 = (uint32_t)(d->kbuf[i] >> 32);
        if (!c1) continue;
        int32_t li = rx_nfa_loop_of(d->nfa, rx_thread_state(d->kbuf[i]));
        if (s->sc1 == 0) {
            s->sloop = li;
            s->sc1 = c1;
        } else if (li != s->sloop || c1 != s->sc1) {
            s->sloop = -1;
            break;
        }
    }
    if (s->sloop < 0) s->sc1 = 0;
    s->sw = 0;
    for (int32_t i = 0; i < nk; i++) /* inner loop iterations (carried absolutely by shifts) */
        if (rx_thread_w(d->kbuf[i]) > s->sw) s->sw = rx_thread_w(d->kbuf[i]);
    trans_populate(d, d->n);
    memset(d->trans + (size_t)d->n * 256, 0xff, 256 * sizeof *d->trans);
    uint32_t id = (uint32_t)d->n++;
    d->htab[j] = id + 1;
    if ((uint32_t)d->n * 2 > d->hcap && dfa_rehash(d)) goto fail_after;
    return id;
fail_after:
    d->failed = true;
    return id;
fail:
    d->failed = true;
    return RX_DEAD;
}

/* A thread: NFA state, end flag (reached through $: only epsilon moves to accept remain) and
 * loop counter + 1 (0 = outside counted loops). */
#define TH(s, end, c1) ((uint64_t)(uint32_t)(s) | ((uint64_t)(end) << 31) | ((uint64_t)(c1) << 32))
#define TH_S(v) ((int32_t)((v)&0x7ffffu))
#define TH_W(v) ((uint32_t)(((v) >> RX_W_SHIFT) & 0xfffu))
#define TH_WB(v) ((uint32_t)((v)&RX_W_MASK)) /* the inner count's bits, in place */
#define TH_END(v) ((int)(((v) >> 31) & 1))
#define TH_C1(v) ((uint32_t)((v) >> 32))

static uint32_t mix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k;
}

static int vis_grow(struct rx_dfa *d)
{
    uint32_t nc = d->vis_cap ? d->vis_cap * 2 : 1024;
    uint64_t *nk = malloc(nc * sizeof *nk);
    uint32_t *ng = calloc(nc, sizeof *ng);
    if (!nk || !ng) {
        free(nk);
        free(ng);
        return -1;
    }
    for (uint32_t i = 0; i < d->vis_cap; i++) {
        if (d->vis_gen[i] != d->gen) continue;
        uint32_t j = mix64(d->vis_key[i]) & (nc - 1);
        while (ng[j] == d->gen)
            j = (j + 1) & (nc - 1);
        nk[j] = d->vis_key[i];
        ng[j] = d->gen;
    }
    free(d->vis_key);
    free(d->vis_gen);
    d->vis_key = nk;
    d->vis_gen = ng;
    d->vis_cap = nc;
    return 0;
}

/* Marks thread v visited; returns true if it was new. */
static bool visit(struct rx_dfa *d, uint64_t v)
{
    d->vis_steps++;
    if (TH_C1(v) == 0) {
        uint32_t *m = TH_END(v) ? d->mark_end : d->mark;
        int32_t s = TH_S(v);
        if (m[s] == d->gen) return false;
        m[s] = d->gen;
        return true;
    }
    if ((d->vis_n + 1) * 2 > d->vis_cap && vis_grow(d)) {
        d->failed = true;
        return false;
    }
    uint32_t j = mix64(v) & (d->vis_cap - 1);
    while (d->vis_gen[j] == d->gen) {
        if (d->vis_key[j] == v) return false;
        j = (j + 1) & (d->vis_cap - 1);
    }
    d->vis_gen[j] = d->gen;
    d->vis_key[j] = v;
    d->vis_n++;
    return true;
}

static int push(struct rx_dfa *d, int32_t *sp, uint64_t v)
{
    if (!visit(d, v)) return 0;
    if (*sp == d->stack_cap) {
        int32_t nc = d->stack_cap * 2;
        uint64_t *ns = realloc(d->stack, (size_t)nc * sizeof *ns);
        if (!ns) {
            d->failed = true;
            return -1;
        }
        d->stack = ns;
        d->stack_cap = nc;
    }
    d->stack[(*sp)++] = v;
    return 0;
}

/* A thread inside a length region that can no longer leave it (too many ticks already, or too
 * few left to reach min) is dropped; inside an inner loop the ticks left depend on its
 * iteration w too (rx_inner_ticks). */
static bool thread_can_finish(const struct rx_nfa *n, int32_t s, uint32_t c1, uint32_t w)
{
    int32_t li = rx_nfa_loop_of(n, s);
    if (li < 0 || !n->loops[li].len) return true;
    const struct rx_loop *L = &n->loops[li];
    int64_t cnt = (int64_t)c1 - 1;
    if (w) {
        int32_t il = rx_nfa_inner_of(n, s);
        if (il >= 0) {
            int64_t mn, mx;
            rx_inner_ticks(&n->loops[il], s, w, &mn, &mx, L->min);
            if (L->max >= 0 && cnt + mn > L->max) return false;
            return cnt + mx >= L->min;
        }
    }
    if (L->max >= 0 && cnt + L->tmin[s - L->lo] > L->max) return false;
    return cnt + L->tmax[s - L->lo] >= L->min;
}

/* Epsilon closure of the threads on d->stack[0..sp), adding byte-state threads to kbuf and
 * accepted terminals to abuf. `at_start`: BOL assertions pass. */
static void closure(struct rx_dfa *d, int32_t sp, bool at_start, int32_t *nk, int32_t *na)
{
    const struct rx_nstate *S = d->nfa->s;
    while (sp > 0 && !d->failed) {
        if (d->work_limit && d->work + d->vis_steps > d->work_limit) {
            d->over_work = true; /* abandoned: the caller stores nothing */
            return;
        }
        uint64_t v = d->stack[--sp];
        int32_t s = TH_S(v);
        int end = TH_END(v);
        uint32_t c1 = TH_C1(v);
        uint32_t wb = TH_WB(v); /* an inner loop's iteration: carried along its body */
        const struct rx_nstate *st = &S[s];
        switch (st->kind) {
        case NS_BYTE:
            if (end) break;
            if (c1 && !d->relax && !thread_can_finish(d->nfa, s, c1, TH_W(v))) break;
            if (*nk == d->kbuf_cap) {
                int32_t nc = d->kbuf_cap * 2;
                uint64_t *nb = realloc(d->kbuf, (size_t)nc * sizeof *nb);
                if (!nb) {
                    d->failed = true;
                    return;
                }
                d->kbuf = nb;
                d->kbuf_cap = nc;
            }
            d->kbuf[(*nk)++] = TH(s | wb, 0, c1);
            break;
        case NS_ACCEPT: {
            int32_t t = st->out;
            if (c1 < d->racc) d->racc = c1;
            if (c1 > d->racc_hi) d->racc_hi = c1;
            bool dup = false;
            for (int32_t i = 0; i < *na; i++)
                if (d->abuf[i] == t) {
                    dup = true;
                    break;
                }
            if (!dup) d->abuf[(*na)++] = t;
            break;
        }
        case NS_SPLIT:
            push(d, &sp, TH(st->out | wb, end, c1));
            push(d, &sp, TH(st->out2 | wb, end, c1));
            break;
        case NS_EPS:
            push(d, &sp, TH(st->out | wb, end, c1));
            break;
        case NS_BOL:
            if (at_start) push(d, &sp, TH(st->out | wb, end, c1));
            break;
        case NS_EOL:
            push(d, &sp, TH(st->out | wb, 1, c1));
            break;
        case NS_CNT_TICK: {
            const struct rx_loop *L = &d->nfa->loops[st->loop];
            int64_t cnt = (int64_t)c1; /* ticks so far, including this one */
            if (L->max >= 0 && cnt > L->max && !d->relax) break;
            if (L->max < 0 && cnt > L->min) cnt = L->min; /* all counts >= min alike */
            push(d, &sp, TH(st->out | wb, end, (uint32_t)cnt + 1));
            break;
        }
        case NS_CNT_ENTER: {
            const struct rx_loop *L = &d->nfa->loops[st->loop];
            d->entered = true; /* a counter started at 1: not relative to the source's */
            if (L->len) {
                push(d, &sp, TH(L->body, end, 1));
                break;
            }
            if (L->parent >= 0) { /* an inner loop: the second counter starts, ticks go on */
                if (L->max != 0) push(d, &sp, TH(L->body | 1u << RX_W_SHIFT, end, c1));
                if (L->min == 0) push(d, &sp, TH(L->cont, end, c1));
                break;
            }
            if (L->max != 0) push(d, &sp, TH(L->body, end, 1));
            if (L->min == 0) push(d, &sp, TH(L->cont, end, 0));
            break;
        }
        case NS_CNT_END: {
            const struct rx_loop *L = &d->nfa->loops[st->loop];
            if (L->len) { /* leaving a length region: c1 - 1 ticks */
                if ((int64_t)c1 - 1 >= L->min) push(d, &sp, TH(L->cont, end, d->relax ? c1 : 0));
                break;
            }
            if (L->parent >= 0) { /* an inner loop: w iterations done, including this one */
                uint32_t w = TH_W(v);
                if (w >= (uint32_t)L->min) push(d, &sp, TH(L->cont, end, c1));
                if (w < (uint32_t)L->max)
                    push(d, &sp, TH(L->body | (w + 1) << RX_W_SHIFT, end, c1));
                break;
            }
            int64_t done = (int64_t)c1; /* iterations completed, including this one */
            if (done >= L->min) push(d, &sp, TH(L->cont, end, d->relax ? c1 + 1 : 0));
            if (L->max < 0 || done < L->max || d->relax) {
                int64_t next = done;
                if (L->max < 0 && next > L->min) next = L->min; /* all counts >= min alike */
                push(d, &sp, TH(L->body, end, (uint32_t)next + 1));
            }
            break;
        }
        }
    }
}

static void next_gen(struct rx_dfa *d)
{
    d->vis_n = 0;
    d->vis_steps = 0;
    if (++d->gen == 0) {
        memset(d->mark, 0, (size_t)d->nfa->n * sizeof *d->mark);
        memset(d->mark_end, 0, (size_t)d->nfa->n * sizeof *d->mark_end);
        if (d->vis_gen) memset(d->vis_gen, 0, d->vis_cap * sizeof *d->vis_gen);
        d->gen = 1;
    }
}

uint32_t rx_dfa_start(struct rx_dfa *d, const int32_t *starts, int32_t n)
{
    if (n == 0 || d->failed || d->over_work) return RX_DEAD;
    next_gen(d);
    int32_t sp = 0;
    for (int32_t i = 0; i < n; i++)
        push(d, &sp, TH(starts[i], 0, 0));
    int32_t nk = 0, na = 0;
    closure(d, sp, true, &nk, &na);
    d->work += d->vis_steps;
    if (d->failed || d->over_work) return RX_DEAD;
    qsort(d->kbuf, (size_t)nk, sizeof *d->kbuf, cmp_u64);
    /* lexemes are non-empty: a start state never accepts */
    return dfa_intern(d, nk, 0);
}

uint32_t rx_dfa_from_kernel(struct rx_dfa *d, const uint64_t *k, int32_t n)
{
    if (d->failed || n <= 0) return RX_DEAD;
    if (n > d->kbuf_cap) {
        uint64_t *nb = realloc(d->kbuf, (size_t)n * sizeof *nb);
        if (!nb) return RX_DEAD;
        d->kbuf = nb;
        d->kbuf_cap = n;
    }
    memcpy(d->kbuf, k, (size_t)n * sizeof *k);
    qsort(d->kbuf, (size_t)n, sizeof *d->kbuf, cmp_u64);
    return dfa_intern(d, n, 0);
}

/* Whether a thread of loop L with counter c1 is so far from L's bounds that the next few steps
 * (a byte moves a counter by at most one: loop bodies and ticked characters are not nullable;
 * the margin of 4 is checked on the result, see shift_put) test none of them: every bound
 * check in closure() and thread_can_finish() comes out the same for c1 and any other c1 in the
 * zone. Unbounded loops clamp their counters at min instead (their states merge already). */
static int shift_zone(const struct rx_loop *L, uint32_t c1)
{
    int64_t c = (int64_t)c1 - 1;
    /* zone 1: far below a counted loop's min (bounded or not: `x{251,}`, the keys a pattern
     * leaves out), no closure reaches the exit: only the counter moves. Zone 2: between the
     * bounds. A transition stored in one zone serves only that zone (below min the exit is
     * shut, above it open). */
    if (!L->len && c + 4 < (int64_t)L->min) return 1;
    if (L->max < 0) return 0;
    if (L->len) return c >= (int64_t)L->min + 2 && c + 4 + L->tmin_max <= L->max ? 2 : 0;
    return c >= (int64_t)L->min + 1 && c + 4 < L->max ? 2 : 0;
}

/* Entry v relative to counter base c1 (counted entries' counters become 1.. ). */
static inline uint64_t rel_entry(uint64_t v, uint32_t c1)
{
    uint32_t c = (uint32_t)(v >> 32);
    return c ? (v & 0xffffffffu) | ((uint64_t)(c - c1 + 1) << 32) : v;
}

static uint64_t shape_hash(const struct rx_dstate *st, uint8_t b, int32_t lk)
{
    uint64_t h = 1469598103934665603ull ^ ((uint64_t)b << 40) ^ (uint64_t)(uint32_t)lk;
    for (int32_t i = 0; i < st->n_kernel; i++)
        h = (h ^ rel_entry(st->kernel[i], st->sc1)) * 1099511628211ull;
    h ^= h >> 31;
    return h | 1;
}

static struct rx_shift *shift_find(struct rx_dfa *d, const struct rx_dstate *st, uint8_t b,
                                   uint64_t h, int32_t lk)
{
    if (!d->sh_cap) return NULL;
    for (uint32_t j = (uint32_t)h & (d->sh_cap - 1); d->sh[j].h; j = (j + 1) & (d->sh_cap - 1)) {
        struct rx_shift *x = &d->sh[j];
        if (x->h != h || x->b != b || x->loop != lk || x->n_src != st->n_kernel) continue;
        int32_t i = 0;
        while (i < st->n_kernel && x->src[i] == rel_entry(st->kernel[i], st->sc1))
            i++;
        if (i == st->n_kernel) return x;
    }
    return NULL;
}

/* Stores the transition just computed (kbuf[0..nk), abuf[0..na)) from st on b, if its counted
 * entries stayed in st's loop within 3 steps of st's counter (else the shift would not be
 * exact: nothing is stored). Failures only lose the memo. */
static void shift_put(struct rx_dfa *d, const struct rx_dstate *st, uint8_t b, uint64_t h,
                      int32_t lk, int32_t nk, int32_t na)
{
    /* a loop entered by this transition started a counter at 1, which another source counter
     * would not move: the result is not a shift of the source (e.g. a `.*` before the loop
     * re-entering it next to a thread already counting) */
    if (d->entered) return;
    for (int32_t i = 0; i < nk; i++) {
        uint32_t c1 = (uint32_t)(d->kbuf[i] >> 32);
        if (!c1) continue;
        if (c1 < st->sc1 || c1 > st->sc1 + 3 ||
            rx_nfa_loop_of(d->nfa, TH_S(d->kbuf[i])) != st->sloop)
            return;
    }
    size_t cost = sizeof(struct rx_shift) * 2 + (size_t)(st->n_kernel + nk) * 8 + (size_t)na * 4;
    if (d->max_bytes && d->bytes + cost > d->max_bytes) return;
    if ((d->sh_n + 1) * 2 > d->sh_cap) {
        uint32_t nc = d->sh_cap ? d->sh_cap * 2 : 256;
        struct rx_shift *n = calloc(nc, sizeof *n);
        if (!n) return;
        for (uint32_t i = 0; i < d->sh_cap; i++) {
            if (!d->sh[i].h) continue;
            uint32_t j = (uint32_t)d->sh[i].h & (nc - 1);
            while (n[j].h)
                j = (j + 1) & (nc - 1);
            n[j] = d->sh[i];
        }
        d->bytes += (size_t)(nc - d->sh_cap) * sizeof *n;
        free(d->sh);
        d->sh = n;
        d->sh_cap = nc;
    }
    struct rx_shift x = {.h = h, .n_src = st->n_kernel, .n_res = nk, .n_acc = na,
                         .loop = lk, .b = b};
    x.src = malloc(((size_t)st->n_kernel + 1) * sizeof *x.src);
    x.res = malloc(((size_t)nk + 1) * sizeof *x.res);
    x.acc = malloc(((size_t)na + 1) * sizeof *x.acc);
    if (!x.src || !x.res || !x.acc) {
        free(x.src);
        free(x.res);
        free(x.acc);
        return;
    }
    for (int32_t i = 0; i < st->n_kernel; i++)
        x.src[i] = rel_entry(st->kernel[i], st->sc1);
    for (int32_t i = 0; i < nk; i++)
        x.res[i] = rel_entry(d->kbuf[i], st->sc1);
    memcpy(x.acc, d->abuf, (size_t)na * sizeof *x.acc);
    d->bytes += cost - sizeof(struct rx_shift) * 2;
    uint32_t j = (uint32_t)h & (d->sh_cap - 1);
    while (d->sh[j].h)
        j = (j + 1) & (d->sh_cap - 1);
    d->sh[j] = x;
    d->sh_n++;
}

static void sort_u64(uint64_t *a, int32_t n)
{
    if (n > 24) {
        qsort(a, (size_t)n, sizeof *a, cmp_u64);
        return;
    }
    for (int32_t i = 1; i < n; i++) {
        uint64_t v = a[i];
        int32_t j = i;
        while (j > 0 && a[j - 1] > v) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = v;
    }
}

static int relax_fix(struct rx_dfa *d, const struct rx_dstate *st, int32_t *nk, int32_t *na,
                     uint32_t *tick, bool *merged);

uint32_t rx_dfa_compute(struct rx_dfa *d, uint32_t s, uint8_t b)
{
    if (d->failed || d->over_work) return RX_DEAD;
    const struct rx_dstate *st = &d->st[s];
    uint64_t sh = 0;
    int zone = !d->relax && st->sloop >= 0 ? shift_zone(&d->nfa->loops[st->sloop], st->sc1) : 0;
    int32_t lk = st->sloop * 4 + zone; /* the loop and the zone a stored transition serves */
    if (zone) {
        sh = shape_hash(st, b, lk);
        const struct rx_shift *x = shift_find(d, st, b, sh, lk);
        if (x) { /* the stored result, counters moved to st's (order is kept: see rel_entry) */
            if (x->n_res > d->kbuf_cap) {
                uint64_t *nb = realloc(d->kbuf, (size_t)x->n_res * sizeof *nb);
                if (!nb) {
                    d->failed = true;
                    return RX_DEAD;
                }
                d->kbuf = nb;
                d->kbuf_cap = x->n_res;
            }
            for (int32_t i = 0; i < x->n_res; i++) {
                uint64_t v = x->res[i];
                uint32_t c = (uint32_t)(v >> 32);
                d->kbuf[i] = c ? (v & 0xffffffffu) | ((uint64_t)(c - 1 + st->sc1) << 32) : v;
            }
            memcpy(d->abuf, x->acc, (size_t)x->n_acc * sizeof *x->acc);
            d->work += (uint64_t)x->n_res + 1;
            if (d->work_limit && d->work > d->work_limit) {
                d->over_work = true;
                return RX_DEAD;
            }
            d->sh_hits++;
            uint32_t t = dfa_intern(d, x->n_res, x->n_acc);
            trans_store(d, s, b, t);
            return t;
        }
    }
    next_gen(d);
    d->computed++;
    d->racc = UINT32_MAX;
    d->racc_hi = 0;
    d->entered = false;
    const struct rx_nstate *S = d->nfa->s;
    int32_t sp = 0;
    for (int32_t i = 0; i < st->n_kernel; i++) {
        uint64_t v = st->kernel[i];
        const struct rx_nstate *ns = &S[TH_S(v)];
        if (b >= ns->lo && b <= ns->hi) push(d, &sp, TH(ns->out | TH_WB(v), 0, TH_C1(v)));
    }
    int32_t nk = 0, na = 0;
    closure(d, sp, false, &nk, &na);
    d->work += (uint64_t)st->n_kernel + d->vis_steps;
    if (d->work_limit && d->work > d->work_limit) d->over_work = true;
    if (d->failed || d->over_work) return RX_DEAD; /* the transition stays unknown */
    if (!d->relax && d->prune_rules) nk = rx_prune_kernel(d, d->kbuf, nk, d->prune_rules);
    uint32_t tick = 0;
    bool merged = false;
    if (d->relax && relax_fix(d, &d->st[s], &nk, &na, &tick, &merged)) {
        trans_store(d, s, b, RX_NONUNI);
        return RX_NONUNI;
    }
    sort_u64(d->kbuf, nk);
    qsort(d->abuf, (size_t)na, sizeof(int32_t), cmp_i32);
    if (sh) shift_put(d, &d->st[s], b, sh, lk, nk, na);
    uint32_t t = dfa_intern(d, nk, na);
    if (t != RX_DEAD && tick) t |= RX_TICK_BIT;
    if (t != RX_DEAD && merged) t |= RX_MERGE_BIT;
    trans_store(d, s, b, t); /* d->trans may have moved: index again */
    return t;
}

/* Relaxed mode, after a transition's closure from st (kbuf[0..nk), abuf[0..na)): the body
 * threads of the loop must share one counter, equal to st's or one more (the tick); every
 * counter moves back by the tick (1 stays 1: "exited long ago", as good as any), and of the
 * counted threads of one NFA state only the smallest counter is kept (same future, the
 * earliest exit is the weakest condition). Appends the accept entry -(racc + 1). *merged: a
 * thread with a counter above 1 was merged into one at a smaller counter (for a max the same,
 * for a min not). Returns -1 when the body threads disagree (or a loop is entered afresh). */
static int relax_fix(struct rx_dfa *d, const struct rx_dstate *st, int32_t *nk, int32_t *na,
                     uint32_t *tick, bool *merged)
{
    if (!d->rkeep) {
        d->rkeep = malloc(((size_t)d->nfa->n + 1) * sizeof *d->rkeep);
        if (!d->rkeep) {
            d->failed = true;
            return -1;
        }
    }
    const struct rx_nfa *n = d->nfa;
    uint32_t src = 0, res = 0;
    for (int32_t i = 0; i < st->n_kernel && !src; i++)
        if (TH_C1(st->kernel[i]) && rx_nfa_loop_of(n, TH_S(st->kernel[i])) >= 0)
            src = TH_C1(st->kernel[i]);
    for (int32_t i = 0; i < *nk; i++) {
        uint32_t c1 = TH_C1(d->kbuf[i]);
        if (!c1 || rx_nfa_loop_of(n, TH_S(d->kbuf[i])) < 0) continue;
        if (!res)
            res = c1;
        else if (c1 != res)
            return -1;
    }
    if (res && (!src || res < src || res > src + 1)) return -1;
    uint32_t tk = res ? res - src : 0;
    for (int32_t i = 0; i < *nk; i++) {
        uint64_t v = d->kbuf[i];
        uint32_t c1 = TH_C1(v);
        if (c1 > 1) d->kbuf[i] = (v & 0xffffffffu) | ((uint64_t)(c1 - tk < 1 ? 1 : c1 - tk) << 32);
    }
    sort_u64(d->kbuf, *nk);
    next_gen(d);
    int32_t w = 0;
    for (int32_t i = 0; i < *nk; i++) {
        uint64_t v = d->kbuf[i];
        if (TH_C1(v) && !TH_W(v)) { /* (threads of an inner loop differ by their count) */
            if (d->mark[TH_S(v)] == d->gen) {
                /* sorted by counter first: the kept one has the smaller counter */
                if (d->rkeep[TH_S(v)] > 1 && TH_C1(v) != d->rkeep[TH_S(v)]) *merged = true;
                continue;
            }
            d->mark[TH_S(v)] = d->gen;
            d->rkeep[TH_S(v)] = TH_C1(v);
        }
        d->kbuf[w++] = v;
    }
    *nk = w;
    if (*na > 0) {
        uint32_t r = d->racc;
        if (r > 1 && d->racc_hi != r) *merged = true;
        if (r > 1) r = r - tk < 1 ? 1 : r - tk;
        d->abuf[(*na)++] = -(int32_t)r - 1;
    }
    *tick = tk;
    return 0;
}

uint32_t rx_dfa_intern(struct rx_dfa *d, const uint64_t *k, int32_t nk, const int32_t *acc,
                       int32_t na)
{
    if (d->failed) return RX_DEAD;
    if (nk > d->kbuf_cap) {
        uint64_t *nb = realloc(d->kbuf, (size_t)nk * sizeof *nb);
        if (!nb) return RX_DEAD;
        d->kbuf = nb;
        d->kbuf_cap = nk;
    }
    if (na > d->nfa->n) return RX_DEAD; /* abuf holds one entry per NFA state */
    memcpy(d->kbuf, k, (size_t)nk * sizeof *k);
    sort_u64(d->kbuf, nk);
    int32_t w = 0;
    for (int32_t i = 0; i < nk; i++)
        if (!w || d->kbuf[w - 1] != d->kbuf[i]) d->kbuf[w++] = d->kbuf[i];
    nk = w;
    if (na) memcpy(d->abuf, acc, (size_t)na * sizeof *acc);
    qsort(d->abuf, (size_t)na, sizeof(int32_t), cmp_i32);
    w = 0;
    for (int32_t i = 0; i < na; i++)
        if (!w || d->abuf[w - 1] != d->abuf[i]) d->abuf[w++] = d->abuf[i];
    return dfa_intern(d, nk, w);
}

int rx_match_full(const char *pattern, size_t plen, const char *s, size_t len, struct err *e)
{
    struct rx_ast a = {0};
    struct rx_nfa n = {0};
    struct rx_dfa d;
    int rc = -1;
    int32_t root = rx_parse(&a, pattern, plen, e);
    if (root < 0) goto out_ast;
    int32_t start = rx_nfa_add(&n, &a, root, 0, e);
    if (start < 0) goto out_nfa;
    if (rx_dfa_init(&d, &n, e)) goto out_nfa;
    if (len == 0) {
        rc = rx_nfa_nullable(&n, start) ? 1 : 0;
        /* nullable ignores where anchors sit; ^$-only patterns are the only empty matches here */
    } else {
        uint32_t q = rx_dfa_start(&d, &start, 1);
        for (size_t i = 0; i < len && q != RX_DEAD; i++)
            q = rx_dfa_next(&d, q, (uint8_t)s[i]);
        rc = rx_dfa_accepting(&d, q) ? 1 : 0;
        if (d.failed) rc = err_set(e, ERR_NOMEM, "lexer automaton limit reached");
    }
    rx_dfa_deinit(&d);
out_nfa:
    rx_nfa_deinit(&n);
out_ast:
    rx_ast_deinit(&a);
    return rc;
}
