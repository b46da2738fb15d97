#!/usr/bin/env python3
"""llmsim.py - N simulated vLLM-like, OpenAI-compatible LLM servers in one
process, so that batchgate's endpoint picker can be tested against 100
endpoints on one machine (issue 24, point 7).

    llmsim.py [--endpoints 3] [--base-port 0] [--speed 1] [--kv-blocks 512]
              [--fault 2:500] ...

Prints "llmsim: endpoint I on 127.0.0.1:PORT" for each endpoint, then
"llmsim: ready". Standard library only, one asyncio loop; every endpoint
has its own port, scheduler, KV cache and metrics.

The model of one endpoint (docs/LLMSIM.md says the same at more length):

- Tokens. A chat request's messages are rendered with a fixed ChatML-like
  template ("<|im_start|>ROLE\\nCONTENT<|im_end|>\\n" per message, then
  "<|im_start|>assistant\\n"); a completion's prompt is used as is. The UTF-8
  bytes are cut into tokens of 4 bytes (the last one shorter): a stand-in
  for a real tokenizer that is deterministic and shares prefixes the way a
  real one does.
- KV blocks of --block-size (16) tokens, --kv-blocks per endpoint. A request
  reserves blocks for prompt + max_tokens when it is admitted (no
  preemption is modelled, so it must never run out mid-way); one that could
  never fit is refused with 400, one that cannot fit now waits.
- Prefix cache. Each full block of the prompt is named by a hash of (the
  previous block's hash, the block's bytes). Blocks whose last holder ended
  stay in an LRU of free-but-cached blocks, evicted only when a new block
  is needed. A prompt whose leading blocks are known (held or in the LRU)
  prefills only the rest; those tokens are prefix-cache hits. A prompt's
  last block is never a hit if it ends the prompt exactly (one token must
  be computed to produce the first output token).
- Continuous batching in steps. Each step admits waiting requests in FIFO
  order while blocks (and --max-num-seqs) allow, prefills them, and decodes
  one token for every running sequence (a newly admitted one gets its first
  token at the end of its prefill step). Step time =
  prefill_s_per_token x uncached prompt tokens admitted
  + decode_step_s + decode_s_per_seq x running, divided by --speed.
- Output. The k-th generated token is WORDS[k % len(WORDS)] (with a space
  before all but the first), and a request always generates max_tokens
  tokens (finish_reason "length"): tests can predict the text exactly.
- A client that disconnects before its answer is complete aborts its
  sequence, whose blocks are freed at once.

Fault injection per endpoint, at start (--fault I:KIND) or at run time
(POST /__fault {"kind": KIND}, "none" clears): "500" (completions answered
500), "404" (completions answered 404, as vLLM answers a model it does not
serve), "bad_sse" (a stream sends one chunk, then an event that is not JSON,
then ends without [DONE]; non-streaming bodies are not JSON), "stop_mid"
(the connection is closed after half the tokens), "hang" (completions are
never answered), "no_metrics" (/metrics answers 503), "slow_metrics" (the
next `count` /metrics answers, default 1, each wait `ms`, default 500,
then the fault clears itself), "bad_usage" (usage says -100000 prompt tokens
and 2^63-1 completion tokens). POST /__restart: the endpoint as a freshly
restarted server (empty KV cache, counters from zero); only when idle.
--no-prompt-counter leaves vllm:prompt_tokens_total out of /metrics, as a
server that reports none (batchgate then cannot see a restart by it).

One file of about 900 lines: the HTTP side, the scheduler and the metrics
of one endpoint are read together, and the tests start it as one script.
"""

import argparse
import asyncio
import collections
import hashlib
import itertools
import json
import os
import signal
import sys
import time

WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
         "india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa")
BYTES_PER_TOKEN = 4
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56,
                5.12, 10.24, 20.48, 40.96)
FAULT_KINDS = ("none", "500", "404", "bad_sse", "stop_mid", "hang", "no_metrics", "slow_metrics",
               "bad_usage")
MAX_HEAD_BYTES = 16 * 1024


# ---------------------------------------------------------------- tokens

