"""test_infer.py - the inference path end to end: the bundled digits model
over KServe v2 (JSON and binary) and TF-Serving, batching with concurrent
clients, every 400 path, 404/429/503, bad models next to good ones, and
client disconnects and drains with requests queued.

A temporary model repository holds a copy of models/digits, synthetic models
with known costs, and broken models written here (safetensors files are
produced with the standard library)."""

import json
import re
import os
import shutil
import socket
import struct
import tempfile
import threading
import time
import unittest

from harness import (RepoServerCase, Server, close_quietly, connect, expect_eof, read_response,
                     request, roundtrip, send)

HERE = os.path.dirname(os.path.abspath(__file__))
DIGITS = os.path.normpath(os.path.join(HERE, "..", "..", "models", "digits"))


def write_safetensors(path, tensors):
    """tensors: {name: (shape, [floats])} written as F32."""
    header, blobs, off = {}, [], 0
    for name, (shape, values) in tensors.items():
        blob = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def write_model(repo, name, config, tensors=None, raw_weights=None):
    d = os.path.join(repo, name)
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(config if isinstance(config, str) else json.dumps(config))
    if tensors is not None:
        write_safetensors(os.path.join(d, "model.safetensors"), tensors)
    if raw_weights is not None:
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(raw_weights)


def synthetic(name, **batching):
    b = {"max_batch_size": 8, "max_queue_delay_us": 2000}
    b.update(batching.pop("batching", {}))
    cfg = {"name": name, "backend": "synthetic",
           "inputs": [{"name": "x", "datatype": "FP32", "shape": [4]}],
           "outputs": [{"name": "y", "datatype": "FP32", "shape": [3]}],
           "batching": b, "synthetic": batching}
    return cfg


def mlp(name, layers, in_dim=4, out_dim=2):
    return {"name": name, "backend": "cpu",
            "inputs": [{"name": "input", "datatype": "FP32", "shape": [in_dim]}],
            "outputs": [{"name": "output", "datatype": "FP32", "shape": [out_dim]}],
            "layers": layers}


def infer_body(rows, name="input", datatype="FP32", shape=None, **extra):
    width = len(rows[0])
    body = {"inputs": [{"name": name, "datatype": datatype,
                        "shape": shape or [len(rows), width], "data": rows}]}
    body.update(extra)
    return json.dumps(body)


def post(port, path, body, headers=None, timeout=10.0):
    h = [("Content-Type", "application/json")] + list(headers or [])
    return roundtrip(port, "POST", path, h, body, timeout=timeout)


