#!/usr/bin/env python3
"""policy_http.py - the batching policies compared for real: one batchgate,
two synthetic models identical but for `batching.policy` (deadline vs
fixed_delay), the same open-loop arrival trace replayed against each over
HTTP on loopback.

The synthetic backend sleeps exec(R) = BASE + PER_ROW x R per batch, so the
device model matches loadgen/bench/policy_sim and the simulation can be
checked against the running system. Open loop: every request is sent at its
scheduled time whatever the server does, over a pool of keep-alive
connections, and its latency is measured from that scheduled time (so a
stalled server shows up in the tail). Goodput counts 200s within the budget.

    loadgen/bench/policy_http.py [--seconds 5] [--budget-ms 100] [--seed 1]

Standard library only (asyncio). Prints one line per trace and policy, then
the ratios. A stopgap until batchgate-load (the load-generator issue).
"""

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import Batchgate  # noqa: E402

BIN = os.environ.get("BATCHGATE_BIN", os.path.join(ROOT, "build", "batchgate"))

BASE_US, PER_ROW_US, MAX_BATCH, DELAY_US = 20000, 1000, 16, 20000
CAPACITY = MAX_BATCH / ((BASE_US + PER_ROW_US * MAX_BATCH) / 1e6)   # rows/s at full batches


def model_config(name, policy):
    return {"name": name, "backend": "synthetic",
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [4]}],
            "outputs": [{"name": "y", "datatype": "FP32", "shape": [3]}],
            "batching": {"max_batch_size": MAX_BATCH, "max_queue_delay_us": DELAY_US,
                         "max_queue_size": 100000, "policy": policy},
            "synthetic": {"base_us": BASE_US, "per_row_us": PER_ROW_US, "mode": "sleep"}}


def trace(kind, seconds, rng):
    """Arrival times (s) of a Poisson process whose rate follows the trace."""
    if kind.startswith("poisson"):
        level = int(kind.split()[1].rstrip("%")) / 100.0
        rate_at = lambda t: CAPACITY * level
        peak = CAPACITY * level
    else:   # bursty: 100 ms at 3x capacity, then 300 ms quiet (75% on average)
        rate_at = lambda t: 3 * CAPACITY if (t % 0.4) < 0.1 else 0.0
        peak = 3 * CAPACITY
    t, out = 0.0, []
    while True:
        t += rng.expovariate(peak)
        if t >= seconds:
            return out
        if rng.random() * peak <= rate_at(t):
            out.append(t)


class Conn:
    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer


async def one_request(pool, port, path, body, budget_ms, sched, t0, results):
    conn = pool.pop() if pool else None
    if conn is None:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        conn = Conn(r, w)
    req = ("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           "X-Request-Timeout-Ms: %d\r\nContent-Length: %d\r\n\r\n" % (path, budget_ms, len(body))
           ).encode() + body
    conn.writer.write(req)
    status_line = await conn.reader.readline()
    length = 0
    while True:
        line = await conn.reader.readline()
        if line in (b"\r\n", b""):
            break
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    await conn.reader.readexactly(length)
    done = time.monotonic()
    status = int(status_line.split()[1])
    results.append((status, done - (t0 + sched)))
    pool.append(conn)


async def replay(port, model, arrivals, budget_ms):
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4],
                                   "data": [1, 2, 3, 4]}]}).encode()
    path = "/v2/models/%s/infer" % model
    pool, results, tasks = [], [], []
    t0 = time.monotonic() + 0.2
    late_sends = 0
    for sched in arrivals:
        delay = t0 + sched - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        elif delay < -0.005:
            late_sends += 1
        tasks.append(asyncio.ensure_future(
            one_request(pool, port, path, body, budget_ms, sched, t0, results)))
    await asyncio.gather(*tasks)
    for c in pool:
        c.writer.close()
    return results, late_sends


def summarize(results, seconds, budget_ms):
    good = sum(1 for s, lat in results if s == 200 and lat * 1000 <= budget_ms)
    shed = sum(1 for s, _ in results if s == 504)
    late = sum(1 for s, lat in results if s == 200 and lat * 1000 > budget_ms)
    lats = sorted(lat for _, lat in results)
    p99 = lats[int(0.99 * (len(lats) - 1))] * 1000 if lats else 0
    return good / seconds, p99, shed, late


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--budget-ms", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--traces", default="poisson 50%,poisson 200%,bursty")
    a = ap.parse_args()
    # Open loop under overload holds one connection per outstanding request.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    work = tempfile.mkdtemp(prefix="bg-policy-http-")
    repo = os.path.join(work, "models")
    for name, policy in (("deadline", "deadline"), ("fixed", "fixed_delay")):
        os.makedirs(os.path.join(repo, name))
        with open(os.path.join(repo, name, "config.json"), "w") as f:
            json.dump(model_config(name, policy), f)
    srv = Batchgate(BIN, work, {"listen": "127.0.0.1:0", "io_threads": 1,
                                "model_repository": repo}, timeout=10)
    port = srv.port
    try:
        print("synthetic model: exec = %.0f ms + %.0f ms/row, max_batch_size %d, "
              "max_queue_delay %.0f ms, capacity %.0f rows/s; budget %d ms; %.0f s per trace"
              % (BASE_US / 1000, PER_ROW_US / 1000, MAX_BATCH, DELAY_US / 1000, CAPACITY,
                 a.budget_ms, a.seconds))
        print("%-14s %-12s %9s %9s %9s %7s %7s %10s" % ("trace", "policy", "offered/s",
                                                       "goodput/s", "p99 ms", "504", "late",
                                                       "late sends"))
        ratios = {}
        for i, kind in enumerate(t.strip() for t in a.traces.split(",")):
            arrivals = trace(kind, a.seconds, random.Random(a.seed + i))
            for model in ("deadline", "fixed"):
                results, late_sends = asyncio.run(replay(port, model, arrivals, a.budget_ms))
                g, p99, shed, late = summarize(results, a.seconds, a.budget_ms)
                ratios[(kind, model)] = g
                print("%-14s %-12s %9.0f %9.0f %9.0f %7d %7d %10d" % (
                    kind, model, len(arrivals) / a.seconds, g, p99, shed, late, late_sends))
                time.sleep(0.5)
        for kind in {k for k, _ in ratios}:
            f = ratios[(kind, "fixed")]
            print("%s: deadline / fixed_delay goodput = %s" % (
                kind, "%.2fx" % (ratios[(kind, "deadline")] / f) if f else "inf (fixed: 0)"))
    finally:
        srv.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
