#!/usr/bin/env python3
"""lifecycle_selftest.py - checks loadgen/bench/lifecycle.py without the
routes of issue #17: the Zipf sampler, the model sizes, argument parsing,
the metrics and log parsers, the client loop and its timing, the analysis
and the report, run whole against a stand-in server; and, with the real
binary, that the generated models serve and that a build without issue
#17 is reported in one clear message. tests/e2e/test_lifecycle_memory.py
runs against the same stand-in too: it must pass, and fail on a leak and on
unloads that keep the weights.

    python3 loadgen/bench/lifecycle_selftest.py [-v]

The stand-in (this file run with --fake-server --config FILE, as the
benchmark runs batchgate) speaks the contract lifecycle.py relies on:
KServe v2 infer on lazily loaded models with an LRU under a byte budget,
Triton's repository index/load/unload, the metrics of issue #17 and
batchgate's "model M: loaded ... cold start N ms" log line. It is a test
double for the script, not a model of batchgate's timing."""

import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from contextlib import redirect_stderr, redirect_stdout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import lifecycle as lc  # noqa: E402

REAL_BIN = os.environ.get("BATCHGATE_BIN", os.path.join(lc.ROOT, "build", "batchgate"))


# ---------------------------------------------------------------- the stand-in

class FakeGateway:
    """State of the stand-in: models found in the repository, resident ones
    in LRU order, counters."""

    def __init__(self, repo, budget, log, refuse_every=0):
        self.repo, self.budget, self.log = repo, budget, log
        self.refuse_every = refuse_every
        self.lock = threading.Condition()
        self.models = {}
        for name in sorted(os.listdir(repo)):
            with open(os.path.join(repo, name, "config.json")) as f:
                cfg = json.load(f)
            lazy = cfg.get("lifecycle", {}).get("load") == "lazy"
            self.models[name] = {"size": os.path.getsize(
                os.path.join(repo, name, "model.safetensors")), "state": "UNAVAILABLE",
                "lazy": lazy, "inflight": 0, "used": 0.0, "cold": 0.0, "blob": None,
                "out": cfg["outputs"][0]["shape"][0]}
        self.requests, self.loads, self.unloads = {}, {}, {}
        self.misses = 0

    def count(self, d, key):
        d[key] = d.get(key, 0) + 1

    def resident(self):
        return sum(m["size"] for m in self.models.values()
                   if m["state"] in ("READY", "LOADING"))

    def load(self, name):
        """Called with the lock held; returns once name is READY."""
        m = self.models[name]
        while m["state"] in ("LOADING", "UNLOADING"):
            self.lock.wait(5)
        if m["state"] == "READY":
            return
        deadline = time.monotonic() + 5
        if self.budget:
            while self.resident() + m["size"] > self.budget:
                idle = [(x["used"], n) for n, x in self.models.items()
                        if x["state"] == "READY" and x["inflight"] == 0]
                if not idle:
                    if time.monotonic() > deadline:
                        break
                    self.lock.wait(0.05)
                    continue
                victim = min(idle)[1]
                self.models[victim]["state"] = "UNAVAILABLE"
                self.models[victim]["blob"] = None
                self.count(self.unloads, (victim, "evicted"))
        m["state"] = "LOADING"
        self.lock.release()
        try:
            t0 = time.monotonic()
            # The weights held in memory (RSS) until the model leaves;
            # FAKE_LEAK_BYTES more kept for good at each load.
            leak = int(os.environ.get("FAKE_LEAK_BYTES", "0"))
            if leak:
                LEAKED.append(b"x" * leak)
            blob = m["blob"] or bytearray(m["size"])
            with open(os.path.join(self.repo, name, "model.safetensors"), "rb") as f:
                f.readinto(blob)
            t_read = time.monotonic() - t0
            time.sleep(0.002)
            total = time.monotonic() - t0
        finally:
            self.lock.acquire()
        m["state"], m["cold"], m["blob"] = "READY", total, blob
        self.count(self.loads, (name, "ok"))
        self.log("model %s: loaded on cpu, 1 instance, %.1f MiB; cold start %.1f ms "
                 "(read %.1f, prepare %.1f, warmup %.1f)" % (
                     name, m["size"] / (1 << 20), total * 1e3, t_read * 1e3,
                     (total - t_read) * 1e3, 0.0))
        self.lock.notify_all()

    def metrics(self):
        out = []
        for (name, code), n in sorted(self.requests.items()):
            out.append('batchgate_requests_total{model="%s",code="%d"} %d' % (name, code, n))
        for (name, r), n in sorted(self.loads.items()):
            out.append('batchgate_model_loads_total{model="%s",result="%s"} %d' % (name, r, n))
        for (name, r), n in sorted(self.unloads.items()):
            out.append('batchgate_model_unloads_total{model="%s",reason="%s"} %d'
                       % (name, r, n))
        for name, m in sorted(self.models.items()):
            out.append('batchgate_model_resident_bytes{model="%s",device="cpu0"} %d'
                       % (name, m["size"] if m["state"] == "READY" else 0))
            out.append('batchgate_model_cold_start_seconds{model="%s",phase="total"} %.6f'
                       % (name, m["cold"]))
        out.append("batchgate_model_lazy_misses_total %d" % self.misses)
        return "\n".join(out) + "\n"


