/* jsonschema — JSON Schema → lark source (llguidance dialect). See jsonschema.h and
 * docs/jsonschema.md.
 *
 * Two passes: `lower` turns each schema object into an IR node (`struct sn`: allowed types plus
 * the constraints per type, or a union of alternatives, or a $ref), intersecting allOf / $ref /
 * anyOf / oneOf with the sibling keywords in the order they appear; `emit` writes lark rules for an
 * IR node and returns the expression naming it. $ref targets become named rules emitted from a
 * worklist, so recursive schemas give recursive rules. Identical rule bodies are emitted once. */
#include "base/log.h"
#include "grammar/jsonschema.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "grammar/jsonschema_internal.h"
#include "base/hash.h"

/* Limits (bad or hostile schemas are errors, not crashes) */
#define JS_MAX_DEPTH 200           /* nesting of schema objects while lowering */
#define JS_MAX_INTERSECT 100       /* nested allOf/$ref intersections */
#define JS_MAX_ALTS 1000           /* alternatives after distributing anyOf over allOf */
#define JS_MAX_ENUM_MULTIPLES 2000 /* bounded multipleOf enumerated as alternatives */
#define JS_MAX_OUT (64u << 20)     /* lark text size */
#define JS_ANYORDER_MAX 8          /* objects of up to 8 declared members: any order (2^8 sets) */
#define JS_ANYORDER_REQ_MAX 12     /* larger objects: sets of up to 12 required members */

/* Whitespace between JSON tokens (docs/jsonschema.md "Whitespace"), chosen by the root keyword
 * `x-whitespace`. tidy (the default, llguidance's bound): none, or one space after `,` and `:`.
 * compact: none. pretty: between any two tokens a run of spaces/tabs, optionally one line break
 * followed by indentation, bounded (100 columns) so a greedy model cannot emit whitespace
 * forever; covers 2-space indentation to depth 50. */
#define WS_RX "[ \\t]{0,100}\\r?\\n[ \\t]{0,100}|[ \\t]{1,100}"
enum { WS_TIDY, WS_COMPACT, WS_PRETTY };

enum {
    JT_NULL = 1,
    JT_BOOL = 2,
    JT_INT = 4, /* integers */
    JT_NUM = 8, /* any number (implies integers) */
    JT_STR = 16,
    JT_ARR = 32,
    JT_OBJ = 64,
    JT_ALL = 127
};

struct sn {
    unsigned types;
    int n_alts;
    struct sn **alts; /* n_alts > 0: union of alts, other fields unused */
    const char *ref;  /* $ref to a def (alone) */
    json_t *enumv;    /* allowed values (borrowed or arena-owned), NULL = no enum */
    json_t *not_enum; /* excluded values ("not": {"enum"/"const"}), NULL = none */
    /* number */
    struct jsrx_dec *lo, *hi;
    bool lo_excl, hi_excl;
    struct jsrx_dec *mult;
    /* string */
    int64_t min_len, max_len; /* max -1 = none */
    const char *pattern, *format;
    /* array */
    struct sn **prefix;
    int n_prefix;
    struct sn *items;    /* NULL = any */
    struct sn *contains; /* NULL = none */
    int64_t min_items, max_items;
    /* object */
    const char **pnames;
    size_t *plens;
    struct sn **pschemas;
    int n_props;
    const char **req;
    int n_req;
    struct sn *addl; /* NULL = any */
    const char **ppat;
    struct sn **ppsch;
    int n_ppat;
    int64_t min_props, max_props;
    /* dependentRequired / draft-7 dependencies (array form): if dep_if[i] is present, so is
     * dep_then[i] */
    const char **dep_if, **dep_then;
    int n_deps;
};

struct rule {
    char *body, *name;
    uint64_t hash;
};

struct def {
    char *ref;
    char *name;
    json_t *node;
    struct sn *ir;
    bool resolving, emitted, lowering;
};

struct js {
    json_t *root;
    const char *prefix;
    char tprefix[64];
    struct buf out;
    struct err *e;
    struct rule *rules;
    int n_rules, cap_rules;
    int *hidx; /* open-addressing index into rules */
    size_t hcap;
    struct def **defs; /* each def allocated once: pointers stay valid */
    int n_defs, cap_defs;
    void **allocs;
    size_t n_allocs, cap_allocs;
    json_t **jallocs;
    size_t n_jallocs, cap_jallocs;
    int depth, idepth;
    bool oom;
    /* shared rules */
    char *r_ws, *r_comma, *r_colon, *r_value, *r_str, *r_num, *r_obj, *r_arr;
    int ws;        /* WS_TIDY / WS_COMPACT / WS_PRETTY */
    bool ref_only; /* root $schema is draft 3..7: $ref siblings are ignored */
    char wso[64];  /* "r_ws?" (pretty) or "": what may follow `{ [` and precede `} ]` */
};

/* ------------------------------------------------------------------ memory */

static void *js_alloc(struct js *c, size_t n)
{
    if (c->oom) return NULL;
    if (c->n_allocs == c->cap_allocs) {
        size_t nc = c->cap_allocs ? c->cap_allocs * 2 : 256;
        void **p = realloc(c->allocs, nc * sizeof *p);
        if (!p) {
            c->oom = true;
            return NULL;
        }
        c->allocs = p;
        c->cap_allocs = nc;
    }
    void *p = calloc(1, n ? n : 1);
    if (!p) {
        c->oom = true;
        return NULL;
    }
    c->allocs[c->n_allocs++] = p;
    return p;
}

static char *js_strdup(struct js *c, const char *s, size_t n)
{
    char *p = js_alloc(c, n + 1);
    if (p) memcpy(p, s, n);
    return p;
}

static json_t *js_keep(struct js *c, json_t *v)
{
    if (!v) {
        c->oom = true;
        return NULL;
    }
    if (c->n_jallocs == c->cap_jallocs) {
        size_t nc = c->cap_jallocs ? c->cap_jallocs * 2 : 32;
        json_t **p = realloc(c->jallocs, nc * sizeof *p);
        if (!p) {
            json_decref(v);
            c->oom = true;
            return NULL;
        }
        c->jallocs = p;
        c->cap_jallocs = nc;
    }
    c->jallocs[c->n_jallocs++] = v;
    return v;
}

static int js_oom(struct js *c)
{
    return err_set(c->e, ERR_NOMEM, "out of memory");
}

static struct sn *sn_new(struct js *c, unsigned types)
{
    struct sn *s = js_alloc(c, sizeof *s);
    if (!s) return NULL;
    s->types = types;
    s->max_len = -1;
    s->max_items = -1;
    s->max_props = -1;
    return s;
}

static bool sn_is_any(const struct sn *s)
{
    return s->types == JT_ALL && !s->n_alts && !s->ref && !s->enumv && !s->not_enum && !s->lo &&
           !s->hi && !s->mult && s->min_len == 0 && s->max_len < 0 && !s->pattern && !s->format &&
           !s->n_prefix && !s->items && !s->contains && s->min_items == 0 && s->max_items < 0 &&
           !s->n_props && !s->n_req && !s->addl && !s->n_ppat && s->min_props == 0 &&
           s->max_props < 0 && !s->n_deps;
}

static bool sn_unsat(const struct sn *s)
{
    return !s->n_alts && !s->ref && s->types == 0;
}

/* ------------------------------------------------------------------ output: rules */

static int rules_rehash(struct js *c)
{
    size_t nc = c->hcap ? c->hcap * 2 : 256;
    int *h = malloc(nc * sizeof *h);
    if (!h) return -1;
    for (size_t i = 0; i < nc; i++)
        h[i] = -1;
    for (int i = 0; i < c->n_rules; i++) {
        if (!c->rules[i].body) continue;
        size_t j = c->rules[i].hash & (nc - 1);
        while (h[j] >= 0)
            j = (j + 1) & (nc - 1);
        h[j] = i;
    }
    free(c->hidx);
    c->hidx = h;
    c->hcap = nc;
    return 0;
}

/* Name for a rule with this body (deduplicated). body NULL: a fresh name with no body yet (defs).
 */
static char *mk_rule(struct js *c, const char *body)
{
    if (c->oom) return NULL;
    uint64_t h = body ? hash_fnv1a64_str(body) : 0;
    if (body && c->hcap) {
        size_t j = h & (c->hcap - 1);
        while (c->hidx[j] >= 0) {
            struct rule *r = &c->rules[c->hidx[j]];
            if (r->hash == h && !strcmp(r->body, body)) return r->name;
            j = (j + 1) & (c->hcap - 1);
        }
    }
    if (c->n_rules == c->cap_rules) {
        int nc = c->cap_rules ? c->cap_rules * 2 : 64;
        struct rule *p = realloc(c->rules, (size_t)nc * sizeof *p);
        if (!p) {
            c->oom = true;
            return NULL;
        }
        c->rules = p;
        c->cap_rules = nc;
    }
    if ((size_t)(c->n_rules + 1) * 2 > c->hcap && rules_rehash(c)) {
        c->oom = true;
        return NULL;
    }
    char nm[96];
    snprintf(nm, sizeof nm, "%sr%d", c->prefix, c->n_rules);
    struct rule *r = &c->rules[c->n_rules];
    r->name = js_strdup(c, nm, strlen(nm));
    r->body = body ? js_strdup(c, body, strlen(body)) : NULL;
    r->hash = h;
    if (!r->name || (body && !r->body)) return NULL;
    if (body) {
        size_t j = h & (c->hcap - 1);
        while (c->hidx[j] >= 0)
            j = (j + 1) & (c->hcap - 1);
        c->hidx[j] = c->n_rules;
        if (buf_printf(&c->out, "%s: %s\n", r->name, body)) c->oom = true;
        if (c->out.len > JS_MAX_OUT) {
            err_set(c->e, ERR_INVALID, "schema produces a grammar over %u MB", JS_MAX_OUT >> 20);
            c->oom = true;
        }
    }
    c->n_rules++;
    return r->name;
}

static char *mk_rule_buf(struct js *c, struct buf *b)
{
    char *r = mk_rule(c, b->data ? b->data : "");
    buf_free(b);
    return r;
}

static char *mk_regex_rule(struct js *c, const char *rx)
{
    struct buf b = {0};
    buf_printf(&b, "/%s/", rx);
    return mk_rule_buf(c, &b);
}

/* lark string literal for raw bytes (JSON text) */
static void lark_lit(struct buf *b, const char *s, size_t n)
{
    buf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '"' || s[i] == '\\')
            buf_printf(b, "\\%c", s[i]);
        else
            buf_append(b, &s[i], 1);
    }
    buf_puts(b, "\"");
}

static const char *r_ws(struct js *c)
{
    if (!c->r_ws) c->r_ws = mk_regex_rule(c, WS_RX);
    return c->r_ws;
}
/* The optional gap after `{ [` and before `} ]`: "rN?" in pretty mode, else nothing. */
static const char *r_wso(struct js *c)
{
    if (c->ws != WS_PRETTY) return "";
    if (!c->wso[0]) {
        const char *w = r_ws(c);
        if (w) snprintf(c->wso, sizeof c->wso, "%s?", w);
    }
    return c->wso;
}
static const char *r_comma(struct js *c)
{
    if (!c->r_comma) {
        if (c->ws == WS_TIDY) {
            c->r_comma = mk_regex_rule(c, ", ?");
        } else if (c->ws == WS_COMPACT) {
            c->r_comma = mk_regex_rule(c, ",");
        } else {
            struct buf b = {0};
            const char *w = r_ws(c);
            buf_printf(&b, "%s? \",\" %s?", w, w);
            c->r_comma = mk_rule_buf(c, &b);
        }
    }
    return c->r_comma;
}
static const char *r_colon(struct js *c)
{
    if (!c->r_colon) {
        if (c->ws == WS_TIDY) {
            c->r_colon = mk_regex_rule(c, ": ?");
        } else if (c->ws == WS_COMPACT) {
            c->r_colon = mk_regex_rule(c, ":");
        } else {
            struct buf b = {0};
            const char *w = r_ws(c);
            buf_printf(&b, "%s? \":\" %s?", w, w);
            c->r_colon = mk_rule_buf(c, &b);
        }
    }
    return c->r_colon;
}
static const char *r_str(struct js *c)
{
    if (!c->r_str) c->r_str = mk_regex_rule(c, "\"" JSRX_CHAR "*\"");
    return c->r_str;
}
static const char *r_num(struct js *c)
{
    if (!c->r_num) {
        struct buf b = {0};
        jsrx_number(NULL, false, NULL, false, false, -1, &b);
        c->r_num = mk_regex_rule(c, b.data);
        buf_free(&b);
    }
    return c->r_num;
}

/* any JSON value: value / object / array rules (mutually recursive, named up front) */
static const char *r_value(struct js *c)
{
    if (c->r_value) return c->r_value;
    c->r_value = mk_rule(c, NULL);
    c->r_obj = mk_rule(c, NULL);
    c->r_arr = mk_rule(c, NULL);
    if (c->oom) return NULL;
    const char *w = r_wso(c), *cm = r_comma(c), *cl = r_colon(c), *s = r_str(c), *n = r_num(c);
    buf_printf(&c->out, "%s: %s | %s | %s | %s | \"true\" | \"false\" | \"null\"\n", c->r_value,
               c->r_obj, c->r_arr, s, n);
    buf_printf(&c->out, "%s: \"{\" %s \"}\" | \"{\" %s %s %s %s (%s %s %s %s)* %s \"}\"\n",
               c->r_obj, w, w, s, cl, c->r_value, cm, s, cl, c->r_value, w);
    buf_printf(&c->out, "%s: \"[\" %s \"]\" | \"[\" %s %s (%s %s)* %s \"]\"\n", c->r_arr, w, w,
               c->r_value, cm, c->r_value, w);
    return c->r_value;
}

