"""test_llm_batch.py - OpenAI's Batch API (/v1/files, /v1/batches; docs/LLM.md
"Batch API") in front of an LLM pool of simulated servers (llmsim): the
routes and each of their errors in OpenAI's shape; a 1,000-line batch made
and read with the official `openai` client, through a SIGKILL of batchgate
in the middle, every custom_id answered exactly once with llmsim's
predictable text; cancel; and a pool saturated by online calls keeps its
endpoints (the batch's lines wait)."""

import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

from harness import (SANITIZER_RE, Server, endpoint_starting, fill_fs, hold_write_lock,
                     mount_tmpfs, run_testdeps, sanitizer_build)
from test_infer import write_model
from test_llm_pool import Sim, expected_text, pool

# Debian's faketime (scripts/install-deps): a wall clock the tests set.
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def line(i, model="smol", max_tokens=4, url="/v1/chat/completions", **kw):
    d = {"custom_id": "req-%d" % i, "method": "POST", "url": url,
         "body": {"model": model, "messages": [{"role": "user", "content": "line %d" % i}],
                  "max_tokens": max_tokens}}
    d.update(kw)
    return json.dumps(d)


def jsonl(lines):
    return ("\n".join(lines) + "\n").encode()


class BatchCase(unittest.TestCase):
    sim_endpoints = 2
    sim_args = ("--speed", "20")
    pool_kw = {}
    extra = {}

    def setUp(self):
        self.sim = Sim(self.sim_endpoints, self.sim_args)
        self.tmp = tempfile.mkdtemp(prefix="batchgate-batch-")
        self.repo = os.path.join(self.tmp, "models")
        os.makedirs(self.repo)
        kw = dict(metrics_interval_ms=50, aliases=["smol-alias"])
        kw.update(self.pool_kw)
        write_model(self.repo, "smol",
                    pool("smol", [self.sim.url(i) for i in range(self.sim_endpoints)], **kw))
        self.state = os.path.join(self.tmp, "state")
        self.servers = []
        self.srv = None

    def tearDown(self):
        for s in self.servers:
            s.kill()
        self.sim.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)
        for s in self.servers:   # a sanitizer build's report, if any
            self.assertIsNone(SANITIZER_RE.search(s.log()), s.log()[-4000:])

    env = None   # batchgate's environment over this one's

    def start(self):
        cfg = {"model_repository": self.repo, "state_dir": self.state}
        cfg.update(self.extra)
        self.srv = Server(cfg, io_threads=2, env=self.env)
        self.servers.append(self.srv)
        self.srv.wait_log(r"ready in", timeout=30)
        return self.srv

    # ---- HTTP ----

    def call(self, method, path, body=None, headers=None, timeout=30):
        c = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            headers = dict({"Content-Type": "application/json"}, **(headers or {}))
        c.request(method, path, body, headers or {})
        r = c.getresponse()
        raw = r.read()
        c.close()
        return r.status, raw

    def upload(self, data, purpose="batch", filename="in.jsonl", fields=()):
        """multipart/form-data as the openai client sends it; `fields`:
        more (name, value) form fields (`expires_after[seconds]`, ...)."""
        b = uuid.uuid4().hex
        parts = []
        if purpose is not None:
            fields = (("purpose", purpose),) + tuple(fields)
        for name, value in fields:
            parts.append(b"--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n"
                         % (b.encode(), name.encode(), value.encode()))
        parts.append(b"--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n"
                     b"Content-Type: application/octet-stream\r\n\r\n" % (b.encode(),
                                                                          filename.encode(
                                                                              "utf-8",
                                                                              "surrogateescape"))
                     + data + b"\r\n")
        body = b"".join(parts) + b"--%s--\r\n" % b.encode()
        return self.call("POST", "/v1/files", body,
                         {"Content-Type": "multipart/form-data; boundary=%s" % b})

    def upload_ok(self, data):
        st, raw = self.upload(data)
        self.assertEqual(st, 200, raw)
        return json.loads(raw)

    def create(self, file_id, endpoint="/v1/chat/completions", window="24h", **kw):
        body = {"input_file_id": file_id, "endpoint": endpoint, "completion_window": window}
        body.update(kw)
        return self.call("POST", "/v1/batches", body)

    def batch(self, bid):
        st, raw = self.call("GET", "/v1/batches/" + bid)
        self.assertEqual(st, 200, raw)
        return json.loads(raw)

    def assert_each_line_once(self, bid, n):
        """The batch ends completed with every one of its n lines, once."""
        b = self.wait(bid, timeout=60)
        self.assertEqual(b["request_counts"], {"total": n, "completed": n, "failed": 0})
        out = self.content(b["output_file_id"])
        self.assertEqual(sorted(o["custom_id"] for o in out), sorted("req-%d" % i
                                                                     for i in range(n)))
        return b

    def running_batch(self, n, max_tokens, done=1):
        """A batch of n lines made and run until `done` of them completed:
        (its input file id, its id)."""
        fid = self.upload_ok(jsonl([line(i, max_tokens=max_tokens) for i in range(n)]))["id"]
        bid = json.loads(self.create(fid)[1])["id"]
        deadline = time.monotonic() + 30
        while self.batch(bid)["request_counts"]["completed"] < done:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.005)
        return fid, bid

    def wait(self, bid, timeout=60, until=("completed", "failed", "expired", "cancelled")):
        deadline = time.monotonic() + timeout
        while True:
            b = self.batch(bid)
            if b["status"] in until:
                return b
            if time.monotonic() > deadline:
                self.fail("batch %s still %s after %d s: %r" % (bid, b["status"], timeout, b))
            time.sleep(0.05)

    def content(self, fid):
        st, raw = self.call("GET", "/v1/files/%s/content" % fid,
                            headers={"Accept": "application/binary"})
        self.assertEqual(st, 200, raw)
        return [json.loads(x) for x in raw.decode().splitlines() if x.strip()]

    def assert_error(self, st, raw, status, param=None, contains=None):
        self.assertEqual(st, status, raw)
        err = json.loads(raw)["error"]
        self.assertTrue(err["message"])
        self.assertIn("type", err)
        self.assertEqual(err["param"], param, err)
        if contains:
            self.assertIn(contains, err["message"])
        return err

    def as_tenant(self, key):
        """self.call sends the key's bearer token from now on; returns the
        plain call."""
        real_call = BatchCase.call.__get__(self)
        h = {"Authorization": "Bearer " + key}
        self.call = lambda m, p, body=None, headers=None, timeout=30: real_call(
            m, p, body, dict(h, **(headers or {})), timeout)
        return real_call

    def make(self, key, n, max_tokens, tag):
        real = self.as_tenant(key)
        try:
            fid = self.upload_ok(jsonl([line(i, max_tokens=max_tokens) for i in range(n)]))["id"]
            st, raw = self.create(fid, metadata={"tag": tag})
            self.assertEqual(st, 200, raw)
            return json.loads(raw)["id"]
        finally:
            self.call = real

    def sim_requests(self):
        """Requests the simulated servers finished (all endpoints)."""
        return sum(self.sim.metrics(i).get("vllm:request_success_total", 0)
                   for i in range(self.sim_endpoints))


class TestBatchFileContent(BatchCase):
    def test_large_file_content_streams(self):
        """A file's content is written as the client takes it (it was read
        whole into memory on the IO thread, and copied): every byte back,
        HEAD the head alone, and a client that leaves half way harms
        nothing."""
        self.start()
        data = jsonl([line(i) * 3 for i in range(200)])   # ~70 KB: several pieces of 64 KiB
        data = data * 10
        f = self.upload_ok(data)
        path = "/v1/files/%s/content" % f["id"]
        self.assertEqual(self.call("GET", path), (200, data))
        c = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=10)
        c.request("HEAD", path)
        r = c.getresponse()
        self.assertEqual((r.status, r.getheader("Content-Length"), r.read()),
                         (200, str(len(data)), b""))
        c.close()
        for _ in range(3):   # leave after the first bytes
            s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
            s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
            s.recv(1000)
            s.close()
        self.assertEqual(self.call("GET", path), (200, data))


