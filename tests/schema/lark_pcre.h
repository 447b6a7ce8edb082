/* lark_pcre — TEST-ONLY translation of the lark that jsonschema.c emits into one PCRE2 pattern:
 * each rule becomes a named group in a (?(DEFINE)...) block, a rule reference becomes (?&name),
 * "literal" becomes escaped text and /regex/ is copied (the regex dialect we emit is a PCRE2
 * subset). Matching the result anchored at both ends decides membership in the grammar's
 * language (context-free semantics, no lexer), which is what the schema tests check.
 * Compile the result with PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED. Handles only the lark
 * subset jsonschema.c writes (one rule per line, "name: body"). */
#ifndef LMS_TESTS_SCHEMA_LARK_PCRE_H
#define LMS_TESTS_SCHEMA_LARK_PCRE_H

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "grammar/jsonschema_internal.h"

static inline int lark_pcre(const char *lark, struct buf *o)
{
    buf_puts(o, "(?(DEFINE)");
    const char *p = lark;
    while (*p) {
        const char *colon = strstr(p, ": ");
        if (!colon) return -1;
        buf_printf(o, "(?<%.*s>", (int)(colon - p), p);
        p = colon + 2;
        while (*p && *p != '\n') {
            char c = *p;
            if (c == ' ')
                p++;
            else if (c == '"') {
                p++;
                buf_puts(o, "(?:");
                while (*p && *p != '"') {
                    if (*p == '\\') p++;
                    unsigned char ch = (unsigned char)*p;
                    if (ch < 0x80 && !((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') ||
                                       (ch >= 'A' && ch <= 'Z')))
                        buf_printf(o, "\\x{%x}", ch);
                    else
                        buf_append(o, p, 1);
                    p++;
                }
                buf_puts(o, ")");
                p++;
            } else if (c == '/') {
                p++;
                buf_puts(o, "(?:");
                while (*p && *p != '/') {
                    if (*p == '\\') {
                        buf_append(o, p, 2);
                        p += 2;
                    } else if (!strncmp(p, "(?T)", 4)) {
                        p += 4; /* a tick: the lookahead below counts the characters */
                    } else if (!strncmp(p, "(?L", 3)) {
                        /* length region (jsonschema.c writes one only as a string's whole
                         * content, before its closing quote): a lookahead on the length;
                         * PCRE2 counts stop at 65535 (above: unbounded, checker only) */
                        long lo = strtol(p + 3, (char **)&p, 10), hi = -1;
                        p++; /* ',' */
                        if (*p != ':') hi = strtol(p, (char **)&p, 10);
                        p++; /* ':' */
                        if (lo > 65535) lo = 65535;
                        if (hi > 65535) hi = -1;
                        if (hi < 0)
                            buf_printf(o, "(?=(?:" JSRX_CHAR "){%ld,}\")(?:", lo);
                        else
                            buf_printf(o, "(?=(?:" JSRX_CHAR "){%ld,%ld}\")(?:", lo, hi);
                    } else {
                        buf_append(o, p++, 1);
                    }
                }
                buf_puts(o, ")");
                p++;
            } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                       (c >= '0' && c <= '9')) {
                const char *q = p;
                while ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || *q == '_' ||
                       (*q >= '0' && *q <= '9'))
                    q++;
                if (c >= '0' && c <= '9')
                    buf_append(o, p, (size_t)(q - p)); /* inside {m,n} */
                else
                    buf_printf(o, "(?&%.*s)", (int)(q - p), p);
                p = q;
            } else {
                buf_append(o, p++, 1);
            }
        }
        buf_puts(o, ")");
        if (*p) p++;
    }
    buf_puts(o, ")(?&start)");
    return 0;
}

#endif
