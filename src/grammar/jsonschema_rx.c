/* jsonschema_rx — regex text builders for the JSON Schema compiler: ECMA `pattern` translation to
 * a regex over JSON string content, `format` regexes, "key not in set" regexes and exact decimal
 * range regexes for numbers. See jsonschema_internal.h for the contracts. */
#include "grammar/jsonschema_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/utf8.h"

#define CP_MAX 0x10FFFFu

/* ---------------------------------------------------------------- code point sets */

#define cpset jsrx_cpset /* (struct jsrx_cpset: jsonschema_internal.h) */

static void cp_add(struct cpset *s, uint32_t lo, uint32_t hi)
{
    if (lo > hi) return;
    /* insert then normalise (sets are small) */
    if (s->n == 64) {
        s->overflow = true;
        return;
    }
    s->lo[s->n] = lo;
    s->hi[s->n] = hi;
    s->n++;
    for (int i = 1; i < s->n; i++) /* insertion sort */
        for (int j = i; j > 0 && s->lo[j - 1] > s->lo[j]; j--) {
            uint32_t t = s->lo[j];
            s->lo[j] = s->lo[j - 1];
            s->lo[j - 1] = t;
            t = s->hi[j];
            s->hi[j] = s->hi[j - 1];
            s->hi[j - 1] = t;
        }
    int m = 0;
    for (int i = 0; i < s->n; i++) {
        if (m && s->lo[i] <= s->hi[m - 1] + 1) {
            if (s->hi[i] > s->hi[m - 1]) s->hi[m - 1] = s->hi[i];
        } else {
            s->lo[m] = s->lo[i];
            s->hi[m] = s->hi[i];
            m++;
        }
    }
    s->n = m;
}

static void cp_negate(struct cpset *s)
{
    struct cpset r = {0};
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->lo[i] > next) cp_add(&r, next, s->lo[i] - 1);
        next = s->hi[i] + 1;
    }
    if (next <= CP_MAX) cp_add(&r, next, CP_MAX);
    r.overflow = s->overflow;
    *s = r;
}

static bool cp_has(const struct cpset *s, uint32_t c)
{
    for (int i = 0; i < s->n; i++)
        if (c >= s->lo[i] && c <= s->hi[i]) return true;
    return false;
}

static void cp_add_class(struct cpset *s, char k)
{
    switch (k) {
    case 'd':
        cp_add(s, '0', '9');
        break;
    case 'w':
        cp_add(s, '0', '9');
        cp_add(s, 'A', 'Z');
        cp_add(s, 'a', 'z');
        cp_add(s, '_', '_');
        break;
    case 's':
        cp_add(s, 9, 13);
        cp_add(s, ' ', ' ');
        cp_add(s, 0xA0, 0xA0);
        cp_add(s, 0x1680, 0x1680);
        cp_add(s, 0x2000, 0x200A);
        cp_add(s, 0x2028, 0x2029);
        cp_add(s, 0x202F, 0x202F);
        cp_add(s, 0x205F, 0x205F);
        cp_add(s, 0x3000, 0x3000);
        cp_add(s, 0xFEFF, 0xFEFF);
        break;
    }
}

static void put_utf8(struct buf *o, uint32_t c)
{
    char b[UTF8_MAX];
    buf_append(o, b, (size_t)utf8_encode(c, b));
}

/* A code point inside a regex class: escape what is special there; controls as \xHH. */
static void put_class_cp(struct buf *o, uint32_t c)
{
    if (c < 0x20 || c == 0x7F)
        buf_printf(o, "\\x%02X", c);
    else if (c < 0x80 && strchr("\\]^-[/&~", (int)c))
        buf_printf(o, "\\%c", (char)c);
    else
        put_utf8(o, c);
}

/* Short JSON escape letter for a control char, 0 if none. */
static char short_esc(uint32_t c)
{
    switch (c) {
    case 8:
        return 'b';
    case 9:
        return 't';
    case 10:
        return 'n';
    case 12:
        return 'f';
    case 13:
        return 'r';
    }
    return 0;
}

/* Emit the JSON-text regex for "one character from set s" (decoded value in s). `canonical`:
 * each code point gets one spelling (for key exclusion); else also \/ and \u00XX forms. */
static void emit_set(struct buf *o, const struct cpset *s, bool canonical)
{
    struct buf raw = {0};
    int nraw = 0;
    for (int i = 0; i < s->n; i++) {
        uint32_t lo = s->lo[i], hi = s->hi[i];
        /* drop controls, '"' and '\' from raw ranges */
        uint32_t cut[3][2] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
        uint32_t segs_lo[4], segs_hi[4];
        int ns = 1;
        segs_lo[0] = lo;
        segs_hi[0] = hi;
        for (int k = 0; k < 3; k++) {
            int nn = 0;
            uint32_t tl[8], th[8];
            for (int j = 0; j < ns; j++) {
                uint32_t a = segs_lo[j], b = segs_hi[j];
                if (b < cut[k][0] || a > cut[k][1]) {
                    tl[nn] = a;
                    th[nn++] = b;
                    continue;
                }
                if (a < cut[k][0]) {
                    tl[nn] = a;
                    th[nn++] = cut[k][0] - 1;
                }
                if (b > cut[k][1]) {
                    tl[nn] = cut[k][1] + 1;
                    th[nn++] = b;
                }
            }
            ns = nn;
            for (int j = 0; j < nn; j++) {
                segs_lo[j] = tl[j];
                segs_hi[j] = th[j];
            }
        }
        for (int j = 0; j < ns; j++) {
            /* surrogates are not characters */
            uint32_t a = segs_lo[j], b = segs_hi[j];
            if (a <= 0xDFFF && b >= 0xD800) {
                if (a < 0xD800) {
                    put_class_cp(&raw, a);
                    if (0xD7FF > a) {
                        buf_puts(&raw, "-");
                        put_class_cp(&raw, 0xD7FF);
                    }
                    nraw++;
                }
                if (b > 0xDFFF) {
                    put_class_cp(&raw, 0xE000);
                    if (b > 0xE000) {
                        buf_puts(&raw, "-");
                        put_class_cp(&raw, b);
                    }
                    nraw++;
                }
                continue;
            }
            put_class_cp(&raw, a);
            if (b > a) {
                if (b > a + 1) buf_puts(&raw, "-");
                put_class_cp(&raw, b);
            }
            nraw++;
        }
    }
    struct buf alt = {0};
    int nalt = 0;
    if (nraw) {
        buf_printf(&alt, "[%s]", raw.data);
        nalt++;
    }
    /* The escapes share their backslash: one alternative `\\(?:...)`, so that a lexer state
     * inside such a string holds one NFA thread for all of them rather than one per escape
     * (kernels several times smaller: cheaper lexer states and masks; same language). */
    struct buf esc = {0};
    int nesc = 0;
    if (cp_has(s, '"')) buf_puts(&esc, nesc++ ? "|\"" : "\"");
    if (cp_has(s, '\\')) buf_puts(&esc, nesc++ ? "|\\\\" : "\\\\");
    if (!canonical && cp_has(s, '/')) buf_puts(&esc, nesc++ ? "|\\/" : "\\/");
    bool all_ctl = true;
    for (uint32_t c = 0; c < 0x20; c++)
        if (!cp_has(s, c)) all_ctl = false;
    if (all_ctl) {
        if (nesc) buf_puts(&esc, "|");
        nesc += 2; /* two alternatives: always grouped */
        buf_puts(&esc, canonical ? "[bfnrt]|u00(?:0[0-7bBeEfF]|1[0-9a-fA-F])"
                                 : "[bfnrt]|u00[01][0-9a-fA-F]");
    } else {
        char shorts[8];
        int n_short = 0;
        struct buf u = {0}; /* u00 forms: per high nibble, the class of low nibbles */
        int n_u = 0;
        for (uint32_t c = 0; c < 0x20; c++)
            if (cp_has(s, c) && short_esc(c)) shorts[n_short++] = short_esc(c);
        for (uint32_t h = 0; h < 2; h++) {
            char cls[40];
            int nc = 0;
            for (uint32_t c = h * 16; c < h * 16 + 16; c++) {
                if (!cp_has(s, c) || short_esc(c)) continue;
                nc += snprintf(cls + nc, sizeof cls - (size_t)nc, "%X", c & 15);
                if ((c & 15) > 9) nc += snprintf(cls + nc, sizeof cls - (size_t)nc, "%x", c & 15);
            }
            if (!nc) continue;
            buf_printf(&u, "%s%X[%s]", n_u++ ? "|" : "", h, cls);
        }
        if (n_short) {
            buf_printf(&esc, "%s", nesc++ ? "|" : "");
            if (n_short == 1)
                buf_printf(&esc, "%c", shorts[0]);
            else
                buf_printf(&esc, "[%.*s]", n_short, shorts);
        }
        if (n_u) {
            buf_printf(&esc, "%s", nesc++ ? "|" : "");
            buf_printf(&esc, n_u > 1 ? "u00(?:%s)" : "u00%s", u.data);
        }
        buf_free(&u);
    }
    if (nesc) {
        if (nalt++) buf_puts(&alt, "|");
        buf_printf(&alt, nesc > 1 ? "\\\\(?:%s)" : "\\\\%s", esc.data);
    }
    buf_free(&esc);
    if (nalt == 0)
        buf_puts(o, "[^\\x00-\\x{10FFFF}]"); /* empty set: matches nothing */
    else if (nalt == 1 && nraw)
        buf_append(o, alt.data, alt.len);
    else
        buf_printf(o, "(?:%s)", alt.data);
    buf_free(&raw);
    buf_free(&alt);
}

