/* jsonschema_mult — `multipleOf` for integers as regexes (issue 19): the canonical decimal
 * spellings of the integers in [lo, hi] (either bound optional) that are multiples of m.
 *
 * Divisibility by m is a DFA over the decimal digits read left to right (residue r, digit d:
 * (10 r + d) mod m), minimized (Moore) so that factors 2 and 5 of m cost little; its regex comes
 * from state elimination. Bounds are split digit by digit as in any digit-range regex: a piece
 * is a fixed prefix q followed by exactly k free digits, and the free digits must take the DFA
 * from q's residue to 0 — a length region `(?L<k>,<k>:…)` (docs/grammar.md "Length regions")
 * around the DFA's regex from that state, each digit ticked. Numbers with more digits than a
 * lower bound are one region of at least that many ticks. docs/jsonschema.md "Numbers". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/jsonschema_internal.h"

#define MOD_MAX_M 10000      /* residues before minimization */
#define MOD_MAX_CLASSES 40   /* states left for state elimination */
#define MOD_MAX_RX (64u << 10) /* regex text in all */

enum { P_ALT, P_CAT, P_ATOM };
struct lab {
    char *s; /* NULL: no path; "": the empty string */
    int prec;
};

struct moddfa {
    int n;         /* classes */
    int (*tr)[10]; /* class x digit -> class */
    int *cls;      /* residue -> class */
    int acc;       /* class of residue 0 */
};

static void moddfa_free(struct moddfa *d)
{
    free(d->tr);
    free(d->cls);
}

/* Moore minimization of the residue automaton (accepting: residue 0). */
static int moddfa_build(struct moddfa *d, int m, struct err *e)
{
    memset(d, 0, sizeof *d);
    int *cls = malloc((size_t)m * sizeof *cls), *nc = malloc((size_t)m * sizeof *nc);
    int *sig = malloc((size_t)m * 11 * sizeof *sig);
    if (!cls || !nc || !sig) {
        free(cls);
        free(nc);
        free(sig);
        return err_set(e, ERR_NOMEM, "out of memory");
    }
    for (int r = 0; r < m; r++)
        cls[r] = r == 0 ? 0 : 1;
    int n = m > 1 ? 2 : 1;
    for (;;) {
        /* signature: own class, then the class after each digit; renumber by first occurrence */
        for (int r = 0; r < m; r++) {
            sig[r * 11] = cls[r];
            for (int g = 0; g < 10; g++)
                sig[r * 11 + 1 + g] = cls[(10 * r + g) % m];
        }
        int nn = 0;
        for (int r = 0; r < m; r++) {
            int c = -1;
            for (int q = 0; q < r && c < 0; q++)
                if (!memcmp(&sig[q * 11], &sig[r * 11], 11 * sizeof *sig)) c = nc[q];
            nc[r] = c >= 0 ? c : nn++;
        }
        memcpy(cls, nc, (size_t)m * sizeof *cls);
        if (nn == n) break;
        n = nn;
    }
    free(nc);
    d->n = n;
    d->cls = cls;
    d->tr = malloc((size_t)n * sizeof *d->tr);
    if (!d->tr) {
        free(sig);
        moddfa_free(d);
        return err_set(e, ERR_NOMEM, "out of memory");
    }
    for (int r = 0; r < m; r++)
        for (int g = 0; g < 10; g++)
            d->tr[cls[r]][g] = cls[(10 * r + g) % m];
    d->acc = cls[0];
    free(sig);
    return 0;
}

/* ---- labels (regex text with its precedence) */

static void lab_free(struct lab *l)
{
    free(l->s);
    l->s = NULL;
}

static char *dupn(const char *a, size_t n)
{
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, a, n);
        s[n] = 0;
    }
    return s;
}

static void put_at(struct buf *b, const struct lab *l, int need)
{
    if (l->prec < need) buf_puts(b, "(?:");
    buf_puts(b, l->s);
    if (l->prec < need) buf_puts(b, ")");
}