class TestBatchRoutes(BatchCase):
    extra = {"jobs": {"max_file_bytes": 100000}}

    def test_files_and_their_errors(self):
        self.start()
        f = self.upload_ok(jsonl([line(1)]))
        self.assertTrue(f["id"].startswith("file-"))
        self.assertEqual((f["object"], f["purpose"], f["filename"]), ("file", "batch", "in.jsonl"))
        self.assertEqual(f["bytes"], len(jsonl([line(1)])))
        self.assertIsInstance(f["created_at"], int)
        st, raw = self.call("GET", "/v1/files/" + f["id"])
        self.assertEqual(json.loads(raw), f)
        st, raw = self.call("GET", "/v1/files")
        self.assertIn(f["id"], [x["id"] for x in json.loads(raw)["data"]])
        self.assertEqual(self.call("GET", "/v1/files/%s/content" % f["id"])[1], jsonl([line(1)]))
        # Errors, each in OpenAI's shape.
        self.assert_error(*self.upload(b"x", purpose="fine-tune"), 400, "purpose", "batch")
        self.assert_error(*self.upload(b"x", purpose=None), 400, "purpose")
        self.assert_error(*self.call("POST", "/v1/files", b"not multipart",
                                     {"Content-Type": "text/plain"}), 400)
        self.assert_error(*self.upload(b"x" * 100001), 413, "file", "max_file_bytes")
        # A quoted filename's escapes are undone (httpx writes a Windows
        # path's backslashes as \\); one too long is refused, not renamed;
        # a field given twice is refused, not the last taken.
        st, raw = self.upload(jsonl([line(1)]), filename=r'C:\\dir\\a\"b.jsonl')
        self.assertEqual(st, 200, raw)
        self.assertEqual(json.loads(raw)["filename"], r'C:\dir\a"b.jsonl')
        self.assert_error(*self.upload(jsonl([line(1)]), filename="n" * 300), 400, "file",
                          "filename")
        # A name that would not go back out as JSON, or would be cut short.
        self.assert_error(*self.upload(jsonl([line(1)]), filename="\udcff\udcfe.jsonl"),
                          400, "file", "not UTF-8")
        self.assert_error(*self.upload(jsonl([line(1)]), filename="a\x00b.jsonl"), 400, "file",
                          "control character")
        self.assert_error(*self.upload(jsonl([line(1)]), fields=(("purpose", "batch"),)),
                          400, "purpose", "given twice")
        # Parts past the eighth were skipped unsaid: a field after them was
        # "missing", a second `file` among them unseen.
        self.assert_error(*self.upload(jsonl([line(1)]),
                                       fields=tuple(("x%d" % i, "y") for i in range(8))),
                          400, None, "more than 8 parts")
        # A filename holding "; name=..." does not name the part.
        st, raw = self.upload(jsonl([line(1)]), filename='a; name=purpose;b.jsonl')
        self.assertEqual(st, 200, raw)
        self.assert_error(*self.call("GET", "/v1/files/file-nope"), 404, "file_id")
        self.assert_error(*self.call("GET", "/v1/files/file-nope/content"), 404, "file_id")
        self.assert_error(*self.call("DELETE", "/v1/files/file-nope"), 404, "file_id")
        # A path no route serves, in OpenAI's namespace: its 404 too (it
        # was {"error": "..."}, which the openai client cannot read).
        for path in ("/v1/files/", "/v1/files/%s/content/x" % f["id"], "/v1/batches/"):
            self.assert_error(*self.call("GET", path), 404, None, "no route")
        st, raw = self.call("DELETE", "/v1/files/" + f["id"])
        self.assertEqual((st, json.loads(raw)), (200, {"id": f["id"], "object": "file",
                                                       "deleted": True}))
        self.assert_error(*self.call("GET", "/v1/files/" + f["id"]), 404, "file_id")

    def test_file_list_pages(self):
        """GET /v1/files pages as OpenAI's: newest first (order=asc: oldest
        first), limit, after an id, first_id/last_id/has_more; purpose
        filters; a bad parameter is a 400 naming it."""
        self.start()
        ids = [self.upload_ok(jsonl([line(i)]))["id"] for i in range(3)]
        def page(q):
            st, raw = self.call("GET", "/v1/files" + q)
            self.assertEqual(st, 200, raw)
            return json.loads(raw)
        p = page("")
        self.assertEqual([x["id"] for x in p["data"]], ids[::-1])
        self.assertEqual((p["first_id"], p["last_id"], p["has_more"]), (ids[2], ids[0], False))
        p = page("?limit=2")
        self.assertEqual([x["id"] for x in p["data"]], [ids[2], ids[1]])
        self.assertTrue(p["has_more"])
        p = page("?limit=2&after=" + p["last_id"])
        self.assertEqual([x["id"] for x in p["data"]], [ids[0]])
        self.assertFalse(p["has_more"])
        self.assertEqual([x["id"] for x in page("?order=asc&limit=2")["data"]], ids[:2])
        self.assertEqual(len(page("?purpose=batch")["data"]), 3)
        p = page("?purpose=batch_output")
        self.assertEqual((p["data"], p["first_id"], p["has_more"]), ([], None, False))
        for q, param in (("?limit=0", "limit"), ("?limit=10001", "limit"), ("?limit=x", "limit"),
                         ("?order=up", "order"), ("?after=%zz", "after"),
                         ("?limit=1&limit=2", "limit"), ("?order=asc&order=desc", "order")):
            self.assert_error(*self.call("GET", "/v1/files" + q), 400, param)
        # A parameter given twice was read once, silently; one the route
        # does not take is left alone (clients add theirs: Azure's
        # api-version).
        self.assert_error(*self.call("GET", "/v1/batches?limit=1&limit=2"), 400, "limit")
        self.assertEqual(len(page("?api-version=2024-10-21&limit=1")["data"]), 1)

    def test_file_expiry_policy(self):
        """OpenAI's expires_after: an upload without one expires after
        jobs.file_expiry_s (30 days by default), one with anchor created_at
        and 3600..2592000 seconds after those; anything else is a 400 naming
        the field. The same for a batch's output_expires_after."""
        self.start()
        f = self.upload_ok(jsonl([line(1)]))
        self.assertEqual(f["expires_at"], f["created_at"] + 2592000)
        st, raw = self.upload(jsonl([line(1)]), fields=(("expires_after[anchor]", "created_at"),
                                                        ("expires_after[seconds]", "7200")))
        self.assertEqual(st, 200, raw)
        g = json.loads(raw)
        self.assertEqual(g["expires_at"], g["created_at"] + 7200)
        self.assertEqual(json.loads(self.call("GET", "/v1/files/" + g["id"])[1])["expires_at"],
                         g["expires_at"])
        for fields, param in (
                ((("expires_after[anchor]", "last_active_at"), ("expires_after[seconds]", "7200")),
                 "expires_after.anchor"),
                ((("expires_after[anchor]", "created_at"), ("expires_after[seconds]", "3599")),
                 "expires_after.seconds"),
                ((("expires_after[anchor]", "created_at"), ("expires_after[seconds]", "2592001")),
                 "expires_after.seconds"),
                ((("expires_after[anchor]", "created_at"), ("expires_after[seconds]", "1h")),
                 "expires_after.seconds"),
                ((("expires_after[anchor]", "created_at"),), "expires_after"),
                ((("expires_after[seconds]", "7200"),), "expires_after")):
            self.assert_error(*self.upload(b"x", fields=fields), 400, param)
        for oe, param in (({"anchor": "created_at"}, "output_expires_after"),
                          ([3600], "output_expires_after"),
                          ({"anchor": "now", "seconds": 3600}, "output_expires_after.anchor"),
                          ({"anchor": "created_at", "seconds": 60},
                           "output_expires_after.seconds"),
                          ({"anchor": "created_at", "seconds": "3600"},
                           "output_expires_after.seconds")):
            self.assert_error(*self.create(f["id"], output_expires_after=oe), 400, param)
        self.assertEqual(json.loads(self.call("GET", "/v1/batches")[1])["data"], [])
        # A batch's output and error files: its policy, else the default.
        for oe, life in (({"anchor": "created_at", "seconds": 3600}, 3600), (None, 2592000)):
            st, raw = self.create(f["id"], output_expires_after=oe)
            self.assertEqual(st, 200, raw)
            b = self.wait(json.loads(raw)["id"])
            self.assertEqual(b["status"], "completed", b)
            out = json.loads(self.call("GET", "/v1/files/" + b["output_file_id"])[1])
            self.assertEqual(out["expires_at"], out["created_at"] + life)

    def test_lines_get_the_checks_online_calls_get(self):
        # n past 128, a count that is no integer, a stream flag that is no
        # boolean: 400 online, but a line was sent (and paid for) as it was.
        self.start()
        def with_body(i, **kw):
            d = json.loads(line(i))
            d["body"].update(kw)
            return json.dumps(d)
        lines = [line(0), with_body(1, n=129), with_body(2, n="2"), with_body(3, best_of=1000),
                 with_body(4, stream="yes"), with_body(5, max_tokens="5")]
        fid = self.upload_ok(jsonl(lines))["id"]
        b = self.wait(json.loads(self.create(fid)[1])["id"])
        self.assertEqual(b["request_counts"], {"total": 6, "completed": 1, "failed": 5}, b)
        errs = {e["custom_id"]: e["error"] for e in self.content(b["error_file_id"])}
        want = {"req-1": "body.n: 129 choices are more than 128",
                "req-2": "body.n: must be an integer",
                "req-3": "body.best_of: 1000 choices are more than 128",
                "req-4": "body.stream: must be true or false",
                "req-5": "body.max_tokens: must be an integer"}
        self.assertEqual({k: v["message"] for k, v in errs.items()}, want)
        self.assertEqual({v["code"] for v in errs.values()}, {"invalid_request"})
        self.assertEqual(self.sim_requests(), 1)   # only the good line reached a server

    def test_a_kserve_job_on_a_pool_is_refused_naming_the_batch_api(self):
        # It was accepted (201) and every line failed, the errors pointing
        # from one field to another (input name, shape, datatype).
        self.start()
        body = json.dumps({"id": "a", "inputs": [{"name": "prompt", "datatype": "BYTES",
                                                  "shape": [1, 1], "data": ["hello"]}]})
        st, raw = self.call("POST", "/v2/models/smol/jobs", body)
        self.assertEqual(st, 400, raw)
        err = json.loads(raw)["error"]
        self.assertIn("is an LLM pool", err)
        self.assertIn("POST /v1/batches", err)
        st, raw = self.call("GET", "/v2/jobs")
        self.assertEqual((st, json.loads(raw)["jobs"]), (200, []), raw)

    def test_batch_errors(self):
        self.start()
        good = self.upload_ok(jsonl([line(1), line(2)]))["id"]
        self.assert_error(*self.create("file-nope"), 404, "input_file_id")
        self.assert_error(*self.create(good, endpoint="/v1/responses"), 400, "endpoint")
        self.assert_error(*self.create(good, window="1h"), 400, "completion_window")
        self.assert_error(*self.create(good, metadata=[1]), 400, "metadata")
        # OpenAI's schema: string values, keys to 64 characters, values to 512.
        for bad in ({"a": 1}, {"a": None}, {"a": {"b": [1]}}, {"k" * 65: "v"},
                    {"a": "v" * 513}):
            self.assert_error(*self.create(good, metadata=bad), 400, "metadata")
        self.assert_error(*self.call("POST", "/v1/batches", b"{", {}), 400, None,
                          "invalid JSON at column 1")
        self.assert_error(*self.call("POST", "/v1/batches", {}), 400, "input_file_id")
        # Bad lines: 400 naming the line and the field; no batch is made.
        cases = [
            ([line(1), "not json"], None, "line 2"),
            ([line(1), line(2, custom_id=None)], "custom_id", "line 2"),
            ([line(1), line(2, custom_id=5)], "custom_id", "must be a non-empty string"),
            ([line(1), line(1)], "custom_id", "line 2"),
            ([line(1), line(2, method="GET")], "method", "line 2"),
            ([line(1), line(2), line(3, url="/v1/completions")], "url", "line 3"),
            ([line(1, body=[1])], "body", "line 1"),
            ([json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
                          "body": {"messages": []}})], "body.model", "line 1"),
            ([json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
                          "body": {"model": 5}})], "body.model", "must be a string"),
            # A 9th model: its lines failed "does not exist" (it may exist).
            ([line(i, model="m%d" % i) for i in range(1, 10)], "body.model",
             "line 9: body.model: \"m9\" is a model more than the 8"),
        ]
        for lines, param, where in cases:
            fid = self.upload_ok(jsonl(lines))["id"]
            self.assert_error(*self.create(fid), 400, param or "line", where)
        fid = self.upload_ok(b"\n\n")["id"]
        self.assert_error(*self.create(fid), 400, "input_file_id", "no requests")
        st, raw = self.call("GET", "/v1/batches")
        self.assertEqual(json.loads(raw)["data"], [])
        self.assert_error(*self.call("GET", "/v1/batches/batch_nope"), 404, "batch_id")
        self.assert_error(*self.call("POST", "/v1/batches/batch_nope/cancel"), 404, "batch_id")
        self.assert_error(*self.call("GET", "/v1/batches?limit=0"), 400, "limit")

    def test_a_line_of_too_many_values_is_not_parsed(self):
        # More values than any call needs: refused unparsed (each a node of
        # ~50 bytes: 8 MiB of them took 200 MB).
        self.extra = {"jobs": {"max_file_bytes": 16 << 20}}
        self.start()
        big = '{"custom_id": "big", "junk": [' + ",".join(["1"] * 4194305) + "]}"
        fid = self.upload_ok(jsonl([line(1), big]))["id"]
        self.assert_error(*self.create(fid), 400, "line",
                          "line 2: not a JSON object: it holds 4194310 JSON values, more "
                          "than 4194304: not read")

    def test_small_batch_end_to_end(self):
        self.start()
        lines = [line(i, max_tokens=3 + i % 4) for i in range(1, 8)]
        lines.append(line(8, model="smol-alias", max_tokens=2))
        lines.append(line(9, model="no-such-model"))
        lines.append(line(10, max_tokens=100000))   # llmsim: 400, cannot fit its KV cache
        fid = self.upload_ok(jsonl(lines))["id"]
        st, raw = self.create(fid, metadata={"who": "test"})
        self.assertEqual(st, 200, raw)
        b = json.loads(raw)
        self.assertTrue(b["id"].startswith("batch_"))
        self.assertEqual((b["object"], b["endpoint"], b["input_file_id"], b["metadata"]),
                         ("batch", "/v1/chat/completions", fid, {"who": "test"}))
        self.assertEqual(b["request_counts"]["total"], 10)
        b = self.wait(b["id"])
        self.assertEqual(b["status"], "completed", b)
        self.assertEqual(b["request_counts"], {"total": 10, "completed": 8, "failed": 2})
        for k in ("created_at", "in_progress_at", "finalizing_at", "completed_at", "expires_at"):
            self.assertIsInstance(b[k], int, k)
        self.assertIsNone(b["cancelled_at"])
        out = self.content(b["output_file_id"])
        self.assertEqual(sorted(o["custom_id"] for o in out), sorted("req-%d" % i
                                                                     for i in range(1, 9)))
        for o in out:
            i = int(o["custom_id"].split("-")[1])
            self.assertIsNone(o["error"])
            self.assertTrue(o["id"].startswith("batch_req_"))
            self.assertEqual(o["response"]["status_code"], 200)
            body = o["response"]["body"]
            n = 2 if i == 8 else 3 + i % 4
            self.assertEqual(body["choices"][0]["message"]["content"], expected_text(n))
            self.assertEqual(body["model"], "llmsim")   # the servers' name went upstream
        errs = {e["custom_id"]: e for e in self.content(b["error_file_id"])}
        self.assertEqual(sorted(errs), ["req-10", "req-9"])
        self.assertIsNone(errs["req-9"]["response"])
        self.assertEqual(errs["req-9"]["error"]["code"], "model_not_found")
        self.assertEqual(errs["req-10"]["response"]["status_code"], 400)   # the server's answer
        # The output files are the batch's tenant's, purpose batch_output.
        st, raw = self.call("GET", "/v1/files/" + b["output_file_id"])
        self.assertEqual(json.loads(raw)["purpose"], "batch_output")
        # A batch's output cannot be another's input.
        self.assert_error(*self.create(b["output_file_id"]), 400, "input_file_id")
        # Cancel of a finished batch: 409, as OpenAI.
        self.assert_error(*self.call("POST", "/v1/batches/%s/cancel" % b["id"]), 409)
        # Tokens counted for the pool and tenant.
        st, raw = self.call("GET", "/metrics")
        self.assertRegex(raw.decode(), r'llm_tokens_total\{model="smol",tenant="default",'
                                        r'kind="completion"\} (\d+)')
        # Its lines in job_lines_total under the pool (req-9 named no pool:
        # counted under none), the batch in batches{status}.
        text = raw.decode()
        self.assertIn('batchgate_job_lines_total{model="smol",result="ok"} 8', text)
        self.assertIn('batchgate_job_lines_total{model="smol",result="failed"} 1', text)
        self.assertIn('batchgate_batches{status="completed"} 1', text)
        self.assertIn('batchgate_batches{status="in_progress"} 0', text)
        # Listing: newest first, after and limit.
        fid2 = self.upload_ok(jsonl([line(1)]))["id"]
        b2 = json.loads(self.create(fid2)[1])
        self.wait(b2["id"])
        st, raw = self.call("GET", "/v1/batches?limit=1")
        page = json.loads(raw)
        self.assertEqual(([x["id"] for x in page["data"]], page["has_more"]), ([b2["id"]], True))
        st, raw = self.call("GET", "/v1/batches?limit=5&after=" + b2["id"])
        page = json.loads(raw)
        self.assertEqual(([x["id"] for x in page["data"]], page["has_more"]), ([b["id"]], False))
        # Deleting the input file leaves the batch's record alone.
        self.assertEqual(self.call("DELETE", "/v1/files/" + fid)[0], 200)
        self.assertEqual(self.batch(b["id"])["status"], "completed")