/* ------------------------------------------------------------------ keywords */

static const char *const KW_IMPL[] = {"anyOf",
                                      "oneOf",
                                      "allOf",
                                      "$ref",
                                      "const",
                                      "enum",
                                      "type",
                                      "items",
                                      "additionalItems",
                                      "prefixItems",
                                      "minItems",
                                      "maxItems",
                                      "properties",
                                      "additionalProperties",
                                      "patternProperties",
                                      "required",
                                      "minProperties",
                                      "maxProperties",
                                      "minLength",
                                      "maxLength",
                                      "pattern",
                                      "format",
                                      "minimum",
                                      "maximum",
                                      "exclusiveMinimum",
                                      "exclusiveMaximum",
                                      "multipleOf",
                                      "uniqueItems",
                                      "contains",
                                      "dependentRequired",
                                      "dependencies",
                                      NULL};
/* Annotation keywords ($defs, title, description, default, examples, ...) and keywords JSON
 * Schema does not define are ignored (docs/jsonschema.md lists them). */
/* JSON Schema keywords we do not implement: an error naming them. */
static const char *const KW_UNSUPPORTED[] = {"if",
                                             "then",
                                             "else",
                                             "dependentSchemas",
                                             "minContains",
                                             "maxContains",
                                             "propertyNames",
                                             "unevaluatedProperties",
                                             "unevaluatedItems",
                                             "$dynamicRef",
                                             "$dynamicAnchor",
                                             "$recursiveRef",
                                             "$recursiveAnchor",
                                             "contentSchema",
                                             NULL};

static bool in_list(const char *const *l, const char *k)
{
    for (; *l; l++)
        if (!strcmp(*l, k)) return true;
    return false;
}

/* ------------------------------------------------------------------ numbers */

static int num_to_dec(struct js *c, json_t *v, struct jsrx_dec *d, const char *kw)
{
    char tmp[64];
    if (json_is_integer(v))
        snprintf(tmp, sizeof tmp, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) {
        double x = json_real_value(v);
        if (!isfinite(x)) return err_set(c->e, ERR_INVALID, "%s: not a finite number", kw);
        for (int p = 1; p <= 17; p++) { /* shortest text that round-trips */
            snprintf(tmp, sizeof tmp, "%.*g", p, x);
            if (strtod(tmp, NULL) == x) break;
        }
    } else
        return err_set(c->e, ERR_INVALID, "%s must be a number", kw);
    if (jsrx_dec_parse(tmp, d)) return err_set(c->e, ERR_INVALID, "%s: number out of range", kw);
    return 0;
}

static int get_count(struct js *c, json_t *v, const char *kw, int64_t *out)
{
    double x;
    if (json_is_integer(v))
        x = (double)json_integer_value(v);
    else if (json_is_real(v))
        x = json_real_value(v);
    else
        return err_set(c->e, ERR_INVALID, "%s must be a non-negative integer", kw);
    if (!(x >= 0) || x != floor(x))
        return err_set(c->e, ERR_INVALID, "%s must be a non-negative integer", kw);
    *out = x > 1e15 ? (int64_t)1e15 : (int64_t)x;
    return 0;
}

/* ------------------------------------------------------------------ lowering */

static struct sn *lower(struct js *c, json_t *s);
static struct sn *intersect(struct js *c, struct sn *a, struct sn *b);

static unsigned type_bit(const char *t)
{
    if (!strcmp(t, "null")) return JT_NULL;
    if (!strcmp(t, "boolean")) return JT_BOOL;
    if (!strcmp(t, "integer")) return JT_INT;
    if (!strcmp(t, "number")) return JT_NUM | JT_INT;
    if (!strcmp(t, "string")) return JT_STR;
    if (!strcmp(t, "array")) return JT_ARR;
    if (!strcmp(t, "object")) return JT_OBJ;
    return 0;
}

static struct def *find_def(struct js *c, const char *ref)
{
    for (int i = 0; i < c->n_defs; i++)
        if (!strcmp(c->defs[i]->ref, ref)) return c->defs[i];
    return NULL;
}

/* a subschema named by "$anchor": name, or "$id"/"id": "#name" (drafts 4..7) */
static json_t *find_anchor(json_t *v, const char *name, int depth)
{
    if (depth > 64) return NULL;
    if (json_is_object(v)) {
        json_t *a = json_object_get(v, "$anchor");
        if (json_is_string(a) && !strcmp(json_string_value(a), name)) return v;
        for (int k = 0; k < 2; k++) {
            json_t *id = json_object_get(v, k ? "id" : "$id");
            if (json_is_string(id) && json_string_value(id)[0] == '#' &&
                !strcmp(json_string_value(id) + 1, name))
                return v;
        }
        const char *key;
        json_t *x;
        json_object_foreach(v, key, x)
        {
            if (!strcmp(key, "enum") || !strcmp(key, "const") || !strcmp(key, "default") ||
                !strcmp(key, "examples"))
                continue;
            json_t *r = find_anchor(x, name, depth + 1);
            if (r) return r;
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            json_t *r = find_anchor(x, name, depth + 1);
            if (r) return r;
        }
    }
    return NULL;
}

/* JSON pointer lookup ("#/a/b" with ~0 ~1 and %XX), or "#anchor" */
static json_t *resolve_pointer(struct js *c, const char *ref)
{
    const char *p = ref;
    if (p[0] == '#' && p[1] && p[1] != '/') return find_anchor(c->root, p + 1, 0);
    if (*p != '#') {
        /* same-document refs written with the root $id */
        json_t *id = json_object_get(c->root, "$id");
        const char *ids = json_is_string(id) ? json_string_value(id) : NULL;
        size_t il = ids ? strlen(ids) : 0;
        while (il && ids[il - 1] == '#')
            il--;
        if (ids && il && !strncmp(p, ids, il) && (p[il] == '#' || !p[il]))
            p += il;
        else
            return NULL;
        if (!*p) return c->root;
    }
    p++;
    json_t *cur = c->root;
    while (*p) {
        if (*p != '/') return NULL;
        p++;
        char key[512];
        size_t n = 0;
        while (*p && *p != '/') {
            char ch = *p++;
            if (ch == '~' && (*p == '0' || *p == '1'))
                ch = *p++ == '0' ? '~' : '/';
            else if (ch == '%' && p[0] && p[1]) {
                int hv = 0;
                bool ok = true;
                for (int k = 0; k < 2; k++) {
                    char h = p[k];
                    hv *= 16;
                    if (h >= '0' && h <= '9')
                        hv += h - '0';
                    else if ((h | 32) >= 'a' && (h | 32) <= 'f')
                        hv += (h | 32) - 'a' + 10;
                    else
                        ok = false;
                }
                if (ok) {
                    ch = (char)hv;
                    p += 2;
                }
            }
            if (n + 1 >= sizeof key) return NULL;
            key[n++] = ch;
        }
        key[n] = 0;
        if (json_is_object(cur))
            cur = json_object_get(cur, key);
        else if (json_is_array(cur)) {
            char *end;
            long idx = strtol(key, &end, 10);
            if (*end || idx < 0) return NULL;
            cur = json_array_get(cur, (size_t)idx);
        } else
            return NULL;
        if (!cur) return NULL;
    }
    return cur;
}

static struct def *get_def(struct js *c, const char *ref)
{
    struct def *d = find_def(c, ref);
    if (d) return d;
    json_t *node = resolve_pointer(c, ref);
    if (!node) {
        err_set(c->e, ERR_INVALID, "$ref \"%.200s\" not found (only local refs are supported)",
                ref);
        return NULL;
    }
    if (c->n_defs == c->cap_defs) {
        int nc = c->cap_defs ? c->cap_defs * 2 : 16;
        struct def **p = realloc(c->defs, (size_t)nc * sizeof *p);
        if (!p) {
            js_oom(c);
            c->oom = true;
            return NULL;
        }
        c->defs = p;
        c->cap_defs = nc;
    }
    d = js_alloc(c, sizeof *d);
    if (!d) {
        js_oom(c);
        return NULL;
    }
    c->defs[c->n_defs++] = d;
    d->ref = js_strdup(c, ref, strlen(ref));
    d->node = node;
    if (!d->ref) return NULL;
    return d;
}

/* IR of a def's target (lowered once) */
static struct sn *def_ir(struct js *c, struct def *d)
{
    if (d->ir) return d->ir;
    if (d->lowering) {
        err_set(c->e, ERR_UNSUPPORTED,
                "circular $ref \"%.200s\" combined with sibling keywords is not supported", d->ref);
        return NULL;
    }
    d->lowering = true;
    struct sn *s = lower(c, d->node);
    d->lowering = false;
    d->ir = s;
    return s;
}

static int get_schema_map(struct js *c, json_t *v, const char *kw, const char ***names,
                          size_t **lens, struct sn ***schemas, int *n)
{
    if (!json_is_object(v)) return err_set(c->e, ERR_INVALID, "%s must be an object", kw);
    size_t cnt = json_object_size(v);
    *names = js_alloc(c, (cnt + 1) * sizeof **names);
    *lens = js_alloc(c, (cnt + 1) * sizeof **lens);
    *schemas = js_alloc(c, (cnt + 1) * sizeof **schemas);
    if (c->oom) return js_oom(c);
    const char *k;
    json_t *sv;
    int i = 0;
    void *it = json_object_iter(v);
    while (it) {
        k = json_object_iter_key(it);
        sv = json_object_iter_value(it);
        (*names)[i] = k;
        (*lens)[i] = json_object_iter_key_len(it);
        (*schemas)[i] = lower(c, sv);
        if (!(*schemas)[i]) return err_wrap(c->e, "%s \"%.100s\"", kw, k);
        i++;
        it = json_object_iter_next(v, it);
    }
    *n = i;
    return 0;
}

/* the sibling keywords of one schema object (everything but the applicators) */
/* Whether a JSON Schema draft (3 .. 2020-12) defines this `format`. Others are annotations
 * (the spec: an unknown format is not an assertion; validators accept any string), so they
 * constrain nothing; a defined one we cannot write is an error naming it. */
static bool format_defined(const char *f)
{
    static const char *const defined[] = {
        "date-time", "date", "time", "duration", "email", "idn-email", "hostname",
        "idn-hostname", "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid",
        "uri-template", "json-pointer", "relative-json-pointer", "regex",
        /* draft 3 */
        "color", "style", "phone", "utc-millisec", "host-name", "ip-address"};
    for (size_t i = 0; i < sizeof defined / sizeof defined[0]; i++)
        if (!strcmp(f, defined[i])) return true;
    return false;
}

