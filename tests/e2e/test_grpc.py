"""test_grpc.py - KServe v2 over gRPC (docs/GRPC.md) with the real clients:
tritonclient.grpc and the protocol's generated stub, run by grpc_calls.py
under the test environment's interpreter (scripts/fetch-testdeps).

- GrpcSurfaceTest: every served call (health, metadata, config, infer with
  raw and typed contents and compressed, statistics, the repository, log
  settings) checked against the same server's HTTP answers, 48 concurrent
  calls batched, and the error mapping (NOT_FOUND, INVALID_ARGUMENT,
  UNAVAILABLE, DEADLINE_EXCEEDED from a metadata budget and from
  grpc-timeout, RESOURCE_EXHAUSTED with retry-after, UNIMPLEMENTED), and
  ModelStreamInfer (the stub and tritonclient's stream API).
- GrpcAuthTest: API keys in metadata; UNAUTHENTICATED, PERMISSION_DENIED.
- GrpcLimitsTest: a message over limits.max_body_bytes.
- GrpcDrainTest: SIGTERM with a call in flight: answered, then a clean exit.
- GrpcConfigTest: grpc_listen "off" opens no port; a bad grpc_listen is a
  config error naming the field; the port serves HTTP/2 only.
Floods on the HTTP/2 port are test_h2_flood.py's."""

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

from harness import BIN, RepoServerCase, Server, free_port, roundtrip, run_testdeps
from test_infer import synthetic, write_model
from test_tenants import digest

HERE = os.path.dirname(os.path.abspath(__file__))
DIGITS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "models", "digits")


def copy_digits(repo):
    shutil.copytree(DIGITS, os.path.join(repo, "digits"))


class GrpcCase(RepoServerCase):
    def run_calls(self, case, *extra, timeout=180):
        code, out = run_testdeps(
            ["grpc_calls.py", "--grpc", "127.0.0.1:%d" % self.srv.grpc_port,
             "--http", "127.0.0.1:%d" % self.srv.port, "--case", case] + list(extra),
            timeout=timeout)
        self.assertEqual(code, 0, "grpc_calls.py --case %s exited %d; its output:\n%s\nserver "
                         "log:\n%s" % (case, code, out, self.srv.log()[-6000:]))
        self.assertNotIn("FAIL", out)
        return out


class GrpcSurfaceTest(GrpcCase):
    # Answers of 1 KiB or more compressed: grpcio and tritonclient read them.
    config = {"log_level": "info", "compression": {"grpc": True}}

    @classmethod
    def populate(cls, repo):
        copy_digits(repo)
        lz = synthetic("lz", base_us=1000, per_row_us=0)
        lz["lifecycle"] = {"load": "lazy"}
        write_model(repo, "lz", lz)
        write_model(repo, "slow", synthetic("slow", base_us=300000, per_row_us=0,
                                            batching={"max_queue_size": 1,
                                                      "max_batch_size": 1}))
        write_model(repo, "budget", synthetic("budget", base_us=1000, per_row_us=0,
                                              batching={"latency_budget_ms": 300}))
        with open(os.path.join(DIGITS, "config.json")) as f:
            broken = json.load(f)
        broken["name"] = "broken"
        os.makedirs(os.path.join(repo, "broken"))
        with open(os.path.join(repo, "broken", "config.json"), "w") as f:
            json.dump(broken, f)   # no weights file: the load fails

    def test_every_call_against_http(self):
        override = synthetic("lz", base_us=1000, per_row_us=0, batching={"max_batch_size": 3})
        before = self.grpc_metrics()
        out = self.run_calls("surface", "--override", json.dumps(override))
        self.assertEqual(out.count("ok: "), 18, out)
        # The calls by method and status, as the clients saw them: every
        # code grpc_calls.py provokes, and the stream's in-stream errors.
        after = self.grpc_metrics()
        grew = {k for k in after if after[k] > before.get(k, 0)}
        for key in (("ModelInfer", "OK"), ("ModelInfer", "NOT_FOUND"),
                    ("ModelInfer", "INVALID_ARGUMENT"), ("ModelInfer", "RESOURCE_EXHAUSTED"),
                    ("ModelInfer", "DEADLINE_EXCEEDED"), ("ServerLive", "OK"),
                    ("ModelStreamInfer", "OK"), ("TraceSetting", "UNIMPLEMENTED"),
                    ("stream", "ok"), ("stream", "error")):
            self.assertIn(key, grew, sorted(after.items()))
        self.assertGreaterEqual(after[("stream", "error")] - before.get(("stream", "error"), 0),
                                2)
        deadline = time.monotonic() + 5   # a stream the client left ends with its messages
        while self.grpc_metrics()[("open", "")] and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.grpc_metrics()[("open", "")], 0)

    def grpc_metrics(self):
        """/metrics' gRPC families: {(method, code): n}, {("stream", outcome): n},
        {("open", ""): n}."""
        text = roundtrip(self.srv.port, "GET", "/metrics").body.decode()
        got = {}
        for m in re.finditer(r'^batchgate_grpc_calls_total\{method="(\w+)",code="(\w+)"\} '
                             r'(\d+)$', text, re.M):
            got[(m.group(1), m.group(2))] = int(m.group(3))
        for m in re.finditer(r'^batchgate_grpc_stream_messages_total\{outcome="(\w+)"\} (\d+)$',
                             text, re.M):
            got[("stream", m.group(1))] = int(m.group(2))
        m = re.search(r"^batchgate_grpc_streams_open (\d+)$", text, re.M)
        got[("open", "")] = int(m.group(1))
        return got