void jsrx_literal(const char *s, size_t n, struct buf *out)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7F)
            buf_printf(out, "\\x%02X", c);
        else if (strchr("\\.+*?()|[]{}^$/-&~\"", c))
            buf_printf(out, "\\%c", c);
        else
            buf_append(out, &s[i], 1);
    }
}

/* ---------------------------------------------------------------- pattern translation */

struct pt {
    const char *s;
    size_t n, i;
    struct err *e;
    int depth;
    bool tick; /* write (?T) after each character (inside a length region) */
};

#define PT_CHAR_STAR(p) ((p)->tick ? "(?:" JSRX_CHAR "(?T))*" : JSRX_CHAR "*")

static int pt_fail(struct pt *p, const char *what)
{
    return err_set(p->e, ERR_INVALID, "pattern /%.*s/: %s at offset %zu",
                   (int)(p->n > 200 ? 200 : p->n), p->s, what, p->i);
}

/* decode one UTF-8 code point at p->i */
static uint32_t pt_cp(struct pt *p)
{
    const unsigned char *u = (const unsigned char *)p->s + p->i;
    size_t left = p->n - p->i;
    uint32_t c = u[0];
    int len = 1;
    if (c >= 0xF0 && left >= 4) {
        c = ((c & 7u) << 18) | ((u[1] & 63u) << 12) | ((u[2] & 63u) << 6) | (u[3] & 63u);
        len = 4;
    } else if (c >= 0xE0 && left >= 3) {
        c = ((c & 15u) << 12) | ((u[1] & 63u) << 6) | (u[2] & 63u);
        len = 3;
    } else if (c >= 0xC0 && left >= 2) {
        c = ((c & 31u) << 6) | (u[1] & 63u);
        len = 2;
    }
    p->i += (size_t)len;
    return c;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Parse an escape after '\' (p->i at the char after '\'). Adds to set, or returns 1 with *cp set
 * for a single char. in_class allows \b = backspace. */
static int pt_escape(struct pt *p, struct cpset *set, bool in_class)
{
    if (p->i >= p->n) return pt_fail(p, "trailing backslash");
    char c = p->s[p->i++];
    switch (c) {
    case 'd':
    case 'w':
    case 's':
        cp_add_class(set, c);
        return 0;
    case 'D':
    case 'W':
    case 'S': {
        struct cpset t = {0};
        cp_add_class(&t, (char)(c + 32));
        cp_negate(&t);
        for (int i = 0; i < t.n; i++)
            cp_add(set, t.lo[i], t.hi[i]);
        return 0;
    }
    case 't':
        cp_add(set, 9, 9);
        return 0;
    case 'n':
        cp_add(set, 10, 10);
        return 0;
    case 'r':
        cp_add(set, 13, 13);
        return 0;
    case 'f':
        cp_add(set, 12, 12);
        return 0;
    case 'v':
        cp_add(set, 11, 11);
        return 0;
    case '0':
        cp_add(set, 0, 0);
        return 0;
    case 'b':
        if (in_class) {
            cp_add(set, 8, 8);
            return 0;
        }
        p->i--;
        return pt_fail(p, "word boundary \\b is not supported");
    case 'B':
        p->i--;
        return pt_fail(p, "\\B is not supported");
    case 'c':
        if (p->i < p->n && ((p->s[p->i] | 32) >= 'a' && (p->s[p->i] | 32) <= 'z')) {
            uint32_t v = (uint32_t)(p->s[p->i++] & 31);
            cp_add(set, v, v);
            return 0;
        }
        return pt_fail(p, "bad \\c escape");
    case 'x': {
        if (p->i + 2 > p->n || hexval(p->s[p->i]) < 0 || hexval(p->s[p->i + 1]) < 0)
            return pt_fail(p, "bad \\x escape");
        uint32_t v = (uint32_t)(hexval(p->s[p->i]) * 16 + hexval(p->s[p->i + 1]));
        p->i += 2;
        cp_add(set, v, v);
        return 0;
    }
    case 'u': {
        uint32_t v = 0;
        if (p->i < p->n && p->s[p->i] == '{') {
            p->i++;
            int k = 0;
            while (p->i < p->n && p->s[p->i] != '}') {
                int h = hexval(p->s[p->i++]);
                if (h < 0 || ++k > 6) return pt_fail(p, "bad \\u{} escape");
                v = v * 16 + (uint32_t)h;
            }
            if (p->i >= p->n || k == 0) return pt_fail(p, "bad \\u{} escape");
            p->i++;
        } else {
            if (p->i + 4 > p->n) return pt_fail(p, "bad \\u escape");
            for (int k = 0; k < 4; k++) {
                int h = hexval(p->s[p->i + (size_t)k]);
                if (h < 0) return pt_fail(p, "bad \\u escape");
                v = v * 16 + (uint32_t)h;
            }
            p->i += 4;
            /* surrogate pair written as two escapes */
            if (v >= 0xD800 && v <= 0xDBFF && p->i + 6 <= p->n && p->s[p->i] == '\\' &&
                p->s[p->i + 1] == 'u') {
                uint32_t w = 0;
                bool ok = true;
                for (int k = 0; k < 4; k++) {
                    int h = hexval(p->s[p->i + 2 + (size_t)k]);
                    if (h < 0)
                        ok = false;
                    else
                        w = w * 16 + (uint32_t)h;
                }
                if (ok && w >= 0xDC00 && w <= 0xDFFF) {
                    v = 0x10000 + ((v - 0xD800) << 10) + (w - 0xDC00);
                    p->i += 6;
                }
            }
        }
        if (v > CP_MAX) return pt_fail(p, "escape out of range");
        cp_add(set, v, v);
        return 0;
    }
    case 'p':
    case 'P':
        p->i--;
        return pt_fail(p, "Unicode property escapes are not supported");
    case 'k':
        p->i--;
        return pt_fail(p, "named backreferences are not supported");
    default:
        if (c >= '1' && c <= '9') {
            p->i--;
            return pt_fail(p, "backreferences are not supported");
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            p->i--;
            return pt_fail(p, "unknown escape");
        }
        p->i--;
        {
            uint32_t v = pt_cp(p);
            cp_add(set, v, v);
        }
        return 0;
    }
}

static int pt_class(struct pt *p, struct cpset *set)
{
    /* p->i after '[' */
    bool neg = false;
    if (p->i < p->n && p->s[p->i] == '^') {
        neg = true;
        p->i++;
    }
    struct cpset s = {0};
    bool first = true;
    while (1) {
        if (p->i >= p->n) return pt_fail(p, "unterminated character class");
        if (p->s[p->i] == ']' && !first) break;
        if (p->s[p->i] == ']' && first) { /* ECMA: [] matches nothing, []...] not special */
            break;
        }
        first = false;
        struct cpset one = {0};
        uint32_t lo;
        bool single;
        if (p->s[p->i] == '\\') {
            p->i++;
            if (pt_escape(p, &one, true)) return -1;
            single = one.n == 1 && one.lo[0] == one.hi[0];
            lo = one.lo[0];
        } else {
            lo = pt_cp(p);
            cp_add(&one, lo, lo);
            single = true;
        }
        if (single && p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            struct cpset two = {0};
            uint32_t hi;
            if (p->s[p->i] == '\\') {
                p->i++;
                if (pt_escape(p, &two, true)) return -1;
                if (!(two.n == 1 && two.lo[0] == two.hi[0])) return pt_fail(p, "bad class range");
                hi = two.lo[0];
            } else
                hi = pt_cp(p);
            if (hi < lo) return pt_fail(p, "class range out of order");
            cp_add(&s, lo, hi);
        } else {
            for (int i = 0; i < one.n; i++)
                cp_add(&s, one.lo[i], one.hi[i]);
        }
    }
    p->i++; /* ']' */
    if (s.overflow) return pt_fail(p, "character class too complex");
    if (neg) cp_negate(&s);
    *set = s;
    return 0;
}

/* Anchors found in a group: every branch starts with ^ (start) / ends with $ (end). */
struct anch {
    bool start, end;
    int64_t mn, mx; /* length range in characters (mx -1: unbounded) */
};

#define LEN_CAP 1000000000LL
static int64_t len_add(int64_t a, int64_t b)
{
    return a < 0 || b < 0 ? -1 : a + b > LEN_CAP ? LEN_CAP : a + b;
}
static int64_t len_mul(int64_t a, int64_t q) /* q -1: unbounded */
{
    if (a == 0) return 0;
    if (a < 0 || q < 0) return -1;
    return a > LEN_CAP / (q ? q : 1) ? LEN_CAP : a * q;
}
static int pt_alt(struct pt *p, struct buf *out, bool top, struct jsrx_single *single,
                  struct anch *an);

/* Parses one quantifier if present; writes its regex form. Returns 0 ok, -1 error. */
static int pt_quant(struct pt *p, struct buf *q, int64_t *qlo, int64_t *qhi)
{
    *qlo = 1;
    *qhi = 1;
    if (p->i >= p->n) return 0;
    char c = p->s[p->i];
    if (c == '*' || c == '+' || c == '?') {
        p->i++;
        buf_append(q, &c, 1);
        *qlo = c == '+' ? 1 : 0;
        *qhi = c == '?' ? 1 : -1;
    } else if (c == '{') {
        size_t j = p->i + 1;
        int64_t a = 0, b = -1;
        bool has_a = false, comma = false, has_b = false;
        while (j < p->n && p->s[j] >= '0' && p->s[j] <= '9') {
            a = a * 10 + (p->s[j++] - '0');
            has_a = true;
            if (a > 100000) return pt_fail(p, "repetition count too large");
        }
        if (j < p->n && p->s[j] == ',') {
            comma = true;
            j++;
            b = 0;
            while (j < p->n && p->s[j] >= '0' && p->s[j] <= '9') {
                b = b * 10 + (p->s[j++] - '0');
                has_b = true;
                if (b > 100000) return pt_fail(p, "repetition count too large");
            }
        }
        if (!has_a || j >= p->n || p->s[j] != '}') {
            /* ECMA (annex B): a '{' that is not a quantifier is a literal */
            return 1;
        }
        p->i = j + 1;
        if (!comma)
            b = a;
        else if (!has_b)
            b = -1;
        if (b >= 0 && b < a) return pt_fail(p, "repetition {m,n} with n < m");
        *qlo = a;
        *qhi = b;
        if (b < 0)
            buf_printf(q, "{%lld,}", (long long)a);
        else if (a == b)
            buf_printf(q, "{%lld}", (long long)a);
        else
            buf_printf(q, "{%lld,%lld}", (long long)a, (long long)b);
    } else
        return 0;
    if (p->i < p->n && p->s[p->i] == '?') p->i++; /* lazy: same language */
    if (p->i < p->n && (p->s[p->i] == '*' || p->s[p->i] == '+' || p->s[p->i] == '{'))
        return pt_fail(p, "nested quantifier");
    return 0;
}

/* One branch (sequence). Anchors: '^' allowed only as first item, '$' only as last item
 * (checked by the caller via flags). */
static int pt_seq(struct pt *p, struct buf *out, bool *anc_start, bool *anc_end, bool top,
                  struct jsrx_single *single, int64_t *smn, int64_t *smx)
{
    *anc_start = *anc_end = false;
    *smn = 0;
    *smx = 0;
    int items = 0, atoms = 0;
    struct cpset last_set = {0};
    bool last_is_set = false;
    int64_t last_lo = 1, last_hi = 1;
    while (p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')') {
        char c = p->s[p->i];
        if (*anc_end) return pt_fail(p, "'$' anchor before the end of the pattern");
        if (c == '^') {
            if (items) return pt_fail(p, "'^' anchor after the start of an alternative");
            p->i++;
            *anc_start = true;
            items++;
            continue;
        }
        if (c == '$') {
            p->i++;
            *anc_end = true;
            items++;
            continue;
        }
        struct buf atom = {0};
        struct cpset set = {0};
        bool is_set = false, group_end = false;
        int64_t amn = 1, amx = 1;
        if (c == '(') {
            p->i++;
            if (p->i < p->n && p->s[p->i] == '?') {
                if (p->i + 1 < p->n && p->s[p->i + 1] == ':')
                    p->i += 2;
                else if (p->i + 2 < p->n && p->s[p->i + 1] == '<' && p->s[p->i + 2] != '=' &&
                         p->s[p->i + 2] != '!') {
                    while (p->i < p->n && p->s[p->i] != '>')
                        p->i++;
                    if (p->i >= p->n) {
                        buf_free(&atom);
                        return pt_fail(p, "unterminated group name");
                    }
                    p->i++;
                } else {
                    buf_free(&atom);
                    return pt_fail(p, "lookaround assertions are not supported");
                }
            }
            if (++p->depth > 200) {
                buf_free(&atom);
                return pt_fail(p, "groups nested too deeply");
            }
            /* a group may carry the anchors when it starts / ends the alternative */
            struct buf inner = {0};
            struct anch an = {0};
            int r = pt_alt(p, &inner, false, NULL, &an);
            p->depth--;
            if (r) {
                buf_free(&inner);
                buf_free(&atom);
                return -1;
            }
            if (an.start && items) {
                buf_free(&inner);
                buf_free(&atom);
                return pt_fail(p, "'^' anchor after the start of an alternative");
            }
            if (an.start) *anc_start = true;
            if (an.end) group_end = true;
            amn = an.mn;
            amx = an.mx;
            if (p->i >= p->n || p->s[p->i] != ')') {
                buf_free(&inner);
                buf_free(&atom);
                return pt_fail(p, "unbalanced parenthesis");
            }
            p->i++;
            buf_printf(&atom, "(?:%s)", inner.data ? inner.data : "");
            buf_free(&inner);
        } else if (c == '[') {
            p->i++;
            if (pt_class(p, &set)) {
                buf_free(&atom);
                return -1;
            }
            is_set = true;
        } else if (c == '.') {
            p->i++;
            cp_add(&set, 0, CP_MAX);
            cp_negate(&set);
            cp_add(&set, 0, 9);
            cp_add(&set, 11, 12);
            cp_add(&set, 14, 0x2027);
            cp_add(&set, 0x202A, CP_MAX);
            is_set = true;
        } else if (c == '\\') {
            p->i++;
            if (pt_escape(p, &set, false)) {
                buf_free(&atom);
                return -1;
            }
            is_set = true;
        } else if (c == '*' || c == '+' || c == '?') {
            buf_free(&atom);
            return pt_fail(p, "quantifier without operand");
        } else if (c == ']' || c == '}' || c == '{') {
            p->i++;
            cp_add(&set, (uint32_t)c, (uint32_t)c);
            is_set = true;
        } else {
            uint32_t v = pt_cp(p);
            cp_add(&set, v, v);
            is_set = true;
        }
        if (is_set) {
            emit_set(&atom, &set, false);
            if (p->tick) buf_puts(&atom, "(?T)");
        }
        struct buf q = {0};
        int64_t qlo, qhi;
        int qr = pt_quant(p, &q, &qlo, &qhi);
        if (qr < 0) {
            buf_free(&atom);
            buf_free(&q);
            return -1;
        }
        if (qr == 1) { /* literal '{' follows; handled on the next iteration */
            qlo = qhi = 1;
        }
        if (group_end) {
            *anc_end = true;
            group_end = false;
            if (q.len) {
                buf_free(&atom);
                buf_free(&q);
                return pt_fail(p, "quantified anchored group");
            }
        }
        if (q.len)
            buf_printf(out, "(?:%s)%s", atom.data, q.data);
        else
            buf_append(out, atom.data, atom.len);
        *smn = len_add(*smn, len_mul(amn, qlo));
        *smx = len_add(*smx, len_mul(amx, qhi));
        if (qr == 1) { /* consume the literal '{' */
            p->i++;
            buf_puts(out, p->tick ? "\\{(?T)" : "\\{");
            atoms++;
            *smn = len_add(*smn, 1);
            *smx = len_add(*smx, 1);
        }
        buf_free(&atom);
        buf_free(&q);
        items++;
        atoms++;
        last_is_set = is_set;
        last_set = set;
        last_lo = qlo;
        last_hi = qhi;
    }
    if (single && top && atoms == 1 && last_is_set && !*anc_start && !*anc_end && last_lo >= 1 &&
        last_lo <= 1) {
        /* unanchored X, X+, X{1,n}: "contains a character of X" */
        single->contains = true;
        struct cpset neg = last_set;
        cp_negate(&neg);
        buf_reset(&single->notset);
        emit_set(&single->notset, &neg, false);
    }
    if (single && top && atoms == 1 && last_is_set && *anc_start && *anc_end) {
        single->ok = true;
        buf_reset(&single->set);
        emit_set(&single->set, &last_set, false);
        struct cpset neg = last_set;
        cp_negate(&neg);
        buf_reset(&single->notset);
        emit_set(&single->notset, &neg, false);
        single->lo = last_lo;
        single->hi = last_hi;
    }
    return 0;
}

/* Alternation. At top level each branch's anchors are honoured (an unanchored side gets any
 * characters); inside a group anchors must be the same in every branch and are reported in *an. */
static int pt_alt(struct pt *p, struct buf *out, bool top, struct jsrx_single *single,
                  struct anch *an)
{
    int nb = 0;
    struct buf acc = {0};
    /* top level: branches grouped by their anchors, each group written once as
     * [CHAR*](?:b1|b2|...)[CHAR*] (the same language as the union of CHAR* b_i CHAR*, but one
     * pair of free loops instead of one per branch: an unanchored alternation of 17 literals
     * made lexer states of dozens of threads) */
    struct buf grp[4] = {{0}};
    bool has[4] = {false};
    bool all_start = true, all_end = true, any_start = false, any_end = false;
    int64_t mn = -1, mx = 0;
    while (1) {
        struct buf b = {0};
        bool s, e;
        int64_t bmn, bmx;
        if (pt_seq(p, &b, &s, &e, top, nb == 0 ? single : NULL, &bmn, &bmx)) {
            buf_free(&b);
            buf_free(&acc);
            for (int k = 0; k < 4; k++)
                buf_free(&grp[k]);
            return -1;
        }
        if (top) {
            int k = (s ? 2 : 0) + (e ? 1 : 0);
            if (has[k]) buf_puts(&grp[k], "|");
            buf_append(&grp[k], b.data ? b.data : "", b.len);
            has[k] = true;
        } else {
            if (nb) buf_puts(&acc, "|");
            buf_append(&acc, b.data ? b.data : "", b.len);
        }
        if (mn < 0 || bmn < mn) mn = bmn;
        if (mx >= 0 && (bmx < 0 || bmx > mx)) mx = bmx;
        all_start &= s;
        all_end &= e;
        any_start |= s;
        any_end |= e;
        nb++;
        buf_free(&b);
        if (p->i < p->n && p->s[p->i] == '|') {
            p->i++;
            continue;
        }
        break;
    }
    if (top) {
        int ng = 0;
        for (int k = 0; k < 4; k++) {
            if (!has[k]) continue; /* no branch with these anchors */
            bool s = k & 2, e = k & 1;
            buf_printf(&acc, "%s%s(?:%s)%s", ng++ ? "|" : "", s ? "" : PT_CHAR_STAR(p),
                       grp[k].data ? grp[k].data : "", e ? "" : PT_CHAR_STAR(p));
        }
        for (int k = 0; k < 4; k++)
            buf_free(&grp[k]);
    }
    if (nb > 1 && single) single->ok = single->contains = false;
    if (top && single) {
        single->anchored = all_start && all_end;
        single->mn = mn < 0 ? 0 : mn;
        single->mx = mx;
    }
    if (!top) {
        an->mn = mn < 0 ? 0 : mn;
        an->mx = mx;
        if ((any_start && !all_start) || (any_end && !all_end)) {
            buf_free(&acc);
            return pt_fail(p, "anchors in only some alternatives of a group are not supported");
        }
        an->start = all_start;
        an->end = all_end;
    }
    buf_append(out, acc.data ? acc.data : "", acc.len);
    buf_free(&acc);
    return 0;
}

int jsrx_pattern(const char *pat, size_t len, struct buf *out, struct jsrx_single *single,
                 struct err *e)
{
    struct pt p = {.s = pat, .n = len, .e = e};
    if (single) single->ok = single->contains = false;
    struct buf r = {0};
    if (pt_alt(&p, &r, true, single, NULL)) {
        buf_free(&r);
        return -1;
    }
    if (p.i < p.n) {
        buf_free(&r);
        return pt_fail(&p, "unbalanced ')'");
    }
    buf_printf(out, "(?:%s)", r.data ? r.data : "");
    buf_free(&r);
    return 0;
}

int jsrx_pattern_len(const char *pat, size_t len, int64_t lo, int64_t hi, struct buf *out,
                     struct err *e)
{
    struct pt p = {.s = pat, .n = len, .e = e, .tick = true};
    struct buf r = {0};
    if (pt_alt(&p, &r, true, NULL, NULL)) {
        buf_free(&r);
        return -1;
    }
    if (p.i < p.n) {
        buf_free(&r);
        return pt_fail(&p, "unbalanced ')'");
    }
    jsrx_len_region(out, lo, hi, r.data ? r.data : "");
    buf_free(&r);
    return 0;
}

void jsrx_len_region(struct buf *out, int64_t lo, int64_t hi, const char *body)
{
    if (hi > JSRX_LEN_MAX) hi = -1; /* longer than any reply: unbounded */
    if (hi < 0)
        buf_printf(out, "(?L%lld,:%s)", (long long)lo, body);
    else
        buf_printf(out, "(?L%lld,%lld:%s)", (long long)lo, (long long)hi, body);
}

/* ---------------------------------------------------------------- formats */

#define RX_H16 "[0-9a-fA-F]{1,4}"
#define RX_OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
#define RX_IPV4 RX_OCTET "(?:\\." RX_OCTET "){3}"
#define RX_LABEL "[a-zA-Z0-9](?:[a-zA-Z0-9\\-]{0,61}[a-zA-Z0-9])?"
#define RX_HOST RX_LABEL "(?:\\." RX_LABEL ")*"
/* full-date with month lengths and leap years (Gregorian) */
#define RX_DATE                                                                                    \
    "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]"    \
    "[0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]" \
    "|[2468][048]|[13579][26])00)-02-29)"
#define RX_TIME                                                                                    \
    "(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\\.[0-9]+)?(?:[zZ]|[+\\-](?:[01][0-9]|2"  \
    "[0-3]):[0-5][0-9])"
#define RX_DUR_TIME "T(?:[0-9]+H(?:[0-9]+M)?(?:[0-9]+S)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
#define RX_DURATION                                                                                \
    "P(?:(?:[0-9]+Y(?:[0-9]+M)?(?:[0-9]+D)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)(?:" RX_DUR_TIME           \
    ")?|" RX_DUR_TIME "|[0-9]+W)"
#define RX_IPV6                                                                                    \
    "(?:(?:" RX_H16 ":){7}" RX_H16 "|(?:" RX_H16 ":){1,7}:|(?:" RX_H16 ":){1,6}:" RX_H16           \
    "|(?:" RX_H16 ":){1,5}(?::" RX_H16 "){1,2}|(?:" RX_H16 ":){1,4}(?::" RX_H16                    \
    "){1,3}|(?:" RX_H16 ":){1,3}(?::" RX_H16 "){1,4}|(?:" RX_H16 ":){1,2}(?::" RX_H16              \
    "){1,5}|" RX_H16 ":(?::" RX_H16 "){1,6}|:(?:(?::" RX_H16 "){1,7}|:)|(?:(?:" RX_H16             \
    ":){6}|::(?:" RX_H16 ":){0,5}|(?:" RX_H16 ":){1}:(?:" RX_H16 ":){0,4}|(?:" RX_H16              \
    ":){2}:(?:" RX_H16 ":){0,3}|(?:" RX_H16 ":){3}:(?:" RX_H16 ":){0,2}|(?:" RX_H16                \
    ":){4}:(?:" RX_H16 ":)?|(?:" RX_H16 ":){5}:)" RX_IPV4 ")"
#define RX_ATEXT "[a-zA-Z0-9!#$%&'*+\\/=?\\^_`{|}\\~\\-]"
/* a URI character in JSON text; '/' may be written \/ */
#define RX_URICH "(?:[a-zA-Z0-9\\-._\\~:?#\\[\\]@!$&'()*+,;=]|\\/|\\\\\\/|%[0-9a-fA-F]{2})"

int jsrx_format(const char *f, struct buf *out, struct err *e)
{
    const char *rx = NULL;
    if (!strcmp(f, "date-time"))
        rx = RX_DATE "[tT]" RX_TIME;
    else if (!strcmp(f, "date"))
        rx = RX_DATE;
    else if (!strcmp(f, "time"))
        rx = RX_TIME;
    else if (!strcmp(f, "duration"))
        rx = RX_DURATION;
    else if (!strcmp(f, "email"))
        rx = RX_ATEXT "+(?:\\." RX_ATEXT "+)*@" RX_HOST;
    else if (!strcmp(f, "hostname"))
        rx = RX_HOST;
    else if (!strcmp(f, "ipv4"))
        rx = RX_IPV4;
    else if (!strcmp(f, "ipv6"))
        rx = RX_IPV6;
    else if (!strcmp(f, "uuid"))
        rx = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
    else if (!strcmp(f, "uri"))
        rx = "[a-zA-Z][a-zA-Z0-9+.\\-]*:" RX_URICH "*";
    if (!rx) return err_set(e, ERR_INVALID, "unsupported format \"%.100s\"", f);
    buf_printf(out, "(?:%s)", rx);
    return 0;
}

/* The format regexes above are ASCII text: each atom (a class, an escaped character, a plain
 * character) is one character of the string, except the JSON escape `\/` (regex text
 * `\\\/`), one character written with two. */
int jsrx_format_ticked(const char *f, struct buf *out, struct err *e)
{
    struct buf rx = {0};
    if (jsrx_format(f, &rx, e)) {
        buf_free(&rx);
        return -1;
    }
    const char *t = rx.data;
    size_t n = rx.len;
    for (size_t i = 0; i < n;) {
        char c = t[i];
        size_t st = i;
        if (c == '(' || c == ')' || c == '|' || c == '*' || c == '+' || c == '?') {
            if (c == '(' && i + 2 < n && t[i + 1] == '?' && t[i + 2] == ':') i += 2;
            buf_append(out, t + st, i + 1 - st);
            i++;
            continue;
        }
        if (c == '{') { /* quantifier: copied */
            while (i < n && t[i] != '}')
                i++;
            buf_append(out, t + st, i + 1 - st);
            i++;
            continue;
        }
        if (c == '[') {
            i++;
            if (i < n && t[i] == '^') i++;
            if (i < n && t[i] == ']') i++;
            while (i < n && t[i] != ']')
                i += t[i] == '\\' ? 2 : 1;
            i++;
        } else if (c == '\\' && i + 3 < n && t[i + 1] == '\\' && t[i + 2] == '\\' &&
                   t[i + 3] == '/') {
            i += 4; /* \/ in the JSON text: one character */
        } else if (c == '\\') {
            i += 2;
        } else {
            i++;
        }
        buf_puts(out, "(?:");
        buf_append(out, t + st, i - st);
        buf_puts(out, "(?T))");
    }
    buf_free(&rx);
    return 0;
}

/* ---------------------------------------------------------------- key exclusion */

struct kname {
    const char *s;
    size_t n;
};

static uint32_t dec_cp(const char *s, size_t n, size_t *i)
{
    struct pt p = {.s = s, .n = n, .i = *i};
    uint32_t c = pt_cp(&p);
    *i = p.i;
    return c;
}

static int cmp_cp_first(const void *a, const void *b)
{
    const struct kname *x = a, *y = b;
    size_t i = 0, j = 0;
    uint32_t cx = x->n ? dec_cp(x->s, x->n, &i) : 0, cy = y->n ? dec_cp(y->s, y->n, &j) : 0;
    if (!x->n || !y->n) return (int)(x->n != 0) - (int)(y->n != 0);
    return cx < cy ? -1 : cx > cy;
}

/* Sorts names by first code point, the empty names first; returns how many are empty. */
static int sort_by_first_cp(struct kname *names, int n)
{
    qsort(names, (size_t)n, sizeof *names, cmp_cp_first);
    int i = 0;
    while (i < n && names[i].n == 0)
        i++;
    return i;
}

/* The names from names[i] on that share its first code point (names sorted by
 * sort_by_first_cp): their tails after it, in a new array of *ns entries (NULL on no memory);
 * *end is the index past them. */
static struct kname *first_cp_tails(const struct kname *names, int n, int i, int *ns, int *end)
{
    size_t k = 0;
    uint32_t c = dec_cp(names[i].s, names[i].n, &k);
    struct kname *sub = malloc((size_t)n * sizeof *sub);
    if (!sub) return NULL;
    int j = i;
    *ns = 0;
    while (j < n) {
        size_t kk = 0;
        uint32_t cj = dec_cp(names[j].s, names[j].n, &kk);
        if (cj != c) break;
        sub[*ns].s = names[j].s + kk;
        sub[*ns].n = names[j].n - kk;
        (*ns)++;
        j++;
    }
    *end = j;
    return sub;
}

/* regex for strings (content) that are not in names[0..n) */
static void key_not_in_rec(struct kname *names, int n, struct buf *out, int depth)
{
    int i = sort_by_first_cp(names, n);
    bool has_empty = i > 0;
    struct cpset firsts = {0};
    struct buf alts = {0};
    int nalt = 0;
    while (i < n) {
        size_t k = 0;
        uint32_t c = dec_cp(names[i].s, names[i].n, &k);
        int ns, j;
        struct kname *sub = first_cp_tails(names, n, i, &ns, &j);
        if (!sub) {
            buf_free(&alts);
            return;
        }
        cp_add(&firsts, c, c);
        struct cpset one = {0};
        cp_add(&one, c, c);
        if (nalt++) buf_puts(&alts, "|");
        emit_set(&alts, &one, true);
        key_not_in_rec(sub, ns, &alts, depth + 1);
        free(sub);
        i = j;
    }
    struct cpset other = firsts;
    cp_negate(&other);
    if (nalt++) buf_puts(&alts, "|");
    emit_set(&alts, &other, true);
    buf_puts(&alts, JSRX_CHAR "*");
    buf_printf(out, "(?:%s)%s", alts.data, has_empty ? "" : "?");
    buf_free(&alts);
}

#define RAWCH "[^\"\\\\\\x00-\\x1F]"
#define ESCCH "\\\\[\"\\\\bfnrt]|\\\\u00(?:0[0-7bBeEfF]|1[0-9a-fA-F])"

/* content of unescaped characters only, not in names (names have no escaped characters) */
static void raw_not_in_rec(struct kname *names, int n, struct buf *out)
{
    int i = sort_by_first_cp(names, n);
    bool has_empty = i > 0;
    struct buf alts = {0}, excl = {0};
    int nalt = 0;
    while (i < n) {
        size_t k = 0;
        uint32_t c = dec_cp(names[i].s, names[i].n, &k);
        int ns, j;
        struct kname *sub = first_cp_tails(names, n, i, &ns, &j);
        if (!sub) {
            buf_free(&alts);
            buf_free(&excl);
            return;
        }
        if (nalt++) buf_puts(&alts, "|");
        jsrx_literal(names[i].s, k, &alts);
        raw_not_in_rec(sub, ns, &alts);
        free(sub);
        put_class_cp(&excl, c);
        i = j;
    }
    if (nalt++) buf_puts(&alts, "|");
    buf_printf(&alts, "[^%s\"\\\\\\x00-\\x1F]" RAWCH "*", excl.data ? excl.data : "");
    buf_printf(out, "(?:%s)%s", alts.data, has_empty ? "" : "?");
    buf_free(&alts);
    buf_free(&excl);
}

int jsrx_key_not_in(const char *const *names, const size_t *lens, int n, struct buf *out,
                    struct err *e)
{
    if (n > 100000) return err_set(e, ERR_INVALID, "too many property names");
    for (int i = 0; i < n; i++) /* the exclusion regex recurses once per character */
        if (lens[i] > JSRX_MAX_NAME)
            return err_set(e, ERR_INVALID, "property name longer than %d bytes", JSRX_MAX_NAME);
    struct kname *k = calloc((size_t)n + 1, sizeof *k);
    if (!k) return err_set(e, ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        k[i].s = names[i];
        k[i].n = lens[i];
    }
    bool plain = true; /* no name needs escapes: then any escaped key is "other" */
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < lens[i]; j++) {
            unsigned char ch = (unsigned char)names[i][j];
            if (ch < 0x20 || ch == '"' || ch == '\\') plain = false;
        }
    buf_puts(out, "\"");
    if (n == 0)
        buf_puts(out, JSRX_CHAR "*");
    else if (plain) {
        buf_puts(out, "(?:" RAWCH "*(?:" ESCCH ")" JSRX_CHAR "*|");
        raw_not_in_rec(k, n, out);
        buf_puts(out, ")");
    } else
        key_not_in_rec(k, n, out, 0);
    buf_puts(out, "\"");
    free(k);
    return 0;
}

