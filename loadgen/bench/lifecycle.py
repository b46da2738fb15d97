#!/usr/bin/env python3
"""lifecycle.py - many models, a memory budget a third of their weights, and
Zipf traffic: how often does a request find its model loaded, what does a
cold start cost the request that meets it, and is the first request of an
unloaded 100 MB model as fast as reading its file? (issue #17;
loadgen/bench/lifecycle.sh is the entry point)

Two parts, each on a fresh batchgate on 127.0.0.1:0 (the port is read from
its log line "listening on 127.0.0.1:PORT"), one IO thread, a temp model
repository made with scripts/make_mlp.py (random F32 weights, one seed per
model), every model lazy (`"lifecycle": {"load": "lazy"}` in its
config.json), the CPU backend, one instance, max_batch_size 16.

Part 1, Zipf traffic over --models (20) MLPs 64-H-H-16, H cycling over
--hidden (1920..2432: 15-25 MB of weights each, ~400 MB in all). The same
repository is served twice, one server after the other:

  budget     "devices": {"cpu0": {"memory_budget_bytes": TOTAL / --ratio}}
             with TOTAL the sum of the models' weight files (--ratio 3: the
             weights are 3x the budget, about 7 of the 20 models fit);
  unlimited  "memory_budget_bytes": 0 (no budget): every model stays once
             loaded.

Traffic: --clients (8) Python threads, each a closed loop on one keep-alive
connection for --duration (20) s: draw a model from a Zipf law of exponent
--zipf-s (1.1) over the models (model mNN has rank NN + 1: m00 is the most
popular, sizes cycle so that popularity and size do not go together), send
one row (64 floats, KServe v2 JSON) to POST /v2/models/{m}/infer with
`X-Request-Timeout-Ms: --budget-ms` (2000), wait for the answer. A 429 or
503 with Retry-After makes that client sleep Retry-After seconds (at most
--retry-after-cap-s, 1 s) before its next request, as a polite client
would; nothing is retried. Each client's random stream is seeded from
--seed and its number, so both runs draw the same sequences (how far each
client gets through its sequence depends on the server).

Figures of each run (rows of the table at the end, a column per run):

  requests         requests sent in the run and answered (any status), by
                   the clients' count; and the server's (the delta of
                   batchgate_requests_total over all models and codes).
  hit ratio, metrics   1 - loads / requests: loads is the delta of
                   batchgate_model_loads_total{result="ok"|"failed"} (all
                   request-triggered here: the script loads nothing by
                   API), requests the server's count above. An upper bound:
                   requests that waited on a load another request started,
                   and requests refused with 503, count as hits.
  hit ratio, client    the part of the answered requests that were
                   answered 2xx and did not wait on a load of their model,
                   the strict view: a request waited if it was in flight
                   during one of its model's loads, [end - cold start, end]
                   of a "model M: loaded ... cold start N ms" log line
                   (written at the end; its timestamp and the clients'
                   sends are both the machine's wall clock). Where the log
                   has no such lines: a 2xx slower than T = --cold-factor
                   (5) x the warm p99 waited, the warm p99 being the p99 of
                   the unlimited run's 2xx requests sent after its last load
                   (by the sampler below; if fewer than 200 such, its second
                   half, and the report says so). A 503 is a miss.
  server's own view    any counter in /metrics whose name speaks of hits,
                   misses, lazy loads or waits on a load (none is in the
                   contract; printed as found, deltas over the run).
  cold start p50/p99, server   the "cold start N ms" of every log line
                   "model M: loaded on ..." written during the run (read,
                   prepare, warmup: the load itself, not the wait for it).
                   If no such lines are written, the changes of the gauge
                   batchgate_model_cold_start_seconds{phase="total"} seen by
                   the sampler (it holds each model's last load only).
  cold request p50/p99, client  the latency of the 2xx requests that
                   waited on a load (as above): what a request that meets a
                   load waits, queueing behind it included.
  warm p50/p99     the latency of the other 2xx requests.
  goodput          2xx answered within --budget-ms, per second of the run.
  evictions        the delta of
                   batchgate_model_unloads_total{reason="evicted"}; idle
                   and api unloads are printed beside it.
  resident max / budget   the largest
                   batchgate_device_resident_bytes{device="cpu0"} (draining
                   copies included; else the sum of
                   batchgate_model_resident_bytes there) the sampler saw,
                   over the budget (SPEC: the least recently
                   used idle model is unloaded before the budget is passed).
                   Target <= 1.
  not answered     transport errors (no HTTP answer): every accepted request
                   gets exactly one answer. Target 0.
  not 2xx          per model and status, how many answers, and the body of
                   the first (the server's reason), most frequent first.
  unlimited checks with no budget nothing is evicted and each model
                   requested is loaded once: targets 0 evictions and 0
                   loads beyond one per model.

A sampler thread scrapes /metrics every 200 ms during each run (loads,
resident bytes, the cold-start gauges).

Part 2, the first request of an unloaded --big-mb (100) MB model (64-H-H-16,
H chosen for the size) against reading its weight file, on a server whose
repository holds only that model (no budget). --big-reps (5) rounds, each:

  file cached   read the file (open, readinto an 8 MiB buffer to the end,
                close), timing the second of two reads: the first puts it
                back in the page cache after the evicted round before, so
                this reads the page cache, "after dropping nothing"; then one
                single-row infer on a connection opened beforehand, with
                `X-Request-Timeout-Ms: --big-budget-ms` (10000), timed from
                sending to the whole answer; then POST
                /v2/repository/models/{m}/unload and waiting until POST
                /v2/repository/index shows the model UNAVAILABLE (that time
                is printed too).
  file evicted  the same with the file's pages dropped from the page cache
                (posix_fadvise DONTNEED on that file alone, after fsync)
                before the read, and again before the request together
                with the server's packed copy of the weights
                (state_dir/packed, backends/packcache.h): both read the
                disk (--no-big-cold leaves these out).

Reported per kind: the medians of the read and of the first request and
their ratio; target <= 1.5 for the cached file (the issue's figure), the
evicted one for information; and each load's read/prepare/warmup from the
log.

Loopback only; every wait is bounded; about 2 minutes in all (the models
take ~30 s to generate). Nothing here needs more than Python's standard
library.

    loadgen/bench/lifecycle.py [--parts zipf,big] [--duration 20] [--clients 8]
        [--zipf-s 1.1] [--seed 1] [--budget-ms 2000] [--ratio 3] [--big-mb 100]

loadgen/bench/lifecycle_selftest.py checks this script's parts (sampler,
client loop, analysis, report) against a stand-in server."""

