/* jsonschema_keys — object keys partitioned by patternProperties (issue 19; contract in
 * jsonschema_internal.h, design in docs/jsonschema.md "patternProperties").
 *
 * A key's schema depends on which patterns it matches (all of them apply) and on whether it is
 * a declared name (then `properties` applies, not additionalProperties). Regex text has no
 * complement or intersection, so the key classes are computed on automata:
 *   1. each pattern (ECMA, unanchored: CHAR* P CHAR* with ^/$ as assertions at the key's ends)
 *      and each declared name becomes a branch of one NFA over code points, tagged;
 *   2. the code points are cut into atoms (maximal sets no pattern or name tells apart);
 *   3. subset construction over the atoms gives a DFA whose states carry a label (the mask of
 *      patterns matched, the declared name if any), minimized by Moore refinement;
 *   4. for a chosen set of labels, state elimination writes a regex over JSON text, each edge
 *      a character class in canonical spelling (jsrx_emit_set), so the classes are disjoint as
 *      texts too.
 * Every step is bounded (JSK_MAX_*): past a bound the compile fails with a message naming
 * patternProperties, never an approximation. */
#include <stdlib.h>
#include <string.h>

#include "grammar/jsonschema_internal.h"

#define CPMAX 0x10FFFFu

enum { KN_EPS, KN_SPLIT, KN_CHAR, KN_BOL, KN_EOL, KN_ACC };

struct kst {
    uint8_t kind;
    int32_t out, out2;
    int32_t set; /* KN_CHAR: index into sets; KN_ACC: tag */
};

struct frag {
    int32_t s, e; /* e: a KN_EPS whose out is patched */
};

struct kimpl {
    struct kst *st;
    int32_t n, cap;
    struct jsrx_cpset *sets;
    int32_t n_sets, cap_sets;
    int np, nn;
    int32_t start;
    /* atoms */
    int32_t n_atoms;
    uint8_t *in;             /* [n_atoms][n_sets]: atom a in set s */
    struct jsrx_cpset *atom; /* the code points of each atom (overflow: too many ranges) */
    /* DFA (minimized) */
    int32_t nd;
    int32_t *tr;     /* [nd][n_atoms], -1: no transition (dead) */
    uint64_t *lmask; /* per label: pattern mask */
    int32_t *lname;  /* per label: declared name + 1 (0: none), -1 for "no tag at all" */
    int32_t d0;
    struct err *e;
    const char *kw; /* the keyword errors name */
    /* parser */
    const char *p;
    size_t pn, pi;
    int depth;
};

static int kfail(struct kimpl *k, const char *what)
{
    return err_set(k->e, ERR_UNSUPPORTED, "%s: %s", k->kw, what);
}

static int32_t kst_new(struct kimpl *k, uint8_t kind, int32_t out, int32_t out2, int32_t set)
{
    if (k->n >= JSK_MAX_NFA) {
        kfail(k, "key patterns too large for the key automaton");
        return -1;
    }
    if (k->n == k->cap) {
        int32_t nc = k->cap ? k->cap * 2 : 256;
        struct kst *ns = realloc(k->st, (size_t)nc * sizeof *ns);
        if (!ns) {
            err_set(k->e, ERR_NOMEM, "out of memory");
            return -1;
        }
        k->st = ns;
        k->cap = nc;
    }
    k->st[k->n] = (struct kst){kind, out, out2, set};
    return k->n++;
}

static int32_t set_add(struct kimpl *k, const struct jsrx_cpset *s)
{
    if (s->overflow) {
        kfail(k, "character class too complex");
        return -1;
    }
    for (int32_t i = 0; i < k->n_sets; i++)
        if (k->sets[i].n == s->n && !memcmp(k->sets[i].lo, s->lo, (size_t)s->n * 4) &&
            !memcmp(k->sets[i].hi, s->hi, (size_t)s->n * 4))
            return i;
    if (k->n_sets == k->cap_sets) {
        int32_t nc = k->cap_sets ? k->cap_sets * 2 : 32;
        struct jsrx_cpset *ns = realloc(k->sets, (size_t)nc * sizeof *ns);
        if (!ns) {
            err_set(k->e, ERR_NOMEM, "out of memory");
            return -1;
        }
        k->sets = ns;
        k->cap_sets = nc;
    }
    k->sets[k->n_sets] = *s;
    return k->n_sets++;
}

/* a fragment: one state kind then an open end */
static int frag1(struct kimpl *k, uint8_t kind, int32_t set, struct frag *f)
{
    int32_t e = kst_new(k, KN_EPS, -1, -1, 0);
    if (e < 0) return -1;
    int32_t s = kst_new(k, kind, e, -1, set);
    if (s < 0) return -1;
    *f = (struct frag){s, e};
    return 0;
}

static int frag_set(struct kimpl *k, const struct jsrx_cpset *cs, struct frag *f)
{
    int32_t si = set_add(k, cs);
    return si < 0 ? -1 : frag1(k, KN_CHAR, si, f);
}

static int frag_empty(struct kimpl *k, struct frag *f)
{
    int32_t e = kst_new(k, KN_EPS, -1, -1, 0);
    if (e < 0) return -1;
    *f = (struct frag){e, e};
    return 0;
}

static void frag_cat(struct kimpl *k, struct frag *a, struct frag b)
{
    k->st[a->e].out = b.s;
    a->e = b.e;
}

static int pfail(struct kimpl *k, const char *what)
{
    return err_set(k->e, ERR_INVALID, "%s /%.*s/: %s at offset %zu", k->kw,
                   (int)(k->pn > 200 ? 200 : k->pn), k->p, what, k->pi);
}

static int p_alt(struct kimpl *k, struct frag *f);