class TestBatchFileExpiry(BatchCase):
    """Expired files are gone at once for the routes and deleted (row and
    disk) by the runner at its start and once a minute; a batch keeps its
    own link to its input. jobs.file_expiry_s 0: files without a policy
    never expire."""
    extra = {"jobs": {"file_expiry_s": 0}}

    def expire(self, file_id):
        db = sqlite3.connect(os.path.join(self.state, "batchgate.db"), timeout=10)
        db.execute("UPDATE files SET expires_at=? WHERE id=?", (int(time.time()) - 1, file_id))
        db.commit()
        db.close()

    def test_expired_files_go_through_a_sigkill(self):
        self.start()
        keep = self.upload_ok(jsonl([line(1)]))
        self.assertIsNone(keep["expires_at"])
        gone = self.upload_ok(jsonl([line(i) for i in range(3)]))
        bid = json.loads(self.create(gone["id"])[1])["id"]
        self.assertEqual(self.wait(bid)["status"], "completed")
        path = os.path.join(self.state, "jobs", "batch", gone["id"] + ".jsonl")
        self.assertTrue(os.path.exists(path))
        # Expired while the server runs: gone for every route at once.
        self.expire(gone["id"])
        self.assert_error(*self.call("GET", "/v1/files/" + gone["id"]), 404, "file_id")
        self.assert_error(*self.call("GET", "/v1/files/%s/content" % gone["id"]), 404, "file_id")
        self.assert_error(*self.create(gone["id"]), 404, "input_file_id")
        ids = [x["id"] for x in json.loads(self.call("GET", "/v1/files")[1])["data"]]
        self.assertNotIn(gone["id"], ids)
        self.assertIn(keep["id"], ids)
        # The batch it fed still answers, its output still readable.
        b = self.batch(bid)
        self.assertEqual(len(self.content(b["output_file_id"])), 3)
        # SIGKILL; the next start deletes the expired file's row and bytes,
        # and what a crash between a row and its bytes could leave in
        # jobs/batch/ (bytes no row names, a finished batch's input link);
        # names batchgate does not make there stay.
        self.srv.send_signal(signal.SIGKILL)
        self.srv.wait(timeout=10)
        bdir = os.path.join(self.state, "jobs", "batch")
        orphans = ["file-0123456789abcdef.jsonl", "batch_0123456789abcdef.input.jsonl",
                   bid + ".input.jsonl"]
        strangers = ["notes.txt", "file-xyz.jsonl", "file-0123456789ABCDEF.jsonl"]
        for name in orphans + strangers:
            with open(os.path.join(bdir, name), "w") as f:
                f.write("x\n")
        self.start()
        self.srv.wait_log(r"jobs/batch: 3 files no row needs any more deleted", timeout=10)
        self.assertEqual(sorted(n for n in os.listdir(bdir) if n in orphans + strangers),
                         sorted(strangers))
        self.assertTrue(os.path.exists(os.path.join(bdir, keep["id"] + ".jsonl")))
        self.srv.wait_log(r"file %s \(batch, \d+ bytes, tenant default\) expired: deleted"
                          % gone["id"], timeout=10)
        self.assertFalse(os.path.exists(path))
        db = sqlite3.connect(os.path.join(self.state, "batchgate.db"))
        rows = db.execute("SELECT count(*) FROM files WHERE id=?", (gone["id"],)).fetchone()[0]
        db.close()
        self.assertEqual(rows, 0)
        self.assertEqual(self.call("GET", "/v1/files/" + keep["id"])[0], 200)
        self.assertEqual(self.batch(bid)["status"], "completed")



@unittest.skipIf(sanitizer_build(), "libfaketime is preloaded, which the sanitizers' runtimes "
                 "do not allow")
@unittest.skipUnless(os.path.exists(LIBFAKETIME), "libfaketime not installed (scripts/install-deps "
                     "installs Debian's faketime)")
class TestBatchFileExpiryTimer(BatchCase):
    """The runner's once-a-minute look for expired files, while it runs
    (the start's pass is TestBatchFileExpiry's): batchgate's wall clock
    (libfaketime, re-read from a file every second; its monotonic clock
    left alone) jumps two hours past a file's one-hour expiry, and the
    file's row and bytes go within the minute."""

    def setUp(self):
        super().setUp()
        self.clock = os.path.join(self.tmp, "faketime")
        with open(self.clock, "w") as f:
            f.write("+0\n")
        self.env = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME_TIMESTAMP_FILE": self.clock,
                    "FAKETIME_CACHE_DURATION": "1", "DONT_FAKE_MONOTONIC": "1"}

    def test_an_expired_file_goes_while_the_server_runs(self):
        self.start()
        st, raw = self.upload(jsonl([line(1)]), fields=(("expires_after[anchor]", "created_at"),
                                                        ("expires_after[seconds]", "3600")))
        self.assertEqual(st, 200, raw)
        f = json.loads(raw)
        keep = self.upload_ok(jsonl([line(2)]))
        path = os.path.join(self.state, "jobs", "batch", f["id"] + ".jsonl")
        self.assertTrue(os.path.exists(path))
        time.sleep(1.5)   # the start's pass is done (nothing had expired)
        self.assertTrue(os.path.exists(path))
        with open(self.clock, "w") as fh:
            fh.write("+2h\n")
        self.srv.wait_log(r"file %s \(batch, \d+ bytes, tenant default\) expired: deleted"
                          % f["id"], timeout=70)
        self.assertFalse(os.path.exists(path))
        self.assert_error(*self.call("GET", "/v1/files/" + f["id"]), 404, "file_id")
        self.assertEqual(self.call("GET", "/v1/files/" + keep["id"])[0], 200)


