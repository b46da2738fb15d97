/* oom_replay.c - a fuzz harness's inputs replayed with allocation failures.
 *
 *   test_oom_http DIR_OR_FILE...     (fuzz_http_conn's harness)
 *   test_oom_httpc DIR_OR_FILE...    (fuzz_httpc_response's)
 *   test_oom_h2 DIR_OR_FILE...       (fuzz_h2's)
 *   test_oom_grpc_codec DIR_OR_FILE... (fuzz_grpc_codec's)
 *   test_oom_llmstream DIR_OR_FILE... (fuzz_llmstream's)
 *
 * Each input runs once counting its allocations (n), then n more times with
 * the k-th allocation failing, k = 1..n. The harness (a tests/fuzz target, its
 * LLVMFuzzerTestOneInput) checks its own invariants after each run and
 * aborts when one breaks: every accepted request answered or its connection
 * closed, no connection, socket or pending answer left behind. Built with
 * ASan (make test-asan), LeakSanitizer also reports anything a failure
 * path forgot to free. Exit 0 when every run held. */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/oom/failalloc.h"

/* Not every harness has one. */
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct totals {
    long inputs, runs, fired;
};

/* What runs now, for the report when a harness aborts. */
static const char *now_path;
static long now_k;

static void on_abort(int sig)
{
    fprintf(stderr, "oom_replay: the harness aborted on %s with allocation %ld failing "
            "(0: none)\n", now_path ? now_path : "?", now_k);
    signal(sig, SIG_DFL);
    raise(sig);
}

static int replay_file(const char *path, struct totals *tot)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    static uint8_t data[1 << 20];
    size_t n = fread(data, 1, sizeof data, f);
    fclose(f);
    now_path = path;
    now_k = 0;
    failalloc_arm(0);
    LLVMFuzzerTestOneInput(data, n);
    long allocs = failalloc_count();
    for (long k = 1; k <= allocs; k++) {
        now_k = k;
        failalloc_arm(k);
        LLVMFuzzerTestOneInput(data, n);
        tot->fired += failalloc_fired();
        tot->runs++;
    }
    failalloc_arm(0);
    tot->inputs++;
    return 0;
}

static int replay(const char *path, struct totals *tot)
{
    struct stat st;
    if (stat(path, &st) < 0) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode))
        return replay_file(path, tot);
    struct dirent **names;
    int n = scandir(path, &names, NULL, alphasort);   /* sorted: the same order each run */
    if (n < 0) {
        perror(path);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.' && rc == 0) {
            char full[4096];
            snprintf(full, sizeof full, "%s/%s", path, names[i]->d_name);
            rc = replay(full, tot);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    signal(SIGABRT, on_abort);
    failalloc_install();
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    struct totals tot = {0};
    for (int i = 1; i < argc; i++)
        if (replay(argv[i], &tot) < 0)
            return 1;
    printf("%ld inputs, %ld runs with one allocation failing (%ld failures injected): every "
           "invariant held\n", tot.inputs, tot.runs, tot.fired);
    return tot.inputs > 0 ? 0 : 1;
}