import argparse
import bisect
import datetime
import http.client as httpclient
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import cpu_name, http

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BIN = os.environ.get("BATCHGATE_BIN", os.path.join(ROOT, "build", "batchgate"))
MAKE_MLP = os.path.join(ROOT, "scripts", "make_mlp.py")
IN_DIM, OUT_DIM = 64, 16
DEVICE = "cpu0"
TARGET_BIG_RATIO = 1.5
# tritonclient's unload_model sends this body; a compatible server takes it.
UNLOAD_BODY = b'{"parameters": {"unload_dependents": false}}'


class BenchError(Exception):
    """A failure the report explains in one message (no traceback)."""


# ---------------------------------------------------------------- models

def mlp_bytes(hidden, in_dim=IN_DIM, out_dim=OUT_DIM):
    """Bytes of F32 weights and biases of in-H-H-out."""
    return 4 * (in_dim * hidden + hidden + hidden * hidden + hidden + hidden * out_dim + out_dim)


def hidden_for_bytes(nbytes, in_dim=IN_DIM, out_dim=OUT_DIM):
    """The H whose in-H-H-out MLP has the F32 weights closest to nbytes."""
    # h^2 + (in + out + 2) h + out = nbytes / 4
    b = in_dim + out_dim + 2
    h = int((-b + (b * b + 4 * (nbytes / 4 - out_dim)) ** 0.5) / 2)
    return min((max(1, h), h + 1), key=lambda x: abs(mlp_bytes(x, in_dim, out_dim) - nbytes))


def make_model(repo, name, hidden, seed, max_batch=16, lazy=True):
    """repo/name/{config.json, model.safetensors} by scripts/make_mlp.py;
    returns the weight file's size in bytes."""
    out = os.path.join(repo, name)
    dims = "%d,%d,%d,%d" % (IN_DIM, hidden, hidden, OUT_DIM)
    try:
        subprocess.run([sys.executable, MAKE_MLP, out, "--dims", dims, "--name", name,
                        "--seed", str(seed), "--max-batch", str(max_batch)],
                       check=True, capture_output=True, text=True, timeout=600)
    except subprocess.CalledProcessError as e:
        raise BenchError("make_mlp.py %s failed: %s" % (name, e.stderr.strip()))
    except subprocess.TimeoutExpired:
        raise BenchError("make_mlp.py %s ran past 600 s" % name)
    cfg_path = os.path.join(out, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["backend"] = "cpu"
    cfg["instances"] = {"count": 1}
    if lazy:
        cfg["lifecycle"] = {"load": "lazy"}
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=1)
    return os.path.getsize(os.path.join(out, "model.safetensors"))


def model_names(n):
    return ["m%02d" % i for i in range(n)]


def make_zipf_repo(repo, n, hiddens, seed, log=print):
    """n lazy models m00.. of in-H-H-out, H cycling over hiddens; {name: bytes}."""
    sizes = {}
    t0 = time.monotonic()
    for i, name in enumerate(model_names(n)):
        sizes[name] = make_model(repo, name, hiddens[i % len(hiddens)], seed * 1000 + i)
    log("models: %d lazy MLPs %d-H-H-%d, H in %s: %.1f MB of weights in all (%.1f to %.1f MB "
        "each), made in %.0f s" % (n, IN_DIM, OUT_DIM, ",".join(map(str, hiddens)),
                                   sum(sizes.values()) / 1e6, min(sizes.values()) / 1e6,
                                   max(sizes.values()) / 1e6, time.monotonic() - t0))
    return sizes


# ---------------------------------------------------------------- Zipf

class Zipf:
    """Ranks 0..n-1 with P(k) proportional to (k + 1) ** -s, by inverse CDF
    on the given random.Random."""

    def __init__(self, n, s, rng):
        if n < 1 or s < 0:
            raise ValueError("Zipf needs n >= 1 and s >= 0")
        self.rng = rng
        w = [(k + 1) ** -s for k in range(n)]
        total = sum(w)
        self.p = [x / total for x in w]
        self.cdf = []
        acc = 0.0
        for x in self.p:
            acc += x
            self.cdf.append(acc)
        self.cdf[-1] = 1.0

    def sample(self):
        return min(bisect.bisect_right(self.cdf, self.rng.random()), len(self.cdf) - 1)


def client_rng(seed, cid):
    return random.Random("lifecycle-%d-%d" % (seed, cid))


# ---------------------------------------------------------------- numbers

