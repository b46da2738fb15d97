#!/usr/bin/env python3
"""slowloris.py - well-behaved clients' latency while an attacker holds every
connection slot (slowloris) and floods connects.

batchgate runs with limits.max_connections 256 and header_timeout_ms 3000, a
synthetic model (1 ms per batch). Four well-behaved clients keep one
keep-alive connection each and send 100 requests/s each for the whole run.
From 5 s to 20 s an attacker opens as many connections as it can, sends a
partial request head on each and then one more header byte a second (so each
is cut off by header_timeout_ms and re-opened), while another thread
connects and closes as fast as it can. Every 0.5 s a probe opens a NEW
connection and times GET /v2/health/live on it.

Prints the well-behaved clients' p50/p99 before, during and after the
attack, failures, and the probes' times (new connections must wait for a
slot: the listener pauses at max_connections and slowloris connections are
cut at header_timeout_ms).

    loadgen/bench/slowloris.py [--attack-s 15]
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BIN = os.environ.get("BATCHGATE_BIN", os.path.join(ROOT, "build", "batchgate"))
BODY = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4],
                               "data": [1, 2, 3, 4]}]}).encode()
REQ = (b"POST /v2/models/m/infer HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n"
       b"Content-Length: %d\r\n\r\n" % len(BODY)) + BODY


def read_answer(s, buf):
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    n = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            n = int(line.split(b":")[1])
    while len(rest) < n:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        rest += chunk
    return int(head.split(b" ")[1]), rest[n:]


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attack-s", type=float, default=15)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="batchgate-slowloris-")
    os.makedirs(os.path.join(tmp, "models", "m"))
    with open(os.path.join(tmp, "models", "m", "config.json"), "w") as f:
        json.dump({"backend": "synthetic",
                   "inputs": [{"name": "x", "datatype": "FP32", "shape": [4]}],
                   "outputs": [{"name": "y", "datatype": "FP32", "shape": [3]}],
                   "batching": {"max_batch_size": 16, "max_queue_delay_us": 500},
                   "synthetic": {"base_us": 1000, "per_row_us": 10}}, f)
    with open(os.path.join(tmp, "cfg.json"), "w") as f:
        json.dump({"listen": "127.0.0.1:0", "model_repository": os.path.join(tmp, "models"),
                   "io_threads": 2,
                   "limits": {"max_connections": 256, "header_timeout_ms": 3000}}, f)
    log = open(os.path.join(tmp, "bg.log"), "w+")
    srv = subprocess.Popen([BIN, "--config", os.path.join(tmp, "cfg.json")], stderr=log)
    port = None
    for _ in range(100):
        time.sleep(0.1)
        log.seek(0)
        text = log.read()
        if "ready in" in text:
            port = int(text.split("listening on 127.0.0.1:")[1].split()[0])
            break
    if not port:
        srv.kill()
        sys.exit("slowloris: batchgate did not start:\n" + text)

    t0 = time.monotonic()
    attack_from, attack_to = 5.0, 5.0 + a.attack_s
    end = attack_to + 5.0
    stop = threading.Event()
    lat, fails, probes, held = [], [], [], [0]
    lock = threading.Lock()

    def good():
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        nxt = time.monotonic()
        while not stop.is_set():
            t = time.monotonic()
            try:
                s.sendall(REQ)
                st, buf = read_answer(s, buf)
                with lock:
                    lat.append((t - t0, time.monotonic() - t, st))
            except OSError as e:
                with lock:
                    fails.append((t - t0, repr(e)))
                s = socket.create_connection(("127.0.0.1", port))
                buf = b""
            nxt += 0.01
            time.sleep(max(0.0, nxt - time.monotonic()))
        s.close()

    def slowloris():
        conns = []
        while not stop.is_set() and time.monotonic() - t0 < attack_to:
            # Top up to 1000 attempts' worth of half-open requests.
            while len(conns) < 1000 and time.monotonic() - t0 < attack_to:
                try:
                    c = socket.create_connection(("127.0.0.1", port), timeout=0.05)
                    c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-a: ")
                    c.setblocking(False)
                    conns.append(c)
                except OSError:
                    break
            with lock:
                held[0] = max(held[0], len(conns))
            alive = []
            for c in conns:
                try:
                    c.send(b"a")
                    alive.append(c)
                except OSError:
                    c.close()
            conns = alive
            time.sleep(1.0)
        for c in conns:
            c.close()

    def flood():
        while not stop.is_set() and time.monotonic() - t0 < attack_to:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.05).close()
            except OSError:
                time.sleep(0.001)

    def probe():
        while not stop.is_set():
            t = time.monotonic()
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
                s.settimeout(10)
                s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: p\r\n\r\n")
                st, _ = read_answer(s, b"")
                probes.append((t - t0, time.monotonic() - t, st))
                s.close()
            except OSError as e:
                probes.append((t - t0, time.monotonic() - t, repr(e)))
            time.sleep(0.5)

    workers = [threading.Thread(target=good, daemon=True) for _ in range(4)]
    workers.append(threading.Thread(target=probe, daemon=True))
    for w in workers:
        w.start()
    time.sleep(attack_from)
    attackers = [threading.Thread(target=slowloris, daemon=True),
                 threading.Thread(target=flood, daemon=True)]
    for w in attackers:
        w.start()
    time.sleep(end - attack_from)
    stop.set()
    for w in workers + attackers:
        w.join(15)
    srv.terminate()
    code = srv.wait(30)

    def phase(lo, hi):
        xs = [l for t, l, st in lat if lo <= t < hi]
        bad = sum(1 for t, l, st in lat if lo <= t < hi and st != 200)
        return xs, bad

    print("machine: %d cores; max_connections 256, header_timeout_ms 3000; 4 keep-alive clients "
          "x 100 req/s; attack %.0f-%.0f s (slowloris holding up to %d connections + connect flood)"
          % (os.cpu_count(), attack_from, attack_to, held[0]))
    for name, lo, hi in (("before", 1.0, attack_from), ("during", attack_from, attack_to),
                         ("after", attack_to, end)):
        xs, bad = phase(lo, hi)
        print("%-7s %5d requests  p50 %6.2f ms  p99 %6.2f ms  max %7.2f ms  non-200 %d"
              % (name, len(xs), 1e3 * pct(xs, 0.5), 1e3 * pct(xs, 0.99), 1e3 * max(xs or [0]), bad))
    print("well-behaved failures: %d %s" % (len(fails), fails[:3]))
    during = [p for p in probes if attack_from <= p[0] < attack_to]
    ok = [p[1] for p in during if p[2] == 200]
    print("new-connection probes during the attack: %d, answered %d, time to answer p50 %.0f ms, "
          "max %.0f ms" % (len(during), len(ok), 1e3 * pct(ok, 0.5), 1e3 * max(ok or [0])))
    print("batchgate exit code %d" % code)


if __name__ == "__main__":
    main()
