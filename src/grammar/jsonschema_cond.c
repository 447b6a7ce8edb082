/* jsonschema_cond — the conditional keywords of JSON Schema rewritten, before lowering, into the
 * ones the compiler implements exactly (docs/jsonschema.md "Conditional keywords"):
 *
 *   if/then/else        anyOf [ allOf [if, then], allOf [not-if, else] ]
 *   dependentSchemas    per name P: anyOf [ P absent, allOf [P present, schema] ]
 *   (draft-7 `dependencies` with a schema value: the same)
 *   propertyNames       folded into properties / additionalProperties / patternProperties
 *
 * `not-if` is built only for conditions whose negation the compiler expresses exactly: `if`
 * made of `properties` whose schemas are const / enum, a bare type (or true / false),
 * `required` and `"type": "object"` (the discriminator form); anything else is an error naming
 * `if`. The same negation serves `not` of such a condition and oneOf alternatives that may
 * overlap (js_oneof_rewrite: each alternative without the ones it overlaps). The
 * alternatives of the anyOf are disjoint (a condition and its negation), so no instance is
 * accepted twice over; each conditional doubles the alternatives the object's rules are built
 * for (JS_MAX_ALTS bounds their product). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "grammar/jsonschema_ir.h"

/* keywords that do not constrain an instance (annotations) and may sit in an `if` */
static bool is_annotation(const char *k)
{
    static const char *const a[] = {"title",    "description", "$comment", "examples", "default",
                                    "$id",      "$anchor",     "deprecated", "readOnly",
                                    "writeOnly", NULL};
    return js_in_list(a, k);
}

/* A new reference kept by the compile (freed with it); NULL when v is NULL (out of memory). */
static json_t *keep(struct js *c, json_t *v)
{
    return js_keep(c, v);
}

static json_t *obj1(struct js *c, const char *k, json_t *v)
{
    json_t *o = json_object();
    if (!o || !v || json_object_set(o, k, v)) {
        json_decref(o);
        c->oom = true;
        return NULL;
    }
    return keep(c, o);
}

static json_t *arr2(struct js *c, json_t *a, json_t *b)
{
    json_t *r = json_array();
    if (!r || !a || !b || json_array_append(r, a) || json_array_append(r, b)) {
        json_decref(r);
        c->oom = true;
        return NULL;
    }
    return keep(c, r);
}

/* {"required": [name]} / {"properties": {name: false}} */
static json_t *present(struct js *c, const char *name)
{
    json_t *a = json_array();
    if (!a || json_array_append_new(a, json_string(name))) {
        json_decref(a);
        c->oom = true;
        return NULL;
    }
    return obj1(c, "required", keep(c, a));
}

static json_t *absent(struct js *c, const char *name)
{
    return obj1(c, "properties", obj1(c, name, json_false()));
}

/* whether every value of an enum is of JSON Schema type t (so `type` adds nothing to it) */
static bool enum_of_type(json_t *vals, const char *t)
{
    size_t i;
    json_t *x;
    json_array_foreach(vals, i, x)
    {
        bool ok = !strcmp(t, "string")    ? json_is_string(x)
                  : !strcmp(t, "boolean") ? json_is_boolean(x)
                  : !strcmp(t, "null")    ? json_is_null(x)
                  : !strcmp(t, "number")  ? json_is_number(x)
                  : !strcmp(t, "integer") ? json_is_integer(x)
                                          : false;
        if (!ok) return false;
    }
    return true;
}

/* The negation of a property condition `cond` for a present property: {"not": {"enum": [...]}},
 * or NULL with an error when cond is not a const / enum (true / false are handled by the caller). */