def percentile(values, q):
    """Nearest-rank percentile q (0..100) of values; None when empty."""
    if not values:
        return None
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(-(-q * len(v) // 100)) - 1))
    return v[k]


def median(values):
    return statistics.median(values) if values else None


# ---------------------------------------------------------------- metrics

SAMPLE_RE = re.compile(r'^(batchgate_\w+)(?:\{(.*)\})? (\S+)$', re.M)
LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """[(name, {label: value}, float)] of the batchgate_ samples in a
    Prometheus text exposition."""
    out = []
    for name, labels, value in SAMPLE_RE.findall(text):
        try:
            v = float(value)
        except ValueError:
            continue
        out.append((name, dict(LABEL_RE.findall(labels or "")), v))
    return out


def msum(samples, name, **match):
    """Sum of the samples of name whose labels include match."""
    return sum(v for n, lab, v in samples
               if n == name and all(lab.get(k) == w for k, w in match.items()))


def scrape(port):
    code, body = http(port, "GET", "/metrics", timeout=10)
    if code != 200:
        raise BenchError("GET /metrics answered %d" % code)
    return parse_metrics(body.decode("utf-8", "replace"))


# Counters the contract does not name but that would be the server's own
# view of hits and misses, if the implementation has some.
OWN_VIEW_RE = re.compile(r'hit|miss|lazy|load_wait|waited', re.I)


def own_view(before, after):
    """{metric name: delta} of the counters matching OWN_VIEW_RE."""
    names = {n for n, _, _ in after if OWN_VIEW_RE.search(n)
             and not n.endswith(("_bucket", "_sum", "_count"))}
    return {n: msum(after, n) - msum(before, n) for n in sorted(names)}


def loads_total(samples):
    return msum(samples, "batchgate_model_loads_total")


def resident_total(samples):
    """Resident bytes on cpu0: batchgate_device_resident_bytes (draining
    copies included: what the budget bounds), else the sum of
    batchgate_model_resident_bytes; None when neither is there."""
    if has(samples, "batchgate_device_resident_bytes"):
        return msum(samples, "batchgate_device_resident_bytes", device=DEVICE)
    if not has(samples, "batchgate_model_resident_bytes"):
        return None
    return msum(samples, "batchgate_model_resident_bytes", device=DEVICE)


def has(samples, name):
    return any(n == name for n, _, _ in samples)


# The contract's metrics (SPEC.md "Metrics added"); a missing one is named
# in the report rather than read as zero.
CONTRACT_METRICS = ("batchgate_model_loads_total", "batchgate_model_unloads_total",
                    "batchgate_model_resident_bytes", "batchgate_requests_total")


class Sampler(threading.Thread):
    """/metrics every `period` s: [(t, loads, resident bytes on cpu0,
    {model: cold start total gauge})], t monotonic."""

    def __init__(self, port, period=0.2):
        super().__init__(daemon=True)
        self.port, self.period = port, period
        self.samples = []
        self.errors = 0
        self.lock, self.stop = threading.Lock(), threading.Event()

    def run(self):
        nxt = time.monotonic()
        while not self.stop.is_set():
            try:
                s = scrape(self.port)
                row = (time.monotonic(), loads_total(s), resident_total(s),
                       {lab.get("model"): v for n, lab, v in s
                        if n == "batchgate_model_cold_start_seconds"
                        and lab.get("phase") == "total"})
                with self.lock:
                    self.samples.append(row)
            except (OSError, ValueError, IndexError, BenchError):
                self.errors += 1
            nxt += self.period
            self.stop.wait(max(nxt - time.monotonic(), 0.01))

    def end(self):
        self.stop.set()
        self.join(15)

    def snap(self):
        with self.lock:
            return list(self.samples)


def last_load_time(samples):
    """The time of the first sample at which the loads counter had reached
    its final value (None without samples)."""
    if not samples:
        return None
    final = samples[-1][1]
    return next(t for t, loads, _, _ in samples if loads >= final)


def gauge_cold_starts(samples):
    """Cold starts (s) seen as changes of each model's cold-start gauge."""
    out, last = [], {}
    for _, _, _, cs in samples:
        for m, v in cs.items():
            if v > 0 and last.get(m) != v:
                out.append(v)
            last[m] = v
    return out


# ---------------------------------------------------------------- log

LOADED_RE = re.compile(r'model (\S+): loaded on [^;]*; cold start ([\d.]+) ms'
                       r'(?: \(read ([\d.]+), prepare ([\d.]+)'
                       r'(?:, of which device context [\d.]+)?, warmup ([\d.]+)\))?')


LINE_TS_RE = re.compile(r'^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)(Z|[+-]\d\d:?\d\d)? ')


def log_wall(line):
    """The Unix time of a log line's ISO-8601 timestamp; None without one."""
    m = LINE_TS_RE.match(line)
    if not m:
        return None
    t = datetime.datetime.fromisoformat(m.group(1))
    tz = m.group(2) or "Z"
    if tz == "Z":
        off = 0
    else:
        sign = -1 if tz[0] == "-" else 1
        hh, mm = tz[1:].replace(":", "")[:2], tz[1:].replace(":", "")[2:]
        off = sign * (int(hh) * 3600 + int(mm) * 60)
    return t.replace(tzinfo=datetime.timezone.utc).timestamp() - off


def log_load_intervals(text):
    """{model: [(start, end)]} in Unix time, one per "loaded" line: the
    line is written when the load ends; it began cold-start ms before."""
    out = {}
    for line in text.splitlines():
        m = LOADED_RE.search(line)
        end = log_wall(line) if m else None
        if end is not None:
            out.setdefault(m.group(1), []).append((end - float(m.group(2)) / 1e3, end))
    return out


def log_cold_starts(text):
    """[(model, total ms, read ms, prepare ms, warmup ms)] of the "loaded"
    lines of a batchgate log (the split is None where the line has none)."""
    out = []
    for m in LOADED_RE.finditer(text):
        parts = [float(x) if x is not None else None for x in m.group(3, 4, 5)]
        out.append((m.group(1), float(m.group(2)), *parts))
    return out


# ---------------------------------------------------------------- server

class Gateway:
    """A batchgate on 127.0.0.1:0 serving repo with cpu0's budget (None: no
    "devices" section); its log in work/TAG.log."""

    def __init__(self, work, tag, repo, budget_bytes, io_threads=1, timeout=60):
        self.tag = tag
        self.state_dir = os.path.join(work, "state-" + tag)
        cfg = {"listen": "127.0.0.1:0", "io_threads": io_threads, "model_repository": repo,
               "state_dir": self.state_dir}
        if budget_bytes is not None:
            cfg["devices"] = {DEVICE: {"memory_budget_bytes": int(budget_bytes)}}
        self.config_path = os.path.join(work, tag + ".json")
        with open(self.config_path, "w") as f:
            json.dump(cfg, f)
        self.log_path = os.path.join(work, tag + ".log")
        self.log = open(self.log_path, "w+")
        try:
            self.p = subprocess.Popen([BIN, "--config", self.config_path],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=self.log)
        except OSError as e:
            raise BenchError("cannot run %s: %s" % (BIN, e))
        self.port = None
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.text()
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", text)
            if m and "ready in" in text:
                self.port = int(m.group(1))
                return
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        rc = self.p.poll()
        self.stop()
        if rc == 2 and "unknown field" in text:
            raise BenchError(
                "batchgate refused the configuration (exit 2):\n%s\nThe \"devices\" section "
                "(memory_budget_bytes) and the models' \"lifecycle\" are issue #17's: is it "
                "in this build (%s)?" % (text.strip(), BIN))
        raise BenchError("batchgate (%s) did not log \"listening on\" and \"ready in\" within "
                         "%d s (exit code %r); its log:\n%s" % (tag, timeout, rc, text.strip()))

    def text(self, offset=0):
        self.log.flush()
        with open(self.log_path, errors="replace") as f:
            f.seek(offset)
            return f.read()

    def log_size(self):
        return os.path.getsize(self.log_path)

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


# ---------------------------------------------------------------- repository API

def call_json(port, method, path, body=None, timeout=30):
    """(status, parsed JSON or None, raw body)."""
    try:
        code, raw = http(port, method, path, body, timeout=timeout)
    except (OSError, IndexError, ValueError) as e:
        raise BenchError("%s %s: no answer (%s)" % (method, path, e))
    try:
        obj = json.loads(raw) if raw else None
    except ValueError:
        obj = None
    return code, obj, raw


def repository_index(port):
    """POST /v2/repository/index: [{"name","version","state","reason"}]."""
    code, obj, raw = call_json(port, "POST", "/v2/repository/index", b"{}")
    if code == 404:
        raise BenchError("POST /v2/repository/index answered 404: this batchgate has no model "
                         "repository extension (issue #17 is not in this build: %s)" % BIN)
    if code != 200 or not isinstance(obj, list):
        raise BenchError("POST /v2/repository/index: expected 200 and a JSON array, got %d %r"
                         % (code, raw[:300]))
    return obj


def states(index, name):
    """The states of name's entries in an index (one per version)."""
    return [e.get("state") for e in index if isinstance(e, dict) and e.get("name") == name]


def check_repository(port, names, log=print):
    """Every model is in the index; none failed; lazy ones are not loaded."""
    index = repository_index(port)
    missing = [n for n in names if not states(index, n)]
    if missing:
        raise BenchError("POST /v2/repository/index lacks %s; it answered %s"
                         % (", ".join(missing), json.dumps(index)[:600]))
    bad = [e for e in index if e.get("name") in names and e.get("reason")
           and e.get("state") == "UNAVAILABLE" and "unload" not in str(e.get("reason"))]
    for e in bad:
        if "unknown field" in str(e.get("reason")):
            raise BenchError("model %s was refused: %s (is issue #17's \"lifecycle\" in this "
                             "build?)" % (e.get("name"), e.get("reason")))
    loaded = [n for n in names if "READY" in states(index, n)]
    if loaded:
        log("  warning: %d model(s) already READY before any request (%s): lazy loading is "
            "not honoured, hits are inflated" % (len(loaded), ", ".join(loaded[:5])))
    return index


def unload_and_wait(port, name, timeout=60):
    """POST .../unload, then the index until every entry of name is
    UNAVAILABLE; returns the seconds from the call to that."""
    t0 = time.monotonic()
    code, _, raw = call_json(port, "POST", "/v2/repository/models/%s/unload" % name,
                             UNLOAD_BODY)
    if code != 200:
        raise BenchError("POST /v2/repository/models/%s/unload: expected 200, got %d %r"
                         % (name, code, raw[:300]))
    st = []
    while time.monotonic() - t0 < timeout:
        st = states(repository_index(port), name)
        if st and all(s == "UNAVAILABLE" for s in st):
            return time.monotonic() - t0
        time.sleep(0.02)
    raise BenchError("%s was not UNAVAILABLE in the index %d s after its unload (states %s)"
                     % (name, timeout, st))


# ---------------------------------------------------------------- traffic

def infer_body(width=IN_DIM):
    row = [round(0.01 * ((i * 7) % 13 - 6), 3) for i in range(width)]
    return json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, width],
                                   "data": row}]}).encode()