def render_chat(messages):
    """The chat template: fixed, so that equal conversations are equal bytes
    and a shared system prompt is a shared prefix of tokens."""
    parts = []
    for m in messages:
        parts.append("<|im_start|>%s\n%s<|im_end|>\n" % (m["role"], m["content"]))
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def count_tokens(data):
    """Tokens of 4 bytes each: len(bytes) / 4, rounded up."""
    return (len(data) + BYTES_PER_TOKEN - 1) // BYTES_PER_TOKEN


def block_hashes(data, block_size):
    """Hashes of the prompt's full blocks, each chained to the one before, so
    a block is found only after the same whole prefix (as in vLLM)."""
    step = block_size * BYTES_PER_TOKEN
    out, prev = [], b""
    for off in range(0, len(data) - step + 1, step):
        prev = hashlib.blake2b(prev + data[off:off + step], digest_size=16).digest()
        out.append(prev)
    return out


def token_text(k):
    """The k-th generated token's text (deterministic, see the docstring)."""
    word = WORDS[k % len(WORDS)]
    return word if k == 0 else " " + word


def generated_text(n):
    return "".join(token_text(k) for k in range(n))


# ---------------------------------------------------------------- KV cache

class KVCache:
    """Blocks in use (held by a running sequence) and free blocks, some of
    which still hold a cached prefix block (the LRU). used + len(lru) never
    exceeds total: a cached block is evicted when its room is needed."""

    def __init__(self, total):
        self.total = total
        self.used = 0
        self.refs = {}                          # hash -> holders (> 0)
        self.lru = collections.OrderedDict()    # hash -> None, no holder

    def cached_prefix(self, hashes):
        """How many leading blocks are known, held or in the LRU."""
        n = 0
        for h in hashes:
            if h not in self.refs and h not in self.lru:
                break
            n += 1
        return n

    def allocate(self, hashes, hit, n_blocks):
        """Takes n_blocks for a sequence whose first `hit` blocks are cached;
        returns the hashes it now holds and its count of anonymous blocks,
        or None when they do not fit now."""
        revive = sum(1 for h in hashes[:hit] if h in self.lru)
        if self.used + revive + (n_blocks - hit) > self.total:
            return None
        held = []
        for h in hashes[:hit]:
            self.lru.pop(h, None)
            self.refs[h] = self.refs.get(h, 0) + 1
            held.append(h)
        anon = 0
        for i in range(hit, n_blocks):
            h = hashes[i] if i < len(hashes) else None
            if h is not None and h not in self.refs and h not in self.lru:
                self.refs[h] = 1
                held.append(h)
            else:
                anon += 1
        self.used += revive + (n_blocks - hit)
        while self.used + len(self.lru) > self.total:
            self.lru.popitem(last=False)
        return held, anon

    def release(self, held, anon):
        """Frees a sequence's blocks; its prefix blocks stay cached in the LRU."""
        for h in held:
            self.refs[h] -= 1
            if self.refs[h] == 0:
                del self.refs[h]
                self.lru[h] = None
                self.used -= 1
        self.used -= anon

    def usage(self):
        return self.used / self.total if self.total else 0.0


# ---------------------------------------------------------------- metrics

class Histogram:
    """Cumulative-bucket histogram in Prometheus' text form."""

    def __init__(self, buckets):
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.sum = 0.0
        self.count = 0

    def observe(self, v):
        self.sum += v
        self.count += 1
        for i, b in enumerate(self.buckets):
            if v <= b:
                self.counts[i] += 1

    def lines(self, name, labels):
        out = []
        for b, c in zip(self.buckets, self.counts):
            out.append('%s_bucket{le="%s",%s} %d' % (name, repr(float(b)), labels, c))
        out.append('%s_bucket{le="+Inf",%s} %d' % (name, labels, self.count))
        out.append("%s_sum{%s} %r" % (name, labels, self.sum))
        out.append("%s_count{%s} %d" % (name, labels, self.count))
        return out


class Stats:
    """One endpoint's counters, named as vLLM names them when rendered."""

    def __init__(self):
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.success = 0
        self.aborted = 0
        self.streamed = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.e2e = Histogram(TTFT_BUCKETS)


# ---------------------------------------------------------------- scheduler

