"""test_embeddings.py - encoder models (docs/EMBEDDINGS.md): a Hugging Face
BERT folder served as it is, on the small random model scripts/gen-tiny-bert
makes (CI's) and, where scripts/get-model and scripts/fetch-reference have
put them in the cache, the real all-MiniLM-L6-v2 against sentence-transformers.

  - OpenAI's /v1/embeddings, TEI's /embed and KServe v2 (BYTES input as JSON
    strings and as the binary extension's length-prefixed elements) against
    a numpy BERT (bert_ref.py, float64) on texts of every kind, for mean, CLS
    and max pooling, with and without Normalize; token-id inputs and base64
    answers against text and float ones; usage counts the tokens;
  - every error path of docs/EMBEDDINGS.md, with its status and, on the
    OpenAI route, OpenAI's error shape (`param` naming the field);
  - an offline job of text lines (the night's corpus embedding);
  - MiniLM on 1,000 sentences (tests/data/sentences.py): cosine >= 0.9999
    against sentence-transformers, which is skipped, saying what to run,
    when the reference venv or the model is missing."""

import base64
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest

from harness import (HERE, Server, close_quietly, connect, minilm_folder, read_response,
                     reference_python, roundtrip, run_testdeps, send,
                     sanitizer_build)

ROOT = os.path.dirname(os.path.dirname(HERE))
GEN = os.path.join(ROOT, "scripts", "gen-tiny-bert")
sys.path.insert(0, os.path.join(ROOT, "tests", "data"))

MAX_SEQ = 24   # the tiny models' max_seq_length: long texts are cut

TEXTS = [
    "hello world",
    "The quick brown fox jumps over the lazy dog.",
    "",
    "   ",
    "Café crème brûlée, déjà vu!",
    "naïve résumé — Ångström",
    "北京 and 東京 are cities",
    "emoji 😀 and 👍🏽 here",
    "tab\tseparated\nlines\rand\x07controls",
    "a" * 150,
    "punctuation!!! ??? ... ,,, ;;; ---",
    "numbers 123 456.789 1e10",
    "UPPER lower MiXeD",
    "the " * 40,
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen",
]


def post(port, path, obj, headers=None, raw=None):
    body = raw if raw is not None else json.dumps(obj).encode()
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    return roundtrip(port, "POST", path, h, body, timeout=30)


def cosine(a, b):
    d = sum(x * y for x, y in zip(a, b))
    return d / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def norm(a):
    return math.sqrt(sum(x * x for x in a))


def gen(folder, *args):
    subprocess.run([GEN, folder] + list(args), check=True, timeout=120,
                   stdout=subprocess.DEVNULL)


def reference(folder, items, tmp):
    """bert_ref.py's vectors and token counts for items (texts or id lists)."""
    path = os.path.join(tmp, "ref-in.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for it in items:
            f.write(json.dumps(it) + "\n")
    rc, out = run_testdeps([os.path.join(HERE, "bert_ref.py"), folder, path], timeout=120)
    if rc != 0:
        raise AssertionError("bert_ref.py failed:\n" + out)
    return json.loads(out[out.index("{"):])


class EncoderRepoCase(unittest.TestCase):
    """One server over a repository its subclass writes (populate)."""
    io_threads = 2

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="batchgate-embed-")
        cls.repo = os.path.join(cls.tmp, "repo")
        os.makedirs(cls.repo)
        cls.populate(cls.repo)
        cls.srv = Server({"model_repository": cls.repo, "state_dir": os.path.join(cls.tmp, "st")},
                         io_threads=cls.io_threads)
        cls.srv.wait_log(r"ready in", timeout=60)
        cls.port = cls.srv.port

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)


