/* hash — the tree's hashes (one place, not a copy per module; STYLE.md).
 *
 * hash64: a 64-bit non-cryptographic hash for fingerprints, checksums (kv sidecars) and hash
 * tables keyed by byte strings.
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

/* FNV-1a 64 (offset basis 0xcbf29ce484222325, prime 0x100000001b3), byte at a time: for values
 * that must stay stable across builds because they are written down elsewhere (the chat-template
 * fingerprints of engine/text/chat.c, the build fingerprint) and for small hash-table keys.
 * hash_fnv1a64_str hashes a NUL-terminated string without its NUL. */
uint64_t hash_fnv1a64(const void *p, size_t n);
uint64_t hash_fnv1a64_str(const char *s);

#endif