class Seq:
    """One request inside the engine. Tokens reach the HTTP side through
    `queue` (token index, or None at the end)."""

    _ids = itertools.count(1)

    def __init__(self, prompt, max_tokens, block_size):
        self.id = next(Seq._ids)
        self.prompt_tokens = count_tokens(prompt)
        self.hashes = block_hashes(prompt, block_size)
        self.max_tokens = max_tokens
        self.n_blocks = -(-(self.prompt_tokens + max_tokens) // block_size)
        self.arrival = time.monotonic()
        self.generated = 0
        self.uncached = self.prompt_tokens
        self.held, self.anon = [], 0
        self.queue = asyncio.Queue()
        self.finished = False
        self.aborted = False


class Engine:
    """The scheduler of one endpoint: waiting FIFO, running set, KV cache,
    one step at a time (see the module docstring)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.kv = KVCache(cfg.kv_blocks)
        self.waiting = collections.deque()
        self.running = []
        self.stats = Stats()
        self.wake = asyncio.Event()

    def fits_ever(self, seq):
        return seq.n_blocks <= self.kv.total

    def submit(self, seq):
        self.waiting.append(seq)
        self.wake.set()

    def abort(self, seq):
        """A client went away: the sequence leaves at once, blocks freed."""
        if seq.finished:
            return
        seq.finished = seq.aborted = True
        if seq in self.running:
            self.running.remove(seq)
            self.kv.release(seq.held, seq.anon)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.stats.aborted += 1
        seq.queue.put_nowait(None)
        self.wake.set()

    def _admit(self):
        """FIFO admission while blocks and --max-num-seqs allow; the head
        that does not fit blocks those behind it (no reordering)."""
        admitted = []
        bs = self.cfg.block_size
        while self.waiting and len(self.running) < self.cfg.max_num_seqs:
            seq = self.waiting[0]
            full = len(seq.hashes)
            if full * bs == seq.prompt_tokens:
                full -= 1              # one prompt token must be computed
            hit = self.kv.cached_prefix(seq.hashes[:max(full, 0)])
            got = self.kv.allocate(seq.hashes, hit, seq.n_blocks)
            if got is None:
                break
            self.waiting.popleft()
            seq.held, seq.anon = got
            seq.uncached = seq.prompt_tokens - hit * bs
            st = self.stats
            st.prompt_tokens += seq.prompt_tokens
            st.prefix_queries += seq.prompt_tokens
            st.prefix_hits += hit * bs
            self.running.append(seq)
            admitted.append(seq)
        return admitted

    def _step_seconds(self, admitted):
        c = self.cfg
        uncached = sum(s.uncached for s in admitted)
        return (c.prefill_s_per_token * uncached + c.decode_step_s
                + c.decode_s_per_seq * len(self.running)) / c.speed

    def _emit(self):
        """One decoded token for every running sequence."""
        now = time.monotonic()
        for seq in list(self.running):
            k = seq.generated
            seq.generated += 1
            self.stats.generation_tokens += 1
            if k == 0:
                self.stats.ttft.observe(now - seq.arrival)
            seq.queue.put_nowait(k)
            if seq.generated >= seq.max_tokens:
                self.running.remove(seq)
                self.kv.release(seq.held, seq.anon)
                seq.finished = True
                self.stats.success += 1
                self.stats.e2e.observe(now - seq.arrival)
                seq.queue.put_nowait(None)

    async def run(self):
        """The step loop; idle (no timer) while nothing runs or can run."""
        while True:
            admitted = self._admit()
            if not self.running:
                self.wake.clear()
                await self.wake.wait()
                continue
            await asyncio.sleep(self._step_seconds(admitted))
            self._emit()


# ---------------------------------------------------------------- HTTP

class HttpError(Exception):
    """An answer in OpenAI's error shape, then (if close) the connection ends."""

    def __init__(self, status, message, etype="BadRequestError", param=None, close=False):
        super().__init__(message)
        self.status, self.message, self.etype = status, message, etype
        self.param, self.close = param, close

    def body(self):
        return {"error": {"message": self.message, "type": self.etype,
                          "param": self.param, "code": self.status}}


REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           408: "Request Timeout", 411: "Length Required", 413: "Payload Too Large",
           431: "Request Header Fields Too Large", 500: "Internal Server Error",
           503: "Service Unavailable"}


class Request:
    def __init__(self, method, path, version, headers, body):
        self.method, self.path, self.version = method, path, version
        self.headers, self.body = headers, body

    def keep_alive(self):
        conn = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return conn == "keep-alive"
        return conn != "close"