class TinyCase(EncoderRepoCase):
    """One server over four small random encoders and the digits MLP."""

    @classmethod
    def populate(cls, repo):
        ms = str(MAX_SEQ)
        gen(os.path.join(cls.repo, "tiny"), "--seed", "1", "--max-seq", ms)
        gen(os.path.join(cls.repo, "tinycls"), "--seed", "2", "--max-seq", ms, "--pooling", "cls",
            "--no-normalize")
        gen(os.path.join(cls.repo, "tinymax"), "--seed", "3", "--max-seq", ms, "--pooling", "max",
            "--prefixed")
        with open(os.path.join(cls.repo, "tiny", "batchgate.json"), "w") as f:
            json.dump({"batching": {"max_batch_size": 8}, "instances": {"threads": 2}}, f)
        cap = os.path.join(cls.repo, "tinycap")
        gen(cap, "--seed", "6", "--max-seq", ms)
        with open(os.path.join(cap, "batchgate.json"), "w") as f:
            json.dump({"batching": {"max_batch_tokens": 30}}, f)
        badcap = os.path.join(cls.repo, "badcap")
        gen(badcap, "--seed", "7", "--max-seq", ms)
        with open(os.path.join(badcap, "batchgate.json"), "w") as f:
            json.dump({"batching": {"max_batch_tokens": 10}}, f)
        bad = os.path.join(cls.repo, "badenc")
        gen(bad, "--seed", "4")
        with open(os.path.join(bad, "batchgate.json"), "w") as f:
            json.dump({"inputs": [{"name": "x", "shape": [3]}]}, f)
        # Weights that are not the config's: intermediate_size says 256, the file 128.
        shape = os.path.join(cls.repo, "badshape")
        gen(shape, "--seed", "5")
        with open(os.path.join(shape, "config.json")) as f:
            c = json.load(f)
        c["intermediate_size"] = 256
        with open(os.path.join(shape, "config.json"), "w") as f:
            json.dump(c, f)
        shutil.copytree(os.path.join(ROOT, "models", "digits"), os.path.join(cls.repo, "digits"))

    def openai(self, model, inputs, **extra):
        body = {"model": model, "input": inputs}
        body.update(extra)
        r = post(self.port, "/v1/embeddings", body)
        self.assertEqual(r.status, 200, r.body[:500])
        return r.json()

    def embed_all(self, model, items, chunk=8):
        out, tokens = [], 0
        for i in range(0, len(items), chunk):
            a = self.openai(model, items[i:i + chunk])
            self.assertEqual([d["index"] for d in a["data"]], list(range(len(a["data"]))))
            out += [d["embedding"] for d in a["data"]]
            tokens += a["usage"]["prompt_tokens"]
            self.assertEqual(a["usage"]["total_tokens"], a["usage"]["prompt_tokens"])
            self.assertEqual(a["object"], "list")
            self.assertEqual(a["model"], model)
        return out, tokens

    def assertClose(self, ours, ref, what):
        self.assertEqual(len(ours), len(ref))
        worst = min(cosine(a, b) for a, b in zip(ours, ref))
        diff = max(abs(x - y) for a, b in zip(ours, ref) for x, y in zip(a, b))
        self.assertGreater(worst, 0.99999, "%s: worst cosine %.9f" % (what, worst))
        self.assertLess(diff, 1e-4, "%s: largest difference %.3g" % (what, diff))


