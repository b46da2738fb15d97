"""test_llm_pool.py - an LLM pool (`"backend": "openai"`) in front of simulated
vLLM-like servers (tests/llmsim/llmsim.py, docs/LLMSIM.md): OpenAI's routes
by model name and alias, answers passed through (streamed event by event,
the usage event only to a client that asked), every error in OpenAI's
shape, failing endpoints skipped before the first byte, a broken or cut
stream cut for its client and nothing else, a client that leaves stopping
the server's generation, prefix affinity, shedding of the low priority,
and the pool's metrics. Standard library only; the official `openai`
client and real llama-server replicas are test_llm_real.py's."""

import http.client
import json
import os
import re
import socket
import sys
import threading
import time
import unittest

from harness import (RepoServerCase, Server, endpoint_starting, free_port, roundtrip,
                     seconds_to_stop_after_close)
from test_infer import synthetic, write_model
from test_metrics import check_grouping, parse, value as metric_value

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "llmsim"))
from simproc import Sim  # noqa: E402
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliet", "kilo", "lima", "mike", "november", "oscar", "papa"]


def expected_text(n):
    return " ".join(WORDS[k % 16] for k in range(n))


def digest(key):
    import hashlib
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def pool(name, urls, **kw):
    cfg = {"backend": "openai", "endpoints": urls, "served_model_name": "llmsim"}
    cfg.update(kw)
    return cfg


def chat_body(model, text="hello there", max_tokens=4, stream=False, **kw):
    b = {"model": model, "messages": [{"role": "user", "content": text}],
         "max_tokens": max_tokens, "stream": stream}
    b.update(kw)
    return b


class PoolCase(RepoServerCase):
    sim_endpoints = 2
    sim_args = ("--speed", "20")

    @classmethod
    def setUpClass(cls):
        cls.sim = Sim(cls.sim_endpoints, cls.sim_args)
        try:
            super().setUpClass()
        except BaseException:
            cls.sim.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.sim.stop()

    def post(self, path, body, headers=None, timeout=10):
        c = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=timeout)
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        c.request("POST", path, data, dict({"Content-Type": "application/json"},
                                           **(headers or {})))
        r = c.getresponse()
        raw = r.read()
        c.close()
        return r, raw

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=10)
        c.request("GET", path)
        r = c.getresponse()
        raw = r.read()
        c.close()
        return r, raw

    def events(self, raw):
        """The data of each server-sent event of a stream's bytes."""
        out = []
        for ev in raw.decode().split("\n\n"):
            for line in ev.splitlines():
                if line.startswith("data: "):
                    out.append(line[6:])
        return out

    def gateway_metrics(self):
        r, raw = self.get("/metrics")
        return raw.decode()

    def starting(self, model):
        return endpoint_starting(self.gateway_metrics(), model)

    def assert_nothing_starting(self, model):
        """Every streamed call that ended, however, stopped counting as
        starting (else the picker would see a queue that is not there)."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(self.starting(model)):
            time.sleep(0.02)
        self.assertTrue(self.starting(model))
        self.assertEqual(sum(self.starting(model)), 0)

    def sim_fault_state(self, i):
        """The fault llmsim's endpoint i is in now ("none" once cleared)."""
        c = http.client.HTTPConnection("127.0.0.1", self.sim.ports[i], timeout=5)
        c.request("GET", "/__state")
        state = json.loads(c.getresponse().read())["fault"]
        c.close()
        return state

    def one_slow_scrape(self, i):
        """Endpoint i answers its next scrape 200 ms late; returns once it has."""
        self.sim.fault(i, "slow_metrics", ms=200, count=1)
        deadline = time.monotonic() + 5
        while self.sim_fault_state(i) != "none" and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(self.sim_fault_state(i), "none", "the slow scrape never came")

    def usage_rows(self, group_by, key):
        """Today's rows of GET /v2/usage grouped by `group_by`, as the admin `key`."""
        c = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=5)
        c.request("GET", "/v2/usage?group_by=%s&step=86400" % group_by,
                  headers={"Authorization": "Bearer " + key})
        resp = c.getresponse()
        body = json.loads(resp.read())
        c.close()
        self.assertEqual(resp.status, 200, body)
        return body["rows"]

    def assert_openai_error(self, r, raw, status, param=None):
        self.assertEqual(r.status, status, raw)
        err = json.loads(raw)["error"]
        self.assertIsInstance(err["message"], str)
        self.assertTrue(err["message"])
        self.assertIn("type", err)
        self.assertIn("code", err)
        self.assertEqual(err["param"], param, err)
        return err


