#!/usr/bin/env python3
"""harvest.py - does offline work fill the device time online traffic leaves,
without costing the online traffic anything? (issue #15; loadgen/bench/harvest.sh
is the entry point)

One model with one instance, two runs side by side in one invocation, each
over the same compressed day:

  A, online only: batchgate-load --trace diurnal:PERIOD:PEAK:TROUGH, every
     request with a latency budget; peak 70% and trough 5% of the online
     capacity measured first: answers 2xx per second, closed loop, single-row
     requests from 2 x max_batch_size clients (a full batch running and
     one waiting; more would only queue past the budget and be refused).
  B, the same trace plus a backlog of offline lines (a job larger than the
     day can finish), submitted before the trace starts.

The model, by --backend (everything else is one code path for all three):
  synthetic  batches of R rows sleep BASE_US + R * PER_ROW_US: a device that
             is not a CPU core, so the load generator and the server's own
             threads do not compete with it;
  cpu        a real MLP (--dims, F32, random weights from scripts/make_mlp.py
             in a temp repository) on the CPU backend, one instance: its
             "device" is the one core its worker thread runs on at a time,
             taken from the same cores as the IO thread, the jobs runner and
             batchgate-load. max_batch_size 16 (main() says why). --pin puts
             the worker on the last core and everything else on the others
             (then they cannot borrow it when the worker sleeps);
  cuda       the same MLP with "backend": "cuda" (GPU 0).

Reported, with the targets of the issue:
  - device busy fraction (busy seconds / wall seconds, from /metrics):
    B >= 0.90;
  - online goodput (answers within budget per second): B >= 0.99 x A;
  - share of online answers late or failed: B - A <= 0.1 percentage point;
  - offline lines per second in B >= 0.85 x the idle capacity of A. Two
    readings of "idle capacity" are printed: by time, (1 - busy A) x rows/s
    at full batches; and by rows, rows/s at full batches less the online
    rows/s (2xx) of A. Rows/s at full batches is the server's own view of
    the capacity run (rows per batch / device time per batch, from
    /metrics); the latency model's exec(max_batch_size) after A is shown
    beside it. Offline rows also fill the empty rows of online
    batches (docs/JOBS.md), so time the device is busy with small online
    batches still has room for them: the rows reading is the one the target
    is judged by, the time reading is shown beside it.
And for each run: the online answers that were not 2xx, the server's
batches, the answer guard sampled every 0.5 s (what makes the batcher refuse
at submit when answers leave late), and where the machine's time went: CPU
seconds per second of batchgate's threads by kind (worker = the device on
the cpu backend; IO; jobs runner; the rest), of batchgate-load, and of the
whole machine (what is left is other processes), with the load average
before and after.

    loadgen/bench/harvest.py [--backend synthetic|cpu|cuda] [--period 60] [--budget-ms 50]
                             [--hog N]

--hog N runs N busy loops beside every run (capacity, A, B): a host other
processes keep busy, made on purpose and the same for A and B.

Each run starts a fresh batchgate. Loopback only; every wait is bounded."""

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import Batchgate, cpu_name, http, stop_process

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BIN = os.environ.get("BATCHGATE_BIN", os.path.join(ROOT, "build", "batchgate"))
LOAD = os.environ.get("BATCHGATE_LOAD", os.path.join(ROOT, "build", "batchgate-load"))
MODEL = "h"
# The backlog file's size at most (jobs.max_input_bytes is 1 GiB): a device
# faster than this over the day empties it early, which the report says.
BACKLOG_MAX_BYTES = 512 << 20


