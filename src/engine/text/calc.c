/* calc — nanochat's calculator (calc.h): the gate of its use_calculator, then a recursive-descent
 * evaluator with Python's semantics for the two kinds of expression the gate lets through. */
#define _GNU_SOURCE /* memmem */
#include "engine/text/calc.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat_internal.h"

enum vt { V_INT, V_FLOAT, V_TUPLE, V_STR }; /* V_TUPLE: only (), which "()" evaluates to */

struct val {
    enum vt t;
    int64_t i;
    double f;
    char *s; /* V_STR: malloc'd, n bytes */
    size_t n;
};

struct p {
    const char *s;
    size_t n, i;
    int depth;
    bool oom;
};

static void val_free(struct val *v)
{
    if (v->t == V_STR) free(v->s);
    v->s = NULL;
}

static void ws(struct p *p)
{
    while (p->i < p->n && p->s[p->i] == ' ') p->i++;
}

static bool peek(struct p *p, char c)
{
    ws(p);
    return p->i < p->n && p->s[p->i] == c;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* ---- arithmetic ---- */

static bool m_expr(struct p *p, struct val *v);

/* A Python number literal: digits, digits "." [digits], or "." digits; an integer with a
 * leading zero must be all zeros. Integers beyond int64 are refused (the size limit). */
static bool m_number(struct p *p, struct val *v)
{
    size_t a = p->i, d0 = 0, d1 = 0;
    while (p->i < p->n && is_digit(p->s[p->i])) p->i++, d0++;
    bool dot = p->i < p->n && p->s[p->i] == '.';
    if (dot) {
        p->i++;
        while (p->i < p->n && is_digit(p->s[p->i])) p->i++, d1++;
    }
    if (d0 + d1 == 0) return false;
    if (dot) { /* the text is NUL-terminated and the next byte is no part of a C number */
        *v = (struct val){.t = V_FLOAT, .f = strtod(p->s + a, NULL)}; /* correctly rounded */
        return true;
    }
    int64_t x = 0;
    for (size_t k = a; k < p->i; k++) {
        int dg = p->s[k] - '0';
        if (k == a && dg == 0 && d0 > 1) { /* "01" is a SyntaxError, "00" is 0 */
            for (size_t j = a; j < p->i; j++)
                if (p->s[j] != '0') return false;
        }
        if (__builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, dg, &x)) return false;
    }
    *v = (struct val){.t = V_INT, .i = x};
    return true;
}

static bool m_atom(struct p *p, struct val *v)
{
    ws(p);
    if (p->i < p->n && p->s[p->i] == '(') {
        if (++p->depth > CALC_MAX_DEPTH) return false;
        p->i++;
        if (peek(p, ')')) {
            p->i++;
            p->depth--;
            *v = (struct val){.t = V_TUPLE};
            return true;
        }
        if (!m_expr(p, v) || !peek(p, ')')) return false;
        p->i++;
        p->depth--;
        return true;
    }
    return m_number(p, v);
}

static double as_f(const struct val *v) { return v->t == V_INT ? (double)v->i : v->f; }

/* Unary + and - (iterative: a long run of signs costs no stack). */
static bool m_factor(struct p *p, struct val *v)
{
    int neg = 0, signs = 0;
    for (;;) {
        ws(p);
        if (p->i < p->n && (p->s[p->i] == '-' || p->s[p->i] == '+')) {
            neg ^= p->s[p->i] == '-';
            signs++;
            p->i++;
        } else {
            break;
        }
    }
    if (!m_atom(p, v)) return false;
    if (signs && v->t == V_TUPLE) return false; /* bad operand type for unary -: 'tuple' */
    if (neg) {
        if (v->t == V_INT) {
            if (v->i == INT64_MIN) return false;
            v->i = -v->i;
        } else {
            v->f = -v->f;
        }
    }
    return true;
}

