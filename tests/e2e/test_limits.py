"""limits: max_header_bytes, max_body_bytes, header_timeout_ms (slowloris),
idle_timeout_ms and max_connections."""

import json
import os
import select
import socket
import time
import unittest

from harness import (Server, ServerCase, assert_json_error, buffered, chunked, close_quietly, connect,
                     expect_eof, expect_silence, read_response, request, roundtrip, send)
from test_infer import DIGITS
from test_lifecycle_memory import heap_in_use

MAX_HEADER = 1024
MAX_BODY = 1000
HEADER_TIMEOUT = 0.4
IDLE_TIMEOUT = 0.6
# Timers must not fire early; late is tolerated up to this much (a loaded CI box).
SLACK = 1.0
EARLY = 0.02   # clock granularity between this process and the server


def padded_request(total, path="/v2/health/live"):
    """A GET whose head (request line through the blank line) is exactly `total` bytes."""
    base = len(request("GET", path, [("X-Pad", "")]))
    assert total >= base, "cannot pad below %d bytes" % base
    req = request("GET", path, [("X-Pad", "p" * (total - base))])
    assert len(req) == total
    return req


class LimitsTest(ServerCase):
    config = {"limits": {"max_header_bytes": MAX_HEADER, "max_body_bytes": MAX_BODY,
                         "header_timeout_ms": int(HEADER_TIMEOUT * 1000),
                         "idle_timeout_ms": int(IDLE_TIMEOUT * 1000)}}


    def assert_closed_after(self, s, resp, status):
        assert_json_error(self, resp, status, close=True)
        expect_eof(s, 2.0)

    def assert_timed(self, elapsed, nominal, what):
        self.assertGreaterEqual(elapsed, nominal - EARLY, "expected %s after about %.0f ms, not "
                                "before; it came after %.0f ms" % (what, nominal * 1e3, elapsed * 1e3))
        self.assertLessEqual(elapsed, nominal + SLACK, "expected %s after about %.0f ms; it came "
                             "after %.0f ms" % (what, nominal * 1e3, elapsed * 1e3))

    # ---- max_header_bytes

    def test_head_of_exactly_max_header_bytes_is_accepted(self):
        s = self.conn()
        send(s, padded_request(MAX_HEADER))
        r = read_response(s)
        self.assertEqual(r.status, 200, "expected a head of exactly max_header_bytes (%d, CRLFs "
                         "included) to be accepted: %r" % (MAX_HEADER, r))

    def test_head_one_byte_over_is_431(self):
        s = self.conn()
        send(s, padded_request(MAX_HEADER + 1))
        r = read_response(s)
        self.assert_closed_after(s, r, 431)

    def test_head_limit_counted_across_reads(self):
        # The same heads sent in pieces that reach the server in separate reads.
        for total, want in ((MAX_HEADER, 200), (MAX_HEADER + 1, 431)):
            s = self.conn()
            req = padded_request(total)
            for a, b in ((0, 7), (7, 300), (300, total - 1), (total - 1, total)):
                send(s, req[a:b])
                time.sleep(0.02)
            r = read_response(s)
            self.assertEqual(r.status, want, "expected %d for a %d-byte head (limit %d) sent in "
                             "pieces: %r" % (want, total, MAX_HEADER, r))
            if want != 200:
                self.assert_closed_after(s, r, want)

    def test_header_limit_applies_per_request(self):
        # Five requests of nearly the limit on one connection, one at a time,
        # then three pipelined in one send: each is measured on its own.
        s = self.conn()
        req = padded_request(MAX_HEADER - 10)
        for i in range(5):
            send(s, req)
            r = read_response(s)
            self.assertEqual(r.status, 200, "expected keep-alive request %d of %d bytes (limit %d) "
                             "accepted: %r" % (i, len(req), MAX_HEADER, r))
        send(s, req * 3)
        for i in range(3):
            r = read_response(s)
            self.assertEqual(r.status, 200, "expected pipelined request %d of %d bytes accepted: "
                             "%r" % (i, len(req), r))

    def test_never_ending_headers_431(self):
        s = self.conn()
        data = b"GET /v2 HTTP/1.1\r\nHost: x\r\n"
        while len(data) < 2 * MAX_HEADER:
            data += b"X-Flood-%d: %s\r\n" % (len(data), b"f" * 40)
        send(s, data)   # and never the blank line
        r = read_response(s, timeout=2)
        self.assert_closed_after(s, r, 431)

    def test_header_limit_with_body_request(self):
        # The body does not count towards max_header_bytes.
        base = request("POST", "/debug/echo", [("X-Pad", "")], b"b" * 900)
        head_len = len(base) - 900
        req = request("POST", "/debug/echo", [("X-Pad", "p" * (MAX_HEADER - head_len))], b"b" * 900)
        s = self.conn()
        send(s, req)
        r = read_response(s)
        self.assertEqual((r.status, r.body), (200, b"b" * 900),
                         "expected a max-size head plus a body to be accepted: %r" % r)

    # ---- max_body_bytes

    def test_body_of_exactly_max_body_bytes_is_accepted(self):
        s = self.conn()
        body = bytes(range(250)) * 4
        send(s, request("POST", "/debug/echo", [("Content-Type", "a/b")], body))
        r = read_response(s)
        self.assertEqual((r.status, r.body), (200, body),
                         "expected a body of exactly max_body_bytes echoed: %r" % r)

    def test_content_length_over_limit_is_413_before_the_body(self):
        s = self.conn()
        send(s, request("POST", "/debug/echo", [("Content-Length", str(MAX_BODY + 1))]))
        # No body sent: the answer must come from the headers alone.
        r = read_response(s, timeout=HEADER_TIMEOUT * 0.75)
        self.assert_closed_after(s, r, 413)

    def test_body_over_limit_sent_anyway_still_gets_413(self):
        # A client that sends its body without waiting still reads the 413
        # (the server discards input for a while instead of resetting).
        s = self.conn()
        body = b"o" * (MAX_BODY * 100)
        send(s, request("POST", "/debug/echo", None, body))
        r = read_response(s)
        self.assert_closed_after(s, r, 413)

    def test_chunked_over_limit_is_413(self):
        s = self.conn()
        send(s, request("POST", "/debug/echo", [("Transfer-Encoding", "chunked")],
                        chunked([b"c" * 600, b"c" * 401])))
        r = read_response(s)
        self.assert_closed_after(s, r, 413)

    def test_chunked_exactly_limit_is_accepted(self):
        s = self.conn()
        send(s, request("POST", "/debug/echo", [("Transfer-Encoding", "chunked")],
                        chunked([b"c" * 600, b"d" * 400])))
        r = read_response(s)
        self.assertEqual((r.status, r.body), (200, b"c" * 600 + b"d" * 400),
                         "expected a chunked body of exactly max_body_bytes echoed: %r" % r)

    def test_chunk_extensions_held_to_max_header_bytes(self):
        # Chunk extensions are dropped unread; all of a body's together
        # (names, values, one byte per ';') are held to max_header_bytes.
        # Unbounded, one request took 1 GiB of them.
        def body(n):   # n one-byte chunks, each with a 60-byte extension name: 61 counted
            return b"".join(b"1;" + b"x" * 60 + b"\r\na\r\n" for _ in range(n)) + b"0\r\n\r\n"
        s = self.conn()
        send(s, request("POST", "/debug/echo", [("Transfer-Encoding", "chunked")], body(16)))
        r = read_response(s)   # 976 bytes of extensions
        self.assertEqual((r.status, r.body), (200, b"a" * 16), r)
        s = self.conn()
        send(s, request("POST", "/debug/echo", [("Transfer-Encoding", "chunked")], body(17)))
        r = read_response(s)   # 1037
        self.assert_closed_after(s, r, 400)
        self.assertIn("chunk extensions exceed limits.max_header_bytes", r.json()["error"])

    def test_trailer_counted_the_same_at_every_split(self):
        # The trailer section, from its first field through the blank line,
        # is held to max_header_bytes however the reads fall (it was counted
        # from the last chunk's line at some splits and not at others).
        head = request("POST", "/debug/echo", [("Transfer-Encoding", "chunked")])
        for total, want in ((MAX_HEADER, 200), (MAX_HEADER + 1, 431)):
            trailer = b"X-T: " + b"t" * (total - 9) + b"\r\n\r\n"
            assert len(trailer) == total
            msg = head + b"2\r\nhi\r\n0\r\n" + trailer
            cut0 = len(head) + len(b"2\r\nhi\r\n")
            for cut in (cut0, cut0 + 2, cut0 + 3, cut0 + 5, len(msg) - 1):
                s = self.conn()
                send(s, msg[:cut])
                time.sleep(0.05)
                send(s, msg[cut:])
                r = read_response(s)
                self.assertEqual(r.status, want, "a %d-byte trailer (limit %d) split at %d: %r"
                                 % (total, MAX_HEADER, cut - cut0, r))
                if want != 200:
                    self.assert_closed_after(s, r, want)
                close_quietly(s)

    def test_expect_continue_over_limit_is_413_without_100(self):
        s = self.conn()
        send(s, request("POST", "/debug/echo",
                        [("Expect", "100-continue"), ("Content-Length", str(MAX_BODY * 5))]))
        r = read_response(s, timeout=2)
        self.assertNotEqual(r.status, 100, "expected no 100 Continue for a body over the limit")
        self.assert_closed_after(s, r, 413)

    # ---- header_timeout_ms

    def test_partial_headers_time_out_408(self):
        s = self.conn()
        t0 = time.monotonic()
        send(s, b"GET /v2 HTTP/1.1\r\nHost: x\r\n")
        r = read_response(s, timeout=HEADER_TIMEOUT + SLACK + 1)
        self.assert_timed(r.t - t0, HEADER_TIMEOUT, "the 408")
        self.assert_closed_after(s, r, 408)

    def test_trickled_headers_still_time_out(self):
        s = self.conn()
        data = b"GET /v2 HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"s" * 100
        t0 = time.monotonic()
        got = False
        for i in range(len(data)):   # one byte per 100 ms, at most ~10 s; stops at the answer
            try:
                s.send(data[i:i + 1])
            except (BrokenPipeError, ConnectionResetError):
                break
            r, _, _ = select.select([s], [], [], 0.1)
            if r:
                got = True
                break
            if time.monotonic() - t0 > HEADER_TIMEOUT + SLACK + 1:
                break
        self.assertTrue(got, "expected a 408 while trickling headers one byte per 100 ms "
                        "(the header timer must not be reset by progress)")
        r = read_response(s, timeout=2)
        self.assert_timed(r.t - t0, HEADER_TIMEOUT, "the 408 (timed from the first byte)")
        self.assert_closed_after(s, r, 408)

    def test_silent_connection_is_closed(self):
        t0 = time.monotonic()   # before the server can have accepted
        s = self.conn()
        t_eof = expect_eof(s, HEADER_TIMEOUT + SLACK + 1)   # also asserts no response bytes
        self.assert_timed(t_eof - t0, HEADER_TIMEOUT, "EOF on a connection that sent nothing")

    def test_first_request_due_from_accept(self):
        # The first request's headers are due header_timeout after accept, not
        # after its first byte: a byte late in the window does not extend it.
        s = self.conn()
        t0 = time.monotonic()
        time.sleep(HEADER_TIMEOUT * 0.6)
        send(s, b"G")
        r = read_response(s, timeout=HEADER_TIMEOUT + SLACK + 1)
        self.assert_timed(r.t - t0, HEADER_TIMEOUT, "the 408 (timed from accept)")
        self.assert_closed_after(s, r, 408)

    def test_stalled_body_times_out_408(self):
        s = self.conn()
        t0 = time.monotonic()   # before the server's last read
        send(s, b"POST /debug/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        r = read_response(s, timeout=HEADER_TIMEOUT + SLACK + 1)
        self.assert_timed(r.t - t0, HEADER_TIMEOUT, "the 408 for a stalled body")
        self.assert_closed_after(s, r, 408)

    def test_header_timer_is_per_request(self):
        # A keep-alive connection busy for longer than both timeouts is not cut.
        s = self.conn()
        t0 = time.monotonic()
        i = 0
        while time.monotonic() - t0 < 1.5 * max(HEADER_TIMEOUT, IDLE_TIMEOUT):
            send(s, request("GET", "/debug/delay?ms=0&id=%d" % i))
            r = read_response(s)
            self.assertEqual(r.json()["id"], str(i), "expected request %d answered" % i)
            i += 1
            time.sleep(0.15)

    def test_408_waits_behind_an_earlier_answer(self):
        s = self.conn()
        send(s, request("GET", "/debug/delay?ms=700&id=first") + b"GET /v2 HTTP/1.1\r\nHost: x\r\n")
        r = read_response(s, timeout=3)
        self.assertEqual((r.status, r.json().get("id")), (200, "first"),
                         "expected the in-flight request answered before the 408: %r" % r)
        r = read_response(s, timeout=3)
        self.assert_closed_after(s, r, 408)

    # ---- idle_timeout_ms

    def test_idle_keep_alive_is_closed(self):
        s = self.conn()
        t_send = time.monotonic()
        send(s, request("GET", "/v2/health/live"))
        r = read_response(s)
        self.assertEqual(r.status, 200, "expected the first request answered")
        t_eof = expect_eof(s, IDLE_TIMEOUT + SLACK + 1)
        # The server's idle clock starts when it wrote the answer: after t_send, before r.t.
        self.assertGreaterEqual(t_eof - t_send, IDLE_TIMEOUT - EARLY, "expected the idle "
                                "connection kept for idle_timeout_ms (%.0f ms); EOF came %.0f ms "
                                "after the request" % (IDLE_TIMEOUT * 1e3, (t_eof - t_send) * 1e3))
        self.assertLessEqual(t_eof - r.t, IDLE_TIMEOUT + SLACK, "expected EOF about "
                             "idle_timeout_ms after the answer; it came after %.0f ms"
                             % ((t_eof - r.t) * 1e3))


    def test_request_in_flight_is_not_cut_by_timers(self):
        # No connection timer runs while a handler works on a request.
        s = self.conn()
        send(s, request("GET", "/debug/delay?ms=%d&id=long" % int(2.5 * IDLE_TIMEOUT * 1000)))
        r = read_response(s, timeout=5)
        self.assertEqual((r.status, r.json().get("id")), (200, "long"),
                         "expected a request slower than both timeouts answered: %r" % r)

class PipelineTest(ServerCase):
    """Pipelining clients against a model: one that reads its answers late
    with a small receive buffer (its kernel, fed answers it has no room
    for, holds its own sends back, so the server sees the client's bytes
    stop mid-body: a client not reading its answers, idle_timeout_ms, not a
    stalled body; it was answered 408 after header_timeout_ms and reset,
    and ~300 answers the server had written were thrown away), and what
    queued requests hold."""
    config = {"model_repository": os.path.dirname(DIGITS),
              "limits": {"header_timeout_ms": 300, "idle_timeout_ms": 10000}}

    def test_every_answer_reaches_a_late_reader(self):
        n = 1000
        body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64],
                                       "data": [0.5] * 64}]})
        s = socket.create_connection(("127.0.0.1", self.srv.port))
        # Shrunk after the window was offered: the kernel then drops the
        # answers it has no room for (the server's ACKs ride on them). The
        # answers come from the model's worker, a batch at a time.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.addCleanup(close_quietly, s)
        s.sendall(request("POST", "/v2/models/digits/infer",
                          [("Content-Type", "application/json")], body) * n)
        time.sleep(1.5)   # 5 x header_timeout_ms
        got = 0
        for _ in range(n):
            r = read_response(s, timeout=10)
            self.assertEqual(r.status, 200, "answer %d: %r" % (got, r))
            got += 1
        self.assertEqual(got, n)

    def test_queued_requests_hold_their_tensors_not_their_bodies(self):
        # 2 connections pipeline 40 requests each, every body padded with
        # spaces to 1 MiB, while the model is held by a slow batch: 80 queued
        # requests held 80 MiB of text (a gzip body of 1 KiB inflating to
        # it, the same), though each decodes to 256 bytes of input.
        body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64],
                                       "data": [0.5] * 64}]})
        body += " " * ((1 << 20) - len(body))
        r = roundtrip(self.srv.port, "POST", "/debug/fault", [],
                      json.dumps({"model": "digits", "mode": "slow", "count": 1, "ms": 2000}))
        self.assertEqual(r.status, 200, r)
        first = connect(self.srv.port)   # the slow batch's one request
        self.addCleanup(close_quietly, first)
        send(first, request("POST", "/v2/models/digits/infer", [], body))
        time.sleep(0.2)
        base = heap_in_use(self.srv.port)
        socks = []
        for _ in range(2):
            s = connect(self.srv.port)
            self.addCleanup(close_quietly, s)
            send(s, request("POST", "/v2/models/digits/infer", [], body) * 40)
            socks.append(s)
        time.sleep(1.0)   # read, decoded, queued behind the slow batch
        held = heap_in_use(self.srv.port) - base
        self.assertLess(held, 16 << 20, "80 queued requests hold %.1f MiB" % (held / (1 << 20)))
        for s in [first] + socks:
            for _ in range(1 if s is first else 40):
                self.assertEqual(read_response(s, timeout=20).status, 200)


