"""test_metrics.py - /metrics and /v2/models/{m}/stats against known traffic:
promtool accepts the exposition; after requests of known sizes the counters,
histogram counts and batch sums equal what was sent; rejections are counted
by reason; busy + idle seconds track the wall time of the loaded instance;
/metrics, the stats and the dashboard's data name the same devices (CPU
instances, the servers behind an upstream model) with the same busy time."""

import ctypes.util
import json
import os
import re
import shutil
import subprocess
import threading
import time
import unittest

from harness import BIN as BIN_PATH, RepoServerCase, Server, roundtrip
from test_infer import DIGITS, infer_body, post, synthetic, write_model
from test_upstream import FakeUpstreamCase, upstream_model

PROMTOOL = shutil.which("promtool")


def parse(text):
    """{(name, frozenset(labels)): value} of every sample."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        assert m, "unparseable sample line: %r" % line
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def promtool_check(tc, text):
    """promtool accepts the exposition: it parses (exit 1 otherwise), and its
    lints (exit 3) name only Triton's nv_ series, whose names are Triton's
    (counters without _total, units abbreviated) and stay as dashboards
    query them; batchgate's own names are lint-clean."""
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(),
                       capture_output=True, timeout=30)
    out = p.stdout.decode() + p.stderr.decode()
    tc.assertIn(p.returncode, (0, 3), "promtool: %s" % out)
    for line in out.splitlines():
        tc.assertTrue(line.startswith("nv_"), "promtool lint on a batchgate name: %s" % line)


def check_grouping(tc, text):
    """The text format's rule that promtool does not check: every sample of
    a family sits in one group after the family's TYPE, and no family is
    declared twice (a parser that meets a family again makes it a second,
    untyped one: prometheus_client did, for interleaved model_loads_total
    and model_unloads_total)."""
    suffixes = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count")}
    declared, family, kind, done = set(), None, None, set()
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"# TYPE (\S+) (\S+)$", line)
        if m:
            tc.assertNotIn(m.group(1), declared, "line %d: %s declared again" % (n, m.group(1)))
            if family:
                done.add(family)
            declared.add(m.group(1))
            family, kind = m.groups()
            continue
        if not line or line.startswith("#"):
            continue
        name = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0)
        ok = family and any(name == family + sfx for sfx in suffixes.get(kind, ("",)))
        tc.assertTrue(ok, "line %d: %s outside its family's group (in %s's): %s"
                      % (n, name, family, line))


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


def busy(samples, **labels):
    """device_busy_seconds_total of one device, its two classes together."""
    return sum(value(samples, "batchgate_device_busy_seconds_total", **labels, **{"class": c})
               for c in ("online", "offline"))


