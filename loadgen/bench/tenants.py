#!/usr/bin/env python3
"""tenants.py - do tenants get their shares of device time, lend what they
leave, take it back at once, keep a flooding neighbour out of their
latency, and follow a time window switched during the run? (issue #16;
loadgen/bench/tenants.sh is the entry point)

Each backend runs on a fresh batchgate on loopback whose configuration has
tenants A (share 0.7) and B (share 0.3), each with a random key (stored as
"sha256:<hex>"), an admin tenant (for PUT /v2/governance) and one model
with one instance. The model, by --backend (everything else is one code
path; both run in one invocation by default, side by side):

  synthetic  batches of R rows sleep BASE_US + R * PER_ROW_US (2 ms + 0.25
             ms/row, max_batch_size 16: a full batch takes 6 ms for 16 rows
             against 2.25 ms for one, so batching pays 6x): a device that
             is not a CPU core, so the load generator and the server's own
             threads do not compete with it;
  cpu        an MLP (--dims, F32, random weights from scripts/make_mlp.py in
             a temp repository) on the CPU backend, max_batch_size 16. The
             default 64-4096-4096-16 has 68 MB of weights, far more than
             the caches: each batch streams them all from memory whatever
             its rows, so 16 rows cost about 3x one row for 16x the rows
             (docs/BENCHMARKS.md "Harvest"). Its "device" is the core its
             worker runs on, taken from the same cores as the IO thread and
             batchgate-load.

Device time per tenant is read from /metrics
(batchgate_tenant_device_seconds_total{tenant,device,class}, summed over
devices and classes) every ~100 ms by a background thread; every fraction
below is a difference of two samples: a tenant's device seconds over the
wall seconds between them (its fraction of the device) or over both
tenants' device seconds (the split).

Load is batchgate-load with --workload (one per tenant, each with its key).
"Saturating" is a closed loop of 4 x max_batch_size requests of one row:
four full batches waiting per tenant while one runs. The model's
max_queue_size is 16 x max_batch_size: every saturating tenant fits in it
(so a saturating run has no 429 of its own making) and a flood fills it.

The phases, in this order on the same server:

  capacity   A alone, saturating: answers 2xx per second (C) and A's
             fraction of the device (what one tenant alone gets).
  borrow     B alone, saturating, for --borrow-s: B's fraction of the
             device over the phase (first 0.5 s left out). Target >= 0.95:
             borrowing works (B is not held to its 0.3).
  reclaim    A starts saturating while B goes on. t0 is the instant A's
             batchgate-load is started (the script takes a sample of its
             own then; A sends its first requests a few ms later, after
             reading the model's metadata), so the time to A's first answer
             counts against it. Reported: A's split in [t0, t0 + 1 s] and
             the time from t0 to the end of the first 200-ms window with
             A >= 0.68 (target <= 1 s); and when the first sample saw A's
             first batch done.
  shares     the same run once settled (from 2 s after A started to its
             end): A's split. Target 0.70 +- 0.05.
  neighbour  A alone at 0.5 x 0.7 x C requests/s (open loop, Poisson, 50 ms
             budget sent as X-Request-Timeout-Ms); then A the same beside B
             at 5 x C requests/s of one row (no budget), in one
             batchgate-load run. Targets: A's p99 <= 50 ms beside B and A's
             goodput (2xx within 50 ms per second) beside B >= 0.98 x
             alone. Then the same with B's rows in requests of 8 rows
             (5 x C / 8 requests/s): the same flood for the device, an
             eighth of the HTTP requests for the front end, which shares
             the machine's cores (reported with the same targets beside
             the first, to tell the two apart). The model's answer guard is
             shown for each run (sampled with the device time): when it
             exceeds what a budget leaves, requests are refused at submit.
             Then (--stall-ms, default 70) the single-row flood again with
             the server stopped (SIGSTOP) for that long halfway, as a busy
             machine stops it: A's goodput beside / alone is reported, with
             no target (what is in flight then is late whatever the server
             does; the rest measures whether one stall is learned as if it
             lasted).
  window     A and B saturating in one run; after --switch-at s, PUT
             /v2/governance with a window active now (from == to: 24 h)
             giving A 0.2 and B 0.8, with the admin key. Reported: the time
             from the PUT's answer to the end of the first 200-ms window with
             A's split within 0.20 +- 0.05 (target <= 1 s), how many of the
             later 200-ms windows are within it, the split before and after,
             and every request of the run that was not answered 2xx
             (non-2xx codes, 429 and 504 included, and transport errors):
             target 0.

Loopback only; every wait is bounded (the whole script takes about 3
minutes for both backends).

    loadgen/bench/tenants.py [--backend synthetic|cpu|both] [--dims 64,4096,4096,16]"""

