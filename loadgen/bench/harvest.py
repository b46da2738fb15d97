#!/usr/bin/env python3
"""harvest.py - does offline work fill the device time online traffic leaves,
without costing the online traffic anything? (issue #15)

One model on one device (a synthetic one whose batch of R rows takes
BASE_US + R * PER_ROW_US, sleeping: the device is not a CPU core here, so the
load generator and the server's own threads do not compete with it), two
runs side by side in one invocation, each over the same compressed day:

  A, online only: batchgate-load --trace diurnal:PERIOD:PEAK:TROUGH, every
     request with a latency budget; peak 70% and trough 5% of the online
     capacity measured first (closed loop, single-row requests).
  B, the same trace plus a backlog of offline lines (a job larger than the
     day can finish), submitted before the trace starts.

Reported, with the targets of the issue:
  - device busy fraction (busy seconds / wall seconds, from /metrics):
    B >= 0.90;
  - online goodput (answers within budget per second): B >= 0.99 x A;
  - share of online answers late or failed: B - A <= 0.1 percentage point;
  - offline lines per second in B >= 0.85 x the idle capacity of A. Two
    readings of "idle capacity" are printed: by time, (1 - busy A) x rows/s
    at full batches (the latency model's max_batch_size /
    exec(max_batch_size)); and by rows, rows/s at full batches less the
    online rows/s of A. Offline rows also fill the empty rows of online
    batches (docs/JOBS.md), so time the device is busy with small online
    batches still has room for them: the rows reading is the one the target
    is judged by, the time reading is shown beside it.

    loadgen/bench/harvest.py [--period 60] [--budget-ms 50]

Each run starts a fresh batchgate. Loopback only; every wait is bounded."""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BIN = os.environ.get("BATCHGATE_BIN", os.path.join(ROOT, "build", "batchgate"))
LOAD = os.environ.get("BATCHGATE_LOAD", os.path.join(ROOT, "build", "batchgate-load"))
MODEL = "h"


def http(port, method, path, body=None, timeout=30):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    head = "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" % (method, path)
    if body is not None:
        head += "Content-Length: %d\r\n" % len(body)
    s.sendall(head.encode() + b"\r\n" + (body or b""))
    data = b""
    while True:
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    s.close()
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1]


def metric_sum(text, name, label_re=""):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and re.search(label_re, line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def device_busy(port):
    _, body = http(port, "GET", "/metrics")
    return metric_sum(body.decode(), "batchgate_device_busy_seconds_total",
                      r'model="%s"' % MODEL)


def start(work, args):
    models = os.path.join(work, "models")
    os.makedirs(os.path.join(models, MODEL), exist_ok=True)
    with open(os.path.join(models, MODEL, "config.json"), "w") as f:
        json.dump({"backend": "synthetic",
                   "inputs": [{"name": "x", "datatype": "FP32", "shape": [4]}],
                   "outputs": [{"name": "y", "datatype": "FP32", "shape": [2]}],
                   "batching": {"max_batch_size": args.max_batch,
                                "latency_budget_ms": args.budget_ms},
                   "synthetic": {"base_us": args.base_us, "per_row_us": args.per_row_us,
                                 "mode": "sleep"}}, f)
    state = os.path.join(work, "state")
    cfg = os.path.join(work, "config.json")
    with open(cfg, "w") as f:
        json.dump({"listen": "127.0.0.1:0", "io_threads": 1, "model_repository": models,
                   "state_dir": state}, f)
    log = open(os.path.join(work, "bg.log"), "w+")
    p = subprocess.Popen([BIN, "--config", cfg], stderr=log)
    for _ in range(200):
        log.seek(0)
        text = log.read()
        if "ready in" in text:
            port = int(re.search(r"listening on 127\.0\.0\.1:(\d+)", text).group(1))
            return p, port, state
        time.sleep(0.05)
    p.kill()
    sys.exit("harvest: batchgate did not start:\n" + text)


def load(port, work, extra, duration, warmup=0):
    out = os.path.join(work, "load.json")
    cmd = [LOAD, "--url", "http://127.0.0.1:%d" % port, "--model", MODEL, "--duration",
           str(duration), "--warmup", str(warmup), "--quiet", "--json", out] + extra
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=duration + 120)
    with open(out) as f:
        return json.load(f)["steps"][0]


def exec_ms(port, rows):
    """The latency model's exec(rows) for the model's instance, in ms."""
    _, body = http(port, "GET", "/v2/models/%s/stats" % MODEL)
    st = json.loads(body)["model_stats"][0]
    inst = st.get("instances", [{}])[0]
    lm = inst.get("latency_model") or {}
    a, b = lm.get("a_seconds"), lm.get("b_seconds_per_row")
    if a is None or b is None:
        return None
    return (a + b * rows) * 1e3


def write_job(state, lines):
    jobs = os.path.join(state, "jobs")
    os.makedirs(jobs, exist_ok=True)
    path = os.path.join(jobs, "backlog.jsonl")
    row = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4],
                                  "data": [1, 2, 3, 4]}]})
    with open(path, "w") as f:
        for i in range(lines):
            f.write(row[:-1] + ', "id": "%d"}\n' % i)
    return "backlog.jsonl"


