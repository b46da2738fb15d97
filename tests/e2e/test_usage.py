"""test_usage.py - the usage ledger end to end (docs/USAGE.md): under mixed
load (two tenants, two models, online requests and a job's offline lines)
the ledger's busy seconds reconcile with /metrics' device_busy_seconds_total,
held = busy + idle per device and minute, idle goes to the model's tenants by
their shares and the tenants' costs add up to the device's; GET /v2/usage's
parameters, formats and visibility, every bad parameter a 400 naming it;
SIGTERM and SIGKILL restarts continue the series without a double count;
`batchgate report` prints the same figures."""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import harness
from harness import Server, fill_fs, mount_tmpfs, roundtrip, run_cli
from test_infer import synthetic, write_model

KEYS = {"research": "sk-research-usage-1a2b3c4d5e6f",
        "prod": "sk-prod-usage-6f5e4d3c2b1a",
        "ops": "sk-ops-usage-0a9b8c7d6e5f"}
PRICE = 36.0   # per hour: 0.01 a second


def digest(key):
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def hdr(tenant):
    return [("Authorization", "Bearer " + KEYS[tenant])] if tenant else []


def infer(port, model, tenant, rows=1):
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [rows, 4],
                                   "data": [[1, 2, 3, 4]] * rows}]})
    return roundtrip(port, "POST", "/v2/models/%s/infer" % model,
                     [("Content-Type", "application/json")] + hdr(tenant), body, timeout=10)


def get(port, path, tenant="ops"):
    return roundtrip(port, "GET", path, hdr(tenant), timeout=10)


def samples(port, name):
    """Every sample of batchgate_<name> in /metrics: [(labels, value)]."""
    text = get(port, "/metrics").body.decode()
    out = []
    for line in text.splitlines():
        m = re.match(r"batchgate_%s\{(.*)\} (\S+)$" % name, line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            out.append((labels, float(m.group(2))))
    return out


def usage(port, tenant="ops", **params):
    q = "&".join("%s=%s" % kv for kv in params.items())
    r = get(port, "/v2/usage?" + q, tenant)
    if r.status != 200:
        raise AssertionError("GET /v2/usage?%s: %d %s" % (q, r.status, r.body))
    return r.json()


def wide(port, tenant="ops", **params):
    """Every row of the last hour and the next minute, all keys."""
    now = int(time.time())
    p = {"from": now - 3600, "to": now + 120, "step": 3720,
         "group_by": "tenant,model,class,device"}
    p.update(params)
    return usage(port, tenant, **p)["rows"]


def load(port, plan, seconds, until_killed=False):
    """Threads sending (model, tenant, rows) requests for `seconds`; counts by
    (model, tenant). until_killed: the server is killed meanwhile, and a
    thread stops at its first failed request."""
    stop = time.monotonic() + seconds
    counts = {}
    lock = threading.Lock()

    def run(model, tenant, rows):
        n = 0
        while time.monotonic() < stop:
            try:
                r = infer(port, model, tenant, rows)
            except (OSError, AssertionError):
                if until_killed:
                    break
                raise
            assert r.status == 200, r.body
            n += 1
        with lock:
            counts[(model, tenant)] = counts.get((model, tenant), 0) + n

    ts = [threading.Thread(target=run, args=p) for p in plan]
    for t in ts:
        t.start()
    for t in ts:
        t.join(seconds + 30)
    return counts


def stop_fakes(fakes):
    """Stops the fake upstream servers test_upstream.start_fake started."""
    for p, _ in fakes:
        p.kill()
        p.wait(5)
        p.stdout.close()


class UsageCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="batchgate-usage-")
        self.repo = os.path.join(self.tmp, "models")
        os.makedirs(self.repo)
        # Two models on one device (synthetic0): a is everyone's, b research's only.
        write_model(self.repo, "a", synthetic("a", base_us=1500, per_row_us=50,
                                              batching={"max_batch_size": 8,
                                                        "max_queue_delay_us": 500}))
        write_model(self.repo, "b", synthetic("b", base_us=2500, per_row_us=50,
                                              batching={"max_batch_size": 8,
                                                        "max_queue_delay_us": 500}))
        self.state = os.path.join(self.tmp, "state")
        self.config = {
            "model_repository": self.repo, "state_dir": self.state,
            "auth": {"required": True},
            "tenants": [
                {"name": "research", "keys": [digest(KEYS["research"])], "share": 0.6},
                {"name": "prod", "keys": [digest(KEYS["prod"])], "share": 0.3,
                 "models": ["a"]},
                {"name": "ops", "keys": [digest(KEYS["ops"])], "share": 0.1, "admin": True,
                 "models": ["none-*"]},
            ],
            "devices": {"synthetic0": {"price_per_hour": PRICE}},
            "usage": {"flush_s": 1},
        }
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.kill()
        self.doCleanups()   # a tmpfs (mount_tmpfs) goes before the folder it is in
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self):
        srv = Server(dict(self.config), io_threads=2)
        self.servers.append(srv)
        srv.wait_log(r"ready in", timeout=30)
        return srv

    def settle(self, port):
        """Until every batch so far is in the ledger: its busy time has caught
        up with /metrics' (quiet now: that stands still). The ledger writes
        every second here (flush_s 1), but a loaded machine can delay a
        write's fsync: up to 15 s, then the caller's checks say what is off."""
        deadline = time.monotonic() + 15
        time.sleep(1.2)   # past the sample in progress
        while time.monotonic() < deadline:
            target = self.busy_metric(port)
            got = sum(x["busy_seconds"] for x in wide(port))
            if abs(got - target) <= 0.0005 * target + 1e-4:
                time.sleep(1.2)   # and one sample more: requests counted with the batch
                return
            time.sleep(0.2)

    def busy_metric(self, port):
        return sum(v for _, v in samples(port, "device_busy_seconds_total"))