import argparse
import hashlib
import json
import os
import re
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import Batchgate, cpu_name, http, stop_process

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BIN = os.environ.get("BATCHGATE_BIN", os.path.join(ROOT, "build", "batchgate"))
LOAD = os.environ.get("BATCHGATE_LOAD", os.path.join(ROOT, "build", "batchgate-load"))
MODEL = "m"
SHARES = {"A": 0.7, "B": 0.3}
WINDOW_SHARES = {"A": 0.2, "B": 0.8}
TOL = 0.05          # "70/30 +- 5%": A's split within 0.05 of its share
RETURN_FRACTION = 0.68
BUDGET_MS = 50


DEV_RE = re.compile(r'^batchgate_tenant_device_seconds_total\{([^}]*)\} (\S+)$', re.M)
GUARD_RE = re.compile(r'^batchgate_answer_guard_seconds\{model="%s"\} (\S+)$' % MODEL, re.M)


def device_seconds(port):
    """({tenant: device seconds, all devices and classes}, the model's answer
    guard in seconds)"""
    _, body = http(port, "GET", "/metrics", timeout=5)
    text = body.decode()
    out = {}
    for labels, v in DEV_RE.findall(text):
        t = re.search(r'tenant="([^"]*)"', labels).group(1)
        out[t] = out.get(t, 0.0) + float(v)
    g = GUARD_RE.search(text)
    return out, float(g.group(1)) if g else 0.0


class Sampler(threading.Thread):
    """Device seconds per tenant every `period` s: [(t, {tenant: s})], t the
    monotonic midpoint of the scrape; and the answer guard: [(t, s)]."""

    def __init__(self, port, period=0.1):
        super().__init__(daemon=True)
        self.port, self.period = port, period
        self.samples, self.guard = [], []
        self.lock, self.stop = threading.Lock(), threading.Event()

    def run(self):
        nxt = time.monotonic()
        while not self.stop.is_set():
            try:
                self.sample_now()
            except (OSError, ValueError, IndexError):
                pass
            nxt += self.period
            self.stop.wait(max(nxt - time.monotonic(), 0.005))

    def sample_now(self):
        """One sample taken now (also from the main thread, to mark an
        instant); returns its time."""
        t0 = time.monotonic()
        v, g = device_seconds(self.port)
        t = (t0 + time.monotonic()) / 2
        with self.lock:
            self.samples.append((t, v))
            self.samples.sort(key=lambda x: x[0])
            self.guard.append((t, g))
        return t

    def guard_line(self, t0, t1, budget_ms):
        """The answer guard over [t0, t1]: the batcher plans every deadline
        that much earlier and refuses at submit (504) what it then cannot
        meet."""
        with self.lock:
            v = [g * 1e3 for (t, g) in self.guard if t0 <= t <= t1] or [0.0]
        over = sum(1 for x in v if x >= budget_ms / 2) * self.period
        return "answer guard max %.1f ms, mean %.1f ms, >= half the budget for ~%.1f s" % (
            max(v), sum(v) / len(v), over)

    def end(self):
        self.stop.set()
        self.join(10)

    def snap(self):
        with self.lock:
            return list(self.samples)


def at_or_after(samples, t):
    for i, (ts, _) in enumerate(samples):
        if ts >= t:
            return i
    return len(samples) - 1


def at_or_before(samples, t):
    k = 0
    for i, (ts, _) in enumerate(samples):
        if ts <= t:
            k = i
    return k


def delta(samples, i, j):
    """(wall seconds, {tenant: device seconds}) between samples i < j."""
    (ta, a), (tb, b) = samples[i], samples[j]
    return tb - ta, {k: b.get(k, 0.0) - a.get(k, 0.0) for k in set(a) | set(b)}


def between(samples, t0, t1):
    """delta() over the widest pair of samples inside [t0, t1]."""
    i, j = at_or_after(samples, t0), at_or_before(samples, t1)
    if j <= i:
        return 0.0, {}
    return delta(samples, i, j)