/* one atom (no quantifier); *assert: an anchor (cannot be quantified) */
static int p_atom(struct kimpl *k, struct frag *f, bool *assert)
{
    *assert = false;
    char c = k->p[k->pi];
    struct jsrx_cpset cs = {0};
    if (c == '^' || c == '$') {
        k->pi++;
        *assert = true;
        return frag1(k, c == '^' ? KN_BOL : KN_EOL, 0, f);
    }
    if (c == '(') {
        k->pi++;
        if (k->pi < k->pn && k->p[k->pi] == '?') {
            if (k->pi + 1 < k->pn && k->p[k->pi + 1] == ':')
                k->pi += 2;
            else if (k->pi + 2 < k->pn && k->p[k->pi + 1] == '<' && k->p[k->pi + 2] != '=' &&
                     k->p[k->pi + 2] != '!') {
                while (k->pi < k->pn && k->p[k->pi] != '>')
                    k->pi++;
                if (k->pi >= k->pn) return pfail(k, "unterminated group name");
                k->pi++;
            } else
                return pfail(k, "lookaround assertions are not supported");
        }
        if (++k->depth > 200) return pfail(k, "groups nested too deeply");
        if (p_alt(k, f)) return -1;
        k->depth--;
        if (k->pi >= k->pn || k->p[k->pi] != ')') return pfail(k, "unbalanced parenthesis");
        k->pi++;
        return 0;
    }
    if (c == '[') {
        k->pi++;
        if (jsrx_pt_class(k->p, k->pn, &k->pi, &cs, k->e)) return -1;
    } else if (c == '.') {
        k->pi++;
        jsrx_cp_add(&cs, 0, 9);
        jsrx_cp_add(&cs, 11, 12);
        jsrx_cp_add(&cs, 14, 0x2027);
        jsrx_cp_add(&cs, 0x202A, CPMAX);
    } else if (c == '\\') {
        k->pi++;
        if (jsrx_pt_escape(k->p, k->pn, &k->pi, &cs, false, k->e)) return -1;
    } else if (c == '*' || c == '+' || c == '?') {
        return pfail(k, "quantifier without operand");
    } else if (c == ']' || c == '}' || c == '{') {
        k->pi++;
        jsrx_cp_add(&cs, (uint32_t)c, (uint32_t)c);
    } else {
        uint32_t v = jsrx_pt_cp(k->p, k->pn, &k->pi);
        jsrx_cp_add(&cs, v, v);
    }
    return frag_set(k, &cs, f);
}

/* A quantifier at k->pi: 0 none, 1 parsed (*lo, *hi; hi -1 unbounded), -1 error. A '{' that is
 * no quantifier is a literal (ECMA annex B): 0. */
static int p_quant(struct kimpl *k, int64_t *lo, int64_t *hi)
{
    *lo = *hi = 1;
    if (k->pi >= k->pn) return 0;
    char c = k->p[k->pi];
    if (c == '*' || c == '+' || c == '?') {
        k->pi++;
        *lo = c == '+';
        *hi = c == '?' ? 1 : -1;
    } else if (c == '{') {
        size_t j = k->pi + 1;
        int64_t a = 0, b = -1;
        bool has_a = false, comma = false, has_b = false;
        while (j < k->pn && k->p[j] >= '0' && k->p[j] <= '9') {
            a = a * 10 + (k->p[j++] - '0');
            has_a = true;
            if (a > 100000) return pfail(k, "repetition count too large");
        }
        if (j < k->pn && k->p[j] == ',') {
            comma = true;
            j++;
            b = 0;
            while (j < k->pn && k->p[j] >= '0' && k->p[j] <= '9') {
                b = b * 10 + (k->p[j++] - '0');
                has_b = true;
                if (b > 100000) return pfail(k, "repetition count too large");
            }
        }
        if (!has_a || j >= k->pn || k->p[j] != '}') return 0;
        k->pi = j + 1;
        if (!comma)
            b = a;
        else if (!has_b)
            b = -1;
        if (b >= 0 && b < a) return pfail(k, "repetition {m,n} with n < m");
        *lo = a;
        *hi = b;
    } else
        return 0;
    if (k->pi < k->pn && k->p[k->pi] == '?') k->pi++; /* lazy: same language */
    if (k->pi < k->pn && (k->p[k->pi] == '*' || k->p[k->pi] == '+' ||
                          (k->p[k->pi] == '{' && k->pi + 1 < k->pn && k->p[k->pi + 1] >= '0' &&
                           k->p[k->pi + 1] <= '9')))
        return pfail(k, "nested quantifier");
    return 1;
}

/* x{lo,hi} from copies of the atom at src (re-parsed for each copy) */
static int p_repeat(struct kimpl *k, size_t src, struct frag first, int64_t lo, int64_t hi,
                    struct frag *out)
{
    size_t end = k->pi;
    int64_t copies = hi < 0 ? (lo > 1 ? lo : 1) : hi;
    if (copies * 4 > JSK_MAX_NFA)
        return kfail(k, "repetition count too large for the key automaton");
    struct frag r;
    if (frag_empty(k, &r)) return -1;
    int32_t fin = -1; /* the common end of the optional copies */
    if (hi >= 0 && hi > lo && (fin = kst_new(k, KN_EPS, -1, -1, 0)) < 0) return -1;
    for (int64_t i = 0; i < copies || (hi < 0 && i == 0 && lo == 0); i++) {
        struct frag x = first;
        if (i > 0) {
            bool as;
            k->pi = src;
            if (p_atom(k, &x, &as)) return -1;
        }
        if (hi < 0 && i == copies - 1 && lo > 0) {
            /* the last required copy loops: x+ */
            int32_t e = kst_new(k, KN_EPS, -1, -1, 0);
            int32_t sp = e < 0 ? -1 : kst_new(k, KN_SPLIT, x.s, e, 0);
            if (sp < 0) return -1;
            k->st[x.e].out = sp;
            frag_cat(k, &r, (struct frag){x.s, e});
        } else if (hi < 0 && lo == 0) { /* x* */
            int32_t e = kst_new(k, KN_EPS, -1, -1, 0);
            int32_t sp = e < 0 ? -1 : kst_new(k, KN_SPLIT, x.s, e, 0);
            if (sp < 0) return -1;
            k->st[x.e].out = sp;
            frag_cat(k, &r, (struct frag){sp, e});
            break;
        } else if (i < lo) {
            frag_cat(k, &r, x);
        } else { /* optional copy: skipping it skips the rest too */
            int32_t sp = kst_new(k, KN_SPLIT, x.s, fin, 0);
            if (sp < 0) return -1;
            frag_cat(k, &r, (struct frag){sp, x.e});
        }
    }
    if (fin >= 0) {
        k->st[r.e].out = fin;
        r.e = fin;
    }
    k->pi = end;
    *out = r;
    return 0;
}

