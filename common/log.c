/* log.c - see log.h. Lines look like:
 *   2026-12-02T10:15:03.123Z info listening on 127.0.0.1:8000 (4 io threads) */
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

struct log {
    char *path;               /* NULL: stderr */
    _Atomic int fd;
    _Atomic int level;
    _Atomic int writers;      /* log_write calls between taking fd and writing it */
};

static struct log *log_process_default;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

static int log_open_fd(const char *path)
{
    return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

struct log *log_open(const char *path, enum log_level level, char *msg, int msglen)
{
    struct log *l = calloc(1, sizeof *l);
    if (!l) {
        snprintf(msg, msglen, "out of memory");
        return NULL;
    }
    atomic_store(&l->level, level);
    if (path) {
        int fd = log_open_fd(path);
        if (fd < 0) {
            snprintf(msg, msglen, "%s: cannot open log file: %s", path, strerror(errno));
            free(l);
            return NULL;
        }
        l->path = strdup(path);
        atomic_store(&l->fd, fd);
    } else {
        atomic_store(&l->fd, STDERR_FILENO);
    }
    return l;
}

void log_close(struct log *l)
{
    if (!l)
        return;
    if (log_process_default == l)
        log_process_default = NULL;
    if (l->path)
        close(atomic_load(&l->fd));
    free(l->path);
    free(l);
}

int log_reopen(struct log *l)
{
    if (!l || !l->path)
        return 0;
    int fd = log_open_fd(l->path);
    if (fd < 0)
        return -errno;
    /* A writer that took the old fd finishes with it before it closes:
     * closed under it, its number could be the next open's and the line
     * land in another file (a socket, the state database). */
    int old = atomic_exchange(&l->fd, fd);
    while (atomic_load(&l->writers) > 0)
        sched_yield();
    close(old);
    return 0;
}

void log_set_level(struct log *l, enum log_level level) { atomic_store(&l->level, level); }
enum log_level log_get_level(const struct log *l) { return atomic_load(&l->level); }

int log_level_parse(const char *s, enum log_level *out)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, level_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    }
    return -1;
}

const char *log_level_name(enum log_level level)
{
    return level >= LOG_DEBUG && level <= LOG_ERROR ? level_names[level] : "?";
}

void log_set_default(struct log *l) { log_process_default = l; }
struct log *log_default(void) { return log_process_default; }

void log_write(struct log *l, enum log_level level, const char *fmt, ...)
{
    if (l) {
        if ((int)level < atomic_load(&l->level))
            return;
    } else if (level < LOG_INFO) {
        return;
    }
    char line[2048];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, (int)(tv.tv_usec / 1000), log_level_name(level));
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    n += m;
    if (n > (int)sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    if (!l) {
        ssize_t w = write(STDERR_FILENO, line, (size_t)n);
        (void)w;
        return;
    }
    /* Counted before the fd is taken (both sequentially consistent, as is
     * log_reopen's swap and its look at the count): a reopen closes the
     * old fd only once no writer holds it. */
    atomic_fetch_add(&l->writers, 1);
    ssize_t w = write(atomic_load(&l->fd), line, (size_t)n);
    (void)w;
    atomic_fetch_sub(&l->writers, 1);
}

bool log_gate_pass(struct log_gate *g, int64_t now_ns, unsigned long long *held)
{
    int64_t next = atomic_load_explicit(&g->next_ns, memory_order_relaxed);
    if (now_ns < next ||
        !atomic_compare_exchange_strong_explicit(&g->next_ns, &next, now_ns + 1000000000LL,
                                                 memory_order_relaxed, memory_order_relaxed)) {
        atomic_fetch_add_explicit(&g->held, 1, memory_order_relaxed);
        return false;
    }
    *held = atomic_exchange_explicit(&g->held, 0, memory_order_relaxed);
    return true;
}
