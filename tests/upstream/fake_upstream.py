#!/usr/bin/env python3
"""fake_upstream.py - a scriptable model server for testing batchgate's
upstream backend and reverse proxy: it speaks KServe v2 and TF-Serving,
counts the calls and rows it receives, and injects delays and faults.

    fake_upstream.py [--port 0] [--base-ms 2] [--per-row-ms 0.02] [--concurrency 1]

Prints "listening on 127.0.0.1:PORT" once ready. Models: any name; input
"x" of shape [-1, 4] FP32, output "y" of shape [-1, 3] with
y[j] = sum(row) + j (the same function as batchgate's synthetic backend).

    POST /v2/models/{m}/infer        KServe v2, any number of rows
    POST /v1/models/{m}:predict      TF-Serving {"instances": [...]}
    GET  /v2/models/{m}              metadata
    GET  /v1/models/{m}              TF-Serving's model status, as /v2/health/ready
    GET  /v2/health/ready            200, or 503 after POST /__health {"ok": false}; with
                                     {"ok": false, "stall_ms": N} it answers 503 only after N ms;
                                     with {"ok": true, "flap": N} only every Nth probe passes
    GET  /__stats                    {"calls": N, "rows": R, "max_rows": M, "conns": C,
                                      "probes": P, "echoes": E, "requests": Q, "drops": D,
                                      "hangs": H, "outputs": [names the last infer asked]}
    POST /__fault {"mode": M, "count": N}   the next N inference calls fail:
         "reset" (close without answer), "stall" (never answer), "500",
         "garbage" (200 with a body that is not JSON), "short" (fewer rows),
         "answer" (the request's "status", default 200, with its "body", given as it is,
         or its "raw" text, and its "headers", an object),
         "delay" (answered "ms" later than usual), "huge" (a 200 of 3 MiB of
         spaces), "bighead" (a 200 with a 300 KiB header);
         or the next N requests of any kind (not /__... nor health checks: those
         are `requests`) fail: "drop_reused" (a request that arrives on a
         connection which already served one: the connection is closed without
         an answer, as by a server whose keep-alive timeout struck), "hang"
         (never answered)
    POST /__reset                    zero the counters and clear faults
    anything else under /echo/...    echoes method, path, headers, body length and sha256
                                     (?reflect=1: answers with the body itself, chunked
                                     with &chunked=1) (proxy tests)
    GET  /blob/N[?chunked=1|close=1] N deterministic bytes, with Content-Length, chunked, or
                                     delimited by closing the connection; X-Sha256 header
    GET  /drop                       closes the connection without an answer
    GET  /switch                     answers 101 Switching Protocols (never asked for)
    GET  /drop_mid                   sends a head announcing 1 MB, half of it, then closes
    GET  /slow?ms=N                  answers after N ms
    GET  /gzipchunked                a 200 with Transfer-Encoding: gzip, chunked
    GET  /notmod[?chunked]           a 304 with Content-Length 1234 (a 204 saying chunked), no body
    POST /early                      401 before the body is read, then the body read and dropped

Standard library only; one thread per connection; at most --concurrency
inference calls run at once (like a single-GPU server)."""

import argparse
import hashlib
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE = {"calls": 0, "rows": 0, "max_rows": 0, "fault": None, "fault_count": 0, "conns": 0,
         "healthy": True, "probes": 0, "echoes": 0, "health_stall_ms": 0, "health_flap": 0,
         "any_fault": None, "any_count": 0, "requests": 0, "drops": 0, "hangs": 0,
         "fault_answer": (200, None, 0, {}), "outputs": []}
ANY_FAULTS = ("drop_reused", "hang")   # faults for requests of any kind (parse_request)
LOCK = threading.Lock()
ARGS = None
SLOTS = None