static int p_seq(struct kimpl *k, struct frag *f)
{
    if (frag_empty(k, f)) return -1;
    while (k->pi < k->pn && k->p[k->pi] != '|' && k->p[k->pi] != ')') {
        size_t src = k->pi;
        struct frag a;
        bool as;
        if (p_atom(k, &a, &as)) return -1;
        int64_t lo, hi;
        int q = p_quant(k, &lo, &hi);
        if (q < 0) return -1;
        if (q && as) return pfail(k, "quantified anchor");
        if (q) {
            if (lo == 1 && hi == 1) {
                /* x{1}: x */
            } else if (lo == 0 && hi == 0) {
                if (frag_empty(k, &a)) return -1;
            } else if (p_repeat(k, src, a, lo, hi, &a))
                return -1;
        }
        frag_cat(k, f, a);
    }
    return 0;
}

static int p_alt(struct kimpl *k, struct frag *f)
{
    if (p_seq(k, f)) return -1;
    while (k->pi < k->pn && k->p[k->pi] == '|') {
        k->pi++;
        struct frag g;
        if (p_seq(k, &g)) return -1;
        int32_t e = kst_new(k, KN_EPS, -1, -1, 0);
        int32_t s = e < 0 ? -1 : kst_new(k, KN_SPLIT, f->s, g.s, 0);
        if (s < 0) return -1;
        k->st[f->e].out = e;
        k->st[g.e].out = e;
        *f = (struct frag){s, e};
    }
    return 0;
}

static int any_set(struct kimpl *k)
{
    struct jsrx_cpset a = {0};
    jsrx_cp_add(&a, 0, 0xD7FF);
    jsrx_cp_add(&a, 0xE000, CPMAX);
    return set_add(k, &a);
}

/* CHAR* P CHAR*, accepting with tag; returns the start state */
static int32_t add_pattern(struct kimpl *k, const char *pat, int tag)
{
    k->p = pat;
    k->pn = strlen(pat);
    k->pi = 0;
    k->depth = 0;
    struct frag f;
    if (p_alt(k, &f)) return -1;
    if (k->pi < k->pn) return pfail(k, "unbalanced ')'");
    int32_t any = any_set(k);
    if (any < 0) return -1;
    /* M: matched, any suffix */
    int32_t acc = kst_new(k, KN_ACC, -1, -1, tag);
    int32_t m = acc < 0 ? -1 : kst_new(k, KN_SPLIT, acc, -1, 0);
    int32_t c2 = m < 0 ? -1 : kst_new(k, KN_CHAR, m, -1, any);
    if (c2 < 0) return -1;
    k->st[m].out2 = c2;
    k->st[f.e].out = m;
    /* L: any prefix */
    int32_t l = kst_new(k, KN_SPLIT, f.s, -1, 0);
    int32_t c1 = l < 0 ? -1 : kst_new(k, KN_CHAR, l, -1, any);
    if (c1 < 0) return -1;
    k->st[l].out2 = c1;
    return l;
}

static int32_t add_name(struct kimpl *k, const char *s, size_t n, int tag)
{
    int32_t acc = kst_new(k, KN_ACC, -1, -1, tag);
    if (acc < 0) return -1;
    /* built back to front */
    uint32_t cps[JSRX_MAX_NAME + 1];
    int ncp = 0;
    for (size_t i = 0; i < n;) {
        if (ncp > JSRX_MAX_NAME) return kfail(k, "property name too long");
        size_t i0 = i;
        uint32_t c = jsrx_pt_cp(s, n, &i);
        if (c > CPMAX || i == i0) return kfail(k, "property name is not UTF-8");
        cps[ncp++] = c;
    }
    int32_t nx = acc;
    for (int i = ncp - 1; i >= 0; i--) {
        struct jsrx_cpset cs = {0};
        jsrx_cp_add(&cs, cps[i], cps[i]);
        int32_t si = set_add(k, &cs);
        if (si < 0 || (nx = kst_new(k, KN_CHAR, nx, -1, si)) < 0) return -1;
    }
    return nx;
}

/* ---------------------------------------------------------------- atoms */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static bool set_has(const struct jsrx_cpset *s, uint32_t c)
{
    for (int i = 0; i < s->n; i++)
        if (c >= s->lo[i] && c <= s->hi[i]) return true;
    return false;
}

static int build_atoms(struct kimpl *k)
{
    size_t nb = 4;
    for (int32_t i = 0; i < k->n_sets; i++)
        nb += (size_t)k->sets[i].n * 2;
    uint32_t *b = malloc(nb * sizeof *b);
    if (!b) return err_set(k->e, ERR_NOMEM, "out of memory");
    size_t m = 0;
    b[m++] = 0;
    b[m++] = 0xD800;
    b[m++] = 0xE000;
    b[m++] = CPMAX + 1;
    for (int32_t i = 0; i < k->n_sets; i++)
        for (int j = 0; j < k->sets[i].n; j++) {
            b[m++] = k->sets[i].lo[j];
            b[m++] = k->sets[i].hi[j] + 1;
        }
    qsort(b, m, sizeof *b, cmp_u32);
    size_t u = 0;
    for (size_t i = 0; i < m; i++)
        if (!u || b[u - 1] != b[i]) b[u++] = b[i];
    /* segments [b[i], b[i+1]) outside the surrogates, grouped by their membership vector */
    size_t ns = (size_t)k->n_sets;
    uint8_t *vec = malloc(ns + 1);
    k->in = malloc((u + 1) * (ns + 1));
    k->atom = calloc(u + 1, sizeof *k->atom);
    if (!vec || !k->in || !k->atom) {
        free(b);
        free(vec);
        return err_set(k->e, ERR_NOMEM, "out of memory");
    }
    k->n_atoms = 0;
    for (size_t i = 0; i + 1 < u; i++) {
        uint32_t lo = b[i], hi = b[i + 1] - 1;
        if (lo >= 0xD800 && lo <= 0xDFFF) continue;
        for (size_t s = 0; s < ns; s++)
            vec[s] = set_has(&k->sets[s], lo);
        int32_t a = 0;
        for (; a < k->n_atoms; a++)
            if (!memcmp(k->in + (size_t)a * ns, vec, ns)) break;
        if (a == k->n_atoms) {
            memcpy(k->in + (size_t)a * ns, vec, ns);
            k->n_atoms++;
        }
        jsrx_cp_add(&k->atom[a], lo, hi);
    }
    free(b);
    free(vec);
    return 0;
}