class TestPoolRoutes(PoolCase):
    @classmethod
    def populate(cls, repo):
        write_model(repo, "smol", pool("smol", [cls.sim.url(0), cls.sim.url(1)],
                                       aliases=["smol-chat", "s2"], metrics_interval_ms=50))
        write_model(repo, "reload", pool("reload", [cls.sim.url(0), cls.sim.url(1)],
                                         metrics_interval_ms=50))
        write_model(repo, "tensors", synthetic("tensors"))

    def test_models_list_and_retrieve(self):
        r, raw = self.get("/v1/models")
        self.assertEqual(r.status, 200)
        body = json.loads(raw)
        self.assertEqual(body["object"], "list")
        ids = [m["id"] for m in body["data"]]
        self.assertEqual(ids, ["reload", "smol", "smol-chat", "s2", "tensors"])
        for m in body["data"]:
            self.assertEqual(m["object"], "model")
            self.assertIsInstance(m["created"], int)
        r, raw = self.get("/v1/models/s2")
        self.assertEqual(r.status, 200)
        self.assertEqual(json.loads(raw)["id"], "s2")
        r, raw = self.get("/v1/models/nope")
        self.assert_openai_error(r, raw, 404, "model")

    def test_chat_by_name_and_alias(self):
        for name in ("smol", "smol-chat"):
            r, raw = self.post("/v1/chat/completions", chat_body(name, max_tokens=5))
            self.assertEqual(r.status, 200, raw)
            body = json.loads(raw)
            self.assertEqual(body["object"], "chat.completion")
            self.assertEqual(body["choices"][0]["message"]["content"], expected_text(5))
            self.assertEqual(body["usage"]["completion_tokens"], 5)
            # The servers' name went upstream (llmsim answers 404 to another).
            self.assertEqual(body["model"], "llmsim")

    def test_completions_streamed_usage_only_when_asked(self):
        body = {"model": "smol", "prompt": "once upon a time", "max_tokens": 3, "stream": True}
        r, raw = self.post("/v1/completions", body)
        self.assertEqual(r.status, 200, raw)
        self.assertTrue(r.getheader("Content-Type").startswith("text/event-stream"))
        data = self.events(raw)
        self.assertEqual(data[-1], "[DONE]")
        chunks = [json.loads(d) for d in data[:-1]]
        self.assertEqual("".join(c["choices"][0]["text"] for c in chunks if c["choices"]),
                         expected_text(3))
        # batchgate asked the server for usage; the client did not: dropped.
        self.assertFalse([c for c in chunks if "usage" in c and c.get("usage")], chunks)
        body["stream_options"] = {"include_usage": True}
        r, raw = self.post("/v1/completions", body)
        chunks = [json.loads(d) for d in self.events(raw)[:-1]]
        usage = [c for c in chunks if c.get("usage")]
        self.assertEqual(len(usage), 1, chunks)
        self.assertEqual(usage[0]["choices"], [])
        self.assertEqual(usage[0]["usage"]["completion_tokens"], 3)

    def test_chat_streamed_text(self):
        r, raw = self.post("/v1/chat/completions", chat_body("s2", max_tokens=6, stream=True))
        self.assertEqual(r.status, 200)
        chunks = [json.loads(d) for d in self.events(raw)[:-1]]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks
                       if c["choices"])
        self.assertEqual(text, expected_text(6))

    def test_bad_requests_in_openai_shape(self):
        r, raw = self.post("/v1/chat/completions", b"{not json")
        self.assert_openai_error(r, raw, 400)
        r, raw = self.post("/v1/chat/completions", b"[1, 2]")
        self.assert_openai_error(r, raw, 400)
        r, raw = self.post("/v1/chat/completions", {"messages": []})
        self.assert_openai_error(r, raw, 400, "model")
        r, raw = self.post("/v1/chat/completions", {"model": 7, "messages": []})
        self.assert_openai_error(r, raw, 400, "model")
        r, raw = self.post("/v1/chat/completions", chat_body("nope"))
        err = self.assert_openai_error(r, raw, 404, "model")
        self.assertIn("nope", err["message"])
        r, raw = self.post("/v1/completions", {"model": "nope", "prompt": "x"})
        self.assert_openai_error(r, raw, 404, "model")
        # A model that is not a pool: it answers tensors, not chats.
        r, raw = self.post("/v1/chat/completions", chat_body("tensors"))
        err = self.assert_openai_error(r, raw, 400, "model")
        self.assertIn("not an LLM pool", err["message"])
        # Over max_body_bytes: 413 from the head alone, and the pool still serves.
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: %d\r\n\r\n{" % (65 << 20))
        head = s.recv(4096)
        s.close()
        self.assertTrue(head.startswith(b"HTTP/1.1 413"), head)
        # ... in OpenAI's shape too, as the router's 405 (they were
        # {"error": "..."}: answered before any route was chosen).
        err = json.loads(head.split(b"\r\n\r\n", 1)[1])["error"]
        self.assertEqual(err["type"], "invalid_request_error", err)
        r, raw = self.get("/v1/chat/completions")
        err = self.assert_openai_error(r, raw, 405)
        self.assertIn("allowed: POST", err["message"])
        r, raw = self.post("/v1/chat/completions", chat_body("smol"))
        self.assertEqual(r.status, 200)
        # What decides streaming and the token reservation means one thing:
        # a lenient server reads "yes" and "5000" as true and 5000.
        for field, value in (("stream", "yes"), ("stream", 1), ("max_tokens", "5000"),
                             ("max_completion_tokens", 2.5), ("n_predict", "9"),
                             # int64's end wrapped the quota's estimate negative.
                             ("max_tokens", 2 ** 63 - 1), ("n_predict", 2 ** 30 + 1)):
            r, raw = self.post("/v1/chat/completions", chat_body("smol", **{field: value}))
            err = self.assert_openai_error(r, raw, 400, field)
            self.assertIn(field, err["message"])
        # A priority none of the names is: 400, not a silent default.
        r, raw = self.post("/v1/chat/completions", chat_body("smol", service_tier="bogus"))
        self.assert_openai_error(r, raw, 400, "service_tier")
        r, raw = self.post("/v1/chat/completions", chat_body("smol"), {"X-Priority": "5"})
        err = self.assert_openai_error(r, raw, 400)
        self.assertIn("X-Priority", err["message"])
        for ok in ({"service_tier": "scale"}, {"service_tier": "auto"}, {"stream": None},
                   {"max_tokens": None}):
            r, raw = self.post("/v1/chat/completions", chat_body("smol", **ok))
            self.assertEqual(r.status, 200, (ok, raw))

    def test_server_errors_pass_through_in_its_shape(self):
        # The server's own 4xx (here: a request it cannot fit) is its answer.
        r, raw = self.post("/v1/chat/completions", chat_body("smol", max_tokens=10 ** 6))
        self.assertEqual(r.status, 400, raw)
        self.assertIn("error", json.loads(raw))

    def test_unload_and_load_again(self):
        # The IO threads' connections to the old copy's servers are dropped
        # once idle; the new copy's calls get their own (ASan watches).
        r, raw = self.post("/v1/chat/completions", chat_body("reload", max_tokens=2))
        self.assertEqual(r.status, 200, raw)
        r, raw = self.post("/v2/repository/models/reload/unload", {})
        self.assertEqual(r.status, 200, raw)
        # The copy goes once the lifecycle thread has swapped it out.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and self.get("/v2/models/reload/ready")[0].status == 200:
            time.sleep(0.02)
        # A call loads it again, as a request loads an inference model the
        # repository API unloaded (it was 503 for ever: no call loaded a pool).
        r, raw = self.post("/v1/chat/completions", chat_body("reload", max_tokens=2))
        self.assertEqual(r.status, 200, raw)
        self.assertEqual(self.get("/v2/models/reload/ready")[0].status, 200)
        r, raw = self.post("/v2/repository/models/reload/unload", {})
        self.assertEqual(r.status, 200, raw)
        r, raw = self.post("/v2/repository/models/reload/load", {})
        self.assertEqual(r.status, 200, raw)
        for _ in range(4):
            r, raw = self.post("/v1/chat/completions", chat_body("reload", max_tokens=2))
            self.assertEqual(r.status, 200, raw)
            self.assertEqual(json.loads(raw)["choices"][0]["message"]["content"],
                             expected_text(2))

    def test_pool_refuses_tensors(self):
        r, raw = self.post("/v2/models/smol/infer", {"inputs": []})
        self.assertEqual(r.status, 400)
        self.assertIn("/v1/chat/completions", json.loads(raw)["error"])
        # Its metadata is ours: it was proxied to the servers as
        # /v2/models/ (an empty name), which they do not serve.
        for path in ("/v2/models/smol", "/v2/models/smol/versions/1"):
            r, raw = self.get(path)
            self.assertEqual(r.status, 200, (path, raw))
            meta = json.loads(raw)
            self.assertEqual((meta["name"], meta["platform"], meta["inputs"],
                              meta["served_model_name"]),
                             ("smol", "batchgate_llm_pool", [], "llmsim"), meta)

    def test_metrics(self):
        before = self.gateway_metrics()
        r, raw = self.post("/v1/chat/completions", chat_body("smol", max_tokens=4, stream=True))
        self.assertEqual(r.status, 200)
        text = self.gateway_metrics()
        check_grouping(self, text)   # the LLM families beside the models'

        def total(t, name):
            return sum(float(v) for v in re.findall(r"^batchgate_%s\{[^}]*\} (\S+)$" % name, t,
                                                    re.M))
        self.assertEqual(total(text, "llm_time_to_first_token_seconds_count") -
                         total(before, "llm_time_to_first_token_seconds_count"), 1)
        # Four chunks of text: three gaps.
        self.assertEqual(total(text, "llm_inter_token_latency_seconds_count") -
                         total(before, "llm_inter_token_latency_seconds_count"), 3)
        # The tenant's requests count the pool's calls as requests_total
        # does (they were not counted at all).
        tr = r'^batchgate_tenant_requests_total\{tenant="default",model="smol",code="200"\} (\d+)$'
        self.assertEqual(int(re.search(tr, text, re.M).group(1)) -
                         int((re.search(tr, before, re.M) or [0, 0])[1]), 1)
        completion = r'^batchgate_llm_tokens_total\{model="smol",tenant="default",kind="completion"\} (\d+)$'
        self.assertEqual(int(re.search(completion, text, re.M).group(1)) -
                         int((re.search(completion, before, re.M) or [0, 0])[1]), 4)
        # The gauge as the last scrape read it (a call of another test may
        # have been waiting there then: seen under ASan on a loaded machine).
        self.assertRegex(text, r'batchgate_endpoint_waiting\{model="smol",endpoint="%s"\} \d+\n'
                         % re.escape(self.sim.url(0)))
        self.assertRegex(text, r'batchgate_endpoint_kv_cache_usage\{model="smol",endpoint="%s"\}'
                         % re.escape(self.sim.url(1)))
        self.assertRegex(text, r'batchgate_endpoint_up\{model="smol",endpoint="%s"\} 1'
                         % re.escape(self.sim.url(1)))
        self.assertEqual(total(text, "llm_tenant_time_to_first_token_seconds_count") -
                         total(before, "llm_tenant_time_to_first_token_seconds_count"), 1)


class TestPoolLifecycle(PoolCase):
    """A pool is a model like the others for lazy loading and idle unload
    (docs/LLM.md): its calls load it and keep it loaded."""

    @classmethod
    def populate(cls, repo):
        write_model(repo, "lazypool", pool("lazypool", [cls.sim.url(0)], metrics_interval_ms=50,
                                           lifecycle={"load": "lazy"}))
        write_model(repo, "idlepool", pool("idlepool", [cls.sim.url(1)], metrics_interval_ms=50,
                                           lifecycle={"idle_unload_s": 1}))
        # A field a pool does not take: refused at load.
        write_model(repo, "badpool", pool("badpool", [cls.sim.url(0)], instances={"count": 2},
                                          lifecycle={"load": "lazy"}))

    def state(self, name):
        r, raw = self.post("/v2/repository/index", {})
        self.assertEqual(r.status, 200, raw)
        return {row["name"]: row for row in json.loads(raw)}[name]["state"]

    def idle_unloads(self, name):
        return metric_value(parse(self.gateway_metrics()), "batchgate_model_unloads_total",
                     model=name, reason="idle")

    def test_a_call_loads_a_lazy_pool(self):
        # It was 503 "the first request loads it" for ever: no call loaded
        # a pool. The call now waits for the load, as an inference does.
        self.assertEqual(self.state("lazypool"), "UNAVAILABLE")
        r, raw = self.post("/v1/chat/completions", chat_body("lazypool"))
        self.assertEqual(r.status, 200, raw)
        self.assertTrue(json.loads(raw)["choices"][0]["message"]["content"])
        self.assertEqual(self.state("lazypool"), "READY")

    def test_a_stream_longer_than_idle_unload_s_keeps_its_pool(self):
        # A call is use until it ends: counted from its start alone, a
        # stream longer than idle_unload_s left its pool unloaded at once
        # after it (idle since the call began).
        r, raw = self.post("/v1/chat/completions", chat_body("idlepool"))   # loaded now
        self.assertEqual(r.status, 200, raw)
        before = self.idle_unloads("idlepool")
        t0 = time.monotonic()
        r, raw = self.post("/v1/chat/completions",
                           chat_body("idlepool", max_tokens=2400, stream=True), timeout=30)
        took = time.monotonic() - t0
        self.assertEqual(r.status, 200, raw)
        self.assertEqual(self.events(raw)[-1], "[DONE]")
        self.assertGreater(took, 1.5, "the stream must outlast idle_unload_s (1 s)")
        time.sleep(0.5)   # five of the lifecycle's looks for idle models
        self.assertEqual(self.state("idlepool"), "READY")
        self.assertEqual(self.idle_unloads("idlepool"), before)

    def test_a_pool_whose_config_was_refused_says_why(self):
        # It said "model badpool is not an LLM pool (it answers
        # /v2/models/badpool/infer)": what a refused config.json is, is
        # not known.
        r, raw = self.post("/v1/chat/completions", chat_body("badpool"))
        err = self.assert_openai_error(r, raw, 503)
        self.assertIn("model badpool is not ready", err["message"])
        self.assertIn("instances", err["message"])

    def test_calls_keep_a_pool_loaded_and_load_it_again(self):
        # Calls never counted as use: a pool with idle_unload_s 1 was
        # unloaded a second after its load under steady traffic, and then
        # stayed unloaded (503).
        before = self.idle_unloads("idlepool")
        for _ in range(12):   # one call every 0.25 s for 3 s
            r, raw = self.post("/v1/chat/completions", chat_body("idlepool"))
            self.assertEqual(r.status, 200, raw)
            time.sleep(0.25)
        self.assertEqual(self.idle_unloads("idlepool"), before)
        deadline = time.monotonic() + 10   # idle now: unloaded
        while self.state("idlepool") == "READY":
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.1)
        self.assertEqual(self.idle_unloads("idlepool"), before + 1)
        r, raw = self.post("/v1/chat/completions", chat_body("idlepool", stream=True))
        self.assertEqual(r.status, 200, raw)
        self.assertEqual(self.events(raw)[-1], "[DONE]")