static struct sn *lower_own(struct js *c, json_t *s)
{
    struct sn *n = sn_new(c, JT_ALL);
    if (!n) return NULL;
    json_t *v;
    if ((v = json_object_get(s, "type"))) {
        unsigned t = 0;
        if (json_is_string(v)) {
            t = type_bit(json_string_value(v));
            if (!t) {
                err_set(c->e, ERR_INVALID, "unknown type \"%.50s\"", json_string_value(v));
                return NULL;
            }
        } else if (json_is_array(v)) {
            size_t i;
            json_t *x;
            json_array_foreach(v, i, x)
            {
                unsigned b = json_is_string(x) ? type_bit(json_string_value(x)) : 0;
                if (!b) {
                    err_set(c->e, ERR_INVALID, "type: bad entry at index %zu", i);
                    return NULL;
                }
                t |= b;
            }
        } else {
            err_set(c->e, ERR_INVALID, "type must be a string or an array");
            return NULL;
        }
        n->types = t;
    }
    if ((v = json_object_get(s, "enum"))) {
        if (!json_is_array(v)) {
            err_set(c->e, ERR_INVALID, "enum must be an array");
            return NULL;
        }
        n->enumv = v;
    }
    if ((v = json_object_get(s, "const"))) {
        json_t *a = js_keep(c, json_array());
        if (!a || json_array_append(a, v)) {
            js_oom(c);
            return NULL;
        }
        if (n->enumv) { /* enum and const: keep const only if listed */
            size_t i;
            json_t *x;
            bool found = false;
            json_array_foreach(n->enumv, i, x) if (json_equal(x, v)) found = true;
            if (!found) json_array_clear(a);
        }
        n->enumv = a;
    }
    /* numbers */
    json_t *mn = json_object_get(s, "minimum"), *mx = json_object_get(s, "maximum");
    json_t *emn = json_object_get(s, "exclusiveMinimum"),
           *emx = json_object_get(s, "exclusiveMaximum");
    struct jsrx_dec d;
    if (mn) {
        if (num_to_dec(c, mn, &d, "minimum")) return NULL;
        n->lo = js_alloc(c, sizeof d);
        if (!n->lo) return NULL;
        *n->lo = d;
        if (json_is_true(emn)) n->lo_excl = true;
    }
    if (mx) {
        if (num_to_dec(c, mx, &d, "maximum")) return NULL;
        n->hi = js_alloc(c, sizeof d);
        if (!n->hi) return NULL;
        *n->hi = d;
        if (json_is_true(emx)) n->hi_excl = true;
    }
    if (emn && !json_is_boolean(emn)) {
        if (num_to_dec(c, emn, &d, "exclusiveMinimum")) return NULL;
        if (!n->lo || jsrx_dec_cmp(&d, n->lo) >= 0) {
            if (!n->lo && !(n->lo = js_alloc(c, sizeof d))) return NULL;
            *n->lo = d;
            n->lo_excl = true;
        }
    }
    if (emx && !json_is_boolean(emx)) {
        if (num_to_dec(c, emx, &d, "exclusiveMaximum")) return NULL;
        if (!n->hi || jsrx_dec_cmp(&d, n->hi) <= 0) {
            if (!n->hi && !(n->hi = js_alloc(c, sizeof d))) return NULL;
            *n->hi = d;
            n->hi_excl = true;
        }
    }
    if ((v = json_object_get(s, "multipleOf"))) {
        if (num_to_dec(c, v, &d, "multipleOf")) return NULL;
        if (d.neg || (!strcmp(d.ip, "0") && !d.fp[0])) {
            err_set(c->e, ERR_INVALID, "multipleOf must be positive");
            return NULL;
        }
        if (!(n->mult = js_alloc(c, sizeof d))) return NULL;
        *n->mult = d;
    }
    /* strings */
    if ((v = json_object_get(s, "minLength")) && get_count(c, v, "minLength", &n->min_len))
        return NULL;
    if ((v = json_object_get(s, "maxLength")) && get_count(c, v, "maxLength", &n->max_len))
        return NULL;
    if ((v = json_object_get(s, "pattern"))) {
        if (!json_is_string(v)) {
            err_set(c->e, ERR_INVALID, "pattern must be a string");
            return NULL;
        }
        n->pattern = json_string_value(v);
    }
    if ((v = json_object_get(s, "format"))) {
        if (!json_is_string(v)) {
            err_set(c->e, ERR_INVALID, "format must be a string");
            return NULL;
        }
        n->format = json_string_value(v);
        if (!format_defined(n->format)) {
            n->format = NULL; /* not a format JSON Schema defines: an annotation */
        } else {
            struct buf tmp = {0};
            int r = jsrx_format(n->format, &tmp, c->e);
            buf_free(&tmp);
            if (r) return NULL;
        }
    }
    /* arrays */
    json_t *items = json_object_get(s, "items"), *pfx = json_object_get(s, "prefixItems");
    json_t *addi = json_object_get(s, "additionalItems");
    if (json_is_array(items)) { /* draft 4..7 tuple form */
        pfx = items;
        items = addi;
    }
    if (pfx) {
        if (!json_is_array(pfx)) {
            err_set(c->e, ERR_INVALID, "prefixItems must be an array");
            return NULL;
        }
        n->n_prefix = (int)json_array_size(pfx);
        n->prefix = js_alloc(c, ((size_t)n->n_prefix + 1) * sizeof *n->prefix);
        if (!n->prefix) return NULL;
        for (int i = 0; i < n->n_prefix; i++) {
            n->prefix[i] = lower(c, json_array_get(pfx, (size_t)i));
            if (!n->prefix[i]) {
                err_wrap(c->e, "prefixItems[%d]", i);
                return NULL;
            }
        }
    }
    if (items) {
        struct sn *it = lower(c, items);
        if (!it) {
            err_wrap(c->e, "items");
            return NULL;
        }
        if (!sn_is_any(it)) n->items = it;
    }
    if ((v = json_object_get(s, "contains"))) {
        n->contains = lower(c, v);
        if (!n->contains) {
            err_wrap(c->e, "contains");
            return NULL;
        }
    }
    if ((v = json_object_get(s, "minItems")) && get_count(c, v, "minItems", &n->min_items))
        return NULL;
    if ((v = json_object_get(s, "maxItems")) && get_count(c, v, "maxItems", &n->max_items))
        return NULL;
    if ((v = json_object_get(s, "uniqueItems")) && json_is_true(v)) {
        err_set(c->e, ERR_UNSUPPORTED, "unsupported keyword \"uniqueItems\" (true)");
        return NULL;
    }
    /* objects */
    if ((v = json_object_get(s, "properties")) &&
        get_schema_map(c, v, "properties", &n->pnames, &n->plens, &n->pschemas, &n->n_props))
        return NULL;
    if ((v = json_object_get(s, "patternProperties"))) {
        size_t *lens;
        if (get_schema_map(c, v, "patternProperties", &n->ppat, &lens, &n->ppsch, &n->n_ppat))
            return NULL;
    }
    if ((v = json_object_get(s, "additionalProperties"))) {
        struct sn *a = lower(c, v);
        if (!a) {
            err_wrap(c->e, "additionalProperties");
            return NULL;
        }
        if (!sn_is_any(a)) n->addl = a;
    }
    if ((v = json_object_get(s, "required"))) {
        if (!json_is_array(v)) {
            err_set(c->e, ERR_INVALID, "required must be an array");
            return NULL;
        }
        n->req = js_alloc(c, (json_array_size(v) + 1) * sizeof *n->req);
        if (!n->req) return NULL;
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            if (!json_is_string(x)) {
                err_set(c->e, ERR_INVALID, "required: entries must be strings");
                return NULL;
            }
            bool dup = false;
            for (int j = 0; j < n->n_req; j++)
                if (!strcmp(n->req[j], json_string_value(x))) dup = true;
            if (!dup) n->req[n->n_req++] = json_string_value(x);
        }
    }
    if ((v = json_object_get(s, "minProperties")) &&
        get_count(c, v, "minProperties", &n->min_props))
        return NULL;
    if ((v = json_object_get(s, "maxProperties")) &&
        get_count(c, v, "maxProperties", &n->max_props))
        return NULL;
    for (int kw = 0; kw < 2; kw++) {
        const char *name = kw ? "dependencies" : "dependentRequired";
        if (!(v = json_object_get(s, name))) continue;
        if (!json_is_object(v)) {
            err_set(c->e, ERR_INVALID, "%s must be an object", name);
            return NULL;
        }
        const char *key;
        json_t *list;
        json_object_foreach(v, key, list)
        {
            if (json_is_object(list) || json_is_boolean(list)) {
                err_set(c->e, ERR_UNSUPPORTED,
                        "%s \"%.80s\": a schema dependency (dependentSchemas) is not supported",
                        name, key);
                return NULL;
            }
            if (!json_is_array(list)) {
                err_set(c->e, ERR_INVALID, "%s \"%.80s\" must be an array of names", name, key);
                return NULL;
            }
            size_t add = json_array_size(list);
            const char **ni = js_alloc(c, ((size_t)n->n_deps + add + 1) * sizeof *ni);
            const char **nt = js_alloc(c, ((size_t)n->n_deps + add + 1) * sizeof *nt);
            if (!ni || !nt) return NULL;
            if (n->n_deps) {
                memcpy(ni, n->dep_if, (size_t)n->n_deps * sizeof *ni);
                memcpy(nt, n->dep_then, (size_t)n->n_deps * sizeof *nt);
            }
            n->dep_if = ni;
            n->dep_then = nt;
            size_t i;
            json_t *x;
            json_array_foreach(list, i, x)
            {
                if (!json_is_string(x)) {
                    err_set(c->e, ERR_INVALID, "%s \"%.80s\": entries must be strings", name, key);
                    return NULL;
                }
                n->dep_if[n->n_deps] = key;
                n->dep_then[n->n_deps++] = json_string_value(x);
            }
        }
    }
    return n;
}

static bool is_own_keyword(const char *k)
{
    return in_list(KW_IMPL, k) && strcmp(k, "$ref") && strcmp(k, "allOf") && strcmp(k, "anyOf") &&
           strcmp(k, "oneOf");
}

/* keywords that place the sibling properties in the property order */
static bool is_obj_keyword(const char *k)
{
    return !strcmp(k, "properties") || !strcmp(k, "additionalProperties") ||
           !strcmp(k, "patternProperties") || !strcmp(k, "required");
}

static struct sn *mk_alts(struct js *c, json_t *arr, const char *kw)
{
    if (!json_is_array(arr) || json_array_size(arr) == 0) {
        err_set(c->e, ERR_INVALID, "%s must be a non-empty array", kw);
        return NULL;
    }
    size_t n = json_array_size(arr);
    struct sn *u = sn_new(c, 0);
    if (!u) return NULL;
    u->alts = js_alloc(c, n * sizeof *u->alts);
    if (!u->alts) return NULL;
    for (size_t i = 0; i < n; i++) {
        struct sn *a = lower(c, json_array_get(arr, i));
        if (!a) {
            err_wrap(c->e, "%s[%zu]", kw, i);
            return NULL;
        }
        u->alts[u->n_alts++] = a;
    }
    if (u->n_alts == 1) return u->alts[0];
    return u;
}

static bool provably_disjoint(struct js *c, struct sn *a, struct sn *b, int depth);
static struct sn *resolve(struct js *c, struct sn *a);

/* "not": supported when the negated schema is everything, nothing, a set of types, or an
 * enum/const (then those values are excluded); anything else is an error naming "not". */
static struct sn *negate(struct js *c, json_t *v)
{
    /* not(not X) = X when "not" is the only validation keyword */
    json_t *inner = json_is_object(v) ? json_object_get(v, "not") : NULL;
    if (inner) {
        const char *k;
        json_t *x;
        bool only = true;
        json_object_foreach(v, k, x) if (strcmp(k, "not") &&
                                         (in_list(KW_IMPL, k) || in_list(KW_UNSUPPORTED, k))) only =
            false;
        if (only) return lower(c, inner);
    }
    struct sn *n = lower(c, v);
    if (!n) {
        err_wrap(c->e, "not");
        return NULL;
    }
    n = resolve(c, n);
    if (!n) return NULL;
    if (sn_is_any(n)) return sn_new(c, 0);
    if (sn_unsat(n)) return sn_new(c, JT_ALL);
    struct sn t = *n;
    t.types = JT_ALL;
    if (!t.n_alts && !t.enumv && sn_is_any(&t)) { /* types only */
        unsigned ty = n->types;
        if ((ty & JT_INT) && !(ty & JT_NUM)) {
            err_set(c->e, ERR_UNSUPPORTED,
                    "unsupported keyword \"not\" (not integer: non-integer numbers)");
            return NULL;
        }
        unsigned r = JT_ALL & ~ty;
        if (ty & JT_NUM) r &= ~(unsigned)JT_INT;
        return sn_new(c, r);
    }
    t.enumv = NULL;
    if (n->types == JT_ALL && n->enumv && !n->n_alts && sn_is_any(&t)) {
        struct sn *r = sn_new(c, JT_ALL);
        if (r) r->not_enum = n->enumv;
        return r;
    }
    err_set(c->e, ERR_UNSUPPORTED,
            "unsupported keyword \"not\" (supported: not of true/false, of a type, of enum/const)");
    return NULL;
}

static struct sn *lower(struct js *c, json_t *s)
{
    if (c->oom) {
        js_oom(c);
        return NULL;
    }
    if (json_is_true(s)) return sn_new(c, JT_ALL);
    if (json_is_false(s)) return sn_new(c, 0);
    if (!json_is_object(s)) {
        err_set(c->e, ERR_INVALID, "a schema must be an object or a boolean");
        return NULL;
    }
    if (++c->depth > JS_MAX_DEPTH) {
        err_set(c->e, ERR_INVALID, "schema nested deeper than %d", JS_MAX_DEPTH);
        return NULL;
    }
    struct sn *res = NULL;
    const char *k;
    json_t *v;
    /* drafts 3..7: "all other properties in a $ref object MUST be ignored" */
    bool ref_only = c->ref_only && json_is_string(json_object_get(s, "$ref"));
    json_object_foreach(s, k, v)
    {
        if (ref_only && strcmp(k, "$ref")) continue;
        if (in_list(KW_UNSUPPORTED, k)) {
            err_set(c->e, ERR_UNSUPPORTED, "unsupported keyword \"%s\"", k);
            goto out;
        }
    }
    res = sn_new(c, JT_ALL);
    bool own_done = false, has_obj_kw = false;
    json_object_foreach(s, k, v) if (is_obj_keyword(k)) has_obj_kw = true;
    json_object_foreach(s, k, v)
    {
        struct sn *part = NULL;
        if (ref_only && strcmp(k, "$ref")) continue;
        if (!strcmp(k, "$ref")) {
            if (!json_is_string(v)) {
                err_set(c->e, ERR_INVALID, "$ref must be a string");
                res = NULL;
                goto out;
            }
            struct def *d = get_def(c, json_string_value(v));
            if (!d) {
                res = NULL;
                goto out;
            }
            part = sn_new(c, 0);
            if (!part) {
                res = NULL;
                goto out;
            }
            part->ref = d->ref;
        } else if (!strcmp(k, "allOf")) {
            if (!json_is_array(v)) {
                err_set(c->e, ERR_INVALID, "allOf must be an array");
                res = NULL;
                goto out;
            }
            size_t i;
            json_t *x;
            part = sn_new(c, JT_ALL);
            json_array_foreach(v, i, x)
            {
                struct sn *a = lower(c, x);
                if (!a) {
                    err_wrap(c->e, "allOf[%zu]", i);
                    res = NULL;
                    goto out;
                }
                part = intersect(c, part, a);
                if (!part) {
                    res = NULL;
                    goto out;
                }
            }
        } else if (!strcmp(k, "not")) {
            part = negate(c, v);
        } else if (!strcmp(k, "anyOf")) {
            part = mk_alts(c, v, "anyOf");
        } else if (!strcmp(k, "oneOf")) {
            part = mk_alts(c, v, "oneOf");
            if (part && part->n_alts) {
                /* disjointness is judged within the sibling keywords (e.g. "type": "object") */
                struct sn *own = lower_own(c, s);
                struct sn **ia = own ? js_alloc(c, (size_t)part->n_alts * sizeof *ia) : NULL;
                if (!ia) {
                    res = NULL;
                    goto out;
                }
                for (int i = 0; i < part->n_alts; i++) {
                    struct err save = *c->e;
                    ia[i] = intersect(c, own, part->alts[i]);
                    if (!ia[i]) { /* cannot intersect here: judge the bare alternative */
                        *c->e = save;
                        ia[i] = part->alts[i];
                    }
                }
                for (int i = 0; i < part->n_alts; i++)
                    for (int j = i + 1; j < part->n_alts; j++)
                        if (!provably_disjoint(c, ia[i], ia[j], 0)) {
                            if (c->e->code == ERR_OK || c->e->msg[0] == 0)
                                err_set(c->e, ERR_UNSUPPORTED,
                                        "oneOf: alternatives %d and %d may overlap; oneOf is "
                                        "supported only when the alternatives are provably "
                                        "disjoint (by type, const/enum or a required "
                                        "discriminator property)",
                                        i, j);
                            res = NULL;
                            goto out;
                        }
            }
        } else if (is_own_keyword(k) && !own_done && (!has_obj_kw || is_obj_keyword(k))) {
            /* sibling keywords take the place of "properties" (or of the first of them), so the
             * property order follows the order of applicators in the schema, as llguidance does */
            own_done = true;
            part = lower_own(c, s);
        } else
            continue;
        if (!part) {
            res = NULL;
            goto out;
        }
        res = intersect(c, res, part);
        if (!res) goto out;
    }
out:
    c->depth--;
    if (!res && !c->e->msg[0]) js_oom(c);
    return res;
}

