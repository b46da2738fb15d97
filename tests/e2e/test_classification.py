"""test_classification.py - Triton's classification extension (SPEC.md
"Triton's tools", docs/MODELS.md "Classification"): an output asked with
parameters.classification = k is answered as BYTES [rows, k] of
"value:index[:label]".

- ClassificationClientsTest: tritonclient.http (JSON and binary) and
  tritonclient.grpc against the bundled digits model (labels.txt) and the
  same model without labels: top-k equal to the sorted full output, and
  the refusals (k = 0, k past the output's size, k not an integer), run by
  classification_calls.py under the test environment's interpreter
  (scripts/fetch-testdeps).
- ClassificationLabelsTest (standard library only): a labels file beside
  config.json of a model with version folders; a labels file missing, too
  short, or named outside the model's folder (at start and in a load
  request's config) makes the load fail with the reason; the JSON answer's
  exact text."""

import json
import os
import shutil
import struct
import time
import unittest

from harness import RepoServerCase, roundtrip, run_testdeps

HERE = os.path.dirname(os.path.abspath(__file__))
DIGITS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "models", "digits")


def heldout(n):
    with open(os.path.join(DIGITS, "heldout.json")) as f:
        return json.load(f)["inputs"][:n]


def digits_config(name, labels="labels.txt"):
    with open(os.path.join(DIGITS, "config.json")) as f:
        cfg = json.load(f)
    cfg["name"] = name
    if labels is None:
        del cfg["outputs"][0]["labels"]
    else:
        cfg["outputs"][0]["labels"] = labels
    return cfg


def digits_copy(repo, name, labels="labels.txt", labels_text=None, weights_in=""):
    """A copy of digits as `name`: its config naming `labels` (None: no
    labels), labels.txt holding `labels_text` (None: the bundled file's,
    False: no file), the weights under weights_in (a version folder)."""
    d = os.path.join(repo, name)
    os.makedirs(os.path.join(d, weights_in) if weights_in else d)
    shutil.copy(os.path.join(DIGITS, "model.safetensors"), os.path.join(d, weights_in))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(digits_config(name, labels), f)
    if labels_text is None:
        shutil.copy(os.path.join(DIGITS, "labels.txt"), d)
    elif labels_text is not False:
        with open(os.path.join(d, "labels.txt"), "w") as f:
            f.write(labels_text)


def infer_body(rows, k=None):
    body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [len(rows), 64],
                        "data": rows}]}
    if k is not None:
        body["outputs"] = [{"name": "output", "parameters": {"classification": k}}]
    return json.dumps(body)


def post(port, path, body):
    return roundtrip(port, "POST", path, [("Content-Type", "application/json")], body)


class ClassificationClientsTest(RepoServerCase):
    @classmethod
    def populate(cls, repo):
        shutil.copytree(DIGITS, os.path.join(repo, "digits"))
        digits_copy(repo, "digits_plain", labels=None, labels_text=False)

    def test_topk_through_tritonclient_http_and_grpc(self):
        code, out = run_testdeps(
            ["classification_calls.py", "--http", "127.0.0.1:%d" % self.srv.port,
             "--grpc", "127.0.0.1:%d" % self.srv.grpc_port,
             "--labels", "digits=" + os.path.join(DIGITS, "labels.txt"),
             "--plain", "digits_plain", "--rows", json.dumps(heldout(5))], timeout=120)
        self.assertEqual(code, 0, "classification_calls.py exited %d; its output:\n%s\nserver "
                         "log:\n%s" % (code, out, self.srv.log()[-6000:]))
        self.assertNotIn("FAIL", out)
        self.assertEqual(out.count("ok: "), 5, out)


class ClassificationLabelsTest(RepoServerCase):
    @classmethod
    def populate(cls, repo):
        digits_copy(repo, "versioned", weights_in="3")   # labels.txt beside config.json
        digits_copy(repo, "no_file", labels_text=False)
        digits_copy(repo, "short", labels_text="".join("d%d\n" % i for i in range(9)))
        digits_copy(repo, "outside", labels="../versioned/labels.txt")
        digits_copy(repo, "reload", labels=None, labels_text=False)

    def wait_settled(self, model):
        for _ in range(200):
            r = roundtrip(self.srv.port, "GET", "/v2/models/%s/ready" % model)
            if r.status == 200 or "loading" not in r.json().get("reason", "loading"):
                return r
            time.sleep(0.05)
        self.fail("%s still loading" % model)

    def test_labels_beside_config_of_a_versioned_model(self):
        self.assertEqual(self.wait_settled("versioned").status, 200)
        rows = heldout(3)
        full = post(self.srv.port, "/v2/models/versioned/infer", infer_body(rows)).json()
        values = full["outputs"][0]["data"]
        r = post(self.srv.port, "/v2/models/versioned/infer", infer_body(rows, 2))
        self.assertEqual(r.status, 200, r)
        out = r.json()["outputs"][0]
        self.assertEqual((out["datatype"], out["shape"]), ("BYTES", [3, 2]))
        names = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
        for row in range(3):
            v = values[row * 10:(row + 1) * 10]
            top = sorted(range(10), key=lambda i: (-v[i], i))[:2]
            # The JSON's 9 digits give back the float; "%f" prints the float.
            f32 = [struct.unpack("<f", struct.pack("<f", x))[0] for x in v]
            want = ["%f:%d:%s" % (f32[i], i, names[i]) for i in top]
            self.assertEqual(out["data"][row * 2:row * 2 + 2], want)

    def test_a_bad_labels_file_fails_the_load(self):
        for model, reason in (
                ("no_file", "outputs[0].labels: %s/no_file/labels.txt: cannot open the labels "
                            "file" % self.repo),
                ("short", "labels.txt: 9 labels, but the output has 10 elements per row"),
                ("outside", "outputs[0].labels: \"../versioned/labels.txt\" must be a path "
                            "inside the model's folder")):
            r = self.wait_settled(model)
            self.assertEqual(r.status, 503, (model, r))
            self.assertIn(reason, r.json()["reason"], model)
            r = post(self.srv.port, "/v2/models/%s/infer" % model, infer_body(heldout(1), 1))
            self.assertEqual(r.status, 503, (model, r))

    def test_a_load_request_cannot_name_a_file_outside(self):
        self.assertEqual(self.wait_settled("reload").status, 200)
        for labels, status, reason in (
                ("/etc/passwd", 400, "\"/etc/passwd\" must be a path inside the model's folder"),
                ("../versioned/labels.txt", 400, "must be a path inside the model's folder"),
                ("labels.txt", 400, "cannot open the labels file")):
            body = json.dumps({"parameters": {"config": json.dumps(
                digits_config("reload", labels))}})
            r = post(self.srv.port, "/v2/repository/models/reload/load", body)
            self.assertEqual(r.status, status, (labels, r))
            self.assertIn(reason, r.json()["error"], labels)
        # The copy loaded at start serves on, without labels.
        r = post(self.srv.port, "/v2/models/reload/infer", infer_body(heldout(1), 1))
        self.assertEqual(r.status, 200, r)
        self.assertRegex(r.json()["outputs"][0]["data"][0], r"^\d\.\d{6}:\d$")


if __name__ == "__main__":
    unittest.main()