class TestPoolNames(RepoServerCase):
    """A name reaches one model: an alias that is another model's name or
    alias, or a model named like another pool's alias, is refused at load
    (it once went to one or the other by load order, silently)."""

    @classmethod
    def populate(cls, repo):
        cls.dead = "http://127.0.0.1:%d" % free_port()   # the pools are never called
        write_model(repo, "p1", pool("p1", [cls.dead], aliases=["a1"], metrics_interval_ms=0))

    def load(self, name, cfg):
        write_model(self.repo, name, cfg)
        r = roundtrip(self.srv.port, "POST", "/v2/repository/models/%s/load" % name,
                      [("Content-Type", "application/json")], "{}", timeout=10)
        return r.status, r.json()

    def test_a_name_reaches_one_model(self):
        status, body = self.load("clash", pool("clash", [self.dead], aliases=["a1"],
                                               metrics_interval_ms=0))
        self.assertEqual(status, 400, body)
        self.assertIn('aliases[0]: \"a1\" is already a name of model p1', body["error"])
        status, body = self.load("clash2", pool("clash2", [self.dead], aliases=["x", "p1"],
                                                metrics_interval_ms=0))
        self.assertEqual(status, 400, body)
        self.assertIn('aliases[1]: \"p1\" is already a name of model p1', body["error"])
        status, body = self.load("a1", synthetic("a1"))
        self.assertEqual(status, 400, body)
        self.assertIn("model a1: its name is an alias of pool p1", body["error"])
        # Distinct names load.
        status, body = self.load("fine", pool("fine", [self.dead], aliases=["a2"],
                                              metrics_interval_ms=0))
        self.assertEqual(status, 200, body)
        ids = [m["id"] for m in roundtrip(self.srv.port, "GET", "/v1/models").json()["data"]]
        self.assertEqual(ids.count("a1"), 1, ids)
        self.assertIn("a2", ids)


