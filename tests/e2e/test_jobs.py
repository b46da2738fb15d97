"""test_jobs.py - offline jobs end to end (docs/JOBS.md): submit, status,
list, results, cancel, every bad input, online requests beside a job, and
the durability rule: SIGTERM and SIGKILL at random points, after which each
input line has exactly one result line."""

import json
import re
import os
import random
import resource
import shutil
import signal
import tempfile
import threading
import time
import unittest

from harness import Server, fill_fs, hold_write_lock, mount_tmpfs, roundtrip
from test_infer import infer_body, synthetic, write_model


def line(i, rows=1, **extra):
    """A job line whose answer is known: synthetic y_j = sum(x) + j."""
    body = {"id": "r%d" % i,
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [rows, 4],
                        "data": [[i, 0, 0, 0]] * rows}]}
    body.update(extra)
    return json.dumps(body)


def write_model_config(repo, name, cfg):
    with open(os.path.join(repo, name, "config.json"), "w") as f:
        json.dump(cfg, f)


def get(srv, path, timeout=10.0):
    return roundtrip(srv.port, "GET", path, timeout=timeout)


def submit(srv, model, body, timeout=30.0):
    return roundtrip(srv.port, "POST", "/v2/models/%s/jobs" % model,
                     [("Content-Type", "application/jsonl")], body, timeout=timeout)


def wait_state(tc, srv, job, states, timeout=20.0):
    deadline = time.monotonic() + timeout
    while True:
        r = get(srv, "/v2/jobs/" + job)
        tc.assertEqual(r.status, 200, r.body)
        j = r.json()
        if j["state"] in states:
            return j
        if time.monotonic() > deadline:
            tc.fail("job %s still %s after %.0f s; log:\n%s" % (job, j, timeout, srv.log()))
        time.sleep(0.05)


def wait_done(tc, srv, job, at_least, timeout=20.0):
    """Until the job has at_least lines done."""
    deadline = time.monotonic() + timeout
    while get(srv, "/v2/jobs/" + job).json()["lines"]["done"] < at_least:
        tc.assertLess(time.monotonic(), deadline, srv.log())
        time.sleep(0.01)


def results(tc, srv, job):
    r = get(srv, "/v2/jobs/%s/results" % job)
    tc.assertEqual(r.status, 200, r.body)
    text = r.body.decode()
    tc.assertTrue(text == "" or text.endswith("\n"), text[-200:])
    return [json.loads(x) for x in text.splitlines()]


def check_exactly_once(tc, res, n, bad=()):
    """Lines 1..n, each once, in order, each answer the right one."""
    tc.assertEqual([r["line"] for r in res], list(range(1, n + 1)))
    for r in res:
        i = r["line"] - 1
        if i in bad:
            tc.assertIn("error", r)
            continue
        tc.assertEqual(r["id"], "r%d" % i, r)
        tc.assertEqual(r["outputs"][0]["data"][:3], [i, i + 1, i + 2], r)


class JobsCase(unittest.TestCase):
    """A model repository and a state_dir kept across the test's restarts."""
    models = {}

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="batchgate-jobs-")
        self.repo = os.path.join(self.tmp, "models")
        os.makedirs(self.repo)
        for name, cfg in self.models.items():
            write_model(self.repo, name, cfg)
        self.state = os.path.join(self.tmp, "state")
        self.jobs_dir = os.path.join(self.state, "jobs")
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.kill()
        self.doCleanups()   # a tmpfs (mount_tmpfs) goes before the folder it is in
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, extra=None, **kw):
        cfg = {"model_repository": self.repo, "state_dir": self.state}
        cfg.update(extra or {})
        srv = Server(cfg, io_threads=2, **kw)
        self.servers.append(srv)
        srv.wait_log(r"ready in", timeout=30)
        return srv