/* Python's float floor division: from fmod, so that a == b * q + r with r of b's sign. */
static double float_floordiv(double a, double b)
{
    double mod = fmod(a, b), div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0;
    if (div == 0) return copysign(0.0, a / b);
    double fl = floor(div);
    if (div - fl > 0.5) fl += 1.0;
    return fl;
}

/* int / int as Python: the correctly rounded quotient. Exact operands below 2^53 make the double
 * division exact-then-rounded; larger ones go through long double (64-bit mantissa: exact
 * operands, one extra rounding). */
static double int_truediv(int64_t a, int64_t b)
{
    const int64_t lim = (int64_t)1 << 53;
    if (a > -lim && a < lim && b > -lim && b < lim) return (double)a / (double)b;
    return (double)((long double)a / (long double)b);
}

static bool binop(char op, struct val *a, const struct val *b)
{
    if (a->t == V_TUPLE || b->t == V_TUPLE) { /* () + () and () * int / int * () are () */
        if (op == '+' && a->t == V_TUPLE && b->t == V_TUPLE) return true;
        if (op == '*' && (a->t == V_INT || b->t == V_INT)) {
            a->t = V_TUPLE;
            return true;
        }
        return false;
    }
    if (a->t == V_INT && b->t == V_INT) {
        int64_t x = a->i, y = b->i, r;
        switch (op) {
        case '+': if (__builtin_add_overflow(x, y, &r)) return false; a->i = r; return true;
        case '-': if (__builtin_sub_overflow(x, y, &r)) return false; a->i = r; return true;
        case '*': if (__builtin_mul_overflow(x, y, &r)) return false; a->i = r; return true;
        case '/':
            if (y == 0) return false; /* ZeroDivisionError */
            *a = (struct val){.t = V_FLOAT, .f = int_truediv(x, y)};
            return true;
        default: /* '//' */
            if (y == 0 || (x == INT64_MIN && y == -1)) return false;
            r = x / y;
            if (x % y != 0 && ((x < 0) != (y < 0))) r--;
            a->i = r;
            return true;
        }
    }
    double x = as_f(a), y = as_f(b), r;
    switch (op) {
    case '+': r = x + y; break;
    case '-': r = x - y; break;
    case '*': r = x * y; break;
    case '/':
        if (y == 0) return false;
        r = x / y;
        break;
    default:
        if (y == 0) return false;
        r = float_floordiv(x, y);
    }
    *a = (struct val){.t = V_FLOAT, .f = r};
    return true;
}

static bool m_term(struct p *p, struct val *v)
{
    if (!m_factor(p, v)) return false;
    for (;;) {
        ws(p);
        if (p->i >= p->n || (p->s[p->i] != '*' && p->s[p->i] != '/')) return true;
        char op = p->s[p->i++];
        if (op == '/' && p->i < p->n && p->s[p->i] == '/') op = 'f', p->i++;
        struct val r;
        if (!m_factor(p, &r) || !binop(op, v, &r)) return false;
    }
}

static bool m_expr(struct p *p, struct val *v)
{
    if (!m_term(p, v)) return false;
    for (;;) {
        ws(p);
        if (p->i >= p->n || (p->s[p->i] != '+' && p->s[p->i] != '-')) return true;
        char op = p->s[p->i++];
        struct val r;
        if (!m_term(p, &r) || !binop(op, v, &r)) return false;
    }
}

/* ---- strings ---- */

static bool s_primary(struct p *p, struct val *v);

static bool is_ident(char c, bool first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!first && is_digit(c));
}

/* One literal: an optional prefix of r / u / f letters (Python's valid ones), a quote, text up
 * to the same quote (no backslash can occur). Appends its text to v. */