def split(d, tenant="A"):
    """tenant's part of the two tenants' device time."""
    tot = d.get("A", 0.0) + d.get("B", 0.0)
    return d.get(tenant, 0.0) / tot if tot > 0 else 0.0


def windows(samples, t0, t1, width=0.2):
    """200-ms windows starting at each sample in [t0, t1): [(start, end, A's split)]."""
    out = []
    for i, (ts, _) in enumerate(samples):
        if ts < t0 or ts >= t1:
            continue
        j = at_or_after(samples, ts + width - 0.01)
        if j <= i or samples[j][0] < ts + width - 0.01:
            break
        out.append((ts, samples[j][0], split(delta(samples, i, j)[1])))
    return out


def hash_key(key):
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def make_model(args, backend, scratch):
    """The model folder's config.json, the weights to link beside it (None
    for synthetic) and a line saying what it is."""
    if backend == "synthetic":
        cfg = {"backend": "synthetic",
               "inputs": [{"name": "x", "datatype": "FP32", "shape": [4]}],
               "outputs": [{"name": "y", "datatype": "FP32", "shape": [2]}],
               "synthetic": {"base_us": args.base_us, "per_row_us": args.per_row_us,
                             "mode": "sleep"}}
        weights = None
        desc = "synthetic (sleep) %d us + %d us/row" % (args.base_us, args.per_row_us)
    else:
        out = os.path.join(scratch, "mlp")
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_mlp.py"), out,
                        "--dims", args.dims, "--name", MODEL], check=True,
                       capture_output=True, text=True, timeout=600)
        with open(os.path.join(out, "config.json")) as f:
            cfg = json.load(f)
        cfg["backend"] = "cpu"
        weights = os.path.join(out, "model.safetensors")
        desc = "cpu MLP %s F32 (%.0f MB), relu, random weights" % (
            args.dims.replace(",", "-"), os.path.getsize(weights) / 1e6)
    cfg["batching"] = {"max_batch_size": args.max_batch,
                       "max_queue_size": 16 * args.max_batch}
    cfg["instances"] = {"count": 1}
    return cfg, weights, desc


def start(work, model, keys):
    cfg, weights, _ = model
    models = os.path.join(work, "models")
    os.makedirs(os.path.join(models, MODEL))
    with open(os.path.join(models, MODEL, "config.json"), "w") as f:
        json.dump(cfg, f)
    if weights:
        os.symlink(weights, os.path.join(models, MODEL, "model.safetensors"))
    bg = Batchgate(BIN, work, {
        "listen": "127.0.0.1:0", "io_threads": 1, "model_repository": models,
        "state_dir": os.path.join(work, "state"),
        "tenants": [{"name": "A", "keys": [hash_key(keys["A"])], "share": SHARES["A"]},
                    {"name": "B", "keys": [hash_key(keys["B"])], "share": SHARES["B"]},
                    {"name": "admin", "keys": [hash_key(keys["admin"])], "admin": True}],
        "governance": {"timezone": "UTC", "windows": []}})
    if http(bg.port, "GET", "/v2/models/%s/ready" % MODEL, key=keys["A"])[0] != 200:
        text = open(bg.log_path).read()
        bg.stop()
        sys.exit("tenants: the model did not load:\n" + text)
    return bg.proc, bg.port


class Load:
    """One batchgate-load run in the background: its workloads (name: spec)
    side by side. .t_launch is when it was started (monotonic)."""

    def __init__(self, port, work, tag, workloads, duration, warmup=0):
        self.out = os.path.join(work, "load-%s.json" % tag)
        cmd = [LOAD, "--url", "http://127.0.0.1:%d" % port, "--model", MODEL,
               "--duration", str(duration), "--warmup", str(warmup), "--drain-ms", "5000",
               "--quiet", "--json", self.out]
        for name, spec in workloads.items():
            cmd += ["--workload", "%s:%s" % (name, spec)]
        self.timeout = duration + warmup + 60
        self.t_launch = time.monotonic()
        self.p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)

    def wait(self):
        """{workload name: its step} (and "total")."""
        try:
            _, err = self.p.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.communicate()
            sys.exit("tenants: batchgate-load ran past its time")
        if self.p.returncode != 0:
            sys.exit("tenants: batchgate-load failed (%d): %s" % (self.p.returncode, err))
        with open(self.out) as f:
            step = json.load(f)["steps"][0]
        out = {w["name"]: w for w in step.get("workloads", [])}
        out["total"] = step
        return out