class MaxConnectionsTest(unittest.TestCase):
    LIMIT = 2

    def setUp(self):
        self.srv = Server({"limits": {"max_connections": self.LIMIT}})
        self.addCleanup(self.srv.kill)
        self.socks = []

    def tearDown(self):
        for s in self.socks:
            close_quietly(s)
        self.assertTrue(self.srv.alive(), "expected the server to survive the test; log:\n"
                        + self.srv.log())
        self.srv.stop_checked()

    def fill(self):
        """LIMIT answered keep-alive connections, then one more with a request sent."""
        held = []
        for i in range(self.LIMIT):
            s = connect(self.srv)
            self.socks.append(s)
            send(s, request("GET", "/v2/health/live"))
            r = read_response(s)
            self.assertEqual(r.status, 200, "expected connection %d (within the limit) served" % i)
            held.append(s)
        extra = connect(self.srv)   # the kernel's backlog accepts the TCP connection
        self.socks.append(extra)
        send(extra, request("GET", "/debug/delay?ms=0&id=extra"))
        return held, extra

    def test_extra_connection_waits_for_a_slot(self):
        held, extra = self.fill()
        expect_silence(extra, 0.5)
        # The held ones still work.
        send(held[0], request("GET", "/v2/health/ready"))
        self.assertEqual(read_response(held[0]).status, 200,
                         "expected an open connection to keep working at the limit")
        held[1].close()
        r = read_response(extra, timeout=1.0)
        self.assertEqual((r.status, r.json()["id"]), (200, "extra"),
                         "expected the waiting connection answered once a slot freed: %r" % r)

    def test_no_spinning_at_the_limit(self):
        held, extra = self.fill()
        time.sleep(0.1)
        c0 = self.srv.cpu_seconds()
        time.sleep(1.0)
        used = self.srv.cpu_seconds() - c0
        self.assertLess(used, 0.2, "expected the server idle at max_connections with a connection "
                        "waiting in the backlog; it used %.2f s of CPU in 1 s" % used)
        self.assertEqual(buffered(extra), b"", "expected no answer to the waiting connection")
        held[0].close()
        r = read_response(extra, timeout=1.0)
        self.assertEqual(r.status, 200, "expected the waiting connection served after a close")