def metric_sum(text, name, label_re=""):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and re.search(label_re, line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def device_busy(port):
    _, body = http(port, "GET", "/metrics")
    return metric_sum(body.decode(), "batchgate_device_busy_seconds_total",
                      r'model="%s"' % MODEL)


def make_model(args, scratch):
    """The model folder's config.json (as a dict), the weights file to link
    beside it (None for synthetic) and a line that says what it is."""
    if args.backend == "synthetic":
        cfg = {"backend": "synthetic",
               "inputs": [{"name": "x", "datatype": "FP32", "shape": [4]}],
               "outputs": [{"name": "y", "datatype": "FP32", "shape": [2]}],
               "synthetic": {"base_us": args.base_us, "per_row_us": args.per_row_us,
                             "mode": "sleep"}}
        weights, desc = None, "synthetic (sleep) %d us + %d us/row" % (args.base_us,
                                                                       args.per_row_us)
    else:
        out = os.path.join(scratch, "mlp")
        made = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_mlp.py"), out,
                               "--dims", args.dims, "--name", MODEL], check=True,
                              capture_output=True, text=True, timeout=600).stdout.strip()
        with open(os.path.join(out, "config.json")) as f:
            cfg = json.load(f)
        cfg["backend"] = args.backend
        weights = os.path.join(out, "model.safetensors")
        desc = "%s MLP %s F32 (%s), relu, random weights" % (
            args.backend, args.dims.replace(",", "-"), made.split("(", 1)[-1].split(" F32")[0])
    # The adaptive default policy and one instance: the "device" is that
    # instance. The budget is the trace's (X-Request-Timeout-Ms), not the
    # model's: the capacity run has none, so it measures what the device
    # sustains, not what the planner refuses when the queue looks long.
    cfg["batching"] = {"max_batch_size": args.max_batch}
    cfg["instances"] = {"count": 1}
    return cfg, weights, desc


def pin_plan():
    """(device core, the other cores) when the worker is to be pinned, else None."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    return cores[-1], set(cores[:-1])


def threads(pid):
    """{tid: (name, cpu seconds)} of process pid's threads."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                st = f.read()
        except OSError:
            continue   # ended meanwhile
        name = st[st.index("(") + 1:st.rindex(")")]
        fields = st[st.rindex(")") + 2:].split()
        out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def pin(pid, plan):
    device, rest = plan
    for tid, (name, _) in threads(pid).items():
        os.sched_setaffinity(tid, {device} if name.startswith("bg-w-") else rest)


class Usage:
    """Where the machine's time goes between two snapshots: CPU seconds per
    wall second of batchgate's threads by kind, of the children this script
    waited for (batchgate-load), and of the whole machine."""
    KINDS = (("worker", "bg-w-"), ("IO", "bg-io-"), ("jobs", "bg-jobs"), ("rest", ""))

    def __init__(self, pid):
        self.pid = pid
        self.t, self.th, self.kids, self.busy, self.load = self.snap()

    def snap(self):
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        with open("/proc/stat") as f:
            cpu = [int(x) for x in f.readline().split()[1:]]
        with open("/proc/loadavg") as f:
            load = f.read().split()[0]
        idle = cpu[3] + cpu[4]
        return (time.monotonic(), threads(self.pid), ru.ru_utime + ru.ru_stime,
                (sum(cpu) - idle) / os.sysconf("SC_CLK_TCK"), load)

    def end(self):
        t, th, kids, busy, load = self.snap()
        wall = t - self.t
        kinds = dict.fromkeys((k for k, _ in self.KINDS), 0.0)
        for tid, (name, sec) in th.items():
            kind = next(k for k, pre in self.KINDS if name.startswith(pre))
            kinds[kind] += sec - self.th.get(tid, (name, 0.0))[1]
        ours = sum(kinds.values()) + (kids - self.kids)
        machine = (busy - self.busy) / wall
        parts = "  ".join("%s %.2f" % (k, v / wall) for k, v in kinds.items())
        return ("cores used: batchgate %s; batchgate-load %.2f; machine %.2f of %d "
                "(others %.2f); load average %s -> %s"
                % (parts, (kids - self.kids) / wall, machine, os.cpu_count(),
                   max(machine - ours / wall, 0.0), self.load, load))


def start(work, args, model):
    cfg, weights, _ = model
    models = os.path.join(work, "models")
    os.makedirs(os.path.join(models, MODEL), exist_ok=True)
    with open(os.path.join(models, MODEL, "config.json"), "w") as f:
        json.dump(cfg, f)
    if weights:
        os.symlink(weights, os.path.join(models, MODEL, "model.safetensors"))
    state = os.path.join(work, "state")
    bg = Batchgate(BIN, work, {"listen": "127.0.0.1:0", "io_threads": 1,
                               "model_repository": models, "state_dir": state}, timeout=30)
    if http(bg.port, "GET", "/v2/models/%s/ready" % MODEL)[0] != 200:
        text = open(bg.log_path).read()
        bg.stop()   # not loaded (a cuda model without a GPU): the log says why
        sys.exit("harvest: the model did not load:\n" + text)
    if args.pin:
        pin(bg.proc.pid, args.pin)
    return bg.proc, bg.port, state