/* ---------------------------------------------------------------- numbers */

int jsrx_dec_parse(const char *s, struct jsrx_dec *d)
{
    memset(d, 0, sizeof *d);
    const char *p = s;
    if (*p == '-') {
        d->neg = true;
        p++;
    }
    char digits[800];
    size_t nd = 0;
    long point = -1; /* digits before the point */
    for (; (*p >= '0' && *p <= '9') || *p == '.'; p++) {
        if (*p == '.') {
            if (point >= 0) return -1;
            point = (long)nd;
            continue;
        }
        if (nd >= sizeof digits - 1) return -1;
        digits[nd++] = *p;
    }
    if (nd == 0) return -1;
    if (point < 0) point = (long)nd;
    long ex = 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        ex = strtol(p, (char **)&p, 10);
        if (ex > 300 || ex < -300) return -1;
    }
    if (*p) return -1;
    point += ex;
    /* integer part: digits[0..point) (padded with zeros if point > nd) */
    size_t ni = 0;
    for (long i = 0; i < point; i++) {
        char c = i < (long)nd ? digits[i] : '0';
        if (ni == 0 && c == '0') continue;
        if (ni >= sizeof d->ip - 1) return -1;
        d->ip[ni++] = c;
    }
    if (ni == 0) d->ip[ni++] = '0';
    d->ip[ni] = 0;
    size_t nf = 0;
    for (long i = point < 0 ? point : point; i < (long)nd; i++) {
        char c = i < 0 ? '0' : digits[i];
        if (nf >= sizeof d->fp - 1) return -1;
        d->fp[nf++] = c;
    }
    while (nf && d->fp[nf - 1] == '0')
        nf--;
    d->fp[nf] = 0;
    if (!strcmp(d->ip, "0") && nf == 0) d->neg = false;
    return 0;
}