class Conn:
    """One client connection: requests read one after another (keep-alive),
    with our own bounded parser; bytes that arrive while an answer is being
    generated are kept in self.buf for the next request."""

    def __init__(self, ep, reader, writer):
        self.ep, self.reader, self.writer = ep, reader, writer
        self.buf = bytearray()

    async def _fill(self, timeout):
        data = await asyncio.wait_for(self.reader.read(65536), timeout)
        if not data:
            raise EOFError
        self.buf += data

    async def _read_exact(self, n, timeout):
        while len(self.buf) < n:
            await self._fill(timeout)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    async def _read_line(self, limit, timeout):
        while b"\r\n" not in self.buf:
            if len(self.buf) > limit:
                raise HttpError(400, "chunk size line too long", close=True)
            await self._fill(timeout)
        i = self.buf.index(b"\r\n")
        line = bytes(self.buf[:i])
        del self.buf[:i + 2]
        return line

    async def read_request(self):
        """The next request, or None at a clean end of the connection."""
        cfg = self.ep.cfg
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > MAX_HEAD_BYTES:
                raise HttpError(431, "request head over %d bytes" % MAX_HEAD_BYTES, close=True)
            try:
                await self._fill(cfg.idle_timeout_s if not self.buf else cfg.io_timeout_s)
            except EOFError:
                if self.buf:
                    raise HttpError(400, "connection closed inside a request head", close=True)
                return None
        i = self.buf.index(b"\r\n\r\n")
        if i > MAX_HEAD_BYTES:
            raise HttpError(431, "request head over %d bytes" % MAX_HEAD_BYTES, close=True)
        head = bytes(self.buf[:i]).decode("latin-1")
        del self.buf[:i + 4]
        lines = head.split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
            raise HttpError(400, "malformed request line %r" % lines[0][:100], close=True)
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise HttpError(400, "malformed header line %r" % line[:100], close=True)
            headers[name.lower()] = value.strip()
        body = await self._read_body(headers)
        return Request(parts[0], parts[1].split("?", 1)[0], parts[2], headers, body)

    async def _read_body(self, headers):
        cfg = self.ep.cfg
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return await self._read_chunked()
        cl = headers.get("content-length")
        if cl is None:
            return b""
        if not cl.isdigit():
            raise HttpError(400, "Content-Length is not a number", close=True)
        n = int(cl)
        if n > cfg.max_body_bytes:
            raise HttpError(413, "body of %d bytes is over the limit of %d"
                            % (n, cfg.max_body_bytes), close=True)
        return await self._read_exact(n, cfg.io_timeout_s)

    async def _read_chunked(self):
        cfg = self.ep.cfg
        body = bytearray()
        while True:
            line = (await self._read_line(256, cfg.io_timeout_s)).split(b";")[0].strip()
            try:
                size = int(line, 16)
            except ValueError:
                raise HttpError(400, "malformed chunk size", close=True)
            if len(body) + size > cfg.max_body_bytes:
                raise HttpError(413, "body over the limit of %d bytes" % cfg.max_body_bytes,
                                close=True)
            if size == 0:
                while await self._read_line(MAX_HEAD_BYTES, cfg.io_timeout_s):
                    pass                    # trailers, ignored
                return bytes(body)
            body += await self._read_exact(size, cfg.io_timeout_s)
            if await self._read_exact(2, cfg.io_timeout_s) != b"\r\n":
                raise HttpError(400, "chunk not followed by CRLF", close=True)

    # -- writing

    def head(self, status, ctype, length=None, close=False):
        lines = ["HTTP/1.1 %d %s" % (status, REASONS.get(status, "Unknown")),
                 "Content-Type: " + ctype, "Server: llmsim"]
        lines.append("Content-Length: %d" % length if length is not None
                     else "Transfer-Encoding: chunked")
        if close:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    async def send(self, status, body, ctype="application/json", close=False):
        if not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode()
        self.writer.write(self.head(status, ctype, len(body), close) + body)
        await self.writer.drain()

    async def send_chunk(self, data):
        self.writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        await self.writer.drain()

    # -- the loop

    async def serve(self):
        while True:
            try:
                req = await self.read_request()
            except HttpError as e:
                await self.send(e.status, e.body(), close=True)
                return
            if req is None:
                return
            close = not req.keep_alive()
            try:
                close = await self.ep.dispatch(self, req) or close
            except HttpError as e:
                await self.send(e.status, e.body(), close=close or e.close)
                close = close or e.close
            if close:
                return