/* ------------------------------------------------------------------ intersection */

static unsigned types_and(unsigned a, unsigned b)
{
    unsigned r = a & b;
    if ((a & JT_NUM) && (b & JT_INT)) r |= JT_INT;
    if ((b & JT_NUM) && (a & JT_INT)) r |= JT_INT;
    return r;
}

static struct sn *resolve(struct js *c, struct sn *a)
{
    int guard = 0;
    while (a && a->ref) {
        struct def *d = find_def(c, a->ref);
        if (!d || ++guard > 100) {
            err_set(c->e, ERR_UNSUPPORTED, "$ref chain too long");
            return NULL;
        }
        a = def_ir(c, d);
    }
    return a;
}

static int pattern_matches(const char *pat, const char *subj, size_t n);

static struct sn *intersect_prop(struct js *c, struct sn *other, const char *name, size_t len,
                                 struct sn *mine)
{
    /* `mine` meets what `other` says about property `name` */
    for (int i = 0; i < other->n_props; i++)
        if (other->plens[i] == len && !memcmp(other->pnames[i], name, len))
            return intersect(c, mine, other->pschemas[i]);
    for (int i = 0; i < other->n_ppat; i++) {
        int m = pattern_matches(other->ppat[i], name, len);
        if (m < 0) {
            err_set(c->e, ERR_INVALID, "patternProperties: bad pattern \"%.100s\"", other->ppat[i]);
            return NULL;
        }
        if (m) {
            mine = intersect(c, mine, other->ppsch[i]);
            if (!mine) return NULL;
            return mine;
        }
    }
    if (other->addl) return intersect(c, mine, other->addl);
    return mine;
}

static struct sn *intersect(struct js *c, struct sn *a, struct sn *b)
{
    if (!a || !b) return NULL;
    if (sn_is_any(a)) return b;
    if (sn_is_any(b)) return a;
    if (sn_unsat(a)) return a;
    if (sn_unsat(b)) return b;
    if (++c->idepth > JS_MAX_INTERSECT) {
        c->idepth--;
        err_set(c->e, ERR_UNSUPPORTED,
                "schema intersection nested too deeply (recursive allOf/$ref)");
        return NULL;
    }
    struct sn *r = NULL;
    if (a->ref || b->ref) {
        struct sn *ra = resolve(c, a), *rb = ra ? resolve(c, b) : NULL;
        r = rb ? intersect(c, ra, rb) : NULL;
        goto done;
    }
    if (a->n_alts || b->n_alts) {
        int na = a->n_alts ? a->n_alts : 1, nb = b->n_alts ? b->n_alts : 1;
        if ((int64_t)na * nb > JS_MAX_ALTS) {
            err_set(c->e, ERR_INVALID,
                    "anyOf/oneOf combined with allOf gives over %d alternatives", JS_MAX_ALTS);
            goto done;
        }
        struct sn *u = sn_new(c, 0);
        if (!u || !(u->alts = js_alloc(c, (size_t)(na * nb) * sizeof *u->alts))) goto done;
        for (int i = 0; i < na; i++)
            for (int j = 0; j < nb; j++) {
                struct sn *x = intersect(c, a->n_alts ? a->alts[i] : a, b->n_alts ? b->alts[j] : b);
                if (!x) goto done;
                if (!sn_unsat(x)) u->alts[u->n_alts++] = x;
            }
        r = u->n_alts == 1 ? u->alts[0] : u;
        goto done;
    }
    r = sn_new(c, types_and(a->types, b->types));
    if (!r) goto done;
    /* enum */
    if (a->enumv && b->enumv) {
        json_t *e = js_keep(c, json_array());
        if (!e) goto fail;
        size_t i, j;
        json_t *x, *y;
        json_array_foreach(a->enumv, i, x) json_array_foreach(b->enumv, j, y) if (json_equal(x, y))
        {
            json_array_append(e, x);
            break;
        }
        r->enumv = e;
    } else
        r->enumv = a->enumv ? a->enumv : b->enumv;
    if (a->not_enum && b->not_enum) {
        json_t *e = js_keep(c, json_array());
        if (!e || json_array_extend(e, a->not_enum) || json_array_extend(e, b->not_enum)) goto fail;
        r->not_enum = e;
    } else
        r->not_enum = a->not_enum ? a->not_enum : b->not_enum;
    /* numbers */
    r->lo = a->lo;
    r->lo_excl = a->lo_excl;
    if (b->lo) {
        int cmp = r->lo ? jsrx_dec_cmp(b->lo, r->lo) : 1;
        if (cmp > 0 || (cmp == 0 && b->lo_excl)) {
            r->lo = b->lo;
            r->lo_excl = b->lo_excl || (cmp == 0 && r->lo_excl);
        }
    }
    r->hi = a->hi;
    r->hi_excl = a->hi_excl;
    if (b->hi) {
        int cmp = r->hi ? jsrx_dec_cmp(b->hi, r->hi) : -1;
        if (cmp < 0 || (cmp == 0 && b->hi_excl)) {
            r->hi = b->hi;
            r->hi_excl = b->hi_excl || (cmp == 0 && r->hi_excl);
        }
    }
    r->mult = a->mult ? a->mult : b->mult;
    if (a->mult && b->mult && jsrx_dec_cmp(a->mult, b->mult)) {
        err_set(c->e, ERR_UNSUPPORTED, "allOf: two different multipleOf values");
        goto fail;
    }
    /* strings */
    r->min_len = a->min_len > b->min_len ? a->min_len : b->min_len;
    r->max_len = a->max_len < 0            ? b->max_len
                 : b->max_len < 0          ? a->max_len
                 : a->max_len < b->max_len ? a->max_len
                                           : b->max_len;
    r->pattern = a->pattern ? a->pattern : b->pattern;
    if (a->pattern && b->pattern && strcmp(a->pattern, b->pattern)) {
        err_set(c->e, ERR_UNSUPPORTED, "allOf: two different patterns (/%.80s/ and /%.80s/)",
                a->pattern, b->pattern);
        goto fail;
    }
    r->format = a->format ? a->format : b->format;
    if (a->format && b->format && strcmp(a->format, b->format)) {
        err_set(c->e, ERR_UNSUPPORTED, "allOf: two different formats");
        goto fail;
    }
    /* arrays */
    r->min_items = a->min_items > b->min_items ? a->min_items : b->min_items;
    r->max_items = a->max_items < 0              ? b->max_items
                   : b->max_items < 0            ? a->max_items
                   : a->max_items < b->max_items ? a->max_items
                                                 : b->max_items;
    int np = a->n_prefix > b->n_prefix ? a->n_prefix : b->n_prefix;
    if (np) {
        r->prefix = js_alloc(c, (size_t)np * sizeof *r->prefix);
        if (!r->prefix) goto fail;
        for (int i = 0; i < np; i++) {
            struct sn *x = i < a->n_prefix ? a->prefix[i] : a->items;
            struct sn *y = i < b->n_prefix ? b->prefix[i] : b->items;
            struct sn *z = !x ? y : !y ? x : intersect(c, x, y);
            if (!x && !y) z = sn_new(c, JT_ALL);
            if (!z) goto fail;
            r->prefix[i] = z;
        }
        r->n_prefix = np;
    }
    if (a->contains && b->contains && a->contains != b->contains) {
        err_set(c->e, ERR_UNSUPPORTED, "allOf: two different \"contains\" are not supported");
        goto fail;
    }
    r->contains = a->contains ? a->contains : b->contains;
    if (a->items && b->items) {
        r->items = intersect(c, a->items, b->items);
        if (!r->items) goto fail;
    } else
        r->items = a->items ? a->items : b->items;
    /* objects: a's properties first, then b's new ones */
    int nprops = a->n_props + b->n_props;
    if (nprops) {
        r->pnames = js_alloc(c, (size_t)nprops * sizeof *r->pnames);
        r->plens = js_alloc(c, (size_t)nprops * sizeof *r->plens);
        r->pschemas = js_alloc(c, (size_t)nprops * sizeof *r->pschemas);
        if (c->oom) goto fail;
        for (int i = 0; i < a->n_props; i++) {
            struct sn *x = intersect_prop(c, b, a->pnames[i], a->plens[i], a->pschemas[i]);
            if (!x) goto fail;
            r->pnames[r->n_props] = a->pnames[i];
            r->plens[r->n_props] = a->plens[i];
            r->pschemas[r->n_props++] = x;
        }
        for (int i = 0; i < b->n_props; i++) {
            bool seen = false;
            for (int j = 0; j < a->n_props; j++)
                if (a->plens[j] == b->plens[i] && !memcmp(a->pnames[j], b->pnames[i], b->plens[i]))
                    seen = true;
            if (seen) continue;
            struct sn *x = intersect_prop(c, a, b->pnames[i], b->plens[i], b->pschemas[i]);
            if (!x) goto fail;
            r->pnames[r->n_props] = b->pnames[i];
            r->plens[r->n_props] = b->plens[i];
            r->pschemas[r->n_props++] = x;
        }
    }
    if (a->n_req + b->n_req) {
        r->req = js_alloc(c, (size_t)(a->n_req + b->n_req) * sizeof *r->req);
        if (!r->req) goto fail;
        for (int i = 0; i < a->n_req + b->n_req; i++) {
            const char *q = i < a->n_req ? a->req[i] : b->req[i - a->n_req];
            bool dup = false;
            for (int j = 0; j < r->n_req; j++)
                if (!strcmp(r->req[j], q)) dup = true;
            if (!dup) r->req[r->n_req++] = q;
        }
    }
    if (a->n_deps + b->n_deps) {
        int nd = a->n_deps + b->n_deps;
        r->dep_if = js_alloc(c, (size_t)nd * sizeof *r->dep_if);
        r->dep_then = js_alloc(c, (size_t)nd * sizeof *r->dep_then);
        if (!r->dep_if || !r->dep_then) goto fail;
        for (int i = 0; i < nd; i++) {
            r->dep_if[i] = i < a->n_deps ? a->dep_if[i] : b->dep_if[i - a->n_deps];
            r->dep_then[i] = i < a->n_deps ? a->dep_then[i] : b->dep_then[i - a->n_deps];
        }
        r->n_deps = nd;
    }
    if ((a->n_ppat && (b->addl || b->n_ppat)) || (b->n_ppat && a->addl)) {
        err_set(c->e, ERR_UNSUPPORTED,
                "allOf: patternProperties combined with additionalProperties/patternProperties of "
                "another subschema is not supported");
        goto fail;
    }
    if (a->n_ppat || b->n_ppat) {
        r->ppat = a->n_ppat ? a->ppat : b->ppat;
        r->ppsch = a->n_ppat ? a->ppsch : b->ppsch;
        r->n_ppat = a->n_ppat ? a->n_ppat : b->n_ppat;
    }
    if (a->addl && b->addl) {
        r->addl = intersect(c, a->addl, b->addl);
        if (!r->addl) goto fail;
    } else
        r->addl = a->addl ? a->addl : b->addl;
    r->min_props = a->min_props > b->min_props ? a->min_props : b->min_props;
    r->max_props = a->max_props < 0              ? b->max_props
                   : b->max_props < 0            ? a->max_props
                   : a->max_props < b->max_props ? a->max_props
                                                 : b->max_props;
    goto done;
fail:
    r = NULL;
done:
    c->idepth--;
    return r;
}

/* ------------------------------------------------------------------ oneOf disjointness */

static bool value_ok(struct js *c, struct sn *s, json_t *v, int depth);

static bool provably_disjoint(struct js *c, struct sn *a, struct sn *b, int depth)
{
    if (depth > 20) return false;
    a = resolve(c, a);
    b = resolve(c, b);
    if (!a || !b) return false;
    if (a->n_alts) {
        for (int i = 0; i < a->n_alts; i++)
            if (!provably_disjoint(c, a->alts[i], b, depth + 1)) return false;
        return true;
    }
    if (b->n_alts) return provably_disjoint(c, b, a, depth + 1);
    if (types_and(a->types, b->types) == 0) return true;
    if (a->enumv || b->enumv) {
        struct sn *e = a->enumv ? a : b, *o = a->enumv ? b : a;
        size_t i;
        json_t *x;
        bool all_out = true;
        json_array_foreach(e->enumv, i, x) if (value_ok(c, e, x, 0) && value_ok(c, o, x, 0))
            all_out = false;
        if (all_out) return true;
    }
    if (types_and(a->types, b->types) == JT_OBJ) {
        /* a property required by one side and forbidden or disjoint on the other */
        for (int pass = 0; pass < 2; pass++) {
            struct sn *x = pass ? b : a, *y = pass ? a : b;
            for (int i = 0; i < x->n_req; i++) {
                size_t len = strlen(x->req[i]);
                struct sn *xs = NULL, *ys = NULL;
                for (int j = 0; j < x->n_props; j++)
                    if (x->plens[j] == len && !memcmp(x->pnames[j], x->req[i], len))
                        xs = x->pschemas[j];
                for (int j = 0; j < y->n_props; j++)
                    if (y->plens[j] == len && !memcmp(y->pnames[j], x->req[i], len))
                        ys = y->pschemas[j];
                struct sn *ya = y->addl ? resolve(c, y->addl) : NULL;
                if (!ys && !y->n_ppat && ya && sn_unsat(ya)) return true;
                if (xs && ys && provably_disjoint(c, xs, ys, depth + 1)) return true;
            }
        }
    }
    return false;
}