static bool s_literal(struct p *p, struct val *v)
{
    size_t a = p->i;
    while (p->i < p->n && is_ident(p->s[p->i], true)) p->i++;
    size_t pl = p->i - a;
    if (pl > 2) return false;
    char pre[3] = {0};
    for (size_t k = 0; k < pl; k++) pre[k] = (char)(p->s[a + k] | 0x20);
    if (pl && strcmp(pre, "r") && strcmp(pre, "u") && strcmp(pre, "f") && strcmp(pre, "rf") &&
        strcmp(pre, "fr"))
        return false; /* a name, bytes (b''), or an invalid prefix */
    if (p->i >= p->n || (p->s[p->i] != '\'' && p->s[p->i] != '"')) return false;
    char q = p->s[p->i], q3[3] = {q, q, q};
    size_t ql = p->n - p->i >= 6 && !memcmp(p->s + p->i, q3, 3) ? 3 : 1; /* triple quotes */
    p->i += ql;
    const char *end = ql == 3 ? memmem(p->s + p->i, p->n - p->i, q3, 3)
                              : memchr(p->s + p->i, q, p->n - p->i);
    if (!end) return false;
    size_t len = (size_t)(end - (p->s + p->i));
    char *s = realloc(v->s, v->n + len + 1);
    if (!s) {
        p->oom = true;
        return false;
    }
    memcpy(s + v->n, p->s + p->i, len);
    v->s = s;
    v->n += len;
    p->i += len + ql;
    return true;
}

static bool s_atom(struct p *p, struct val *v)
{
    ws(p);
    if (p->i < p->n && p->s[p->i] == '(') {
        if (++p->depth > CALC_MAX_DEPTH) return false;
        p->i++;
        if (peek(p, ')')) /* () has a count method too: ().count(x) is 0 */
            *v = (struct val){.t = V_TUPLE};
        else if (!s_primary(p, v) || !peek(p, ')'))
            return false;
        p->i++;
        p->depth--;
        return true;
    }
    *v = (struct val){.t = V_STR};
    if (!s_literal(p, v)) return false;
    for (;;) { /* adjacent literals concatenate */
        ws(p);
        size_t at = p->i;
        if (at >= p->n || !(is_ident(p->s[at], true) || p->s[at] == '\'' || p->s[at] == '"'))
            return true;
        size_t k = at;
        while (k < p->n && is_ident(p->s[k], true)) k++;
        if (k >= p->n || (p->s[k] != '\'' && p->s[k] != '"')) return true;
        if (!s_literal(p, v)) return false;
    }
}

static size_t count_sub(const char *s, size_t n, const char *sub, size_t m)
{
    if (m == 0) return n + 1; /* ASCII: code points = bytes */
    size_t c = 0;
    for (size_t i = 0; i + m <= n;)
        if (!memcmp(s + i, sub, m)) c++, i += m;
        else i++;
    return c;
}

static bool method(struct p *p, const char *name, size_t nl, struct val *v, struct val *arg,
                   bool has_arg)
{
#define IS(x) (nl == sizeof x - 1 && !memcmp(name, x, nl))
    if (v->t == V_TUPLE && IS("count") && has_arg) { /* an empty tuple holds nothing */
        *v = (struct val){.t = V_INT, .i = 0};
        return true;
    }
    if (v->t != V_STR || (has_arg && arg->t != V_STR)) return false;
    if (IS("count")) {
        if (!has_arg) return false;
        size_t c = count_sub(v->s, v->n, arg->s, arg->n);
        val_free(v);
        *v = (struct val){.t = V_INT, .i = (int64_t)c};
        return true;
    }
    if (IS("lower") || IS("upper")) {
        if (has_arg) return false;
        for (size_t k = 0; k < v->n; k++) {
            char c = v->s[k];
            if (IS("lower") && c >= 'A' && c <= 'Z') v->s[k] = (char)(c + 32);
            if (IS("upper") && c >= 'a' && c <= 'z') v->s[k] = (char)(c - 32);
        }
        return true;
    }
    if (IS("strip") || IS("lstrip") || IS("rstrip")) {
        const char *set = has_arg ? arg->s : " ";
        size_t sn = has_arg ? arg->n : 1, a = 0, b = v->n;
        if (name[0] != 'r')
            while (a < b && memchr(set, v->s[a], sn)) a++;
        if (name[0] != 'l')
            while (b > a && memchr(set, v->s[b - 1], sn)) b--;
        memmove(v->s, v->s + a, b - a);
        v->n = b - a;
        return true;
    }
#undef IS
    (void)p;
    return false;
}