static json_t *not_value(struct js *c, const char *name, json_t *cond)
{
    json_t *vals = NULL, *k_enum = json_object_get(cond, "enum"), *k_const = json_object_get(cond, "const");
    const char *type = NULL;
    const char *k;
    json_t *v;
    json_object_foreach(cond, k, v)
    {
        if (!strcmp(k, "enum") || !strcmp(k, "const") || is_annotation(k)) continue;
        if (!strcmp(k, "type") && json_is_string(v)) {
            type = json_string_value(v);
            continue;
        }
        err_set(c->e, ERR_UNSUPPORTED,
                "unsupported keyword \"if\" (the condition on property \"%.80s\" uses \"%.40s\"; "
                "supported: const/enum of a property, required, \"type\": \"object\")",
                name, k);
        return NULL;
    }
    if (k_enum && k_const) {
        err_set(c->e, ERR_UNSUPPORTED, "unsupported keyword \"if\" (both const and enum on \"%.80s\")",
                name);
        return NULL;
    }
    if (k_const) {
        vals = json_array();
        if (!vals || json_array_append(vals, k_const)) {
            json_decref(vals);
            c->oom = true;
            return NULL;
        }
        vals = keep(c, vals);
    } else if (json_is_array(k_enum)) {
        vals = k_enum;
    }
    if (!vals && type && !k_enum) /* only a type: present with a value of another type */
        return obj1(c, "not", obj1(c, "type", json_object_get(cond, "type")));
    if (!vals) {
        err_set(c->e, ERR_UNSUPPORTED,
                "unsupported keyword \"if\" (the condition on property \"%.80s\" is not a "
                "const/enum)",
                name);
        return NULL;
    }
    if (type && !enum_of_type(vals, type)) {
        err_set(c->e, ERR_UNSUPPORTED,
                "unsupported keyword \"if\" (property \"%.80s\": const/enum values of another type "
                "than \"%.40s\")",
                name, type);
        return NULL;
    }
    return obj1(c, "not", obj1(c, "enum", vals));
}

/* not(if) for the supported forms, or NULL with an error. */
static json_t *negate_if(struct js *c, json_t *cond)
{
    if (json_is_true(cond)) return json_false();
    if (json_is_false(cond)) return json_true();
    if (!json_is_object(cond)) {
        err_set(c->e, ERR_INVALID, "if: a schema must be an object or a boolean");
        return NULL;
    }
    bool typed = false; /* "type": "object": non-objects fail the condition */
    json_t *alts = keep(c, json_array()); /* objects failing it: any one reason */
    if (!alts) return NULL;
    const char *k;
    json_t *v;
    json_object_foreach(cond, k, v)
    {
        if (is_annotation(k)) continue;
        if (!strcmp(k, "type") && json_is_string(v) && !strcmp(json_string_value(v), "object")) {
            typed = true;
        } else if (!strcmp(k, "required") && json_is_array(v)) {
            size_t i;
            json_t *x;
            json_array_foreach(v, i, x)
            {
                if (!json_is_string(x)) {
                    err_set(c->e, ERR_INVALID, "if: required: entries must be strings");
                    return NULL;
                }
                if (json_array_append(alts, absent(c, json_string_value(x)))) c->oom = true;
            }
        } else if (!strcmp(k, "properties") && json_is_object(v)) {
            const char *p;
            json_t *pc;
            json_object_foreach(v, p, pc)
            {
                if (json_is_true(pc) || (json_is_object(pc) && json_object_size(pc) == 0)) continue;
                json_t *fail; /* p present with a value failing pc */
                if (json_is_false(pc)) {
                    fail = present(c, p);
                } else if (json_is_object(pc)) {
                    json_t *nv = not_value(c, p, pc);
                    if (!nv) return NULL;
                    json_t *req = present(c, p);
                    fail = req ? json_deep_copy(req) : NULL;
                    if (!fail || json_object_set(fail, "properties", obj1(c, p, nv))) {
                        json_decref(fail);
                        c->oom = true;
                        return NULL;
                    }
                    fail = keep(c, fail);
                } else {
                    err_set(c->e, ERR_INVALID, "if: properties \"%.80s\": a schema must be an object "
                                               "or a boolean", p);
                    return NULL;
                }
                if (!fail || json_array_append(alts, fail)) {
                    c->oom = true;
                    return NULL;
                }
            }
        } else {
            err_set(c->e, ERR_UNSUPPORTED,
                    "unsupported keyword \"if\" (its condition uses \"%.40s\"; supported: "
                    "const/enum of properties, required, \"type\": \"object\")",
                    k);
            return NULL;
        }
    }
    if (c->oom) return NULL;
    /* objects failing the condition */
    json_t *objs;
    if (json_array_size(alts) == 0) {
        objs = json_false();
    } else {
        objs = keep(c, json_pack("{s:s, s:O}", "type", "object", "anyOf", alts));
        if (!objs) return NULL;
    }
    if (!typed) return objs;
    json_t *nonobj = obj1(c, "not", obj1(c, "type", keep(c, json_string("object"))));
    return nonobj ? obj1(c, "anyOf", arr2(c, nonobj, objs)) : NULL;
}