/* ------------------------------------------------------------------ value checks (enum filter) */

static int64_t utf8_len(const char *s, size_t n)
{
    int64_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) k++;
    return k;
}

static int pattern_matches(const char *pat, const char *subj, size_t n)
{
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
    if (!re) return -1;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = md ? pcre2_match(re, (PCRE2_SPTR)subj, n, 0, 0, md, NULL) : -1;
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    if (rc >= 0) return 1;
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    return -1;
}

static bool value_ok(struct js *c, struct sn *s, json_t *v, int depth)
{
    s = resolve(c, s);
    if (!s || depth > 30) return true; /* unknown: keep */
    if (s->n_alts) {
        for (int i = 0; i < s->n_alts; i++)
            if (value_ok(c, s->alts[i], v, depth + 1)) return true;
        return false;
    }
    if (s->enumv) {
        bool found = false;
        size_t i;
        json_t *x;
        json_array_foreach(s->enumv, i, x) if (json_equal(x, v)) found = true;
        if (!found) return false;
    }
    if (s->not_enum) {
        size_t i;
        json_t *x;
        json_array_foreach(s->not_enum, i, x) if (json_equal(x, v)) return false;
    }
    switch (json_typeof(v)) {
    case JSON_NULL:
        return s->types & JT_NULL;
    case JSON_TRUE:
    case JSON_FALSE:
        return s->types & JT_BOOL;
    case JSON_INTEGER:
    case JSON_REAL: {
        bool isint = json_is_integer(v) || json_real_value(v) == floor(json_real_value(v));
        if (!(s->types & JT_NUM) && !((s->types & JT_INT) && isint)) return false;
        struct jsrx_dec d;
        struct err e2 = {0};
        struct err *save = c->e;
        c->e = &e2;
        int r = num_to_dec(c, v, &d, "enum");
        c->e = save;
        if (r) return true;
        if (s->lo) {
            int cmp = jsrx_dec_cmp(&d, s->lo);
            if (cmp < 0 || (cmp == 0 && s->lo_excl)) return false;
        }
        if (s->hi) {
            int cmp = jsrx_dec_cmp(&d, s->hi);
            if (cmp > 0 || (cmp == 0 && s->hi_excl)) return false;
        }
        return true;
    }
    case JSON_STRING: {
        if (!(s->types & JT_STR)) return false;
        int64_t n = utf8_len(json_string_value(v), json_string_length(v));
        if (n < s->min_len || (s->max_len >= 0 && n > s->max_len)) return false;
        if (s->pattern &&
            pattern_matches(s->pattern, json_string_value(v), json_string_length(v)) == 0)
            return false;
        return true;
    }
    case JSON_ARRAY: {
        if (!(s->types & JT_ARR)) return false;
        int64_t n = (int64_t)json_array_size(v);
        if (n < s->min_items || (s->max_items >= 0 && n > s->max_items)) return false;
        bool found = !s->contains;
        for (int64_t i = 0; i < n; i++) {
            struct sn *is = i < s->n_prefix ? s->prefix[i] : s->items;
            if (is && !value_ok(c, is, json_array_get(v, (size_t)i), depth + 1)) return false;
            if (!found && value_ok(c, s->contains, json_array_get(v, (size_t)i), depth + 1))
                found = true;
        }
        return found;
    }
    case JSON_OBJECT: {
        if (!(s->types & JT_OBJ)) return false;
        for (int i = 0; i < s->n_req; i++)
            if (!json_object_get(v, s->req[i])) return false;
        for (int i = 0; i < s->n_deps; i++)
            if (json_object_get(v, s->dep_if[i]) && !json_object_get(v, s->dep_then[i]))
                return false;
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x)
        {
            struct sn *ps = NULL;
            bool declared = false;
            for (int i = 0; i < s->n_props; i++)
                if (!strcmp(s->pnames[i], k)) {
                    ps = s->pschemas[i];
                    declared = true;
                }
            if (!declared) ps = s->addl;
            if (ps && !value_ok(c, ps, x, depth + 1)) return false;
        }
        return true;
    }
    }
    return true;
}

/* ------------------------------------------------------------------ emission */

static char *emit(struct js *c, struct sn *s);

/* JSON text of a value, canonical (compact; strings escaped minimally). Numbers: each real that
 * is integral is also accepted in integer form, written as alternatives by the caller. */
static void json_str_text(struct buf *b, const char *s, size_t n)
{
    buf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        switch (ch) {
        case '"':
            buf_puts(b, "\\\"");
            break;
        case '\\':
            buf_puts(b, "\\\\");
            break;
        case '\b':
            buf_puts(b, "\\b");
            break;
        case '\f':
            buf_puts(b, "\\f");
            break;
        case '\n':
            buf_puts(b, "\\n");
            break;
        case '\r':
            buf_puts(b, "\\r");
            break;
        case '\t':
            buf_puts(b, "\\t");
            break;
        default:
            if (ch < 0x20)
                buf_printf(b, "\\u%04x", ch);
            else
                buf_append(b, &s[i], 1);
        }
    }
    buf_puts(b, "\"");
}

/* lark expression for one JSON value; whitespace allowed inside arrays/objects */
static void value_expr(struct js *c, struct buf *b, json_t *v)
{
    struct buf t = {0};
    switch (json_typeof(v)) {
    case JSON_NULL:
        buf_puts(b, "\"null\"");
        break;
    case JSON_TRUE:
        buf_puts(b, "\"true\"");
        break;
    case JSON_FALSE:
        buf_puts(b, "\"false\"");
        break;
    case JSON_INTEGER:
        buf_printf(&t, "%lld", (long long)json_integer_value(v));
        lark_lit(b, t.data, t.len);
        break;
    case JSON_REAL: {
        double x = json_real_value(v);
        if (x == floor(x) && fabs(x) < 1e15) {
            buf_printf(&t, "%.0f", x);
            buf_puts(b, "(");
            lark_lit(b, t.data, t.len);
            buf_puts(b, " | ");
            buf_puts(&t, ".0");
            lark_lit(b, t.data, t.len);
            buf_puts(b, ")");
        } else {
            char tmp[64];
            for (int p = 1; p <= 17; p++) {
                snprintf(tmp, sizeof tmp, "%.*g", p, x);
                if (strtod(tmp, NULL) == x) break;
            }
            lark_lit(b, tmp, strlen(tmp));
        }
        break;
    }
    case JSON_STRING:
        json_str_text(&t, json_string_value(v), json_string_length(v));
        lark_lit(b, t.data, t.len);
        break;
    case JSON_ARRAY: {
        const char *w = r_wso(c), *cm = r_comma(c);
        if (json_array_size(v) == 0) {
            buf_printf(b, "\"[\" %s \"]\"", w);
            break;
        }
        buf_printf(b, "\"[\" %s ", w);
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            if (i) buf_printf(b, " %s ", cm);
            value_expr(c, b, x);
        }
        buf_printf(b, " %s \"]\"", w);
        break;
    }
    case JSON_OBJECT: {
        const char *w = r_wso(c), *cm = r_comma(c), *cl = r_colon(c);
        if (json_object_size(v) == 0) {
            buf_printf(b, "\"{\" %s \"}\"", w);
            break;
        }
        buf_printf(b, "\"{\" %s ", w);
        int i = 0;
        void *it = json_object_iter(v);
        while (it) {
            if (i++) buf_printf(b, " %s ", cm);
            buf_reset(&t);
            json_str_text(&t, json_object_iter_key(it), json_object_iter_key_len(it));
            lark_lit(b, t.data, t.len);
            buf_printf(b, " %s ", cl);
            value_expr(c, b, json_object_iter_value(it));
            it = json_object_iter_next(v, it);
        }
        buf_printf(b, " %s \"}\"", w);
        break;
    }
    }
    buf_free(&t);
}

static char *emit_enum(struct js *c, struct sn *s)
{
    struct buf b = {0};
    int n = 0;
    size_t i;
    json_t *x;
    json_array_foreach(s->enumv, i, x)
    {
        struct sn tmp = *s;
        tmp.enumv = NULL;
        if (!value_ok(c, &tmp, x, 0)) continue;
        if (n++) buf_puts(&b, " | ");
        value_expr(c, &b, x);
    }
    if (!n) {
        buf_free(&b);
        return NULL;
    }
    return mk_rule_buf(c, &b);
}

/* 1 if mult = 10^-k (k >= 0), setting *k */
static bool mult_pow10(const struct jsrx_dec *m, int *k)
{
    if (!strcmp(m->ip, "1") && !m->fp[0]) {
        *k = 0;
        return true;
    }
    if (strcmp(m->ip, "0")) return false;
    size_t n = strlen(m->fp);
    for (size_t i = 0; i + 1 < n; i++)
        if (m->fp[i] != '0') return false;
    if (n == 0 || m->fp[n - 1] != '1') return false;
    *k = (int)n;
    return true;
}

static int dec_to_ll(const struct jsrx_dec *d, long long *out)
{
    if (strlen(d->ip) > 17) return -1;
    long long v = atoll(d->ip);
    *out = d->neg ? -v : v;
    return 0;
}

/* number / integer alternative; NULL + no error when the range is empty */
/* Both bounds and a multipleOf that is not a power of ten: enumerate the multiples (exact decimal
 * arithmetic on m scaled to an integer). Each value is written in every JSON spelling of it:
 * trailing fraction zeros, and `.0…` for integral values of type number. 1 = not applicable. */
static int enum_multiples(struct js *c, struct sn *s, bool integer, struct buf *rx)
{
    const struct jsrx_dec *m = s->mult;
    size_t f = strlen(m->fp);
    char md[820];
    if (strlen(m->ip) + f > 17 || !s->lo || !s->hi) return 1;
    snprintf(md, sizeof md, "%s%s", m->ip, m->fp);
    long long M = atoll(md);
    char ls[820], hs[820];
    snprintf(ls, sizeof ls, "%s%s.%s", s->lo->neg ? "-" : "", s->lo->ip, s->lo->fp);
    snprintf(hs, sizeof hs, "%s%s.%s", s->hi->neg ? "-" : "", s->hi->ip, s->hi->fp);
    double lo = strtod(ls, NULL), hi = strtod(hs, NULL), md_ = (double)M / pow(10, (double)f);
    if (!(M > 0) || !isfinite(lo) || !isfinite(hi) || (hi - lo) / md_ > JS_MAX_ENUM_MULTIPLES)
        return 1;
    long long k0 = (long long)floor(lo / md_) - 1, k1 = (long long)ceil(hi / md_) + 1;
    if (llabs(k0) > (1LL << 52) / (M ? M : 1) || llabs(k1) > (1LL << 52) / (M ? M : 1)) return 1;
    int cnt = 0;
    for (long long k = k0; k <= k1; k++) {
        long long v = k * M, av = v < 0 ? -v : v;
        char ip[32], fp[32], t[80];
        long long p10 = 1;
        for (size_t i = 0; i < f; i++)
            p10 *= 10;
        snprintf(ip, sizeof ip, "%lld", av / p10);
        snprintf(fp, sizeof fp, "%0*lld", (int)f, f ? av % p10 : 0);
        size_t fl = f ? strlen(fp) : 0;
        while (fl && fp[fl - 1] == '0')
            fl--;
        fp[fl] = 0;
        snprintf(t, sizeof t, "%s%s%s%s", v < 0 ? "-" : "", ip, fl ? "." : "", fp);
        struct jsrx_dec d;
        if (jsrx_dec_parse(t, &d)) return 1;
        int c1 = jsrx_dec_cmp(&d, s->lo), c2 = jsrx_dec_cmp(&d, s->hi);
        if (c1 < 0 || (c1 == 0 && s->lo_excl) || c2 > 0 || (c2 == 0 && s->hi_excl)) continue;
        if (integer && fl) continue;
        if (++cnt > JS_MAX_ENUM_MULTIPLES) return 1;
        buf_puts(rx, cnt > 1 ? "|" : "(?:");
        if (v == 0)
            buf_puts(rx, "-?");
        else if (v < 0)
            buf_puts(rx, "-");
        buf_puts(rx, ip);
        if (fl)
            buf_printf(rx, "\\.%s0*", fp);
        else if (!integer)
            buf_puts(rx, "(?:\\.0+)?");
    }
    if (!cnt) return 2;
    buf_puts(rx, ")");
    (void)c;
    return 0;
}