class MetricsTest(RepoServerCase):
    @classmethod
    def populate(cls, repo):
        # 10 ms per batch of up to 8 rows; small queue for 429s.
        write_model(repo, "syn", synthetic("syn", base_us=10000, per_row_us=0,
                                           batching={"max_batch_size": 8,
                                                     "max_queue_delay_us": 3000}))
        write_model(repo, "tiny", synthetic("tiny", base_us=200000, per_row_us=0,
                                            batching={"max_batch_size": 1,
                                                      "max_queue_size": 1}))
        write_model(repo, "broken", "{\"backend\": \"tpu\"}")
        # Folders whose names are no model names: one not UTF-8, one that
        # was script on the dashboard. Listed as failed models, the first
        # made every scrape one that Prometheus refused whole.
        for name in (b"bad\xffname", b"<img src=x onerror=document.title=1337>"):
            d = os.path.join(repo.encode(), name)
            os.makedirs(d)
            with open(os.path.join(d, b"config.json"), "w") as f:
                f.write("{}")

    def test_folders_that_are_no_model_names_are_skipped(self):
        self.srv.wait_log(r'folder "bad\\xffname" skipped: a model\'s name may use only', timeout=5)
        self.srv.wait_log(r'folder "<img\\x20src=x\\x20onerror=document.title=1337>" skipped',
                          timeout=5)
        text = self.scrape()   # decodes as UTF-8 (scrape)
        self.assertNotIn('model="bad', text)
        self.assertNotIn("onerror", text)
        names = [row["name"] for row in roundtrip(self.srv.port, "POST", "/v2/repository/index",
                                                  [("Content-Type", "application/json")],
                                                  "{}").json()]
        self.assertEqual(sorted(names), ["broken", "syn", "tiny"])

    def scrape(self):
        r = roundtrip(self.srv.port, "GET", "/metrics")
        self.assertEqual(r.status, 200)
        self.assertTrue(r.headers["Content-Type"].startswith("text/plain; version=0.0.4"))
        return r.body.decode()

    def test_promtool_accepts_the_exposition(self):
        if not PROMTOOL:
            self.skipTest("promtool not installed (scripts/install-deps installs prometheus)")
        post(self.srv.port, "/v2/models/syn/infer", infer_body([[1, 2, 3, 4]], name="x"))
        promtool_check(self, self.scrape())

    def test_each_family_is_one_group(self):
        post(self.srv.port, "/v2/models/syn/infer", infer_body([[1, 2, 3, 4]], name="x"))
        check_grouping(self, self.scrape())

    def test_every_spec_metric_is_present(self):
        text = self.scrape()
        for name, kind in (("requests_total", "counter"), ("request_duration_seconds", "histogram"),
                           ("queue_duration_seconds", "histogram"),
                           ("compute_duration_seconds", "histogram"),
                           ("batch_size", "histogram"), ("queue_depth", "gauge"),
                           ("inflight_requests", "gauge"), ("rejected_requests_total", "counter"),
                           ("model_cold_start_seconds", "gauge"), ("model_loaded", "gauge"),
                           ("device_busy_seconds_total", "counter"),
                           ("device_idle_seconds_total", "counter"),
                           ("device_memory_bytes", "gauge"),
                           ("process_start_to_ready_seconds", "gauge"),
                           ("job_lines_total", "counter"), ("jobs", "gauge"),
                           ("tenant_requests_total", "counter"),
                           ("auth_refusals_total", "counter"),
                           ("tenant_inflight_requests", "gauge"),
                           ("model_capacity_rows_per_second", "gauge"),
                           ("model_demand_rows_per_second", "gauge"),
                           ("cost_total", "counter")):
            self.assertIn("# TYPE batchgate_%s %s\n" % (name, kind), text, name)
        s = parse(text)
        self.assertEqual(value(s, "batchgate_model_loaded", model="syn"), 1)
        self.assertEqual(value(s, "batchgate_model_loaded", model="broken"), 0)
        for phase in ("read", "prepare", "warmup", "total"):
            self.assertIn(("batchgate_model_cold_start_seconds",
                           frozenset({("model", "syn"), ("phase", phase)})), s)
        self.assertGreater(value(s, "batchgate_process_start_to_ready_seconds"), 0)
        # No job yet: every state is 0 and each model's lines are 0 (docs/JOBS.md).
        self.assertIn(("batchgate_jobs", frozenset({("state", "queued")})), s)
        self.assertEqual(value(s, "batchgate_jobs", state="completed"), 0)
        self.assertEqual(value(s, "batchgate_job_lines_total", model="syn", result="ok"), 0)
        if not ctypes.util.find_library("nvidia-ml"):
            self.assertNotIn("batchgate_nvml_", text, "without NVML nothing is made up")
        self.assertIn('le="0.0001"', text, "a bucket at 100 us")
        self.assertIn('le="10"', text, "a bucket at 10 s")

    def test_counters_reconcile_with_traffic(self):
        before = parse(self.scrape())
        stats0 = roundtrip(self.srv.port, "GET", "/v2/models/syn/stats").json()["model_stats"][0]
        sizes = [1, 2, 3, 1, 4, 1, 2, 8, 1, 1, 3, 5]
        results = []

        def one(rows):
            results.append(post(self.srv.port, "/v2/models/syn/infer",
                                infer_body([[1, 0, 0, 0]] * rows, name="x")).status)

        threads = [threading.Thread(target=one, args=(n,)) for n in sizes]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        self.assertEqual(results, [200] * len(sizes))
        bad = post(self.srv.port, "/v2/models/syn/infer", "{").status
        self.assertEqual(bad, 400)
        after = parse(self.scrape())
        d = lambda name, **l: value(after, name, **l) - value(before, name, **l)
        self.assertEqual(d("batchgate_requests_total", model="syn", code="200"), len(sizes))
        self.assertEqual(d("batchgate_requests_total", model="syn", code="400"), 1)
        # Without keys every request is the tenant "default"'s (docs/TENANTS.md).
        self.assertEqual(d("batchgate_tenant_requests_total", tenant="default", model="syn",
                           code="200"), len(sizes))
        self.assertEqual(d("batchgate_tenant_requests_total", tenant="default", model="syn",
                           code="400"), 1)
        self.assertEqual(value(after, "batchgate_auth_refusals_total", reason="no_key"), 0)
        self.assertEqual(d("batchgate_rejected_requests_total", model="syn", reason="bad_request"), 1)
        self.assertEqual(d("batchgate_request_duration_seconds_count", model="syn"), len(sizes) + 1)
        self.assertEqual(d("batchgate_queue_duration_seconds_count", model="syn"), len(sizes))
        self.assertEqual(d("batchgate_batch_size_sum", model="syn"), sum(sizes))
        execs = d("batchgate_batch_size_count", model="syn")
        self.assertEqual(d("batchgate_compute_duration_seconds_count", model="syn"), execs)
        self.assertLess(execs, len(sizes), "concurrent requests shared batches")
        stats1 = roundtrip(self.srv.port, "GET", "/v2/models/syn/stats").json()["model_stats"][0]
        self.assertEqual(stats1["inference_count"] - stats0["inference_count"], sum(sizes))
        self.assertEqual(stats1["execution_count"] - stats0["execution_count"], execs)
        self.assertEqual(stats1["inference_stats"]["success"]["count"]
                         - stats0["inference_stats"]["success"]["count"], len(sizes))
        by_size = sum(b["compute_infer"]["count"] for b in stats1["batch_stats"]) - \
            sum(b["compute_infer"]["count"] for b in stats0["batch_stats"])
        self.assertEqual(by_size, execs)
        # Busy time: each batch sleeps 10 ms.
        self.assertGreaterEqual(busy(after, model="syn", device="synthetic0") -
                                busy(before, model="syn", device="synthetic0"),
                                0.010 * execs * 0.99)
        # No job ran: all of it is the online class's.
        self.assertEqual(value(after, "batchgate_device_busy_seconds_total", model="syn",
                               device="synthetic0", **{"class": "offline"}), 0)

    def test_every_answer_and_connection_is_counted(self):
        # Requests no model counter sees (an unknown model, an unknown
        # route, a health check) are in http_responses_total by status;
        # connections open and accepted are counted too.
        from harness import connect, close_quietly, read_response, request
        before = parse(self.scrape())
        s = connect(self.srv)
        self.addCleanup(close_quietly, s)
        s.sendall(request("GET", "/v2/models/no-such-model") + request("GET", "/nowhere") +
                  request("POST", "/v2/models/no-such-model/infer", body=b"{}") +
                  request("GET", "/v2/health/live"))
        codes = [read_response(s).status for _ in range(4)]
        self.assertEqual(codes, [404, 404, 404, 200])
        after = parse(self.scrape())   # on a second connection, s still open
        d = lambda code: (value(after, "batchgate_http_responses_total", code=code) -
                          value(before, "batchgate_http_responses_total", code=code))
        self.assertEqual(d("404"), 3)
        # The health check and the first scrape (answered before its own count is read).
        self.assertEqual(d("200"), 2)
        self.assertGreaterEqual(value(after, "batchgate_http_connections"), 2)
        self.assertGreaterEqual(value(after, "batchgate_http_connections_accepted_total") -
                                value(before, "batchgate_http_connections_accepted_total"), 2)

    def test_capacity_and_demand(self):
        """syn runs a batch of up to 8 rows in 10 ms: 800 rows/s at full
        batches. Demand counts arrivals, refused ones too: tiny (one row in
        200 ms, a queue of 1) refuses most of a burst, and all of it counts."""
        for _ in range(20):
            post(self.srv.port, "/v2/models/syn/infer", infer_body([[1, 2, 3, 4]] * 4, name="x"))
        s = parse(self.scrape())
        cap = value(s, "batchgate_model_capacity_rows_per_second", model="syn")
        self.assertGreater(cap, 800 * 0.75)
        self.assertLess(cap, 800 * 1.1)
        self.assertEqual(value(s, "batchgate_model_capacity_rows_per_second", model="broken"), 0)
        codes = []
        lock = threading.Lock()

        def burst():
            r = post(self.srv.port, "/v2/models/tiny/infer", infer_body([[1, 2, 3, 4]], name="x"))
            with lock:
                codes.append(r.status)

        ts = [threading.Thread(target=burst) for _ in range(12)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        self.assertIn(429, codes)
        s = parse(self.scrape())
        # The last 10 s: 20 requests of 4 rows to syn (+ other tests' rows at most).
        self.assertGreaterEqual(value(s, "batchgate_model_demand_rows_per_second", model="syn"),
                                80 / 10 - 1e-9)
        # Every one of the burst, refused or not (other tests' requests may add).
        self.assertGreaterEqual(value(s, "batchgate_model_demand_rows_per_second", model="tiny"),
                                len(codes) / 10 - 0.05)

    def test_busy_plus_idle_is_wall_time(self):
        s0, t0 = parse(self.scrape()), time.monotonic()
        post(self.srv.port, "/v2/models/syn/infer", infer_body([[1, 1, 1, 1]], name="x"))
        time.sleep(1.0)
        s1, t1 = parse(self.scrape()), time.monotonic()
        held = sum(busy(s, model="syn", device="synthetic0")
                   + value(s, "batchgate_device_idle_seconds_total", model="syn",
                           device="synthetic0") for s in (s1,)) - \
            sum(busy(s, model="syn", device="synthetic0")
                + value(s, "batchgate_device_idle_seconds_total", model="syn",
                        device="synthetic0") for s in (s0,))
        # The scrapes' own round trips bound the wall time the server saw.
        self.assertAlmostEqual(held, t1 - t0, delta=0.01 * (t1 - t0) + 0.01)

    def test_rejections_by_reason(self):
        before = parse(self.scrape())
        r = post(self.srv.port, "/v2/models/broken/infer", infer_body([[1]], name="x"))
        self.assertEqual(r.status, 503)
        r = post(self.srv.port, "/v2/models/syn/infer", infer_body([[1, 2, 3, 4]], name="x"),
                 [("X-Request-Timeout-Ms", "1")])
        self.assertEqual(r.status, 504)
        codes = []
        threads = [threading.Thread(target=lambda: codes.append(
            post(self.srv.port, "/v2/models/tiny/infer",
                 infer_body([[1, 2, 3, 4]], name="x")).status)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        self.assertIn(429, codes)
        after = parse(self.scrape())
        d = lambda name, **l: value(after, name, **l) - value(before, name, **l)
        self.assertEqual(d("batchgate_rejected_requests_total", model="broken", reason="not_ready"), 1)
        self.assertEqual(d("batchgate_rejected_requests_total", model="syn", reason="deadline"), 1)
        self.assertEqual(d("batchgate_rejected_requests_total", model="tiny", reason="queue_full"),
                         codes.count(429))
        self.assertEqual(d("batchgate_requests_total", model="tiny", code="429"), codes.count(429))

    def test_stats_extensions(self):
        post(self.srv.port, "/v2/models/syn/infer", infer_body([[1, 1, 1, 1]], name="x"))
        s = roundtrip(self.srv.port, "GET", "/v2/models/syn/stats").json()["model_stats"][0]
        for k in ("p50", "p90", "p99"):
            self.assertGreater(s["latency_seconds"]["request"][k], 0)
        inst = s["instances"][0]
        self.assertGreater(inst["latency_model"]["a_seconds"], 0.005,
                           "the fitted model knows a batch costs ~10 ms")
        debt = s["compute_debt"]
        self.assertAlmostEqual(debt["device_seconds_held"],
                               debt["device_seconds_used"] + debt["device_seconds_idle"], places=4)
        self.assertGreater(debt["batch_fill"], 0)
        # A quiet machine: answers leave close to their plan (0 below 20 answers).
        self.assertGreaterEqual(s["answer_guard_seconds"], 0)
        self.assertLess(s["answer_guard_seconds"], 0.01)
        m = parse(self.scrape())
        self.assertLess(value(m, "batchgate_answer_guard_seconds", model="syn"), 0.01)


class DeviceRowsAgreeTest(FakeUpstreamCase):
    """The three views of a model's devices are built from one enumeration:
    a CPU model with two instances, an upstream model with two servers and
    a synthetic model show the same device rows on /metrics, in
    /v2/models/{m}/stats and in /dashboard/data."""

    @classmethod
    def populate(cls, repo):
        shutil.copytree(DIGITS, os.path.join(repo, "digits"))
        with open(os.path.join(repo, "digits", "config.json")) as f:
            cfg = json.load(f)
        cfg.update(backend="cpu", instances={"count": 2, "devices": []})
        with open(os.path.join(repo, "digits", "config.json"), "w") as f:
            json.dump(cfg, f)
        ports = [cls.fake_server("--base-ms", "5")[1] for _ in range(2)]
        cls.urls = ["http://127.0.0.1:%d" % p for p in ports]
        write_model(repo, "up2", upstream_model("up2", cls.urls))
        write_model(repo, "syn", synthetic("syn", base_us=2000, per_row_us=0))

    def serve(self):
        small = infer_body([[1, 2, 3, 4]], name="x")
        bodies = {"digits": infer_body([[0.5] * 64] * 2), "up2": small, "syn": small}
        codes = []

        def one(model):
            codes.append(post(self.srv.port, "/v2/models/%s/infer" % model, bodies[model]).status)

        threads = [threading.Thread(target=one, args=(m,)) for m in bodies for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        self.assertEqual(codes, [200] * len(threads))

    def test_metrics_stats_and_dashboard_name_the_same_devices(self):
        self.serve()
        text = roundtrip(self.srv.port, "GET", "/metrics").body.decode()
        dash = roundtrip(self.srv.port, "GET", "/dashboard/data").json()
        # Quiet: its own poll is not a request in flight (it read 1).
        self.assertEqual(dash["inflight"], 0)
        dash = {m["name"]: m for m in dash["models"]}
        samples = parse(text)
        want = {"digits": ["cpu0", "cpu1"], "up2": ["upstream0", "upstream1"],
                "syn": ["synthetic0"]}
        for model, devices in want.items():
            stats = roundtrip(self.srv.port, "GET",
                              "/v2/models/%s/stats" % model).json()["model_stats"][0]
            rows = stats["instances"]
            self.assertEqual([r["device"] for r in rows], devices, model)
            self.assertEqual([r["device"] for r in dash[model]["stats"]["instances"]], devices,
                             model)
            for family in ("device_busy_seconds_total", "device_idle_seconds_total",
                           "device_utilization_ratio", "device_memory_bytes"):
                cls_ = ',class="online"' if family == "device_busy_seconds_total" else ""
                got = re.findall(r'^batchgate_%s\{model="%s",device="(\w+)"%s\} '
                                 % (family, model, cls_), text, re.M)
                self.assertEqual(got, devices, "%s of %s" % (family, model))
            for param in ("a", "b", "margin"):
                got = re.findall(r'^batchgate_latency_model_seconds\{model="%s",device="(\w+)",'
                                 r'param="%s"\} ' % (model, param), text, re.M)
                self.assertEqual(got, devices, "latency_model_seconds of %s" % model)
            # Quiet now: busy time stands still, so both views show the same.
            for r in rows:
                b = busy(samples, model=model, device=r["device"])
                self.assertAlmostEqual(b, r["busy_seconds"], delta=1e-5, msg=r["device"])
                self.assertLessEqual(r["utilization_10s"], 1.0, "per instance or server")
            self.assertGreater(sum(r["busy_seconds"] for r in rows), 0, model)
            # One count of memory everywhere (the dashboard's added the
            # host's row buffers: 192 bytes for "syn", 0 on /metrics).
            if model != "up2":
                mem = [value(samples, "batchgate_device_memory_bytes", model=model, device=d)
                       for d in devices]
                self.assertEqual(dash[model]["memory_bytes"], sum(mem), model)
        # The servers behind the upstream model: the same URLs, in the same
        # order, in the stats and in the upstream_* families.
        stats = roundtrip(self.srv.port, "GET", "/v2/models/up2/stats").json()["model_stats"][0]
        self.assertEqual([r["url"] for r in stats["instances"]], self.urls)
        calls = r'^batchgate_upstream_calls_total\{model="up2",upstream="([^"]+)"\} '
        self.assertEqual(re.findall(calls, text, re.M), self.urls)


class NvmlTest(unittest.TestCase):
    """NVML's lines where a driver would be: tests/fakes/fake_nvml.c stands
    in for libnvidia-ml.so.1 (one GPU, 40% busy, 1 of 80 GiB, 250 W)."""

    def test_nvml_lines_and_energy(self):
        lib = os.path.join(os.path.dirname(BIN_PATH), "fake_nvml")
        if not os.path.exists(os.path.join(lib, "libnvidia-ml.so.1")):
            self.skipTest("no fake NVML beside the binary (%s): built with the tests" % lib)
        srv = Server(env={"LD_LIBRARY_PATH": lib}, extra_args=("--log-level", "debug"))
        try:
            srv.wait_log(r"NVML: 1 device", timeout=5)
            first = parse(roundtrip(srv.port, "GET", "/metrics").body.decode())
            time.sleep(0.5)
            text = roundtrip(srv.port, "GET", "/metrics").body.decode()
            s = parse(text)
            self.assertEqual(value(s, "batchgate_nvml_gpu_utilization_ratio", device="cuda0"), 0.4)
            self.assertEqual(value(s, "batchgate_nvml_memory_total_bytes", device="cuda0"),
                             80 * 2 ** 30)
            self.assertIn("# TYPE batchgate_energy_joules_total counter", text)
            e0 = value(first, "batchgate_energy_joules_total", device="cuda0")
            e1 = value(s, "batchgate_energy_joules_total", device="cuda0")
            self.assertGreater(e0, 1e6)   # the driver's count, from before the process
            self.assertAlmostEqual((e1 - e0) / 250.0, 0.5, delta=0.4)   # 250 W for ~0.5 s
            # Triton's names for the same GPU, labelled by its UUID.
            self.assertEqual(value(s, "nv_gpu_utilization", gpu_uuid="GPU-fake-0"), 0.4)
            self.assertEqual(value(s, "nv_gpu_memory_total_bytes", gpu_uuid="GPU-fake-0"),
                             80 * 2 ** 30)
            self.assertEqual(value(s, "nv_gpu_memory_used_bytes", gpu_uuid="GPU-fake-0"),
                             2 ** 30)
            if PROMTOOL:
                promtool_check(self, text)
            srv.stop_checked()
        finally:
            srv.kill()


if __name__ == "__main__":
    unittest.main()