LEAKED = []


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake = None

    def log_message(self, *a):
        pass

    def answer(self, code, obj, headers=()):
        body = (obj if isinstance(obj, str) else json.dumps(obj)).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/debug/memory":
            return self.answer(200, {"heap_in_use_bytes": 1 << 20, "arenas": 1})
        if self.path == "/metrics":
            with self.fake.lock:
                text = self.fake.metrics()
            return self.answer(200, text)
        self.answer(404, {"error": "no route"})

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        f = self.fake
        if self.path == "/v2/repository/index":
            with f.lock:
                idx = [{"name": k, "version": "1", "state": m["state"],
                        "reason": "unloaded" if m["state"] == "UNAVAILABLE" else ""}
                       for k, m in sorted(f.models.items())]
            return self.answer(200, idx)
        m = re.match(r"^/v2/repository/models/([^/]+)/(load|unload)$", self.path)
        if m:
            name, op = m.groups()
            with f.lock:
                if name not in f.models:
                    return self.answer(404, {"error": "unknown model"})
                if op == "load":
                    f.load(name)
                elif f.models[name]["state"] == "READY":
                    f.models[name]["state"] = "UNLOADING"
                    threading.Timer(0.01, self.finish_unload, (name,)).start()
            return self.answer(200, {})
        m = re.match(r"^/v2/models/([^/]+)/infer$", self.path)
        if not m or m.group(1) not in f.models:
            return self.answer(404, {"error": "no route"})
        name = m.group(1)
        try:
            json.loads(body)
        except ValueError:
            return self.answer(400, {"error": "bad JSON"})
        with f.lock:
            mod = f.models[name]
            code = 200
            if mod["state"] != "READY":
                f.misses += 1
                if f.refuse_every and f.misses % f.refuse_every == 0:
                    code = 503
                else:
                    f.load(name)
            f.count(f.requests, (name, code))
            if code != 200:
                return self.answer(503, {"error": "loading"}, [("Retry-After", "1")])
            mod["inflight"] += 1
            mod["used"] = time.monotonic()
        time.sleep(0.001)
        with f.lock:
            mod["inflight"] -= 1
            f.lock.notify_all()
        self.answer(200, {"model_name": name, "outputs": [
            {"name": "output", "datatype": "FP32", "shape": [1, mod["out"]],
             "data": [0.0] * mod["out"]}]})

    def finish_unload(self, name):
        with self.fake.lock:
            self.fake.models[name]["state"] = "UNAVAILABLE"
            if not os.environ.get("FAKE_KEEP_WEIGHTS"):
                self.fake.models[name]["blob"] = None
            self.fake.count(self.fake.unloads, (name, "api"))
            self.fake.lock.notify_all()


def fake_server_main(argv):
    cfg_path = argv[argv.index("--config") + 1]
    with open(cfg_path) as f:
        cfg = json.load(f)
    budget = cfg.get("devices", {}).get("cpu0", {}).get("memory_budget_bytes", 0)

    def log(msg):
        now = time.time()
        sys.stderr.write("%s.%03dZ info %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S",
                                                               time.gmtime(now)),
                                                 int(now % 1 * 1000), msg))
        sys.stderr.flush()

    Handler.fake = FakeGateway(cfg["model_repository"], budget, log,
                               int(os.environ.get("FAKE_REFUSE_EVERY", "0")))
    signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    log("listening on 127.0.0.1:%d (1 io threads)" % srv.server_address[1])
    log("ready in 1.0 ms")
    srv.serve_forever()


# ---------------------------------------------------------------- tests