# ---------------------------------------------------------------- OpenAI API

def parse_json(body):
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise HttpError(400, "body is not valid JSON: %s" % e)
    if not isinstance(obj, dict):
        raise HttpError(400, "body must be a JSON object")
    return obj


def message_text(m, i):
    """A message's content as text: a string, or a list of text parts."""
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
        raise HttpError(400, "messages[%d] must be an object with a string role" % i,
                        param="messages")
    c = m.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                   and isinstance(p.get("text"), str) for p in c):
        return "".join(p["text"] for p in c)
    raise HttpError(400, "messages[%d].content must be a string or a list of text parts" % i,
                    param="messages")


def request_prompt(obj, chat):
    """The prompt bytes the engine sees, after the chat template."""
    if chat:
        msgs = obj.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise HttpError(400, "messages must be a non-empty array", param="messages")
        texts = [message_text(m, i) for i, m in enumerate(msgs)]
        return render_chat([{"role": m["role"], "content": t}
                            for m, t in zip(msgs, texts)]).encode()
    p = obj.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
        p = p[0]
    if not isinstance(p, str):
        raise HttpError(400, "prompt must be a string (one prompt per request here)",
                        param="prompt")
    return p.encode()


def request_max_tokens(obj, default):
    v = obj.get("max_completion_tokens", obj.get("max_tokens", default))
    if v is None:
        v = default
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise HttpError(400, "max_tokens must be an integer >= 1", param="max_tokens")
    return v


