/* server.c - IO threads and their listeners; max_connections; graceful drain.
 *
 * Every IO thread binds its own socket to the same address with
 * SO_REUSEPORT, so the kernel spreads new connections across threads and no
 * accept lock exists. max_connections is one atomic counter for the process:
 * a thread that finds it full stops watching its listener (the kernel's
 * backlog holds newcomers, nobody spins) until a close frees a slot and wakes
 * the paused threads. */
#include "http/http_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>

#include "common/cpus.h"
#include "common/log.h"

#define ACCEPT_BATCH 64
#define LISTEN_BACKLOG 4096

struct server {
    struct http_server_config cfg;
    const struct router *router;
    struct io_thread *threads;
    int nthreads;
    int port;
    int h2_port;                 /* -1: no HTTP/2 port */
    _Atomic int nconns;          /* open client sockets, all threads */
    _Atomic int running;         /* IO threads not yet exited */
    struct log_gate flood_log;   /* io_thread.flood_log: the threads' one gate */
    pthread_t notify;
    bool started;
};

/* ---- connection accounting ---- */

/* Gives a max_connections slot back and wakes the threads that paused
 * their listener when the process was at the limit. */
static void server_conn_slot_release(struct server *s)
{
    int before = atomic_fetch_sub(&s->nconns, 1);
    if (before < s->cfg.limits.max_connections)
        return;
    /* A slot freed up at the limit: wake every thread that paused its listener. */
    for (int i = 0; i < s->nthreads; i++) {
        struct io_thread *o = &s->threads[i];
        if (atomic_load(&o->listen_paused)) {
            atomic_fetch_or(&o->wake_flags, IO_WAKE_RESUME);
            event_active(o->wake_ev, EV_READ, 0);
        }
    }
}

static void server_conn_closed(struct io_thread *t) { server_conn_slot_release(t->srv); }

/* ---- listener ---- */

static void server_listener_pause(struct io_thread *t)
{
    if (atomic_load(&t->listen_paused))
        return;
    event_del(t->listen_ev);
    if (t->h2_listen_ev)
        event_del(t->h2_listen_ev);
    atomic_store(&t->listen_paused, true);
    /* A close between our check and the flag would not have seen the flag. */
    if (atomic_load(&t->srv->nconns) < t->srv->cfg.limits.max_connections) {
        atomic_store(&t->listen_paused, false);
        event_add(t->listen_ev, NULL);
        if (t->h2_listen_ev)
            event_add(t->h2_listen_ev, NULL);
    }
}

static void server_listener_resume(struct io_thread *t)
{
    if (t->draining || t->listen_fd < 0 || !atomic_load(&t->listen_paused))
        return;
    atomic_store(&t->listen_paused, false);
    event_add(t->listen_ev, NULL);
    if (t->h2_listen_ev && t->h2_listen_fd >= 0)
        event_add(t->h2_listen_ev, NULL);
}

static bool server_conn_slot_take(struct server *s)
{
    int n = atomic_load(&s->nconns);
    while (n < s->cfg.limits.max_connections) {
        if (atomic_compare_exchange_weak(&s->nconns, &n, n + 1))
            return true;
    }
    return false;
}

/* Accepts up to ACCEPT_BATCH connections; returns how many. h2: the
 * HTTP/2 port's listener. */
static int server_accept_batch(struct io_thread *t, int lfd, bool h2)
{
    int i;
    for (i = 0; i < ACCEPT_BATCH; i++) {
        if (!server_conn_slot_take(t->srv)) {
            server_listener_pause(t);
            return i;
        }
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            server_conn_slot_release(t->srv);
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
                errno == ECONNABORTED)
                return i;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* Out of descriptors: stop accepting for a moment instead of spinning. */
                log_warn("accept: %s; pausing the listener for 100 ms (raise the fd limit "
                         "or lower limits.max_connections)", strerror(errno));
                event_del(t->listen_ev);
                if (t->h2_listen_ev)
                    event_del(t->h2_listen_ev);
                struct timeval tv = {0, 100000};
                evtimer_add(t->retry_ev, &tv);
                return i;
            }
            log_error("accept: %s", strerror(errno));
            return i;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        atomic_store_explicit(&t->accepted,
                              atomic_load_explicit(&t->accepted, memory_order_relaxed) + 1,
                              memory_order_relaxed);
        if (h2)
            h2_conn_new(t, fd);
        else
            http_conn_new(t, fd);
    }
    return i;
}