class ZipfTest(unittest.TestCase):
    def test_frequencies_follow_the_law(self):
        n, s, draws = 20, 1.1, 200000
        z = lc.Zipf(n, s, random.Random(5))
        got = [0] * n
        for _ in range(draws):
            got[z.sample()] += 1
        h = sum((k + 1) ** -s for k in range(n))
        chi2 = 0.0
        for k in range(n):
            want = draws * (k + 1) ** -s / h
            self.assertAlmostEqual(z.p[k], (k + 1) ** -s / h, places=12)
            chi2 += (got[k] - want) ** 2 / want
        # 19 degrees of freedom: P(chi2 > 43.8) = 0.001.
        self.assertLess(chi2, 43.8, "frequencies %r" % got)
        self.assertGreater(got[0], got[1])
        self.assertGreater(got[1], got[-1])

    def test_seeded_and_edges(self):
        a = lc.Zipf(20, 1.1, lc.client_rng(1, 3))
        b = lc.Zipf(20, 1.1, lc.client_rng(1, 3))
        c = lc.Zipf(20, 1.1, lc.client_rng(1, 4))
        sa = [a.sample() for _ in range(500)]
        self.assertEqual(sa, [b.sample() for _ in range(500)])
        self.assertNotEqual(sa, [c.sample() for _ in range(500)])
        one = lc.Zipf(1, 1.1, random.Random(1))
        self.assertEqual({one.sample() for _ in range(100)}, {0})
        uni = lc.Zipf(4, 0, random.Random(1))
        self.assertEqual(uni.p, [0.25] * 4)
        with self.assertRaises(ValueError):
            lc.Zipf(0, 1.1, random.Random(1))


class NumbersTest(unittest.TestCase):
    def test_percentile(self):
        v = list(range(1, 101))
        random.Random(1).shuffle(v)
        self.assertEqual(lc.percentile(v, 50), 50)
        self.assertEqual(lc.percentile(v, 99), 99)
        self.assertEqual(lc.percentile(v, 100), 100)
        self.assertEqual(lc.percentile([7], 99), 7)
        self.assertEqual(lc.percentile([1, 2, 3, 4], 50), 2)
        self.assertIsNone(lc.percentile([], 50))
        self.assertEqual(lc.median([3, 1, 2]), 2)

    def test_sizes(self):
        for target in (15e6, 25e6, 100e6, 1e6):
            h = lc.hidden_for_bytes(target)
            self.assertLess(abs(lc.mlp_bytes(h) - target) / target, 0.01, (target, h))
            self.assertLessEqual(abs(lc.mlp_bytes(h) - target),
                                 abs(lc.mlp_bytes(h + 1) - target))
            self.assertLessEqual(abs(lc.mlp_bytes(h) - target),
                                 abs(lc.mlp_bytes(h - 1) - target))
        sizes = [lc.mlp_bytes(h) / 1e6 for h in (1920, 2048, 2176, 2304, 2432)]
        self.assertTrue(15 <= min(sizes) and max(sizes) <= 25, sizes)
        self.assertAlmostEqual(sum(sizes[i % 5] for i in range(20)), 396, delta=10)


class ModelsTest(unittest.TestCase):
    def test_make_model_writes_a_lazy_cpu_model_of_the_size(self):
        repo = tempfile.mkdtemp(prefix="lc-selftest-")
        try:
            size = lc.make_model(repo, "x", 48, 3)
            with open(os.path.join(repo, "x", "config.json")) as f:
                cfg = json.load(f)
            self.assertEqual(cfg["lifecycle"], {"load": "lazy"})
            self.assertEqual((cfg["name"], cfg["backend"]), ("x", "cpu"))
            self.assertEqual(cfg["inputs"][0]["shape"], [lc.IN_DIM])
            self.assertEqual(cfg["outputs"][0]["shape"], [lc.OUT_DIM])
            self.assertEqual(cfg["batching"]["max_batch_size"], 16)
            with open(os.path.join(repo, "x", "model.safetensors"), "rb") as f:
                hlen = int.from_bytes(f.read(8), "little")
            self.assertEqual(size, 8 + hlen + lc.mlp_bytes(48))
            sizes = lc.make_zipf_repo(os.path.join(repo, "z"), 3, [16, 32], 1, log=lambda l: 0)
            self.assertEqual(sorted(sizes), ["m00", "m01", "m02"])
            self.assertEqual(sizes["m00"], sizes["m02"])
            with open(os.path.join(repo, "z", "m00", "model.safetensors"), "rb") as a, \
                    open(os.path.join(repo, "z", "m02", "model.safetensors"), "rb") as b:
                self.assertNotEqual(a.read(), b.read(), "one seed per model")
        finally:
            shutil.rmtree(repo, ignore_errors=True)