class GrpcAuthTest(GrpcCase):
    config = {"tenants": [
        {"name": "a", "keys": [digest("k-a")], "models": ["alpha"]},
        {"name": "b", "keys": [digest("k-b")], "models": ["beta"]},
    ]}

    @classmethod
    def populate(cls, repo):
        for n in ("alpha", "beta"):
            write_model(repo, n, synthetic(n, base_us=200, per_row_us=0))

    def test_keys_in_metadata(self):
        out = self.run_calls("auth", "--key", "k-a", "--other-key", "k-b")
        self.assertEqual(out.count("ok: "), 1, out)


class GrpcLimitsTest(GrpcCase):
    config = {"limits": {"max_body_bytes": 1 << 20, "max_header_bytes": 4096}}

    @classmethod
    def populate(cls, repo):
        copy_digits(repo)
        # 4 MiB of answer a row: 3 rows are over the connection's high water.
        big = synthetic("bigout", base_us=1000, per_row_us=0)
        big["outputs"][0]["shape"] = [1 << 20]
        write_model(repo, "bigout", big)
        write_model(repo, "slow", synthetic("slow", base_us=200000, per_row_us=0,
                                            batching={"max_batch_size": 1}))

    def test_message_over_max_body_bytes(self):
        out = self.run_calls("limits")
        self.assertEqual(out.count("ok: "), 10, out)


class GrpcChurnTest(GrpcCase):
    """Clients leaving streams and connections while answers are written
    (grpc_calls.py --case churn): the server lives, every whole stream gets
    all its answers. The answer path once freed the call under itself."""

    @classmethod
    def populate(cls, repo):
        write_model(repo, "churn", synthetic("churn", base_us=100, per_row_us=10))

    def test_clients_leaving_mid_answer(self):
        self.run_calls("churn", "--streams", "1500")
        self.assertTrue(self.srv.alive(), self.srv.log()[-3000:])
        # A stream the client cancelled counts as CANCELLED, the status the
        # client has: its reset once reached the call as a broken body
        # (HTTP 400), counted INVALID_ARGUMENT.
        got = GrpcSurfaceTest.grpc_metrics(self)
        self.assertGreater(got.get(("ModelStreamInfer", "CANCELLED"), 0), 0, got)
        self.assertEqual(got.get(("ModelStreamInfer", "INVALID_ARGUMENT"), 0), 0, got)