/* compare magnitudes */
static int mag_cmp(const struct jsrx_dec *a, const struct jsrx_dec *b)
{
    size_t la = strlen(a->ip), lb = strlen(b->ip);
    if (la != lb) return la < lb ? -1 : 1;
    int c = strcmp(a->ip, b->ip);
    if (c) return c < 0 ? -1 : 1;
    c = strcmp(a->fp, b->fp); /* no trailing zeros: lexicographic works */
    return c < 0 ? -1 : c > 0;
}

int jsrx_dec_cmp(const struct jsrx_dec *a, const struct jsrx_dec *b)
{
    if (a->neg != b->neg) return a->neg ? -1 : 1;
    int c = mag_cmp(a, b);
    return a->neg ? -c : c;
}

/* digit string +1 / -1 (no leading zeros kept) */
static void ds_inc(char *s)
{
    size_t n = strlen(s);
    long i = (long)n - 1;
    while (i >= 0 && s[i] == '9')
        s[i--] = '0';
    if (i >= 0)
        s[i]++;
    else {
        memmove(s + 1, s, n + 1);
        s[0] = '1';
    }
}

static void ds_dec(char *s) /* s > 0 */
{
    size_t n = strlen(s);
    long i = (long)n - 1;
    while (i >= 0 && s[i] == '0')
        s[i--] = '9';
    if (i >= 0) s[i]--;
    if (s[0] == '0' && n > 1) memmove(s, s + 1, n);
}