class TestPoolFailures(PoolCase):
    sim_endpoints = 3

    @classmethod
    def populate(cls, repo):
        cls.dead = "http://127.0.0.1:%d" % free_port()
        write_model(repo, "smol", pool("smol", [cls.sim.url(0), cls.sim.url(1), cls.sim.url(2)],
                                       metrics_interval_ms=0, timeout_ms=1500,
                                       picker={"policy": "round_robin"}))
        # Its own targets (health is per model): only its test makes them fail.
        write_model(repo, "allfail", pool("allfail", [cls.sim.url(i) for i in range(3)],
                                          metrics_interval_ms=0))
        write_model(repo, "watched", pool("watched", [cls.sim.url(i) for i in range(3)],
                                          metrics_interval_ms=50,
                                          picker={"policy": "round_robin"}))
        write_model(repo, "dead", pool("dead", [cls.dead, cls.sim.url(2)],
                                       metrics_interval_ms=0, picker={"policy": "round_robin"}))
        write_model(repo, "scored", pool("scored", [cls.sim.url(i) for i in range(3)],
                                         metrics_interval_ms=50))

    def setUp(self):
        super().setUp()
        for i in range(3):
            self.sim.fault(i, "none")

    def tearDown(self):
        self.assert_nothing_starting("smol")
        super().tearDown()

    def test_a_stream_counts_as_starting_until_its_first_content(self):
        for i in range(3):
            self.sim.fault(i, "hang")
        got = []
        t = threading.Thread(target=lambda: got.append(
            self.read_stream(chat_body("smol", max_tokens=2, stream=True))))
        t.start()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and sum(self.starting("smol")) != 1:
            time.sleep(0.02)
        self.assertEqual(sum(self.starting("smol")), 1)
        t.join(20)
        self.assertIn(b" 504 ", got[0][0].split(b"\r\n")[0])
        # tearDown: back to 0 once the call gave up.

    def test_refused_endpoint_is_skipped(self):
        for _ in range(4):
            r, raw = self.post("/v1/chat/completions", chat_body("dead", max_tokens=2))
            self.assertEqual(r.status, 200, raw)
            self.assertEqual(r.getheader("X-Batchgate-Endpoint"), "1")
        self.assert_nothing_starting("dead")

    def test_5xx_before_the_first_byte_tries_another(self):
        # A 404 too: the pool's model may not be on that endpoint (its 404
        # came in a millisecond, it looked idle to the picker, and the 404
        # was passed on to the client). Once another endpoint answered the
        # request, the 404 is its endpoint's failure: 3 take it out, logged
        # (unblamed, it was tried first by every other call, unseen).
        out = re.compile(r"model smol: upstream %s is taken out for 2 s \(3 failed calls in a "
                         r"row, the last: status\)" % re.escape(self.sim.url(0)))
        before = len(out.findall(self.srv.log()))
        for fault in ("404", "500"):
            self.sim.fault(0, fault)
            seen = set()
            for _ in range(9):
                r, raw = self.post("/v1/chat/completions", chat_body("smol", max_tokens=2))
                self.assertEqual(r.status, 200, (fault, raw))
                seen.add(r.getheader("X-Batchgate-Endpoint"))
            self.assertNotIn("0", seen, fault)
            if fault == "404":
                self.assertEqual(len(out.findall(self.srv.log())), before + 1, self.srv.log())
                time.sleep(2.1)   # back in, for the 5xx round

    def test_a_clients_own_404_takes_no_endpoint_out(self):
        # What no endpoint serves (llmsim has no /v1/embeddings) is the
        # request's 404: passed on, each endpoint tried once at most, and
        # blamed, the client's 404s took every endpoint out (the re-test:
        # 15 of them and chat was 503 "no endpoint is usable").
        out = re.compile(r"model smol: upstream \S+ is taken out")
        before = len(out.findall(self.srv.log()))
        for _ in range(12):
            r, raw = self.post("/v1/embeddings", {"model": "smol", "input": "hi"})
            self.assertEqual(r.status, 404, raw)
            self.assertIn("no route", raw.decode())
        time.sleep(0.2)
        self.assertEqual(len(out.findall(self.srv.log())), before, self.srv.log())
        for _ in range(6):
            r, raw = self.post("/v1/chat/completions", chat_body("smol", max_tokens=2))
            self.assertEqual(r.status, 200, raw)

    def test_every_endpoint_failing_is_the_servers_answer(self):
        for i in range(3):
            self.sim.fault(i, "500")
        # Each endpoint tried once (tries: 3); the last one's answer is the client's.
        r, raw = self.post("/v1/chat/completions", chat_body("allfail", max_tokens=2))
        self.assertEqual(r.status, 500, raw)
        self.assertEqual(r.getheader("X-Batchgate-Endpoint") is not None, True)
        # Now each has failed and is out for a while: nothing left to try.
        for _ in range(3):
            r, raw = self.post("/v1/chat/completions", chat_body("allfail", max_tokens=2))
        err = self.assert_openai_error(r, raw, 503 if r.status == 503 else 502)
        self.assertRegex(err["message"], r"answered 500|no endpoint is usable")

    def read_stream(self, body):
        """The stream's bytes as the client got them, and whether it was complete."""
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        data = json.dumps(body).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                  b"application/json\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
        buf = b""
        while True:
            try:
                d = s.recv(65536)
            except socket.timeout:
                break
            if not d:
                break
            buf += d
            if buf.endswith(b"\r\n0\r\n\r\n"):
                break
        s.close()
        return buf, buf.endswith(b"\r\n0\r\n\r\n")

    def test_stop_mid_stream_cuts_the_clients_answer(self):
        for i in range(3):
            self.sim.fault(i, "stop_mid")
        buf, complete = self.read_stream(chat_body("smol", max_tokens=8, stream=True))
        self.assertIn(b"200 OK", buf.split(b"\r\n")[0])
        self.assertFalse(complete, "a cut stream must not look complete")
        self.assertNotIn(b"[DONE]", buf)
        for i in range(3):
            self.sim.fault(i, "none")
        r, raw = self.post("/v1/chat/completions", chat_body("smol"))
        self.assertEqual(r.status, 200)

    def test_broken_sse_reaches_the_client_as_sent(self):
        for i in range(3):
            self.sim.fault(i, "bad_sse")
        buf, complete = self.read_stream(chat_body("smol", max_tokens=4, stream=True))
        self.assertIn(b"200 OK", buf.split(b"\r\n")[0])
        self.assertNotIn(b"[DONE]", buf)
        for i in range(3):
            self.sim.fault(i, "none")
        r, raw = self.post("/v1/chat/completions", chat_body("smol", stream=True))
        self.assertEqual(r.status, 200)
        self.assertIn(b"[DONE]", raw)

    def test_hang_is_a_504(self):
        def prompt_tokens():
            m = re.search(r'batchgate_llm_tokens_total\{model="smol",tenant="default",'
                          r'kind="prompt"\} (\d+)', self.gateway_metrics())
            return int(m.group(1)) if m else 0
        before = prompt_tokens()
        for i in range(3):
            self.sim.fault(i, "hang")
        t0 = time.monotonic()
        r, raw = self.post("/v1/chat/completions", chat_body("smol", "x" * 400))
        self.assertEqual(r.status, 504, raw)
        # One timeout_ms (1.5 s), not one per endpoint: a timed-out call
        # is not tried elsewhere (it took 4.5 s over the three).
        self.assertLess(time.monotonic() - t0, 2.8)
        self.assertEqual(json.loads(raw)["error"]["type"], "server_error")
        # The server read the prompt and may be generating still: its
        # estimate (bytes / 4) counts, as for a client that left. It was free.
        self.assertGreaterEqual(prompt_tokens() - before, 100)

    def test_endpoint_that_stops_reporting_is_taken_out_and_comes_back(self):
        self.sim.fault(1, "no_metrics")
        try:
            up = r'batchgate_endpoint_up\{model="watched",endpoint="%s"\} (\d)' % re.escape(
                self.sim.url(1))
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                if re.search(up, self.gateway_metrics()).group(1) == "0":
                    break
                time.sleep(0.05)
            self.assertEqual(re.search(up, self.gateway_metrics()).group(1), "0")
            for _ in range(6):
                r, raw = self.post("/v1/chat/completions", chat_body("watched", max_tokens=1))
                self.assertEqual(r.status, 200, raw)
                self.assertNotEqual(r.getheader("X-Batchgate-Endpoint"), "1")
        finally:
            self.sim.fault(1, "none")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if re.search(up, self.gateway_metrics()).group(1) == "1":
                break
            time.sleep(0.05)
        self.assertEqual(re.search(up, self.gateway_metrics()).group(1), "1")
        seen = set()
        for _ in range(6):
            r, raw = self.post("/v1/chat/completions", chat_body("watched", max_tokens=1))
            seen.add(r.getheader("X-Batchgate-Endpoint"))
        self.assertIn("1", seen)

    def test_slow_scrapes_take_an_endpoint_out_only_three_in_a_row(self):
        # One scrape answered after the next tick (200 ms against 50) is a
        # failed probe, not yet a reason to take the endpoint out.
        url = re.escape(self.sim.url(1))
        out = r"model watched: upstream %s is taken out" % url
        start = len(self.srv.log_lines())
        since = lambda: "\n".join(self.srv.log_lines()[start:])  # noqa: E731
        self.one_slow_scrape(1)
        time.sleep(0.5)   # the slow answer's tick and a few good scrapes after it
        self.assertNotRegex(since(), out)
        # Three in a row: out, and back at the next good scrape; a server
        # whose counters went on (not restarted) keeps its prefix blocks.
        # (Two pools scrape it: 12 slow answers are at least 3 in a row each.)
        self.sim.fault(1, "slow_metrics", ms=200, count=12)
        for m in ("watched", "scored"):
            self.srv.wait_log(r"model %s: upstream %s is taken out \(health probe: no answer in "
                              r"time, 3 in a row\)" % (m, url))
            self.srv.wait_log(r"model %s: upstream %s is back" % (m, url))
        time.sleep(0.2)
        self.assertNotRegex(since(), r"model scored: endpoint .* may have restarted")

    def test_a_restarted_endpoint_is_forgotten_by_the_picker(self):
        r, raw = self.post("/v1/chat/completions", chat_body("scored", max_tokens=2))
        self.assertEqual(r.status, 200, raw)
        e = int(r.getheader("X-Batchgate-Endpoint"))
        start = len(self.srv.log_lines())
        time.sleep(0.3)   # scrapes that saw its prompt tokens
        self.sim.restart(e)
        self.srv.wait_log(r"model scored: endpoint %s may have restarted \(its prompt token "
                          r"counter went back\)" % re.escape(self.sim.url(e)))
        # No probe failed: it never left the rotation.
        self.assertNotRegex("\n".join(self.srv.log_lines()[start:]),
                            r"model scored: upstream %s is taken out" % re.escape(self.sim.url(e)))

    def completion_tokens(self):
        m = re.search(r'batchgate_llm_tokens_total\{model="smol",tenant="default",'
                      r'kind="completion"\} (\d+)', self.gateway_metrics())
        return int(m.group(1)) if m else 0

    def test_client_leaving_stops_the_generation(self):
        tokens0 = self.completion_tokens()
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        data = json.dumps(chat_body("smol", max_tokens=2000, stream=True)).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                  % len(data) + data)
        buf = b""
        while buf.count(b"data: ") < 3:
            buf += s.recv(65536)
        ep = int(re.search(rb"X-Batchgate-Endpoint: (\d+)", buf).group(1))
        before = self.sim.metrics(ep)
        self.assertEqual(before["vllm:num_requests_running"], 1)
        s.close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            m = self.sim.metrics(ep)
            if m["vllm:num_requests_running"] == 0:
                break
            time.sleep(0.02)
        self.assertEqual(m["vllm:num_requests_running"], 0)
        self.assertEqual(m["llmsim:requests_aborted_total"] -
                         before["llmsim:requests_aborted_total"], 1)
        self.assertLess(m["vllm:generation_tokens_total"], 2000)
        # What it streamed before leaving still counts (chunks, no usage came).
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and self.completion_tokens() - tokens0 < 3:
            time.sleep(0.02)
        self.assertGreaterEqual(self.completion_tokens() - tokens0, 3)


    def test_client_closing_before_the_answer_stops_the_generation(self):
        """A client that closes normally (a FIN, as clients do on their own
        timeout) before any of the answer came: the call is aborted at once,
        not run on until timeout_ms and blamed on the endpoint."""
        eps = range(self.sim_endpoints)
        before = [self.sim.metrics(e) for e in eps]
        text0 = self.gateway_metrics()
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        self.addCleanup(s.close)
        data = json.dumps(chat_body("smol", max_tokens=2000)).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                  % len(data) + data)
        running = lambda: sum(self.sim.metrics(e)["vllm:num_requests_running"] for e in eps)
        self.assertLess(seconds_to_stop_after_close(self, s, running), 0.5,
                        "not at timeout_ms (1.5 s)")
        after = [self.sim.metrics(e) for e in eps]
        self.assertEqual(sum(a["llmsim:requests_aborted_total"] - b["llmsim:requests_aborted_total"]
                             for a, b in zip(after, before)), 1)
        code = r'batchgate_requests_total\{model="smol",code="%s"\} (\d+)'
        n = lambda text, c: int((re.search(code % c, text) or [0, 0])[1])
        deadline = time.monotonic() + 3
        # 499 (the client left first) counts as "other" (docs/METRICS.md).
        while n(self.gateway_metrics(), "other") == n(text0, "other") and \
                time.monotonic() < deadline:
            time.sleep(0.02)
        text = self.gateway_metrics()
        self.assertEqual(n(text, "other") - n(text0, "other"), 1, "the client left first")
        self.assertEqual(n(text, "504"), n(text0, "504"), "no timeout")
        # The endpoint is not blamed for it: no failure counted.
        fails = lambda t: sum(int(x) for x in re.findall(
            r'^batchgate_upstream_failures_total\{model="smol",[^}]*\} (\d+)', t, re.M))
        self.assertEqual(fails(text), fails(text0))