def spec(keys, tenant, **kw):
    return ",".join(["key=" + keys[tenant]] + ["%s=%s" % (k.replace("_", "-"), v)
                                                for k, v in kw.items()])


def ok(step):
    return sum(n for c, n in step["codes"].items() if c.startswith("2"))


def not_answered(step):
    """Requests not answered 2xx: {code or error kind: count}."""
    bad = {c: n for c, n in step["codes"].items() if not c.startswith("2")}
    for k in ("refused", "lost", "closed_idle"):
        if step.get(k):
            bad[k] = step[k]
    other = step["errors"] - sum(step.get(k, 0) for k in ("refused", "lost", "closed_idle"))
    if other > 0:
        bad["other errors"] = other
    return bad


def fmt_bad(bad):
    return ", ".join("%s x%d" % kv for kv in sorted(bad.items())) or "none"


def step_line(name, st):
    return ("%s: sent %.0f/s (asked %g), 2xx %.0f/s, goodput %.0f/s, p50 %.1f ms, p99 %.1f ms, "
            "not 2xx: %s, late sends %d" % (
                name, st["achieved_rate"], st["target"], ok(st) / st.get("span_s", st["duration_s"]),
                st["goodput"], st["latency_us"]["p50"] / 1e3, st["latency_us"]["p99"] / 1e3,
                fmt_bad(not_answered(st)), st.get("late_sends", 0)))


class Usage:
    """Where the machine's time went between two snapshots, in cores: the
    server's IO thread, its worker (the device on the cpu backend), its
    other threads, batchgate-load (children waited for), the whole machine
    and what is left of it: other processes."""

    def __init__(self, pid):
        self.pid = pid
        self.a = self.snap()

    def snap(self):
        tick = os.sysconf("SC_CLK_TCK")
        th = {"IO": 0.0, "worker": 0.0, "rest": 0.0}
        for tid in os.listdir("/proc/%d/task" % self.pid):
            try:
                with open("/proc/%d/task/%s/stat" % (self.pid, tid)) as f:
                    st = f.read()
            except OSError:
                continue
            name = st[st.index("(") + 1:st.rindex(")")]
            f = st[st.rindex(")") + 2:].split()
            k = "IO" if name.startswith("bg-io-") else "worker" if name.startswith("bg-w-") \
                else "rest"
            th[k] += (int(f[11]) + int(f[12])) / tick
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        with open("/proc/stat") as f:
            cpu = [int(x) for x in f.readline().split()[1:]]
        busy = (sum(cpu) - cpu[3] - cpu[4]) / tick
        return time.monotonic(), th, ru.ru_utime + ru.ru_stime, busy

    def end(self):
        (t0, th0, k0, b0), (t1, th1, k1, b1) = self.a, self.snap()
        w = t1 - t0
        ours = sum(th1.values()) - sum(th0.values()) + k1 - k0
        return ("cores: batchgate IO %.2f, worker %.2f, other %.2f; batchgate-load %.2f; "
                "machine %.2f of %d (others %.2f)" % (
                    (th1["IO"] - th0["IO"]) / w, (th1["worker"] - th0["worker"]) / w,
                    (th1["rest"] - th0["rest"]) / w, (k1 - k0) / w, (b1 - b0) / w,
                    os.cpu_count(), max((b1 - b0 - ours) / w, 0.0)))


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def model_tenants(port, key):
    """The model's stats, tenants section and queue, as one line."""
    try:
        _, body = http(port, "GET", "/v2/models/%s/stats" % MODEL, key=key)
        st = json.loads(body)
        st = st["model_stats"][0] if "model_stats" in st else st
        ten = ", ".join("%s %s rows %.2f s" % (t.get("name"), t.get("rows"),
                                               t.get("device_seconds", 0.0))
                        for t in st.get("tenants", []))
        return "model stats: tenants %s; answer guard %.1f ms" % (
            ten or "?", st.get("answer_guard_seconds", 0.0) * 1e3)
    except (OSError, ValueError, KeyError, IndexError) as e:
        return "model stats: unreadable (%s)" % e


