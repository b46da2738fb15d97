/* httpc_target.c - the servers behind batchgate as httpc sees them: address,
 * health (passive: failures in a row take a server out for a while; active:
 * probe results decide), calls in flight, failures by kind and busy time.
 * Shared by every IO thread and loop that calls a server, so its counts are
 * under a mutex and what the pickers read without one is atomic. */
#include "common/httpc.h"

#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/busywin.h"
#include "common/clock.h"
#include "common/httpc_impl.h"
#include "common/log.h"

/* The target counts failures by these kinds: its file holds their names. */
const char *const httpc_fail_names[HTTPC_FAIL_COUNT] = {"connect", "reset", "timeout", "status",
                                                        "malformed"};

#define TARGET_FAILS_TO_DOWN 3
#define TARGET_DOWN_NS 2000000000LL
#define TARGET_LOG_GAP_NS 1000000000LL   /* one line a second about a target, at most */
/* The longest a server's word that it is overloaded holds it back: its
 * Retry-After may be an hour of maintenance, and one call a minute is
 * what finding it back costs (the same bound as a job's hold). */
#define TARGET_HOLD_MAX_S 60
/* A server passed by for its speed this many times, and for this long
 * since its last measure, gets one call to measure it again (httpc_pick):
 * one slow spell took a server out for good, as passed by it was never
 * measured again. The count keeps a sporadic client's calls off a slow
 * server (one trial in 64 calls); the time keeps a busy one's to one
 * trial in 2 s. An answer after as long replaces the average. */
#define TARGET_TRIAL_PASSES 64
#define TARGET_MEASURE_STALE_NS 2000000000LL
/* Each trial that left it as slow doubles both, up to 32 times (2048
 * passes and 64 s): a server slow for real put its time into the p99 of
 * a client under 32 calls a second (one call in 64), and now into less
 * than one call in 2000 after five trials. */
#define TARGET_TRIAL_SHIFT_MAX 5

struct httpc_target {
    char who[128];                   /* its owner in log lines: "model m", "route /x/" */
    char name[64];                   /* in what clients read: "upstream.urls[1]" */
    char host[256];
    int port;
    char url[300], authority[280];
    struct sockaddr_storage addr;
    socklen_t alen;
    pthread_mutex_t mu;
    _Atomic int refs;                /* its owners' and each pool's (httpc_pool_new) */
    _Atomic int owners;              /* copies of its model using it (httpc_target_continue) */
    _Atomic bool retired;            /* its owner let go: pools of it are dropped when idle */
    /* Read without mu by httpc_pick and httpc_target_usable (atomics);
     * written under mu. */
    _Atomic int inflight;
    _Atomic int64_t down_until;      /* 0: up */
    /* It said it is overloaded (httpc_target_hold): picked only when no
     * other is usable, until then; 0 none. */
    _Atomic int64_t held_until;
    _Atomic int64_t held_at;         /* when the hold was set: older calls do not end it */
    /* A call's time to its answer, a moving average over the last ~8
     * answers (0: none yet), begun to answered: the server's time, and the
     * wait behind calls ahead on its connections. */
    _Atomic int64_t answer_ns;
    _Atomic int64_t answered_at;     /* when answer_ns last took a sample (now_ns) */
    _Atomic int passed;              /* picks that passed it by for its speed since */
    _Atomic int trial_shift;         /* trials in a row that left it passed by (capped) */
    _Atomic int64_t trial_at;        /* when its last trial was claimed (now_ns) */
    /* Its measure when that trial was claimed, which a copy without a
     * usable answer puts back (httpc_target_trial_failed). */
    _Atomic int64_t trial_old_ns, trial_old_at;
    /* Its last call the server is judged by ended in a usable answer
     * (httpc_target_answered): only then does answer_ns say what the
     * server takes now. One answering 429 in 1 ms, or one that was fast
     * and now fails (httpc_target_failed), is no measure of what another
     * server's call should take. */
    _Atomic bool answer_ok;
    _Atomic bool judged;             /* a call of it was answered or failed */
    /* Under mu: */
    uint64_t calls;
    uint64_t pipelined;              /* calls sent behind another on a shared connection */
    uint64_t failures[HTTPC_FAIL_COUNT];
    int fails_in_row;
    int probe_fails_in_row;          /* active probes failed in a row (httpc.h) */
    bool probed;                     /* active probes decide when a down target returns */
    int64_t created_ns;
    int64_t busy_since;              /* start of the busy stretch not yet in `busy` */
    struct busywin busy;             /* time with at least one call in flight; written under mu */
    /* Its health in the log (under mu). It is out while down_until is not
     * 0; the last line said log_out, at log_ns, and log_hidden changes
     * came after it unsaid (target_log_due). */
    bool log_out;
    int64_t log_ns;
    int log_hidden;
    /* The last change's cause, which is the cause of the state it left
     * (set at the change, said by that line or a later one): out, how
     * long and why, " for 2 s (3 failed calls in a row, the last:
     * status"; back, "health probe: HTTP 200". */
    char cause[200];
};