class UsageReconcileTest(UsageCase):
    def test_mixed_load_reconciles(self):
        srv = self.start()
        port = srv.port
        # An offline job for research on b beside the online load.
        lines = "\n".join(json.dumps({"inputs": [{"name": "x", "datatype": "FP32",
                                                  "shape": [1, 4], "data": [[i, 0, 0, 0]]}]})
                          for i in range(300))
        r = roundtrip(port, "POST", "/v2/models/b/jobs",
                      [("Content-Type", "application/jsonl")] + hdr("research"), lines,
                      timeout=10)
        self.assertEqual(r.status, 201, r.body)
        counts = load(port, [("a", "prod", 1), ("a", "research", 2), ("b", "research", 1),
                             ("a", "prod", 3)], 4.0)
        deadline = time.monotonic() + 30
        while get(port, "/v2/jobs/" + r.json()["id"], "research").json()["state"] != "completed":
            self.assertLess(time.monotonic(), deadline, "the job did not finish")
            time.sleep(0.1)
        self.settle(port)
        rows = wide(port)
        busy_ledger = sum(x["busy_seconds"] for x in rows)
        busy_metrics = self.busy_metric(port)
        self.assertGreater(busy_metrics, 1.0)
        self.assertAlmostEqual(busy_ledger / busy_metrics, 1.0, delta=0.005,
                               msg="ledger %.4f s, metrics %.4f s" % (busy_ledger, busy_metrics))
        # The scheduler's view by tenant is the same time (it took the backend
        # call's alone, and fell short by up to 1%).
        tenants = sum(v for _, v in samples(port, "tenant_device_seconds_total"))
        self.assertAlmostEqual(tenants, busy_metrics, delta=1e-5 * busy_metrics + 1e-6,
                               msg="tenants %.6f s, busy %.6f s" % (tenants, busy_metrics))
        # By model and class too.
        for labels, v in samples(port, "device_busy_seconds_total"):
            mine = sum(x["busy_seconds"] for x in rows
                       if x["model"] == labels["model"] and x["class"] == labels["class"])
            self.assertAlmostEqual(mine, v, delta=max(0.005 * v, 0.002), msg=str(labels))
        # Requests and rows as sent; job lines as offline requests.
        req = {}
        for x in rows:
            req[(x["model"], x["tenant"], x["class"])] = \
                req.get((x["model"], x["tenant"], x["class"]), 0) + x["requests"]
        self.assertEqual(req.get(("a", "prod", "online")), counts[("a", "prod")])
        self.assertEqual(req.get(("a", "research", "online")), counts[("a", "research")])
        self.assertEqual(req.get(("b", "research", "online")), counts[("b", "research")])
        self.assertEqual(req.get(("b", "research", "offline")), 300)
        self.assertNotIn(("b", "prod", "online"), req)   # prod may not use b: no idle either
        for x in rows:
            self.assertAlmostEqual(x["held_seconds"], x["busy_seconds"] + x["idle_seconds"],
                                   places=5)
            self.assertNotEqual(x["tenant"], "ops")   # ops may use no model: pays nothing
        # held = busy + idle per device and minute.
        now = int(time.time())
        minutes = usage(port, **{"from": now - 600, "to": now + 60, "step": 60,
                                 "group_by": "device"})["rows"]
        self.assertGreaterEqual(len(minutes), 1)
        for m in minutes:
            self.assertAlmostEqual(m["held_seconds"], m["busy_seconds"] + m["idle_seconds"],
                                   places=5)
        # Idle of a: research and prod by their shares (0.6 : 0.3); of b: research's.
        idle = {}
        for x in rows:
            idle[(x["model"], x["tenant"])] = idle.get((x["model"], x["tenant"]), 0) + \
                x["idle_seconds"]
        self.assertAlmostEqual(idle[("a", "research")] / idle[("a", "prod")], 2.0, delta=0.01)
        self.assertGreater(idle[("b", "research")], 0)
        # Held tracks residency: each model's held is its time loaded (up to the
        # ledger's lag), so the tenants' costs add up to the device's price for
        # the time it held a model, not twice for two models.
        held = {}
        for x in rows:
            held[x["model"]] = held.get(x["model"], 0) + x["held_seconds"]
        resident = {}
        for labels, v in samples(port, "device_busy_seconds_total"):
            resident[labels["model"]] = resident.get(labels["model"], 0) + v
        for labels, v in samples(port, "device_idle_seconds_total"):
            resident[labels["model"]] += v
        for m in ("a", "b"):
            self.assertLess(resident[m] - held[m], 3.0, (m, resident, held))
            self.assertGreaterEqual(resident[m] - held[m], -0.05, (m, resident, held))
        cost = {}
        for x in rows:
            cost[x["tenant"]] = cost.get(x["tenant"], 0) + x["cost"]
        device_held = max(held.values())
        self.assertAlmostEqual(sum(cost.values()), PRICE / 3600 * device_held,
                               delta=0.005 * PRICE / 3600 * device_held)
        # cost_total reconciles with the ledger by tenant (up to one sample's lag).
        ct = {l["tenant"]: v for l, v in samples(port, "cost_total")}
        for t in ("research", "prod"):
            self.assertGreaterEqual(ct[t], cost[t] - 1e-5)   # stored in millionths
            self.assertLess(ct[t] - cost[t], 3 * PRICE / 3600)
        # No GPU, no energy.
        self.assertEqual(samples(port, "energy_joules_total"), [])
        srv.stop_checked()


class UsageLowPriceTest(UsageCase):
    def test_rounding_does_not_add_up(self):
        # At 0.0054 an hour a second costs 1.5e-6: prod's third is 0.5e-6 a
        # second, which each flush (every second) rounded to 1e-6 on its
        # own: charged twice its use. The rounding now carries to the
        # series' next row: each tenant within half a millionth.
        shutil.rmtree(os.path.join(self.repo, "b"))   # one model: its held is the device's
        price = 0.0054
        self.config["devices"]["synthetic0"]["price_per_hour"] = price
        srv = self.start()
        time.sleep(6)
        self.settle(srv.port)
        held, cost = {}, {}
        for x in wide(srv.port):
            held[x["tenant"]] = held.get(x["tenant"], 0) + x["held_seconds"]
            cost[x["tenant"]] = cost.get(x["tenant"], 0) + x["cost"]
        self.assertEqual(set(cost), {"research", "prod"}, cost)
        self.assertGreater(held["prod"], 5 / 3, held)   # a third of 5 s and more
        for t in ("research", "prod"):
            self.assertAlmostEqual(cost[t], price / 3600 * held[t], delta=0.55e-6,
                                   msg="%s: held %.6f s, cost %.7f" % (t, held[t], cost[t]))
        srv.stop_checked()