class InferTest(RepoServerCase):
    @classmethod
    def populate(cls, repo):
        shutil.copytree(DIGITS, os.path.join(repo, "digits"))
        with open(os.path.join(DIGITS, "heldout.json")) as f:
            cls.heldout = json.load(f)
        write_model(repo, "synth", synthetic("synth", base_us=20000, per_row_us=100,
                                             batching={"max_queue_delay_us": 5000}))
        write_model(repo, "tiny", synthetic("tiny", base_us=300000, per_row_us=0,
                                            batching={"max_batch_size": 1,
                                                      "max_queue_size": 2}))
        # A model whose answer is easy to check: y = relu(W x + b), W = [[1,0,0,0],[0,0,0,2]].
        write_model(repo, "lin", mlp("lin", [{"type": "dense", "weight": "w", "bias": "b",
                                              "activation": "relu"}]),
                    {"w": ([2, 4], [1, 0, 0, 0, 0, 0, 0, 2]), "b": ([2], [0.5, -1])})
        write_model(repo, "badbackend", dict(mlp("badbackend", []), backend="tpu"))
        write_model(repo, "noweight", mlp("noweight", [{"type": "dense", "weight": "missing"}]),
                    {"w": ([2, 4], [0] * 8)})
        write_model(repo, "nochain", mlp("nochain", [{"type": "dense", "weight": "w"}]),
                    {"w": ([2, 5], [0] * 10)})
        write_model(repo, "badfile", mlp("badfile", [{"type": "dense", "weight": "w"}]),
                    raw_weights=struct.pack("<Q", 1 << 40) + b"{}")
        write_model(repo, "badjson", "{\"name\": ")
        write_model(repo, "typo", dict(synthetic("typo"), batchng={"max_batch_size": 4}))

    # ---- the digits model

    def test_digits_accuracy_with_concurrent_clients(self):
        inputs, labels = self.heldout["inputs"], self.heldout["labels"]
        before = self.stats("digits")
        preds = [None] * len(inputs)
        errors = []

        def client(k):
            s = connect(self.srv.port)
            try:
                for i in range(k, len(inputs), 16):
                    send(s, request("POST", "/v2/models/digits/infer",
                                    [("Content-Type", "application/json")],
                                    infer_body([inputs[i]], id=str(i))))
                    r = read_response(s, timeout=10)
                    if r.status != 200:
                        errors.append((i, r.status, r.body))
                        continue
                    out = r.json()
                    if out["id"] != str(i):
                        errors.append((i, "id", out["id"]))
                    probs = out["outputs"][0]["data"]
                    preds[i] = max(range(10), key=lambda j: probs[j])
            finally:
                close_quietly(s)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertFalse(errors, "every request answered 200 with its own id: %r" % errors[:5])
        acc = sum(p == l for p, l in zip(preds, labels)) / len(labels)
        self.assertGreaterEqual(acc, 0.95, "held-out accuracy over HTTP")
        after = self.stats("digits")
        self.assertEqual(after["inference_count"] - before["inference_count"], len(inputs),
                         "every row computed exactly once")

    def test_multi_row_matches_single_rows(self):
        rows = self.heldout["inputs"][:5]
        r = post(self.srv.port, "/v2/models/digits/infer", infer_body(rows))
        self.assertEqual(r.status, 200, r)
        out = r.json()["outputs"][0]
        self.assertEqual(out["shape"], [5, 10])
        for i, row in enumerate(rows):
            one = post(self.srv.port, "/v2/models/digits/infer", infer_body([row])).json()
            single = one["outputs"][0]["data"]
            for a, b in zip(out["data"][i * 10:(i + 1) * 10], single):
                self.assertAlmostEqual(a, b, places=6, msg="row %d batched vs alone" % i)

    def test_nested_data_and_versions_path(self):
        row = self.heldout["inputs"][0]
        nested = [row[i:i + 8] for i in range(0, 64, 8)]
        body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64],
                                       "data": [nested]}]})
        r = post(self.srv.port, "/v2/models/digits/versions/1/infer", body)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["model_version"], "1")
        r = post(self.srv.port, "/v2/models/digits/versions/2/infer", body)
        self.assertEqual(r.status, 404, "unknown version")

    def test_binary_extension(self):
        row = self.heldout["inputs"][0]
        header = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64],
                                         "parameters": {"binary_data_size": 256}}],
                             "outputs": [{"name": "output",
                                          "parameters": {"binary_data": True}}]}).encode()
        body = header + struct.pack("<64f", *row)
        r = post(self.srv.port, "/v2/models/digits/infer", body,
                 [("Inference-Header-Content-Length", str(len(header)))])
        self.assertEqual(r.status, 200, r)
        jl = int(r.headers["Inference-Header-Content-Length"])
        meta = json.loads(r.body[:jl])
        self.assertEqual(meta["outputs"][0]["parameters"]["binary_data_size"], 40)
        probs = struct.unpack("<10f", r.body[jl:])
        ref = post(self.srv.port, "/v2/models/digits/infer", infer_body([row])).json()
        for a, b in zip(probs, ref["outputs"][0]["data"]):
            self.assertAlmostEqual(a, b, places=6)
        # The header's errors, each saying what is wrong with it.
        for value, mention in (("abc", "not a length"), ("+143", "not a length"),
                               ("1e2", "not a length"), ("-1", "not a length"),
                               ("99999999999999999999999", "not a length"),
                               (str(len(body) + 1), "larger than the body"),
                               ("0", "never empty")):
            r = post(self.srv.port, "/v2/models/digits/infer", body,
                     [("Inference-Header-Content-Length", value)])
            self.assertEqual(r.status, 400, (value, r))
            self.assertIn("Inference-Header-Content-Length", r.json()["error"], value)
            self.assertIn(mention, r.json()["error"], value)
        # Whitespace around the value is not part of it (RFC 9110 5.5); the
        # header twice is refused, whichever value is right.
        r = post(self.srv.port, "/v2/models/digits/infer", body,
                 [("Inference-Header-Content-Length", "%d \t" % len(header)),
                  ("X-Priority", "2 "), ("X-Request-Timeout-Ms", "5000\t")])
        self.assertEqual(r.status, 200, r)
        for name, values in (("Inference-Header-Content-Length", (str(len(header)), "5")),
                             ("X-Priority", ("2", "2")), ("X-Request-Timeout-Ms", ("9", "9"))):
            hs = [(name, v) for v in values]
            if name != "Inference-Header-Content-Length":
                hs.append(("Inference-Header-Content-Length", str(len(header))))
            r = post(self.srv.port, "/v2/models/digits/infer", body, hs)
            self.assertEqual(r.status, 400, (name, r))
            self.assertIn(name, r.json()["error"])
            self.assertIn("one", r.json()["error"])
        r = post(self.srv.port, "/v2/models/digits/infer", body)   # no header
        self.assertEqual(r.status, 400, r)
        self.assertIn("need the Inference-Header-Content-Length header", r.json()["error"])
        both = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64],
                                       "data": row, "parameters": {"binary_data_size": 256}}]})
        r = post(self.srv.port, "/v2/models/digits/infer", both.encode() + body[len(header):],
                 [("Inference-Header-Content-Length", str(len(both)))])
        self.assertEqual(r.status, 400, r)
        self.assertIn("inputs[0].data: given with parameters.binary_data_size", r.json()["error"])
        # Binary numbers are finite too, as JSON's must be (a NaN went on
        # to an upstream server as null and failed its whole batch).
        for bad, word in ((float("nan"), "NaN"), (float("-inf"), "infinite")):
            vals = list(row)
            vals[5] = bad
            r = post(self.srv.port, "/v2/models/digits/infer",
                     header + struct.pack("<64f", *vals),
                     [("Inference-Header-Content-Length", str(len(header)))])
            self.assertEqual(r.status, 400, r)
            self.assertIn("inputs[0].binary data: element 5 is %s" % word, r.json()["error"])

    def test_largest_fp32_reads_back(self):
        # FLT_MAX as 9 digits (3.40282347e+38, what answers print) or as
        # numpy's shortest form rounds to FLT_MAX: finite, accepted. Half
        # an ulp above it rounds to infinity: refused.
        row = [0.0] * 64
        for text in ("3.40282347e+38", "3.4028235e38", "-3.4028235677973362e38"):
            body = infer_body([row]).replace("[0.0,", "[%s," % text, 1)
            self.assertIn(text, body)
            r = post(self.srv.port, "/v2/models/digits/infer", body)
            self.assertEqual(r.status, 200, (text, r))
        body = infer_body([row]).replace("[0.0,", "[3.4028235677973366e38,", 1)
        r = post(self.srv.port, "/v2/models/digits/infer", body)
        self.assertEqual(r.status, 400, r)
        self.assertIn("element 0", r.json()["error"])
        self.assertIn("out of FP32 range", r.json()["error"])

    def test_tfs_predict(self):
        rows = self.heldout["inputs"][:3]
        r = post(self.srv.port, "/v1/models/digits:predict", json.dumps({"instances": rows}))
        self.assertEqual(r.status, 200, r)
        preds = r.json()["predictions"]
        self.assertEqual(len(preds), 3)
        self.assertEqual([max(range(10), key=lambda j: p[j]) for p in preds],
                         self.heldout["labels"][:3])
        r = post(self.srv.port, "/v1/models/digits:classify", json.dumps({"instances": rows}))
        self.assertEqual(r.status, 404)
        r = post(self.srv.port, "/v1/models/digits:predict", json.dumps({"instances": [[1, 2]]}))
        self.assertEqual(r.status, 400)
        self.assertIn("instances[0]", r.json()["error"])
        # A row nested other than the input's shape ([64]) is refused, not
        # read as its numbers in order (it was 200: a scrambled input).
        square = [[row[i * 8:(i + 1) * 8] for i in range(8)] for row in rows]
        r = post(self.srv.port, "/v1/models/digits:predict", json.dumps({"instances": square}))
        self.assertEqual(r.status, 400, r)
        self.assertIn("instances[0]: a list of 8 where the row shape [64] of input",
                      r.json()["error"])
        # numpy's nan, as json.dumps writes it: the message says what is wrong.
        r = post(self.srv.port, "/v1/models/digits:predict",
                 json.dumps({"instances": [[float("nan")] + rows[0][1:]]}))
        self.assertEqual(r.status, 400, r)
        self.assertIn("NaN and Infinity are not JSON numbers", r.json()["error"])
        # %-escapes in the path are decoded, as TF Serving decodes them (the
        # name "dig%69ts" was an unknown model); one that does not decode is
        # 400 naming the capture.
        for path in ("/v1/models/dig%69ts:predict", "/v1/models/digits%3Apredict",
                     "/v1/models/digits/versions/%31:predict"):
            r = post(self.srv.port, path, json.dumps({"instances": rows}))
            self.assertEqual((r.status, r.json()), (200, {"predictions": preds}), (path, r))
        r = post(self.srv.port, "/v2/models/dig%69ts/infer", infer_body(rows))
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["model_name"], "digits")
        for path in ("/v2/models/dig%zzts/infer", "/v2/models/dig%00ts/infer",
                     "/v2/models/digits%/infer"):
            r = post(self.srv.port, path, infer_body(rows))
            self.assertEqual(r.status, 400, (path, r))
            self.assertIn("{model} in the path: a malformed %-escape", r.json()["error"])
        # The room for decoded captures is 1024 bytes: past it, 400 too.
        r = post(self.srv.port, "/v2/models/%s/infer" % ("%61" * 1025), infer_body(rows))
        self.assertEqual(r.status, 400, r)
        self.assertIn("longer than 1024 bytes decoded", r.json()["error"])
        r = post(self.srv.port, "/v2/models/dig%2Fits/infer", infer_body(rows))
        self.assertEqual(r.status, 404, r)   # a '/' decoded is in no model's name
        # "" is the default signature, as in TF Serving.
        r = post(self.srv.port, "/v1/models/digits:predict",
                 json.dumps({"signature_name": "", "instances": rows}))
        self.assertEqual((r.status, r.json()), (200, {"predictions": preds}), r)
        # The model's status, TF Serving's GET (the URL OpenAI's model shares).
        st = json.loads(roundtrip(self.srv.port, "GET", "/v1/models/digits").body)
        self.assertEqual(st["model_version_status"], [{"version": "1", "state": "AVAILABLE",
                                                       "status": {"error_code": "OK",
                                                                  "error_message": ""}}])
        self.assertEqual(st["id"], "digits")
        # One version's status (it was 405 naming POST, the predict route's).
        r = roundtrip(self.srv.port, "GET", "/v1/models/digits/versions/1")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json(), {"model_version_status": st["model_version_status"]})
        # Leading zeros are read as TF Serving reads them (an int64): "01"
        # is version 1 (it was 404).
        r = roundtrip(self.srv.port, "GET", "/v1/models/digits/versions/01")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json(), {"model_version_status": st["model_version_status"]})
        for path in ("/v1/models/digits/versions/2", "/v1/models/digits/versions/+1",
                     "/v1/models/digits/versions/0", "/v1/models/nope/versions/1"):
            r = roundtrip(self.srv.port, "GET", path)
            self.assertEqual(r.status, 404, (path, r))
            self.assertIsInstance(r.json()["error"], str, r)   # TF Serving's shape
        # TF Serving's metadata: the signature :predict serves.
        want = {"model_spec": {"name": "digits", "signature_name": "", "version": "1"},
                "metadata": {"signature_def": {"signature_def": {"serving_default": {
                    "inputs": {"input": {"dtype": "DT_FLOAT", "tensor_shape": {
                        "dim": [{"size": "-1", "name": ""}, {"size": "64", "name": ""}],
                        "unknown_rank": False}, "name": "input"}},
                    "outputs": {"output": {"dtype": "DT_FLOAT", "tensor_shape": {
                        "dim": [{"size": "-1", "name": ""}, {"size": "10", "name": ""}],
                        "unknown_rank": False}, "name": "output"}},
                    "method_name": "tensorflow/serving/predict"}}}}}
        for path in ("/v1/models/digits/metadata", "/v1/models/digits/versions/1/metadata"):
            r = roundtrip(self.srv.port, "GET", path)
            self.assertEqual((r.status, r.json()), (200, want), path)
        for path in ("/v1/models/nope/metadata", "/v1/models/digits/versions/2/metadata"):
            r = roundtrip(self.srv.port, "GET", path)
            self.assertEqual(r.status, 404, (path, r))
            self.assertIsInstance(r.json()["error"], str, r)
        # The columnar form: the same rows, answered as "outputs".
        for body in ({"inputs": rows}, {"inputs": {"input": rows}, "signature_name": "serving_default"}):
            r = post(self.srv.port, "/v1/models/digits:predict", json.dumps(body))
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.json(), {"outputs": preds})
        r = post(self.srv.port, "/v1/models/digits:predict", json.dumps({"inputs": rows, "instances": rows}))
        self.assertEqual(r.status, 400)
        self.assertIn("not both", r.json()["error"])

    def test_known_answer(self):
        r = post(self.srv.port, "/v2/models/lin/infer", infer_body([[1, 2, 3, 4], [-3, 0, 0, 0]]))
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["outputs"][0]["data"], [1.5, 7, 0, 0])

    def test_compressed_request_bodies(self):
        import gzip
        import zlib
        body = infer_body([[1, 2, 3, 4], [-3, 0, 0, 0]]).encode()
        raw = zlib.compressobj(9, zlib.DEFLATED, -15)
        for enc, data in (("gzip", gzip.compress(body)), ("deflate", zlib.compress(body)),
                          ("deflate", raw.compress(body) + raw.flush())):
            r = post(self.srv.port, "/v2/models/lin/infer", data, [("Content-Encoding", enc)])
            self.assertEqual(r.status, 200, (enc, r))
            self.assertEqual(r.json()["outputs"][0]["data"], [1.5, 7, 0, 0])
        # 64 MiB + 1 zero bytes in ~64 KiB: past limits.max_body_bytes once inflated.
        bomb = gzip.compress(b"0" * ((64 << 20) + 1), 9)
        self.assertLess(len(bomb), 200000)
        r = post(self.srv.port, "/v2/models/lin/infer", bomb, [("Content-Encoding", "gzip")])
        self.assertEqual(r.status, 413, r)
        self.assertIn("inflates to more than limits.max_body_bytes", r.json()["error"])
        for enc, data, status, msg in (("gzip", gzip.compress(body)[:-9], 400, "not valid gzip"),
                                       ("gzip", body, 400, "no gzip header"),
                                       ("br", body, 415, "\"br\" is not served")):
            r = post(self.srv.port, "/v2/models/lin/infer", data, [("Content-Encoding", enc)])
            self.assertEqual(r.status, status, (enc, r))
            self.assertIn(msg, r.json()["error"])
        # Two fields are one list of two codings, as "gzip, gzip" is: only
        # the first was undone (twice gzipped: 400 not JSON; "gzip" then
        # "identity": 200, which a proxy undoing both read otherwise).
        twice = gzip.compress(gzip.compress(body))
        for codings, data in ((("gzip", "gzip"), twice), (("identity", "gzip"), gzip.compress(body)),
                              (("gzip", "identity"), gzip.compress(body))):
            r = post(self.srv.port, "/v2/models/lin/infer", data,
                     [("Content-Encoding", c) for c in codings])
            self.assertEqual(r.status, 415, (codings, r))
            self.assertIn("given in 2 fields", r.json()["error"])
        # No content, nothing to decode (GET /v2 with a Content-Encoding was 400).
        r = roundtrip(self.srv.port, "GET", "/v2", [("Content-Encoding", "gzip")])
        self.assertEqual(r.status, 200, r)
        # The server is fine after all of that.
        r = post(self.srv.port, "/v2/models/lin/infer", body)
        self.assertEqual(r.status, 200)

    # ---- metadata

    def test_metadata_ready_config(self):
        m = roundtrip(self.srv.port, "GET", "/v2/models/digits").json()
        self.assertEqual(m["inputs"][0]["shape"], [-1, 64])
        self.assertEqual(m["outputs"][0]["shape"], [-1, 10])
        self.assertEqual(m["versions"], ["1"])
        self.assertEqual(roundtrip(self.srv.port, "GET", "/v2/models/digits/ready").status, 200)
        c = roundtrip(self.srv.port, "GET", "/v2/models/digits/config").json()
        self.assertEqual(c["max_batch_size"], 64)
        self.assertEqual(c["input"][0]["data_type"], "TYPE_FP32")
        self.assertEqual(c["input"][0]["dims"], [64])
        self.assertIn("max_queue_delay_microseconds", c["dynamic_batching"])

    def test_unknown_model_404(self):
        for path in ("/v2/models/nope", "/v2/models/nope/ready", "/v2/models/nope/config"):
            r = roundtrip(self.srv.port, "GET", path)
            self.assertEqual(r.status, 404, path)
            self.assertIn("nope", r.json()["error"])
        r = post(self.srv.port, "/v2/models/nope/infer", infer_body([[1]]))
        self.assertEqual(r.status, 404)

    # ---- errors

    def test_every_400_names_the_problem(self):
        row = self.heldout["inputs"][0]
        cases = [
            ("{", "invalid JSON"),
            ("[]", "object"),
            (json.dumps({"inputs": []}), "inputs"),
            (infer_body([row], name="pixels"), "no input \"pixels\""),
            (infer_body([row], datatype="INT32"), "datatype"),
            (infer_body([row], shape=[1, 63]), "shape[1]"),
            (infer_body([row], shape=[1, 8, 8]), "shape"),
            (infer_body([row[:63]], shape=[1, 64]), "63 numbers"),
            (infer_body([row] * 65), "1 to 64"),
            (infer_body([row], outputs=[{"name": "probs"}]), "outputs[0].name"),
            (json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64],
                                     "data": ["x"] * 64}]}), "element 0"),
        ]
        for body, mention in cases:
            r = post(self.srv.port, "/v2/models/digits/infer", body)
            self.assertEqual(r.status, 400, "%s -> %r" % (body[:80], r))
            self.assertIn(mention, r.json()["error"], body[:80])
        r = post(self.srv.port, "/v2/models/digits/infer", "{}",
                 [("Inference-Header-Content-Length", "abc")])
        self.assertEqual(r.status, 400)

    def test_queue_full_429(self):
        # tiny: one 300 ms request at a time, at most 2 queued.
        results = []

        def one():
            results.append(post(self.srv.port, "/v2/models/tiny/infer",
                                infer_body([[1, 2, 3, 4]], name="x"), timeout=10))

        threads = [threading.Thread(target=one) for _ in range(6)]
        for t in threads:
            t.start()
            time.sleep(0.02)
        for t in threads:
            t.join(15)
        codes = sorted(r.status for r in results)
        self.assertIn(429, codes, "expected some requests refused: %r" % codes)
        self.assertIn(200, codes)
        for r in results:
            if r.status == 429:
                self.assertEqual(r.headers["Retry-After"], "1")
                self.assertIn("queue full", r.json()["error"])
            else:
                self.assertEqual(r.json()["outputs"][0]["data"], [10, 11, 12])

    def test_queue_full_refused_before_the_body(self):
        # Expect: 100-continue: a request its full queue would refuse gets
        # the 429 in place of the 100 (it was asked for its body first).
        threads = [threading.Thread(target=post, args=(
            self.srv.port, "/v2/models/tiny/infer", infer_body([[1, 2, 3, 4]], name="x")),
            kwargs={"timeout": 10}) for _ in range(5)]
        for t in threads:
            t.start()
        seen = []
        deadline = time.monotonic() + 3
        while not seen and time.monotonic() < deadline:
            s = connect(self.srv.port)
            try:
                send(s, request("POST", "/v2/models/tiny/infer",
                                [("Expect", "100-continue"), ("Content-Length", "100000")]))
                r = read_response(s, timeout=3)
                if r.status != 100:
                    seen.append(r)
            finally:
                close_quietly(s)
            time.sleep(0.01)
        for t in threads:
            t.join(15)
        self.assertTrue(seen, "the queue was never seen full")
        self.assertEqual(seen[0].status, 429, seen[0])
        self.assertIn("queue full", seen[0].json()["error"])

    def test_bad_models_reported_not_ready(self):
        expect = {"badbackend": "backend", "noweight": "missing", "nochain": "chain",
                  "badfile": "model.safetensors", "badjson": "invalid JSON",
                  "typo": 'batchng: unknown field; did you mean "batching"?'}
        for name, mention in expect.items():
            r = roundtrip(self.srv.port, "GET", "/v2/models/%s/ready" % name)
            self.assertEqual(r.status, 503, name)
            self.assertIn(mention, r.json()["reason"], name)
            r = post(self.srv.port, "/v2/models/%s/infer" % name, infer_body([[1, 2, 3, 4]]))
            self.assertEqual(r.status, 503, name)
        r = roundtrip(self.srv.port, "GET", "/v2/health/ready")
        self.assertEqual(r.status, 503, "not every model is ready")
        self.assertFalse(r.json()["ready"])
        self.assertRegex(r.json()["reason"], r"^model (%s) is not ready$" % "|".join(expect), r)
        self.assertEqual(roundtrip(self.srv.port, "GET", "/v2/models/digits/ready").status, 200)
        for name in expect:   # once each (a weights file's error was logged twice)
            self.assertEqual(self.srv.log().count("model %s: not loaded" % name), 1, name)

    # ---- batching

    def test_concurrent_requests_form_batches(self):
        # 32 single rows at once on a model that takes 20 ms per batch of <= 8:
        # served one by one they would need 32 batches.
        before = self.stats("synth")
        results = []

        def one(i):
            results.append(post(self.srv.port, "/v2/models/synth/infer",
                                infer_body([[i, 0, 0, 1]], name="x")))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        self.assertEqual([r.status for r in results], [200] * 32)
        for r in results:
            y = r.json()["outputs"][0]["data"]
            self.assertEqual(y[1] - y[0], 1, "synthetic answer is sum(row) + j")
        after = self.stats("synth")
        execs = after["execution_count"] - before["execution_count"]
        rows = after["inference_count"] - before["inference_count"]
        self.assertEqual(rows, 32)
        self.assertLessEqual(execs, 12, "expected batches of several rows, got %d batches" % execs)

    def test_client_gone_while_queued_is_not_computed(self):
        # Fill tiny's single instance, then queue one more and hang up: by
        # a reset, or by an ordinary close (a client that timed out: its
        # FIN left the request to be computed and counted a 200), or by a
        # half-close, which reads as leaving too: the server then closes
        # its side (it kept the connection open, unanswered, until the idle
        # timeout, 60 s).
        for how in ("reset", "close", "half-close"):
            before = self.stats("tiny")
            before_m = self.cancelled()
            blocker = threading.Thread(target=post, args=(self.srv.port, "/v2/models/tiny/infer",
                                                          infer_body([[1, 1, 1, 1]], name="x")))
            blocker.start()
            time.sleep(0.05)
            s = connect(self.srv.port)
            send(s, request("POST", "/v2/models/tiny/infer",
                            [("Content-Type", "application/json")],
                            infer_body([[2, 2, 2, 2]], name="x")))
            time.sleep(0.05)
            if how == "reset":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            elif how == "half-close":
                s.shutdown(socket.SHUT_WR)
                expect_eof(s, 3.0)
            s.close()
            blocker.join(10)
            time.sleep(0.4)
            after = self.stats("tiny")
            self.assertEqual(after["inference_count"] - before["inference_count"], 1,
                             "%s: the abandoned request's row must not be computed" % how)
            self.assertEqual(after["inference_stats"]["success"]["count"] -
                             before["inference_stats"]["success"]["count"], 1, how)
            # Counted as cancelled before its batch (it was counted nowhere),
            # and in Triton's statistics as a failure of reason CANCELED.
            self.assertEqual(after["inference_stats"]["fail"]["count"] -
                             before["inference_stats"]["fail"]["count"], 1, how)
            after_m = self.cancelled()
            self.assertEqual({k: after_m[k] - before_m[k] for k in after_m},
                             {"queued": 1, "computed": 0, "CANCELED": 1}, how)
        self.assertEqual(roundtrip(self.srv.port, "GET", "/v2/health/live").status, 200)

    def test_half_close_drops_a_queued_request_and_what_follows_it(self):
        # Pipelined [live, infer (queued), metadata] then a half-close: the
        # infer is dropped (the FIN reads as leaving); the metadata's answer
        # went out in its place, so a client reading in order took it for
        # the infer's. Now live is answered, then the connection closes.
        blocker = threading.Thread(target=post, args=(self.srv.port, "/v2/models/tiny/infer",
                                                      infer_body([[1, 1, 1, 1]], name="x")))
        blocker.start()
        time.sleep(0.05)
        s = connect(self.srv.port)
        try:
            send(s, request("GET", "/v2/health/live") +
                 request("POST", "/v2/models/tiny/infer", [("Content-Type", "application/json")],
                         infer_body([[2, 2, 2, 2]], name="x")) +
                 request("GET", "/v2/models/tiny"))
            s.shutdown(socket.SHUT_WR)
            r = read_response(s, timeout=5)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.json(), {"live": True})
            expect_eof(s, 3.0)
        finally:
            close_quietly(s)
            blocker.join(10)

    def test_client_gone_while_computed_is_not_counted(self):
        # A reset while its batch runs: the row is computed (the batch had
        # begun), but no answer went out, so no 200 is counted (it was).
        def ok_count():
            text = roundtrip(self.srv.port, "GET", "/metrics").body.decode()
            m = re.search(r'^batchgate_requests_total\{model="tiny",code="200"\} (\S+)$', text,
                          re.M)
            return float(m.group(1)) if m else 0.0
        before = ok_count()
        before_m = self.cancelled()
        s = connect(self.srv.port)
        send(s, request("POST", "/v2/models/tiny/infer", [("Content-Type", "application/json")],
                        infer_body([[3, 3, 3, 3]], name="x")))
        time.sleep(0.1)   # taken into a batch of 300 ms
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        time.sleep(0.5)
        self.assertEqual(ok_count(), before)
        # Counted as computed for nobody (it was counted nowhere).
        after_m = self.cancelled()
        self.assertEqual({k: after_m[k] - before_m[k] for k in after_m},
                         {"queued": 0, "computed": 1, "CANCELED": 1})
        self.assertEqual(post(self.srv.port, "/v2/models/tiny/infer",
                              infer_body([[1, 1, 1, 1]], name="x")).status, 200)
        self.assertEqual(ok_count(), before + 1)

    def cancelled(self):
        """tiny's requests_cancelled_total by stage, and Triton's CANCELED."""
        text = roundtrip(self.srv.port, "GET", "/metrics").body.decode()
        out = {}
        for stage in ("queued", "computed"):
            m = re.search(r'^batchgate_requests_cancelled_total\{model="tiny",stage="%s"\} '
                          r'(\S+)$' % stage, text, re.M)
            out[stage] = float(m.group(1)) if m else None
        m = re.search(r'^nv_inference_request_failure\{[^}]*model="tiny"[^}]*reason="CANCELED"'
                      r'[^}]*\} (\S+)$', text, re.M)
        out["CANCELED"] = float(m.group(1)) if m else None
        return out

    def stats(self, model):
        r = roundtrip(self.srv.port, "GET", "/v2/models/%s/stats" % model)
        self.assertEqual(r.status, 200, r)
        return r.json()["model_stats"][0]