class TestBatchServerErrors(BatchCase):
    def test_a_5xx_is_retried_on_another_endpoint(self):
        """Endpoint 0 answers every completion 500 (and looks idle): each line
        that tried it goes to endpoint 1 next; every line completes. A 404
        (the model is not on that endpoint) likewise: it was the line's
        final answer. Once endpoint 1 answered those lines, endpoint 0's
        404s are its failures: 3 take it out, logged, as online."""
        self.start()
        out = re.compile(r"model smol: upstream %s is taken out" % re.escape(self.sim.url(0)))
        for fault in ("404", "500"):
            self.sim.fault(0, fault)
            fid = self.upload_ok(jsonl([line(i) for i in range(20)]))["id"]
            b = self.wait(json.loads(self.create(fid)[1])["id"])
            self.assertEqual(b["request_counts"], {"total": 20, "completed": 20, "failed": 0},
                             fault)
            self.assertIsNone(b["error_file_id"])
            if fault == "404":
                self.assertEqual(len(out.findall(self.srv.log())), 1, self.srv.log())
                time.sleep(2.1)   # back in, for the 5xx round
        self.assertEqual(self.sim_requests(), 40)

    def test_5xx_everywhere_ends_in_the_error_file(self):
        """Every endpoint answers 500: each line is tried 3 times, then its
        last answer (status 500, the server's body) is its error line."""
        self.start()
        self.sim.fault(0, "500")
        self.sim.fault(1, "500")
        fid = self.upload_ok(jsonl([line(i) for i in range(4)]))["id"]
        b = self.wait(json.loads(self.create(fid)[1])["id"])
        self.assertEqual(b["request_counts"], {"total": 4, "completed": 0, "failed": 4})
        self.assertIsNone(b["output_file_id"])
        errs = self.content(b["error_file_id"])
        self.assertEqual(sorted(e["custom_id"] for e in errs), ["req-%d" % i for i in range(4)])
        for e in errs:
            self.assertEqual(e["response"]["status_code"], 500)
            self.assertIn("error", e["response"]["body"])


    def test_a_whole_answer_not_json_is_a_failed_try(self):
        """A 200 whose body is not a JSON object (llmsim's bad_sse cuts an
        unstreamed answer in half) was a completed line whose body was a
        string: it is a failed try, as a broken stream is."""
        self.start()
        for i in range(self.sim_endpoints):
            self.sim.fault(i, "bad_sse")
        try:
            fid = self.upload_ok(jsonl([line(i) for i in range(2)]))["id"]
            b = self.wait(json.loads(self.create(fid)[1])["id"])
        finally:
            for i in range(self.sim_endpoints):
                self.sim.fault(i, "none")
        self.assertEqual(b["request_counts"], {"total": 2, "completed": 0, "failed": 2})
        for e in self.content(b["error_file_id"]):
            self.assertIsNone(e["response"])
            self.assertIn("a 200 answer that is not a JSON object", e["error"]["message"])

class TestBatchHundredEndpoints(BatchCase):
    sim_endpoints = 100
    sim_args = ("--speed", "10")

    def test_lines_spread_over_a_hundred_endpoints(self):
        """1,000 lines over a pool of 100 simulated endpoints: every one of
        them takes lines (the caller keeps connections to each)."""
        self.start()
        fid = self.upload_ok(jsonl([line(i, max_tokens=8) for i in range(1000)]))["id"]
        b = self.wait(json.loads(self.create(fid)[1])["id"], timeout=120)
        self.assertEqual(b["request_counts"], {"total": 1000, "completed": 1000, "failed": 0})
        used = sum(1 for i in range(100)
                   if self.sim.metrics(i).get("vllm:request_success_total", 0) > 0)
        self.assertEqual(used, 100)


class TestBatchPreempt(BatchCase):
    sim_args = ("--speed", "1")
    pool_kw = {"offline": {"max_running": 2, "max_inflight_per_endpoint": 2, "preempt": True}}

    def starting(self):
        """batchgate_endpoint_starting of the pool's endpoints: streamed
        lines count there until their first bytes (online picks prefer an
        endpoint whose lines are past their prefill)."""
        st, raw = self.call("GET", "/metrics")
        return endpoint_starting(raw.decode(), "smol")

    def tearDown(self):
        try:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and any(self.starting()):
                time.sleep(0.02)
            self.assertEqual(len(self.starting()), self.sim_endpoints)
            self.assertEqual(sum(self.starting()), 0, "a line that ended still counts as starting")
        finally:
            super().tearDown()

    def test_online_call_closes_a_batch_line(self):
        """offline.preempt: an online call sent to an endpoint where batch
        lines run closes one of them (the server aborts it); the line runs
        again later, and the batch still answers each custom_id once."""
        self.start()
        fid = self.upload_ok(jsonl([line(i, max_tokens=30) for i in range(16)]))["id"]
        bid = json.loads(self.create(fid)[1])["id"]
        time.sleep(0.3)   # lines running on both endpoints
        aborted0 = sum(self.sim.metrics(i).get("llmsim:requests_aborted_total", 0)
                       for i in range(self.sim_endpoints))
        streamed0 = sum(self.sim.metrics(i).get("llmsim:requests_streamed_total", 0)
                        for i in range(self.sim_endpoints))
        self.assertGreaterEqual(streamed0, 1, "lines that give way go streamed")
        for _ in range(2):
            st, raw = self.call("POST", "/v1/chat/completions",
                                {"model": "smol", "max_tokens": 4,
                                 "messages": [{"role": "user", "content": "now"}]})
            self.assertEqual(st, 200, raw)
            self.assertEqual(json.loads(raw)["choices"][0]["message"]["content"],
                             expected_text(4))
        time.sleep(0.2)
        aborted = sum(self.sim.metrics(i).get("llmsim:requests_aborted_total", 0)
                      for i in range(self.sim_endpoints)) - aborted0
        self.assertGreaterEqual(aborted, 1, "no batch line gave way")
        b = self.assert_each_line_once(bid, 16)
        for o in self.content(b["output_file_id"]):
            # Sent streamed (offline.preempt), handed back whole: the answer
            # the same call would have had unstreamed.
            body = o["response"]["body"]
            self.assertEqual(body["object"], "chat.completion")
            self.assertEqual(body["choices"][0]["message"],
                             {"role": "assistant", "content": expected_text(30)})
            self.assertEqual(body["choices"][0]["finish_reason"], "length")
            self.assertEqual(body["usage"]["completion_tokens"], 30)
            self.assertEqual(body["model"], "llmsim")

    def test_lines_asking_for_tools_or_logprobs_stay_whole(self):
        """Only what llmstream assembles goes streamed: lines asking for
        tools, functions, logprobs or top_logprobs (whose streamed deltas
        it does not put together) are sent whole even with offline.preempt;
        `"logprobs": false` or null is no such ask."""
        self.start()
        def with_body(i, **extra):
            d = json.loads(line(i))
            d["body"].update(extra)
            return json.dumps(d)
        lines = [with_body(0, logprobs=True), with_body(1, top_logprobs=2),
                 with_body(2, tools=[{"type": "function", "function": {"name": "f"}}]),
                 with_body(3, functions=[{"name": "f"}]), with_body(4, logprobs=None),
                 with_body(5, logprobs=False), with_body(6)]
        streamed0 = sum(self.sim.metrics(i).get("llmsim:requests_streamed_total", 0)
                        for i in range(self.sim_endpoints))
        fid = self.upload_ok(jsonl(lines))["id"]
        b = self.wait(json.loads(self.create(fid)[1])["id"], timeout=60)
        self.assertEqual(b["request_counts"], {"total": 7, "completed": 7, "failed": 0})
        streamed = sum(self.sim.metrics(i).get("llmsim:requests_streamed_total", 0)
                       for i in range(self.sim_endpoints)) - streamed0
        self.assertEqual(streamed, 3, "only req-4, req-5 and req-6 go streamed")

    def test_a_broken_stream_is_a_failed_try(self):
        """A streamed line whose stream is cut, or is not one, is not an
        answer: it is tried again, and after its last try its error line
        says why."""
        self.start()
        for fault, why in (("stop_mid", "in the middle of the answer"),
                           ("bad_sse", "not a JSON object")):
            for i in range(self.sim_endpoints):
                self.sim.fault(i, fault)
            try:
                fid = self.upload_ok(jsonl([line(0, max_tokens=8)]))["id"]
                b = self.wait(json.loads(self.create(fid)[1])["id"])
            finally:
                for i in range(self.sim_endpoints):
                    self.sim.fault(i, "none")
            self.assertEqual(b["request_counts"], {"total": 1, "completed": 0, "failed": 1})
            errs = self.content(b["error_file_id"])
            self.assertIsNone(errs[0]["response"])
            self.assertIn(why, errs[0]["error"]["message"])


def digest(key):
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


class TestBatchModelGlobs(BatchCase):
    """A tenant's `models` globs hold for its batch lines as for its online
    calls: a line for a pool it may not use fails with permission_error and
    never reaches a server (lines ran, charged to the tenant)."""
    extra = {"tenants": [{"name": "narrow", "keys": [digest("k-n")], "models": ["other-*"]}]}

    def test_lines_for_a_pool_the_tenant_may_not_use(self):
        self.start()
        st, raw = self.call("POST", "/v1/chat/completions",
                            {"model": "smol", "messages": [{"role": "user", "content": "x"}]},
                            {"Authorization": "Bearer k-n"})
        self.assertEqual(st, 403, raw)   # online: refused
        before = self.sim_requests()
        bid = self.make("k-n", 3, 4, "narrow")
        real = self.as_tenant("k-n")
        try:
            b = self.wait(bid)
            self.assertEqual(b["request_counts"], {"total": 3, "completed": 0, "failed": 3}, b)
            errs = self.content(b["error_file_id"])
        finally:
            self.call = real
        self.assertEqual(sorted(e["custom_id"] for e in errs), ["req-0", "req-1", "req-2"])
        for e in errs:
            self.assertEqual(e["error"]["code"], "permission_error", e)
            self.assertIn('tenant "narrow" may not use model "smol"', e["error"]["message"])
        self.assertEqual(self.sim_requests(), before)


