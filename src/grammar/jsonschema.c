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
#include "grammar/jsonschema_json.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "grammar/jsonschema_ir.h"
#include "base/hash.h"

/* ------------------------------------------------------------------ memory */

void *js_alloc(struct js *c, size_t n)
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

char *js_strdup(struct js *c, const char *s, size_t n)
{
    char *p = js_alloc(c, n + 1);
    if (p) memcpy(p, s, n);
    return p;
}

json_t *js_keep(struct js *c, json_t *v)
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

int js_oom(struct js *c)
{
    return err_set(c->e, ERR_NOMEM, "out of memory");
}

struct sn *sn_new(struct js *c, unsigned types)
{
    struct sn *s = js_alloc(c, sizeof *s);
    if (!s) return NULL;
    s->types = types;
    s->max_len = -1;
    s->max_items = -1;
    s->max_props = -1;
    return s;
}

bool sn_is_any(const struct sn *s)
{
    return s->types == JT_ALL && !s->n_alts && !s->ref && !s->enumv && !s->not_enum && !s->lo &&
           !s->hi && !s->mult && s->min_len == 0 && s->max_len < 0 && !s->pattern && !s->format &&
           !s->n_prefix && !s->items && !s->contains && s->min_items == 0 && s->max_items < 0 &&
           !s->n_props && !s->n_req && !s->addl && !s->n_ppat && s->min_props == 0 &&
           s->max_props < 0 && !s->n_deps;
}