class UsageLongBatchTest(UsageCase):
    def test_a_batch_longer_than_a_sample(self):
        # The ledger samples every second; a batch's time was recorded only
        # at its end, so a 2.5 s batch read as two seconds of idle and then
        # 2.5 s of busy in one second: held (and cost) went past the time
        # the model was resident. Its time now counts as it runs.
        write_model(self.repo, "long", synthetic("long", base_us=2500000, per_row_us=0))
        srv = self.start()
        port = srv.port
        got = {}
        t = threading.Thread(target=lambda: got.update(r=infer(port, "long", "research")))
        t.start()
        time.sleep(2.0)
        running = sum(x["busy_seconds"] for x in wide(port) if x["model"] == "long")
        t.join(15)
        self.assertEqual(got["r"].status, 200, got["r"])
        self.assertGreater(running, 0.5, "the batch's time in the ledger while it runs")
        self.settle(port)
        rows = [x for x in wide(port) if x["model"] == "long"]
        busy = sum(x["busy_seconds"] for x in rows)
        held = sum(x["held_seconds"] for x in rows)
        resident = sum(v for labels, v in samples(port, "device_busy_seconds_total")
                       if labels["model"] == "long")
        resident += sum(v for labels, v in samples(port, "device_idle_seconds_total")
                        if labels["model"] == "long")
        self.assertAlmostEqual(busy, 2.5, delta=0.1, msg=rows)
        self.assertLessEqual(held, resident + 0.05, (held, resident, rows))
        self.assertLess(resident - held, 3.0, (held, resident))
        for x in rows:
            self.assertAlmostEqual(x["held_seconds"], x["busy_seconds"] + x["idle_seconds"],
                                   places=5)
            self.assertGreaterEqual(x["idle_seconds"], 0, x)
        research = sum(x["busy_seconds"] for x in rows if x["tenant"] == "research")
        self.assertAlmostEqual(research, busy, delta=0.01, msg=rows)
        srv.stop_checked()


class UsageApiTest(UsageCase):
    def test_formats_visibility_and_bad_parameters(self):
        srv = self.start()
        port = srv.port
        load(port, [("a", "prod", 1), ("b", "research", 1)], 1.0)
        self.settle(port)
        now = int(time.time())
        rng = {"from": now - 3600, "to": now + 60}
        # A tenant sees its own rows, an admin everyone's.
        mine = usage(port, "prod", group_by="tenant", step=3660, **rng)
        self.assertEqual({x["tenant"] for x in mine["rows"]}, {"prod"})
        self.assertEqual(mine["group_by"], ["tenant"])
        every = usage(port, "ops", group_by="tenant", step=3660, **rng)
        self.assertEqual({x["tenant"] for x in every["rows"]}, {"prod", "research"})
        # Without grouping: one total row; keys not grouped by are absent.
        total = usage(port, "ops", step=3660, **rng)["rows"]
        self.assertEqual(len(total), 1)
        self.assertNotIn("tenant", total[0])
        self.assertAlmostEqual(total[0]["busy_seconds"],
                               sum(x["busy_seconds"] for x in every["rows"]), places=5)
        # RFC 3339 times and CSV.
        t0 = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 3600))
        t1 = time.strftime("%Y-%m-%dT%H:%M:%S%%2B00:00", time.gmtime(now + 60))
        r = get(port, "/v2/usage?from=%s&to=%s&step=3660&group_by=tenant,model&format=csv"
                % (t0, t1))
        self.assertEqual(r.status, 200, r.body)
        self.assertTrue(r.headers.get("Content-Type").startswith("text/csv"))
        lines = r.body.decode().splitlines()
        self.assertEqual(lines[0], "start,end,tenant,model,class,device,requests,rows,"
                                   "busy_seconds,held_seconds,idle_seconds,cost,energy_joules")
        body = [l.split(",") for l in lines[1:]]
        self.assertEqual({(b[2], b[3]) for b in body},
                         {("prod", "a"), ("research", "a"), ("research", "b")})
        self.assertTrue(all(b[4] == "" and b[5] == "" for b in body))
        self.assertEqual(body[0][0], t0)
        # The dashboard's view is everyone's, without a key.
        d = roundtrip(port, "GET", "/dashboard/usage?group_by=tenant&from=%d&to=%d&step=3660"
                      % (now - 3600, now + 60))
        self.assertEqual(d.status, 200, d.body)
        self.assertEqual({x["tenant"] for x in d.json()["rows"]}, {"prod", "research"})
        # No key: 401 as any tenant route.
        self.assertEqual(roundtrip(port, "GET", "/v2/usage").status, 401)
        # Every bad parameter: 400 naming it.
        bad = [("from=yesterday", "from"), ("to=2026-13-01T00:00:00Z", "to"),
               ("from=2026-02-30", "from"), ("step=59", "step"), ("step=abc", "step"),
               ("step=-60", "step"), ("from=0&to=100000000&step=60", "step"),
               ("group_by=tenant,gpu", "group_by"), ("group_by=tenant,", "group_by"),
               ("format=xml", "format"), ("from=%d&to=%d" % (now, now - 60), "from"),
               ("from=%zz", "from"), ("to=2026-12-03T10:00:00+1:00", "to"),
               # Past year 9999 (12 digits reached 33658, echoed as 9999
               # with its own month and day), or before year 1.
               ("to=253402300800", "to"), ("from=999999999998&to=999999999999&step=60", "from"),
               ("from=0001-01-01T00:00:00+00:01", "from")]
        for q, param in bad:
            r = get(port, "/v2/usage?" + q)
            self.assertEqual(r.status, 400, (q, r.body))
            self.assertTrue(r.json()["error"].startswith(param + ":"), (q, r.body))
        # At most 100,000 periods: exactly that many is answered (it was
        # refused as more), one second more (a last period cut short) not.
        self.assertEqual(get(port, "/v2/usage?from=0&to=6000000&step=60").status, 200)
        r = get(port, "/v2/usage?from=0&to=6000001&step=60")
        self.assertEqual(r.status, 400, r.body)
        self.assertIn("more than 100000 periods", r.json()["error"])
        # A parameter the route does not take (a typo gave the totals).
        r = get(port, "/v2/usage?grouping=tenant")
        self.assertEqual(r.status, 400, r.body)
        self.assertIn('unknown parameter "grouping"', r.json()["error"])
        # A nameless one, and one given twice (the first was taken silently).
        r = get(port, "/v2/usage?=x")
        self.assertEqual(r.status, 400, r.body)
        self.assertIn('unknown parameter ""', r.json()["error"])
        r = get(port, "/v2/usage?from=%d&from=%d" % (now - 60, now - 120))
        self.assertEqual(r.status, 400, r.body)
        self.assertEqual(r.json()["error"], "from is given twice")
        self.assertEqual(get(port, "/v2/usage?&from=%d&&" % (now - 60)).status, 200)
        # Years before 1000 are written with four digits, as RFC 3339 has
        # them ("1-01-01T00:00:00Z" was written, which the route refused).
        r = get(port, "/v2/usage?from=0001-01-01&to=0999-06-01&step=315360000")
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual((r.json()["from"], r.json()["to"]),
                         ("0001-01-01T00:00:00Z", "0999-06-01T00:00:00Z"))
        self.assertEqual(get(port, "/v2/usage?from=%s&to=%s&step=315360000"
                             % (r.json()["from"], r.json()["to"])).status, 200)
        # The last second of year 9999 is taken and echoed as it was given.
        r = get(port, "/v2/usage?from=253402300740&to=9999-12-31T23:59:59Z&step=60")
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual((r.json()["from"], r.json()["to"]),
                         ("9999-12-31T23:59:00Z", "9999-12-31T23:59:59Z"))
        # A leap second is the next second, as POSIX counts (23:59:60 at a
        # day's end, the only place one happens, was refused as a day that
        # did not exist).
        r = get(port, "/v2/usage?from=2016-12-31T23:59:60Z&to=2017-01-01T01:00:00Z")
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.json()["from"], "2017-01-01T00:00:00Z")
        r = get(port, "/v2/usage?from=2017-01-01T00:59:60%2B01:00&to=2017-01-01T01:00:00Z")
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.json()["from"], "2017-01-01T00:00:00Z")
        for t in ("2016-12-31T12:30:60Z", "2016-12-31T23:59:60%2B01:00", "2016-12-31T23:58:60Z"):
            self.assertEqual(get(port, "/v2/usage?from=%s&to=2017-01-02" % t).status, 400, t)
        # A step past 2^63 is refused, not clamped; the longest one a
        # period holds gives one period ending at `to` (its end overflowed
        # into the year -219246473).
        r = get(port, "/v2/usage?step=99999999999999999999")
        self.assertEqual(r.status, 400, r.body)
        rows = usage(port, "ops", step=9223372036854775807, **{"from": now - 600, "to": now})
        self.assertTrue(rows["rows"], rows)
        for x in rows["rows"]:
            self.assertEqual(x["end"], rows["to"], x)
        srv.stop_checked()


