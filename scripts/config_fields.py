#!/usr/bin/env python3
"""config_fields.py BATCHGATE [--write] - keeps the field tables of the docs
equal to the configuration schema.

`batchgate --config-fields server` prints the table of docs/CONFIG.md and
`--config-fields model` the one of docs/MODELS.md, from the same schema rows
(common/schema.h) that read and check the files. In the docs each table stands
between the lines <!-- schema:NAME begin --> and <!-- schema:NAME end -->.
Without --write: prints a diff and exits 1 where a doc differs (the e2e test
test_docs does the same). With --write: rewrites the tables in place."""

import difflib
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = {"server": "docs/CONFIG.md", "model": "docs/MODELS.md"}


def printed(binary, which):
    return subprocess.run([binary, "--config-fields", which], check=True, capture_output=True,
                          text=True, timeout=30).stdout


def split(path, which):
    """(before, table, after) of the doc at path; ValueError without the markers."""
    text = open(path, encoding="utf-8").read()
    begin, end = "<!-- schema:%s begin -->\n" % which, "<!-- schema:%s end -->" % which
    i = text.index(begin) + len(begin)
    j = text.index(end, i)
    return text[:i], text[i:j], text[j:]


def main(argv):
    if len(argv) < 2 or argv[2:] not in ([], ["--write"]):
        sys.stderr.write(__doc__)
        return 2
    status = 0
    for which, doc in DOCS.items():
        path = os.path.join(ROOT, doc)
        want = printed(argv[1], which)
        before, have, after = split(path, which)
        if have == want:
            continue
        if argv[2:] == ["--write"]:
            with open(path, "w", encoding="utf-8") as f:
                f.write(before + want + after)
            print("rewrote the table of %s" % doc)
        else:
            sys.stdout.writelines(difflib.unified_diff(
                have.splitlines(True), want.splitlines(True), doc, "batchgate --config-fields "
                + which))
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