bool sn_unsat(const struct sn *s)
{
    return !s->n_alts && !s->ref && s->types == 0;
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
static const char *const KW_UNSUPPORTED[] = {"minContains",
                                             "maxContains",
                                             "unevaluatedProperties",
                                             "unevaluatedItems",
                                             "$dynamicRef",
                                             "$dynamicAnchor",
                                             "$recursiveRef",
                                             "$recursiveAnchor",
                                             "contentSchema",
                                             NULL};

bool js_in_list(const char *const *l, const char *k)
{
    for (; *l; l++)
        if (!strcmp(*l, k)) return true;
    return false;
}

/* ------------------------------------------------------------------ numbers */

static int num_to_dec(struct js *c, json_t *v, struct jsrx_dec *d, const char *kw)
{
    char tmp[64];
    const char *big = c->bigints ? jsonschema_bigint(v) : NULL;
    if (big) { /* an integer beyond 64 bits, exact (jsonschema_json.c) */
        if (jsrx_dec_parse(big, d))
            return err_set(c->e, ERR_INVALID, "%s: number out of range", kw);
        return 0;
    }
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
    const char *big = c->bigints ? jsonschema_bigint(v) : NULL;
    if (big && big[0] != '-') {
        *out = (int64_t)1e15; /* as any count above 1e15 */
        return 0;
    }
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
struct sn *js_intersect(struct js *c, struct sn *a, struct sn *b);

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

struct def *js_find_def(struct js *c, const char *ref)
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

/* The JSON pointer p ("/a/b" with ~0 ~1 and %XX; "" is start itself) from start. */
static json_t *walk_pointer(json_t *start, const char *p)
{
    json_t *cur = start;
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

/* Embedded resources: schema objects with their own `$id` (draft 4..7 `id`) that is a URI, not
 * a plain "#name" anchor. Refs name them by that URI, absolute or relative to an enclosing
 * resource (the Washington Post / Snowplow style of "remote-looking" local ids). */
static bool uri_has_scheme(const char *u)
{
    const char *p = u;
    if (!((*p | 32) >= 'a' && (*p | 32) <= 'z')) return false;
    while (((*p | 32) >= 'a' && (*p | 32) <= 'z') || (*p >= '0' && *p <= '9') || *p == '+' ||
           *p == '-' || *p == '.')
        p++;
    return *p == ':';
}

/* ref (without fragment) resolved against base (without fragment) into out (RFC 3986 5.2,
 * with dot segments removed) */
static void uri_resolve(struct buf *out, const char *base, const char *ref, size_t rn)
{
    buf_reset(out);
    if (!base || !*base || uri_has_scheme(ref)) {
        buf_append(out, ref, rn);
    } else if (rn >= 2 && ref[0] == '/' && ref[1] == '/') {
        const char *c = strchr(base, ':');
        buf_append(out, base, c ? (size_t)(c - base) + 1 : 0);
        buf_append(out, ref, rn);
    } else if (rn && ref[0] == '/') {
        const char *a = strstr(base, "://");
        const char *e = a ? strchr(a + 3, '/') : NULL;
        buf_append(out, base, e ? (size_t)(e - base) : strlen(base));
        buf_append(out, ref, rn);
    } else {
        const char *sl = strrchr(base, '/');
        buf_append(out, base, sl ? (size_t)(sl - base) + 1 : 0);
        buf_append(out, ref, rn);
    }
    /* remove "./" and "x/../" segments after the authority */
    if (!out->data) return;
    char *u = out->data;
    char *st = strstr(u, "://");
    st = st ? strchr(st + 3, '/') : strchr(u, '/');
    if (!st) return;
    char *w = st;
    for (char *r = st; *r;) {
        if (!strncmp(r, "/./", 3)) {
            r += 2;
        } else if (!strncmp(r, "/../", 4) || !strcmp(r, "/..")) {
            while (w > st && *--w != '/') {
            }
            r += 3;
            if (!*r) *w++ = '/';
        } else
            *w++ = *r++;
    }
    *w = 0;
    out->len = (size_t)(w - u);
}

static json_t *find_resource(json_t *v, const char *base, const char *want, int depth,
                             int *hits, json_t **last)
{
    if (depth > 64 || !json_is_object(v)) {
        if (json_is_array(v) && depth <= 64) {
            size_t i;
            json_t *x;
            json_array_foreach(v, i, x) find_resource(x, base, want, depth + 1, hits, last);
        }
        return *last;
    }
    struct buf abs = {0};
    const char *here = base;
    for (int k = 0; k < 2; k++) {
        json_t *id = json_object_get(v, k ? "id" : "$id");
        if (!json_is_string(id) || json_string_value(id)[0] == '#') continue;
        const char *is = json_string_value(id);
        size_t n = strcspn(is, "#");
        uri_resolve(&abs, base, is, n);
        if (abs.data) {
            here = abs.data;
            /* the wanted URI, or a relative ref whose resolution we cannot place: its tail */
            size_t wl = strlen(want), al = abs.len;
            if ((al == wl && !strcmp(abs.data, want)) ||
                (!uri_has_scheme(want) && al > wl && abs.data[al - wl - 1] == '/' &&
                 !strcmp(abs.data + al - wl, want)) ||
                (n == wl && !strncmp(is, want, n))) {
                (*hits)++;
                *last = v;
            }
        }
        break;
    }
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x)
    {
        if (!strcmp(key, "enum") || !strcmp(key, "const") || !strcmp(key, "default") ||
            !strcmp(key, "examples"))
            continue;
        find_resource(x, here, want, depth + 1, hits, last);
    }
    buf_free(&abs);
    return *last;
}

/* JSON pointer lookup ("#/a/b" with ~0 ~1 and %XX), "#anchor", refs written with the root $id,
 * and refs to embedded resources (their `$id` URI, then a pointer or anchor inside them) */
static json_t *resolve_pointer(struct js *c, const char *ref)
{
    const char *p = ref;
    if (p[0] == '#' && p[1] && p[1] != '/') return find_anchor(c->root, p + 1, 0);
    json_t *start = c->root;
    if (*p != '#') {
        /* same-document refs written with the root $id */
        json_t *id = json_object_get(c->root, "$id");
        if (!json_is_string(id)) id = json_object_get(c->root, "id");
        const char *ids = json_is_string(id) ? json_string_value(id) : NULL;
        size_t il = ids ? strcspn(ids, "#") : 0;
        if (ids && il && !strncmp(p, ids, il) && (p[il] == '#' || !p[il])) {
            p += il;
        } else {
            /* an embedded resource: resolved against the root's URI, or matched as written */
            size_t un = strcspn(p, "#");
            struct buf want = {0};
            struct buf rb = {0};
            if (ids) buf_append(&rb, ids, il);
            uri_resolve(&want, rb.data, p, un);
            buf_free(&rb);
            int hits = 0;
            json_t *last = NULL;
            if (want.data) find_resource(c->root, NULL, want.data, 0, &hits, &last);
            if (hits != 1 && want.data) {
                /* a relative ref from a nested resource (whose base is not tracked here): the
                 * one resource whose URI ends with the ref's path (leading ./ and ../ dropped) */
                const char *q = p;
                while (!strncmp(q, "./", 2) || !strncmp(q, "../", 3))
                    q += q[1] == '/' ? 2 : 3;
                buf_reset(&want);
                buf_append(&want, q, un - (size_t)(q - p));
                hits = 0;
                last = NULL;
                find_resource(c->root, NULL, want.data, 0, &hits, &last);
            }
            buf_free(&want);
            if (hits != 1) return NULL; /* none, or ambiguous */
            start = last;
            p += un;
        }
        if (!*p) return start;
    }
    if (p[0] == '#' && p[1] && p[1] != '/') return find_anchor(start, p + 1, 0);
    return walk_pointer(start, p + 1);
}

static struct def *get_def(struct js *c, const char *ref)
{
    struct def *d = js_find_def(c, ref);
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
static bool format_defined(const struct js *c, const char *f)
{
    static const char *const defined[] = {
        "date-time", "date", "time", "duration", "email", "idn-email", "hostname",
        "idn-hostname", "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid",
        "uri-template", "json-pointer", "relative-json-pointer", "regex"};
    /* defined by draft 3 only: under any other draft an unknown name, an annotation */
    static const char *const draft3[] = {"color",     "style",     "phone",
                                         "utc-millisec", "host-name", "ip-address"};
    for (size_t i = 0; i < sizeof defined / sizeof defined[0]; i++)
        if (!strcmp(f, defined[i])) return true;
    for (size_t i = 0; c->draft == 3 && i < sizeof draft3 / sizeof draft3[0]; i++)
        if (!strcmp(f, draft3[i])) return true;
    return false;
}

/* A pattern as a C string: a NUL character of the pattern is written \x00 (after an odd run
 * of backslashes the escape's own backslash is already there: x00). */
static const char *pattern_text(struct js *c, json_t *v)
{
    const char *p = json_string_value(v);
    size_t n = json_string_length(v);
    if (strlen(p) == n) return p;
    struct buf b = {0};
    size_t bs = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i])
            buf_append(&b, &p[i], 1);
        else
            buf_puts(&b, bs % 2 ? "x00" : "\\x00");
        bs = p[i] == '\\' ? bs + 1 : 0;
    }
    char *r = b.data ? js_strdup(c, b.data, b.len) : NULL;
    buf_free(&b);
    return r;
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
        if (!(n->pattern = pattern_text(c, v))) {
            js_oom(c);
            return NULL;
        }
    }
    if ((v = json_object_get(s, "format"))) {
        if (!json_is_string(v)) {
            err_set(c->e, ERR_INVALID, "format must be a string");
            return NULL;
        }
        n->format = json_string_value(v);
        if (!format_defined(c, n->format)) {
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
    return js_in_list(KW_IMPL, k) && strcmp(k, "$ref") && strcmp(k, "allOf") && strcmp(k, "anyOf") &&
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
        c->ctx_node = json_array_get(arr, i); /* the same instance: the context holds */
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
struct sn *js_resolve(struct js *c, struct sn *a);

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
                                         (js_in_list(KW_IMPL, k) || js_in_list(KW_UNSUPPORTED, k))) only =
            false;
        if (only) return lower(c, inner);
    }
    struct sn *n = lower(c, v);
    if (!n) {
        err_wrap(c->e, "not");
        return NULL;
    }
    n = js_resolve(c, n);
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
    /* an object condition in the discriminator form (properties of const/enum or of a bare
     * type, required, "type": "object"): its negation as for `if` */
    if (json_is_object(v)) {
        struct err save = *c->e;
        json_t *nv = js_negate_cond(c, v);
        struct sn *r = nv ? lower(c, nv) : NULL;
        if (r) return r;
        *c->e = save;
    }
    err_set(c->e, ERR_UNSUPPORTED,
            "unsupported keyword \"not\" (supported: not of true/false, of a type, of enum/const, "
            "of an object condition in the discriminator form)");
    return NULL;
}