class TestBatchTenants(BatchCase):
    extra = {"tenants": [{"name": "team-a", "keys": [digest("k-a")]},
                         {"name": "team-b", "keys": [digest("k-b")]},
                         {"name": "ops", "keys": [digest("k-ops")], "admin": True}],
             "usage": {"flush_s": 1}}

    def test_a_batch_is_its_tenants(self):
        """A batch and its files are the creating key's tenant's: another
        tenant gets 404 (as for an unknown id) and an empty list, an admin
        sees them; the lines' tokens count as that tenant's."""
        self.start()
        a = {"Authorization": "Bearer k-a"}
        bh = {"Authorization": "Bearer k-b"}
        ops = {"Authorization": "Bearer k-ops"}
        real_call = self.call

        def call_as(h):
            return lambda m, p, body=None, headers=None, timeout=30: real_call(
                m, p, body, dict(h, **(headers or {})), timeout)
        self.call = call_as(a)
        fid = self.upload_ok(jsonl([line(i) for i in range(3)]))["id"]
        st, raw = self.create(fid)
        self.assertEqual(st, 200, raw)
        bid = json.loads(raw)["id"]
        b = self.wait(bid)
        self.assertEqual(b["request_counts"]["completed"], 3)
        self.call = call_as(bh)
        self.assert_error(*self.call("GET", "/v1/batches/" + bid), 404, "batch_id")
        self.assert_error(*self.call("GET", "/v1/files/" + fid), 404, "file_id")
        self.assert_error(*self.call("GET", "/v1/files/%s/content" % b["output_file_id"]), 404,
                          "file_id")
        self.assert_error(*self.call("POST", "/v1/batches/%s/cancel" % bid), 404, "batch_id")
        self.assert_error(*self.create(fid), 404, "input_file_id")
        self.assertEqual(json.loads(self.call("GET", "/v1/batches")[1])["data"], [])
        self.assertEqual(json.loads(self.call("GET", "/v1/files")[1])["data"], [])
        self.call = call_as(ops)
        self.assertEqual(self.batch(bid)["id"], bid)
        self.assertEqual(len(self.content(b["output_file_id"])), 3)
        st, raw = self.call("GET", "/metrics")
        m = re.search(r'llm_tokens_total\{model="smol",tenant="team-a",kind="completion"\} (\d+)',
                      raw.decode())
        self.assertTrue(m, raw.decode()[:2000])
        self.assertEqual(int(m.group(1)), 12)   # 3 lines of 4 tokens
        # The usage ledger: the lines are the tenant's offline use of the pool.
        deadline = time.monotonic() + 10
        while True:
            st, raw = self.call("GET", "/v2/usage?group_by=tenant,model,class&step=86400")
            self.assertEqual(st, 200, raw)
            rows = [x for x in json.loads(raw)["rows"]
                    if x["tenant"] == "team-a" and x["requests"]]
            if sum(x["requests"] for x in rows) >= 3 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        self.assertEqual([(x["model"], x["class"], x["requests"]) for x in rows],
                         [("smol", "offline", 3)], rows)
        self.assertGreater(rows[0]["rows"], 12)   # tokens: prompt and completion


class TestBatchesSideBySide(BatchCase):
    """Up to 4 batches run at once, each with an equal share of the lines
    waiting for idle capacity; a free place goes to the oldest batch of a
    tenant with none running before another of a busy tenant's."""
    sim_args = ("--speed", "2")
    pool_kw = {"offline": {"max_running": 2, "max_inflight_per_endpoint": 2}}
    extra = {"tenants": [{"name": "team-a", "keys": [digest("k-a")]},
                         {"name": "team-b", "keys": [digest("k-b")]}]}

    def test_a_long_batch_does_not_hold_another_tenant_back(self):
        self.start()
        big = self.make("k-a", 300, 16, "big")
        time.sleep(0.5)
        small = self.make("k-b", 4, 4, "small")
        real = self.as_tenant("k-b")
        b = self.wait(small, timeout=60)
        self.call = real
        self.assertEqual(b["request_counts"], {"total": 4, "completed": 4, "failed": 0})
        self.as_tenant("k-a")
        a = self.batch(big)
        done = a["request_counts"]["completed"] + a["request_counts"]["failed"]
        self.assertEqual(a["status"], "in_progress", a)
        self.assertLess(done, 300, "the small batch waited for the big one")
        self.assertGreater(done, 0)
        # Cancelling one batch takes back its lines only: another running
        # beside it loses none.
        mid = self.make("k-b", 40, 8, "mid")
        self.as_tenant("k-b")
        deadline = time.monotonic() + 30
        while self.batch(mid)["request_counts"]["completed"] < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.as_tenant("k-a")
        st, raw = self.call("POST", "/v1/batches/%s/cancel" % big)
        self.assertEqual(st, 200, raw)
        a = self.wait(big, timeout=30)
        self.assertEqual(a["status"], "cancelled")
        self.assertEqual(len(self.content(a["output_file_id"])), a["request_counts"]["completed"])
        self.as_tenant("k-b")
        m = self.wait(mid, timeout=60)
        self.assertEqual(m["request_counts"], {"total": 40, "completed": 40, "failed": 0})
        self.assertEqual(sorted(o["custom_id"] for o in self.content(m["output_file_id"])),
                         sorted("req-%d" % i for i in range(40)))

    def test_a_waiting_tenant_goes_before_a_busy_tenants_next_batch(self):
        self.start()
        mine = [self.make("k-a", 200, 16, "a%d" % i) for i in range(5)]
        started = lambda: re.findall(r"batch (batch_\w+) starts: .*\((\d) batches running\)",
                                     self.srv.log())
        # Four places, taken by team-a's first four, as they came.
        self.srv.wait_log(r"batch %s starts" % mine[3], timeout=30)
        self.assertEqual([bid for bid, _ in started()], mine[:4])
        theirs = self.make("k-b", 10, 4, "b")
        # A place frees: team-b's batch (its tenant has none running) takes
        # it, not team-a's fifth, though that one is older.
        self.as_tenant("k-a")
        st, raw = self.call("POST", "/v1/batches/%s/cancel" % mine[0])
        self.assertEqual(st, 200, raw)
        self.srv.wait_log(r"batch %s starts" % theirs, timeout=30)
        self.assertEqual([bid for bid, _ in started()], mine[:4] + [theirs])
        self.as_tenant("k-b")
        self.assertEqual(self.wait(theirs, timeout=120)["status"], "completed")
        self.srv.wait_log(r"batch %s starts" % mine[4], timeout=30)   # then the fifth
        self.assertEqual(max(int(n) for _, n in started()), 4)
        self.as_tenant("k-a")
        for bid in mine[1:]:
            self.assertEqual(self.call("POST", "/v1/batches/%s/cancel" % bid)[0], 200)

    def test_a_batch_left_cancelling_is_ended_without_a_place(self):
        """A batch waiting for a place whose cancel was recorded but not its
        end (a crash between, or an end the database refused) waited for
        a place to be ended (or for midnight, its tenant's tokens spent).
        It is ended at the next look; the running batches lose nothing."""
        self.start()
        mine = [self.make("k-a", 200, 16, "a%d" % i) for i in range(5)]
        self.srv.wait_log(r"batch %s starts" % mine[3], timeout=30)
        self.srv.kill()
        db = sqlite3.connect(os.path.join(self.state, "batchgate.db"), timeout=10)
        db.execute("UPDATE batches SET status=6, cancelling_at=? WHERE id=?",
                   (int(time.time()), mine[4]))   # STATE_BATCH_CANCELLING
        db.commit()
        db.close()
        self.start()
        self.as_tenant("k-a")
        b = self.wait(mine[4], timeout=10)
        self.assertEqual(b["status"], "cancelled", b)
        self.assertNotIn("batch %s starts" % mine[4], self.srv.log())
        self.assertEqual([self.batch(bid)["status"] for bid in mine[:4]], ["in_progress"] * 4)
        for bid in mine[:4]:
            self.assertEqual(self.call("POST", "/v1/batches/%s/cancel" % bid)[0], 200)

    def test_a_batch_waiting_for_a_place_expires_on_time(self):
        """A batch whose 24 hours pass while all four places are taken is
        ended expired then, not when a place frees: the client is told at
        once, and the running batches lose nothing."""
        self.start()
        mine = [self.make("k-a", 200, 16, "a%d" % i) for i in range(5)]
        self.srv.wait_log(r"batch %s starts" % mine[3], timeout=30)
        self.as_tenant("k-a")
        self.assertNotIn("batch %s starts" % mine[4], self.srv.log())
        db = sqlite3.connect(os.path.join(self.state, "batchgate.db"), timeout=10)
        db.execute("UPDATE batches SET expires_at=? WHERE id=?", (int(time.time()) - 1, mine[4]))
        db.commit()
        db.close()
        b = self.wait(mine[4], timeout=10)
        self.assertEqual(b["status"], "expired", b)
        self.assertIsInstance(b["expired_at"], int)
        # Its lines that never ran are in the error file, and so counted
        # failed (they were not: total != completed + failed).
        self.assertEqual(b["request_counts"], {"total": 200, "completed": 0, "failed": 200})
        self.assertIsNone(b["output_file_id"])
        # Every line that did not run is in the error file, as OpenAI writes
        # them (they were in no file).
        errs = self.content(b["error_file_id"])
        self.assertEqual(len(errs), 200)
        self.assertEqual({e["error"]["code"] for e in errs}, {"batch_expired"})
        self.assertEqual(len({e["custom_id"] for e in errs}), 200)
        self.assertTrue(all(e["response"] is None for e in errs))
        self.srv.wait_log(r"batch %s passed its completion window while it waited to run" % mine[4])
        self.assertNotIn("batch %s starts" % mine[4], self.srv.log())
        running = [self.batch(bid) for bid in mine[:4]]
        self.assertEqual([r["status"] for r in running], ["in_progress"] * 4, running)
        before = [r["request_counts"]["completed"] for r in running]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:   # they go on
            now = [self.batch(bid)["request_counts"]["completed"] for bid in mine[:4]]
            if all(n > b for n, b in zip(now, before)):
                break
            time.sleep(0.1)
        self.assertTrue(all(n > b for n, b in zip(now, before)), (before, now))
        self.assertEqual([self.batch(bid)["request_counts"]["failed"] for bid in mine[:4]],
                         [0] * 4)

    def test_sigkill_with_batches_side_by_side(self):
        """Batches running side by side when batchgate is SIGKILLed all
        resume on the next start and answer each custom_id once."""
        self.start()
        made = [self.make("k-a", 120, 4, "a"), self.make("k-b", 120, 4, "b"),
                self.make("k-a", 60, 4, "a2")]
        deadline = time.monotonic() + 60
        db_path = os.path.join(self.state, "batchgate.db")
        while time.monotonic() < deadline:
            db = sqlite3.connect(db_path, timeout=10)
            per = dict(db.execute("SELECT batch_id, count(*) FROM batch_results GROUP BY batch_id"))
            db.close()
            if all(per.get(b, 0) >= 5 for b in made):
                break
            time.sleep(0.02)
        self.srv.send_signal(signal.SIGKILL)
        self.srv.wait(timeout=10)
        self.assertTrue(all(0 < per.get(b, 0) < n for b, n in zip(made, (120, 120, 60))), per)
        self.start()
        for bid, key, n in zip(made, ("k-a", "k-b", "k-a"), (120, 120, 60)):
            self.as_tenant(key)
            b = self.wait(bid, timeout=120)
            self.assertEqual(b["request_counts"], {"total": n, "completed": n, "failed": 0}, b)
            self.assertEqual(sorted(o["custom_id"] for o in self.content(b["output_file_id"])),
                             sorted("req-%d" % i for i in range(n)))


