"""test_cuda.py - the digits model served on the cuda backend: held-out
accuracy over HTTP with concurrent clients, and agreement with the cpu
backend on the same rows; a BERT encoder (scripts/gen-tiny-bert's, made by
`scripts/gpu-check --prepare` or here when numpy is at hand) on the cuda
backend (BF16 dense layers) against the cpu backend: cosine >= 0.999.
Skips, saying why, when this binary has no usable GPU."""

import json
import os
import re
import shutil
import tempfile
import threading
import unittest

from harness import RepoServerCase, run_cli
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
            for f in ("model.safetensors", "labels.txt"):   # config.json names labels.txt
                shutil.copy(os.path.join(DIGITS, f), os.path.join(repo, name))
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


def tiny_bert():
    """A tiny BERT folder: the one gpu-check --prepare carried, else made now."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    carried = os.path.join(root, "build-gpu", "tiny-bert")
    if os.path.exists(os.path.join(carried, "model.safetensors")):
        return carried
    out = os.path.join(tempfile.mkdtemp(prefix="batchgate-tinybert-"), "tiny")
    import subprocess
    p = subprocess.run([os.path.join(root, "scripts", "gen-tiny-bert"), out, "--max-seq", "64",
                        "--hidden", "128", "--heads", "4", "--intermediate", "256"],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise unittest.SkipTest("no tiny BERT: gen-tiny-bert failed (%s)" % p.stderr[-200:])
    return out


@unittest.skipUnless(re.search(r"\d+ CUDA device", CUDA), "no usable GPU: " + CUDA)
class CudaEncoderTest(RepoServerCase):
    @classmethod
    def populate(cls, repo):
        src = tiny_bert()
        for name, backend in (("enc_cuda", "cuda"), ("enc_cpu", "cpu")):
            shutil.copytree(src, os.path.join(repo, name))
            with open(os.path.join(repo, name, "batchgate.json"), "w") as f:
                json.dump({"backend": backend}, f)

    def test_bf16_encoder_agrees_with_cpu(self):
        self.assertRegex(self.srv.log(), r"model enc_cuda: loaded on cuda")
        texts = ["hello world", "", "the quick brown fox jumps over the lazy dog " * 8,
                 "Café déjà vu 北京 😀", "a b c d e f g"] * 8
        got = {}
        for name in ("enc_cuda", "enc_cpu"):
            r = post(self.srv.port, "/v1/embeddings",
                     json.dumps({"model": name, "input": texts}).encode())
            self.assertEqual(r.status, 200, r.body[:300])
            got[name] = [d["embedding"] for d in r.json()["data"]]
        for a, b in zip(got["enc_cuda"], got["enc_cpu"]):
            dot = sum(x * y for x, y in zip(a, b))
            cos = dot / (sum(x * x for x in a) * sum(y * y for y in b)) ** 0.5
            self.assertGreaterEqual(cos, 0.999, "BF16 on the GPU against F32 on the CPU")


if __name__ == "__main__":
    unittest.main()
