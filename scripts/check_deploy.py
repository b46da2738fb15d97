"""Validates rendered Kubernetes manifests (what `kubectl kustomize` prints)
offline; scripts/check-deploy runs it with the test venv's Python, which has
kubernetes-validate and PyYAML (scripts/fetch-testdeps).

    check_deploy.py [--json-dir DIR] RENDERED.yaml...

Built-in kinds are validated against the Kubernetes API's JSON schemas,
strictly (unknown fields are errors), for the oldest and the newest
Kubernetes the installed kubernetes-validate knows. kubernetes-validate has
no schemas for custom resources, so the CRD kinds used here (PodMonitor,
ScaledObject) are checked by CRD_CHECKS below instead: required fields,
known fields, types, and what they point at. Any other kind is an error:
nothing would check it. Across the documents of one rendering: selectors
select the Deployment's pods, named ports exist, the ConfigMap the pods
mount is there and holds valid JSON, and the termination grace period
outlasts the preStop sleep plus the server's shutdown_timeout_ms.

--json-dir writes each rendering as NAME.json (a list of the documents), for
tests that read them with Python's standard library.
"""

import json
import os
import re
import sys

import kubernetes_validate
import kubernetes_validate.utils as kvu
import yaml

DURATION = re.compile(r"^([0-9]+(ms|s|m|h))+$")
errors = []


def err(where, msg):
    errors.append("%s: %s" % (where, msg))


def name_of(doc):
    return "%s/%s" % (doc.get("kind"), (doc.get("metadata") or {}).get("name"))


# ---------------------------------------------------------------- CRDs

PODMONITOR_ENDPOINT_FIELDS = {
    "port", "portNumber", "targetPort", "path", "scheme", "params", "interval", "scrapeTimeout",
    "honorLabels", "honorTimestamps", "trackTimestampsStaleness", "relabelings",
    "metricRelabelings", "basicAuth", "bearerTokenSecret", "authorization", "oauth2",
    "tlsConfig", "followRedirects", "enableHttp2", "filterRunning", "proxyUrl", "noProxy",
    "proxyFromEnvironment", "proxyConnectHeader"}
PODMONITOR_SPEC_FIELDS = {
    "selector", "podMetricsEndpoints", "namespaceSelector", "jobLabel", "podTargetLabels",
    "sampleLimit", "targetLimit", "labelLimit", "labelNameLengthLimit",
    "labelValueLengthLimit", "keepDroppedTargets", "attachMetadata", "scrapeProtocols",
    "scrapeClass", "fallbackScrapeProtocol", "bodySizeLimit"}


def check_podmonitor(doc, where, rendering):
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return err(where, "spec is required")
    for k in set(spec) - PODMONITOR_SPEC_FIELDS:
        err(where, "spec.%s: unknown field" % k)
    sel = spec.get("selector")
    if not isinstance(sel, dict) or not (sel.get("matchLabels") or sel.get("matchExpressions")):
        err(where, "spec.selector: matchLabels or matchExpressions required (an empty selector "
                   "scrapes every pod of the namespace)")
    elif sel.get("matchLabels") and not pods_selected(rendering, sel["matchLabels"]):
        err(where, "spec.selector %s selects no Deployment's pods" % sel["matchLabels"])
    eps = spec.get("podMetricsEndpoints")
    if not isinstance(eps, list) or not eps:
        return err(where, "spec.podMetricsEndpoints: a non-empty list is required")
    for i, ep in enumerate(eps):
        w = "%s: spec.podMetricsEndpoints[%d]" % (where, i)
        if not isinstance(ep, dict):
            err(w, "must be an object")
            continue
        for k in set(ep) - PODMONITOR_ENDPOINT_FIELDS:
            err(w, "%s: unknown field" % k)
        if not (ep.get("port") or ep.get("portNumber") or ep.get("targetPort")):
            err(w, "port (a container port's name) is required")
        elif isinstance(ep.get("port"), str) and ep["port"] not in container_port_names(rendering):
            err(w, "port %r is no container port of the Deployment" % ep["port"])
        if not str(ep.get("path", "/metrics")).startswith("/"):
            err(w, "path must start with /")
        for k in ("interval", "scrapeTimeout"):
            if k in ep and not DURATION.match(str(ep[k])):
                err(w, "%s %r is not a duration like 15s" % (k, ep[k]))


SCALEDOBJECT_SPEC_FIELDS = {
    "scaleTargetRef", "pollingInterval", "cooldownPeriod", "initialCooldownPeriod",
    "idleReplicaCount", "minReplicaCount", "maxReplicaCount", "fallback", "advanced", "triggers"}
PROMETHEUS_METADATA = {
    "serverAddress", "query", "threshold", "activationThreshold", "namespace", "customHeaders",
    "ignoreNullValues", "unsafeSsl", "queryParameters", "timeout", "authModes"}