/* ---------------------------------------------------------------- subset construction */

struct sset {
    int32_t *v;
    int32_t n;
    bool at0; /* the start state: ^ may pass */
};

struct dfab {
    struct sset *s;
    int32_t n, cap;
    int32_t *tr; /* [cap][n_atoms] */
    uint32_t *mark;
    uint32_t gen;
    int32_t *stack;
    uint32_t *ht; /* set hash -> state + 1 */
    uint32_t hcap;
};

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* epsilon closure of seeds (EOL not followed; BOL only when at0) into a sorted set */
static int closure(struct kimpl *k, struct dfab *d, const int32_t *seed, int32_t ns, bool at0,
                   struct sset *out)
{
    d->gen++;
    int32_t sp = 0, n = 0;
    int32_t *v = malloc((size_t)k->n * sizeof *v);
    if (!v) return err_set(k->e, ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < ns; i++)
        if (d->mark[seed[i]] != d->gen) {
            d->mark[seed[i]] = d->gen;
            d->stack[sp++] = seed[i];
        }
    while (sp) {
        int32_t s = d->stack[--sp];
        v[n++] = s;
        const struct kst *t = &k->st[s];
        int32_t nx[2] = {-1, -1};
        if (t->kind == KN_EPS)
            nx[0] = t->out;
        else if (t->kind == KN_SPLIT) {
            nx[0] = t->out;
            nx[1] = t->out2;
        } else if (t->kind == KN_BOL && at0)
            nx[0] = t->out;
        for (int j = 0; j < 2; j++)
            if (nx[j] >= 0 && d->mark[nx[j]] != d->gen) {
                d->mark[nx[j]] = d->gen;
                d->stack[sp++] = nx[j];
            }
    }
    /* keep only the states that matter: CHAR, EOL, ACC (and BOL at the start) */
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        uint8_t kd = k->st[v[i]].kind;
        if (kd == KN_CHAR || kd == KN_EOL || kd == KN_ACC) v[m++] = v[i];
    }
    qsort(v, (size_t)m, sizeof *v, cmp_i32);
    *out = (struct sset){v, m, at0};
    return 0;
}

/* the tags a set accepts: ACC reachable through EOL (the key ends here) */
static int set_tags(struct kimpl *k, struct dfab *d, const struct sset *s, uint64_t *mask,
                    int32_t *name)
{
    *mask = 0;
    *name = 0;
    int32_t *seed = malloc(((size_t)s->n + 1) * sizeof *seed);
    if (!seed) return err_set(k->e, ERR_NOMEM, "out of memory");
    int32_t ns = 0;
    for (int32_t i = 0; i < s->n; i++) {
        const struct kst *t = &k->st[s->v[i]];
        if (t->kind == KN_ACC) {
            if (t->set < k->np)
                *mask |= 1ull << t->set;
            else
                *name = t->set - k->np + 1;
        } else if (t->kind == KN_EOL)
            seed[ns++] = t->out;
    }
    if (ns) {
        /* EOL then epsilons (a further EOL passes too: still the end; BOL only at the start) */
        d->gen++;
        int32_t sp = 0;
        for (int32_t i = 0; i < ns; i++)
            if (d->mark[seed[i]] != d->gen) {
                d->mark[seed[i]] = d->gen;
                d->stack[sp++] = seed[i];
            }
        while (sp) {
            int32_t x = d->stack[--sp];
            const struct kst *t = &k->st[x];
            if (t->kind == KN_ACC) {
                if (t->set < k->np)
                    *mask |= 1ull << t->set;
                else
                    *name = t->set - k->np + 1;
            }
            int32_t nx[2] = {-1, -1};
            if (t->kind == KN_EPS || t->kind == KN_EOL || (t->kind == KN_BOL && s->at0))
                nx[0] = t->out;
            else if (t->kind == KN_SPLIT) {
                nx[0] = t->out;
                nx[1] = t->out2;
            }
            for (int j = 0; j < 2; j++)
                if (nx[j] >= 0 && d->mark[nx[j]] != d->gen) {
                    d->mark[nx[j]] = d->gen;
                    d->stack[sp++] = nx[j];
                }
        }
    }
    free(seed);
    return 0;
}

