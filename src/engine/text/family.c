/* family — the registry of model families (family.h). One line per family. */
#include "engine/text/family.h"

#include <string.h>

static const struct family *const FAMILIES[] = {
    &family_qwen3,
    &family_qwen35,
    &family_gemma4,
    &family_nanochat,
};

const struct family *family_find(const char *arch)
{
    if (!arch) return NULL;
    for (size_t i = 0; i < sizeof FAMILIES / sizeof FAMILIES[0]; i++)
        for (const char *const *a = FAMILIES[i]->archs; *a; a++)
            if (!strcmp(*a, arch)) return FAMILIES[i];
    return NULL;
}

const struct family_markers *family_think(const struct family *f)
{
    return f && f->caps.reasoning && f->think.open && f->think.close ? &f->think : NULL;
}

const struct family_markers *family_tool_markers(const struct family *f)
{
    return f && f->tool_style != FAMILY_TOOLS_NONE && f->tool_call.open && f->tool_call.close
               ? &f->tool_call
               : NULL;
}

int family_tool_marker_texts(const struct family *f, const char *out[FAMILY_TOOL_MARKS])
{
    for (int i = 0; i < FAMILY_TOOL_MARKS; i++)
        out[i] = NULL;
    if (!family_tool_markers(f)) return 0;
    out[0] = f->tool_call.open;
    out[1] = f->tool_call.close;
    if (f->tool_style == FAMILY_TOOLS_CALL_DICT) out[2] = f->tool_syntax.quote;
    return FAMILY_TOOL_MARKS;
}

int family_lark_str(struct buf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int rc;
        if (c == '\\' || c == '"')
            rc = buf_printf(b, "\\%c", c);
        else if (c == '\n')
            rc = buf_puts(b, "\\n");
        else if (c == '\r')
            rc = buf_puts(b, "\\r");
        else if (c == '\t')
            rc = buf_puts(b, "\\t");
        else if (c < 0x20)
            rc = buf_printf(b, "\\x%02x", c);
        else
            rc = buf_append(b, s + i, 1);
        if (rc < 0) return -1;
    }
    return 0;
}
