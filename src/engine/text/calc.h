/* calc — nanochat's calculator tool (docs/nanochat.md "The calculator"), as its engine's
 * use_calculator decides and Python's eval computes, without running any code: a small
 * evaluator of exactly the expressions that function lets through.
 *
 *  - commas are removed first;
 *  - arithmetic: only the characters 0-9 * + - / . ( ) and space, no "**": integers (int64),
 *    floats, + - * / //, unary + -, parentheses, with Python's results (int / int is a float,
 *    // floors, float formatting as Python's str()); division by zero gives no answer;
 *  - strings: only letters, digits, quotes, ( ) . _ and space, none of nanochat's dangerous
 *    words (case-insensitive), and ".count(" somewhere: string literals (prefixes r u f,
 *    adjacent literals concatenated), parentheses, the methods count(sub), lower(), upper(),
 *    strip(), lstrip(), rstrip();
 *  - anything else (a name, a call nanochat's eval would reject or that this subset lacks, an
 *    integer outside int64, more than CALC_MAX_LEN bytes, parentheses nested deeper than
 *    CALC_MAX_DEPTH) gives no answer, as nanochat gives None for what fails to evaluate.
 * Linear in the input; pure; any thread. */
#ifndef LMS_ENGINE_CALC_H
#define LMS_ENGINE_CALC_H

#include <stddef.h>

#include "base/buf.h"

#define CALC_MAX_LEN 4096
#define CALC_MAX_DEPTH 200 /* CPython's parser refuses deeper parentheses */

/* Evaluates expr[0..n) (not NUL-terminated). 1: str(value) appended to out; 0: no answer (out
 * untouched); -1: out of memory. */
int calc_eval(const char *expr, size_t n, struct buf *out);

#endif
