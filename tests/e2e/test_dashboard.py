"""test_dashboard.py - the live dashboard for real, in headless Chromium
(Debian's chromium): loaded against a running gateway under load, every
chart of every model shows data and the tiles are filled; the usage history
(24 h and 7 d of a ledger written by usage_history) draws every tenant's
marks in its three charts, as many as /dashboard/usage has rows for them,
and says so when there is nothing to draw. Skips, saying why, when
chromium (or usage_history) is not installed."""

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import harness
from harness import Server, roundtrip
from test_infer import infer_body, post, synthetic, write_model

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
USAGE_HISTORY = os.path.join(os.path.dirname(harness.BIN), "usage_history")
TEAMS = ["team-00", "team-01", "team-02"]
# Each range's step and periods, as the page asks for them (dashboard.html RANGES).
RANGES = {"24h": (3600, 24), "7d": (21600, 28)}


def dump_dom(port, path, budget_ms=6000):
    """The page's DOM after budget_ms of (virtual) time in headless Chromium."""
    with tempfile.TemporaryDirectory() as profile:
        p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                            "--user-data-dir=" + profile, "--window-size=1280,900",
                            "--virtual-time-budget=%d" % budget_ms,
                            "--dump-dom", "http://127.0.0.1:%d%s" % (port, path)],
                           capture_output=True, timeout=90)
    return p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")[-2000:]


def attrs(tag):
    return {k: html.unescape(v) for k, v in re.findall(r'([\w-]+)="([^"]*)"', tag)}


def element(dom, id_):
    """The attributes of the element with that id (hidden="" when hidden)."""
    m = re.search(r'<\w+ [^>]*id="%s"[^>]*>' % re.escape(id_), dom)
    return attrs(m.group(0)) if m else None


def history_charts(dom):
    """{chart: {series name: marks drawn}} of the history charts."""
    out = {}
    for tag in re.findall(r"<canvas [^>]*>", dom):
        a = attrs(tag)
        if "data-history-chart" in a:
            out[a["data-history-chart"]] = {
                k: int(v) for k, v in (m.rsplit(":", 1) for m in a.get("data-marks", "").split(",") if m)}
    return out


