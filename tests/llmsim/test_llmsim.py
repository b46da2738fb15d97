#!/usr/bin/env python3
"""test_llmsim.py - the simulated vLLM-like servers (llmsim.py) keep their
model: OpenAI's shapes, streaming, the prefix cache, KV blocks and waiting,
aborts on disconnect, errors, and 100 endpoints in one process.

    python3 tests/llmsim/test_llmsim.py

Standard library only; loopback only; every socket has a timeout, every
wait a deadline, and the simulator processes are killed at exit.
"""

import json
import os
import re
import socket
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import llmsim  # noqa: E402  (the pure functions: token counts, expected text)
import simproc  # noqa: E402

MODEL = "llmsim"
SPEED = 5
KV_BLOCKS = 256


def Sim(endpoints, extra=(), timeout=15.0):
    """An llmsim process at this file's speed and KV size (simproc.py)."""
    return simproc.Sim(endpoints, ["--speed", SPEED, "--kv-blocks", KV_BLOCKS, "--model", MODEL]
                       + list(extra), timeout)


# ---------------------------------------------------------------- client

def connect(port, timeout=10.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.settimeout(timeout)
    return s


def send_request(s, method, path, body=None, raw=None):
    """Sends one request; body is JSON-encoded unless raw bytes are given."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
    head = "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" \
           "Content-Length: %d\r\n\r\n" % (method, path, len(data))
    s.sendall(head.encode() + data)


class Reader:
    """Reads HTTP/1.1 answers from a socket: head, then a whole body or
    chunks one by one (an SSE stream)."""

    def __init__(self, s):
        self.s, self.buf = s, b""

    def _fill(self):
        data = self.s.recv(65536)
        if not data:
            raise EOFError("server closed the connection")
        self.buf += data

    def _take(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def head(self):
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        return status, headers

    def chunk(self):
        """The next chunk's bytes; b"" at the last chunk."""
        size = int(self._line().split(b";")[0], 16)
        data = self._take(size)
        self._take(2)
        return data

    def response(self):
        status, headers = self.head()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                c = self.chunk()
                if not c:
                    break
                body += c
        else:
            body = self._take(int(headers.get("content-length", "0")))
        return status, headers, body


def call(port, method, path, body=None, raw=None):
    """One request on a fresh connection: (status, headers, body bytes)."""
    with connect(port) as s:
        send_request(s, method, path, body, raw)
        return Reader(s).response()


def call_json(port, method, path, body=None):
    status, _, data = call(port, method, path, body)
    return status, json.loads(data)


def sse_events(data):
    """The data fields of an SSE body, in order."""
    out = []
    for block in data.decode().split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), "not an SSE data event: %r" % block
            out.append(block[len("data: "):])
    return out


def scrape(port):
    """The samples of /metrics without labels other than model_name, by name;
    histograms' _sum and _count too."""
    status, _, data = call(port, "GET", "/metrics")
    assert status == 200, status
    out = {}
    for line in data.decode().splitlines():
        m = re.match(r'^([a-z_:]+)\{([^}]*)\} (\S+)$', line)
        if m and "le=" not in m.group(2):
            out[m.group(1)] = float(m.group(3))
    return out


def wait_metrics(port, pred, what, timeout=10.0):
    """Scrapes until pred(metrics) holds; returns them or fails saying what."""
    deadline = time.monotonic() + timeout
    while True:
        m = scrape(port)
        if pred(m):
            return m
        if time.monotonic() > deadline:
            raise AssertionError("expected %s within %.0f s; metrics: %r" % (what, timeout, m))
        time.sleep(0.02)


def chat_body(content, max_tokens, **kw):
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens}
    body.update(kw)
    return body


def open_stream(port, body):
    """Starts a streaming request; returns (socket, reader) after the head."""
    s = connect(port)
    send_request(s, "POST", "/v1/chat/completions", dict(body, stream=True))
    r = Reader(s)
    status, headers = r.head()
    assert status == 200 and headers["content-type"].startswith("text/event-stream"), \
        (status, headers)
    return s, r


# ---------------------------------------------------------------- tests

