/* kvpool — the adoption plan (rules in docs/kv-cache.md). */
#include "serve/kvpool.h"

const char *const KVPLAN_NAMES[KVPLAN_KIND_COUNT] = {
    [KVPLAN_COLD] = "cold", [KVPLAN_ADOPT] = "adopt", [KVPLAN_COPY] = "copy",
    [KVPLAN_RESTORE] = "restore"};

size_t kv_lcp(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* lcp, or 0 below the similarity gate */
static size_t gated(size_t lcp, size_t n) { return (double)lcp >= KVPOOL_GATE * (double)n ? lcp : 0; }

/* An empty slot, else the least recently used one other than avoid (when there is another);
 * never a busy one. */
static int target(const struct kvslot *s, int n_slots, int avoid)
{
    int n_free = 0;
    for (int i = 0; i < n_slots; i++) n_free += !s[i].busy;
    for (int i = 0; i < n_slots; i++)
        if (s[i].n_shadow == 0 && i != avoid && !s[i].busy) return i;
    int best = -1;
    for (int i = 0; i < n_slots; i++) {
        if (s[i].busy || (i == avoid && n_free > 1)) continue;
        if (best < 0 || s[i].used < s[best].used) best = i;
    }
    return best;
}

void kvpool_plan(const struct kvslot *slots, int n_slots, const struct kvcand *disk, int n_disk,
                 const int32_t *t, size_t n, struct kvplan *out)
{
    int r = -1, d = -1;
    size_t lr = 0, ld = 0, lcp[n_slots > 0 ? n_slots : 1];
    for (int i = 0; i < n_slots; i++) {
        lcp[i] = kv_lcp(slots[i].shadow, slots[i].n_shadow, t, n);
        size_t g = gated(lcp[i], n);
        if (g && (r < 0 || g > lr || (g == lr && slots[i].used > slots[r].used))) {
            r = i;
            lr = g;
        }
    }
    for (int i = 0; i < n_disk; i++) {
        size_t g = gated(kv_lcp(disk[i].shadow, disk[i].n, t, n), n);
        if (g && (d < 0 || g > ld || (g == ld && disk[i].used > disk[d].used))) {
            d = i;
            ld = g;
        }
    }
    *out = (struct kvplan){.kind = KVPLAN_COLD, .src = -1, .disk = -1};
    if (d >= 0 && ld > lr) {
        out->kind = KVPLAN_RESTORE;
        out->disk = d;
        out->dst = target(slots, n_slots, r);
        out->keep = ld;
    } else if (r >= 0 && lr >= slots[r].head && !slots[r].busy) {
        out->kind = KVPLAN_ADOPT;
        out->src = out->dst = r;
        out->keep = lr;
    } else if (r >= 0) {
        out->kind = KVPLAN_COPY;
        out->src = r;
        out->dst = target(slots, n_slots, r);
        out->keep = lr;
    } else {
        out->dst = target(slots, n_slots, -1);
    }
    if (out->keep > n - 1) out->keep = n - 1;
    const struct kvslot *ds = &slots[out->dst];
    size_t own = lcp[out->dst] < out->keep ? lcp[out->dst] : out->keep;
    out->dst_kept = own;
    out->spill = ds->n_shadow > 0 && own * 2 < ds->n_shadow;
}
