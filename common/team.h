/* team.h - a fork-join team: n threads that run one function together and
 * return when all of them are done (the caller is member 0; n - 1 threads
 * are kept for the team's life). What one batch of a model needs to use
 * several cores: a forward pass is a chain of such steps, each split by
 * rows or by heads.
 *
 * Between steps the members spin briefly before sleeping, since the next
 * step comes within microseconds while a batch runs (a condition-variable
 * wake-up per step would cost more than the smaller steps), and sleep while
 * the instance waits for work. One caller at a time: a team belongs to one
 * instance worker. */
#ifndef BG_TEAM_H
#define BG_TEAM_H

struct team;

/* fn(arg, i, n) for i in 0 .. n - 1, each on its own member. */
typedef void (*team_fn)(void *arg, int i, int n);

/* A team of n members (n - 1 threads started); n <= 1 starts none and
 * team_run calls fn on the caller alone. 0, or -1 (errno set). */
int team_new(int n, struct team **out);
/* Stops and joins the threads; NULL is a no-op. */
void team_free(struct team *t);
int team_size(const struct team *t);
/* Runs fn on every member and returns when all have returned. */
void team_run(struct team *t, team_fn fn, void *arg);

#endif
