#!/usr/bin/env python3
"""deadline_pairs.py - does the deadline policy keep a pair together when
its timer wakes a little late?

Two requests arriving together with one latency budget should leave as one
batch, at the last moment the batch can still finish in time. A timed wake
comes some tens or hundreds of microseconds after it was asked for; without
allowing for that (policy_wake_slack, batcher/policy.h) the worker found the
batch already late, sent one request alone, and the other could only be
answered 504.

One batchgate, a synthetic model of 5 ms + 3 ms a row with the deadline
policy, PAIRS pairs of one-row requests with a 40 ms budget
(X-Request-Timeout-Ms), a pair every 150 ms so that the queue is empty
between them. Reported: how many of the 2 x PAIRS requests were answered
504, and how many pairs left as one batch (from the model's batch-size
statistics). With --baseline BIN the same run against another build, side
by side in this process.

    loadgen/bench/deadline_pairs.py [--pairs 20] [--rounds 2] [--baseline BIN]

Loopback only; bounded: PAIRS x 0.15 s per round plus start-up."""

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import Batchgate, cpu_name, http  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BIN = os.environ.get("BATCHGATE_BIN", os.path.join(ROOT, "build", "batchgate"))
BUDGET_MS = 40
MODEL = {"name": "pc", "backend": "synthetic",
         "inputs": [{"name": "x", "datatype": "FP32", "shape": [4]}],
         "outputs": [{"name": "y", "datatype": "FP32", "shape": [3]}],
         "batching": {"max_batch_size": 8, "max_queue_delay_us": 100000, "policy": "deadline"},
         "synthetic": {"base_us": 5000, "per_row_us": 3000}}
BODY = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4],
                               "data": [1, 2, 3, 4]}]}).encode()


def one(port, out):
    out.append(http(port, "POST", "/v2/models/pc/infer", BODY, timeout=5,
                    headers=[("X-Request-Timeout-Ms", BUDGET_MS)])[0])


def batches_of_two(port):
    """How many batches of 2 rows the model ran (its /stats batch sizes)."""
    _, body = http(port, "GET", "/v2/models/pc/stats", timeout=5)
    st = json.loads(body)["model_stats"][0]
    return sum(b["compute_infer"]["count"] for b in st.get("batch_stats", []) if b["batch_size"] == 2)


def run(binary, pairs):
    work = tempfile.mkdtemp(prefix="bg-pairs-")
    try:
        models = os.path.join(work, "models")
        os.makedirs(os.path.join(models, "pc"))
        with open(os.path.join(models, "pc", "config.json"), "w") as f:
            json.dump(MODEL, f)
        bg = Batchgate(binary, work, {"listen": "127.0.0.1:0", "grpc_listen": "off",
                                      "model_repository": models,
                                      "state_dir": os.path.join(work, "state")}, timeout=30)
        try:
            # A few pairs first: the latency model learns the device.
            codes = []
            for i in range(5 + pairs):
                out = []
                ts = [threading.Thread(target=one, args=(bg.port, out)) for _ in range(2)]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
                if i == 4:
                    together0 = batches_of_two(bg.port)
                elif i > 4:
                    codes += out
                time.sleep(0.15)
            return codes.count(504), len(codes), batches_of_two(bg.port) - together0
        finally:
            bg.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--baseline", help="another batchgate binary, run side by side")
    a = ap.parse_args()
    if not 1 <= a.pairs <= 1000 or not 1 <= a.rounds <= 20:
        sys.exit("--pairs 1..1000, --rounds 1..20")
    print("# %s, %d cores; pairs of 1-row requests, %d ms budget, model 5 ms + 3 ms/row"
          % (cpu_name(), os.cpu_count(), BUDGET_MS))
    builds = [("this build", BIN)] + ([("baseline", a.baseline)] if a.baseline else [])
    for r in range(a.rounds):
        for name, binary in builds:
            late, n, together = run(binary, a.pairs)
            print("round %d  %-10s  504: %d of %d  pairs batched together: %d of %d"
                  % (r + 1, name, late, n, together, a.pairs), flush=True)


if __name__ == "__main__":
    main()