static uint64_t hash_i32(const int32_t *v, int32_t n, uint64_t h)
{
    for (int32_t i = 0; i < n; i++) {
        h ^= (uint32_t)v[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint64_t sset_hash(const struct sset *s)
{
    return hash_i32(s->v, s->n, 14695981039346656037ull ^ (uint64_t)s->at0);
}

static bool sset_eq(const struct sset *a, const struct sset *b)
{
    return a->n == b->n && a->at0 == b->at0 && !memcmp(a->v, b->v, (size_t)a->n * sizeof *a->v);
}

static int32_t dfa_find(struct dfab *d, const struct sset *s)
{
    if (!d->hcap) return -1;
    for (uint32_t h = (uint32_t)sset_hash(s) & (d->hcap - 1);; h = (h + 1) & (d->hcap - 1)) {
        uint32_t x = d->ht[h];
        if (!x) return -1;
        if (sset_eq(&d->s[x - 1], s)) return (int32_t)x - 1;
    }
}

static int dfa_index(struct dfab *d, int32_t i)
{
    if ((uint32_t)(d->n + 1) * 2 > d->hcap) {
        uint32_t nc = d->hcap ? d->hcap * 2 : 256;
        uint32_t *nt = calloc(nc, sizeof *nt);
        if (!nt) return -1;
        free(d->ht);
        d->ht = nt;
        d->hcap = nc;
        for (int32_t j = 0; j < d->n; j++)
            if (j != i) {
                uint32_t h = (uint32_t)sset_hash(&d->s[j]) & (nc - 1);
                while (nt[h])
                    h = (h + 1) & (nc - 1);
                nt[h] = (uint32_t)j + 1;
            }
    }
    uint32_t h = (uint32_t)sset_hash(&d->s[i]) & (d->hcap - 1);
    while (d->ht[h])
        h = (h + 1) & (d->hcap - 1);
    d->ht[h] = (uint32_t)i + 1;
    return 0;
}

static int32_t dfa_add(struct kimpl *k, struct dfab *d, struct sset s)
{
    if (d->n >= JSK_MAX_DFA) {
        free(s.v);
        kfail(k, "the patterns need more than 3000 automaton states");
        return -1;
    }
    if (d->n == d->cap) {
        int32_t nc = d->cap ? d->cap * 2 : 64;
        struct sset *ns = realloc(d->s, (size_t)nc * sizeof *ns);
        int32_t *nt = ns ? realloc(d->tr, (size_t)nc * (size_t)k->n_atoms * sizeof *nt) : NULL;
        if (ns) d->s = ns;
        if (nt) d->tr = nt;
        if (!ns || !nt) {
            free(s.v);
            err_set(k->e, ERR_NOMEM, "out of memory");
            return -1;
        }
        d->cap = nc;
    }
    d->s[d->n] = s;
    d->n++;
    if (dfa_index(d, d->n - 1)) {
        err_set(k->e, ERR_NOMEM, "out of memory");
        return -1;
    }
    return d->n - 1;
}

static int build_dfa(struct kimpl *k)
{
    struct dfab d = {0};
    int rc = -1;
    d.mark = calloc((size_t)k->n, sizeof *d.mark);
    d.stack = malloc((size_t)k->n * sizeof *d.stack);
    int32_t *seed = malloc((size_t)k->n * sizeof *seed);
    uint64_t *mk = NULL;
    int32_t *nm = NULL, *cls = NULL, *ncls = NULL;
    if (!d.mark || !d.stack || !seed) {
        err_set(k->e, ERR_NOMEM, "out of memory");
        goto out;
    }
    struct sset s0;
    if (closure(k, &d, &k->start, 1, true, &s0) || dfa_add(k, &d, s0) < 0) goto out;
    int32_t A = k->n_atoms;
    for (int32_t i = 0; i < d.n; i++) {
        for (int32_t a = 0; a < A; a++) {
            int32_t ns = 0;
            for (int32_t j = 0; j < d.s[i].n; j++) {
                const struct kst *t = &k->st[d.s[i].v[j]];
                if (t->kind == KN_CHAR && k->in[(size_t)a * (size_t)k->n_sets + (size_t)t->set])
                    seed[ns++] = t->out;
            }
            int32_t to = -1;
            if (ns) {
                struct sset x;
                if (closure(k, &d, seed, ns, false, &x)) goto out;
                if (x.n == 0) {
                    free(x.v);
                } else if ((to = dfa_find(&d, &x)) >= 0) {
                    free(x.v);
                } else if ((to = dfa_add(k, &d, x)) < 0)
                    goto out;
            }
            d.tr[(size_t)i * (size_t)A + (size_t)a] = to;
        }
    }
    /* labels */
    int32_t n = d.n;
    mk = malloc((size_t)n * sizeof *mk);
    nm = malloc((size_t)n * sizeof *nm);
    cls = malloc((size_t)(n + 1) * sizeof *cls);
    ncls = malloc((size_t)(n + 1) * sizeof *ncls);
    if (!mk || !nm || !cls || !ncls) {
        err_set(k->e, ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int32_t i = 0; i < n; i++)
        if (set_tags(k, &d, &d.s[i], &mk[i], &nm[i])) goto out;
    /* Moore refinement; state n is the dead state (class 0) */
    int32_t nc = 1;
    for (int32_t i = 0; i < n; i++) {
        int32_t j = 0;
        for (; j < i; j++)
            if (mk[j] == mk[i] && nm[j] == nm[i]) break;
        cls[i] = j < i ? cls[j] : nc++;
    }
    cls[n] = 0;
    /* the dead state may share a class with non-accepting states that reach no accept: they
     * stay apart here and are pruned by jsk_regex's reachability */
    uint32_t hc = 1;
    while (hc < (uint32_t)n * 2 + 2)
        hc *= 2;
    uint32_t *ht = malloc(hc * sizeof *ht);
    int32_t *sg = malloc((size_t)n * (size_t)(A + 1) * sizeof *sg + 1);
    if (!ht || !sg) {
        free(ht);
        free(sg);
        err_set(k->e, ERR_NOMEM, "out of memory");
        goto out;
    }
    for (;;) {
        int32_t nn = 1;
        ncls[n] = 0;
        memset(ht, 0, hc * sizeof *ht);
        for (int32_t i = 0; i < n; i++) {
            int32_t *v = sg + (size_t)i * (size_t)(A + 1);
            v[0] = cls[i];
            for (int32_t a = 0; a < A; a++) {
                int32_t x = d.tr[(size_t)i * (size_t)A + (size_t)a];
                v[a + 1] = cls[x < 0 ? n : x];
            }
            uint32_t h = (uint32_t)hash_i32(v, A + 1, 14695981039346656037ull) & (hc - 1);
            for (;; h = (h + 1) & (hc - 1)) {
                if (!ht[h]) {
                    ht[h] = (uint32_t)i + 1;
                    ncls[i] = nn++;
                    break;
                }
                int32_t j = (int32_t)ht[h] - 1;
                if (!memcmp(sg + (size_t)j * (size_t)(A + 1), v, (size_t)(A + 1) * sizeof *v)) {
                    ncls[i] = ncls[j];
                    break;
                }
            }
        }
        bool stable = nn == nc;
        memcpy(cls, ncls, (size_t)(n + 1) * sizeof *cls);
        nc = nn;
        if (stable) break;
    }
    free(ht);
    free(sg);
    /* minimized DFA: classes 1..nc-1 become states 0..nc-2 */
    k->nd = nc - 1;
    k->tr = malloc((size_t)k->nd * (size_t)A * sizeof *k->tr + 1);
    k->lmask = malloc((size_t)k->nd * sizeof *k->lmask + 1);
    k->lname = malloc((size_t)k->nd * sizeof *k->lname + 1);
    if (!k->tr || !k->lmask || !k->lname) {
        err_set(k->e, ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int32_t i = 0; i < n; i++) {
        int32_t c = cls[i] - 1;
        for (int32_t a = 0; a < A; a++) {
            int32_t x = d.tr[(size_t)i * (size_t)A + (size_t)a];
            k->tr[(size_t)c * (size_t)A + (size_t)a] = x < 0 ? -1 : cls[x] - 1;
        }
        k->lmask[c] = mk[i];
        k->lname[c] = nm[i];
    }
    k->d0 = cls[0] - 1;
    rc = 0;
out:
    for (int32_t i = 0; i < d.n; i++)
        free(d.s[i].v);
    free(d.s);
    free(d.tr);
    free(d.mark);
    free(d.stack);
    free(d.ht);
    free(seed);
    free(mk);
    free(nm);
    free(cls);
    free(ncls);
    return rc;
}

int jsk_build(struct jsk *kk, const char *kw, const char *const *pats, int np,
              const char *const *names, const size_t *lens, int nn, struct err *e)
{
    memset(kk, 0, sizeof *kk);
    if (np > JSK_MAX_PATTERNS)
        return err_set(e, ERR_UNSUPPORTED, "%s: more than %d patterns", kw, JSK_MAX_PATTERNS);
    struct kimpl *k = calloc(1, sizeof *k);
    if (!k) return err_set(e, ERR_NOMEM, "out of memory");
    kk->impl = k;
    k->e = e;
    k->kw = kw;
    k->np = np;
    k->nn = nn;
    /* start: a split tree over every branch */
    int32_t *st = malloc(((size_t)np + (size_t)nn + 1) * sizeof *st);
    if (!st) return err_set(e, ERR_NOMEM, "out of memory");
    int nb = 0;
    for (int i = 0; i < np; i++)
        if ((st[nb++] = add_pattern(k, pats[i], i)) < 0) goto fail;
    for (int i = 0; i < nn; i++)
        if ((st[nb++] = add_name(k, names[i], lens[i], np + i)) < 0) goto fail;
    int32_t s = nb ? st[0] : kst_new(k, KN_EPS, -1, -1, 0);
    for (int i = 1; i < nb && s >= 0; i++)
        s = kst_new(k, KN_SPLIT, s, st[i], 0);
    if (s < 0) goto fail;
    k->start = s;
    free(st);
    st = NULL;
    if (build_atoms(k) || build_dfa(k)) goto fail;
    /* the masks of non-declared keys */
    kk->masks = malloc(((size_t)k->nd + 1) * sizeof *kk->masks);
    if (!kk->masks) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < k->nd; i++) {
        if (k->lname[i]) continue;
        int j = 0;
        for (; j < kk->n_masks; j++)
            if (kk->masks[j] == k->lmask[i]) break;
        if (j == kk->n_masks) kk->masks[kk->n_masks++] = k->lmask[i];
    }
    /* keys reaching the dead state (no pattern matches them and no declared name): mask 0 */
    bool dead = false;
    for (size_t i = 0; i < (size_t)k->nd * (size_t)k->n_atoms && !dead; i++)
        if (k->tr[i] < 0) dead = true;
    if (dead) {
        int j = 0;
        for (; j < kk->n_masks; j++)
            if (!kk->masks[j]) break;
        if (j == kk->n_masks) kk->masks[kk->n_masks++] = 0;
    }
    return 0;
fail:
    free(st);
    jsk_free(kk);
    return -1;
}

void jsk_free(struct jsk *kk)
{
    struct kimpl *k = kk->impl;
    if (k) {
        free(k->st);
        free(k->sets);
        free(k->in);
        free(k->atom);
        free(k->tr);
        free(k->lmask);
        free(k->lname);
        free(k);
    }
    free(kk->masks);
    memset(kk, 0, sizeof *kk);
}

/* ---------------------------------------------------------------- state elimination */

/* a regex under construction: prec 0 alternation, 1 concatenation or quantified, 2 atom */
struct re {
    char *s;
    size_t n;
    int prec;
    bool eps;  /* the empty string */
    int depth; /* nesting of groups (the regex parser bounds it) */
};
#define JSK_MAX_NEST 150
#define JSK_MAX_WORK (32u << 20)

static struct re *re_new(const char *s, size_t n, int prec, bool eps)
{
    struct re *r = malloc(sizeof *r);
    char *t = malloc(n + 1);
    if (!r || !t) {
        free(r);
        free(t);
        return NULL;
    }
    memcpy(t, s, n);
    t[n] = 0;
    *r = (struct re){t, n, prec, eps, 0};
    return r;
}

static void re_free(struct re *r)
{
    if (r) free(r->s);
    free(r);
}

static void put_wrapped(struct buf *b, const struct re *r, int need)
{
    if (r->prec < need) {
        buf_puts(b, "(?:");
        buf_append(b, r->s, r->n);
        buf_puts(b, ")");
    } else
        buf_append(b, r->s, r->n);
}

/* the deepest group nesting of a regex text (escapes skipped, classes have no groups) */
static int rx_nest(const char *s, size_t n)
{
    int d = 0, m = 0;
    bool cls = false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\') {
            i++;
            continue;
        }
        if (cls) {
            if (s[i] == ']') cls = false;
        } else if (s[i] == '[')
            cls = true;
        else if (s[i] == '(' && ++d > m)
            m = d;
        else if (s[i] == ')')
            d--;
    }
    return m;
}

static struct re *re_from_buf(struct buf *b, int prec, bool eps)
{
    struct re *r = re_new(b->data ? b->data : "", b->len, prec, eps);
    buf_free(b);
    return r;
}

static struct re *re_cat3(const struct re *a, const struct re *loop, const struct re *c)
{
    struct buf b = {0};
    int parts = 0;
    if (a && !a->eps) {
        put_wrapped(&b, a, 1);
        parts++;
    }
    if (loop && !loop->eps) {
        put_wrapped(&b, loop, 2);
        buf_puts(&b, "*");
        parts++;
    }
    if (c && !c->eps) {
        put_wrapped(&b, c, 1);
        parts++;
    }
    if (!parts) return re_from_buf(&b, 2, true);
    bool single_atom = parts == 1 && ((a && !a->eps && a->prec == 2 && !(loop && !loop->eps)) ||
                                      (c && !c->eps && c->prec == 2 && !(loop && !loop->eps)));
    return re_from_buf(&b, single_atom ? 2 : 1, false);
}

static struct re *re_alt(struct re *a, struct re *b) /* consumes both */
{
    if (!a) return b;
    if (!b) return a;
    struct re *r;
    if (a->n == b->n && a->eps == b->eps && !memcmp(a->s, b->s, a->n)) {
        re_free(b);
        return a;
    }
    struct buf o = {0};
    if (a->eps || b->eps) {
        struct re *x = a->eps ? b : a;
        put_wrapped(&o, x, 2);
        buf_puts(&o, "?");
        r = re_from_buf(&o, 1, false);
    } else {
        buf_append(&o, a->s, a->n);
        buf_puts(&o, "|");
        buf_append(&o, b->s, b->n);
        r = re_from_buf(&o, 0, false);
    }
    re_free(a);
    re_free(b);
    return r;
}

/* whether a state at BFS depth a (> 0) is eliminated before one at depth b (> 0) */
static bool elim_before(int32_t a, int32_t b)
{
    int za = __builtin_ctz((unsigned)a), zb = __builtin_ctz((unsigned)b);
    return za != zb ? za < zb : a > b;
}

int jsk_regex(struct jsk *kk, const bool *sel, unsigned flags, struct buf *out, struct err *e)
{
    struct kimpl *k = kk->impl;
    int32_t n = k->nd, A = k->n_atoms;
    bool dead_sel = false;
    for (int j = 0; j < kk->n_masks; j++)
        if (sel[j] && !kk->masks[j]) dead_sel = true;
    /* node n: the dead state (keys that left every branch: no pattern, no name; mask 0) */
    int32_t N = n + 1;
    bool *tgt = calloc((size_t)N, 1);
    bool *useful = calloc((size_t)N, 1);
    int32_t *depth = malloc((size_t)N * sizeof *depth);
    int32_t *order = malloc((size_t)N * sizeof *order);
    struct re **R = NULL;
    int rc = -1;
    if (!tgt || !useful || !depth || !order) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int32_t i = 0; i < n; i++) {
        if (k->lname[i]) continue;
        for (int j = 0; j < kk->n_masks; j++)
            if (sel[j] && kk->masks[j] == k->lmask[i]) tgt[i] = true;
    }
    tgt[n] = dead_sel;
    /* useful: can reach a target (backwards fixpoint; the dead state loops on every atom) */
    for (int32_t i = 0; i < N; i++)
        useful[i] = tgt[i];
    for (bool ch = true; ch;) {
        ch = false;
        for (int32_t i = 0; i < n; i++) {
            if (useful[i]) continue;
            for (int32_t a = 0; a < A; a++) {
                int32_t t = k->tr[(size_t)i * (size_t)A + (size_t)a];
                if (useful[t < 0 ? n : t]) {
                    useful[i] = ch = true;
                    break;
                }
            }
        }
    }
    if (!useful[k->d0]) {
        rc = 1;
        goto out;
    }
    int32_t nu = 0;
    for (int32_t i = 0; i < N; i++)
        nu += useful[i];
    if (nu > 600) {
        kfail(k, "the language needs more than 600 automaton states");
        goto out;
    }
    /* a GNFA on nodes 0..N-1 plus S = N (start) and T = N + 1 (end) */
    int32_t M = N + 2, S = N, T = N + 1;
    R = calloc((size_t)M * (size_t)M, sizeof *R);
    if (!R) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto out;
    }
#define RR(i, j) R[(size_t)(i) * (size_t)M + (size_t)(j)]
    /* edges: the atoms from i to j as one class */
    for (int32_t i = 0; i < N; i++) {
        if (!useful[i]) continue;
        for (int32_t j = 0; j < N; j++) {
            if (!useful[j]) continue;
            struct jsrx_cpset cs = {0};
            bool any = false;
            for (int32_t a = 0; a < A; a++) {
                int32_t t = i == n ? n : k->tr[(size_t)i * (size_t)A + (size_t)a];
                if ((t < 0 ? n : t) != j) continue;
                any = true;
                for (int r = 0; r < k->atom[a].n; r++)
                    jsrx_cp_add(&cs, k->atom[a].lo[r], k->atom[a].hi[r]);
                if (k->atom[a].overflow) cs.overflow = true;
            }
            if (!any) continue;
            if (cs.overflow) {
                kfail(k, "key character classes too complex");
                goto out;
            }
            struct buf b = {0};
            if (flags & JSK_TICK) buf_puts(&b, "(?:");
            jsrx_emit_set(&b, &cs, true);
            if (flags & JSK_TICK) buf_puts(&b, "(?T))");
            if (!(RR(i, j) = re_from_buf(&b, 2, false))) {
                err_set(e, ERR_NOMEM, "out of memory");
                goto out;
            }
        }
        if (tgt[i] && !(RR(i, T) = re_new("", 0, 2, true))) {
            err_set(e, ERR_NOMEM, "out of memory");
            goto out;
        }
    }
    if (!(RR(S, k->d0) = re_new("", 0, 2, true))) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto out;
    }
    /* elimination order by BFS depth d from the start: the "ruler" order, states with more
     * trailing zero bits in d later, and among equals the farthest first. A chain of n states
     * (a length-bounded pattern) then halves each round: its regex nests log2(n) deep and
     * grows by n log n, where farthest-first nests n deep and nearest-first grows by n^2. */
    for (int32_t i = 0; i < N; i++)
        depth[i] = -1;
    int32_t qh = 0, qt = 0;
    depth[k->d0] = 0;
    order[qt++] = k->d0;
    while (qh < qt) {
        int32_t i = order[qh++];
        for (int32_t j = 0; j < N; j++)
            if (useful[j] && depth[j] < 0 && RR(i, j)) {
                depth[j] = depth[i] + 1;
                order[qt++] = j;
            }
    }
    for (int32_t i = 1; i < qt; i++) { /* insertion sort of order[1..qt) by the key below */
        int32_t v = order[i], j = i;
        while (j > 1 && elim_before(depth[v], depth[order[j - 1]])) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
    size_t work = 0; /* bytes of regex written: bounds the compile time */
    for (int32_t x = 1; x <= qt; x++) {
        int32_t q = order[x % qt]; /* the start state last */
        struct re *loop = RR(q, q);
        RR(q, q) = NULL;
        for (int32_t p = 0; p < M; p++) {
            struct re *in = RR(p, q);
            if (!in || p == q) continue;
            for (int32_t r = 0; r < M; r++) {
                struct re *o = RR(q, r);
                if (!o || r == q) continue;
                struct re *path = re_cat3(in, loop, o);
                work += path ? path->n : 0;
                if (work > JSK_MAX_WORK) {
                    re_free(path);
                    re_free(loop);
                    kfail(k, "the language needs over 32 MB of regex work");
                    goto out;
                }
                if (!path || !(RR(p, r) = re_alt(RR(p, r), path))) {
                    re_free(loop);
                    err_set(e, ERR_NOMEM, "out of memory");
                    goto out;
                }
                if (RR(p, r)->n > JSK_MAX_REGEX) {
                    re_free(loop);
                    kfail(k, "the language needs a regex over 2 MB");
                    goto out;
                }
                if (RR(p, r)->n > 2 * JSK_MAX_NEST &&
                    rx_nest(RR(p, r)->s, RR(p, r)->n) > JSK_MAX_NEST) {
                    re_free(loop);
                    kfail(k, "the language needs a regex nested more than 150 groups deep");
                    goto out;
                }
            }
        }
        re_free(loop);
        for (int32_t j = 0; j < M; j++) {
            re_free(RR(q, j));
            RR(q, j) = NULL;
            re_free(RR(j, q));
            RR(j, q) = NULL;
        }
    }
    struct re *res = RR(S, T);
    if (!res) {
        rc = 1;
        goto out;
    }
    if (!(flags & JSK_BARE)) buf_puts(out, "\"");
    if (!res->eps) put_wrapped(out, res, 1);
    if (!(flags & JSK_BARE)) buf_puts(out, "\"");
    rc = 0;
#undef RR
out:
    if (R)
        for (size_t i = 0; i < (size_t)(N + 2) * (size_t)(N + 2); i++)
            re_free(R[i]);
    free(R);
    free(tgt);
    free(useful);
    free(depth);
    free(order);
    return rc;
}

