#!/usr/bin/env python3
"""llm_batch_turns.py - two tenants' Batch API batches on one pool of
simulated vLLM-like servers (tests/llmsim/llmsim.py): how long team-b's
small batch takes alone, and how long it takes when team-a's large batch
was created first and still runs (docs/LLM.md "Batches side by side").

    loadgen/bench/llm_batch_turns.py                 # 2 endpoints, A 600 lines, B 60
    A_LINES=2000 B_LINES=100 SPEED=2 loadgen/bench/llm_batch_turns.py

Phases, one batchgate, one state database, one run:
  1. B alone: B's lines from creation to `completed`.
  2. A created; after WAIT_S seconds B created; B's time to `completed`
     again, and how many of A's lines were done at B's creation and at its
     end; then A's own end.
Reported: B shared / B alone (two batches taking equal turns: about 2,
more when A's lines are longer), and what B would have waited with one
batch at a time, oldest first (batchgate before this change): A's time
from B's creation to A's end, plus B alone, both measured in phase 2.
Standard library only; prints one JSON object.

Knobs (environment): ENDPOINTS (2), SPEED (llmsim --speed, 2), A_LINES
(600), B_LINES (60), OUT (max_tokens of a line, 16), MAX_RUNNING (the
pool's offline.max_running and max_inflight_per_endpoint, 4), WAIT_S (2).
"""

import http.client
import json
import os
import shutil
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "llmsim"))
from simproc import Sim  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import Batchgate  # noqa: E402

BIN = os.environ.get("BATCHGATE_BIN", os.path.join(ROOT, "build", "batchgate"))
ENDPOINTS = int(os.environ.get("ENDPOINTS", "2"))
SPEED = os.environ.get("SPEED", "2")
A_LINES = int(os.environ.get("A_LINES", "600"))
B_LINES = int(os.environ.get("B_LINES", "60"))
OUT = int(os.environ.get("OUT", "16"))
MAX_RUNNING = int(os.environ.get("MAX_RUNNING", "4"))
WAIT_S = float(os.environ.get("WAIT_S", "2"))


def call(port, method, path, body=None, headers=None, ctype="application/json"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    if isinstance(body, dict):
        body = json.dumps(body)
    c.request(method, path, body, dict({"Content-Type": ctype}, **(headers or {})))
    r = c.getresponse()
    raw = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError("%s %s: %d %s" % (method, path, r.status, raw[:300]))
    return json.loads(raw)


def make_batch(port, key, n, tag):
    lines = "".join(json.dumps({"custom_id": "%s-%d" % (tag, i), "method": "POST",
                                "url": "/v1/chat/completions",
                                "body": {"model": "pool", "max_tokens": OUT, "messages": [
                                    {"role": "user", "content": "%s line %d" % (tag, i)}]}}) + "\n"
                    for i in range(n)).encode()
    b = uuid.uuid4().hex
    body = (b"--%s\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
            b"--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n"
            b"Content-Type: application/octet-stream\r\n\r\n" % (b.encode(), b.encode())
            + lines + b"\r\n--%s--\r\n" % b.encode())
    auth = {"Authorization": "Bearer " + key}
    f = call(port, "POST", "/v1/files", body, auth, "multipart/form-data; boundary=" + b)
    return call(port, "POST", "/v1/batches", {"input_file_id": f["id"], "completion_window": "24h",
                                              "endpoint": "/v1/chat/completions"}, auth)["id"]


def wait_done(port, key, bid, timeout=1800):
    deadline = time.monotonic() + timeout
    while True:
        b = call(port, "GET", "/v1/batches/" + bid, headers={"Authorization": "Bearer " + key})
        if b["status"] in ("completed", "failed", "expired", "cancelled"):
            return b
        if time.monotonic() > deadline:
            raise RuntimeError("batch %s: still %s after %d s" % (bid, b["status"], timeout))
        time.sleep(0.05)


def done_lines(port, key, bid):
    b = call(port, "GET", "/v1/batches/" + bid, headers={"Authorization": "Bearer " + key})
    return b["request_counts"]["completed"] + b["request_counts"]["failed"]


def main():
    import hashlib
    work = tempfile.mkdtemp(prefix="bg-batch-turns-")
    sim = Sim(ENDPOINTS, ["--speed", SPEED])
    srv = None
    try:
        repo = os.path.join(work, "models", "pool")
        os.makedirs(repo)
        with open(os.path.join(repo, "config.json"), "w") as f:
            json.dump({"name": "pool", "backend": "openai", "served_model_name": "llmsim",
                       "endpoints": [sim.url(i) for i in range(ENDPOINTS)],
                       "metrics_interval_ms": 50,
                       "offline": {"max_running": MAX_RUNNING,
                                   "max_inflight_per_endpoint": MAX_RUNNING}}, f)
        digest = lambda k: "sha256:" + hashlib.sha256(k.encode()).hexdigest()  # noqa: E731
        cfg = {"listen": "127.0.0.1:0", "grpc_listen": "off",
               "model_repository": os.path.join(work, "models"),
               "state_dir": os.path.join(work, "state"),
               "tenants": [{"name": "team-a", "keys": [digest("k-a")]},
                           {"name": "team-b", "keys": [digest("k-b")]}]}
        srv = Batchgate(BIN, work, cfg, timeout=10)
        port = srv.port

        t0 = time.monotonic()
        wait_done(port, "k-b", make_batch(port, "k-b", B_LINES, "b-alone"))
        b_alone = time.monotonic() - t0

        t_a = time.monotonic()
        a = make_batch(port, "k-a", A_LINES, "a")
        time.sleep(WAIT_S)
        t_b = time.monotonic()
        a_at_b = done_lines(port, "k-a", a)
        b = make_batch(port, "k-b", B_LINES, "b")
        wait_done(port, "k-b", b)
        b_shared = time.monotonic() - t_b
        a_at_b_end = done_lines(port, "k-a", a)
        wait_done(port, "k-a", a)
        a_end = time.monotonic()
        fifo = (a_end - t_b) + b_alone
        print(json.dumps({
            "endpoints": ENDPOINTS, "speed": SPEED, "a_lines": A_LINES, "b_lines": B_LINES,
            "out_tokens": OUT, "max_running": MAX_RUNNING,
            "b_alone_s": round(b_alone, 2), "b_beside_a_s": round(b_shared, 2),
            "b_beside_a_over_alone": round(b_shared / b_alone, 2),
            "a_lines_done_at_b_created": a_at_b, "a_lines_done_at_b_completed": a_at_b_end,
            "a_total_s": round(a_end - t_a, 2),
            "b_one_at_a_time_s": round(fifo, 2),
            "b_one_at_a_time_over_alone": round(fifo / b_alone, 2),
            "b_beside_a_over_one_at_a_time": round(b_shared / fifo, 3)}, indent=1))
    finally:
        if srv:
            srv.stop()
        sim.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