/* a (loop)* c, any part may be NULL (loop) or "" (empty); result in out. -1 on OOM. */
static int lab_cat3(const struct lab *a, const struct lab *loop, const struct lab *c,
                    struct lab *out)
{
    out->s = NULL;
    if (!a->s || !c->s) return 0;
    struct buf b = {0};
    int parts = 0;
    if (a->s[0]) {
        put_at(&b, a, P_CAT);
        parts++;
    }
    if (loop && loop->s && loop->s[0]) {
        put_at(&b, loop, P_ATOM);
        buf_puts(&b, "*");
        parts++;
    }
    if (c->s[0]) {
        put_at(&b, c, P_CAT);
        parts++;
    }
    if (buf_puts(&b, "")) {
        buf_free(&b);
        return -1;
    }
    out->s = buf_steal(&b);
    if (!out->s) return -1;
    if (parts == 0)
        out->prec = P_ATOM;
    else if (parts == 1 && !(loop && loop->s && loop->s[0]))
        out->prec = a->s[0] ? a->prec : c->prec;
    else
        out->prec = P_CAT; /* X* is wrapped before another quantifier */
    return 0;
}

/* into |= add (add consumed) */
static int lab_alt(struct lab *into, struct lab *add)
{
    if (!add->s) return 0;
    if (!into->s) {
        *into = *add;
        add->s = NULL;
        return 0;
    }
    if (!strcmp(into->s, add->s)) {
        lab_free(add);
        return 0;
    }
    struct buf b = {0};
    const struct lab *x = into, *y = add;
    if (!x->s[0] || !y->s[0]) { /* one is empty: (?:other)? */
        const struct lab *o = x->s[0] ? x : y;
        put_at(&b, o, P_ATOM);
        buf_puts(&b, "?");
    } else {
        buf_puts(&b, x->s);
        buf_puts(&b, "|");
        buf_puts(&b, y->s);
    }
    if (buf_puts(&b, "")) {
        buf_free(&b);
        return -1;
    }
    bool opt = !x->s[0] || !y->s[0];
    lab_free(into);
    lab_free(add);
    into->s = buf_steal(&b);
    into->prec = opt ? P_CAT : P_ALT;
    return into->s ? 0 : -1;
}

/* The regex of the digit strings taking d from class `start` to the accepting class. With
 * start < 0, the canonical non-negative integers instead (no leading zero; start == -1 also
 * "0", -2 not). Each digit followed by (?T) when tick. */