class Endpoint:
    """One simulated server: its engine, fault and routes."""

    def __init__(self, index, cfg, fault):
        self.index, self.cfg, self.fault = index, cfg, fault
        self.slow_ms, self.slow_count = 500, 0      # fault slow_metrics
        self.engine = Engine(cfg)
        self.ids = itertools.count(1)
        self.port = None

    async def on_conn(self, reader, writer):
        conn = Conn(self, reader, writer)
        try:
            await conn.serve()
        except (EOFError, ConnectionError, asyncio.TimeoutError, OSError):
            pass
        except Exception as e:         # a bug here: say so, keep the other connections
            print("llmsim: endpoint %d: connection failed: %r" % (self.index, e),
                  file=sys.stderr, flush=True)
        finally:
            writer.close()

    async def dispatch(self, conn, req):
        """Routes a request; returns True when the connection must close."""
        routes = {("GET", "/v1/models"): self.models, ("GET", "/metrics"): self.metrics,
                  ("GET", "/health"): self.health, ("GET", "/__state"): self.state,
                  ("POST", "/__fault"): self.set_fault,
                  ("POST", "/__restart"): self.restart,
                  ("POST", "/v1/chat/completions"): self.chat,
                  ("POST", "/v1/completions"): self.completions}
        fn = routes.get((req.method, req.path))
        if fn is None:
            if any(p == req.path for _, p in routes):
                raise HttpError(405, "method %s not allowed on %s" % (req.method, req.path))
            raise HttpError(404, "no route %s" % req.path, etype="NotFoundError")
        return await fn(conn, req)

    async def models(self, conn, req):
        await conn.send(200, {"object": "list", "data": [
            {"id": self.cfg.model, "object": "model", "created": int(self.cfg.started),
             "owned_by": "llmsim", "root": self.cfg.model,
             "max_model_len": self.cfg.kv_blocks * self.cfg.block_size}]})

    async def health(self, conn, req):
        await conn.send(200, b"", ctype="text/plain")

    async def state(self, conn, req):
        e = self.engine
        await conn.send(200, {"running": len(e.running), "waiting": len(e.waiting),
                              "kv_used_blocks": e.kv.used, "kv_cached_free_blocks": len(e.kv.lru),
                              "kv_total_blocks": e.kv.total, "fault": self.fault})

    async def set_fault(self, conn, req):
        obj = parse_json(req.body)
        kind = obj.get("kind")
        if kind not in FAULT_KINDS:
            raise HttpError(400, "kind must be one of %s" % ", ".join(FAULT_KINDS), param="kind")
        if kind == "slow_metrics":
            self.slow_ms, self.slow_count = int(obj.get("ms", 500)), int(obj.get("count", 1))
        self.fault = kind
        await conn.send(200, {"fault": kind})

    async def restart(self, conn, req):
        e = self.engine
        if e.running or e.waiting:
            raise HttpError(409, "llmsim: /__restart only when idle")
        e.kv = KVCache(self.cfg.kv_blocks)
        e.stats = Stats()
        await conn.send(200, {"restarted": True})

    async def metrics(self, conn, req):
        if self.fault == "no_metrics":
            raise HttpError(503, "llmsim: injected fault no_metrics", etype="ServiceUnavailable")
        if self.fault == "slow_metrics":
            self.slow_count -= 1
            if self.slow_count <= 0:
                self.fault = "none"
            await asyncio.sleep(self.slow_ms / 1000)
        await conn.send(200, render_metrics(self).encode(),
                        ctype="text/plain; version=0.0.4; charset=utf-8")

    async def chat(self, conn, req):
        return await self.complete(conn, req, chat=True)

    async def completions(self, conn, req):
        return await self.complete(conn, req, chat=False)

    async def complete(self, conn, req, chat):
        obj = parse_json(req.body)
        model = obj.get("model")
        if model != self.cfg.model:
            raise HttpError(404, "The model `%s` does not exist." % model,
                            etype="NotFoundError", param="model")
        prompt = request_prompt(obj, chat)
        max_tokens = request_max_tokens(obj, self.cfg.default_max_tokens)
        stream = bool(obj.get("stream", False))
        so = obj.get("stream_options") or {}
        usage_chunk = stream and isinstance(so, dict) and bool(so.get("include_usage"))
        seq = Seq(prompt, max_tokens, self.cfg.block_size)
        if not self.engine.fits_ever(seq):
            raise HttpError(400, "This model's maximum context length is %d tokens; the "
                            "request has %d prompt tokens and max_tokens %d"
                            % (self.cfg.kv_blocks * self.cfg.block_size, seq.prompt_tokens,
                               max_tokens), param="max_tokens")
        if self.fault == "500":
            raise HttpError(500, "llmsim: injected fault 500", etype="InternalServerError")
        if self.fault == "404":
            raise HttpError(404, "The model `%s` does not exist." % obj.get("model"),
                            etype="NotFoundError", param="model")
        self.engine.stats.streamed += stream
        reply = Reply(self, conn, seq, chat, usage_chunk)
        return await reply.run(stream)