def one_run(args, peak, trough, backlog_lines):
    work = tempfile.mkdtemp(prefix="bg-harvest-")
    p, port, state = start(work, args)
    try:
        # Warm the latency model the same way in both runs.
        load(port, work, ["--concurrency", "16"], 2)
        job = None
        if backlog_lines:
            rel = write_job(state, backlog_lines)
            status, body = http(port, "POST", "/v2/models/%s/jobs" % MODEL,
                                json.dumps({"input_path": rel}).encode())
            if status != 201:
                sys.exit("harvest: job refused: %d %s" % (status, body[:300]))
            job = json.loads(body)["id"]
            time.sleep(0.5)
        busy0, t0 = device_busy(port), time.monotonic()
        done0 = 0
        if job:
            done0 = json.loads(http(port, "GET", "/v2/jobs/%s" % job)[1])["lines"]["done"]
        step = load(port, work, ["--trace", "diurnal:%g:%g:%g" % (args.period, peak, trough),
                                 "--budget-ms", str(args.budget_ms)], args.period)
        busy1, t1 = device_busy(port), time.monotonic()
        lines = 0
        if job:
            info = json.loads(http(port, "GET", "/v2/jobs/%s" % job)[1])
            lines = info["lines"]["done"] - done0
            http(port, "DELETE", "/v2/jobs/%s" % job)
        full = exec_ms(port, args.max_batch)
        answered = sum(step["codes"].values()) + step["errors"]
        good = step["goodput"] * step["duration_s"]
        return {"busy": (busy1 - busy0) / (t1 - t0), "goodput": step["goodput"],
                "online_rows_s": step["throughput"],
                "late_share": 1 - good / answered if answered else 0.0,
                "offline_lines_s": lines / (t1 - t0), "full_batch_ms": full,
                "p99_ms": step["latency_us"]["p99"] / 1e3, "sent": step["sent"]
                if "sent" in step else answered}
    finally:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--period", type=float, default=60, help="seconds of one compressed day")
    ap.add_argument("--budget-ms", type=float, default=50)
    ap.add_argument("--base-us", type=int, default=2000)
    ap.add_argument("--per-row-us", type=int, default=50)
    ap.add_argument("--max-batch", type=int, default=32)
    args = ap.parse_args()

    # Online capacity: single-row requests, closed loop, enough clients to
    # keep full batches going.
    work = tempfile.mkdtemp(prefix="bg-harvest-")
    p, port, _ = start(work, args)
    try:
        cap = load(port, work, ["--concurrency", "128"], 5, warmup=1)["throughput"]
    finally:
        p.terminate()
        p.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    peak, trough = 0.70 * cap, 0.05 * cap
    print("machine: %d cores; synthetic (sleep) %d us + %d us/row, max_batch_size %d; "
          "online capacity %.0f req/s; day of %g s: peak %.0f/s, trough %.0f/s, budget %g ms"
          % (os.cpu_count(), args.base_us, args.per_row_us, args.max_batch, cap, args.period,
             peak, trough, args.budget_ms))

    a = one_run(args, peak, trough, 0)
    rows_s = args.max_batch / (a["full_batch_ms"] / 1e3) if a["full_batch_ms"] else 0
    idle_time_cap = (1 - a["busy"]) * rows_s
    idle_cap = max(rows_s - a["online_rows_s"], 0.0)
    backlog = int(max(idle_cap, rows_s * 0.5) * args.period * 1.5) + 1000
    b = one_run(args, peak, trough, backlog)

    def row(name, r):
        print("%-22s busy %.3f  goodput %7.1f/s  late or failed %.3f%%  p99 %6.1f ms  "
              "offline %7.1f lines/s" % (name, r["busy"], r["goodput"], 100 * r["late_share"],
                                         r["p99_ms"], r["offline_lines_s"]))
    row("(A) online only", a)
    row("(B) online + backlog", b)
    checks = [
        ("device busy fraction B", b["busy"], ">= 0.90", b["busy"] >= 0.90),
        ("online goodput B / A", b["goodput"] / a["goodput"] if a["goodput"] else 0, ">= 0.99",
         a["goodput"] and b["goodput"] / a["goodput"] >= 0.99),
        ("late share B - A (pp)", 100 * (b["late_share"] - a["late_share"]), "<= 0.1",
         100 * (b["late_share"] - a["late_share"]) <= 0.1),
        ("offline lines/s / idle rows", b["offline_lines_s"] / idle_cap if idle_cap else 0,
         ">= 0.85", idle_cap and b["offline_lines_s"] / idle_cap >= 0.85),
    ]
    print("idle capacity of A by rows: %.0f rows/s at full batches - %.0f online = %.0f rows/s; "
          "by time: (1 - %.3f) x %.0f = %.0f rows/s"
          % (rows_s, a["online_rows_s"], idle_cap, a["busy"], rows_s, idle_time_cap))
    for name, value, target, ok in checks:
        print("%-34s %8.3f  target %-8s %s" % (name, value, target, "met" if ok else "NOT MET"))


if __name__ == "__main__":
    main()
