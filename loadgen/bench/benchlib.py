"""benchlib.py - what the Python benchmark scripts (harvest.py, tenants.py)
share: one HTTP/1.1 call to a server on loopback, a batchgate process
started from a config and stopped, and the machine's CPU name for the
report's first line. Standard library only."""

import json
import os
import re
import socket
import subprocess
import sys
import time


def http(port, method, path, body=None, key=None, timeout=30, headers=()):
    """One call on a fresh connection to 127.0.0.1:port: (status, body bytes).
    key: sent as `Authorization: Bearer KEY`; a body is sent as JSON;
    headers: more (name, value) pairs."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    head = "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" % (method, path)
    if key:
        head += "Authorization: Bearer %s\r\n" % key
    for name, value in headers:
        head += "%s: %s\r\n" % (name, value)
    if body is not None:
        head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    s.sendall(head.encode() + b"\r\n" + (body or b""))
    data = b""
    while True:
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    s.close()
    return int(data.split(b" ", 2)[1]), data.split(b"\r\n\r\n", 1)[1]


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        return "?"


class Batchgate:
    """A batchgate process for a benchmark: `config` (a dict) written to
    WORK/config.json, its log in WORK/batchgate.log; ready when the log says
    "ready in" (every model loaded or refused), .port from its "listening
    on" line. SystemExit with the log when it does not start in time."""

    def __init__(self, binary, work, config, timeout=60, env=None):
        path = os.path.join(work, "config.json")
        with open(path, "w") as f:
            json.dump(config, f)
        self.log_path = os.path.join(work, "batchgate.log")
        log = open(self.log_path, "w+")
        self.proc = subprocess.Popen([binary, "--config", path], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=log, env=env)
        self.port = None
        text = ""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            log.seek(0)
            text = log.read()
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", text)
            if m and "ready in" in text:
                self.port = int(m.group(1))
                return
            time.sleep(0.05)
        self.stop()
        sys.exit("batchgate did not start within %d s:\n%s" % (timeout, text))

    def stop(self):
        stop_process(self.proc)


def stop_process(p, timeout=30):
    """SIGTERM, then SIGKILL after `timeout` seconds; waits for the end."""
    p.terminate()
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
