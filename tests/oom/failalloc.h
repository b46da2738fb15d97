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
/* spare 1: jansson's allocations are neither counted nor failed, until
 * called again with 0. For code that parses JSON: jansson's lexer cannot
 * take a failed allocation (lex_save ignores strbuffer_append_byte's
 * failure, and lex_scan_string then walks past the end of the text it
 * saved, writing out of bounds: jansson 2.14, still so in 2.15.1), which
 * would test jansson, not us. Its writer has a milder flaw of the same
 * kind: json_dumps drops an object key whose write failed and carries on
 * (do_dump ignores dump_string's result), so what it returns may not be
 * JSON; a harness that checks the JSON we build tolerates that only when
 * failalloc_fired(). */
void failalloc_spare_jansson(int spare);
/* Allocations counted since the last arm. */
long failalloc_count(void);
/* Whether the armed failure happened. */
int failalloc_fired(void);

#endif