class JobsApiTest(JobsCase):
    models = {
        "syn": synthetic("syn", base_us=1000, per_row_us=10,
                         batching={"max_batch_size": 8, "max_queue_delay_us": 2000}),
        "slow": synthetic("slow", base_us=20000, per_row_us=0,
                          batching={"max_batch_size": 4, "max_queue_delay_us": 1000,
                                    "max_queue_size": 2}),
        "broken": {"name": "broken", "backend": "tpu"},
        "later": dict(synthetic("later", base_us=1000, per_row_us=10),
                      lifecycle={"load": "lazy"}),
    }

    def test_submit_status_results_list_metrics(self):
        srv = self.start()
        lines = [line(i) for i in range(40)]
        lines[3] = "not json"
        lines[7] = line(7, rows=9)   # over max_batch_size: refused alone
        lines[9] = json.dumps({"inputs": [{"name": "nope", "datatype": "FP32",
                                           "shape": [1, 4], "data": [1, 2, 3, 4]}]})
        body = "\n".join(lines[:20]) + "\n\n  \n" + "\n".join(lines[20:])   # blank lines skipped
        r = submit(srv, "syn", body)
        self.assertEqual(r.status, 201, r.body)
        job = r.json()
        self.assertEqual(job["state"], "queued")
        j = wait_state(self, srv, job["id"], ("completed",))
        self.assertEqual(j["model"], "syn")
        self.assertEqual(j["tenant"], "default")   # no key: the tenant "default"
        self.assertEqual(j["lines"], {"total": 40, "done": 40, "failed": 3})
        self.assertTrue(j["created"] <= j["started"] <= j["finished"])
        self.assertTrue(os.path.isfile(j["output_path"]))
        res = results(self, srv, job["id"])
        check_exactly_once(self, res, 40, bad={3, 7, 9})
        self.assertIsNone(res[3]["id"])
        self.assertIn("JSON", res[3]["error"])
        self.assertEqual(res[7]["id"], "r7")
        self.assertIn("rows", res[7]["error"])
        lst = get(srv, "/v2/jobs").json()["jobs"]
        self.assertEqual([x["id"] for x in lst], [job["id"]])
        m = get(srv, "/metrics").body.decode()
        self.assertIn('batchgate_job_lines_total{model="syn",result="ok"} 37\n', m)
        self.assertIn('batchgate_job_lines_total{model="syn",result="failed"} 3\n', m)
        self.assertIn('batchgate_jobs{state="completed"} 1\n', m)
        self.assertIn('batchgate_jobs{state="running"} 0\n', m)
        # Only job lines ran: the device's busy time is the offline class's.
        off = re.search(r'^batchgate_device_busy_seconds_total\{model="syn",device="(\w+)",'
                        r'class="offline"\} (\S+)', m, re.M)
        on = re.search(r'^batchgate_device_busy_seconds_total\{model="syn",device="(\w+)",'
                       r'class="online"\} (\S+)', m, re.M)
        self.assertIsNotNone(off, m)
        self.assertGreater(float(off.group(2)), 0)
        self.assertLess(float(on.group(2)), float(off.group(2)) / 10)
        # Cancelling a finished job changes nothing.
        r = roundtrip(srv.port, "DELETE", "/v2/jobs/" + job["id"])
        self.assertEqual((r.status, r.json()["state"]), (200, "completed"))
        srv.stop_checked()

    def test_list_filters_and_pages(self):
        srv = self.start()
        ids = []
        for i in range(5):   # syn, broken (waits: cancelled), syn, broken, syn: oldest first
            r = submit(srv, "syn" if i % 2 == 0 else "broken", line(i))
            self.assertEqual(r.status, 201, r.body)
            ids.append(r.json()["id"])
            if i % 2 == 0:
                wait_state(self, srv, ids[-1], ("completed",))
                continue
            deadline = time.monotonic() + 10
            while "waiting" not in get(srv, "/v2/jobs/" + ids[-1]).json().get("reason", ""):
                self.assertLess(time.monotonic(), deadline, srv.log())
                time.sleep(0.05)
            r = roundtrip(srv.port, "DELETE", "/v2/jobs/" + ids[-1])
            self.assertEqual((r.status, r.json()["state"]), (200, "cancelled"), r.body)

        def listed(query):
            r = get(srv, "/v2/jobs" + query)
            self.assertEqual(r.status, 200, (query, r.body))
            return [x["id"] for x in r.json()["jobs"]], r.json()["has_more"]

        self.assertEqual(listed(""), (ids, False))
        self.assertEqual(listed("?state=completed"), (ids[0::2], False))
        self.assertEqual(listed("?state=cancelled&model=broken"), (ids[1::2], False))
        self.assertEqual(listed("?model=later"), ([], False))
        # Pages of two, each starting after the last id of the one before.
        self.assertEqual(listed("?limit=2"), (ids[:2], True))
        self.assertEqual(listed("?limit=2&after=" + ids[1]), (ids[2:4], True))
        self.assertEqual(listed("?limit=2&after=" + ids[3]), (ids[4:], False))
        self.assertEqual(listed("?limit=5"), (ids, False))
        self.assertEqual(listed("?after=" + ids[4]), ([], False))
        self.assertEqual(listed("?state=completed&limit=1&after=" + ids[0]), ([ids[2]], True))
        # A job submitted while paging comes on a later page, none is seen twice.
        r = submit(srv, "syn", line(9))
        self.assertEqual(listed("?limit=2&after=" + ids[3]), ([ids[4], r.json()["id"]], False))
        wait_state(self, srv, r.json()["id"], ("completed",))
        for query, param in (("?state=done", "state"), ("?limit=0", "limit"),
                             ("?limit=10001", "limit"), ("?limit=2x", "limit"),
                             ("?after=job-nope", "after"), ("?after=%zz", "after"),
                             ("?model=" + "m" * 300, "model")):
            r = get(srv, "/v2/jobs" + query)
            self.assertEqual(r.status, 400, (query, r.body))
            self.assertTrue(r.json()["error"].startswith(param + ": "), (query, r.body))
        self.assertIn("queued, running, completed, failed, cancelled",
                      get(srv, "/v2/jobs?state=x").json()["error"])
        # Given twice, or not taken (a typo): 400, as /v2/usage (the first
        # was read, the rest passed by without a word).
        for query, words in (("?limit=1&limit=2", "limit is given twice"),
                             ("?state=completed&state=failed", "state is given twice"),
                             ("?stat=completed", 'unknown parameter "stat": GET /v2/jobs takes '
                                                 'state, model, limit and after')):
            r = get(srv, "/v2/jobs" + query)
            self.assertEqual((r.status, r.json()["error"]), (400, words), query)
        self.assertEqual(listed("?&limit=1&&"), (ids[:1], True))
        srv.stop_checked()

    def test_bad_inputs(self):
        srv = self.start({"jobs": {"max_input_bytes": 4096},
                          "limits": {"max_body_bytes": 16384}})
        # Unknown model.
        r = submit(srv, "nope", line(0))
        self.assertEqual(r.status, 404, r.body)
        # Unknown job, on every route.
        for method, path in (("GET", "/v2/jobs/job-x"), ("GET", "/v2/jobs/job-x/results"),
                             ("DELETE", "/v2/jobs/job-x")):
            r = roundtrip(srv.port, method, path)
            self.assertEqual(r.status, 404, (method, path, r.body))
        # A body over jobs.max_input_bytes.
        r = submit(srv, "syn", "\n".join(line(i) for i in range(100)))
        self.assertEqual(r.status, 413, r.body)
        self.assertIn("max_input_bytes", r.json()["error"])
        # A body over limits.max_body_bytes: the HTTP layer's 413, before the body is read.
        r = submit(srv, "syn", "\n".join(line(i) for i in range(400)))
        self.assertEqual(r.status, 413, r.body)
        # An empty body.
        self.assertEqual(submit(srv, "syn", "").status, 400)
        # input_path: outside jobs.dir every way, missing, too big, then a good one.
        outside = os.path.join(self.tmp, "outside.jsonl")
        with open(outside, "w") as f:
            f.write(line(0) + "\n")
        os.symlink(outside, os.path.join(self.jobs_dir, "link.jsonl"))
        os.makedirs(os.path.join(self.jobs_dir, "sub"))
        for p, status in ((outside, 403), ("../outside.jsonl", 403), ("sub/../../outside.jsonl", 403),
                          ("link.jsonl", 403), ("missing.jsonl", 400), ("sub", 400),
                          (".", 400), ("", 400)):
            r = submit(srv, "syn", json.dumps({"input_path": p}))
            self.assertEqual(r.status, status, (p, r.body))
            self.assertIn("input_path", r.json()["error"])
        with open(os.path.join(self.jobs_dir, "big.jsonl"), "w") as f:
            f.write("\n".join(line(i) for i in range(100)))
        self.assertEqual(submit(srv, "syn", json.dumps({"input_path": "big.jsonl"})).status, 413)
        with open(os.path.join(self.jobs_dir, "sub", "ok.jsonl"), "w") as f:
            f.write("\n".join(line(i) for i in range(10)) + "\n")
        r = submit(srv, "syn", json.dumps({"input_path": "sub/ok.jsonl"}))
        self.assertEqual(r.status, 201, r.body)
        ok = r.json()["id"]
        wait_state(self, srv, ok, ("completed",))
        check_exactly_once(self, results(self, srv, ok), 10)
        # batchgate's own files in jobs.dir are no one's input: a job read
        # another tenant's input copy or results through them. The same 403
        # whether the file exists or not (400 "No such file" told which).
        os.symlink(os.path.join(self.jobs_dir, ok + ".results.jsonl"),
                   os.path.join(self.jobs_dir, "mine.jsonl"))
        for p in (ok + ".input.jsonl", ok + ".results.jsonl", "./" + ok + ".input.jsonl",
                  "job-nope.input.jsonl", "batch/x.jsonl",
                  "batch", "batchgate.lock", "mine.jsonl"):
            r = submit(srv, "syn", json.dumps({"input_path": p}))
            self.assertEqual(r.status, 403, (p, r.body))
            self.assertIn("names a file batchgate keeps", r.json()["error"])
        srv.stop_checked()

    def test_state_dir_inside_jobs_dir_is_no_input(self):
        jobs = os.path.join(self.tmp, "jd")
        os.makedirs(jobs)
        srv = self.start({"jobs": {"dir": jobs}, "state_dir": os.path.join(jobs, "st")})
        with open(os.path.join(jobs, "in.jsonl"), "w") as f:
            f.write(line(0) + "\n")
        for p, status in (("st/batchgate.db", 403), ("st/anything", 403), ("in.jsonl", 201)):
            r = submit(srv, "syn", json.dumps({"input_path": p}))
            self.assertEqual(r.status, status, (p, r.body))
        srv.stop_checked()

    def test_a_job_waits_for_its_model_that_failed_to_load(self):
        # It failed for good: a model broken at a restart ended a night's
        # job, to be submitted again from its first line. It now waits,
        # with the reason shown, while the jobs behind it run, and runs
        # once the model is fixed.
        srv = self.start()
        r = submit(srv, "broken", "\n".join(line(i) for i in range(10)))
        self.assertEqual(r.status, 201, r.body)
        waiting = r.json()["id"]
        srv.wait_log(r" warn job %s waiting: model broken is not served: .*tried again when a "
                     r"model loads and every 10 s" % waiting)
        j = get(srv, "/v2/jobs/" + waiting).json()
        self.assertEqual(j["state"], "queued", j)
        self.assertIn("waiting: model broken is not served", j["reason"])
        r = submit(srv, "syn", line(0))
        self.assertEqual(r.status, 201, r.body)
        wait_state(self, srv, r.json()["id"], ("completed",))
        # Fixed: a working config in its folder, loaded through the API.
        write_model_config(self.repo, "broken", synthetic("broken", base_us=1000,
                                                          per_row_us=10))
        r = roundtrip(srv.port, "POST", "/v2/repository/models/broken/load")
        self.assertEqual(r.status, 200, r.body)
        # The load wakes it: it was looked at again only every 10 s.
        t0 = time.monotonic()
        j = wait_state(self, srv, waiting, ("running", "completed"), timeout=30)
        self.assertLess(time.monotonic() - t0, 5.0, "expected the load to wake the waiting job")
        j = wait_state(self, srv, waiting, ("completed",), timeout=30)
        self.assertNotIn("reason", j)
        check_exactly_once(self, results(self, srv, waiting), 10)
        self.assertEqual(len(re.findall(r"job %s waiting" % waiting, srv.log())), 1,
                         "expected the wait said once, not at every look")
        srv.stop_checked()

    def test_past_32_waiting_one_more_fails(self):
        srv = self.start()
        ids = []
        for i in range(33):
            r = submit(srv, "broken", line(i))
            self.assertEqual(r.status, 201, r.body)
            ids.append(r.json()["id"])
        j = wait_state(self, srv, ids[32], ("failed",))
        self.assertIn("model broken is not served", j["reason"])
        self.assertNotIn("waiting", j["reason"])
        for job in ids[:32]:
            j = get(srv, "/v2/jobs/" + job).json()
            self.assertEqual(j["state"], "queued", j)
            self.assertIn("waiting", j["reason"])
        srv.stop_checked()

    def test_a_cancelled_waiting_job_leaves_its_reason_and_its_place(self):
        # It kept "waiting: ..." as a cancelled job's reason, and its place
        # among the 32 until its next look: one job too many failed.
        srv = self.start()
        r = submit(srv, "broken", line(0))
        self.assertEqual(r.status, 201, r.body)
        first = r.json()["id"]
        srv.wait_log(r" warn job %s waiting" % first)
        r = roundtrip(srv.port, "DELETE", "/v2/jobs/" + first)
        self.assertEqual((r.status, r.json()["state"]), (200, "cancelled"), r.body)
        j = get(srv, "/v2/jobs/" + first).json()
        self.assertEqual(j["state"], "cancelled")
        self.assertNotIn("reason", j)
        ids = []
        for i in range(32):
            r = submit(srv, "broken", line(i))
            self.assertEqual(r.status, 201, r.body)
            ids.append(r.json()["id"])
        srv.wait_log(r" warn job %s waiting" % ids[-1])
        for job in ids:
            j = get(srv, "/v2/jobs/" + job).json()
            self.assertEqual(j["state"], "queued", j)
        srv.stop_checked()

    def test_a_waiting_job_runs_after_a_kill_once_its_model_loads(self):
        # SIGKILL while it waits: it is queued as it was, and the next start
        # (its model fixed on disk meanwhile) runs it, the wait's reason gone.
        srv = self.start()
        r = submit(srv, "broken", "\n".join(line(i) for i in range(10)))
        self.assertEqual(r.status, 201, r.body)
        waiting = r.json()["id"]
        srv.wait_log(r" warn job %s waiting: model broken" % waiting)
        srv.kill()
        write_model_config(self.repo, "broken", synthetic("broken", base_us=1000,
                                                          per_row_us=10))
        srv = self.start()
        j = wait_state(self, srv, waiting, ("completed",), timeout=30)
        self.assertNotIn("reason", j)
        check_exactly_once(self, results(self, srv, waiting), 10)
        srv.stop_checked()

    def test_a_job_whose_model_was_removed_fails(self):
        # Nothing says a model taken out of the repository comes back.
        srv = self.start({"repository_poll_s": 1})
        first = submit(srv, "slow", "\n".join(line(i) for i in range(200)))
        self.assertEqual(first.status, 201, first.body)
        r = submit(srv, "syn", line(0))
        self.assertEqual(r.status, 201, r.body)
        shutil.rmtree(os.path.join(self.repo, "syn"))
        j = wait_state(self, srv, r.json()["id"], ("failed",), timeout=30)
        self.assertIn("model syn is not served", j["reason"])
        # An operator's matter: a warning, not one info line among many.
        srv.wait_log(r" warn job %s failed: 0 lines done" % r.json()["id"])
        self.assertEqual(results(self, srv, r.json()["id"]), [])
        wait_state(self, srv, first.json()["id"], ("completed",), timeout=30)
        srv.stop_checked()

    def test_a_failed_reload_while_a_job_runs_leaves_it_running(self):
        # The job holds its model's copy to its end: a reload that fails
        # (a broken config written mid-run) keeps the old copy serving, the
        # job's lines included; an unload asked meanwhile waits for the job.
        srv = self.start()
        n = 300   # 20 ms per 4 rows: 1.5 s of work
        r = submit(srv, "slow", "\n".join(line(i) for i in range(n)))
        self.assertEqual(r.status, 201, r.body)
        job = r.json()["id"]
        wait_state(self, srv, job, ("running",))
        write_model_config(self.repo, "slow", {"name": "slow", "backend": "tpu"})
        r = roundtrip(srv.port, "POST", "/v2/repository/models/slow/load")
        self.assertNotEqual(r.status, 200, r.body)
        self.assertIn("backend", r.json()["error"])
        srv.wait_log(r"model slow: the new copy did not load \(the previous copy serves on\)")
        self.assertEqual(get(srv, "/v2/jobs/" + job).json()["state"], "running")
        r = roundtrip(srv.port, "POST", "/v2/repository/models/slow/unload")
        self.assertEqual(r.status, 200, r.body)
        j = wait_state(self, srv, job, ("completed", "failed"), timeout=30)
        self.assertEqual(j["state"], "completed", j)
        self.assertEqual((j["lines"]["done"], j["lines"]["failed"]), (n, 0), j)
        self.assertNotIn("reason", j)
        check_exactly_once(self, results(self, srv, job), n)
        # Its copy was let go with the job's end: the unload is done.
        deadline = time.monotonic() + 10
        while roundtrip(srv.port, "GET", "/v2/models/slow/ready").status == 200:
            self.assertLess(time.monotonic(), deadline, "the unload waited past the job")
            time.sleep(0.05)
        srv.stop_checked()

    def test_job_on_a_lazy_model_loads_it_first(self):
        srv = self.start()
        r = submit(srv, "later", "\n".join(line(i) for i in range(20)))
        self.assertEqual(r.status, 201, r.body)
        wait_state(self, srv, r.json()["id"], ("completed",))
        check_exactly_once(self, results(self, srv, r.json()["id"]), 20)
        r = roundtrip(srv.port, "GET", "/v2/models/later/ready")
        self.assertEqual(r.status, 200, r.body)
        srv.stop_checked()

    def test_cancel_keeps_lines_done_and_online_is_never_429(self):
        srv = self.start()
        n = 400   # 20 ms per 4 rows: 2 s of work
        r = submit(srv, "slow", "\n".join(line(i) for i in range(n)))
        self.assertEqual(r.status, 201, r.body)
        job = r.json()["id"]
        wait_state(self, srv, job, ("running",))
        # The job keeps up to 64 lines queued on a model whose max_queue_size
        # is 2: online requests are still admitted, one at a time.
        for _ in range(10):
            r = roundtrip(srv.port, "POST", "/v2/models/slow/infer",
                          [("Content-Type", "application/json")],
                          infer_body([[1, 2, 3, 4]], name="x"), timeout=10)
            self.assertEqual(r.status, 200, r.body)
        r = roundtrip(srv.port, "DELETE", "/v2/jobs/" + job)
        self.assertEqual((r.status, r.json()["state"]), (200, "cancelled"), r.body)
        j = wait_state(self, srv, job, ("cancelled",))
        done = j["lines"]["done"]
        self.assertLess(done, n)
        res = results(self, srv, job)
        check_exactly_once(self, res, done)
        time.sleep(0.2)   # nothing more is written after the cancel
        self.assertEqual(len(results(self, srv, job)), done)
        srv.stop_checked()