static void server_on_accept(evutil_socket_t lfd, short what, void *arg)
{
    (void)what;
    server_accept_batch(arg, lfd, false);
}

static void server_on_accept_h2(evutil_socket_t lfd, short what, void *arg)
{
    (void)what;
    server_accept_batch(arg, lfd, true);
}

static void server_on_accept_retry(evutil_socket_t fd, short what, void *arg)
{
    struct io_thread *t = arg;
    (void)fd;
    (void)what;
    if (!t->draining && t->listen_fd >= 0 && !atomic_load(&t->listen_paused)) {
        event_add(t->listen_ev, NULL);
        if (t->h2_listen_ev && t->h2_listen_fd >= 0)
            event_add(t->h2_listen_ev, NULL);
    }
}

/* Also on a start that failed after the binds: the events may not exist. */
static void server_listener_close(struct io_thread *t)
{
    if (t->h2_listen_fd >= 0) {
        if (t->h2_listen_ev)
            event_del(t->h2_listen_ev);
        close(t->h2_listen_fd);
        t->h2_listen_fd = -1;
    }
    if (t->listen_fd < 0)
        return;
    if (t->listen_ev)
        event_del(t->listen_ev);
    if (t->retry_ev)
        event_del(t->retry_ev);
    close(t->listen_fd);
    t->listen_fd = -1;
}

/* `what` names the setting in messages: "listen" or "grpc_listen". */
static int server_listener_bind(const char *host, int port, const char *what, int *out_fd,
                                int *out_port, struct error *err)
{
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, portstr, &hints, &res);
    if (gai != 0) {
        /* A runtime failure (exit 1): name service may be down for a
         * while. But an address literal that is none ("256.1.1.1", a bad
         * IPv6) resolves no better later: bad configuration (exit 2). */
        bool literal = host[strspn(host, "0123456789.")] == '\0' || strchr(host, ':');
        return error_set(err, literal ? BG_ECONFIG : BG_EIO, "%s: %s \"%s\": %s", what,
                         literal ? "not an IP address:" : "cannot resolve host", host,
                         gai_strerror(gai));
    }
    int fd = -1, saved = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, LISTEN_BACKLOG) == 0)
            break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return error_set(err, BG_EIO, "%s: cannot listen on %s:%d: %s", what, host, port,
                         strerror(saved));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *out_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    *out_fd = fd;
    return 0;
}

/* The listeners share their port with SO_REUSEPORT so that each IO thread
 * accepts its own connections; but the kernel lets any socket of the same
 * user join that group, so a second batchgate started on the same port by
 * mistake would silently take half the new connections. A socket without
 * SO_REUSEPORT cannot join: bound first, it fails exactly when someone else
 * already listens there. (Port 0 asks the kernel for a free port: nothing to
 * check.) */
static int server_port_check(const char *host, int port, const char *what, struct error *err)
{
    if (port == 0)
        return 0;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    if (getaddrinfo(host, portstr, &hints, &res) != 0)
        return 0;   /* the bind that follows names the problem */
    int rc = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        int bound = bind(fd, ai->ai_addr, ai->ai_addrlen);
        int saved = errno;
        close(fd);
        if (bound == 0)
            break;
        if (saved == EADDRINUSE) {
            rc = error_set(err, BG_EIO, "%s: cannot listen on %s:%d: the port is in use "
                           "by another process (another batchgate?)", what, host, port);
            break;
        }
    }
    freeaddrinfo(res);
    return rc;
}

