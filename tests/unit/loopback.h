/* loopback.h - listening sockets on 127.0.0.1 for the unit tests of the
 * outbound HTTP client and the upstream-call driver (test_httpc.c,
 * test_upcall.c). Header-only: each test is one binary. Every wait is
 * bounded in rounds and time. Include after <cmocka.h>. */
#ifndef BG_TEST_LOOPBACK_H
#define BG_TEST_LOOPBACK_H

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

struct lsn {
    int fd, port;
};

/* A non-blocking listener on an ephemeral loopback port. */
static inline struct lsn listener(void)
{
    struct lsn l;
    l.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    assert_true(l.fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(l.fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(l.fd, 16), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(l.fd, (struct sockaddr *)&a, &len), 0);
    l.port = ntohs(a.sin_port);
    return l;
}

/* Runs the loop until the listener can accept (at most ~0.4 s); returns the socket. */
static inline int accept_one(struct event_base *base, struct lsn *l)
{
    for (int i = 0; i < 400; i++) {
        int s = accept(l->fd, NULL, NULL);
        if (s >= 0)
            return s;
        event_base_loop(base, EVLOOP_NONBLOCK);
        usleep(1000);
    }
    fail_msg("no connection arrived");
    return -1;
}

/* Accepts and closes whatever connections wait; returns how many. */
static inline int pending_connections(struct lsn *l)
{
    int n = 0, s;
    while ((s = accept(l->fd, NULL, NULL)) >= 0) {
        n++;
        close(s);
    }
    return n;
}

#endif
