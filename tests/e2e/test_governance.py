"""test_governance.py - tenants' shares of device time and time windows end
to end (docs/TENANTS.md): two tenants saturating one synthetic model split
its device time by their shares; GET /v2/governance shows the active window
and the shares in force (also as tenant_share in /metrics); PUT replaces
the section (admin only, a bad one is 400 naming the problem) and the split
follows within about a second with no request lost; SIGHUP rereads the
file's section; a configuration with overlapping windows does not start."""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

from harness import BIN, RepoServerCase, Server, roundtrip, run_cli
from test_infer import synthetic, write_model
from test_tenants import KEYS, digest, metric

ALL_WEEK = {"name": "all-week", "from": "00:00", "to": "00:00"}


def window(name, shares, **kw):
    return dict(ALL_WEEK, name=name, shares=shares, **kw)


def auth(key):
    return [("Authorization", "Bearer " + key)]


class Flood:
    """`clients` closed-loop clients per tenant on one model until stopped;
    counts answers by status."""

    def __init__(self, srv, model, keys, clients=12):
        self.srv, self.model, self.stop_at = srv, model, None
        self.codes = {k: {} for k in keys}
        self.lock = threading.Lock()
        self.running = True
        self.threads = [threading.Thread(target=self.loop, args=(k,), daemon=True)
                        for k in keys for _ in range(clients)]
        for t in self.threads:
            t.start()

    def loop(self, key):
        body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4],
                                       "data": [[1, 2, 3, 4]]}]})
        h = [("Content-Type", "application/json")] + auth(KEYS[key])
        deadline = time.time() + 60   # bounded whatever happens
        while self.running and time.time() < deadline:
            try:
                r = roundtrip(self.srv.port, "POST", "/v2/models/%s/infer" % self.model, h, body,
                              timeout=10)
                code = r.status
            except Exception:   # noqa: BLE001 - counted as lost
                code = 0
            with self.lock:
                self.codes[key][code] = self.codes[key].get(code, 0) + 1

    def stop(self):
        self.running = False
        for t in self.threads:
            t.join(timeout=15)


def device_seconds(srv):
    m = roundtrip(srv.port, "GET", "/metrics").body.decode()
    return {t: sum(metric(m, "tenant_device_seconds_total", tenant=t, device=d, **{"class": c})
                   for d in ("synthetic0",) for c in ("online", "offline"))
            for t in ("search", "research")}


def split(srv, seconds):
    """search's fraction of the device time the two used over `seconds`."""
    a = device_seconds(srv)
    time.sleep(seconds)
    b = device_seconds(srv)
    s, r = b["search"] - a["search"], b["research"] - a["research"]
    return s / (s + r) if s + r > 0 else 0


