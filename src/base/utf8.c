/* utf8 — see utf8.h. */
#include "base/utf8.h"

int utf8_encode(uint32_t cp, char out[UTF8_MAX])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t utf8_incomplete_tail(const char *s, size_t n)
{
    /* Walk back over at most 3 continuation bytes to the lead byte. */
    size_t k = 0;
    while (k < n && k < 4 && ((unsigned char)s[n - 1 - k] & 0xC0) == 0x80)
        k++;
    if (k == n) return 0; /* only continuation bytes: invalid, let them through */
    unsigned char lead = (unsigned char)s[n - 1 - k];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (lead < 0x80 || lead >= 0xF8) need = 1;
    return k + 1 < need ? k + 1 : 0;
}