class ParsersTest(unittest.TestCase):
    TEXT = "\n".join([
        "# HELP batchgate_model_loads_total x",
        "# TYPE batchgate_model_loads_total counter",
        'batchgate_model_loads_total{model="a",result="ok"} 3',
        'batchgate_model_loads_total{model="b",result="ok"} 2',
        'batchgate_model_loads_total{model="b",result="failed"} 1',
        'batchgate_model_unloads_total{model="a",reason="evicted"} 4',
        'batchgate_model_resident_bytes{model="a",device="cpu0"} 1000',
        'batchgate_model_resident_bytes{model="b",device="cuda0"} 7',
        'batchgate_requests_total{model="we\\"ird",code="200"} 1e3',
        "batchgate_inflight_requests 2",
        "batchgate_model_lazy_hits_total 9",
        'batchgate_model_load_wait_seconds_bucket{le="0.1"} 4',
        "nv_inference_count 5",
    ])

    def test_metrics(self):
        s = lc.parse_metrics(self.TEXT)
        self.assertEqual(lc.loads_total(s), 6)
        self.assertEqual(lc.msum(s, "batchgate_model_loads_total", result="ok"), 5)
        self.assertEqual(lc.msum(s, "batchgate_model_unloads_total", reason="evicted"), 4)
        self.assertEqual(lc.resident_total(s), 1000)
        self.assertEqual(lc.msum(s, "batchgate_requests_total"), 1000)
        self.assertEqual(lc.msum(s, "batchgate_inflight_requests"), 2)
        self.assertEqual(lc.msum(s, "nv_inference_count"), 0, "only batchgate_ names")
        before = lc.parse_metrics("batchgate_model_lazy_hits_total 4\n")
        self.assertEqual(lc.own_view(before, s), {"batchgate_model_lazy_hits_total": 5})

    def test_log_lines(self):
        log = "\n".join([
            "2026-12-03T13:41:48.733Z info listening on 127.0.0.1:43737 (2 io threads)",
            "2026-12-03T13:41:49.000Z info model m03: loaded on cpu, 1 instance, 19.1 MiB; "
            "cold start 41.5 ms (read 0.1, prepare 38.2, warmup 3.2)",
            "2026-12-03T13:41:49.000Z info model big: loaded on cuda, 2 instances, 95.4 MiB; "
            "cold start 812.0 ms (read 1.0, prepare 700.0, of which device context 650.0, "
            "warmup 111.0)",
            "2026-12-03T13:41:49.000Z info model m04: loaded on cpu; cold start 9 ms",
        ])
        self.assertEqual(lc.log_cold_starts(log), [
            ("m03", 41.5, 0.1, 38.2, 3.2), ("big", 812.0, 1.0, 700.0, 111.0),
            ("m04", 9.0, None, None, None)])

    def test_the_log_format_is_batchgate_s(self):
        # The regular expression follows serving.c's format string.
        with open(os.path.join(lc.ROOT, "serving", "serving.c")) as f:
            src = f.read()
        self.assertIn('"model %s: loaded on %s, %d instance%s, %.1f MiB; cold start %.1f ms "',
                      src)
        self.assertIn('"(read %.1f, prepare %.1f%s, warmup %.1f)"', src)

    def test_sampler_helpers(self):
        rows = [(0.1, 0, 0, {}), (0.3, 2, 10, {"a": 0.05}), (0.5, 5, 20, {"a": 0.05}),
                (0.7, 5, 20, {"a": 0.07, "b": 0.2}), (0.9, 5, 20, {"a": 0.07, "b": 0.2})]
        self.assertEqual(lc.last_load_time(rows), 0.5)
        self.assertIsNone(lc.last_load_time([]))
        self.assertEqual(lc.gauge_cold_starts(rows), [0.05, 0.07, 0.2])


class ArgsTest(unittest.TestCase):
    def test_defaults_are_the_issue_s(self):
        a = lc.parse_args([])
        self.assertEqual((a.models, a.ratio, a.zipf_s, a.clients, a.duration, a.budget_ms,
                          a.big_mb, a.big_reps, a.parts, a.big_cold),
                         (20, 3, 1.1, 8, 20.0, 2000, 100.0, 5, ["zipf", "big"], True))
        self.assertFalse(lc.parse_args(["--no-big-cold"]).big_cold)

    def test_bad_values_are_usage_errors(self):
        for argv in (["--parts", "zipf,nope"], ["--parts", ""], ["--hidden", "a,b"],
                     ["--clients", "0"], ["--duration", "0"], ["--cold-factor", "1"]):
            err = io.StringIO()
            with self.assertRaises(SystemExit) as cm, \
                    redirect_stderr(err):
                lc.parse_args(argv)
            self.assertEqual(cm.exception.code, 2, argv)
            self.assertIn("error", err.getvalue())