class GovernanceTest(RepoServerCase):
    io_threads = 2
    config = {
        "tenants": [
            {"name": "search", "keys": [digest(KEYS["search"])], "share": 0.7},
            {"name": "research", "keys": [digest(KEYS["research"])], "share": 0.3},
            {"name": "ops", "keys": [digest(KEYS["ops"])], "admin": True, "limit": 0.3},
        ],
        "governance": {"timezone": "UTC", "windows": []},
    }

    @classmethod
    def populate(cls, repo):
        # One instance, a batch of 4 rows: 2 ms + 0.25 ms/row, sleeping; the
        # two tenants. 12 clients each keep it saturated.
        write_model(repo, "m", synthetic("m", base_us=2000, per_row_us=250,
                                         batching={"max_batch_size": 4, "max_queue_delay_us": 0,
                                                   "max_queue_size": 1024}))

    def governance(self, key=None):
        r = roundtrip(self.srv.port, "GET", "/v2/governance", auth(key or KEYS["search"]))
        self.assertEqual(r.status, 200, r.body)
        return r.json()

    def put(self, section, key):
        return roundtrip(self.srv.port, "PUT", "/v2/governance",
                         [("Content-Type", "application/json")] + auth(key), json.dumps(section))

    def test_1_shares_split_and_window_switch(self):
        g = self.governance()
        self.assertIsNone(g["active"])
        self.assertEqual(g["shares"], {"default": 0, "search": 0.7, "research": 0.3, "ops": 0})
        flood = Flood(self.srv, "m", ["search", "research"])
        try:
            time.sleep(1.0)   # the queue fills, the accounts settle
            s = split(self.srv, 3.0)
            print("# shares 0.7/0.3: search used %.3f of the device" % s)
            self.assertGreater(s, 0.65)
            self.assertLess(s, 0.75)
            # A window that turns the split around, now: applied within ~1 s.
            r = self.put({"timezone": "UTC", "windows": [window("night", {"search": 0.2,
                                                                         "research": 0.8})]},
                         KEYS["ops"])
            self.assertEqual(r.status, 200, r.body)
            self.assertEqual(r.json()["active"], "night")
            time.sleep(1.0)
            s = split(self.srv, 3.0)
            print("# after the switch to 0.2/0.8: search used %.3f" % s)
            self.assertGreater(s, 0.15)
            self.assertLess(s, 0.25)
            m = roundtrip(self.srv.port, "GET", "/metrics").body.decode()
            self.assertEqual(metric(m, "tenant_share", tenant="research", device="synthetic0"), 0.8)
        finally:
            flood.stop()
        for key in ("search", "research"):
            bad = {c: n for c, n in flood.codes[key].items() if c != 200}
            self.assertEqual(bad, {}, "%s: requests not answered 200: %r" % (key, bad))
        # The dashboard's data carries each tenant's device time and share.
        d = roundtrip(self.srv.port, "GET", "/dashboard/data").json()
        rows = {(t["device"], t["tenant"]): t for t in d["tenants"]}
        self.assertEqual(rows[("synthetic0", "research")]["share"], 0.8)
        self.assertGreater(rows[("synthetic0", "search")]["online_seconds"], 0)
        # The model's stats split its rows and device time by tenant too.
        st = roundtrip(self.srv.port, "GET", "/v2/models/m/stats", auth(KEYS["ops"])).json()
        names = {t["name"] for t in st["model_stats"][0]["tenants"]} \
            if "model_stats" in st else {t["name"] for t in st["tenants"]}
        self.assertEqual(names, {"search", "research"})
        # A tenant sees its own row only: it saw the other's use of the model.
        st = roundtrip(self.srv.port, "GET", "/v2/models/m/stats", auth(KEYS["search"])).json()
        self.assertEqual([t["name"] for t in st["model_stats"][0]["tenants"]], ["search"])
        # Unloaded, its rows by tenant stay (the stats dropped them while
        # the model was out: the observability audit).
        ops = auth(KEYS["ops"])
        r = roundtrip(self.srv.port, "POST", "/v2/repository/models/m/unload", ops, b"{}")
        self.assertEqual(r.status, 200, r.body)
        st = roundtrip(self.srv.port, "GET", "/v2/models/m/stats", ops).json()
        self.assertEqual({t["name"] for t in st["model_stats"][0]["tenants"]},
                         {"search", "research"}, st)
        r = roundtrip(self.srv.port, "POST", "/v2/repository/models/m/load", ops, b"{}",
                      timeout=10)
        self.assertEqual(r.status, 200, r.body)

    def test_2_put_rules(self):
        good = {"timezone": "UTC", "windows": []}
        self.assertEqual(self.put(good, KEYS["search"]).status, 403)
        # A body of more values than any operator's needs is not parsed
        # (each a node of ~50 bytes).
        r = self.put({"timezone": "UTC", "junk": [1] * 4194305}, KEYS["ops"])
        self.assertEqual(r.status, 400, r.body[:200])
        self.assertIn("refused before it is read", r.json()["error"])
        r = self.put({"timezone": "UTC", "windows": [window("a", {}), window("b", {})]},
                     KEYS["ops"])
        self.assertEqual(r.status, 400)
        self.assertIn('windows "a" and "b" overlap', r.json()["error"])
        r = self.put({"windows": [window("a", {"nobody": 0.5})]}, KEYS["ops"])
        self.assertEqual(r.status, 400)
        self.assertIn('no tenant "nobody"', r.json()["error"])
        # SPEC.md's example, verbatim (its night's shares and offline_share
        # add up to 1.5: the tenants split what the jobs leave).
        spec = {"timezone": "America/Sao_Paulo", "windows": [
            {"name": "day", "days": ["mon", "tue", "wed", "thu", "fri"], "from": "08:00",
             "to": "20:00", "shares": {"search": 0.8, "research": 0.2}, "offline_share": 0.0},
            {"name": "night", "from": "20:00", "to": "08:00",
             "shares": {"search": 0.3, "research": 0.7}, "offline_share": 0.5}]}
        r = self.put(spec, KEYS["ops"])
        self.assertEqual(r.status, 200, r.body)
        r = roundtrip(self.srv.port, "PUT", "/v2/governance", auth(KEYS["ops"]), "{not json")
        self.assertEqual(r.status, 400)
        self.assertIn("invalid JSON at column 4", r.json()["error"])
        r = roundtrip(self.srv.port, "PUT", "/v2/governance", auth(KEYS["ops"]), "[]")
        self.assertEqual(r.status, 400)
        self.assertIn("must be a JSON object (the config's governance section)", r.json()["error"])
        self.assertEqual(self.put(good, KEYS["ops"]).status, 200)

    def test_3_sighup_rereads_the_file(self):
        with open(self.srv.config_path) as f:
            cfg = json.load(f)
        cfg["governance"] = {"timezone": "Europe/Paris",
                             "windows": [window("from-file", {"research": 1.0})]}
        with open(self.srv.config_path + ".new", "w") as f:
            json.dump(cfg, f)
        os.replace(self.srv.config_path + ".new", self.srv.config_path)
        self.srv.send_signal(signal.SIGHUP)
        self.srv.wait_log(r"SIGHUP: governance reread", timeout=5)
        deadline = time.time() + 3
        while time.time() < deadline and self.governance()["active"] != "from-file":
            time.sleep(0.1)
        g = self.governance()
        self.assertEqual(g["active"], "from-file")
        self.assertEqual(g["timezone"], "Europe/Paris")
        self.assertEqual(g["shares"]["research"], 1.0)
        # A broken file changes nothing, and says so.
        cfg["governance"] = {"windows": [{"name": "x", "from": "25:00", "to": "01:00"}]}
        with open(self.srv.config_path, "w") as f:
            json.dump(cfg, f)
        self.srv.send_signal(signal.SIGHUP)
        self.srv.wait_log(r"SIGHUP: .*governance and keys not changed", timeout=5)
        self.assertEqual(self.governance()["active"], "from-file")
        # Nor does a file that names other tenants (read at start only).
        cfg["governance"] = {"windows": []}
        cfg["tenants"] = cfg["tenants"][:2]
        with open(self.srv.config_path, "w") as f:
            json.dump(cfg, f)
        self.srv.send_signal(signal.SIGHUP)
        self.srv.wait_log(r"names other tenants than those in force", timeout=5)
        self.assertEqual(self.governance()["active"], "from-file")
        # The same tenants with another setting: the governance is taken,
        # and the log says the tenant's change waits for a restart.
        with open(self.srv.config_path) as f:
            cfg = json.load(f)
        cfg["governance"] = {"windows": []}
        cfg["tenants"] = json.loads(json.dumps(self.config["tenants"]))   # all three again
        cfg["tenants"][0]["max_inflight"] = 7
        with open(self.srv.config_path, "w") as f:
            json.dump(cfg, f)
        self.srv.send_signal(signal.SIGHUP)
        self.srv.wait_log(r"SIGHUP: tenant %s's settings in .* differ from those in force; "
                          r"tenants are read at start" % cfg["tenants"][0]["name"], timeout=5)
        # A window share is held to the limit in force, not to the file's
        # raised one (which waits for a restart): ops' 0.9 against its 0.3
        # was put in force by SIGHUP, where PUT and the start refuse it.
        cfg["tenants"][2]["limit"] = 1.0
        cfg["governance"] = {"timezone": "UTC", "windows": [window("over", {"ops": 0.9})]}
        with open(self.srv.config_path, "w") as f:
            json.dump(cfg, f)
        self.srv.send_signal(signal.SIGHUP)
        self.srv.wait_log(r"SIGHUP: .*governance: windows\[0\]\.shares\.ops: 0\.9 is above the "
                          r"tenant's limit 0\.3 .*\(against the tenants in force\): governance "
                          r"and keys not changed", timeout=5)
        self.assertNotEqual(self.governance()["active"], "over")
        cfg["tenants"][2]["limit"] = 0.3
        cfg["governance"] = {"windows": []}
        # Any other section changed is said too (it was silent): SIGHUP
        # applies governance only.
        cfg["limits"] = {"max_body_bytes": 10}
        cfg["shutdown_timeout_ms"] = 1234
        with open(self.srv.config_path, "w") as f:
            json.dump(cfg, f)
        self.srv.send_signal(signal.SIGHUP)
        self.srv.wait_log(r"SIGHUP: (limits, shutdown_timeout_ms|shutdown_timeout_ms, limits) "
                          r"changed in .*; SIGHUP applies governance and keys only", timeout=5)
        # A FIFO in the file's place held the thread that takes the signals
        # at its open (a SIGTERM after went unanswered): refused, said so.
        was = self.governance()
        os.rename(self.srv.config_path, self.srv.config_path + ".kept")
        os.mkfifo(self.srv.config_path)
        try:
            self.srv.send_signal(signal.SIGHUP)
            self.srv.wait_log(r"SIGHUP: .* is not a regular file: governance and keys not "
                              r"changed", timeout=5)
        finally:
            os.unlink(self.srv.config_path)
            os.rename(self.srv.config_path + ".kept", self.srv.config_path)
        self.assertEqual(self.governance()["timezone"], was["timezone"])

    def test_4_a_switch_by_the_clock_is_on_time(self):
        # A window from 2 s ahead, 2 s long, given to the second: the devices'
        # shares follow its boundaries within a poll, as GET says them (they
        # lagged a whole second: the governor read time()'s coarse clock).
        start = int(time.time()) + 2
        hms = lambda t: time.strftime("%H:%M:%S", time.gmtime(t))
        if hms(start + 2) < hms(start):
            self.skipTest("the window would cross midnight UTC")
        r = self.put({"timezone": "UTC", "windows": [
            window("blip", {"search": 0.1, "research": 0.9}, **{"from": hms(start),
                                                                  "to": hms(start + 2)})]},
                     KEYS["ops"])
        self.assertEqual(r.status, 200, r.body)
        share = lambda: metric(roundtrip(self.srv.port, "GET", "/metrics").body.decode(),
                               "tenant_share", tenant="research", device="synthetic0")
        seen = {}
        while time.time() < start + 3.5:
            v = share()
            seen.setdefault(v, time.time())
            time.sleep(0.01)
        self.assertIn(0.9, seen, seen)
        self.assertLess(seen[0.9] - start, 0.3, "switched %.3f s after the boundary"
                        % (seen[0.9] - start))
        self.assertEqual(self.put({"timezone": "UTC", "windows": []}, KEYS["ops"]).status, 200)

    def test_5_sighup_rotates_keys(self):
        """A leaked key was replaced only by a restart, which drops every
        connection and the jobs' running lines: SIGHUP now puts the file's
        keys in force, all at once, the tenants as they were."""
        with open(self.srv.config_path) as f:
            cfg = json.load(f)
        cfg["governance"] = {"windows": []}
        cfg["tenants"] = json.loads(json.dumps(self.config["tenants"]))
        fresh = "bg-ops-rotated-0123456789"
        ops = cfg["tenants"][2]

        def reload(pattern):
            with open(self.srv.config_path + ".new", "w") as f:
                json.dump(cfg, f)
            os.replace(self.srv.config_path + ".new", self.srv.config_path)
            seen = sum(1 for x in self.srv.log_lines() if re.search(pattern, x))
            self.srv.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 5
            while sum(1 for x in self.srv.log_lines() if re.search(pattern, x)) == seen:
                self.assertLess(time.monotonic(), deadline, "no %r in the log" % pattern)
                time.sleep(0.05)

        def status(key):   # an admin route: the key's tenant, not just a key
            return self.put({"timezone": "UTC", "windows": []}, key).status

        self.assertEqual(status(fresh), 401)
        ops["keys"] = [digest(KEYS["ops"]), digest(fresh)]   # the new beside the old
        reload(r"SIGHUP: tenant ops's keys replaced: 2 in force")
        self.assertEqual((status(fresh), status(KEYS["ops"])), (200, 200))
        ops["keys"] = [digest(fresh)]                         # the old one out
        reload(r"SIGHUP: tenant ops's keys replaced: 1 in force")
        self.assertEqual((status(fresh), status(KEYS["ops"])), (200, 401))
        self.assertEqual(status(KEYS["search"]), 403)         # the others' as they were
        # A file refused changes no key either.
        ops["keys"] = [digest(KEYS["ops"])]
        cfg["governance"] = {"windows": [{"name": "x", "from": "25:00", "to": "01:00"}]}
        reload(r"SIGHUP: .*governance and keys not changed")
        self.assertEqual((status(fresh), status(KEYS["ops"])), (200, 401))
        cfg["governance"] = {"windows": []}
        reload(r"SIGHUP: tenant ops's keys replaced: 1 in force")
        self.assertEqual((status(fresh), status(KEYS["ops"])), (401, 200))