class TestBatchDoesNotShedOnline(BatchCase):
    """A batch's lines run on idle capacity: they do not make the pool shed
    online flex calls while its servers have room (its own calls sent
    since the last scrape counted as queue, batch lines among them: 8 of
    40 flex calls 429 with the servers running 3 of 4)."""
    sim_args = ("--speed", "1")
    pool_kw = {"metrics_interval_ms": 200, "saturation": {"waiting": 1}}

    def test_flex_calls_are_served_beside_a_batch(self):
        self.start()
        fid = self.upload_ok(jsonl([line(i, max_tokens=100) for i in range(40)]))["id"]
        st, raw = self.create(fid)
        self.assertEqual(st, 200, raw)
        deadline = time.monotonic() + 30
        while self.sim_requests() < 1 and time.monotonic() < deadline:
            time.sleep(0.05)   # the batch is running
        codes = []
        for i in range(40):
            body = {"model": "smol", "messages": [{"role": "user", "content": "hi %d" % i}],
                    "max_tokens": 2, "service_tier": "flex"}
            codes.append(self.call("POST", "/v1/chat/completions", body)[0])
            time.sleep(0.05)
        self.assertEqual(codes, [200] * 40, codes)


class WeightsCase(BatchCase):
    """team-a with share 0.6, team-b 0.2; a batch's lines done so far."""
    pool_kw = {"offline": {"max_running": 4, "max_inflight_per_endpoint": 4}}
    extra = {"tenants": [{"name": "team-a", "keys": [digest("k-a")], "share": 0.6},
                         {"name": "team-b", "keys": [digest("k-b")], "share": 0.2}]}

    def counts(self, key, bid):
        real = self.as_tenant(key)
        try:
            c = self.batch(bid)["request_counts"]
            return c["completed"] + c["failed"]
        finally:
            self.call = real

    def start_both(self, na, nb):
        """batchgate, team-a's batch of na lines, then team-b's of nb, once
        team-b's has started; their ids."""
        self.start()
        a = self.make("k-a", na, 16, "a")
        b = self.make("k-b", nb, 16, "b")
        self.srv.wait_log(r"batch %s starts" % b, timeout=30)
        return a, b

    def lines_done(self, a, b, until, timeout=60):
        """team-a's and team-b's lines done (batches a and b), once
        until(na, nb) holds or after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            na, nb = self.counts("k-a", a), self.counts("k-b", b)
            if until(na, nb) or time.monotonic() > deadline:
                return na, nb
            time.sleep(0.05)


class TestBatchWeights(WeightsCase):
    """Batches of tenants with guaranteed shares take the pool's idle
    places in proportion to them (team-a 0.6, team-b 0.2: 3 to 1)."""

    def test_turns_follow_the_tenants_shares(self):
        a, b = self.start_both(400, 400)
        na, nb = self.lines_done(a, b, lambda na, nb: na + nb >= 160)
        if getattr(self, "flipped", False):   # the window's shares: team-b 0.6
            na, nb = nb, na
        print("\nbatch turns by share 0.6 : 0.2: %d lines, %d" % (na, nb), file=sys.stderr)
        self.assertGreaterEqual(na + nb, 160)
        self.assertLess(na, 400, "the larger share's batch ended before the comparison")
        self.assertGreater(nb, 0, "the smaller share's batch moves too")
        self.assertGreater(na / nb, 2.0)
        self.assertLess(na / nb, 4.5)
        for key, bid in (("k-a", a), ("k-b", b)):
            self.as_tenant(key)
            self.assertEqual(self.call("POST", "/v1/batches/%s/cancel" % bid)[0], 200)


class TestBatchWeightsInAWindow(TestBatchWeights):
    """A governance time window's shares are the ones in force: here a
    24-hour window gives team-b 0.6 and team-a 0.2, the opposite of their
    own shares, and the batch turns follow it."""
    extra = dict(TestBatchWeights.extra, governance={
        "timezone": "UTC", "windows": [{"name": "all-day", "from": "00:00", "to": "00:00",
                                        "shares": {"team-a": 0.2, "team-b": 0.6}}]})
    flipped = True


class TestBatchWeightFloor(WeightsCase):
    """A tenant without a share beside one holding all of it weighs 0.01:
    its batch still moves, about one line in a hundred, with far fewer
    places than a hundred (8 here: counting lines in flight per weight
    gave it none while the other's backlog lasted)."""
    extra = {"tenants": [{"name": "team-a", "keys": [digest("k-a")], "share": 1.0},
                         {"name": "team-b", "keys": [digest("k-b")]}]}

    def test_a_tenant_without_a_share_still_moves(self):
        a, b = self.start_both(800, 100)
        na, nb = self.lines_done(a, b, lambda na, nb: na >= 500, timeout=90)
        print("\nbatch turns by weight 1 : 0.01: %d lines, %d" % (na, nb), file=sys.stderr)
        self.assertGreaterEqual(na, 500)
        self.assertGreaterEqual(nb, 2, "the tenant without a share did not move")
        self.assertGreater(na / nb, 25)
        for key, bid in (("k-a", a), ("k-b", b)):
            self.as_tenant(key)
            self.assertEqual(self.call("POST", "/v1/batches/%s/cancel" % bid)[0], 200)


class TestBatchWeightsSwitch(WeightsCase):
    """Shares switched while the batches run (PUT /v2/governance: a
    window giving team-b 0.6 and team-a 0.2): the turns follow at once,
    the lines already waiting in the caller included (up to 256 of them,
    which kept their old weight before)."""
    extra = {"tenants": WeightsCase.extra["tenants"] + [
        {"name": "ops", "keys": [digest("k-ops")], "admin": True}]}

    def test_turns_follow_a_switch_at_once(self):
        a, b = self.start_both(600, 600)
        a0, b0 = self.lines_done(a, b, lambda na, nb: na + nb >= 60)
        self.assertGreaterEqual(a0 + b0, 60)
        real = self.as_tenant("k-ops")
        st, raw = self.call("PUT", "/v2/governance", {
            "timezone": "UTC", "windows": [{"name": "all-day", "from": "00:00", "to": "00:00",
                                            "shares": {"team-a": 0.2, "team-b": 0.6}}]})
        self.call = real
        self.assertEqual(st, 200, raw)
        self.srv.wait_log(r"governance: window all-day in force", timeout=10)
        # The 8 lines in flight at the switch end first (sent by the old
        # shares); then the next 40: fewer than team-b's lines already
        # waiting in the caller (64, its part of the window before the
        # switch), so that the runner's refill of its part (a low-priority
        # thread, slow on a loaded machine) is not what is measured.
        n = sum(self.lines_done(a, b, lambda na, nb: True)) + 8
        a1, b1 = self.lines_done(a, b, lambda na, nb: na + nb >= n)
        a2, b2 = self.lines_done(a, b, lambda na, nb: na + nb >= a1 + b1 + 40)
        self.assertGreaterEqual(a2 + b2, a1 + b1 + 40)
        da, db = a2 - a1, b2 - b1
        print("\nbatch turns, shares switched from 0.6 : 0.2 to 0.2 : 0.6: %d : %d lines "
              "before, %d : %d of the 40 after those in flight" % (a0, b0, da, db),
              file=sys.stderr)
        self.assertGreater(a0 / max(b0, 1), 2.0)
        self.assertGreater(da, 0)
        self.assertGreater(db / da, 2.0)
        for key, bid in (("k-a", a), ("k-b", b)):
            self.as_tenant(key)
            self.assertEqual(self.call("POST", "/v1/batches/%s/cancel" % bid)[0], 200)


class QuotaCase(BatchCase):
    """team-a with batch_tokens_per_day 400, team-b without."""
    QUOTA = 400
    extra = {"tenants": [{"name": "team-a", "keys": [digest("k-a")],
                          "batch_tokens_per_day": QUOTA},
                         {"name": "team-b", "keys": [digest("k-b")]}],
             "usage": {"flush_s": 1}}

    def done(self, key, bid):
        real = self.as_tenant(key)
        try:
            b = self.batch(bid)
            return b["status"], b["request_counts"]["completed"] + b["request_counts"]["failed"]
        finally:
            self.call = real

    def quota_used(self):
        st, raw = self.call("GET", "/metrics")
        m = re.search(r'batchgate_tenant_quota_tokens_used\{tenant="team-a",window="batch_day"\} '
                      r'(\d+)', raw.decode())
        return int(m.group(1)) if m else None


class TestBatchTokenQuota(QuotaCase):
    """batch_tokens_per_day: a tenant's batch lines stop once the next one
    would not fit in the day's tokens; its batch waits in_progress and gives
    its place to another tenant's; /metrics shows the window batch_day;
    after a SIGKILL the count comes back from the usage ledger."""

    def test_lines_stop_at_the_quota_and_stay_stopped_through_a_sigkill(self):
        self.start()
        a = self.make("k-a", 60, 8, "a")
        self.srv.wait_log(r"tenant team-a: batch_tokens_per_day \(%d\) reached" % self.QUOTA,
                          timeout=30)
        self.srv.wait_log(r"batch %s waits for midnight UTC" % a, timeout=10)
        status, n = self.done("k-a", a)
        used = self.quota_used()
        per_line = used / n
        print("\nbatch_tokens_per_day %d: %d lines done, %d tokens (%.1f a line)"
              % (self.QUOTA, n, used, per_line), file=sys.stderr)
        self.assertEqual(status, "in_progress")
        # Lines in flight are counted as the largest so far: later lines'
        # prompts ("line 10" after "line 9") are a token longer. Within 5%.
        self.assertLessEqual(used, self.QUOTA * 1.05)
        self.assertGreater(used + 2 * per_line, self.QUOTA, "stopped well short of the quota")
        self.assertIn('batchgate_tenant_quota_tokens{tenant="team-a",window="batch_day"} %d'
                      % self.QUOTA, self.call("GET", "/metrics")[1].decode())
        # Its place goes to another tenant's batch, which runs to the end.
        b = self.make("k-b", 20, 8, "b")
        self.as_tenant("k-b")
        self.assertEqual(self.wait(b, timeout=60)["status"], "completed")
        self.assertEqual(self.done("k-a", a), ("in_progress", n))
        # SIGKILL after the ledger's flush: the day's count comes back.
        time.sleep(2.5)
        self.srv.send_signal(signal.SIGKILL)
        self.srv.wait(timeout=10)
        self.start()
        self.srv.wait_log(r"tenant team-a: %d batch tokens today" % used, timeout=10)
        # Blocked from the start, and said so (it was silent: no line of
        # the batch had told its size yet).
        self.srv.wait_log(r"tenant team-a: batch_tokens_per_day \(%d\) reached" % self.QUOTA,
                          timeout=10)
        self.srv.wait_log(r"batch %s waits for midnight UTC" % a, timeout=10)
        time.sleep(1.5)
        self.assertEqual(self.done("k-a", a), ("in_progress", n))
        self.assertEqual(self.quota_used(), used)

    def test_cancelling_a_waiting_batch_keeps_what_it_did(self):
        # A batch waiting for its quota has no place: cancelling it ended it
        # without files, and the lines it had done were lost.
        self.start()
        a = self.make("k-a", 60, 8, "a")
        self.srv.wait_log(r"batch %s waits for midnight UTC" % a, timeout=30)
        status, n = self.done("k-a", a)
        self.assertEqual(status, "in_progress")
        self.assertGreater(n, 0)
        real = self.as_tenant("k-a")
        try:
            st, raw = self.call("POST", "/v1/batches/%s/cancel" % a)
            self.assertEqual(st, 200, raw)
            b = self.wait(a, timeout=10)
            self.assertEqual(b["status"], "cancelled")
            self.assertEqual(b["request_counts"]["completed"], n)
            self.assertIsNotNone(b["output_file_id"], b)
            self.assertEqual(len(self.content(b["output_file_id"])), n)
        finally:
            self.call = real

    def test_an_unreadable_ledger_is_logged_and_batches_run(self):
        # The ledger's minute table gone: the restore's error is logged and
        # the day's batch tokens count from zero; lines still run.
        self.start()
        self.srv.stop()
        db = sqlite3.connect(os.path.join(self.state, "batchgate.db"), timeout=10)
        db.execute("DROP TABLE usage_minute")
        db.commit()
        db.close()
        self.start()
        self.srv.wait_log(r"batch_tokens_per_day: cannot read today's usage \(.+\): the "
                          r"tenants' batch tokens count from zero", timeout=10)
        a = self.make("k-a", 3, 4, "a")
        self.as_tenant("k-a")
        self.assertEqual(self.wait(a, timeout=60)["request_counts"],
                         {"total": 3, "completed": 3, "failed": 0})


@unittest.skipIf(sanitizer_build(), "libfaketime is preloaded, which the sanitizers' runtimes "
                 "do not allow")
@unittest.skipUnless(os.path.exists(LIBFAKETIME), "libfaketime not installed (scripts/install-deps "
                     "installs Debian's faketime)")
class TestBatchTokenQuotaMidnight(QuotaCase):
    """batchgate's wall clock starts at 23:59:45 UTC (libfaketime; its
    monotonic clock is left alone): a tenant blocked by batch_tokens_per_day
    before midnight sends lines again after it, and its batch ends."""
    env = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": "@2026-12-04 23:59:45",
           "DONT_FAKE_MONOTONIC": "1"}

    def test_midnight_renews_the_day(self):
        self.start()
        a = self.make("k-a", 30, 8, "a")
        self.srv.wait_log(r"batch %s waits for midnight UTC" % a, timeout=12)
        status, n = self.done("k-a", a)
        self.assertEqual(status, "in_progress")
        self.assertLess(n, 30)
        used = self.quota_used()
        self.assertLessEqual(used, self.QUOTA * 1.05)
        self.srv.wait_log(r"tenant team-a: a new UTC day: its batches send lines again", timeout=20)
        self.as_tenant("k-a")
        b = self.wait(a, timeout=60)
        self.assertEqual((b["status"], b["request_counts"]),
                         ("completed", {"total": 30, "completed": 30, "failed": 0}), b)
        # The new day's count holds only the lines sent after midnight.
        after = self.quota_used()
        print("\nbatch_tokens_per_day %d: %d lines (%d tokens) before midnight UTC, %d (%d tokens) "
              "after" % (self.QUOTA, n, used, 30 - n, after), file=sys.stderr)
        self.assertGreater(after, 0)
        self.assertLess(after, used * (30 - n) / n + 30)