def thread_sched(pid, name):
    """(nice, policy) of the process's thread called `name`, from
    /proc/PID/task/TID/stat (fields 19 and 41; policy 0 SCHED_OTHER,
    5 SCHED_IDLE), or None when there is no such thread."""
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                if f.read().strip() != name:
                    continue
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is field 3 (state): field N is fields[N - 3].
        return int(fields[19 - 3]), int(fields[41 - 3])
    return None


class JobsRunnerPriorityTest(JobsCase):
    """jobs.runner_priority sets the runner thread's share of a busy host
    CPU (docs/JOBS.md "Host CPU"): nice 10 by default, SCHED_IDLE, or as
    the other threads."""
    models = {"s": synthetic("s")}

    def test_each_level_reaches_the_thread(self):
        for level, want in ((None, (10, 0)), ("idle", (None, 5)), ("normal", (0, 0))):
            extra = {"jobs": {"runner_priority": level}} if level else None
            srv = self.start(extra)
            # The thread sets its own priority as it starts, which may be
            # after its name shows (a sanitizer's build starts slowly).
            deadline = time.monotonic() + 10
            while True:
                got = thread_sched(srv.pid, "bg-jobs")
                if got is not None and want[0] is None:   # SCHED_IDLE: no nice
                    got = (None, got[1])
                if got == want or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            self.assertEqual(got, want, "runner_priority %s (None: no bg-jobs thread)" % level)
            # The other threads keep the process's priority.
            self.assertEqual(thread_sched(srv.pid, "bg-io-0")[0], 0)
            # A job still runs to its end whatever the level.
            r = submit(srv, "s", "\n".join(line(i) for i in range(20)) + "\n")
            self.assertEqual(r.status, 201, r.body)
            j = wait_state(self, srv, r.json()["id"], ("completed",))
            check_exactly_once(self, results(self, srv, j["id"]), 20)
            srv.stop_checked()
            self.servers.remove(srv)
            shutil.rmtree(self.state, ignore_errors=True)