class Client(threading.Thread):
    """One closed-loop client on one keep-alive connection; .records is
    [(sent s after t_start, model rank, status or 0 for no answer, latency s,
    error kind or "")]."""

    def __init__(self, cid, port, names, zipf_s, seed, budget_ms, retry_cap_s, body, go):
        super().__init__(daemon=True)
        self.cid, self.port, self.names = cid, port, names
        self.zipf = Zipf(len(names), zipf_s, client_rng(seed, cid))
        self.budget_ms, self.retry_cap_s, self.body, self.go = budget_ms, retry_cap_s, body, go
        self.headers = {"Content-Type": "application/json",
                        "X-Request-Timeout-Ms": str(budget_ms)}
        self.records = []
        self.first_error = {}       # (model rank, status): the first such body
        self.t_start = self.t_end = None
        # The server answers within the budget (504 past it); the rest is slack.
        self.sock_timeout = budget_ms / 1e3 + 10

    def run(self):
        self.go.wait()
        t_start, t_end = self.t_start, self.t_end
        time.sleep(max(0.0, t_start - time.monotonic()))
        conn = None
        while True:
            t0 = time.monotonic()
            if t0 >= t_end:
                break
            k = self.zipf.sample()
            status, err, retry_after = 0, "", None
            try:
                if conn is None:
                    conn = httpclient.HTTPConnection("127.0.0.1", self.port,
                                                      timeout=self.sock_timeout)
                conn.request("POST", "/v2/models/%s/infer" % self.names[k], self.body,
                             self.headers)
                resp = conn.getresponse()
                data = resp.read()
                status = resp.status
                if status >= 300 and (k, status) not in self.first_error:
                    self.first_error[(k, status)] = data[:300].decode("utf-8", "replace")
                retry_after = resp.getheader("Retry-After")
                if resp.will_close:
                    conn.close()
                    conn = None
            except (OSError, httpclient.HTTPException) as e:
                err = type(e).__name__
                if conn is not None:
                    conn.close()
                conn = None
            t1 = time.monotonic()
            self.records.append((t0 - t_start, k, status, t1 - t0, err))
            if status in (429, 503) and retry_after:
                try:
                    pause = min(float(retry_after), self.retry_cap_s)
                except ValueError:
                    pause = 0.0
                time.sleep(max(0.0, min(pause, t_end - time.monotonic())))
            elif not status:
                time.sleep(0.01)    # no answer: a dead server is not spun on
        if conn is not None:
            conn.close()


