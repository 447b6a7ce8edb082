/* hash — one 64-bit non-cryptographic hash for fingerprints and checksums (kv sidecars).
 *
 * Word-at-a-time multiply-xorshift over little-endian 8-byte words, the tail zero-padded and the
 * total length mixed in at the end. Streaming (hash64_update over any split of the input) gives
 * exactly hash64() of the concatenation. Detects corruption; not a seal against an adversary. */
#ifndef LMS_BASE_HASH_H
#define LMS_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

struct hash64 {
    uint64_t h, len;
    uint8_t tail[8];
    unsigned n_tail;
};

void hash64_init(struct hash64 *s, uint64_t seed);
void hash64_update(struct hash64 *s, const void *p, size_t n);
uint64_t hash64_final(const struct hash64 *s); /* does not change s */
uint64_t hash64(const void *p, size_t n, uint64_t seed);

#endif
