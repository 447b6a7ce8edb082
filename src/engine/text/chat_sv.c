/* chat_sv — string views and the few Python str methods the chat renderers' templates use
 * (chat_internal.h). */
#include <string.h>

#include "engine/text/chat_internal.h"
#include "engine/text/vocab.h"

struct chat_sv chat_sv_of(const char *s)
{
    return (struct chat_sv){s, strlen(s)};
}

bool chat_py_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

size_t chat_cp_at(const unsigned char *p, size_t n, uint32_t *cp)
{
    int l = tok_utf8_seq(p, n);
    if (l <= 0) {
        *cp = 0xfffd;
        return 1;
    }
    if (l == 1) *cp = p[0];
    else if (l == 2) *cp = ((p[0] & 0x1fu) << 6) | (p[1] & 0x3fu);
    else if (l == 3) *cp = ((p[0] & 0x0fu) << 12) | ((p[1] & 0x3fu) << 6) | (p[2] & 0x3fu);
    else *cp = ((p[0] & 0x07u) << 18) | ((p[1] & 0x3fu) << 12) | ((p[2] & 0x3fu) << 6) | (p[3] & 0x3fu);
    return (size_t)l;
}

struct chat_sv chat_sv_trim(struct chat_sv s)
{
    const unsigned char *p = (const unsigned char *)s.p;
    size_t a = 0, b = s.n;
    while (a < b) {
        uint32_t c;
        size_t l = chat_cp_at(p + a, b - a, &c);
        if (!chat_py_space(c)) break;
        a += l;
    }
    while (b > a) { /* step back to the start of the last code point */
        size_t k = b - 1;
        while (k > a && (p[k] & 0xc0) == 0x80 && b - k < 4) k--;
        uint32_t c;
        size_t l = chat_cp_at(p + k, b - k, &c);
        if (k + l != b || !chat_py_space(c)) break;
        b = k;
    }
    return (struct chat_sv){s.p + a, b - a};
}

struct chat_sv chat_sv_lstrip_nl(struct chat_sv s)
{
    while (s.n && s.p[0] == '\n') s.p++, s.n--;
    return s;
}

struct chat_sv chat_sv_rstrip_nl(struct chat_sv s)
{
    while (s.n && s.p[s.n - 1] == '\n') s.n--;
    return s;
}

const char *chat_sv_find(struct chat_sv s, const char *needle)
{
    size_t m = strlen(needle);
    if (m > s.n) return NULL;
    for (size_t i = 0; i + m <= s.n; i++)
        if (s.p[i] == needle[0] && memcmp(s.p + i, needle, m) == 0) return s.p + i;
    return NULL;
}

const char *chat_sv_find_last(struct chat_sv s, const char *needle)
{
    size_t m = strlen(needle);
    if (m > s.n) return NULL;
    for (size_t i = s.n - m + 1; i-- > 0;)
        if (s.p[i] == needle[0] && memcmp(s.p + i, needle, m) == 0) return s.p + i;
    return NULL;
}

bool chat_sv_starts(struct chat_sv s, const char *pre)
{
    size_t m = strlen(pre);
    return s.n >= m && memcmp(s.p, pre, m) == 0;
}

bool chat_sv_ends(struct chat_sv s, const char *suf)
{
    size_t m = strlen(suf);
    return s.n >= m && memcmp(s.p + s.n - m, suf, m) == 0;
}