def run_traffic(port, names, args, log=print):
    """The clients for args.duration s beside a sampler; returns a dict of
    the raw results (records, sampler rows, metrics before and after, the
    run's t_start)."""
    before = scrape(port)
    sampler = Sampler(port)
    sampler.start()
    go = threading.Event()
    body = infer_body()
    clients = [Client(c, port, names, args.zipf_s, args.seed, args.budget_ms,
                      args.retry_after_cap_s, body, go) for c in range(args.clients)]
    t_start = time.monotonic() + 0.05
    wall_start = time.time() + (t_start - time.monotonic())
    for c in clients:
        c.t_start, c.t_end = t_start, t_start + args.duration
        c.start()
    time.sleep(0.05)
    go.set()
    bound = args.duration + args.budget_ms / 1e3 + 20
    for c in clients:
        c.join(max(0.1, t_start + bound - time.monotonic()))
    stuck = sum(1 for c in clients if c.is_alive())
    if stuck:
        sampler.end()
        raise BenchError("%d client(s) still waiting for an answer %.0f s after the run ended"
                         % (stuck, bound - args.duration))
    time.sleep(0.3)     # the last answers' counters
    sampler.end()
    after = scrape(port)
    records = [r for c in clients for r in c.records]
    samples = [(t - t_start, loads, res, cs) for t, loads, res, cs in sampler.snap()]
    first_error = {}
    for c in clients:
        for key, body in c.first_error.items():
            first_error.setdefault(key, body)
    return {"records": records, "samples": samples, "before": before, "after": after,
            "sampler_errors": sampler.errors, "wall_start": wall_start,
            "first_error": first_error}


# ---------------------------------------------------------------- analysis

def warm_baseline(raw):
    """(warm p99 s, how it was taken) from a run where every model stays
    loaded: its 2xx requests sent after the last load."""
    t_last = last_load_time(raw["samples"])
    ok = [(t, lat) for t, _, st, lat, _ in raw["records"] if 200 <= st < 300]
    after = [lat for t, lat in ok if t_last is not None and t >= t_last]
    if len(after) >= 200:
        return percentile(after, 99), "2xx sent after the last load (%.1f s in), %d requests" % (
            t_last, len(after))
    half = max((t for t, _ in ok), default=0) / 2
    late = [lat for t, lat in ok if t >= half]
    return percentile(late, 99), ("second half (%d requests; only %d after the last load)"
                                  % (len(late), len(after)))


def misses(raw, names, log_text, cold_threshold):
    """([True where the record waited on a load of its model], how): a
    record waited if it was in flight during one of the model's loads by
    the log ("loaded" lines); without such lines, if it was answered 2xx
    slower than cold_threshold."""
    iv = log_load_intervals(log_text)
    recs = raw["records"]
    if iv and raw.get("wall_start") is not None:
        w0 = raw["wall_start"]
        rel = {m: [(a - w0, b - w0) for a, b in v] for m, v in iv.items()}
        out = []
        for t, k, st, lat, _ in recs:
            loads = rel.get(names[k], ())
            out.append(any(t < b and t + lat > a for a, b in loads))
        return out, "in flight during a load of its model (log lines)"
    return [200 <= st < 300 and lat > cold_threshold for _, _, st, lat, _ in recs], \
        "2xx slower than T = %s (no \"loaded\" log lines)" % ms(cold_threshold)


def analyze(raw, duration, budget_ms, cold_threshold, budget_bytes, log_text, names):
    recs = raw["records"]
    before, after = raw["before"], raw["after"]
    codes = {}
    for _, _, st, _, err in recs:
        key = str(st) if st else "no answer (%s)" % err
        codes[key] = codes.get(key, 0) + 1
    answered = [r for r in recs if r[2]]
    ok = [r for r in recs if 200 <= r[2] < 300]
    missed, how = misses(raw, names, log_text, cold_threshold)
    warm = [r[3] for r, x in zip(recs, missed) if 200 <= r[2] < 300 and not x]
    cold = [r[3] for r, x in zip(recs, missed) if 200 <= r[2] < 300 and x]
    good = sum(1 for r in ok if r[3] <= budget_ms / 1e3)
    server_requests = msum(after, "batchgate_requests_total") - \
        msum(before, "batchgate_requests_total")
    loads_ok = msum(after, "batchgate_model_loads_total", result="ok") - \
        msum(before, "batchgate_model_loads_total", result="ok")
    loads_failed = msum(after, "batchgate_model_loads_total", result="failed") - \
        msum(before, "batchgate_model_loads_total", result="failed")
    unloads = {}
    for reason in ("evicted", "idle", "api", "reload"):
        unloads[reason] = msum(after, "batchgate_model_unloads_total", reason=reason) - \
            msum(before, "batchgate_model_unloads_total", reason=reason)
    loads = loads_ok + loads_failed
    missing = [n for n in CONTRACT_METRICS if not has(after, n)]
    # Counters appear once they count something: no unload at all is no
    # unloads_total, and no evictions.
    if "batchgate_model_unloads_total" in missing:
        missing.remove("batchgate_model_unloads_total")
    if "batchgate_model_loads_total" in missing:
        loads = loads_ok = loads_failed = None
    lines = log_cold_starts(log_text)
    if lines:
        server_cold = [x[1] / 1e3 for x in lines]
        cold_source = "log lines (%d)" % len(lines)
    else:
        server_cold = gauge_cold_starts(raw["samples"])
        cold_source = ("no \"cold start\" log lines; the cold-start gauge's changes (%d)"
                       % len(server_cold))
    res = [r for _, _, r, _ in raw["samples"] if r is not None]
    hit_metrics = 1 - loads / server_requests if server_requests > 0 and loads is not None \
        else None
    return {
        "requests": len(answered), "sent": len(recs), "server_requests": server_requests,
        "codes": codes, "ok": len(ok),
        "loads": loads, "loads_failed": loads_failed, "unloads": unloads, "missing": missing,
        "hit_metrics": hit_metrics,
        "hit_client": len(warm) / len(answered) if answered else None, "miss_how": how,
        "own_view": own_view(before, after),
        "server_cold": server_cold, "cold_source": cold_source,
        "cold_p50": percentile(server_cold, 50), "cold_p99": percentile(server_cold, 99),
        "cold_req": len(cold),
        "cold_req_p50": percentile(cold, 50), "cold_req_p99": percentile(cold, 99),
        "warm_p50": percentile(warm, 50), "warm_p99": percentile(warm, 99),
        "goodput": good / duration,
        "resident_max": max(res) if res else None,
        "resident_over_budget": (max(res) / budget_bytes) if res and budget_bytes else None,
        "no_answer": sum(1 for r in recs if not r[2]),
        "models_requested": len({r[1] for r in answered}),
        "sampler_rows": len(raw["samples"]), "sampler_errors": raw.get("sampler_errors", 0),
        "errors_by_model": errors_by_model(recs, names, raw.get("first_error", {})),
    }


