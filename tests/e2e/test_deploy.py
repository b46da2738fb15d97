"""The Kubernetes manifests under deploy/ (docs/DEPLOY.md).

scripts/check-deploy renders the base and every overlay with `kubectl
kustomize` and validates them offline (the API's schemas through
kubernetes-validate in the test venv, the custom resources by its own
checks); this test runs it, then asserts what ties the manifests to this
server, from the renderings (JSON, written by the script) and a running
build: the probes ask routes the server answers, each overlay's config is
one the server serves, the GPU overlay asks for a GPU, the grace period
outlasts the preStop sleep and the drain, and the KEDA query names metrics
that /metrics exposes.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import Server, roundtrip

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CHECK = os.path.join(ROOT, "scripts", "check-deploy")
OVERLAYS = ("cpu", "gpu", "keda")
# Added with issue #19's multi-host work; a build without them skips the
# assertion on the KEDA query, naming what is missing.
SCALING_METRICS = ("batchgate_model_demand_rows_per_second",
                   "batchgate_model_capacity_rows_per_second")


def objects(rendering, kind):
    return [d for d in rendering if d["kind"] == kind]


def the(rendering, kind):
    found = objects(rendering, kind)
    assert len(found) == 1, "%d %s objects in the rendering" % (len(found), kind)
    return found[0]


def server_container(rendering):
    pod = the(rendering, "Deployment")["spec"]["template"]["spec"]
    return [c for c in pod["containers"] if c["name"] == "batchgate"][0]


def server_config(rendering):
    """The config.json the pods read (the one ConfigMap's only key)."""
    cm = the(rendering, "ConfigMap")
    return json.loads(cm["data"]["config.json"])


def wait_ready(tc, port, timeout=20):
    deadline = time.monotonic() + timeout
    while roundtrip(port, "GET", "/v2/health/ready").status != 200:
        tc.assertLess(time.monotonic(), deadline, "not ready within %d s" % timeout)
        time.sleep(0.05)


def loopback(cfg, state):
    """A rendering's config, served here: loopback, the tree's models."""
    cfg = dict(cfg)
    cfg.update({"listen": "127.0.0.1:0", "model_repository": os.path.join(ROOT, "models"),
                "state_dir": state})
    return cfg


class DeployTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.out = tempfile.mkdtemp(prefix="batchgate-deploy-")
        try:
            p = subprocess.run([CHECK, "--out", cls.out], stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, timeout=240)
        except subprocess.TimeoutExpired as e:
            raise AssertionError("scripts/check-deploy did not finish in 240 s:\n%s%s"
                                 % (e.stdout or "", e.stderr or ""))
        if p.returncode != 0:
            raise AssertionError("scripts/check-deploy failed (exit %d):\n%s\n%s"
                                 % (p.returncode, p.stdout, p.stderr))
        cls.report = p.stdout
        cls.r = {}
        for path in glob.glob(os.path.join(cls.out, "*.json")):
            with open(path) as f:
                cls.r[os.path.basename(path)[:-5]] = json.load(f)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out, ignore_errors=True)

    def state_dir(self):
        d = tempfile.mkdtemp(prefix="batchgate-deploy-state-")
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def test_every_overlay_rendered_and_validated(self):
        for name in ("base",) + OVERLAYS:
            self.assertIn(name, self.r, "deploy/%s was not rendered" % name)
        self.assertIn("check-deploy: all valid", self.report)
        # The custom resources were checked, not skipped silently.
        self.assertRegex(self.report, r"PodMonitor/batchgate .*structural check passed")
        self.assertRegex(self.report, r"ScaledObject/batchgate .*structural check passed")

    def test_probes_ask_routes_the_server_answers(self):
        for name in OVERLAYS:
            c = server_container(self.r[name])
            paths = {p: c[p]["httpGet"]["path"]
                     for p in ("startupProbe", "livenessProbe", "readinessProbe")}
            self.assertEqual(paths, {"startupProbe": "/v2/health/ready",
                                     "livenessProbe": "/v2/health/live",
                                     "readinessProbe": "/v2/health/ready"}, name)
            port = {p["name"]: p["containerPort"] for p in c["ports"]}[c["livenessProbe"]["httpGet"]["port"]]
            cfg = server_config(self.r[name])
            self.assertEqual(cfg["listen"], "0.0.0.0:%d" % port,
                             "%s: the probes' port is not the one the server listens on" % name)
            # The overlay's config, served here: the probes' paths answer 200.
            with Server(loopback(cfg, self.state_dir())) as srv:
                wait_ready(self, srv.port)
                for probe, path in paths.items():
                    self.assertEqual(roundtrip(srv.port, "GET", path).status, 200,
                                     "%s: %s %s" % (name, probe, path))
                pm = the(self.r[name], "PodMonitor")["spec"]["podMetricsEndpoints"][0]
                self.assertEqual(roundtrip(srv.port, "GET", pm["path"]).status, 200)
                srv.stop_checked()

    def test_gpu_overlay_asks_for_a_gpu_on_gpu_nodes(self):
        dep = the(self.r["gpu"], "Deployment")
        pod = dep["spec"]["template"]["spec"]
        limits = server_container(self.r["gpu"])["resources"]["limits"]
        self.assertEqual(str(limits.get("nvidia.com/gpu")), "1")
        self.assertTrue(any(t.get("key") == "nvidia.com/gpu" for t in pod.get("tolerations", [])))
        self.assertTrue(pod.get("nodeSelector"), "no nodeSelector for GPU nodes")
        self.assertIn("cuda0", server_config(self.r["gpu"]).get("devices", {}))
        for name in ("cpu", "keda"):
            limits = server_container(self.r[name])["resources"].get("limits", {})
            self.assertNotIn("nvidia.com/gpu", limits, name)

    def test_grace_period_outlasts_prestop_and_drain(self):
        for name in OVERLAYS:
            pod = the(self.r[name], "Deployment")["spec"]["template"]["spec"]
            cmd = server_container(self.r[name])["lifecycle"]["preStop"]["exec"]["command"]
            self.assertTrue(cmd[0].endswith("sleep"), cmd)
            sleep_s = float(cmd[1])
            self.assertGreater(sleep_s, 0)
            drain_s = server_config(self.r[name]).get("shutdown_timeout_ms", 30000) / 1000
            self.assertGreater(pod["terminationGracePeriodSeconds"], sleep_s + drain_s, name)

    def test_keda_scales_the_deployment_without_fighting_it(self):
        so = the(self.r["keda"], "ScaledObject")["spec"]
        self.assertEqual(so["scaleTargetRef"]["name"],
                         the(self.r["keda"], "Deployment")["metadata"]["name"])
        # Nothing counts arrivals with no pod running: never to zero.
        self.assertGreaterEqual(so["minReplicaCount"], 1)
        self.assertNotIn("replicas", the(self.r["keda"], "Deployment")["spec"])
        md = so["triggers"][0]["metadata"]
        self.assertTrue(0 < float(md["threshold"]) <= 1, md["threshold"])
        self.assertGreater(so["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
                           ["scaleDown"]["stabilizationWindowSeconds"], 0)

    def test_keda_query_names_metrics_the_server_exposes(self):
        so = the(self.r["keda"], "ScaledObject")["spec"]
        query = so["triggers"][0]["metadata"]["query"]
        names = sorted(set(re.findall(r"\bbatchgate_[a-z_]+\b", query)))
        self.assertTrue(names, "the query names no batchgate metric: %s" % query)
        models = set(re.findall(r'model="([^"]+)"', query))
        for m in models:
            self.assertTrue(os.path.isfile(os.path.join(ROOT, "models", m, "config.json")),
                            "the query asks for model %r, which models/ does not hold" % m)
        cfg = loopback(server_config(self.r["keda"]), self.state_dir())
        with Server(cfg) as srv:
            wait_ready(self, srv.port)
            # One request, so that per-model series that appear with traffic do.
            body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64],
                                           "data": [0.0] * 64}]}).encode()
            for m in models:
                r = roundtrip(srv.port, "POST", "/v2/models/%s/infer" % m,
                              headers={"Content-Type": "application/json"}, body=body)
                self.assertEqual(r.status, 200, r.body)
            text = roundtrip(srv.port, "GET", "/metrics").body.decode()
            srv.stop_checked()
        exposed = {}
        for line in text.splitlines():
            m = re.match(r"^(batchgate_[a-zA-Z0-9_]+)(\{[^}]*\})?\s", line)
            if m:
                exposed.setdefault(m.group(1), []).append(m.group(2) or "")
        missing = [n for n in names if n not in exposed]
        not_yet = [n for n in missing if n in SCALING_METRICS]
        self.assertEqual([n for n in missing if n not in not_yet], [],
                         "the KEDA query names metrics /metrics does not expose")
        if not_yet:
            self.skipTest("the KEDA query's %s: not exposed by this build's /metrics yet (the "
                          "scaling metrics of issue #19)" % ", ".join(not_yet))
        for n in names:
            for m in models:
                self.assertTrue(any('model="%s"' % m in labels for labels in exposed[n]),
                                "%s has no series for model %s" % (n, m))


if __name__ == "__main__":
    unittest.main()
