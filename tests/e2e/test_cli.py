"""The command line: --help, --version, bad flags and bad configuration (exit
2 with a message naming the problem), a busy port (exit 1), and the log format."""

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from harness import BIN, HERE, LOG_LINE_RE, Server, free_port, roundtrip, run_cli


class CliTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="batchgate-cli-")

    def tearDown(self):
        self.tmp.cleanup()

    def config_file(self, text, name="cfg.json"):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def assert_exit(self, args, code, stderr_has=(), stdout_has=()):
        rc, out, err = run_cli(args)
        self.assertEqual(rc, code, "expected exit %d from batchgate %s, got %d; stderr: %r"
                         % (code, " ".join(args), rc, err))
        for s in stderr_has:
            self.assertIn(s, err, "expected stderr of batchgate %s to mention %r: %r"
                          % (" ".join(args), s, err))
        for s in stdout_has:
            self.assertIn(s, out, "expected stdout of batchgate %s to contain %r: %r"
                          % (" ".join(args), s, out))
        return out, err

    def test_help(self):
        # Every long option of main.c's table, but the hidden one (the
        # usage once forgot --grpc-listen).
        with open(os.path.join(HERE, "..", "..", "gateway", "main.c")) as f:
            src = f.read()
        table = src[src.index("static const struct option opts[]"):]
        table = table[:table.index("{NULL, 0, NULL, 0}")]
        flags = [f for f in re.findall(r'\{"([a-z-]+)", (?:required|no)_argument', table)
                 if f != "config-fields"]
        self.assertIn("grpc-listen", flags)
        for flag in ("--help", "-h"):
            out, _ = self.assert_exit([flag], 0, stdout_has=("usage",))
            for name in flags:
                self.assertIn("--" + name, out, "expected the usage to list --" + name)

    def test_version(self):
        for flag in ("--version", "-V"):
            out, _ = self.assert_exit([flag], 0, stdout_has=("batchgate ",))
            self.assertTrue(out.startswith("batchgate "), "expected stdout to start with "
                            "'batchgate VERSION': %r" % out)

    def test_version_with_a_stray_argument(self):
        # Answering the version first once hid a bad command line (exit 0).
        self.assert_exit(["-V", "extra"], 2, stderr_has=("extra",))
        self.assert_exit(["--help", "--no-such-flag"], 2, stderr_has=("--no-such-flag",))

    def test_unknown_flag(self):
        self.assert_exit(["--no-such-flag"], 2, stderr_has=("--no-such-flag",))
        # Inside a cluster of short options, the one refused (it named the
        # argument before: "unknown option info").
        self.assert_exit(["--log-level", "info", "-Zq"], 2, stderr_has=("unknown option -Z",))

    def test_flag_without_value(self):
        self.assert_exit(["--config"], 2)
        # The next option taken as the value: the message named the
        # argument after it ("unexpected argument \"x\"").
        self.assert_exit(["--io-threads", "--config", "x"], 2,
                         stderr_has=('--io-threads needs a value ("--config" is the next option)',))
        self.assert_exit(["-t", "--listen", "127.0.0.1:0"], 2,
                         stderr_has=("-t needs a value",))

    def test_stray_argument(self):
        self.assert_exit(["serve"], 2, stderr_has=("serve",))

    def test_invalid_json(self):
        path = self.config_file('{\n  "listen": "127.0.0.1:0",\n  oops\n}\n')
        _, err = self.assert_exit(["--config", path], 2, stderr_has=(path,))
        self.assertRegex(err, r"line 3\b", "expected stderr to name line 3 of the file: %r" % err)

    def test_unknown_field(self):
        path = self.config_file('{"limts": {}}')
        self.assert_exit(["--config", path], 2, stderr_has=(path, "limts"))

    def test_unknown_field_suggests_the_near_one(self):
        path = self.config_file('{"limits": {"max_conections": 10}}')
        self.assert_exit(["--config", path], 2, stderr_has=(
            path, 'limits.max_conections: unknown field; did you mean "max_connections"?'))

    def test_unknown_limits_field(self):
        path = self.config_file('{"limits": {"max_headers": 10}}')
        self.assert_exit(["--config", path], 2, stderr_has=("limits.max_headers",))

    def test_wrong_type(self):
        path = self.config_file('{"limits": {"max_header_bytes": "big"}}')
        self.assert_exit(["--config", path], 2, stderr_has=(path, "limits.max_header_bytes"))

    def test_out_of_range(self):
        path = self.config_file('{"limits": {"max_connections": 0}}')
        self.assert_exit(["--config", path], 2, stderr_has=("limits.max_connections",))

    def test_top_level_not_object(self):
        path = self.config_file('[1, 2]')
        self.assert_exit(["--config", path], 2, stderr_has=(path,))

    def test_missing_config_file(self):
        path = os.path.join(self.tmp.name, "does-not-exist.json")
        self.assert_exit(["--config", path], 2, stderr_has=(path,))

    def test_bad_listen(self):
        # A port is digits only: strtol took " 24113", "+24113" and "-0"
        # (which bound a random port).
        for value in ("nonsense", "127.0.0.1:99999", "127.0.0.1:", ":80", "::1:80",
                      "127.0.0.1: 8000", "127.0.0.1:+8000", "127.0.0.1:-0", "127.0.0.1:0080x",
                      "127.0.0.1:000080"):
            self.assert_exit(["--listen", value], 2, stderr_has=("--listen",))

    def test_config_given_twice(self):
        # The last one silently won, the first (here invalid) never read.
        bad = self.config_file("{\"limits\": 3}", "bad.json")
        good = self.config_file("{}", "good.json")
        self.assert_exit(["--config", bad, "--config", good], 2,
                         stderr_has=("--config given twice",))

    def test_bad_io_threads(self):
        for value in ("-1", "x", "", "1025", " 5", "+5"):
            self.assert_exit(["--io-threads", value], 2)

    # ---- hash-key and the tenants section (docs/TENANTS.md)

    def test_io_threads_default_follows_the_cpus_it_may_use(self):
        """io_threads 0: one IO thread per CPU of its affinity (a container's
        cpuset or limit), not per core of the machine."""
        if not shutil.which("taskset") or os.cpu_count() < 2:
            self.skipTest("needs taskset and at least 2 cores to tell the two apart")
        srv = Server(io_threads=0, prefix=("taskset", "-c", "0"))
        try:
            srv.wait_log(r"listening on 127\.0\.0\.1:\d+ \(1 io threads\)")
            srv.stop_checked()
        finally:
            srv.kill()

    def test_hash_key(self):
        out, _ = self.assert_exit(["hash-key", "abc"], 0)
        self.assertEqual(out, "sha256:ba7816bf8f01cfea414140de5dae2223"
                              "b00361a396177a9cb410ff61f20015ad\n")
        key = "sk-" + "x9" * 30
        out, _ = self.assert_exit(["hash-key", key], 0)
        self.assertEqual(out.strip(), "sha256:" + hashlib.sha256(key.encode()).hexdigest())

    def test_hash_key_from_stdin(self):
        for data in (b"sk-from-stdin\n", b"sk-from-stdin", b"sk-from-stdin\r\n"):
            p = subprocess.run([BIN, "hash-key", "-"], input=data, capture_output=True,
                               timeout=10)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stdout.decode().strip(),
                             "sha256:" + hashlib.sha256(b"sk-from-stdin").hexdigest())

    def test_hash_key_help(self):
        # It printed the digest of the string "--help".
        for flag in ("--help", "-h"):
            out, _ = self.assert_exit(["hash-key", flag], 0, stdout_has=("usage",))
            self.assertIsNone(re.search(r"sha256:[0-9a-f]{64}", out), out)

    def test_hash_key_refuses_what_no_header_can_carry(self):
        for args in (["hash-key"], ["hash-key", "a", "b"], ["hash-key", ""],
                     ["hash-key", "has space"], ["hash-key", "tab\there"],
                     ["hash-key", "k" * 5000]):
            _, err = self.assert_exit(args, 2, stderr_has=("hash-key",))
            if len(args) == 2 and " " in args[1]:
                self.assertNotIn(args[1], err, "the key is echoed in the message")
        p = subprocess.run([BIN, "hash-key", "-"], input=b"\n", capture_output=True, timeout=10)
        self.assertEqual(p.returncode, 2)

    def test_tenant_errors_exit_2_naming_the_field(self):
        good = "sha256:" + "ab" * 32
        cases = [
            ('{"tenants": [{"name": "a", "keys": ["plain-secret-key"]}]}',
             "tenants[0].keys[0]: must be \"sha256:\" and 64 hex digits"),
            ('{"tenants": [{"name": "a"}, {"name": "a"}]}', "tenants[1].name"),
            ('{"tenants": [{"name": "a", "keys": ["%s"]}, {"name": "b", "keys": ["%s"]}]}'
             % (good, good), "tenants[1].keys[0]: the same key as tenants[0].keys[0]"),
            ('{"tenants": [{"name": "a", "share": 0.8}, {"name": "b", "share": 0.3}]}',
             "the shares add up to 1.1"),
            ('{"tenants": [{"name": "a", "share": 0.5, "limit": 0.2}]}',
             "tenants[0].limit: 0.2 is below share 0.5"),
            ('{"tenants": [{"name": "a", "share": 2}]}', "tenants[0].share: must be a number"),
            ('{"tenants": [{"name": "a", "sahre": 0.5}]}',
             'tenants[0].sahre: unknown field; did you mean "share"?'),
            ('{"auth": {"required": 1}}', "auth.required"),
        ]
        for text, want in cases:
            path = self.config_file(text)
            _, err = self.assert_exit(["--config", path], 2, stderr_has=(path, want))
            self.assertNotIn("plain-secret-key", err)

    def test_settings_checked_after_reading_name_the_file(self):
        # Settings the schema takes but the start refuses (a folder that
        # cannot be made, a zone that does not exist) named the field but
        # not the file.
        state = os.path.join(self.tmp.name, "state")
        repo = os.path.join(self.tmp.name, "models")
        os.makedirs(repo)
        base = {"listen": "127.0.0.1:0", "grpc_listen": "off", "state_dir": state,
                "model_repository": repo}
        cases = [
            ({"log_file": "/nonexistent/x.log"}, "log_file"),
            ({"state_dir": "/proc/nope"}, "state_dir /proc/nope: cannot create it"),
            ({"model_repository": "/nonexistent/dir"}, "model_repository: cannot open"),
            ({"jobs": {"dir": "/proc/x"}}, "jobs.dir /proc/x: cannot create it"),
            ({"governance": {"timezone": "Mars/Olympus"}}, "governance.timezone: time zone "
                                                           "Mars/Olympus"),
        ]
        for extra, want in cases:
            path = self.config_file(json.dumps(dict(base, **extra)))
            self.assert_exit(["--config", path], 2, stderr_has=("%s: %s" % (path, want),))
        # From a flag, the flag is named.
        path = self.config_file(json.dumps(base))
        self.assert_exit(["--config", path, "--models", "/nonexistent/dir"], 2,
                         stderr_has=("--models: model_repository: cannot open",))

    def test_jobs_dir_this_user_cannot_write_is_said_at_start(self):
        # It started, and the first job or upload got 500 "Permission
        # denied". Run as nobody, with a state_dir of its own whose jobs/
        # is root's (a jobs.dir elsewhere is claimed with a lock file in
        # it, which already said so).
        if os.geteuid() != 0:
            self.skipTest("running batchgate as another user needs root")
        base = tempfile.mkdtemp(prefix="batchgate-cli-perm-")
        self.addCleanup(shutil.rmtree, base, True)
        os.chmod(base, 0o755)
        state = os.path.join(base, "state")
        jobs = os.path.join(state, "jobs")
        os.makedirs(os.path.join(jobs, "batch"))   # as a run as root left them
        os.chown(state, 65534, 65534)
        cfg = os.path.join(base, "c.json")
        with open(cfg, "w") as f:
            json.dump({"listen": "127.0.0.1:0", "grpc_listen": "off", "state_dir": state}, f)

        def as_nobody():
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)

        rc, _, err = run_cli(["--config", cfg], cwd=base, preexec_fn=as_nobody)
        self.assertEqual(rc, 2, err)
        self.assertIn("jobs.dir %s: cannot write in it: Permission denied" % jobs, err)

    def test_bad_log_level(self):
        self.assert_exit(["--log-level", "loud"], 2, stderr_has=("loud",))

    def test_port_in_use(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)   # no SO_REUSEPORT
        try:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            port = s.getsockname()[1]
            _, err = self.assert_exit(["--listen", "127.0.0.1:%d" % port, "--io-threads", "1"], 1)
            self.assertIn(str(port), err, "expected the error to name the port: %r" % err)
            self.assertRegex(err, r"(?i)in use|listen", "expected a message about the busy "
                             "port: %r" % err)
        finally:
            s.close()

    def test_address_not_on_this_host(self):
        # 192.0.2.1 (TEST-NET-1) is on no interface here: the bind fails with
        # EADDRNOTAVAIL, not EADDRINUSE, and nothing listens anywhere.
        port = free_port()
        _, err = self.assert_exit(["--listen", "192.0.2.1:%d" % port, "--io-threads", "1",
                                   "--grpc-listen", "off"], 1,
                                  stderr_has=["cannot listen on 192.0.2.1:%d" % port])
        self.assertIn("Cannot assign requested address", err)

    def test_port_held_by_another_batchgate(self):
        # batchgate's own listeners use SO_REUSEPORT (one per IO thread); a
        # second batchgate on the same port must not join them and take half
        # the new connections: it exits 1 naming the port, and the first one
        # keeps every connection.
        with Server(io_threads=2) as first:
            for flags, port in ((["--listen", "127.0.0.1:%d" % first.port,
                                  "--grpc-listen", "127.0.0.1:0"], first.port),
                                (["--listen", "127.0.0.1:0",
                                  "--grpc-listen", "127.0.0.1:%d" % first.grpc_port],
                                 first.grpc_port)):
                _, err = self.assert_exit(flags + ["--io-threads", "2"], 1)
                self.assertIn("127.0.0.1:%d" % port, err)
                self.assertIn("in use by another process", err)
            for _ in range(20):
                self.assertEqual(roundtrip(first.port, "GET", "/v2/health/live").status, 200)
            self.assertTrue(first.alive())

    def test_state_dir_held_by_another_batchgate(self):
        # Two servers on one state_dir would both resume the same jobs and
        # batches and write the same result files: the second is refused
        # (exit 1, naming the first's pid), on another port, while the first
        # serves on; `batchgate report` (a reader) still runs beside it; and
        # a server killed with SIGKILL leaves no stale lock behind.
        state = tempfile.mkdtemp(prefix="batchgate-state-")
        try:
            cfg = os.path.join(state, "second.json")
            with open(cfg, "w") as f:
                json.dump({"state_dir": state, "listen": "127.0.0.1:0", "grpc_listen": "off"}, f)
            with Server(config={"state_dir": state}) as first:
                _, err = self.assert_exit(["--config", cfg, "--io-threads", "1"], 1)
                self.assertIn("state_dir %s is in use by another batchgate (pid %d)"
                              % (state, first.pid), err)
                rc, out, err = run_cli(["report", "--config", cfg])
                self.assertEqual(rc, 0, err)
                self.assertEqual(roundtrip(first.port, "GET", "/v2/health/live").status, 200)
                # A clean-up script deleting the lock file does not let a
                # second server in: the folder itself is held (the old build
                # started, and both ran the same jobs).
                os.unlink(os.path.join(state, "batchgate.lock"))
                self.assert_exit(["--config", cfg, "--io-threads", "1"], 1, stderr_has=(
                    "state_dir %s is in use by another batchgate" % state,))
                first.stop(signal.SIGKILL)
            with Server(config={"state_dir": state}) as again:
                self.assertEqual(roundtrip(again.port, "GET", "/v2/health/live").status, 200)
            # A jobs.dir of its own is claimed the same way: a second server
            # (its own state_dir) on the first's jobs.dir deleted the first's
            # Batch API files at start, as a crash's leftovers.
            jobs = os.path.join(state, "shared-jobs")
            with Server(config={"state_dir": os.path.join(state, "a"),
                                "jobs": {"dir": jobs}}) as first:
                with open(cfg, "w") as f:
                    json.dump({"state_dir": os.path.join(state, "b"), "jobs": {"dir": jobs},
                               "listen": "127.0.0.1:0", "grpc_listen": "off"}, f)
                self.assert_exit(["--config", cfg, "--io-threads", "1"], 1, stderr_has=(
                    "jobs.dir %s is in use by another batchgate (pid %d)" % (jobs, first.pid),))
                self.assertEqual(roundtrip(first.port, "GET", "/v2/health/live").status, 200)
            # The default jobs folder (<state_dir>/jobs) is held the same way:
            # a server given it as its jobs.dir started, and deleted the
            # first's Batch API files as a crash's leftovers.
            a = os.path.join(state, "a")
            with Server(config={"state_dir": a}) as first:
                with open(cfg, "w") as f:
                    json.dump({"state_dir": os.path.join(state, "c"),
                               "jobs": {"dir": os.path.join(a, "jobs")},
                               "listen": "127.0.0.1:0", "grpc_listen": "off"}, f)
                self.assert_exit(["--config", cfg, "--io-threads", "1"], 1, stderr_has=(
                    "jobs.dir %s is in use by another batchgate (pid %d)"
                    % (os.path.join(a, "jobs"), first.pid),))
            # jobs.dir set to the state_dir itself is held once (it refused
            # the server itself, naming its own pid).
            same = os.path.join(state, "same")
            with Server(config={"state_dir": same, "jobs": {"dir": same}}) as one:
                self.assertEqual(roundtrip(one.port, "GET", "/v2/health/live").status, 200)
            # A state_dir that cannot be a folder is bad configuration: exit 2.
            with open(cfg, "w") as f:
                json.dump({"state_dir": os.path.join(state, "second.json", "x"),
                           "listen": "127.0.0.1:0", "grpc_listen": "off"}, f)
            self.assert_exit(["--config", cfg, "--io-threads", "1"], 2,
                             stderr_has=("state_dir %s" % os.path.join(state, "second.json", "x"),))
        finally:
            shutil.rmtree(state, ignore_errors=True)

    def test_state_database_that_is_not_one_is_named(self):
        # "state database: file is not a database" named no file. Exit 1, a
        # runtime failure, as `batchgate report` says of the same file (it
        # was 2, bad configuration).
        state = tempfile.mkdtemp(prefix="batchgate-state-")
        try:
            with open(os.path.join(state, "batchgate.db"), "wb") as f:
                f.write(b"not a database" * 100)
            cfg = os.path.join(state, "c.json")
            with open(cfg, "w") as f:
                json.dump({"state_dir": state, "listen": "127.0.0.1:0", "grpc_listen": "off"}, f)
            self.assert_exit(["--config", cfg, "--io-threads", "1"], 1, stderr_has=(
                "state database %s: file is not a database" % os.path.join(state, "batchgate.db"),))
        finally:
            shutil.rmtree(state, ignore_errors=True)

    def test_state_database_of_a_newer_schema(self):
        # Exit 1, as `batchgate report` exits for the same file (it was 2,
        # with the config file's name in front, as if it were a setting).
        import sqlite3
        state = tempfile.mkdtemp(prefix="batchgate-state-")
        try:
            db = sqlite3.connect(os.path.join(state, "batchgate.db"))
            db.execute("PRAGMA user_version=99")
            db.close()
            cfg = os.path.join(state, "c.json")
            with open(cfg, "w") as f:
                json.dump({"state_dir": state, "listen": "127.0.0.1:0", "grpc_listen": "off"}, f)
            _, err = self.assert_exit(["--config", cfg, "--io-threads", "1"], 1,
                                      stderr_has=("schema version 99 is newer",))
            self.assertNotIn(cfg + ":", err)
            self.assert_exit(["report", "--config", cfg], 1, stderr_has=("schema version 99",))
        finally:
            shutil.rmtree(state, ignore_errors=True)

    def test_listen_host_that_does_not_resolve(self):
        # Either port's host: exit 1 naming it. The gRPC one failed after
        # the HTTP listeners were bound, and tearing those down crashed
        # (SIGSEGV in server_listener_close: their events did not exist yet).
        for flags in (["--listen", "nosuchhost.invalid:0"],
                      ["--listen", "127.0.0.1:0", "--grpc-listen", "nosuchhost.invalid:0"]):
            self.assert_exit(flags + ["--io-threads", "2"], 1,
                             stderr_has=('cannot resolve host "nosuchhost.invalid"',))
        # An address literal that is none will not resolve later either:
        # bad usage, exit 2 (it was 1, as a name service down).
        for host in ("256.1.1.1", "[1::2::3]"):
            self.assert_exit(["--listen", host + ":0", "--io-threads", "1"], 2,
                             stderr_has=('listen: not an IP address',))
        # From the file: the file is named, as for every other setting.
        state = tempfile.mkdtemp(prefix="batchgate-state-")
        try:
            cfg = os.path.join(state, "c.json")
            with open(cfg, "w") as f:
                json.dump({"state_dir": state, "listen": "256.1.1.1:0", "grpc_listen": "off"}, f)
            self.assert_exit(["--config", cfg, "--io-threads", "1"], 2,
                             stderr_has=(cfg + ': listen: not an IP address',))
            # A host that does not resolve names the file too (exit 1: the
            # name service may be down for a while).
            with open(cfg, "w") as f:
                json.dump({"state_dir": state, "listen": "nosuchhost.invalid:0",
                           "grpc_listen": "off"}, f)
            self.assert_exit(["--config", cfg, "--io-threads", "1"], 1,
                             stderr_has=(cfg + ': listen: cannot resolve host',))
        finally:
            shutil.rmtree(state, ignore_errors=True)

    def test_a_start_waits_for_another_binding_the_port(self):
        # Two batchgates started together could both find the port free
        # before either listens, then both join one SO_REUSEPORT group. A
        # start checks and binds while holding an abstract Unix socket
        # named after the port: here the test holds it, as a batchgate in
        # the middle of its own start would.
        port = free_port()
        claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        claim.bind("\0batchgate-listen:%d" % port)
        started = {}
        t = threading.Thread(target=lambda: started.update(srv=Server(
            config={"listen": "127.0.0.1:%d" % port})))
        try:
            t.start()
            time.sleep(1.0)
            with self.assertRaises(ConnectionRefusedError, msg="listening while the port is claimed"):
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
            claim.close()
            t.join(15)
            self.assertIn("srv", started, "no start after the claim was let go")
            with started["srv"] as srv:
                self.assertEqual(roundtrip(srv.port, "GET", "/v2/health/live").status, 200)
        finally:
            claim.close()
            t.join(15)
        # Held past a start's length (5 s): exit 1, saying so.
        port = free_port()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as claim:
            claim.bind("\0batchgate-listen:%d" % port)
            self.assert_exit(["--listen", "127.0.0.1:%d" % port, "--io-threads", "1"], 1,
                             stderr_has=("port %d: another process has been binding it" % port,))


