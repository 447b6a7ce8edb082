/* gbnf — llama.cpp's GBNF grammar format translated to lark (llguidance dialect), which
 * grammar_compile then compiles like any lark grammar (GRAMMAR_GBNF). Design: docs/grammar.md
 * "GBNF".
 *
 * Input: rules `name ::= alternatives`, `root` the start; literals "…" and classes […] / [^…]
 * with llama.cpp's escapes (\n \r \t \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH), `.` (any character),
 * groups, `|`, `* + ? {m} {m,} {m,n} {,n}`, `#` comments. A rule's body ends at a line break
 * outside parentheses (except right after `::=` or `|`). Parts of a rule without rule references
 * become one regex terminal each (fewer lexeme boundaries). Unsupported: token references
 * (`<…>`, `!<…>`); an error names the rule and line. Pure function; any thread. */
#ifndef LMS_GRAMMAR_GBNF_H
#define LMS_GRAMMAR_GBNF_H

#include <stddef.h>

#include "base/buf.h"
#include "base/err.h"

/* Appends the lark translation of src to out. Returns 0, or -1 with e filled (ERR_INVALID, the
 * message names the rule and line, e.g. `gbnf grammar, line 3, rule expr: undefined rule term`). */
int gbnf_to_lark(const char *src, size_t len, struct buf *out, struct err *e);

#endif