class UsageRestartTest(UsageCase):
    def ledger_busy(self, port):
        return sum(x["busy_seconds"] for x in wide(port))

    def test_sigterm_and_sigkill_continue_the_series(self):
        srv = self.start()
        load(srv.port, [("a", "prod", 1), ("b", "research", 2)], 2.0)
        busy1 = self.busy_metric(srv.port)
        srv.stop(signal.SIGTERM)   # its last sample is written on the way out
        srv = self.start()
        self.assertAlmostEqual(self.ledger_busy(srv.port) / busy1, 1.0, delta=0.005)
        load(srv.port, [("a", "prod", 1), ("b", "research", 2)], 2.0)
        self.settle(srv.port)
        busy2 = self.busy_metric(srv.port)
        self.assertAlmostEqual(self.ledger_busy(srv.port) / (busy1 + busy2), 1.0, delta=0.005)
        # SIGKILL while quiet: everything was written already.
        srv.kill()
        srv = self.start()
        self.assertAlmostEqual(self.ledger_busy(srv.port) / (busy1 + busy2), 1.0, delta=0.005)
        # SIGKILL under load: at most the last flush's worth (flush_s 1, a
        # sample of 1 s) is lost, nothing is counted twice.
        t = threading.Thread(target=lambda: load(srv.port, [("a", "prod", 1)], 2.5,
                                                 until_killed=True))
        t.start()
        time.sleep(2.0)
        busy3 = self.busy_metric(srv.port)
        srv.kill()
        t.join(40)
        srv = self.start()
        got = self.ledger_busy(srv.port)
        self.assertLessEqual(got, (busy1 + busy2 + busy3) * 1.005 + 0.6)
        self.assertGreaterEqual(got, busy1 + busy2 + busy3 - 2.5)
        # The minutes: no period counted twice, rows only where the server ran.
        now = int(time.time())
        minutes = usage(srv.port, **{"from": now - 600, "to": now + 60, "step": 60})["rows"]
        starts = [m["start"] for m in minutes]
        self.assertEqual(len(starts), len(set(starts)))
        for m in minutes:   # a minute holds at most a minute of each model's residency
            self.assertLessEqual(m["held_seconds"], 2 * 60 + 1)
        srv.stop_checked()


class UsageFullDiskTest(UsageCase):
    def test_rows_kept_while_the_disk_is_full(self):
        """state_dir on a 2 MiB tmpfs (needs root and mount rights; skipped
        elsewhere), filled up: the ledger's writes fail and are said, the
        requests do not notice, and once there is room again every row is
        written: nothing lost."""
        small = os.path.join(self.tmp, "small")
        mount_tmpfs(self, small, "2m")
        self.config["state_dir"] = small
        srv = self.start()
        filler = fill_fs(small)
        load(srv.port, [("a", "prod", 1), ("b", "research", 1)], 2.0)
        srv.wait_log(r"usage ledger: .*rows are kept and written again", timeout=10)
        os.unlink(filler)
        self.settle(srv.port)
        # And the recovery is said (the warning was the last word on it).
        srv.wait_log(r"usage ledger: written again after \d+ failed tries \(\d+ rows kept\)",
                     timeout=10)
        busy = sum(x["busy_seconds"] for x in wide(srv.port))
        self.assertAlmostEqual(busy / self.busy_metric(srv.port), 1.0, delta=0.005)
        srv.stop_checked()