class LogFileTest(unittest.TestCase):
    """`log_file` and SIGHUP (SPEC.md: SIGHUP reopens logs): after a
    rotation moved the file, the next lines go to a new one; a reopen that
    fails is said on stderr, where someone reads it (it went only into the
    moved file), and the server goes on."""

    def test_sighup_reopens_and_a_failed_reopen_is_said(self):
        tmp = tempfile.mkdtemp(prefix="batchgate-logfile-")
        self.addCleanup(shutil.rmtree, tmp, True)
        log = os.path.join(tmp, "b.log")
        port = free_port()
        cfg = os.path.join(tmp, "c.json")
        with open(cfg, "w") as f:
            json.dump({"listen": "127.0.0.1:%d" % port, "grpc_listen": "off", "log_file": log,
                       "state_dir": os.path.join(tmp, "state")}, f)
        p = subprocess.Popen([BIN, "--config", cfg, "--io-threads", "1"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
        self.addCleanup(p.kill)

        def wait_in(path, text, timeout=10):
            deadline = time.monotonic() + timeout
            while True:
                try:
                    with open(path) as f:
                        if text in f.read():
                            return
                except OSError:
                    pass
                self.assertLess(time.monotonic(), deadline, "%r never in %s" % (text, path))
                time.sleep(0.02)

        wait_in(log, "listening on 127.0.0.1:%d" % port)
        self.assertEqual(roundtrip(port, "GET", "/v2/health/live").status, 200)
        os.rename(log, log + ".1")                  # a rotation
        p.send_signal(signal.SIGHUP)
        wait_in(log, "SIGHUP: log reopened")
        os.unlink(log)
        os.mkdir(log)                               # nothing can be opened there now
        p.send_signal(signal.SIGHUP)
        self.assertEqual(roundtrip(port, "GET", "/v2/health/live").status, 200)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=15)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("SIGHUP: cannot reopen the log file %s: Is a directory" % log,
                      err.decode())
        with open(log + ".1") as f:
            self.assertNotIn("SIGHUP", f.read())   # before the rotation only


class LogFormatTest(unittest.TestCase):
    def test_log_lines(self):
        srv = Server({})
        try:
            self.assertEqual(roundtrip(srv, "GET", "/v2").status, 200, "expected a served request")
            srv.stop_checked()
            lines = srv.log_lines()
            self.assertTrue(lines, "expected log lines on stderr")
            for line in lines:
                self.assertRegex(line, LOG_LINE_RE, "expected every log line to start with an "
                                 "ISO-8601 timestamp and a level word: %r" % line)
            listening = [l for l in lines if " info listening on " in l]
            self.assertEqual(len(listening), 1, "expected one 'listening on' line: %r" % lines)
            self.assertRegex(listening[0], r" info listening on 127\.0\.0\.1:%d\b" % srv.port,
                             "expected the info 'listening on' line with the bound port")
        finally:
            srv.kill()

    def test_flags_override_the_config_file(self):
        # --io-threads and --log-level on top of the file's values.
        srv = Server({"io_threads": 3, "log_level": "error"}, io_threads=2,
                     extra_args=["--log-level", "info"])
        try:
            srv.wait_log(r"\(2 io threads\)", timeout=2)
            self.assertEqual(roundtrip(srv, "GET", "/v2/health/live").status, 200,
                             "expected a served request")
            srv.stop_checked()
        finally:
            srv.kill()



class BundledModelsTest(unittest.TestCase):
    """SPEC.md: a bare `batchgate` serves the bundled repository, models/ in
    the source tree or the installed copy, whatever the folder it runs in
    (it looked in ./models only, and served nothing elsewhere)."""

    def bare(self, binary):
        """The repository a bare `binary` serves, run from an empty folder."""
        tmp = tempfile.mkdtemp(prefix="batchgate-bare-")
        self.addCleanup(shutil.rmtree, tmp, True)
        p = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--grpc-listen", "off"],
                             cwd=tmp, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        try:
            lines, repo = [], None
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                line = p.stderr.readline()
                if not line:
                    break
                lines.append(line)
                m = re.search(r"model repository (\S+): (\d+) models?", line)
                if m:
                    repo = (m.group(1), int(m.group(2)))
                if "ready in" in line:
                    break
            self.assertIsNotNone(repo, "".join(lines))
            self.assertTrue(any("model digits" in l and "loaded" in l for l in lines),
                            "".join(lines))
            return repo
        finally:
            p.kill()
            p.wait(5)
            p.stderr.close()

    def test_from_the_build_tree(self):
        repo = self.bare(BIN)
        self.assertEqual(repo, (os.path.realpath(os.path.join(os.path.dirname(BIN), "..",
                                                              "models")), 1))

    def test_from_an_install(self):
        build = os.path.dirname(BIN)
        if not os.path.exists(os.path.join(build, "cmake_install.cmake")):
            self.skipTest("%s is not a CMake build folder" % build)
        prefix = tempfile.mkdtemp(prefix="batchgate-install-")
        self.addCleanup(shutil.rmtree, prefix, True)
        p = subprocess.run(["cmake", "--install", build, "--prefix", prefix],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        repo = self.bare(os.path.join(prefix, "bin", "batchgate"))
        self.assertEqual(repo, (os.path.join(prefix, "share", "batchgate", "models"), 1))

if __name__ == "__main__":
    unittest.main()