int jsk_intersect_regex(const char *kw, const char *const *pats, int np, unsigned flags,
                        struct buf *out, struct err *e)
{
    struct jsk k;
    if (jsk_build(&k, kw, pats, np, NULL, NULL, 0, e)) return -1;
    uint64_t all = np >= 64 ? ~0ull : (1ull << np) - 1;
    bool *sel = calloc((size_t)k.n_masks + 1, 1);
    if (!sel) {
        jsk_free(&k);
        return err_set(e, ERR_NOMEM, "out of memory");
    }
    for (int j = 0; j < k.n_masks; j++)
        sel[j] = (k.masks[j] & all) == all;
    int r = jsk_regex(&k, sel, flags | JSK_BARE, out, e);
    free(sel);
    jsk_free(&k);
    return r;
}

int jsk_match(const char *pat, const char *s, size_t n)
{
    struct err e = {0};
    struct kimpl k = {0};
    k.e = &e;
    k.kw = "pattern";
    k.np = 1;
    struct dfab d = {0};
    struct sset cur = {0};
    int32_t *seed = NULL;
    int rc = -1;
    int32_t st = add_pattern(&k, pat, 0);
    if (st < 0) goto out;
    d.mark = calloc((size_t)k.n, sizeof *d.mark);
    d.stack = malloc((size_t)k.n * sizeof *d.stack);
    seed = malloc((size_t)k.n * sizeof *seed);
    if (!d.mark || !d.stack || !seed || closure(&k, &d, &st, 1, true, &cur)) goto out;
    for (size_t i = 0; i < n && cur.n;) {
        size_t i0 = i;
        uint32_t c = jsrx_pt_cp(s, n, &i);
        if (i == i0) goto out;
        int32_t ns = 0;
        for (int32_t j = 0; j < cur.n; j++) {
            const struct kst *t = &k.st[cur.v[j]];
            if (t->kind == KN_CHAR && set_has(&k.sets[t->set], c)) seed[ns++] = t->out;
        }
        free(cur.v);
        cur = (struct sset){0};
        if (ns && closure(&k, &d, seed, ns, false, &cur)) goto out;
    }
    uint64_t mask = 0;
    int32_t name = 0;
    if (cur.n && set_tags(&k, &d, &cur, &mask, &name)) goto out;
    rc = (int)(mask & 1);
out:
    free(cur.v);
    free(seed);
    free(d.mark);
    free(d.stack);
    free(k.st);
    free(k.sets);
    return rc;
}