static bool s_primary(struct p *p, struct val *v)
{
    if (!s_atom(p, v)) return false;
    for (;;) {
        if (!peek(p, '.')) return true;
        p->i++;
        ws(p);
        size_t a = p->i;
        while (p->i < p->n && is_ident(p->s[p->i], p->i == a)) p->i++;
        size_t nl = p->i - a;
        if (nl == 0 || !peek(p, '(')) return false;
        p->i++;
        struct val arg = {.t = V_INT};
        bool has_arg = !peek(p, ')');
        if (has_arg) {
            if (++p->depth > CALC_MAX_DEPTH) return false;
            bool ok = s_primary(p, &arg);
            p->depth--;
            if (!ok || !peek(p, ')')) {
                val_free(&arg);
                return false;
            }
        }
        p->i++;
        bool ok = method(p, p->s + a, nl, v, &arg, has_arg);
        val_free(&arg);
        if (!ok) return false;
    }
}

/* ---- the gate (nanochat's use_calculator) and the answer ---- */

static bool all_in(const char *s, size_t n, const char *set)
{
    for (size_t i = 0; i < n; i++)
        if (!s[i] || !strchr(set, s[i])) return false;
    return true;
}

static bool has_ci(const char *s, size_t n, const char *w)
{
    size_t m = strlen(w);
    for (size_t i = 0; i + m <= n; i++) {
        size_t k = 0;
        while (k < m && (s[i + k] >= 'A' && s[i + k] <= 'Z' ? s[i + k] + 32 : s[i + k]) == w[k]) k++;
        if (k == m) return true;
    }
    return false;
}

static int emit(const struct val *v, struct buf *out)
{
    switch (v->t) {
    case V_INT: return buf_printf(out, "%lld", (long long)v->i) < 0 ? -1 : 1;
    case V_TUPLE: return buf_puts(out, "()") < 0 ? -1 : 1;
    case V_STR: return buf_append(out, v->s, v->n) < 0 ? -1 : 1;
    case V_FLOAT:
        if (isnan(v->f)) return buf_puts(out, "nan") < 0 ? -1 : 1;
        if (isinf(v->f)) return buf_puts(out, v->f < 0 ? "-inf" : "inf") < 0 ? -1 : 1;
        return chat_py_float_repr(v->f, out) < 0 ? -1 : 1;
    }
    return 0;
}

int calc_eval(const char *expr, size_t n, struct buf *out)
{
    static const char *const DANGEROUS[] = {
        "__", "import", "exec", "eval", "compile", "open", "file", "input", "raw_input", "globals",
        "locals", "vars", "dir", "getattr", "setattr", "delattr", "hasattr"};
    if (n > CALC_MAX_LEN) return 0;
    char s[CALC_MAX_LEN + 1];
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (expr[i] != ',') s[m++] = expr[i];
    s[m] = 0;
    struct p p = {.s = s, .n = m};
    struct val v = {.t = V_INT};
    bool ok;
    if (all_in(s, m, "0123456789*+-/.() ")) {
        if (memmem(s, m, "**", 2)) return 0;
        ok = m_expr(&p, &v);
    } else {
        if (!all_in(s, m, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'\"()._ "))
            return 0;
        for (size_t k = 0; k < sizeof DANGEROUS / sizeof *DANGEROUS; k++)
            if (has_ci(s, m, DANGEROUS[k])) return 0;
        if (!memmem(s, m, ".count(", 7)) return 0;
        ok = s_primary(&p, &v);
    }
    ws(&p);
    int rc = ok && p.i == p.n ? emit(&v, out) : p.oom ? -1 : 0;
    val_free(&v);
    return rc;
}