struct sn *js_lower(struct js *c, json_t *s)
{
    return lower(c, s);
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
    /* the context is the parent's for this very node (an applicator member), else none (a
     * property's or an item's schema: another instance) */
    int ctx_saved = c->n_ctx, base_saved = c->ctx_base;
    json_t *ctx_node_saved = c->ctx_node;
    if (c->ctx_node != s) c->ctx_base = c->n_ctx; /* none visible (entries kept below) */
    c->ctx_node = NULL;
    /* drafts 3..7: "all other properties in a $ref object MUST be ignored" */
    bool ref_only = c->ref_only && json_is_string(json_object_get(s, "$ref"));
    /* if/then/else, dependentSchemas, propertyNames: rewritten (jsonschema_cond.c) */
    if (!ref_only && !(s = js_rewrite_cond(c, s))) goto out;
    json_object_foreach(s, k, v)
    {
        if (ref_only && strcmp(k, "$ref")) continue;
        if (js_in_list(KW_UNSUPPORTED, k)) {
            err_set(c->e, ERR_UNSUPPORTED, "unsupported keyword \"%s\"", k);
            goto out;
        }
    }
    res = sn_new(c, JT_ALL);
    bool own_done = false, has_obj_kw = false, has_appl = false;
    json_object_foreach(s, k, v) if (is_obj_keyword(k)) has_obj_kw = true;
    json_object_foreach(s, k, v) if (!ref_only && (!strcmp(k, "oneOf") || !strcmp(k, "allOf") ||
                                                   !strcmp(k, "anyOf") || !strcmp(k, "$ref")))
        has_appl = true;
    /* the sibling keywords, lowered once: a context for the applicators' oneOfs */
    struct sn *own_ir = NULL;
    if (has_appl) {
        own_ir = lower_own(c, s);
        if (!own_ir) {
            res = NULL;
            goto out;
        }
        if (c->n_ctx < 16 && !sn_is_any(own_ir)) c->ctx[c->n_ctx++] = own_ir;
    }
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
            part = NULL;
            if (c->n_ctx > c->ctx_base && !d->lowering && !d->ir && c->inline_depth < 8) {
                /* a target whose oneOf holds only in this context (e.g. "type": "object"
                 * here): lowered in place, not shared, when it fails on its own */
                struct err save = *c->e;
                int bsave = c->ctx_base;
                c->ctx_base = c->n_ctx;
                struct sn *alone = def_ir(c, d);
                c->ctx_base = bsave;
                if (!alone && strstr(c->e->msg, "oneOf")) {
                    *c->e = save;
                    c->inline_depth++;
                    d->lowering = true;
                    c->ctx_node = d->node;
                    part = lower(c, d->node);
                    d->lowering = false;
                    c->inline_depth--;
                    if (!part) {
                        res = NULL;
                        goto out;
                    }
                } else if (!alone)
                    *c->e = save; /* any other failure: as a plain ref, lowered when needed */
            }
            if (!part) {
                part = sn_new(c, 0);
                if (!part) {
                    res = NULL;
                    goto out;
                }
                part->ref = d->ref;
            }
        } else if (!strcmp(k, "allOf")) {
            if (!json_is_array(v)) {
                err_set(c->e, ERR_INVALID, "allOf must be an array");
                res = NULL;
                goto out;
            }
            size_t i;
            json_t *x;
            part = sn_new(c, JT_ALL);
            int ctx_at = c->n_ctx;
            json_array_foreach(v, i, x)
            {
                c->ctx_node = x; /* the same instance: the context holds */
                struct sn *a = lower(c, x);
                if (!a) {
                    err_wrap(c->e, "allOf[%zu]", i);
                    res = NULL;
                    goto out;
                }
                if (c->n_ctx < 16) c->ctx[c->n_ctx++] = a; /* for the members after it */
                part = js_intersect(c, part, a);
                if (!part) {
                    res = NULL;
                    goto out;
                }
            }
            c->n_ctx = ctx_at;
        } else if (!strcmp(k, "not")) {
            part = negate(c, v);
        } else if (!strcmp(k, "anyOf")) {
            part = mk_alts(c, v, "anyOf");
        } else if (!strcmp(k, "oneOf")) {
            part = mk_alts(c, v, "oneOf");
            if (part && part->n_alts) {
                /* disjointness is judged within the sibling keywords (e.g. "type": "object")
                 * and the context: what the enclosing schemas say of this instance */
                struct sn *own = own_ir;
                struct sn **ia = own ? js_alloc(c, (size_t)part->n_alts * sizeof *ia) : NULL;
                if (!ia) {
                    res = NULL;
                    goto out;
                }
                for (int i = 0; i < part->n_alts; i++) {
                    struct err save = *c->e;
                    ia[i] = js_intersect(c, own, part->alts[i]);
                    if (!ia[i]) { /* cannot intersect here: judge the bare alternative */
                        *c->e = save;
                        ia[i] = part->alts[i];
                    }
                    for (int j = c->ctx_base; j < c->n_ctx; j++) {
                        if (c->ctx[j] == own) continue;
                        save = *c->e;
                        struct sn *t = js_intersect(c, ia[i], c->ctx[j]);
                        if (t)
                            ia[i] = t;
                        else
                            *c->e = save; /* a context that does not intersect: left out */
                    }
                }
                int na = part->n_alts, oi = -1, oj = -1;
                bool *ov = js_alloc(c, (size_t)na * (size_t)na);
                if (!ov) {
                    res = NULL;
                    goto out;
                }
                for (int i = 0; i < na; i++)
                    for (int j = i + 1; j < na; j++) {
                        bool o = !provably_disjoint(c, ia[i], ia[j], 0);
                        ov[i * na + j] = ov[j * na + i] = o;
                        if (o && oi < 0) {
                            oi = i;
                            oj = j;
                        }
                    }
                if (oi >= 0 && json_array_size(v) == (size_t)na) {
                    /* exactly one: each alternative without the ones it may overlap, when
                     * their negations can be written (docs/jsonschema.md "oneOf") */
                    struct err save = *c->e;
                    json_t *rw = js_oneof_rewrite(c, v, ov, na);
                    struct sn *alt = rw ? lower(c, rw) : NULL;
                    if (alt) {
                        part = alt;
                        oi = -1;
                    } else
                        *c->e = save;
                }
                if (oi >= 0) {
                    if (c->e->code == ERR_OK || c->e->msg[0] == 0)
                        err_set(c->e, ERR_UNSUPPORTED,
                                "oneOf: alternatives %d and %d may overlap; oneOf is "
                                "supported only when the alternatives are provably "
                                "disjoint (by type, const/enum or a required "
                                "discriminator property) or each one's negation can be "
                                "written (discriminator forms)",
                                oi, oj);
                    res = NULL;
                    goto out;
                }
            }
        } else if (is_own_keyword(k) && !own_done && (!has_obj_kw || is_obj_keyword(k))) {
            /* sibling keywords take the place of "properties" (or of the first of them), so the
             * property order follows the order of applicators in the schema, as llguidance does */
            own_done = true;
            part = own_ir ? own_ir : lower_own(c, s);
        } else
            continue;
        if (!part) {
            res = NULL;
            goto out;
        }
        res = js_intersect(c, res, part);
        if (!res) goto out;
    }
