"""test_budget.py - latency budgets and priorities over HTTP, with synthetic
models whose costs are known: a budget that cannot be met is refused at once,
a queued request whose budget runs out is answered 504 at that moment (not
when a batch finishes), higher priority goes first, and the headers and body
parameters that set them are checked."""

import threading
import time
import unittest

from harness import RepoServerCase, close_quietly, connect, read_response, request, roundtrip, send
from test_infer import infer_body, synthetic, write_model

ROW = [[1, 2, 3, 4]]


def post(port, model, headers=(), body=None, timeout=10.0):
    h = [("Content-Type", "application/json")] + list(headers)
    return roundtrip(port, "POST", "/v2/models/%s/infer" % model, h,
                     body or infer_body(ROW, name="x"), timeout=timeout)


class BudgetTest(RepoServerCase):
    @classmethod
    def populate(cls, repo):
        # One request at a time, 200 ms each.
        write_model(repo, "slow", synthetic("slow", base_us=200000, per_row_us=0,
                                            batching={"max_batch_size": 1}))
        # Every request gets a 20 ms budget by default; a batch takes 60 ms.
        write_model(repo, "budgeted", synthetic("budgeted", base_us=60000, per_row_us=0,
                                                batching={"latency_budget_ms": 20}))

    def stats(self, model):
        return roundtrip(self.srv.port, "GET", "/v2/models/%s/stats" % model).json()["model_stats"][0]

    def test_impossible_budget_refused_at_once(self):
        for headers, body in (([("X-Request-Timeout-Ms", "50")], None),
                              ((), infer_body(ROW, name="x", parameters={"timeout": 50000}))):
            before = self.stats("slow")
            t0 = time.monotonic()
            r = post(self.srv.port, "slow", headers, body)
            elapsed = time.monotonic() - t0
            self.assertEqual(r.status, 504, r)
            self.assertIn("cannot be met", r.json()["error"])
            # Computing it would take 200 ms; the refusal does not wait for that.
            self.assertLess(elapsed, 0.15, "a hopeless request is answered at once")
            self.assertEqual(self.stats("slow")["inference_count"], before["inference_count"],
                             "nothing runs for a request that is already late")

    def test_model_default_budget(self):
        r = post(self.srv.port, "budgeted")
        self.assertEqual(r.status, 504, "60 ms of work cannot meet the model's 20 ms budget")
        r = post(self.srv.port, "budgeted", [("X-Request-Timeout-Ms", "500")])
        self.assertEqual(r.status, 200, "a request's own budget overrides the model's")
        r = post(self.srv.port, "budgeted", body=infer_body(ROW, name="x",
                                                            parameters={"timeout": 0}))
        self.assertEqual(r.status, 200, "timeout 0 means no budget (Triton)")

    def test_huge_budgets_are_long_not_late(self):
        # Budgets near 2^63 ns once wrapped past the clock into the past: a
        # client asking for no hurry got 504 "cannot be met".
        for headers, body in (([("X-Request-Timeout-Ms", "9223372036853")], None),
                              ([("X-Request-Timeout-Ms", "999999999999999999")], None),
                              ((), infer_body(ROW, name="x",
                                              parameters={"timeout": 9223372036854775})),
                              ((), infer_body(ROW, name="x",
                                              parameters={"timeout": 9223372036854775807}))):
            r = post(self.srv.port, "budgeted", headers, body)
            self.assertEqual(r.status, 200, (headers, body, r))

    def test_queued_request_expires_at_its_moment(self):
        # A occupies the instance for 200 ms. B (budget 250 ms) is feasible alone
        # when it arrives, but once 50 ms pass it can no longer finish in time:
        # it must be answered then, not when A's batch ends at 200 ms.
        before = self.stats("slow")
        a = connect(self.srv.port)
        send(a, request("POST", "/v2/models/slow/infer", [("Content-Type", "application/json")],
                        infer_body(ROW, name="x")))
        time.sleep(0.01)
        t0 = time.monotonic()
        r = post(self.srv.port, "slow", [("X-Request-Timeout-Ms", "250")])
        elapsed = time.monotonic() - t0
        self.assertEqual(r.status, 504, r)
        self.assertIn("ran out while queued", r.json()["error"])
        self.assertLess(elapsed, 0.15, "expired when hopeless (~50 ms), not at the batch end")
        ra = read_response(a, timeout=5)
        self.assertEqual(ra.status, 200)
        close_quietly(a)
        time.sleep(0.05)
        self.assertEqual(self.stats("slow")["inference_count"] - before["inference_count"], 1,
                         "the expired request was never computed")

    def test_higher_priority_first(self):
        # The instance is busy with A; L (priority 5) queues before H (priority 1).
        order = []
        lock = threading.Lock()

        def one(name, prio, delay):
            time.sleep(delay)
            r = post(self.srv.port, "slow", [("X-Priority", str(prio))])
            with lock:
                order.append((name, r.status))

        threads = [threading.Thread(target=one, args=args)
                   for args in (("A", 1, 0), ("L", 5, 0.05), ("H", 1, 0.1))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        self.assertEqual(order, [("A", 200), ("H", 200), ("L", 200)],
                         "H overtakes L in the queue")

    def test_priority_in_body_wins_over_header(self):
        body = infer_body(ROW, name="x", parameters={"priority": 2})
        r = post(self.srv.port, "slow", [("X-Priority", "junk")], body)
        self.assertEqual(r.status, 200, "the body's parameter is used; the header is not read")

    def test_bad_headers(self):
        for name, value in (("X-Priority", "high"), ("X-Priority", "-1"),
                            ("X-Request-Timeout-Ms", "soon"), ("X-Request-Timeout-Ms", "1.5")):
            r = post(self.srv.port, "slow", [(name, value)])
            self.assertEqual(r.status, 400, "%s: %s" % (name, value))
            self.assertIn(name, r.json()["error"])
        r = post(self.srv.port, "slow", body=infer_body(ROW, name="x", parameters={"priority": -3}))
        self.assertEqual(r.status, 400)
        self.assertIn("parameters.priority", r.json()["error"])
        # Past the lowest priority (default_priority's range): Triton's
        # parameter (a uint64 there) is the model's default, as Triton reads
        # a priority past its levels (it was 400); our header says the range.
        for p in (1000001, 2 ** 63 - 1):
            r = post(self.srv.port, "slow", body=infer_body(ROW, name="x",
                                                            parameters={"priority": p}))
            self.assertEqual(r.status, 200, r)
        r = post(self.srv.port, "slow", [("X-Priority", "1000001")])
        self.assertEqual(r.status, 400, r)
        self.assertIn("X-Priority", r.json()["error"])
        self.assertIn("1000000", r.json()["error"])


if __name__ == "__main__":
    unittest.main()
