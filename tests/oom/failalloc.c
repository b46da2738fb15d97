/* failalloc.c - see failalloc.h. Single-threaded: the code under test runs
 * on the test's one thread. */
#include "tests/oom/failalloc.h"

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);

static long target, counted;
static int fired;

/* One more allocation: does it fail? */
static int fail_now(void)
{
    counted++;
    if (target > 0 && counted == target) {
        fired = 1;
        return 1;
    }
    return 0;
}

void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t k, size_t n) { return fail_now() ? NULL : __real_calloc(k, n); }
char *__wrap_strdup(const char *s) { return fail_now() ? NULL : __real_strdup(s); }
char *__wrap_strndup(const char *s, size_t n) { return fail_now() ? NULL : __real_strndup(s, n); }

void *__wrap_realloc(void *p, size_t n)
{
    /* realloc(p, 0) frees: never a failure to inject. */
    if (n && fail_now())
        return NULL;
    return __real_realloc(p, n);
}

static int spare_jansson;

void failalloc_spare_jansson(int spare) { spare_jansson = spare; }

static void *lib_malloc(size_t n) { return __wrap_malloc(n); }
static void *lib_realloc(void *p, size_t n) { return __wrap_realloc(p, n); }
static void *json_malloc(size_t n) { return spare_jansson ? __real_malloc(n) : __wrap_malloc(n); }

void failalloc_install(void)
{
    event_set_mem_functions(lib_malloc, lib_realloc, free);
    json_set_alloc_funcs(json_malloc, free);
}

void failalloc_arm(long k)
{
    target = k;
    counted = 0;
    fired = 0;
}

long failalloc_count(void) { return counted; }
int failalloc_fired(void) { return fired; }