class JobsRetentionTest(JobsCase):
    """jobs.retention_s: an ended job is forgotten, its results file and
    the copy of its body with it; an input_path file is the user's."""
    models = {"s": synthetic("s")}

    def test_ended_jobs_are_forgotten_after_retention(self):
        srv = self.start({"jobs": {"retention_s": 2}})
        r = submit(srv, "s", "\n".join(line(i) for i in range(5)) + "\n")
        self.assertEqual(r.status, 201, r.body)
        body_job = wait_state(self, srv, r.json()["id"], ("completed",))
        mine = os.path.join(self.jobs_dir, "mine.jsonl")
        with open(mine, "w") as f:
            f.write("\n".join(line(i) for i in range(3)) + "\n")
        r = submit(srv, "s", json.dumps({"input_path": "mine.jsonl"}))
        self.assertEqual(r.status, 201, r.body)
        path_job = wait_state(self, srv, r.json()["id"], ("completed",))
        files = sorted(os.listdir(self.jobs_dir))
        for j in (body_job, path_job):
            self.assertIn(j["id"] + ".results.jsonl", files)
        self.assertIn(body_job["id"] + ".input.jsonl", files)
        # Still there before the retention has passed.
        self.assertEqual(get(srv, "/v2/jobs/" + body_job["id"]).status, 200)
        deadline = time.monotonic() + 10
        while get(srv, "/v2/jobs/" + path_job["id"]).status != 404:
            self.assertLess(time.monotonic(), deadline, srv.log())
            time.sleep(0.1)
        self.assertEqual(get(srv, "/v2/jobs/" + body_job["id"]).status, 404)
        self.assertEqual(get(srv, "/v2/jobs").json()["jobs"], [])
        # Left: the Batch API's folder, the folder's lock, the caller's own file.
        self.assertEqual(sorted(os.listdir(self.jobs_dir)),
                         ["batch", "batchgate.lock", "mine.jsonl"])
        srv.wait_log(r"jobs: \d ended over 2 s ago forgotten, their files deleted")


