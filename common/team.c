/* team.c - see team.h. */
#include "common/team.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

/* Polls before sleeping: about 20-50 us on current cores, well past the
 * gap between two steps of a batch and far below a sleep's cost. */
#define TEAM_SPINS 20000

struct team_member {
    struct team *t;
    int i;
    pthread_t thread;
};

struct team {
    int n;
    struct team_member *m;
    team_fn fn;
    void *arg;
    _Atomic unsigned gen;       /* bumped once per team_run */
    _Atomic int pending;        /* members (other than 0) still running this step */
    _Atomic bool stop;
    pthread_mutex_t mu;         /* the sleepers' */
    pthread_cond_t go, done;    /* members sleep on go, the caller on done */
};

static inline void team_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *team_main(void *p)
{
    struct team_member *me = p;
    struct team *t = me->t;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&t->gen, memory_order_acquire)) == seen &&
               !atomic_load(&t->stop) && ++spins < TEAM_SPINS)
            team_pause();
        if (g == seen && !atomic_load(&t->stop)) {
            pthread_mutex_lock(&t->mu);
            while ((g = atomic_load(&t->gen)) == seen && !atomic_load(&t->stop))
                pthread_cond_wait(&t->go, &t->mu);
            pthread_mutex_unlock(&t->mu);
        }
        if (atomic_load(&t->stop))
            return NULL;
        seen = g;
        t->fn(t->arg, me->i, t->n);
        if (atomic_fetch_sub_explicit(&t->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&t->mu);
            pthread_cond_signal(&t->done);
            pthread_mutex_unlock(&t->mu);
        }
    }
}

int team_new(int n, struct team **out)
{
    struct team *t = calloc(1, sizeof *t);
    if (!t)
        return -1;
    t->n = n < 1 ? 1 : n;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->go, NULL);
    pthread_cond_init(&t->done, NULL);
    if (t->n > 1 && !(t->m = calloc((size_t)t->n, sizeof *t->m))) {
        team_free(t);
        errno = ENOMEM;
        return -1;
    }
    for (int i = 1; i < t->n; i++) {
        t->m[i] = (struct team_member){.t = t, .i = i};
        int rc = pthread_create(&t->m[i].thread, NULL, team_main, &t->m[i]);
        if (rc) {
            t->n = i;   /* the ones started are joined */
            team_free(t);
            errno = rc;
            return -1;
        }
    }
    *out = t;
    return 0;
}

void team_free(struct team *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    atomic_store(&t->stop, true);
    pthread_cond_broadcast(&t->go);
    pthread_mutex_unlock(&t->mu);
    for (int i = 1; t->m && i < t->n; i++)
        pthread_join(t->m[i].thread, NULL);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->go);
    pthread_cond_destroy(&t->done);
    free(t->m);
    free(t);
}

int team_size(const struct team *t) { return t ? t->n : 1; }

void team_run(struct team *t, team_fn fn, void *arg)
{
    if (!t || t->n <= 1) {
        fn(arg, 0, 1);
        return;
    }
    t->fn = fn;
    t->arg = arg;
    atomic_store(&t->pending, t->n - 1);
    pthread_mutex_lock(&t->mu);
    atomic_fetch_add_explicit(&t->gen, 1, memory_order_release);
    pthread_cond_broadcast(&t->go);
    pthread_mutex_unlock(&t->mu);
    fn(arg, 0, t->n);
    int spins = 0;
    while (atomic_load_explicit(&t->pending, memory_order_acquire) > 0 && ++spins < TEAM_SPINS)
        team_pause();
    if (atomic_load(&t->pending) > 0) {
        pthread_mutex_lock(&t->mu);
        while (atomic_load(&t->pending) > 0)
            pthread_cond_wait(&t->done, &t->mu);
        pthread_mutex_unlock(&t->mu);
    }
}