class Reply:
    """One completion's answer, streaming or not, while a watcher notices a
    client that goes away (and aborts the sequence)."""

    def __init__(self, ep, conn, seq, chat, usage_chunk):
        self.ep, self.conn, self.seq = ep, conn, seq
        self.chat, self.usage_chunk = chat, usage_chunk
        prefix = "chatcmpl-" if chat else "cmpl-"
        self.id = "%s%d-%d" % (prefix, ep.index, next(ep.ids))
        self.created = int(time.time())

    async def _watch(self):
        """Reads ahead while the answer is made: EOF means the client left."""
        try:
            while True:
                data = await self.conn.reader.read(65536)
                if not data:
                    break
                self.conn.buf += data
        except (ConnectionError, OSError):
            pass
        self.ep.engine.abort(self.seq)

    async def run(self, stream):
        if self.ep.fault == "hang":
            watcher = asyncio.ensure_future(self._watch())
            await watcher
            return True
        watcher = asyncio.ensure_future(self._watch())
        self.ep.engine.submit(self.seq)
        try:
            if stream:
                return await self._stream()
            return await self._whole()
        except (ConnectionError, OSError):
            self.ep.engine.abort(self.seq)
            return True
        finally:
            watcher.cancel()

    def usage(self):
        s = self.seq
        if self.ep.fault == "bad_usage":   # a server reporting what no call used
            return {"prompt_tokens": -100000, "completion_tokens": 2 ** 63 - 1,
                    "total_tokens": 0}
        return {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.generated,
                "total_tokens": s.prompt_tokens + s.generated}

    def _envelope(self, obj_kind, choices):
        return {"id": self.id, "object": obj_kind, "created": self.created,
                "model": self.ep.cfg.model, "choices": choices}

    async def _tokens(self):
        """Yields token indices until the sequence ends (None)."""
        while True:
            k = await self.seq.queue.get()
            if k is None:
                return
            yield k

    async def _whole(self):
        n = 0
        async for _ in self._tokens():
            n += 1
        if self.seq.aborted:
            return True
        text = generated_text(n)
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "logprobs": None, "finish_reason": "length"}
            obj = self._envelope("chat.completion", [choice])
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
            obj = self._envelope("text_completion", [choice])
        obj["usage"] = self.usage()
        body = json.dumps(obj).encode()
        fault = self.ep.fault
        if fault == "bad_sse":
            body = body[:len(body) // 2]
            await self.conn.send(200, body)
            return False
        if fault == "stop_mid":
            self.conn.writer.write(self.conn.head(200, "application/json", len(body))
                                   + body[:len(body) // 2])
            await self.conn.writer.drain()
            return True
        await self.conn.send(200, body)
        return False

    def _chunk(self, k, finish):
        """The SSE event of token k (or, k None, the closing one)."""
        text = token_text(k) if k is not None else ""
        if self.chat:
            delta = {} if k is None else {"content": text}
            if k == 0:
                delta = {"role": "assistant", "content": text}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            obj = self._envelope("chat.completion.chunk", [choice])
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
            obj = self._envelope("text_completion", [choice])
        if self.ep.cfg.stamp:
            # When it left, on the wall clock: a client on this host can tell
            # how long a chunk took to reach it (through a gateway or not).
            obj["llmsim_sent_ns"] = time.time_ns()
        return sse(obj)

    async def _stream(self):
        conn, fault = self.conn, self.ep.fault
        conn.writer.write(conn.head(200, "text/event-stream; charset=utf-8"))
        half = max(1, self.seq.max_tokens // 2)
        async for k in self._tokens():
            if fault == "stop_mid" and k >= half:
                self.ep.engine.abort(self.seq)
                return True
            await conn.send_chunk(self._chunk(k, None))
            if fault == "bad_sse":
                await conn.send_chunk(b'data: {"id": "broken\n\n')
                await conn.send_chunk(b"")
                self.ep.engine.abort(self.seq)
                return True
        if self.seq.aborted:
            return True
        await conn.send_chunk(self._chunk(None, "length"))
        if self.usage_chunk:
            obj = self._envelope("chat.completion.chunk" if self.chat else "text_completion", [])
            obj["usage"] = self.usage()
            await conn.send_chunk(sse(obj))
        await conn.send_chunk(b"data: [DONE]\n\n")
        await conn.send_chunk(b"")
        return False


def sse(obj):
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def render_metrics(ep):
    """Prometheus text with vLLM's (v1) names, labelled model_name."""
    e, st, cfg = ep.engine, ep.engine.stats, ep.cfg
    lab = 'model_name="%s"' % cfg.model
    out = []

    def one(name, kind, help_, value, labels=lab):
        out.append("# HELP %s %s" % (name, help_))
        out.append("# TYPE %s %s" % (name, kind))
        out.append("%s{%s} %r" % (name, labels, float(value)))

    one("vllm:num_requests_running", "gauge", "Requests in the running batch.", len(e.running))
    one("vllm:num_requests_waiting", "gauge", "Requests waiting for admission.", len(e.waiting))
    one("vllm:kv_cache_usage_perc", "gauge", "KV blocks in use / total (0..1).", e.kv.usage())
    if not cfg.no_prompt_counter:
        one("vllm:prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
            st.prompt_tokens)
    one("vllm:generation_tokens_total", "counter", "Tokens generated.", st.generation_tokens)
    one("vllm:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix "
        "cache.", st.prefix_queries)
    one("vllm:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.",
        st.prefix_hits)
    one("vllm:num_preemptions_total", "counter", "Preemptions (never: not modelled).", 0)
    one("vllm:request_success_total", "counter", "Requests finished.", st.success,
        labels='finished_reason="length",' + lab)
    one("vllm:cache_config_info", "gauge", "KV cache configuration.", 1,
        labels='block_size="%d",num_gpu_blocks="%d",%s' % (cfg.block_size, cfg.kv_blocks, lab))
    one("llmsim:requests_aborted_total", "counter", "Requests aborted by a client that left "
        "(llmsim's own).", st.aborted)
    one("llmsim:requests_streamed_total", "counter", "Completions asked as a stream "
        "(llmsim's own).", st.streamed)
    for name, h, help_ in (("vllm:time_to_first_token_seconds", st.ttft,
                            "Time to first token, wall seconds."),
                           ("vllm:e2e_request_latency_seconds", st.e2e,
                            "End-to-end request latency, wall seconds.")):
        out.append("# HELP %s %s" % (name, help_))
        out.append("# TYPE %s histogram" % name)
        out.extend(h.lines(name, lab))
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- main

def parse_args(argv):
    p = argparse.ArgumentParser(description="N simulated vLLM-like servers in one process")
    p.add_argument("--endpoints", type=int, default=3)
    p.add_argument("--base-port", type=int, default=0,
                   help="endpoint i listens on base+i; 0: any free port")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--model", default="llmsim", help="the served model name")
    p.add_argument("--kv-blocks", type=int, default=512, help="KV blocks per endpoint")
    p.add_argument("--block-size", type=int, default=16, help="tokens per KV block")
    p.add_argument("--max-num-seqs", type=int, default=256, help="running sequences at most")
    p.add_argument("--prefill-s-per-token", type=float, default=0.0002)
    p.add_argument("--decode-step-s", type=float, default=0.02)
    p.add_argument("--decode-s-per-seq", type=float, default=0.0002)
    p.add_argument("--speed", type=float, default=1.0, help="simulated time runs this many "
                   "times faster than real time")
    p.add_argument("--default-max-tokens", type=int, default=16)
    p.add_argument("--stamp", action="store_true",
                   help="each streamed chunk carries llmsim_sent_ns, its wall-clock send time")
    p.add_argument("--max-body-bytes", type=int, default=4 * 1024 * 1024)
    p.add_argument("--idle-timeout-s", type=float, default=300.0,
                   help="an idle keep-alive connection is closed after this")
    p.add_argument("--io-timeout-s", type=float, default=30.0,
                   help="a request's head or body must arrive within this")
    p.add_argument("--no-prompt-counter", action="store_true",
                   help="/metrics without vllm:prompt_tokens_total")
    p.add_argument("--fault", action="append", default=[], metavar="I:KIND",
                   help="fault of endpoint I: " + ", ".join(FAULT_KINDS[1:]))
    a = p.parse_args(argv)
    if a.endpoints < 1 or a.kv_blocks < 1 or a.block_size < 1 or a.speed <= 0:
        p.error("--endpoints, --kv-blocks, --block-size and --speed must be positive")
    a.faults = {}
    for f in a.fault:
        i, _, kind = f.partition(":")
        if not i.isdigit() or int(i) >= a.endpoints or kind not in FAULT_KINDS:
            p.error("--fault %r: want I:KIND, I < --endpoints, KIND one of %s"
                    % (f, ", ".join(FAULT_KINDS)))
        a.faults[int(i)] = kind
    a.started = time.time()
    return a


async def serve(cfg):
    endpoints, servers = [], []
    for i in range(cfg.endpoints):
        ep = Endpoint(i, cfg, cfg.faults.get(i, "none"))
        port = cfg.base_port + i if cfg.base_port else 0
        srv = await asyncio.start_server(ep.on_conn, cfg.host, port, backlog=256)
        ep.port = srv.sockets[0].getsockname()[1]
        endpoints.append(ep)
        servers.append(srv)
        asyncio.ensure_future(ep.engine.run())
        print("llmsim: endpoint %d on %s:%d" % (i, cfg.host, ep.port), flush=True)
    print("llmsim: ready", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for srv in servers:
        srv.close()
    # Out now, as a server killed mid-stream would be: the connections'
    # tasks are not waited for. asyncio.run's own cancel-and-wait of them
    # once hung for minutes (a benchmark's llmsim, TERM'd under load, idle in
    # epoll with its tasks cancelled), and whoever stops a simulator wants
    # its ports free, not a graceful drain.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv=None):
    cfg = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        asyncio.run(serve(cfg))
    except OSError as e:
        print("llmsim: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