class UsageLifecycleTest(UsageCase):
    def test_unload_and_load_again(self):
        """A model unloaded holds nothing while it is out; loaded again, its
        counters continue and are not charged twice."""
        self.config["tenants"][2]["models"] = ["*"]   # ops loads and unloads a
        srv = self.start()
        port = srv.port
        load(port, [("a", "prod", 1)], 1.5)
        # A residency of several seconds before the unload: the instance's
        # held counter goes on across loads, and the ledger once charged all
        # of it again at the reload.
        time.sleep(3.0)
        r = roundtrip(port, "POST", "/v2/repository/models/a/unload", hdr("ops"), "{}")
        self.assertEqual(r.status, 200, r.body)
        out_since = time.monotonic()
        time.sleep(3.0)
        r = roundtrip(port, "POST", "/v2/repository/models/a/load", hdr("ops"), "{}", timeout=30)
        self.assertEqual(r.status, 200, r.body)
        out_for = time.monotonic() - out_since
        load(port, [("a", "prod", 1)], 1.5)
        self.settle(port)
        rows = wide(port)
        busy = {}
        held = {}
        for x in rows:
            busy[x["model"]] = busy.get(x["model"], 0) + x["busy_seconds"]
            held[x["model"]] = held.get(x["model"], 0) + x["held_seconds"]
        metric = {}
        for labels, v in samples(port, "device_busy_seconds_total"):
            metric[labels["model"]] = metric.get(labels["model"], 0) + v
        self.assertAlmostEqual(busy["a"] / metric["a"], 1.0, delta=0.005, msg=(busy, metric))
        # a was out for out_for seconds of b's residency (b stayed loaded).
        self.assertAlmostEqual(held["b"] - held["a"], out_for, delta=1.2, msg=(held, out_for))
        srv.stop_checked()

    def test_the_last_second_before_an_unload_is_charged(self):
        """Work served just before an unload is in the ledger without a
        reload, and through a clean stop (the unloaded model's instances
        are still sampled)."""
        self.config["tenants"][2]["models"] = ["*"]
        srv = self.start()
        port = srv.port
        self.settle(port)
        before = sum(x["requests"] for x in wide(port) if x["model"] == "a")
        n = 8
        for _ in range(n):
            self.assertEqual(infer(port, "a", "prod").status, 200)
        tenant_time = lambda: sum(v for labels, v in samples(port, "tenant_device_seconds_total")
                                  if labels["tenant"] == "prod")
        charged = tenant_time()
        self.assertGreater(charged, 0)
        r = roundtrip(port, "POST", "/v2/repository/models/a/unload", hdr("ops"), "{}")
        self.assertEqual(r.status, 200, r.body)
        self.settle(port)
        # A counter: the unloaded copy's time stays in it.
        self.assertGreaterEqual(tenant_time(), charged - 1e-9)
        rows = [x for x in wide(port) if x["model"] == "a"]
        self.assertEqual(sum(x["requests"] for x in rows) - before, n, rows)
        busy = sum(x["busy_seconds"] for x in rows)
        metric = sum(v for labels, v in samples(port, "device_busy_seconds_total")
                     if labels["model"] == "a")
        self.assertAlmostEqual(busy, metric, delta=0.0005 * metric + 1e-4)
        srv.stop_checked()