def answer_rows(rows):
    return [[sum(r) + j for j in range(3)] for r in rows]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.served = 0   # requests read on this connection
        with LOCK:
            STATE["conns"] += 1

    def is_probe(self):
        """A health check (KServe v2's, or TF-Serving's model status)."""
        return "/health/" in self.path or (self.command == "GET" and
                                           self.path.startswith("/v1/models/") and
                                           ":" not in self.path)

    def parse_request(self):
        # Faults for requests of any kind act here, before any handler runs.
        if not super().parse_request():
            return False
        self.served += 1
        if self.path.startswith("/__") or self.is_probe():
            return True
        with LOCK:
            STATE["requests"] += 1
            fault = STATE["any_fault"] if STATE["any_count"] > 0 else None
            if fault == "drop_reused" and self.served == 1:
                fault = None   # a fresh connection: only reused ones are dropped
            if fault:
                STATE["any_count"] -= 1
                STATE["drops" if fault == "drop_reused" else "hangs"] += 1
        if fault == "drop_reused":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return False
        if fault == "hang":
            time.sleep(3600)
            self.close_connection = True
            return False
        return True

    def body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass   # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def query(self):
        q = self.path.partition("?")[2]
        return dict(kv.partition("=")[::2] for kv in q.split("&") if kv)

    def send_chunked(self, data, piece=65536):
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(0, len(data), piece):
            c = data[i:i + piece]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(c), c))
        self.wfile.write(b"0\r\n\r\n")

    def blob(self):
        n = int(self.path.split("?")[0].split("/")[2])
        data = bytes(i % 251 for i in range(n))
        q = self.query()
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("X-Sha256", hashlib.sha256(data).hexdigest())
        if q.get("chunked") == "1":
            self.send_chunked(data if self.command != "HEAD" else b"")
        elif q.get("close") == "1":
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            self.wfile.write(data)
        else:
            self.send_header("Content-Length", str(n))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

    def reply(self, status, obj=None, raw=None, ctype="application/json", headers=None):
        data = raw if raw is not None else json.dumps(obj).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True   # the client left: nothing to tell it

    def take_fault(self):
        with LOCK:
            if STATE["fault_count"] > 0:
                STATE["fault_count"] -= 1
                self.fault_answer = STATE["fault_answer"]
                return STATE["fault"]
        return None

    def infer(self, rows):
        with LOCK:
            STATE["calls"] += 1
            STATE["rows"] += len(rows)
            STATE["max_rows"] = max(STATE["max_rows"], len(rows))
        fault = self.take_fault()
        if fault == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            self.close_connection = True
            self.connection.close()
            return None
        if fault == "stall":
            time.sleep(3600)
        if fault == "delay":
            time.sleep(self.fault_answer[2] / 1000)
        with SLOTS:
            time.sleep((ARGS.base_ms + ARGS.per_row_ms * len(rows)) / 1000)
        if fault == "500":
            self.reply(500, {"error": "injected failure"})
            return None
        if fault == "answer":
            status, body, _, headers = self.fault_answer
            if isinstance(body, bytes):
                self.reply(status, raw=body, headers=headers)
            else:
                self.reply(status, body, headers=headers)
            return None
        if fault == "huge":
            self.reply(200, raw=b" " * (3 << 20))
            return None
        if fault == "bighead":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * (300 << 10) +
                             b"\r\nContent-Length: 2\r\n\r\n{}")
            self.close_connection = True
            return None
        if fault == "garbage":
            self.reply(200, raw=b"this is not json")
            return None
        out = answer_rows(rows)
        if fault == "short":
            out = out[:-1]
        return out

    def do_GET(self):
        if self.path == "/__stats":
            with LOCK:
                self.reply(200, {k: STATE[k] for k in ("calls", "rows", "max_rows", "conns",
                                                       "probes", "echoes", "requests", "drops",
                                                       "hangs", "outputs")})
        elif self.path.startswith("/blob/"):
            self.blob()
        elif self.path == "/switch":   # 101 to a request that asked for no upgrade
            self.wfile.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n"
                             b"Connection: Upgrade\r\n\r\n")
            self.close_connection = True
        elif self.path == "/drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif self.path == "/drop_mid":
            self.send_response(200)
            self.send_header("Content-Length", str(1 << 20))
            self.end_headers()
            self.wfile.write(b"x" * (1 << 19))
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif self.path == "/gzipchunked":   # a coding llhttp would not undo
            self.wfile.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
                             b"5\r\nhello\r\n0\r\n\r\n")
        elif self.path.startswith("/notmod"):
            # A 304 with its representation's length (RFC 9110 15.4.5), or
            # a 204 saying chunked: no body follows either (RFC 9112 6.3).
            if "chunked" in self.path:
                self.wfile.write(b"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n")
            else:
                self.wfile.write(b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n"
                                 b"Content-Length: 1234\r\n\r\n")
        elif self.path.startswith("/slow"):
            time.sleep(int(self.query().get("ms", "1000")) / 1000)
            self.reply(200, {"slow": True})
        elif self.path == "/v2/health/ready":
            with LOCK:
                STATE["probes"] += 1
                ok = STATE["healthy"]
                stall = STATE["health_stall_ms"]
                flap = STATE["health_flap"]
                if flap:   # of every `flap` probes, only the last passes
                    STATE["flap_probes"] += 1
                    ok = STATE["flap_probes"] % flap == 0
            if stall:
                time.sleep(stall / 1000)
            self.reply(200 if ok else 503, {"ready": ok})
        elif self.path.startswith("/v1/models/") and ":" not in self.path:
            # TF-Serving's model status: its health probe (GET /v1/models/{m}).
            # 200 whatever the model's state, as TF Serving answers it: a
            # failed model is END with its error.
            with LOCK:
                STATE["probes"] += 1
                ok = STATE["healthy"]
            self.reply(200, {"model_version_status": [{
                "version": "1", "state": "AVAILABLE" if ok else "END",
                "status": {"error_code": "OK" if ok else "UNKNOWN",
                           "error_message": "" if ok else "the model failed to load"}}]})
        elif self.path.startswith("/v2/models/"):
            name = self.path.split("/")[3]
            self.reply(200, {"name": name, "versions": ["1"], "platform": "fake",
                             "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
                             "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 3]}]})
        elif self.path.startswith("/echo"):
            self.echo()
        else:
            self.reply(404, {"error": "no route " + self.path})

    def echo(self):
        with LOCK:
            STATE["echoes"] += 1
        body = self.body()
        q = self.query()
        if q.get("reflect") == "1":
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            if q.get("chunked") == "1":
                self.send_chunked(body)
            else:
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            return
        self.reply(200, {"method": self.command, "path": self.path,
                         "headers": {k.lower(): v for k, v in self.headers.items()},
                         "header_lines": [[k.lower(), v] for k, v in self.headers.items()],
                         "body_len": len(body), "sha256": hashlib.sha256(body).hexdigest()})

    def do_POST(self):
        if self.path.startswith("/early"):
            # Answered before the body is read (RFC 9112 9.5), the body then
            # read and dropped: the connection stays in step from here.
            self.reply(401, raw=b"nope")
            self.body()
            return
        if self.path == "/__fault":
            f = json.loads(self.body())
            with LOCK:
                if f["mode"] in ANY_FAULTS:
                    STATE["any_fault"], STATE["any_count"] = f["mode"], f.get("count", 1)
                else:
                    STATE["fault"], STATE["fault_count"] = f["mode"], f.get("count", 1)
                    # "raw": the body's text as it is (JSON that Python
                    # would not write, such as 1e400).
                    STATE["fault_answer"] = (f.get("status", 200),
                                             f["raw"].encode() if "raw" in f else f.get("body"),
                                             f.get("ms", 0), f.get("headers", {}))
            self.reply(200, {"ok": True})
        elif self.path == "/__health":
            req = json.loads(self.body())
            with LOCK:
                STATE["healthy"] = bool(req["ok"])
                STATE["health_stall_ms"] = int(req.get("stall_ms", 0))
                STATE["health_flap"] = int(req.get("flap", 0))
                STATE["flap_probes"] = 0
            self.reply(200, {"ok": True})
        elif self.path == "/__reset":
            self.body()
            with LOCK:
                STATE.update(calls=0, rows=0, max_rows=0, fault=None, fault_count=0, healthy=True,
                             health_flap=0,
                             any_fault=None, any_count=0, requests=0, drops=0, hangs=0)
            self.reply(200, {"ok": True})
        elif self.path.startswith("/v2/models/") and self.path.endswith("/infer"):
            req = json.loads(self.body())
            with LOCK:
                STATE["outputs"] = [o.get("name") for o in req.get("outputs", [])]
            if any(n != "y" for n in STATE["outputs"]):
                self.reply(400, {"error": "unknown output %r" % STATE["outputs"]})
                return
            inp = req["inputs"][0]
            flat, shape = inp["data"], inp["shape"]
            rows = [flat[i * shape[1]:(i + 1) * shape[1]] for i in range(shape[0])]
            out = self.infer(rows)
            if out is None:
                return
            resp = {"model_name": self.path.split("/")[3], "model_version": "1",
                    "outputs": [{"name": "y", "datatype": "FP32", "shape": [len(out), 3],
                                 "data": [v for r in out for v in r]}]}
            if "id" in req:
                resp["id"] = req["id"]
            self.reply(200, resp)
        elif self.path.startswith("/v1/models/") and self.path.endswith(":predict"):
            req = json.loads(self.body())
            out = self.infer(req["instances"])
            if out is not None:
                self.reply(200, {"predictions": out})
        elif self.path.startswith("/echo"):
            self.echo()
        else:
            self.body()
            self.reply(404, {"error": "no route " + self.path})

    do_PUT = do_POST
    do_PATCH = do_POST
    do_DELETE = do_GET
    do_HEAD = do_GET


def main():
    global ARGS, SLOTS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--base-ms", type=float, default=2.0)
    ap.add_argument("--per-row-ms", type=float, default=0.02)
    ap.add_argument("--concurrency", type=int, default=1)
    ARGS = ap.parse_args()
    SLOTS = threading.BoundedSemaphore(ARGS.concurrency)
    # A backlog of 5 (socketserver's default) delays bursts of connects by a
    # SYN retry (1 s), which makes timing-based tests flaky.
    ThreadingHTTPServer.request_queue_size = 128
    httpd = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    httpd.daemon_threads = True
    print("listening on 127.0.0.1:%d" % httpd.server_address[1], flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
