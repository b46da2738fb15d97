"""upcall_cases.py - the retry policy of the one upstream-call driver
(common/upcall.h), seen from outside. Written once and mixed into a test
class per client of the driver (the reverse proxy in test_proxy.py, the
upstream backend in test_upstream.py), so the two are held to the same
cases and cannot drift:

  (a) a request lost with a reused keep-alive connection (the server closes
      it without answering) is sent again when the call is idempotent, and
      answered 502 when it is not;
  (b) a dead server (connect refused) among two is skipped for the other;
  (c) a call that times out is not sent again, to either server.

A class using it is a FakeUpstreamCase with two fake servers in cls.fakes
([(process, port)]) and defines:
  call(kind)   one request of that kind through the gateway: a harness
               response (status, json()); kinds:
               every kind of RESET_KINDS: calls to fakes[0] alone;
               "dead_first": to [a refused port, fakes[0]];
               "pair": to [fakes[0], fakes[1]], timing out after 500 ms;
  owner(kind)  the metric label that names the route or model of a kind;
  RESET_KINDS  [(kind, repeated)]: whether a loss on a reused connection is
               sent again for that kind;
  TIMEOUT_STATUS, TIMEOUT_NAME  the status and the setting a timeout names."""

import json
import re

from harness import roundtrip


class RetryCases:
    def fake(self, i, method, path, body=None):
        return roundtrip(self.fakes[i][1], method, path,
                         [("Content-Type", "application/json")] if body else None, body)

    def stats(self, i):
        return self.fake(i, "GET", "/__stats").json()

    def reset_fakes(self):
        for i in range(len(self.fakes)):
            self.fake(i, "POST", "/__reset", "{}")

    def failures(self, kind, url, reason):
        text = roundtrip(self.srv.port, "GET", "/metrics").body.decode()
        m = re.search(r'^batchgate_upstream_failures_total\{%s,upstream="%s",reason="%s"\} (\d+)$'
                      % (re.escape(self.owner(kind)), re.escape(url), reason), text, re.M)
        self.assertIsNotNone(m, "no %s failures of %s for %s" % (reason, url, kind))
        return int(m.group(1))

    def test_reset_on_a_reused_connection(self):
        self.addCleanup(self.reset_fakes)
        for kind, repeated in self.RESET_KINDS:
            self.reset_fakes()
            # A first call leaves a kept-alive connection to reuse.
            r = self.call(kind)
            self.assertEqual(r.status, 200, "%s: %r" % (kind, r))
            self.fake(0, "POST", "/__fault", json.dumps({"mode": "drop_reused", "count": 1}))
            before = self.stats(0)["requests"]
            r = self.call(kind)
            st = self.stats(0)
            self.assertEqual(st["drops"], 1, "%s: the request went out on the reused connection"
                                             % kind)
            if repeated:
                self.assertEqual(r.status, 200, "%s: sent again: %r" % (kind, r))
                self.assertEqual(st["requests"] - before, 2, kind)
            else:
                self.assertEqual(r.status, 502, "%s: not sent again: %r" % (kind, r))
                # The server named by its place in the configuration,
                # not its address (clients need not learn the network).
                self.assertRegex(r.json()["error"], r"urls\[0\]: ")
                self.assertNotIn("127.0.0.1", r.json()["error"])
                self.assertEqual(st["requests"] - before, 1, kind)

    def test_dead_target_is_skipped(self):
        self.reset_fakes()
        for i in range(4):
            r = self.call("dead_first")
            self.assertEqual(r.status, 200, "call %d: %r" % (i, r))
        self.assertEqual(self.stats(0)["requests"], 4)
        self.assertGreaterEqual(self.failures("dead_first", self.dead_url, "connect"), 1)

    def test_timeout_is_not_repeated(self):
        self.reset_fakes()
        self.addCleanup(self.reset_fakes)   # the server that was not called keeps its fault
        for i in range(2):
            self.fake(i, "POST", "/__fault", json.dumps({"mode": "hang", "count": 1}))
        r = self.call("pair")
        self.assertEqual(r.status, self.TIMEOUT_STATUS, r)
        self.assertIn(self.TIMEOUT_NAME, r.json()["error"])
        st = [self.stats(i) for i in range(2)]
        self.assertEqual([s["requests"] for s in st], [1, 0], "only one server saw the call")
        self.assertEqual(st[0]["hangs"], 1)
        self.assertGreaterEqual(self.failures("pair", self.urls[0], "timeout"), 1)