class TestBatchClientSigkill(BatchCase):
    sim_args = ("--speed", "10")
    pool_kw = {"offline": {"max_running": 4, "max_inflight_per_endpoint": 4}}

    def test_thousand_lines_through_sigkill(self):
        """The official client creates a 1,000-line batch; batchgate is
        SIGKILLed in the middle and restarted on the same state_dir; the
        client then sees it complete with every custom_id answered exactly
        once and llmsim's text. Only a line in flight at the kill may have
        run twice upstream: the servers finished exactly 1,000 requests plus
        those they had answered at the kill whose results were not yet
        committed."""
        n = 1000
        path = os.path.join(self.tmp, "in.jsonl")
        with open(path, "wb") as f:
            f.write(jsonl([line(i, max_tokens=4 + i % 5) for i in range(n)]))
        self.start()
        rc, out = run_testdeps(["llm_batch_client.py", "create",
                                "http://127.0.0.1:%d" % self.srv.port, path], timeout=120)
        self.assertEqual(rc, 0, out)
        made = json.loads(out.strip().splitlines()[-1])
        self.assertTrue(made["file_retrieved"])
        # The client's expires_after, as it sends it (form fields).
        self.assertEqual(made["file"]["expires_at"], made["file"]["created_at"] + 86400)
        bid = made["batch"]["id"]
        self.assertEqual(made["batch"]["request_counts"]["total"], n)
        # Kill once some but not all lines are done.
        deadline = time.monotonic() + 60
        while True:
            b = self.batch(bid)
            done = b["request_counts"]["completed"] + b["request_counts"]["failed"]
            if done >= 150 or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        self.assertLess(done, n, "the batch ended before the kill")
        self.srv.send_signal(signal.SIGKILL)
        self.srv.wait(timeout=10)
        time.sleep(0.3)   # the servers notice the closed connections
        ran_at_kill = self.sim_requests()
        db = sqlite3.connect(os.path.join(self.state, "batchgate.db"))
        committed_at_kill = db.execute("SELECT count(*) FROM batch_results WHERE batch_id=?",
                                       (bid,)).fetchone()[0]
        db.close()
        self.start()
        rc, out = run_testdeps(["llm_batch_client.py", "wait",
                                "http://127.0.0.1:%d" % self.srv.port, bid, "120"], timeout=180)
        self.assertEqual(rc, 0, out)
        res = json.loads(out.strip().splitlines()[-1])
        b = res["batch"]
        self.assertEqual(b["status"], "completed", b)
        self.assertEqual(b["request_counts"], {"total": n, "completed": n, "failed": 0})
        self.assertEqual(res["errors"], [])
        ids = [o["custom_id"] for o in res["output"]]
        self.assertEqual(len(ids), n)
        self.assertEqual(sorted(ids), sorted("req-%d" % i for i in range(n)))
        for o in res["output"]:
            i = int(o["custom_id"].split("-")[1])
            self.assertEqual(o["response"]["status_code"], 200)
            self.assertEqual(o["response"]["body"]["choices"][0]["message"]["content"],
                             expected_text(4 + i % 5))
        self.assertIn(bid, res["listed"])
        self.assertEqual(res["output_file"]["expires_at"],
                         res["output_file"]["created_at"] + 172800)
        # Only lines in flight at the kill ran twice: those the servers had
        # answered whose results were not committed yet (the rest of those
        # in flight were cut, and the servers counted them as aborted).
        ran = self.sim_requests()
        uncommitted = ran_at_kill - committed_at_kill
        self.assertGreaterEqual(uncommitted, 0)
        self.assertEqual(ran - n, uncommitted, "lines ran twice beyond those in flight")
        print("batch: killed at %d of %d lines committed (%d answered upstream, so %d in flight "
              "with an answer not committed); %d requests ran upstream in all; every custom_id "
              "once" % (committed_at_kill, n, ran_at_kill, uncommitted, ran))


    def test_sigterm_takes_lines_back_and_resumes(self):
        """SIGTERM mid-batch: batchgate stops cleanly (its lines in flight
        taken back, not answered); the next start finishes the batch, each
        custom_id once."""
        n = 300
        self.start()
        fid, bid = self.running_batch(n, 6, done=30)
        self.srv.send_signal(signal.SIGTERM)
        self.assertEqual(self.srv.wait(timeout=15), 0)
        self.assertIn("paused", self.srv.log())
        self.start()
        self.assert_each_line_once(bid, n)


    def test_full_disk_at_the_end_keeps_the_results(self):
        """The output files cannot be written (a full disk) when every line
        is done: the batch failed and its results went with it, every
        line paid for upstream lost. It keeps them now, and ends
        "completed" with every line once there is room again."""
        jobs_dir = os.path.join(self.tmp, "jobs")
        mount_tmpfs(self, jobs_dir, "1m")
        self.extra = {"jobs": {"dir": jobs_dir}}
        n = 200
        self.start()
        fid, bid = self.running_batch(n, 6, done=1)
        filler = fill_fs(jobs_dir)
        self.srv.wait_log(r"batch %s: cannot end it completed: .*No space left on device; its "
                          r"%d results are kept" % (bid, n), timeout=60)
        self.assertEqual(self.batch(bid)["status"], "finalizing")
        # An upload the full disk cannot hold is 503, which passes with the
        # disk (it was 500), in OpenAI's error shape.
        st, raw = self.upload(jsonl([line(0)]))
        self.assertEqual(st, 503, raw)
        self.assertIn("No space left on device", json.loads(raw)["error"]["message"])
        os.unlink(filler)
        b = self.assert_each_line_once(bid, n)
        self.assertEqual(b["status"], "completed", b)
        # No file of the attempts that failed is left beside the output.
        self.assertEqual(sorted(os.listdir(os.path.join(jobs_dir, "batch"))),
                         sorted([fid + ".jsonl", b["output_file_id"] + ".jsonl"]))

    def test_sigterm_while_the_database_refuses_rows(self):
        """Another process holds the write lock; a SIGTERM 6 s in: each line
        still in flight asked the database again and waited out its busy
        timeout (5 s), one after another, so the stop took until the lock
        ended (minutes for a full window). The lines after the first
        refusal are held without asking: the stop takes a few busy
        timeouts at most, and the batch completes after a restart, each
        line once."""
        n = 400
        self.start()
        fid, bid = self.running_batch(n, 12, done=1)
        holder = threading.Thread(target=hold_write_lock,
                                  args=(os.path.join(self.state, "batchgate.db"), 24))
        holder.start()
        try:
            time.sleep(6)
            t0 = time.monotonic()
            self.assertEqual(self.srv.stop(signal.SIGTERM, timeout=30), 0, self.srv.log()[-3000:])
            self.assertLess(time.monotonic() - t0, 14, self.srv.log()[-3000:])
        finally:
            holder.join()
        self.start()
        self.assert_each_line_once(bid, n)

    def test_state_database_refusing_writes_loses_no_line(self):
        """Another process holds the state database's write lock past the
        5 s busy timeout while lines come back: a line whose result could
        not be committed ran again (the batch ended "completed" without
        it, the line in no file). And a line answered is sent once: its
        result is held while the database refuses it, not sent upstream
        (and paid for) again when the batch is taken up, and again at each
        retry while the lock lasts (up to 256 lines a time)."""
        n = 400   # about 2 s of lines: the lock is taken while most are to come
        self.start()
        sent0 = self.sim_requests()
        fid, bid = self.running_batch(n, 12, done=1)
        hold_write_lock(os.path.join(self.state, "batchgate.db"), 6.5)
        self.assert_each_line_once(bid, n)
        log = self.srv.log()
        self.assertIn("the state database refused the others'", log)
        # One line a stall, not one per line in flight; the pause counted
        # from when they are back (it read "in 0.0 s", over already).
        stalls = log.count("refused the others'")
        self.assertLessEqual(log.count("batch %s: line " % bid), stalls, log[-3000:])
        self.assertEqual(len(re.findall(r"refused the others'; those answered are held and "
                                        r"committed when it is taken up \(in [1-9]\d* s\)",
                                        log)), stalls, log[-3000:])
        self.assertEqual(self.sim_requests() - sent0, n, log[-3000:])


