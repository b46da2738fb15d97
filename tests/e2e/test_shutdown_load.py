"""test_shutdown_load.py - SIGTERM in the middle of an open-loop run at 80% of
the model's capacity, counted by batchgate-load: every request the server
accepted is answered (200, or 503 for those arriving on an open connection
after the signal), none is lost (sent whole, then the connection ended with
no answer; batchgate-load counts apart the requests that crossed the close of
an idle keep-alive connection, see docs/LOADGEN.md), new connections are
refused, and batchgate exits 0 without reporting unanswered requests."""

import json
import os
import signal
import subprocess
import tempfile
import time
import unittest

from harness import BIN, Server
from test_infer import synthetic, write_model

LOAD = os.path.join(os.path.dirname(BIN), "batchgate-load")


class ShutdownUnderLoadTest(unittest.TestCase):
    def run_once(self, rate, signal_after_s, duration_s):
        repo = tempfile.mkdtemp(prefix="batchgate-sdl-")
        # One instance, batches of up to 8 rows of 6 ms + 50 us/row: about
        # 1250 requests/s at most; `rate` is 80% of that.
        write_model(repo, "m", synthetic("m", base_us=6000, per_row_us=50,
                                         batching={"max_batch_size": 8,
                                                   "max_queue_delay_us": 2000}))
        srv = Server({"model_repository": repo, "shutdown_timeout_ms": 10000}, io_threads=2)
        try:
            srv.wait_log(r"ready in", timeout=30)
            out = os.path.join(repo, "load.json")
            body = os.path.join(repo, "body.json")
            with open(body, "w") as f:
                json.dump({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4],
                                       "data": [1, 2, 3, 4]}]}, f)
            load = subprocess.Popen(
                [LOAD, "--url", "http://127.0.0.1:%d/v2/models/m/infer" % srv.port,
                 "--method", "POST", "--body", body, "--rate", str(rate),
                 "--duration", str(duration_s), "--warmup", "0", "--quiet", "--json", out],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(signal_after_s)
            srv.send_signal(signal.SIGTERM)
            code = srv.wait(timeout=15)
            _, err = load.communicate(timeout=30)
            step = json.load(open(out))["steps"][0]
            return code, step, srv.log(), err.decode()
        finally:
            srv.kill()

    def test_sigterm_mid_run_loses_nothing(self):
        code, step, log, err = self.run_once(rate=1000, signal_after_s=1.5, duration_s=3)
        self.assertEqual(code, 0, log)
        self.assertNotIn("not answered", log)
        codes = {int(k): v for k, v in step["codes"].items()}
        self.assertGreater(codes.get(200, 0), 800, step)   # about 1.5 s at 1000/s served
        self.assertEqual(set(codes) - {200, 503}, set(), step)
        self.assertEqual(step["lost"], 0, "requests sent whole and never answered: %r" % step)
        # A request crossing the close of an idle keep-alive connection is
        # the one unavoidable HTTP/1.1 race (the drain looks once more right
        # before each close, so it is rare); the server's own count of
        # accepted-but-unanswered (exit 0, nothing logged) is the guarantee.
        # Under the sanitizers every step runs several times slower, and the
        # window between that last look and the close with it: under
        # ThreadSanitizer one run in about fifteen saw 3 there, none above;
        # under AddressSanitizer one CI run (2026-12-04) saw 3, and so did a
        # plain build's CI run the same day on the 2 shared cores: the
        # window depends on the machine's load as much as on the build, so
        # one bound for all.
        self.assertLessEqual(step["closed_idle"], 5, step)
        # After the signal the listener is closed: the rest of the run's new
        # connections are refused (or the load finds none of its own open).
        self.assertGreater(step["refused"] + codes.get(503, 0), 0, step)


if __name__ == "__main__":
    unittest.main()
