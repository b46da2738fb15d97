"""The field tables of docs/CONFIG.md and docs/MODELS.md are what the
configuration schema prints (`batchgate --config-fields server|model`), so
the docs cannot drift from the code that reads the files."""

import os
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

    def test_bad_argument_is_usage_error(self):
        import subprocess
        p = subprocess.run([BIN, "--config-fields", "nope"], capture_output=True, timeout=10)
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"nope", p.stderr)


if __name__ == "__main__":
    unittest.main()