class TestPoolProbesWithoutCounter(PoolCase):
    """Servers that report no prompt-token counter: batchgate cannot tell a
    restart from its metrics, so an endpoint taken out and back is
    forgotten by the picker (it may have restarted unseen), while one
    that was only slow once is not."""
    sim_endpoints = 2
    sim_args = ("--speed", "20", "--no-prompt-counter")

    @classmethod
    def populate(cls, repo):
        write_model(repo, "scored", pool("scored", [cls.sim.url(i) for i in range(2)],
                                         metrics_interval_ms=50))

    def test_back_after_being_taken_out_is_forgotten(self):
        r, raw = self.post("/v1/chat/completions", chat_body("scored", max_tokens=2))
        self.assertEqual(r.status, 200, raw)
        url = re.escape(self.sim.url(1))
        start = len(self.srv.log_lines())
        since = lambda: "\n".join(self.srv.log_lines()[start:])  # noqa: E731
        self.one_slow_scrape(1)
        time.sleep(0.5)
        self.assertNotRegex(since(), r"model scored: endpoint %s may have restarted" % url)
        self.sim.fault(1, "slow_metrics", ms=200, count=12)
        self.srv.wait_log(r"model scored: upstream %s is taken out" % url)
        self.srv.wait_log(r"model scored: endpoint %s may have restarted \(back after being "
                          r"taken out\)" % url)


class TestPoolPicking(PoolCase):
    sim_endpoints = 3

    @classmethod
    def populate(cls, repo):
        urls = [cls.sim.url(i) for i in range(3)]
        write_model(repo, "score", pool("score", urls, metrics_interval_ms=50))
        write_model(repo, "rr", pool("rr", urls, metrics_interval_ms=50,
                                     picker={"policy": "round_robin"}))

    def test_shared_prefix_returns_to_its_endpoint(self):
        prefixes = ["%s " % w * 200 for w in ("lorem", "ipsum", "dolor")]
        where = {}
        for rnd in range(3):
            for k, p in enumerate(prefixes):
                r, raw = self.post("/v1/chat/completions",
                                   {"model": "score", "max_tokens": 2, "messages": [
                                       {"role": "system", "content": p},
                                       {"role": "user", "content": "question %d" % rnd}]})
                self.assertEqual(r.status, 200, raw)
                where.setdefault(k, set()).add(r.getheader("X-Batchgate-Endpoint"))
        for k, eps in where.items():
            self.assertEqual(len(eps), 1, where)
        # Three prefixes on an idle pool of three: not all on one endpoint.
        self.assertGreater(len(set().union(*where.values())), 1, where)

    def test_round_robin_ignores_prefixes(self):
        seen = []
        for _ in range(6):
            r, raw = self.post("/v1/chat/completions", chat_body("rr", "same " * 100,
                                                                 max_tokens=1))
            seen.append(r.getheader("X-Batchgate-Endpoint"))
        self.assertEqual(len(set(seen)), 3, seen)


class TestPoolSlots(PoolCase):
    """`picker.slots` reaches the picker (it was described, never set: no
    pool knew a server's slots). With no scrape, a prompt's holder with 6
    calls in flight: without slots those 6 are a queue (lq 0.75) that
    outweighs the prefix it holds, and the next call with that prefix goes
    to the idle endpoint; with 8 slots they run in free slots (lk 0.375,
    no queue) and the holder keeps the prefix."""
    sim_args = ("--speed", "2", "--kv-blocks", "4096")

    @classmethod
    def populate(cls, repo):
        urls = [cls.sim.url(i) for i in range(2)]
        write_model(repo, "noslots", pool("noslots", urls, metrics_interval_ms=0))
        write_model(repo, "slots8", pool("slots8", urls, metrics_interval_ms=0,
                                         picker={"slots": 8}))

    def test_slots_keep_a_busy_holder_its_prefix(self):
        prompt = "lorem " * 200
        where = {}
        for model in ("noslots", "slots8"):
            r, raw = self.post("/v1/chat/completions", chat_body(model, prompt, max_tokens=1))
            self.assertEqual(r.status, 200, raw)
            holder = r.getheader("X-Batchgate-Endpoint")
            slow = []
            for _ in range(6):   # each picked with the ones before in flight
                t = threading.Thread(target=self.post, args=(
                    "/v1/chat/completions", chat_body(model, prompt, max_tokens=300)),
                    kwargs={"timeout": 60})
                t.start()
                slow.append(t)
                time.sleep(0.15)
            r, raw = self.post("/v1/chat/completions", chat_body(model, prompt, max_tokens=1))
            self.assertEqual(r.status, 200, raw)
            where[model] = (holder, r.getheader("X-Batchgate-Endpoint"))
            for t in slow:
                t.join(60)
        self.assertNotEqual(where["noslots"][0], where["noslots"][1], where)
        self.assertEqual(where["slots8"][0], where["slots8"][1], where)