static char *emit_number(struct js *c, struct sn *s, bool integer)
{
    struct buf rx = {0};
    int max_frac = -1;
    int pk;
    if (s->mult && !mult_pow10(s->mult, &pk) && s->lo && s->hi) {
        int r = enum_multiples(c, s, integer, &rx);
        if (r == 2) {
            buf_free(&rx);
            return NULL; /* no multiple in range */
        }
        if (r == 0) {
            char *name = mk_regex_rule(c, rx.data);
            buf_free(&rx);
            return name;
        }
        buf_reset(&rx);
    }
    if (s->mult) {
        int k;
        if (mult_pow10(s->mult, &k)) {
            if (k == 0)
                integer = true;
            else
                max_frac = k;
        } else if (!s->mult->fp[0] || integer) {
            /* integer multiples: integer k, or a fraction k with integer type */
            long long m, lo, hi;
            if (s->mult->fp[0]) {
                err_set(c->e, ERR_UNSUPPORTED,
                        "multipleOf %s.%s with type integer is not supported", s->mult->ip,
                        s->mult->fp);
                return NULL;
            }
            if (dec_to_ll(s->mult, &m) || m <= 0) {
                err_set(c->e, ERR_UNSUPPORTED, "multipleOf %s is too large", s->mult->ip);
                return NULL;
            }
            if (s->lo && s->hi && !dec_to_ll(s->lo, &lo) && !dec_to_ll(s->hi, &hi)) {
                /* bounded: enumerate the multiples */
                struct jsrx_dec d;
                long long first = (lo / m) * m - m;
                int cnt = 0;
                struct buf alts = {0};
                for (long long v = first; v <= hi; v += m) {
                    char t[32];
                    snprintf(t, sizeof t, "%lld", v);
                    jsrx_dec_parse(t, &d);
                    int c1 = jsrx_dec_cmp(&d, s->lo), c2 = jsrx_dec_cmp(&d, s->hi);
                    if (c1 < 0 || (c1 == 0 && s->lo_excl)) continue;
                    if (c2 > 0 || (c2 == 0 && s->hi_excl)) break;
                    if (++cnt > JS_MAX_ENUM_MULTIPLES) break;
                    buf_printf(&alts, "%s%s", cnt > 1 ? "|" : "", t);
                    if (v == 0) buf_puts(&alts, "|-0");
                }
                if (cnt > JS_MAX_ENUM_MULTIPLES) {
                    buf_free(&alts);
                    err_set(c->e, ERR_UNSUPPORTED,
                            "multipleOf %lld over a range with more than %d multiples is not "
                            "supported",
                            m, JS_MAX_ENUM_MULTIPLES);
                    return NULL;
                }
                if (!cnt) {
                    buf_free(&alts);
                    return NULL;
                }
                buf_printf(&rx, "(?:%s)", alts.data);
                buf_free(&alts);
                char *r = mk_regex_rule(c, rx.data);
                buf_free(&rx);
                return r;
            }
            if (s->lo || s->hi) {
                err_set(c->e, ERR_UNSUPPORTED,
                        "multipleOf %lld with a one-sided bound is not supported", m);
                return NULL;
            }
            /* unbounded: m must divide 10^d (d <= 3); the last d digits decide */
            int d = 0;
            long long p = 1;
            while (d <= 3 && p % m) {
                p *= 10;
                d++;
            }
            if (p % m) {
                err_set(
                    c->e, ERR_UNSUPPORTED,
                    "multipleOf %lld is supported only with both bounds or when it divides 1000",
                    m);
                return NULL;
            }
            struct buf small = {0}, suf = {0};
            int ns = 0, nf = 0;
            for (long long v = 0; v < p; v += m) {
                buf_printf(&small, "%s%lld", ns++ ? "|" : "", v);
                buf_printf(&suf, "%s%0*lld", nf++ ? "|" : "", d, v);
            }
            if (m == 1)
                buf_puts(&rx, "-?(?:0|[1-9][0-9]*)");
            else
                buf_printf(&rx, "-?(?:%s|[1-9][0-9]*(?:%s))", small.data, suf.data);
            buf_free(&small);
            buf_free(&suf);
            char *r = mk_regex_rule(c, rx.data);
            buf_free(&rx);
            return r;
        } else {
            err_set(c->e, ERR_UNSUPPORTED,
                    "multipleOf %s%s%s is supported only for integers and powers of ten",
                    s->mult->ip, s->mult->fp[0] ? "." : "", s->mult->fp);
            return NULL;
        }
    }
    if (jsrx_number(s->lo, s->lo_excl, s->hi, s->hi_excl, integer, max_frac, &rx) == 1) {
        buf_free(&rx);
        return NULL;
    }
    char *r = mk_regex_rule(c, rx.data);
    buf_free(&rx);
    return r;
}

static bool not_has(const struct sn *s, json_t *v)
{
    size_t i;
    json_t *x;
    if (s->not_enum) json_array_foreach(s->not_enum, i, x) if (json_equal(x, v)) return true;
    return false;
}

static char *emit_string(struct js *c, struct sn *s)
{
    int nstr = 0;
    if (s->not_enum) {
        size_t i;
        json_t *x;
        json_array_foreach(s->not_enum, i, x) if (json_is_string(x)) nstr++;
    }
    if (nstr) { /* strings other than the excluded ones */
        if (s->pattern || s->format || s->min_len > 0 || s->max_len >= 0) {
            err_set(c->e, ERR_UNSUPPORTED,
                    "unsupported keyword \"not\" (excluded strings together with "
                    "pattern/format/length)");
            return NULL;
        }
        const char **names = js_alloc(c, (size_t)nstr * sizeof *names);
        size_t *lens = js_alloc(c, (size_t)nstr * sizeof *lens);
        if (c->oom) return NULL;
        int k = 0;
        size_t i;
        json_t *x;
        json_array_foreach(s->not_enum, i, x) if (json_is_string(x))
        {
            names[k] = json_string_value(x);
            lens[k++] = json_string_length(x);
        }
        struct buf rx = {0};
        if (jsrx_key_not_in(names, lens, nstr, &rx, c->e)) {
            buf_free(&rx);
            return NULL;
        }
        char *r = mk_regex_rule(c, rx.data);
        buf_free(&rx);
        return r;
    }
    if (s->max_len >= 0 && s->min_len > s->max_len) return NULL;
    struct buf rx = {0};
    bool len = s->min_len > 0 || s->max_len >= 0;
    if (s->format && len && !s->pattern) {
        /* formats of bounded length: drop length bounds they already imply */
        static const struct {
            const char *f;
            int64_t mn, mx;
        } fl[] = {{"date", 10, 10}, {"uuid", 36, 36}, {"ipv4", 7, 15},
                  {"ipv6", 2, 45},  {"time", 9, -1},  {"date-time", 20, -1}};
        for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++)
            if (!strcmp(fl[i].f, s->format) && fl[i].mn >= s->min_len &&
                (s->max_len < 0 || (fl[i].mx >= 0 && fl[i].mx <= s->max_len)))
                len = false;
    }
    if (s->format) {
        if (s->pattern) {
            err_set(c->e, ERR_UNSUPPORTED,
                    "format \"%.50s\" combined with pattern is not supported", s->format);
            return NULL;
        }
        buf_puts(&rx, "\"");
        if (len) { /* the format's regex intersected with the length bounds */
            struct buf body = {0};
            if (jsrx_format_ticked(s->format, &body, c->e)) {
                buf_free(&body);
                buf_free(&rx);
                return NULL;
            }
            jsrx_len_region(&rx, s->min_len, s->max_len, body.data);
            buf_free(&body);
        } else if (jsrx_format(s->format, &rx, c->e)) {
            buf_free(&rx);
            return NULL;
        }
        buf_puts(&rx, "\"");
    } else if (s->pattern) {
        struct jsrx_single one = {0};
        struct buf body = {0};
        if (jsrx_pattern(s->pattern, strlen(s->pattern), &body, len ? &one : NULL, c->e)) {
            buf_free(&body);
            buf_free(&one.set);
            buf_free(&one.notset);
            buf_free(&rx);
            return NULL;
        }
        if (len && !one.ok && one.anchored && one.mn >= s->min_len &&
            (s->max_len < 0 || (one.mx >= 0 && one.mx <= s->max_len)))
            len = false; /* the pattern already implies the length bounds */
        if (len && !one.ok && !one.anchored && one.mn == one.mx && one.mx == s->max_len &&
            one.mn >= s->min_len && !strpbrk(s->pattern, "^$")) {
            /* a match is as long as the whole string may be: the string IS the match */
            struct buf anch = {0};
            buf_printf(&anch, "^(?:%s)$", s->pattern);
            buf_reset(&body);
            int r = jsrx_pattern(anch.data, anch.len, &body, NULL, c->e);
            buf_free(&anch);
            if (r) {
                buf_free(&body);
                buf_free(&one.set);
                buf_free(&one.notset);
                buf_free(&rx);
                return NULL;
            }
            len = false;
        }
        if (len) {
            if (!one.ok) { /* the pattern intersected with the length bounds */
                buf_free(&body);
                buf_free(&one.set);
                buf_free(&one.notset);
                buf_puts(&rx, "\"");
                if (jsrx_pattern_len(s->pattern, strlen(s->pattern), s->min_len, s->max_len, &rx,
                                     c->e)) {
                    buf_free(&rx);
                    return NULL;
                }
                buf_puts(&rx, "\"");
                char *r = mk_regex_rule(c, rx.data);
                buf_free(&rx);
                return r;
            }
            int64_t lo = one.lo > s->min_len ? one.lo : s->min_len;
            int64_t hi = one.hi;
            if (s->max_len >= 0 && (hi < 0 || s->max_len < hi)) hi = s->max_len;
            if (hi >= 0 && lo > hi) {
                buf_free(&body);
                buf_free(&one.set);
                buf_free(&one.notset);
                return NULL;
            }
            if (hi < 0)
                buf_printf(&rx, "\"%s{%lld,}\"", one.set.data, (long long)lo);
            else
                buf_printf(&rx, "\"%s{%lld,%lld}\"", one.set.data, (long long)lo, (long long)hi);
        } else
            buf_printf(&rx, "\"%s\"", body.data);
        buf_free(&body);
        buf_free(&one.set);
        buf_free(&one.notset);
    } else if (len) {
        if (s->max_len < 0)
            buf_printf(&rx, "\"" JSRX_CHAR "{%lld,}\"", (long long)s->min_len);
        else
            buf_printf(&rx, "\"" JSRX_CHAR "{%lld,%lld}\"", (long long)s->min_len,
                       (long long)s->max_len);
    } else {
        buf_free(&rx);
        return (char *)r_str(c);
    }
    char *r = mk_regex_rule(c, rx.data);
    buf_free(&rx);
    return r;
}

/* "contains": at least one element matches; other elements match items */
static char *emit_contains(struct js *c, struct sn *s)
{
    if (s->n_prefix || s->max_items >= 0 || s->min_items > 1) {
        err_set(c->e, ERR_UNSUPPORTED,
                "\"contains\" together with prefixItems/maxItems/minItems > 1 is not supported");
        return NULL;
    }
    struct sn *y = intersect(c, s->items ? s->items : sn_new(c, JT_ALL), s->contains);
    if (!y) return NULL;
    const char *ye = emit(c, y);
    if (!ye) return NULL; /* nothing can be contained: unsatisfiable (or error set) */
    const char *xe = s->items ? emit(c, s->items) : r_value(c);
    if (!xe && c->e->msg[0]) return NULL;
    const char *w = r_wso(c), *cm = r_comma(c);
    struct buf b = {0};
    if (xe)
        buf_printf(&b, "\"[\" %s (%s %s)* %s (%s %s)* %s \"]\"", w, xe, cm, ye, cm, xe, w);
    else
        buf_printf(&b, "\"[\" %s %s %s \"]\"", w, ye, w);
    return mk_rule_buf(c, &b);
}

static char *emit_array(struct js *c, struct sn *s)
{
    if (s->contains) return emit_contains(c, s);
    int64_t mn = s->min_items, mx = s->max_items;
    int k = s->n_prefix;
    const char *pe[k + 1];
    for (int i = 0; i < k; i++) {
        pe[i] = emit(c, s->prefix[i]);
        if (!pe[i]) {
            if (c->e->msg[0]) return NULL;
            /* unsatisfiable position: the array must end before it */
            if (mx < 0 || mx > i) mx = i;
            k = i;
            break;
        }
    }
    const char *ie = NULL;
    if (!s->items)
        ie = r_value(c);
    else {
        ie = emit(c, s->items);
        if (!ie && c->e->msg[0]) return NULL;
    }
    if (!ie && (mx < 0 || mx > k)) mx = k;
    if (mx >= 0 && mn > mx) return NULL;
    const char *w = r_wso(c), *cm = r_comma(c);
    struct buf b = {0};
    /* tail from index i (each element preceded by a comma) */
    struct buf tail = {0};
    /* build from the end: elements >= k */
    if (ie && (mx < 0 || mx > k)) {
        int64_t lo = mn > k ? mn - k : 0; /* elements after the prefix */
        int64_t hi = mx < 0 ? -1 : mx - k;
        /* when k == 0 the first of them has no leading comma: handled below */
        if (k > 0) {
            if (hi < 0 && lo == 0)
                buf_printf(&tail, "(%s %s)*", cm, ie);
            else if (hi < 0 && lo == 1)
                buf_printf(&tail, "(%s %s)+", cm, ie);
            else if (hi < 0)
                buf_printf(&tail, "(%s %s){%lld,}", cm, ie, (long long)lo);
            else
                buf_printf(&tail, "(%s %s){%lld,%lld}", cm, ie, (long long)lo, (long long)hi);
        }
    }
    for (int i = k - 1; i >= 1; i--) {
        struct buf t = {0};
        if (i < mn)
            buf_printf(&t, "%s %s %s", cm, pe[i], tail.data ? tail.data : "");
        else
            buf_printf(&t, "(%s %s %s)?", cm, pe[i], tail.data ? tail.data : "");
        buf_free(&tail);
        tail = t;
    }
    /* first element */
    struct buf first = {0};
    bool empty_ok = mn == 0;
    if (k > 0)
        buf_printf(&first, "%s %s", pe[0], tail.data ? tail.data : "");
    else if (ie && (mx < 0 || mx > 0)) {
        int64_t lo = mn > 1 ? mn - 1 : 0, hi = mx < 0 ? -1 : mx - 1;
        if (hi < 0 && lo == 0)
            buf_printf(&first, "%s (%s %s)*", ie, cm, ie);
        else if (hi == 0)
            buf_printf(&first, "%s", ie);
        else if (hi < 0)
            buf_printf(&first, "%s (%s %s){%lld,}", ie, cm, ie, (long long)lo);
        else
            buf_printf(&first, "%s (%s %s){%lld,%lld}", ie, cm, ie, (long long)lo, (long long)hi);
    }
    buf_free(&tail);
    if (!first.len && !empty_ok) {
        buf_free(&first);
        return NULL;
    }
    if (empty_ok) buf_printf(&b, "\"[\" %s \"]\"", w);
    if (first.len)
        buf_printf(&b, "%s\"[\" %s %s %s \"]\"", empty_ok ? " | " : "", w, first.data, w);
    buf_free(&first);
    return mk_rule_buf(c, &b);
}