def errors_by_model(recs, names, first_error):
    """[(count, model, status, first body)] of the answers that were not
    2xx, most frequent first."""
    n = {}
    for _, k, st, _, _ in recs:
        if st and not 200 <= st < 300:
            n[(k, st)] = n.get((k, st), 0) + 1
    return sorted(((c, names[k], st, first_error.get((k, st), ""))
                   for (k, st), c in n.items()), key=lambda x: (-x[0], x[1]))


def ms(x):
    return "%.1f ms" % (x * 1e3) if x is not None else "-"


def fnum(x, fmt="%.3f"):
    return fmt % x if x is not None else "-"


def run_lines(tag, a, budget_bytes):
    """The report's lines for one run."""
    out = ["%s (memory_budget_bytes %s):" % (tag, budget_bytes or "0 = unlimited")]
    out.append("  requests: %d answered of %d sent (server counted %.0f); codes %s"
               % (a["requests"], a["sent"], a["server_requests"],
                  ", ".join("%s x%d" % kv for kv in sorted(a["codes"].items()))))
    if a["missing"]:
        out.append("  warning: /metrics has no %s (issue #17's names)" % ", ".join(a["missing"]))
    out.append("  loads %s (failed %s), %d of the models requested; unloads: evicted %.0f, "
               "idle %.0f, api %.0f, reload %.0f" % (
                   fnum(a["loads"], "%.0f"), fnum(a["loads_failed"], "%.0f"),
                   a["models_requested"],
                   a["unloads"]["evicted"], a["unloads"]["idle"], a["unloads"]["api"],
                   a["unloads"]["reload"]))
    out.append("  hit ratio: metrics %s, client %s (a miss: %s); server's own view: %s" % (
        fnum(a["hit_metrics"]), fnum(a["hit_client"]), a["miss_how"],
        ", ".join("%s +%.0f" % kv for kv in a["own_view"].items()) or "no such counter"))
    out.append("  cold start (server, %s): p50 %s, p99 %s; requests that met one (client, "
               "%d): p50 %s, p99 %s" % (a["cold_source"], ms(a["cold_p50"]), ms(a["cold_p99"]),
                                        a["cold_req"], ms(a["cold_req_p50"]),
                                        ms(a["cold_req_p99"])))
    out.append("  warm requests: p50 %s, p99 %s; goodput %.1f/s; resident max %s%s; "
               "no answer %d" % (
                   ms(a["warm_p50"]), ms(a["warm_p99"]), a["goodput"],
                   "%.1f MB" % (a["resident_max"] / 1e6) if a["resident_max"] is not None
                   else "- (no batchgate_model_resident_bytes)",
                   " (%.3f of the budget)" % a["resident_over_budget"]
                   if a["resident_over_budget"] is not None else "", a["no_answer"]))
    if a["sampler_errors"]:
        out.append("  (the sampler missed %d of its scrapes)" % a["sampler_errors"])
    errs = a.get("errors_by_model", [])
    for c, m, st, body in errs[:6]:
        out.append("  not 2xx: %s %d x%d, the first: %s" % (m, st, c, body.strip()[:200]))
    if len(errs) > 6:
        out.append("  not 2xx: %d more (model, status) pairs, %d answers"
                   % (len(errs) - 6, sum(e[0] for e in errs[6:])))
    return out


def zipf_checks(runs):
    """[(name, target, {run tag: (value, met or None)})] for the table."""
    b, u = runs.get("budget"), runs.get("unlimited")
    rows = []

    def count(v):
        return int(round(v)) if v is not None else None

    def both(name, key, target="(info)", conv=lambda v: v):
        rows.append((name, target, {t: (conv(r[key]), None) for t, r in runs.items()}))

    both("hit ratio, metrics (1 - loads/requests)", "hit_metrics")
    both("hit ratio, client (waited on no load)", "hit_client")
    both("loads (request-triggered)", "loads", conv=count)
    both("cold start p50, server (ms)", "cold_p50")
    both("cold start p99, server (ms)", "cold_p99")
    both("cold request p50, client (ms)", "cold_req_p50")
    both("cold request p99, client (ms)", "cold_req_p99")
    both("goodput (2xx within budget /s)", "goodput")
    rows.append(("evictions", "(info)", {t: (count(r["unloads"]["evicted"]), None)
                                         for t, r in runs.items()}))
    if u:
        ev = count(u["unloads"]["evicted"])
        rows.append(("unlimited: evictions", "0", {"unlimited": (ev, ev == 0)}))
        extra = count(u["loads"]) - u["models_requested"] if u["loads"] is not None else None
        rows.append(("unlimited: loads beyond one per model", "0",
                     {"unlimited": (extra, extra == 0)}))
    if b and b["resident_over_budget"] is not None:
        r = b["resident_over_budget"]
        rows.append(("budget: resident max / budget", "<= 1.00", {"budget": (r, r <= 1.0)}))
    for t, r in runs.items():
        rows.append(("%s: requests with no answer" % t, "0",
                     {t: (r["no_answer"], r["no_answer"] == 0)}))
    if b and u and u["goodput"]:
        rows.append(("goodput budget / unlimited", "(info)",
                     {"budget": (b["goodput"] / u["goodput"], None)}))
    # ms rows hold seconds until here
    fixed = []
    for name, target, cells in rows:
        if "(ms)" in name:
            cells = {t: (v * 1e3 if v is not None else None, m) for t, (v, m) in cells.items()}
        fixed.append((name, target, cells))
    return fixed


def cell(v):
    """A table value: counts (ints) whole, other figures to 3 significant
    digits or more."""
    if v is None:
        return "-"
    if isinstance(v, int):
        return "%d" % v
    return "%.0f" % v if abs(v) >= 100 else "%.1f" % v if abs(v) >= 10 else "%.3f" % v


