/* jscratch.h - a bump arena that jansson allocates from while an IO thread
 * decodes one request body.
 *
 * A KServe JSON body becomes one jansson value per number: about 30 malloc
 * and free calls for even a one-row request, interleaved with the request's
 * own longer-lived allocations. That churn costs CPU on the IO thread and
 * scatters the longer-lived chunks over more heap pages, which the soak saw
 * as RSS creeping while the memory in use stayed flat. Between
 * jscratch_begin and jscratch_end every jansson allocation of the calling
 * thread comes from the arena instead (frees are no-ops), and jscratch_end
 * releases it all at once, keeping the first block for the next request.
 *
 * jansson's allocator hook is process-wide and takes no context, so the
 * arena in use is a thread-local pointer: jansson calls on other threads,
 * and on this thread outside begin/end, use malloc as before. Nothing
 * jansson allocates inside begin/end may outlive jscratch_end (decode and
 * json_decref the document in between). */
#ifndef BG_JSCRATCH_H
#define BG_JSCRATCH_H

#include <stddef.h>

struct jscratch;

/* Routes jansson's allocations through this module. Once, before any thread
 * uses jansson. */
void jscratch_install(void);

/* An arena whose first block holds block_bytes; NULL when out of memory. */
struct jscratch *jscratch_new(size_t block_bytes);
void jscratch_free(struct jscratch *s);

/* This thread's jansson allocations come from s until jscratch_end(s); a
 * NULL s does nothing (plain malloc). */
void jscratch_begin(struct jscratch *s);
void jscratch_end(struct jscratch *s);

/* Bytes handed out since the last begin (tests). */
size_t jscratch_used(const struct jscratch *s);

#endif
