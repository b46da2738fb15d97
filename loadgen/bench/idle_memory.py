#!/usr/bin/env python3
"""idle_memory.py - what an idle keep-alive connection costs batchgate after
a burst: N connections each send four pipelined POSTs of SIZE bytes to
/debug/echo, read the answers and stay open; the heap in use
(GET /debug/memory, glibc's mallinfo2) before and after, per connection.

    loadgen/bench/idle_memory.py [--connections 500] [--size 8192]

Two builds side by side: BATCHGATE_BIN=OLD ... then NEW. Needs glibc's
malloc (not a sanitizer build)."""

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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import http  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BIN = os.environ.get("BATCHGATE_BIN", os.path.join(ROOT, "build", "batchgate"))


def get_json(port, path):
    return json.loads(http(port, "GET", path)[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--connections", type=int, default=500)
    ap.add_argument("--size", type=int, default=8192)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bg-idle.", dir=os.environ.get("TMPDIR"))
    proc = None
    socks = []
    try:
        os.makedirs(os.path.join(work, "models"))
        cfg = os.path.join(work, "c.json")
        with open(cfg, "w") as f:
            json.dump({"listen": "127.0.0.1:0", "model_repository": os.path.join(work, "models"),
                       "io_threads": 1, "debug_endpoints": True}, f)
        proc = subprocess.Popen([BIN, "--config", cfg], stderr=subprocess.PIPE, text=True)
        port = None
        for line in proc.stderr:
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
            if "ready in" in line:
                break
        if port is None:
            raise SystemExit("idle_memory: batchgate did not start")
        before = get_json(port, "/debug/memory")["heap_in_use_bytes"]
        body = b"x" * a.size
        burst = (b"POST /debug/echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % a.size
                 + body) * 4
        for _ in range(a.connections):
            s = socket.create_connection(("127.0.0.1", port))
            socks.append(s)
            s.sendall(burst)
            got = b""
            while got.count(b"HTTP/1.1 200") < 4 or len(got) < 4 * a.size:
                chunk = s.recv(1 << 20)
                if not chunk:
                    raise SystemExit("idle_memory: connection closed early")
                got += chunk
        time.sleep(0.3)
        after = get_json(port, "/debug/memory")["heap_in_use_bytes"]
        print("%s: %d connections after 4 pipelined %d-byte requests each: heap in use "
              "%d -> %d KiB, %.1f KiB per idle connection"
              % (BIN, a.connections, a.size, before // 1024, after // 1024,
                 (after - before) / 1024 / a.connections))
    finally:
        for s in socks:
            s.close()
        if proc:
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