class EmbeddingsTest(TinyCase):
    def test_pooling_and_normalize_match_the_reference(self):
        for model in ("tiny", "tinycls", "tinymax"):
            ours, tokens = self.embed_all(model, TEXTS)
            ref = reference(os.path.join(self.repo, model), TEXTS, self.tmp)
            self.assertClose(ours, ref["vectors"], model)
            self.assertEqual(tokens, sum(ref["tokens"]), "usage.prompt_tokens")
            self.assertIn(MAX_SEQ, ref["tokens"], "some texts must be cut at max_seq_length")
            norms = [norm(v) for v in ours]
            if model == "tinycls":   # no Normalize module: raw pooled vectors
                self.assertTrue(any(abs(n - 1) > 0.01 for n in norms), norms)
            else:
                self.assertTrue(all(abs(n - 1) < 1e-5 for n in norms), norms)

    def test_ids_base64_and_single_input(self):
        ref = reference(os.path.join(self.repo, "tiny"), TEXTS[:2], self.tmp)
        one = self.openai("tiny", TEXTS[0])
        self.assertEqual(len(one["data"]), 1)
        # The ids the tokenizer makes, sent as ids: the same vectors.
        rc, out = run_testdeps(["-c", "import json,sys; from tokenizers import Tokenizer; "
                                "t=Tokenizer.from_file(sys.argv[1]); "
                                "print(json.dumps([t.encode(x).ids for x in sys.argv[2:]]))",
                                os.path.join(self.repo, "tiny", "tokenizer.json")] + TEXTS[:2])
        self.assertEqual(rc, 0, out)
        ids = json.loads(out)
        by_ids = self.openai("tiny", ids)
        by_one_ids = self.openai("tiny", ids[0])
        b64 = self.openai("tiny", TEXTS[:2], encoding_format="base64")
        for i in range(2):
            v = by_ids["data"][i]["embedding"]
            self.assertGreater(cosine(v, ref["vectors"][i]), 0.99999)
            raw = base64.b64decode(b64["data"][i]["embedding"])
            floats = list(struct.unpack("<%df" % (len(raw) // 4), raw))
            self.assertEqual(len(floats), 64)
            self.assertTrue(all(abs(a - b) < 1e-6 for a, b in zip(floats, v)))
        self.assertEqual(by_one_ids["data"][0]["embedding"], by_ids["data"][0]["embedding"])
        self.assertEqual(one["data"][0]["embedding"], by_ids["data"][0]["embedding"])
        self.assertEqual(self.openai("tiny", "x", dimensions=64)["data"][0]["index"], 0)
        self.assertEqual(self.openai("tiny", "x", user="u-1")["data"][0]["index"], 0)

    def test_kserve_json_and_binary_bytes(self):
        ref = self.openai("tiny", TEXTS[:3])["data"]
        body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [3, 1],
                            "data": [[t] for t in TEXTS[:3]]}]}
        r = post(self.port, "/v2/models/tiny/infer", body)
        self.assertEqual(r.status, 200, r.body[:300])
        out = r.json()["outputs"][0]
        self.assertEqual((out["name"], out["datatype"], out["shape"]), ("embedding", "FP32", [3, 64]))
        for i in range(3):
            self.assertTrue(all(abs(a - b) < 1e-6 for a, b in
                                zip(out["data"][i * 64:(i + 1) * 64], ref[i]["embedding"])))
        # The binary extension, both ways.
        elems = b"".join(struct.pack("<I", len(t.encode())) + t.encode() for t in TEXTS[:3])
        hdr = json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [3],
                                      "parameters": {"binary_data_size": len(elems)}}],
                          "outputs": [{"name": "embedding",
                                       "parameters": {"binary_data": True}}]}).encode()
        r = post(self.port, "/v2/models/tiny/infer", None, raw=hdr + elems,
                 headers={"Inference-Header-Content-Length": str(len(hdr)),
                          "Content-Type": "application/octet-stream"})
        self.assertEqual(r.status, 200, r.body[:300])
        jl = int(r.headers["Inference-Header-Content-Length"])
        vals = struct.unpack("<%df" % (3 * 64), r.body[jl:])
        for i in range(3):
            self.assertTrue(all(abs(a - b) < 1e-6 for a, b in
                                zip(vals[i * 64:(i + 1) * 64], ref[i]["embedding"])))
        # Triton's config names the text input TYPE_STRING, metadata BYTES.
        meta = roundtrip(self.port, "GET", "/v2/models/tiny").json()
        self.assertEqual(meta["inputs"], [{"name": "text", "datatype": "BYTES", "shape": [-1, 1]}])
        cfg = roundtrip(self.port, "GET", "/v2/models/tiny/config").json()
        self.assertIn("TYPE_STRING", json.dumps(cfg))

    def test_openai_errors(self):
        long_text = "word " * 100
        cases = [
            # As the chat routes and OpenAI say it (it was "unknown model",
            # param null: the openai client showed two errors for one mistake).
            ({"model": "nope", "input": "x"}, 404, "model", "The model `nope` does not exist"),
            ({"input": "x"}, 400, "model", "model: must be"),
            ({"model": "tiny"}, 400, "input", "input: missing"),
            ({"model": "tiny", "input": []}, 400, "input", "input: must be"),
            ({"model": "tiny", "input": ["a"] * 9}, 400, "input",
             "9 inputs; model tiny takes 1 to 8"),
            ({"model": "tiny", "input": "x", "dimensions": 32}, 400, "dimensions",
             "gives 64 dimensions"),
            ({"model": "tiny", "input": "x", "user": {"id": 7}}, 400, "user",
             "user: must be a string"),
            ({"model": "tiny", "input": "x", "encoding_format": "int8"}, 400, "encoding_format",
             "\"float\" or \"base64\""),
            ({"model": "tiny", "input": [[1, 99999]]}, 400, "input", "outside the model's vocabulary"),
            ({"model": "tiny", "input": [[101], "a"]}, 400, "input",
             "an array of strings or an array of token id arrays, not both (element 1"),
            ({"model": "tiny", "input": long_text, "truncate": False}, 413, "input",
             "input of 102 tokens is longer than the model's maximum of 24"),
            ({"model": "digits", "input": "x"}, 400, "model", "not an embedding model"),
            ({"model": "badenc", "input": "x"}, 503, None, "batchgate.json: inputs"),
        ]
        for body, status, param, msg in cases:
            r = post(self.port, "/v1/embeddings", body)
            self.assertEqual(r.status, status, "%s: %r" % (body, r.body[:300]))
            err = r.json()["error"]
            self.assertIsInstance(err, dict, r.body)   # OpenAI's shape
            self.assertIn(msg, err["message"], body)
            self.assertEqual(err["param"], param, body)
            self.assertIn("type", err)
            self.assertIn("code", err)
        r = post(self.port, "/v1/embeddings", None, raw=b"{not json")
        self.assertEqual(r.status, 400)
        self.assertIn("invalid JSON", r.json()["error"]["message"])
        self.assertIsNone(r.json()["error"]["param"])
        # A token id past 64 bits is valid JSON jansson cannot hold: said so
        # ("invalid JSON: too big integer" blamed the client's encoder).
        r = post(self.port, "/v1/embeddings", None,
                 raw=b'{"model": "tiny", "input": [[101, 18446744073709551621, 102]]}')
        self.assertEqual(r.status, 400, r.body)
        self.assertIn("a number out of range at column 54: valid JSON",
                      r.json()["error"]["message"])
        # A head llhttp refuses is worded for the route too: its path is
        # known once the request line is read.
        for bad in (b"Content-Length: abc\r\n", b"no colon here\r\n"):
            s = connect(self.port)
            send(s, b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n" + bad + b"\r\n")
            r = read_response(s)
            close_quietly(s)
            self.assertEqual(r.status, 400, r)
            err = r.json()["error"]
            self.assertEqual(err["type"], "invalid_request_error", (bad, err))
            self.assertIn("malformed HTTP request", err["message"])
        # "model" twice is one error whichever comes first (the model was
        # looked up by the last one, then the body refused).
        for raw in (b'{"model": "tiny", "model": "nope", "input": "a"}',
                    b'{"model": "nope", "model": "tiny", "input": "a"}'):
            r = post(self.port, "/v1/embeddings", None, raw=raw)
            self.assertEqual(r.status, 400, (raw, r.body))
            self.assertIn("duplicate object key", r.json()["error"]["message"])
        # NUL is text like any other (a control character to the tokenizer).
        self.assertEqual(len(self.openai("tiny", ["a\u0000b"])["data"]), 1)

    def test_other_routes_errors(self):
        # /embed serves the only encoder: here there are six (badshape and badcap among
        # them; badenc's settings did not parse, so it is no model of any kind yet).
        r = post(self.port, "/embed", {"inputs": "x"})
        self.assertEqual(r.status, 400, r.body)
        self.assertIn("there are 6 (", r.json()["error"])
        self.assertIn("tiny", r.json()["error"])
        r = roundtrip(self.port, "GET", "/v2/models/badcap/ready")
        self.assertEqual(r.status, 503)
        self.assertIn("batching.max_batch_tokens: 10 is less than the model's max_seq_length (24)",
                      r.json()["reason"])
        r = post(self.port, "/v1/models/tiny:predict", {"instances": ["x"]})
        self.assertEqual(r.status, 400)
        self.assertIn("takes text", r.json()["error"])
        r = roundtrip(self.port, "GET", "/v1/models/tiny/metadata")   # nor has it a TF signature
        self.assertEqual(r.status, 400)
        self.assertIn("no TF Serving signature: it takes text", r.json()["error"])
        body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["w " * 50]}],
                "parameters": {"truncate": False}}
        r = post(self.port, "/v2/models/tiny/infer", body)
        self.assertEqual(r.status, 413, r.body)
        self.assertIn("longer than the model's maximum of 24", r.json()["error"])
        hdr = json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                      "parameters": {"binary_data_size": 6}}]}).encode()
        r = post(self.port, "/v2/models/tiny/infer", None, raw=hdr + b"\x02\x00\x00\x00\xc3\x28",
                 headers={"Inference-Header-Content-Length": str(len(hdr))})
        self.assertEqual(r.status, 400, r.body)
        self.assertIn("UTF-8", r.json()["error"])
        r = roundtrip(self.port, "GET", "/v2/models/badenc/ready")
        self.assertEqual(r.status, 503)
        self.assertIn("an encoder's tensors and layers come from its Hugging Face folder",
                      r.json()["reason"])
        r = roundtrip(self.port, "GET", "/v2/models/badshape/ready")
        self.assertEqual(r.status, 503)
        self.assertIn("tensor \"encoder.layer.0.intermediate.dense.weight\" is [128, 64], "
                      "config.json says [256, 64]", r.json()["reason"])

    def test_token_budget_and_its_metrics(self):
        # tinycap holds 30 tokens a batch: two texts of 24 tokens cannot ride together.
        ok = self.openai("tinycap", ["the " * 40])
        self.assertEqual(ok["usage"]["prompt_tokens"], 24)
        r = post(self.port, "/v1/embeddings", {"model": "tinycap", "input": ["the " * 40] * 2})
        self.assertEqual(r.status, 413, r.body)
        self.assertIn("the request has 48 tokens, more than a batch may hold "
                      "(batching.max_batch_tokens is 30)", r.json()["error"]["message"])
        self.assertEqual(r.json()["error"]["param"], "input")   # it was null
        # TEI's "Left" is refused on OpenAI's route too (`truncate` is taken
        # on both): it was served silently as "Right".
        r = post(self.port, "/v1/embeddings", {"model": "tinycap", "input": "x",
                                               "truncation_direction": "Left"})
        self.assertEqual(r.status, 400, r.body)
        self.assertEqual(r.json()["error"]["param"], "truncation_direction")
        # Counted as what it is, not as a bad request.
        text = roundtrip(self.port, "GET", "/metrics").body.decode()
        self.assertRegex(text, r'batchgate_rejected_requests_total\{model="tinycap",'
                               r'reason="input_too_long"\} [1-9]')
        # Tokens computed and what padding would have held, per model.
        self.embed_all("tiny", TEXTS)
        text = roundtrip(self.port, "GET", "/metrics").body.decode()
        vals = {}
        for line in text.splitlines():
            for key in ("batchgate_batch_tokens_total", "batchgate_batch_padded_tokens_total"):
                if line.startswith(key + '{model="tiny"}'):
                    vals[key] = float(line.split()[-1])
        tokens, padded = vals["batchgate_batch_tokens_total"], vals["batchgate_batch_padded_tokens_total"]
        self.assertGreater(tokens, 0)
        self.assertGreaterEqual(padded, tokens)

    def test_offline_job_of_texts(self):
        lines = "".join(json.dumps({"id": "l%d" % i, "inputs": [
            {"name": "text", "datatype": "BYTES", "shape": [1], "data": [t]}]}) + "\n"
            for i, t in enumerate(TEXTS))
        r = post(self.port, "/v2/models/tiny/jobs", None, raw=lines.encode(),
                 headers={"Content-Type": "application/x-ndjson"})
        self.assertEqual(r.status, 201, r.body)
        job = r.json()["id"]
        deadline = time.time() + 60
        while time.time() < deadline:
            st = roundtrip(self.port, "GET", "/v2/jobs/" + job).json()
            if st["state"] in ("completed", "failed", "cancelled"):
                break
            time.sleep(0.1)
        self.assertEqual(st["state"], "completed", st)
        res = [json.loads(l) for l in
               roundtrip(self.port, "GET", "/v2/jobs/%s/results" % job).body.decode().splitlines()]
        online, _ = self.embed_all("tiny", TEXTS)
        self.assertEqual(len(res), len(TEXTS))
        for i, line in enumerate(res):
            v = line["outputs"][0]["data"]
            self.assertGreater(cosine(v, online[i]), 0.999999, line["id"])
            self.assertLess(abs(norm(v) - 1), 1e-5)


