/* family — one descriptor per model family: every convention of the family's chat format that
 * the serving layer needs, so serve/ reads it instead of hard-coding any family's markers
 * (docs/families.md). A descriptor lives next to its renderer (chat_<family>.c) and is listed
 * once in family.c's registry; adding a family touches its own files and that line only.
 *
 * What a descriptor says:
 *  - the renderer (chat_render dispatches on it) and the template fingerprints it reproduces;
 *  - think markers: the reply may open with `open` … `close` (reasoning), or both NULL (none);
 *  - the tool-call convention: the style of a call region, its markers, and the builder of the
 *    forced-call grammar (tool_choice required / a named tool) in the same shape;
 *  - end-of-turn token texts (resolved to ids against the vocabulary at load);
 *  - recommended sampling settings, with and without reasoning (a GGUF's general.sampling.*
 *    keys override them where present: the file speaks for its own weights);
 *  - capabilities: grammar, reasoning, stop strings, system role, KV reuse.
 *
 * Markers hold no whitespace (the reply scanners treat whitespace next to them as layout).
 * Descriptors are immutable statics; any thread. */
#ifndef LMS_ENGINE_FAMILY_H
#define LMS_ENGINE_FAMILY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/text/chat.h"

struct family_markers {
    const char *open, *close; /* both NULL: the family has no such region */
};

enum family_tool_style {
    FAMILY_TOOLS_NONE,        /* no tool-call convention: tool fields are refused (R-MAP-3) */
    FAMILY_TOOLS_JSON_REGION, /* open {"name": …, "arguments": {…}} close (hermes: qwen3) */
    /* open PREFIX NAME{key:value,…} close: keys bare, strings between syntax.quote markers
     * (raw, no escapes), numbers / true / false / null bare, nested {…} and […] (gemma4) */
    FAMILY_TOOLS_CALL_DICT,
    /* open \n FN_OPEN NAME>\n (PARAM_OPEN KEY>\nVALUE\nPARAM_CLOSE\n)* FN_CLOSE\n close: a
     * string value raw, any other value as JSON (Qwen3.5 / Qwen3-Coder's XML calls) */
    FAMILY_TOOLS_XML_PARAMS,
    FAMILY_TOOL_STYLE_COUNT
};

struct family_caps {
    bool grammar;     /* token-level constraints can drive its replies */
    bool reasoning;   /* think markers and a reasoning switch in the template */
    bool stop;        /* stop strings */
    bool system_role; /* the template renders a system message */
    bool kv_reuse;    /* the KV cache of a prefix can be reused (plain causal cache) */
};

/* Recommended settings (R-MAP-2); top_k 0 and top_p 1 = off, min_p 0 = off. */
struct family_sampling {
    float temperature;
    int top_k;
    float top_p;
    float min_p;
};

/* One candidate of a forced call, as the builder needs it: the name as a JSON string literal
 * (the template's tojson form) and the arguments' JSON Schema as compact JSON text; `name` is
 * the raw name (appended field). */
struct family_tool {
    const char *json_name;
    const char *schema;
    const char *name;
};

/* The inside of a call region for the styles that are not a JSON region (docs/tools.md,
 * "Call styles"). Markers hold no whitespace except where the style says so. */
struct family_tool_syntax {
    /* FAMILY_TOOLS_CALL_DICT: what precedes the name ("call:") and the string delimiter */
    const char *prefix, *quote;
    /* FAMILY_TOOLS_XML_PARAMS: "<function=" NAME ">" … "</function>", "<parameter=" KEY ">" …
     * "</parameter>" (the '>' after a name or key is part of the style, not a field) */
    const char *fn_open, *fn_close, *param_open, *param_close;
};

typedef int (*family_render_fn)(const struct chat_msg *, int, const struct chat_prompt_opts *,
                                struct chat_prompt *, struct err *);
/* Appends the lark source (llguidance dialect) of "exactly one call to one of tools[0..n)" in
 * the family's call shape, n >= 1, names and schemas already checked. 0, or -1 on OOM. */
typedef int (*family_forced_fn)(const struct family_tool *tools, int n, struct buf *out);

/* A tool the server runs inside a reply (nanochat's calculator): when the model emits the token
 * call.open, the tokens up to call.close are the call; run gets their decoded bytes and may
 * answer, and then result.open, the answer tokenized as plain text, and result.close are forced
 * into the reply as if generated (serve/inline_tool.h). */
struct family_inline_tool {
    struct family_markers call, result; /* special-token texts */
    /* 1 with the answer appended to out, 0 for no answer (nothing is forced), -1 on OOM */
    int (*run)(const char *call, size_t n, struct buf *out);
};

struct family {
    const char *name;
    const char *const *archs; /* GGUF general.architecture values it serves, NULL-terminated */
    family_render_fn render;
    uint64_t templates[4]; /* FNV-1a 64 of the chat_template texts render reproduces, 0-ended */
    struct family_caps caps;
    struct family_markers think;
    enum family_tool_style tool_style;
    struct family_markers tool_call;
    family_forced_fn forced_call; /* NULL when tool_style is NONE */
    const char *const *end_of_turn; /* token texts that end a reply, NULL-terminated */
    struct family_sampling sampling, sampling_think;
    const struct family_inline_tool *inline_tool; /* NULL: none */
    /* With reasoning on, the generation prompt ends with think.open already (Qwen3.5's
     * `<think>\n`): the reply starts inside the reasoning section, not at its head. */
    bool think_primed;
    struct family_tool_syntax tool_syntax; /* the call styles other than JSON_REGION */
};

/* The family serving GGUF architecture `arch`, or NULL. */
const struct family *family_find(const char *arch);
/* NULL when the family has no think markers, else its markers. */
const struct family_markers *family_think(const struct family *f);
/* NULL when the family has no tool-call convention, else its call-region markers. */
const struct family_markers *family_tool_markers(const struct family *f);

/* The marker texts of f's call style that a vocabulary may hold as single special tokens, in a
 * fixed order (the bit order of a backend's tool_specials): 0 tool_call.open, 1 tool_call.close,
 * 2 syntax.quote (CALL_DICT). Returns how many (<= FAMILY_TOOL_MARKS); NULL entries are absent. */
#define FAMILY_TOOL_MARKS 3
int family_tool_marker_texts(const struct family *f, const char *out[FAMILY_TOOL_MARKS]);

/* Appends s[0..n) as the inside of a lark string literal ("…"): backslash, quote and control
 * bytes escaped, other bytes (UTF-8 included) verbatim. For the forced-call builders. */
int family_lark_str(struct buf *b, const char *s, size_t n);

struct gguf;
struct sampler_params;
/* Neutral sampler settings (sampler_params_init) with fs's recommended ones, then the file's own
 * general.sampling.{temp,top_k,top_p,min_p} where g (may be NULL) has them in range (llama.cpp's
 * keys, any numeric type; one setting for both reasoning modes). family_sampling.c. */
void family_sampling_params(const struct family_sampling *fs, const struct gguf *g,
                            struct sampler_params *out);

extern const struct family family_qwen3;
extern const struct family family_qwen35; /* chat_qwen35.c */
extern const struct family family_gemma4; /* chat_gemma4.c */
extern const struct family family_nanochat;

#endif
