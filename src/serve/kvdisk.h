/* kvdisk — the KV disk tier (R-KV-5): sidecar files under --kv-cache-dir holding a slot's token
 * shadow and rows, indexed at startup so reuse survives a restart. Format, spill / restore / LRU /
 * containment rules: docs/kv-cache.md.
 *
 * Every failure here (another model's file, a truncated or corrupted one, an unwritable directory,
 * a full disk) is logged once, here, with the file and the reason, and is not an error to the
 * caller's request: at worst the cache is lost. Worker thread only (kvdisk_open: at startup). */
#ifndef LMS_SERVE_KVDISK_H
#define LMS_SERVE_KVDISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "serve/kvpool.h"

struct model;
struct vocab;
struct kv_cache;

#define KVDISK_MAGIC "LMSKVSC"
#define KVDISK_VERSION 1
#define KVDISK_HEADER 96

/* What a sidecar must match: fingerprints and the cache geometry. */
struct kvdisk_ident {
    uint64_t model_fp, tok_hash;
    int geom[4]; /* n_layer, n_head_kv, head_dim, KT */
};

/* Fingerprints of a loaded model: hash of its GGUF bytes before the tensor data (header, metadata,
 * tensor infos) and of its vocabulary (id, type, bytes of every token). */
void kvdisk_ident_of(const struct model *m, const struct vocab *v, const struct kv_cache *probe,
                     struct kvdisk_ident *out);

struct kvdisk;

/* Opens (creating if missing) dir, checks it is writable, deletes stale temp files and indexes
 * every valid sidecar (at most max_files are kept: the least recently modified beyond that are
 * ignored, not deleted). NULL + e when the directory is unusable (the caller logs and serves
 * without the tier). */
struct kvdisk *kvdisk_open(const char *dir, int max_files, const struct kvdisk_ident *id,
                           struct err *e);
void kvdisk_free(struct kvdisk *d);

/* The index as adoption candidates (valid until the next spill / restore / free). */
int kvdisk_cands(const struct kvdisk *d, const struct kvcand **out);

/* True if a sidecar's shadow has shadow[0..n) as a prefix (it is stored already). */
bool kvdisk_contains(const struct kvdisk *d, const int32_t *shadow, size_t n);

/* Writes kv's rows [0, n) with shadow[0..n) and head as a sidecar (temp + rename), then deletes the
 * sidecars it contains and, past max_files, the least recently used. 0, or -1 (logged). */
int kvdisk_spill(struct kvdisk *d, const struct kv_cache *kv, const int32_t *shadow, size_t n,
                 size_t head);

/* Loads sidecar i into kv (shadow_out: room for its n_rows tokens). 0 with *n_out / *head_out set,
 * or -1 (logged; kv then holds 0 rows and the entry is dropped from the index). */
int kvdisk_restore(struct kvdisk *d, int i, struct kv_cache *kv, int32_t *shadow_out,
                   size_t *n_out, size_t *head_out);

/* The sidecar file path of entry i (tests, logs). */
const char *kvdisk_path(const struct kvdisk *d, int i);

#endif
