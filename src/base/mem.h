/* mem — memory the process is about to write. */
#ifndef LMS_BASE_MEM_H
#define LMS_BASE_MEM_H

#include <stddef.h>

/* Populates the pages of [p, p + bytes) (the pages it touches, rounded outward) with one
 * madvise(MADV_POPULATE_WRITE), so that first writes do not take a page fault each: ~10 us a
 * fault on the paravirtualized VMs we measure on. Contents are unchanged. Returns 0, or -1 when
 * the kernel cannot (before Linux 5.14, or not a private writable mapping): the pages then fault
 * in on first write as before. */
int mem_populate(void *p, size_t bytes);

#endif