static void digit_class(struct buf *o, char a, char b)
{
    if (a == '0' && b == '9')
        buf_puts(o, "[0-9]");
    else if (a == b)
        buf_printf(o, "%c", a);
    else
        buf_printf(o, "[%c-%c]", a, b);
}

/* strings of length n ≥ s (ge) or ≤ s (!ge), digit by digit */
static void bound_suffix(struct buf *o, const char *s, size_t n, bool ge)
{
    if (n == 0) return;
    bool trivial = true;
    for (size_t i = 0; i < n; i++)
        if (s[i] != (ge ? '0' : '9')) trivial = false;
    if (trivial) {
        if (n == 1)
            buf_puts(o, "[0-9]");
        else
            buf_printf(o, "[0-9]{%zu}", n);
        return;
    }
    buf_puts(o, "(?:");
    buf_printf(o, "%c", s[0]);
    bound_suffix(o, s + 1, n - 1, ge);
    if (ge ? s[0] < '9' : s[0] > '0') {
        buf_puts(o, "|");
        if (ge)
            digit_class(o, (char)(s[0] + 1), '9');
        else
            digit_class(o, '0', (char)(s[0] - 1));
        if (n > 1) buf_printf(o, "[0-9]{%zu}", n - 1);
    }
    buf_puts(o, ")");
}