/* allOf [a, b], dropping `true` sides */
static json_t *all2(struct js *c, json_t *a, json_t *b)
{
    if (json_is_true(a)) return b;
    if (json_is_true(b)) return a;
    return obj1(c, "allOf", arr2(c, a, b));
}

/* propertyNames N folded into the object keywords of s2 (a copy of the schema object). */
static int fold_property_names(struct js *c, json_t *s2, json_t *names)
{
    json_object_del(s2, "propertyNames");
    if (json_is_true(names)) return 0;
    static const char *const combined[] = {"allOf", "anyOf", "oneOf", "$ref", "if",
                                           "dependentSchemas", "dependencies", "patternProperties",
                                           NULL};
    for (int i = 0; combined[i]; i++)
        if (json_object_get(s2, combined[i])) {
            return err_set(c->e, ERR_UNSUPPORTED,
                           "unsupported keyword \"propertyNames\" (together with \"%s\")",
                           combined[i]);
        }
    struct sn *n = js_lower(c, names);
    if (!n) {
        err_wrap(c->e, "propertyNames");
        return -1;
    }
    n = js_resolve(c, n);
    if (!n) return -1;
    json_t *props = json_object_get(s2, "properties");
    json_t *np = keep(c, props && json_is_object(props) ? json_copy(props) : json_object());
    if (!np) return -1;
    /* declared names failing N cannot appear */
    const char *p;
    json_t *pv;
    json_object_foreach(props && json_is_object(props) ? props : np, p, pv)
    {
        json_t *key = keep(c, json_string(p));
        if (!key) return -1;
        if (!js_value_ok(c, n, key, 0) && json_object_set(np, p, json_false())) return js_oom(c);
    }
    if (json_object_set(s2, "properties", np)) return js_oom(c);
    json_t *addl = json_object_get(s2, "additionalProperties");
    if (json_is_false(addl)) return 0; /* no other keys: filtering the declared ones is all */
    if (!addl) addl = json_true();
    struct sn t = *n;
    if (sn_unsat(n)) return json_object_set(s2, "additionalProperties", json_false()) ? js_oom(c) : 0;
    t.types = JT_ALL;
    if (!(n->types & JT_STR)) /* no string passes: no keys at all */
        return json_object_set(s2, "additionalProperties", json_false()) ? js_oom(c) : 0;
    if (n->n_alts || n->ref || n->not_enum) goto unsupported;
    if (n->enumv) { /* the other keys are the names of the enum: declared as properties */
        size_t i;
        json_t *x;
        json_array_foreach(n->enumv, i, x)
        {
            if (!json_is_string(x) || json_object_get(np, json_string_value(x))) continue;
            if (json_object_set(np, json_string_value(x), addl)) return js_oom(c);
        }
        return json_object_set(s2, "additionalProperties", json_false()) ? js_oom(c) : 0;
    }
    t.pattern = NULL;
    if (!sn_is_any(&t) || n->min_len > 0 || n->max_len >= 0 || n->format) goto unsupported;
    if (!n->pattern) return 0; /* every string: no constraint */
    /* other keys: those matching the pattern (exact when no declared name matches it) */
    json_object_foreach(np, p, pv)
    {
        int m = js_pattern_matches(n->pattern, p, strlen(p));
        if (m != 0)
            return err_set(c->e, ERR_UNSUPPORTED,
                           "unsupported keyword \"propertyNames\" (pattern /%.80s/ also matches "
                           "declared property \"%.80s\" while other keys are allowed)",
                           n->pattern, p);
    }
    if (json_object_set(s2, "patternProperties", obj1(c, n->pattern, addl)) ||
        json_object_set(s2, "additionalProperties", json_false()))
        return js_oom(c);
    return 0;
unsupported:
    return err_set(c->e, ERR_UNSUPPORTED,
                   "unsupported keyword \"propertyNames\" (supported: true/false, const/enum, a "
                   "pattern, or any schema when no other keys than the declared ones are "
                   "allowed)");
}