out:
    c->depth--;
    c->n_ctx = ctx_saved;
    c->ctx_base = base_saved;
    c->ctx_node = ctx_node_saved;
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

struct sn *js_resolve(struct js *c, struct sn *a)
{
    int guard = 0;
    while (a && a->ref) {
        struct def *d = js_find_def(c, a->ref);
        if (!d || ++guard > 100) {
            err_set(c->e, ERR_UNSUPPORTED, "$ref chain too long");
            return NULL;
        }
        a = def_ir(c, d);
    }
    return a;
}

int js_pattern_matches(const char *pat, const char *subj, size_t n);

static struct sn *intersect_prop(struct js *c, struct sn *other, const char *name, size_t len,
                                 struct sn *mine)
{
    /* `mine` meets what `other` says about property `name` */
    for (int i = 0; i < other->n_props; i++)
        if (other->plens[i] == len && !memcmp(other->pnames[i], name, len))
            return js_intersect(c, mine, other->pschemas[i]);
    bool matched = false; /* every matching pattern applies */
    for (int i = 0; i < other->n_ppat; i++) {
        int m = js_pattern_matches(other->ppat[i], name, len);
        if (m < 0) {
            err_set(c->e, ERR_INVALID, "patternProperties: bad pattern \"%.100s\"", other->ppat[i]);
            return NULL;
        }
        if (m) {
            mine = js_intersect(c, mine, other->ppsch[i]);
            if (!mine) return NULL;
            matched = true;
        }
    }
    if (!matched && other->addl) return js_intersect(c, mine, other->addl);
    return mine;
}

