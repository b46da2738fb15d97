"""test_tiny_bert.py - the encoder's fixtures (#20) checked on their own,
before any encoder serves them:

  - scripts/gen-tiny-bert writes a whole sentence-transformers folder, fast,
    the same bytes for the same options; its tensor names, dtypes, shapes and
    safetensors layout are MiniLM's (at MiniLM's shape, the header is
    MiniLM's byte for byte, when scripts/get-model has the model or can
    fetch it); --prefixed only renames;
  - its tokenizer.json loads in the `tokenizers` package (the test venv)
    and the C tokenizer (bg-tokenize, backends/wordpiece) gives the same ids
    on tests/data/sentences.py's corpus: another vocabulary and other
    special ids than MiniLM's; vocab.txt is the same vocabulary;
  - with the reference venv (scripts/fetch-reference; without it those tests
    skip, saying so), sentence-transformers loads the folder and embeds
    through tests/tools/st_embed.py: pinned values for pinned sentences,
    unit norms, distinct sentences apart, token counts cut at
    max_seq_length as the tokenizer counts them, the prefixed folder
    bit-identical, cls/max pooling and no Normalize as the files say.

hf_bert_config_load (backends/hf_bert.h) has no command-line driver to run
here; tests/unit/test_hf_bert.c reads MiniLM's files as shipped, and
test_minilm_shape_gives_minilm_header holds this folder's config files to
MiniLM's, key for key.
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest

from harness import BIN, HERE, minilm_folder, reference_python, testdeps_python

ROOT = os.path.dirname(os.path.dirname(HERE))
GEN = os.path.join(ROOT, "scripts", "gen-tiny-bert")
ST_EMBED = os.path.join(ROOT, "tests", "tools", "st_embed.py")
TOOL = os.path.join(os.path.dirname(BIN), "bg-tokenize")
sys.path.insert(0, os.path.join(ROOT, "tests", "data"))
import sentences  # noqa: E402

GEN_SECONDS = 10        # it takes well under 1 s; 2 cores shared with the suite

# Sentences whose embeddings (seed 1, default options) are pinned below.
FIXED = ["Hello, world!", "The engineer painted the garden gates quickly.",
         "北京 ひらがな 한국어 😀 Café", ""]
FIXED_TOKENS = [9, 13, 21, 2]
FIXED_HEAD = [       # the first 6 of 64 values, float32 from sentence-transformers 6.2.0 on CPU
    [0.1433, -0.018972, -0.050808, 0.151375, 0.132046, 0.009839],
    [0.020983, -0.064829, -0.168226, 0.159444, 0.147394, -0.037926],
    [0.105102, -0.025963, -0.110801, -0.002279, -0.034553, -0.041671],
    [0.03301, -0.055709, -0.190487, 0.1537, 0.209693, 0.010401],
]

# What a BertModel's config.json carries (transformers' BertConfig).
BERT_CONFIG_KEYS = {"architectures", "attention_probs_dropout_prob", "classifier_dropout",
                    "hidden_act", "hidden_dropout_prob", "hidden_size", "initializer_range",
                    "intermediate_size", "layer_norm_eps", "max_position_embeddings",
                    "model_type", "num_attention_heads", "num_hidden_layers", "pad_token_id",
                    "position_embedding_type", "type_vocab_size", "use_cache", "vocab_size"}


def bert_names(layers):
    names = {"embeddings.position_ids", "embeddings.word_embeddings.weight",
             "embeddings.position_embeddings.weight", "embeddings.token_type_embeddings.weight",
             "embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias",
             "pooler.dense.weight", "pooler.dense.bias"}
    for i in range(layers):
        for part in ("attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense", "attention.output.LayerNorm", "intermediate.dense",
                     "output.dense", "output.LayerNorm"):
            names |= {"encoder.layer.%d.%s.weight" % (i, part), "encoder.layer.%d.%s.bias" % (i, part)}
    return names


def safetensors(path):
    """(header bytes, header dict, file size)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        raw = f.read(n)
    return raw, json.loads(raw), os.path.getsize(path)


