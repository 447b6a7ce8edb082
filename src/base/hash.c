/* hash — see hash.h. */
#include "base/hash.h"

#include <string.h>

#define H_MUL 0x9E3779B97F4A7C15ull
#define H_MUL2 0xBF58476D1CE4E5B9ull

static inline uint64_t mix_word(uint64_t h, uint64_t w)
{
    h ^= w * H_MUL2;
    h = (h << 27 | h >> 37) * H_MUL;
    return h;
}

static inline uint64_t load_le64(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    return w;
}

void hash64_init(struct hash64 *s, uint64_t seed)
{
    s->h = seed ^ 0x243F6A8885A308D3ull;
    s->len = 0;
    s->n_tail = 0;
}

void hash64_update(struct hash64 *s, const void *p, size_t n)
{
    const uint8_t *b = p;
    s->len += n;
    if (s->n_tail) {
        while (n && s->n_tail < 8) {
            s->tail[s->n_tail++] = *b++;
            n--;
        }
        if (s->n_tail < 8) return;
        s->h = mix_word(s->h, load_le64(s->tail));
        s->n_tail = 0;
    }
    uint64_t h = s->h;
    for (; n >= 8; b += 8, n -= 8) h = mix_word(h, load_le64(b));
    s->h = h;
    memcpy(s->tail, b, n);
    s->n_tail = (unsigned)n;
}

uint64_t hash64_final(const struct hash64 *s)
{
    uint64_t h = s->h;
    if (s->n_tail) {
        uint8_t t[8] = {0};
        memcpy(t, s->tail, s->n_tail);
        h = mix_word(h, load_le64(t));
    }
    h = mix_word(h, s->len);
    h ^= h >> 31;
    h *= H_MUL2;
    h ^= h >> 29;
    return h;
}

uint64_t hash64(const void *p, size_t n, uint64_t seed)
{
    struct hash64 s;
    hash64_init(&s, seed);
    hash64_update(&s, p, n);
    return hash64_final(&s);
}

uint64_t hash_fnv1a64(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

uint64_t hash_fnv1a64_str(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return h;
}
