/* work.c - see work.h. */
#include "batcher/work.h"

#include <stdio.h>

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
}

int batch_offline_rows(const struct batch *b)
{
    int n = 0;
    for (const struct infer_item *it = b->head; it; it = it->next)
        if (it->offline)
            n += it->rows;
    return n;
}