class UsageShrinkTest(UsageCase):
    def test_a_reload_to_fewer_instances(self):
        """A reload from 4 instances to 1 right after a burst: every request
        is charged (the removed instances' last second was not: 11 of 48),
        and the removed instances hold nothing afterwards (one model-wide
        held clock charged them the time they did not exist). The
        re-test's findings."""
        self.config["tenants"][2]["models"] = ["*"]
        cfg = synthetic("c", base_us=3000, per_row_us=200, batching={"max_batch_size": 4})
        cfg["instances"] = {"count": 4}
        write_model(self.repo, "c", cfg)
        srv = self.start()
        port = srv.port
        self.settle(port)
        threads = [threading.Thread(target=lambda: [infer(port, "c", "research") for _ in range(3)])
                   for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        one = dict(cfg, instances={"count": 1})
        r = roundtrip(port, "POST", "/v2/repository/models/c/load", hdr("ops"),
                      json.dumps({"parameters": {"config": json.dumps(one)}}), timeout=30)
        self.assertEqual(r.status, 200, r.body)
        self.settle(port)
        rows = [x for x in wide(port) if x["model"] == "c"]
        self.assertEqual(sum(x["requests"] for x in rows), 48, rows)
        held = lambda: {x["device"]: x["held_seconds"] for x in wide(port, group_by="device,model")
                        if x["model"] == "c"}
        before = held()
        time.sleep(2.5)
        after = held()
        for dev in ("synthetic1", "synthetic2", "synthetic3"):
            self.assertAlmostEqual(after.get(dev, 0), before.get(dev, 0), delta=0.01,
                                   msg=(before, after))
        self.assertGreater(after["synthetic0"], before["synthetic0"] + 2.0, (before, after))
        srv.stop_checked()

    def test_instances_no_sample_saw(self):
        """Reloads from 1 instance to 4 and back within one sampling
        interval (1 s): the 3 instances that came and went between two
        samples had their work charged to nobody (the re-test: 72-610
        requests lost in 3 of 4 trials of back-to-back reloads). Charged
        now, on the devices they ran on."""
        self.config["tenants"][2]["models"] = ["*"]
        cfg = synthetic("c", base_us=3000, per_row_us=200, batching={"max_batch_size": 1})
        write_model(self.repo, "c", cfg)
        srv = self.start()
        port = srv.port

        def reload(n):
            body = json.dumps({"parameters": {"config": json.dumps(
                dict(cfg, instances={"count": n}))}})
            r = roundtrip(port, "POST", "/v2/repository/models/c/load", hdr("ops"), body,
                          timeout=30)
            self.assertEqual(r.status, 200, r.body)

        sent = 0
        for _ in range(3):
            reload(4)
            threads = [threading.Thread(target=lambda: infer(port, "c", "research"))
                       for _ in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            sent += 16
            reload(1)
        self.settle(port)
        rows = [x for x in wide(port) if x["model"] == "c"]
        self.assertEqual(sum(x["requests"] for x in rows), sent, rows)
        by_dev = {}
        for x in rows:
            by_dev[x["device"]] = by_dev.get(x["device"], 0) + x["requests"]
        self.assertGreater(len(by_dev), 1, by_dev)
        self.assertTrue(set(by_dev) <= {"synthetic0", "synthetic1", "synthetic2", "synthetic3"},
                        by_dev)
        srv.stop_checked()


class UsageUpstreamTest(UsageCase):
    def test_servers_are_devices_by_url(self):
        """An upstream model's servers are ledger devices named by URL, each
        charged the batches it answered, requests adding up; two models
        calling one server share it; no price."""
        from test_upstream import start_fake, upstream_model
        fakes = [start_fake("--base-ms", "5", "--concurrency", "4") for _ in range(2)]
        try:
            urls = ["http://127.0.0.1:%d" % port for _, port in fakes]
            write_model(self.repo, "u1", upstream_model("u1", urls))
            write_model(self.repo, "u2", upstream_model("u2", urls[:1]))
            self.config["tenants"][1]["models"] = ["a", "u1"]   # prod: a and u1
            srv = self.start()
            port = srv.port
            counts = load(port, [("u1", "prod", 1), ("u1", "prod", 2), ("u2", "research", 1)],
                          2.0)
            self.settle(port)
            rows = [x for x in wide(port) if x["model"] in ("u1", "u2")]
            self.assertEqual({x["device"] for x in rows}, set(urls))
            req = {}
            for x in rows:
                req[x["model"]] = req.get(x["model"], 0) + x["requests"]
                self.assertEqual(x["cost"], 0)
            self.assertEqual(req["u1"], counts[("u1", "prod")])
            self.assertEqual(req["u2"], counts[("u2", "research")])
            # Busy by server against upstream_busy... per model and server.
            for labels, v in samples(port, "device_busy_seconds_total"):
                if labels["model"] not in ("u1", "u2") or labels["class"] != "online":
                    continue
                url = urls[int(labels["device"][len("upstream"):])]
                mine = sum(x["busy_seconds"] for x in rows
                           if x["model"] == labels["model"] and x["device"] == url)
                # A server's row is its busy time as each second's sample read
                # it, the metric only up to the batches that span a second:
                # 0.56 % apart was seen once in 2 s of load (CI, 2026-12-03);
                # the totals themselves agree to 0.05 % (settle).
                self.assertAlmostEqual(mine, v, delta=max(0.015 * v, 0.002), msg=str(labels))
            srv.stop_checked()
        finally:
            stop_fakes(fakes)

    def test_each_server_is_charged_its_own_batches(self):
        """A slow server (200 ms a call) and a fast one (2 ms), both busy
        all along, the slow one answering few batches. Each server's row is
        charged the requests it answered (the fakes' own counts), not a
        share of the model's by busy time (before: about half each)."""
        from test_upstream import start_fake, upstream_model
        fakes = [start_fake("--base-ms", ms, "--per-row-ms", "0", "--concurrency", "4")
                 for ms in ("200", "2")]
        try:
            urls = ["http://127.0.0.1:%d" % port for _, port in fakes]
            cfg = upstream_model("u1", urls)
            # No trial copies: a copy of a batch sent to the slow server to
            # measure it is a call the fakes count and no request of prod's
            # (2175 served against 2174 requests).
            cfg["upstream"]["idempotent"] = False
            write_model(self.repo, "u1", cfg)
            self.config["tenants"][1]["models"] = ["a", "u1"]
            srv = self.start()
            counts = load(srv.port, [("u1", "prod", 1)] * 3, 3.0)
            self.settle(srv.port)
            got = {x["device"]: x["requests"] for x in wide(srv.port)
                   if x["model"] == "u1" and x["tenant"] == "prod"}
            busy = {x["device"]: round(x["busy_seconds"], 3) for x in wide(srv.port)
                    if x["model"] == "u1" and x["tenant"] == "prod"}
            served = {}
            for (_, port), url in zip(fakes, urls):
                r = roundtrip(port, "GET", "/__stats")
                served[url] = json.loads(r.body)["rows"]
            print("\nprod: %d requests; answered by server: %r; charged: %r; busy: %r"
                  % (counts[("u1", "prod")], served, got, busy), file=sys.stderr)
            self.assertEqual(sum(served.values()), counts[("u1", "prod")])
            self.assertGreater(served[urls[1]], 2 * served[urls[0]])
            self.assertEqual(got, served)
            srv.stop_checked()
        finally:
            stop_fakes(fakes)


class UsageUpstreamLongCallTest(UsageCase):
    """A call to a server longer than the ledger's one-second sample. Its
    time was recorded at its end alone: in the seconds before, the server's
    busy time had no batch and went to every tenant by share (research,
    who sent nothing, paid about 2/3 of it), and the caller got the last
    second's only."""

    def run_one(self, base_ms, timeout_ms, status):
        from test_upstream import start_fake, upstream_model
        fakes = [start_fake("--base-ms", str(base_ms), "--per-row-ms", "0",
                            "--concurrency", "2")]
        try:
            url = "http://127.0.0.1:%d" % fakes[0][1]
            write_model(self.repo, "u1", upstream_model("u1", [url], timeout_ms=timeout_ms))
            self.config["tenants"][1]["models"] = ["a", "u1"]   # prod: a and u1
            srv = self.start()
            port = srv.port
            got = {}
            t = threading.Thread(target=lambda: got.update(r=infer(port, "u1", "prod")))
            t.start()
            time.sleep(2.0)
            running = sum(x["busy_seconds"] for x in wide(port)
                          if x["model"] == "u1" and x["tenant"] == "prod")
            t.join(15)
            self.assertEqual(got["r"].status, status, got["r"])
            self.settle(port)
            rows = [x for x in wide(port) if x["model"] == "u1"]
            busy = {}
            for x in rows:
                busy[x["tenant"]] = busy.get(x["tenant"], 0) + x["busy_seconds"]
            self.assertGreater(running, 0.5, ("the call's time while it runs", rows))
            srv.stop_checked()
            return busy, rows
        finally:
            stop_fakes(fakes)

    def test_the_call_is_its_tenants_while_it_runs(self):
        busy, rows = self.run_one(3000, 10000, 200)
        self.assertAlmostEqual(busy.get("prod", 0), 3.0, delta=0.3, msg=rows)
        self.assertLess(busy.get("research", 0), 0.05, rows)

    def test_a_failed_call_is_its_tenants_too(self):
        # Timed out after 1.5 s (502): the server's time it held is the
        # caller's, as a failed batch on a device of ours is.
        busy, rows = self.run_one(3000, 1500, 502)
        self.assertAlmostEqual(busy.get("prod", 0), 1.5, delta=0.3, msg=rows)
        self.assertLess(busy.get("research", 0), 0.05, rows)


class UsagePoolRefusedTest(UsageCase):
    def test_pool_calls_no_endpoint_took_are_no_requests(self):
        """A pool whose only endpoint refuses connections: the calls that
        tried it (502) went to it; those answered 503 ("no endpoint is
        usable") went nowhere, and were counted as requests of endpoint 0
        in the ledger (docs/USAGE.md: refused before a batch, not here)."""
        dead = "http://127.0.0.1:%d" % harness.free_port()
        write_model(self.repo, "p", {"backend": "openai", "endpoints": [dead],
                                     "served_model_name": "llmsim"})
        srv = self.start()
        codes = []
        for _ in range(8):
            body = json.dumps({"model": "p", "messages": [{"role": "user", "content": "hi"}],
                               "max_tokens": 4})
            r = roundtrip(srv.port, "POST", "/v1/chat/completions",
                          [("Content-Type", "application/json")] + hdr("research"), body,
                          timeout=10)
            codes.append(r.status)
        self.assertIn(503, codes)
        self.assertEqual(set(codes) - {502, 503}, set(), codes)
        time.sleep(2.5)   # two ledger writes (flush_s 1)
        now = int(time.time())
        rows = [x for x in usage(srv.port, "ops", **{"from": now - 600, "to": now + 120,
                                                      "step": 720,
                                                      "group_by": "tenant,model"})["rows"]
                if x["model"] == "p"]
        self.assertEqual(sum(x["requests"] for x in rows), codes.count(502), (codes, rows))


class UsageOffloadTest(unittest.TestCase):
    """The usage queries run on one offload thread, 64 waiting at most
    (gateway/offload.c): past them a query is 503 with Retry-After, and a
    SIGTERM with the queue full answers every query it took before the
    server exits."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="batchgate-offload-")
        self.state = os.path.join(self.tmp, "state")
        tool = os.path.join(os.path.dirname(harness.BIN), "usage_history")
        if not os.access(tool, os.X_OK):
            self.skipTest("usage_history is not built beside batchgate (%s)" % tool)
        # 30 days of 10 tenants x 20 models: a daily query by tenant reads
        # for ~10 ms, so a flood keeps the queue full while it arrives.
        subprocess.run([tool, self.state, "--days", "30", "--tenants", "10", "--models",
                        "20", "--devices", "2", "--minute-days", "1"], check=True,
                       capture_output=True, timeout=120)
        self.srv = None

    def tearDown(self):
        if self.srv:
            self.srv.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def flood(self, n):
        """n queries sent on n connections before any answer is read."""
        now = int(time.time())
        path = "/dashboard/usage?from=%d&to=%d&step=86400&group_by=tenant" % (
            now - 31 * 86400, now)
        socks = []
        for _ in range(n):
            s = harness.connect(self.srv.port, timeout=60)
            harness.send(s, harness.request("GET", path, [], None))
            socks.append(s)
        return socks

    def answers(self, socks):
        out = []
        for s in socks:
            try:
                out.append(harness.read_response(s, timeout=60))
            except (OSError, harness.ProtocolError) as e:
                out.append(e)
            finally:
                harness.close_quietly(s)
        return out

    def test_a_flood_past_64_is_503_and_sigterm_answers_what_it_took(self):
        self.srv = Server({"state_dir": self.state}, io_threads=1)
        got = self.answers(self.flood(150))
        codes = [r.status for r in got]
        self.assertEqual(sorted(set(codes)), [200, 503], codes)
        # 64 waiting, and one more when the offload thread had taken the
        # first off the queue before the 65th came (on a busy machine it
        # may not have: the CI run that saw 64).
        self.assertGreaterEqual(codes.count(200), 64, codes)
        for r in got:
            if r.status == 503:
                self.assertEqual(r.headers.get("Retry-After"), "1")
                self.assertIn("answering 64 such requests already", r.json()["error"])
        # The server serves on: one query alone is answered.
        self.assertEqual(self.answers(self.flood(1))[0].status, 200)
        # SIGTERM with the queue full: every query read before it gets its
        # whole answer (the offload stops before the IO threads), and the
        # exit is clean.
        socks = self.flood(100)
        time.sleep(0.05)   # read by the IO thread, most of them waiting
        self.srv.send_signal(signal.SIGTERM)
        got = self.answers(socks)
        self.assertEqual(self.srv.wait(30), 0, self.srv.log()[-3000:])
        whole = [r for r in got if isinstance(r, harness.Response)]
        self.assertGreaterEqual(len(whole), 64, got)
        self.assertTrue(all(r.status in (200, 503) for r in whole), got)
        self.assertIsNone(self.srv.sanitizer_report())


class UsageReportTest(UsageCase):
    def report_from_a_read_only_copy(self, state):
        """A copy of the database on a read-only mount (a backup, a
        snapshot): the report reads it (it failed, "unable to open database
        file", writing). Needs mount rights; else skipped, saying so."""
        ro = os.path.join(self.tmp, "ro")
        mount_tmpfs(self, ro, "16m")
        # Copied with a write-ahead log holding one commit more (a model d),
        # as a copy of a running server's folder is: read as a snapshot (the
        # folder is read-only), the log's commits are not seen, and the
        # report says so (it under-reported silently).
        import sqlite3
        work = os.path.join(self.tmp, "walcopy")
        os.makedirs(work)
        shutil.copy(os.path.join(state, "batchgate.db"), work)
        con = sqlite3.connect(os.path.join(work, "batchgate.db"))
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA wal_autocheckpoint=0")
        con.execute("INSERT INTO usage_key (id, tenant, model, class, device) "
                    "VALUES (9999, 'research', 'd', 'online', 'cpu0')")
        con.execute("INSERT INTO usage_minute (start, key, requests, rows, busy_us, idle_us, "
                    "cost_micro, energy_mj) VALUES (?, 9999, 1, 1, 1000, 0, 0, 0)",
                    (int(time.time()) // 60 * 60 - 60,))
        con.commit()
        for n in ("batchgate.db", "batchgate.db-wal"):
            shutil.copy(os.path.join(work, n), ro)
        con.close()
        p = subprocess.run(["mount", "-o", "remount,ro", ro], capture_output=True, timeout=10)
        if p.returncode != 0:
            self.skipTest("cannot remount read-only here: %s" % p.stderr.decode().strip())
        cfg = os.path.join(self.tmp, "ro.json")
        with open(cfg, "w") as f:
            json.dump({"state_dir": ro}, f)
        rc, out, err = run_cli(["report", "--config", cfg, "--format", "json", "--by", "model"])
        self.assertEqual(rc, 0, err)
        self.assertEqual({x["model"] for x in json.loads(out)["rows"]}, {"a", "b", "c"})
        self.assertIn("batchgate.db-wal holds commits this read cannot see", err)

    def test_report_lists_compute_debt_without_prices(self):
        # Unpriced devices cost nothing: ordered by idle cost alone, every
        # model tied, the list stopped at the first by name with no idle
        # time, and came out empty. Ordered by idle time after cost now.
        self.config["devices"] = {}
        srv = self.start()
        srv.stop_checked()
        import sqlite3
        db = sqlite3.connect(os.path.join(self.state, "batchgate.db"))
        minute = int(time.time()) // 60 * 60 - 120
        # Names past 24 bytes, alike in their first 24: printed whole (cut
        # at 24, the two read as one model).
        long = "a-model-with-a-long-name-"
        for k, (model, idle_s) in enumerate((("alpha", 0), (long + "beta", 60),
                                             (long + "gamma", 3000)), 1):
            db.execute("INSERT INTO usage_key (id, tenant, model, class, device) "
                       "VALUES (?, 'research', ?, 'online', 'cpu0')", (1000 + k, model))
            db.execute("INSERT INTO usage_minute (start, key, requests, rows, busy_us, idle_us, "
                       "cost_micro, energy_mj) VALUES (?, ?, 1, 1, 1000000, ?, 0, 0)",
                       (minute, 1000 + k, idle_s * 1000000))
        db.commit()
        db.close()
        cfg = os.path.join(self.tmp, "config.json")
        with open(cfg, "w") as f:
            json.dump(self.config, f)
        rc, out, err = run_cli(["report", "--config", cfg, "--by", "model",
                                "--from", "%d" % (minute - 60)])
        self.assertEqual(rc, 0, err)
        top = out.split("top models by compute debt")[1].splitlines()[2:]
        names = [x.split()[0] for x in top if x.strip()]
        self.assertEqual(names[:2], [long + "gamma", long + "beta"], out)   # then a and b
        self.assertNotIn("alpha", names, out)

    def test_report_prints_the_ledger(self):
        # c is loaded and never asked: it costs, and has no inference.
        write_model(self.repo, "c", synthetic("c", base_us=1500, per_row_us=50))
        srv = self.start()
        load(srv.port, [("a", "prod", 1), ("b", "research", 1)], 1.5)
        self.settle(srv.port)
        by_tenant = {x["tenant"]: x for x in wide(srv.port, group_by="tenant")}
        srv.stop_checked()
        cfg = os.path.join(self.tmp, "config.json")
        with open(cfg, "w") as f:
            json.dump(self.config, f)
        state = self.config["state_dir"]
        before = {n: open(os.path.join(state, n), "rb").read() for n in sorted(os.listdir(state))
                  if n.startswith("batchgate.db")}
        rc, out, err = run_cli(["report", "--config", cfg, "--from", "%d" % (time.time() - 3600)])
        self.assertEqual(rc, 0, err)
        self.assertIn("top models by compute debt", out)
        # It only reads (a snapshot, a read-only mount): the database and
        # its log are not written (SQLite's -shm index may be made).
        after = {n: open(os.path.join(state, n), "rb").read() for n in sorted(os.listdir(state))
                 if n.startswith("batchgate.db")}
        self.assertEqual(before["batchgate.db"], after["batchgate.db"])
        self.assertEqual(before.get("batchgate.db-wal", b""), after.get("batchgate.db-wal", b""))
        self.report_from_a_read_only_copy(state)
        for t in ("research", "prod", "total"):
            self.assertRegex(out, r"(?m)^%s\s+\d+" % t)
        line = re.search(r"(?m)^prod\s+(\d+)\s+(\d+)\s+(\S+)", out)
        self.assertEqual(int(line.group(1)), by_tenant["prod"]["requests"])
        self.assertAlmostEqual(float(line.group(3)), by_tenant["prod"]["busy_seconds"] / 3600,
                               places=3)
        rc, out, err = run_cli(["report", "--config", cfg, "--format", "json", "--by", "model"])
        self.assertEqual(rc, 0, err)
        self.assertEqual({x["model"] for x in json.loads(out)["rows"]}, {"a", "b", "c"})
        # Cost per 1,000 inferences of a model with none: "-", not 0.
        rc, out, err = run_cli(["report", "--config", cfg, "--by", "model",
                                "--from", "%d" % (time.time() - 3600)])
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"(?m)^c\s+0\s+0\s+.*\s\d+\.\d+\s+-$")
        self.assertRegex(out, r"(?m)^a\s+\d+\s+\d+\s+.*\s\d+\.\d{6}$")
        for args, word in ((["--from", "soon"], "--from"), (["--by", "gpu"], "--by"),
                           (["--format", "xml"], "--format"), (["--to", "2020-01-01"], "--from"),
                           # Named (it printed the usage alone).
                           (["--from"], "--from needs a value"), (["--bogus"], "--bogus"),
                           (["--from", "--to", "x"], '--from needs a value ("--to"'),
                           (["extra"], 'unexpected argument "extra"'),
                           (["--format", "csv", "-Zq"], "unknown option -Z")):
            rc, out, err = run_cli(["report", "--config", cfg] + args)
            self.assertEqual(rc, 2, (args, out))
            self.assertIn(word, err)
        empty = os.path.join(self.tmp, "empty.json")
        with open(empty, "w") as f:
            json.dump({"state_dir": os.path.join(self.tmp, "nothing")}, f)
        rc, out, err = run_cli(["report", "--config", empty])
        self.assertEqual(rc, 2)
        self.assertIn("no state database", err)
        # A file that is not a database: exit 1, and SQLite's word for it.
        junk = os.path.join(self.tmp, "junk")
        os.makedirs(junk)
        with open(os.path.join(junk, "batchgate.db"), "wb") as f:
            f.write(b"not a database" * 100)
        with open(empty, "w") as f:
            json.dump({"state_dir": junk}, f)
        rc, out, err = run_cli(["report", "--config", empty])
        self.assertEqual(rc, 1, err)
        self.assertIn("not a database", err)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "nothing")))


if __name__ == "__main__":
    unittest.main()