/* same-length range a..b (a <= b) */
static void same_len(struct buf *o, const char *a, const char *b, size_t n)
{
    size_t p = 0;
    while (p < n && a[p] == b[p])
        p++;
    buf_append(o, a, p);
    if (p == n) return;
    size_t k = n - p - 1;
    bool a_rest0 = true, b_rest9 = true;
    for (size_t i = p + 1; i < n; i++) {
        if (a[i] != '0') a_rest0 = false;
        if (b[i] != '9') b_rest9 = false;
    }
    if (a_rest0 && b_rest9) {
        digit_class(o, a[p], b[p]);
        if (k) buf_printf(o, "[0-9]{%zu}", k);
        return;
    }
    buf_puts(o, "(?:");
    buf_printf(o, "%c", a[p]);
    bound_suffix(o, a + p + 1, k, true);
    if (b[p] - a[p] > 1) {
        buf_puts(o, "|");
        digit_class(o, (char)(a[p] + 1), (char)(b[p] - 1));
        if (k) buf_printf(o, "[0-9]{%zu}", k);
    }
    buf_printf(o, "|%c", b[p]);
    bound_suffix(o, b + p + 1, k, false);
    buf_puts(o, ")");
}

/* integers lo..hi (digit strings; hi NULL = unbounded), lo <= hi */
static void int_range(struct buf *o, const char *lo, const char *hi)
{
    size_t nl = strlen(lo), nh = hi ? strlen(hi) : 0;
    buf_puts(o, "(?:");
    if (hi && nl == nh) {
        same_len(o, lo, hi, nl);
    } else {
        char nines[420];
        memset(nines, '9', nl);
        nines[nl] = 0;
        same_len(o, lo, nines, nl);
        if (!hi)
            buf_printf(o, "|[1-9][0-9]{%zu,}", nl);
        else {
            if (nh > nl + 1) {
                if (nh - 1 == nl + 1)
                    buf_printf(o, "|[1-9][0-9]{%zu}", nl);
                else
                    buf_printf(o, "|[1-9][0-9]{%zu,%zu}", nl, nh - 2);
            }
            char first[420];
            first[0] = '1';
            memset(first + 1, '0', nh - 1);
            first[nh] = 0;
            buf_puts(o, "|");
            same_len(o, first, hi, nh);
        }
    }
    buf_puts(o, ")");
}