class JobsRestartTest(JobsCase):
    models = {"syn": synthetic("syn", base_us=4000, per_row_us=0,
                               batching={"max_batch_size": 8, "max_queue_delay_us": 1000})}

    def test_sigterm_while_a_job_waits_for_its_model_load(self):
        """The job's model is lazy and slow to load (~2.4 s): a SIGTERM while
        the runner waits on that load stopped only once the load ended
        (for ever, were it hung), since the runner was stopped before the
        load was let go. Now the stop is bounded by shutdown_timeout_ms,
        and the job, no fault of its own, is not failed: the next start
        runs it."""
        slow = synthetic("slowjob", base_us=600000, per_row_us=0)
        slow["lifecycle"] = {"load": "lazy"}
        write_model(self.repo, "slowjob", slow)
        srv = self.start({"shutdown_timeout_ms": 300})
        r = submit(srv, "slowjob", line(0) + "\n")
        self.assertEqual(r.status, 201, r.body)
        job = r.json()["id"]
        time.sleep(0.4)   # the runner waits on the load
        t0 = time.monotonic()
        self.assertEqual(srv.stop(signal.SIGTERM, timeout=10), 0, srv.log())
        self.assertLess(time.monotonic() - t0, 1.5, srv.log())   # the load had ~2 s to go
        srv = self.start()
        j = wait_state(self, srv, job, ("completed", "failed"), timeout=30)
        self.assertEqual(j["state"], "completed", j)
        srv.stop_checked()

    def test_commands_are_served_while_a_job_waits_for_its_model_load(self):
        """The runner waited for the next job's lazy load on its own thread,
        so every command (a submission, a cancel, a Batch API upload) waited
        for that load too (2.2 s here; for ever were it hung). Now the job is
        taken up when the load ends, and commands are served meanwhile."""
        slow = synthetic("slowjob", base_us=600000, per_row_us=0)
        slow["lifecycle"] = {"load": "lazy"}
        write_model(self.repo, "slowjob", slow)
        srv = self.start()
        r = submit(srv, "slowjob", line(0) + "\n")
        self.assertEqual(r.status, 201, r.body)
        first = r.json()["id"]
        time.sleep(0.3)   # the runner is on it: its model loads
        t0 = time.monotonic()
        r = submit(srv, "syn", line(1) + "\n")
        self.assertEqual(r.status, 201, r.body)
        self.assertLess(time.monotonic() - t0, 1.0)   # the load had ~2 s to go
        for job in (first, r.json()["id"]):
            j = wait_state(self, srv, job, ("completed", "failed"), timeout=30)
            self.assertEqual(j["state"], "completed", j)
        srv.stop_checked()

    def test_sigterm_pauses_and_resumes(self):
        srv = self.start()
        n = 1500
        r = submit(srv, "syn", "\n".join(line(i) for i in range(n)) + "\n")
        self.assertEqual(r.status, 201, r.body)
        job = r.json()["id"]
        r = submit(srv, "syn", "\n".join(line(i) for i in range(50)))   # queued behind it
        self.assertEqual(r.status, 201, r.body)
        job2 = r.json()["id"]
        time.sleep(0.3)
        self.assertEqual(get(srv, "/v2/jobs/" + job2).json()["state"], "queued")
        srv.stop_checked()
        self.assertRegex(srv.log(), r"job %s paused at line \d+" % job)
        # "stopped" is the last line: a supervisor that restarts on it must
        # find the runner (and the state_dir's lock) gone.
        self.assertRegex(srv.log().rstrip().splitlines()[-1], r"stopped after [\d.]+ s of service")
        srv = self.start()
        wait_state(self, srv, job, ("completed",), timeout=30)
        self.assertRegex(srv.log(), r"job %s resumes at line" % job)
        check_exactly_once(self, results(self, srv, job), n)
        wait_state(self, srv, job2, ("completed",), timeout=30)
        check_exactly_once(self, results(self, srv, job2), 50)
        srv.stop_checked()

    def test_input_changed_since_submitted_fails_the_job(self):
        """An input_path job's file rewritten between two runs (an editor, a
        script): the resume fails the job, saying so (it went on from the
        old byte offset in the new file: results under wrong lines and ids,
        and the job "completed")."""
        srv = self.start()
        n = 1500
        path = os.path.join(self.jobs_dir, "mine.jsonl")
        with open(path, "w") as f:
            f.write("\n".join(line(i) for i in range(n)) + "\n")
        r = submit(srv, "syn", json.dumps({"input_path": "mine.jsonl"}))
        self.assertEqual(r.status, 201, r.body)
        job = r.json()["id"]
        wait_done(self, srv, job, 50)
        srv.stop_checked()
        with open(path, "w") as f:   # the same requests, written compactly
            f.write("\n".join(json.dumps(json.loads(line(i)), separators=(",", ":"))
                              for i in range(n)) + "\n")
        srv = self.start()
        j = wait_state(self, srv, job, ("failed", "completed"), timeout=30)
        self.assertEqual(j["state"], "failed", j)
        self.assertIn("changed since the job was submitted", j["reason"])
        srv.stop_checked()

    def test_results_file_cut_outside_batchgate_fails_the_job(self):
        """The results file shorter than its committed size at a resume
        (cut, or restored from an older copy): the job fails saying so (it
        was padded with NUL bytes and served as completed)."""
        srv = self.start()
        n = 1500
        r = submit(srv, "syn", "\n".join(line(i) for i in range(n)) + "\n")
        job = r.json()["id"]
        wait_done(self, srv, job, 50)
        srv.stop_checked()
        path = os.path.join(self.jobs_dir, "%s.results.jsonl" % job)
        os.truncate(path, 100)
        srv = self.start()
        j = wait_state(self, srv, job, ("failed", "completed"), timeout=30)
        self.assertEqual(j["state"], "failed", j)
        self.assertIn("fewer than the", j["reason"])
        self.assertIn("changed outside batchgate", j["reason"])
        with open(path, "rb") as f:
            self.assertNotIn(b"\x00", f.read())
        srv.stop_checked()

    def test_state_database_refusing_writes_pauses_the_job(self):
        """Another process holds the state database's write lock past the
        5 s busy timeout (the database refuses writes, as a full disk makes
        it): the job is not failed, and nothing spins; it pauses and is
        taken up again from its last committed line, each line once. The
        lock outlasts the taking up again too (12.5 s: refused at ~5 s,
        taken up at ~6 s, refused again at ~11 s), which failed the job."""
        srv = self.start()
        n = 4000
        r = submit(srv, "syn", "\n".join(line(i) for i in range(n)) + "\n")
        self.assertEqual(r.status, 201, r.body)
        job = r.json()["id"]
        wait_done(self, srv, job, 1)
        hold_write_lock(os.path.join(self.state, "batchgate.db"), 12.5)
        j = wait_state(self, srv, job, ("completed", "failed"), timeout=60)
        self.assertEqual(j["state"], "completed", j)
        self.assertRegex(srv.log(), r"job %s: .*database is locked; taken up again in 1 s" % job)
        self.assertLess(srv.log().count("taken up again"), 5, srv.log()[-3000:])
        check_exactly_once(self, results(self, srv, job), n)
        srv.stop_checked()

    def test_submission_the_database_refuses_is_503_with_retry_after(self):
        """A lock past the 5 s busy timeout passes: the submission is 503
        with Retry-After, as clients retry it (it was 500, a fault), and
        nothing of it is left behind; once the lock is gone it is 201."""
        srv = self.start()
        holder = threading.Thread(target=hold_write_lock,
                                  args=(os.path.join(self.state, "batchgate.db"), 6.5))
        holder.start()
        try:
            time.sleep(0.3)
            r = submit(srv, "syn", line(0) + "\n")
        finally:
            holder.join()
        self.assertEqual(r.status, 503, r.body)
        self.assertEqual(r.headers.get("Retry-After"), "5")
        self.assertIn("database is locked", r.json()["error"])
        self.assertEqual([f for f in os.listdir(os.path.join(self.state, "jobs"))
                          if f.endswith(".input.jsonl")], [])
        self.assertEqual(submit(srv, "syn", line(0) + "\n").status, 201)
        srv.stop_checked()

    def test_a_submissions_input_left_without_its_row_is_deleted_at_start(self):
        """Killed between writing a submission's input and inserting its row
        (up to a 5 s busy wait wide), the input stayed in jobs.dir for ever
        (up to max_input_bytes): retention works from rows. The next start
        deletes job files no row names, and nothing else."""
        srv = self.start()
        r = submit(srv, "syn", line(0) + "\n")
        self.assertEqual(r.status, 201, r.body)
        job = r.json()["id"]
        self.assertEqual(wait_state(self, srv, job, ("completed", "failed"))["state"], "completed")
        srv.kill()
        orphans = ["job-0123456789abcdef.input.jsonl", "job-fedcba9876543210.results.jsonl"]
        others = ["job-xyz.input.jsonl", "notes.txt", "job-0123456789abcdef.input.jsonl.bak"]
        for name in orphans + others:
            with open(os.path.join(self.jobs_dir, name), "w") as f:
                f.write(line(1) + "\n")
        srv = self.start()
        srv.wait_log(r"%s: 2 files no row needs any more deleted \(left by a crash\)"
                     % re.escape(self.jobs_dir), timeout=10)
        left = set(os.listdir(self.jobs_dir))
        for name in orphans:
            self.assertNotIn(name, left)
        for name in others + ["%s.input.jsonl" % job, "%s.results.jsonl" % job]:
            self.assertIn(name, left)
        self.assertEqual(len(results(self, srv, job)), 1)
        srv.stop_checked()

    def test_cancel_of_the_running_job_the_database_refuses_is_503(self):
        """The running job cancelled while another process holds the
        database's write lock past the busy timeout: the cancel was 200
        "cancelled" while the job stayed running there and, taken up again,
        ran to completed. Now 503 with Retry-After, the job runs on; asked
        again, it is cancelled."""
        write_model(self.repo, "sloth", synthetic("sloth", base_us=3000000, per_row_us=0,
                                                  batching={"max_batch_size": 4,
                                                            "max_queue_delay_us": 1000}))
        srv = self.start()
        r = submit(srv, "sloth", "\n".join(line(i) for i in range(8)) + "\n")
        self.assertEqual(r.status, 201, r.body)
        job = r.json()["id"]
        wait_state(self, srv, job, ("running",), timeout=30)
        holder = threading.Thread(target=hold_write_lock,
                                  args=(os.path.join(self.state, "batchgate.db"), 9.5))
        holder.start()
        try:
            time.sleep(0.1)   # the runner waits on its first batch (3 s)
            r = roundtrip(srv.port, "DELETE", "/v2/jobs/" + job, timeout=30)
        finally:
            holder.join()
        self.assertEqual(r.status, 503, r.body)
        self.assertEqual(r.headers.get("Retry-After"), "5")
        self.assertIn("the job is not cancelled", r.json()["error"])
        self.assertIn("database is locked", r.json()["error"])
        self.assertNotEqual(get(srv, "/v2/jobs/" + job).json()["state"], "cancelled")
        r = roundtrip(srv.port, "DELETE", "/v2/jobs/" + job, timeout=30)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.json()["state"], "cancelled")
        time.sleep(4)   # a job taken up again would have ended a batch by now
        j = get(srv, "/v2/jobs/" + job).json()
        self.assertEqual(j["state"], "cancelled", j)
        srv.stop_checked()

    def test_unreadable_database_is_looked_at_with_a_pause(self):
        """The state database damaged under a running server: the jobs
        runner and the Batch API's looked at it, and said so, every second
        (six lines a second) for ever; they back off as from any database
        trouble. Online inference is not touched."""
        srv = self.start()
        # A schema that no longer parses, told to the server's connections
        # by a new schema cookie: every statement on them fails, as on a
        # damaged file, but at once and surely.
        import sqlite3
        db = sqlite3.connect(os.path.join(self.state, "batchgate.db"), isolation_level=None)
        cookie = db.execute("PRAGMA schema_version").fetchone()[0]
        db.execute("PRAGMA writable_schema=ON")
        db.execute("UPDATE sqlite_master SET sql='CREATE TABLE jobs(' WHERE name='jobs'")
        db.execute("PRAGMA schema_version=%d" % (cookie + 1))
        db.close()
        wait_until = time.monotonic() + 4.5
        srv.wait_log(r"(jobs|batches): .*; looked at again in 1 s", timeout=10)
        time.sleep(max(0.0, wait_until - time.monotonic()))
        said = [l for l in srv.log_lines() if re.search(r" (jobs|batches): ", l)]
        # 1 + 2 + 4 s of pauses: at most a few lines in those 4.5 s.
        self.assertLessEqual(len(said), 6, "\n".join(said))
        r = roundtrip(srv.port, "POST", "/v2/models/syn/infer", body=line(1))
        self.assertEqual(r.status, 200, r.body)
        srv.kill()

    def test_database_deleted_under_the_server_is_said(self):
        """The state database's file removed while the server runs: what it
        recorded after went into the deleted file, and the next start began
        empty, without a word. It is said now, within the look's 2 s."""
        srv = self.start()
        for name in ("batchgate.db", "batchgate.db-wal", "batchgate.db-shm"):
            path = os.path.join(self.state, name)
            if os.path.exists(path):
                os.unlink(path)
        srv.wait_log(r"error state database .*batchgate\.db was deleted or replaced while "
                     r"batchgate runs: .*/proc/%d/fd" % srv.pid, timeout=10)
        r = roundtrip(srv.port, "POST", "/v2/models/syn/infer", body=line(1))
        self.assertEqual(r.status, 200, r.body)
        srv.stop_checked()
        self.assertEqual(srv.log().count("was deleted or replaced"), 1)   # not every look

    def test_sigkill_at_random_points_exactly_once(self):
        """Several SIGKILLs at random instants while a job runs (bounded: 5
        kills, ~0.1-0.5 s apart); then every input line has exactly one
        result line, in order, each the right answer."""
        rng = random.Random(int(os.environ.get("JOBS_SEED", "0")) or None)
        n = 4000   # ~2 s of work at 8 rows per 4 ms: kills land mid-job
        srv = self.start()
        r = submit(srv, "syn", "\n".join(line(i) for i in range(n)) + "\n")
        self.assertEqual(r.status, 201, r.body)
        job = r.json()["id"]
        kills = 0
        done_at_kill = []
        t_end = time.monotonic() + 20
        while kills < 5 and time.monotonic() < t_end:
            time.sleep(rng.uniform(0.1, 0.5))
            j = get(srv, "/v2/jobs/" + job).json()
            if j["state"] == "completed":
                break
            srv.send_signal(signal.SIGKILL)
            srv.wait(5)
            kills += 1
            done_at_kill.append(j["lines"]["done"])
            srv = self.start()
        j = wait_state(self, srv, job, ("completed",), timeout=30)
        self.assertGreaterEqual(kills, 3, "the job ended before 3 kills: %r" % done_at_kill)
        self.assertEqual(j["lines"], {"total": n, "done": n, "failed": 0})
        with open(j["output_path"]) as f:
            res = [json.loads(x) for x in f.read().splitlines()]
        check_exactly_once(self, res, n)
        print("jobs: %d kills with %r of %d lines done; exactly once" % (kills, done_at_kill, n))
        srv.stop_checked()