static int mod_regex(const struct moddfa *d, int start, int target, bool tick, struct buf *out,
                     struct err *e)
{
    int n = d->n, N = n + 2, I = n, F = n + 1;
    struct lab *R = calloc((size_t)N * (size_t)N, sizeof *R);
    int rc = -1;
    if (!R) return err_set(e, ERR_NOMEM, "out of memory");
#define AT(i, j) R[(size_t)(i) * (size_t)N + (size_t)(j)]
    /* digit edges, digits to one target as one class */
    for (int src = 0; src <= n; src++) {
        if (src == I && start >= 0) continue;
        for (int t = 0; t < n; t++) {
            char cl[16];
            int k = 0;
            for (int g = src == I ? 1 : 0; g < 10; g++) {
                /* from I: the first digit, read from residue 0 */
                int tg = src == I ? d->tr[d->acc][g] : d->tr[src][g];
                if (tg == t) cl[k++] = (char)('0' + g);
            }
            if (!k) continue;
            struct buf b = {0};
            if (k == 1)
                buf_printf(&b, "%c", cl[0]);
            else {
                buf_puts(&b, "[");
                for (int q = 0; q < k; q++) {
                    int r = q;
                    while (r + 1 < k && cl[r + 1] == cl[r] + 1)
                        r++;
                    if (r - q >= 2)
                        buf_printf(&b, "%c-%c", cl[q], cl[r]);
                    else
                        for (int z = q; z <= r; z++)
                            buf_printf(&b, "%c", cl[z]);
                    q = r;
                }
                buf_puts(&b, "]");
            }
            if (tick) buf_puts(&b, "(?T)");
            if (buf_puts(&b, "")) {
                buf_free(&b);
                goto out;
            }
            AT(src, t).s = buf_steal(&b);
            AT(src, t).prec = tick ? P_CAT : P_ATOM;
            if (!AT(src, t).s) goto out;
        }
    }
    if (start >= 0) {
        AT(I, start).s = dupn("", 0);
        AT(I, start).prec = P_ATOM;
        if (!AT(I, start).s) goto out;
    } else if (start == -1) {
        AT(I, F).s = dupn(tick ? "0(?T)" : "0", tick ? 5 : 1);
        AT(I, F).prec = tick ? P_CAT : P_ATOM;
        if (!AT(I, F).s) goto out;
    }
    {
        struct lab eps = {dupn("", 0), P_ATOM};
        if (!eps.s || lab_alt(&AT(target, F), &eps)) {
            lab_free(&eps);
            goto out;
        }
    }
    /* eliminate the classes; a class k: i -> k -> j becomes i -> j */
    for (int k = 0; k < n; k++) {
        for (int i = 0; i < N; i++) {
            if (i == k || !AT(i, k).s) continue;
            for (int j = 0; j < N; j++) {
                if (j == k || !AT(k, j).s) continue;
                struct lab p;
                if (lab_cat3(&AT(i, k), &AT(k, k), &AT(k, j), &p) || lab_alt(&AT(i, j), &p)) {
                    lab_free(&p);
                    err_set(e, ERR_NOMEM, "out of memory");
                    goto out;
                }
                if (AT(i, j).s && strlen(AT(i, j).s) > MOD_MAX_RX) {
                    err_set(e, ERR_UNSUPPORTED, "multipleOf: the regex needs more than %u bytes",
                            MOD_MAX_RX);
                    goto out;
                }
            }
        }
        for (int i = 0; i < N; i++) {
            lab_free(&AT(i, k));
            lab_free(&AT(k, i));
        }
    }
    if (!AT(I, F).s) {
        rc = 1;
        goto out;
    }
    put_at(out, &AT(I, F), P_CAT);
    rc = 0;
out:
    if (rc < 0 && !e->msg[0]) err_set(e, ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < (size_t)N * (size_t)N; i++)
        lab_free(&R[i]);
    free(R);
#undef AT
    return rc;
}

/* ---- finite sets of digit strings as a trie-shaped regex */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* strings v[0..n) (sorted, distinct) sharing their first `at` characters */
static void trie_rx(char **v, int n, size_t at, bool tick, struct buf *out)
{
    bool end = false;
    int alts = 0;
    for (int i = 0; i < n;) {
        if (!v[i][at]) {
            end = true;
            i++;
            continue;
        }
        int j = i;
        while (j < n && v[j][at] == v[i][at])
            j++;
        alts++;
        i = j;
    }
    if (!alts) return;
    bool wrap = alts > 1 || end;
    if (wrap) buf_puts(out, "(?:");
    int k = 0;
    for (int i = 0; i < n;) {
        if (!v[i][at]) {
            i++;
            continue;
        }
        int j = i;
        while (j < n && v[j][at] == v[i][at])
            j++;
        buf_printf(out, "%s%c%s", k++ ? "|" : "", v[i][at], tick ? "(?T)" : "");
        trie_rx(v + i, j - i, at + 1, tick, out);
        i = j;
    }
    if (wrap) buf_puts(out, end ? ")?" : ")");
}

struct strs {
    char **v;
    int n, cap;
    bool oom;
};

static void strs_add(struct strs *s, const char *t)
{
    if (s->oom) return;
    if (s->n == s->cap) {
        int nc = s->cap ? 2 * s->cap : 64;
        char **nv = realloc(s->v, (size_t)nc * sizeof *nv);
        if (!nv) {
            s->oom = true;
            return;
        }
        s->v = nv;
        s->cap = nc;
    }
    size_t l = strlen(t);
    if (!(s->v[s->n] = dupn(t, l)))
        s->oom = true;
    else
        s->n++;
}

