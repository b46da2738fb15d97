/* list.h - an intrusive, circular, doubly linked list (after libuv's queue).
 *
 * The link lives inside the element, so linking allocates nothing and an
 * element can leave a list in O(1) knowing only itself. A list head is a
 * `struct list` too; an empty head points at itself.
 *
 *   struct job { struct list link; ... };
 *   struct list jobs; list_init(&jobs);
 *   list_insert_tail(&jobs, &j->link);
 *   struct list *q;
 *   list_foreach(q, &jobs) { struct job *j = list_data(q, struct job, link); ... }
 *
 * To remove elements while walking, use list_foreach_safe. */
#ifndef BG_LIST_H
#define BG_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct list {
    struct list *next, *prev;
};

#define list_data(ptr, type, field) ((type *)((char *)(ptr) - offsetof(type, field)))

#define list_foreach(q, h) for ((q) = (h)->next; (q) != (h); (q) = (q)->next)
/* `tmp` holds the next link, so `q` may be removed (or freed) in the body. */
#define list_foreach_safe(q, tmp, h) \
    for ((q) = (h)->next, (tmp) = (q)->next; (q) != (h); (q) = (tmp), (tmp) = (q)->next)

static inline void list_init(struct list *h) { h->next = h->prev = h; }
static inline bool list_empty(const struct list *h) { return h->next == h; }
/* The first element, or NULL when empty. */
static inline struct list *list_first(const struct list *h) { return h->next == h ? NULL : h->next; }
static inline struct list *list_last(const struct list *h) { return h->prev == h ? NULL : h->prev; }
/* The element after n in h, or NULL at the end. */
static inline struct list *list_next(const struct list *h, const struct list *n)
{
    return n->next == h ? NULL : n->next;
}

static inline void list_insert_tail(struct list *h, struct list *n)
{
    n->next = h;
    n->prev = h->prev;
    n->prev->next = n;
    h->prev = n;
}

static inline void list_insert_head(struct list *h, struct list *n)
{
    n->next = h->next;
    n->prev = h;
    n->next->prev = n;
    h->next = n;
}

/* n goes in front of `at` (an element, or the head for the tail). */
static inline void list_insert_before(struct list *at, struct list *n) { list_insert_tail(at, n); }

/* Unlinks n and leaves it pointing at itself, so a second remove is harmless
 * and list_linked(n) says false. */
static inline void list_remove(struct list *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->next = n->prev = n;
}

/* n is on some list (an element initialised with list_init and not linked: false). */
static inline bool list_linked(const struct list *n) { return n->next != n; }

/* Moves every element of `from` to the tail of `to`; `from` ends empty. */
static inline void list_splice_tail(struct list *to, struct list *from)
{
    if (list_empty(from))
        return;
    from->next->prev = to->prev;
    to->prev->next = from->next;
    from->prev->next = to;
    to->prev = from->prev;
    list_init(from);
}

#endif