static bool universal_pattern(const char *p)
{
    static const char *const u[] = {"",     ".*",     "^.*$",  "^.*", ".*$",
                                    "(.*)", "^(.*)$", "^(.*)", NULL};
    return in_list(u, p);
}

/* Declared members in any order, each at most once, the required ones enforced, extras (x, keys
 * other than the declared ones) anywhere between them. One rule per set S of members still
 * available (so at most 2^JS_ANYORDER_MAX sets):
 *     R(S) = (, x)* T(S)        the rest of the object, each member after a comma
 *     T(S) = , v_i R(S - i) | … (i in S)  | ε when S holds no required member
 *     F    = v_i R(all - i) | … | x R(all)  a non-empty member list
 * Keys are distinct literals, so the parse stays deterministic in S: one Earley item per set. */
/* Dependencies between members (dependentRequired): member dep[2k] present => dep[2k+1]. */
struct deps {
    const int *pair;
    int n;
};

static const char *any_order_rest(struct js *c, int n, const char *const *vals, const bool *reqd,
                                  const char *x, uint32_t S, char **memo, const struct deps *dp)
{
    if (memo[S]) return memo[S];
    const char *cm = r_comma(c);
    struct buf b = {0};
    bool need = false;
    int alts = 0;
    struct buf t = {0};
    for (int i = 0; i < n; i++) {
        if (!(S >> i & 1)) continue;
        if (reqd[i]) need = true;
        const char *rest = any_order_rest(c, n, vals, reqd, x, S & ~(1u << i), memo, dp);
        if (c->oom) {
            buf_free(&t);
            return NULL;
        }
        buf_printf(&t, "%s%s %s%s%s", alts++ ? " | " : "", cm, vals[i], rest[0] ? " " : "", rest);
    }
    /* the object may end here only if every present member's dependents are present too */
    for (int k = 0; k < dp->n; k++)
        if (!(S >> dp->pair[2 * k] & 1) && (S >> dp->pair[2 * k + 1] & 1)) need = true;
    if (x) buf_printf(&b, "(%s %s)* ", cm, x);
    if (alts) buf_printf(&b, need ? "(%s)" : "(%s)?", t.data);
    buf_free(&t);
    /* an empty body (no set left, no extras) is the empty string: callers skip it */
    if (!b.len) {
        memo[S] = "";
        return memo[S];
    }
    memo[S] = mk_rule_buf(c, &b);
    return memo[S] ? memo[S] : "";
}

static char *emit_object_any_order(struct js *c, int n, const char *const *vals, const bool *reqd,
                                   const char *x, bool nonempty, const struct deps *dp)
{
    char **memo = js_alloc(c, ((size_t)1 << n) * sizeof *memo);
    if (!memo) return NULL;
    memset(memo, 0, ((size_t)1 << n) * sizeof *memo);
    uint32_t all = (1u << n) - 1;
    struct buf f = {0};
    bool any_req = false;
    for (int i = 0; i < n; i++) {
        if (reqd[i]) any_req = true;
        const char *rest = any_order_rest(c, n, vals, reqd, x, all & ~(1u << i), memo, dp);
        if (c->oom) {
            buf_free(&f);
            return NULL;
        }
        buf_printf(&f, "%s%s%s%s", i ? " | " : "", vals[i], rest[0] ? " " : "", rest);
    }
    if (x) {
        const char *rest = any_order_rest(c, n, vals, reqd, x, all, memo, dp);
        if (c->oom) {
            buf_free(&f);
            return NULL;
        }
        buf_printf(&f, "%s%s%s%s", n ? " | " : "", x, rest[0] ? " " : "", rest);
    }
    const char *first = mk_rule_buf(c, &f);
    if (!first) return NULL;
    const char *w = r_wso(c);
    struct buf ob = {0};
    if (!any_req && !nonempty) buf_printf(&ob, "\"{\" %s \"}\" | ", w);
    buf_printf(&ob, "\"{\" %s %s %s \"}\"", w, first, w);
    return mk_rule_buf(c, &ob);
}

static char *emit_object(struct js *c, struct sn *s)
{
    int nd = s->n_props;
    /* entries: declared properties then required-but-undeclared ones */
    int cap = nd + s->n_req + 1;
    const char **names = js_alloc(c, (size_t)cap * sizeof *names);
    size_t *lens = js_alloc(c, (size_t)cap * sizeof *lens);
    const char **vals = js_alloc(c, (size_t)cap * sizeof *vals);
    bool *reqd = js_alloc(c, (size_t)cap * sizeof *reqd);
    if (c->oom) return NULL;
    int n = 0, n_req = 0;
    const char **all_names = js_alloc(c, (size_t)cap * sizeof *all_names);
    size_t *all_lens = js_alloc(c, (size_t)cap * sizeof *all_lens);
    int n_all = 0;
    if (c->oom) return NULL;
    for (int i = 0; i < nd + s->n_req; i++) {
        const char *nm;
        size_t ln;
        struct sn *sc;
        if (i < nd) {
            nm = s->pnames[i];
            ln = s->plens[i];
            sc = s->pschemas[i];
        } else {
            nm = s->req[i - nd];
            ln = strlen(nm);
            bool seen = false;
            for (int j = 0; j < nd; j++)
                if (s->plens[j] == ln && !memcmp(s->pnames[j], nm, ln)) seen = true;
            if (seen) continue;
            sc = NULL;
            for (int j = 0; j < s->n_ppat && !sc; j++) {
                int m = pattern_matches(s->ppat[j], nm, ln);
                if (m < 0) {
                    err_set(c->e, ERR_INVALID, "patternProperties: bad pattern /%.100s/",
                            s->ppat[j]);
                    return NULL;
                }
                if (m) sc = s->ppsch[j];
            }
            if (!sc) sc = s->addl;
        }
        bool rq = false;
        for (int j = 0; j < s->n_req; j++)
            if (strlen(s->req[j]) == ln && !memcmp(s->req[j], nm, ln)) rq = true;
        all_names[n_all] = nm;
        all_lens[n_all++] = ln;
        const char *ve = sc ? emit(c, sc) : r_value(c);
        if (!ve) {
            if (c->e->msg[0]) return NULL;
            if (rq) return NULL; /* required property cannot have any value */
            continue;
        }
        struct buf t = {0}, kv = {0};
        json_str_text(&t, nm, ln);
        lark_lit(&kv, t.data, t.len);
        buf_printf(&kv, " %s %s", r_colon(c), ve);
        buf_free(&t);
        names[n] = nm;
        lens[n] = ln;
        vals[n] = mk_rule_buf(c, &kv);
        reqd[n] = rq;
        if (rq) n_req++;
        n++;
    }
    /* extra members */
    struct buf xb = {0};
    const char *cl = r_colon(c);
    bool ppat_any = s->n_ppat > 0 && !s->addl;
    for (int j = 0; j < s->n_ppat; j++) {
        struct sn *r = resolve(c, s->ppsch[j]);
        if (!r) return NULL;
        if (!sn_is_any(r)) ppat_any = false;
    }
    /* one pattern and no declared names: other keys are the pattern's complement (when we can
     * write it) and take additionalProperties */
    struct sn *addl_r = s->addl ? resolve(c, s->addl) : NULL;
    if (s->addl && !addl_r) return NULL;
    bool addl_false = addl_r && sn_unsat(addl_r);
    struct buf compl = {0};
    const char *compl_rule = NULL;
    if (s->n_ppat == 1 && !ppat_any && n_all == 0 && !addl_false &&
        !universal_pattern(s->ppat[0])) {
        struct err save = *c->e;
        buf_puts(&compl, "\"");
        if (jsrx_pattern_complement(s->ppat[0], strlen(s->ppat[0]), &compl, c->e)) {
            *c->e = save; /* not expressible: the errors below explain */
        } else {
            buf_puts(&compl, "\"");
            compl_rule = mk_regex_rule(c, compl .data);
        }
        buf_free(&compl );
    }
    if (s->n_ppat && !ppat_any) { /* (pattern keys with any value and no additionalProperties:
                                   * every extra key takes any value) */
        if (compl_rule) {
            /* handled: complement keys below */
        } else if (s->addl && !addl_false) {
            bool all_univ = true;
            for (int j = 0; j < s->n_ppat; j++)
                if (!universal_pattern(s->ppat[j])) all_univ = false;
            if (!all_univ) {
                err_set(c->e, ERR_UNSUPPORTED,
                        "patternProperties together with additionalProperties (other than false) "
                        "is supported only for patterns matching every key");
                buf_free(&xb);
                return NULL;
            }
        }
        if (!s->addl && !compl_rule) {
            bool all_univ = true;
            for (int j = 0; j < s->n_ppat; j++)
                if (!universal_pattern(s->ppat[j])) all_univ = false;
            if (!all_univ) {
                err_set(
                    c->e, ERR_UNSUPPORTED,
                    "patternProperties without \"additionalProperties\": false is supported only "
                    "for patterns matching every key");
                buf_free(&xb);
                return NULL;
            }
        }
        if (s->n_ppat > 1) {
            err_set(c->e, ERR_UNSUPPORTED,
                    "more than one patternProperties pattern is not supported (they must be "
                    "provably disjoint)");
            buf_free(&xb);
            return NULL;
        }
        const char *pv = emit(c, s->ppsch[0]);
        if (!pv && c->e->msg[0]) return NULL;
        if (pv) {
            struct buf key = {0};
            if (universal_pattern(s->ppat[0])) {
                if (jsrx_key_not_in(all_names, all_lens, n_all, &key, c->e)) return NULL;
            } else {
                for (int j = 0; j < n_all; j++) {
                    int m = pattern_matches(s->ppat[0], all_names[j], all_lens[j]);
                    if (m != 0) {
                        err_set(c->e, ERR_UNSUPPORTED,
                                "patternProperties /%.80s/ also matches declared property "
                                "\"%.80s\": not supported",
                                s->ppat[0], all_names[j]);
                        buf_free(&key);
                        return NULL;
                    }
                }
                buf_puts(&key, "\"");
                if (jsrx_pattern(s->ppat[0], strlen(s->ppat[0]), &key, NULL, c->e)) {
                    buf_free(&key);
                    return NULL;
                }
                buf_puts(&key, "\"");
            }
            const char *kr = mk_regex_rule(c, key.data);
            buf_free(&key);
            buf_printf(&xb, "%s %s %s", kr, cl, pv);
        }
        if (compl_rule) {
            const char *av = s->addl ? emit(c, s->addl) : r_value(c);
            if (!av && c->e->msg[0]) {
                buf_free(&xb);
                return NULL;
            }
            if (av) buf_printf(&xb, "%s%s %s %s", xb.len ? " | " : "", compl_rule, cl, av);
        }
    } else {
        const char *av = s->addl ? emit(c, s->addl) : r_value(c);
        if (!av && c->e->msg[0]) return NULL;
        if (av) {
            struct buf key = {0};
            if (jsrx_key_not_in(all_names, all_lens, n_all, &key, c->e)) return NULL;
            const char *kr = mk_regex_rule(c, key.data);
            buf_free(&key);
            buf_printf(&xb, "%s %s %s", kr, cl, av);
        }
    }
    const char *x = xb.len ? mk_rule_buf(c, &xb) : (buf_free(&xb), NULL);
    if (c->oom) return NULL;
    /* property count bounds */
    int64_t xlo = 0, xhi = x ? -1 : 0;
    int64_t minp = s->min_props, maxp = s->max_props;
    bool nonempty = false;
    if (minp > 0 || maxp >= 0) {
        if (n == n_req) {
            if (maxp >= 0 && maxp < n_req) return NULL;
            xlo = minp > n_req ? minp - n_req : 0;
            if (maxp >= 0) xhi = x ? maxp - n_req : 0;
            if (!x && xlo > 0) return NULL;
        } else if (maxp < 0 && minp <= (n_req > 0 ? n_req : 0)) {
            /* already satisfied by the required properties */
        } else if (maxp < 0 && minp == 1) {
            nonempty = true;
        } else {
            err_set(c->e, ERR_UNSUPPORTED,
                    "minProperties/maxProperties are supported only when every property in "
                    "\"properties\" is required (or for minProperties: 1)");
            return NULL;
        }
    }
    const char *cm = r_comma(c), *w = r_wso(c);
    /* dependentRequired: both names must be members (an extra key cannot be demanded) */
    int *pair = s->n_deps ? js_alloc(c, (size_t)s->n_deps * 2 * sizeof *pair) : NULL;
    struct deps dp = {pair, 0};
    for (int k = 0; k < s->n_deps; k++) {
        int ia = -1, ib = -1;
        for (int i = 0; i < n; i++) {
            if (lens[i] == strlen(s->dep_if[k]) && !memcmp(names[i], s->dep_if[k], lens[i])) ia = i;
            if (lens[i] == strlen(s->dep_then[k]) && !memcmp(names[i], s->dep_then[k], lens[i]))
                ib = i;
        }
        if (ia >= 0 && ia == ib) continue;
        if (ia < 0 || ib < 0 || n > JS_ANYORDER_MAX || xlo != 0 || xhi > 0) {
            err_set(c->e, ERR_UNSUPPORTED,
                    "dependentRequired/dependencies \"%.60s\" -> \"%.60s\": supported when both are "
                    "declared properties of an object with at most %d of them and no "
                    "minProperties/maxProperties on extra members",
                    s->dep_if[k], s->dep_then[k], JS_ANYORDER_MAX);
            return NULL;
        }
        pair[2 * dp.n] = ia;
        pair[2 * dp.n + 1] = ib;
        dp.n++;
    }
    if ((n >= 2 || dp.n) && xlo == 0 && xhi <= 0) { /* extras unbounded or none */
        if (n <= JS_ANYORDER_MAX)
            return emit_object_any_order(c, n, vals, reqd, xhi == 0 ? NULL : x, nonempty, &dp);
        if (n_req <= JS_ANYORDER_REQ_MAX && !dp.n) {
            /* many members: sets of the required ones only; the optional members join the
             * extras (any order, not checked for repetition: see docs "Property order") */
            const char **rv = js_alloc(c, (size_t)(n_req ? n_req : 1) * sizeof *rv);
            bool *rq = js_alloc(c, (size_t)(n_req ? n_req : 1) * sizeof *rq);
            if (c->oom) return NULL;
            struct buf fx = {0};
            int k = 0;
            for (int i = 0; i < n; i++) {
                if (reqd[i]) {
                    rv[k] = vals[i];
                    rq[k++] = true;
                } else
                    buf_printf(&fx, "%s%s", fx.len ? " | " : "", vals[i]);
            }
            if (x && xhi != 0) buf_printf(&fx, "%s%s", fx.len ? " | " : "", x);
            const char *free_m = fx.len ? mk_rule_buf(c, &fx) : (buf_free(&fx), NULL);
            if (c->oom) return NULL;
            return emit_object_any_order(c, n_req, rv, rq, free_m, nonempty, &dp);
        }
        log_warn("jsonschema: an object with %d properties, %d of them required (more than %d), "
                 "keeps their declared order (docs/jsonschema.md \"Property order\")",
                 n, n_req, JS_ANYORDER_REQ_MAX);
    }
    /* rest_i: members i.. each preceded by a comma; first_i: a non-empty run starting at i */
    char *rest_next = NULL; /* rule name or NULL when empty */
    struct buf xt = {0};
    if (x && xhi != 0) {
        if (xhi < 0 && xlo == 0)
            buf_printf(&xt, "(%s %s)*", cm, x);
        else if (xhi < 0)
            buf_printf(&xt, "(%s %s){%lld,}", cm, x, (long long)xlo);
        else
            buf_printf(&xt, "(%s %s){%lld,%lld}", cm, x, (long long)xlo, (long long)xhi);
        rest_next = mk_rule_buf(c, &xt);
    }
    char *first_next = NULL;
    if (x && xhi != 0) {
        struct buf t = {0};
        int64_t lo = xlo > 1 ? xlo - 1 : 0, hi = xhi < 0 ? -1 : xhi - 1;
        if (hi == 0)
            buf_printf(&t, "%s", x);
        else if (hi < 0 && lo == 0)
            buf_printf(&t, "%s (%s %s)*", x, cm, x);
        else if (hi < 0)
            buf_printf(&t, "%s (%s %s){%lld,}", x, cm, x, (long long)lo);
        else
            buf_printf(&t, "%s (%s %s){%lld,%lld}", x, cm, x, (long long)lo, (long long)hi);
        first_next = mk_rule_buf(c, &t);
    }
    bool extras_required = xlo > 0;
    bool any_req_after = extras_required; /* some required member at index >= i */
    for (int i = n - 1; i >= 0; i--) {
        struct buf rb = {0}, fb = {0};
        if (reqd[i])
            buf_printf(&rb, "%s %s%s%s", cm, vals[i], rest_next ? " " : "",
                       rest_next ? rest_next : "");
        else
            buf_printf(&rb, "(%s %s)?%s%s", cm, vals[i], rest_next ? " " : "",
                       rest_next ? rest_next : "");
        buf_printf(&fb, "%s%s%s", vals[i], rest_next ? " " : "", rest_next ? rest_next : "");
        if (!reqd[i] && first_next) buf_printf(&fb, " | %s", first_next);
        if (reqd[i]) any_req_after = true;
        rest_next = mk_rule_buf(c, &rb);
        first_next = mk_rule_buf(c, &fb);
        if (c->oom) return NULL;
    }
    struct buf ob = {0};
    bool empty_ok = !any_req_after && !nonempty;
    if (empty_ok) buf_printf(&ob, "\"{\" %s \"}\"", w);
    if (first_next)
        buf_printf(&ob, "%s\"{\" %s %s %s \"}\"", empty_ok ? " | " : "", w, first_next, w);
    if (!ob.len) return NULL;
    return mk_rule_buf(c, &ob);
}

