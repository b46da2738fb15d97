"""test_shm.py - Triton's system shared memory extension (SPEC.md "Triton's
tools", docs/MODELS.md "System shared memory"):

- Triton's own client (shm_calls.py under the test venv): register, status,
  input and output in shared memory equal to the same request over JSON,
  each bad case refused with its reason, unregister;
- the server's /proc/PID/maps: a region is mapped while registered and
  gone after unregister, after a refused registration, at shutdown;
- unregister while a request uses the region (a slow model): the request
  is answered 200 with its output in the region, the mapping goes with it;
- callers off loopback get 403 unless shared_memory.allow_remote (needs a
  non-loopback address on this machine; skipped without one);
- perf_analyzer --shared-memory system, unmodified (skipped where
  scripts/fetch-perf-analyzer cannot fetch it).

Regions are made with Python's multiprocessing.shared_memory (shm_open under
the hood, as tritonclient does), so this file stays standard-library."""

import json
import os
import socket
import struct
import subprocess
import threading
import time
import unittest
from multiprocessing import shared_memory

from harness import RepoServerCase, Server, roundtrip, run_testdeps
from test_infer import DIGITS, synthetic, write_model

import shutil
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def maps_of(pid, prefix):
    """Lines of the process's memory map naming shared memory objects under prefix."""
    with open("/proc/%d/maps" % pid) as f:
        return [l for l in f if "/dev/shm/" + prefix in l]


def jpost(port, path, obj, timeout=10.0):
    body = obj if isinstance(obj, str) else json.dumps(obj)
    return roundtrip(port, "POST", path, [("Content-Type", "application/json")], body,
                     timeout=timeout)


class Region:
    """A POSIX shared memory object of `size` bytes; key is shm_open's name."""

    def __init__(self, name, size):
        self.mem = shared_memory.SharedMemory(name=name, create=True, size=size)
        self.key = "/" + name

    def close(self):
        self.mem.close()
        self.mem.unlink()