class AnalysisTest(unittest.TestCase):
    def raw(self, records, samples=(), before="", after=""):
        return {"records": records, "samples": list(samples),
                "before": lc.parse_metrics(before), "after": lc.parse_metrics(after)}

    def test_figures_from_known_records(self):
        # 100 requests over 2 s: 90 warm (5 ms), 5 cold (300 ms), 2 at 2.5 s
        # (past a 2000 ms budget), 2 refused 503, 1 without an answer.
        recs = [(0.01 * i, i % 3, 200, 0.005, "") for i in range(90)]
        recs += [(1.0, 0, 200, 0.3, "")] * 5 + [(1.1, 1, 200, 2.5, "")] * 2
        recs += [(1.2, 2, 503, 0.001, "")] * 2 + [(1.3, 2, 0, 0.0, "RemoteDisconnected")]
        before = 'batchgate_requests_total{model="m00",code="200"} 10\n' \
                 'batchgate_model_loads_total{model="m00",result="ok"} 1\n'
        after = 'batchgate_requests_total{model="m00",code="200"} 107\n' \
                'batchgate_requests_total{model="m02",code="503"} 2\n' \
                'batchgate_model_loads_total{model="m00",result="ok"} 8\n' \
                'batchgate_model_loads_total{model="m01",result="failed"} 1\n' \
                'batchgate_model_unloads_total{model="m00",reason="evicted"} 6\n'
        samples = [(0.2, 1, 40e6, {}), (0.4, 9, 60e6, {})]
        log = "x info model m00: loaded on cpu, 1 instance, 1.0 MiB; cold start 250.0 ms " \
              "(read 1.0, prepare 240.0, warmup 9.0)\n" * 8
        a = lc.analyze(self.raw(recs, samples, before, after), 2.0, 2000, 0.05, 120e6, log,
                       lc.model_names(3))
        self.assertEqual((a["sent"], a["requests"], a["ok"], a["no_answer"]), (100, 99, 97, 1))
        self.assertEqual(a["server_requests"], 99)
        self.assertEqual((a["loads"], a["loads_failed"]), (8, 1))
        self.assertAlmostEqual(a["hit_metrics"], 1 - 8 / 99)
        self.assertAlmostEqual(a["hit_client"], 90 / 99)
        self.assertEqual(a["unloads"]["evicted"], 6)
        self.assertEqual(a["cold_req"], 7)
        self.assertEqual((a["cold_req_p50"], a["cold_req_p99"]), (0.3, 2.5))
        self.assertEqual((a["cold_p50"], a["cold_p99"]), (0.25, 0.25))
        self.assertEqual(a["goodput"], 95 / 2.0)
        self.assertEqual(a["resident_max"], 60e6)
        self.assertAlmostEqual(a["resident_over_budget"], 0.5)
        self.assertEqual(a["codes"], {"200": 97, "503": 2, "no answer (RemoteDisconnected)": 1})
        self.assertEqual(a["models_requested"], 3)
        self.assertEqual(a["errors_by_model"], [(2, "m02", 503, "")])
        lines = lc.run_lines("budget", a, 120e6)
        self.assertTrue(any("hit ratio: metrics 0.919, client 0.909" in l for l in lines), lines)
        self.assertTrue(any("no answer 1" in l for l in lines), lines)

    def test_missing_contract_metrics_are_named_not_zero(self):
        recs = [(0.01 * i, 0, 200, 0.005, "") for i in range(10)]
        after = 'batchgate_requests_total{model="m00",code="200"} 10\n'
        a = lc.analyze(self.raw(recs, [(0.1, 0, None, {})], "", after), 1.0, 2000, 0.05,
                       1e6, "", ["m00"])
        self.assertIsNone(a["loads"])
        self.assertIsNone(a["hit_metrics"])
        self.assertIsNone(a["resident_max"])
        self.assertEqual(a["missing"], ["batchgate_model_loads_total",
                                        "batchgate_model_resident_bytes"])
        lines = "\n".join(lc.run_lines("unlimited", a, 0))
        self.assertIn("warning: /metrics has no batchgate_model_loads_total, "
                      "batchgate_model_resident_bytes", lines)
        self.assertIn("loads - (failed -)", lines)
        rows = {r[0]: r for r in lc.zipf_checks({"unlimited": a})}
        self.assertEqual(rows["unlimited: loads beyond one per model"][2]["unlimited"],
                         (None, False))
        self.assertIsNone(lc.resident_total(lc.parse_metrics(after)))
        both = lc.parse_metrics('batchgate_model_resident_bytes{model="a",device="cpu0"} 5\n'
                                'batchgate_device_resident_bytes{device="cpu0"} 9\n'
                                'batchgate_device_resident_bytes{device="cuda0"} 100\n')
        self.assertEqual(lc.resident_total(both), 9, "the device's figure, drains included")

    def test_misses_by_the_log_s_load_intervals(self):
        # Loads of m01 over [1.0, 1.1] s and m00 over [2.0, 2.05] s of the run.
        w0 = 1_800_000_000.0

        def line(t, model, ms_):
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(w0 + t))
            return ("%s.%03dZ info model %s: loaded on cpu, 1 instance, 1.0 MiB; cold start "
                    "%.1f ms (read 0.1, prepare 1.0, warmup 0.1)"
                    % (stamp, round((w0 + t) % 1 * 1000), model, ms_))
        log = "\n".join([line(1.1, "m01", 100), line(2.05, "m00", 50)])
        self.assertEqual({m: [(round(a - w0, 3), round(b - w0, 3)) for a, b in v]
                          for m, v in lc.log_load_intervals(log).items()},
                         {"m01": [(1.0, 1.1)], "m00": [(2.0, 2.05)]})
        recs = [(0.95, 1, 200, 0.2, ""),    # m01 sent before, answered after the load
                (1.05, 1, 200, 0.06, ""),   # m01 sent during it
                (1.15, 1, 200, 0.01, ""),   # m01 after it: a hit
                (1.05, 0, 200, 0.01, ""),   # m00 during m01's load: a hit
                (1.99, 0, 503, 0.001, ""),  # refused: a miss whatever the log
                (2.01, 0, 200, 0.3, "")]    # m00 during its load
        raw = self.raw(recs)
        raw["wall_start"] = w0
        missed, how = lc.misses(raw, lc.model_names(2), log, 0.001)
        self.assertEqual(missed, [True, True, False, False, False, True])
        self.assertIn("log lines", how)
        a = lc.analyze(raw, 3.0, 2000, 0.001, 0, log, lc.model_names(2))
        self.assertAlmostEqual(a["hit_client"], 2 / 6)
        self.assertEqual((a["cold_req"], a["cold_req_p50"], a["cold_req_p99"]), (3, 0.2, 0.3))
        self.assertEqual(a["cold_p50"], 0.05)
        self.assertEqual(a["cold_p99"], 0.1)

    def test_log_wall_clock(self):
        self.assertEqual(lc.log_wall("2026-12-03T13:41:48.500Z info x"), 1796305308.5)
        self.assertEqual(lc.log_wall("2026-12-03T15:41:48.500+02:00 info x"), 1796305308.5)
        self.assertEqual(lc.log_wall("2026-12-03T10:41:48-0300 info x"), 1796305308.0)
        self.assertIsNone(lc.log_wall("batchgate: c.json: devices: unknown field"))

    def test_warm_baseline(self):
        recs = [(0.1 * i, 0, 200, 0.001 * (1 + i % 10), "") for i in range(300)]
        samples = [(1.0, 3, 0, {}), (5.0, 4, 0, {}), (9.0, 4, 0, {})]
        p99, how = lc.warm_baseline(self.raw(recs, samples))
        self.assertEqual(p99, 0.01)
        self.assertIn("after the last load (5.0 s in), 250", how)
        # Too few after the last load: the second half.
        samples = [(1.0, 3, 0, {}), (29.0, 4, 0, {})]
        p99, how = lc.warm_baseline(self.raw(recs, samples))
        self.assertIn("second half", how)

    def test_checks_and_table(self):
        base = {"hit_metrics": 0.8, "hit_client": 0.7, "loads": 30, "cold_p50": 0.04,
                "cold_p99": 0.09, "cold_req_p50": 0.05, "cold_req_p99": 0.12,
                "goodput": 400.0, "unloads": {"evicted": 24}, "resident_over_budget": 0.97,
                "no_answer": 0, "models_requested": 20}
        unl = dict(base, unloads={"evicted": 0}, loads=20, goodput=500.0,
                   resident_over_budget=None)
        rows = lc.zipf_checks({"budget": base, "unlimited": unl})
        byname = {r[0]: r for r in rows}
        self.assertEqual(byname["cold start p50, server (ms)"][2]["budget"][0], 40.0)
        self.assertEqual(byname["unlimited: evictions"][2], {"unlimited": (0, True)})
        self.assertEqual(byname["unlimited: loads beyond one per model"][2],
                         {"unlimited": (0, True)})
        self.assertEqual(byname["budget: resident max / budget"][2]["budget"], (0.97, True))
        self.assertAlmostEqual(byname["goodput budget / unlimited"][2]["budget"][0], 0.8)
        text = "\n".join(lc.table(rows + [("big: ratio", "<= 1.5", {"big": (1.7, False)})]))
        self.assertIn("budget", text.splitlines()[0])
        self.assertIn("big", text.splitlines()[0])
        self.assertRegex(text, r"big: ratio +<= 1.5 +1\.700 +NOT MET")
        self.assertRegex(text, r"unlimited: evictions +0 +0 +met")
        self.assertRegex(text, r"cold start p50, server \(ms\) +\(info\) +40\.0 ")
        self.assertRegex(text, r"cold start p99, server \(ms\) +\(info\) +90\.0 ")
        self.assertRegex(text, r"loads \(request-triggered\) +\(info\) +30 +20\n")
        self.assertRegex(text, r"goodput budget / unlimited +\(info\) +0\.800")
        self.assertEqual([lc.cell(x) for x in (None, 3, 3.0, 0.4567, 12.345, 1234.5)],
                         ["-", "3", "3.000", "0.457", "12.3", "1234"])