json_t *js_rewrite_cond(struct js *c, json_t *s)
{
    /* keywords a draft does not define are annotations there: if/then/else came with draft 7,
     * propertyNames with draft 6, dependentSchemas with 2019-09 (the root $schema decides) */
    bool has_if = c->draft == 0 || c->draft >= 7, has_names = c->draft == 0 || c->draft >= 6;
    bool has_dep_schemas = c->draft == 0;
    json_t *dep = json_object_get(s, "dependencies");
    bool dep_schema = false;
    if (json_is_object(dep)) {
        const char *k;
        json_t *v;
        json_object_foreach(dep, k, v) if (!json_is_array(v)) dep_schema = true;
    }
    if (!json_object_get(s, "if") && !json_object_get(s, "then") && !json_object_get(s, "else") &&
        !json_object_get(s, "dependentSchemas") && !dep_schema &&
        !json_object_get(s, "propertyNames"))
        return s;
    json_t *s2 = keep(c, json_copy(s));
    if (!s2) return NULL;
    json_t *conds = keep(c, json_array()); /* appended to allOf */
    if (!conds) return NULL;
    json_t *cond = has_if ? json_object_get(s, "if") : NULL;
    json_object_del(s2, "if");
    json_object_del(s2, "then");
    json_object_del(s2, "else");
    if (cond) { /* then / else without if have no effect */
        json_t *th = json_object_get(s, "then"), *el = json_object_get(s, "else");
        json_t *nif = negate_if(c, cond);
        if (!nif) return NULL;
        json_t *yes = all2(c, cond, th ? th : json_true());
        json_t *no = all2(c, nif, el ? el : json_true());
        json_t *alt = yes && no ? obj1(c, "anyOf", arr2(c, yes, no)) : NULL;
        if (!alt || json_array_append(conds, alt)) return js_oom(c), NULL;
    }
    for (int kw = 0; kw < 2; kw++) {
        const char *name = kw ? "dependencies" : "dependentSchemas";
        json_t *d = json_object_get(s, name);
        if (!kw && !has_dep_schemas) json_object_del(s2, name);
        if (!d || (!kw && !has_dep_schemas)) continue;
        if (!json_is_object(d)) {
            err_set(c->e, ERR_INVALID, "%s must be an object", name);
            return NULL;
        }
        json_t *keep_arrays = kw ? keep(c, json_object()) : NULL; /* draft-7 name lists stay */
        if (kw && !keep_arrays) return NULL;
        const char *p;
        json_t *v;
        json_object_foreach(d, p, v)
        {
            if (kw && json_is_array(v)) {
                if (json_object_set(keep_arrays, p, v)) return js_oom(c), NULL;
                continue;
            }
            if (json_is_true(v)) continue;
            json_t *alt;
            if (json_is_false(v)) {
                alt = absent(c, p);
            } else if (json_is_object(v)) {
                json_t *yes = all2(c, present(c, p), v);
                alt = yes ? obj1(c, "anyOf", arr2(c, absent(c, p), yes)) : NULL;
            } else {
                err_set(c->e, ERR_INVALID, "%s \"%.80s\" must be a schema%s", name, p,
                        kw ? " or an array of names" : "");
                return NULL;
            }
            if (!alt || json_array_append(conds, alt)) return js_oom(c), NULL;
        }
        json_object_del(s2, name);
        if (kw && json_object_size(keep_arrays) && json_object_set(s2, "dependencies", keep_arrays))
            return js_oom(c), NULL;
    }
    json_t *names = json_object_get(s, "propertyNames");
    if (!has_names) json_object_del(s2, "propertyNames");
    else if (names && fold_property_names(c, s2, names)) return NULL;
    if (json_array_size(conds)) {
        json_t *all = json_object_get(s2, "allOf");
        json_t *na = keep(c, json_is_array(all) ? json_copy(all) : json_array());
        if (!na || json_array_extend(na, conds) || json_object_set(s2, "allOf", na))
            return js_oom(c), NULL;
    }
    return c->oom ? NULL : s2;
}

json_t *js_oneof_rewrite(struct js *c, json_t *alts, const bool *overlap, int n)
{
    json_t *any = keep(c, json_array());
    if (!any) return NULL;
    for (int i = 0; i < n; i++) {
        json_t *all = keep(c, json_array());
        if (!all || json_array_append(all, json_array_get(alts, (size_t)i))) return js_oom(c), NULL;
        for (int j = 0; j < n; j++) {
            if (j == i || !overlap[i * n + j]) continue;
            json_t *nj = negate_if(c, json_array_get(alts, (size_t)j));
            if (!nj) return NULL;
            if (json_array_append(all, nj)) return js_oom(c), NULL;
        }
        json_t *one = json_array_size(all) == 1 ? json_array_get(all, 0) : obj1(c, "allOf", all);
        if (!one || json_array_append(any, one)) return js_oom(c), NULL;
    }
    return obj1(c, "anyOf", any);
}

json_t *js_negate_cond(struct js *c, json_t *cond)
{
    return negate_if(c, cond);
}