def _small_files():
    """In the child before exec: files past 256 KiB cannot grow (EFBIG
    instead of SIGXFSZ): the same write failure a full disk gives."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))


class JobsGiveWayTest(JobsCase):
    """A job whose model's device is kept busy by online requests (which go
    first) gets no device time: it held every job behind it, on every
    model, for as long as the traffic lasted (9 minutes in a soak). It now
    gives way to a job on another model, and resumes later."""
    models = {
        "busy": dict(synthetic("busy", base_us=20000, per_row_us=0,
                               batching={"max_batch_size": 2, "max_queue_delay_us": 500,
                                         "max_queue_size": 1000}),
                     instances={"count": 1, "devices": [0]}),
        "calm": dict(synthetic("calm", base_us=1000, per_row_us=0),
                     instances={"count": 1, "devices": [1]}),
    }

    def test_a_starved_job_gives_way_to_one_on_another_model(self):
        srv = self.start()
        stop = threading.Event()
        body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4],
                                       "data": [[1, 2, 3, 4]]}]})

        def online():   # closed loop: 6 clients on batches of 2, always some queued
            while not stop.is_set():
                roundtrip(srv.port, "POST", "/v2/models/busy/infer", body=body, timeout=10)

        clients = [threading.Thread(target=online) for _ in range(6)]
        for t in clients:
            t.start()
        try:
            time.sleep(0.5)
            r = submit(srv, "busy", "\n".join(line(i) for i in range(50)) + "\n")
            self.assertEqual(r.status, 201, r.body)
            starved = r.json()["id"]
            wait_state(self, srv, starved, ("running",))
            # A second job on the same model: it must not pass the first (it
            # starves alike; the two took turns and the third never ran).
            r = submit(srv, "busy", "\n".join(line(i) for i in range(50)) + "\n")
            self.assertEqual(r.status, 201, r.body)
            behind = r.json()["id"]
            r = submit(srv, "calm", "\n".join(line(i) for i in range(50)) + "\n")
            self.assertEqual(r.status, 201, r.body)
            other = r.json()["id"]
            j = wait_state(self, srv, other, ("completed", "failed"), timeout=40)
            self.assertEqual(j["state"], "completed", j)
            s = get(srv, "/v2/jobs/" + starved).json()
            self.assertIn(s["state"], ("queued", "running"), s)
            self.assertIn("gave its lines no device time", s["reason"])
            b = get(srv, "/v2/jobs/" + behind).json()
            self.assertEqual(b["state"], "queued", b)
            self.assertNotRegex(srv.log(), r"job %s starts" % behind)
            self.assertRegex(srv.log(), r"job %s waiting: model busy gave its lines no device "
                                        r"time for 10 s" % starved)
        finally:
            stop.set()
            for t in clients:
                t.join(15)
        # The traffic gone, the job that gave way runs to its end.
        j = wait_state(self, srv, starved, ("completed", "failed"), timeout=40)
        self.assertEqual(j["state"], "completed", j)
        self.assertFalse(j.get("reason"), j)
        check_exactly_once(self, results(self, srv, starved), 50)
        check_exactly_once(self, results(self, srv, other), 50)
        j = wait_state(self, srv, behind, ("completed", "failed"), timeout=40)
        self.assertEqual(j["state"], "completed", j)
        check_exactly_once(self, results(self, srv, behind), 50)
        srv.stop_checked()


class JobsDiskFullTest(JobsCase):
    # Wide outputs: each result line is a few KiB, so the results file hits
    # the limit long before the database or the input do.
    models = {"wide": dict(synthetic("wide", base_us=1000, per_row_us=0,
                                     batching={"max_batch_size": 8}),
                           outputs=[{"name": "y", "datatype": "FP32", "shape": [512]}])}

    def test_write_failure_fails_the_job_and_online_goes_on(self):
        os.makedirs(self.jobs_dir)
        with open(os.path.join(self.jobs_dir, "in.jsonl"), "w") as f:
            f.write("\n".join(line(i) for i in range(400)) + "\n")   # input written by us
        srv = self.start(preexec_fn=_small_files)
        r = submit(srv, "wide", json.dumps({"input_path": "in.jsonl"}))
        self.assertEqual(r.status, 201, r.body)
        job = r.json()["id"]
        j = wait_state(self, srv, job, ("failed", "completed"))
        self.assertEqual(j["state"], "failed", j)
        self.assertIn("cannot write the results file", j["reason"])
        self.assertIn("too large", j["reason"])   # strerror(EFBIG)
        self.assertLess(j["lines"]["done"], 400)
        # What was committed before the failure is intact and exactly once.
        res = results(self, srv, job)
        self.assertEqual([x["line"] for x in res], list(range(1, j["lines"]["done"] + 1)))
        r = roundtrip(srv.port, "POST", "/v2/models/wide/infer",
                      [("Content-Type", "application/json")],
                      infer_body([[1, 2, 3, 4]], name="x"))
        self.assertEqual(r.status, 200, r.body)
        self.assertIn('batchgate_jobs{state="failed"} 1', get(srv, "/metrics").body.decode())
        srv.stop_checked()

    def test_full_filesystem_fails_the_job_with_enospc(self):
        """The real thing where this machine allows it: jobs.dir on a 1 MiB
        tmpfs (needs root and mount rights; skipped elsewhere), the state
        database beside it on the ordinary disk."""
        small = os.path.join(self.tmp, "small")
        mount_tmpfs(self, small, "1m")
        srv = self.start({"jobs": {"dir": small}})
        r = submit(srv, "wide", "\n".join(line(i) for i in range(800)) + "\n")
        self.assertEqual(r.status, 201, r.body)
        job = r.json()["id"]
        j = wait_state(self, srv, job, ("failed", "completed"))
        self.assertEqual(j["state"], "failed", j)
        self.assertIn("No space left on device", j["reason"])
        self.assertEqual([x["line"] for x in results(self, srv, job)],
                         list(range(1, j["lines"]["done"] + 1)))
        # The file itself ends at the last committed line (a torn line was
        # left past it, for a reader of output_path).
        with open(os.path.join(small, "%s.results.jsonl" % job), "rb") as f:
            on_disk = f.read()
        self.assertEqual(on_disk, get(srv, "/v2/jobs/%s/results" % job).body)
        r = roundtrip(srv.port, "POST", "/v2/models/wide/infer",
                      [("Content-Type", "application/json")],
                      infer_body([[1, 2, 3, 4]], name="x"))
        self.assertEqual(r.status, 200, r.body)
        # A submission the full disk cannot hold passes with the disk: 503
        # with Retry-After (it was 500), then 201 once there is room. The
        # failed job's files go first: its results may hold the disk full
        # already (then the filler's unlink frees nothing that counts).
        for f in os.listdir(small):
            if f.startswith("job-"):
                os.unlink(os.path.join(small, f))
        filler = fill_fs(small)
        r = submit(srv, "wide", line(0) + "\n")
        self.assertEqual(r.status, 503, r.body)
        self.assertEqual(r.headers.get("Retry-After"), "5")
        self.assertIn("No space left on device", r.json()["error"])
        os.unlink(filler)
        self.assertEqual(submit(srv, "wide", line(0) + "\n").status, 201)
        srv.stop_checked()


if __name__ == "__main__":
    unittest.main()