# A strdup that fails the Nth copy of one string (FAIL_STRDUP="text:N"), to
# reach the out-of-memory path of a line's feed: a batch's custom_id is
# copied once when the input is checked and once when the line is sent.
FAIL_STRDUP_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
char *strdup(const char *s)
{
    static char *(*real)(const char *);
    static int seen;
    if (!real)
        real = (char *(*)(const char *))dlsym(RTLD_NEXT, "strdup");
    const char *spec = getenv("FAIL_STRDUP"), *colon = spec ? strrchr(spec, ':') : NULL;
    if (colon && strlen(s) == (size_t)(colon - spec) && !strncmp(s, spec, colon - spec) &&
        ++seen == atoi(colon + 1)) {
        errno = ENOMEM;
        return NULL;
    }
    return real(s);
}
"""


@unittest.skipUnless(shutil.which("cc"), "no C compiler for the strdup shim")
@unittest.skipIf(sanitizer_build(), "the strdup shim is preloaded, which the sanitizers' "
                 "runtimes refuse (they must come first); the plain build runs it")
class TestBatchOutOfMemory(BatchCase):
    def setUp(self):
        super().setUp()
        src = os.path.join(self.tmp, "failstrdup.c")
        lib = os.path.join(self.tmp, "failstrdup.so")
        with open(src, "w") as f:
            f.write(FAIL_STRDUP_C)
        subprocess.run(["cc", "-shared", "-fPIC", "-o", lib, src, "-ldl"], check=True)
        self.env = {"LD_PRELOAD": lib, "FAIL_STRDUP": "req-3:2"}

    def test_no_memory_for_a_line_does_not_end_the_batch(self):
        # No memory to send line 4 was taken for the end of the input: the
        # batch ended "completed" with 3 of its 10 lines. It is taken up
        # again after a pause and runs every line.
        self.start()
        fid = self.upload_ok(jsonl([line(i) for i in range(10)]))["id"]
        st, raw = self.create(fid)
        self.assertEqual(st, 200, raw)
        bid = json.loads(raw)["id"]
        self.srv.wait_log(r"batch %s: out of memory for line 4" % bid, timeout=20)
        self.assert_each_line_once(bid, 10)
        self.assertRegex(self.srv.log(), r"batch %s: \d+ of 10 lines have a result; no memory "
                                         r"for the next line: taken up again in 1 s" % bid)


class TestBatchExpiredOrder(BatchCase):
    """Lines wait for a scrape that never comes (metrics_interval_ms 0), so
    a batch's lines can fail (an unknown model: at once) beside lines that
    never run."""
    pool_kw = {"metrics_interval_ms": 0}

    def test_an_expired_batchs_error_file_is_in_input_order(self):
        # The lines that never ran were written after the committed errors,
        # against "lines are in input order in both files" (docs/LLM.md).
        self.start()
        fid = self.upload_ok(jsonl([line(0), line(1, model="nope"), line(2)]))["id"]
        bid = json.loads(self.create(fid)[1])["id"]
        deadline = time.monotonic() + 20
        while self.batch(bid)["request_counts"]["failed"] < 1:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        # Its window passed while batchgate was down (the running batch's
        # window is read when it is taken up).
        self.srv.kill()
        db = sqlite3.connect(os.path.join(self.state, "batchgate.db"), timeout=10)
        db.execute("UPDATE batches SET expires_at=? WHERE id=?", (int(time.time()) - 1, bid))
        db.commit()
        db.close()
        self.start()
        b = self.wait(bid, timeout=20)
        self.assertEqual(b["status"], "expired", b)
        self.assertEqual(b["request_counts"], {"total": 3, "completed": 0, "failed": 3})
        errs = self.content(b["error_file_id"])
        self.assertEqual([(e["custom_id"], e["error"]["code"]) for e in errs],
                         [("req-0", "batch_expired"), ("req-1", "model_not_found"),
                          ("req-2", "batch_expired")])


class TestBatchCancelAndIdle(BatchCase):
    sim_args = ("--speed", "1")
    pool_kw = {"offline": {"max_running": 2, "max_inflight_per_endpoint": 2}}

    def test_cancel(self):
        self.start()
        fid = self.upload_ok(jsonl([line(i, max_tokens=8) for i in range(200)]))["id"]
        b = json.loads(self.create(fid)[1])
        deadline = time.monotonic() + 30
        while self.batch(b["id"])["request_counts"]["completed"] < 4:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        st, raw = self.call("POST", "/v1/batches/%s/cancel" % b["id"])
        self.assertEqual(st, 200, raw)
        self.assertIn(json.loads(raw)["status"], ("cancelling", "cancelled"))
        b = self.wait(b["id"], timeout=10)
        self.assertEqual(b["status"], "cancelled")
        self.assertIsInstance(b["cancelled_at"], int)
        done = b["request_counts"]["completed"]
        self.assertLess(done, 200)
        self.assertEqual(len(self.content(b["output_file_id"])), done)
        # The calls in flight were closed: the servers stop those sequences.
        time.sleep(0.3)
        running = sum(self.sim.metrics(i).get("vllm:num_requests_running", 0)
                      for i in range(self.sim_endpoints))
        self.assertEqual(running, 0)
        self.assert_error(*self.call("POST", "/v1/batches/%s/cancel" % b["id"]), 409)

    def test_a_cancel_the_database_refuses_is_503_and_the_batch_runs_on(self):
        # The database's write lock held past the busy timeout: the cancel
        # was answered 200 while the batch stayed in_progress, then ran to
        # "completed", every line sent and paid for. It is now 503 with
        # Retry-After, the batch as it was; asked again, it is cancelled.
        self.start()
        n = 1000   # lines go on during the lock (their answers held, 256 at most)
        fid = self.upload_ok(jsonl([line(i, max_tokens=8) for i in range(n)]))["id"]
        bid = json.loads(self.create(fid)[1])["id"]
        deadline = time.monotonic() + 30
        while self.batch(bid)["request_counts"]["completed"] < 2:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        # Past two busy timeouts (5 s each): a result's commit the runner is
        # in when the cancel comes, then the cancel's own.
        holder = threading.Thread(target=hold_write_lock,
                                  args=(os.path.join(self.state, "batchgate.db"), 11.5))
        holder.start()
        try:
            time.sleep(0.3)
            c = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=30)
            c.request("POST", "/v1/batches/%s/cancel" % bid)
            r = c.getresponse()
            raw = r.read()
            c.close()
        finally:
            holder.join()
        self.assertEqual(r.status, 503, raw)
        self.assertEqual(r.getheader("Retry-After"), "5")
        self.assertIn("the batch is not cancelled", json.loads(raw)["error"]["message"])
        self.assertEqual(self.batch(bid)["status"], "in_progress")
        st, raw = self.call("POST", "/v1/batches/%s/cancel" % bid)
        self.assertEqual(st, 200, raw)
        b = self.wait(bid, timeout=20)
        self.assertEqual(b["status"], "cancelled", b)
        self.assertLess(b["request_counts"]["completed"], n)

    def test_a_cancel_after_a_refused_write_keeps_the_answers_held(self):
        # The database refused a result's row (its write lock held past the
        # busy timeout): the lines answered since are held in memory, to be
        # committed when the batch is taken up again. A cancel meanwhile,
        # the database writable again, dropped them: lines answered and
        # paid for upstream were missing from the output. Now committed.
        self.start()
        fid = self.upload_ok(jsonl([line(i, max_tokens=8) for i in range(300)]))["id"]
        bid = json.loads(self.create(fid)[1])["id"]
        deadline = time.monotonic() + 30
        while self.batch(bid)["request_counts"]["completed"] < 2:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        before = self.batch(bid)["request_counts"]["completed"]
        hold_write_lock(os.path.join(self.state, "batchgate.db"), 5.6)
        time.sleep(1.5)   # a pause after the refusal: lines answered, held
        self.srv.wait_log(r"batch %s: line \d+: .*database is locked" % bid, timeout=5)
        answered = self.sim_requests()
        st, raw = self.call("POST", "/v1/batches/%s/cancel" % bid)
        self.assertEqual(st, 200, raw)
        b = self.wait(bid, timeout=20)
        self.assertEqual(b["status"], "cancelled", b)
        done = b["request_counts"]["completed"]
        self.assertEqual(len(self.content(b["output_file_id"])), done)
        # Every line answered before the cancel is in the output, less those
        # whose answers were on their way back (4 in flight at most).
        self.assertGreaterEqual(done, answered - 4, (before, answered, b))
        self.assertGreater(done, before + 4, (before, answered, b))

    def test_saturated_pool_keeps_its_endpoints(self):
        """Ten long online calls hold 5 running sequences on each endpoint
        (over offline.max_running 2) for about 5 s: meanwhile the batch's
        lines wait and none is sent; once the online calls end, it runs."""
        self.start()
        errors = []

        def online():
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=60)
                c.request("POST", "/v1/chat/completions",
                          json.dumps({"model": "smol", "max_tokens": 250,
                                      "messages": [{"role": "user", "content": "hi"}]}),
                          {"Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                c.close()
                if r.status != 200:
                    errors.append(r.status)
            except OSError as e:
                errors.append(str(e))
        threads = [threading.Thread(target=online, daemon=True) for _ in range(10)]
        for t in threads:
            t.start()
        time.sleep(0.5)   # the online calls running, and scraped
        fid = self.upload_ok(jsonl([line(i, max_tokens=2) for i in range(20)]))["id"]
        b = json.loads(self.create(fid)[1])
        time.sleep(2.0)
        mid = self.batch(b["id"])
        running = [self.sim.metrics(i).get("vllm:num_requests_running", 0)
                   for i in range(self.sim_endpoints)]
        for t in threads:
            t.join(timeout=30)
        self.assertEqual(errors, [])
        self.assertEqual(sum(running), 10, "batch lines ran beside the online calls")
        self.assertEqual(mid["request_counts"]["completed"], 0,
                         "batch lines ran on a pool busy with online calls: %r" % mid)
        b = self.wait(b["id"], timeout=30)
        self.assertEqual(b["request_counts"]["completed"], 20)


if __name__ == "__main__":
    unittest.main()
