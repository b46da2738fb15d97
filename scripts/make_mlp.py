#!/usr/bin/env python3
"""make_mlp.py - writes a random MLP model folder for benchmarks (not committed).

    scripts/make_mlp.py OUT_DIR [--dims 1024,4096,4096,1024] [--max-batch 64]
                        [--name NAME] [--dtype F32|F16|BF16] [--seed 1]
                        [--delay-us 2000] [--instances 1]

Dense layers with relu between them and no softmax, PyTorch nn.Linear layout
(weight [out, in]), weights uniform in +-1/sqrt(in) like PyTorch's default
init. Standard library only, deterministic for a seed."""

import argparse
import array
import json
import os
import random
import struct
import sys


def f32_to_half_bits(values, dtype):
    out = array.array("H")
    for v in values:
        b = struct.unpack("<I", struct.pack("<f", v))[0]
        if dtype == "BF16":
            b += 0x7FFF + ((b >> 16) & 1)
            out.append(b >> 16)
        else:
            out.append(struct.unpack("<H", struct.pack("<e", v))[0])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--dims", default="1024,4096,4096,1024")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--name")
    ap.add_argument("--dtype", default="F32", choices=["F32", "F16", "BF16"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--delay-us", type=int, default=2000)
    ap.add_argument("--instances", type=int, default=1)
    a = ap.parse_args()
    dims = [int(d) for d in a.dims.split(",")]
    name = a.name or os.path.basename(os.path.normpath(a.out))
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    header, blobs, off, layers = {}, [], 0, []
    for i in range(len(dims) - 1):
        fan_in, fan_out = dims[i], dims[i + 1]
        bound = 1.0 / fan_in ** 0.5
        for tname, count, shape in (("%d.weight" % (2 * i), fan_in * fan_out, [fan_out, fan_in]),
                                    ("%d.bias" % (2 * i), fan_out, [fan_out])):
            vals = array.array("f", (rng.uniform(-bound, bound) for _ in range(count)))
            if a.dtype != "F32":
                vals = f32_to_half_bits(vals, a.dtype)
            if sys.byteorder != "little":
                vals.byteswap()
            blob = vals.tobytes()
            header[tname] = {"dtype": a.dtype, "shape": shape,
                             "data_offsets": [off, off + len(blob)]}
            blobs.append(blob)
            off += len(blob)
        layer = {"type": "dense", "weight": "%d.weight" % (2 * i), "bias": "%d.bias" % (2 * i)}
        if i < len(dims) - 2:
            layer["activation"] = "relu"
        layers.append(layer)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    cfg = {"name": name, "backend": "cpu",
           "inputs": [{"name": "input", "datatype": "FP32", "shape": [dims[0]]}],
           "outputs": [{"name": "output", "datatype": "FP32", "shape": [dims[-1]]}],
           "layers": layers,
           "batching": {"max_batch_size": a.max_batch, "max_queue_delay_us": a.delay_us},
           "instances": {"count": a.instances}}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    print("%s: %d weights (%.1f MB %s)" % (a.out, off // (4 if a.dtype == "F32" else 2),
                                            off / 1e6, a.dtype))


if __name__ == "__main__":
    main()