def stop(p, work):
    stop_process(p)
    shutil.rmtree(work, ignore_errors=True)


def load(port, work, extra, duration, warmup=0):
    out = os.path.join(work, "load.json")
    cmd = [LOAD, "--url", "http://127.0.0.1:%d" % port, "--model", MODEL, "--duration",
           str(duration), "--warmup", str(warmup), "--quiet", "--json", out] + extra
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=duration + warmup + 120)
    with open(out) as f:
        return json.load(f)["steps"][0]


def exec_ms(port, rows):
    """The latency model's exec(rows) for the model's instance, in ms."""
    _, body = http(port, "GET", "/v2/models/%s/stats" % MODEL)
    st = json.loads(body)["model_stats"][0]
    inst = st.get("instances", [{}])[0]
    lm = inst.get("latency_model") or {}
    a, b = lm.get("a_seconds"), lm.get("b_seconds_per_row")
    if a is None or b is None:
        return None
    return (a + b * rows) * 1e3


class GuardWatch(threading.Thread):
    """Samples the model's answer guard (how late answers recently left
    against plan; the batcher plans every deadline that much earlier and
    refuses at submit what it then cannot meet) every half second."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.stop, self.values = port, threading.Event(), []

    def run(self):
        while not self.stop.wait(0.5):
            try:
                _, body = http(self.port, "GET", "/v2/models/%s/stats" % MODEL, timeout=5)
                st = json.loads(body)["model_stats"][0]
                self.values.append(st.get("answer_guard_seconds", 0.0) * 1e3)
            except (OSError, ValueError, KeyError, IndexError):
                pass

    def end(self, budget_ms):
        self.stop.set()
        self.join(10)
        v = self.values or [0.0]
        over = sum(1 for x in v if x >= budget_ms / 2) * 0.5
        return "answer guard max %.1f ms, mean %.1f ms, >= half the budget for %.1f s" % (
            max(v), sum(v) / len(v), over)


def write_job(state, lines, model):
    inp = model[0]["inputs"][0]
    dim = inp["shape"][0]
    jobs = os.path.join(state, "jobs")
    os.makedirs(jobs, exist_ok=True)
    path = os.path.join(jobs, "backlog.jsonl")
    row = json.dumps({"inputs": [{"name": inp["name"], "datatype": "FP32", "shape": [1, dim],
                                  "data": [round((i % 7) / 7 - 0.4, 3) for i in range(dim)]}]})
    lines = min(lines, BACKLOG_MAX_BYTES // (len(row) + 16))
    with open(path, "w") as f:
        for i in range(lines):
            f.write(row[:-1] + ', "id": "%d"}\n' % i)
    return "backlog.jsonl", lines


def ok_rate(step):
    """2xx answers per second of a load step."""
    ok = sum(n for c, n in step["codes"].items() if c.startswith("2"))
    span = step.get("span_s", step["duration_s"])   # the window and the wait for its answers
    return ok / span if span else 0.0


def answers_line(step):
    """What the online answers were, and the server's view of the batches
    (offline rows included)."""
    bad = {c: n for c, n in step["codes"].items() if not c.startswith("2")}
    srv = step.get("server") or {}
    return ("online: sent %.1f/s, non-2xx %s, errors %d, late sends %d; server: queue %.2f ms, "
            "compute %.2f ms/batch, %.1f rows/batch"
            % (step["achieved_rate"], ", ".join("%s x%d" % kv for kv in sorted(bad.items())) or 0,
               step["errors"], step.get("late_sends", 0), srv.get("queue_ms", 0),
               srv.get("compute_ms_per_batch", 0), srv.get("rows_per_batch", 0)))


def one_run(args, model, peak, trough, backlog_lines):
    work = tempfile.mkdtemp(prefix="bg-harvest-")
    p, port, state = start(work, args, model)
    try:
        # Warm the latency model the same way in both runs.
        load(port, work, ["--concurrency", "16"], 2)
        job = None
        if backlog_lines:
            rel, backlog_lines = write_job(state, backlog_lines, model)
            status, body = http(port, "POST", "/v2/models/%s/jobs" % MODEL,
                                json.dumps({"input_path": rel}).encode())
            if status != 201:
                sys.exit("harvest: job refused: %d %s" % (status, body[:300]))
            job = json.loads(body)["id"]
            time.sleep(0.5)
        busy0, t0 = device_busy(port), time.monotonic()
        usage = Usage(p.pid)
        guard = GuardWatch(port)
        guard.start()
        done0 = 0
        if job:
            done0 = json.loads(http(port, "GET", "/v2/jobs/%s" % job)[1])["lines"]["done"]
        step = load(port, work, ["--trace", "diurnal:%g:%g:%g" % (args.period, peak, trough),
                                 "--budget-ms", str(args.budget_ms)], args.period)
        busy1, t1 = device_busy(port), time.monotonic()
        cores = usage.end()
        guard_line = guard.end(args.budget_ms)
        lines = 0
        if job:
            info = json.loads(http(port, "GET", "/v2/jobs/%s" % job)[1])
            lines = info["lines"]["done"] - done0
            if info["state"] != "running":
                guard_line += "; the backlog (%d lines) was %s before the day ended: the " \
                    "offline rate is a lower bound" % (backlog_lines, info["state"])
            http(port, "DELETE", "/v2/jobs/%s" % job)
        full = exec_ms(port, args.max_batch)
        answered = sum(step["codes"].values()) + step["errors"]
        good = step["goodput"] * step.get("span_s", step["duration_s"])
        return {"busy": (busy1 - busy0) / (t1 - t0), "goodput": step["goodput"],
                "online_rows_s": ok_rate(step),
                # goodput x duration is a float a hair above the count when
                # every answer was good: no "-0.000%".
                "late_share": max(0.0, 1 - good / answered) if answered else 0.0,
                "offline_lines_s": lines / (t1 - t0), "full_batch_ms": full,
                "p99_ms": step["latency_us"]["p99"] / 1e3, "cores": cores,
                "answers": answers_line(step) + "; " + guard_line}
    finally:
        stop(p, work)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=["synthetic", "cpu", "cuda"], default="synthetic")
    ap.add_argument("--period", type=float, default=60, help="seconds of one compressed day")
    ap.add_argument("--budget-ms", type=float, default=50)
    ap.add_argument("--max-batch", type=int,
                    help="max_batch_size (default 32 synthetic, 16 cpu and cuda)")
    ap.add_argument("--base-us", type=int, default=2000, help="synthetic: per batch")
    ap.add_argument("--per-row-us", type=int, default=50, help="synthetic: per row")
    ap.add_argument("--dims", default="64,4096,4096,16", help="cpu, cuda: the MLP's widths")
    ap.add_argument("--pin", action="store_true",
                    help="cpu: the worker on a core of its own, everything else on the others")
    ap.add_argument("--hog", type=int, default=0,
                    help="N busy loops (other tenants of the host) beside every run, "
                         "capacity run included: contention made on purpose, the same for A "
                         "and B")
    args = ap.parse_args()
    if args.max_batch is None:
        # The MLP: 16 rows take ~9 ms on one core of the 2-core VM against
        # ~3.3 ms for 1 (6x the rows/s); 32 take 14-23 ms, and an offline
        # batch that long ahead of an online one leaves little of a 50 ms
        # budget on a machine whose other tenants can double it.
        args.max_batch = 32 if args.backend == "synthetic" else 16
    for exe in (BIN, LOAD):
        if not os.access(exe, os.X_OK):
            sys.exit("harvest: %s not built (BATCHGATE_BIN, BATCHGATE_LOAD name others)" % exe)
    args.pin = pin_plan() if args.backend == "cpu" and args.pin else None
    if args.pin:
        os.sched_setaffinity(0, args.pin[1])   # inherited by batchgate and batchgate-load

    scratch = tempfile.mkdtemp(prefix="bg-harvest-model-")
    # The hogs: plain busy loops at the default priority, as another
    # tenant's CPU-bound process would be. Killed however the run ends.
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.hog)]
    try:
        model = make_model(args, scratch)
        measure(args, model)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        shutil.rmtree(scratch, ignore_errors=True)


def measure(args, model):
    # Online capacity: single-row requests, closed loop, enough clients to
    # keep full batches going.
    work = tempfile.mkdtemp(prefix="bg-harvest-")
    p, port, _ = start(work, args, model)
    try:
        usage = Usage(p.pid)
        step = load(port, work, ["--concurrency", str(2 * args.max_batch)], 5, warmup=1)
        cap_cores = usage.end()
    finally:
        stop(p, work)
    cap = ok_rate(step)
    srv = step.get("server") or {}
    rows_s = (srv["rows_per_batch"] / (srv["compute_ms_per_batch"] / 1e3)
              if srv.get("compute_ms_per_batch") else 0.0)
    peak, trough = 0.70 * cap, 0.05 * cap
    where = "not pinned"
    if args.pin:
        where = "worker pinned to core %d, the rest to %s" % (
            args.pin[0], ",".join(map(str, sorted(args.pin[1]))))
    print("machine: %d cores (%s); %s UTC" % (os.cpu_count(), cpu_name(),
                                             time.strftime("%Y-%m-%d %H:%M", time.gmtime())))
    print("model: %s, max_batch_size %d, 1 instance (%s), 1 IO thread"
          % (model[2], args.max_batch, where if args.backend == "cpu" else args.backend))
    if args.hog:
        print("contention: %d busy loop%s beside every run (--hog)"
              % (args.hog, "s" if args.hog > 1 else ""))
    print("online capacity %.0f req/s; day of %g s: peak %.0f/s, trough %.0f/s, budget %g ms"
          % (cap, args.period, peak, trough, args.budget_ms))
    print("  capacity run: " + answers_line(step))
    print("  capacity run " + cap_cores)

    a = one_run(args, model, peak, trough, 0)
    idle_time_cap = (1 - a["busy"]) * rows_s
    idle_cap = max(rows_s - a["online_rows_s"], 0.0)
    # Enough for the device at full batches for twice the day: the rate of
    # the capacity run can be half what B gets when other tenants of the
    # machine come and go (on the 2-core VM a backlog of 1.5 x the idle
    # rows ran out before the day did).
    backlog = int(rows_s * args.period * 2) + 1000
    b = one_run(args, model, peak, trough, backlog)

    def row(name, r):
        print("%-22s busy %.3f  goodput %7.1f/s  late or failed %.3f%%  p99 %6.1f ms  "
              "offline %7.1f lines/s" % (name, r["busy"], r["goodput"], 100 * r["late_share"],
                                         r["p99_ms"], r["offline_lines_s"]))
        print("  " + r["answers"])
        print("  " + r["cores"])
    row("(A) online only", a)
    row("(B) online + backlog", b)
    checks = [
        ("device busy fraction B", b["busy"], ">= 0.90", b["busy"] >= 0.90),
        ("online goodput B / A", b["goodput"] / a["goodput"] if a["goodput"] else 0, ">= 0.99",
         a["goodput"] and b["goodput"] / a["goodput"] >= 0.99),
        ("late share B - A (pp)", 100 * (b["late_share"] - a["late_share"]), "<= 0.1",
         100 * (b["late_share"] - a["late_share"]) <= 0.1),
        ("offline lines/s / idle rows", b["offline_lines_s"] / idle_cap if idle_cap else 0,
         ">= 0.85", idle_cap and b["offline_lines_s"] / idle_cap >= 0.85),
    ]
    print("full batches: %.0f rows/s (capacity run: %.1f rows in %.2f ms; the latency model "
          "after A: exec(%d) = %.2f ms)" % (rows_s, srv.get("rows_per_batch", 0),
                                            srv.get("compute_ms_per_batch", 0), args.max_batch,
                                            a["full_batch_ms"] or 0))
    print("idle capacity of A by rows: %.0f rows/s at full batches - %.0f online = %.0f rows/s; "
          "by time: (1 - %.3f) x %.0f = %.0f rows/s"
          % (rows_s, a["online_rows_s"], idle_cap, a["busy"], rows_s, idle_time_cap))
    for name, value, target, ok in checks:
        print("%-34s %8.3f  target %-8s %s" % (name, value, target, "met" if ok else "NOT MET"))


if __name__ == "__main__":
    main()