class MaxConnectionsTwoThreadsTest(unittest.TestCase):
    """max_connections with two IO threads: the kernel spreads newcomers over
    both threads' listening sockets (SO_REUSEPORT), so a thread holding no
    connection at all also meets the limit. Whichever thread a waiting
    connection landed on, it must be served once a slot frees up."""

    EXTRA = 8   # each lands on either thread: all on c1's thread has odds 1/256

    def setUp(self):
        self.srv = Server({"limits": {"max_connections": 1}}, io_threads=2)
        self.addCleanup(self.srv.kill)
        self.socks = []

    def tearDown(self):
        for s in self.socks:
            close_quietly(s)
        self.assertTrue(self.srv.alive(), "expected the server to survive the test")
        self.srv.stop_checked()

    def test_waiting_connections_on_any_thread_are_served(self):
        held = connect(self.srv)
        self.socks.append(held)
        send(held, request("GET", "/v2/health/live"))
        self.assertEqual(read_response(held).status, 200, "expected the first connection served")
        extras = []
        for i in range(self.EXTRA):
            s = connect(self.srv)
            self.socks.append(s)
            send(s, request("GET", "/debug/delay?ms=0&id=e%d" % i, [("Connection", "close")]))
            extras.append(s)
        r, _, _ = select.select(extras, [], [], 0.5)
        self.assertEqual(r, [], "expected no answer to connections past max_connections")
        held.close()
        # Each answer closes its connection (the server waits for our close
        # before it frees the slot), so serve them in whatever order they come.
        pending = {s: "e%d" % i for i, s in enumerate(extras)}
        deadline = time.monotonic() + 3.0
        while pending and time.monotonic() < deadline:
            ready, _, _ = select.select(list(pending), [], [], 0.05)
            for s in ready:
                r = read_response(s, timeout=1.0)
                self.assertEqual(r.json().get("id"), pending.pop(s),
                                 "expected the waiting request's own answer: %r" % r)
                s.close()
        self.assertFalse(pending, "expected every connection that waited at max_connections served "
                         "once slots freed up (within 3 s); %d of %d never were"
                         % (len(pending), self.EXTRA))
        for i in range(4):
            s = connect(self.srv)
            self.socks.append(s)
            send(s, request("GET", "/v2/health/live", [("Connection", "close")]))
            self.assertEqual(read_response(s, timeout=1.0).status, 200,
                             "expected a fresh connection served after the burst")
            s.close()


if __name__ == "__main__":
    unittest.main()
