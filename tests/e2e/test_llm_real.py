"""test_llm_real.py - an LLM pool in front of real llama.cpp `llama-server`
replicas serving SmolLM2-135M-Instruct (scripts/fetch-llm builds and caches
them; docs/LLM.md), with OpenAI's official `openai` client (sync, async,
streamed; chat, completions, models) through batchgate giving what the same
calls give direct, and a client that hangs up mid-stream freeing the
server's slot, as the server's own metrics show. Skips, saying what to
run, where fetch-llm's cache is missing."""

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time
import unittest

from harness import HERE, RepoServerCase, run_testdeps
from test_infer import write_model

ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "llm"))


def llm_paths():
    """(llama-server, model) from scripts/fetch-llm's cache, or SkipTest."""
    try:
        p = subprocess.run([os.path.join(ROOT, "scripts", "fetch-llm"), "--cached"],
                           capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise unittest.SkipTest("scripts/fetch-llm --cached took over 60 s")
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or len(lines) != 2:
        raise unittest.SkipTest("no llama-server and SmolLM2 in the cache: run scripts/fetch-llm "
                                "(`make test` does; about 10 minutes of 2 cores the first time): "
                                + (p.stderr.strip().splitlines() or [""])[-1])
    return lines[0], lines[1]


def server_metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name.split("{")[0]] = float(value)
    return out


class TestRealReplicas(RepoServerCase):
    @classmethod
    def setUpClass(cls):
        server, model = llm_paths()
        from llama_probe import Replica
        cls.replicas = []
        try:
            for _ in range(2):
                cls.replicas.append(Replica(server, model, slots=2, threads=1, ctx=4096,
                                            extra=("--cache-ram", "0")))
            super().setUpClass()
        except BaseException:
            for r in cls.replicas:
                r.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            for r in cls.replicas:
                r.stop()

    @classmethod
    def populate(cls, repo):
        write_model(repo, "smol", {
            "backend": "openai", "served_model_name": "smollm2", "aliases": ["smollm"],
            "endpoints": ["http://127.0.0.1:%d" % r.port for r in cls.replicas],
            "metrics_interval_ms": 100})

    def test_openai_client_through_batchgate_as_direct(self):
        rc, out = run_testdeps([os.path.join(HERE, "llm_clients.py"),
                                "http://127.0.0.1:%d" % self.srv.port, "smol"], timeout=240)
        self.assertEqual(rc, 0, out)
        via = json.loads(out.strip().splitlines()[-1])
        rc, out = run_testdeps([os.path.join(HERE, "llm_clients.py"),
                                "http://127.0.0.1:%d" % self.replicas[0].port, "smollm2"],
                               timeout=240)
        self.assertEqual(rc, 0, out)
        direct = json.loads(out.strip().splitlines()[-1])
        self.assertEqual(via["models"], ["smol", "smollm"])
        self.assertEqual(via["retrieve"], "smol")
        # Greedy decoding: the same words through batchgate as direct.
        self.assertTrue(via["chat"]["text"])
        self.assertEqual(via["chat"]["text"], direct["chat"]["text"])
        for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
            self.assertEqual(via["chat"]["usage"][k], direct["chat"]["usage"][k])
        self.assertEqual(via["completion"]["text"], direct["completion"]["text"])
        self.assertEqual(via["chat_stream"]["text"], via["chat"]["text"])
        self.assertEqual(via["chat_stream"]["usage"]["completion_tokens"],
                         via["chat"]["usage"]["completion_tokens"])
        self.assertGreaterEqual(via["chat_stream"]["chunks"],
                                via["chat"]["usage"]["completion_tokens"])
        self.assertEqual(via["chat_stream_no_usage"]["text"], via["chat"]["text"])
        self.assertFalse(via["chat_stream_no_usage"]["usage_seen"])
        self.assertEqual(via["unknown"], {"status": 404, "param": "model"})
        self.assertEqual(via["async"]["chat"], via["chat"]["text"])
        self.assertEqual(via["async"]["completion_stream"], via["completion"]["text"])
        # Tokens counted as the servers reported them.
        r = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=5)
        r.request("GET", "/metrics")
        text = r.getresponse().read().decode()
        m = re.search(r'batchgate_llm_tokens_total\{model="smol",tenant="default",'
                      r'kind="completion"\} (\d+)', text)
        self.assertGreater(int(m.group(1)), 0)

    def test_client_hanging_up_frees_the_slot(self):
        body = json.dumps({"model": "smol", "max_tokens": 2000, "stream": True,
                           "ignore_eos": True,
                           "messages": [{"role": "user", "content": "Count to ten."}]}).encode()
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=60)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                  % len(body) + body)
        buf = b""
        while buf.count(b"data: ") < 6:
            d = s.recv(65536)
            self.assertTrue(d, buf)
            buf += d
        ep = int(re.search(rb"X-Batchgate-Endpoint: (\d+)", buf).group(1))
        port = self.replicas[ep].port
        self.assertEqual(server_metrics(port)["llamacpp:requests_processing"], 1)
        s.close()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 5:
            m = server_metrics(port)
            if m["llamacpp:requests_processing"] == 0:
                break
            time.sleep(0.01)
        freed = time.monotonic() - t0
        self.assertEqual(m["llamacpp:requests_processing"], 0)
        predicted = m["llamacpp:tokens_predicted_total"]
        time.sleep(0.3)
        self.assertEqual(server_metrics(port)["llamacpp:tokens_predicted_total"], predicted)
        print("slot freed %.3f s after the client hung up" % freed, file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