/* Nonempty fraction digit strings g (written after '.') with s < / <= 0.g < / <= t.
 * s NULL: no lower bound (>= 0); t NULL: no upper bound (< 1). rem: max digits (-1 unlimited).
 * Appends nothing and returns false when the set is empty. *empty_ok tells whether the number
 * without a fraction (value .0) is in range. */
static bool frac_nonempty(struct buf *o, const char *s, bool se, const char *t, bool te, int rem);

static bool frac_any(struct buf *o, const char *s, bool se, const char *t, bool te, int rem)
{
    /* possibly-empty strings; returns false if the set is empty; appends regex (may be empty) */
    bool s_free = !s || (!*s && !se);
    bool empty_ok = s_free && (!t || *t || !te);
    struct buf ne = {0};
    bool has = rem != 0 && frac_nonempty(&ne, s, se, t, te, rem);
    if (has && empty_ok)
        buf_printf(o, "(?:%s)?", ne.data);
    else if (has)
        buf_append(o, ne.data, ne.len);
    buf_free(&ne);
    return has || empty_ok;
}

static void rep_digits(struct buf *o, int rem) /* [0-9]* bounded by rem */
{
    if (rem < 0)
        buf_puts(o, "[0-9]*");
    else if (rem > 0)
        buf_printf(o, "[0-9]{0,%d}", rem);
}

static bool frac_nonempty(struct buf *o, const char *s, bool se, const char *t, bool te, int rem)
{
    if (rem == 0) return false;
    bool s_free = !s || (!*s && !se);
    if (s && !*s && se && !t) { /* any fraction with a nonzero digit */
        if (rem < 0)
            buf_puts(o, "(?:0*[1-9][0-9]*)");
        else {
            buf_puts(o, "(?:");
            for (int i = 0; i < rem; i++)
                buf_printf(o, "%s0{%d}[1-9][0-9]{0,%d}", i ? "|" : "", i, rem - 1 - i);
            buf_puts(o, ")");
        }
        return true;
    }
    if (t && !*t) { /* upper bound 0: only zeros, if allowed */
        if (!s_free || te) return false;
        if (rem < 0)
            buf_puts(o, "0+");
        else
            buf_printf(o, "0{1,%d}", rem);
        return true;
    }
    struct buf alts = {0};
    int nalt = 0;
    char free_lo = 0, free_hi = 0;
    for (char c = '0'; c <= '9'; c++) {
        /* lower: 0 free, 1 sub(s'), -1 fail */
        int lw;
        const char *ls = NULL;
        if (s_free)
            lw = 0;
        else if (!*s) { /* strictly > 0 */
            if (c > '0')
                lw = 0;
            else {
                lw = 1;
                ls = s;
            }
        } else if (c > s[0])
            lw = 0;
        else if (c == s[0]) {
            lw = 1;
            ls = s + 1;
        } else
            lw = -1;
        int up;
        const char *us = NULL;
        if (!t)
            up = 0;
        else if (c < t[0])
            up = 0;
        else if (c == t[0]) {
            up = 1;
            us = t + 1;
        } else
            up = -1;
        if (lw < 0 || up < 0) continue;
        if (lw == 0 && up == 0) {
            if (!free_lo) free_lo = c;
            free_hi = c;
            continue;
        }
        struct buf sub = {0};
        int r2 = rem < 0 ? -1 : rem - 1;
        bool ok = frac_any(&sub, lw ? ls : NULL, se, up ? us : NULL, te, r2);
        if (ok) {
            if (nalt++) buf_puts(&alts, "|");
            buf_printf(&alts, "%c%s", c, sub.data ? sub.data : "");
        }
        buf_free(&sub);
    }
    if (free_lo) {
        if (nalt++) buf_puts(&alts, "|");
        digit_class(&alts, free_lo, free_hi);
        rep_digits(&alts, rem < 0 ? -1 : rem - 1);
    }
    if (nalt) buf_printf(o, "(?:%s)", alts.data);
    buf_free(&alts);
    return nalt > 0;
}

