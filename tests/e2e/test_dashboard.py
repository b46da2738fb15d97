"""test_dashboard.py - the live dashboard for real, in headless Chromium
(Debian's chromium): loaded against a running gateway under load, every
chart of every model shows data and the tiles are filled. Skips, saying
why, when chromium is not installed."""

import re
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

from harness import Server, roundtrip
from test_infer import infer_body, post, synthetic, write_model

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


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


if __name__ == "__main__":
    unittest.main()