struct sn *js_intersect(struct js *c, struct sn *a, struct sn *b)
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
        struct sn *ra = js_resolve(c, a), *rb = ra ? js_resolve(c, b) : NULL;
        r = rb ? js_intersect(c, ra, rb) : NULL;
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
                struct sn *x = js_intersect(c, a->n_alts ? a->alts[i] : a, b->n_alts ? b->alts[j] : b);
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
            struct sn *z = !x ? y : !y ? x : js_intersect(c, x, y);
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
        r->items = js_intersect(c, a->items, b->items);
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
    /* patternProperties: a key not declared on either side takes, from each side, its matching
     * patterns' schemas or that side's additionalProperties. Exact in one schema when only one
     * side has patterns (the other's additionalProperties joins each pattern's schema and the
     * merged additionalProperties), or when both have patterns and neither restricts the
     * other keys (the patterns are united) */
    bool a_addl = a->addl && !sn_is_any(a->addl), b_addl = b->addl && !sn_is_any(b->addl);
    if (a->n_ppat && b->n_ppat && (a_addl || b_addl)) {
        err_set(c->e, ERR_UNSUPPORTED,
                "allOf: patternProperties on two subschemas together with additionalProperties "
                "is not supported");
        goto fail;
    }
    if (a->n_ppat && b->n_ppat) {
        int np = a->n_ppat + b->n_ppat;
        r->ppat = js_alloc(c, (size_t)np * sizeof *r->ppat);
        r->ppsch = js_alloc(c, (size_t)np * sizeof *r->ppsch);
        if (!r->ppat || !r->ppsch) goto fail;
        for (int i = 0; i < np; i++) {
            r->ppat[i] = i < a->n_ppat ? a->ppat[i] : b->ppat[i - a->n_ppat];
            r->ppsch[i] = i < a->n_ppat ? a->ppsch[i] : b->ppsch[i - a->n_ppat];
        }
        r->n_ppat = np;
    } else if (a->n_ppat || b->n_ppat) {
        struct sn *p = a->n_ppat ? a : b, *o = a->n_ppat ? b : a;
        r->ppat = p->ppat;
        r->ppsch = p->ppsch;
        r->n_ppat = p->n_ppat;
        if (o->addl && !sn_is_any(o->addl)) {
            r->ppsch = js_alloc(c, (size_t)p->n_ppat * sizeof *r->ppsch);
            if (!r->ppsch) goto fail;
            for (int i = 0; i < p->n_ppat; i++)
                if (!(r->ppsch[i] = js_intersect(c, p->ppsch[i], o->addl))) goto fail;
        }
    }
    if (a->addl && b->addl) {
        r->addl = js_intersect(c, a->addl, b->addl);
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

bool js_value_ok(struct js *c, struct sn *s, json_t *v, int depth);

/* The schemas that apply to member `name` of object schema s (all must hold): its declared
 * schema and those of the patternProperties matching it, or additionalProperties when neither;
 * none: any value. At most max (the rest are dropped: fewer schemas only weaken a proof). */
static int member_schemas(struct js *c, struct sn *s, const char *name, size_t len,
                          struct sn **out, int max)
{
    int n = 0;
    for (int j = 0; j < s->n_props && n < max; j++)
        if (s->plens[j] == len && !memcmp(s->pnames[j], name, len)) out[n++] = s->pschemas[j];
    bool matched = n > 0;
    for (int j = 0; j < s->n_ppat && n < max; j++)
        if (js_pattern_matches(s->ppat[j], name, len) == 1) {
            out[n++] = s->ppsch[j];
            matched = true;
        }
    if (!matched && s->addl && n < max) out[n++] = s->addl;
    return n;
}

static bool provably_disjoint(struct js *c, struct sn *a, struct sn *b, int depth)
{
    if (depth > 20) return false;
    a = js_resolve(c, a);
    b = js_resolve(c, b);
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
        json_array_foreach(e->enumv, i, x) if (js_value_ok(c, e, x, 0) && js_value_ok(c, o, x, 0))
            all_out = false;
        if (all_out) return true;
    }
    if (types_and(a->types, b->types) == JT_OBJ) {
        /* a property required by one side and forbidden or disjoint on the other */
        for (int pass = 0; pass < 2; pass++) {
            struct sn *x = pass ? b : a, *y = pass ? a : b;
            for (int i = 0; i < x->n_req; i++) {
                size_t len = strlen(x->req[i]);
                struct sn *xs[8], *ys[8];
                int nx = member_schemas(c, x, x->req[i], len, xs, 8);
                int ny = member_schemas(c, y, x->req[i], len, ys, 8);
                for (int j = 0; j < ny; j++) {
                    struct sn *r = js_resolve(c, ys[j]);
                    if (r && sn_unsat(r)) return true; /* y forbids the name */
                }
                for (int j = 0; j < nx; j++)
                    for (int k = 0; k < ny; k++)
                        if (provably_disjoint(c, xs[j], ys[k], depth + 1)) return true;
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

int js_pattern_matches(const char *pat, const char *subj, size_t n)
{
    /* the automaton the key classes and translated patterns share (ECMA: `.` excludes the four
     * line terminators, `$` is the end only); PCRE2 for what it does not implement (lookaround
     * in a pattern that only filters enum values) */
    int m = jsk_match(pat, subj, n);
    if (m >= 0) return m;
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &ec, &eo, NULL);
    if (!re) return -1;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = md ? pcre2_match(re, (PCRE2_SPTR)subj, n, 0, 0, md, NULL) : -1;
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    if (rc >= 0) return 1;
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    return -1;
}

bool js_value_ok(struct js *c, struct sn *s, json_t *v, int depth)
{
    s = js_resolve(c, s);
    if (!s || depth > 30) return true; /* unknown: keep */
    if (s->n_alts) {
        for (int i = 0; i < s->n_alts; i++)
            if (js_value_ok(c, s->alts[i], v, depth + 1)) return true;
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
            js_pattern_matches(s->pattern, json_string_value(v), json_string_length(v)) == 0)
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
            if (is && !js_value_ok(c, is, json_array_get(v, (size_t)i), depth + 1)) return false;
            if (!found && js_value_ok(c, s->contains, json_array_get(v, (size_t)i), depth + 1))
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
            if (ps && !js_value_ok(c, ps, x, depth + 1)) return false;
        }
        return true;
    }
    }
    return true;
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
            struct def *t = js_find_def(c, a->ref);
            if (t == d) {
                return err_set(c->e, ERR_INVALID,
                               "$ref \"%.200s\" refers to itself without content", d->ref);
            }
            a = def_ir(c, t);
        }
        if (!a) return -1;
        char *body = js_emit(c, s);
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