/* magnitudes m (written without sign) with lo <(=) m <(=) hi; lo always set (>= 0) */
static bool magnitude(struct buf *o, const struct jsrx_dec *lo, bool lo_excl,
                      const struct jsrx_dec *hi, bool hi_excl, bool integer, int max_frac)
{
    if (hi) {
        int c = mag_cmp(lo, hi);
        if (c > 0 || (c == 0 && (lo_excl || hi_excl))) return false;
    }
    if (integer || max_frac == 0) {
        char L[420], H[420];
        strcpy(L, lo->ip);
        if (lo->fp[0] || lo_excl) ds_inc(L);
        if (hi) {
            strcpy(H, hi->ip);
            if (!hi->fp[0] && hi_excl) {
                if (!strcmp(H, "0")) return false;
                ds_dec(H);
            }
            size_t a = strlen(L), b = strlen(H);
            if (a > b || (a == b && strcmp(L, H) > 0)) return false;
        }
        int_range(o, L, hi ? H : NULL);
        return true;
    }
    struct buf alts = {0};
    int nalt = 0;
    const char *fany = max_frac < 0 ? "(?:\\.[0-9]+)?" : NULL;
    char fanyb[64];
    if (!fany) {
        snprintf(fanyb, sizeof fanyb, "(?:\\.[0-9]{1,%d})?", max_frac);
        fany = fanyb;
    }
    bool same_ip = hi && !strcmp(lo->ip, hi->ip);
    if (same_ip) {
        struct buf ne = {0};
        bool s_free = !lo->fp[0] && !lo_excl;
        bool empty_ok = s_free && (hi->fp[0] || !hi_excl);
        bool has = frac_nonempty(&ne, lo->fp, lo_excl, hi->fp, hi_excl, max_frac);
        if (has || empty_ok) {
            buf_puts(&alts, lo->ip);
            if (has) buf_printf(&alts, empty_ok ? "(?:\\.%s)?" : "\\.%s", ne.data);
            nalt++;
        }
        buf_free(&ne);
    } else {
        /* int part == lo.ip */
        struct buf ne = {0};
        bool empty_ok = !lo->fp[0] && !lo_excl;
        bool has = frac_nonempty(&ne, lo->fp, lo_excl, NULL, false, max_frac);
        if (has || empty_ok) {
            buf_puts(&alts, lo->ip);
            if (has) buf_printf(&alts, empty_ok ? "(?:\\.%s)?" : "\\.%s", ne.data);
            nalt++;
        }
        buf_reset(&ne);
        /* lo.ip < int part < hi.ip */
        char L[420], H[420];
        strcpy(L, lo->ip);
        ds_inc(L);
        bool mid = true;
        if (hi) {
            strcpy(H, hi->ip);
            if (!strcmp(H, "0"))
                mid = false;
            else {
                ds_dec(H);
                size_t a = strlen(L), b = strlen(H);
                if (a > b || (a == b && strcmp(L, H) > 0)) mid = false;
            }
        }
        if (mid) {
            if (nalt++) buf_puts(&alts, "|");
            int_range(&alts, L, hi ? H : NULL);
            buf_puts(&alts, fany);
        }
        if (hi) { /* int part == hi.ip */
            bool eok = hi->fp[0] || !hi_excl;
            bool h2 = frac_nonempty(&ne, NULL, false, hi->fp, hi_excl, max_frac);
            if (h2 || eok) {
                if (nalt++) buf_puts(&alts, "|");
                buf_puts(&alts, hi->ip);
                if (h2) buf_printf(&alts, eok ? "(?:\\.%s)?" : "\\.%s", ne.data);
            }
        }
        buf_free(&ne);
    }
    if (nalt) buf_printf(o, "(?:%s)", alts.data);
    buf_free(&alts);
    return nalt > 0;
}

int jsrx_number(const struct jsrx_dec *lo, bool lo_excl, const struct jsrx_dec *hi, bool hi_excl,
                bool integer, int max_frac, struct buf *out)
{
    if (!lo && !hi) {
        if (integer || max_frac == 0)
            buf_puts(out, "-?(?:0|[1-9][0-9]*)");
        else if (max_frac > 0)
            buf_printf(out, "-?(?:0|[1-9][0-9]*)(?:\\.[0-9]{1,%d})?", max_frac);
        else
            buf_puts(out, "-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?(?:[eE][+\\-]?[0-9]+)?");
        return 0;
    }
    struct jsrx_dec zero;
    jsrx_dec_parse("0", &zero);
    struct buf pos = {0}, neg = {0};
    bool has_pos = false, has_neg = false;
    /* non-negative side: m in [max(lo,0), hi] */
    if (!hi || !hi->neg) {
        const struct jsrx_dec *l = &zero;
        bool le = false;
        if (lo && !lo->neg) {
            l = lo;
            le = lo_excl;
        }
        has_pos = magnitude(&pos, l, le, hi, hi_excl, integer, max_frac);
    }
    /* negative side: x = -m, m in [max(-hi,0), -lo] */
    if (!lo || lo->neg) {
        struct jsrx_dec ml, mh;
        const struct jsrx_dec *l = &zero;
        bool le = false;
        if (hi && hi->neg) {
            ml = *hi;
            ml.neg = false;
            l = &ml;
            le = hi_excl;
        } else if (hi && !hi->neg && !strcmp(hi->ip, "0") && !hi->fp[0] && hi_excl) {
            le = true; /* x < 0 */
        }
        const struct jsrx_dec *h = NULL;
        if (lo) {
            mh = *lo;
            mh.neg = false;
            h = &mh;
        }
        has_neg = magnitude(&neg, l, le, h, lo_excl, integer, max_frac);
    }
    if (!has_pos && !has_neg) {
        buf_free(&pos);
        buf_free(&neg);
        return 1;
    }
    if (has_pos && has_neg)
        buf_printf(out, "(?:%s|-%s)", pos.data, neg.data);
    else if (has_pos)
        buf_append(out, pos.data, pos.len);
    else
        buf_printf(out, "-%s", neg.data);
    buf_free(&pos);
    buf_free(&neg);
    return 0;
}

int jsrx_pattern_complement(const char *pat, size_t len, struct buf *out, struct err *e)
{
    struct jsrx_single one = {0};
    struct buf body = {0};
    int r = jsrx_pattern(pat, len, &body, &one, e);
    buf_free(&body);
    if (r) {
        buf_free(&one.set);
        buf_free(&one.notset);
        return -1;
    }
    if (one.contains && !one.ok) { /* no character of X at all */
        if (one.notset.len)
            buf_printf(out, "(?:%s)*", one.notset.data);
        else
            buf_puts(out, "");
        buf_free(&one.set);
        buf_free(&one.notset);
        return 0;
    }
    if (!one.ok) {
        buf_free(&one.set);
        buf_free(&one.notset);
        return err_set(e, ERR_UNSUPPORTED,
                       "the complement of pattern /%.100s/ is supported only for the forms ^X{m,n}$ "
                       "and X, X+ (one character class)",
                       pat);
    }
    /* not ^X{lo,hi}$: some character outside X, or a length outside [lo, hi] */
    buf_printf(out, "(?:" JSRX_CHAR "*(?:%s)" JSRX_CHAR "*", one.notset.data);
    if (one.lo > 0) buf_printf(out, "|" JSRX_CHAR "{0,%lld}", (long long)one.lo - 1);
    if (one.hi >= 0) buf_printf(out, "|" JSRX_CHAR "{%lld,}", (long long)one.hi + 1);
    buf_puts(out, ")");
    buf_free(&one.set);
    buf_free(&one.notset);
    return 0;
}

/* ---------------------------------------------------------------- exports for jsonschema_keys.c */

void jsrx_cp_add(struct jsrx_cpset *s, uint32_t lo, uint32_t hi)
{
    cp_add(s, lo, hi);
}

void jsrx_cp_negate(struct jsrx_cpset *s)
{
    cp_negate(s);
}

void jsrx_emit_set(struct buf *o, const struct jsrx_cpset *s, bool canonical)
{
    emit_set(o, s, canonical);
}

uint32_t jsrx_pt_cp(const char *pat, size_t len, size_t *i)
{
    struct pt p = {.s = pat, .n = len, .i = *i};
    uint32_t c = pt_cp(&p);
    *i = p.i;
    return c;
}

int jsrx_pt_escape(const char *pat, size_t len, size_t *i, struct jsrx_cpset *set, bool in_class,
                   struct err *e)
{
    struct pt p = {.s = pat, .n = len, .i = *i, .e = e};
    int r = pt_escape(&p, set, in_class);
    *i = p.i;
    return r;
}

int jsrx_pt_class(const char *pat, size_t len, size_t *i, struct jsrx_cpset *set, struct err *e)
{
    struct pt p = {.s = pat, .n = len, .i = *i, .e = e};
    int r = pt_class(&p, set);
    *i = p.i;
    return r;
}

/* The formats as ECMA patterns over the decoded value: the regexes above are ASCII and mean the
 * same there, except a URI's `/`, which JSON text may also spell `\/`. */
#define RX_URICH_ECMA "(?:[a-zA-Z0-9\\-._\\~:?#\\[\\]@!$&'()*+,;=\\/]|%[0-9a-fA-F]{2})"
int jsrx_format_ecma(const char *f, struct buf *out, struct err *e)
{
    if (!strcmp(f, "uri")) {
        buf_puts(out, "^(?:[a-zA-Z][a-zA-Z0-9+.\\-]*:" RX_URICH_ECMA "*)$");
        return 0;
    }
    buf_puts(out, "^");
    if (jsrx_format(f, out, e)) return -1;
    buf_puts(out, "$");
    return 0;
}