@unittest.skipUnless(CHROMIUM, "chromium is not installed (apt-get install chromium)")
class DashboardTest(unittest.TestCase):
    def test_charts_show_data_under_load(self):
        repo = tempfile.mkdtemp(prefix="batchgate-dash-")
        write_model(repo, "syn", synthetic("syn", base_us=2000, per_row_us=100))
        lazy = synthetic("later", base_us=2000, per_row_us=100)
        lazy["lifecycle"] = {"load": "lazy"}
        write_model(repo, "later", lazy)
        srv = Server({"model_repository": repo,
                      "devices": {"synthetic0": {"memory_budget_bytes": 1 << 20}}}, io_threads=2)
        stop = threading.Event()

        def load():
            while not stop.is_set():
                post(srv.port, "/v2/models/syn/infer", infer_body([[1, 2, 3, 4]] * 3, name="x"))

        threads = [threading.Thread(target=load) for _ in range(4)]
        try:
            srv.wait_log(r"ready in", timeout=10)
            self.assertEqual(roundtrip(srv.port, "GET", "/dashboard").status, 200)
            for t in threads:
                t.start()
            time.sleep(1.5)
            with tempfile.TemporaryDirectory() as profile:
                p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                                    "--user-data-dir=" + profile, "--virtual-time-budget=6000",
                                    "--dump-dom", "http://127.0.0.1:%d/dashboard" % srv.port],
                                   capture_output=True, timeout=90)
            dom = p.stdout.decode("utf-8", "replace")
            charts = dict(re.findall(r'data-chart="(\w+)"[^>]*data-points="(\d+)"', dom))
            self.assertEqual(set(charts), {"throughput", "latency", "batches", "queue"},
                             "every chart drawn: %r\n%s" % (charts, p.stderr.decode()[-2000:]))
            for name, points in charts.items():
                self.assertGreater(int(points), 0, "chart %s shows data" % name)
            self.assertIn("syn", dom)
            self.assertRegex(dom, r"<b>[0-9.]+</b><span>rows/s</span>")
            sub = re.search(r'<div class="sub" id="sub">([^<]*)</div>', dom)
            self.assertTrue(sub and sub.group(1).startswith("2 model(s)"),
                            "the page reached the server: %r" % (sub and sub.group(1)))
            # Models by state, and the device's memory against its budget.
            self.assertRegex(dom, r'data-state="ready"><b>1</b><span>ready: syn</span>')
            self.assertRegex(dom, r'data-state="unloaded"><b>1</b><span>unloaded: later</span>')
            self.assertRegex(dom, r'data-device="synthetic0"[^>]*><b>[0-9.]+ [KMG]iB of 1.0 MiB</b>'
                                  r'<div class="bar"><div style="width:[0-9.]+%"></div></div>')
        finally:
            stop.set()
            for t in threads:
                if t.is_alive():
                    t.join(10)
            srv.kill()
            shutil.rmtree(repo, ignore_errors=True)

    def test_history_draws_every_tenant(self):
        if not os.path.exists(USAGE_HISTORY):
            self.skipTest("%s is not built (it seeds the usage ledger; cmake --build the tree "
                          "that holds $BATCHGATE_BIN)" % USAGE_HISTORY)
        state = tempfile.mkdtemp(prefix="batchgate-dash-state-")
        repo = tempfile.mkdtemp(prefix="batchgate-dash-")
        srv = None
        try:
            seed = subprocess.run([USAGE_HISTORY, state, "--days", "7", "--tenants", "3",
                                   "--models", "4", "--devices", "2"], capture_output=True, timeout=60)
            self.assertEqual(seed.returncode, 0, seed.stderr.decode())
            write_model(repo, "syn", synthetic("syn", base_us=2000, per_row_us=100))
            srv = Server({"model_repository": repo, "state_dir": state})
            srv.wait_log(r"ready in", timeout=10)
            for rng, (step, periods) in RANGES.items():
                dom, err = dump_dom(srv.port, "/dashboard#history=" + rng)
                sec = element(dom, "history")
                self.assertIsNotNone(sec, "the history section is on the page\n" + err)
                self.assertEqual(sec.get("data-drawn"), rng, "%s drawn: %r\n%s" % (rng, sec, err))
                self.assertEqual((int(sec["data-step"]), int(sec["data-n"])), (step, periods))
                frm, to = int(sec["data-from"]), int(sec["data-to"])
                self.assertEqual(frm % step, 0, "periods aligned to the step in UTC")
                self.assertEqual(to - frm, step * periods)
                self.assertIn("hidden", element(dom, "history-empty"), "no empty state with data")
                self.assertNotIn("hidden", element(dom, "history-charts"))
                # What the page drew against what the API answers for the same
                # query: a line point per period a tenant held a device, a bar
                # per period with idle time, and one per period with a cost.
                r = roundtrip(srv.port, "GET", "/dashboard/usage?group_by=tenant&from=%d&to=%d&step=%d"
                              % (frm, to, step), timeout=10)
                self.assertEqual(r.status, 200, r.body[:300])
                rows = json.loads(r.body)["rows"]
                charts = history_charts(dom)
                self.assertEqual(set(charts), {"utilization", "debt", "cost"}, "%s: %r" % (rng, charts))
                legend = re.search(r'<div class="legend" id="history-legend">(.*?)</div>', dom, re.S)
                for t in TEAMS:
                    self.assertRegex(legend.group(1) if legend else "",
                                     r'data-tenant="%s"><i style="background:[^"]+"></i>%s<' % (t, t))
                    mine = [x for x in rows if x["tenant"] == t]
                    want = {"utilization": sum(x["held_seconds"] > 0 for x in mine),
                            "debt": sum(x["idle_seconds"] > 0 for x in mine),
                            "cost": sum(x["cost"] > 0 for x in mine)}
                    for chart, n in want.items():
                        self.assertGreaterEqual(n, periods // 2, "%s: %s has a seeded history" % (rng, t))
                        self.assertEqual(charts[chart].get(t), n, "%s %s: %s's marks drawn, one per period "
                                         "of data: %r" % (rng, chart, t, charts[chart]))
        finally:
            if srv:
                srv.kill()
            shutil.rmtree(repo, ignore_errors=True)
            shutil.rmtree(state, ignore_errors=True)

    def test_history_empty_state(self):
        # No model: no device is held, so the ledger stays empty (it charges
        # residency and work, nothing else) however long the test runs.
        repo = tempfile.mkdtemp(prefix="batchgate-dash-")
        try:
            with Server({"model_repository": repo}) as srv:
                for rng in RANGES:
                    dom, err = dump_dom(srv.port, "/dashboard#history=" + rng, budget_ms=4000)
                    self.assertEqual(element(dom, "history").get("data-drawn"), rng, err)
                    self.assertEqual(element(dom, "history").get("data-rows"), "0")
                    self.assertRegex(dom, r'<div class="empty" id="history-empty">'
                                          r'no usage recorded in this period</div>')
                    self.assertIn("hidden", element(dom, "history-charts"))
                    self.assertIn("hidden", element(dom, "history-legend"))
        finally:
            shutil.rmtree(repo, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
