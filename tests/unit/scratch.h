/* scratch.h - where a unit test puts its scratch files: a mkstemp/mkdtemp
 * template under $TMPDIR (else /tmp), as the benchmark scripts do, so a
 * machine whose /tmp is small or read-only can point the tests elsewhere.
 * Header-only: each test is one binary. */
#ifndef BG_TEST_SCRATCH_H
#define BG_TEST_SCRATCH_H

#include <stdio.h>
#include <stdlib.h>

/* "<TMPDIR>/bg-<name>-XXXXXX" into out. */
static inline void test_scratch_template(char *out, size_t cap, const char *name)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(out, cap, "%s/bg-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
}

/* Removes a scratch folder and what it holds: 0, or -1. */
static inline int test_scratch_remove(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

#endif
