"""test_scheduling.py - the device scheduler end to end (docs/SCHEDULING.md):
two synthetic models placed on one device, each saturated by its own
clients, split the device's busy time by their scheduling.weight (2:1, then
1:1, from /metrics); the time their batches waited for a slot is counted;
a job yields the device to another model's online requests whatever the
weights; and a model alone on a scheduled device serves as fast as one that
is not scheduled at all.

The synthetic models sleep (mode "sleep"): the device is pretend, so the
test leaves the machine's cores to others. Every phase is bounded in time."""

import threading
import time
import unittest

from harness import RepoServerCase, roundtrip
from test_infer import infer_body, post, synthetic, write_model
from test_jobs import JobsCase, line, submit
from test_metrics import busy, parse, value

BATCH_US = 20000     # one batch: 20 ms whatever its rows
MAX_BATCH = 2
CLIENTS = 8          # per model: four batches' worth queued, so it never runs dry
WARM_S = 1.0
MEASURE_S = 3.0


def placed(name, weight=None, device=None):
    cfg = synthetic(name, base_us=BATCH_US, per_row_us=0, mode="sleep",
                    batching={"max_batch_size": MAX_BATCH, "max_queue_delay_us": 1000})
    if device is not None:
        cfg["instances"] = {"count": 1, "devices": [device]}
    if weight is not None:
        cfg["scheduling"] = {"weight": weight}
    return cfg


def saturate(port, model, seconds, clients=CLIENTS):
    """Each client posts one row at a time for `seconds`; the answers
    counted, and any error."""
    stop = time.monotonic() + seconds
    answered, errors = [0], []
    lock = threading.Lock()
    body = infer_body([[1, 2, 3, 4]], name="x")

    def client():
        while time.monotonic() < stop:
            try:
                r = post(port, "/v2/models/%s/infer" % model, body, timeout=10)
            except OSError as e:
                errors.append(repr(e))
                return
            if r.status != 200:
                errors.append("%s: %d %s" % (model, r.status, r.body[:200]))
                return
            with lock:
                answered[0] += 1

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 30)
    return answered[0], errors


