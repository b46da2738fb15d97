#!/usr/bin/env python3
"""llm_chunks_real.py - does batchgate pass a real llama-server's streamed
chunks on as they come? Issue 24: "chunk timestamps through batchgate within
1 ms of direct", on real replicas (llmsim's --stamp measures the same on the
simulator: tests/e2e/test_llm_pool.py TestPoolChunkTiming).

llama-server puts no send time in its chunks, so a relay does: a small TCP
relay (a process of its own) sits right in front of the replica and notes,
on the machine's monotonic clock, when each event of the server's stream
(`data: ...`) reached it. Two paths, the same relay in both:

    direct:  client -> relay -> llama-server
    via:     client -> batchgate -> relay -> llama-server

The client notes when each event reached it, on the same clock; an event's
delay is client time - relay time. Requests go one at a time, in
alternating rounds (direct, via, direct, ...), each asking for
`stream_options.include_usage` so that both paths carry the same events
(batchgate asks for the usage event itself and would drop it otherwise).
What batchgate adds is the via delay less the direct one, compared by
percentile. The relay's own hop is in both and cancels.

    out=$(scripts/fetch-llm --cached)
    python3 loadgen/bench/llm_chunks_real.py [--rounds 4] [--requests 5] [--max-tokens 64] [--json F]

Standard library only; the replica and batchgate listen on loopback and are
stopped at exit; every socket has a timeout."""

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "llm"))
sys.path.insert(0, HERE)
BIN = os.environ.get("BATCHGATE_BIN", os.path.join(ROOT, "build", "batchgate"))
MARK = b"data: "


class EventClock:
    """Counts `data: ` marks in a byte stream cut anywhere, and notes the
    time of the read each one was completed in."""

    def __init__(self):
        self.tail = b""
        self.times = []

    def feed(self, data, now_ns):
        buf = self.tail + data
        n = buf.count(MARK)
        self.times.extend([now_ns] * n)
        # Keep what could be the start of a mark cut by this read.
        keep = len(MARK) - 1
        cut = buf.rfind(MARK)
        rest = buf[cut + len(MARK):] if cut >= 0 else buf
        self.tail = rest[-keep:] if len(rest) >= keep else rest