static char *emit(struct js *c, struct sn *s)
{
    if (c->oom) return NULL;
    if (s->ref) {
        struct def *d = find_def(c, s->ref);
        if (!d->name) {
            d->name = mk_rule(c, NULL);
            if (!d->name) return NULL;
        }
        return d->name;
    }
    if (s->n_alts) {
        struct buf b = {0};
        int n = 0;
        char *last = NULL;
        for (int i = 0; i < s->n_alts; i++) {
            char *a = emit(c, s->alts[i]);
            if (a) last = a;
            if (!a) {
                if (c->e->msg[0]) {
                    buf_free(&b);
                    return NULL;
                }
                continue;
            }
            buf_printf(&b, "%s%s", n++ ? " | " : "", a);
        }
        if (!n) {
            buf_free(&b);
            return NULL;
        }
        if (n == 1) {
            buf_free(&b);
            return last;
        }
        return mk_rule_buf(c, &b);
    }
    if (s->enumv) return emit_enum(c, s);
    if (sn_is_any(s)) return (char *)r_value(c);
    struct buf b = {0};
    int n = 0;
    char *a = NULL;
#define ALT(expr)                                                                                  \
    do {                                                                                           \
        a = (expr);                                                                                \
        if (a)                                                                                     \
            buf_printf(&b, "%s%s", n++ ? " | " : "", a);                                           \
        else if (c->e->msg[0])                                                                     \
            goto fail;                                                                             \
    } while (0)
    if (s->not_enum) { /* excluded values we can only express for strings, booleans, null */
        size_t i;
        json_t *x;
        json_array_foreach(s->not_enum, i, x)
        {
            unsigned need = json_is_number(x)   ? (JT_NUM | JT_INT)
                            : json_is_array(x)  ? JT_ARR
                            : json_is_object(x) ? JT_OBJ
                                                : 0;
            if (json_is_integer(x) ||
                (json_is_real(x) && json_real_value(x) == floor(json_real_value(x))))
                need = JT_NUM | JT_INT;
            else if (json_is_real(x))
                need = JT_NUM;
            if (s->types & need) {
                err_set(c->e, ERR_UNSUPPORTED,
                        "unsupported keyword \"not\" (excluding a number, array or object value)");
                goto fail;
            }
        }
    }
    if (s->types & JT_OBJ) ALT(emit_object(c, s));
    if (s->types & JT_ARR) ALT(emit_array(c, s));
    if (s->types & JT_STR) ALT(emit_string(c, s));
    if (s->types & (JT_NUM | JT_INT)) ALT(emit_number(c, s, !(s->types & JT_NUM)));
    if (s->types & JT_BOOL) {
        bool t = !not_has(s, json_true()), f = !not_has(s, json_false());
        if (t || f) ALT(t && f ? "\"true\" | \"false\"" : t ? "\"true\"" : "\"false\"");
    }
    if ((s->types & JT_NULL) && !not_has(s, json_null())) ALT("\"null\"");
#undef ALT
    if (!n) {
        buf_free(&b);
        return NULL;
    }
    if (n == 1 && a && !strchr(a, ' ')) { /* a single rule name: no wrapper rule */
        buf_free(&b);
        return a;
    }
    return mk_rule_buf(c, &b);
fail:
    buf_free(&b);
    return NULL;
}

/* ------------------------------------------------------------------ entry points */

static void js_free(struct js *c)
{
    for (size_t i = 0; i < c->n_allocs; i++)
        free(c->allocs[i]);
    free(c->allocs);
    for (size_t i = 0; i < c->n_jallocs; i++)
        json_decref(c->jallocs[i]);
    free(c->jallocs);
    free(c->rules);
    free(c->hidx);
    free(c->defs);
    buf_free(&c->out);
}

static int finish_defs(struct js *c)
{
    for (int i = 0; i < c->n_defs; i++) {
        struct def *d = c->defs[i];
        if (!d->name || d->emitted) continue;
        d->emitted = true;
        struct sn *s = def_ir(c, d);
        if (!s) return -1;
        /* a chain of bare $refs that comes back to itself matches nothing */
        struct sn *a = s;
        for (int k = 0; a && a->ref && k <= c->n_defs; k++) {
            struct def *t = find_def(c, a->ref);
            if (t == d) {
                return err_set(c->e, ERR_INVALID,
                               "$ref \"%.200s\" refers to itself without content", d->ref);
            }
            a = def_ir(c, t);
        }
        if (!a) return -1;
        char *body = emit(c, s);
        if (!body) {
            if (!c->e->msg[0])
                err_set(c->e, ERR_INVALID, "$ref \"%.200s\" is unsatisfiable", d->ref);
            return -1;
        }
        if (buf_printf(&c->out, "%s: %s\n", d->name, body)) return js_oom(c);
        i = -1; /* emitting may have added defs: rescan */
    }
    return 0;
}

/* Messages quote schema text cut at a byte count: replace broken UTF-8 so the api layer can put
 * the message in a JSON error body. */
static void msg_utf8_fix(char *m)
{
    unsigned char *u = (unsigned char *)m;
    size_t i = 0, n = strlen(m);
    while (i < n) {
        int len = u[i] < 0x80         ? 1
                  : (u[i] >> 5) == 6  ? 2
                  : (u[i] >> 4) == 14 ? 3
                  : (u[i] >> 3) == 30 ? 4
                                      : 0;
        bool ok = len > 0 && i + (size_t)len <= n;
        for (int k = 1; ok && k < len; k++)
            if ((u[i + (size_t)k] & 0xC0) != 0x80) ok = false;
        if (!ok) {
            u[i++] = '?';
            continue;
        }
        i += (size_t)len;
    }
}

int jsonschema_to_lark(const char *schema_json, size_t len, const char *rule_prefix,
                       struct buf *out, struct err *e)
{
    struct err tmp;
    if (!e) e = &tmp;
    err_clear(e);
    if (!rule_prefix) rule_prefix = "";
    if (strlen(rule_prefix) > 40) return err_set(e, ERR_INVALID, "rule prefix too long");
    json_error_t je;
    json_t *root = json_loadb(schema_json, len,
                              JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!root && json_error_code(&je) == json_error_stack_overflow)
        return err_set(e, ERR_INVALID, "schema nested deeper than %d (at line %d, column %d)",
                       JS_MAX_DEPTH, je.line, je.column);
    if (!root)
        return err_set(e, ERR_INVALID, "schema is not valid JSON: %s (line %d, column %d)", je.text,
                       je.line, je.column);
    struct js c = {.root = root, .prefix = rule_prefix, .e = e};
    int rc = -1;
    const json_t *dr = json_is_object(root) ? json_object_get(root, "$schema") : NULL;
    if (json_is_string(dr)) {
        const char *u = json_string_value(dr);
        c.ref_only = strstr(u, "draft-03") || strstr(u, "draft-04") || strstr(u, "draft-06") ||
                     strstr(u, "draft-07");
    }
    const json_t *wsk = json_is_object(root) ? json_object_get(root, "x-whitespace") : NULL;
    if (wsk) {
        const char *v = json_is_string(wsk) ? json_string_value(wsk) : "";
        if (!strcmp(v, "tidy"))
            c.ws = WS_TIDY;
        else if (!strcmp(v, "compact"))
            c.ws = WS_COMPACT;
        else if (!strcmp(v, "pretty"))
            c.ws = WS_PRETTY;
        else {
            err_set(e, ERR_INVALID, "\"x-whitespace\" must be \"tidy\", \"compact\" or \"pretty\"");
            goto done;
        }
    }
    struct sn *s = lower(&c, root);
    if (!s) goto done;
    char *top = emit(&c, s);
    if (!top) {
        if (!e->msg[0])
            err_set(e, ERR_INVALID, "schema is unsatisfiable (no JSON value matches it)");
        goto done;
    }
    if (finish_defs(&c)) goto done;
    if (c.oom) {
        if (!e->msg[0]) js_oom(&c);
        goto done;
    }
    if (*rule_prefix)
        buf_printf(&c.out, "%sroot: %s\n", rule_prefix, top);
    else
        buf_printf(&c.out, "start: %s\n", top);
    if (buf_append(out, c.out.data, c.out.len)) {
        js_oom(&c);
        goto done;
    }
    rc = 0;
done:
    if (rc && !e->msg[0]) err_set(e, ERR_INTERNAL, "schema compilation failed");
    if (rc) msg_utf8_fix(e->msg);
    if (rc && e->code == ERR_OK) e->code = ERR_INVALID;
    js_free(&c);
    json_decref(root);
    return rc;
}

int jsonschema_object_lark(const char *rule_prefix, struct buf *out, struct err *e)
{
    static const char schema[] = "{\"type\":\"object\"}";
    return jsonschema_to_lark(schema, sizeof schema - 1, rule_prefix, out, e);
}