def number(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


def check_scaledobject(doc, where, rendering):
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return err(where, "spec is required")
    for k in set(spec) - SCALEDOBJECT_SPEC_FIELDS:
        err(where, "spec.%s: unknown field" % k)
    ref = spec.get("scaleTargetRef")
    if not isinstance(ref, dict) or not ref.get("name"):
        err(where, "spec.scaleTargetRef.name is required")
    elif ref.get("kind", "Deployment") == "Deployment" and not any(
            d.get("kind") == "Deployment" and d["metadata"]["name"] == ref["name"]
            for d in rendering):
        err(where, "spec.scaleTargetRef names Deployment %r, which is not in the rendering"
            % ref["name"])
    for k in ("pollingInterval", "cooldownPeriod", "initialCooldownPeriod", "idleReplicaCount",
              "minReplicaCount", "maxReplicaCount"):
        if k in spec and (not isinstance(spec[k], int) or isinstance(spec[k], bool)
                          or spec[k] < 0):
            err(where, "spec.%s must be a non-negative integer" % k)
    lo, hi = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
    if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
        err(where, "minReplicaCount %d > maxReplicaCount %d" % (lo, hi))
    fb = spec.get("fallback")
    if fb is not None:
        if not (isinstance(fb, dict) and isinstance(fb.get("failureThreshold"), int)
                and fb["failureThreshold"] > 0 and isinstance(fb.get("replicas"), int)
                and fb["replicas"] >= 0):
            err(where, "spec.fallback needs failureThreshold (> 0) and replicas (>= 0), integers")
    hpa = ((spec.get("advanced") or {}).get("horizontalPodAutoscalerConfig") or {})
    if "behavior" in hpa:
        # The behavior is the HPA's own type: validated by the HPA's schema.
        fake = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "x"},
                "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                            "name": "x"},
                         "minReplicas": max(1, lo if isinstance(lo, int) else 1),
                         "maxReplicas": hi if isinstance(hi, int) else 100,
                         "behavior": hpa["behavior"]}}
        for v in versions():
            try:
                kubernetes_validate.validate(fake, v, strict=True)
            except kubernetes_validate.ValidationError as e:
                err(where, "spec.advanced.horizontalPodAutoscalerConfig.behavior.%s: %s (the "
                           "HPA schema of Kubernetes %s)"
                    % (".".join(str(p) for p in list(e.path)[2:]), e.message, v))
    trig = spec.get("triggers")
    if not isinstance(trig, list) or not trig:
        return err(where, "spec.triggers: a non-empty list is required")
    for i, t in enumerate(trig):
        w = "%s: spec.triggers[%d]" % (where, i)
        if not isinstance(t, dict) or not t.get("type"):
            err(w, "type is required")
            continue
        md = t.get("metadata")
        if not isinstance(md, dict):
            err(w, "metadata is required")
            continue
        # KEDA reads metadata as map[string]string: a bare 0.7 is refused.
        for k, v in md.items():
            if not isinstance(v, str):
                err(w, "metadata.%s must be a string (quote it), got %r" % (k, v))
        if t["type"] != "prometheus":
            continue
        for k in set(md) - PROMETHEUS_METADATA:
            err(w, "metadata.%s: not a field of KEDA's prometheus scaler" % k)
        addr = md.get("serverAddress", "")
        if not re.match(r"^https?://[^/\s]+", str(addr)):
            err(w, "metadata.serverAddress must be an http(s) URL, got %r" % addr)
        q = str(md.get("query", "")).strip()
        if not q:
            err(w, "metadata.query is required")
        elif q.count("(") != q.count(")") or q.count("{") != q.count("}"):
            err(w, "metadata.query has unbalanced brackets: %s" % q)
        th = number(md.get("threshold"))
        if th is None or th <= 0:
            err(w, "metadata.threshold must be a number > 0, got %r" % md.get("threshold"))
        if "activationThreshold" in md:
            at = number(md["activationThreshold"])
            if at is None or at < 0:
                err(w, "metadata.activationThreshold must be a number >= 0, got %r"
                    % md["activationThreshold"])


CRD_CHECKS = {
    ("monitoring.coreos.com/v1", "PodMonitor"): check_podmonitor,
    ("keda.sh/v1alpha1", "ScaledObject"): check_scaledobject,
}


# ---------------------------------------------------------------- across documents

def deployments(rendering):
    return [d for d in rendering if d.get("kind") == "Deployment"]


def pods_selected(rendering, match):
    return any(all(((d["spec"]["template"].get("metadata") or {}).get("labels") or {}).get(k) == v
                   for k, v in match.items())
               for d in deployments(rendering))


def container_port_names(rendering):
    return {p.get("name") for d in deployments(rendering)
            for c in d["spec"]["template"]["spec"].get("containers", [])
            for p in c.get("ports", [])}


