/* faultsim — see faultsim.h. The __wrap_ / __real_ pairs are the linker's --wrap convention:
 * only a binary linked with those flags (the unit tests) pulls this object in. */
#include "base/faultsim.h"

#include <jansson.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t sz);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t al, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);

/* atomics: the engine's thread pool may allocate while a walk runs */
static long fs_target; /* 0 = disarmed */
static long fs_seen;
static int fs_hit;
static int fs_held; /* faultsim_hold: allocations pass through uncounted */
void (*faultsim_on_fire)(void);

void faultsim_arm(long n)
{
    __atomic_store_n(&fs_seen, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&fs_hit, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&fs_target, n, __ATOMIC_SEQ_CST);
}

void faultsim_disarm(void)
{
    __atomic_store_n(&fs_target, 0, __ATOMIC_SEQ_CST);
}
bool faultsim_fired(void)
{
    return __atomic_load_n(&fs_hit, __ATOMIC_SEQ_CST) != 0;
}
void faultsim_hold(bool on)
{
    __atomic_store_n(&fs_held, on ? 1 : 0, __ATOMIC_SEQ_CST);
}
long faultsim_count(void)
{
    return __atomic_load_n(&fs_seen, __ATOMIC_SEQ_CST);
}

/* true when this allocation is the one to fail */
static bool fs_fail(void)
{
    long t = __atomic_load_n(&fs_target, __ATOMIC_RELAXED);
    if (t == 0 || __atomic_load_n(&fs_held, __ATOMIC_RELAXED)) return false;
    if (__atomic_add_fetch(&fs_seen, 1, __ATOMIC_SEQ_CST) != t) return false;
    __atomic_store_n(&fs_hit, 1, __ATOMIC_SEQ_CST);
    if (faultsim_on_fire) faultsim_on_fire();
    return true;
}

void *__wrap_malloc(size_t n)
{
    return fs_fail() ? NULL : __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t sz)
{
    return fs_fail() ? NULL : __real_calloc(n, sz);
}
void *__wrap_realloc(void *p, size_t n)
{
    return fs_fail() ? NULL : __real_realloc(p, n);
}
void *__wrap_aligned_alloc(size_t al, size_t n)
{
    return fs_fail() ? NULL : __real_aligned_alloc(al, n);
}
char *__wrap_strdup(const char *s)
{
    return fs_fail() ? NULL : __real_strdup(s);
}
char *__wrap_strndup(const char *s, size_t n)
{
    return fs_fail() ? NULL : __real_strndup(s, n);
}

static void *fs_json_malloc(size_t n)
{
    return __wrap_malloc(n);
}
static void fs_json_free(void *p)
{
    free(p);
}

void faultsim_route_jansson(void)
{
    json_set_alloc_funcs(fs_json_malloc, fs_json_free);
}