class ClientsTest(TinyCase):
    """The real clients from PyPI, unmodified: openai and tritonclient."""

    def test_openai_and_tritonclient(self):
        texts = TEXTS[:4]
        rc, out = run_testdeps([os.path.join(HERE, "embed_clients.py"), str(self.port), "tiny"]
                               + texts, timeout=120)
        self.assertEqual(rc, 0, out)
        got = json.loads(out.strip().splitlines()[-1])
        ours, tokens = self.embed_all("tiny", texts)
        for key in ("openai_default", "openai_float", "triton_binary", "triton_json"):
            self.assertEqual(len(got[key]), len(texts), key)
            for a, b in zip(got[key], ours):
                self.assertTrue(all(abs(x - y) < 1e-6 for x, y in zip(a, b)), key)
        self.assertTrue(all(abs(x - y) < 1e-6 for x, y in zip(got["openai_one"], ours[0])))
        self.assertEqual(got["openai_usage"], [tokens, tokens])
        e = got["openai_errors"]
        self.assertEqual((e["unknown_model"]["class"], e["unknown_model"]["status"]),
                         ("NotFoundError", 404), e)
        self.assertIn("does not exist", e["unknown_model"]["message"])
        self.assertEqual((e["dimensions"]["class"], e["dimensions"]["param"]),
                         ("BadRequestError", "dimensions"), e)
        self.assertEqual((e["too_long"]["status"], e["too_long"]["param"]), (413, "input"), e)
        self.assertIn("longer than the model's maximum", e["too_long"]["message"])


