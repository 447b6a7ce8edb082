/* mem — memory the process is about to write (mem.h). */
#define _GNU_SOURCE
#include "base/mem.h"

#include <stdint.h>
#include <sys/mman.h>

int mem_populate(void *p, size_t bytes)
{
#ifdef MADV_POPULATE_WRITE
    if (!bytes) return 0;
    const uintptr_t pg = 4096;
    uintptr_t a = (uintptr_t)p & ~(pg - 1), b = ((uintptr_t)p + bytes + pg - 1) & ~(pg - 1);
    return madvise((void *)a, b - a, MADV_POPULATE_WRITE) ? -1 : 0;
#else
    (void)p, (void)bytes;
    return -1;
#endif
}
