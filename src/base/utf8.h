/* utf8 — the tree's UTF-8 helpers (one encoder, not a copy per module).
 *
 * utf8_encode writes the UTF-8 form of one code point; it does not judge the code point (a
 * caller that must refuse surrogates or values past U+10FFFF checks before calling: the regex
 * and grammar compilers encode surrogate range ends on purpose). */
#ifndef LMS_BASE_UTF8_H
#define LMS_BASE_UTF8_H

#include <stddef.h>
#include <stdint.h>

#define UTF8_MAX 4 /* bytes of the longest sequence */

/* Writes cp (0..0x1FFFFF) as 1..4 bytes into out and returns the count. */
int utf8_encode(uint32_t cp, char out[UTF8_MAX]);

/* Length of a trailing incomplete UTF-8 sequence of s[0..n) (0..3): the bytes to hold back so
 * that what goes out ends on a character boundary. Stray continuation bytes are not held. */
size_t utf8_incomplete_tail(const char *s, size_t n);

#endif
