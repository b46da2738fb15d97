"""test_lint.py - pyflakes over the project's Python (the tests, the load and
benchmark scripts, scripts/), from the tests' virtual environment
(scripts/fetch-testdeps pins it): an unused import, an undefined name or a
variable assigned and never read fails the suite, so they do not gather."""

import glob
import os
import subprocess
import unittest

from harness import testdeps_python

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def python_files():
    """Every .py file under tests/, loadgen/ and scripts/, and the scripts
    without the suffix whose first line names python3."""
    files = []
    for top in ("tests", "loadgen", "scripts"):
        files += glob.glob(os.path.join(ROOT, top, "**", "*.py"), recursive=True)
    for path in glob.glob(os.path.join(ROOT, "scripts", "*")):
        if path.endswith(".py") or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            if f.readline().startswith(b"#!/usr/bin/env python3"):
                files.append(path)
    return sorted(files)


class LintTest(unittest.TestCase):
    def test_pyflakes(self):
        files = python_files()
        self.assertGreater(len(files), 40, files)
        p = subprocess.run([testdeps_python(), "-m", "pyflakes"] + files, capture_output=True,
                           text=True, timeout=120, cwd=ROOT)
        self.assertEqual(p.returncode, 0, "pyflakes:\n" + p.stdout + p.stderr)


if __name__ == "__main__":
    unittest.main()