struct httpc_target *httpc_target_new(const char *host, int port, const char *who,
                                      const char *name, struct error *err)
{
    char ports[16];
    snprintf(ports, sizeof ports, "%d", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int gai = getaddrinfo(host, ports, &hints, &ai);
    if (gai) {
        error_set(err, BG_ECONFIG, "cannot resolve %s: %s", host, gai_strerror(gai));
        return NULL;
    }
    struct httpc_target *t = calloc(1, sizeof *t);
    if (!t) {
        freeaddrinfo(ai);
        error_set(err, BG_ENOMEM, "out of memory");
        return NULL;
    }
    snprintf(t->host, sizeof t->host, "%s", host);
    snprintf(t->who, sizeof t->who, "%s", who);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->port = port;
    atomic_init(&t->refs, 1);
    atomic_init(&t->owners, 1);
    /* An IPv6 literal needs its brackets back in a URL or a Host header. */
    const char *lb = strchr(host, ':') ? "[" : "", *rb = *lb ? "]" : "";
    snprintf(t->authority, sizeof t->authority, "%s%s%s:%d", lb, host, rb, port);
    snprintf(t->url, sizeof t->url, "http://%s", t->authority);
    memcpy(&t->addr, ai->ai_addr, ai->ai_addrlen);
    t->alen = ai->ai_addrlen;
    freeaddrinfo(ai);
    pthread_mutex_init(&t->mu, NULL);
    t->created_ns = now_ns();
    return t;
}

struct httpc_target *httpc_target_ref(struct httpc_target *t)
{
    atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
    return t;
}

bool httpc_target_retired(const struct httpc_target *t)
{
    return atomic_load_explicit(&t->retired, memory_order_acquire);
}

void httpc_target_unref(struct httpc_target *t)
{
    if (!t || atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1)
        return;
    pthread_mutex_destroy(&t->mu);
    free(t);
}

void httpc_target_free(struct httpc_target *t)
{
    if (!t)
        return;
    /* Retired with its last owner: a reload's old copy letting go of a
     * server its new copy goes on with leaves its connections alone. */
    if (atomic_fetch_sub_explicit(&t->owners, 1, memory_order_acq_rel) == 1)
        atomic_store_explicit(&t->retired, true, memory_order_release);
    httpc_target_unref(t);
}

struct httpc_target *httpc_target_continue(struct httpc_target *t, struct httpc_target *prev)
{
    if (!t || !prev || prev == t || httpc_target_retired(prev) || t->port != prev->port ||
        strcmp(t->host, prev->host) != 0 || strcmp(t->name, prev->name) != 0 ||
        strcmp(t->who, prev->who) != 0 || t->alen != prev->alen ||
        memcmp(&t->addr, &prev->addr, t->alen) != 0)
        return t;
    atomic_fetch_add_explicit(&prev->owners, 1, memory_order_relaxed);
    httpc_target_ref(prev);
    httpc_target_free(t);
    return prev;
}

const char *httpc_target_url(const struct httpc_target *t) { return t->url; }
const char *httpc_target_name(const struct httpc_target *t) { return t->name; }
const char *httpc_target_authority(const struct httpc_target *t) { return t->authority; }

const struct sockaddr_storage *httpc_target_addr(const struct httpc_target *t, socklen_t *len)
{
    *len = t->alen;
    return &t->addr;
}

void httpc_target_begin(struct httpc_target *t, bool behind)
{
    pthread_mutex_lock(&t->mu);
    if (atomic_fetch_add_explicit(&t->inflight, 1, memory_order_relaxed) == 0)
        t->busy_since = now_ns();
    t->calls++;
    t->pipelined += behind;
    pthread_mutex_unlock(&t->mu);
}

void httpc_target_end(struct httpc_target *t)
{
    pthread_mutex_lock(&t->mu);
    if (atomic_fetch_sub_explicit(&t->inflight, 1, memory_order_relaxed) == 1)
        busywin_add(&t->busy, t->busy_since, now_ns());
    pthread_mutex_unlock(&t->mu);
}

void httpc_target_answered(struct httpc_target *t, int64_t ns, int status)
{
    atomic_store_explicit(&t->judged, true, memory_order_relaxed);
    /* Another 4xx is the request's: it says nothing of the server (a
     * proxied client's 404s made a slow server look unmeasured). */
    if (status >= 400) {
        if (status == 429 || status >= 500)
            atomic_store_explicit(&t->answer_ok, false, memory_order_relaxed);
        return;
    }
    atomic_store_explicit(&t->answer_ok, true, memory_order_relaxed);
    if (ns <= 0)
        ns = 1;
    int64_t now = now_ns();
    /* It took a call again: its hold ends, unless the call was sent
     * before the refusal that set it. */
    if (now - ns >= atomic_load_explicit(&t->held_at, memory_order_relaxed))
        atomic_store_explicit(&t->held_until, 0, memory_order_relaxed);
    int64_t a = atomic_load_explicit(&t->answer_ns, memory_order_relaxed);
    /* An average that took no sample for a while is not one to move by
     * 1/8: the server passed by for a slow spell is judged by the answer
     * of its new try alone (from 190 ms to 5 ms took 24 tries). */
    if (now - atomic_load_explicit(&t->answered_at, memory_order_relaxed) >= TARGET_MEASURE_STALE_NS)
        a = 0;
    atomic_store_explicit(&t->answered_at, now, memory_order_relaxed);
    atomic_store_explicit(&t->passed, 0, memory_order_relaxed);
    /* One writer at a time in practice (the target's loop); a lost update
     * between two loops only drops a sample. */
    atomic_store_explicit(&t->answer_ns, a ? a + (ns - a) / 8 : ns, memory_order_relaxed);
}

void httpc_target_hold(struct httpc_target *t, int seconds)
{
    if (seconds < 1)
        seconds = 1;
    if (seconds > TARGET_HOLD_MAX_S)
        seconds = TARGET_HOLD_MAX_S;
    /* Its latest word decides: a shorter Retry-After shortens the hold. */
    int64_t now = now_ns();
    atomic_store_explicit(&t->held_at, now, memory_order_relaxed);
    atomic_store_explicit(&t->held_until, now + (int64_t)seconds * 1000000000LL,
                          memory_order_relaxed);
}

/* When it may be picked beside the others again: the later of its return
 * from being taken out and the end of its hold (<= now: it may). */
static int64_t target_back_ns(const struct httpc_target *t)
{
    int64_t down = atomic_load_explicit(&t->down_until, memory_order_relaxed);
    int64_t held = atomic_load_explicit(&t->held_until, memory_order_relaxed);
    return down > held ? down : held;
}

bool httpc_target_usable(const struct httpc_target *t, int64_t now)
{
    /* Relaxed: health is advisory, and a call picked just as it changes is fine. */
    return atomic_load_explicit(&t->down_until, memory_order_relaxed) <= now;
}

/* A line about a target's health, decided under mu and written after. */
struct target_line {
    bool say, out;
    int hidden;                      /* changes since the last line, not said */
    char text[200];                  /* the state's cause (httpc_target.cause) */
};

/* Under mu, after a call or a probe (`changed`: it took the target out or
 * brought it back): whether to write a line now about the state it is in.
 * A server flapping under load (three failures, a success, again, a
 * thousand calls a second; or its probes, every health_interval_ms) would
 * fill the log: changes less than TARGET_LOG_GAP_NS after the last line
 * are counted instead, and the state they left is said at the first call
 * or probe after the gap, with their number; a line never repeats the
 * state the last one said. The clock is read only when the state differs
 * from the last line's: a call that changes nothing costs none. */
static struct target_line target_log_due(struct httpc_target *t, bool changed)
{
    struct target_line l = {0};
    bool out = atomic_load_explicit(&t->down_until, memory_order_relaxed) != 0;
    t->log_hidden += changed;
    if (out == t->log_out)
        return l;
    int64_t now = now_ns();
    if (t->log_ns && now - t->log_ns < TARGET_LOG_GAP_NS)
        return l;
    l = (struct target_line){.say = true, .out = out,
                             .hidden = t->log_hidden - 1};   /* the change said now is not hidden */
    snprintf(l.text, sizeof l.text, "%s", t->cause);
    t->log_hidden = 0;
    t->log_out = out;
    t->log_ns = now;
    return l;
}

/* Writes the line target_log_due asked for, out of mu. */
static void target_log(const struct httpc_target *t, const struct target_line *l)
{
    if (!l->say)
        return;
    char more[96] = "";
    if (l->hidden > 0)
        snprintf(more, sizeof more, "; %d more change%s since the last line", l->hidden,
                 l->hidden > 1 ? "s" : "");
    if (l->out)
        log_warn("%s: upstream %s is taken out%s%s)", t->who, t->url, l->text, more);
    else
        log_warn("%s: upstream %s is back (%s%s)", t->who, t->url, l->text, more);
}

int httpc_target_probe_result(struct httpc_target *t, enum httpc_probe_result r, const char *why)
{
    int64_t now = now_ns();
    pthread_mutex_lock(&t->mu);
    int64_t before = atomic_load_explicit(&t->down_until, memory_order_relaxed);
    t->probed = true;
    if (r == HTTPC_PROBE_PASS) {
        t->fails_in_row = 0;
        t->probe_fails_in_row = 0;
        atomic_store_explicit(&t->down_until, 0, memory_order_relaxed);
    } else if (r == HTTPC_PROBE_UNREACHABLE ||
               ++t->probe_fails_in_row >= HTTPC_PROBE_FAILS_TO_DOWN) {
        atomic_store_explicit(&t->down_until, INT64_MAX, memory_order_relaxed);
    }
    int64_t after = atomic_load_explicit(&t->down_until, memory_order_relaxed);
    bool was = before <= now, is = after <= now;   /* usable: what the caller is told */
    /* The log's notion of out (target_log_due): down_until set at all. */
    bool out_changed = (before != 0) != (after != 0);
    if (out_changed && after == 0)
        snprintf(t->cause, sizeof t->cause, "health probe: %s", why);
    else if (out_changed && r == HTTPC_PROBE_FAIL)
        snprintf(t->cause, sizeof t->cause, " (health probe: %s, %d in a row", why,
                 t->probe_fails_in_row);
    else if (out_changed)
        snprintf(t->cause, sizeof t->cause, " (health probe: %s", why);
    struct target_line line = target_log_due(t, out_changed);
    pthread_mutex_unlock(&t->mu);
    target_log(t, &line);
    return is == was ? 0 : is ? 1 : -1;
}

int httpc_target_succeeded(struct httpc_target *t)
{
    pthread_mutex_lock(&t->mu);
    int fails = t->fails_in_row;
    t->fails_in_row = 0;
    /* A trial call after the timed pause went through: back in. (With
     * probes on, the next passing probe brings it back and says so.) */
    bool back = !t->probed && atomic_load_explicit(&t->down_until, memory_order_relaxed) != 0;
    if (back) {
        atomic_store_explicit(&t->down_until, 0, memory_order_relaxed);
        snprintf(t->cause, sizeof t->cause, "a call succeeded after %d failed in a row",
                 fails);
    }
    struct target_line line = target_log_due(t, back);
    pthread_mutex_unlock(&t->mu);
    target_log(t, &line);
    return back;
}

/* Among targets with as many calls in flight, one never tried goes first
 * (by index alone, a fast server after a slow one never got a call from a
 * client sending one at a time, and was never measured: the re-test).
 * Not one whose last call succeeded before one whose last call failed:
 * under such a client a server that failed once would never be tried
 * again, its recovery never seen. */
static int target_rank(const struct httpc_target *t)
{
    return atomic_load_explicit(&t->judged, memory_order_relaxed) ? 1 : 0;
}

/* The speed of a target whose last call succeeded (0: unknown, or not
 * to be taken as a measure of the others). */
static int64_t target_measured_ns(const struct httpc_target *t)
{
    return atomic_load_explicit(&t->answer_ok, memory_order_relaxed)
               ? atomic_load_explicit(&t->answer_ns, memory_order_relaxed)
               : 0;
}

void httpc_target_count_failure(struct httpc_target *t, enum httpc_fail why)
{
    pthread_mutex_lock(&t->mu);
    t->failures[why]++;
    pthread_mutex_unlock(&t->mu);
}

int httpc_target_failed(struct httpc_target *t, enum httpc_fail why)
{
    atomic_store_explicit(&t->judged, true, memory_order_relaxed);
    atomic_store_explicit(&t->answer_ok, false, memory_order_relaxed);
    pthread_mutex_lock(&t->mu);
    t->failures[why]++;
    /* Out from the third failure in a row; the trial calls of a server
     * still failing after each pause only extend the pause. */
    bool was = atomic_load_explicit(&t->down_until, memory_order_relaxed) != 0;
    if (++t->fails_in_row >= TARGET_FAILS_TO_DOWN)
        atomic_store_explicit(&t->down_until, t->probed ? INT64_MAX : now_ns() + TARGET_DOWN_NS,
                              memory_order_relaxed);
    bool out = !was && atomic_load_explicit(&t->down_until, memory_order_relaxed) != 0;
    if (out && t->probed)
        snprintf(t->cause, sizeof t->cause, " until a health probe passes (%d failed calls "
                 "in a row, the last: %s", TARGET_FAILS_TO_DOWN, httpc_fail_names[why]);
    else if (out)
        snprintf(t->cause, sizeof t->cause, " for %.0f s (%d failed calls in a row, the "
                 "last: %s", TARGET_DOWN_NS / 1e9, TARGET_FAILS_TO_DOWN, httpc_fail_names[why]);
    struct target_line line = target_log_due(t, out);
    pthread_mutex_unlock(&t->mu);
    target_log(t, &line);
    return out ? -1 : 0;
}

/* Is t due a trial: passed by TARGET_TRIAL_PASSES times and for
 * TARGET_MEASURE_STALE_NS since its last measure, each doubled by every
 * trial that left it passed by? *need: the passes it takes. */
static bool target_trial_due(struct httpc_target *t, int64_t now, int *need)
{
    int shift = atomic_load_explicit(&t->trial_shift, memory_order_relaxed);
    *need = TARGET_TRIAL_PASSES << shift;
    /* From its last measure, or its last trial when that gave none (a
     * copy that failed: the next came at once, the re-test). */
    int64_t since = atomic_load_explicit(&t->answered_at, memory_order_relaxed);
    int64_t tried = atomic_load_explicit(&t->trial_at, memory_order_relaxed);
    if (tried > since)
        since = tried;
    return atomic_load_explicit(&t->passed, memory_order_relaxed) >= *need &&
           now - since >= (TARGET_MEASURE_STALE_NS << shift);
}

/* The trial that was due: true for one caller, however many loops pick at
 * once; the next is twice as far off until it is picked on its speed. */
static bool target_trial_claim(struct httpc_target *t, int need, int64_t now)
{
    if (atomic_exchange_explicit(&t->passed, 0, memory_order_relaxed) < need)
        return false;
    atomic_store_explicit(&t->trial_at, now, memory_order_relaxed);
    atomic_store_explicit(&t->trial_old_ns, atomic_load_explicit(&t->answer_ns,
                                                                 memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&t->trial_old_at, atomic_load_explicit(&t->answered_at,
                                                                 memory_order_relaxed),
                          memory_order_relaxed);
    int shift = atomic_load_explicit(&t->trial_shift, memory_order_relaxed);
    if (shift < TARGET_TRIAL_SHIFT_MAX)
        atomic_store_explicit(&t->trial_shift, shift + 1, memory_order_relaxed);
    return true;
}

/* httpc_pick passed t by for its speed: counted; true when that makes it
 * due the call as a trial, which `may` allows (no call in flight, the
 * call's deadline within its measure). */
static bool target_passed_by(struct httpc_target *t, bool may, int64_t now)
{
    int need = TARGET_TRIAL_PASSES << atomic_load_explicit(&t->trial_shift, memory_order_relaxed);
    /* No further than due: deadlines may refuse trials for weeks. */
    if (atomic_load_explicit(&t->passed, memory_order_relaxed) < need)
        atomic_fetch_add_explicit(&t->passed, 1, memory_order_relaxed);
    return may && target_trial_due(t, now, &need) && target_trial_claim(t, need, now);
}

void httpc_target_trial_failed(struct httpc_target *t)
{
    /* httpc took the answer's time when it ended, before it was read: a
     * fast 200 that did not parse had replaced the old measure, and the
     * failing server took deadline calls again (the re-test). */
    int64_t old = atomic_load_explicit(&t->trial_old_ns, memory_order_relaxed);
    if (old <= 0)
        return;
    atomic_store_explicit(&t->answer_ns, old, memory_order_relaxed);
    atomic_store_explicit(&t->answered_at,
                          atomic_load_explicit(&t->trial_old_at, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&t->answer_ok, true, memory_order_relaxed);
}

int httpc_pick_copy_trial(struct httpc_target *const *ts, int n, int except)
{
    int64_t now = now_ns();
    for (int i = 0; i < n && i < 32; i++) {
        struct httpc_target *t = ts[i];
        int need;
        if (i != except && target_back_ns(t) <= now && target_measured_ns(t) > 0 &&
            atomic_load_explicit(&t->inflight, memory_order_relaxed) == 0 &&
            target_trial_due(t, now, &need) && target_trial_claim(t, need, now))
            return i;
    }
    return -1;
}

struct httpc_target *httpc_pick(struct httpc_target *const *ts, int n, unsigned tried,
                                int64_t budget_ns, int *index)
{
    int64_t now = now_ns();
    /* The fewest calls in flight among the targets whose expected wait
     * (calls in flight and this one, each taking the target's time to an
     * answer) is within twice the least: by calls in flight alone every
     * other call went to a server 12x slower while the fast one idled,
     * and its late answers raised the model's answer guard until budgets
     * the fast one met were refused (the re-test). Servers alike in speed
     * share the calls as before; one not answered yet, or whose last call
     * failed, is always a candidate (its time is learned again). A
     * server held back for its Retry-After is not: it said it would refuse
     * the call (as loaded as another and listed first, it was asked, and
     * refused, first by every batch while it said so). */
    int load[32];
    double wait[32];   /* 0: not measured; -1: not a candidate */
    double least = 0;
    for (int i = 0; i < n && i < 32; i++) {
        wait[i] = -1;
        if ((tried & (1u << i)) || target_back_ns(ts[i]) > now)
            continue;
        load[i] = atomic_load_explicit(&ts[i]->inflight, memory_order_relaxed);
        wait[i] = (double)(load[i] + 1) * (double)target_measured_ns(ts[i]);
        if (wait[i] > 0 && (least == 0 || wait[i] < least))
            least = wait[i];
    }
    /* A call with a deadline goes where it can be answered by it, when
     * some server can, and where it is answered soonest when none can:
     * within twice the least, a server whose answers take longer than the
     * budget took every call it was the fewest in flight for, each
     * answered late, while the other made them all. */
    bool late = budget_ns > 0 && least > (double)budget_ns;
    double fits = budget_ns > 0 && !late ? (double)budget_ns : 2 * least;
    int best = -1, trial = -1, candidates = 0;
    for (int i = 0; i < n && i < 32; i++) {
        if (wait[i] < 0)
            continue;   /* not usable */
        candidates++;
        if (wait[i] > 0 && (wait[i] > 2 * least || wait[i] > fits)) {
            /* Far slower than another for this call, unless it is due a
             * trial (one per pick at most), and the call has no deadline:
             * trials made calls that the other server met answer late, and
             * one whose deadline fitted an average lifted by a single slow
             * answer was late when the server had turned slow again (the
             * re-test). A call with a deadline owes it a copy instead
             * (httpc_pick_copy_trial). */
            if (target_passed_by(ts[i], load[i] == 0 && budget_ns <= 0 && trial < 0, now))
                trial = i;
            continue;
        }
        if (best < 0 || (late ? wait[i] < wait[best]
                              : load[i] < load[best] ||
                                    (load[i] == load[best] &&
                                     target_rank(ts[i]) < target_rank(ts[best]))))
            best = i;
    }
    if (trial >= 0)
        best = trial;
    else if (best >= 0 && candidates > 1 &&
             atomic_load_explicit(&ts[best]->trial_shift, memory_order_relaxed))
        /* Back for good: picked on its speed beside another (alone, as a
         * copy trial's call is, it was not: its trials stopped doubling). */
        atomic_store_explicit(&ts[best]->trial_shift, 0, memory_order_relaxed);
    if (best < 0)   /* none usable or free: the one that comes back first */
        for (int i = 0; i < n; i++) {
            if (tried & (1u << i))
                continue;
            if (best < 0 || target_back_ns(ts[i]) < target_back_ns(ts[best]))
                best = i;
        }
    if (best < 0)
        return NULL;
    if (index)
        *index = best;
    return ts[best];
}

double httpc_target_speed_ratio(struct httpc_target *const *ts, int n, int i, int64_t ns)
{
    if (i < 0 || i >= n)
        return 1;
    int64_t now = now_ns(), least = 0;
    for (int k = 0; k < n; k++) {
        int64_t a = target_measured_ns(ts[k]);
        if (k != i && a > 0 && httpc_target_usable(ts[k], now) && (least == 0 || a < least))
            least = a;
    }
    /* The call's own time too: a server that just turned slow has an
     * average that lags by several answers (1/8 each). */
    int64_t mine = atomic_load_explicit(&ts[i]->answer_ns, memory_order_relaxed);
    mine = ns > mine ? ns : mine;
    return least > 0 && mine > 2 * least ? (double)least / (double)mine : 1;
}

void httpc_target_stats(struct httpc_target *t, struct httpc_target_stats *o)
{
    int64_t now = now_ns();
    memset(o, 0, sizeof *o);
    pthread_mutex_lock(&t->mu);
    /* Bring the running busy stretch up to now. */
    if (atomic_load_explicit(&t->inflight, memory_order_relaxed) > 0) {
        busywin_add(&t->busy, t->busy_since, now);
        t->busy_since = now;
    }
    o->inflight = atomic_load_explicit(&t->inflight, memory_order_relaxed);
    o->calls = t->calls;
    o->pipelined = t->pipelined;
    memcpy(o->failures, t->failures, sizeof o->failures);
    o->busy_s = (double)busywin_total_ns(&t->busy) / 1e9;
    o->age_s = (double)(now - t->created_ns) / 1e9;
    o->util_10s = busywin_fraction(&t->busy, now, BUSYWIN_UTIL_S);
    pthread_mutex_unlock(&t->mu);
    o->healthy = httpc_target_usable(t, now);
}