class MiniLMAccuracyTest(unittest.TestCase):
    """all-MiniLM-L6-v2 against sentence-transformers on 1,000 sentences."""

    def test_cosine_on_a_thousand_sentences(self):
        if sanitizer_build():
            raise unittest.SkipTest("a sanitizer build: the numbers are the plain build's to "
                                    "check (the tiny models' tests run the same code here)")
        ref_py = reference_python()   # skips, saying what to run, without the venv
        model = minilm_folder()
        tmp = tempfile.mkdtemp(prefix="batchgate-minilm-")
        try:
            sentences = os.path.join(tmp, "sentences.jsonl")
            with open(sentences, "w") as f:
                subprocess.run([sys.executable, os.path.join(ROOT, "tests", "data", "sentences.py")],
                               stdout=f, check=True, timeout=60)
            with open(sentences, encoding="utf-8") as f:
                texts = [json.loads(l) for l in f]
            self.assertEqual(len(texts), 1000)
            ref_out = os.path.join(tmp, "ref.json")
            r = subprocess.run([ref_py, os.path.join(ROOT, "tests", "tools", "st_embed.py"), model,
                                sentences, ref_out], capture_output=True, text=True, timeout=600)
            self.assertEqual(r.returncode, 0, r.stderr[-2000:])
            with open(ref_out) as f:
                ref = json.load(f)
            repo = os.path.join(tmp, "repo")
            os.makedirs(os.path.join(repo, "minilm"))
            for name in os.listdir(model):
                os.symlink(os.path.join(model, name), os.path.join(repo, "minilm", name))
            with open(os.path.join(repo, "minilm", "batchgate.json"), "w") as f:
                json.dump({"instances": {"threads": 2}}, f)
            with Server({"model_repository": repo, "state_dir": os.path.join(tmp, "st")},
                        io_threads=1) as srv:
                srv.wait_log(r"ready in", timeout=120)
                ours, tokens = [], 0
                for i in range(0, len(texts), 32):
                    resp = post(srv.port, "/v1/embeddings", {"model": "minilm",
                                                             "input": texts[i:i + 32]})
                    self.assertEqual(resp.status, 200, resp.body[:300])
                    a = resp.json()
                    ours += [d["embedding"] for d in a["data"]]
                    tokens += a["usage"]["prompt_tokens"]
            cos = [cosine(a, b) for a, b in zip(ours, ref["embeddings"])]
            diff = max(abs(x - y) for a, b in zip(ours, ref["embeddings"]) for x, y in zip(a, b))
            worst = min(range(len(cos)), key=cos.__getitem__)
            print("\nMiniLM, 1,000 sentences: worst cosine %.9f (sentence %d), mean %.9f, "
                  "largest difference %.3g" % (cos[worst], worst, sum(cos) / len(cos), diff),
                  file=sys.stderr)
            self.assertGreaterEqual(cos[worst], 0.9999, texts[worst][:200])
            self.assertLess(diff, 1e-4)
            self.assertEqual(tokens, sum(ref["tokens"]), "usage.prompt_tokens")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