class LLMSimTest(unittest.TestCase):
    """Endpoint 0: shapes and errors; 1: the prefix cache; 2: KV and aborts."""

    @classmethod
    def setUpClass(cls):
        cls.sim = Sim(3)
        cls.ports = cls.sim.ports

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()

    def wait_idle(self, port):
        return wait_metrics(port, lambda m: m["vllm:kv_cache_usage_perc"] == 0
                            and m["vllm:num_requests_running"] == 0
                            and m["vllm:num_requests_waiting"] == 0, "an idle endpoint")

    def test_chat_non_streaming(self):
        content = "What is the capital of France?"
        st, obj = call_json(self.ports[0], "POST", "/v1/chat/completions", chat_body(content, 5))
        self.assertEqual(st, 200, obj)
        self.assertEqual(obj["object"], "chat.completion")
        self.assertEqual(obj["model"], MODEL)
        ch = obj["choices"][0]
        self.assertEqual(ch["message"], {"role": "assistant",
                                         "content": "alpha bravo charlie delta echo"})
        self.assertEqual(ch["finish_reason"], "length")
        rendered = llmsim.render_chat([{"role": "user", "content": content}]).encode()
        prompt = llmsim.count_tokens(rendered)
        self.assertEqual(obj["usage"], {"prompt_tokens": prompt, "completion_tokens": 5,
                                        "total_tokens": prompt + 5})

    def test_completion_non_streaming(self):
        st, obj = call_json(self.ports[0], "POST", "/v1/completions",
                            {"model": MODEL, "prompt": "twelve bytes", "max_tokens": 3})
        self.assertEqual(st, 200, obj)
        self.assertEqual(obj["object"], "text_completion")
        self.assertEqual(obj["choices"][0]["text"], "alpha bravo charlie")
        self.assertEqual(obj["usage"], {"prompt_tokens": 3, "completion_tokens": 3,
                                        "total_tokens": 6})

    def test_default_max_tokens(self):
        st, obj = call_json(self.ports[0], "POST", "/v1/completions",
                            {"model": MODEL, "prompt": "x"})
        self.assertEqual(st, 200, obj)
        self.assertEqual(obj["usage"]["completion_tokens"], 16)

    def check_stream(self, path, body, text_of, kind):
        """Streams body; checks the chunks and returns their text and events."""
        st, headers, data = call(self.ports[0], "POST", path, dict(body, stream=True))
        self.assertEqual(st, 200, data)
        self.assertTrue(headers["content-type"].startswith("text/event-stream"), headers)
        events = sse_events(data)
        self.assertEqual(events[-1], "[DONE]")
        chunks = [json.loads(e) for e in events[:-1]]
        for c in chunks:
            self.assertEqual(c["object"], kind)
        return "".join(text_of(c) for c in chunks if c["choices"]), chunks

    def test_stream_chat_concatenates_to_whole(self):
        body = chat_body("tell me a story", 7)
        _, whole = call_json(self.ports[0], "POST", "/v1/chat/completions", body)
        text, chunks = self.check_stream(
            "/v1/chat/completions", body,
            lambda c: c["choices"][0]["delta"].get("content", ""), "chat.completion.chunk")
        self.assertEqual(text, whole["choices"][0]["message"]["content"])
        self.assertEqual(chunks[0]["choices"][0]["delta"]["role"], "assistant")
        self.assertEqual(chunks[-1]["choices"][0]["finish_reason"], "length")
        self.assertNotIn("usage", chunks[-1])

    def test_stream_completion_include_usage(self):
        body = {"model": MODEL, "prompt": "count with me", "max_tokens": 4,
                "stream_options": {"include_usage": True}}
        _, whole = call_json(self.ports[0], "POST", "/v1/completions", body)
        text, chunks = self.check_stream("/v1/completions", body,
                                         lambda c: c["choices"][0]["text"], "text_completion")
        self.assertEqual(text, whole["choices"][0]["text"])
        last = chunks[-1]
        self.assertEqual(last["choices"], [])
        self.assertEqual(last["usage"], whole["usage"])
        self.assertEqual(chunks[-2]["choices"][0]["finish_reason"], "length")

    def test_models(self):
        st, obj = call_json(self.ports[0], "GET", "/v1/models")
        self.assertEqual(st, 200)
        self.assertEqual(obj["object"], "list")
        self.assertEqual([m["id"] for m in obj["data"]], [MODEL])

    def test_keep_alive(self):
        with connect(self.ports[0]) as s:
            r = Reader(s)
            for _ in range(3):
                send_request(s, "POST", "/v1/completions",
                             {"model": MODEL, "prompt": "again", "max_tokens": 2})
                st, _, data = r.response()
                self.assertEqual(st, 200, data)

    def test_errors_in_openai_shape(self):
        port = self.ports[0]
        cases = [(dict(raw=b'{"model": "llmsim", "messages": ['), 400),
                 (dict(body={"model": "nope", "prompt": "x"}), 404),
                 (dict(body={"model": MODEL, "prompt": "x", "max_tokens": 0}), 400),
                 (dict(body={"model": MODEL, "prompt": 5}), 400),
                 (dict(body={"model": MODEL, "prompt": "x",
                             "max_tokens": KV_BLOCKS * 16 + 1}), 400)]
        for kw, want in cases:
            st, _, data = call(port, "POST", "/v1/completions", **kw)
            self.assertEqual(st, want, (kw, data))
            err = json.loads(data)["error"]
            self.assertEqual(sorted(err), ["code", "message", "param", "type"], err)
            self.assertEqual(err["code"], want)
            self.assertTrue(err["message"], err)
        st, _, data = call(port, "POST", "/v1/chat/completions", raw=b"[1, 2]")
        self.assertEqual(st, 400, data)
        # The connection survives an error answer it can still frame.
        with connect(port) as s:
            r = Reader(s)
            send_request(s, "POST", "/v1/completions", raw=b"{bad json")
            self.assertEqual(r.response()[0], 400)
            send_request(s, "GET", "/v1/models")
            self.assertEqual(r.response()[0], 200)

    def test_prefix_cache_hits_and_ttft(self):
        port = self.ports[1]
        self.wait_idle(port)
        system = "You are a careful assistant. " * 220   # about 1600 tokens
        body = {"model": MODEL, "max_tokens": 2, "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": "hi"}]}

        def ttft():
            t0 = time.monotonic()
            s, r = open_stream(port, body)
            with s:
                r.chunk()
                first = time.monotonic() - t0
                while r.chunk():
                    pass
            return first

        before = scrape(port)
        t1 = ttft()
        mid = scrape(port)
        t2 = ttft()
        after = scrape(port)
        self.assertEqual(mid["vllm:prefix_cache_hits_total"],
                         before["vllm:prefix_cache_hits_total"])
        hits = after["vllm:prefix_cache_hits_total"] - mid["vllm:prefix_cache_hits_total"]
        queried = after["vllm:prefix_cache_queries_total"] - mid["vllm:prefix_cache_queries_total"]
        self.assertGreater(queried, 1500)
        self.assertGreaterEqual(hits, queried - 16, (hits, queried))
        self.assertLess(t2, 0.5 * t1, "a cached prompt should start much sooner: "
                        "first %.4f s, again %.4f s" % (t1, t2))

    def test_full_kv_makes_requests_wait(self):
        port = self.ports[2]
        self.wait_idle(port)
        aborted = scrape(port)["llmsim:requests_aborted_total"]
        # Each reserves (about 5 + 1900) / 16 = 120 of the 256 blocks: two run, one waits.
        streams = [open_stream(port, chat_body("fill %d" % i, 1900)) for i in range(3)]
        try:
            # Admission happens between steps: wait for the third to be refused.
            m = wait_metrics(port, lambda m: m["vllm:num_requests_waiting"] == 1
                             and m["vllm:num_requests_running"] == 2,
                             "two running requests and one waiting")
            self.assertGreater(m["vllm:kv_cache_usage_perc"], 0.9, m)
        finally:
            for s, _ in streams:
                s.close()
        self.wait_idle(port)
        wait_metrics(port, lambda m: m["llmsim:requests_aborted_total"] == aborted + 3,
                     "three aborted requests")

    def test_disconnect_mid_stream_frees_blocks(self):
        port = self.ports[2]
        self.wait_idle(port)
        before = scrape(port)
        s, r = open_stream(port, chat_body("a long answer please", 1000))
        with s:
            for _ in range(3):
                self.assertTrue(r.chunk())
            m = scrape(port)
            self.assertEqual(m["vllm:num_requests_running"], 1, m)
            self.assertGreater(m["vllm:kv_cache_usage_perc"], 0.2, m)
        m = self.wait_idle(port)
        self.assertEqual(m["llmsim:requests_aborted_total"],
                         before["llmsim:requests_aborted_total"] + 1)
        self.assertEqual(m["vllm:request_success_total"], before["vllm:request_success_total"])
        gen = m["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]
        self.assertLess(gen, 1000, "the aborted sequence stopped generating")

    def test_faults_at_run_time(self):
        port = self.ports[0]
        try:
            self.assertEqual(call_json(port, "POST", "/__fault", {"kind": "500"})[0], 200)
            st, obj = call_json(port, "POST", "/v1/completions",
                                {"model": MODEL, "prompt": "x", "max_tokens": 2})
            self.assertEqual(st, 500, obj)
            self.assertEqual(obj["error"]["code"], 500)
            call_json(port, "POST", "/__fault", {"kind": "stop_mid"})
            s, r = open_stream(port, chat_body("x", 8))
            with s:
                got = []
                with self.assertRaises(EOFError):
                    while True:
                        got.append(r.chunk())
                self.assertEqual(len(got), 4, got)
                self.assertNotIn(b"[DONE]", b"".join(got))
        finally:
            call_json(port, "POST", "/__fault", {"kind": "none"})


class EngineTest(unittest.TestCase):
    """The scheduler in-process, fast: many requests with shared prefixes,
    some aborted, never overfill the cache and leave it empty."""

    def test_blocks_balance_under_load(self):
        import argparse
        import asyncio
        import random
        cfg = argparse.Namespace(kv_blocks=64, block_size=16, max_num_seqs=8, speed=1e6,
                                 prefill_s_per_token=0.0002, decode_step_s=0.02,
                                 decode_s_per_seq=0.0002)
        rng = random.Random(7)
        prefixes = [("system prompt %d " % i).encode() * 40 for i in range(4)]

        async def scenario():
            eng = llmsim.Engine(cfg)
            task = asyncio.ensure_future(eng.run())
            seqs = []
            for i in range(120):
                prompt = rng.choice(prefixes) + b"question %d" % i
                seq = llmsim.Seq(prompt, rng.randint(1, 200), cfg.block_size)
                self.assertTrue(eng.fits_ever(seq))
                eng.submit(seq)
                seqs.append(seq)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                kv = eng.kv
                self.assertLessEqual(kv.used + len(kv.lru), kv.total)
                self.assertLessEqual(len(eng.running), cfg.max_num_seqs)
                if rng.random() < 0.01:
                    eng.abort(rng.choice(seqs))
                if all(s.finished for s in seqs):
                    break
                await asyncio.sleep(0)
            task.cancel()
            return eng, seqs

        eng, seqs = asyncio.run(scenario())
        self.assertTrue(all(s.finished for s in seqs))
        self.assertEqual((eng.kv.used, eng.kv.refs, len(eng.running), len(eng.waiting)),
                         (0, {}, 0, 0))
        st = eng.stats
        self.assertEqual(st.success + st.aborted, len(seqs))
        self.assertGreater(st.prefix_hits, 0)


class HundredEndpointsTest(unittest.TestCase):
    def test_hundred_endpoints_in_one_process(self):
        t0 = time.monotonic()
        sim = Sim(100, timeout=20.0)
        try:
            started = time.monotonic() - t0
            self.assertEqual(len(sim.ports), 100)
            self.assertEqual(len(set(sim.ports)), 100)
            self.assertLess(started, 8.0, "100 endpoints took %.1f s to start" % started)
            for i in range(100):
                st, obj = call_json(sim.ports[i], "GET", "/v1/models")
                self.assertEqual((st, obj["data"][0]["id"]), (200, MODEL), i)
        finally:
            sim.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