class TestPoolShedding(PoolCase):
    sim_endpoints = 1
    # One sequence at a time, slow: a queue forms at once.
    sim_args = ("--max-num-seqs", "1", "--decode-step-s", "0.05")
    config = {"auth": {"required": False},
              "tenants": [{"name": "nightly", "keys": [digest("k-nightly")],
                           "llm_priority": "flex"}]}

    @classmethod
    def populate(cls, repo):
        write_model(repo, "smol", pool("smol", [cls.sim.url(0)], metrics_interval_ms=20,
                                       saturation={"waiting": 1}))

    def test_flex_is_shed_priority_never(self):
        import threading
        results = []

        def bg():
            r, raw = self.post("/v1/chat/completions", chat_body("smol", max_tokens=40),
                               timeout=30)
            results.append(r.status)
        threads = [threading.Thread(target=bg) for _ in range(3)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and self.sim.metrics(0)["vllm:num_requests_waiting"] < 1:
            time.sleep(0.01)
        time.sleep(0.1)   # a scrape sees it
        r, raw = self.post("/v1/chat/completions", chat_body("smol", service_tier="flex"))
        self.assert_openai_error(r, raw, 429)
        self.assertTrue(r.getheader("Retry-After"))
        r, raw = self.post("/v1/chat/completions", chat_body("smol", max_tokens=1),
                           headers={"X-Priority": "low"})
        self.assertEqual(r.status, 429)
        # A tenant whose calls are flex by default; its own header still wins.
        r, raw = self.post("/v1/chat/completions", chat_body("smol", max_tokens=1),
                           headers={"Authorization": "Bearer k-nightly"})
        self.assertEqual(r.status, 429, raw)
        r, raw = self.post("/v1/chat/completions", chat_body("smol", max_tokens=1,
                                                             service_tier="priority"), timeout=30)
        self.assertEqual(r.status, 200, raw)
        for t in threads:
            t.join()
        self.assertEqual(results, [200, 200, 200])
        text = self.gateway_metrics()
        self.assertRegex(text, r'batchgate_llm_shed_total\{model="smol",priority="flex"\} 3')
        self.assertRegex(text, r'batchgate_llm_shed_total\{model="smol",priority="priority"\} 0')


class TestPoolTenants(PoolCase):
    """Tokens per tenant: quotas (429 with Retry-After; a day's with
    x-should-retry: false), tenants' model globs, and the token counts."""
    sim_endpoints = 1
    config = {
        "tenants": [
            {"name": "minute", "keys": [digest("k-minute")], "tokens_per_minute": 200},
            {"name": "daily", "keys": [digest("k-daily")], "tokens_per_day": 100},
            {"name": "other", "keys": [digest("k-other")], "models": ["notsmol"]},
            {"name": "few", "keys": [digest("k-few")], "max_inflight": 1},
            {"name": "ops", "keys": [digest("k-ops")], "admin": True},
            {"name": "ledger", "keys": [digest("k-ledger")]},
            {"name": "liar", "keys": [digest("k-liar")], "tokens_per_minute": 200},
            {"name": "choices", "keys": [digest("k-choices")], "tokens_per_minute": 1000},
            {"name": "capped", "keys": [digest("k-capped")], "tokens_per_minute": 100000},
            {"name": "uncapped", "keys": [digest("k-uncapped")]},
        ],
        "usage": {"flush_s": 1},
    }

    @classmethod
    def populate(cls, repo):
        write_model(repo, "smol", pool("smol", [cls.sim.url(0)], metrics_interval_ms=0))
        write_model(repo, "tensors", synthetic("tensors"))

    def test_the_estimate_counts_every_choice_and_prompt(self):
        # n choices (and best_of candidates) are each generated, and a list
        # of prompts is as many: the estimate counted one (an n of 16 was
        # reserved as 55 tokens, and 8 such calls passed a quota of 1000
        # six times over).
        h = {"Authorization": "Bearer k-choices"}
        r, raw = self.post("/v1/chat/completions", chat_body("smol", "hi", max_tokens=50),
                           headers=h)
        self.assertEqual(r.status, 200, raw)
        for path, body, est in (
                ("/v1/chat/completions", chat_body("smol", "hi", max_tokens=50, n=20), 1005),
                ("/v1/completions", {"model": "smol", "prompt": "hi", "max_tokens": 50,
                                     "best_of": 20}, 1001),
                ("/v1/completions", {"model": "smol", "prompt": ["a", "b", "c"],
                                     "max_tokens": 200, "n": 2}, 1201),
                ("/v1/completions", {"model": "smol", "prompt": [[1, 2, 3], [4, 5, 6, 7]],
                                     "max_tokens": 500}, 1007)):
            r, raw = self.post(path, body, headers=h)
            err = self.assert_openai_error(r, raw, 429)
            self.assertIn("estimate of %d " % est, err["message"], body)
        for field in ("n", "best_of"):
            r, raw = self.post("/v1/completions", {"model": "smol", "prompt": "hi",
                                                   field: 129}, headers=h)
            err = self.assert_openai_error(r, raw, 400, field)
            self.assertIn("more than 128", err["message"])
            r, raw = self.post("/v1/completions", {"model": "smol", "prompt": "hi",
                                                   field: "2"}, headers=h)
            self.assert_openai_error(r, raw, 400, field)

    def chat(self, key, max_tokens=10, text="hi"):
        return self.post("/v1/chat/completions", chat_body("smol", text, max_tokens=max_tokens),
                         headers={"Authorization": "Bearer " + key})

    def test_tokens_per_minute(self):
        # Each call: estimate (2 + 16) / 4 + 50 = 54 tokens; llmsim uses 50 + prompt.
        codes = [self.chat("k-minute", 50)[0].status for _ in range(5)]
        self.assertEqual(codes[:3], [200, 200, 200], codes)
        r, raw = self.chat("k-minute", 50)
        err = self.assert_openai_error(r, raw, 429)
        self.assertIn("tokens_per_minute", err["message"])
        self.assertEqual(err["code"], "rate_limit_exceeded")
        self.assertTrue(1 <= int(r.getheader("Retry-After")) <= 60)
        self.assertIsNone(r.getheader("x-should-retry"))
        text = self.gateway_metrics()
        m = re.search(r'batchgate_llm_tokens_total\{model="smol",tenant="minute",kind="completion"\} (\d+)', text)
        self.assertEqual(int(m.group(1)), 50 * codes.count(200))
        # The window's count and the quota on /metrics, for this tenant's one quota.
        used = re.findall(r'batchgate_tenant_quota_tokens_used\{tenant="minute",window="(\w+)"\} (\d+)',
                          text)
        self.assertEqual([w for w, _ in used], ["minute"])
        self.assertGreaterEqual(int(used[0][1]), 50 * codes.count(200))
        self.assertLessEqual(int(used[0][1]), 200)
        self.assertIn('batchgate_tenant_quota_tokens{tenant="minute",window="minute"} 200', text)
        self.assertIn('batchgate_tenant_quota_tokens{tenant="daily",window="day"} 100', text)

    def test_a_call_without_a_cap_is_sent_with_what_it_reserved(self):
        # A tenant with a token quota: a call naming no max_tokens reserved
        # 256 and the server generated to its own end (helper's audit: 5,000
        # each, 15 times the quota in a minute). It is sent with the 256 it
        # reserved; llmsim's own default (16) shows where none was sent.
        body = {"model": "smol", "messages": [{"role": "user", "content": "hi"}]}
        for key, want in (("k-capped", 256), ("k-uncapped", 16)):
            r, raw = self.post("/v1/chat/completions", body,
                               headers={"Authorization": "Bearer " + key})
            self.assertEqual(r.status, 200, raw)
            self.assertEqual(json.loads(raw)["usage"]["completion_tokens"], want, key)
        # A cap of its own is left as it is.
        r, raw = self.post("/v1/chat/completions", dict(body, max_completion_tokens=5),
                           headers={"Authorization": "Bearer k-capped"})
        self.assertEqual(json.loads(raw)["usage"]["completion_tokens"], 5, raw)
        # A cap that is none (null; llama-server's n_predict -1, no end)
        # was taken for one: sent on, the server generated without end.
        for extra in ({"max_tokens": None}, {"max_completion_tokens": None},
                      {"n_predict": -1}, {"max_tokens": 0}):
            r, raw = self.post("/v1/chat/completions", dict(body, **extra),
                               headers={"Authorization": "Bearer k-capped"})
            self.assertEqual(r.status, 200, (extra, raw))
            self.assertEqual(json.loads(raw)["usage"]["completion_tokens"], 256, extra)

    def test_a_server_lying_about_usage_gives_no_quota_back(self):
        # usage says -100000 prompt and 2^63-1 completion tokens: a negative
        # count handed the tenant quota back (10 calls of 50 passed a quota
        # of 200), the huge one overflowed the sum. Not believed: each call
        # counts its reservation (prompt estimate + max_tokens).
        self.sim.fault(0, "bad_usage")
        try:
            codes = [self.chat("k-liar", 50)[0].status for _ in range(5)]
        finally:
            self.sim.fault(0, "none")
        self.assertEqual(codes, [200, 200, 200, 429, 429], codes)
        text = self.gateway_metrics()
        used = re.search(r'batchgate_tenant_quota_tokens_used\{tenant="liar",window="minute"\} '
                         r'(-?\d+)', text)
        self.assertTrue(150 <= int(used.group(1)) <= 200, used.group(0))

    def test_usage_ledger_counts_tokens_by_tenant_and_endpoint(self):
        r, raw = self.chat("k-ledger", 7)
        self.assertEqual(r.status, 200)
        usage = json.loads(raw)["usage"]
        deadline = time.monotonic() + 10
        rows = []
        while time.monotonic() < deadline:
            rows = [x for x in self.usage_rows("tenant,model,device", "k-ops")
                    if x["tenant"] == "ledger" and x["model"] == "smol"]
            if rows and sum(x["requests"] for x in rows) >= 1:
                break
            time.sleep(0.3)
        # A pool's rows are tokens; its device, the endpoint the call went to.
        self.assertEqual(sum(x["requests"] for x in rows), 1, rows)
        self.assertEqual(sum(x["rows"] for x in rows), usage["total_tokens"], rows)
        self.assertEqual({x["device"] for x in rows}, {self.sim.url(0)}, rows)
        self.assertGreater(sum(x["busy_seconds"] for x in rows), 0)

    def test_tokens_per_day(self):
        r, raw = self.chat("k-daily", 60)
        self.assertEqual(r.status, 200, raw)
        r, raw = self.chat("k-daily", 60)
        err = self.assert_openai_error(r, raw, 429)
        self.assertIn("tokens_per_day", err["message"])
        self.assertEqual(r.getheader("x-should-retry"), "false")
        self.assertGreaterEqual(int(r.getheader("Retry-After")), 1)

    def test_model_globs(self):
        r, raw = self.chat("k-other")
        self.assert_openai_error(r, raw, 403)
        # A model outside the tenant's globs is 403 whatever it is, and
        # whether it exists: "not an LLM pool" (400) and "does not exist"
        # (404) told another tenant's models apart.
        # TF Serving's metadata: a pool has no signature (400, said so).
        r = roundtrip(self.srv.port, "GET", "/v1/models/smol/metadata",
                      [("Authorization", "Bearer k-ops")])
        self.assertEqual(r.status, 400, r)
        self.assertIn("no TF Serving signature: it is an LLM pool", r.json()["error"])
        for name, key, status in (("tensors", "k-other", 403), ("nope", "k-other", 403),
                                  ("notsmol", "k-other", 404), ("tensors", "k-ops", 400),
                                  ("nope", "k-ops", 404)):
            r, raw = self.post("/v1/chat/completions", chat_body(name),
                               headers={"Authorization": "Bearer " + key})
            self.assert_openai_error(r, raw, status, None if status == 403 else "model")
        r, raw = self.post("/v1/chat/completions", chat_body("smol"),
                           headers={"Authorization": "Bearer wrong"})
        self.assert_openai_error(r, raw, 401)
        r, raw = self.post("/v1/chat/completions", chat_body("smol"))
        self.assert_openai_error(r, raw, 401)   # keys exist: one is required

    def test_max_inflight_applies_to_calls(self):
        import threading
        out = []
        t = threading.Thread(target=lambda: out.append(self.chat("k-few", 2000)[0].status))
        t.start()
        time.sleep(0.3)
        r, raw = self.chat("k-few", 1)
        self.assert_openai_error(r, raw, 429)
        t.join()
        self.assertEqual(out, [200])


class TestPoolLedgerByEndpoint(PoolCase):
    """The usage ledger charges each endpoint the calls sent to it: team-a's
    calls all went to endpoint 0 and team-b's to endpoint 1 (the other one
    answering 500 meanwhile, so each call was tried there first), and the
    rows say so, tokens and requests, not a split of each tenant's use by
    the endpoints' busy time."""
    sim_endpoints = 2
    config = {
        "tenants": [
            {"name": "team-a", "keys": [digest("k-a")]},
            {"name": "team-b", "keys": [digest("k-b")]},
            {"name": "ops", "keys": [digest("k-ops")], "admin": True},
        ],
        "usage": {"flush_s": 1},
    }

    @classmethod
    def populate(cls, repo):
        write_model(repo, "smol", pool("smol", [cls.sim.url(0), cls.sim.url(1)], tries=2,
                                       metrics_interval_ms=0, picker={"policy": "round_robin"}))

    def calls(self, key, n):
        tokens = 0
        for _ in range(n):
            r, raw = self.post("/v1/chat/completions", chat_body("smol", max_tokens=5),
                               headers={"Authorization": "Bearer " + key})
            self.assertEqual(r.status, 200, raw)
            tokens += json.loads(raw)["usage"]["total_tokens"]
        return tokens

    def test_each_endpoint_is_charged_its_own_calls(self):
        try:
            self.sim.fault(1, "500")
            a = self.calls("k-a", 4)
            self.sim.fault(1, "none")
            time.sleep(2.2)   # its failures took endpoint 1 out for 2 s (no scrape here)
            self.sim.fault(0, "500")
            b = self.calls("k-b", 6)
        finally:
            self.sim.fault(0, "none")
            self.sim.fault(1, "none")
        want = {("team-a", self.sim.url(0)): (4, a), ("team-b", self.sim.url(1)): (6, b)}
        deadline = time.monotonic() + 10
        while True:
            got = {(x["tenant"], x["device"]): (x["requests"], x["rows"])
                   for x in self.usage_rows("tenant,device", "k-ops")
                   if x["tenant"] in ("team-a", "team-b") and (x["requests"] or x["rows"])}
            if got == want or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        self.assertEqual(got, want)


class TestPoolLedgerLongCall(PoolCase):
    """A call longer than the ledger's one-second samples is its tenant's
    busy time in each second it runs: the endpoint's time was the caller's
    only in the second where the call ended, and the seconds before went to
    every tenant allowed on the pool by share (a 6 s stream of team-a's was
    2 s each of team-a, team-b and ops)."""
    sim_endpoints = 1
    sim_args = ("--speed", "1")
    config = TestPoolLedgerByEndpoint.config

    @classmethod
    def populate(cls, repo):
        write_model(repo, "smol", pool("smol", [cls.sim.url(0)], metrics_interval_ms=0))

    def busy(self):
        out = {}
        for x in self.usage_rows("tenant", "k-ops"):
            out[x["tenant"]] = out.get(x["tenant"], 0) + x["busy_seconds"]
        return out

    def stream(self):
        """One streamed call of team-a long enough to span several samples:
        (its status, how long it took)."""
        t0 = time.monotonic()
        r, raw = self.post("/v1/chat/completions",
                           dict(chat_body("smol", max_tokens=120), stream=True),
                           headers={"Authorization": "Bearer k-a"}, timeout=60)
        return r.status, time.monotonic() - t0

    def assert_charged_to_team_a(self, before, took):
        """team-a's busy time since `before` is the call's, the others' none."""
        self.assertGreater(took, 2.0, "the call must outlast a few samples")
        deadline = time.monotonic() + 10
        while True:   # the flush of the second it ended
            after = self.busy()
            a = after.get("team-a", 0) - before.get("team-a", 0)
            if a >= 0.8 * took or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        others = {t: after.get(t, 0) - before.get(t, 0) for t in ("team-b", "ops", "default")}
        self.assertGreater(a, 0.8 * took, (a, took, others, self.srv.log()[-1500:]))
        self.assertLess(a, took + 0.5, (a, took))
        for t, v in others.items():
            self.assertLess(v, 0.1, (t, v, a, took))

    def test_a_long_stream_is_its_tenants_in_every_second(self):
        time.sleep(1.5)   # a sample or two of nothing first
        before = self.busy()
        status, took = self.stream()
        self.assertEqual(status, 200)
        self.assert_charged_to_team_a(before, took)

    def test_a_reload_mid_stream_keeps_the_calls_time(self):
        # The reloaded copy's endpoint was a server set up anew: the old
        # copy's call, still streaming, ran on a server the ledger no
        # longer read, and its time went to every tenant as idle time
        # (0.7 s of a 6.4 s stream charged to its tenant). The same server
        # now goes on into the new copy, its busy time with it.
        time.sleep(1.5)
        before = self.busy()
        result = {}
        th = threading.Thread(target=lambda: result.update(zip(("status", "took"),
                                                               self.stream())))
        th.start()
        time.sleep(0.8)
        r, raw = self.post("/v2/repository/models/smol/load", b"",
                           headers={"Authorization": "Bearer k-ops"})
        self.assertEqual(r.status, 200, raw)
        th.join(60)
        self.assertEqual(result.get("status"), 200, result)
        self.assert_charged_to_team_a(before, result["took"])
        self.assertRegex(self.srv.log(), r"model smol: reloaded")


class TestPoolLedgerManyEndpoints(TestPoolLedgerByEndpoint):
    """The same past 64 endpoints (the ledger's walk used to stop there
    and split the use by busy time): 70 endpoints taken in turns by calls
    of team-a and team-b alternately, so team-a's go to the even endpoints
    and team-b's to the odd ones, in the same seconds."""
    sim_endpoints = 70

    @classmethod
    def populate(cls, repo):
        write_model(repo, "smol", pool("smol", [cls.sim.url(i) for i in range(70)],
                                       metrics_interval_ms=0, picker={"policy": "round_robin"}))

    def test_each_endpoint_is_charged_its_own_calls(self):
        want = {}
        for i in range(140):
            tenant, key = ("team-a", "k-a") if i % 2 == 0 else ("team-b", "k-b")
            self.calls(key, 1)
            k = (tenant, self.sim.url(i % 70))
            want[k] = want.get(k, 0) + 1
        deadline = time.monotonic() + 10
        while True:
            got = {(x["tenant"], x["device"]): x["requests"]
                   for x in self.usage_rows("tenant,device", "k-ops")
                   if x["tenant"] in ("team-a", "team-b") and x["requests"]}
            if got == want or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        self.assertEqual(len(want), 70)
        self.assertEqual(got, want)


class TestPoolQuotasAcrossRestarts(PoolCase):
    """A restart does not give a tenant its tokens back: the day's and the
    minute's count continue from the usage ledger (admit_restore.c), here
    through a SIGKILL once the ledger has written them."""
    sim_endpoints = 1

    @classmethod
    def setUpClass(cls):
        import tempfile
        cls.state_dir = tempfile.mkdtemp(prefix="batchgate-state-")
        cls.config = {
            "tenants": [
                {"name": "daily", "keys": [digest("k-daily")], "tokens_per_day": 150},
                {"name": "minute", "keys": [digest("k-minute")], "tokens_per_minute": 250},
                {"name": "fresh", "keys": [digest("k-fresh")], "tokens_per_day": 150},
                {"name": "ops", "keys": [digest("k-ops")], "admin": True},
            ],
            "usage": {"flush_s": 1},
            "state_dir": cls.state_dir,
        }
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        import shutil
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(cls.state_dir, ignore_errors=True)

    @classmethod
    def populate(cls, repo):
        write_model(repo, "smol", pool("smol", [cls.sim.url(0)], metrics_interval_ms=0))

    def chat(self, key, max_tokens):
        return self.post("/v1/chat/completions", chat_body("smol", "hi", max_tokens=max_tokens),
                         headers={"Authorization": "Bearer " + key})

    def ledger_tokens(self, tenant):
        c = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=5)
        c.request("GET", "/v2/usage?group_by=tenant&step=86400",
                  headers={"Authorization": "Bearer k-ops"})
        body = json.loads(c.getresponse().read())
        c.close()
        return sum(x["rows"] for x in body["rows"] if x["tenant"] == tenant)

    def test_sigkill_keeps_the_day_and_the_minute(self):
        used = {}
        for tenant, key, n in (("daily", "k-daily", 100), ("minute", "k-minute", 200)):
            r, raw = self.chat(key, n)
            self.assertEqual(r.status, 200, raw)
            used[tenant] = json.loads(raw)["usage"]["total_tokens"]
        # Each has room for a small call now, none for another like the first.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(self.ledger_tokens(t) < used[t] for t in used):
            time.sleep(0.2)
        self.assertEqual({t: self.ledger_tokens(t) for t in used}, used)
        self.srv.kill()
        type(self).srv = Server(dict(self.config, model_repository=self.repo),
                                io_threads=self.io_threads)
        self.srv.wait_log(r"ready in", timeout=60)
        self.srv.wait_log(r'tenant "daily": %d tokens used today' % used["daily"], timeout=5)
        self.assertIn('batchgate_tenant_quota_tokens_used{tenant="daily",window="day"} %d'
                      % used["daily"], self.gateway_metrics())
        # A first process would admit both (each estimate fits an empty quota).
        r, raw = self.chat("k-daily", 60)
        err = self.assert_openai_error(r, raw, 429)
        self.assertIn("tokens_per_day", err["message"])
        self.assertIn("used %d of" % used["daily"], err["message"])
        self.assertEqual(r.getheader("x-should-retry"), "false")
        r, raw = self.chat("k-minute", 60)
        err = self.assert_openai_error(r, raw, 429)
        self.assertIn("tokens_per_minute", err["message"])
        self.assertTrue(1 <= int(r.getheader("Retry-After")) <= 60, r.getheader("Retry-After"))
        # What is left still serves; a tenant with nothing used has it all.
        r, raw = self.chat("k-daily", 10)
        self.assertEqual(r.status, 200, raw)
        r, raw = self.chat("k-fresh", 100)
        self.assertEqual(r.status, 200, raw)


    def test_an_unreadable_ledger_is_logged_and_the_quotas_count_from_zero(self):
        """A ledger that cannot be read at start (here its minute table is
        gone) does not stop the server: the error is logged and the
        quotas count from zero."""
        import shutil
        import sqlite3
        import tempfile
        state = tempfile.mkdtemp(prefix="batchgate-state-")
        try:
            cfg = dict(self.config, model_repository=self.repo, state_dir=state)
            srv = Server(cfg, io_threads=1)
            srv.wait_log(r"ready in", timeout=60)
            srv.stop()
            db = sqlite3.connect(os.path.join(state, "batchgate.db"))
            db.execute("DROP TABLE usage_minute")
            db.commit()
            db.close()
            srv = Server(cfg, io_threads=1)
            try:
                srv.wait_log(r"token quotas: today's usage could not be read from the ledger, "
                             r"so they count from zero", timeout=10)
                srv.wait_log(r"ready in", timeout=60)
                c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
                c.request("POST", "/v1/chat/completions",
                          json.dumps(chat_body("smol", "hi", max_tokens=100)),
                          {"Content-Type": "application/json", "Authorization": "Bearer k-daily"})
                r = c.getresponse()
                raw = r.read()
                c.close()
                self.assertEqual(r.status, 200, raw)
            finally:
                srv.kill()
        finally:
            shutil.rmtree(state, ignore_errors=True)


