/* mem_testlib — which pages of a range are resident, for the tests of code that populates pages
 * ahead of its first writes (mem_populate's callers). */
#ifndef LMS_TESTS_MEM_TESTLIB_H
#define LMS_TESTS_MEM_TESTLIB_H

#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Of the whole pages inside [p, p + bytes), how many are resident; *pages gets their count. */
static inline size_t resident_pages(const void *p, size_t bytes, size_t *pages)
{
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + pg - 1) & ~(pg - 1), b = ((uintptr_t)p + bytes) & ~(pg - 1);
    *pages = 0;
    if (b <= a) return 0;
    size_t np = (b - a) / pg, res = 0;
    unsigned char *vec = malloc(np);
    cr_assert(vec);
    cr_assert_eq(mincore((void *)a, b - a, vec), 0, "mincore: %s", strerror(errno));
    for (size_t i = 0; i < np; i++)
        res += vec[i] & 1;
    free(vec);
    *pages = np;
    return res;
}

#endif