def write_fake_bin(work, env_extra=""):
    """An executable that runs the stand-in as lifecycle.py runs batchgate."""
    path = os.path.join(work, "fake-batchgate")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n%sexec %s %s --fake-server \"$@\"\n"
                % (env_extra, sys.executable, os.path.abspath(__file__)))
    os.chmod(path, 0o755)
    return path


class StandInRunTest(unittest.TestCase):
    """lifecycle.py's main() whole, against the stand-in."""

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="lc-selftest-")
        self.saved = lc.BIN

    def tearDown(self):
        lc.BIN = self.saved
        shutil.rmtree(self.work, ignore_errors=True)

    def test_both_parts_report(self):
        lc.BIN = write_fake_bin(self.work, "FAKE_REFUSE_EVERY=7 ")
        out = io.StringIO()
        t0 = time.monotonic()
        with redirect_stdout(out):
            rc = lc.main(["--models", "6", "--hidden", "64,96,128", "--duration", "2",
                          "--clients", "4", "--big-mb", "2", "--big-reps", "3",
                          "--retry-after-cap-s", "0.05"])
        text = out.getvalue()
        self.assertEqual(rc, 0, text)
        self.assertLess(time.monotonic() - t0, 60)
        for want in (r"budget: .* MB = .* MB / 3",
                     r"budget \(memory_budget_bytes \d+\):",
                     r"unlimited \(memory_budget_bytes 0 = unlimited\):",
                     r"codes 200 x\d+, 503 x\d+",
                     r"server's own view: batchgate_model_lazy_misses_total \+\d+",
                     r"client [\d.]+ \(a miss: in flight during a load of its model "
                     r"\(log lines\)\)",
                     r"cold start \(server, log lines \(\d+\)\): p50 [\d.]+ ms",
                     r'not 2xx: m0\d 503 x\d+, the first: \{"error": "loading"\}',
                     r"round 3, file cached: read [\d.]+ ms, first request [\d.]+ ms",
                     r"round 3, file evicted: read [\d.]+ ms, first request [\d.]+ ms",
                     r"log: big cold start",
                     r"big, file cached: medians of 3 rounds",
                     r"2 MB, file evicted: first request / read \(medians\) +\(info\) "
                     r"+[\d.]+ *\n",
                     r"unlimited: evictions +0 +0 +met",
                     r"budget: resident max / budget +<= 1.00 +0\.\d+ +met",
                     r"budget: requests with no answer +0 +0 +met",
                     r"2 MB, file cached: first request / read \(medians\) +<= 1.5 "
                     r"+[\d.]+ +(met|NOT MET)"):
            self.assertRegex(text, want)
        ev = re.search(r"budget \(memory.*\n.*\n  loads (\d+) .*evicted (\d+)", text)
        self.assertTrue(ev and int(ev.group(2)) > 0, "the budget run evicts:\n" + text)

    def test_a_server_without_the_routes_is_one_message(self):
        # The stand-in with its repository routes answering 404, as the
        # build before issue #17 does.
        lc.BIN = write_fake_bin(self.work, "FAKE_NO_REPOSITORY=1 ")
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            rc = lc.main(["--models", "2", "--hidden", "16", "--duration", "1",
                          "--parts", "zipf"])
        self.assertEqual(rc, 1)
        self.assertIn("POST /v2/repository/index answered 404", err.getvalue())
        self.assertNotIn("Traceback", err.getvalue())