def f32(path, entry):
    """A F32 tensor's values (little-endian) as a list."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        a, b = entry["data_offsets"]
        f.seek(8 + n + a)
        data = f.read(b - a)
    return list(struct.unpack("<%df" % ((b - a) // 4), data))


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def folder_bytes(d):
    out = {}
    for root, _, files in os.walk(d):
        for name in files:
            p = os.path.join(root, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, d)] = f.read()
    return out


class TinyBertTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.py = testdeps_python()
        cls.tmp = tempfile.mkdtemp(prefix="batchgate-tiny-bert-")
        cls.tiny = cls.gen("tiny")
        cls.texts = FIXED + sentences.corpus()
        cls.corpus = os.path.join(cls.tmp, "sentences.jsonl")
        with open(cls.corpus, "w", encoding="utf-8") as f:
            f.write("".join(json.dumps(t) + "\n" for t in cls.texts))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(getattr(cls, "tmp", ""), ignore_errors=True)

    @classmethod
    def gen(cls, name, *args):
        out = os.path.join(cls.tmp, name)
        t = time.monotonic()
        p = subprocess.run([cls.py, GEN, out] + list(args), stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=120)
        secs = time.monotonic() - t
        if p.returncode != 0:
            raise AssertionError("gen-tiny-bert %s failed (exit %d): %s"
                                 % (" ".join(args), p.returncode, p.stderr))
        if secs > GEN_SECONDS:
            raise AssertionError("gen-tiny-bert %s took %.1f s (at most %d)"
                                 % (" ".join(args), secs, GEN_SECONDS))
        return out

    # ---------------------------------------------------------- the folder

    def test_the_files_a_sentence_transformers_folder_has(self):
        for f in ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt",
                  "tokenizer_config.json", "special_tokens_map.json", "modules.json",
                  "1_Pooling/config.json", "sentence_bert_config.json",
                  "config_sentence_transformers.json"):
            self.assertTrue(os.path.isfile(os.path.join(self.tiny, f)), f)
        c = read_json(os.path.join(self.tiny, "config.json"))
        self.assertLessEqual(BERT_CONFIG_KEYS, set(c))
        self.assertEqual((c["model_type"], c["hidden_act"], c["position_embedding_type"],
                          c["architectures"]), ("bert", "gelu", "absolute", ["BertModel"]))
        self.assertEqual((c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"],
                          c["intermediate_size"], c["max_position_embeddings"]),
                         (2, 64, 4, 128, 512))
        vocab = read_json(os.path.join(self.tiny, "tokenizer.json"))["model"]["vocab"]
        self.assertEqual(c["vocab_size"], len(vocab))
        self.assertEqual(c["pad_token_id"], vocab["[PAD]"])
        modules = read_json(os.path.join(self.tiny, "modules.json"))
        self.assertEqual([m["type"].rsplit(".", 1)[1] for m in modules],
                         ["Transformer", "Pooling", "Normalize"])
        pool = read_json(os.path.join(self.tiny, "1_Pooling", "config.json"))
        self.assertEqual(pool["word_embedding_dimension"], 64)
        self.assertEqual([k for k, v in pool.items() if v is True and k.startswith("pooling_mode")],
                         ["pooling_mode_mean_tokens"])
        self.assertEqual(read_json(os.path.join(self.tiny, "sentence_bert_config.json"))
                         ["max_seq_length"], 128)

        cls_ = self.gen("cls", "--pooling", "cls", "--no-normalize", "--max-seq", "32")
        modules = read_json(os.path.join(cls_, "modules.json"))
        self.assertEqual([m["type"].rsplit(".", 1)[1] for m in modules], ["Transformer", "Pooling"])
        pool = read_json(os.path.join(cls_, "1_Pooling", "config.json"))
        self.assertEqual([k for k, v in pool.items() if v is True and k.startswith("pooling_mode")],
                         ["pooling_mode_cls_token"])
        self.assertEqual(read_json(os.path.join(cls_, "sentence_bert_config.json"))
                         ["max_seq_length"], 32)

    def test_tensor_names_and_layout(self):
        path = os.path.join(self.tiny, "model.safetensors")
        raw, h, size = safetensors(path)
        self.assertEqual(len(raw) % 8, 0, "header padded to 8 bytes")
        self.assertEqual(h.pop("__metadata__"), {"format": "pt"})
        self.assertEqual(set(h), bert_names(2))
        vocab = read_json(os.path.join(self.tiny, "config.json"))["vocab_size"]
        shapes = {"embeddings.word_embeddings.weight": [vocab, 64],
                  "embeddings.position_embeddings.weight": [512, 64],
                  "embeddings.token_type_embeddings.weight": [2, 64],
                  "embeddings.position_ids": [1, 512],
                  "encoder.layer.1.attention.self.query.weight": [64, 64],
                  "encoder.layer.1.intermediate.dense.weight": [128, 64],
                  "encoder.layer.1.intermediate.dense.bias": [128],
                  "encoder.layer.1.output.dense.weight": [64, 128],
                  "encoder.layer.0.output.LayerNorm.weight": [64]}
        for k, shape in shapes.items():
            self.assertEqual(h[k]["shape"], shape, k)
        self.assertEqual(h["embeddings.position_ids"]["dtype"], "I64")
        self.assertEqual({v["dtype"] for k, v in h.items() if k != "embeddings.position_ids"},
                         {"F32"})
        # Packed in the order the safetensors library writes: I64 first, then by name.
        order = sorted(h, key=lambda k: h[k]["data_offsets"][0])
        self.assertEqual(order, ["embeddings.position_ids"] + sorted(set(h) - {"embeddings.position_ids"}))
        end = 0
        for k in order:
            a, b = h[k]["data_offsets"]
            self.assertEqual(a, end, k)
            n = 1
            for d in h[k]["shape"]:
                n *= d
            self.assertEqual(b - a, n * (8 if h[k]["dtype"] == "I64" else 4), k)
            end = b
        self.assertEqual(size, 8 + len(raw) + end)
        # Not degenerate: gammas near 1 but not 1, biases not 0, weights spread.
        gamma = f32(path, h["encoder.layer.0.output.LayerNorm.weight"])
        self.assertTrue(0.9 < sum(gamma) / len(gamma) < 1.1 and len(set(gamma)) == len(gamma))
        bias = f32(path, h["encoder.layer.0.attention.self.query.bias"])
        self.assertGreater(max(abs(x) for x in bias), 0.01)
        w = f32(path, h["encoder.layer.0.intermediate.dense.weight"])
        sd = (sum(x * x for x in w) / len(w)) ** 0.5
        self.assertTrue(0.1 < sd < 0.2, "std %.3f, expected about 1/sqrt(64)" % sd)

    def test_prefixed_only_renames(self):
        pre = self.gen("prefixed", "--prefixed")
        raw, h, _ = safetensors(os.path.join(pre, "model.safetensors"))
        h.pop("__metadata__")
        self.assertEqual(set(h), {"bert." + n for n in bert_names(2)})
        _, plain, _ = safetensors(os.path.join(self.tiny, "model.safetensors"))
        for k in ("encoder.layer.1.output.dense.weight", "embeddings.word_embeddings.weight"):
            self.assertEqual(f32(os.path.join(pre, "model.safetensors"), h["bert." + k]),
                             f32(os.path.join(self.tiny, "model.safetensors"), plain[k]))

    def test_deterministic_per_seed_and_name(self):
        again = self.gen("again", "--seed", "1")
        self.assertEqual(folder_bytes(again), folder_bytes(self.tiny))
        other = self.gen("seed2", "--seed", "2", "--layers", "3")
        a, b = folder_bytes(self.tiny), folder_bytes(other)
        self.assertEqual(a["tokenizer.json"], b["tokenizer.json"])
        self.assertNotEqual(a["model.safetensors"], b["model.safetensors"])
        # A tensor's values hang on the seed and its name only.
        deeper = self.gen("layers3", "--layers", "3")
        _, h2, _ = safetensors(os.path.join(self.tiny, "model.safetensors"))
        _, h3, _ = safetensors(os.path.join(deeper, "model.safetensors"))
        k = "encoder.layer.1.attention.self.key.weight"
        self.assertEqual(f32(os.path.join(self.tiny, "model.safetensors"), h2[k]),
                         f32(os.path.join(deeper, "model.safetensors"), h3[k]))
        self.assertIn("encoder.layer.2.output.dense.bias", h3)

    def test_minilm_shape_gives_minilm_header(self):
        minilm = minilm_folder()
        big = self.gen("minilm-shape", "--layers", "6", "--hidden", "384", "--heads", "12",
                       "--intermediate", "1536", "--max-seq", "256",
                       "--vocab-file", os.path.join(minilm, "vocab.txt"))
        ours = safetensors(os.path.join(big, "model.safetensors"))
        theirs = safetensors(os.path.join(minilm, "model.safetensors"))
        self.assertEqual(ours[0], theirs[0], "the safetensors header differs from MiniLM's")
        self.assertEqual(ours[2], theirs[2])
        c, mc = (read_json(os.path.join(d, "config.json")) for d in (big, minilm))
        self.assertLessEqual(set(mc) - {"_name_or_path"}, set(c))
        for k in mc:
            if k not in ("_name_or_path", "transformers_version"):
                self.assertEqual(c[k], mc[k], k)
        for f in ("modules.json", "sentence_bert_config.json", "special_tokens_map.json"):
            self.assertEqual(read_json(os.path.join(big, f)), read_json(os.path.join(minilm, f)), f)
        pool, mpool = (read_json(os.path.join(d, "1_Pooling", "config.json")) for d in (big, minilm))
        self.assertEqual({k: pool[k] for k in mpool}, mpool)

    # ---------------------------------------------------------- the tokenizer

    def test_tokenizers_loads_it_and_the_c_tokenizer_agrees(self):
        if not os.access(TOOL, os.X_OK):
            raise AssertionError("%s is missing: build the tree (it is the bg-tokenize target)" % TOOL)
        tokjson = os.path.join(self.tiny, "tokenizer.json")
        spec = read_json(tokjson)
        with open(os.path.join(self.tiny, "vocab.txt"), encoding="utf-8") as f:
            self.assertEqual(f.read().split("\n")[:-1],
                             sorted(spec["model"]["vocab"], key=spec["model"]["vocab"].get))
        for max_len in (128, 8):
            with open(self.corpus, "rb") as stdin:
                ours = subprocess.run([TOOL, tokjson, str(max_len)], stdin=stdin,
                                      capture_output=True, timeout=120)
            ref = subprocess.run([self.py, os.path.join(HERE, "tokenizer_ref.py"), "ids", tokjson,
                                  str(max_len), self.corpus], stdin=subprocess.DEVNULL,
                                 capture_output=True, timeout=120)
            self.assertEqual(ref.returncode, 0, "tokenizers did not load %s: %s"
                             % (tokjson, ref.stderr.decode()))
            self.assertEqual(ours.returncode, 0, "bg-tokenize: %s" % ours.stderr.decode())
            a, b = ours.stdout.decode().splitlines(), ref.stdout.decode().splitlines()
            self.assertEqual(len(b), len(self.texts))
            bad = [i for i in range(len(b)) if a[i:i + 1] != b[i:i + 1]]
            self.assertEqual(bad, [], "max_len %d: %d texts differ, the first %r:\n  ours:   %s\n"
                             "  theirs: %s" % (max_len, len(bad), self.texts[bad[0]] if bad else "",
                                               a[bad[0]] if bad and bad[0] < len(a) else "",
                                               b[bad[0]] if bad else ""))
            ids = [[int(x) for x in line.split()] for line in b]
            self.assertTrue(all(r[0] == 2 and r[-1] == 3 for r in ids))   # [CLS], [SEP]
            self.assertEqual([len(r) for r in ids[:len(FIXED)]],
                             [min(n, max_len) for n in FIXED_TOKENS])
            if max_len == 128:
                unk = sum(r.count(1) for r in ids)
                self.assertGreater(unk, 0)
                self.assertLess(unk, sum(len(r) for r in ids) / 50, "[UNK] too often")
                self.assertGreater(sum(1 for r in ids if len(r) == 128), 20)   # cut

    # ---------------------------------------------------------- sentence-transformers

    def st_embed(self, model, out, texts_path=None):
        ref = reference_python()
        p = subprocess.run([ref, ST_EMBED, model, texts_path or self.corpus, out],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
        self.assertEqual(p.returncode, 0, "st_embed.py %s failed: %s" % (model, p.stderr[-3000:]))
        return [int(x) for x in p.stdout.split()]

    def test_sentence_transformers_embeds_it(self):
        out = os.path.join(self.tmp, "tiny.json")
        counts = self.st_embed(self.tiny, out)
        doc = read_json(out)
        emb = doc["embeddings"]
        self.assertEqual((len(emb), doc["dim"], doc["max_seq_length"]), (len(self.texts), 64, 128))
        self.assertEqual(counts, doc["tokens"])
        self.assertEqual(counts[:len(FIXED)], FIXED_TOKENS)
        self.assertTrue(all(n <= 128 for n in counts) and sum(n == 128 for n in counts) > 20)
        self.assertTrue(all(b >= a for a, b in zip(doc["tokens"], doc["tokens_untruncated"])))
        for i, head in enumerate(FIXED_HEAD):
            for j, v in enumerate(head):
                self.assertAlmostEqual(emb[i][j], v, delta=2e-5,
                                       msg="sentence %d (%r), value %d: %r, pinned %r"
                                       % (i, FIXED[i], j, emb[i][j], v))
        for i, row in enumerate(emb):
            norm = sum(x * x for x in row) ** 0.5
            self.assertAlmostEqual(norm, 1.0, delta=1e-5, msg="sentence %d" % i)
        # Distinct inputs (the token ids the model sees, after the cut) stay
        # apart; equal ones ("", " ", "\x00"; two texts alike in their first
        # 126 tokens) embed alike, whatever batch and padding they met.
        ref = subprocess.run([self.py, os.path.join(HERE, "tokenizer_ref.py"), "ids",
                              os.path.join(self.tiny, "tokenizer.json"), "128", self.corpus],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        self.assertEqual(ref.returncode, 0, ref.stderr)
        ids = ref.stdout.splitlines()
        self.assertEqual([len(line.split()) for line in ids], counts)
        first = {}
        for i, row in enumerate(emb):
            j = first.setdefault(ids[i], i)
            if j != i:
                self.assertLess(max(abs(x - y) for x, y in zip(row, emb[j])), 1e-5,
                                "texts %d and %d, the same tokens, embed apart" % (j, i))
        apart = [min(1.0 - sum(x * y for x, y in zip(emb[i], emb[j])) for j in first.values()
                     if j != i) for i in list(first.values())[:200]]
        self.assertGreater(min(apart), 1e-4, "distinct token ids embed alike")
        self.assertGreater(len(first), 900)

        pre = self.gen("prefixed-st", "--prefixed")
        out2 = os.path.join(self.tmp, "prefixed.json")
        self.st_embed(pre, out2)
        self.assertEqual(read_json(out2)["embeddings"], emb,
                         "the bert.-prefixed folder embeds differently (or not the same twice)")

    def test_sentence_transformers_pooling_variants(self):
        few = os.path.join(self.tmp, "few.jsonl")
        with open(few, "w", encoding="utf-8") as f:
            f.write("".join(json.dumps(t) + "\n" for t in self.texts[:40]))
        for pooling in ("cls", "max"):
            d = self.gen("st-" + pooling, "--pooling", pooling, "--no-normalize")
            out = os.path.join(self.tmp, pooling + ".json")
            self.st_embed(d, out, few)
            emb = read_json(out)["embeddings"]
            norms = [sum(x * x for x in r) ** 0.5 for r in emb]
            self.assertTrue(any(abs(n - 1) > 0.01 for n in norms), "%s: unit norms without "
                            "Normalize" % pooling)
            setattr(self, pooling, emb)
        self.assertNotEqual(self.cls[0], self.max[0])


if __name__ == "__main__":
    unittest.main()