/* server_port_check and the binds after it are not one step: two
 * batchgates started together on one port could both pass the check before
 * either listens, then both bind with SO_REUSEPORT and share the port. So
 * each process makes the check and its binds alone: it holds, meanwhile, an
 * abstract Unix socket named after the port (its network namespace's, like
 * the port; the kernel lets go of it if the process dies). Named by the
 * port alone, two batchgates on different addresses with one port number
 * only take turns. Returns the socket to close once the listeners are
 * bound, -1 when there is nothing to claim (port 0, or no Unix sockets:
 * the check alone then), or -2 with err set when another process holds it
 * for longer than a start takes. */
#define PORT_CLAIM_WAIT_MS 5000

static int server_port_claim(int port, struct error *err)
{
    if (port <= 0)
        return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    /* sun_path[0] stays '\0': the abstract namespace, no file left behind. */
    int n = snprintf(sa.sun_path + 1, sizeof sa.sun_path - 1, "batchgate-listen:%d", port);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    for (int waited = 0;; waited += 10) {
        if (bind(fd, (struct sockaddr *)&sa, len) == 0)
            return fd;
        if (errno != EADDRINUSE) {
            close(fd);
            return -1;
        }
        if (waited >= PORT_CLAIM_WAIT_MS) {
            close(fd);
            error_set(err, BG_EIO, "listen: port %d: another process has been binding it for "
                      "%d s (another batchgate starting?)", port, PORT_CLAIM_WAIT_MS / 1000);
            return -2;
        }
        usleep(10 * 1000);
    }
}

/* One listening socket per IO thread on the HTTP port, or on the HTTP/2
 * port (h2), sharing it (SO_REUSEPORT); the first one's bind picks the
 * port when 0 was asked. */
static int server_listeners_bind(struct server *s, bool h2, struct error *err)
{
    for (int i = 0; i < s->nthreads; i++) {
        struct io_thread *t = &s->threads[i];
        int rc = h2 ? server_listener_bind(s->cfg.h2.listen_host, s->h2_port, "grpc_listen",
                                           &t->h2_listen_fd, &s->h2_port, err)
                    : server_listener_bind(s->cfg.listen_host, s->port, "listen",
                                           &t->listen_fd, &s->port, err);
        if (rc)
            return rc;
    }
    return 0;
}

/* The HTTP/2 port is checked once the HTTP listeners are up, so that the
 * check sees them too: SO_REUSEPORT lets one process's listeners share a
 * port whatever they speak, and a grpc_listen on listen's port split the
 * connections between the two protocols at random. */
static int server_h2_check(struct server *s, struct error *err)
{
    int rc = server_port_check(s->cfg.h2.listen_host, s->h2_port, "grpc_listen", err);
    if (rc && s->h2_port == s->port) {
        error_clear(err);
        return error_set(err, BG_ECONFIG, "grpc_listen: %s:%d is listen's port too: HTTP/1.1 "
                         "and gRPC need a port each", s->cfg.h2.listen_host, s->h2_port);
    }
    return rc;
}

/* ---- the thread ---- */

static void server_on_wake(evutil_socket_t fd, short what, void *arg)
{
    struct io_thread *t = arg;
    (void)fd;
    (void)what;
    int flags = atomic_exchange(&t->wake_flags, 0);
    if (flags & IO_WAKE_RESUME)
        server_listener_resume(t);
    if ((flags & IO_WAKE_DRAIN) && !t->draining) {
        /* Connections the kernel completed before the signal were made by
         * clients that had every reason to expect an answer: accept them
         * (closing the listener would reset them) and read what they sent. */
        for (int k = 0; k < 64 && t->listen_fd >= 0 &&
                        server_accept_batch(t, t->listen_fd, false) == ACCEPT_BATCH; k++)
            ;
        for (int k = 0; k < 64 && t->h2_listen_fd >= 0 &&
                        server_accept_batch(t, t->h2_listen_fd, true) == ACCEPT_BATCH; k++)
            ;
        server_listener_close(t);
        http_conn_drain_all(t);
        h2_conn_drain_all(t);
    }
    if (flags & IO_WAKE_FORCE) {
        t->draining = true;
        server_listener_close(t);
        t->abandoned += http_conn_abort_all(t);
        t->abandoned += h2_conn_abort_all(t);
        event_base_loopbreak(t->base);
        return;
    }
    if (t->draining && t->nconns == 0)
        event_base_loopbreak(t->base);
}

