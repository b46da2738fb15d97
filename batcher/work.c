/* work.c - see work.h. */
#include "batcher/work.h"

#include <stdio.h>
#include <string.h>

#include "common/log.h"

int work_complete(struct infer_item *it, int status, const char *msg)
{
    if (atomic_exchange(&it->ended, true)) {
        /* Nothing of the item is read: its first end may be freeing it. */
        log_error("internal error: a request was answered twice (the second time with status "
                  "%d); the second answer is dropped", status);
        return -1;
    }
    it->status = status;
    if (msg)
        snprintf(it->error, sizeof it->error, "%s", msg);
    it->complete(it);   /* may free it */
    return 0;
}

void work_complete_list(struct infer_item *it, int status, const char *msg)
{
    while (it) {
        struct infer_item *next = it->next;
        it->next = NULL;
        work_complete(it, status, msg);
        it = next;
    }
}

void batch_complete(struct batch *b)
{
    struct infer_item *it = b->head, *next;
    for (; it; it = next) {
        next = it->next;   /* complete() may free it */
        work_complete(it, it->status, NULL);
    }
    b->head = NULL;
    b->nitems = b->rows = 0;
    b->tokens = b->tokens_sq = 0;
    b->max_len = 0;
}

int batch_offline_rows(const struct batch *b)
{
    int n = 0;
    for (const struct infer_item *it = b->head; it; it = it->next)
        if (it->offline)
            n += it->rows;
    return n;
}

int64_t batch_item_ns(const struct batch *b, const struct infer_item *it, int64_t exec_ns)
{
    /* A batch put together by hand (tests) may not have its tokens summed. */
    int64_t total = b->tokens > 0 ? b->tokens : b->rows;
    int64_t own = b->tokens > 0 ? work_tokens(it) : it->rows;
    return total > 0 ? exec_ns * own / total : 0;
}

void batch_parts(const struct batch *b, uint32_t part[2][WORK_TENANTS_MAX])
{
    memset(part, 0, sizeof(uint32_t[2][WORK_TENANTS_MAX]));
    for (const struct infer_item *it = b->head; it && b->rows > 0; it = it->next) {
        int t = it->tenant >= 0 && it->tenant < WORK_TENANTS_MAX ? it->tenant : 0;
        part[it->offline ? 1 : 0][t] += (uint32_t)batch_item_ns(b, it, BATCH_PARTS_SCALE);
    }
}

void batch_sum(struct batch *b)
{
    int64_t tokens = 0, sq = 0;
    bool all_sq = true;
    int max_len = 0;
    for (const struct infer_item *it = b->head; it; it = it->next) {
        tokens += work_tokens(it);
        sq += it->tokens_sq;
        all_sq &= it->tokens_sq > 0;
        if (work_max_len(it) > max_len)
            max_len = work_max_len(it);
    }
    b->tokens = tokens;
    b->tokens_sq = all_sq ? sq : 0;   /* a partial sum would understate the term */
    b->max_len = max_len;
}

double batch_padding(const struct batch *b)
{
    int64_t cells = (int64_t)b->rows * b->max_len;
    if (cells <= 0 || b->tokens >= cells)
        return 0;
    return 1.0 - (double)b->tokens / (double)cells;
}
