/* jsonschema_ir — the intermediate form of the JSON Schema compiler, shared by its two passes:
 * jsonschema.c lowers schema objects to IR nodes (`struct sn`) and drives the compile;
 * jsonschema_emit.c writes lark rules for IR nodes. Private to src/grammar/. */
#ifndef LMS_GRAMMAR_JSONSCHEMA_IR_H
#define LMS_GRAMMAR_JSONSCHEMA_IR_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "grammar/jsonschema_internal.h"


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
    bool bigints; /* the text had integers beyond 64 bits: markers (jsonschema_json.h) */
    /* oneOf context: constraints known to hold for the instance of ctx_node (the enclosing
     * schema's sibling keywords, earlier allOf members), through applicators only */
    struct sn *ctx[16]; /* visible: ctx[ctx_base .. n_ctx) */
    int n_ctx, ctx_base, inline_depth;
    json_t *ctx_node;
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
    int draft;     /* root $schema: 3, 4, 6 or 7; 0 = 2019-09, 2020-12 or none */
    char wso[64];  /* "r_ws?" (pretty) or "": what may follow `{ [` and precede `} ]` */
};

/* ---- jsonschema.c ---- */
/* arena allocations (freed with the compile) */
void *js_alloc(struct js *c, size_t n);
char *js_strdup(struct js *c, const char *s, size_t n);
json_t *js_keep(struct js *c, json_t *v);
int js_oom(struct js *c);
struct sn *sn_new(struct js *c, unsigned types);
bool sn_is_any(const struct sn *s);
bool sn_unsat(const struct sn *s);
bool js_in_list(const char *const *l, const char *k);
/* the def of a $ref (NULL: none yet) */
struct def *js_find_def(struct js *c, const char *ref);
/* a $ref node's target IR (lowered on first use); other nodes as they are */
struct sn *js_resolve(struct js *c, struct sn *a);
/* allOf of two IR nodes (NULL with c->e set when not expressible) */
struct sn *js_intersect(struct js *c, struct sn *a, struct sn *b);
/* whether ECMA pattern pat matches subj somewhere (PCRE2): 1, 0, or -1 */
int js_pattern_matches(const char *pat, const char *subj, size_t n);
/* whether JSON value v satisfies IR node s (enum/const filtering, oneOf disjointness) */
bool js_value_ok(struct js *c, struct sn *s, json_t *v, int depth);
/* the IR node of a schema (NULL with c->e set) */
struct sn *js_lower(struct js *c, json_t *s);
/* ---- jsonschema_cond.c ---- */
/* s with if/then/else, dependentSchemas, schema-valued dependencies and propertyNames rewritten
 * into keywords the compiler implements (s itself when it has none); NULL with c->e set. */
json_t *js_rewrite_cond(struct js *c, json_t *s);
/* oneOf [A_0..A_n-1] as anyOf [allOf [A_i, not A_j for each j overlapping i]] (overlap[i*n+j]:
 * the pair may overlap), the negations built as for `if` (discriminator forms, and properties
 * of a bare type); NULL with c->e set when one cannot be. */
json_t *js_oneof_rewrite(struct js *c, json_t *alts, const bool *overlap, int n);
/* not cond for the discriminator forms (as `if`'s negation), NULL with c->e set otherwise. */
json_t *js_negate_cond(struct js *c, json_t *cond);
/* ---- jsonschema_emit.c ---- */
/* the lark expression (a rule name or literal) matching s, its rules added to c->out */
char *js_emit(struct js *c, struct sn *s);
#endif