/* Big-integer markers (jsonschema_json.c) are read only as the values of numeric keywords
 * (num_to_dec, get_count); anywhere else the compiler would take one for a string, so it is an
 * error there — inside const / enum too (their values are matched literally). Subtrees of
 * `default` / `examples` are annotations. */
static int bigint_guard(json_t *v, const char *key, bool lit, int depth, struct err *e)
{
    static const char *const NUMERIC[] = {"minimum",       "maximum",     "exclusiveMinimum",
                                          "exclusiveMaximum", "multipleOf", "minLength",
                                          "maxLength",     "minItems",    "maxItems",
                                          "minProperties", "maxProperties", "minContains",
                                          "maxContains",   NULL};
    (void)depth; /* bounded by jansson's nesting limit */
    if (jsonschema_bigint(v)) {
        if (!lit && key && js_in_list(NUMERIC, key)) return 0;
        return err_set(e, ERR_UNSUPPORTED,
                       "an integer beyond 64 bits is supported only as the value of a numeric "
                       "keyword (minimum, maximum, multipleOf …), not in \"%s\"",
                       lit ? "const\" / \"enum" : key ? key : "(root)");
    }
    const char *k;
    json_t *x;
    size_t i;
    if (json_is_object(v)) {
        json_object_foreach(v, k, x)
        {
            if (!lit && (!strcmp(k, "default") || !strcmp(k, "examples"))) continue;
            bool l = lit || !strcmp(k, "const") || !strcmp(k, "enum");
            if (bigint_guard(x, k, l, depth + 1, e)) return -1;
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, x) if (bigint_guard(x, key, lit, depth + 1, e)) return -1;
    }
    return 0;
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
    bool bigints;
    json_t *root = jsonschema_json_loadb(schema_json, len,
                                         JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL,
                                         0, &bigints, &je);
    if (!root && json_error_code(&je) == json_error_stack_overflow)
        return err_set(e, ERR_INVALID, "schema nested deeper than %d (at line %d, column %d)",
                       JS_MAX_DEPTH, je.line, je.column);
    if (!root)
        return err_set(e, ERR_INVALID, "schema is not valid JSON: %s (line %d, column %d)", je.text,
                       je.line, je.column);
    struct js c = {.root = root, .prefix = rule_prefix, .e = e, .bigints = bigints};
    int rc = -1;
    if (bigints && bigint_guard(root, NULL, false, 0, e)) goto done;
    const json_t *dr = json_is_object(root) ? json_object_get(root, "$schema") : NULL;
    if (json_is_string(dr)) {
        const char *u = json_string_value(dr);
        c.draft = strstr(u, "draft-03")   ? 3
                  : strstr(u, "draft-04") ? 4
                  : strstr(u, "draft-06") ? 6
                  : strstr(u, "draft-07") ? 7
                                          : 0;
        c.ref_only = c.draft != 0;
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
    char *top = js_emit(&c, s);
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