class ShmTest(RepoServerCase):
    @classmethod
    def populate(cls, repo):
        shutil.copytree(DIGITS, os.path.join(repo, "digits"))
        # 400 ms a batch: long enough to unregister under it.
        write_model(repo, "slow", synthetic("slow", base_us=400000, per_row_us=0))

    def setUp(self):
        super().setUp()
        self.prefix = "bg_e2e_%d_%s_" % (os.getpid(), self._testMethodName[-12:])
        self.regions = []
        jpost(self.srv.port, "/v2/systemsharedmemory/unregister", "")

    def tearDown(self):
        jpost(self.srv.port, "/v2/systemsharedmemory/unregister", "")
        for r in self.regions:
            r.close()
        super().tearDown()

    def region(self, name, size):
        r = Region(self.prefix + name, size)
        self.regions.append(r)
        return r

    def mapped(self):
        return maps_of(self.srv.pid, self.prefix)

    def test_tritonclient_round_trip_and_bad_cases(self):
        code, out = run_testdeps(["shm_calls.py", "--url", "127.0.0.1:%d" % self.srv.port,
                                  "--grpc", "127.0.0.1:%d" % self.srv.grpc_port,
                                  "--model", "digits", "--prefix", "/" + self.prefix], timeout=120)
        self.assertEqual(code, 0, "shm_calls.py exited %d; its output:\n%s\nserver log:\n%s"
                         % (code, out, self.srv.log()))
        self.assertNotIn("FAIL", out)
        self.assertEqual(out.count("ok: "), 7, out)
        self.assertEqual(self.mapped(), [], "a region is still mapped after unregister-all")

    def test_routes_and_maps(self):
        port = self.srv.port
        r = self.region("a", 8192)
        # Refused registrations map nothing.
        for body, status, words in (
                ({"key": r.key, "offset": 0, "byte_size": 8193}, 400, "past the end"),
                ({"key": r.key, "offset": 8192, "byte_size": 1}, 400, "past the end"),
                ({"key": r.key, "byte_size": 0}, 400, "byte_size: must be > 0"),
                ({"key": r.key}, 400, "byte_size: missing"),
                ({"key": r.key, "byte_size": -1}, 400, "byte_size: must be an integer >= 0"),
                ({"key": 5, "byte_size": 4}, 400, "key: must be a string"),
                ({"key": "/" + self.prefix + "none", "byte_size": 4}, 400,
                 "no shared memory object"),
                ("[1]", 400, "must be a JSON object"),
                ('{"key": "/x", "byte_size": 99999999999999999999}', 400,
                 "invalid JSON at column 47: too big integer"),
                ('{"key": "/x", "key": "/y", "byte_size": 4}', 400, "duplicate object key")):
            resp = jpost(port, "/v2/systemsharedmemory/region/a/register", body)
            self.assertEqual(resp.status, status, (body, resp))
            self.assertIn(words, resp.json()["error"], body)
        self.assertEqual(self.mapped(), [])
        resp = jpost(port, "/v2/systemsharedmemory/region/a/register",
                     {"key": r.key, "offset": 4100, "byte_size": 4092})
        self.assertEqual(resp.status, 200, resp)
        self.assertEqual(len(self.mapped()), 1)
        resp = jpost(port, "/v2/systemsharedmemory/region/a/register",
                     {"key": r.key, "byte_size": 4})
        self.assertEqual(resp.status, 400)
        self.assertIn("already registered", resp.json()["error"])
        # %-escaped names, as tritonclient quotes them.
        resp = jpost(port, "/v2/systemsharedmemory/region/b%20c/register",
                     {"key": r.key, "byte_size": 4})
        self.assertEqual(resp.status, 200, resp)
        st = roundtrip(port, "GET", "/v2/systemsharedmemory/status").json()
        self.assertEqual(st, [{"name": "a", "key": r.key, "offset": 4100, "byte_size": 4092},
                              {"name": "b c", "key": r.key, "offset": 0, "byte_size": 4}])
        self.assertEqual(len(self.mapped()), 2)
        resp = roundtrip(port, "GET", "/v2/systemsharedmemory/region/zz/status")
        self.assertEqual(resp.status, 404)
        # A name that is not UTF-8 is refused: registered, it made every
        # status answer JSON that no client could read.
        resp = jpost(port, "/v2/systemsharedmemory/region/%FF%FE/register",
                     {"key": r.key, "byte_size": 4})
        self.assertEqual(resp.status, 400, resp)
        self.assertIn("UTF-8", resp.json()["error"])
        self.assertEqual(len(roundtrip(port, "GET", "/v2/systemsharedmemory/status").json()), 2)
        # tritonclient quotes a region named ".." as "..": a dot segment,
        # refused (cleaned away it was /unregister, every region gone).
        resp = jpost(port, "/v2/systemsharedmemory/region/../unregister", "")
        self.assertEqual(resp.status, 400, resp)
        self.assertEqual(len(roundtrip(port, "GET", "/v2/systemsharedmemory/status").json()), 2)
        self.assertEqual(jpost(port, "/v2/systemsharedmemory/region/a/unregister", "").status, 200)
        self.assertEqual(len(self.mapped()), 1, "unregister did not unmap")
        self.assertEqual(jpost(port, "/v2/systemsharedmemory/region/a/unregister", "").status, 200)
        self.assertEqual(jpost(port, "/v2/systemsharedmemory/unregister", "").status, 200)
        self.assertEqual(self.mapped(), [])
        # CUDA shared memory: none, ever; clients that clean it up succeed.
        self.assertEqual(roundtrip(port, "GET", "/v2/cudasharedmemory/status").json(), [])
        self.assertEqual(jpost(port, "/v2/cudasharedmemory/unregister", "").status, 200)
        self.assertEqual(jpost(port, "/v2/cudasharedmemory/region/x/register", "{}").status, 400)

    def infer_shm(self, model, rows, width, in_region, out_region, out_size, timeout=10.0):
        body = {"inputs": [{"name": "x" if model == "slow" else "input", "datatype": "FP32",
                            "shape": [rows, width],
                            "parameters": {"shared_memory_region": in_region,
                                           "shared_memory_byte_size": rows * width * 4}}],
                "outputs": [{"name": "y" if model == "slow" else "output",
                             "parameters": {"shared_memory_region": out_region,
                                            "shared_memory_byte_size": out_size}}]}
        return jpost(self.srv.port, "/v2/models/%s/infer" % model, body, timeout=timeout)

    def test_missing_and_mixed_parameters(self):
        r = self.region("m", 4096)
        self.assertEqual(jpost(self.srv.port, "/v2/systemsharedmemory/region/m/register",
                               {"key": r.key, "byte_size": 4096}).status, 200)
        base = {"name": "input", "datatype": "FP32", "shape": [1, 64]}
        for params, extra, words in (
                ({"shared_memory_region": "m"}, {}, "shared_memory_byte_size: missing"),
                ({"shared_memory_byte_size": 256}, {}, "shared_memory_region: missing"),
                ({"shared_memory_region": "m", "shared_memory_byte_size": 256},
                 {"data": [0] * 64}, "inputs[0].data: given with parameters.shared_memory_region"),
                ({"shared_memory_region": 3, "shared_memory_byte_size": 256}, {},
                 "shared_memory_region: must be the name")):
            body = {"inputs": [dict(base, parameters=params, **extra)]}
            resp = jpost(self.srv.port, "/v2/models/digits/infer", body)
            self.assertEqual(resp.status, 400, (params, resp))
            self.assertIn(words, resp.json()["error"])
        self.assertEqual(len(self.mapped()), 1)
        # A region's numbers are finite, as JSON's must be.
        r.mem.buf[:256] = struct.pack("<64f", *([0.0] * 63 + [float("inf")]))
        out = self.region("o", 64)
        self.assertEqual(jpost(self.srv.port, "/v2/systemsharedmemory/region/o/register",
                               {"key": out.key, "byte_size": 64}).status, 200)
        resp = self.infer_shm("digits", 1, 64, "m", "o", 40)
        self.assertEqual(resp.status, 400, resp)
        self.assertIn("inputs[0].shared memory: element 63 is infinite", resp.json()["error"])

    def test_unregister_while_in_use(self):
        rin, rout = self.region("in", 4 * 4), self.region("out", 3 * 4)
        rin.mem.buf[:16] = struct.pack("<4f", 1, 2, 3, 4)
        for name, r, size in (("in", rin, 16), ("out", rout, 12)):
            self.assertEqual(jpost(self.srv.port, "/v2/systemsharedmemory/region/%s/register" % name,
                                   {"key": r.key, "byte_size": size}).status, 200)
        result = {}
        t = threading.Thread(target=lambda: result.setdefault(
            "resp", self.infer_shm("slow", 1, 4, "in", "out", 12)))
        t.start()
        time.sleep(0.15)   # the request holds both regions, its batch is running
        self.assertEqual(jpost(self.srv.port, "/v2/systemsharedmemory/unregister", "").status, 200)
        self.assertEqual(roundtrip(self.srv.port, "GET", "/v2/systemsharedmemory/status").json(), [])
        held = len(self.mapped())
        t.join(10)
        resp = result.get("resp")
        self.assertIsNotNone(resp, "no answer")
        self.assertEqual(resp.status, 200, resp)
        self.assertEqual(resp.json()["outputs"][0]["shape"], [1, 3])
        self.assertNotIn("data", resp.json()["outputs"][0])
        self.assertEqual(held, 2, "regions in use were unmapped under the request")
        # Released as the call is freed, just after its answer was queued:
        # the client can read the answer first (CI's load once showed it).
        deadline = time.monotonic() + 5
        while self.mapped() and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(self.mapped(), [], "the last user's release did not unmap")
        # A new request naming them: refused, cleanly.
        resp = self.infer_shm("slow", 1, 4, "in", "out", 12)
        self.assertEqual(resp.status, 400)

    def test_a_truncated_object_fails_its_request_not_the_server(self):
        # The client owns the object and may shrink it after registering a
        # region of it: the server read (and wrote) the vanished pages and
        # died of SIGBUS, every other request with it.
        port = self.srv.port
        rin, rout = self.region("tin", 8192), self.region("tout", 8192)
        for name, r in (("tin", rin), ("tout", rout)):
            self.assertEqual(jpost(port, "/v2/systemsharedmemory/region/%s/register" % name,
                                   {"key": r.key, "offset": 4096, "byte_size": 4096}).status,
                             200)
        os.truncate("/dev/shm" + rin.key, 0)
        resp = self.infer_shm("digits", 1, 64, "tin", "tout", 40)
        self.assertEqual(resp.status, 400, resp)
        self.assertIn('inputs[0].parameters.shared_memory_region: "tin" no longer holds '
                      "bytes [0, 256): its shared memory object was truncated",
                      resp.json()["error"])
        # The output, truncated while its batch runs (400 ms).
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4],
                            "data": [1, 2, 3, 4]}],
                "outputs": [{"name": "y", "parameters": {"shared_memory_region": "tout",
                                                         "shared_memory_byte_size": 12}}]}
        result = {}
        t = threading.Thread(target=lambda: result.setdefault(
            "resp", jpost(port, "/v2/models/slow/infer", body)))
        t.start()
        time.sleep(0.15)
        os.truncate("/dev/shm" + rout.key, 0)
        t.join(10)
        resp = result.get("resp")
        self.assertIsNotNone(resp, "no answer:\n" + self.srv.log())
        self.assertEqual(resp.status, 400, resp)
        self.assertIn('outputs[0].parameters.shared_memory_region: "tout" no longer holds',
                      resp.json()["error"])
        # The server lives on, and serves.
        self.assertEqual(roundtrip(port, "GET", "/v2/health/ready").status, 200)
        ok = jpost(port, "/v2/models/slow/infer",
                   {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4],
                                "data": [1, 2, 3, 4]}]})
        self.assertEqual(ok.status, 200, ok)

    def test_perf_analyzer_system_shared_memory(self):
        try:
            p = subprocess.run([os.path.join(ROOT, "scripts", "fetch-perf-analyzer")],
                               capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            raise unittest.SkipTest("scripts/fetch-perf-analyzer took over 120 s")
        if p.returncode != 0:
            raise unittest.SkipTest("no perf_analyzer: %s" % p.stderr.strip()[-300:])
        pa = p.stdout.strip().splitlines()[-1]
        # Over HTTP, and over gRPC: perf_analyzer's default protocol.
        for proto, port in (("http", self.srv.port), ("grpc", self.srv.grpc_port)):
            run = subprocess.run([pa, "-m", "digits", "-u", "127.0.0.1:%d" % port, "-i", proto,
                                  "--shared-memory", "system", "--request-count", "200"],
                                 capture_output=True, text=True, timeout=60)
            out = run.stdout + run.stderr
            self.assertEqual(run.returncode, 0, "-i %s: %s" % (proto, out))
            self.assertIn("Throughput:", out)
            self.assertNotIn("Unable to", out)
        self.assertEqual(self.mapped(), [])
        self.assertEqual(roundtrip(self.srv.port, "GET", "/v2/systemsharedmemory/status").json(), [])


def non_loopback_address():
    """An IPv4 address of this machine other than 127/8, or None."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))   # no packet is sent: this only picks a source address
        a = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if a.startswith("127.") else a


class RemoteRefusedTest(unittest.TestCase):
    """A caller off loopback: the server listens on a non-loopback address
    of this machine and is called there."""

    def run_server(self, allow_remote):
        addr = non_loopback_address()
        if not addr:
            raise unittest.SkipTest("this machine has no non-loopback IPv4 address")
        repo = tempfile.mkdtemp(prefix="batchgate-repo-")
        self.addCleanup(shutil.rmtree, repo, True)
        shutil.copytree(DIGITS, os.path.join(repo, "digits"))
        cfg = {"listen": "%s:0" % addr, "model_repository": repo}
        if allow_remote is not None:
            cfg["shared_memory"] = {"allow_remote": allow_remote}
        srv = Server(cfg)
        self.addCleanup(srv.kill)
        srv.wait_log(r"ready in", timeout=60)
        return srv, addr

    def call(self, addr, port, method, path, body=None):
        s = socket.create_connection((addr, port), timeout=5)
        try:
            data = body.encode() if body else b""
            s.sendall(("%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                       % (method, path, len(data))).encode() + data)
            raw = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                raw += chunk
        finally:
            s.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        return int(head.split()[1]), body.decode()

    def test_remote_refused_by_default(self):
        srv, addr = self.run_server(None)
        name = "bg_e2e_remote_%d" % os.getpid()
        r = Region(name, 1024)
        self.addCleanup(r.close)
        for method, path, body in (
                ("GET", "/v2/systemsharedmemory/status", None),
                ("POST", "/v2/systemsharedmemory/region/a/register",
                 json.dumps({"key": r.key, "byte_size": 256})),
                ("POST", "/v2/systemsharedmemory/unregister", None),
                ("POST", "/v2/models/digits/infer", json.dumps(
                    {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64],
                                 "parameters": {"shared_memory_region": "a",
                                                "shared_memory_byte_size": 256}}]}))):
            status, text = self.call(addr, srv.port, method, path, body)
            self.assertEqual(status, 403, (path, text))
            self.assertIn("loopback", text)
            self.assertIn("shared_memory.allow_remote", text)
        self.assertEqual(maps_of(srv.pid, name), [])
        # Inference without shared memory is anyone's, as before.
        status, text = self.call(addr, srv.port, "POST", "/v2/models/digits/infer", json.dumps(
            {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64], "data": [0] * 64}]}))
        self.assertEqual(status, 200, text)
        srv.stop_checked()

    def test_allow_remote(self):
        srv, addr = self.run_server(True)
        name = "bg_e2e_remote_ok_%d" % os.getpid()
        r = Region(name, 1024)
        self.addCleanup(r.close)
        status, text = self.call(addr, srv.port, "POST", "/v2/systemsharedmemory/region/a/register",
                                 json.dumps({"key": r.key, "byte_size": 256}))
        self.assertEqual(status, 200, text)
        self.assertEqual(len(maps_of(srv.pid, name)), 1)
        srv.stop_checked()   # shutdown with a region still registered: exits 0, unmaps it


if __name__ == "__main__":
    unittest.main()
