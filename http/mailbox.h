/* mailbox.h - hands work to an IO thread from any thread.
 *
 * Push under a mutex; the IO thread is woken (event_active) only when the
 * list goes from empty to non-empty; it drains by swapping the whole list
 * out. Messages are intrusive (the link lives in the sender's struct), so a
 * handoff allocates nothing. Messages run in the order they were posted. */
#ifndef BG_MAILBOX_H
#define BG_MAILBOX_H

struct event_base;

struct mailbox_msg {
    struct mailbox_msg *next;
    void (*fn)(struct mailbox_msg *msg);   /* runs on the mailbox's IO thread */
};

struct mailbox;

struct mailbox *mailbox_new(struct event_base *base);
/* Any thread. */
void mailbox_post(struct mailbox *mb, struct mailbox_msg *msg);
/* Runs whatever is still queued (IO thread exit), then frees. */
void mailbox_free(struct mailbox *mb);

#endif