class GrpcDrainTest(unittest.TestCase):
    def test_sigterm_answers_the_call_in_flight(self):
        repo = tempfile.mkdtemp(prefix="batchgate-repo-")
        try:
            write_model(repo, "slow", synthetic("slow", base_us=1000000, per_row_us=0))
            write_model(repo, "quick", synthetic("quick", base_us=100000, per_row_us=0,
                                                 batching={"max_batch_size": 8}))
            with Server({"model_repository": repo}) as srv:
                srv.wait_log(r"ready in", timeout=30)
                code, out = run_testdeps(
                    ["grpc_calls.py", "--grpc", "127.0.0.1:%d" % srv.grpc_port,
                     "--http", "127.0.0.1:%d" % srv.port, "--case", "drain",
                     "--pid", str(srv.pid)], timeout=60)
                self.assertEqual(code, 0, out + "\nserver log:\n" + srv.log())
                self.assertEqual(srv.proc.wait(timeout=30), 0, srv.log())
                self.assertIn("SIGTERM: draining", srv.log())
        finally:
            shutil.rmtree(repo, ignore_errors=True)


class GrpcIdleTest(GrpcCase):
    """limits.idle_timeout_ms on a stream: not while an answer is owed, and
    from the last answer (grpc_calls.py --case idle)."""
    config = {"limits": {"idle_timeout_ms": 1000}}

    @classmethod
    def populate(cls, repo):
        write_model(repo, "slow15", synthetic("slow15", base_us=1500000, per_row_us=0,
                                              batching={"max_batch_size": 1}))

    def test_a_stream_waiting_for_its_answer_is_not_idle(self):
        self.run_calls("idle")


class GrpcConfigTest(unittest.TestCase):
    def test_off_opens_no_port(self):
        with Server({"grpc_listen": "off"}) as srv:
            self.assertIsNone(srv.grpc_port)
            self.assertNotIn("gRPC on", srv.log())

    def test_bad_grpc_listen_is_a_config_error(self):
        for bad, msg in (("8001", "is not HOST:PORT"), ("127.0.0.1:70000", "must be 0..65535"),
                         (17, "grpc_listen")):
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump({"listen": "127.0.0.1:0", "grpc_listen": bad}, f)
            try:
                p = subprocess.run([BIN, "--config", f.name], capture_output=True, timeout=20)
            finally:
                os.unlink(f.name)
            self.assertEqual(p.returncode, 2, (bad, p.stderr))
            self.assertIn(msg, p.stderr.decode(), bad)
        p = subprocess.run([BIN, "--grpc-listen", "nope"], capture_output=True, timeout=20)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--grpc-listen", p.stderr.decode())

    def test_grpc_listen_on_listens_port_is_a_config_error(self):
        # SO_REUSEPORT let the two protocols share one port, each taking
        # connections at random; the HTTP/2 port is now checked after the
        # HTTP listeners are up. Also with localhost for 127.0.0.1: the
        # check binds, it does not compare strings.
        port = free_port()
        tmp = tempfile.mkdtemp(prefix="batchgate-grpc-")
        try:
            os.makedirs(os.path.join(tmp, "models"))
            for listen, grpc in (("127.0.0.1", "127.0.0.1"), ("127.0.0.1", "localhost")):
                cfg = os.path.join(tmp, "c.json")
                with open(cfg, "w") as f:
                    json.dump({"listen": "%s:%d" % (listen, port),
                               "grpc_listen": "%s:%d" % (grpc, port),
                               "model_repository": os.path.join(tmp, "models"),
                               "state_dir": os.path.join(tmp, "state")}, f)
                p = subprocess.run([BIN, "--config", cfg], capture_output=True, timeout=20)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("grpc_listen: %s:%d is listen's port too" % (grpc, port),
                              p.stderr.decode())
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_the_port_speaks_http2_only(self):
        with Server() as srv:
            s = socket.create_connection(("127.0.0.1", srv.grpc_port), timeout=5)
            s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            try:
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            except socket.timeout:
                self.fail("an HTTP/1.1 client on the gRPC port was not closed within 5 s")
            s.close()
            self.assertNotIn(b"HTTP/1.1 200", data)
            # The HTTP port is untouched.
            from harness import roundtrip
            self.assertEqual(roundtrip(srv.port, "GET", "/v2/health/live").status, 200)


if __name__ == "__main__":
    unittest.main()