static void *server_io_thread_main(void *arg)
{
    struct io_thread *t = arg;
    /* A thread whose listener is paused at max_connections and that holds no
     * connection has nothing registered: it must wait, not exit. */
    event_base_loop(t->base, EVLOOP_NO_EXIT_ON_EMPTY);
    /* Answers still in the mailbox go first (to their connections, open or
     * not), then whatever is left (zombies whose handlers never answered). */
    mailbox_free(t->mailbox);
    t->mailbox = NULL;
    http_conn_thread_free(t);
    h2_conn_thread_free(t);
    atomic_fetch_sub(&t->srv->running, 1);
    pthread_kill(t->srv->notify, SIGUSR1);
    return NULL;
}

/* ---- public ---- */

struct server *server_new(const struct http_server_config *cfg, const struct router *router,
                          struct error *err)
{
    struct server *s = calloc(1, sizeof *s);
    if (!s) {
        error_set(err, BG_ENOMEM, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    s->router = router;
    s->nthreads = cfg->io_threads;
    if (s->nthreads <= 0)
        s->nthreads = cpus_usable();
    s->threads = calloc((size_t)s->nthreads, sizeof *s->threads);
    if (!s->threads) {
        free(s);
        error_set(err, BG_ENOMEM, "out of memory");
        return NULL;
    }
    for (int i = 0; i < s->nthreads; i++)
        io_thread_init(&s->threads[i]);
    return s;
}

int server_start(struct server *s, pthread_t notify, struct error *err)
{
    s->notify = notify;
    s->port = s->cfg.listen_port;
    s->h2_port = s->cfg.h2.listen_port;
    int claim = server_port_claim(s->port, err);
    int h2_claim = claim == -2 || s->h2_port == s->port ? -1 : server_port_claim(s->h2_port, err);
    int rc = claim == -2 || h2_claim == -2 ? BG_EIO : 0;
    if (!rc)
        rc = server_port_check(s->cfg.listen_host, s->port, "listen", err);
    if (!rc)
        rc = server_listeners_bind(s, false, err);
    if (!rc && s->h2_port > 0)
        rc = server_h2_check(s, err);
    if (!rc && s->h2_port >= 0)
        rc = server_listeners_bind(s, true, err);
    if (claim >= 0)
        close(claim);   /* our listeners are up: the next check sees them */
    if (h2_claim >= 0)
        close(h2_claim);
    if (rc)
        return rc;
    for (int i = 0; i < s->nthreads; i++) {
        struct io_thread *t = &s->threads[i];
        t->srv = s;
        t->conn_closed = server_conn_closed;
        t->index = i;
        t->limits = &s->cfg.limits;
        t->compression = &s->cfg.compression;
        t->router = s->router;
        t->h2 = &s->cfg.h2;
        t->flood_log = &s->flood_log;
        t->base = event_base_new();
        if (!t->base)
            return error_set(err, BG_EINTERNAL, "cannot create an event base");
        t->listen_ev = event_new(t->base, t->listen_fd, EV_READ | EV_PERSIST, server_on_accept, t);
        t->wake_ev = event_new(t->base, -1, 0, server_on_wake, t);
        t->retry_ev = evtimer_new(t->base, server_on_accept_retry, t);
        t->mailbox = mailbox_new(t->base);
        if (!t->listen_ev || !t->wake_ev || !t->retry_ev || !t->mailbox)
            return error_set(err, BG_ENOMEM, "out of memory creating events");
        event_add(t->listen_ev, NULL);
        if (t->h2_listen_fd >= 0) {
            t->h2_listen_ev = event_new(t->base, t->h2_listen_fd, EV_READ | EV_PERSIST,
                                        server_on_accept_h2, t);
            if (!t->h2_listen_ev)
                return error_set(err, BG_ENOMEM, "out of memory creating events");
            event_add(t->h2_listen_ev, NULL);
        }
    }
    for (int i = 0; i < s->nthreads; i++) {
        struct io_thread *t = &s->threads[i];
        atomic_fetch_add(&s->running, 1);
        rc = pthread_create(&t->tid, NULL, server_io_thread_main, t);
        if (rc != 0) {
            atomic_fetch_sub(&s->running, 1);
            server_force_close(s);
            return error_set(err, BG_EINTERNAL, "cannot start IO thread %d: %s", i, strerror(rc));
        }
        char name[32];   /* the kernel keeps 15 bytes */
        snprintf(name, sizeof name, "bg-io-%d", i % 100000);
        name[15] = '\0';
        pthread_setname_np(t->tid, name);
    }
    s->started = true;
    return 0;
}

int server_port(const struct server *s) { return s->port; }
int server_h2_port(const struct server *s) { return s->h2_port; }
int server_threads(const struct server *s) { return s->nthreads; }
struct event_base *server_event_base(const struct server *s, int i) { return s->threads[i].base; }
int server_running(const struct server *s) { return atomic_load(&s->running); }

int64_t server_inflight(const struct server *s)
{
    int64_t n = 0;
    for (int i = 0; i < s->nthreads; i++)
        n += atomic_load_explicit(&s->threads[i].inflight, memory_order_relaxed);
    return n;
}

void server_http_stats(const struct server *s, struct server_http_stats *out)
{
    memset(out, 0, sizeof *out);
    out->connections = atomic_load(&s->nconns);
    for (int i = 0; i < s->nthreads; i++) {
        const struct io_thread *t = &s->threads[i];
        out->accepted += atomic_load_explicit(&t->accepted, memory_order_relaxed);
        for (int k = 0; k < SERVER_STATUSES; k++)
            out->responses[k] += atomic_load_explicit(&t->responses[k], memory_order_relaxed);
    }
}

static void server_wake_all(struct server *s, int flag)
{
    for (int i = 0; i < s->nthreads; i++) {
        struct io_thread *t = &s->threads[i];
        if (!t->wake_ev || !t->tid)
            continue;
        atomic_fetch_or(&t->wake_flags, flag);
        event_active(t->wake_ev, EV_READ, 0);
    }
}

void server_drain(struct server *s) { server_wake_all(s, IO_WAKE_DRAIN); }
void server_force_close(struct server *s) { server_wake_all(s, IO_WAKE_FORCE); }

uint64_t server_join(struct server *s)
{
    uint64_t abandoned = 0;
    for (int i = 0; i < s->nthreads; i++) {
        struct io_thread *t = &s->threads[i];
        if (t->tid) {
            pthread_join(t->tid, NULL);
            t->tid = 0;
        }
        abandoned += t->abandoned;
    }
    return abandoned;
}

void server_free(struct server *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->nthreads; i++) {
        struct io_thread *t = &s->threads[i];
        server_listener_close(t);
        http_conn_thread_free(t);
        h2_conn_thread_free(t);
        if (t->listen_ev)
            event_free(t->listen_ev);
        if (t->h2_listen_ev)
            event_free(t->h2_listen_ev);
        if (t->wake_ev)
            event_free(t->wake_ev);
        if (t->retry_ev)
            event_free(t->retry_ev);
        mailbox_free(t->mailbox);
        http_deflater_free(t->deflater);
        if (t->base)
            event_base_free(t->base);
    }
    free(s->threads);
    free(s);
}