def check_across(rendering, where):
    names = {(d.get("kind"), d["metadata"]["name"]) for d in rendering}
    for d in rendering:
        w = "%s: %s" % (where, name_of(d))
        kind = d.get("kind")
        if kind in ("Service", "PodDisruptionBudget"):
            sel = d["spec"].get("selector") or {}
            sel = sel.get("matchLabels", sel) if kind == "PodDisruptionBudget" else sel
            if not sel or not pods_selected(rendering, sel):
                err(w, "selector %s selects no Deployment's pods" % sel)
        if kind == "Service":
            for p in d["spec"].get("ports", []):
                tp = p.get("targetPort")
                if isinstance(tp, str) and tp not in container_port_names(rendering):
                    err(w, "targetPort %r is no container port" % tp)
        if kind != "Deployment":
            continue
        pod = d["spec"]["template"]["spec"]
        cms = {v["name"]: v["configMap"]["name"] for v in pod.get("volumes", [])
               if "configMap" in v}
        for cm in cms.values():
            if ("ConfigMap", cm) not in names:
                err(w, "mounts ConfigMap %r, which is not in the rendering" % cm)
        for c in pod.get("containers", []):
            ports = {p.get("name") for p in c.get("ports", [])}
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                port = ((c.get(probe) or {}).get("httpGet") or {}).get("port")
                if isinstance(port, str) and port not in ports:
                    err(w, "%s.%s names port %r, not one of the container's" % (c["name"], probe,
                                                                               port))
            if c["name"] == "batchgate":
                check_grace(d, c, cms, rendering, w)


def server_config(rendering, container, cms):
    """The JSON config the batchgate container reads (--config in a mounted
    ConfigMap), or None."""
    args = list(container.get("command", [])) + list(container.get("args", []))
    path = args[args.index("--config") + 1] if "--config" in args[:-1] else None
    if not path:
        return None
    for m in container.get("volumeMounts", []):
        if m["name"] in cms and path.startswith(m["mountPath"].rstrip("/") + "/"):
            key = path[len(m["mountPath"].rstrip("/")) + 1:]
            for d in rendering:
                if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == cms[m["name"]]:
                    return json.loads((d.get("data") or {})[key])
    return None


def check_grace(dep, c, cms, rendering, w):
    try:
        cfg = server_config(rendering, c, cms)
    except (KeyError, ValueError) as e:
        return err(w, "the server's config in its ConfigMap is missing or not JSON: %s" % e)
    if cfg is None:
        return err(w, "the batchgate container reads no config from a ConfigMap (--config)")
    shutdown_s = cfg.get("shutdown_timeout_ms", 30000) / 1000.0
    cmd = ((((c.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {})
           .get("command") or [])
    sleep_s = 0.0
    if len(cmd) == 2 and cmd[0].endswith("sleep"):
        sleep_s = float(cmd[1])
    elif cmd:
        err(w, "preStop %s: expected [\"/bin/sleep\", SECONDS]" % cmd)
    grace = dep["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
    if not grace > sleep_s + shutdown_s:
        err(w, "terminationGracePeriodSeconds %s is not more than the preStop sleep (%g s) plus "
               "shutdown_timeout_ms (%g s): the kubelet would SIGKILL a drain in progress"
            % (grace, sleep_s, shutdown_s))


# ---------------------------------------------------------------- main

def versions():
    all_v = kvu.all_versions()
    return sorted({all_v[0], all_v[-1]}, key=lambda v: [int(x) for x in v.split(".")])


def check_file(path, json_dir):
    where = os.path.basename(path)
    with open(path) as f:
        rendering = [d for d in yaml.safe_load_all(f) if d]
    if not rendering:
        err(where, "no documents")
    for doc in rendering:
        w = "%s: %s" % (where, name_of(doc))
        if not isinstance(doc, dict) or not doc.get("apiVersion") or not doc.get("kind") \
                or not (doc.get("metadata") or {}).get("name"):
            err(w, "apiVersion, kind and metadata.name are required")
            continue
        check = CRD_CHECKS.get((doc["apiVersion"], doc["kind"]))
        if check:
            n = len(errors)
            check(doc, w, rendering)
            print("  %-40s custom resource: kubernetes-validate has no schema; structural "
                  "check %s" % (name_of(doc), "passed" if len(errors) == n else "FAILED"))
            continue
        results = []
        for v in versions():
            try:
                got = kubernetes_validate.validate(doc, v, strict=True)
                results.append(got)
            except kubernetes_validate.ValidationError as e:
                err(w, "%s: %s (Kubernetes %s, strict)"
                    % (".".join(str(p) for p in e.path) or "(top)", e.message, e.version))
            except kubernetes_validate.SchemaNotFoundError as e:
                err(w, "%s; not a CRD this script checks either, so nothing would check it"
                    % e.message)
                break
        if results:
            print("  %-40s schema of Kubernetes %s, strict: passed"
                  % (name_of(doc), " and ".join(results)))
    check_across(rendering, where)
    if json_dir:
        name = os.path.splitext(os.path.basename(path))[0]
        with open(os.path.join(json_dir, name + ".json"), "w") as f:
            json.dump(rendering, f, indent=1)


def main(argv):
    json_dir = None
    if len(argv) > 2 and argv[1] == "--json-dir":
        json_dir = argv[2]
        argv = argv[:1] + argv[3:]
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    for path in argv[1:]:
        print("%s:" % path)
        check_file(path, json_dir)
    if errors:
        print("\n%d problem(s):" % len(errors))
        for e in errors:
            print("  " + e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