class FolderSettingsTest(EncoderRepoCase):
    """sentence-transformers settings that change a vector: do_lower_case is
    applied (it was ignored: a tokenizer that does not lowercase gave [UNK]
    for every capitalised word), a default prompt is refused at load (it
    was ignored: every vector differed from the model's), and a prompt or
    shorter dimensions asked of a request are 400, not ignored."""

    io_threads = 1

    @classmethod
    def populate(cls, repo):
        gen(os.path.join(repo, "lower"), "--seed", "1", "--max-seq", str(MAX_SEQ))
        for name, st_lower in (("stlower", True), ("cased", False)):
            d = os.path.join(repo, name)
            shutil.copytree(os.path.join(repo, "lower"), d)
            with open(os.path.join(d, "tokenizer.json")) as f:
                tok = json.load(f)
            tok["normalizer"].update(lowercase=False, strip_accents=True)
            with open(os.path.join(d, "tokenizer.json"), "w") as f:
                json.dump(tok, f)
            with open(os.path.join(d, "sentence_bert_config.json"), "w") as f:
                json.dump({"max_seq_length": MAX_SEQ, "do_lower_case": st_lower}, f)
        d = os.path.join(repo, "badlower")
        shutil.copytree(os.path.join(repo, "lower"), d)
        with open(os.path.join(d, "sentence_bert_config.json"), "w") as f:
            json.dump({"max_seq_length": MAX_SEQ, "do_lower_case": "yes"}, f)
        d = os.path.join(repo, "prompted")
        shutil.copytree(os.path.join(repo, "lower"), d)
        with open(os.path.join(d, "config_sentence_transformers.json"), "w") as f:
            json.dump({"prompts": {"query": "query: "}, "default_prompt_name": "query"}, f)

    def vec(self, model, text):
        r = post(self.port, "/v1/embeddings", {"model": model, "input": text})
        self.assertEqual(r.status, 200, r.body)
        return r.json()["data"][0]["embedding"], r.json()["usage"]["prompt_tokens"]

    def test_do_lower_case_is_applied(self):
        text = "Hello World From PARIS"
        want, n = self.vec("lower", text)
        got, m = self.vec("stlower", text)
        self.assertEqual(m, n)
        self.assertGreater(cosine(got, want), 0.999999)
        cased, _ = self.vec("cased", text)   # its tokenizer alone: not the same ids
        self.assertLess(cosine(cased, want), 0.9999)

    def test_a_default_prompt_is_refused_at_load(self):
        r = roundtrip(self.port, "GET", "/v2/models/prompted/ready")
        self.assertEqual(r.status, 503)
        self.assertIn("config_sentence_transformers.json: default_prompt_name: \"query\": not "
                      "implemented", r.json()["reason"])
        r = roundtrip(self.port, "GET", "/v2/models/badlower/ready")
        self.assertEqual(r.status, 503)
        self.assertIn("sentence_bert_config.json: do_lower_case: expected true or false",
                      r.json()["reason"])

    def test_prompt_name_and_dimensions_are_refused(self):
        for body, param in (({"prompt_name": "query"}, "prompt_name"),
                            ({"dimensions": 8}, "dimensions")):
            r = post(self.port, "/v1/embeddings", dict({"model": "lower", "input": "x"}, **body))
            self.assertEqual(r.status, 400, r.body)
            self.assertEqual(r.json()["error"]["param"], param)
        r = post(self.port, "/v1/embeddings", {"model": "lower", "input": "x", "dimensions": 64,
                                               "prompt_name": None})
        self.assertEqual(r.status, 200, r.body)