static void strs_free(struct strs *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* ---- the decomposition m = g * m', g = 2^a 5^b, gcd(m', 10) = 1, kk = max(a, b): x is a
 * multiple of m iff its last kk digits S are a multiple of g and x is one of m'; with
 * x = P 10^kk + S that is P = -S 10^-kk (mod m'). */

#define MULT_MAX_SUFFIXES 2000
#define MULT_MAX_ENUM 2000

struct mult {
    long long m, g, mp;
    int kk;
    long long p10kk_inv; /* 10^-kk mod m' */
    struct moddfa d;     /* residues mod m' */
};

static long long ll_pow10_mod(int k, long long m)
{
    long long r = 1 % m;
    for (int i = 0; i < k; i++)
        r = r * 10 % m;
    return r;
}

/* canonical multiples with at least N digits (N >= 1), 0 excluded */
static int canon_ge(struct mult *M, int N, struct buf *out, bool *first, const char *sign,
                    struct err *e)
{
    char t[40];
    /* (a) at most kk digits: enumerate the multiples in [10^(N-1), 10^kk) */
    if (N <= M->kk) {
        struct strs ss = {0};
        long long lo = 1, hi = 1;
        for (int i = 1; i < N; i++)
            lo *= 10;
        for (int i = 0; i < M->kk; i++)
            hi *= 10;
        for (long long x = (lo + M->m - 1) / M->m * M->m; x < hi; x += M->m) {
            snprintf(t, sizeof t, "%lld", x);
            strs_add(&ss, t);
        }
        if (ss.oom) {
            strs_free(&ss);
            return err_set(e, ERR_NOMEM, "out of memory");
        }
        if (ss.n) {
            qsort(ss.v, (size_t)ss.n, sizeof *ss.v, cmp_str);
            buf_printf(out, "%s%s", *first ? "" : "|", sign);
            *first = false;
            trie_rx(ss.v, ss.n, 0, false, out);
        }
        strs_free(&ss);
    }
    /* (b) more than kk digits: P (canonical, at least N - kk digits, residue r) then S */
    int pmin = N - M->kk < 1 ? 1 : N - M->kk;
    long long sm = 1;
    for (int i = 0; i < M->kk; i++)
        sm *= 10;
    for (long long r = 0; r < M->mp; r++) {
        struct strs ss = {0};
        for (long long S = 0; S < sm; S += M->g) {
            /* r 10^kk + S = 0 (mod m') */
            if ((r * ll_pow10_mod(M->kk, M->mp) + S) % M->mp) continue;
            if (M->kk)
                snprintf(t, sizeof t, "%0*lld", M->kk, S);
            else
                t[0] = 0;
            strs_add(&ss, t);
        }
        if (ss.oom) {
            strs_free(&ss);
            return err_set(e, ERR_NOMEM, "out of memory");
        }
        if (!ss.n) {
            strs_free(&ss);
            continue;
        }
        struct buf p = {0};
        int rr = mod_regex(&M->d, -2, M->d.cls[r], pmin > 1, &p, e);
        if (rr < 0) {
            buf_free(&p);
            strs_free(&ss);
            return -1;
        }
        if (rr == 0) {
            buf_printf(out, "%s%s", *first ? "" : "|", sign);
            *first = false;
            if (pmin > 1)
                buf_printf(out, "(?L%d,:%s)", pmin, p.data);
            else
                buf_puts(out, p.data);
            if (M->kk) {
                qsort(ss.v, (size_t)ss.n, sizeof *ss.v, cmp_str);
                trie_rx(ss.v, ss.n, 0, false, out);
            }
        }
        buf_free(&p);
        strs_free(&ss);
        if (out->len > MOD_MAX_RX)
            return err_set(e, ERR_UNSUPPORTED, "multipleOf %lld: the regex needs more than %u bytes",
                           M->m, MOD_MAX_RX);
    }
    return 0;
}

/* decimal magnitude +1 / -1 (in place, canonical) */
static void dec_inc(char *s)
{
    size_t n = strlen(s), i = n;
    while (i > 0 && s[i - 1] == '9')
        s[--i] = '0';
    if (i == 0) {
        memmove(s + 1, s, n + 1);
        s[0] = '1';
    } else
        s[i - 1]++;
}

static void dec_dec(char *s) /* s > 0 */
{
    size_t n = strlen(s), i = n;
    while (i > 0 && s[i - 1] == '0')
        s[--i] = '9';
    s[i - 1]--;
    if (s[0] == '0' && n > 1) memmove(s, s + 1, n);
}

static bool fp_zero(const char *fp)
{
    for (; *fp; fp++)
        if (*fp != '0') return false;
    return true;
}

/* The integer bound: smallest integer >= lo (> lo when excl), or largest <= hi (< hi), as
 * sign + magnitude. */
static void int_bound(const struct jsrx_dec *v, bool excl, bool upper, bool *neg, char *mag)
{
    strcpy(mag, v->ip);
    *neg = v->neg && strcmp(v->ip, "0");
    bool up = !upper; /* rounding toward +inf (a lower bound) or -inf */
    if (!fp_zero(v->fp)) {
        if (up != *neg) dec_inc(mag); /* away from zero; toward it: the integer part */
    } else if (excl) {
        if (up != *neg)
            dec_inc(mag);
        else if (!strcmp(mag, "0")) {
            strcpy(mag, "1");
            *neg = !up;
        } else
            dec_dec(mag);
    }
    if (!strcmp(mag, "0")) *neg = false;
}

static int mag_cmp(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    if (na != nb) return na < nb ? -1 : 1;
    int c = strcmp(a, b);
    return c < 0 ? -1 : c > 0;
}

/* multiples of m with magnitude in [a, b] (b < 10^17), canonical, each after sign */
static int enum_range(struct mult *M, const char *a, const char *b, const char *sign, bool *first,
                      struct buf *out, struct err *e)
{
    long long lo = atoll(a), hi = atoll(b);
    long long x0 = (lo + M->m - 1) / M->m * M->m;
    if (x0 > hi) return 0;
    if ((hi - x0) / M->m >= MULT_MAX_ENUM)
        return err_set(e, ERR_UNSUPPORTED,
                       "multipleOf %lld: a bound leaves more than %d multiples to list", M->m,
                       MULT_MAX_ENUM);
    struct strs ss = {0};
    char t[40];
    for (long long x = x0; x <= hi; x += M->m) {
        snprintf(t, sizeof t, "%lld", x);
        strs_add(&ss, t);
    }
    if (ss.oom) {
        strs_free(&ss);
        return err_set(e, ERR_NOMEM, "out of memory");
    }
    qsort(ss.v, (size_t)ss.n, sizeof *ss.v, cmp_str);
    buf_printf(out, "%s%s", *first ? "" : "|", sign);
    *first = false;
    trie_rx(ss.v, ss.n, 0, false, out);
    strs_free(&ss);
    return 0;
}

/* magnitudes [a, inf) (a >= 1): [a, 10^n) listed, then at least n + 1 digits */
static int ge_part(struct mult *M, const char *a, const char *sign, bool *first, struct buf *out,
                   struct err *e)
{
    size_t n = strlen(a);
    if (n > 17)
        return err_set(e, ERR_UNSUPPORTED, "multipleOf %lld with a bound of %zu digits", M->m, n);
    if (strcmp(a, "1")) { /* from 1: all of them */
        char top[20];
        memset(top, '9', n);
        top[n] = 0;
        if (enum_range(M, a, top, sign, first, out, e)) return -1;
        return canon_ge(M, (int)n + 1, out, first, sign, e);
    }
    return canon_ge(M, 1, out, first, sign, e);
}

int jsrx_int_multiples(long long m, const struct jsrx_dec *lo, bool lo_excl,
                       const struct jsrx_dec *hi, bool hi_excl, bool frac0, struct buf *out,
                       struct err *e)
{
    if (m < 1 || m > MOD_MAX_M)
        return err_set(e, ERR_UNSUPPORTED, "multipleOf %lld: supported up to %d", m, MOD_MAX_M);
    struct mult M = {.m = m, .g = 1, .mp = m};
    int a2 = 0, a5 = 0;
    while (M.mp % 2 == 0) {
        M.mp /= 2;
        M.g *= 2;
        a2++;
    }
    while (M.mp % 5 == 0) {
        M.mp /= 5;
        M.g *= 5;
        a5++;
    }
    M.kk = a2 > a5 ? a2 : a5;
    long long sm = 1;
    for (int i = 0; i < M.kk; i++)
        sm *= 10;
    if (sm / M.g > MULT_MAX_SUFFIXES)
        return err_set(e, ERR_UNSUPPORTED,
                       "multipleOf %lld: its last %d digits take more than %d forms", m, M.kk,
                       MULT_MAX_SUFFIXES);
    bool ln = false, hn = false;
    char lm[410] = "", hm[410] = "";
    if (lo) int_bound(lo, lo_excl, false, &ln, lm);
    if (hi) int_bound(hi, hi_excl, true, &hn, hm);
    if (lo && hi) {
        int c = ln != hn ? (ln ? -1 : 1) : ln ? -mag_cmp(lm, hm) : mag_cmp(lm, hm);
        if (c > 0) return 1;
    }
    if (moddfa_build(&M.d, (int)M.mp, e)) return -1;
    int rc = -1;
    struct buf alts = {0};
    bool first = true;
    if (M.d.n > MOD_MAX_CLASSES) {
        err_set(e, ERR_UNSUPPORTED,
                "multipleOf %lld: the divisibility automaton has %d states (at most %d)", m,
                M.d.n, MOD_MAX_CLASSES);
        goto out;
    }
    /* zero */
    bool zero = (!lo || ln || !strcmp(lm, "0")) && (!hi || !hn);
    if (zero) {
        buf_puts(&alts, "-?0");
        first = false;
    }
    /* positive magnitudes [max(lo, 1), hi] */
    if (!hi || (!hn && strcmp(hm, "0"))) {
        char a[410] = "1";
        if (lo && !ln && strcmp(lm, "0")) strcpy(a, lm);
        if (!hi) {
            if (ge_part(&M, a, "", &first, &alts, e)) goto out;
        } else if (strlen(hm) > 17) {
            err_set(e, ERR_UNSUPPORTED, "multipleOf %lld with a bound of %zu digits", m,
                    strlen(hm));
            goto out;
        } else if (enum_range(&M, a, hm, "", &first, &alts, e))
            goto out;
    }
    /* negative: magnitudes [max(1, -hi), -lo] */
    if (!lo || ln) {
        char a[410] = "1";
        if (hi && hn) strcpy(a, hm);
        if (!lo) {
            if (ge_part(&M, a, "-", &first, &alts, e)) goto out;
        } else if (strlen(lm) > 17) {
            err_set(e, ERR_UNSUPPORTED, "multipleOf %lld with a bound of %zu digits", m,
                    strlen(lm));
            goto out;
        } else if (enum_range(&M, a, lm, "-", &first, &alts, e))
            goto out;
    }
    if (first) {
        rc = 1;
        goto out;
    }
    if (buf_puts(&alts, "")) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto out;
    }
    if (alts.len > MOD_MAX_RX) {
        err_set(e, ERR_UNSUPPORTED, "multipleOf %lld: the regex needs more than %u bytes", m,
                MOD_MAX_RX);
        goto out;
    }
    buf_printf(out, "(?:%s)%s", alts.data, frac0 ? "(?:\\.0+)?" : "");
    rc = 0;
out:
    buf_free(&alts);
    moddfa_free(&M.d);
    return rc;
}