class LongModelNameTest(unittest.TestCase):
    def test_a_name_longer_than_any_is_no_models(self):
        # TF Serving's status and a version's status looked the name up cut
        # to 127 bytes: a model named by the first 127 answered 200
        # AVAILABLE for a longer name (the TF Serving audit).
        repo = tempfile.mkdtemp(prefix="batchgate-repo-")
        name = "n" * 127
        try:
            write_model(repo, name, synthetic(name, base_us=100, per_row_us=0))
            srv = Server({"model_repository": repo})
            try:
                srv.wait_log(r"ready in", timeout=30)
                self.assertEqual(roundtrip(srv.port, "GET", "/v1/models/" + name).status, 200)
                for path in ("/v1/models/%sZZ" % name, "/v1/models/%sZZ/versions/1" % name):
                    r = roundtrip(srv.port, "GET", path)
                    self.assertEqual(r.status, 404, (path, r.body))
            finally:
                srv.stop_checked()
        finally:
            shutil.rmtree(repo, ignore_errors=True)


class DrainWithQueuedInferenceTest(unittest.TestCase):
    def test_sigterm_answers_queued_requests(self):
        repo = tempfile.mkdtemp(prefix="batchgate-repo-")
        try:
            write_model(repo, "slow", synthetic("slow", base_us=100000, per_row_us=0,
                                                batching={"max_batch_size": 2}))
            srv = Server({"model_repository": repo}, io_threads=2)
            srv.wait_log(r"ready in", timeout=10)
            socks = []
            for i in range(6):
                s = connect(srv.port)
                send(s, request("POST", "/v2/models/slow/infer",
                                [("Content-Type", "application/json")],
                                infer_body([[i, 0, 0, 0]], name="x")))
                socks.append(s)
            time.sleep(0.05)
            srv.send_signal(15)
            for i, s in enumerate(socks):
                r = read_response(s, timeout=10)
                self.assertEqual(r.status, 200, "queued request %d answered during the drain" % i)
                self.assertEqual(r.json()["outputs"][0]["data"][0], i)
                close_quietly(s)
            self.assertEqual(srv.wait(10), 0)
        finally:
            shutil.rmtree(repo, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