def columns_of(rows):
    """The cells' column names in the order they first appear."""
    out = []
    for _, _, cells in rows:
        out += [c for c in cells if c not in out]
    return out


def table(rows, columns=None, title="== targets (issue #17)"):
    """The targets table: one line per row, one cell per column (columns:
    every one the rows name, in order)."""
    columns = columns or columns_of(rows)
    out = [("%-52s %-9s" % (title, "target") + "".join("  %-18s" % c for c in columns)).rstrip()]
    for name, target, cells in rows:
        line = "%-52s %-9s" % (name, target)
        for c in columns:
            if c in cells:
                v, met = cells[c]
                s = cell(v)
                line += "  %-9s %-8s" % (s, "" if met is None else "met" if met else "NOT MET")
            else:
                line += "  %-18s" % ""
        out.append(line.rstrip())
    return out


# ---------------------------------------------------------------- the parts

def part_zipf(args, scratch, log=print):
    repo = os.path.join(scratch, "zipf-models")
    os.makedirs(repo)
    hiddens = [int(h) for h in args.hidden.split(",")]
    sizes = make_zipf_repo(repo, args.models, hiddens, args.seed, log)
    names = model_names(args.models)
    total = sum(sizes.values())
    budget = total // args.ratio
    z = Zipf(len(names), args.zipf_s, random.Random(0))
    log("budget: %.1f MB = %.1f MB / %d; Zipf s = %.2f: the top 5 models take %.0f%% of the "
        "requests, the last one %.1f%%" % (budget / 1e6, total / 1e6, args.ratio, args.zipf_s,
                                          100 * sum(z.p[:5]), 100 * z.p[-1]))
    raws = {}
    for tag, b in (("budget", budget), ("unlimited", 0)):
        work = tempfile.mkdtemp(prefix="bg-lifecycle-%s-" % tag, dir=scratch)
        gw = Gateway(work, tag, repo, b, io_threads=args.io_threads)
        try:
            check_repository(gw.port, names, log)
            off = gw.log_size()
            log("%s: %d clients for %.0f s on port %d ..." % (tag, args.clients, args.duration,
                                                            gw.port))
            raw = run_traffic(gw.port, names, args, log)
            raw["log"] = gw.text(off)
            raw["budget_bytes"] = b
            raws[tag] = raw
        finally:
            gw.stop()
    warm_p99, how = warm_baseline(raws["unlimited"])
    if warm_p99 is None:
        raise BenchError("the unlimited run answered no request 2xx: nothing to measure "
                         "(codes: %s)" % sorted({r[2] for r in raws["unlimited"]["records"]}))
    threshold = args.cold_factor * warm_p99
    log("warm p99 %s (unlimited run, %s); cold threshold T = %g x = %s (used only where "
        "the log has no \"loaded\" lines)" % (ms(warm_p99), how, args.cold_factor,
                                              ms(threshold)))
    runs = {}
    for tag, raw in raws.items():
        runs[tag] = analyze(raw, args.duration, args.budget_ms, threshold, raw["budget_bytes"],
                            raw["log"], names)
        for line in run_lines(tag, runs[tag], raw["budget_bytes"]):
            log(line)
    return zipf_checks(runs)


def time_read(path, bufsize=8 << 20):
    """Seconds to open, read to the end and close path."""
    buf = bytearray(bufsize)
    t0 = time.monotonic()
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass
    return time.monotonic() - t0


def timed_infer(port, name, budget_ms, timeout):
    """(status, seconds from sending to the whole answer, body) of one
    single-row infer on a connection opened before the clock starts."""
    conn = httpclient.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.connect()
        t0 = time.monotonic()
        conn.request("POST", "/v2/models/%s/infer" % name, infer_body(),
                     {"Content-Type": "application/json",
                      "X-Request-Timeout-Ms": str(budget_ms)})
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, time.monotonic() - t0, body, resp.getheader("Retry-After")
    except (OSError, httpclient.HTTPException) as e:
        raise BenchError("the first request of %s got no answer: %s" % (name, e))
    finally:
        conn.close()


def evict(path):
    """Drops path's pages from the page cache (POSIX_FADV_DONTNEED on this
    file only: nothing else on the machine is touched); False where the
    platform cannot."""
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return True


def big_round(gw, name, path, args, cold):
    """(file read s, first request s, unload s) of one round; cold: the
    file's pages evicted before the read and again before the request."""
    if cold:
        evict(path)
    else:
        time_read(path)   # the evicted round before left it on disk: cache it first
    read = time_read(path)
    if cold:
        evict(path)
        # The server's own copy of the weights too: its packed layers kept
        # between loads (backends/packcache.h) under state_dir/packed.
        packed = os.path.join(gw.state_dir, "packed")
        for f in (os.listdir(packed) if os.path.isdir(packed) else []):
            evict(os.path.join(packed, f))
    code, lat, body, ra = timed_infer(gw.port, name, args.big_budget_ms,
                                      args.big_budget_ms / 1e3 + 30)
    if code != 200:
        raise BenchError("the first request of %s answered %d%s: %r"
                         % (name, code, " (Retry-After: %s)" % ra if ra else "", body[:300]))
    return read, lat, unload_and_wait(gw.port, name)