def run_backend(args, backend, scratch):
    """Every phase on one fresh server; returns [(target line, value, met)]."""
    model = make_model(args, backend, scratch)
    keys = {t: "sk-%s-%s" % (t, secrets.token_hex(16)) for t in ("A", "B", "admin")}
    work = tempfile.mkdtemp(prefix="bg-tenants-")
    mb = args.max_batch
    sat = 4 * mb
    checks = []
    print("== %s: %s, max_batch_size %d, max_queue_size %d, 1 instance, 1 IO thread; "
          "load average %s" % (backend, model[2], mb, 16 * mb, loadavg()))
    p, port = start(work, model, keys)
    sampler = Sampler(port)
    sampler.start()
    try:
        # Warm the latency model, then the capacity run: A alone, saturating.
        Load(port, work, "warm", {"A": spec(keys, "A", concurrency=sat)}, 1).wait()
        cap_run = Load(port, work, "cap", {"A": spec(keys, "A", concurrency=sat)}, 5, warmup=1)
        st = cap_run.wait()["A"]
        cap = ok(st) / st.get("span_s", st["duration_s"])
        wall, d = between(sampler.snap(), cap_run.t_launch + 1.5, cap_run.t_launch + 5.5)
        cap_busy = d.get("A", 0.0) / wall if wall else 0.0
        srv = st.get("server") or {}
        print("capacity (A alone, %d clients): %.0f req/s; A's fraction of the device %.3f; "
              "server: %.1f rows/batch, %.2f ms/batch" % (sat, cap, cap_busy,
                                                         srv.get("rows_per_batch", 0),
                                                         srv.get("compute_ms_per_batch", 0)))
        print("  " + step_line("A", st))

        # Borrow, reclaim, shares: B alone, then A comes back.
        b_run = Load(port, work, "b", {"B": spec(keys, "B", concurrency=sat)},
                     args.borrow_s + args.both_s)
        time.sleep(args.borrow_s)
        t0 = sampler.sample_now()   # the instant A starts: a sample of its own
        a_run = Load(port, work, "a", {"A": spec(keys, "A", concurrency=sat)}, args.both_s)
        a_st, b_st = a_run.wait()["A"], b_run.wait()["B"]
        s = sampler.snap()
        wall, d = between(s, b_run.t_launch + 0.5, t0)
        b_alone = d.get("B", 0.0) / wall if wall else 0.0
        i0 = at_or_after(s, t0)
        first = next((s[i][0] for i in range(i0 + 1, len(s))
                      if s[i][1].get("A", 0.0) > s[i0][1].get("A", 0.0) + 1e-9), None)
        if first is None:
            sys.exit("tenants: A was never served after it came back")
        first_s = split(between(s, t0, t0 + 1.0)[1])
        reach = next((e - t0 for (b, e, f) in windows(s, t0, t0 + args.both_s)
                      if f >= RETURN_FRACTION), None)
        wins = windows(s, t0, t0 + 1.0)
        settled = split(between(s, a_run.t_launch + 2.0, a_run.t_launch + args.both_s - 0.2)[1])
        per_s = [split(between(s, a_run.t_launch + k, a_run.t_launch + k + 1)[1])
                 for k in range(2, int(args.both_s))]
        print("borrow: B alone (%d clients) %.1f s: B's fraction of the device %.3f "
              "(%.3f of what A alone got in the capacity run)"
              % (sat, t0 - b_run.t_launch, b_alone,
                 b_alone / cap_busy if cap_busy else 0))
        print("reclaim: t0 = A's batchgate-load started (a sample taken then); A's first batch "
              "done by t0 + %.0f ms (the first sample that saw it); A's split in [t0, t0 + 1 s] "
              "%.3f; first 200-ms window with A >= %.2f ends %s after t0; 200-ms windows in the "
              "first second: %s" % (
                  (first - t0) * 1e3, first_s, RETURN_FRACTION,
                  "%.2f s" % reach if reach is not None else "never",
                  " ".join("%.2f" % f for (_, _, f) in wins)))
        print("shares: both saturating, A's split from 2 s after A started to its end %.3f; "
              "per second: %s" % (settled, " ".join("%.3f" % f for f in per_s)))
        print("  " + step_line("A", a_st))
        print("  " + step_line("B", b_st))
        print("  " + model_tenants(port, keys["admin"]))
        checks += [
            ("borrow: B alone, B's fraction of the device", b_alone, ">= 0.95", b_alone >= 0.95),
            ("reclaim: s from A's start to A >= 0.68", reach if reach is not None else -1,
             "<= 1.0", reach is not None and reach <= 1.0),
            ("reclaim: A's split in its first second", first_s, ">= 0.68",
             first_s >= RETURN_FRACTION),
            ("shares: A's split, both saturating", settled, "0.70+-0.05",
             abs(settled - SHARES["A"]) <= TOL),
        ]

        # Noisy neighbour: A within its share with a budget, alone then beside B's flood.
        rate_a = 0.5 * SHARES["A"] * cap
        usage = Usage(p.pid)
        alone_run = Load(port, work, "nn-alone",
                         {"A": spec(keys, "A", rate=round(rate_a), budget_ms=BUDGET_MS)},
                         args.nn_s, warmup=1)
        alone = alone_run.wait()["A"]
        alone_cores = usage.end()
        print("neighbour: A at %.0f req/s (0.5 x 0.7 x capacity), budget %d ms"
              % (rate_a, BUDGET_MS))
        print("  alone:  " + step_line("A", alone) + "; " + sampler.guard_line(
            alone_run.t_launch + 1.2, alone_run.t_launch + 1 + args.nn_s, BUDGET_MS))
        print("    " + alone_cores)
        # The flood: single-row requests at 5 x C. Then the same
        # rows as 8-row requests (an eighth of the HTTP requests): what is
        # left when the front end's work is taken out of the flood.
        cases = [("", 1, 0), (", 8-row flood", 8, 0)]
        if args.stall_ms > 0:
            cases.append((", one %d-ms stall" % args.stall_ms, 1, args.stall_ms))
        for label, rows, stall_ms in cases:
            time.sleep(0.5)
            b_rate = 5 * cap / rows
            usage = Usage(p.pid)
            flood_run = Load(port, work, "nn-flood-%d" % rows,
                             {"A": spec(keys, "A", rate=round(rate_a), budget_ms=BUDGET_MS),
                              "B": spec(keys, "B", rate=round(b_rate), batch=rows)},
                             args.nn_s, warmup=1)
            if stall_ms:
                # The whole server stopped for stall_ms halfway through, as
                # a busy machine or hypervisor stops it: every answer in
                # flight leaves that much late at once.
                time.sleep(1 + args.nn_s / 2)
                os.kill(p.pid, signal.SIGSTOP)
                time.sleep(stall_ms / 1e3)
                os.kill(p.pid, signal.SIGCONT)
            flood = flood_run.wait()
            cores = usage.end()
            s = sampler.snap()
            t_a, t_b = flood_run.t_launch + 1.2, flood_run.t_launch + 1 + args.nn_s
            wall, d = between(s, t_a, t_b)
            ratio = flood["A"]["goodput"] / alone["goodput"] if alone["goodput"] else 0.0
            p99 = flood["A"]["latency_us"]["p99"] / 1e3
            print("  B floods at %.0f req/s of %d row%s (5 x capacity in rows)%s:"
                  % (b_rate, rows, "s" if rows > 1 else "",
                     ", the server stopped for %d ms halfway" % stall_ms if stall_ms else ""))
            print("    beside: " + step_line("A", flood["A"]))
            print("    beside: " + step_line("B", flood["B"]))
            print("    device during the flood: A %.3f, B %.3f of wall time (A's split %.3f); %s"
                  % (d.get("A", 0) / wall if wall else 0, d.get("B", 0) / wall if wall else 0,
                     split(d), sampler.guard_line(t_a, t_b, BUDGET_MS)))
            print("    " + cores)
            print("    " + model_tenants(port, keys["admin"]))
            if stall_ms:
                # No target: the answers in flight during the stall are late
                # whatever the server does; what is measured is what the
                # stall costs after it (the guard learning it or not).
                checks += [
                    ("neighbour%s: A's goodput / alone" % label, ratio, "(info)", None),
                ]
                continue
            checks += [
                ("neighbour%s: A's p99 beside B (ms)" % label, p99, "<= %d" % BUDGET_MS,
                 p99 <= BUDGET_MS),
                ("neighbour%s: A's goodput beside / alone" % label, ratio, ">= 0.98",
                 ratio >= 0.98),
            ]

        # A time window switched during the run.
        time.sleep(0.5)
        both = {"A": spec(keys, "A", concurrency=sat), "B": spec(keys, "B", concurrency=sat)}
        w_run = Load(port, work, "window", both, args.window_s)
        time.sleep(args.switch_at)
        gov = {"timezone": "UTC", "windows": [{"name": "night", "from": "00:00", "to": "00:00",
                                               "shares": WINDOW_SHARES}]}
        code, body = http(port, "PUT", "/v2/governance", json.dumps(gov).encode(),
                          key=keys["admin"])
        t_put = time.monotonic()
        if code != 200:
            sys.exit("tenants: PUT /v2/governance: %d %s" % (code, body[:300]))
        active = json.loads(body).get("active")
        w = w_run.wait()
        s = sampler.snap()
        before = split(between(s, w_run.t_launch + 1.0, t_put - 0.05)[1])
        after = split(between(s, t_put + 1.0, w_run.t_launch + args.window_s - 0.2)[1])
        wins = windows(s, t_put, w_run.t_launch + args.window_s - 0.2)
        inside = [abs(f - WINDOW_SHARES["A"]) <= TOL for (_, _, f) in wins]
        k = inside.index(True) if True in inside else None
        moved = wins[k][1] - t_put if k is not None else None
        later = inside[k:] if k is not None else []
        lost = {}
        for name in ("A", "B"):
            for c, n in not_answered(w[name]).items():
                lost["%s %s" % (name, c)] = n
        nlost = sum(lost.values())
        print("window: PUT at %.1f s (active: %s); A's split before %.3f, from 1 s after to the "
              "end %.3f; first 200-ms window within 0.20+-0.05 ends %s after the PUT; %d of the "
              "%d windows from then on within it" % (
                  t_put - w_run.t_launch, active, before, after,
                  "%.2f s" % moved if moved is not None else "never", sum(later), len(later)))
        print("  200-ms windows from the PUT: " + " ".join("%.2f" % f for (_, _, f) in wins[:12]))
        for name in ("A", "B"):
            print("  " + step_line(name, w[name]))
        print("  not answered 2xx in the run: %s" % fmt_bad(lost))
        checks += [
            ("window: s from the PUT to the 0.2/0.8 split", moved if moved is not None else -1,
             "<= 1.0", moved is not None and moved <= 1.0),
            ("window: requests not answered 2xx", nlost, "0", nlost == 0),
        ]
    finally:
        sampler.end()
        stop_process(p)
        shutil.rmtree(work, ignore_errors=True)
    print("load average after %s: %s" % (backend, loadavg()))
    return checks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=["synthetic", "cpu", "both"], default="both")
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--base-us", type=int, default=2000, help="synthetic: per batch")
    ap.add_argument("--per-row-us", type=int, default=250, help="synthetic: per row")
    ap.add_argument("--dims", default="64,4096,4096,16", help="cpu: the MLP's widths")
    ap.add_argument("--borrow-s", type=float, default=5, help="B alone before A returns")
    ap.add_argument("--both-s", type=float, default=8, help="A and B after A returns")
    ap.add_argument("--nn-s", type=float, default=8, help="each noisy-neighbour run")
    ap.add_argument("--window-s", type=float, default=9, help="the window-switch run")
    ap.add_argument("--switch-at", type=float, default=4, help="the PUT, s into that run")
    ap.add_argument("--stall-ms", type=int, default=70,
                    help="one more single-row flood with the server stopped this long "
                         "halfway (0: not run)")
    args = ap.parse_args()
    for exe in (BIN, LOAD):
        if not os.access(exe, os.X_OK):
            sys.exit("tenants: %s not built (BATCHGATE_BIN, BATCHGATE_LOAD name others)" % exe)
    backends = ["synthetic", "cpu"] if args.backend == "both" else [args.backend]
    print("machine: %d cores (%s); %s UTC; load average %s"
          % (os.cpu_count(), cpu_name(), time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
             loadavg()))
    results = {}
    scratch = tempfile.mkdtemp(prefix="bg-tenants-model-")
    try:
        for b in backends:
            results[b] = run_backend(args, b, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print("%-62s" % "== targets (issue #16)" + "".join("  %-16s" % b for b in backends))
    for i, (name, _, target, _) in enumerate(results[backends[0]]):
        cells = ""
        for b in backends:
            _, value, _, met = results[b][i]
            cells += "  %8.3f %-7s" % (value, "" if met is None else "met" if met else "NOT MET")
        print("%-50s %-11s%s" % (name, target, cells))


if __name__ == "__main__":
    main()