class GovernanceWithoutTenantsTest(RepoServerCase):
    """No tenants configured: GET /v2/governance still answers (SPEC.md: the
    active window and the shares in force; it was 404), and windows given
    are said to change nothing."""
    config = {"governance": {"timezone": "UTC", "windows": [
        {"name": "night", "from": "20:00", "to": "08:00", "offline_share": 0.5}]}}

    @classmethod
    def populate(cls, repo):
        write_model(repo, "m", synthetic("m"))

    def test_get_answers_and_the_windows_are_said_to_change_nothing(self):
        r = roundtrip(self.srv.port, "GET", "/v2/governance")
        self.assertEqual(r.status, 200, r)
        g = r.json()
        self.assertEqual(g["timezone"], "UTC")
        self.assertEqual([w["name"] for w in g["windows"]], ["night"])
        self.assertEqual(list(g["shares"]), ["default"])
        self.assertIn("no tenant is configured (tenants[]): they change nothing", self.srv.log())


class GovernanceConfigTest(unittest.TestCase):
    def test_overlapping_windows_do_not_start(self):
        cfg = {"listen": "127.0.0.1:0", "model_repository": "/nonexistent-but-named",
               "tenants": [{"name": "a", "share": 0.5}],
               "governance": {"windows": [dict(ALL_WEEK, name="day"),
                                          {"name": "night", "from": "20:00", "to": "08:00"}]}}
        fd, path = tempfile.mkstemp(prefix="batchgate-gov-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(cfg, f)
        try:
            code, _, err = run_cli(["--config", path])
        finally:
            os.unlink(path)
        self.assertEqual(code, 2, err)
        self.assertIn('windows "day" and "night" overlap', err)

    def test_without_a_section_get_says_the_hosts_zone(self):
        # No governance section: GET said "localtime" at offset 0, whatever
        # the host's zone, until a SIGHUP read the (unchanged) file (the
        # governance audit).
        from harness import Server
        srv = Server({"tenants": [{"name": "a", "share": 0.5}]}, env={"TZ": "Asia/Kolkata"})
        try:
            g = roundtrip(srv.port, "GET", "/v2/governance").json()
            self.assertEqual((g["timezone"], g["utc_offset_s"]), ("Asia/Kolkata", 19800), g)
        finally:
            srv.stop_checked()

    def test_the_hosts_tz_is_read_as_glibc_reads_it(self):
        """TZ as a POSIX rule is the host's zone (it fell back to
        /etc/localtime without a word, and every window ran hours off); a
        TZ that names no zone stops a server that has windows, and only
        warns one that has none."""
        from harness import Server
        now = time.gmtime(time.time() + 5 * 3600 + 45 * 60)   # XST-5:45 is UTC+5:45
        start = time.strftime("%H:%M", time.gmtime(time.time() + 5 * 3600 + 45 * 60 - 3600))
        end = time.strftime("%H:%M", time.gmtime(time.time() + 5 * 3600 + 45 * 60 + 3600))
        cfg = {"tenants": [{"name": "a", "share": 0.5}],
               "governance": {"windows": [{"name": "here", "from": start, "to": end,
                                           "shares": {"a": 1}}]}}
        srv = Server(cfg, env={"TZ": "XST-5:45"})
        try:
            g = roundtrip(srv.port, "GET", "/v2/governance").json()
            self.assertEqual((g["timezone"], g["utc_offset_s"]), ("XST-5:45", 20700), g)
            self.assertEqual(g["active"], "here", (g, now))
        finally:
            srv.stop_checked()
        fd, path = tempfile.mkstemp(prefix="batchgate-gov-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(dict(cfg, listen="127.0.0.1:0", model_repository="/nonexistent-but-named"),
                      f)
        try:
            code, _, err = run_cli(["--config", path], env=dict(os.environ, TZ="Nowhere/City"))
        finally:
            os.unlink(path)
        self.assertEqual(code, 2, err)
        self.assertIn('TZ="Nowhere/City" names no time zone batchgate can read', err)
        self.assertIn("or set governance.timezone", err)
        srv = Server({"tenants": [{"name": "a", "share": 0.5}], "governance": {"windows": []}},
                     env={"TZ": "Nowhere/City"})
        try:
            srv.wait_log(r'warn TZ="Nowhere/City" names no time zone .*governance falls back '
                         r'to /etc/localtime \(no window is configured\)')
            g = roundtrip(srv.port, "GET", "/v2/governance").json()
            self.assertEqual(g["timezone"], host_zone_name(), g)
        finally:
            srv.stop_checked()


def host_zone_name():
    """/etc/localtime's name as batchgate gives it: its link into a
    zoneinfo folder (Europe/Paris), else "localtime"."""
    try:
        target = os.readlink("/etc/localtime")
    except OSError:
        return "localtime"
    _, sep, zone = target.partition("zoneinfo/")
    return zone if sep and zone else "localtime"


class SighupDuringStartTest(unittest.TestCase):
    def test_a_sighup_during_the_loads_rereads_the_governance(self):
        # While the eager models loaded, SIGHUP reopened the log and nothing
        # more: the governance edit it was sent for was lost until another
        # SIGHUP after the start (helper's config audit).
        repo = tempfile.mkdtemp(prefix="batchgate-repo-")
        try:
            write_model(repo, "slow", synthetic("slow", base_us=600000, per_row_us=0))
            cfg = {"model_repository": repo,
                   "tenants": [
                       {"name": "search", "keys": [digest(KEYS["search"])], "share": 0.5},
                       {"name": "research", "keys": [digest(KEYS["research"])], "share": 0.5}],
                   "governance": {"timezone": "UTC", "windows": []}}
            with Server(cfg) as srv:
                with open(srv.config_path) as f:
                    edited = json.load(f)
                edited["governance"] = {"timezone": "UTC", "windows": [
                    window("edited", {"search": 0.8, "research": 0.2})]}
                with open(srv.config_path + ".new", "w") as f:
                    json.dump(edited, f)
                os.replace(srv.config_path + ".new", srv.config_path)
                self.assertNotIn("ready in", srv.log())
                srv.send_signal(signal.SIGHUP)
                srv.wait_log(r"SIGHUP: governance reread", timeout=5)
                self.assertNotIn("ready in", srv.log(), "the loads were over: no test")
                srv.wait_log(r"ready in", timeout=30)
                r = roundtrip(srv.port, "GET", "/v2/governance", auth(KEYS["search"]))
                self.assertEqual(r.json()["active"], "edited", r.body)
        finally:
            shutil.rmtree(repo, ignore_errors=True)

class ConfigFifoTest(unittest.TestCase):
    def test_a_named_pipe_as_the_config_is_read_once(self):
        # The start read the file a second time (for SIGHUP to compare
        # with): a named pipe whose writer was done held that open for
        # good, in the thread that takes the signals, so a SIGTERM went
        # unanswered too (re-test of the nineteenth session's fixes).
        d = tempfile.mkdtemp(prefix="batchgate-fifo-")
        fifo = os.path.join(d, "config.json")
        os.mkfifo(fifo)
        os.makedirs(os.path.join(d, "repo"))
        cfg = {"listen": "127.0.0.1:0", "grpc_listen": "off", "state_dir": d,
               "model_repository": os.path.join(d, "repo")}

        def write():
            with open(fifo, "w") as f:
                json.dump(cfg, f)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        proc = subprocess.Popen([BIN, "--config", fifo, "--io-threads", "1"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        lines, ready = [], threading.Event()

        def read():
            for line in proc.stderr:
                lines.append(line)
                if "ready in" in line:
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        try:
            self.assertTrue(ready.wait(10), "not ready within 10 s:\n" + "".join(lines))
            proc.send_signal(signal.SIGTERM)
            self.assertEqual(proc.wait(timeout=10), 0, "".join(lines))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            try:   # a writer still waiting for a reader: let it go
                os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
            except OSError:
                pass
            writer.join(2)
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