class SchedulingTest(RepoServerCase):
    @classmethod
    def populate(cls, repo):
        write_model(repo, "heavy", placed("heavy", weight=2, device=0))
        write_model(repo, "light", placed("light", weight=1, device=0))
        write_model(repo, "even1", placed("even1", weight=1, device=1))
        write_model(repo, "even2", placed("even2", weight=1, device=1))
        write_model(repo, "alone", placed("alone", weight=5, device=2))
        write_model(repo, "free", placed("free"))   # no placement: not scheduled

    def scrape(self):
        r = roundtrip(self.srv.port, "GET", "/metrics", timeout=10)
        self.assertEqual(r.status, 200)
        return parse(r.body.decode())

    def load(self, models):
        """Saturates each model with CLIENTS clients; returns the /metrics
        samples at the start and the end of the measured window and the
        answers counted in it, per model."""
        stop = time.monotonic() + WARM_S + MEASURE_S + 1.0
        counting = threading.Event()
        answered = {m: 0 for m in models}
        errors = []
        lock = threading.Lock()
        body = infer_body([[1, 2, 3, 4]], name="x")

        def client(model):
            while time.monotonic() < stop:
                try:
                    r = post(self.srv.port, "/v2/models/%s/infer" % model, body, timeout=10)
                except OSError as e:   # noqa: PERF203 - a bounded loop
                    errors.append(repr(e))
                    return
                if r.status != 200:
                    errors.append("%s: %d %s" % (model, r.status, r.body[:200]))
                    return
                if counting.is_set():
                    with lock:
                        answered[model] += 1

        threads = [threading.Thread(target=client, args=(m,)) for m in models
                   for _ in range(CLIENTS)]
        for t in threads:
            t.start()
        time.sleep(WARM_S)
        before = self.scrape()
        counting.set()
        time.sleep(MEASURE_S)
        counting.clear()
        after = self.scrape()
        for t in threads:
            t.join(timeout=30)
        self.assertEqual(errors, [])
        return before, after, answered

    def split(self, a, b, device):
        before, after, _ = self.load([a, b])
        da = busy(after, model=a, device=device) - busy(before, model=a, device=device)
        db = busy(after, model=b, device=device) - busy(before, model=b, device=device)
        # Saturated and work-conserving: the device never idles.
        self.assertGreater(da + db, 0.9 * MEASURE_S, (da, db))
        self.assertLess(da + db, 1.1 * MEASURE_S, (da, db))
        return da / db, after

    def test_weights_two_to_one(self):
        ratio, after = self.split("heavy", "light", "synthetic0")
        print("# heavy:light busy time %.3f:1 (weights 2:1)" % ratio)
        self.assertAlmostEqual(ratio, 2.0, delta=0.1)
        # The light model waited for the slot, and says so.
        for m in ("heavy", "light"):
            self.assertGreater(value(after, "batchgate_device_scheduler_wait_seconds_total",
                                     model=m, device="synthetic0"), 0.1, m)
        self.assertEqual(value(after, "batchgate_device_scheduler_weight", model="heavy",
                               device="synthetic0"), 2)

    def test_weights_one_to_one(self):
        ratio, _ = self.split("even1", "even2", "synthetic1")
        print("# even1:even2 busy time %.3f:1 (weights 1:1)" % ratio)
        self.assertAlmostEqual(ratio, 1.0, delta=0.05)

    def test_model_alone_is_not_slowed(self):
        # The same model, scheduled alone on its device and not scheduled:
        # the scheduler's slot is always free for it.
        _, _, alone = self.load(["alone"])
        _, after, free = self.load(["free"])
        print("# answers in %.0f s: scheduled alone %d, not scheduled %d"
              % (MEASURE_S, alone["alone"], free["free"]))
        self.assertGreater(alone["alone"], 0.9 * free["free"])
        self.assertLess(alone["alone"], 1.1 * free["free"])
        s = after
        self.assertEqual(value(s, "batchgate_device_scheduler_wait_seconds_total", model="alone",
                               device="synthetic2"), 0)
        self.assertNotIn(("batchgate_device_scheduler_wait_seconds_total",
                          frozenset({("model", "free"), ("device", "synthetic0")})), s)
        for (name, labels) in s:
            if name.startswith("batchgate_device_scheduler_"):
                self.assertNotIn(("model", "free"), labels, "an unplaced model is not scheduled")


class OnlineBeforeOfflineTest(JobsCase):
    """A job's lines on one model yield the device to another model's online
    requests, whatever the weights: class goes before weight."""
    models = {"batch": placed("batch", weight=1000, device=3),
              "online": placed("online", weight=1, device=3)}

    def test_job_yields_to_online_work_of_another_model(self):
        srv = self.start()
        r = submit(srv, "batch", "\n".join(line(i) for i in range(1000)) + "\n")
        self.assertEqual(r.status, 201, r.body)
        job = r.json()["id"]
        time.sleep(WARM_S)   # the job alone: it has the device to itself
        m = lambda: parse(roundtrip(srv.port, "GET", "/metrics", timeout=10).body.decode())
        before = m()
        self.assertGreater(value(before, "batchgate_device_busy_seconds_total", model="batch",
                                 device="synthetic3", **{"class": "offline"}), 0.5 * WARM_S)
        answered, errors = saturate(srv.port, "online", 2.0)
        after = m()
        self.assertEqual(errors, [])
        self.assertGreater(answered, 0)
        d = lambda model, cls: (value(after, "batchgate_device_busy_seconds_total", model=model,
                                      device="synthetic3", **{"class": cls})
                                - value(before, "batchgate_device_busy_seconds_total",
                                        model=model, device="synthetic3", **{"class": cls}))
        online, offline = d("online", "online"), d("batch", "offline")
        print("# while online clients ran: online %.2f s, the job's offline %.2f s" %
              (online, offline))
        self.assertGreater(online, 1.5)
        self.assertLess(offline, 0.15 * (online + offline))
        roundtrip(srv.port, "DELETE", "/v2/jobs/" + job)
        srv.stop_checked()


if __name__ == "__main__":
    unittest.main()
