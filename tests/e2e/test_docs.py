"""The field tables of docs/CONFIG.md and docs/MODELS.md are what the
configuration schema prints (`batchgate --config-fields server|model`), so
the docs cannot drift from the code that reads the files; and the source
files and functions the docs name (`http/conn.c: conn_dispatch_early`)
exist, so that a reader following them finds them."""

import os
import re
import sys
import unittest

from harness import BIN

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import config_fields  # noqa: E402  (found through the path above)


class DocsTest(unittest.TestCase):
    def test_field_tables_are_the_schemas(self):
        for which, doc in config_fields.DOCS.items():
            _, have, _ = config_fields.split(os.path.join(ROOT, doc), which)
            want = config_fields.printed(BIN, which)
            self.assertEqual(have, want, "the field table of %s differs from `batchgate "
                             "--config-fields %s`; run scripts/config_fields.py %s --write"
                             % (doc, which, BIN))

    def test_named_sources_exist(self):
        # docs/BENCHMARKS.md is a dated log: its names are those of the
        # build each run measured.
        docs = [os.path.join("docs", f) for f in sorted(os.listdir(os.path.join(ROOT, "docs")))
                if f.endswith(".md") and f != "BENCHMARKS.md"] + ["README.md"]
        ours = ("http", "common", "gateway", "serving", "backends", "batcher", "state",
                "kernels", "tests", "loadgen", "scripts", "models", "proto", "deploy", "docs")
        files = []
        for d, sub, names in os.walk(ROOT):
            sub[:] = [s for s in sub if not s.startswith((".", "build", "Testing"))]
            files += [os.path.relpath(os.path.join(d, n), ROOT) for n in names]
        bases = {os.path.basename(f) for f in files}
        ref = re.compile(r"`([A-Za-z0-9_./-]+\.(?:c|h|cu|py|sh))(?:: ?([a-z_][a-z0-9_]*))?`")
        missing = []
        for doc in docs:
            with open(os.path.join(ROOT, doc)) as f:
                text = f.read()
            for m in ref.finditer(text):
                path, fn = m.groups()
                if "/" in path:
                    if path.split("/")[0] not in ours:
                        continue   # another project's file, or a placeholder
                    found = [f for f in files if f == path or f.endswith("/" + path)]
                elif path.endswith((".c", ".h", ".cu")):
                    found = [f for f in files if os.path.basename(f) == path]
                else:
                    continue       # a bare script name: too often someone else's
                if not found and path not in bases:
                    missing.append("%s: %s" % (doc, m.group(0)))
                elif fn and not any(re.search(r"\b%s\b" % fn, open(os.path.join(ROOT, f),
                                                                       errors="replace").read())
                                    for f in found):
                    missing.append("%s: %s (no %s there)" % (doc, m.group(0), fn))
        self.assertEqual(missing, [], "names in the docs that the tree does not have")

    def test_bad_argument_is_usage_error(self):
        import subprocess
        p = subprocess.run([BIN, "--config-fields", "nope"], capture_output=True, timeout=10)
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"nope", p.stderr)


if __name__ == "__main__":
    unittest.main()