class OneEncoderTest(unittest.TestCase):
    """/embed (TEI serves one model), tenants' model rules on a body's model."""

    def test_tei_and_tenants(self):
        import hashlib
        tmp = tempfile.mkdtemp(prefix="batchgate-embed1-")
        try:
            repo = os.path.join(tmp, "repo")
            gen(os.path.join(repo, "tiny"), "--seed", "1", "--max-seq", str(MAX_SEQ))
            digest = lambda k: "sha256:" + hashlib.sha256(k.encode()).hexdigest()
            cfg = {"model_repository": repo, "state_dir": os.path.join(tmp, "st"),
                   "tenants": [{"name": "a", "keys": [digest("ka")], "models": ["tiny"]},
                               {"name": "b", "keys": [digest("kb")], "models": ["other"]},
                               {"name": "c", "keys": [digest("kc")], "rate_rows_per_s": 1}]}
            with Server(cfg, io_threads=1) as srv:
                srv.wait_log(r"ready in", timeout=60)
                ka = {"Authorization": "Bearer ka"}
                r = post(srv.port, "/embed", {"inputs": ["hello world", "x"]}, headers=ka)
                self.assertEqual(r.status, 200, r.body)
                vecs = r.json()
                self.assertEqual((len(vecs), len(vecs[0])), (2, 64))
                self.assertLess(abs(norm(vecs[0]) - 1), 1e-5)
                r = post(srv.port, "/embed", {"inputs": "hello world", "normalize": False},
                         headers=ka)
                raw = r.json()[0]
                self.assertGreater(abs(norm(raw) - 1), 1e-3)
                self.assertGreater(cosine(raw, vecs[0]), 0.999999)
                r = post(srv.port, "/v1/embeddings", {"model": "tiny", "input": "x"},
                         headers={"Authorization": "Bearer kb"})
                self.assertEqual(r.status, 403, r.body)
                self.assertEqual(r.json()["error"]["type"], "permission_error")
                r = post(srv.port, "/v1/embeddings", {"model": "tiny", "input": "x"})
                self.assertEqual(r.status, 401, r.body)
                self.assertEqual(r.json()["error"]["type"], "authentication_error")
                # A tenant's own limit is in OpenAI's shape too, as the queue's is.
                kc = {"Authorization": "Bearer kc"}
                one = {"model": "tiny", "input": "x"}
                self.assertEqual(post(srv.port, "/v1/embeddings", one, headers=kc).status, 200)
                r = post(srv.port, "/v1/embeddings", one, headers=kc)
                self.assertEqual(r.status, 429, r.body)
                err = r.json()["error"]
                self.assertEqual((err["type"], err["code"]),
                                 ("rate_limit_error", "rate_limit_exceeded"), err)
                self.assertIn("rate_rows_per_s", err["message"])
                self.assertEqual(r.headers["Retry-After"], "1")
                r = post(srv.port, "/embed", {"inputs": 5}, headers=ka)
                self.assertEqual(r.status, 400)
                self.assertIn("inputs: must be a string", r.json()["error"])
                # TEI's prompt_name and dimensions: refused, not ignored (a
                # 200 with the full, unprompted vector was a wrong answer).
                for extra, words in (({"prompt_name": "query"}, "applies no prompts"),
                                     ({"dimensions": 8}, "does not shorten")):
                    r = post(srv.port, "/embed", dict({"inputs": "x"}, **extra), headers=ka)
                    self.assertEqual(r.status, 400, r.body)
                    self.assertIn(words, r.json()["error"])
                self.assertEqual(post(srv.port, "/embed", {"inputs": "x", "dimensions": 64},
                                      headers=ka).status, 200)
                # TEI's "Left" keeps a text's end: refused, not served as "Right".
                r = post(srv.port, "/embed", {"inputs": "x", "truncation_direction": "Left"},
                         headers=ka)
                self.assertEqual(r.status, 400)
                self.assertIn("truncation_direction", r.json()["error"])
                r = post(srv.port, "/embed", {"inputs": "x", "truncation_direction": "Right"},
                         headers=ka)
                self.assertEqual(r.status, 200, r.body)
            # One encoder serving two versions is one model: /embed serves
            # it (it was "there are 2"). Each version folder holds the
            # whole Hugging Face folder. A second encoder is named.
            solo = os.path.join(repo, "tiny")
            for v in ("1", "2"):
                os.makedirs(os.path.join(solo, v))
                for f in os.listdir(solo):
                    if f not in ("1", "2"):
                        src = os.path.join(solo, f)
                        (shutil.copytree if os.path.isdir(src) else shutil.copy)(
                            src, os.path.join(solo, v, f))
            with open(os.path.join(solo, "batchgate.json"), "w") as f:
                json.dump({"version_policy": {"latest": 2}}, f)
            with Server({"model_repository": repo, "state_dir": os.path.join(tmp, "st3")}) as srv:
                srv.wait_log(r"ready in", timeout=60)
                r = post(srv.port, "/embed", {"inputs": "hello world"})
                self.assertEqual(r.status, 200, (r.body, srv.log()[-2000:]))
                self.assertEqual(len(r.json()[0]), 64)
            gen(os.path.join(repo, "other"), "--seed", "2", "--max-seq", str(MAX_SEQ))
            with Server({"model_repository": repo, "state_dir": os.path.join(tmp, "st4")}) as srv:
                srv.wait_log(r"ready in", timeout=60)
                r = post(srv.port, "/embed", {"inputs": "x"})
                self.assertEqual(r.status, 400, r.body)
                self.assertIn("there are 2 (other, tiny)", r.json()["error"])
            shutil.rmtree(os.path.join(repo, "other"))
            # No encoder at all: /embed is 404.
            shutil.rmtree(os.path.join(repo, "tiny"))
            with Server({"model_repository": repo, "state_dir": os.path.join(tmp, "st2")}) as srv:
                r = post(srv.port, "/embed", {"inputs": "x"})
                self.assertEqual(r.status, 404)
                self.assertIn("no encoder model", r.json()["error"])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
