"""The container image (Dockerfile, scripts/build-image, docs/DEPLOY.md).

ImageFilesTest needs no container engine: the runtime stage installs every
library the binary links, the image's default config is one batchgate
serves, and the Dockerfile keeps what docs/DEPLOY.md promises (non-root,
SIGTERM, a readiness healthcheck, port 8000).

ImageRunTest runs the image: it waits for /v2/health/ready on a published
loopback port, asks the digits model, stops the container with SIGTERM and
expects exit 0. It skips, with scripts/build-image's own reason, where
containers cannot be built or run. Building an image takes about two
minutes on two cores (the Debian base from Debian's packages, the build
dependencies, the compile), so the suite does not build one unless
BATCHGATE_IMAGE_BUILD=1; an image of this very tree, built before (by
scripts/build-image or an earlier run with the variable), is reused: the
script tags it with a hash of the files, recorded under
~/.cache/batchgate/image/.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from harness import BIN, Server, roundtrip

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "build-image")
DOCKERFILE = os.path.join(ROOT, "Dockerfile")
IMAGE_CONFIG = os.path.join(ROOT, "deploy", "image", "config.json")
DIGITS = os.path.join(ROOT, "models", "digits")
DEPLOYMENT = os.path.join(ROOT, "deploy", "base", "deployment.yaml")

# What minbase holds (apt needs the C++ runtime): a binary may link these
# without the Dockerfile naming them.
IN_EVERY_DEBIAN_IMAGE = {"libc6", "libgcc-s1", "libstdc++6"}

# Longer than the image's shutdown_timeout_ms (30 s): podman's SIGKILL must
# not cut a drain short.
STOP_TIMEOUT_S = 40


def dockerfile_stages():
    """The Dockerfile's stages: a list of (FROM line, [instructions]), with
    continuation lines joined and comments dropped."""
    with open(DOCKERFILE) as f:
        text = f.read()
    text = re.sub(r"\\\n", " ", text)
    stages = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append((line, []))
        elif stages:
            stages[-1][1].append(line)
    return stages


class ImageFilesTest(unittest.TestCase):
    def test_runtime_stage_installs_every_library_the_binary_links(self):
        # A library the binary gains (a new dependency) must reach the
        # runtime stage's apt-get line, or the image fails at its first start.
        if subprocess.run(["sh", "-c", "command -v dpkg-query"], capture_output=True).returncode:
            self.skipTest("no dpkg here: the libraries cannot be mapped to Debian packages")
        stages = dockerfile_stages()
        self.assertGreaterEqual(len(stages), 2, "the Dockerfile is meant to be multi-stage")
        runtime = " ".join(stages[-1][1])
        installed = set(re.findall(r"[a-z0-9][a-z0-9.+-]+", runtime))
        out = subprocess.run(["ldd", BIN], capture_output=True, text=True, timeout=10).stdout
        missing = []
        for path in re.findall(r"=> (/\S+)", out):
            name = os.path.basename(path)
            if re.match(r"lib(asan|ubsan|tsan|lsan)", name):
                continue   # a sanitizer build's own runtime
            p = subprocess.run(["dpkg-query", "-S", os.path.realpath(path)],
                               capture_output=True, text=True, timeout=10)
            if p.returncode:
                p = subprocess.run(["dpkg-query", "-S", path], capture_output=True, text=True,
                                   timeout=10)
            if p.returncode:
                missing.append("%s (no Debian package owns it)" % path)
                continue
            pkg = p.stdout.split(":")[0].strip()
            if pkg not in installed and pkg not in IN_EVERY_DEBIAN_IMAGE:
                missing.append("%s (package %s)" % (path, pkg))
        self.assertEqual(missing, [], "the runtime stage of the Dockerfile does not install "
                         "these libraries of %s" % BIN)

    def test_dockerfile_keeps_its_promises(self):
        stages = dockerfile_stages()
        final = stages[-1][1]
        joined = "\n".join(final)
        self.assertIn("STOPSIGNAL SIGTERM", joined)
        self.assertRegex(joined, r"(?m)^EXPOSE 8000\b")
        user = re.search(r"(?m)^USER (\S+)", joined)
        self.assertTrue(user, "the final stage sets no USER: it would run as root")
        uid = user.group(1).split(":")[0]
        # Numeric, so Kubernetes' runAsNonRoot can verify it.
        self.assertTrue(uid.isdigit() and int(uid) != 0, "USER %s" % user.group(1))
        hc = re.search(r"(?m)^HEALTHCHECK .*", joined)
        self.assertTrue(hc, "no HEALTHCHECK")
        self.assertIn("/v2/health/ready", hc.group(0))
        self.assertRegex(joined, r"(?m)^COPY deploy/image/config\.json /etc/batchgate/config\.json")
        with open(IMAGE_CONFIG) as f:
            cfg = json.load(f)
        self.assertEqual(cfg["listen"], "0.0.0.0:8000")
        self.assertRegex(joined, r"(?m)^VOLUME .*%s" % re.escape(os.path.dirname(cfg["state_dir"])))

    def test_image_config_is_one_batchgate_serves(self):
        # The fields and values of the image's config, on loopback and with
        # the tree's model folder: a misspelt field would stop the container.
        with open(IMAGE_CONFIG) as f:
            cfg = json.load(f)
        state = tempfile.mkdtemp(prefix="batchgate-image-state-")
        cfg.update({"listen": "127.0.0.1:0", "model_repository": os.path.join(ROOT, "models"),
                    "state_dir": state})
        with Server(cfg) as srv:
            deadline = time.monotonic() + 20
            while roundtrip(srv.port, "GET", "/v2/health/ready").status != 200:
                self.assertLess(time.monotonic(), deadline, "not ready within 20 s")
                time.sleep(0.05)
            srv.stop_checked()


def run(argv, timeout, env=None):
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        raise AssertionError("%s did not finish within %d s; stderr:\n%s"
                             % (" ".join(argv), timeout, e.stderr or ""))


def script_reason(p):
    lines = [l for l in p.stderr.splitlines() if l.startswith("build-image: ")]
    return lines[-1][len("build-image: "):] if lines else p.stderr.strip()


class ImageRunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        p = run([SCRIPT, "--check"], timeout=180)
        if p.returncode == 3:
            raise unittest.SkipTest("containers cannot be built or run here: " + script_reason(p))
        if p.returncode != 0:
            raise AssertionError("scripts/build-image --check failed (exit %d):\n%s"
                                 % (p.returncode, p.stderr))
        settings = dict(l.split("=", 1) for l in p.stdout.splitlines() if "=" in l)
        if settings.get("TOOL") != "podman":
            raise unittest.SkipTest("images can be built here but not run: podman is missing "
                                    "(scripts/install-deps image installs it)")
        cls.env = dict(os.environ)
        if settings.get("CONTAINERS_CONF"):
            cls.env["CONTAINERS_CONF"] = settings["CONTAINERS_CONF"]
        cls.network = settings.get("NETWORK", "bridge")
        p = run([SCRIPT, "--cached"], timeout=120)
        if p.returncode == 0:
            cls.tag = p.stdout.split()[-1]
        elif p.returncode == 4 and os.environ.get("BATCHGATE_IMAGE_BUILD") == "1":
            p = run([SCRIPT], timeout=1500)
            if p.returncode == 3:
                raise unittest.SkipTest("containers cannot be built here: " + script_reason(p))
            if p.returncode != 0:
                raise AssertionError("scripts/build-image failed (exit %d):\n%s"
                                     % (p.returncode, p.stderr[-6000:]))
            cls.tag = p.stdout.split()[-1]
        elif p.returncode == 4:
            raise unittest.SkipTest(
                "%s; building one takes about two minutes on two "
                "cores, so the suite does not: set BATCHGATE_IMAGE_BUILD=1 (or run "
                "scripts/build-image once) and run this test again" % script_reason(p))
        else:
            raise AssertionError("scripts/build-image --cached failed (exit %d):\n%s"
                                 % (p.returncode, p.stderr))

    def podman(self, *args, timeout=60, check=True):
        p = run(["podman"] + list(args), timeout=timeout, env=self.env)
        if check and p.returncode != 0:
            self.fail("podman %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr))
        return p

    def http(self, method, path, body=None, timeout=10):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), data=body,
                                     method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def wait_ready(self, name, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            try:
                status, _ = self.http("GET", "/v2/health/ready", timeout=2)
            except OSError:
                status = None
            if status == 200:
                return
            state = self.podman("inspect", name, "--format", "{{.State.Status}}").stdout.strip()
            if state != "running" or time.monotonic() > deadline:
                self.fail("the container did not become ready within %d s (state %s); logs:\n%s"
                          % (timeout, state, self.podman("logs", name, check=False).stderr))
            time.sleep(0.2)

    def check_digits(self):
        with open(os.path.join(DIGITS, "heldout.json")) as f:
            heldout = json.load(f)
        rows, labels = heldout["inputs"][:64], heldout["labels"][:64]
        body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32",
                                       "shape": [len(rows), 64], "data": rows}]}).encode()
        status, out = self.http("POST", "/v2/models/digits/infer", body)
        self.assertEqual(status, 200, out)
        ans = json.loads(out)
        self.assertEqual(ans["model_name"], "digits")
        self.assertEqual(ans["outputs"][0]["shape"], [len(rows), 10])
        data = ans["outputs"][0]["data"]
        right = 0
        for i, label in enumerate(labels):
            probs = data[i * 10:(i + 1) * 10]
            self.assertAlmostEqual(sum(probs), 1.0, places=4)
            right += max(range(10), key=probs.__getitem__) == label
        self.assertGreaterEqual(right, 0.9 * len(labels), "digits classified %d of %d held-out "
                                "rows right" % (right, len(labels)))

    def publish(self, name):
        """Arguments that publish the server on loopback (before the image
        name), those that go after it, and sets self.port once started."""
        if self.network == "host":
            # The host's network: the server listens on loopback only, on
            # a port of its own.
            import socket
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self._host_port = s.getsockname()[1]
            return ["--network", "host"], ["--listen", "127.0.0.1:%d" % self._host_port]
        return ["-p", "127.0.0.1::8000"], []

    def find_port(self, name):
        if self.network == "host":
            self.port = self._host_port
        else:
            out = self.podman("port", name, "8000/tcp").stdout.strip().splitlines()[0]
            self.port = int(out.rsplit(":", 1)[1])

    def test_serves_the_demo_model_and_drains_on_sigterm(self):
        name = "batchgate-e2e-image-%d" % os.getpid()
        self.podman("rm", "-f", name, check=False)
        before, after = self.publish(name)
        extra = ["--config", "/etc/batchgate/config.json"] + after if after else []
        self.podman("run", "-d", "--name", name, *before, self.tag, *extra)
        self.addCleanup(self.podman, "rm", "-f", name, check=False)
        self.find_port(name)
        self.wait_ready(name)
        self.assertEqual(self.http("GET", "/v2/health/live")[0], 200)
        # The image's own HEALTHCHECK, run by hand (no systemd timer needed).
        hc = self.podman("healthcheck", "run", name, check=False)
        self.assertEqual(hc.returncode, 0, "HEALTHCHECK failed: %s %s" % (hc.stdout, hc.stderr))
        user = self.podman("inspect", name, "--format", "{{.Config.User}}").stdout.strip()
        self.assertEqual(user.split(":")[0], "10001")
        self.check_digits()
        status, metrics = self.http("GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertIn(b'batchgate_requests_total{model="digits",code="200"}', metrics)

        # podman stop sends the image's STOPSIGNAL (SIGTERM): the drain ends
        # with exit 0 well within the stop timeout.
        t0 = time.monotonic()
        self.podman("stop", "-t", str(STOP_TIMEOUT_S), name, timeout=STOP_TIMEOUT_S + 30)
        took = time.monotonic() - t0
        code = self.podman("inspect", name, "--format", "{{.State.ExitCode}}").stdout.strip()
        logs = self.podman("logs", name, check=False).stderr
        self.assertEqual(code, "0", "exit code %s after podman stop; logs:\n%s" % (code, logs))
        self.assertLess(took, STOP_TIMEOUT_S - 5, "the drain took %.1f s" % took)
        self.assertIn("SIGTERM: draining", logs)
        self.assertNotIn("not answered", logs)

    def test_runs_as_the_deployment_runs_it(self):
        # deploy/base/deployment.yaml's pod, short of Kubernetes: the init
        # container's copy of the models into an empty volume, then the
        # server with a read-only root, uid 10001, no capabilities, the
        # ConfigMap's config.json mounted read-only, the models read-only,
        # and writable volumes only for state and /tmp.
        with open(DEPLOYMENT) as f:
            text = f.read()
        init_cmd = json.loads(re.search(r"(?m)^ +command: (\[\"/bin/cp\".*\])$", text).group(1))
        work = tempfile.mkdtemp(prefix="batchgate-e2e-pod-")
        self.addCleanup(shutil.rmtree, work, True)
        vols = {}
        for v in ("models", "state", "tmp", "config"):
            vols[v] = os.path.join(work, v)
            os.mkdir(vols[v])
            os.chmod(vols[v], 0o777)   # an emptyDir is world-writable
        shutil.copy(os.path.join(ROOT, "deploy", "base", "config.json"), vols["config"])
        locked = ["--read-only", "--read-only-tmpfs=false", "--user", "10001:10001",
                  "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
        self.podman("run", "--rm", *locked, "-v", vols["models"] + ":/models",
                    "--entrypoint", init_cmd[0], self.tag, *init_cmd[1:], timeout=120)
        self.assertTrue(os.path.isfile(os.path.join(vols["models"], "digits", "config.json")))
        name = "batchgate-e2e-pod-%d" % os.getpid()
        self.podman("rm", "-f", name, check=False)
        before, after = self.publish(name)
        self.podman("run", "-d", "--name", name, *locked, *before,
                    "-v", vols["config"] + ":/etc/batchgate:ro",
                    "-v", vols["models"] + ":/models:ro",
                    "-v", vols["state"] + ":/var/lib/batchgate",
                    "-v", vols["tmp"] + ":/tmp",
                    self.tag, "--config", "/etc/batchgate/config.json", *after)
        self.addCleanup(self.podman, "rm", "-f", name, check=False)
        self.find_port(name)
        self.wait_ready(name)
        self.check_digits()
        # The state went to the volume (the SQLite database of the ledger).
        self.assertTrue(os.path.exists(os.path.join(vols["state"], "state", "batchgate.db")))
        # The preStop hook's command exists in the image.
        self.assertEqual(self.podman("exec", name, "/bin/sleep", "0").returncode, 0)
        self.podman("stop", "-t", str(STOP_TIMEOUT_S), name, timeout=STOP_TIMEOUT_S + 30)
        code = self.podman("inspect", name, "--format", "{{.State.ExitCode}}").stdout.strip()
        self.assertEqual(code, "0", self.podman("logs", name, check=False).stderr)


if __name__ == "__main__":
    unittest.main()