class TestPoolChunkTiming(PoolCase):
    """Each event is passed on as it arrives: llmsim --stamp puts its send
    time (wall clock) in every chunk, and the client notes when each one
    reached it, through batchgate and direct. A gateway that held chunks
    back would add a decode step (20 ms here) to most of them."""
    sim_endpoints = 1
    sim_args = ("--stamp",)

    @classmethod
    def populate(cls, repo):
        write_model(repo, "smol", pool("smol", [cls.sim.url(0)], metrics_interval_ms=0))

    def delays(self, port, path_model):
        body = json.dumps(chat_body(path_model, max_tokens=40, stream=True)).encode()
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                  % len(body) + body)
        buf, out = b"", []
        while b"[DONE]" not in buf:
            d = s.recv(65536)
            if not d:
                break
            now = time.time_ns()
            buf += d
            for m in re.finditer(rb'"llmsim_sent_ns": (\d+)', d):
                out.append((now - int(m.group(1))) / 1e6)
        s.close()
        return sorted(out)

    def test_chunks_pass_as_they_come(self):
        direct = self.delays(self.sim.ports[0], "llmsim")
        via = self.delays(self.srv.port, "smol")
        self.assertGreaterEqual(len(via), 40)
        med = lambda v: v[len(v) // 2]
        added = med(via) - med(direct)
        print("chunk delay, median: direct %.3f ms, through batchgate %.3f ms (added %.3f ms); "
              "p90 %.3f / %.3f ms" % (med(direct), med(via), added, direct[len(direct) * 9 // 10],
                                       via[len(via) * 9 // 10]), file=sys.stderr)
        self.assertLess(added, 5.0)


class TestPoolConfig(unittest.TestCase):
    def refused(self, cfg, pattern):
        import shutil
        import tempfile
        repo = tempfile.mkdtemp(prefix="batchgate-repo-")
        try:
            write_model(repo, "p", cfg)
            srv = Server({"model_repository": repo})
            try:
                srv.wait_log(r"ready in|not loaded|model p", timeout=20)
                time.sleep(0.2)
                self.assertRegex(srv.log(), pattern)
            finally:
                srv.kill()
        finally:
            shutil.rmtree(repo, ignore_errors=True)

    def test_refusals_name_the_field(self):
        self.refused({"backend": "openai"}, r"endpoints: missing")
        self.refused({"backend": "openai", "endpoints": ["http://127.0.0.1:1"],
                      "inputs": [{"name": "x", "datatype": "FP32", "shape": [1]}]},
                     r"inputs: an openai pool takes no inputs")
        self.refused({"backend": "openai", "endpoints": ["http://127.0.0.1:1"],
                      "aliases": ["p"]}, r"aliases\[0\]: \"p\" is the pool's own name")
        self.refused({"backend": "openai", "endpoints": ["ftp://x"]}, r"endpoints")
        self.refused({"backend": "openai", "endpoints": ["http://127.0.0.1:1"],
                      "aliases": ["a%d" % i for i in range(9)]}, r"aliases: must be a list of at most 8")
        self.refused({"backend": "openai", "endpoints": ["http://127.0.0.1:1"],
                      "picker": {"policy": "random"}}, r"picker.policy")
        self.refused({"backend": "openai", "endpoints": ["http://127.0.0.1:1"],
                      "picker": {"slots": -1}}, r"picker.slots")
        self.refused({"backend": "openai", "endpoints": ["http://127.0.0.1:1"],
                      "picker": {"affinity_entries": 10}}, r"picker.affinity_entries")
        self.refused({"backend": "openai", "endpoints": []},
                     r"endpoints: must be a list of 1 to 128 URLs")


if __name__ == "__main__":
    unittest.main()
