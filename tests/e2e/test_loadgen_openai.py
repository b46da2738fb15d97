"""test_loadgen_openai.py - batchgate-load's OpenAI mode (docs/LOADGEN.md
"OpenAI mode") run directly against llmsim (tests/llmsim, docs/LLMSIM.md)
and against a scripted SSE server whose timing is known:

- streamed chat: requests and output tokens counted (llmsim always
  generates max_tokens), TTFT < e2e, ITL and TPOT at llmsim's decode step;
  CSV and SVG written from the same numbers;
- --prompts: lines in order, cycling, prompt tokens exactly llmsim's count;
- --no-stream: TTFT = e2e, tokens from the body's usage; completions;
- --synthetic: --dry-run prints the same requests for a seed, others for
  another, K shared prefixes; the prefixes hit llmsim's prefix cache
  (vllm:prefix_cache_hits_total) where unshared texts do not;
- bad_sse, stop_mid, 500 and hang endpoints: errors counted, no crash, the
  step bounded by --drain-ms;
- a scripted server: TTFT and ITL match its sleeps while its events are
  split across writes with \\r\\n line ends; an answer delimited by the
  connection's close is whole; --api-key reaches it; bad usage exits 2;
  served one at a time, its tokens/s are what it delivered (over the window
  and the wait for its last answers), not the window's alone.

Each run is 1 to 3 seconds."""

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness import BIN

LOAD = os.path.join(os.path.dirname(BIN), "batchgate-load")
HERE = os.path.dirname(os.path.abspath(__file__))
SIM_DIR = os.path.normpath(os.path.join(HERE, "..", "llmsim"))
sys.path.insert(0, SIM_DIR)
import llmsim  # noqa: E402  (its token count and chat template, to check prompt tokens)
import simproc  # noqa: E402

MODEL = "llmsim"
SPEED = 2                      # llmsim's decode step: 20.2 ms / 2 with one sequence running
STEP_MS = 10.1
# Endpoints of the one llmsim process, by what they are for.
OK, PREFIX, NOPREFIX, BAD_SSE, STOP_MID, E500, HANG = range(7)
FAULTS = {BAD_SSE: "bad_sse", STOP_MID: "stop_mid", E500: "500", HANG: "hang"}


def Sim(endpoints, faults, timeout=15.0):
    """An llmsim process at this file's speed, with these faults (simproc.py)."""
    args = ["--speed", SPEED, "--model", MODEL]
    for i, kind in faults.items():
        args += ["--fault", "%d:%s" % (i, kind)]
    sim = simproc.Sim(endpoints, args, timeout)
    sim.metric = lambda i, name: sim.metrics(i)[name]
    return sim


# ---------------------------------------------------------------- scripted server

def sse_event(obj, crlf=False):
    nl = b"\r\n" if crlf else b"\n"
    return b"data: " + json.dumps(obj).encode() + nl + nl


