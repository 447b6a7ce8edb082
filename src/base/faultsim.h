/* faultsim — allocation-failure injection for tests (as SQLite's faultsim; docs/faultsim.md).
 *
 * The unit-test binary is linked with -Wl,--wrap=malloc,calloc,realloc,strdup,strndup,
 * aligned_alloc, so every allocation made by the project's own objects goes through the counter
 * here; jansson's allocations are routed to it with faultsim_route_jansson(). Disarmed (the
 * default) the wrappers only pass through. Armed with n, the n-th counted allocation from then
 * on returns NULL (once; later ones succeed again). Nothing outside the unit-test binary
 * references this file, so the server and tools are built and linked exactly as before. */
#ifndef LMS_BASE_FAULTSIM_H
#define LMS_BASE_FAULTSIM_H

#include <stdbool.h>

void faultsim_arm(long n);  /* fail the n-th allocation from now (n >= 1) */
void faultsim_disarm(void); /* stop failing and counting */
bool faultsim_fired(void);  /* the armed allocation was reached (and failed) */
long faultsim_count(void);
void faultsim_hold(bool on);
    /* true: allocations pass uncounted (set-up inside a walked op) */ /* allocations counted since
                                                                          the last arm */
void faultsim_route_jansson(void);
/* called when the armed allocation fails (tests set it to print a stack trace, to find the site) */
extern void (*faultsim_on_fire)(void); /* json_set_alloc_funcs to the counted allocator */

#endif