def relay_main(listen_port, up_port, log_path):
    """Runs until killed: every connection to listen_port is piped to
    up_port; each event from upstream is logged as a line "<ns>", the time
    of the read it came in (taken before forwarding it)."""
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", listen_port))
    ls.listen(64)
    out = open(log_path, "a", buffering=1)
    lock = threading.Lock()
    print("relay ready", flush=True)

    def pipe(src, dst, clock):
        try:
            while True:
                d = src.recv(65536)
                now = time.monotonic_ns()
                if not d:
                    break
                n0 = len(clock.times) if clock else 0
                if clock:
                    clock.feed(d, now)
                dst.sendall(d)
                if clock and len(clock.times) > n0:
                    with lock:
                        for t in clock.times[n0:]:
                            out.write("%d\n" % t)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    while True:
        c, _ = ls.accept()
        u = socket.create_connection(("127.0.0.1", up_port), timeout=None)
        for s in (c, u):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=pipe, args=(c, u, None), daemon=True).start()
        threading.Thread(target=pipe, args=(u, c, EventClock()), daemon=True).start()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stream_once(port, model, prompt, max_tokens):
    """One streamed chat call; the arrival time of each event, and the body."""
    body = json.dumps({"model": model, "max_tokens": max_tokens, "stream": True,
                       "stream_options": {"include_usage": True}, "temperature": 0,
                       "messages": [{"role": "user", "content": prompt}]}).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=120)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    clock, raw = EventClock(), b""
    while True:
        d = s.recv(65536)
        now = time.monotonic_ns()
        if not d:
            break
        clock.feed(d, now)
        raw += d
        if b"[DONE]" in raw[-4096:]:
            break
    s.close()
    if not raw.startswith(b"HTTP/1.1 200"):
        raise RuntimeError("call failed: %r" % raw[:300])
    return clock.times


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--requests", type=int, default=5, help="per round and path")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--json")
    ap.add_argument("--relay", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.relay:
        relay_main(int(a.relay[0]), int(a.relay[1]), a.relay[2])
        return

    import tempfile
    from benchlib import Batchgate, cpu_name
    from llama_probe import Replica

    p = subprocess.run([os.path.join(ROOT, "scripts", "fetch-llm"), "--cached"],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    lines = p.stdout.split()
    if p.returncode != 0 or len(lines) != 2:
        sys.exit("llm_chunks_real: run scripts/fetch-llm first (builds llama-server)")
    work = tempfile.mkdtemp(prefix="bg-chunks-")
    rep = Replica(lines[0], lines[1], slots=1, threads=1, ctx=4096,
                  log_path=os.path.join(work, "replica.log"))
    rport = free_port()
    rlog = os.path.join(work, "relay.log")
    relay = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--relay", str(rport),
                              str(rep.port), rlog], stdout=subprocess.PIPE, text=True)
    bg = None
    try:
        if relay.stdout.readline().strip() != "relay ready":
            sys.exit("llm_chunks_real: the relay did not start")
        models = os.path.join(work, "models", "smol")
        os.makedirs(models)
        with open(os.path.join(models, "config.json"), "w") as f:
            json.dump({"backend": "openai", "served_model_name": "smollm2",
                       "endpoints": ["http://127.0.0.1:%d" % rport],
                       "metrics_interval_ms": 0}, f)   # no scrape through the relay
        bg = Batchgate(BIN, work, {"listen": "127.0.0.1:0", "grpc_listen": "off",
                                   "io_threads": 1,
                                   "model_repository": os.path.dirname(models),
                                   "state_dir": os.path.join(work, "state")})
        prompts = ["Write a short story about a %s that learns to %s." % (x, y)
                   for x in ("cat", "robot", "river", "clock", "teacher")
                   for y in ("sing", "count", "wait", "fly")]
        delays = {"direct": [], "via": []}
        ttft_gap = {"direct": [], "via": []}
        k = 0
        for _ in range(a.rounds):
            for path, port, model in (("direct", rport, "smollm2"), ("via", bg.port, "smol")):
                for _ in range(a.requests):
                    before = sum(1 for _ in open(rlog))
                    got = stream_once(port, model, prompts[k % len(prompts)], a.max_tokens)
                    k += 1
                    time.sleep(0.05)   # the relay's last lines written
                    sent = [int(x) for x in open(rlog).read().split()[before:]]
                    if len(sent) != len(got):
                        sys.exit("llm_chunks_real: %s: %d events from the server, %d at the "
                                 "client" % (path, len(sent), len(got)))
                    d = [(c - s) / 1e6 for c, s in zip(got, sent)]
                    delays[path].extend(d)
                    ttft_gap[path].append(d[0])
        res = {"cpu": cpu_name(), "rounds": a.rounds, "requests_per_round": a.requests,
               "max_tokens": a.max_tokens, "load_average": os.getloadavg()[0]}
        for path in ("direct", "via"):
            v = delays[path]
            res[path] = {"events": len(v), "p50_ms": pct(v, 0.5), "p90_ms": pct(v, 0.9),
                         "p99_ms": pct(v, 0.99), "max_ms": max(v),
                         "first_event_p50_ms": pct(ttft_gap[path], 0.5)}
        res["added_ms"] = {q: res["via"][q] - res["direct"][q]
                           for q in ("p50_ms", "p90_ms", "p99_ms", "first_event_p50_ms")}
        print("chunk delay after the server sent it (relay -> client), %d requests a path, %s"
              % (a.rounds * a.requests, res["cpu"]))
        for path in ("direct", "via"):
            r = res[path]
            print("  %-6s %5d events: p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms; "
                  "first event p50 %.3f ms" % (path, r["events"], r["p50_ms"], r["p90_ms"],
                                               r["p99_ms"], r["max_ms"], r["first_event_p50_ms"]))
        ad = res["added_ms"]
        print("  added by batchgate: p50 %.3f ms, p90 %.3f ms, p99 %.3f ms; first event p50 %.3f ms"
              % (ad["p50_ms"], ad["p90_ms"], ad["p99_ms"], ad["first_event_p50_ms"]))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
    finally:
        if bg:
            bg.stop()
        relay.kill()
        relay.wait()
        rep.stop()


if __name__ == "__main__":
    main()
