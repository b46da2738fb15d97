#!/usr/bin/env python3
"""embed.py IN OUT SYMBOL - writes OUT, a C file defining
`const char SYMBOL[]` (the bytes of IN) and `const unsigned long SYMBOL_len`.
Used by the build to serve gateway/dashboard.html from the binary."""
import sys

src, dst, sym = sys.argv[1:4]
data = open(src, "rb").read()
with open(dst, "w") as f:
    f.write("/* Generated from %s by scripts/embed.py; do not edit. */\n" % src.split("/")[-1])
    f.write("const char %s[] = {\n" % sym)
    for i in range(0, len(data), 16):
        f.write("    " + ", ".join("%d" % b for b in data[i:i + 16]) + ",\n")
    f.write("    0};\nconst unsigned long %s_len = %d;\n" % (sym, len(data)))
