#!/usr/bin/env python3
"""make_safetensors_corpus.py - regenerate tests/data/safetensors/.

The corpus is committed so the unit test (and later a fuzzer) need no Python
packages; run this only to change it.

  python3 scripts/make_safetensors_corpus.py [BUILD_DIR]

- python_reference.safetensors: written by the reference implementation
  (pip install safetensors numpy ml_dtypes) with F32, F16, BF16, a scalar, an
  I64 tensor and __metadata__. tests/unit/test_safetensors.c checks these
  exact values, so change both together.
- bad_*.safetensors, ok_*.safetensors: the cases of test_safetensors.c,
  written by BUILD_DIR/test_safetensors --write-corpus (default BUILD_DIR:
  build). The test fails when the corpus and its case table disagree.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "safetensors")


def write_reference(path):
    import ml_dtypes
    import numpy as np
    from safetensors import TensorSpec, safe_open, serialize_file

    arrays = {
        "w": (np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5 - 1.0, "float32"),
        "h": (np.array([1.0, -2.5, 65504.0, 2.0**-14], dtype=np.float16), "float16"),
        "s": (np.array(3.25, dtype=np.float32), "float32"),
        "i": (np.array([7, -9], dtype=np.int64), "int64"),
        # safetensors.numpy has no BF16; the raw serializer does.
        "b": (np.array([[1.0, -0.5], [256.0, 0.1]], dtype=np.float32)
              .astype(ml_dtypes.bfloat16), "bfloat16"),
    }
    specs = {name: TensorSpec(dtype=dt, shape=list(a.shape), data_ptr=a.ctypes.data,
                              data_len=a.nbytes)
             for name, (a, dt) in arrays.items()}
    serialize_file(specs, path, {"format": "np", "writer": "safetensors"})
    with safe_open(path, "np") as f:       # the reference reads its own file back
        assert sorted(f.keys()) == sorted(arrays)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    os.makedirs(OUT, exist_ok=True)
    write_reference(os.path.join(OUT, "python_reference.safetensors"))
    binary = os.path.join(build, "test_safetensors")
    if os.path.exists(binary):
        for name in os.listdir(OUT):
            if name.startswith(("bad_", "ok_")):
                os.remove(os.path.join(OUT, name))
        subprocess.run([binary, "--write-corpus", OUT], check=True)
    else:
        print(f"{binary} not built: bad_*/ok_* left as they are", file=sys.stderr)


if __name__ == "__main__":
    main()