class E2eTestOnStandInTest(unittest.TestCase):
    """tests/e2e/test_lifecycle_memory.py, whose routes are issue #17's,
    run against the stand-in (which holds a model's bytes while loaded)."""

    def run_e2e(self, fake_env=""):
        work = tempfile.mkdtemp(prefix="lc-selftest-")
        try:
            env = dict(os.environ, BATCHGATE_BIN=write_fake_bin(work, fake_env),
                       LIFECYCLE_CYCLES="6", LIFECYCLE_MB="40", PYTHONDONTWRITEBYTECODE="1")
            return subprocess.run([sys.executable, "-m", "unittest", "-v",
                                   "test_lifecycle_memory"],
                                  cwd=os.path.join(lc.ROOT, "tests", "e2e"), env=env,
                                  capture_output=True, text=True, timeout=120)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def test_the_e2e_memory_test_passes_on_the_stand_in(self):
        p = self.run_e2e()
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stderr, r"# 6 cycles of a 40\.0 MB model: [\d.]+ s")
        self.assertRegex(p.stderr, r"Ran 1 test.*\n\nOK")

    def test_it_fails_on_a_leak(self):
        p = self.run_e2e("FAKE_LEAK_BYTES=1048576 ")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertRegex(p.stderr, r"RSS after 6 cycles grew [45]\.\d\d MiB past its value "
                                   r"after the first \(allowed 2 MiB\)")

    def test_it_fails_when_unloads_keep_the_weights(self):
        # Flat RSS, yet the memory never went back.
        p = self.run_e2e("FAKE_KEEP_WEIGHTS=1 ")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertRegex(p.stderr, r"the unload gave back -?\d+\.\d MiB of the 38\.1 MiB of "
                                   r"weights within 5 s")


