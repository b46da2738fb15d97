/* failalloc.h - allocation failure injection for tests (tests/oom/).
 *
 * A test binary linked with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,
 * --wrap=strdup,--wrap=strndup sends every allocation its own objects make
 * through here; failalloc_install also routes libevent's and jansson's. */
#ifndef BG_FAILALLOC_H
#define BG_FAILALLOC_H

#include <stddef.h>

/* Routes libevent's and jansson's allocations through the counter too.
 * Before the first libevent or jansson allocation. */
void failalloc_install(void);
/* From now on, count allocations; the k-th (1-based) fails, once. k = 0:
 * none fails (counting only). */
void failalloc_arm(long k);
/* Allocations counted since the last arm. */
long failalloc_count(void);
/* Whether the armed failure happened. */
int failalloc_fired(void);

#endif