def part_big(args, scratch, log=print):
    repo = os.path.join(scratch, "big-models")
    os.makedirs(repo)
    name = "big"
    hidden = hidden_for_bytes(args.big_mb * 1e6)
    t0 = time.monotonic()
    size = make_model(repo, name, hidden, args.seed + 7777)
    path = os.path.join(repo, name, "model.safetensors")
    log("big model: %d-%d-%d-%d, %.1f MB of weights, lazy (made in %.0f s)"
        % (IN_DIM, hidden, hidden, OUT_DIM, size / 1e6, time.monotonic() - t0))
    modes = ["cached"]
    if args.big_cold:
        if hasattr(os, "posix_fadvise"):
            modes.append("evicted")
        else:
            log("  (no posix_fadvise here: the evicted-file rounds are left out)")
    time_read(path)     # the first cached round reads the page cache too
    work = tempfile.mkdtemp(prefix="bg-lifecycle-big-", dir=scratch)
    gw = Gateway(work, "big", repo, 0, io_threads=args.io_threads)
    got = {m: [] for m in modes}
    try:
        check_repository(gw.port, [name], log)
        off = gw.log_size()
        for i in range(args.big_reps):
            for mode in modes:
                r = big_round(gw, name, path, args, mode == "evicted")
                got[mode].append(r)
                log("  round %d, file %s: read %s, first request %s (%.2fx), unload to "
                    "UNAVAILABLE %s" % (i + 1, mode, ms(r[0]), ms(r[1]), r[1] / r[0], ms(r[2])))
        loads = log_cold_starts(gw.text(off))
    finally:
        gw.stop()
    for m, total, rd, prep, warm in loads:
        log("  log: %s cold start %.1f ms (read %s, prepare %s, warmup %s)"
            % (m, total, *("%.1f" % x if x is not None else "?" for x in (rd, prep, warm))))
    if len(loads) != args.big_reps * len(modes):
        log("  (%d \"loaded\" log lines for %d rounds)" % (len(loads),
                                                         args.big_reps * len(modes)))
    mb = round(size / 1e6)
    rows = []
    for mode in modes:
        r_med = median([r[0] for r in got[mode]])
        f_med = median([r[1] for r in got[mode]])
        ratio = f_med / r_med
        log("big, file %s: medians of %d rounds: file read %s (%.2f GB/s), first request %s; "
            "ratio %.2f" % (mode, args.big_reps, ms(r_med), size / r_med / 1e9, ms(f_med),
                            ratio))
        # The target is the issue's, for the file as it is ("after dropping
        # nothing"); the evicted rounds show what a cold disk changes.
        target = mode == "cached"
        rows += [("%d MB, file %s: first request / read (medians)" % (mb, mode),
                  "<= %.1f" % TARGET_BIG_RATIO if target else "(info)",
                  {"big": (ratio, ratio <= TARGET_BIG_RATIO if target else None)}),
                 ("%d MB, file %s: first request, median (ms)" % (mb, mode), "(info)",
                  {"big": (f_med * 1e3, None)}),
                 ("%d MB, file %s: file read, median (ms)" % (mb, mode), "(info)",
                  {"big": (r_med * 1e3, None)})]
    return rows


def preflight(scratch):
    """A server with a budget and an empty repository must start and answer
    the index: a build without issue #17 is told in a second, before the
    models take their half minute to make."""
    repo = os.path.join(scratch, "empty")
    os.makedirs(repo)
    gw = Gateway(scratch, "preflight", repo, 1 << 30)
    try:
        repository_index(gw.port)
    finally:
        gw.stop()


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="zipf,big",
                    help="which parts, comma-separated: zipf, big")
    ap.add_argument("--models", type=int, default=20)
    ap.add_argument("--hidden", default="1920,2048,2176,2304,2432",
                    help="hidden widths H of the models' 64-H-H-16, cycled (15-25 MB each)")
    ap.add_argument("--ratio", type=int, default=3,
                    help="the weights are this many times the budget")
    ap.add_argument("--zipf-s", type=float, default=1.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of traffic per run")
    ap.add_argument("--budget-ms", type=int, default=2000,
                    help="each request's X-Request-Timeout-Ms")
    ap.add_argument("--retry-after-cap-s", type=float, default=1.0,
                    help="the most a client sleeps on a 429/503's Retry-After")
    ap.add_argument("--cold-factor", type=float, default=5.0,
                    help="T = this x the warm p99: slower 2xx requests met a load")
    ap.add_argument("--big-mb", type=float, default=100.0)
    ap.add_argument("--big-reps", type=int, default=5)
    ap.add_argument("--big-budget-ms", type=int, default=10000,
                    help="X-Request-Timeout-Ms of the big model's first requests")
    ap.add_argument("--no-big-cold", dest="big_cold", action="store_false",
                    help="leave out the big rounds with the file evicted from the page cache")
    ap.add_argument("--io-threads", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (models, logs)")
    a = ap.parse_args(argv)
    parts = [p.strip() for p in a.parts.split(",") if p.strip()]
    if not parts or any(p not in ("zipf", "big") for p in parts):
        ap.error("--parts: a comma-separated list of zipf and big, got %r" % a.parts)
    a.parts = parts
    try:
        hid = [int(h) for h in a.hidden.split(",")]
    except ValueError:
        hid = []
    if not hid or min(hid) < 1:
        ap.error("--hidden: positive integers separated by commas, got %r" % a.hidden)
    for name, v, lo in (("--models", a.models, 1), ("--ratio", a.ratio, 1),
                        ("--clients", a.clients, 1), ("--big-reps", a.big_reps, 1),
                        ("--io-threads", a.io_threads, 1), ("--budget-ms", a.budget_ms, 1),
                        ("--big-budget-ms", a.big_budget_ms, 1)):
        if v < lo:
            ap.error("%s: at least %d, got %d" % (name, lo, v))
    if a.duration <= 0 or a.big_mb <= 0 or a.zipf_s < 0 or a.cold_factor <= 1:
        ap.error("--duration and --big-mb must be > 0, --zipf-s >= 0, --cold-factor > 1")
    return a


def main(argv=None):
    args = parse_args(argv)
    if not os.access(BIN, os.X_OK):
        sys.exit("lifecycle: %s not built (BATCHGATE_BIN names another)" % BIN)
    print("machine: %d cores (%s); %s UTC; load average %s; %s"
          % (os.cpu_count(), cpu_name(), time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
             loadavg(), BIN), flush=True)
    scratch = tempfile.mkdtemp(prefix="bg-lifecycle-")
    rows = []

    def log(line):
        print(line, flush=True)

    try:
        preflight(scratch)
        if "zipf" in args.parts:
            rows += part_zipf(args, scratch, log)
        if "big" in args.parts:
            rows += part_big(args, scratch, log)
    except BenchError as e:
        print("lifecycle: %s" % e, file=sys.stderr)
        if rows:
            print("\n".join(table(rows)))
        return 1
    finally:
        if args.keep:
            print("lifecycle: kept %s" % scratch)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    print("load average after: %s" % loadavg())
    print("\n".join(table(rows)))
    # As the other benchmarks: a missed target is reported, not an error
    # (exit 1 is for a run that could not measure).
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
