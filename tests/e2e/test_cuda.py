"""test_cuda.py - the digits model served on the cuda backend: held-out
accuracy over HTTP with concurrent clients, and agreement with the cpu
backend on the same rows.
Skips, saying why, when this binary has no usable GPU."""

import json
import os
import re
import shutil
import tempfile
import threading
import unittest

from harness import RepoServerCase, Server, run_cli
from test_infer import DIGITS, infer_body, post


def cuda_status():
    code, out, _ = run_cli(["--version"])
    text = out if isinstance(out, str) else out.decode()
    m = re.search(r"cuda: (.*)", text)
    return m.group(1) if m else "no cuda line in --version"


CUDA = cuda_status()


@unittest.skipUnless(re.search(r"\d+ CUDA device", CUDA), "no usable GPU: " + CUDA)
class CudaDigitsTest(RepoServerCase):
    @classmethod
    def populate(cls, repo):
        with open(os.path.join(DIGITS, "config.json")) as f:
            cfg = json.load(f)
        for name, backend in (("digits_cuda", "cuda"), ("digits_cpu", "cpu")):
            os.makedirs(os.path.join(repo, name))
            shutil.copy(os.path.join(DIGITS, "model.safetensors"), os.path.join(repo, name))
            c = dict(cfg, name=name, backend=backend)
            with open(os.path.join(repo, name, "config.json"), "w") as f:
                json.dump(c, f)
        with open(os.path.join(DIGITS, "heldout.json")) as f:
            cls.heldout = json.load(f)

    def test_loaded_on_cuda(self):
        self.assertRegex(self.srv.log(), r"model digits_cuda: loaded on cuda")

    def test_accuracy_and_agreement_with_cpu(self):
        inputs, labels = self.heldout["inputs"], self.heldout["labels"]
        preds, errors = [None] * len(inputs), []

        def client(k):
            for i in range(k, len(inputs), 8):
                r = post(self.srv.port, "/v2/models/digits_cuda/infer", infer_body([inputs[i]]))
                if r.status != 200:
                    errors.append((i, r.status))
                    continue
                p = r.json()["outputs"][0]["data"]
                preds[i] = max(range(10), key=lambda j: p[j])

        threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertFalse(errors)
        acc = sum(p == l for p, l in zip(preds, labels)) / len(labels)
        self.assertGreaterEqual(acc, 0.95, "held-out accuracy on the cuda backend")
        rows = inputs[:64]
        g = post(self.srv.port, "/v2/models/digits_cuda/infer", infer_body(rows)).json()
        c = post(self.srv.port, "/v2/models/digits_cpu/infer", infer_body(rows)).json()
        for a, b in zip(g["outputs"][0]["data"], c["outputs"][0]["data"]):
            self.assertAlmostEqual(a, b, delta=1e-5, msg="cuda and cpu backends agree")


if __name__ == "__main__":
    unittest.main()