def chat_chunk(delta):
    return {"object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


class Scripted(BaseHTTPRequestHandler):
    """POST /split/...: a chat stream with known timing: a role-only chunk at
    once, the first token 100 ms later, then 4 more 40 ms apart, each event
    cut in two writes with \\r\\n line ends, and the closing, usage and [DONE]
    events in one last write. POST /close/...: a stream with no length and
    no chunking, ended by closing the connection. POST /serial/...: the
    /split stream, one at a time (a server of fixed capacity)."""
    protocol_version = "HTTP/1.1"
    auth = []
    bodies = []
    lock = threading.Lock()
    serial = threading.Lock()
    FIRST_S, GAP_S, TOKENS, PROMPT = 0.100, 0.040, 5, 11

    def log_message(self, *a):
        pass

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with Scripted.lock:
            Scripted.auth.append(self.headers.get("Authorization"))
            Scripted.bodies.append(body)
        if self.path.startswith("/close/"):
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Connection: close\r\n\r\n")
            for w in ("alpha", " bravo"):
                self.wfile.write(sse_event(chat_chunk({"content": w})))
                self.wfile.flush()
                time.sleep(0.01)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True
            return
        if self.path.startswith("/serial/"):
            with Scripted.serial:
                self.stream()
            return
        self.stream()

    def stream(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.chunk(sse_event(chat_chunk({"role": "assistant", "content": ""}), crlf=True))
        for k in range(self.TOKENS):
            time.sleep(self.FIRST_S if k == 0 else self.GAP_S)
            ev = sse_event(chat_chunk({"content": "w%d" % k}), crlf=True)
            cut = 7 + 3 * k   # mid-field: the event is whole only with both writes
            self.chunk(ev[:cut])
            self.chunk(ev[cut:])
        usage = {"object": "chat.completion.chunk", "choices": [],
                 "usage": {"prompt_tokens": self.PROMPT, "completion_tokens": self.TOKENS}}
        self.chunk(sse_event(chat_chunk({}), crlf=True) + sse_event(usage, crlf=True)
                   + b"data: [DONE]\r\n\r\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


# ---------------------------------------------------------------- the tests

class LoadgenOpenAITest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sim = Sim(7, FAULTS)
        cls.tmp = tempfile.mkdtemp(prefix="batchgate-load-openai-")
        cls.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
        cls.httpd.daemon_threads = True
        threading.Thread(target=cls.httpd.serve_forever, daemon=True).start()

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()
        cls.httpd.shutdown()
        cls.httpd.server_close()

    def url(self, i):
        return "http://127.0.0.1:%d" % self.sim.ports[i]

    def run_load(self, url, *args, timeout=30, expect_rc=0, model=MODEL, api="chat"):
        """One run; returns (its first JSON step, the process, wall seconds)."""
        out = os.path.join(self.tmp, "r.json")
        if os.path.exists(out):
            os.unlink(out)
        argv = [LOAD, "--url", url, "--openai", api, "--model", model, "--quiet", "--json", out,
                "--drain-ms", "3000"] + list(args)
        t0 = time.monotonic()
        p = subprocess.run(argv, capture_output=True, timeout=timeout)
        wall = time.monotonic() - t0
        self.assertEqual(p.returncode, expect_rc, "%s\nstdout:\n%s\nstderr:\n%s"
                         % (" ".join(argv), p.stdout.decode(), p.stderr.decode()))
        if expect_rc != 0:
            return None, p, wall
        with open(out) as f:
            steps = json.load(f)["steps"]
        return steps[0], p, wall

    def dry_run(self, *args, api="chat"):
        p = subprocess.run([LOAD, "--url", self.url(OK), "--openai", api, "--model", MODEL]
                           + list(args), capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        return [json.loads(line) for line in p.stdout.decode().splitlines()]

    def assert_counts(self, st, max_tokens):
        llm = st["llm"]
        self.assertEqual(st["errors"], 0, st)
        self.assertEqual(llm["broken"], 0, st)
        self.assertGreater(llm["requests"], 0, st)
        self.assertEqual(llm["requests"], st["codes"].get("200"), st)
        # llmsim generates exactly max_tokens, and usage says so.
        self.assertEqual(llm["output_tokens"], llm["requests"] * max_tokens, st)
        # Over the window and the wait for its last answers (docs/LOADGEN.md).
        self.assertGreaterEqual(st["span_s"], st["duration_s"], st)
        self.assertAlmostEqual(llm["output_tokens_per_s"], llm["output_tokens"] / st["span_s"],
                               delta=0.01)
        self.assertGreater(llm["prompt_tokens"], 0, st)

    def test_streamed_chat(self):
        csv_path = os.path.join(self.tmp, "r.csv")
        svg_path = os.path.join(self.tmp, "r.svg")
        st, p, _ = self.run_load(self.url(OK), "--rate", "10", "--duration", "2", "--warmup",
                                 "0.5", "--max-tokens", "8", "--synthetic", "in=20:5",
                                 "--csv", csv_path, "--svg", svg_path)
        llm = st["llm"]
        self.assert_counts(st, 8)
        self.assertGreaterEqual(llm["requests"], 8, st)
        self.assertLess(llm["ttft_ms"]["p50"], llm["e2e_ms"]["p50"], llm)
        self.assertLess(llm["ttft_ms"]["mean"], llm["e2e_ms"]["mean"], llm)
        # One token per decode step: gaps and time per output token at the
        # simulator's step (longer when another request's prefill shares it).
        for m in ("itl_ms", "tpot_ms"):
            self.assertGreater(llm[m]["p50"], 0.8 * STEP_MS, llm)
            self.assertLess(llm[m]["p50"], 2.0 * STEP_MS, llm)
        # e2e = TTFT + 7 more tokens.
        self.assertAlmostEqual(llm["e2e_ms"]["mean"] - llm["ttft_ms"]["mean"],
                               7 * llm["tpot_ms"]["mean"], delta=0.25 * 7 * STEP_MS)
        # The e2e of an answer is the step's latency, both from the intended send.
        self.assertAlmostEqual(llm["e2e_ms"]["p50"] * 1000, st["latency_us"]["p50"],
                               delta=0.02 * st["latency_us"]["p50"] + 1)
        self.assertIn(b"ttft p50", p.stdout)
        with open(csv_path) as f:
            head, row = f.read().splitlines()[:2]
        cols = dict(zip(head.split(","), row.split(",")))
        self.assertAlmostEqual(float(cols["ttft_p50_ms"]), llm["ttft_ms"]["p50"], delta=0.01)
        self.assertAlmostEqual(float(cols["itl_p99_ms"]), llm["itl_ms"]["p99"], delta=0.01)
        self.assertEqual(int(cols["output_tokens"]), llm["output_tokens"])
        self.assertEqual(int(cols["llm_requests"]), llm["requests"])
        with open(svg_path) as f:
            svg = f.read()
        self.assertIn("time to first token", svg)
        self.assertIn("asked rate", svg)

    def test_prompts_file_in_order(self):
        lines = [{"prompt": "What is the capital of France?"},
                 {"messages": [{"role": "system", "content": "You are terse."},
                               {"role": "user", "content": "Name three colours."}]},
                 {"prompt": "Count to five, slowly and clearly.", "max_tokens": 5}]
        path = os.path.join(self.tmp, "prompts.jsonl")
        with open(path, "w") as f:
            for ln in lines:
                f.write(json.dumps(ln) + "\n")
        # --dry-run: the lines in order, cycling, each a whole request.
        got = self.dry_run("--prompts", path, "--max-tokens", "6", "--dry-run", "5")
        self.assertEqual(len(got), 5)
        for k, b in enumerate(got):
            want = lines[k % 3]
            msgs = want.get("messages") or [{"role": "user", "content": want["prompt"]}]
            self.assertEqual(b["messages"], msgs)
            self.assertEqual(b["max_tokens"], want.get("max_tokens", 6))
            self.assertEqual(b["model"], MODEL)
            self.assertIs(b["stream"], True)
            self.assertEqual(b["stream_options"], {"include_usage": True})
        # A run: the measured requests are consecutive lines, and their prompt
        # tokens are llmsim's count of each rendered conversation.
        toks = [llmsim.count_tokens(llmsim.render_chat(b["messages"]).encode()) for b in got[:3]]
        outs = [b["max_tokens"] for b in got[:3]]
        st, _, _ = self.run_load(self.url(OK), "--prompts", path, "--max-tokens", "6",
                                 "--concurrency", "1", "--duration", "1.5", "--warmup", "0")
        llm = st["llm"]
        n = llm["requests"]
        self.assertGreaterEqual(n, 4, st)
        self.assertEqual(st["errors"], 0, st)
        windows = [(sum(toks[(s + i) % 3] for i in range(n)), sum(outs[(s + i) % 3] for i in range(n)))
                   for s in range(3)]
        self.assertIn((llm["prompt_tokens"], llm["output_tokens"]), windows, st)

    def test_not_streamed(self):
        st, _, _ = self.run_load(self.url(OK), "--no-stream", "--rate", "10", "--duration", "1.5",
                                 "--warmup", "0.3", "--max-tokens", "8", "--synthetic", "in=20")
        llm = st["llm"]
        self.assert_counts(st, 8)
        # The first token is known only with the whole answer.
        self.assertEqual(llm["ttft_ms"], llm["e2e_ms"], llm)
        self.assertEqual(llm["itl_ms"]["p50"], 0, llm)
        self.assertEqual(llm["tpot_ms"]["p50"], 0, llm)

    def test_completions(self):
        got = self.dry_run("--synthetic", "in=5", "--dry-run", "1", api="completions")
        self.assertIsInstance(got[0]["prompt"], str)
        for stream in ("--stream", "--no-stream"):
            st, _, _ = self.run_load(self.url(OK), stream, "--rate", "10", "--duration", "1",
                                     "--warmup", "0.2", "--max-tokens", "4", "--synthetic",
                                     "in=10", api="completions")
            self.assert_counts(st, 4)

    def test_synthetic_is_deterministic(self):
        spec = "in=40:10,out=16:4,prefixes=3,prefix_len=60"
        a = self.dry_run("--synthetic", spec, "--seed", "7", "--dry-run", "60")
        b = self.dry_run("--synthetic", spec, "--seed", "7", "--dry-run", "60")
        c = self.dry_run("--synthetic", spec, "--seed", "8", "--dry-run", "60")
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)
        prefixes = {r["messages"][0]["content"] for r in a}
        self.assertEqual(len(prefixes), 3)
        for r in a:
            self.assertEqual(r["messages"][0]["role"], "system")
            self.assertEqual(len(r["messages"][0]["content"].split(" ")), 60)
            self.assertGreaterEqual(len(r["messages"][1]["content"].split(" ")), 1)
            self.assertGreaterEqual(r["max_tokens"], 1)
        words = [len(r["messages"][1]["content"].split(" ")) for r in a]
        self.assertAlmostEqual(sum(words) / len(words), 40, delta=6)
        self.assertGreater(len(set(words)), 5)   # drawn, not fixed
        self.assertNotEqual({r["messages"][0]["content"] for r in c}, prefixes)

    def test_shared_prefixes_hit_the_prefix_cache(self):
        ratios = {}
        for ep, spec in ((PREFIX, "in=10,out=4,prefixes=2,prefix_len=300"),
                         (NOPREFIX, "in=60,out=4")):
            q0 = self.sim.metric(ep, "vllm:prefix_cache_queries_total")
            h0 = self.sim.metric(ep, "vllm:prefix_cache_hits_total")
            st, _, _ = self.run_load(self.url(ep), "--synthetic", spec, "--seed", "5", "--rate",
                                     "8", "--duration", "1", "--warmup", "0.2")
            self.assert_counts(st, 4)
            q = self.sim.metric(ep, "vllm:prefix_cache_queries_total") - q0
            h = self.sim.metric(ep, "vllm:prefix_cache_hits_total") - h0
            self.assertGreater(q, 0)
            ratios[ep] = h / q
        # Two 300-word prefixes before 10 words of each request's own: all
        # but the first of each prefix find it cached.
        self.assertGreater(ratios[PREFIX], 0.6, ratios)
        self.assertLess(ratios[NOPREFIX], 0.05, ratios)

    def test_faulty_servers_are_errors_not_crashes(self):
        for ep, stream in ((BAD_SSE, "--stream"), (BAD_SSE, "--no-stream"),
                           (STOP_MID, "--stream"), (STOP_MID, "--no-stream")):
            st, p, wall = self.run_load(self.url(ep), stream, "--rate", "10", "--duration", "1",
                                        "--warmup", "0.2", "--max-tokens", "8",
                                        "--synthetic", "in=10")
            llm = st["llm"]
            what = "%s %s: %s" % (FAULTS[ep], stream, st)
            self.assertEqual(llm["requests"], 0, what)
            self.assertGreater(st["errors"], 0, what)
            # Every error is a broken answer, or a request that crossed the
            # server's close of its idle keep-alive connection (closed_idle:
            # the race every HTTP/1.1 keep-alive close has; once under
            # ThreadSanitizer's slowness, 12 broken and 1 closed_idle).
            self.assertGreater(llm["broken"], 0, what)
            self.assertEqual(llm["broken"] + st["closed_idle"], st["errors"], what)
            self.assertEqual(st["codes"], {}, what)
            self.assertEqual(llm["output_tokens"], 0, what)
            self.assertIn(b"answers broke", p.stderr, what)
            if ep == STOP_MID:
                self.assertEqual(st["lost"], st["errors"], what)   # closed mid-answer
            self.assertLess(wall, 6, what)
        st, _, _ = self.run_load(self.url(E500), "--rate", "10", "--duration", "1", "--warmup",
                                 "0.2", "--synthetic", "in=10")
        self.assertGreater(st["codes"].get("500", 0), 0, st)
        self.assertEqual(st["errors"], 0, st)
        self.assertEqual(st["llm"]["requests"], 0, st)
        # A server that never answers: the step ends --drain-ms after its
        # window, every request an error (here all of them: exit 1, said so).
        _, p, wall = self.run_load(self.url(HANG), "--rate", "10", "--duration", "1", "--warmup",
                                   "0.2", "--drain-ms", "300", "--synthetic", "in=10",
                                   expect_rc=1)
        self.assertIn(b"no answer", p.stderr)
        self.assertLess(wall, 4)

    def test_scripted_timing_split_events_and_key(self):
        Scripted.auth.clear()
        port = self.httpd.server_address[1]
        st, _, _ = self.run_load("http://127.0.0.1:%d/split" % port, "--concurrency", "2",
                                 "--duration", "1.5", "--warmup", "0", "--synthetic", "in=5",
                                 "--api-key", "sk-test", model="scripted")
        llm = st["llm"]
        self.assertEqual(st["errors"], 0, st)
        self.assertGreaterEqual(llm["requests"], 6, st)
        self.assertEqual(llm["output_tokens"], llm["requests"] * Scripted.TOKENS)
        self.assertEqual(llm["prompt_tokens"], llm["requests"] * Scripted.PROMPT)
        # The role-only chunk sent at once is not the first token; each
        # token's event is whole only with its second write.
        ttft, gap = Scripted.FIRST_S * 1000, Scripted.GAP_S * 1000
        self.assertGreater(llm["ttft_ms"]["p50"], ttft - 2, llm)
        self.assertLess(llm["ttft_ms"]["p50"], ttft + 30, llm)
        self.assertGreater(llm["itl_ms"]["p50"], gap - 2, llm)
        self.assertLess(llm["itl_ms"]["p50"], gap + 15, llm)
        self.assertGreater(llm["tpot_ms"]["p50"], gap - 2, llm)
        self.assertLess(llm["tpot_ms"]["p50"], gap + 15, llm)
        self.assertEqual(set(Scripted.auth), {"Bearer sk-test"})
        self.assertEqual(Scripted.bodies[-1]["model"], "scripted")
        # An answer that ends with its connection is whole too.
        st, _, _ = self.run_load("http://127.0.0.1:%d/close" % port, "--concurrency", "1",
                                 "--duration", "1", "--warmup", "0", "--synthetic", "in=5")
        self.assertEqual(st["errors"], 0, st)
        self.assertGreater(st["llm"]["requests"], 3, st)
        self.assertEqual(st["llm"]["output_tokens"], 2 * st["llm"]["requests"], st)

    def test_tokens_per_s_of_a_server_that_falls_behind(self):
        # One answer at a time, 260 ms each (about 3.8/s), asked 10/s for
        # 1 s: the window's 10 answers, 50 tokens, come over about 2.6 s.
        # Over the window alone that read 50 tokens/s and 10 answers/s.
        port = self.httpd.server_address[1]
        st, p, _ = self.run_load("http://127.0.0.1:%d/serial" % port, "--rate", "10",
                                 "--constant", "--duration", "1", "--warmup", "0",
                                 "--synthetic", "in=5", model="scripted")
        llm = st["llm"]
        self.assertEqual((llm["requests"], llm["output_tokens"], st["errors"]), (10, 50, 0), st)
        self.assertLess(llm["output_tokens_per_s"], 25, st)
        self.assertGreater(st["span_s"], 2.2, st)
        self.assertAlmostEqual(llm["output_tokens_per_s"], 50 / st["span_s"], delta=0.01)
        self.assertAlmostEqual(st["throughput"], 10 / st["span_s"], delta=0.01)
        self.assertAlmostEqual(st["achieved_rate"], 10, delta=0.01)   # sent: the asked rate
        # The table's req/s and out tok/s columns are the same numbers.
        row = p.stdout.decode().splitlines()[-1].split()
        self.assertAlmostEqual(float(row[2]), 10 / st["span_s"], delta=0.02, msg=row)
        self.assertAlmostEqual(float(row[3]), 50 / st["span_s"], delta=0.1, msg=row)

    def test_bad_usage(self):
        path = os.path.join(self.tmp, "bad.jsonl")
        with open(path, "w") as f:
            f.write('{"prompt": "fine"}\n{"text": "no prompt"}\n')
        cases = [
            (["--openai", "chat"], b"--model"),
            (["--openai", "chatty", "--model", "m"], b"--openai"),
            (["--openai", "chat", "--model", "m", "--prompts", path, "--synthetic", "in=3"],
             b"not both"),
            (["--openai", "chat", "--model", "m", "--synthetic", "in=0"], b"--synthetic"),
            (["--openai", "chat", "--model", "m", "--synthetic", "prefix_len=3"], b"prefixes"),
            (["--openai", "chat", "--model", "m", "--prompts", path], b"line 2"),
            (["--openai", "chat", "--model", "m", "--prompts", "/nonexistent.jsonl"],
             b"/nonexistent.jsonl"),
            (["--openai", "chat", "--model", "m", "--max-tokens", "0"], b"--max-tokens"),
            (["--openai", "chat", "--model", "m", "--body", path], b"--body"),
            (["--model", "m", "--synthetic", "in=3"], b"--openai"),
            (["--no-stream"], b"--openai"),
        ]
        for args, want in cases:
            p = subprocess.run([LOAD, "--url", self.url(OK)] + args, capture_output=True,
                               timeout=10)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(want, p.stderr, args)


if __name__ == "__main__":
    unittest.main()