@unittest.skipUnless(os.access(REAL_BIN, os.X_OK), "batchgate not built (%s)" % REAL_BIN)
class RealBinaryTest(unittest.TestCase):
    """What the real binary can check before issue #17."""

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="lc-selftest-")
        self.saved = lc.BIN
        lc.BIN = REAL_BIN

    def tearDown(self):
        lc.BIN = self.saved
        shutil.rmtree(self.work, ignore_errors=True)

    def test_generated_models_serve_and_the_client_times_them(self):
        # Without "lifecycle" (an unknown field before issue #17) and
        # without "devices": eager models on today's server.
        repo = os.path.join(self.work, "repo")
        lc.make_zipf_repo(repo, 3, [64, 128], 1, log=lambda l: 0)
        for name in os.listdir(repo):
            p = os.path.join(repo, name, "config.json")
            with open(p) as f:
                cfg = json.load(f)
            del cfg["lifecycle"]
            with open(p, "w") as f:
                json.dump(cfg, f)
        gw = lc.Gateway(self.work, "real", repo, None)
        try:
            go = threading.Event()
            cl = [lc.Client(c, gw.port, lc.model_names(3), 1.1, 1, 2000, 1.0, lc.infer_body(),
                            go) for c in range(2)]
            t = time.monotonic() + 0.05
            for c in cl:
                c.t_start, c.t_end = t, t + 1.0
                c.start()
            go.set()
            for c in cl:
                c.join(15)
            recs = [r for c in cl for r in c.records]
            self.assertGreater(len(recs), 20)
            self.assertEqual({r[2] for r in recs}, {200}, recs[:5])
            self.assertTrue(all(0 < r[3] < 1.0 for r in recs))
            self.assertTrue(all(-0.01 <= r[0] < 1.0 for r in recs), "sent within the run")
            s = lc.scrape(gw.port)
            self.assertEqual(lc.msum(s, "batchgate_requests_total"), len(recs))
            self.assertEqual(len(lc.log_cold_starts(gw.text())), 3,
                             "one \"loaded\" line per model:\n" + gw.text())
            self.assertGreater(lc.time_read(os.path.join(repo, "m00", "model.safetensors")), 0)
            code, lat, body, _ = lc.timed_infer(gw.port, "m01", 2000, 10)
            self.assertEqual(code, 200, body)
            self.assertEqual(len(json.loads(body)["outputs"][0]["data"]), lc.OUT_DIM)
        finally:
            gw.stop()

    def test_a_build_without_issue_17_is_one_message(self):
        repo = os.path.join(self.work, "repo")
        os.makedirs(repo)
        try:
            gw = lc.Gateway(self.work, "budget", repo, 1000)
        except lc.BenchError as e:
            self.assertIn("unknown field", str(e))
            self.assertIn("issue #17", str(e))
        else:
            gw.stop()
            self.skipTest("this build takes \"devices\": issue #17 is in")
        gw = lc.Gateway(self.work, "nodev", repo, None)
        try:
            with self.assertRaises(lc.BenchError) as cm:
                lc.repository_index(gw.port)
            self.assertIn("answered 404", str(cm.exception))
        finally:
            gw.stop()

    def test_a_short_run_on_a_build_with_issue_17(self):
        try:
            lc.preflight(self.work)
        except lc.BenchError as e:
            self.skipTest("issue #17 is not in this build: %s" % str(e).splitlines()[0])
        out = io.StringIO()
        with redirect_stdout(out):
            rc = lc.main(["--models", "5", "--hidden", "256,384", "--duration", "2",
                          "--clients", "4", "--big-mb", "8", "--big-reps", "2"])
        text = out.getvalue()
        self.assertEqual(rc, 0, text)
        for want in (r"a miss: in flight during a load of its model \(log lines\)",
                     r"cold start \(server, log lines \(\d+\)\)",
                     r"unlimited: evictions +0 +0 +met",
                     r"unlimited: loads beyond one per model +0 +0 +met",
                     r"budget: requests with no answer +0 +0 +met",
                     r"8 MB, file cached: first request / read \(medians\)"):
            self.assertRegex(text, want)


if __name__ == "__main__":
    if "--fake-server" in sys.argv:
        if os.environ.get("FAKE_NO_REPOSITORY"):
            Handler.do_POST_real = Handler.do_POST

            def no_repo(self):
                if self.path.startswith("/v2/repository/"):
                    n = int(self.headers.get("Content-Length") or 0)
                    self.rfile.read(n)
                    return self.answer(404, {"error": "no route"})
                return self.do_POST_real()
            Handler.do_POST = no_repo
        fake_server_main(sys.argv)
    else:
        unittest.main()
