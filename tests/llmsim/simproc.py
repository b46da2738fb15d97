"""simproc.py - an llmsim.py process for the tests that need simulated LLM
servers (tests/llmsim/test_llmsim.py, tests/e2e/test_llm_pool.py,
tests/e2e/test_loadgen_openai.py, ...): started on free loopback ports,
ready when it says so, killed at exit. Standard library only.

    sim = Sim(3, ["--speed", "20"])
    sim.ports[0], sim.url(0), sim.fault(0, "500"), sim.metrics(0)["vllm:num_requests_running"]
    sim.stop()
"""

import atexit
import http.client
import json
import os
import re
import subprocess
import sys
import threading

SIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llmsim.py")
_procs = []


@atexit.register
def _kill_all():
    for p in _procs:
        if p.poll() is None:
            p.kill()


class Sim:
    """llmsim with `endpoints` endpoints and the extra arguments `args`;
    self.ports[i] is endpoint i's port, self.lines what it printed."""

    def __init__(self, endpoints, args=(), timeout=15.0):
        argv = [sys.executable, SIM, "--endpoints", str(endpoints)] + [str(a) for a in args]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        _procs.append(self.proc)
        self.lines, self._ports = [], {}
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self.ready.wait(timeout) or len(self._ports) != endpoints:
            self.stop()
            raise AssertionError("llmsim did not print 'llmsim: ready' within %.0f s; output:\n%s"
                                 % (timeout, "\n".join(self.lines)))
        self.ports = [self._ports[i] for i in range(endpoints)]

    def _read(self):
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.lines.append(line)
            m = re.match(r"llmsim: endpoint (\d+) on 127\.0\.0\.1:(\d+)$", line)
            if m:
                self._ports[int(m.group(1))] = int(m.group(2))
            elif line == "llmsim: ready":
                self.ready.set()
        self.ready.set()

    def url(self, i):
        return "http://127.0.0.1:%d" % self.ports[i]

    def fault(self, i, kind, **params):
        """Sets endpoint i's fault at run time ("none" clears); params go
        with it (slow_metrics: ms, count)."""
        self._post(i, "/__fault", dict(params, kind=kind))

    def restart(self, i):
        """Endpoint i as a freshly restarted server (empty cache, counters
        from zero); it must be idle."""
        self._post(i, "/__restart", {})

    def _post(self, i, path, obj):
        c = http.client.HTTPConnection("127.0.0.1", self.ports[i], timeout=5)
        try:
            c.request("POST", path, json.dumps(obj))
            r = c.getresponse()
            r.read()
        finally:
            c.close()
        if r.status != 200:
            raise AssertionError("llmsim %s %r: HTTP %d" % (path, obj, r.status))

    def metrics(self, i):
        """Endpoint i's metrics, each name summed over its label sets."""
        c = http.client.HTTPConnection("127.0.0.1", self.ports[i], timeout=5)
        try:
            c.request("GET", "/metrics")
            text = c.getresponse().read().decode()
        finally:
            c.close()
        out = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, value = line.rsplit(" ", 1)
            name = name.split("{")[0]
            out[name] = out.get(name, 0.0) + float(value)
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
